//! baremq's multi-queue block layer core (blk-mq in Rust), `no_std` + `alloc`.
//!
//! - [`Queue`]: per-CPU software queues feeding hardware queues, preallocated requests, a
//!   lock-free dispatch fast path, quiesce (atomic depth, paired full fences) and freeze
//!   (usage counter), per-CPU lock-free completion lists with run-time selectable
//!   [`CompletionPolicy`], timeouts from a periodic tick, and [`CounterSnapshot`] counters.
//! - [`Driver`]: the driver contract (`queue_rq` with a `last` hint, `commit_rqs`,
//!   `complete`, `timeout`, `poll`); requests move as move-only [`Rq`] handles.
//! - [`Platform`]: the kernel's hooks (time, completion IPI/softirq, end of I/O).
//! - [`tags`]: sbitmap-like lock-free tag allocator, and [`HostTags`], one tag space shared by
//!   several queues; [`list`]: the llist-like MPSC stack.
//! - [`IssueToken`]: tag + generation of one issue; stale completions are refused.
//! - [`done`]: the per-CPU done board that carries a finished request home to its submitter.
//!
//! Nothing allocates after [`Queue::new`]. All lock-free code imports its atomics from
//! `sync`, which switches to loom's under `--cfg loom`.

#![no_std]

extern crate alloc;

mod counters;
mod driver;
mod error;
mod freeze;
pub mod list;
mod map;
mod queue;
mod request;
pub mod sleeplock;
pub mod split;
mod sync;

/// The barrier helpers of the block layer's protocols, for drivers that build the same patterns
/// (Dekker's with a locked increment, spin-waits that loom can explore): the same code under
/// `--cfg loom`.
pub mod barrier {
    pub use crate::sync::{fence_after_rmw, spin_loop};
}
pub mod tags;

pub use counters::CounterSnapshot;
pub use driver::{Driver, HwCtx, Platform, QueueRqError, Rq, Stage, TimedOutRq, TimeoutAction};
pub use error::BlkError;
pub use freeze::UsageCounter;
pub use map::{map_queues, validate_map};
pub use queue::{
    BatchOutcome, CompletionBatch, CompletionPolicy, DEFAULT_RESCHEDULE_COST_NS, Queue, QueueConfig, QuiesceCheck,
    SUBMIT_BATCH_CHUNK, Submitted,
};
pub use request::{Bio, Completion, IssueToken, Op, SECTOR_SIZE, Segment, Status};
pub use sync::{CachePadded, SpinGuard, SpinLock};
pub use tags::HostTags;
