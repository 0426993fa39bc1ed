//! A queue's configuration and the policies it can switch at run time.

use super::*;

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

    pub(super) fn from_u8(v: u8) -> Self {
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

    pub(super) fn from_u8(v: u8) -> Self {
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

    pub(super) fn validate(&self) -> Result<(), BlkError> {
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
