//! The device layer: PCI, device interrupts, block devices and the drivers'
//! probe glue.
//!
//! What lives here: PCI configuration access, enumeration and BAR claiming
//! ([`pci`]); device interrupts, one typed handler per vector, with the I/O
//! APIC for INTx ([`interrupts`]); the one CPU map shared by block queues and
//! interrupt affinity ([`cpumap`]); the block-device registry and the kernel's
//! hooks for the `blk` layer ([`block`]); what a PCI driver provides
//! ([`driver`]: match rules, command-line keys, probe) and the table of them
//! ([`registry`]); one small probe file per driver ([`megasas`], [`fusion`], [`nvme`], [`null`],
//! [`virtio_net`]), the table of network interfaces the NIC probes fill ([`netif`]),
//! with what the MegaRAID probes share in [`hosts`].
//!
//! What it may use: `crate::arch` and the library and driver crates, never
//! `crate::app`.

pub mod aml;
pub mod block;
pub mod cpumap;
pub mod driver;
pub mod e1000;
pub mod fusion;
pub(crate) mod hal;
pub mod hosts;
pub mod interrupts;
pub mod megasas;
pub mod netif;
pub mod null;
pub mod nvme;
pub mod pci;
pub mod registry;
pub mod virtio_net;

/// What the kernel does with a controller before power-off.
pub(crate) trait PowerOff: Sync {
    /// The controller's name for the log (`nvme0`, `megasas 0000:00:01.0`).
    fn power_off_name(&self) -> alloc::string::String;
    /// Taken out of service (bus mastering off): left alone.
    fn out_of_service(&self) -> bool;
    /// Flushes what the controller caches and shuts it down; no I/O follows.
    fn shut_down(&self) -> Result<(), alloc::string::String>;
}

/// Every controller, in probe order, for [`before_power_off`].
static POWER_OFF: spin::Mutex<alloc::vec::Vec<&'static dyn PowerOff>> = spin::Mutex::new(alloc::vec::Vec::new());

/// Registers a controller for the shutdown at power-off (at probe).
pub(crate) fn register_power_off(c: &'static dyn PowerOff) {
    POWER_OFF.lock().push(c);
}

/// Brings the devices to a clean stop before the run ends (and the machine powers off or QEMU
/// exits), whatever the jobs' verdict: MegaRAID controllers flush their caches and shut their
/// firmware down, NVMe controllers shut down normally. A controller out of service is skipped.
/// One line per controller; failures are printed, not fatal: the jobs' verdict stands.
pub fn before_power_off() {
    let controllers = POWER_OFF.lock().clone();
    let mut failed = 0;
    for c in controllers {
        let name = c.power_off_name();
        if c.out_of_service() {
            crate::arch::console::kprintln!("{name}: out of service, not shut down");
            continue;
        }
        let start = crate::arch::time::now_ns();
        match c.shut_down() {
            Ok(()) => {
                let us = crate::arch::time::now_ns().saturating_sub(start) / 1000;
                crate::arch::console::kprintln!("{name}: shutdown complete in {us} us");
            }
            Err(e) => {
                failed += 1;
                log::error!("{name}: shutdown did not complete: {e}");
            }
        }
    }
    if failed > 0 {
        log::error!("power-off: {failed} controller(s) did not complete their shutdown");
    }
}

/// The device floor before a job on `device` (`megasas.floor=`, `nvme.floor=`, ...): the driver
/// that owns `device` measures it, prints its `floor:` line and returns the figures for the
/// job's totals; empty when its floor is off or no driver measures one. The reads are as long
/// as the job's blocks (`job_bs`), capped at what the driver's floor can move in one read
/// ([`floor_read_bytes`]) and at least one device block.
pub fn floor_before_job(device: &str, cpu: usize, job: FloorJob) -> alloc::vec::Vec<(&'static str, u64)> {
    registry::PCI_DRIVERS
        .iter()
        .filter_map(|driver| driver.floor_before_job)
        .map(|floor| floor(device, cpu, job))
        .find(|figures| !figures.is_empty())
        .unwrap_or_default()
}

/// Before jobs that start together: each driver aims its controllers' interrupts at the jobs'
/// submitting CPUs where that saves a wake-up (a single-vector controller's vector at the one
/// CPU that submits to it). Keep the guards until the jobs' reports are out: dropping them aims
/// the vectors back.
pub fn aim_interrupts_for_jobs(jobs: &[driver::JobDevices<'_>]) -> alloc::vec::Vec<driver::AimGuard> {
    registry::PCI_DRIVERS
        .iter()
        .filter_map(|driver| driver.aim_for_jobs)
        .map(|aim| aim(jobs))
        .collect()
}

/// Longest NVMe floor read: one page (a floor read must not need a PRP list), so a 128 KiB
/// NVMe job is compared with 4 KiB reads.
pub const FLOOR_MAX_READ_ONE_PAGE: u32 = 4096;
/// Longest MegaRAID floor read: one contiguous buffer is one SGE, so large jobs get a floor of
/// their own size.
pub const FLOOR_MAX_READ_ONE_SGE: u32 = 1 << 20;

/// The floor's two runs: queue depth, and the job-total keys of its IOPS and p50.
pub const FLOOR_RUNS: [(u16, &str, &str); 2] = [
    (1, "floor_qd1_iops", "floor_qd1_p50_ns"),
    (32, "floor_qd32_iops", "floor_qd32_p50_ns"),
];

/// The job-total keys of the floor's third run, at the job's own queue depth when that is
/// neither of [`FLOOR_RUNS`] (`floor_job_qd` holds the depth).
pub const FLOOR_JOB_DEPTH_KEYS: (&str, &str, &str) = ("floor_job_qd", "floor_job_qd_iops", "floor_job_qd_p50_ns");

/// Deepest job depth the floor also runs at: the deepest of [`FLOOR_RUNS`], which the drivers'
/// floor slots hold (a deeper job is compared with the QD32 run).
pub const FLOOR_MAX_JOB_DEPTH: u32 = 32;

/// The job a floor runs before: its read size and its queue depth.
#[derive(Clone, Copy, Debug)]
pub struct FloorJob {
    pub bs: u32,
    pub iodepth: u32,
}

/// The floor's runs before `job`: [`FLOOR_RUNS`] that `depths` names and, with both named, one
/// at the job's own depth when that is another (up to [`FLOOR_MAX_JOB_DEPTH`]), so a job is
/// compared with the device at its own size and depth.
fn floor_depths_for(
    job: FloorJob,
    depths: bootinfo::cmdline::FloorDepths,
) -> alloc::vec::Vec<(u16, &'static str, &'static str)> {
    let mut runs: alloc::vec::Vec<_> = FLOOR_RUNS.into_iter().filter(|run| depths.includes(run.0)).collect();
    let own = job.iodepth;
    if depths == bootinfo::cmdline::FloorDepths::Both
        && own <= FLOOR_MAX_JOB_DEPTH
        && !FLOOR_RUNS.iter().any(|run| u32::from(run.0) == own)
    {
        // At most FLOOR_MAX_JOB_DEPTH, which fits in u16.
        runs.push((own as u16, FLOOR_JOB_DEPTH_KEYS.1, FLOOR_JOB_DEPTH_KEYS.2));
    }
    runs
}

/// The floor's depths (`floor.depths=`), set once at boot.
static FLOOR_DEPTHS: spin::Once<bootinfo::cmdline::FloorDepths> = spin::Once::new();

/// Sets the floor's queue depths from the command line (`floor.depths=`; both when never set).
pub fn set_floor_depths(depths: bootinfo::cmdline::FloorDepths) {
    FLOOR_DEPTHS.call_once(|| depths);
}

/// Why a floor run failed, and whether the device may still hold the run's buffer (a stalled
/// run leaves reads with it: the buffer is then leaked, never reused).
pub struct FloorFailure {
    pub error: alloc::string::String,
    pub buffer_with_device: bool,
}

/// Whole floor bursts per queue depth; the median burst's figures are reported. One burst's
/// IOPS moves by up to 30% between boots under TCG, which makes a job's fraction of it
/// noisy. Each burst is a whole run, every read with its own doorbell as before: the median
/// is no easier to beat than one burst.
pub const FLOOR_BURSTS: usize = 3;

/// The device floor's runs ([`FLOOR_RUNS`], those `floor.depths=` names) on `device`, reads
/// of `bs` bytes into DMA buffers of that size (one, or one per read in flight above a page):
/// `run(depth, buffers)` measures one burst at one queue depth, [`FLOOR_BURSTS`] times per depth. Prints a line per depth with every burst's IOPS
/// and one `floor:` line with the median bursts (`how` says how the CPU waits), and returns
/// their figures for the job totals.
pub fn run_floor(
    device: &str,
    bs: u32,
    job: FloorJob,
    how: &str,
    mut run: impl FnMut(u16, &[crate::arch::memory::DmaBuffer]) -> Result<drvkit::floor::FloorResult, FloorFailure>,
) -> alloc::vec::Vec<(&'static str, u64)> {
    let depths = FLOOR_DEPTHS
        .get()
        .copied()
        .unwrap_or(bootinfo::cmdline::FloorDepths::Both);
    let runs = floor_depths_for(job, depths);
    // Reads above a page spread over a buffer per read in flight at the deepest run, so they
    // touch as much memory as a job's buffers; a page-sized read keeps one (it stays cached
    // either way, as a job's few pages do).
    let slots = if bs > FLOOR_MAX_READ_ONE_PAGE {
        runs.iter().map(|run| usize::from(run.0)).max().unwrap_or(1)
    } else {
        1
    };
    let mut buffers = alloc::vec::Vec::with_capacity(slots);
    for _ in 0..slots {
        match crate::arch::memory::DmaBuffer::new(bs as usize, 4096) {
            Ok(b) => buffers.push(b),
            Err(e) => {
                log::error!("floor: {device}: no DMA buffer: {e}");
                return alloc::vec::Vec::new();
            }
        }
    }
    let mut text = alloc::format!("floor: {device} {bs}-byte read (no block layer, {how})");
    let mut totals = alloc::vec::Vec::new();
    let mut buffer_with_device = false;
    for (depth, iops_key, p50_key) in runs {
        match median_burst(device, depth, &buffers, &mut run) {
            Ok(r) => {
                if iops_key == FLOOR_JOB_DEPTH_KEYS.1 {
                    totals.push((FLOOR_JOB_DEPTH_KEYS.0, u64::from(depth)));
                }
                text.push_str(&alloc::format!(
                    ", QD{} {} IOPS p50 {}.{} us p99 {}.{} us",
                    r.queue_depth,
                    r.iops(),
                    r.p50_ns / 1000,
                    r.p50_ns % 1000 / 100,
                    r.p99_ns / 1000,
                    r.p99_ns % 1000 / 100
                ));
                if r.failed > 0 {
                    text.push_str(&alloc::format!(" ({} reads failed)", r.failed));
                }
                totals.push((iops_key, r.iops()));
                totals.push((p50_key, r.p50_ns));
            }
            Err(f) => {
                buffer_with_device |= f.buffer_with_device;
                text.push_str(&alloc::format!(", QD{depth}: {}", f.error));
            }
        }
    }
    crate::arch::console::kprintln!("{text}");
    if buffer_with_device {
        core::mem::forget(buffers);
    }
    totals
}

/// [`FLOOR_BURSTS`] bursts of `run` at `depth`: the median one, after a line naming every
/// burst's IOPS and their spread; the first failure ends the depth.
fn median_burst(
    device: &str,
    depth: u16,
    buffer: &[crate::arch::memory::DmaBuffer],
    run: &mut impl FnMut(u16, &[crate::arch::memory::DmaBuffer]) -> Result<drvkit::floor::FloorResult, FloorFailure>,
) -> Result<drvkit::floor::FloorResult, FloorFailure> {
    let mut bursts = alloc::vec::Vec::with_capacity(FLOOR_BURSTS);
    for _ in 0..FLOOR_BURSTS {
        bursts.push(run(depth, buffer)?);
    }
    bursts.sort_by_key(|b| b.iops());
    let iops: alloc::vec::Vec<u64> = bursts.iter().map(|b| b.iops()).collect();
    let (low, high) = (iops[0], iops[iops.len() - 1]);
    let median = bursts.swap_remove(FLOOR_BURSTS / 2);
    crate::arch::console::kprintln!(
        "floor: {device} QD{}: {FLOOR_BURSTS} bursts of {} reads, IOPS {iops:?}: the median's figures are reported (spread {}%)",
        median.queue_depth,
        median.ios,
        (high - low) * 100 / median.iops().max(1)
    );
    Ok(median)
}

/// Bytes of one floor read for a job of `job_bs` on a device of `block_size`-byte blocks whose
/// floor reads move at most `most` bytes.
pub fn floor_read_bytes(job_bs: u32, block_size: u32, most: u32) -> u32 {
    let block = block_size.max(1);
    (job_bs.min(most) / block).max(1) * block
}
