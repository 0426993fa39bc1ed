//! Per-CPU statistics counters.
//!
//! Each CPU increments only its own cache-line-padded block (Relaxed, no synchronisation), so
//! counting costs no cross-CPU traffic; a snapshot sums the blocks. These use `core` atomics
//! even under loom: they order nothing.
//!
//! On bare metal an increment is not even a locked instruction (Linux's `this_cpu_inc`): see
//! [`bump`]. That relies on the kernel's contract with the block layer: the `cpu` a caller passes
//! is the CPU it runs on, and it calls with interrupts off (`kernel::dev::block` wraps every entry;
//! interrupt handlers run with them off), so nothing else writes that CPU's block meanwhile.

use crate::sync::CachePadded;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// A plain snapshot of the queue's counters, summed over CPUs.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct CounterSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        #[derive(Default)]
        pub(crate) struct CpuCounters {
            $( pub $name: AtomicU64, )*
            /// This CPU's part of the queue's usage count (`crate::freeze`: entries on this CPU
            /// minus exits on it), beside the counters a submission or a completion already has
            /// at hand. Not a statistic: it orders the freeze (a `sync` atomic, seen by loom).
            pub usage: crate::sync::AtomicUsize,
            /// Where this CPU's next tag search starts ([`crate::tags::TagBitmap::alloc_hinted`]):
            /// here, beside what a submission and a completion already hold, not in an array of
            /// the tag set's that each would index. A guess, any value is safe.
            pub tag_hint: crate::tags::HintU32,
            /// The hardware queue this CPU submits to and that queue's tag set: fixed when the
            /// queue is built, kept here so that a submission's one lookup (this block) is also
            /// its CPU check and its route.
            pub route: Route,
        }

        impl CpuCounters {
            fn add_to(&self, s: &mut CounterSnapshot) {
                $( s.$name += self.$name.load(Ordering::Relaxed); )*
            }
        }
    };
}

counters! {
    /// Requests accepted by `submit`.
    submitted,
    /// Requests finished (reported through `end_io`), whatever their status.
    completed,
    /// Of those, finished with a status other than `Ok`.
    completed_with_error,
    /// Submissions rejected before reaching a tag (bad range, frozen, no tag).
    rejected,
    /// Requests put back in line for dispatch: handed back with `Busy`/`DevBusy`, or taken back
    /// from the device with `Queue::requeue` / `TimeoutAction::Requeue`.
    requeued,
    /// Calls to the driver's `queue_rq`.
    dispatched,
    /// Calls to the driver's `commit_rqs`.
    commits,
    /// Requests finished by the driver inside `queue_rq` (no completion routing).
    completions_inline,
    /// Completions finished directly in the interrupt context (`CompletionPolicy::Irq`, or
    /// `Remote` when the interrupt arrived on the submitting CPU).
    completions_irq,
    /// Completions deferred to the local CPU's list (`CompletionPolicy::Local`).
    completions_local,
    /// Completions sent to another CPU's list (`CompletionPolicy::Remote`).
    completions_remote,
    /// Completions reaped by polling (`CompletionPolicy::Poll`).
    completions_poll,
    /// Completion IPIs raised (only when the target list was empty).
    ipis,
    /// Local completion "softirqs" raised (only when the local list was empty).
    softirqs,
    /// Completions for tags that were not in flight (out of range, or a double completion of
    /// the current issue), rejected.
    spurious_completions,
    /// Completions carrying an earlier generation of their tag than the current issue (late
    /// after a timeout, or a stale context), dropped.
    stale_completions,
    /// Lock acquisitions on the hot path (`run_hw_queue`). Zero with `QuiesceCheck::LockFree`.
    hot_path_locks,
    /// `QuiesceCheck::Locked` and `Sleeping`: hot-path acquisitions that found the queue lock
    /// taken (the spinning lock spun, the sleeping one went to its slow path).
    lock_contended,
    /// `QuiesceCheck::Sleeping`: times a CPU parked waiting for the queue lock (each one a
    /// wake-up plus a charged reschedule).
    lock_sleeps,
    /// `QuiesceCheck::Sleeping`: wake-ups sent by unlocks to parked CPUs.
    lock_wakeups,
    /// Hardware queue runs that reached the dispatcher.
    queue_runs,
    /// Requests whose deadline passed and whose timeout handler ran.
    timeouts,
    /// Timeout handler verdicts `ResetTimer`.
    timeout_resets,
    /// Submissions that found no free tag and waited.
    tag_waits,
    /// Reads and writes split into several requests (each part also counts in `submitted` and
    /// `completed`; the bio's single `end_io` is not counted again).
    split_bios,
}

/// Where a CPU's submissions go ([`CpuCounters::route`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Route {
    pub hwq: u16,
    pub set: u16,
    /// The index of the set's first slot (`set * depth`): a request's slot is this plus its
    /// tag, with no multiply per submission.
    pub slot_base: u32,
}

pub(crate) struct Counters {
    per_cpu: Box<[CachePadded<CpuCounters>]>,
}

impl Counters {
    /// Blocks for `ncpus` CPUs; `start(cpu)` gives CPU `cpu`'s route and its first tag hint.
    pub fn new(ncpus: usize, start: impl Fn(usize) -> (Route, u32)) -> Self {
        let v: Vec<_> = (0..ncpus.max(1))
            .map(|cpu| {
                let (route, first_hint) = start(cpu);
                CachePadded(CpuCounters {
                    route,
                    tag_hint: crate::tags::HintU32::new(first_hint),
                    ..CpuCounters::default()
                })
            })
            .collect();
        Self {
            per_cpu: v.into_boxed_slice(),
        }
    }

    /// CPU `cpu`'s route (`cpu` below the CPU count).
    pub fn route(&self, cpu: usize) -> Route {
        self.per_cpu[cpu].0.route
    }

    /// The block for `cpu`, `None` past the last CPU.
    #[inline(always)]
    pub fn cpu_checked(&self, cpu: usize) -> Option<&CpuCounters> {
        self.per_cpu.get(cpu).map(|c| &c.0)
    }

    /// The block for `cpu` (the caller validated `cpu`; out-of-range folds into range).
    #[inline]
    pub fn cpu(&self, cpu: usize) -> &CpuCounters {
        &self.per_cpu[crate::tags::fold(cpu, self.per_cpu.len())]
    }

    /// Every CPU's part of the usage count (`crate::freeze::UsageCounter`).
    pub fn usage_counts(&self) -> impl Iterator<Item = &crate::sync::AtomicUsize> {
        self.per_cpu.iter().map(|c| &c.usage)
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        let mut s = CounterSnapshot::default();
        for c in self.per_cpu.iter() {
            c.add_to(&mut s);
        }
        s
    }
}

/// Increment of one of the calling CPU's counters.
#[inline]
pub(crate) fn bump(c: &AtomicU64) {
    // Bare metal: only this CPU writes its block, with interrupts off (the module's contract),
    // so nothing can come between the load and the store: a plain increment, which x86 compiles
    // to one `inc` on memory without `lock` (a locked one costs about 20 cycles; a 4k read bumps
    // five to seven counters). Another CPU's snapshot reads the old or the new value.
    #[cfg(target_os = "none")]
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    // Host tests run several threads under one CPU number: a locked add keeps their counts exact.
    #[cfg(not(target_os = "none"))]
    c.fetch_add(1, Ordering::Relaxed);
}
