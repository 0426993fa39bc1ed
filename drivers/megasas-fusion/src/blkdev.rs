//! The block-layer binding: one [`Host`] per controller, one `blk::Queue` per logical drive,
//! one blk hardware queue per reply queue (= MSI-X vector), one host-wide tag set.
//!
//! Same shape as `megasas::blkdev::Host`, so the kernel probes MFI and Fusion alike: bring up,
//! read [`Host::drives`], register [`Host::queues`], program the vectors, [`Host::start`], and
//! call [`Host::handle_vector`] from vector i's handler and [`Host::tick`] periodically.
//!
//! **Tags.** All drives share one `blk::HostTags` of `io_tags` tags; blk tag t *is* SMID t+1.
//! The DCMD SMIDs lie above the I/O SMIDs, so no tag is reserved. The request's identity travels
//! in the controller cookie: `drive << 48 | hwq << 32 | IssueToken::to_bits()` ([`pack_cookie`]).
//!
//! **Queues and CPUs.** Hardware queue h submits with reply queue (MSIxIndex) `base + h`, where
//! `base` is the number of high-IOPS queues (0 in latency mode, 8 in balanced mode,
//! [`crate::layout`]), so its completions raise vector `base + h`, which the kernel aimed at
//! `vector_cpus[base + h]`; the CPU map sends every CPU that has such a vector to that vector's
//! queue and spreads the others ([`cpu_map`]): one map for both directions. In balanced mode
//! the controller sends a busy device's requests to the high-IOPS queues instead; their
//! vectors' handlers reap them and the completion goes to the submitting hardware queue
//! (the cookie names it), as after a reap on any other CPU.
//!
//! **Issue order.** `queue_rq` validates, enters the controller's submission section (a reset in
//! progress returns `Busy`: requeued), calls `Rq::issue`, then posts. The controller marks the
//! SMID in flight before the descriptor is written, so an early or bogus reply is dropped.
//!
//! **Timeouts.** Without a RAID map Fusion has no task management for LDs (Linux sends TM only
//! to map-reported `tmCapable` devices), so a timeout goes straight to the OCR ladder: the
//! request is marked and keeps its timer; [`Host::tick`] gives the timed-out requests
//! `HostConfig::reset_wait_ns` (180 s, Linux's `resetwaittime`) to finish on their own (no reset
//! then), and resets the controller if they have not. The
//! reset hands back every request in flight exactly once after the adapter forgot it: the
//! timed-out ones end with `Status::Timeout`, the others are requeued and issued again once the
//! controller is back (Linux completes them with DID_REQUEUE, FreeBSD lets CAM retry). A reply that arrived before the reset completes normally. If the controller cannot
//! be reset it is stopped (doorbell STOP_ADAPTER) and new requests fail at once; those in flight
//! stay the device's until the kernel has turned bus mastering off and called
//! [`Host::abandon_after_bus_master_off`], which fails them (as MFI does).

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use blk::{
    CompletionPolicy, Driver, HostTags, HwCtx, Op, Platform, Queue, QueueConfig, QueueRqError, Rq, Status, TimedOutRq,
    TimeoutAction,
};
use devhal::{Delay, Dma};

use crate::Mmio64;
use drvkit::drive_queue::{ReapBatch, drive_sectors, host_with_drive_queues};

use crate::controller::{Completion, Config, Controller, Health, IoOp, IoOutcome, IoRequest, LogicalDrive};
use crate::diag::Report;
use crate::{Error, Segment};

/// Most segments per request the binding passes (a stack array in `queue_rq`).
pub const MAX_SEGMENTS: usize = 64;

pub use drvkit::drive_queue::{pack_cookie, unpack_cookie};

/// The CPU → hardware queue map for `ncpus` CPUs and vectors aimed at `vector_cpus` (hardware
/// queue h = vector h). A CPU that a vector is aimed at maps to that vector's queue; the others
/// are spread round-robin. With no vectors every CPU maps to queue 0.
pub fn cpu_map(ncpus: usize, vector_cpus: &[usize], queues: u16) -> Vec<u16> {
    let queues = queues.max(1);
    (0..ncpus)
        .map(|cpu| {
            vector_cpus
                .iter()
                .take(usize::from(queues))
                .position(|&c| c == cpu)
                .map_or((cpu % usize::from(queues)) as u16, |h| h as u16)
        })
        .collect()
}

/// What the kernel decides for a controller.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// CPUs (software queues and completion lists of every drive's queue).
    pub ncpus: usize,
    /// Where completions are finished.
    pub completion: CompletionPolicy,
    /// Request timeout, ns (then OCR).
    pub timeout_ns: u64,
    /// Upper bound on one request's size in bytes.
    pub max_transfer_bytes: u64,
    /// After a request timed out, how long the tick lets the timed-out requests finish on their
    /// own before it resets the controller (Linux `megasas_wait_for_outstanding_fusion`,
    /// `resetwaittime` 180 s). A FAULT resets at once.
    pub reset_wait_ns: u64,
    /// Controller configuration (generation, vectors and their CPUs, deadlines).
    pub controller: Config,
}

impl HostConfig {
    /// Defaults: IRQ completions, 90 s timeout (Linux's SCSI timeout for MegaRAID), 1 MiB.
    pub fn new(ncpus: usize, controller: Config) -> Self {
        Self {
            ncpus,
            completion: CompletionPolicy::Irq,
            timeout_ns: 90_000_000_000,
            max_transfer_bytes: 1 << 20,
            reset_wait_ns: 180_000_000_000,
            controller,
        }
    }
}

/// A logical drive as the kernel's block registry sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriveInfo {
    /// The drive as discovered.
    pub drive: LogicalDrive,
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Most bytes per request.
    pub max_transfer_bytes: u32,
    /// Most segments per request.
    pub max_segments: usize,
}

/// Counters of the binding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// Completions the block layer refused (stale token).
    pub refused_completions: u64,
    /// Controller completions naming a drive that does not exist.
    pub unknown_drive: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Online controller resets run.
    pub resets: u64,
    /// Requests failed by resets (the timed-out ones, and all of them once the controller is out
    /// of service).
    pub failed_by_reset: u64,
    /// Requests a reset took back from the firmware and requeued (issued again afterwards).
    pub requeued_by_reset: u64,
    /// Times the timed-out requests all finished while the tick waited, so no reset was needed.
    pub resets_avoided: u64,
    /// LD reads and writes sent by FastPath to a RAID member disk.
    pub fastpath_ios: u64,
    /// FastPath requests refused for a stale RAID map (issued again on the LD path).
    pub stale_map_refusals: u64,
    /// RAID maps taken from completed map syncs (configuration changes).
    pub map_changes: u64,
    /// Map syncs that failed or brought a refused map (FastPath off until an OCR).
    pub map_sync_failures: u64,
    /// FastPath requests sent since the last map change (all of them without one).
    pub fastpath_ios_after_map_change: u64,
    /// RAID-1 FastPath reads sent to the data arm.
    pub raid1_reads_arm0: u64,
    /// RAID-1 FastPath reads sent to the mirror arm.
    pub raid1_reads_arm1: u64,
    /// RAID-1 FastPath writes, each sent as a pair (one request per arm).
    pub raid1_write_pairs: u64,
    /// RAID-1 writes a pair could have carried, sent on the LD path because the PCIe link
    /// limits the controller (over 32 KiB, or the small ones after such a write).
    pub raid1_bw_limited_ld_writes: u64,
    /// Requests sent to a high-IOPS reply queue (balanced mode).
    pub high_iops_ios: u64,
    /// System-PD requests sent by the JBOD map (device handle and sequence number).
    pub jbod_map_ios: u64,
    /// System-PD requests refused for a stale JBOD sequence number (issued again).
    pub jbod_stale_refusals: u64,
    /// JBOD maps taken from completed JBOD syncs.
    pub jbod_map_changes: u64,
    /// System-PD requests sent by the RAID map's device handle (no JBOD map offered).
    pub jbod_raid_map_ios: u64,
}

struct Core<M: Mmio64, T: Delay> {
    ctrl: Controller<M, T>,
    timed_out: Vec<AtomicBool>,
    reset_wanted: AtomicBool,
    ticking: AtomicBool,
    refused: AtomicU64,
    unknown_drive: AtomicU64,
    timeouts: AtomicU64,
    resets: AtomicU64,
    failed_by_reset: AtomicU64,
    requeued_by_reset: AtomicU64,
    resets_avoided: AtomicU64,
    /// When the wait for timed-out requests began (platform ns; 0 = not waiting).
    waiting_since_ns: AtomicU64,
    reset_wait_ns: u64,
    platform: Arc<dyn Platform>,
}

/// The blk driver of one logical drive.
pub struct DriveDriver<M: Mmio64 + Send + Sync + 'static, T: Delay + Send + Sync + 'static> {
    core: Arc<Core<M, T>>,
    host: Weak<HostInner<M, T>>,
    index: u16,
    /// The drive as the controller found it (target, system PD or LD, capacity): validation
    /// looks nothing up per I/O.
    drive: LogicalDrive,
    /// 512-byte sectors per drive block.
    scale: u32,
    /// log2 of `scale` when it is a power of two (512 B and 4 KiB blocks): a mask and a shift
    /// per I/O, not two divisions.
    scale_shift: Option<u32>,
}

struct HostInner<M: Mmio64 + Send + Sync + 'static, T: Delay + Send + Sync + 'static> {
    core: Arc<Core<M, T>>,
    drives: Vec<DriveInfo>,
    queues: Vec<Queue<DriveDriver<M, T>>>,
    cpu_map: Vec<u16>,
}

/// A Fusion controller bound to the block layer.
pub struct Host<M: Mmio64 + Send + Sync + 'static, T: Delay + Send + Sync + 'static>(Arc<HostInner<M, T>>);

impl<M: Mmio64 + Send + Sync + 'static, T: Delay + Send + Sync + 'static> core::fmt::Debug for Host<M, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host").field("drives", &self.0.drives).finish()
    }
}

impl<M: Mmio64 + Send + Sync + 'static, T: Delay + Send + Sync + 'static> Host<M, T> {
    /// Brings the controller up (every step into `report`), and creates one queue per drive on
    /// a host-wide tag set, with one hardware queue per reply queue. Interrupts stay masked:
    /// program the vectors, then call [`Host::start`].
    pub fn new<A: Dma>(
        mmio: M,
        dma: &A,
        delay: T,
        platform: Arc<dyn Platform>,
        cfg: HostConfig,
        report: &mut Report,
    ) -> Result<Self, Error> {
        let vector_cpus = cfg.controller.vector_cpus.clone();
        let ctrl = Controller::bring_up(mmio, dma, delay, cfg.controller, report)?;
        let tags = u32::from(ctrl.limits().io_tags);
        // One hardware queue per latency reply queue (every reply queue in latency mode).
        let nq = ctrl.io_queues();
        let latency_vector_cpus = vector_cpus
            .get(usize::from(ctrl.high_iops_queues())..)
            .unwrap_or_default();
        let host_tags = HostTags::new(tags, 0).map_err(|_| Error::Limits {
            what: "I/O tags",
            value: u64::from(tags),
            expected: "a depth the block layer accepts",
        })?;
        let max_segments = usize::from(ctrl.limits().max_sge).min(MAX_SEGMENTS);
        let max_transfer = (u64::from(ctrl.info().max_request_sectors) * 512)
            .clamp(4096, u64::MAX)
            .min(cfg.max_transfer_bytes)
            .min(u64::from(u32::MAX)) as u32;
        let map = cpu_map(cfg.ncpus, latency_vector_cpus, nq);
        let mut drives = Vec::new();
        let mut configs = Vec::new();
        for d in ctrl.drives() {
            let (scale, capacity_sectors) = drive_sectors(d.blocks, d.block_size).ok_or(Error::Limits {
                what: "drive capacity",
                value: d.blocks,
                expected: "below 2^64 bytes",
            })?;
            let mut qc = QueueConfig::new(cfg.ncpus, usize::from(nq), tags, capacity_sectors);
            qc.shared_tags = true;
            qc.host_tags = Some(host_tags.clone());
            qc.logical_block_size = d.block_size;
            qc.max_segments = max_segments;
            // Longer reads and writes are split by blk.
            qc.max_hw_sectors = (max_transfer / blk::SECTOR_SIZE).max(d.block_size / blk::SECTOR_SIZE);
            qc.timeout_ns = cfg.timeout_ns;
            qc.completion = cfg.completion;
            qc.cpu_map = Some(map.clone());
            configs.push((qc, (*d, scale)));
            drives.push(DriveInfo {
                drive: *d,
                capacity_sectors,
                max_transfer_bytes: max_transfer,
                max_segments,
            });
        }
        let core = Arc::new(Core {
            timed_out: (0..tags).map(|_| AtomicBool::new(false)).collect(),
            ctrl,
            reset_wanted: AtomicBool::new(false),
            ticking: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            unknown_drive: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            failed_by_reset: AtomicU64::new(0),
            requeued_by_reset: AtomicU64::new(0),
            resets_avoided: AtomicU64::new(0),
            waiting_since_ns: AtomicU64::new(0),
            reset_wait_ns: cfg.reset_wait_ns,
            platform: platform.clone(),
        });
        let inner = host_with_drive_queues(
            configs,
            &platform,
            |weak: &Weak<HostInner<M, T>>, index, (drive, scale)| DriveDriver {
                core: core.clone(),
                host: weak.clone(),
                index,
                drive,
                scale,
                scale_shift: scale.is_power_of_two().then(|| scale.trailing_zeros()),
            },
            |queues| HostInner {
                core: core.clone(),
                drives,
                queues,
                cpu_map: map,
            },
        )
        .map_err(|_| Error::BadConfig {
            what: "block queue",
            expected: "a configuration blk accepts",
        })?;
        Ok(Self(inner))
    }

    /// Unmasks the controller's interrupts (after the vectors are programmed). In polled mode
    /// leave them masked and call [`Host::poll`].
    pub fn start(&self) {
        self.0.core.ctrl.enable_interrupts();
    }

    /// The controller.
    pub fn controller(&self) -> &Controller<M, T> {
        &self.0.core.ctrl
    }

    /// The drives, by target id; `queue(i)` serves `drives()[i]`.
    pub fn drives(&self) -> &[DriveInfo] {
        &self.0.drives
    }

    /// The queues, one per drive.
    pub fn queues(&self) -> &[Queue<DriveDriver<M, T>>] {
        &self.0.queues
    }

    /// The queue of drive `index`.
    pub fn queue(&self, index: usize) -> Option<&Queue<DriveDriver<M, T>>> {
        self.0.queues.get(index)
    }

    /// The CPU → hardware queue map every drive's queue uses.
    pub fn cpu_map(&self) -> &[u16] {
        &self.0.cpu_map
    }

    /// The handler of MSI-X vector `vector` (= reply queue `vector`), on CPU `cpu`. Returns the
    /// completions delivered (at most one queue depth per call).
    pub fn handle_vector(&self, vector: u16, cpu: usize) -> usize {
        self.0.reap(vector, cpu)
    }

    /// The INTx handler (one reply queue). None when the interrupt was not this controller's.
    pub fn handle_intx(&self, cpu: usize) -> Option<usize> {
        let inner = &self.0;
        let mut n = 0;
        let r = inner.core.ctrl.handle_intx(&mut |c| {
            inner.deliver(cpu, &c);
            n += 1;
        });
        match r {
            crate::IntxResult::NotOurs => None,
            crate::IntxResult::Fault(_) => {
                inner.core.reset_wanted.store(true, Ordering::Release);
                Some(n)
            }
            crate::IntxResult::Handled(_) => Some(n),
        }
    }

    /// Reaps every reply queue without an interrupt. Returns completions delivered.
    pub fn poll(&self, cpu: usize) -> usize {
        (0..self.0.core.ctrl.queues()).map(|q| self.0.reap(q, cpu)).sum()
    }

    /// The periodic tick on CPU `cpu` (instead of each queue's `tick`): timeout scans, the
    /// FAULT watchdog, the OCR when a timeout or a fault asks for it, and a poll of every reply
    /// queue. One CPU at a time; others return at once. Returns the requests that timed out.
    pub fn tick(&self, cpu: usize) -> usize {
        self.0.tick(cpu)
    }

    /// Whether the controller is out of service.
    pub fn is_dead(&self) -> bool {
        self.0.core.ctrl.is_dead()
    }

    /// For a controller out of service, after the kernel turned its bus mastering off: fails
    /// every request still in flight (`Status::Aborted`; their buffers are no longer the
    /// device's). Returns how many.
    pub fn abandon_after_bus_master_off(&self, cpu: usize) -> u32 {
        let inner = &self.0;
        inner.core.ctrl.abandon_in_flight(&mut |c| inner.deliver(cpu, &c))
    }

    /// Counters.
    pub fn counters(&self) -> HostCounters {
        let c = &self.0.core;
        HostCounters {
            refused_completions: c.refused.load(Ordering::Relaxed),
            unknown_drive: c.unknown_drive.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            resets: c.resets.load(Ordering::Relaxed),
            failed_by_reset: c.failed_by_reset.load(Ordering::Relaxed),
            requeued_by_reset: c.requeued_by_reset.load(Ordering::Relaxed),
            resets_avoided: c.resets_avoided.load(Ordering::Relaxed),
            fastpath_ios: c.ctrl.stats.fastpath_ios.load(Ordering::Relaxed),
            stale_map_refusals: c.ctrl.stats.stale_map_refusals.load(Ordering::Relaxed),
            map_changes: c.ctrl.map_sync_counts().0,
            map_sync_failures: c.ctrl.map_sync_counts().1,
            fastpath_ios_after_map_change: c.ctrl.fastpath_ios_since_map_change(),
            raid1_reads_arm0: c.ctrl.stats.raid1_reads[0].load(Ordering::Relaxed),
            raid1_reads_arm1: c.ctrl.stats.raid1_reads[1].load(Ordering::Relaxed),
            raid1_write_pairs: c.ctrl.stats.raid1_write_pairs.load(Ordering::Relaxed),
            raid1_bw_limited_ld_writes: c.ctrl.stats.raid1_bw_limited_ld_writes.load(Ordering::Relaxed),
            high_iops_ios: c.ctrl.stats.high_iops_ios.load(Ordering::Relaxed),
            jbod_map_ios: c.ctrl.jbod_map_counts().3,
            jbod_stale_refusals: c.ctrl.jbod_map_counts().2,
            jbod_map_changes: c.ctrl.jbod_map_counts().0,
            jbod_raid_map_ios: c.ctrl.jbod_raid_map_ios(),
        }
    }
}

impl<M: Mmio64 + Send + Sync + 'static, T: Delay + Send + Sync + 'static> HostInner<M, T> {
    #[inline(always)]
    fn deliver(&self, cpu: usize, c: &Completion) {
        self.deliver_in(cpu, c, None);
    }

    /// [`Self::deliver`]; with `batch` (a reap's), a successful completion goes through the
    /// reap's block-layer batch.
    #[inline(always)]
    fn deliver_in<'a>(&'a self, cpu: usize, c: &Completion, batch: Option<&mut ReapBatch<'a, DriveDriver<M, T>>>) {
        let (drive, hwq, token) = unpack_cookie(c.cookie);
        let Some(q) = self.queues.get(usize::from(drive)) else {
            self.core.unknown_drive.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let timed_out = self
            .core
            .timed_out
            .get(c.tag as usize)
            // Almost never set: a plain load first, the locked swap only when it is (a load that
            // sees false stands for a swap at that moment; a timeout marking the tag after it
            // is the same race as before). Acquire pairs with `timeout`'s Release store.
            .is_some_and(|t| t.load(Ordering::Acquire) && t.swap(false, Ordering::AcqRel));
        if matches!(c.outcome, IoOutcome::Ok) {
            // The common case first: no requeue, no reset bookkeeping.
            if let Some(batch) = batch
                && let Some(done) = batch.complete(&self.queues, cpu, drive, hwq, token, Status::Ok)
            {
                if done.is_err() {
                    self.core.refused.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            if q.complete(cpu, usize::from(hwq), token, Status::Ok).is_err() {
                self.core.refused.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let status = match c.outcome {
            IoOutcome::Ok => Status::Ok,
            IoOutcome::Failed(_) => Status::IoError,
            IoOutcome::Reset | IoOutcome::StaleMap if timed_out => Status::Timeout,
            IoOutcome::Reset | IoOutcome::StaleMap => Status::Aborted,
        };
        if matches!(c.outcome, IoOutcome::Reset | IoOutcome::StaleMap) {
            if !timed_out && !self.core.ctrl.is_dead() {
                // The adapter forgot it and is back, or refused its FastPath route as stale
                // (FastPath is off now): issue it again (after a reset, dispatched once the
                // reset releases the submission gate; the tick reruns the queues).
                if c.outcome == IoOutcome::Reset {
                    self.core.requeued_by_reset.fetch_add(1, Ordering::Relaxed);
                }
                if q.requeue(cpu, usize::from(hwq), token).is_err() {
                    self.core.refused.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            self.core.failed_by_reset.fetch_add(1, Ordering::Relaxed);
        }
        if q.complete(cpu, usize::from(hwq), token, status).is_err() {
            self.core.refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn reap(&self, queue: u16, cpu: usize) -> usize {
        let mut n = 0;
        let mut batch = ReapBatch::default();
        self.core.ctrl.reap(queue, &mut |c| {
            self.deliver_in(cpu, &c, Some(&mut batch));
            n += 1;
        });
        // The last batch's rerun check runs here, after the reaper let go of the reply queue.
        drop(batch);
        n
    }

    fn tick(&self, cpu: usize) -> usize {
        if self.core.ticking.swap(true, Ordering::Acquire) {
            return 0;
        }
        let mut expired = 0;
        for q in &self.queues {
            expired += q.tick(cpu).unwrap_or(0);
        }
        let mut reset_now = matches!(self.core.ctrl.health(), Health::NeedsReset(_));
        if self.core.reset_wanted.load(Ordering::Acquire) {
            // A timeout asked for a reset: first let the timed-out requests finish on their own
            // for `reset_wait_ns` (a reply may be just late), as Linux does before its OCR.
            for q in 0..self.core.ctrl.queues() {
                self.reap(q, cpu);
            }
            let now = self.core.platform.now_ns().max(1);
            let since = match self
                .core
                .waiting_since_ns
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => now,
                Err(t) => t,
            };
            if !self.core.timed_out.iter().any(|t| t.load(Ordering::Acquire)) {
                log::info!("megasas-fusion: the timed-out requests completed; no controller reset needed");
                self.core.resets_avoided.fetch_add(1, Ordering::Relaxed);
                self.core.reset_wanted.store(false, Ordering::Release);
                self.core.waiting_since_ns.store(0, Ordering::Release);
            } else if now.saturating_sub(since) >= self.core.reset_wait_ns {
                reset_now = true;
            }
        }
        if reset_now && !self.core.ctrl.is_dead() {
            self.core.reset_wanted.store(false, Ordering::Release);
            self.core.waiting_since_ns.store(0, Ordering::Release);
            let mut report = Report::new();
            self.core.resets.fetch_add(1, Ordering::Relaxed);
            let r = self.core.ctrl.reset(&mut |c| self.deliver(cpu, &c), &mut report);
            if let Err(e) = r {
                log::error!("megasas-fusion: controller reset failed: {e}; controller out of service");
            }
            // Requests turned away (Busy) during the reset go now, not at the next tick.
            for q in &self.queues {
                for h in 0..q.nr_hw_queues() {
                    q.run_hw_queue(cpu, h);
                }
            }
        }
        for q in 0..self.core.ctrl.queues() {
            self.reap(q, cpu);
        }
        // A completed map sync (the RAID configuration changed): take the new map for FastPath;
        // the same for the JBOD map.
        self.core.ctrl.service_map_sync();
        self.core.ctrl.service_jbod_sync();
        self.core.ticking.store(false, Ordering::Release);
        expired
    }
}

impl<M: Mmio64 + Send + Sync + 'static, T: Delay + Send + Sync + 'static> Driver for DriveDriver<M, T> {
    type Pdu = ();

    fn queue_rq<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        let ctrl = &self.core.ctrl;
        if ctrl.is_dead() {
            return Err(QueueRqError::Io(rq, Status::IoError));
        }
        let op = match rq.op() {
            Op::Read => IoOp::Read,
            Op::Write => IoOp::Write,
            Op::Flush if !ctrl.flush_goes_to_firmware() && !self.drive.system_pd => {
                // The firmware does not take SYNCHRONIZE CACHE for LDs: Linux and FreeBSD
                // complete it. A JBOD disk's flush always goes to the disk (Linux only
                // intercepts it for logical drives).
                rq.end(Status::Ok);
                return Ok(());
            }
            Op::Flush => IoOp::Flush,
            // No discard path in the LD I/O frames: the queue leaves max_discard_sectors at 0,
            // so blk refuses a discard before it gets here; a stray one is not supported.
            Op::Driver(_) | Op::Discard => return Err(QueueRqError::Io(rq, Status::NotSupported)),
        };
        let (lba, blocks) = if op == IoOp::Flush {
            (0, 0)
        } else {
            let scale = u64::from(self.scale);
            let (sector, sectors) = (rq.sector(), u64::from(rq.nr_sectors()));
            if let Some(shift) = self.scale_shift {
                if (sector | sectors) & ((1 << shift) - 1) != 0 {
                    return Err(QueueRqError::Io(rq, Status::IoError));
                }
                (sector >> shift, (sectors >> shift) as u32)
            } else {
                if !sector.is_multiple_of(scale) || !sectors.is_multiple_of(scale) {
                    return Err(QueueRqError::Io(rq, Status::IoError));
                }
                (sector / scale, (sectors / scale) as u32)
            }
        };
        // A single segment (a page-sized I/O) is copied alone; only a longer list pays for
        // the 1 KiB stack array (whose zeroing is a `memset`).
        let one: [Segment; 1];
        let many: [Segment; MAX_SEGMENTS];
        let sgl: &[Segment] = match rq.segments() {
            [s] => {
                one = [Segment {
                    phys: s.phys,
                    len: s.len,
                }];
                &one
            }
            list => {
                let n = list.len();
                if n > MAX_SEGMENTS {
                    return Err(QueueRqError::Io(rq, Status::IoError));
                }
                let mut segs = [Segment { phys: 0, len: 0 }; MAX_SEGMENTS];
                for (d, s) in segs.iter_mut().zip(list) {
                    *d = Segment {
                        phys: s.phys,
                        len: s.len,
                    };
                }
                many = segs;
                &many[..n]
            }
        };
        let req = IoRequest {
            system_pd: self.drive.system_pd,
            target: self.drive.target,
            op,
            lba,
            blocks,
            sgl,
        };
        let Ok(checked) = ctrl.validate_on(&self.drive, &req) else {
            return Err(QueueRqError::Io(rq, Status::IoError));
        };
        let hwq = hw.hwq() as u16;
        let queue = ctrl.high_iops_queues() + hwq;
        let Some(entered) = ctrl.enter(queue) else {
            return Err(QueueRqError::Busy(rq));
        };
        let tag = rq.tag();
        // Issue before posting: from the post on, a completion may arrive on any CPU.
        let token = rq.issue();
        if let Err(e) = ctrl.submit_validated(
            &entered,
            tag,
            queue,
            &req,
            &checked,
            pack_cookie(self.index, hwq, token),
        ) {
            log::warn!("megasas-fusion: submit of tag {tag} failed after issue: {e}");
            let _ = hw.complete(token, Status::IoError);
        }
        Ok(())
    }

    fn timeout(&self, rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        // No task management without a RAID map: the tick waits `reset_wait_ns` for it (and any
        // other timed-out request) to finish on its own, then the OCR ends it (after the adapter
        // has forgotten it) with Status::Timeout.
        if let Some(t) = self.core.timed_out.get(rq.tag() as usize) {
            t.store(true, Ordering::Release);
        }
        self.core.timeouts.fetch_add(1, Ordering::Relaxed);
        self.core.reset_wanted.store(true, Ordering::Release);
        TimeoutAction::ResetTimer
    }

    fn poll(&self, hw: &HwCtx<'_, Self>) -> usize {
        let Some(h) = self.host.upgrade() else {
            return 0;
        };
        let ctrl = &self.core.ctrl;
        let (hwq, base) = (hw.hwq() as u16, ctrl.high_iops_queues());
        let mut n = h.reap(base + hwq, hw.cpu());
        // Balanced mode: the high-IOPS queues are shared out among the hardware queues'
        // pollers (h, h + io_queues, ...), so every one of them is polled.
        let mut q = hwq;
        while q < base {
            n += h.reap(q, hw.cpu());
            q += ctrl.io_queues().max(1);
        }
        n
    }
}
