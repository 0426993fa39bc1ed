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

mod complete;
mod config;
mod dispatch;
mod quiesce;
mod submit;
mod timeout;

pub use complete::CompletionBatch;
pub use config::{
    BatchOutcome, CompletionPolicy, DEFAULT_RESCHEDULE_COST_NS, QueueConfig, QuiesceCheck, SUBMIT_BATCH_CHUNK,
    Submitted,
};

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
    /// `set * depth`: the index of the set's first slot.
    slot_base: u32,
}

/// How a request came to its end ([`Queue::end_request_in`]).
#[derive(Clone, Copy)]
pub(crate) struct Ending {
    /// It never went through completion routing (ended in `queue_rq`).
    pub(crate) inline: bool,
    /// The rerun check after it is someone else's (see `Queue::after_completion`).
    pub(crate) rerun_covered: bool,
    /// Stage tracing as the caller read it ([`Queue::tracing`]): one read per completion.
    pub(crate) tracing: bool,
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
    /// [`Platform::done_board`], asked once: unsplit requests end on it directly.
    done_board: Option<&'static done::DoneBoard<crate::Status>>,
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
            (
                Route {
                    hwq,
                    set,
                    slot_base: u32::from(set) * depth,
                },
                first_hint,
            )
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

    /// Whether stage tracing is on. Relaxed: a switch that takes a moment to be seen costs a
    /// few unrecorded stages. A path reads it once and hands it down (`RunContext::trace`,
    /// [`Ending::tracing`], the request handle's).
    #[inline(always)]
    pub(crate) fn tracing(&self) -> bool {
        self.stage_trace.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Reports `stage` for request `index` to the platform when `tracing` (the switch as the
    /// caller read it) is on.
    #[inline(always)]
    pub(crate) fn stage_if(&self, tracing: bool, cpu: usize, index: u32, stage: crate::driver::Stage) {
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

    /// Slot `index` without a bounds check, for a request the queue holds.
    ///
    /// # Safety
    /// `index` is a slot's: it came from a checked lookup (`take_request`, a split, a claim of
    /// a device's tag), as every request index the queue hands around does.
    #[inline(always)]
    pub(crate) unsafe fn held_slot(&self, index: u32) -> &Slot<D::Pdu> {
        debug_assert!((index as usize) < self.slots.len());
        // SAFETY: guaranteed by the caller.
        unsafe { self.slots.get_unchecked(index as usize) }
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
