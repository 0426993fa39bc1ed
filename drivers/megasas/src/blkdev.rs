//! The block-layer binding: one [`Host`] per controller, one `blk::Queue` per logical drive.
//!
//! Everything MegaRAID-specific about serving block I/O lives here; the kernel only probes the PCI
//! function, maps the register BAR, provides [`Mmio`]/[`Dma`]/[`Delay`] and a `blk::Platform`,
//! chooses the CPU map and interrupt vectors, and calls [`Host::handle_interrupt`] and
//! [`Host::tick`].
//!
//! **Tags.** All drives of a controller share one `blk::HostTags` of [`Controller::max_inflight`]
//! tags, tag [`ADMIN_TAG`] reserved: a busy drive may use every command of the controller and a
//! block-layer tag *is* the controller tag (no partition, no translation). The controller keeps
//! its own generation in the MFI context; the request's identity travels in the per-command
//! cookie: `drive << 48 | hwq << 32 | IssueToken::to_bits()` ([`pack_cookie`]), the one place
//! that maps a controller completion to a block-layer request.
//!
//! **Issue order.** `queue_rq` validates, enters the controller's submission section (a reset in
//! progress makes it return `Busy`: requeued), calls `Rq::issue`, then builds and posts the frame.
//! The controller tag is PREPARED until the frame is posted, so a reply that arrives early is
//! dropped as bogus and can never finish the request.
//!
//! **Timeout ladder.** A request's first timeout sends an MFI ABORT for its tag and keeps the
//! request (`ResetTimer`); the request then finishes through the normal completion path with
//! `Status::Timeout` when the device gives the command up (its 0x2E reply, or the abort's OK), or
//! with its real status if it completed meanwhile. If the abort is refused, or the request times
//! out again with the abort still pending, [`Host::tick`] resets the controller: every command in
//! flight is **failed** (`Status::Timeout` for the timed-out ones, `Status::Aborted` for the
//! others), never re-issued, and the drives go on. A buffer is handed back only after the device
//! provably gave its command up.
//!
//! **Hostile device.** Contexts are validated by the controller (range, generation, state); a
//! completion the block layer refuses (stale token) is counted, not trusted. Interrupt work is
//! bounded per invocation (`HostConfig::irq_budget`, overruns counted as storms; the rest is
//! picked up by the next interrupt, poll or tick), faults are logged one by one only for the first
//! few and then summarised once per second, and an INTx line that keeps firing with nothing to
//! reap is reported by [`Host::intx_stuck`] so the kernel can mask it.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use blk::{
    BlkError, CompletionPolicy, Driver, HostTags, HwCtx, IssueToken, Op, Platform, Queue, QueueConfig, QueueRqError,
    Rq, Status, TimedOutRq, TimeoutAction,
};

use crate::controller::{
    ADMIN_TAG, CommandState, Config, Controller, Done, IoOp, IoRequest, IrqMode, LdIo, LogicalDrive, SubmitGuard,
};
use crate::floor::{
    FLOOR_ABANDONED, FLOOR_COOKIE, FLOOR_DONE_FAILED, FLOOR_DONE_OK, FLOOR_IDLE, FLOOR_IN_FLIGHT, FloorResult,
    FloorSpec,
};
use crate::frame::Segment;
use crate::status::{IoErrorKind, IoStatus};
use crate::{Delay, Dma, Error, Mmio, Model};
use drvkit::drive_queue::{drive_sectors, host_with_drive_queues};
use drvkit::window::PollWindow;

/// Most scatter-gather segments the binding passes per request (a stack array in `queue_rq`).
pub const MAX_SEGMENTS: usize = 32;
/// Device BUSY answers retried (re-posted) before a request fails.
const BUSY_RETRIES: u8 = 4;
/// Consecutive INTx interrupts claimed with nothing reaped before the line is reported stuck.
const INTX_STUCK_AFTER: u32 = 1000;
/// Failed controller resets before the host gives up on the controller.
const RESET_ATTEMPTS: u32 = 3;
/// Interval of the fault summary line.
const FAULT_SUMMARY_NS: u64 = 1_000_000_000;

use drvkit::drive_queue::ReapBatch;
pub use drvkit::drive_queue::{pack_cookie, unpack_cookie};

/// What the kernel decides for a controller.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// CPUs (software queues and completion lists of every drive's queue).
    pub ncpus: usize,
    /// CPU -> hardware queue map (the kernel's one CPU map). MFI has one reply queue, so one
    /// hardware queue; `None` maps every CPU to it.
    pub cpu_map: Option<Vec<u16>>,
    /// How interrupts arrive (decides the INTx claim/ack).
    pub irq_mode: IrqMode,
    /// Where completions are finished.
    pub completion: CompletionPolicy,
    /// Request timeout (the first step of the ladder), ns.
    pub timeout_ns: u64,
    /// Completions one interrupt invocation may deliver before it stops (a storm).
    pub irq_budget: u32,
    /// Upper bound on one request's size in bytes (the controller's limit applies too).
    pub max_transfer_bytes: u64,
    /// Controller tunables.
    pub controller: Config,
    /// Adaptive interrupt-then-poll completion (`megasas.irq_poll=`); `None`: one interrupt
    /// per completion as the device sends them.
    pub adaptive: Option<AdaptiveConfig>,
}

use drvkit::adaptive::WindowCounters;
/// Interrupt-then-poll: after an interrupt that reaped something, the kernel masks the
/// controller's vector and the submitters poll the reply ring (see [`drvkit::adaptive`]).
pub use drvkit::adaptive::{AdaptiveConfig, AdaptiveCounters, MAX_POLLED_TRANSFER_BYTES};

/// How the kernel masks and unmasks the controller's interrupt vector for the adaptive mode.
/// On QEMU's MFI only a vector mask works (MSI-X entry mask bit): an OMSK mask also stops the
/// reply ring. A message that arrives masked is kept pending by the device and sent
/// on unmask; the driver re-reaps after unmasking anyway, so nothing depends on that.
pub trait VectorMask {
    /// Masks (`true`) or unmasks the vector.
    fn set_masked(&self, masked: bool);
}

struct Adaptive {
    config: AdaptiveConfig,
    /// Open: the vector is masked and submitters poll (switched under a try-lock, see `window`).
    window: PollWindow,
    last_completion_ns: AtomicU64,
    in_window: AtomicU32,
    counters: WindowCounters,
}

impl HostConfig {
    /// Defaults for `ncpus` CPUs and interrupt mode `irq_mode`: IRQ completions, 30 s timeout,
    /// 1024 completions per interrupt, 1 MiB requests.
    pub fn new(ncpus: usize, irq_mode: IrqMode) -> Self {
        Self {
            ncpus,
            cpu_map: None,
            irq_mode,
            completion: CompletionPolicy::Irq,
            timeout_ns: 30_000_000_000,
            irq_budget: 1024,
            max_transfer_bytes: 1 << 20,
            controller: Config::default(),
            adaptive: None,
        }
    }

    /// Applies the `megasas.*` command-line options that are the driver's: `queue_depth` (I/O
    /// commands in flight, plus the admin tag), `timeout_ms` (the request timeout) and
    /// `irq_poll` (interrupt-then-poll windows; on by default with MSI-X). `irq` and `irq_cpu`
    /// are interrupt policy, which the kernel applies when it sets the vectors up
    /// (`choose_irq_mode`).
    pub fn apply_options(&mut self, options: &crate::Options) {
        if let Some(depth) = options.queue_depth {
            self.controller.max_tags = depth.saturating_add(1).min(crate::tags::MAX_TAGS);
        }
        if let Some(ms) = options.timeout_ms {
            self.timeout_ns = u64::from(ms) * 1_000_000;
        }
        self.adaptive = options
            .irq_poll
            .idle_us(self.irq_mode)
            .map(AdaptiveConfig::with_idle_us);
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
    /// Human-readable description (model, target).
    pub model: String,
}

/// What one [`Host::handle_interrupt`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqOutcome {
    /// INTx only: the interrupt was not this controller's (shared line).
    pub not_ours: bool,
    /// Completions delivered to the block layer.
    pub completed: u32,
    /// Reply entries rejected as controller faults.
    pub faults: u32,
    /// The budget ran out with replies left (they are picked up later).
    pub storm: bool,
    /// INTx keeps firing with nothing to reap: mask the line and report the device.
    pub intx_stuck: bool,
}

/// Counters of the binding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// Interrupt invocations.
    pub interrupts: u64,
    /// Invocations that hit the budget with work left.
    pub storms: u64,
    /// INTx invocations claimed with nothing reaped.
    pub intx_empty: u64,
    /// Completions the block layer refused (stale or not in flight): never delivered twice.
    pub refused_completions: u64,
    /// Completions whose cookie named no drive.
    pub unknown_drive: u64,
    /// Device BUSY answers re-posted.
    pub busy_retries: u64,
    /// Requests sent back to the queue because a reset was running.
    pub requeued_for_reset: u64,
    /// Timeouts seen by the driver.
    pub timeouts: u64,
    /// Controller resets that failed.
    pub failed_resets: u64,
}

/// The state every drive's driver and the host share: the controller and the counters.
struct Core<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> {
    ctrl: Controller<M, D, T>,
    irq_mode: IrqMode,
    interrupts: AtomicU64,
    storms: AtomicU64,
    intx_empty: AtomicU64,
    intx_empty_run: AtomicU32,
    intx_stuck: AtomicBool,
    refused: AtomicU64,
    unknown_drive: AtomicU64,
    busy_retries: AtomicU64,
    requeued: AtomicU64,
    timeouts: AtomicU64,
    failed_resets: AtomicU64,
    /// The controller could not be reset: out of service.
    dead: AtomicBool,
    /// One CPU at a time runs `tick` (timeouts, aborts, resets).
    maintenance: AtomicBool,
    /// Fault count and time of the last summary line.
    faults_logged: AtomicU64,
    last_summary_ns: AtomicU64,
    /// Per controller tag: where a floor command stands (`floor::FLOOR_*`).
    floor_state: Box<[AtomicU8]>,
    /// Floor completions recorded, by anyone (so a floor run about to wait sees news).
    floor_completions: AtomicU64,
    /// Requests of more sectors than this keep the adaptive mode from opening a window
    /// (`u32::MAX` without the mode).
    polled_sectors_max: u32,
    /// The last request submitted was over `polled_sectors_max`.
    large_submitted: AtomicBool,
}

/// The `blk::Driver` of one logical drive.
pub struct DriveDriver<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> {
    core: Arc<Core<M, D, T>>,
    /// To deliver other drives' completions found while polling.
    host: Weak<HostInner<M, D, T>>,
    index: u16,
    target: u8,
    /// The drive is a system PD (JBOD disk), reached by PD SCSI pass-through.
    system_pd: bool,
    /// log2 of the 512-byte sectors per logical block (a power of two: block sizes are).
    scale_shift: u32,
}

struct HostInner<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> {
    core: Arc<Core<M, D, T>>,
    platform: Arc<dyn Platform>,
    drives: Vec<DriveInfo>,
    queues: Box<[Queue<DriveDriver<M, D, T>>]>,
    irq_budget: u32,
    /// The drives' shared tags (a floor run borrows from them).
    host_tags: Arc<HostTags>,
    /// Interrupt-then-poll state, when configured.
    adaptive: Option<Adaptive>,
}

/// One MegaRAID controller serving its logical drives through the block layer.
pub struct Host<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync>(Arc<HostInner<M, D, T>>);

impl<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> core::fmt::Debug for Host<M, D, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host")
            .field("controller", &self.0.core.ctrl)
            .field("drives", &self.0.drives.len())
            .finish_non_exhaustive()
    }
}

fn block_status(d: &Done) -> Status {
    match d.status {
        IoStatus::Success => Status::Ok,
        // The request timed out; the device gave the command up (abort or reset).
        IoStatus::Failed(_) if d.aborted => Status::Timeout,
        IoStatus::Failed(e) if e.kind == IoErrorKind::Aborted => Status::Aborted,
        IoStatus::Failed(_) => Status::IoError,
    }
}

impl<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> Host<M, D, T> {
    /// Brings the controller up, discovers its logical drives and creates one queue per drive on
    /// a host-wide tag set. Interrupts stay off at the controller: program the vectors (or INTx,
    /// or nothing for polled mode), then call [`Host::start`].
    ///
    /// Refuses a controller with no tag left for I/O after the admin tag ([`Error::NoIoTags`]):
    /// a drive is never created on which every I/O would fail.
    pub fn new(
        model: Model,
        mmio: M,
        dma: D,
        delay: T,
        platform: Arc<dyn Platform>,
        cfg: HostConfig,
    ) -> Result<Self, Error> {
        let ctrl = Controller::new(model, mmio, dma, delay, cfg.controller)?;
        let tags = ctrl.max_inflight();
        if tags < 2 {
            return Err(Error::NoIoTags { tags });
        }
        let found = ctrl.discover(ADMIN_TAG)?;
        let host_tags = HostTags::new(u32::from(tags), 1).map_err(Error::BlockLayer)?;
        let floor_tags = host_tags.clone();
        let max_segments = usize::from(ctrl.max_segments()).min(MAX_SEGMENTS);
        let max_transfer = ctrl
            .max_transfer_bytes()
            .min(cfg.max_transfer_bytes)
            .min(u64::from(u32::MAX)) as u32;
        let core = Arc::new(Core {
            ctrl,
            irq_mode: cfg.irq_mode,
            interrupts: AtomicU64::new(0),
            storms: AtomicU64::new(0),
            intx_empty: AtomicU64::new(0),
            intx_empty_run: AtomicU32::new(0),
            intx_stuck: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            unknown_drive: AtomicU64::new(0),
            busy_retries: AtomicU64::new(0),
            requeued: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            failed_resets: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            maintenance: AtomicBool::new(false),
            faults_logged: AtomicU64::new(0),
            last_summary_ns: AtomicU64::new(0),
            floor_state: (0..tags).map(|_| AtomicU8::new(FLOOR_IDLE)).collect(),
            floor_completions: AtomicU64::new(0),
            polled_sectors_max: if cfg.adaptive.is_some() {
                drvkit::adaptive::MAX_POLLED_TRANSFER_BYTES / 512
            } else {
                u32::MAX
            },
            large_submitted: AtomicBool::new(false),
        });
        let mut drives = Vec::with_capacity(found.len());
        let mut configs = Vec::with_capacity(found.len());
        for d in &found {
            let (scale, capacity_sectors) = drive_sectors(d.blocks, d.block_size).ok_or(Error::MalformedReply {
                what: "drive capacity",
                value: d.blocks,
                expected: "a capacity below 2^64 bytes",
            })?;
            let mut qc = QueueConfig::new(cfg.ncpus, 1, u32::from(tags), capacity_sectors);
            qc.reserved_tags = 1;
            qc.shared_tags = true;
            qc.host_tags = Some(host_tags.clone());
            qc.logical_block_size = d.block_size;
            qc.max_segments = max_segments;
            // Longer reads and writes are split by blk.
            qc.max_hw_sectors = (max_transfer / blk::SECTOR_SIZE).max(d.block_size / blk::SECTOR_SIZE);
            qc.timeout_ns = cfg.timeout_ns;
            qc.completion = cfg.completion;
            qc.cpu_map = cfg.cpu_map.clone();
            configs.push((qc, (d.target, d.system_pd, scale)));
            drives.push(DriveInfo {
                drive: *d,
                capacity_sectors,
                max_transfer_bytes: max_transfer,
                max_segments,
                model: if d.system_pd {
                    format!("MegaRAID {model:?} JBOD disk (system PD) target {}", d.target)
                } else {
                    format!("MegaRAID {model:?} target {}", d.target)
                },
            });
        }
        let platform_for_queues = platform.clone();
        let inner = host_with_drive_queues(
            configs,
            &platform_for_queues,
            |weak: &Weak<HostInner<M, D, T>>, index, (target, system_pd, scale)| DriveDriver {
                core: core.clone(),
                host: weak.clone(),
                index,
                target,
                system_pd,
                scale_shift: scale.trailing_zeros(),
            },
            |queues| HostInner {
                core: core.clone(),
                platform,
                drives,
                queues: queues.into_boxed_slice(),
                irq_budget: cfg.irq_budget.max(1),
                host_tags: floor_tags,
                adaptive: cfg.adaptive.map(|config| Adaptive {
                    config: AdaptiveConfig {
                        idle_ns: config.idle_ns,
                        budget: config.budget.max(1),
                    },
                    window: PollWindow::new(),
                    last_completion_ns: AtomicU64::new(0),
                    in_window: AtomicU32::new(0),
                    counters: WindowCounters::default(),
                }),
            },
        )
        .map_err(Error::BlockLayer)?;
        Ok(Self(inner))
    }

    /// Unmasks the controller's reply interrupt. Call it after programming MSI-X/MSI/INTx (or,
    /// for polled mode, after disabling INTx at the PCI level: QEMU's reply queue only advances
    /// while unmasked).
    pub fn start(&self) -> Result<(), Error> {
        self.0.core.ctrl.enable_interrupts()
    }

    /// The controller.
    pub fn controller(&self) -> &Controller<M, D, T> {
        &self.0.core.ctrl
    }

    /// The drives, in discovery order (by target id); `queue(i)` serves `drives()[i]`.
    pub fn drives(&self) -> &[DriveInfo] {
        &self.0.drives
    }

    /// The queues, one per drive.
    pub fn queues(&self) -> &[Queue<DriveDriver<M, D, T>>] {
        &self.0.queues
    }

    /// The queue of drive `index`.
    pub fn queue(&self, index: usize) -> Option<&Queue<DriveDriver<M, D, T>>> {
        self.0.queues.get(index)
    }

    /// The interrupt handler's body, on CPU `cpu`: acknowledges as the mode requires, reaps and
    /// delivers each completion to its drive's queue, at most `irq_budget` of them.
    pub fn handle_interrupt(&self, cpu: usize) -> IrqOutcome {
        self.0.handle_interrupt(cpu)
    }

    /// Reaps the reply queue without an interrupt (polled mode, or to pick up what a storm
    /// left). Returns completions delivered.
    pub fn poll(&self, cpu: usize) -> u32 {
        self.0.reap(cpu, self.0.irq_budget).0
    }

    /// The periodic tick, on CPU `cpu` (call it instead of each queue's `tick`): runs every
    /// queue's timeout scan (which sends aborts), resets the controller when the ladder asks for
    /// it, reaps what interrupts left behind, and logs the fault summary. Only one CPU at a time
    /// does this; others return at once. Returns the number of requests that timed out.
    pub fn tick(&self, cpu: usize) -> usize {
        self.0.tick(cpu)
    }

    /// Whether INTx kept firing with nothing to reap (the kernel should mask the line).
    pub fn intx_stuck(&self) -> bool {
        self.0.core.intx_stuck.load(Ordering::Relaxed)
    }

    /// Whether the controller could not be reset and is out of service.
    pub fn is_dead(&self) -> bool {
        self.0.core.dead.load(Ordering::Relaxed)
    }

    /// For a dead controller, after the kernel turned its bus mastering off: fails every request
    /// still in flight (their buffers are no longer the device's). Returns how many.
    pub fn abandon_after_bus_master_off(&self, cpu: usize) -> u32 {
        let inner = &self.0;
        inner.core.ctrl.abandon_in_flight(|d| inner.deliver(cpu, d, false))
    }

    /// Counters of the binding.
    /// Measures the device floor on drive `drive` (see [`crate::floor`]): `spec.ios` reads at
    /// `spec.queue_depth`, each as long as `buffer` (rounded down to whole blocks, at least one
    /// block: the kernel passes the job's block size), posted straight to the controller and
    /// reaped by polling from this call, all into `buffer` (the reads overwrite it in any order,
    /// so its contents mean nothing afterwards). Run it with the drives idle: it takes its tags
    /// from the drives' shared pool and fails with [`Error::FloorTagsBusy`] when they are in use.
    /// `wait(news)` runs whenever a pass over the ring found nothing; `news()` says whether a
    /// completion arrived since (in the ring, or already reaped by an interrupt handler). The
    /// kernel disables interrupts, checks `news()` and halts with `sti; hlt` only if there is
    /// none, so no wake-up is lost; it spins in polled mode. Under TCG a spinning vCPU takes host time from the
    /// device emulation, so the halting floor is the higher one there.
    pub fn measure_floor(
        &self,
        cpu: usize,
        drive: usize,
        spec: FloorSpec,
        buffer: Segment,
        wait: &mut dyn FnMut(&dyn Fn() -> bool),
    ) -> Result<FloorResult, Error> {
        self.measure_floor_into(cpu, drive, spec, &[buffer], wait)
    }

    /// [`Self::measure_floor`] with the reads spread over `buffers` (the read in flight on the
    /// i-th tag lands in buffer i modulo their number, all of the first's length): large reads
    /// then touch as much memory as a job's own buffers do, not one buffer that stays in cache.
    pub fn measure_floor_into(
        &self,
        cpu: usize,
        drive: usize,
        spec: FloorSpec,
        buffers: &[Segment],
        wait: &mut dyn FnMut(&dyn Fn() -> bool),
    ) -> Result<FloorResult, Error> {
        let inner = &self.0;
        let Some(&buffer) = buffers.first() else {
            return Err(Error::InvalidRequest {
                reason: "the floor needs a buffer",
            });
        };
        if buffers.iter().any(|b| b.len != buffer.len) {
            return Err(Error::InvalidRequest {
                reason: "the floor buffers differ in length",
            });
        }
        let info = inner.drives.get(drive).ok_or(Error::NoSuchDrive {
            target: drive.min(usize::from(u8::MAX)) as u8,
        })?;
        let d = info.drive;
        if buffer.len < d.block_size {
            return Err(Error::InvalidRequest {
                reason: "the floor buffer is smaller than one block",
            });
        }
        if spec.ios == 0 || spec.queue_depth == 0 {
            return Err(Error::InvalidRequest {
                reason: "a floor run needs at least one read and a queue depth of at least one",
            });
        }
        let io_tags = inner.core.ctrl.max_inflight().saturating_sub(1);
        let depth = spec
            .queue_depth
            .min(io_tags)
            .min(spec.ios.min(u32::from(u16::MAX)) as u16);
        let mut tags: Vec<u16> = Vec::with_capacity(usize::from(depth));
        for _ in 0..depth {
            match inner.host_tags.tags().alloc(cpu, false) {
                Some(t) => tags.push(t as u16),
                None => break,
            }
        }
        if tags.len() < usize::from(depth) {
            let got = tags.len() as u16;
            for t in tags {
                inner.host_tags.tags().free(cpu, u32::from(t));
            }
            return Err(Error::FloorTagsBusy { wanted: depth, got });
        }
        // Whole blocks of the buffer, read at block-aligned positions that fit the drive.
        let read_blocks = buffer.len / d.block_size;
        let segs: Vec<[Segment; 1]> = buffers
            .iter()
            .map(|b| {
                [Segment {
                    phys: b.phys,
                    len: read_blocks * d.block_size,
                }]
            })
            .collect();
        let port = FloorRunPort {
            inner,
            cpu,
            tags: &tags,
            target: d.target,
            system_pd: d.system_pd,
            read_blocks,
            positions: (d.blocks / u64::from(read_blocks)).max(1),
            segs,
        };
        let run = drvkit::floor::run(&port, tags.len(), spec, wait);
        // Hand the tags back; one whose read is still the device's is freed by whoever reaps
        // its completion (`floor_done` on an ABANDONED slot), never before.
        for (&tag, left) in tags.iter().zip(&run.left_with_device) {
            if !left {
                inner.host_tags.tags().free(cpu, u32::from(tag));
            }
        }
        run.result
    }

    /// Whether the adaptive mode is configured.
    pub fn is_adaptive(&self) -> bool {
        self.0.adaptive.is_some()
    }

    /// Adaptive mode: a polling window is open (the vector is masked), so a submitter waiting
    /// for a completion must poll ([`Self::poll_adaptive`]) instead of halting.
    pub fn polling_window(&self) -> bool {
        self.0.adaptive.as_ref().is_some_and(|a| a.window.is_open())
    }

    /// [`Self::handle_interrupt`] for the adaptive mode: when the interrupt reaped something and
    /// no window is open, masks the vector through `vector` and opens one, unless the last
    /// request submitted was over [`drvkit::adaptive::MAX_POLLED_TRANSFER_BYTES`] (the next
    /// completion is too far off to poll for). Without the adaptive mode it is
    /// `handle_interrupt`.
    pub fn handle_interrupt_adaptive(&self, cpu: usize, vector: &dyn VectorMask) -> IrqOutcome {
        let inner = &self.0;
        let out = inner.handle_interrupt(cpu);
        let Some(a) = &inner.adaptive else {
            return out;
        };
        if out.completed == 0 {
            return out;
        }
        // Relaxed: a hint; a submission racing with this look only moves the choice to the next
        // interrupt.
        if inner.core.large_submitted.load(Ordering::Relaxed) {
            a.counters.large_transfer_skips.fetch_add(1, Ordering::Relaxed);
            return out;
        }
        if a.window.open(|| {
            // Set before the window shows open, so its first poll sees a fresh start.
            a.last_completion_ns.store(inner.platform.now_ns(), Ordering::Relaxed);
            a.in_window.store(0, Ordering::Relaxed);
            vector.set_masked(true);
        }) {
            a.counters.windows.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    /// [`Self::poll`] for the adaptive mode: reaps; while a window is open, closes it when
    /// nothing completed for `idle_ns` or its budget is spent: unmask first, then reap once
    /// more, so a completion that arrived between the last empty reap and the unmask is
    /// delivered now rather than waiting for an interrupt that a device without pending bits
    /// would never send. Returns completions delivered.
    pub fn poll_adaptive(&self, cpu: usize, vector: &dyn VectorMask) -> u32 {
        let inner = &self.0;
        let mut n = inner.reap(cpu, inner.irq_budget).0;
        let Some(a) = &inner.adaptive else {
            return n;
        };
        if !a.window.is_open() {
            return n;
        }
        let now = inner.platform.now_ns();
        let mut close = false;
        let mut by_budget = false;
        if n > 0 {
            a.counters.polled.fetch_add(u64::from(n), Ordering::Relaxed);
            a.last_completion_ns.store(now, Ordering::Relaxed);
            let used = a.in_window.fetch_add(n, Ordering::Relaxed).saturating_add(n);
            if used >= a.config.budget {
                by_budget = true;
                close = true;
            }
        } else if now.saturating_sub(a.last_completion_ns.load(Ordering::Relaxed)) >= a.config.idle_ns {
            close = true;
        }
        if close && a.window.close(|| vector.set_masked(false)) {
            if by_budget {
                a.counters.budget_closes.fetch_add(1, Ordering::Relaxed);
            }
            let caught = inner.reap(cpu, inner.irq_budget).0;
            a.counters
                .unmask_catches
                .fetch_add(u64::from(caught), Ordering::Relaxed);
            n += caught;
        }
        n
    }

    /// Counters of the adaptive mode (zero without it).
    pub fn adaptive_counters(&self) -> AdaptiveCounters {
        self.0
            .adaptive
            .as_ref()
            .map_or_else(AdaptiveCounters::default, |a| a.counters.snapshot())
    }

    pub fn counters(&self) -> HostCounters {
        let c = &self.0.core;
        HostCounters {
            interrupts: c.interrupts.load(Ordering::Relaxed),
            storms: c.storms.load(Ordering::Relaxed),
            intx_empty: c.intx_empty.load(Ordering::Relaxed),
            refused_completions: c.refused.load(Ordering::Relaxed),
            unknown_drive: c.unknown_drive.load(Ordering::Relaxed),
            busy_retries: c.busy_retries.load(Ordering::Relaxed),
            requeued_for_reset: c.requeued.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            failed_resets: c.failed_resets.load(Ordering::Relaxed),
        }
    }
}

/// A floor run's view of the controller (`drvkit::floor::run`): slot `i` is host tag `tags[i]`,
/// posted as an LD READ with [`FLOOR_COOKIE`] so that whoever reaps it calls `floor_done`.
struct FloorRunPort<'a, M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> {
    inner: &'a HostInner<M, D, T>,
    cpu: usize,
    tags: &'a [u16],
    target: u8,
    system_pd: bool,
    read_blocks: u32,
    /// Block-aligned positions where a read fits the drive.
    positions: u64,
    /// The read on tag i lands in `segs[i % len]`.
    segs: Vec<[Segment; 1]>,
}

impl<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> drvkit::floor::FloorPort
    for FloorRunPort<'_, M, D, T>
{
    type Error = Error;

    fn state(&self, i: usize) -> &AtomicU8 {
        &self.inner.core.floor_state[usize::from(self.tags[i])]
    }

    fn post(&self, i: usize, n: u32) -> Result<(), Error> {
        let req = IoRequest {
            system_pd: self.system_pd,
            op: IoOp::Read,
            target: self.target,
            lba: u64::from(n) % self.positions * u64::from(self.read_blocks),
            blocks: self.read_blocks,
            sgl: &self.segs[i % self.segs.len()],
        };
        let ctrl = &self.inner.core.ctrl;
        let guard = ctrl.begin_submit()?;
        ctrl.submit_cookie(&guard, self.tags[i], &req, FLOOR_COOKIE)
    }

    fn reap(&self) {
        self.inner.reap(self.cpu, self.inner.irq_budget);
    }

    fn completions(&self) -> u64 {
        // Acquire pairs with the Release increment in `floor_done`.
        self.inner.core.floor_completions.load(Ordering::Acquire)
    }

    fn replies_pending(&self) -> bool {
        self.inner.core.ctrl.replies_pending()
    }

    fn now_ns(&self) -> u64 {
        self.inner.platform.now_ns()
    }

    fn stalled(&self, in_flight: u16, completed: u32, _waited_ns: u64) -> Error {
        Error::FloorStalled { in_flight, completed }
    }
}

impl<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> HostInner<M, D, T> {
    /// [`Self::deliver`] of a reaped completion (BUSY answers retried): a successful
    /// completion of a drive's request goes to its queue from here, inlined into the reaper
    /// (no call with its frame and the `Done` through memory per completion), through
    /// the reap's block-layer batch; every other case takes `deliver`.
    #[inline(always)]
    fn deliver_reaped<'a>(&'a self, cpu: usize, d: Done, batch: &mut ReapBatch<'a, DriveDriver<M, D, T>>) {
        if d.cookie & FLOOR_COOKIE == 0 && matches!(d.status, IoStatus::Success) {
            let (drive, hwq, token) = unpack_cookie(d.cookie);
            if let Some(done) = batch.complete(&self.queues, cpu, drive, hwq, token, Status::Ok) {
                if let Err(e) = done {
                    self.refused(d.tag, e);
                }
                return;
            }
        }
        self.deliver_fields(cpu, d.tag, d.cookie, d.status, d.aborted);
    }

    /// [`Self::deliver`] with BUSY retries, of a completion passed field by field (in registers:
    /// the reaper's `Done` then never needs a place in memory).
    #[inline(never)]
    fn deliver_fields(&self, cpu: usize, tag: u16, cookie: u64, status: IoStatus, aborted: bool) {
        self.deliver(
            cpu,
            Done {
                tag,
                cookie,
                status,
                aborted,
            },
            true,
        );
    }

    /// A completion the block layer refused: counted and dropped, never delivered to another
    /// request.
    #[cold]
    fn refused(&self, tag: u16, e: BlkError) {
        let n = self.core.refused.fetch_add(1, Ordering::Relaxed);
        if n < 16 {
            log::error!("megasas: completion of tag {tag} refused by the block layer: {e}");
        }
    }

    /// Hands one controller completion to its drive's queue. `retry_busy`: a device BUSY may be
    /// re-posted (not during a reset's sweep).
    fn deliver(&self, cpu: usize, d: Done, retry_busy: bool) {
        if d.cookie & FLOOR_COOKIE != 0 {
            self.floor_done(cpu, &d);
            return;
        }
        let (drive, hwq, token) = unpack_cookie(d.cookie);
        let Some(queue) = self.queues.get(usize::from(drive)) else {
            self.core.unknown_drive.fetch_add(1, Ordering::Relaxed);
            log::error!(
                "megasas: completion of tag {} names drive {drive}, which does not exist",
                d.tag
            );
            return;
        };
        // A success is one test; the BUSY-retry conditions and `block_status` are asked only of
        // the other completions.
        let status = match d.status {
            IoStatus::Success => Status::Ok,
            IoStatus::Failed(e) => {
                if retry_busy && !d.aborted && e.kind == IoErrorKind::Busy && self.retry_busy(d.tag) {
                    return;
                }
                block_status(&d)
            }
        };
        if let Err(e) = queue.complete(cpu, usize::from(hwq), token, status) {
            // The device completed something the block layer no longer has in flight under this
            // token.
            self.refused(d.tag, e);
        }
    }

    /// Re-posts a command the device answered BUSY, a bounded number of times.
    /// A floor command's completion, from whoever reaped it: recorded for the run, or (the run
    /// gave up on it) its tag goes back to the pool now that the device is done with it.
    fn floor_done(&self, cpu: usize, d: &Done) {
        let Some(state) = self.core.floor_state.get(usize::from(d.tag)) else {
            self.core.unknown_drive.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let outcome = if d.status == IoStatus::Success {
            FLOOR_DONE_OK
        } else {
            FLOOR_DONE_FAILED
        };
        // AcqRel: Acquire pairs with the run's Release store of IN_FLIGHT / ABANDONED; Release
        // pairs with the run's Acquire load of the outcome.
        match state.compare_exchange(FLOOR_IN_FLIGHT, outcome, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // Release pairs with the Acquire load in `measure_floor` before it waits.
                self.core.floor_completions.fetch_add(1, Ordering::Release);
            }
            Err(FLOOR_ABANDONED) => {
                state.store(FLOOR_IDLE, Ordering::Relaxed);
                self.host_tags.tags().free(cpu, u32::from(d.tag));
            }
            Err(_) => {
                // Not a floor command in flight: the controller validated the context, so this
                // is a cookie the block layer never made. Counted, never delivered.
                self.core.refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn retry_busy(&self, tag: u16) -> bool {
        let ctrl = &self.core.ctrl;
        let Ok(guard) = ctrl.begin_submit() else {
            return false;
        };
        if !self.note_busy(tag) {
            return false;
        }
        match ctrl.resubmit(&guard, tag) {
            Ok(()) => {
                self.core.busy_retries.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                log::error!("megasas: re-posting tag {tag} after BUSY failed: {e}");
                false
            }
        }
    }

    /// Whether the request on `tag` may have one more BUSY retry (the controller counts the
    /// re-posts of a frame since its submission).
    fn note_busy(&self, tag: u16) -> bool {
        self.core.ctrl.resubmits(tag) < u16::from(BUSY_RETRIES)
    }

    /// Reaps at most `budget` reply entries. Returns (completed, faults, budget ran out with
    /// entries left). Inlined: a poll that finds the ring as it left it (most polls while a
    /// window is open) returns from its caller, without the reaper's frame and batch.
    #[inline(always)]
    fn reap(&self, cpu: usize, budget: u32) -> (u32, u32, bool) {
        if !self.core.ctrl.reply_ring_moved() {
            return (0, 0, false);
        }
        self.reap_entries(cpu, budget)
    }

    /// [`Self::reap`] past its look at the ring.
    #[inline(never)]
    fn reap_entries(&self, cpu: usize, budget: u32) -> (u32, u32, bool) {
        let mut batch = ReapBatch::default();
        let r = self
            .core
            .ctrl
            .reap_budget(budget, |d| self.deliver_reaped(cpu, d, &mut batch));
        // The last batch's rerun check runs here, after the reaper let go of the reply queue.
        drop(batch);
        (r.completed, r.faults, r.more_pending)
    }

    fn handle_interrupt(&self, cpu: usize) -> IrqOutcome {
        let core = &self.core;
        core.interrupts.fetch_add(1, Ordering::Relaxed);
        let mut out = IrqOutcome::default();
        // MSI/MSI-X: OSTS reads 0 there and says nothing; INTx: claim and ack first.
        if core.irq_mode == IrqMode::Intx && !core.ctrl.intx_claim() {
            out.not_ours = true;
            return out;
        }
        let (completed, faults, storm) = self.reap(cpu, self.irq_budget);
        out.completed = completed;
        out.faults = faults;
        out.storm = storm;
        if out.storm {
            let n = core.storms.fetch_add(1, Ordering::Relaxed);
            if n == 0 {
                log::warn!(
                    "megasas: interrupt work over budget ({} completions); the rest waits",
                    self.irq_budget
                );
            }
        }
        if core.irq_mode == IrqMode::Intx {
            if out.completed == 0 {
                core.intx_empty.fetch_add(1, Ordering::Relaxed);
                let run = core.intx_empty_run.fetch_add(1, Ordering::Relaxed) + 1;
                if run >= INTX_STUCK_AFTER && !core.intx_stuck.swap(true, Ordering::Relaxed) {
                    log::error!("megasas: INTx asserted {run} times in a row with nothing to reap: line stuck");
                }
            } else {
                core.intx_empty_run.store(0, Ordering::Relaxed);
            }
            out.intx_stuck = core.intx_stuck.load(Ordering::Relaxed);
        }
        self.fault_summary();
        out
    }

    /// One line per second at most with the faults not logged one by one.
    fn fault_summary(&self) {
        let core = &self.core;
        let total = core.ctrl.fault_count();
        let logged = core.faults_logged.load(Ordering::Relaxed);
        if total <= logged {
            return;
        }
        let now = self.platform.now_ns();
        let last = core.last_summary_ns.load(Ordering::Relaxed);
        if now.saturating_sub(last) < FAULT_SUMMARY_NS && last != 0 {
            return;
        }
        if core
            .last_summary_ns
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            core.faults_logged.store(total, Ordering::Relaxed);
            log::warn!(
                "megasas: {} reply-queue faults since the last summary ({total} in total)",
                total - logged
            );
        }
    }

    fn tick(&self, cpu: usize) -> usize {
        let core = &self.core;
        // Acquire pairs with the Release below: one maintainer at a time.
        if core.maintenance.swap(true, Ordering::Acquire) {
            return 0;
        }
        let mut expired = 0;
        for q in self.queues.iter() {
            expired += q.tick(cpu).unwrap_or(0);
        }
        if !core.dead.load(Ordering::Relaxed) {
            self.reap(cpu, self.irq_budget);
            if core.ctrl.reset_requested() {
                self.reset(cpu);
            }
        }
        self.fault_summary();
        core.maintenance.store(false, Ordering::Release);
        expired
    }

    fn reset(&self, cpu: usize) {
        let core = &self.core;
        match core.ctrl.reset(|d| self.deliver(cpu, d, false)) {
            Ok(failed) => log::warn!("megasas: controller reset: {failed} requests failed"),
            Err(Error::ResetDeferred) => {}
            Err(e) => {
                let n = core.failed_resets.fetch_add(1, Ordering::Relaxed) + 1;
                log::error!("megasas: controller reset attempt {n} failed: {e}");
                if n >= u64::from(RESET_ATTEMPTS) {
                    core.dead.store(true, Ordering::Relaxed);
                    log::error!(
                        "megasas: controller out of service; its requests stay owned by the device until bus mastering is off"
                    );
                }
            }
        }
        // Requests turned away while the reset ran go now.
        for q in self.queues.iter() {
            for hwq in 0..q.nr_hw_queues() {
                q.run_hw_queue(cpu, hwq);
            }
        }
    }
}

impl<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> DriveDriver<M, D, T> {
    /// `queue_rq` of an [`LdIo`]: the steps of every request ([`Self::check_issue_post`]) with
    /// the request in registers.
    #[inline(always)]
    fn queue_ld_io<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, io: LdIo) -> Result<(), QueueRqError<'a, Self>> {
        self.check_issue_post(
            hw,
            rq,
            |ctrl, guard| ctrl.check_ld_io(guard, io),
            |ctrl, guard, tag, checked, cookie| ctrl.submit_ld_io(guard, tag, checked, cookie),
        )
    }

    /// What every `queue_rq` does, with the check and the post of the request's kind: enter the
    /// submission critical section, check the request once (the post does not check again),
    /// issue it, post it (which starts the tag's BUSY count afresh).
    #[inline(always)]
    fn check_issue_post<'a, C>(
        &self,
        hw: &HwCtx<'a, Self>,
        rq: Rq<'a, Self>,
        check: impl FnOnce(&Controller<M, D, T>, &SubmitGuard<'_>) -> Result<C, Error>,
        post: impl FnOnce(&Controller<M, D, T>, &SubmitGuard<'_>, u16, C, u64) -> Result<(), Error>,
    ) -> Result<(), QueueRqError<'a, Self>> {
        let ctrl = &self.core.ctrl;
        let guard = match ctrl.begin_submit_on(hw.cpu()) {
            Ok(g) => g,
            Err(e) => return Err(self.not_entered(rq, e)),
        };
        let checked = match check(ctrl, &guard) {
            Ok(c) => c,
            Err(e) => return Err(self.refuse(rq, e)),
        };
        let tag = rq.tag() as u16;
        let hwq = rq.hwq() as u16;
        // Issue before the doorbell: from the post on, the completion may come on any CPU. The
        // controller tag is PREPARED until the frame is posted, so an early reply cannot match.
        let token = rq.issue();
        if let Err(e) = post(ctrl, &guard, tag, checked, pack_cookie(self.index, hwq, token)) {
            self.not_posted(hw, tag, token, e);
        }
        Ok(())
    }

    /// Every request but a logical drive's one-segment read or write.
    #[inline(never)]
    fn queue_rq_general<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>) -> Result<(), QueueRqError<'a, Self>> {
        let op = match rq.op() {
            Op::Read => IoOp::Read,
            Op::Write => IoOp::Write,
            Op::Flush => IoOp::Flush,
            // No discard path in the LD I/O frames: the queue leaves max_discard_sectors at 0,
            // so blk refuses a discard before it gets here; a stray one is not supported.
            Op::Driver(_) | Op::Discard => return Err(QueueRqError::Io(rq, Status::NotSupported)),
        };
        let segs = rq.segments();
        if segs.len() > MAX_SEGMENTS {
            return Err(QueueRqError::Io(rq, Status::NotSupported));
        }
        // The common single-segment I/O fills one entry, not a zeroed 32-entry array.
        let one: [Segment; 1];
        let mut many: [Segment; MAX_SEGMENTS];
        let sgl: &[Segment] = if let [s] = segs {
            one = [Segment {
                phys: s.phys,
                len: s.len,
            }];
            &one
        } else {
            many = [Segment { phys: 0, len: 0 }; MAX_SEGMENTS];
            for (d, s) in many.iter_mut().zip(segs) {
                *d = Segment {
                    phys: s.phys,
                    len: s.len,
                };
            }
            &many[..segs.len()]
        };
        let (lba, blocks, nsegs) = if op == IoOp::Flush {
            (0, 0, 0)
        } else {
            // A shift: block sizes are powers of two (`Capacity` refuses others), so `scale` is.
            (
                rq.sector() >> self.scale_shift,
                rq.nr_sectors() >> self.scale_shift,
                segs.len(),
            )
        };
        let req = IoRequest {
            system_pd: self.system_pd,
            op,
            target: self.target,
            lba,
            blocks,
            sgl: &sgl[..nsegs],
        };
        self.check_issue_post(
            hw,
            rq,
            |ctrl, guard| ctrl.check(guard, &req),
            |ctrl, guard, tag, checked, cookie| ctrl.submit_checked(guard, tag, &checked, cookie),
        )
    }

    /// A request that could not enter the submission critical section: back to the queue while
    /// a controller reset runs, failed when the controller is down.
    #[cold]
    fn not_entered<'a>(&self, rq: Rq<'a, Self>, e: Error) -> QueueRqError<'a, Self> {
        if e == Error::Resetting {
            self.core.requeued.fetch_add(1, Ordering::Relaxed);
            QueueRqError::DevBusy(rq)
        } else {
            QueueRqError::Io(rq, Status::IoError)
        }
    }

    /// A request the controller's check refused: logged and failed.
    #[cold]
    fn refuse<'a>(&self, rq: Rq<'a, Self>, e: Error) -> QueueRqError<'a, Self> {
        log::error!("megasas: target {}: request refused: {e}", self.target);
        QueueRqError::Io(rq, Status::IoError)
    }

    /// An issued request whose frame could not be posted (its tag was not free): failed.
    #[cold]
    fn not_posted(&self, hw: &HwCtx<'_, Self>, tag: u16, token: IssueToken, e: Error) {
        log::error!("megasas: target {} tag {tag}: not posted: {e}", self.target);
        let _ = hw.complete(token, Status::IoError);
    }
}

impl<M: Mmio + Send + Sync, D: Dma + Send + Sync, T: Delay + Send + Sync> Driver for DriveDriver<M, D, T> {
    type Pdu = ();

    fn queue_rq<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        // The common I/O, a logical drive's read or write of one segment, checked and posted
        // in this one function from registers; everything else out of line.
        // Relaxed: a hint for the next interrupt's choice; the load first leaves the line
        // shared while the transfer sizes do not change between small and large.
        let large = rq.nr_sectors() > self.core.polled_sectors_max;
        if self.core.large_submitted.load(Ordering::Relaxed) != large {
            self.core.large_submitted.store(large, Ordering::Relaxed);
        }
        let write = match rq.op() {
            Op::Read => false,
            Op::Write => true,
            _ => return self.queue_rq_general(hw, rq),
        };
        match (self.system_pd, rq.segments()) {
            (false, [s]) => {
                let io = LdIo {
                    write,
                    target: self.target,
                    // A shift: block sizes are powers of two (`Capacity` refuses others).
                    lba: rq.sector() >> self.scale_shift,
                    blocks: rq.nr_sectors() >> self.scale_shift,
                    segment: Segment {
                        phys: s.phys,
                        len: s.len,
                    },
                };
                self.queue_ld_io(hw, rq, io)
            }
            _ => self.queue_rq_general(hw, rq),
        }
    }

    fn timeout(&self, rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        let core = &self.core;
        core.timeouts.fetch_add(1, Ordering::Relaxed);
        if core.dead.load(Ordering::Relaxed) {
            // Out of service: the request stays the device's (see `abandon_after_bus_master_off`).
            return TimeoutAction::ResetTimer;
        }
        let tag = rq.tag() as u16;
        match core.ctrl.command_state(tag) {
            CommandState::Posted => match core.ctrl.abort(tag) {
                Ok(()) => log::warn!(
                    "megasas: target {} tag {tag} (sector {}) timed out; abort sent",
                    self.target,
                    rq.sector()
                ),
                // Another abort is pending, or the command completed meanwhile: try again at the
                // next timeout.
                Err(Error::AbortUnavailable | Error::NotAbortable { .. } | Error::Resetting) => {}
                Err(e) => {
                    log::error!("megasas: tag {tag}: cannot abort ({e}); resetting the controller");
                    core.ctrl.request_reset();
                }
            },
            CommandState::Aborting => {
                log::error!(
                    "megasas: target {} tag {tag}: abort not confirmed in time; resetting the controller",
                    self.target
                );
                core.ctrl.request_reset();
            }
            // Completing right now, or not yet posted: its completion is on the way.
            _ => {}
        }
        // The request stays the device's until its command completes, is aborted or the
        // controller is reset; each of those reports it through `Queue::complete`.
        TimeoutAction::ResetTimer
    }

    fn poll(&self, hw: &HwCtx<'_, Self>) -> usize {
        match self.host.upgrade() {
            Some(h) => h.reap(hw.cpu(), h.irq_budget).0 as usize,
            None => 0,
        }
    }
}
