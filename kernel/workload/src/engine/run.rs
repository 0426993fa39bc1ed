//! One CPU's run of a job: its setup, the main phase, the end flush and the verify pass, and
//! the loop every phase runs (issue, reap, complete).

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use super::pace::poisson_arrivals;
use super::source::{Deferred, Replay, Source, main_source};
use super::verify::{MAX_FAILED_WRITES, backlog_capacity};
use super::{
    Completion, CpuLive, CpuPhase, CpuResult, CpuRun, DEFERRED_PER_SLOT, IoBackend, IoOp, JobShared, LOG_BURST,
    LOG_INTERVAL_NS, LatencyRun, LiveCounts, MAX_ERROR_RECORDS, MIN_DEFERRED, NO_SLOT, OpStats, PERIODIC_INTERVAL_NS,
    Phase, Reaped, Slot, VerifyStats,
};
use crate::detail::{CpuDetail, Mark, Totals, batch_bucket};
use crate::error::WorkloadError;
use crate::job::VerifyMode;
use crate::plan::{CpuSlice, JobPlan, VerifyScheme};
use crate::ratelimit::RateLimit;
use crate::verify::{BlockStamp, fill_block};

impl<'a, B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'a, B, PLAIN> {
    pub(super) fn new(
        plan: &'a JobPlan,
        slice: CpuSlice,
        clone: usize,
        backend: &'a mut B,
        shared: &'a JobShared,
        live: &'a CpuLive,
    ) -> Result<Self, WorkloadError> {
        let depth = plan.iodepth as usize;
        let bs = plan.bs() as usize;
        let buffer_bytes = plan.max_io_bytes() as usize;
        // Check every buffer once up front, and give writes of unverified jobs non-zero data once,
        // so the hot path neither fills nor re-checks them.
        for slot in 0..depth {
            let buffer = backend.slot_buffer(slot);
            if buffer.len() < buffer_bytes {
                return Err(WorkloadError::BufferTooSmall {
                    slot,
                    len: buffer.len(),
                    needed: buffer_bytes,
                });
            }
            if !plan.spec.verify.is_enabled() && plan.spec.rw.writes() {
                let stamp = BlockStamp {
                    lba: slot as u64,
                    seed: plan.spec.seed,
                    generation: 0,
                };
                fill_write_data(&plan.spec.buffer_pattern, &stamp, &mut buffer[..buffer_bytes]);
            }
        }
        let tracker = if plan.verify == VerifyScheme::Tracked {
            // The planner bounds the slice to MAX_TRACKED_BLOCKS_PER_CPU, so this fits in usize.
            vec![0u32; slice.blocks as usize]
        } else {
            Vec::new()
        };
        let idle_slot = Slot {
            op: IoOp::Read,
            block: 0,
            bytes: 0,
            generation: None,
            submitted_ns: 0,
            issued_ns: 0,
            next_free: NO_SLOT,
        };
        let mut slots = vec![idle_slot; depth];
        // Slot 0 first, then 1, and so on (the depth fits in u32).
        for (index, slot) in slots.iter_mut().enumerate() {
            slot.next_free = if index + 1 < depth { (index + 1) as u32 } else { NO_SLOT };
        }
        Ok(Self {
            plan,
            slice,
            backend,
            shared,
            live,
            bs,
            buffer_bytes,
            io_sectors: plan.sectors_per_block,
            io_bytes: plan.bs(),
            first_lba: plan.region_start_sector() + slice.first_block * u64::from(plan.sectors_per_block),
            sectors_per_block: u64::from(plan.sectors_per_block),
            slots,
            free_head: if depth == 0 { NO_SLOT } else { 0 },
            in_flight: 0,
            completions: vec![Completion::EMPTY; depth],
            latency_run: LatencyRun {
                op: IoOp::Read,
                latency_ns: 0,
                count: 0,
                bytes: 0,
            },
            latency_runs: depth > 1,
            deferred: Deferred::new(
                if tracker.is_empty() {
                    0
                } else {
                    MIN_DEFERRED.max(depth.saturating_mul(DEFERRED_PER_SLOT))
                },
                tracker.len(),
            ),
            tracker,
            failed_writes: Vec::with_capacity(if plan.verify == VerifyScheme::SinglePass {
                MAX_FAILED_WRITES
            } else {
                0
            }),
            failed_writes_overflow: false,
            retry: None,
            log_limit: RateLimit::new(LOG_BURST, LOG_INTERVAL_NS),
            last_progress_ns: 0,
            next_periodic_ns: 0,
            detail_start_ns: 0,
            next_sample_ns: u64::MAX,
            next_window_ns: u64::MAX,
            sample_mark: Mark::default(),
            window_mark: Mark::default(),
            live_counts: LiveCounts::default(),
            ramp_end: None,
            paced: plan.spec.is_paced(),
            next_io_ns: [0, 0],
            poisson: poisson_arrivals(plan, slice.cpu),
            restamp_after_read: !plan.spec.verify.is_enabled() && plan.spec.rw.is_mixed(),
            verify_off: plan.verify == VerifyScheme::Off,
            tracked: plan.verify == VerifyScheme::Tracked,
            issued_since_think: 0,
            think_until: None,
            flow: shared
                .flow
                .clone()
                .filter(|_| plan.spec.flow_weight > 0)
                .map(|group| crate::flow::FlowGate::new(group, plan.spec.flow_weight, plan.spec.flow_sleep_ns)),
            rate_min_since: None,
            rate_min_last: [None, None],
            content: plan
                .spec
                .write_content
                .filter(|_| !plan.spec.verify.is_enabled())
                .map(|content| {
                    crate::content::ContentSource::new(
                        content,
                        plan.spec.seed,
                        crate::content::job_key(&plan.spec.name),
                        clone as u64,
                        slice.blocks,
                    )
                }),
            writes_since_flush: 0,
            flush_wanted: false,
            flush_in_flight: false,
            backlog_written: Vec::with_capacity(backlog_capacity(plan)),
            backlog_pending: Vec::with_capacity(2 * backlog_capacity(plan) + depth),
            writes_issued: 0,
            measured_start: 0,
            steady: None,
            latency_search: None,
            quiescing: false,
            restart_stats_when_drained: false,
            result: CpuResult {
                cpu: slice.cpu,
                read: OpStats::new(),
                write: OpStats::new(),
                trim: OpStats::new(),
                runtime_ns: 0,
                verify: VerifyStats::default(),
                errors: 0,
                error_records: Vec::with_capacity(MAX_ERROR_RECORDS),
                retried: 0,
                retried_records: Vec::with_capacity(MAX_ERROR_RECORDS),
                deferred_ios: 0,
                dropped_busy_ios: 0,
                log_lines_suppressed: 0,
                stopped_early: false,
                detail: shared.detail.map(|options| Box::new(CpuDetail::new(options))),
                flush: OpStats::new(),
                steady: None,
                latency_depth: None,
                rate_min_missed: None,
            },
        })
    }

    /// The slot the next submission takes, if one is free: the top of the free list.
    #[inline(always)]
    pub(super) fn free_slot(&self) -> Option<usize> {
        (self.free_head != NO_SLOT).then_some(self.free_head as usize)
    }

    /// Takes `slot`, the top of the free list, off it.
    #[inline(always)]
    pub(super) fn take_free_slot(&mut self, slot: usize) {
        self.free_head = self.slots[slot].next_free;
    }

    /// [`VerifyScheme::Off`]: a constant for a plain job.
    #[inline(always)]
    pub(super) fn verify_off(&self) -> bool {
        PLAIN || self.verify_off
    }

    /// [`VerifyScheme::Tracked`]: a constant for a plain job.
    #[inline(always)]
    pub(super) fn tracked(&self) -> bool {
        !PLAIN && self.tracked
    }

    /// Pacing or flushes: a constant for a plain job.
    #[inline(always)]
    pub(super) fn paced(&self) -> bool {
        !PLAIN && self.paced
    }

    /// The phase a loop runs: a plain job has no verify pass and no end flush, so only the main
    /// phase, a constant.
    #[inline(always)]
    pub(super) fn shaped(phase: Phase) -> Phase {
        if PLAIN { Phase::Main } else { phase }
    }

    pub(super) fn run_all(&mut self, cpu_index: usize) -> Result<(), WorkloadError> {
        if self.plan.spec.start_delay_ns > 0 {
            self.start_delay();
        }
        let start = self.backend.now_ns();
        self.next_io_ns = [start, start];
        let ramp = self.plan.spec.ramp_ns;
        self.measured_start = start;
        self.ramp_end = (ramp > 0).then(|| start.saturating_add(ramp));
        // fio: the ramp adds to the runtime; a runtime without `time_based` caps a size-bound job.
        let deadline = self
            .plan
            .spec
            .runtime_ns
            .map(|runtime| start.saturating_add(ramp).saturating_add(runtime));
        let mut source = main_source(self.plan, cpu_index);
        self.start_steady(cpu_index, start);
        self.start_latency_target(start);
        if let Some(detail) = &self.result.detail {
            self.detail_start_ns = start;
            self.sample_mark.at_ns = start;
            self.window_mark.at_ns = start;
            self.next_sample_ns = start.saturating_add(detail.options.sample_interval_ns.max(1));
            if detail.options.log_window_ns != 0 {
                self.next_window_ns = start.saturating_add(detail.options.log_window_ns);
            }
        }
        self.run_phase(Phase::Main, &mut source, deadline)?;
        // Backlog reads still due when the main phase ended (its runtime ran out) are the verify
        // pass's to do: it reads every block written.
        self.backlog_written.clear();
        self.backlog_pending.clear();
        if self.plan.spec.end_flush && !self.result.stopped_early {
            // fio's end_fsync: one flush once the writes are done, in the measured time.
            self.flush_wanted = true;
            self.run_phase(Phase::Main, &mut Source::Nothing, None)?;
        }
        let end = self.backend.now_ns();
        if self.ramp_end.is_some() {
            // The job ended within its ramp: as in fio, nothing of it is measured.
            self.end_ramp(end);
        }
        self.result.runtime_ns = end.saturating_sub(self.measured_start);
        self.result.steady = self.steady_outcome();
        self.result.latency_depth = self.latency_depth();
        if self.result.detail.is_some() {
            // The last, partial log window (fio also writes the rest of its averaging window).
            self.sample_detail(end, true);
        }
        if self.plan.verify.has_verify_pass() && !self.plan.spec.skip_verify_pass {
            if self.result.stopped_early {
                self.result.verify.pass_skipped = true;
            } else {
                self.live.set_phase(CpuPhase::Verifying);
                let pass_start = self.backend.now_ns();
                // `next_from` looks blocks up by binary search.
                self.failed_writes.sort_unstable();
                // The pass reads block by block, whatever sizes the main phase drew.
                self.io_sectors = self.plan.sectors_per_block;
                self.io_bytes = self.bs as u32;
                let mut pass = if self.tracked() {
                    Source::VerifyPass { next_block: 0 }
                } else {
                    Source::Replay(Box::new(Replay {
                        stream: main_source(self.plan, cpu_index),
                        writes_left: self.writes_issued,
                        next_block: 0,
                        end_block: 0,
                    }))
                };
                self.run_phase(Phase::VerifyPass, &mut pass, None)?;
                self.result.verify.pass_ns = self.backend.now_ns().saturating_sub(pass_start);
            }
        }
        if self.plan.spec.exitall {
            if !self.result.stopped_early {
                // fio's exitall: the first clone to end stops the others.
                self.shared.request_stop();
            }
            // And the jobs of the wave its exit_what names, however it ended (fio stops them
            // when the job exits).
            self.shared.stop_wave_jobs(&self.plan.spec.exitall_stops);
        }
        Ok(())
    }

    /// Detail mode: takes the interval sample and the log window that are due at `now`; with
    /// `last`, also the partial log window since the previous one, if it saw any I/O.
    fn sample_detail(&mut self, now: u64, last: bool) {
        let totals = self.detail_totals();
        let rw = self.plan.spec.rw;
        let directions = [rw.reads(), rw.writes(), rw.trims()];
        let Some(detail) = self.result.detail.as_deref_mut() else {
            return;
        };
        if !last && now >= self.next_sample_ns {
            detail.take_sample(&mut self.sample_mark, &totals, now, directions);
            self.next_sample_ns = now.saturating_add(detail.options.sample_interval_ns.max(1));
        }
        let window_due = now >= self.next_window_ns;
        let partial_left = last
            && self.next_window_ns != u64::MAX
            && totals.ios.iter().sum::<u64>() != self.window_mark.ios.iter().sum::<u64>();
        if window_due || partial_left {
            detail.take_window(&mut self.window_mark, &totals, now, self.detail_start_ns, directions);
            self.next_window_ns = now.saturating_add(detail.options.log_window_ns);
        }
    }

    fn detail_totals(&self) -> Totals {
        let mut totals = Totals::default();
        if let Some(detail) = &self.result.detail {
            for (index, (stats, direction)) in [
                (&self.result.read, &detail.read),
                (&self.result.write, &detail.write),
                (&self.result.trim, &detail.trim),
            ]
            .into_iter()
            .enumerate()
            {
                totals.bytes[index] = stats.bytes;
                totals.ios[index] = stats.ios;
                totals.latency[index] = (
                    stats.latency.samples(),
                    direction.slat.sum(),
                    direction.clat.sum(),
                    stats.latency.sum(),
                );
            }
        }
        totals
    }

    fn run_phase(&mut self, phase: Phase, source: &mut Source, deadline: Option<u64>) -> Result<(), WorkloadError> {
        // The completions array is out of `self` for the whole phase: `complete` cannot change
        // it, so a reap walks it with no bounds check per completion and no move in and out of
        // `self` per reap.
        let mut completions = core::mem::take(&mut self.completions);
        let outcome = self.run_phase_with(phase, source, deadline, &mut completions);
        self.completions = completions;
        outcome
    }

    /// [`CpuRun::run_phase`] with the completions array at hand.
    fn run_phase_with(
        &mut self,
        phase: Phase,
        source: &mut Source,
        deadline: Option<u64>,
        completions: &mut [Completion],
    ) -> Result<(), WorkloadError> {
        debug_assert!(!PLAIN || phase == Phase::Main);
        let phase = Self::shaped(phase);
        let mut issuing = true;
        self.retry = None;
        self.deferred.clear();
        // No deadline: one that never comes, so the loop's look is one compare.
        let deadline = deadline.unwrap_or(u64::MAX);
        let mut now = self.backend.now_ns();
        self.last_progress_ns = now;
        loop {
            if now >= self.next_periodic_ns {
                self.next_periodic_ns = now.saturating_add(PERIODIC_INTERVAL_NS);
                // The live counters serve the progress line (once a second): published here,
                // about every 100 ms, and when the phase ends, not after every reap.
                self.live.publish(&self.live_counts());
                self.backend.periodic(now);
                self.shared.take_wave_stop();
                if !PLAIN && phase == Phase::Main && self.result.detail.is_some() {
                    self.sample_detail(now, false);
                }
                if issuing && phase == Phase::Main && self.latency_search.is_some() && self.latency_target_done(now)? {
                    // The depth search settled and ran its final window.
                    issuing = false;
                    self.retry = None;
                    self.deferred.clear();
                }
                if !PLAIN
                    && issuing
                    && phase == Phase::Main
                    && self.ramp_end.is_none()
                    && let Some(miss) = self.rate_min_check(now)
                {
                    // fio stops a clone below its minimum rate and fails the job.
                    self.result.rate_min_missed = Some(miss);
                    issuing = false;
                    self.retry = None;
                    self.deferred.clear();
                }
                if issuing && phase == Phase::Main && self.steady.is_some() && self.steady_reached(now) {
                    // fio ends a job that reached steady state as if its runtime were over.
                    issuing = false;
                    self.retry = None;
                    self.deferred.clear();
                }
            }
            if !PLAIN && self.ramp_end.is_some_and(|end| now >= end) && phase == Phase::Main {
                self.end_ramp(now);
            }
            if issuing && (now >= deadline || self.shared.stop_requested()) {
                issuing = false;
                // What was drawn but not issued is dropped: the job is over (time-based) or stopped.
                self.retry = None;
                self.deferred.clear();
                if self.shared.stop_requested() {
                    self.result.stopped_early = true;
                }
            }
            if issuing {
                let ios_before = self.live_counts.ios;
                issuing = self.issue(source, phase)?;
                if !PLAIN
                    && issuing
                    && self.in_flight == 0
                    && self.live_counts.ios == ios_before
                    && !self.has_io_waiting()
                {
                    // Nothing outstanding, nothing submitted and nothing waiting to go: waiting
                    // could only end in the stall timeout. A bug in the engine's bookkeeping if
                    // it happens; the phase ends rather than hang.
                    debug_assert!(false, "cpu{}: {phase:?} waits with nothing in flight", self.slice.cpu);
                    issuing = false;
                }
            }
            if self.in_flight == 0 && !issuing {
                self.flush_suppressed_log();
                self.live.publish(&self.live_counts());
                return Ok(());
            }
            let reaped = self.backend.poll_reaped(completions);
            if reaped.succeeded == 0 && reaped.listed == 0 {
                now = self.backend.now_ns();
                let waited = now.saturating_sub(self.last_progress_ns);
                // A paced job with nothing in flight is waiting for its pace, not for the device.
                let stalled = !self.paced() || self.in_flight > 0;
                if stalled && waited > self.plan.spec.io_timeout_ns {
                    return Err(WorkloadError::Stalled {
                        cpu: self.slice.cpu,
                        in_flight: self.in_flight,
                        waited_ns: waited,
                        limit_ns: self.plan.spec.io_timeout_ns,
                    });
                }
                let idle_from = now;
                self.backend.idle(self.in_flight);
                now = self.backend.now_ns();
                if !PLAIN
                    && phase == Phase::Main
                    && let Some(detail) = &mut self.result.detail
                {
                    detail.idle_ns += now.saturating_sub(idle_from);
                }
                continue;
            }
            if !PLAIN && let Some(detail) = &mut self.result.detail {
                let count = Reaped {
                    listed: reaped.listed.min(completions.len()),
                    ..reaped
                }
                .count();
                detail.completions_per_reap[batch_bucket(count)] += count as u64;
            }
            let done_ns = self.backend.now_ns();
            // The successes the mask names: `complete` inlined with a constant outcome, so none
            // of its looks at failures and retries remains.
            let mut succeeded = reaped.succeeded;
            while succeeded != 0 {
                let slot = succeeded.trailing_zeros() as usize;
                succeeded &= succeeded - 1;
                self.complete(Completion::new(slot, Ok(())), done_ns, phase)?;
            }
            // A larger count than the array holds is clamped (`IoBackend::poll_completions`),
            // here only when something is listed: a plain reap lists nothing.
            if reaped.listed != 0 {
                completions[..reaped.listed.min(completions.len())]
                    .iter()
                    .try_for_each(|&completion| self.complete(completion, done_ns, phase))?;
            }
            self.record_latency_run();
            self.last_progress_ns = done_ns;
            // The completion time serves as the next round's clock: one clock read fewer per round
            // (clock reads were half of the per-I/O cost on the host benchmark).
            now = done_ns;
        }
    }

    pub(super) fn lba_of(&self, block: u64) -> u64 {
        self.first_lba + block * self.sectors_per_block
    }
}

/// The data of a write without verify: fio's `buffer_pattern` repeated from the first byte when
/// there is one, else baremq's non-zero fill for `stamp`.
pub(super) fn fill_write_data(buffer_pattern: &[u8], stamp: &BlockStamp, buffer: &mut [u8]) {
    if buffer_pattern.is_empty() {
        fill_block(VerifyMode::Pattern, stamp, buffer);
    } else {
        for (byte, value) in buffer.iter_mut().zip(buffer_pattern.iter().cycle()) {
            *byte = *value;
        }
    }
}
