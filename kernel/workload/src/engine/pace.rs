//! Pacing and the phase's edges: `rate`/`rate_iops` (linear or Poisson), think times, the start
//! delay, the end of the ramp, and flushes (`fsync`, `end_fsync`). All out of line (`#[cold]`):
//! none is on a plain job's per-I/O path.

use alloc::boxed::Box;

use super::{Completion, CpuRun, IN_FLIGHT, IoBackend, IoOp, OpStats, PERIODIC_INTERVAL_NS, Phase, Slot, SubmitError};
use crate::error::WorkloadError;
use crate::plan::JobPlan;
use crate::poisson::PoissonArrivals;
use crate::rng::mix64;

/// fio's `rate_process=poisson`: one gap generator per direction, seeded from the job's seed,
/// the CPU and the direction, so a run repeats with the same seed (fio's `randrepeat`).
pub(super) fn poisson_arrivals(plan: &JobPlan, cpu: u32) -> Option<Box<[PoissonArrivals; 2]>> {
    (plan.spec.rate_poisson && plan.spec.io_interval_ns != [0, 0]).then(|| {
        let seed = plan.spec.seed ^ mix64(u64::from(cpu) + 1);
        Box::new([PoissonArrivals::new(seed), PoissonArrivals::new(mix64(seed))])
    })
}

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
    /// fio's `startdelay`: waits before the first I/O, keeping the periodic hook going; a stop
    /// request ends the wait.
    #[cold]
    pub(super) fn start_delay(&mut self) {
        let begin = self.backend.now_ns();
        let until = begin.saturating_add(self.plan.spec.start_delay_ns);
        let mut now = begin;
        while now < until && !self.shared.stop_requested() {
            if now >= self.next_periodic_ns {
                self.next_periodic_ns = now.saturating_add(PERIODIC_INTERVAL_NS);
                self.backend.periodic(now);
                self.shared.take_wave_stop();
            }
            self.backend.idle(0);
            now = self.backend.now_ns();
        }
    }

    /// fio's `check_min_rate` at the periodic check: the first direction whose rate over the last
    /// `rate_cycle` (after a 2 s settle) fell below its minimum.
    #[cold]
    pub(super) fn rate_min_check(&mut self, now: u64) -> Option<super::RateMinMiss> {
        const SETTLE_NS: u64 = 2_000_000_000;
        let min = self.plan.spec.rate_min?;
        let since = *self.rate_min_since.get_or_insert(now);
        if now.saturating_sub(since) < SETTLE_NS {
            return None;
        }
        for direction in 0..2 {
            let stats = if direction == 0 {
                &self.result.read
            } else {
                &self.result.write
            };
            let (bytes_min, ios_min) = (min.bytes_per_s[direction], min.ios_per_s[direction]);
            if (bytes_min == 0 && ios_min == 0) || stats.bytes == 0 {
                continue;
            }
            let (bytes, ios) = (stats.bytes, stats.ios);
            if let Some((at, last_bytes, last_ios)) = self.rate_min_last[direction] {
                let spent_ms = now.saturating_sub(at) / 1_000_000;
                if spent_ms < min.cycle_ns / 1_000_000 || spent_ms == 0 {
                    continue;
                }
                let per_s = |now: u64, then: u64| now.saturating_sub(then).saturating_mul(1000) / spent_ms;
                let miss = |iops: bool, wanted: u64, got: u64| super::RateMinMiss {
                    iops,
                    write: direction == 1,
                    wanted,
                    got,
                };
                if bytes_min > 0 {
                    let got = per_s(bytes, last_bytes);
                    if got < bytes_min {
                        return Some(miss(false, bytes_min, got));
                    }
                } else {
                    let got = per_s(ios, last_ios);
                    if got < ios_min {
                        return Some(miss(true, ios_min, got));
                    }
                }
            }
            self.rate_min_last[direction] = Some((now, bytes, ios));
        }
        None
    }

    /// Whether pacing lets an I/O of `op` start now (`rate`, `rate_iops`, `thinktime`); when it
    /// does, the I/O is counted against the pace.
    #[cold]
    pub(super) fn pace_allows(&mut self, op: IoOp) -> bool {
        let now = self.backend.now_ns();
        if !self.depth_allows(now) {
            return false;
        }
        let spec = &self.plan.spec;
        if spec.think_ns > 0 {
            if let Some(until) = self.think_until {
                if now < until {
                    return false;
                }
                self.think_until = None;
            }
            if self.issued_since_think >= spec.think_blocks {
                // fio waits for what is in flight, then thinks.
                if self.in_flight > 0 {
                    return false;
                }
                self.issued_since_think = 0;
                self.think_until = Some(now.saturating_add(spec.think_ns));
                return false;
            }
        }
        let direction = usize::from(op == IoOp::Write);
        let interval = spec.io_interval_ns[direction];
        if interval > 0 && now < self.next_io_ns[direction] {
            return false;
        }
        // Last: the flow gate counts the I/O it lets through.
        if let Some(flow) = &mut self.flow
            && !flow.admit(now, self.in_flight)
        {
            return false;
        }
        if interval > 0 {
            let gap = match &mut self.poisson {
                Some(arrivals) => arrivals[direction].next_gap_ns(interval),
                None => interval,
            };
            self.next_io_ns[direction] = self.next_io_ns[direction].saturating_add(gap);
        }
        self.issued_since_think += 1;
        true
    }

    /// Issues the due flush in a free slot (the caller checked that nothing is in flight). A busy
    /// backend leaves it due; a submission that fails at once completes it as failed.
    #[cold]
    pub(super) fn submit_flush(&mut self, phase: Phase) -> Result<(), WorkloadError> {
        let Some(slot) = self.free_slot() else {
            return Ok(());
        };
        let submitted_ns = self.backend.now_ns();
        match self.backend.submit(slot, IoOp::Flush, 0, 0) {
            Err(SubmitError::Busy) => Ok(()),
            outcome => {
                self.take_free_slot(slot);
                self.slots[slot] = Slot {
                    op: IoOp::Flush,
                    block: 0,
                    bytes: 0,
                    generation: None,
                    submitted_ns,
                    issued_ns: submitted_ns,
                    next_free: IN_FLIGHT,
                };
                self.in_flight += 1;
                self.flush_wanted = false;
                self.flush_in_flight = true;
                self.last_progress_ns = submitted_ns;
                if let Err(SubmitError::Failed(error)) = outcome {
                    self.complete(Completion::new(slot, Err(error)), submitted_ns, phase)?;
                }
                Ok(())
            }
        }
    }

    /// A flush completed: its own counts, no block to track.
    #[cold]
    pub(super) fn complete_flush(&mut self, completion: Completion, slot: Slot, done_ns: u64, phase: Phase) {
        self.flush_in_flight = false;
        let stats = &mut self.result.flush;
        stats.ios += 1;
        match completion.result {
            Ok(()) => stats.latency.record(done_ns.saturating_sub(slot.submitted_ns)),
            Err(_) => {
                stats.errors += 1;
                self.result.errors += 1;
                self.live_counts.errors += 1;
                // fio counts a failed flush as a write error.
                if self.plan.spec.stops_on(crate::job::ErrorClass::Write) {
                    self.shared.request_stop();
                }
            }
        }
        if completion.result.is_err() || completion.retries > 0 {
            self.note_unusual(&completion, slot, 0, done_ns, phase);
        }
    }

    /// Ends the ramp: what was counted so far is dropped and measuring starts at `now`. Errors and
    /// their records stay (a failed I/O is reported whenever it happened).
    #[cold]
    pub(super) fn end_ramp(&mut self, now: u64) {
        self.ramp_end = None;
        self.measured_start = now;
        self.result.read = OpStats::new();
        self.result.write = OpStats::new();
        self.result.trim = OpStats::new();
    }
}
