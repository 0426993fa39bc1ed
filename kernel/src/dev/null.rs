//! The null block device `null0` (`null.size=`): the block layer and the
//! workload engine without any emulated device. Its keys are kernel keys
//! (`null.*`, parsed by `bootinfo::cmdline`): it is not a PCI driver.

use crate::arch::{memory, smp};
use crate::dev::block::{self, DeviceFacts, Disk};
use crate::dev::cpumap;
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;
use bootinfo::cmdline::{Config, NullDeviceMode};
use nullblk::{NullConfig, NullDriver, NullMode};

/// The largest request `null0` takes, as a real device's transfer limit (1 MiB).
const NULL_MAX_TRANSFER_BYTES: u32 = 1 << 20;

/// Creates `null0` when the command line asks for it.
pub fn create_null(cfg: &Config<'_>) -> Result<(), Error> {
    let Some(bytes) = cfg.null_size else { return Ok(()) };
    let ncpus = smp::online();
    let depth = block::MAX_SLOTS_PER_CPU as u32;
    let block_size = cfg.null_block_size;
    let (mode, how) = match cfg.null_mode {
        NullDeviceMode::Immediate => (NullMode::Immediate, "completes at once through the policy"),
        NullDeviceMode::Inline => (NullMode::Inline, "completes inline"),
        // Deferred requests wait for an "interrupt" that baremq never fires.
        NullDeviceMode::Stuck => (NullMode::Deferred, "STUCK: never completes"),
    };
    // A memory-backed null device keeps every byte on the heap: refuse what cannot fit.
    let heap = memory::heap_free() as u64;
    if cfg.null_memory && bytes > heap / 2 {
        return Err(Error::Device(format!(
            "null.memory=on keeps all {} MiB of null0 on the kernel heap, which has {} MiB free: \
             use a smaller null.size or more memory (-m)",
            bytes >> 20,
            heap >> 20
        )));
    }
    let mut nc = NullConfig::new(bytes / 512, mode);
    nc.logical_block_size = block_size;
    nc.memory_backed = cfg.null_memory;
    let queues = cfg.null_queues.map_or(ncpus, |q| q as usize);
    let mut qc = nc.queue_config(ncpus, queues, depth);
    // The transfer limit it reports: longer reads and writes are split by blk, as on real devices.
    qc.max_hw_sectors = NULL_MAX_TRANSFER_BYTES / blk::SECTOR_SIZE;
    // The null device has no interrupts; its queue map still comes from the one CPU map.
    qc.cpu_map = Some(cpumap::plan(queues, 0, None)?.queue_of_cpu);
    let driver = NullDriver::new(nc, queues, depth, false);
    let facts = DeviceFacts {
        name: "null0".into(),
        model: format!(
            "null block device ({}, {})",
            how,
            if cfg.null_memory { "memory-backed" } else { "no data" }
        ),
        sector_size: block_size,
        capacity_sectors: bytes / u64::from(block_size),
        max_inflight: depth,
        max_transfer_bytes: NULL_MAX_TRANSFER_BYTES,
        irq_vectors: Vec::new(),
        aliases: Vec::new(),
    };
    let disk = Disk::new(
        facts,
        qc,
        driver,
        format!("{queues} hardware queue(s) for {ncpus} CPUs, {depth} tags each"),
    )
    .map_err(|e| Error::Device(format!("null0: {e}")))?;
    block::register(Box::leak(Box::new(disk)));
    Ok(())
}
