//! Write safety: before a job's first write, the first blocks of its device are read and
//! checked for a partition table or file system (`disks::signature`). A write job on such a
//! device is refused unless it says `destroy=1`; a benchmark box may carry disks that hold
//! data besides the ones meant for the test, and enumeration-order names can move.

use crate::arch::memory::DmaBuffer;
use crate::arch::{percpu, time};
use crate::dev::block::{self, BlockDevice};
use alloc::format;
use alloc::string::String;
use blk::{CompletionPolicy, Segment, Status};

/// How long one read of the device's first blocks may take.
const READ_TIMEOUT_NS: u64 = 30_000_000_000;

/// Checks `dev` before job `job` writes to it (`destroy`: the job's `destroy=`). Err: the
/// job must not run, and why.
pub fn check_before_writes(job: &str, dev: &'static dyn BlockDevice, destroy: bool) -> Result<(), String> {
    let name = &dev.facts().name;
    let head = read_head(dev).map_err(|e| {
        format!(
            "job {job}: cannot read the first blocks of {name} to look for a partition table or file system ({e}); \
             add destroy=1 to the job to write without that check"
        )
    })?;
    let Some(found) = disks::signature::detect(&head, dev.facts().sector_size) else {
        return Ok(());
    };
    if destroy {
        crate::arch::console::kprintln!("job {job}: {name} carries {found}; destroy=1: writing over it");
        return Ok(());
    }
    Err(format!(
        "job {job}: refusing to write to {name}: it carries {found}; add destroy=1 to the job to write over it"
    ))
}

/// Reads the first `disks::signature::SCAN_BYTES` of `dev` (less on a smaller device), one
/// request at a time, from this CPU's done-board slot 0 (nothing else is in flight between jobs).
fn read_head(dev: &'static dyn BlockDevice) -> Result<alloc::vec::Vec<u8>, String> {
    let facts = dev.facts();
    let sector = u64::from(facts.sector_size.max(512));
    let capacity = facts.capacity_sectors.saturating_mul(u64::from(facts.sector_size));
    let total = (disks::signature::SCAN_BYTES as u64).min(capacity) / sector * sector;
    let chunk = u64::from(facts.max_transfer_bytes).clamp(sector, 64 << 10) / sector * sector;
    let buffer = DmaBuffer::new(chunk as usize, 4096).map_err(|e| format!("no DMA buffer: {e:?}"))?;
    let mut head = alloc::vec::Vec::with_capacity(total as usize);
    let cpu = percpu::index();
    let mut at = 0u64;
    while at < total {
        let len = chunk.min(total - at);
        // SAFETY: the buffer is ours and untouched by the CPU until the read's completion is reaped.
        let segment = [unsafe { Segment::with_virt(buffer.phys(), buffer.as_ptr(), len as u32) }];
        let bio = blk::Bio::read(at / 512, (len / 512) as u32, &segment, block::cookie(0));
        dev.submit(cpu, &bio).map_err(|e| format!("read at byte {at}: {e}"))?;
        let status = match wait_for_slot0(dev, cpu) {
            Ok(status) => status,
            Err(e) => {
                // The device may still write into the buffer: never hand it back to the allocator.
                core::mem::forget(buffer);
                return Err(e);
            }
        };
        if status != Status::Ok {
            return Err(format!("read at byte {at}: {status:?}"));
        }
        // SAFETY: the read completed: the device is done with the buffer, which holds `len` bytes.
        head.extend_from_slice(unsafe { core::slice::from_raw_parts(buffer.as_ptr(), len as usize) });
        at += len;
    }
    Ok(head)
}

/// Waits for the completion of the request in done-board slot 0 of `cpu`.
fn wait_for_slot0(dev: &'static dyn BlockDevice, cpu: usize) -> Result<Status, String> {
    let deadline = time::now_ns() + READ_TIMEOUT_NS;
    // A device without interrupts (`megasas.irq=poll`, `nvme.irq=poll`, null) completes only when polled.
    let polled = dev.facts().irq_vectors.is_empty() || dev.policies().0 == CompletionPolicy::Poll;
    loop {
        if polled || dev.polling_window(cpu) {
            dev.poll(cpu);
        }
        let mut status = None;
        block::done_board().take(cpu, |slot, s| {
            if slot == 0 {
                status = Some(s);
            }
        });
        if let Some(s) = status {
            return Ok(s);
        }
        if time::now_ns() > deadline {
            return Err(format!("no completion within {} s", READ_TIMEOUT_NS / 1_000_000_000));
        }
        dev.make_progress(cpu);
        core::hint::spin_loop();
    }
}
