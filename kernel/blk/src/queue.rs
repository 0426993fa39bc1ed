//! The multi-queue request queue: submission, dispatch, quiesce, freeze, completion, timeouts.
//!
//! # Structure
//! - One software queue per CPU: a lock-free stack ([`TagStack`]) of request indices that only
//!   that CPU pushes to and whoever runs the CPU's hardware queue takes from.
//! - One hardware-queue context per hardware queue: a pending bitmap (one bit per CPU whose
//!   software queue has work), a run token, and a FIFO of requests the driver turned away
//!   (`Busy`), guarded by the run token.
//! - One completion list per CPU, for the `Local` and `Remote` completion policies.
//!
//! # Concurrency (who may call what)
//! | call                          | context                         | concurrent with        |
//! |-------------------------------|---------------------------------|------------------------|
//! | `submit(cpu, ..)`             | CPU `cpu`, not re-entered on it | everything             |
//! | `complete(cpu, ..)`           | any, incl. interrupt            | everything             |
//! | `run_hw_queue`, `poll`, `tick`| any                             | everything             |
//! | `run_completions(cpu)`        | CPU `cpu` (IPI/softirq handler) | everything             |
//! | `quiesce`, `freeze_wait`      | thread context, not a driver callback | everything       |
//!
//! "CPU `cpu`" means: the caller is the only one submitting for that CPU index at a time (in
//! the kernel, the current CPU with preemption off; in host tests, the thread playing it).

use crate::counters::{CounterSnapshot, Counters, CpuCounters, Route, bump};
use crate::driver::{Driver, HwCtx, Platform, QueueRqError, Rq, TimedOutRq, TimeoutAction};
use crate::error::BlkError;
use crate::freeze::UsageCounter;
use crate::list::{Fifo, Links, TagStack};
use crate::map::{map_queues, validate_map};
use crate::request::{Bio, Completion, IssueToken, Op, SECTOR_SIZE, Slot, Status, state};
use crate::sleeplock::SleepLock;
use crate::split::{NO_PARENT, SplitTable, needs_split, split_bio};
use crate::sync::{
    AtomicBool, AtomicU32, AtomicU64, CachePadded, Ordering, SpinLock, fence, fence_after_rmw, spin_loop,
};
use crate::tags::{HostTags, MAX_DEPTH};
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::AtomicU8 as KnobU8;

/// Where a hardware completion is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CompletionPolicy {
    /// Finish directly in the context that reported it (the interrupt handler).
    Irq = 0,
    /// Defer to the reporting CPU's completion list; raise a local softirq when it was empty.
    Local = 1,
    /// Send to the submitting CPU's completion list; raise one IPI only when that list was
    /// empty (Linux's `blk_mq_complete_send_ipi`). Completions that arrive on the submitting
    /// CPU are finished directly.
    Remote = 2,
    /// Completions are reaped by [`Queue::poll`] and finished by the poller.
    Poll = 3,
}

impl CompletionPolicy {
    /// All policies, for benchmarks and tests.
    pub const ALL: [Self; 4] = [Self::Irq, Self::Local, Self::Remote, Self::Poll];

    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Irq,
            1 => Self::Local,
            2 => Self::Remote,
            _ => Self::Poll,
        }
    }
}

/// How `run_hw_queue` re-checks the quiesce state when its lockless check says "nothing to do".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum QuiesceCheck {
    /// A full fence and a second lockless check (the fixed Linux design: atomic quiesce depth,
    /// paired full barriers). Takes no lock.
    LockFree = 0,
    /// Take the queue-wide spinlock around the re-check, as Linux commit 679b1874eba7 did.
    /// Kept to measure what that costs; correct, but serialises every CPU that runs the queue
    /// with nothing to do (which is every completion, with `run_queue_on_completion`).
    Locked = 1,
    /// The same locked re-check, with the lock behaving as PREEMPT_RT's sleeping `spinlock_t`:
    /// a CPU that finds it taken parks ([`Platform::wait_for_wake`]) until the holder's unlock
    /// wakes it ([`Platform::wake`]), then pays [`QueueConfig::reschedule_cost_ns`] before it
    /// retries. Counters `lock_contended`, `lock_sleeps`, `lock_wakeups`. What this models and
    /// what it does not: see [`crate::sleeplock`].
    Sleeping = 2,
}

impl QuiesceCheck {
    /// All variants, for benchmarks and tests.
    pub const ALL: [Self; 3] = [Self::LockFree, Self::Locked, Self::Sleeping];

    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::LockFree,
            1 => Self::Locked,
            _ => Self::Sleeping,
        }
    }
}

/// Queue geometry and policies. Everything is sized here; nothing is allocated afterwards.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// Number of CPUs (software queues, completion lists).
    pub ncpus: usize,
    /// Number of hardware queues.
    pub nr_hw_queues: usize,
    /// Tags per tag set (with shared tags: in total; otherwise per hardware queue), at most
    /// 65536 (a tag has 16 bits in an [`IssueToken`]).
    pub queue_depth: u32,
    /// Tags `0..reserved_tags` of each tag set are kept for admin commands.
    pub reserved_tags: u32,
    /// One tag set shared by all hardware queues of this queue.
    pub shared_tags: bool,
    /// Allocate from this tag set, shared with other queues (one queue per logical drive of a
    /// controller; Linux's `host_tagset`). Implies `shared_tags`; `queue_depth` and
    /// `reserved_tags` must equal the set's.
    pub host_tags: Option<Arc<HostTags>>,
    /// Maximum scatter-gather segments per request. A read or write with more is split
    /// ([`crate::split`]).
    pub max_segments: usize,
    /// Maximum length of one request in 512-byte sectors (Linux's `max_hw_sectors`: the device's
    /// transfer limit, e.g. NVMe MDTS). A read or write that is longer is split into requests of
    /// at most this (rounded down to whole logical blocks). `u32::MAX`: no limit.
    pub max_hw_sectors: u32,
    /// Longest discard (trim) in 512-byte sectors one request may carry (Linux's
    /// `max_discard_sectors`: NVMe's Dataset Management range length). A longer discard is split
    /// into requests of at most this (rounded down to whole logical blocks). 0 (the default): the
    /// device has no discard command, and a discard is refused with
    /// [`BlkError::DiscardNotSupported`].
    pub max_discard_sectors: u32,
    /// Device capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Logical block size in bytes (a power of two, 512..=65536).
    pub logical_block_size: u32,
    /// Request timeout in ns from issue; 0 disables timeouts.
    pub timeout_ns: u64,
    /// Initial completion policy.
    pub completion: CompletionPolicy,
    /// Initial quiesce re-check variant.
    pub quiesce_check: QuiesceCheck,
    /// Run the hardware queue after every completion (what SCSI does, and where the locked
    /// re-check hurts). When false, the queue is rerun after a completion only if the driver
    /// had turned requests away.
    pub run_queue_on_completion: bool,
    /// Custom CPU to hardware-queue map, one entry per CPU; `None` uses [`map_queues`].
    pub cpu_map: Option<Vec<u16>>,
    /// [`QuiesceCheck::Sleeping`]: what a woken CPU pays (spinning on the platform clock)
    /// before it may retry the lock: the reschedule of a threaded interrupt handler.
    pub reschedule_cost_ns: u64,
}

impl QueueConfig {
    /// A config with defaults: no reserved tags, per-queue tags, 128 segments, 512-byte blocks,
    /// 30 s timeout, `Irq` completions, lock-free quiesce check, queue run on completion.
    pub fn new(ncpus: usize, nr_hw_queues: usize, queue_depth: u32, capacity_sectors: u64) -> Self {
        Self {
            ncpus,
            nr_hw_queues,
            queue_depth,
            reserved_tags: 0,
            shared_tags: false,
            host_tags: None,
            max_segments: 128,
            max_hw_sectors: u32::MAX,
            max_discard_sectors: 0,
            capacity_sectors,
            logical_block_size: SECTOR_SIZE,
            timeout_ns: 30_000_000_000,
            completion: CompletionPolicy::Irq,
            quiesce_check: QuiesceCheck::LockFree,
            run_queue_on_completion: true,
            cpu_map: None,
            reschedule_cost_ns: DEFAULT_RESCHEDULE_COST_NS,
        }
    }

    fn validate(&self) -> Result<(), BlkError> {
        fn bad(field: &'static str, value: u64, accepted: &'static str) -> BlkError {
            BlkError::InvalidConfig { field, value, accepted }
        }
        if self.ncpus == 0 || self.ncpus > usize::from(u16::MAX) {
            return Err(bad("ncpus", self.ncpus as u64, "1..=65535"));
        }
        if self.nr_hw_queues == 0 || self.nr_hw_queues > usize::from(u16::MAX) {
            return Err(bad("nr_hw_queues", self.nr_hw_queues as u64, "1..=65535"));
        }
        if self.queue_depth == 0 || self.queue_depth > MAX_DEPTH {
            return Err(bad("queue_depth", self.queue_depth.into(), "1..=65536"));
        }
        if self.reserved_tags >= self.queue_depth {
            return Err(bad(
                "reserved_tags",
                self.reserved_tags.into(),
                "less than queue_depth (at least one normal tag)",
            ));
        }
        if let Some(host) = &self.host_tags {
            if host.depth() != self.queue_depth {
                return Err(bad(
                    "queue_depth",
                    self.queue_depth.into(),
                    "the depth of the host tag set given in host_tags",
                ));
            }
            if host.reserved() != self.reserved_tags {
                return Err(bad(
                    "reserved_tags",
                    self.reserved_tags.into(),
                    "the reserved tags of the host tag set given in host_tags",
                ));
            }
        }
        let sets = if self.shared_tags || self.host_tags.is_some() {
            1
        } else {
            self.nr_hw_queues as u64
        };
        if sets * u64::from(self.queue_depth) >= 1 << 31 {
            return Err(bad(
                "queue_depth",
                self.queue_depth.into(),
                "nr_hw_queues * queue_depth below 2^31",
            ));
        }
        if self.max_segments == 0 || self.max_segments > usize::from(u16::MAX) {
            return Err(bad("max_segments", self.max_segments as u64, "1..=65535"));
        }
        let lbs = self.logical_block_size;
        if !lbs.is_power_of_two() || !(512..=65536).contains(&lbs) {
            return Err(bad(
                "logical_block_size",
                lbs.into(),
                "a power of two from 512 to 65536",
            ));
        }
        if self.capacity_sectors == 0 {
            return Err(bad("capacity_sectors", 0, "at least one logical block"));
        }
        if self.max_hw_sectors < lbs / SECTOR_SIZE {
            return Err(bad(
                "max_hw_sectors",
                self.max_hw_sectors.into(),
                "at least one logical block",
            ));
        }
        if self.max_discard_sectors != 0 && self.max_discard_sectors < lbs / SECTOR_SIZE {
            return Err(bad(
                "max_discard_sectors",
                self.max_discard_sectors.into(),
                "0 (no discard) or at least one logical block",
            ));
        }
        if let Some(map) = &self.cpu_map {
            validate_map(map, self.ncpus, self.nr_hw_queues)?;
        }
        Ok(())
    }
}

/// Default [`QueueConfig::reschedule_cost_ns`]: a few microseconds, the order of a context
/// switch plus wake-up latency of an RT thread on current x86 servers.
pub const DEFAULT_RESCHEDULE_COST_NS: u64 = 4_000;

/// Where a submitted request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted {
    /// Hardware queue.
    pub hwq: usize,
    /// Tag.
    pub tag: u32,
}

/// What [`Queue::submit_batch`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Bios submitted, from the first: they complete as usual.
    pub accepted: usize,
    /// Why bio number `accepted` was not (none after it was looked at); `None`: all were.
    pub error: Option<BlkError>,
}

/// Requests [`Queue::submit_batch`] prepares before it hands them to the hardware queue
/// together (one run-token round trip and one doorbell each).
pub const SUBMIT_BATCH_CHUNK: usize = 32;

/// The lookups a submission or a dispatch pass by CPU `cpu` on hardware queue `hwq` needs,
/// made once per call ([`Queue::run_context`]) and handed down, rather than indexed again
/// (each a bounds check) at every step of the path.
#[derive(Clone, Copy)]
struct RunContext<'q> {
    cpu: usize,
    hwq: usize,
    set: usize,
    host: &'q HostTags,
    counters: &'q CpuCounters,
    hq: &'q HwQueue,
    /// Stage tracing was on when the call began (read once per call; see [`Queue::stage`]).
    trace: bool,
}

/// How a request came to its end ([`Queue::end_request_in`]).
#[derive(Clone, Copy)]
pub(crate) struct Ending {
    /// It never went through completion routing (ended in `queue_rq`).
    pub(crate) inline: bool,
    /// The rerun check after it is someone else's (see `Queue::after_completion`).
    pub(crate) rerun_covered: bool,
}

/// What [`Queue::take_request`] made of a bio.
enum Taken {
    /// A request in slot `index` (tag `tag` of hardware queue `hwq`), state QUEUED.
    Request { hwq: usize, tag: u32, index: u32 },
    /// Longer than the device's limits: [`Queue::submit_split`] submits it.
    NeedsSplit,
}

/// The tag set of hardware queue `hwq`: the one set when tags are shared, else its own.
fn set_of_hwq(shared_tags: bool, hwq: u16) -> u16 {
    if shared_tags { 0 } else { hwq }
}

/// `run_state` bits of a hardware queue.
const RUNNING: u32 = 1;
const RERUN: u32 = 2;

/// One hardware-queue context (Linux's `blk_mq_hw_ctx`).
struct HwQueue {
    /// The run token: RUNNING while some CPU dispatches, RERUN when another asked for a run
    /// meanwhile.
    run_state: CachePadded<AtomicU32>,
    /// Bit per CPU: that CPU's software queue has work for this hardware queue (`ctx_map`).
    pending: Box<[CachePadded<AtomicU64>]>,
    /// The dispatch FIFO (requests turned away with `Busy`) is not empty.
    dispatch_nonempty: AtomicBool,
    /// Guarded by the run token.
    fifo: UnsafeCell<Fifo>,
}

// SAFETY: `fifo` is only accessed by the holder of `run_state`'s RUNNING bit, which is taken
// with Acquire and released with Release (see `Queue::dispatch`); everything else is atomic.
unsafe impl Sync for HwQueue {}

impl HwQueue {
    fn new(ncpus: usize) -> Self {
        let words: Vec<_> = (0..ncpus.div_ceil(64))
            .map(|_| CachePadded(AtomicU64::new(0)))
            .collect();
        Self {
            run_state: CachePadded(AtomicU32::new(0)),
            pending: words.into_boxed_slice(),
            dispatch_nonempty: AtomicBool::new(false),
            fifo: UnsafeCell::new(Fifo::new()),
        }
    }

    /// Relaxed loads: callers that need ordering put a fence before calling.
    fn has_pending(&self) -> bool {
        self.dispatch_nonempty.load(Ordering::Relaxed) || self.pending.iter().any(|w| w.load(Ordering::Relaxed) != 0)
    }
}

/// A multi-queue block device queue for driver `D`.
pub struct Queue<D: Driver> {
    driver: D,
    platform: Arc<dyn Platform>,
    ncpus: usize,
    depth: u32,
    shared_tags: bool,
    max_segments: usize,
    /// Longest request, in sectors, a whole number of blocks (`QueueConfig::max_hw_sectors`).
    max_hw_sectors: u32,
    /// Longest discard request, in sectors, a whole number of blocks; 0: no discard
    /// (`QueueConfig::max_discard_sectors`).
    max_discard_sectors: u32,
    /// Split bios in flight.
    splits: SplitTable,
    capacity_sectors: u64,
    block_sectors: u32,
    timeout_ns: u64,
    run_on_completion: bool,
    /// [`Platform::ends_by_cookie`], asked once: unsplit requests end without a [`Completion`].
    ends_by_cookie: bool,
    /// [`Platform::done_board`], asked once: unsplit requests end on it directly.
    done_board: Option<&'static crate::done::DoneBoard>,
    /// Hardware queues served by each tag set (all of them with shared tags).
    set_hwqs: Box<[Box<[u16]>]>,
    /// Some tag set serves more than one hardware queue (`shared_tags` with several): only
    /// then can a completion free a tag that another hardware queue waits for. Decided once,
    /// so that a completion on a queue without skips `after_completion`'s loop.
    set_spans_hwqs: bool,
    hwqs: Box<[HwQueue]>,
    sw_queues: Box<[CachePadded<TagStack>]>,
    done_lists: Box<[CachePadded<TagStack>]>,
    links: Links,
    slots: Box<[Slot<D::Pdu>]>,
    /// The tag sets: one per hardware queue, one for all (`shared_tags`), or the host-wide set
    /// shared with other queues. Each set's "tags freed" sequence lets a dispatcher that got
    /// `Busy` tell whether resources were freed while it was deciding to stop.
    tag_sets: Box<[Arc<HostTags>]>,
    /// Our sharer id in each tag set.
    sharer_ids: Box<[u32]>,
    /// The tag set is shared with other queues (`host_tags`).
    host_shared: bool,
    /// `submit_wait` calls of this queue currently waiting for a tag (fairness heuristic:
    /// orders nothing).
    tag_waiters: core::sync::atomic::AtomicU32,
    usage: UsageCounter,
    quiesce_depth: CachePadded<AtomicU32>,
    /// Taken on the hot path only by `QuiesceCheck::Locked` (spinning) and
    /// `QuiesceCheck::Sleeping` (sleeping); one lock, so the two exclude each other when the
    /// variant is switched live.
    queue_lock: CachePadded<SleepLock>,
    reschedule_cost_ns: core::sync::atomic::AtomicU64,
    freeze_depth: SpinLock<u32>,
    policy: KnobU8,
    check: KnobU8,
    /// Whether [`Platform::stage`] is called (stage tracing); one relaxed load per stage when off.
    stage_trace: core::sync::atomic::AtomicBool,
    /// Per CPU: 1 + the hardware queue whose doorbell that CPU's [`Queue::submit_deferred`]
    /// left for [`Queue::commit`], 0 for none. Only its own CPU touches it (task context, the
    /// kernel's interrupts off), so relaxed accesses suffice.
    deferred_commit: Box<[CachePadded<AtomicU32>]>,
    counters: Counters,
}

impl<D: Driver> Queue<D> {
    /// Builds a queue: validates `cfg`, preallocates every request, and lets the driver
    /// initialise each one.
    pub fn new(cfg: QueueConfig, driver: D, platform: Arc<dyn Platform>) -> Result<Self, BlkError> {
        cfg.validate()?;
        let ncpus = cfg.ncpus;
        let host_shared = cfg.host_tags.is_some();
        let shared_tags = cfg.shared_tags || host_shared;
        let nsets = if shared_tags { 1 } else { cfg.nr_hw_queues };
        let depth = cfg.queue_depth;
        let cpu_to_hwq = cfg
            .cpu_map
            .clone()
            .unwrap_or_else(|| map_queues(ncpus, cfg.nr_hw_queues));
        let mut slots = Vec::with_capacity(nsets * depth as usize);
        for set in 0..nsets {
            for tag in 0..depth {
                let mut pdu = D::Pdu::default();
                driver.init_request(set, tag, &mut pdu)?;
                slots.push(Slot::new(cfg.max_segments, tag, set as u16, pdu));
            }
        }
        let set_hwqs: Vec<Box<[u16]>> = (0..nsets)
            .map(|set| {
                if shared_tags {
                    (0..cfg.nr_hw_queues as u16).collect()
                } else {
                    Box::from([set as u16])
                }
            })
            .collect();
        let stacks =
            |n: usize| -> Box<[CachePadded<TagStack>]> { (0..n).map(|_| CachePadded(TagStack::new())).collect() };
        let tag_sets: Box<[Arc<HostTags>]> = match &cfg.host_tags {
            Some(host) => Box::from([host.clone()]),
            None => (0..nsets)
                .map(|_| Arc::new(HostTags::with_hints(depth, cfg.reserved_tags, ncpus)))
                .collect(),
        };
        // A CPU's route lives in its counters block (the CPU map is kept nowhere else), and its
        // tag hint starts where the set's own hints would: CPUs in different words.
        let counters = Counters::new(ncpus, |cpu| {
            // `cfg.validate()` checked the map: an entry per CPU, each a hardware queue.
            let hwq = cpu_to_hwq.get(cpu).copied().unwrap_or(0);
            let set = set_of_hwq(shared_tags, hwq);
            let first_hint = tag_sets.get(usize::from(set)).map_or(0, |s| s.tags().first_hint(cpu));
            (Route { hwq, set }, first_hint)
        });
        let mut sharer_ids = Vec::with_capacity(nsets);
        for set in tag_sets.iter() {
            match set.register(platform.clone()) {
                Ok(id) => sharer_ids.push(id),
                Err(e) => {
                    for (set, &id) in tag_sets.iter().zip(&sharer_ids) {
                        set.unregister(id);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Self {
            ends_by_cookie: platform.ends_by_cookie(),
            done_board: platform.done_board(),
            platform,
            ncpus,
            depth,
            shared_tags,
            max_segments: cfg.max_segments,
            max_hw_sectors: {
                let block = cfg.logical_block_size / SECTOR_SIZE;
                cfg.max_hw_sectors / block * block
            },
            max_discard_sectors: {
                let block = cfg.logical_block_size / SECTOR_SIZE;
                cfg.max_discard_sectors / block * block
            },
            // Every split bio holds at least two requests.
            splits: SplitTable::new((nsets as u32 * depth).div_ceil(2), ncpus),
            capacity_sectors: cfg.capacity_sectors,
            block_sectors: cfg.logical_block_size / SECTOR_SIZE,
            timeout_ns: cfg.timeout_ns,
            run_on_completion: cfg.run_queue_on_completion,
            set_spans_hwqs: set_hwqs.iter().any(|hwqs| hwqs.len() > 1),
            set_hwqs: set_hwqs.into_boxed_slice(),
            hwqs: (0..cfg.nr_hw_queues).map(|_| HwQueue::new(ncpus)).collect(),
            sw_queues: stacks(ncpus),
            done_lists: stacks(ncpus),
            links: Links::new(slots.len()),
            slots: slots.into_boxed_slice(),
            tag_sets,
            sharer_ids: sharer_ids.into_boxed_slice(),
            host_shared,
            tag_waiters: core::sync::atomic::AtomicU32::new(0),
            usage: UsageCounter::new(),
            quiesce_depth: CachePadded(AtomicU32::new(0)),
            queue_lock: CachePadded(SleepLock::new(ncpus)),
            reschedule_cost_ns: core::sync::atomic::AtomicU64::new(cfg.reschedule_cost_ns),
            freeze_depth: SpinLock::new(0),
            policy: KnobU8::new(cfg.completion as u8),
            check: KnobU8::new(cfg.quiesce_check as u8),
            stage_trace: core::sync::atomic::AtomicBool::new(false),
            deferred_commit: (0..ncpus).map(|_| CachePadded(AtomicU32::new(0))).collect(),
            counters,
            driver,
        })
    }

    // ---------------------------------------------------------------- accessors

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }
    /// The platform hooks.
    pub fn platform(&self) -> &dyn Platform {
        &*self.platform
    }
    /// Number of CPUs.
    pub fn ncpus(&self) -> usize {
        self.ncpus
    }
    /// Number of hardware queues.
    pub fn nr_hw_queues(&self) -> usize {
        self.hwqs.len()
    }
    /// Tags per tag set.
    pub fn queue_depth(&self) -> u32 {
        self.depth
    }
    /// Whether one tag set serves all hardware queues.
    pub fn shared_tags(&self) -> bool {
        self.shared_tags
    }
    /// The host-wide tag set this queue shares with others, if any.
    pub fn host_tags(&self) -> Option<&Arc<HostTags>> {
        self.host_shared.then(|| &self.tag_sets[0])
    }
    /// Capacity in 512-byte sectors.
    pub fn capacity_sectors(&self) -> u64 {
        self.capacity_sectors
    }
    /// Longest discard one request carries, in sectors; 0 when the device has no discard.
    pub fn max_discard_sectors(&self) -> u32 {
        self.max_discard_sectors
    }
    /// Logical block size in bytes.
    pub fn logical_block_size(&self) -> u32 {
        self.block_sectors * SECTOR_SIZE
    }
    /// Request timeout in ns (0: none).
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }
    /// The hardware queue serving `cpu`.
    pub fn cpu_to_hwq(&self, cpu: usize) -> Result<usize, BlkError> {
        self.check_cpu(cpu)?;
        Ok(usize::from(self.counters.route(cpu).hwq))
    }
    /// The current completion policy.
    pub fn completion_policy(&self) -> CompletionPolicy {
        CompletionPolicy::from_u8(self.policy.load(core::sync::atomic::Ordering::Relaxed))
    }
    /// Switches the completion policy; requests already completing keep the old one.
    pub fn set_completion_policy(&self, p: CompletionPolicy) {
        self.policy.store(p as u8, core::sync::atomic::Ordering::Relaxed);
    }
    /// The current quiesce re-check variant.
    pub fn quiesce_check(&self) -> QuiesceCheck {
        QuiesceCheck::from_u8(self.check.load(core::sync::atomic::Ordering::Relaxed))
    }
    /// Switches the quiesce re-check variant. The variants are correct against each other
    /// (quiesce and unquiesce always fence, and take the lock too), so this may be done live.
    /// Switches stage tracing ([`Platform::stage`] calls) on or off.
    pub fn set_stage_trace(&self, on: bool) {
        self.stage_trace.store(on, core::sync::atomic::Ordering::Relaxed);
    }

    /// Reports `stage` for request `index` to the platform when stage tracing is on.
    #[inline(always)]
    pub(crate) fn stage(&self, cpu: usize, index: u32, stage: crate::driver::Stage) {
        // Relaxed: a switch that takes a moment to be seen costs a few unrecorded stages.
        self.stage_if(
            self.stage_trace.load(core::sync::atomic::Ordering::Relaxed),
            cpu,
            index,
            stage,
        );
    }

    /// [`Queue::stage`] with the switch read by the caller (once per call, `RunContext::trace`).
    #[inline(always)]
    fn stage_if(&self, tracing: bool, cpu: usize, index: u32, stage: crate::driver::Stage) {
        if tracing {
            self.platform.stage(cpu, index, stage);
        }
    }

    pub fn set_quiesce_check(&self, c: QuiesceCheck) {
        self.check.store(c as u8, core::sync::atomic::Ordering::Relaxed);
    }
    /// [`QuiesceCheck::Sleeping`]'s reschedule cost in ns.
    pub fn reschedule_cost_ns(&self) -> u64 {
        self.reschedule_cost_ns.load(core::sync::atomic::Ordering::Relaxed)
    }
    /// Sets [`QuiesceCheck::Sleeping`]'s reschedule cost.
    pub fn set_reschedule_cost_ns(&self, ns: u64) {
        self.reschedule_cost_ns.store(ns, core::sync::atomic::Ordering::Relaxed);
    }

    /// Takes the queue lock the way the current variant does (`cpu`: the acquiring CPU, or
    /// `None` on a cold path with no CPU, which always spins).
    fn lock_queue(&self, cpu: Option<usize>) -> QueueLockGuard<'_> {
        match (self.quiesce_check(), cpu) {
            (QuiesceCheck::Sleeping, Some(cpu)) => {
                let a = self
                    .queue_lock
                    .lock_sleeping(cpu, &*self.platform, self.reschedule_cost_ns());
                let counters = self.counters.cpu(cpu);
                if !a.uncontended {
                    bump(&counters.lock_contended);
                }
                counters
                    .lock_sleeps
                    .fetch_add(u64::from(a.sleeps), core::sync::atomic::Ordering::Relaxed);
            }
            (check, cpu) => {
                let free = self.queue_lock.lock_spinning();
                // The lab compares contention of the spinning and the sleeping lock.
                if let (false, QuiesceCheck::Locked, Some(cpu)) = (free, check, cpu) {
                    bump(&self.counters.cpu(cpu).lock_contended);
                }
            }
        }
        QueueLockGuard {
            lock: &self.queue_lock,
            platform: &*self.platform,
            counters: &self.counters,
            cpu: cpu.unwrap_or(0),
        }
    }
    /// A snapshot of the counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }
    /// Requests inside the queue (submitted and not yet finished; racy snapshot).
    pub fn in_flight(&self) -> usize {
        self.usage.in_flight(self.counters.usage_counts())
    }
    /// Tags allocated over this queue's tag sets (racy snapshot). With `host_tags` this counts
    /// the tags of every queue sharing the set.
    pub fn tags_in_use(&self) -> u32 {
        self.tag_sets.iter().map(|s| s.in_use()).sum()
    }

    /// CPU `cpu`'s counters (for the paths that enter the queue through a handle).
    #[inline(always)]
    pub(crate) fn cpu_counters(&self, cpu: usize) -> &CpuCounters {
        self.counters.cpu(cpu)
    }

    pub(crate) fn slot(&self, index: u32) -> &Slot<D::Pdu> {
        &self.slots[index as usize]
    }

    fn check_cpu(&self, cpu: usize) -> Result<(), BlkError> {
        if cpu >= self.ncpus {
            return Err(BlkError::CpuOutOfRange { cpu, ncpus: self.ncpus });
        }
        Ok(())
    }

    fn check_hwq(&self, hwq: usize) -> Result<(), BlkError> {
        if hwq >= self.hwqs.len() {
            return Err(BlkError::HwQueueOutOfRange {
                hwq,
                nr_hw_queues: self.hwqs.len(),
            });
        }
        Ok(())
    }

    /// Our sharer id in tag set `set` when other queues share it (`host_tags`): only then can a
    /// free have another queue to kick.
    #[inline(always)]
    fn sharer_of(&self, set: usize) -> Option<u32> {
        self.host_shared.then(|| self.sharer_ids[set])
    }

    fn set_of(&self, hwq: usize) -> usize {
        usize::from(set_of_hwq(self.shared_tags, hwq as u16))
    }

    fn quiesced(&self) -> bool {
        self.quiesce_depth.load(Ordering::Relaxed) > 0
    }

    // ---------------------------------------------------------------- submission

    /// Checks a bio before it takes a tag, and says whether it must be split (`Ok(true)`).
    /// Inlined: it runs once per I/O. The common I/O, a read or write of one segment
    /// within the transfer limit, passes with one branch; anything else, and every failure,
    /// goes through the full checks, which name what is wrong.
    #[inline(always)]
    fn check_bio(&self, bio: &Bio<'_>) -> Result<bool, BlkError> {
        if let [only] = bio.segments
            && matches!(bio.op, Op::Read | Op::Write)
            && self.plain_io_ok(bio.sector, bio.nr_sectors, only.len)
        {
            return Ok(false);
        }
        self.check_bio_in_full(bio)
    }

    /// What [`Queue::validate_range`] checks, for a read or write of one segment of
    /// `segment_len` bytes, plus "no split needed", as one boolean: not empty, aligned to the
    /// block size, inside the device, the segment as long as the range, and no longer than the
    /// transfer limit (one segment is within any segment limit, which is at least 1). The
    /// conditions are combined with `&`, not `&&`, so that they cost no branch each.
    #[inline(always)]
    fn plain_io_ok(&self, sector: u64, nr_sectors: u32, segment_len: u32) -> bool {
        let n = u64::from(nr_sectors);
        // `validate` made the block size a power of two.
        let misaligned = (sector | n) & u64::from(self.block_sectors - 1);
        // No overflow: past the end, the room is 0 and `n` is not.
        let room = self.capacity_sectors.saturating_sub(sector);
        // `1 <= nr_sectors <= max_hw_sectors` as one compare: 0 wraps to the largest u32.
        (nr_sectors.wrapping_sub(1) < self.max_hw_sectors)
            & (misaligned == 0)
            & (n <= room)
            & (u64::from(segment_len) == n * u64::from(SECTOR_SIZE))
    }

    /// [`Queue::check_bio`]'s full checks, with the error that names the first failure, and
    /// the split decision.
    #[inline(never)]
    fn check_bio_in_full(&self, bio: &Bio<'_>) -> Result<bool, BlkError> {
        self.validate_bio_in_full(bio)?;
        Ok(match bio.op {
            Op::Read | Op::Write => needs_split(
                bio.nr_sectors,
                bio.segments.len(),
                self.max_hw_sectors,
                self.max_segments,
            ),
            Op::Discard => bio.nr_sectors > self.max_discard_sectors,
            Op::Flush | Op::Driver(_) => false,
        })
    }

    /// Every check of a bio, with the error that names the first failure.
    fn validate_bio_in_full(&self, bio: &Bio<'_>) -> Result<(), BlkError> {
        // Reads and writes with more segments are split; other requests cannot be.
        if bio.segments.len() > self.max_segments && !matches!(bio.op, Op::Read | Op::Write) {
            return Err(BlkError::TooManySegments {
                count: bio.segments.len(),
                max: self.max_segments,
            });
        }
        let segment_bytes: u64 = match bio.segments {
            // The common single-segment I/O: no loop.
            [only] => u64::from(only.len),
            all => all.iter().map(|s| u64::from(s.len)).sum(),
        };
        match bio.op {
            Op::Read | Op::Write => self.validate_range(bio, segment_bytes)?,
            Op::Discard => self.validate_discard(bio)?,
            Op::Flush => {
                if bio.nr_sectors != 0 {
                    return Err(BlkError::FlushWithData {
                        nr_sectors: bio.nr_sectors,
                    });
                }
                if segment_bytes != 0 {
                    return Err(BlkError::SegmentLengthMismatch {
                        segment_bytes,
                        io_bytes: 0,
                    });
                }
            }
            Op::Driver(_) => {}
        }
        Ok(())
    }

    /// The range checks of a read, write or discard: not empty, inside the device, aligned to its
    /// block size, and (with data) the segments as long as the range.
    #[inline(always)]
    fn validate_range(&self, bio: &Bio<'_>, segment_bytes: u64) -> Result<(), BlkError> {
        if bio.nr_sectors == 0 {
            return Err(BlkError::EmptyIo);
        }
        let end = bio.sector.checked_add(u64::from(bio.nr_sectors));
        if end.is_none_or(|end| end > self.capacity_sectors) {
            return Err(BlkError::BeyondEnd {
                sector: bio.sector,
                nr_sectors: bio.nr_sectors,
                capacity: self.capacity_sectors,
            });
        }
        let bs = self.block_sectors;
        // `validate` made the block size a power of two: a mask, not two divisions.
        let mask = bs - 1;
        if bio.sector & u64::from(mask) != 0 || bio.nr_sectors & mask != 0 {
            return Err(BlkError::Misaligned {
                sector: bio.sector,
                nr_sectors: bio.nr_sectors,
                block_sectors: bs,
            });
        }
        let io_bytes = u64::from(bio.nr_sectors) * u64::from(SECTOR_SIZE);
        if !bio.segments.is_empty() && segment_bytes != io_bytes {
            return Err(BlkError::SegmentLengthMismatch {
                segment_bytes,
                io_bytes,
            });
        }
        Ok(())
    }

    /// A discard: a device that supports it, no data, and a valid range. Off the read/write path.
    #[cold]
    fn validate_discard(&self, bio: &Bio<'_>) -> Result<(), BlkError> {
        if self.max_discard_sectors == 0 {
            return Err(BlkError::DiscardNotSupported);
        }
        if !bio.segments.is_empty() {
            return Err(BlkError::DiscardWithData {
                segments: bio.segments.len(),
            });
        }
        self.validate_range(bio, 0)
    }

    /// Submits `bio` from CPU `cpu`: validates it, takes a tag, queues it on the CPU's software
    /// queue and runs the CPU's hardware queue. Never waits: with no free tag it fails with
    /// [`BlkError::TagsExhausted`] (see [`Queue::submit_wait`]).
    #[inline(always)]
    pub fn submit(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        self.submit_with(cpu, bio, false)
    }

    /// [`Queue::submit`] for a burst (Linux's plug): when the request goes straight to the
    /// driver, a driver that batches its doorbell ([`Driver::DEFERS_DOORBELL`], NVMe) may leave
    /// it unrung; [`Queue::commit`] rings it. One doorbell write per burst instead of one per
    /// request. The caller must call [`Queue::commit`] on the same CPU before it
    /// waits for any of the burst's completions; until then the device may not have seen them.
    #[inline(always)]
    pub fn submit_deferred(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        self.submit_with(cpu, bio, D::DEFERS_DOORBELL)
    }

    /// Rings the doorbell that CPU `cpu`'s [`Queue::submit_deferred`] calls left unrung, if any.
    #[inline]
    pub fn commit(&self, cpu: usize) {
        if !D::DEFERS_DOORBELL || cpu >= self.ncpus {
            return;
        }
        let pending = self.deferred_commit[cpu].load(Ordering::Relaxed);
        if pending != 0 {
            self.deferred_commit[cpu].store(0, Ordering::Relaxed);
            self.commit_hwq(cpu, pending as usize - 1);
        }
    }

    fn commit_hwq(&self, cpu: usize, hwq: usize) {
        bump(&self.counters.cpu(cpu).commits);
        let ctx = HwCtx {
            queue: self,
            hwq: hwq as u16,
            cpu: cpu as u16,
        };
        self.driver.commit_rqs(&ctx);
    }

    /// Notes that CPU `cpu` left hardware queue `hwq`'s doorbell for [`Queue::commit`]. A CPU's
    /// submissions all go to its own hardware queue; should another one be pending (a changed
    /// map), it is rung now.
    #[inline(always)]
    fn defer_commit(&self, cpu: usize, hwq: usize) {
        let mark = &self.deferred_commit[cpu];
        let before = mark.load(Ordering::Relaxed);
        if before as usize == hwq + 1 {
            // Every request of a burst after the first: already noted.
            return;
        }
        if before != 0 {
            self.commit_hwq(cpu, before as usize - 1);
        }
        mark.store(hwq as u32 + 1, Ordering::Relaxed);
    }

    #[inline(always)]
    fn submit_with(&self, cpu: usize, bio: &Bio<'_>, defer: bool) -> Result<Submitted, BlkError> {
        let at = self.submit_context(cpu)?;
        match self.take_request(&at, bio)? {
            Taken::NeedsSplit => self.submit_split(cpu, bio),
            Taken::Request { hwq, tag, index } => {
                self.queue_or_issue(&at, core::slice::from_ref(&index), defer);
                Ok(Submitted { hwq, tag })
            }
        }
    }

    /// Submits `bios` in order from CPU `cpu` as one burst (Linux's plug flushed through
    /// `queue_rqs`): the requests are prepared one by one, then handed to the hardware queue
    /// together, with one run-token round trip and one doorbell for up to
    /// [`SUBMIT_BATCH_CHUNK`] of them instead of one each. Never waits.
    ///
    /// It stops at the first bio it cannot take (no free tag, an invalid bio, a frozen queue):
    /// [`BatchOutcome::accepted`] bios before it were submitted (and will complete as usual),
    /// [`BatchOutcome::error`] says why that one was not, and the bios after it were not
    /// looked at. A bio longer than the device's limits is split, as by [`Queue::submit`].
    pub fn submit_batch(&self, cpu: usize, bios: &[Bio<'_>]) -> BatchOutcome {
        // Every request of a CPU goes to that CPU's hardware queue.
        let at = match self.submit_context(cpu) {
            Ok(at) => at,
            Err(error) => {
                return BatchOutcome {
                    accepted: 0,
                    error: Some(error),
                };
            }
        };
        let mut chunk = [0u32; SUBMIT_BATCH_CHUNK];
        let mut taken = 0;
        for (position, bio) in bios.iter().enumerate() {
            if taken == SUBMIT_BATCH_CHUNK {
                self.queue_or_issue(&at, &chunk, false);
                taken = 0;
            }
            let outcome = match self.take_request(&at, bio) {
                Ok(Taken::Request { index, .. }) => {
                    chunk[taken] = index;
                    taken += 1;
                    continue;
                }
                Ok(Taken::NeedsSplit) => {
                    // What was taken before it goes first.
                    self.queue_or_issue(&at, &chunk[..taken], false);
                    taken = 0;
                    self.submit_split(cpu, bio)
                }
                Err(error) => Err(error),
            };
            if let Err(error) = outcome {
                self.queue_or_issue(&at, &chunk[..taken], false);
                return BatchOutcome {
                    accepted: position,
                    error: Some(error),
                };
            }
        }
        self.queue_or_issue(&at, &chunk[..taken], false);
        BatchOutcome {
            accepted: bios.len(),
            error: None,
        }
    }

    /// What every submission from CPU `cpu` needs, looked up once per call (once per batch
    /// for [`Queue::submit_batch`]). The CPU map has one entry per CPU, so looking `cpu` up
    /// in it is the CPU check ([`BlkError::CpuOutOfRange`]).
    #[inline(always)]
    fn submit_context(&self, cpu: usize) -> Result<RunContext<'_>, BlkError> {
        // The CPU's counters block holds its route: one bounds check is the CPU check and the
        // map lookup.
        let Some(counters) = self.counters.cpu_checked(cpu) else {
            return Err(BlkError::CpuOutOfRange { cpu, ncpus: self.ncpus });
        };
        let Route { hwq, set } = counters.route;
        let (hwq, set) = (usize::from(hwq), usize::from(set));
        Ok(RunContext {
            cpu,
            hwq,
            set,
            host: &self.tag_sets[set],
            counters,
            hq: &self.hwqs[hwq],
            trace: self.stage_trace.load(core::sync::atomic::Ordering::Relaxed),
        })
    }

    /// What a submission or a dispatch pass by CPU `cpu` on hardware queue `hwq` needs. Both
    /// are checked.
    #[inline(always)]
    fn run_context(&self, cpu: usize, hwq: usize) -> RunContext<'_> {
        let set = self.set_of(hwq);
        RunContext {
            cpu,
            hwq,
            set,
            host: &self.tag_sets[set],
            counters: self.counters.cpu(cpu),
            hq: &self.hwqs[hwq],
            trace: self.stage_trace.load(core::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Validates `bio`, takes its tag and fills its slot (state QUEUED), ready for
    /// [`Queue::queue_or_issue`]; or says that it must be split first.
    #[inline(always)]
    fn take_request(&self, at: &RunContext<'_>, bio: &Bio<'_>) -> Result<Taken, BlkError> {
        let RunContext {
            cpu,
            hwq,
            set,
            host,
            counters,
            ..
        } = *at;
        match self.check_bio(bio) {
            Ok(false) => {}
            Ok(true) => return Ok(Taken::NeedsSplit),
            Err(e) => {
                bump(&counters.rejected);
                return Err(e);
            }
        }
        if !self.usage.try_enter(&counters.usage) {
            bump(&counters.rejected);
            return Err(BlkError::Frozen);
        }
        let tags = host.tags();
        // With tags shared across queues, leave freed tags to a starving queue once we hold our
        // share (`usage` counts our requests, `- 1`: not this one).
        let yield_to_waiter = self.host_shared
            && !bio.reserved_tag
            && host.over_fair_share(
                // Summed over the CPUs only when another queue waits for tags.
                || self.usage.in_flight(self.counters.usage_counts()).saturating_sub(1),
                self.tag_waiters.load(core::sync::atomic::Ordering::Relaxed) != 0,
            );
        let tag = if yield_to_waiter {
            None
        } else {
            tags.alloc_hinted(cpu, &counters.tag_hint, bio.reserved_tag)
        };
        let Some(tag) = tag else {
            self.usage.exit(&counters.usage);
            return Err(BlkError::TagsExhausted {
                hwq,
                pool: tags.pool_size(bio.reserved_tag),
                reserved: bio.reserved_tag,
            });
        };
        let index = set as u32 * self.depth + tag;
        let slot = self.slot(index);
        {
            // SAFETY: `alloc` gave us the tag, so the slot is FREE and ours alone until we
            // publish it by pushing it onto the software queue (Release).
            let d = unsafe { slot.data_mut() };
            d.op = bio.op;
            d.sector = bio.sector;
            d.nr_sectors = bio.nr_sectors;
            d.cookie = bio.cookie;
            d.submit_cpu = cpu as u16;
            d.hwq = hwq as u16;
            d.parent = NO_PARENT;
            d.nr_segments = bio.segments.len() as u16;
            if let [only] = bio.segments {
                // The common single-segment I/O: one store, not a call to `memcpy`.
                d.segments[0] = *only;
            } else {
                d.segments[..bio.segments.len()].copy_from_slice(bio.segments);
            }
        }
        // No deadline is reset here: it is read only while the request is ISSUED, and `issue`
        // stores it before that.
        slot.set_status(Status::Ok);
        slot.set_state(state::QUEUED);
        bump(&counters.submitted);
        self.stage_if(at.trace, cpu, index, crate::driver::Stage::Submit);
        Ok(Taken::Request { hwq, tag, index })
    }

    /// Submits a read or write that exceeds the transfer or segment limit, or a discard longer
    /// than the discard limit, as several requests
    /// ([`crate::split`]). It takes every part's tag first, so it either queues all parts or none
    /// (`TagsExhausted`, to be retried like any submission); the bio ends once, when its last part
    /// has ended, with the first error.
    #[cold]
    fn submit_split(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        let Route { hwq, set } = self.counters.route(cpu);
        let (hwq, set) = (usize::from(hwq), usize::from(set));
        let tags = self.tag_sets[set].tags();
        // A discard has no segments: only its own length limit cuts it.
        let max_sectors = if bio.op == Op::Discard {
            self.max_discard_sectors
        } else {
            self.max_hw_sectors
        };
        let Some(count) = split_bio(
            bio.sector,
            bio.nr_sectors,
            bio.segments,
            max_sectors,
            self.max_segments,
            self.block_sectors,
            |_, _, _| {},
        ) else {
            // Segments too small for the device's limit to hold a whole block.
            bump(&self.counters.cpu(cpu).rejected);
            return Err(BlkError::TooManySegments {
                count: bio.segments.len(),
                max: self.max_segments,
            });
        };
        let exhausted = || BlkError::TagsExhausted {
            hwq,
            pool: tags.pool_size(false),
            reserved: false,
        };
        if count > tags.pool_size(false) {
            bump(&self.counters.cpu(cpu).rejected);
            return Err(BlkError::TooManySegments {
                count: count as usize,
                max: tags.pool_size(false) as usize,
            });
        }
        let Some(parent) = self
            .splits
            .begin(cpu, count, bio.cookie, bio.sector, bio.nr_sectors, bio.op)
        else {
            return Err(exhausted());
        };
        // All tags first: a bio half submitted could neither be retried nor ended.
        let mut taken: Vec<u32> = Vec::with_capacity(count as usize);
        while taken.len() < count as usize {
            let tag = if self.usage.try_enter(&self.counters.cpu(cpu).usage) {
                let tag = tags.alloc(cpu, false);
                if tag.is_none() {
                    self.usage.exit(&self.counters.cpu(cpu).usage);
                }
                tag.ok_or_else(exhausted)
            } else {
                Err(BlkError::Frozen)
            };
            match tag {
                Ok(tag) => taken.push(tag),
                Err(error) => {
                    for &tag in &taken {
                        self.tag_sets[set].free(cpu, tag, self.sharer_of(set));
                        self.usage.exit(&self.counters.cpu(cpu).usage);
                    }
                    self.splits.cancel(cpu, parent);
                    if error == BlkError::Frozen {
                        bump(&self.counters.cpu(cpu).rejected);
                    }
                    return Err(error);
                }
            }
        }
        let mut next = 0;
        let at = self.run_context(cpu, hwq);
        split_bio(
            bio.sector,
            bio.nr_sectors,
            bio.segments,
            max_sectors,
            self.max_segments,
            self.block_sectors,
            |sector, nr_sectors, segments| {
                let index = set as u32 * self.depth + taken[next];
                next += 1;
                let slot = self.slot(index);
                {
                    // SAFETY: `alloc` gave us the tag, so the slot is FREE and ours alone until
                    // `queue_or_issue` publishes it (Release).
                    let d = unsafe { slot.data_mut() };
                    d.op = bio.op;
                    d.sector = sector;
                    d.nr_sectors = nr_sectors;
                    d.cookie = bio.cookie;
                    d.submit_cpu = cpu as u16;
                    d.hwq = hwq as u16;
                    d.parent = parent;
                    d.nr_segments = segments.len() as u16;
                    d.segments[..segments.len()].copy_from_slice(segments);
                }
                // No deadline reset, as in `take_request`.
                slot.set_status(Status::Ok);
                slot.set_state(state::QUEUED);
                bump(&at.counters.submitted);
                self.stage_if(at.trace, cpu, index, crate::driver::Stage::Submit);
                self.queue_or_issue(&at, core::slice::from_ref(&index), false);
            },
        );
        bump(&self.counters.cpu(cpu).split_bios);
        Ok(Submitted { hwq, tag: taken[0] })
    }

    /// Like [`Queue::submit`], but when no tag is free it keeps helping the queue make progress
    /// (runs this CPU's completions, polls under `Poll`, reruns queues holding turned-away
    /// requests) and retries, for at most `timeout_ns`.
    ///
    /// With `host_tags`, a waiting queue is registered with the shared set, so that queues
    /// holding their fair share leave freed tags to it (no starvation by a busy sharer).
    pub fn submit_wait(&self, cpu: usize, bio: &Bio<'_>, timeout_ns: u64) -> Result<Submitted, BlkError> {
        let mut started: Option<u64> = None;
        let result = loop {
            match self.submit(cpu, bio) {
                Err(BlkError::TagsExhausted { .. }) => {
                    let now = self.platform.now_ns();
                    match started {
                        None => {
                            bump(&self.counters.cpu(cpu).tag_waits);
                            started = Some(now);
                            self.waiter_enter(cpu, bio);
                        }
                        Some(t0) if now.saturating_sub(t0) > timeout_ns => {
                            break Err(BlkError::WaitTimeout {
                                what: "a free tag",
                                in_flight: self.in_flight(),
                            });
                        }
                        Some(_) => {}
                    }
                    self.make_progress(cpu);
                    spin_loop();
                }
                other => break other,
            }
        };
        if started.is_some() {
            self.waiter_exit(cpu, bio);
        }
        result
    }

    fn waiter_enter(&self, cpu: usize, bio: &Bio<'_>) {
        let set = &self.tag_sets[usize::from(self.counters.route(cpu).set)];
        if self.host_shared
            && !bio.reserved_tag
            && self.tag_waiters.fetch_add(1, core::sync::atomic::Ordering::Relaxed) == 0
        {
            set.waiter_enter();
        }
    }

    fn waiter_exit(&self, cpu: usize, bio: &Bio<'_>) {
        let set = &self.tag_sets[usize::from(self.counters.route(cpu).set)];
        if self.host_shared
            && !bio.reserved_tag
            && self.tag_waiters.fetch_sub(1, core::sync::atomic::Ordering::Relaxed) == 1
        {
            set.waiter_exit();
        }
    }

    /// Hands new requests (`indices`, in order; one, or a burst of [`Queue::submit_batch`]) to
    /// hardware queue `hwq`. When nothing of this CPU's is waiting and no CPU is dispatching,
    /// it takes the run token and dispatches them directly (Linux's
    /// `blk_mq_try_issue_directly`), skipping the software-queue handoff (a push, a pending
    /// bit, and the dispatcher's two swaps). Otherwise it queues them and runs the queue.
    ///
    /// Order: this CPU's older requests are either on its software queue (then we take the
    /// slow path), or were taken by a dispatcher that has since released the token (they are
    /// dispatched or on the FIFO, ahead of us), since we got the token.
    ///
    /// `defer`: the direct dispatch may leave the doorbell to [`Queue::commit`]
    /// ([`Queue::submit_deferred`]); the queued path always rings it.
    #[inline(always)]
    fn queue_or_issue(&self, at: &RunContext<'_>, indices: &[u32], defer: bool) {
        if indices.is_empty() {
            return;
        }
        let (cpu, hwq, hq) = (at.cpu, at.hwq, at.hq);
        if self.sw_queues[cpu].is_empty()
            && !hq.dispatch_nonempty.load(Ordering::Relaxed)
            // Acquire pairs with the Release that freed the token (as in `dispatch`).
            && hq
                .run_state
                .compare_exchange(0, RUNNING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            if self.run_with_token(at, indices, defer) {
                // Quiesced: they wait on the FIFO. Re-check like an insert does, so that an
                // unquiesce racing with us is not missed.
                self.run_hw_queue(cpu, hwq);
            }
            return;
        }
        for &index in indices {
            self.insert(cpu, hwq, index);
        }
        self.run_hw_queue(cpu, hwq);
    }

    fn insert(&self, cpu: usize, hwq: usize, index: u32) {
        if self.sw_queues[cpu].push(index, &self.links) {
            // The software queue went from empty to non-empty: mark it pending. Release pairs
            // with the Acquire swap in `dispatch_once`. (The list push comes first: a
            // dispatcher clears the bit before taking the list, so no push is lost.)
            self.hwqs[hwq].pending[cpu / 64].fetch_or(1 << (cpu % 64), Ordering::Release);
        }
    }

    /// Runs this CPU's completions, polls (under `Poll`) and reruns queues that hold
    /// turned-away requests: what a CPU that waits for the queue should do meanwhile.
    pub fn make_progress(&self, cpu: usize) {
        if cpu >= self.ncpus {
            return;
        }
        self.run_completions(cpu);
        let poll = self.completion_policy() == CompletionPolicy::Poll;
        for hwq in 0..self.hwqs.len() {
            if poll {
                let _ = self.poll(cpu, hwq);
            }
            if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
                self.run_hw_queue(cpu, hwq);
            }
        }
    }

    // ---------------------------------------------------------------- dispatch

    /// Runs hardware queue `hwq` from CPU `cpu`: dispatches pending requests to the driver
    /// unless the queue is quiesced or another CPU is already dispatching (that CPU then runs
    /// again on our behalf).
    pub fn run_hw_queue(&self, cpu: usize, hwq: usize) {
        if hwq >= self.hwqs.len() || cpu >= self.ncpus {
            return;
        }
        if self.need_run(hwq) || self.recheck_need_run(cpu, hwq) {
            self.dispatch(cpu, hwq);
        }
    }

    fn need_run(&self, hwq: usize) -> bool {
        !self.quiesced() && self.hwqs[hwq].has_pending()
    }

    /// The slow re-check after the lockless check said "nothing to do", so that a run is never
    /// lost when `unquiesce` races with an insert (the store-buffer pattern: the inserter
    /// stores its pending bit then loads the depth; `unquiesce` stores the depth then loads the
    /// pending bits; each side needs a full barrier between its store and its load).
    fn recheck_need_run(&self, cpu: usize, hwq: usize) -> bool {
        match self.quiesce_check() {
            QuiesceCheck::LockFree => {
                // Pairs with the fence in `quiesce_nowait`/`unquiesce` (and in
                // `after_completion`): either we see their store or they see ours.
                fence(Ordering::SeqCst);
                self.need_run(hwq)
            }
            QuiesceCheck::Locked | QuiesceCheck::Sleeping => {
                let _guard = self.lock_queue(Some(cpu));
                bump(&self.counters.cpu(cpu).hot_path_locks);
                // `quiesce_nowait`/`unquiesce` change the depth under this lock, so under it
                // we see the latest depth (the regressing Linux design).
                self.need_run(hwq)
            }
        }
    }

    /// Takes the run token (or hands the run to its holder) and dispatches until no rerun is
    /// requested.
    fn dispatch(&self, cpu: usize, hwq: usize) {
        let at = self.run_context(cpu, hwq);
        let hq = at.hq;
        let mut s = hq.run_state.load(Ordering::Relaxed);
        loop {
            if s & RUNNING != 0 {
                // Someone is dispatching: ask it to go round once more. An RMW (not a plain
                // load) so that we act on the latest value; Release pairs with the Acquire
                // swap of the holder, which then sees our pending bit.
                match hq
                    .run_state
                    .compare_exchange_weak(s, s | RERUN, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    Err(now) => s = now,
                }
            } else {
                // Acquire pairs with the Release that freed the token: the previous holder's
                // FIFO updates are visible.
                match hq
                    .run_state
                    .compare_exchange_weak(s, RUNNING, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(now) => s = now,
                }
            }
        }
        self.run_with_token(&at, &[], false);
    }

    /// Dispatches while holding the run token, until no rerun is requested, then releases it.
    /// `direct`: requests to dispatch, in order, after whatever is already waiting (the
    /// direct-issue path; empty for none); if the queue turns out to be quiesced they are
    /// parked on the dispatch FIFO instead and `true` is returned: the caller must then
    /// re-check (`run_hw_queue`), as an insert would. `defer`: the pass that carries `direct`
    /// may leave the doorbell to [`Queue::commit`].
    #[inline(always)]
    fn run_with_token(&self, at: &RunContext<'_>, mut direct: &[u32], defer: bool) -> bool {
        let hq = at.hq;
        let mut parked = false;
        bump(&at.counters.queue_runs);
        loop {
            // Full fence; the access just before is an atomic RMW (the counter bump on the
            // first round, the RERUN swap below on later ones), hence `fence_after_rmw`. Pairs
            // with the fence in `quiesce_nowait`: either `quiesce` sees RUNNING and waits for
            // us, or we see the raised depth and dispatch nothing.
            fence_after_rmw();
            if !self.quiesced() {
                // Only the pass with this CPU's own requests defers: a rerun for others rings.
                let defer = defer && !direct.is_empty();
                self.dispatch_once(at, core::mem::take(&mut direct), defer);
            } else if !direct.is_empty() {
                // SAFETY: we hold the run token, which guards the FIFO.
                let fifo = unsafe { &mut *hq.fifo.get() };
                self.append_in_order(fifo, core::mem::take(&mut direct));
                hq.dispatch_nonempty.store(true, Ordering::Relaxed);
                parked = true;
            }
            // Release pairs with the Acquire that takes the token next.
            match hq
                .run_state
                .compare_exchange(RUNNING, 0, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return parked,
                Err(_) => {
                    // RERUN was set: consume it and go again. Acquire pairs with the
                    // requester's AcqRel CAS.
                    hq.run_state.swap(RUNNING, Ordering::AcqRel);
                }
            }
        }
    }

    /// One dispatch pass; the caller holds the run token. `direct` joins the end of the line,
    /// in order. `defer`: the last request goes with `last == false` and its doorbell is left
    /// to [`Queue::commit`] (a pass that is turned away rings at once, as always).
    #[inline(always)]
    fn dispatch_once(&self, at: &RunContext<'_>, direct: &[u32], defer: bool) {
        let hq = at.hq;
        // SAFETY: we hold the run token (RUNNING), which guards the FIFO.
        let fifo = unsafe { &mut *hq.fifo.get() };
        if !direct.is_empty() && fifo.is_empty() {
            // The direct-issue case: nothing waits on the FIFO, so the request goes to the
            // driver without the FIFO push and pop. `dispatch_nonempty` is false
            // already: it mirrors the FIFO whenever the token is free. Other CPUs' software
            // queues are not collected in this pass: a CPU that marked its queue pending then
            // runs the hardware queue, and finding the token taken it sets RERUN, so our
            // release fails and `run_with_token` makes a full pass for it.
            self.dispatch_direct(at, direct, defer);
            return;
        }
        // Collect software queues with work. Clear a CPU's bit before taking its list: a push
        // that finds the list non-empty relies on the bit being set or about to be taken.
        for (w, word) in hq.pending.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // Acquire pairs with the Release fetch_or in `insert`.
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                let c = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let chain = self.sw_queues[c].take_newest_first();
                fifo.append_newest_first(chain, &self.links);
            }
        }
        self.append_in_order(fifo, direct);
        if fifo.is_empty() {
            hq.dispatch_nonempty.store(false, Ordering::Relaxed);
            return;
        }
        let (gen_before, ctx) = self.pass_context(at);
        let counters = at.counters;
        let mut uncommitted = false;
        let mut turned_away = false;
        while let Some(index) = fifo.pop_front(&self.links) {
            let last = fifo.is_empty() && !defer;
            match self.dispatch_one(at, &ctx, index, last) {
                Dispatched::Queued => uncommitted = !last,
                Dispatched::Ended => {}
                Dispatched::TurnedAway => {
                    fifo.push_front(index, &self.links);
                    turned_away = true;
                    break;
                }
            }
        }
        if uncommitted {
            self.ring_or_defer(&ctx, counters, defer && !turned_away);
        }
        hq.dispatch_nonempty.store(!fifo.is_empty(), Ordering::Relaxed);
        if turned_away {
            self.after_turned_away(at.hwq, at.set, gen_before);
        }
    }

    /// [`Queue::dispatch_once`] for requests that have nothing ahead of them: no FIFO push and
    /// pop, and no `dispatch_nonempty` store unless the driver turns one away (then it and
    /// those after it wait on the FIFO, in order). The last of them goes with `last == true`
    /// unless `defer`, so a burst rings the doorbell once.
    #[inline(always)]
    fn dispatch_direct(&self, at: &RunContext<'_>, indices: &[u32], defer: bool) {
        if let [index] = *indices {
            // One request (every unbatched submission): no loop.
            self.dispatch_alone(at, index, defer);
            return;
        }
        let (gen_before, ctx) = self.pass_context(at);
        let counters = at.counters;
        let mut uncommitted = false;
        for (position, &index) in indices.iter().enumerate() {
            let last = position + 1 == indices.len() && !defer;
            match self.dispatch_one(at, &ctx, index, last) {
                Dispatched::Queued => uncommitted = !last,
                Dispatched::Ended => {}
                Dispatched::TurnedAway => {
                    let hq = at.hq;
                    // SAFETY: we hold the run token (RUNNING), which guards the FIFO.
                    let fifo = unsafe { &mut *hq.fifo.get() };
                    fifo.push_front(index, &self.links);
                    self.append_in_order(fifo, &indices[position + 1..]);
                    hq.dispatch_nonempty.store(true, Ordering::Relaxed);
                    if uncommitted {
                        // Turned away: what went before rings now, as in `dispatch_once`.
                        self.ring_or_defer(&ctx, counters, false);
                    }
                    self.after_turned_away(at.hwq, at.set, gen_before);
                    return;
                }
            }
        }
        if uncommitted {
            self.ring_or_defer(&ctx, counters, defer);
        }
    }

    /// [`Queue::dispatch_direct`] for one request.
    #[inline(always)]
    fn dispatch_alone(&self, at: &RunContext<'_>, index: u32, defer: bool) {
        let (gen_before, ctx) = self.pass_context(at);
        let counters = at.counters;
        match self.dispatch_one(at, &ctx, index, !defer) {
            Dispatched::Queued => {
                if defer {
                    self.ring_or_defer(&ctx, counters, true);
                }
            }
            Dispatched::Ended => {}
            Dispatched::TurnedAway => {
                let hq = at.hq;
                // SAFETY: we hold the run token (RUNNING), which guards the FIFO.
                let fifo = unsafe { &mut *hq.fifo.get() };
                fifo.push_front(index, &self.links);
                hq.dispatch_nonempty.store(true, Ordering::Relaxed);
                self.after_turned_away(at.hwq, at.set, gen_before);
            }
        }
    }

    /// Appends `indices` to the back of the dispatch FIFO in order (the caller holds the run
    /// token, which guards it).
    fn append_in_order(&self, fifo: &mut crate::list::Fifo, indices: &[u32]) {
        for &index in indices {
            self.links.set(index, crate::list::EMPTY);
            fifo.append_newest_first(index, &self.links);
        }
    }

    /// What a dispatch pass needs beyond `at`: its tag set's "freed" sequence before the pass
    /// (the restart protocol's snapshot) and the driver's context.
    #[inline(always)]
    fn pass_context(&self, at: &RunContext<'_>) -> (u32, HwCtx<'_, D>) {
        let gen_before = at.host.freed_seq();
        let ctx = HwCtx {
            queue: self,
            hwq: at.hwq as u16,
            cpu: at.cpu as u16,
        };
        (gen_before, ctx)
    }

    /// Hands request `index` (off the FIFO, or issued directly) to the driver.
    #[inline(always)]
    fn dispatch_one(&self, at: &RunContext<'_>, ctx: &HwCtx<'_, D>, index: u32, last: bool) -> Dispatched {
        let counters = at.counters;
        let (hwq, cpu) = (ctx.hwq, usize::from(ctx.cpu));
        let slot = self.slot(index);
        // SAFETY: the request came off our FIFO (or is issued directly by its submitter), so
        // the block layer owns it; we are the only context touching it until the driver gets
        // the handle.
        unsafe { slot.data_mut().hwq = hwq };
        slot.set_state(state::DRIVER);
        // SAFETY: state is DRIVER and this is the only handle.
        let rq = unsafe { Rq::new(self, slot, at.counters, index, ctx.cpu, false, true) };
        bump(&counters.dispatched);
        self.stage_if(at.trace, cpu, index, crate::driver::Stage::Dispatch);
        match self.driver.queue_rq(ctx, rq, last) {
            Ok(()) => {
                self.stage_if(at.trace, cpu, index, crate::driver::Stage::Doorbell);
                Dispatched::Queued
            }
            Err(QueueRqError::Busy(rq) | QueueRqError::DevBusy(rq)) => {
                // The handle the driver gives back is the one it got: the same slot.
                let given_back = rq.into_index();
                debug_assert_eq!(given_back, index);
                slot.set_state(state::QUEUED);
                bump(&counters.requeued);
                Dispatched::TurnedAway
            }
            Err(QueueRqError::Io(rq, status)) => {
                rq.end(if status.is_ok() { Status::IoError } else { status });
                Dispatched::Ended
            }
        }
    }

    /// After a pass whose last request went with `last == false`: leaves the doorbell to
    /// [`Queue::commit`] (`defer`) or rings it now.
    #[inline(always)]
    fn ring_or_defer(&self, ctx: &HwCtx<'_, D>, counters: &CpuCounters, defer: bool) {
        if defer {
            self.defer_commit(usize::from(ctx.cpu), usize::from(ctx.hwq));
        } else {
            bump(&counters.commits);
            self.driver.commit_rqs(ctx);
        }
    }

    /// A request was turned away and waits on the FIFO (`dispatch_nonempty` stored).
    #[cold]
    fn after_turned_away(&self, hwq: usize, set: usize, gen_before: u32) {
        // Restart protocol (Linux's SCHED_RESTART): we store "FIFO non-empty" (and, with
        // tags shared across queues, our restart bit) then load the tag set's "freed"
        // sequence; a completer bumps the sequence then loads "FIFO non-empty" and the
        // restart bits. Full fences on both sides (this one pairs with the one in
        // `HostTags::free`) mean that either it reruns (or kicks) us, or we see that
        // resources were freed meanwhile and go again ourselves.
        if self.host_shared {
            self.tag_sets[set].want_restart(self.sharer_ids[set]);
        }
        fence(Ordering::SeqCst);
        if self.tag_sets[set].freed_seq() != gen_before {
            self.hwqs[hwq].run_state.fetch_or(RERUN, Ordering::Relaxed);
        }
    }

    // ---------------------------------------------------------------- quiesce

    /// Raises the quiesce depth: no `queue_rq` starts until the matching [`Queue::unquiesce`].
    /// Does not wait for dispatches already running (see [`Queue::quiesce`]). Completions keep
    /// flowing.
    pub fn quiesce_nowait(&self) {
        if self.quiesce_check() != QuiesceCheck::LockFree {
            let _guard = self.lock_queue(None);
            self.quiesce_depth.fetch_add(1, Ordering::Relaxed);
        } else {
            self.quiesce_depth.fetch_add(1, Ordering::Relaxed);
        }
        // Pairs with the fences in `dispatch` and `recheck_need_run`.
        fence(Ordering::SeqCst);
    }

    /// Quiesces and waits until no CPU is inside the driver's `queue_rq` for this queue.
    /// Must not be called from a driver callback of this queue.
    pub fn quiesce(&self) {
        self.quiesce_nowait();
        for hq in self.hwqs.iter() {
            // Acquire pairs with the Release that frees the run token.
            while hq.run_state.load(Ordering::Acquire) & RUNNING != 0 {
                spin_loop();
            }
        }
    }

    /// Lowers the quiesce depth; at zero, runs every hardware queue so that requests inserted
    /// while quiesced are dispatched.
    pub fn unquiesce(&self, cpu: usize) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        let dec = |d: u32| d.checked_sub(1);
        let prev = if self.quiesce_check() != QuiesceCheck::LockFree {
            let _guard = self.lock_queue(Some(cpu));
            self.quiesce_depth
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, dec)
        } else {
            self.quiesce_depth
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, dec)
        };
        let prev = prev.map_err(|_| BlkError::NotQuiesced)?;
        if prev == 1 {
            // Pairs with the fence in `recheck_need_run`: an inserter that still saw us
            // quiesced has its pending bit visible to the loads below.
            fence(Ordering::SeqCst);
            for hwq in 0..self.hwqs.len() {
                if self.hwqs[hwq].has_pending() {
                    self.dispatch(cpu, hwq);
                }
            }
        }
        Ok(())
    }

    /// Whether the quiesce depth is above zero.
    pub fn is_quiesced(&self) -> bool {
        self.quiesced()
    }

    // ---------------------------------------------------------------- freeze

    /// Blocks new requests (`submit` fails with [`BlkError::Frozen`]); nests.
    pub fn freeze_start(&self) {
        let mut depth = self.freeze_depth.lock();
        if *depth == 0 {
            self.usage.set_frozen();
        }
        *depth += 1;
    }

    /// Waits, helping the queue along (as [`Queue::make_progress`]), until every request
    /// inside the queue has finished, for at most `timeout_ns`. Requires `freeze_start`.
    /// Requests cannot drain while the queue is quiesced.
    pub fn freeze_wait(&self, cpu: usize, timeout_ns: u64) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        let t0 = self.platform.now_ns();
        loop {
            if self.usage.is_drained(self.counters.usage_counts()) {
                return Ok(());
            }
            if !self.usage.is_frozen() {
                return Err(BlkError::NotFrozen);
            }
            self.make_progress(cpu);
            if self.platform.now_ns().saturating_sub(t0) > timeout_ns {
                return Err(BlkError::WaitTimeout {
                    what: "in-flight requests to drain (freeze)",
                    in_flight: self.usage.in_flight(self.counters.usage_counts()),
                });
            }
            spin_loop();
        }
    }

    /// `freeze_start` then `freeze_wait`. On timeout the queue stays frozen.
    pub fn freeze(&self, cpu: usize, timeout_ns: u64) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        self.freeze_start();
        self.freeze_wait(cpu, timeout_ns)
    }

    /// Drops one freeze level; at zero, admits requests again.
    pub fn unfreeze(&self) -> Result<(), BlkError> {
        let mut depth = self.freeze_depth.lock();
        if *depth == 0 {
            return Err(BlkError::NotFrozen);
        }
        *depth -= 1;
        if *depth == 0 {
            self.usage.clear_frozen();
        }
        Ok(())
    }

    /// Whether the queue is frozen.
    pub fn is_frozen(&self) -> bool {
        self.usage.is_frozen()
    }

    // ---------------------------------------------------------------- completion

    /// Reports that the hardware completed the issue `token` (from [`Rq::issue`]) on hardware
    /// queue `hwq`, on CPU `cpu` (typically from the interrupt handler). This is the only way
    /// a completion enters the block layer.
    ///
    /// The values come from the device, so they are validated and a refused completion changes
    /// nothing: an out-of-range tag is [`BlkError::TagOutOfRange`]; a token whose generation is
    /// not the slot's current one (an earlier issue of the tag: late after a timeout, or a
    /// stale context) is [`BlkError::StaleCompletion`], counted in `stale_completions`; a
    /// current-generation token whose request is no longer in flight (a double completion) is
    /// [`BlkError::NotInFlight`], counted in `spurious_completions`. Never blocks.
    pub fn complete(&self, cpu: usize, hwq: usize, token: IssueToken, status: Status) -> Result<(), BlkError> {
        self.claim_issue(cpu, hwq, token, Claim::Complete(status))
    }

    /// Opens a batch of completions reaped together on CPU `cpu` from hardware queue `hwq`
    /// (one interrupt's, or one poll's): each [`CompletionBatch::complete`] is
    /// [`Queue::complete`] without checking `cpu` and `hwq` again, and the queue's rerun check
    /// after a completion runs once, when the batch is dropped, instead of once per completion
    /// (with the lock-free re-check; the locked variants keep theirs per completion). Linux's
    /// completion batches end the same way (`blk_mq_end_request_batch`).
    ///
    /// An out-of-range `cpu` or `hwq` is refused here, as [`Queue::complete`] would refuse each
    /// completion.
    pub fn completion_batch(&self, cpu: usize, hwq: usize) -> Result<CompletionBatch<'_, D>, BlkError> {
        self.check_cpu(cpu)?;
        self.check_hwq(hwq)?;
        Ok(CompletionBatch {
            queue: self,
            cpu,
            hwq,
            // Under a locked variant each completion keeps its own check, and the batch owes
            // none (a variant switched meanwhile costs at most one check more).
            defers_check: self.quiesce_check() == QuiesceCheck::LockFree,
            check_owed: false,
        })
    }

    /// Takes an issued request back from the device and puts it in line to be dispatched (and
    /// issued, with a new generation) again, for example after a controller reset; the driver
    /// calls it only once the device has provably given up the tag (see [`TimeoutAction`]).
    /// Validated and refused exactly like [`Queue::complete`] (the two race through the same
    /// CAS: the first wins). While the request's timeout handler runs, the requeue is recorded
    /// and applied after it (unless the handler returns `Done`). Counted in `requeued`. May
    /// dispatch (call the driver's `queue_rq`) before it returns.
    pub fn requeue(&self, cpu: usize, hwq: usize, token: IssueToken) -> Result<(), BlkError> {
        self.claim_issue(cpu, hwq, token, Claim::Requeue)
    }

    /// Calls `f(hwq, token)` for every request issued to the device and not yet completed (the
    /// state at the moment each slot is looked at; requests may complete meanwhile, which
    /// `complete`/`requeue` then refuse). For a driver's controller reset: it completes or
    /// requeues each token. `hwq` is a hardware queue to pass back with the token (with shared
    /// tags, the first queue of the set; any queue of the set is accepted).
    pub fn for_each_issued(&self, mut f: impl FnMut(usize, IssueToken)) {
        for index in 0..self.slots.len() as u32 {
            // Acquire pairs with the Release store in `Rq::issue`.
            let w = self.slot(index).word.load(Ordering::Acquire);
            if matches!(state::of(w), state::ISSUED | state::TIMEOUT) {
                let set = (index / self.depth) as usize;
                let tag = index % self.depth;
                f(
                    usize::from(self.set_hwqs[set][0]),
                    IssueToken::new(tag, state::generation(w)),
                );
            }
        }
    }

    /// The claim behind `complete` and `requeue`: validates `token`, then moves its issue from
    /// ISSUED to COMPLETING/QUEUED by one CAS of the whole word (state + generation), or, while
    /// the timeout handler owns it, records the claim for the handler's context to apply.
    fn claim_issue(&self, cpu: usize, hwq: usize, token: IssueToken, claim: Claim) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        self.check_hwq(hwq)?;
        self.claim_checked(cpu, hwq, token, claim, false)
    }

    /// [`Queue::claim_issue`] for a checked `cpu` and `hwq`. `rerun_covered`: a completion's
    /// rerun check is left to the caller (a [`CompletionBatch`]; see `after_completion`).
    #[inline(always)]
    fn claim_checked(
        &self,
        cpu: usize,
        hwq: usize,
        token: IssueToken,
        claim: Claim,
        rerun_covered: bool,
    ) -> Result<(), BlkError> {
        let tag = token.tag();
        if tag >= self.depth {
            bump(&self.counters.cpu(cpu).spurious_completions);
            return Err(BlkError::TagOutOfRange { tag, depth: self.depth });
        }
        let generation = token.generation();
        let index = self.set_of(hwq) as u32 * self.depth + tag;
        let slot = self.slot(index);
        loop {
            // Acquire pairs with the Release store in `Rq::issue`.
            let w = slot.word.load(Ordering::Acquire);
            let current = state::generation(w);
            if current != generation {
                bump(&self.counters.cpu(cpu).stale_completions);
                return Err(BlkError::StaleCompletion {
                    tag,
                    generation,
                    current,
                });
            }
            // The CASes compare the whole word, generation included: they claim exactly the
            // issue the token names.
            match state::of(w) {
                state::ISSUED => {
                    let next = match claim {
                        Claim::Complete(_) => state::pack(generation, state::COMPLETING),
                        // The issue is over; its generation retires with it.
                        Claim::Requeue => state::pack(generation.wrapping_add(1), state::QUEUED),
                    };
                    if slot
                        .word
                        .compare_exchange(w, next, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        match claim {
                            Claim::Complete(status) => {
                                self.stage(cpu, index, crate::driver::Stage::DeviceComplete);
                                self.route_completion(cpu, slot, index, status, rerun_covered);
                            }
                            Claim::Requeue => self.requeue_owned(cpu, index),
                        }
                        return Ok(());
                    }
                }
                state::TIMEOUT => {
                    // The claim travels in the word itself, so the handler's context reads it
                    // with the state. Release pairs with the Acquire of the timeout path's
                    // failed CAS / swap.
                    let late = match claim {
                        Claim::Complete(status) => status as u8,
                        Claim::Requeue => state::LATE_REQUEUE,
                    };
                    if slot
                        .word
                        .compare_exchange(
                            w,
                            state::pack_late(generation, late),
                            Ordering::Release,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                    {
                        return Ok(());
                    }
                }
                other => {
                    bump(&self.counters.cpu(cpu).spurious_completions);
                    return Err(BlkError::NotInFlight {
                        hwq,
                        tag,
                        state: state::name(other),
                    });
                }
            }
        }
    }

    /// Puts an owned request (state QUEUED) back on its submitting CPU's software queue, on the
    /// hardware queue that CPU maps to (the one it was dispatched on), and runs that queue.
    fn requeue_owned(&self, cpu: usize, index: u32) {
        let slot = self.slot(index);
        slot.deadline.store(0, Ordering::Relaxed);
        slot.set_status(Status::Ok);
        // SAFETY: the slot is QUEUED and we claimed it, so we own it.
        let submit_cpu = usize::from(unsafe { slot.data() }.submit_cpu);
        let hwq = usize::from(self.counters.route(submit_cpu).hwq);
        bump(&self.counters.cpu(cpu).requeued);
        // Software queues are multi-producer: pushing onto another CPU's is fine.
        self.insert(submit_cpu, hwq, index);
        self.run_hw_queue(cpu, hwq);
    }

    /// Sends a claimed completion (state COMPLETING, or DRIVER from a handle's `complete`) of
    /// `slot` (`self.slot(index)`) with `status` where the policy says. The status, and the
    /// COMPLETING state, go into the slot only when the request waits on a completion list;
    /// finished here, it is passed along.
    #[inline(always)]
    pub(crate) fn route_completion(
        &self,
        cpu: usize,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        rerun_covered: bool,
    ) {
        self.route_completion_in(cpu, self.counters.cpu(cpu), slot, index, status, rerun_covered);
    }

    /// [`Queue::route_completion`] with CPU `cpu`'s counters block at hand.
    #[inline(always)]
    pub(crate) fn route_completion_in(
        &self,
        cpu: usize,
        counters: &CpuCounters,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        rerun_covered: bool,
    ) {
        match self.completion_policy() {
            CompletionPolicy::Irq => {
                bump(&counters.completions_irq);
                self.finish(cpu, counters, slot, index, status, rerun_covered);
            }
            CompletionPolicy::Poll => {
                bump(&counters.completions_poll);
                self.finish(cpu, counters, slot, index, status, rerun_covered);
            }
            CompletionPolicy::Local => {
                bump(&counters.completions_local);
                slot.set_state(state::COMPLETING);
                slot.set_status(status);
                self.stage(cpu, index, crate::driver::Stage::ListPush);
                if self.done_lists[cpu].push(index, &self.links) {
                    bump(&counters.softirqs);
                    self.platform.raise_completion_softirq(cpu);
                }
            }
            CompletionPolicy::Remote => {
                // SAFETY: the slot is claimed (or handed over by its handle), so we own it.
                let target = usize::from(unsafe { slot.data() }.submit_cpu);
                if target == cpu {
                    bump(&counters.completions_irq);
                    self.finish(cpu, counters, slot, index, status, rerun_covered);
                } else {
                    bump(&counters.completions_remote);
                    slot.set_state(state::COMPLETING);
                    slot.set_status(status);
                    self.stage(cpu, index, crate::driver::Stage::ListPush);
                    if self.done_lists[target].push(index, &self.links) {
                        bump(&counters.ipis);
                        self.platform.send_completion_ipi(target);
                    }
                }
            }
        }
    }

    /// Finishes the requests on CPU `cpu`'s completion list, oldest first: what the kernel's
    /// completion IPI / softirq handler on that CPU calls. Returns how many.
    pub fn run_completions(&self, cpu: usize) -> usize {
        if cpu >= self.ncpus {
            return 0;
        }
        let mut n = 0;
        let counters = self.counters.cpu(cpu);
        for index in self.done_lists[cpu].take_all(&self.links) {
            self.stage(cpu, index, crate::driver::Stage::Softirq);
            let slot = self.slot(index);
            // The list's push (Release) published the status `route_completion` stored.
            self.finish(cpu, counters, slot, index, slot.status(), false);
            n += 1;
        }
        // A sharer of our host tag set freed tags while we held turned-away requests, and
        // kicked us (see `HostTags`): rerun them.
        if self.host_shared && self.tag_sets[0].take_restart(self.sharer_ids[0]) {
            for hwq in 0..self.hwqs.len() {
                if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
                    self.run_hw_queue(cpu, hwq);
                }
            }
        }
        n
    }

    /// Hands a claimed completion of `slot` (`self.slot(index)`) to the driver's `complete`.
    /// `rerun_covered`: the rerun check after it is someone else's (see `after_completion`).
    #[inline(always)]
    fn finish(
        &self,
        cpu: usize,
        counters: &CpuCounters,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        rerun_covered: bool,
    ) {
        if !D::HAS_COMPLETE {
            // What the default `complete` does, without the handle: end it with its status.
            let how = Ending {
                inline: false,
                rerun_covered,
            };
            self.end_request_in(cpu, counters, slot, index, status, how);
            return;
        }
        // The driver's `complete` reads it through `Rq::status`.
        slot.set_status(status);
        slot.set_state(state::DRIVER);
        // SAFETY: the slot was COMPLETING and ours (claimed by CAS or taken off a completion
        // list); it is DRIVER now and this is the only handle.
        let rq = unsafe { Rq::new(self, slot, counters, index, cpu as u16, true, rerun_covered) };
        self.driver.complete(rq);
    }

    /// The single exit: reports the completion, frees the tag, leaves the queue. `how`: whether
    /// it ended in `queue_rq` and whether its rerun check is someone else's ([`Ending`]).
    #[inline]
    pub(crate) fn end_request(&self, cpu: usize, index: u32, status: Status, how: Ending) {
        self.end_request_in(cpu, self.counters.cpu(cpu), self.slot(index), index, status, how);
    }

    /// [`Queue::end_request`] with the slot already looked up (an [`Rq`] carries it).
    /// Inlined into every completion path: with the rerun check, the status and the done board
    /// carried in, a call costs more instructions per I/O than the code it would save.
    #[inline(always)]
    pub(crate) fn end_request_in(
        &self,
        cpu: usize,
        counters: &CpuCounters,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        how: Ending,
    ) {
        let Ending { inline, rerun_covered } = how;
        let (hwq, tag, parent, set) = {
            // SAFETY: called through an `Rq` (consumed), which owned the slot.
            let d = unsafe { slot.data() };
            (usize::from(d.hwq), d.tag, d.parent, usize::from(d.set))
        };
        // Relaxed, as in `stage`; read once for both uses.
        let tracing = self.stage_trace.load(core::sync::atomic::Ordering::Relaxed);
        self.stage_if(tracing, cpu, index, crate::driver::Stage::EndIo);
        if parent == NO_PARENT
            && let Some(board) = self.done_board
            && !tracing
        {
            // SAFETY: as above; the slot stays ours until it is freed below.
            let d = unsafe { slot.data() };
            self.end_on_board(board, cpu, d.cookie, usize::from(d.submit_cpu), status);
        } else if parent == NO_PARENT && self.ends_by_cookie {
            // SAFETY: as above; the slot stays ours until it is freed below.
            let d = unsafe { slot.data() };
            self.platform.end_io_by_cookie(d.cookie, d.submit_cpu, status);
        } else {
            self.end_io_full(cpu, index, status, parent);
        }
        bump(&counters.completed);
        if inline {
            bump(&counters.completions_inline);
        }
        if !status.is_ok() {
            bump(&counters.completed_with_error);
        }
        slot.set_state(state::FREE);
        // Release inside `free` publishes the FREE state and our last reads to the next owner.
        // It also bumps the set's "freed" sequence and fences (the restart protocol).
        let freed = self.tag_sets[set].free_hinted(cpu, &counters.tag_hint, tag, self.sharer_of(set));
        debug_assert!(freed, "tag {tag} freed twice");
        self.usage.exit(&counters.usage);
        self.after_completion(cpu, set, hwq, rerun_covered);
    }

    /// Delivers a finished request to the platform's done board ([`Platform::done_board`]):
    /// what the platform's `end_io_by_cookie` would do, without the call through it. The
    /// submitter is woken only when another CPU completes its request.
    #[inline(always)]
    fn end_on_board(&self, board: &crate::done::DoneBoard, cpu: usize, cookie: u64, submit_cpu: usize, status: Status) {
        if let Err(e) = board.deliver_cookie(submit_cpu, cookie, status) {
            self.platform.done_refused(&e);
        }
        if submit_cpu != cpu {
            self.platform.wake_submitter(submit_cpu);
        }
    }

    /// [`Queue::end_request`]'s report through [`Platform::end_io`]: a whole [`Completion`]
    /// for an unsplit request, or the bio's once its last part has ended. Cold: the kernel's
    /// platform ends by cookie, so it comes here only for split bios.
    #[cold]
    fn end_io_full(&self, cpu: usize, index: u32, status: Status, parent: u32) {
        let completion = {
            // SAFETY: called by `end_request`, which owns the slot until it frees it.
            let d = unsafe { self.slot(index).data() };
            Completion {
                cookie: d.cookie,
                op: d.op,
                sector: d.sector,
                nr_sectors: d.nr_sectors,
                status,
                hwq: d.hwq,
                tag: d.tag,
                submit_cpu: d.submit_cpu,
                complete_cpu: cpu as u16,
            }
        };
        if parent == NO_PARENT {
            self.platform.end_io(&completion);
        } else if let Some(done) = self.splits.part_done(parent, status) {
            // The last part of a split bio: the bio ends, once, as the submitter gave it.
            self.platform.end_io(&Completion {
                cookie: done.cookie,
                op: done.op,
                sector: done.sector,
                nr_sectors: done.nr_sectors,
                status: done.status,
                ..completion
            });
            self.splits.release(cpu, parent);
        }
    }

    /// Reruns the queue after a completion (always with `run_queue_on_completion`, otherwise
    /// only if the driver had turned requests away). The tag free just before bumped the set's
    /// "freed" sequence and ran a full fence, which pairs with the fence in `dispatch_once`'s
    /// restart protocol (and serves as the lock-free quiesce re-check's fence).
    ///
    /// `rerun_covered`: with the lock-free re-check, the rerun of `hwq` is someone else's:
    /// - the request ended on the CPU that holds `hwq`'s run token (inside `queue_rq`: ended
    ///   there, or completed there through a local completion policy). That pass goes on
    ///   through its FIFO, a CPU that inserts meanwhile requests the rerun itself
    ///   (`run_hw_queue`), and a request turned away later in the pass sees the "freed"
    ///   sequence moved (the restart protocol) and goes again;
    /// - or it came from a [`CompletionBatch`], whose end runs this check once, after the
    ///   batch's last tag free (and its fence).
    ///
    /// The locked variants keep their lock per completion (they model that cost).
    ///
    /// Inlined: with `rerun_covered` (a completion batch's, a dispatch pass's) it is two loads
    /// and two branches, which a call would double.
    #[inline(always)]
    fn after_completion(&self, cpu: usize, set: usize, hwq: usize, rerun_covered: bool) {
        let check = self.quiesce_check();
        if !(rerun_covered && check == QuiesceCheck::LockFree) {
            self.rerun_after_free(cpu, hwq, check);
        }
        if self.set_spans_hwqs {
            self.rerun_set_sharers(cpu, set, hwq);
        }
    }

    /// The rerun check of `hwq` after a tag free (`after_completion`, and a completion batch's
    /// end): dispatch what waits there, under quiesce variant `check`.
    #[inline(always)]
    fn rerun_after_free(&self, cpu: usize, hwq: usize, check: QuiesceCheck) {
        if self.run_on_completion {
            // The fence above already did the lock-free re-check's job; the locked variant
            // still takes its lock when the lockless check says "nothing to do".
            let locked = check != QuiesceCheck::LockFree;
            if self.need_run(hwq) || (locked && self.recheck_need_run(cpu, hwq)) {
                self.dispatch(cpu, hwq);
            }
        } else if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
            self.run_hw_queue(cpu, hwq);
        }
    }

    /// The other hardware queues of tag set `set` that hold turned-away requests, rerun after
    /// a tag of the set was freed (`after_completion`, for sets that serve several queues).
    #[inline(never)]
    fn rerun_set_sharers(&self, cpu: usize, set: usize, hwq: usize) {
        for &h in self.set_hwqs[set].iter() {
            let h = usize::from(h);
            if h != hwq && self.hwqs[h].dispatch_nonempty.load(Ordering::Relaxed) {
                self.run_hw_queue(cpu, h);
            }
        }
    }

    // ---------------------------------------------------------------- polling and timeouts

    /// Polls hardware queue `hwq` through the driver's `poll`; returns completions found.
    pub fn poll(&self, cpu: usize, hwq: usize) -> Result<usize, BlkError> {
        self.check_cpu(cpu)?;
        self.check_hwq(hwq)?;
        let ctx = HwCtx {
            queue: self,
            hwq: hwq as u16,
            cpu: cpu as u16,
        };
        Ok(self.driver.poll(&ctx))
    }

    /// The periodic tick: runs the driver's timeout handler for every issued request whose
    /// deadline (issue time + `timeout_ns`) has passed, and reruns queues that hold turned-away
    /// requests. Returns the number of requests that timed out.
    pub fn tick(&self, cpu: usize) -> Result<usize, BlkError> {
        self.check_cpu(cpu)?;
        let mut expired = 0;
        if self.timeout_ns != 0 {
            let now = self.platform.now_ns();
            for index in 0..self.slots.len() as u32 {
                if self.check_timeout(cpu, index, now) {
                    expired += 1;
                }
            }
        }
        for hwq in 0..self.hwqs.len() {
            if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
                self.run_hw_queue(cpu, hwq);
            }
        }
        Ok(expired)
    }

    fn check_timeout(&self, cpu: usize, index: u32, now: u64) -> bool {
        let slot = self.slot(index);
        let w = slot.word.load(Ordering::Relaxed);
        if state::of(w) != state::ISSUED {
            return false;
        }
        let deadline = slot.deadline.load(Ordering::Relaxed);
        if deadline == 0 || now < deadline {
            return false;
        }
        let generation = state::generation(w);
        // Claim it; a racing completion wins or loses this CAS. Acquire pairs with the Release
        // in `Rq::issue`.
        if slot
            .word
            .compare_exchange(
                w,
                state::pack(generation, state::TIMEOUT),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        // The slot may have been finished and reissued between our loads and the claim:
        // check the deadline of what we actually claimed.
        let deadline = slot.deadline.load(Ordering::Relaxed);
        let action = if deadline == 0 || now < deadline {
            None
        } else {
            let counters = self.counters.cpu(cpu);
            bump(&counters.timeouts);
            let mut view = TimedOutRq {
                queue: self,
                index,
                generation,
            };
            let action = self.driver.timeout(&mut view);
            let next = match action {
                TimeoutAction::ResetTimer => Some(self.timeout_ns),
                TimeoutAction::ResetTimerAfter(ns) => Some(ns),
                TimeoutAction::Done(_) | TimeoutAction::Requeue => None,
            };
            if let Some(after) = next {
                bump(&counters.timeout_resets);
                slot.deadline.store(now.saturating_add(after).max(1), Ordering::Relaxed);
            }
            Some(action)
        };
        let timeout_word = state::pack(generation, state::TIMEOUT);
        match action {
            None | Some(TimeoutAction::ResetTimer | TimeoutAction::ResetTimerAfter(_)) => {
                // Hand it back to the hardware unless a claim arrived meanwhile. Release pairs
                // with the Acquire in `claim_issue`.
                if let Err(now_word) = slot.word.compare_exchange(
                    timeout_word,
                    state::pack(generation, state::ISSUED),
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    self.apply_late_claim(cpu, index, generation, now_word);
                }
            }
            Some(TimeoutAction::Done(status)) => {
                // Whether or not a claim arrived meanwhile, the driver's verdict stands. The
                // timed-out issue is retired: the generation moves on, so a completion the
                // device still reports for it is refused as stale. Acquire pairs with the
                // Release CAS of a claim that raced the handler.
                slot.word.swap(
                    state::pack(generation.wrapping_add(1), state::COMPLETING),
                    Ordering::Acquire,
                );
                self.route_completion(cpu, slot, index, status, false);
            }
            Some(TimeoutAction::Requeue) => {
                match slot.word.compare_exchange(
                    timeout_word,
                    state::pack(generation.wrapping_add(1), state::QUEUED),
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(_) => self.requeue_owned(cpu, index),
                    // It completed while the handler ran: apply that instead of issuing it
                    // again.
                    Err(now_word) => self.apply_late_claim(cpu, index, generation, now_word),
                }
            }
        }
        action.is_some()
    }

    /// Applies the claim recorded while the timeout handler ran (state TIMEOUT_COMPLETED, the
    /// only other way out of TIMEOUT): a completion with its status, or a requeue.
    fn apply_late_claim(&self, cpu: usize, index: u32, generation: u16, word: u32) {
        debug_assert_eq!(state::of(word), state::TIMEOUT_COMPLETED);
        let slot = self.slot(index);
        let late = state::late(word);
        if late == state::LATE_REQUEUE {
            slot.word.store(
                state::pack(generation.wrapping_add(1), state::QUEUED),
                Ordering::Relaxed,
            );
            self.requeue_owned(cpu, index);
        } else {
            slot.word
                .store(state::pack(generation, state::COMPLETING), Ordering::Relaxed);
            self.route_completion(cpu, slot, index, Status::from_u8(late), false);
        }
    }
}

/// Completions reaped together from one hardware queue: see [`Queue::completion_batch`].
/// Dropping it runs the queue's rerun check once if any of its completions left it there (the
/// other queues of a shared tag set were rerun by each completion, as without a batch).
pub struct CompletionBatch<'a, D: Driver> {
    queue: &'a Queue<D>,
    cpu: usize,
    hwq: usize,
    /// Its completions leave their rerun check to the drop (the lock-free re-check).
    defers_check: bool,
    /// A completion was finished with its rerun check left to the drop.
    check_owed: bool,
}

impl<D: Driver> CompletionBatch<'_, D> {
    /// [`Queue::complete`] of `token` with `status`, validated and refused exactly as there.
    #[inline]
    pub fn complete(&mut self, token: IssueToken, status: Status) -> Result<(), BlkError> {
        self.queue
            .claim_checked(self.cpu, self.hwq, token, Claim::Complete(status), self.defers_check)?;
        self.check_owed = self.defers_check;
        Ok(())
    }
}

impl<D: Driver> Drop for CompletionBatch<'_, D> {
    fn drop(&mut self) {
        if self.check_owed {
            let q = self.queue;
            q.rerun_after_free(self.cpu, self.hwq, q.quiesce_check());
        }
    }
}

/// What a `claim_issue` does with the issue it claims.
#[derive(Clone, Copy)]
enum Claim {
    Complete(Status),
    Requeue,
}

impl<D: Driver> Drop for Queue<D> {
    fn drop(&mut self) {
        for (set, &id) in self.tag_sets.iter().zip(self.sharer_ids.iter()) {
            set.unregister(id);
        }
    }
}

/// Holds the queue lock; unlocking wakes a parked waiter (counted on the unlocking CPU).
struct QueueLockGuard<'a> {
    lock: &'a SleepLock,
    platform: &'a dyn Platform,
    counters: &'a Counters,
    cpu: usize,
}

impl Drop for QueueLockGuard<'_> {
    fn drop(&mut self) {
        if self.lock.unlock(self.cpu, self.platform).is_some() {
            bump(&self.counters.cpu(self.cpu).lock_wakeups);
        }
    }
}

/// What [`Queue::dispatch_one`] did with a request.
enum Dispatched {
    /// The driver took it (its doorbell may be pending when `last` was false).
    Queued,
    /// The driver failed it at once; it has ended.
    Ended,
    /// The driver was busy: the request is QUEUED again, for the caller to park.
    TurnedAway,
}
