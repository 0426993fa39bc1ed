//! Filling free slots: which I/O goes next (a retry, a deferred one, a new one), submitting it,
//! and taking its slot.

use super::source::Source;
use super::verify::TRACK_BUSY;
use super::{Completion, CpuRun, IN_FLIGHT, IoBackend, IoOp, Phase, SubmitError};
use crate::detail::depth_bucket;
use crate::error::WorkloadError;
use crate::job::ExpectedGeneration;

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
    /// Fills free slots: first an I/O the backend refused as busy, then deferred I/Os whose block is
    /// no longer in flight, then new I/Os from `source`. An I/O whose block is in flight is deferred
    /// and the next one is drawn, until the deferral queue is full. Returns false once `source` is
    /// exhausted and nothing waits to be issued.
    ///
    /// At most one submission per slot per call: a submission that fails at once frees its slot
    /// again, and without the bound a device that rejects everything would keep the CPU here, past
    /// the runtime, the stop flag and the periodic hook.
    pub(super) fn issue(&mut self, source: &mut Source, phase: Phase) -> Result<bool, WorkloadError> {
        let mut submissions_left = self.slots.len();
        let mut drops_left = self.slots.len();
        // A time-based job has no set number of I/Os, so once the queue is full an I/O for a busy
        // block is dropped, as if another block had been drawn. A size-bound job must issue every
        // I/O it drew, so it waits instead.
        let may_drop = self.plan.spec.is_time_based();
        // One clock read per burst: every I/O of the burst starts at the burst's first submission.
        // The burst is submitted back to back (at most one per slot), so an I/O's latency reads
        // high by at most the time to submit the I/Os before it in the burst (docs/bench.md).
        let burst_ns = self.backend.now_ns();
        // The slot is read once here: nothing before the submission below takes or frees one.
        while let Some(slot) = self.free_slot()
            && submissions_left > 0
        {
            if self.paced() && phase == Phase::Main && (self.flush_in_flight || self.flush_wanted) {
                // fio's fsync: what is in flight completes, then the flush alone.
                if self.flush_in_flight || self.in_flight > 0 {
                    return Ok(true);
                }
                self.submit_flush(phase)?;
                return Ok(true);
            }
            // Tested before it is taken: the take is a load and two stores per I/O.
            let io = if let Some(io) = self.retry {
                self.retry = None;
                io
            } else if self.tracked()
                && let Some(io) = self.deferred.take_ready(&self.tracker)
            {
                io
            } else if self.tracked() && self.deferred.is_full() && !may_drop {
                // (Only tracked jobs defer I/Os: the others skip both looks.)
                // Everything waiting is for blocks in flight: wait for one of them.
                return Ok(true);
            } else if let Some(io) = self.next_from(source) {
                if self.tracked() && self.tracker[io.1 as usize] & TRACK_BUSY != 0 {
                    if !self.deferred.is_full() {
                        self.deferred.push(io);
                        self.result.deferred_ios += 1;
                        continue;
                    }
                    self.result.dropped_busy_ios += 1;
                    drops_left -= 1;
                    if drops_left == 0 {
                        // Every draw hits a busy block (a slice not much larger than iodepth):
                        // wait for a completion rather than spin here.
                        return Ok(true);
                    }
                    continue;
                }
                io
            } else {
                // The source is exhausted; what is deferred still has to go out, and so does a
                // verify backlog that writes still in flight may complete.
                let backlog_due =
                    !self.backlog_pending.is_empty() || (!self.backlog_written.is_empty() && self.in_flight > 0);
                return Ok(self.retry.is_some() || !self.deferred.is_empty() || backlog_due);
            };
            if self.paced() && phase == Phase::Main && !self.pace_allows(io.0) {
                // Not yet: it goes first when the pace allows (the loop comes back here).
                self.retry = Some(io);
                return Ok(true);
            }
            submissions_left -= 1;
            if !self.try_submit(slot, io, burst_ns, phase)? {
                self.retry = Some(io);
                return Ok(true);
            }
            if !PLAIN && io.0 == IoOp::Write && self.plan.spec.flush_every_writes != 0 && phase == Phase::Main {
                self.writes_since_flush += 1;
                if self.writes_since_flush >= self.plan.spec.flush_every_writes {
                    self.writes_since_flush = 0;
                    self.flush_wanted = true;
                }
            }
        }
        Ok(true)
    }

    /// Whether an I/O waits to be issued although none may go now: one the backend refused as
    /// busy or the pace holds back (`retry`), or a due flush. With nothing in flight and nothing
    /// submitted, only these justify waiting.
    #[cold]
    pub(super) fn has_io_waiting(&self) -> bool {
        self.retry.is_some() || self.flush_wanted
    }

    /// Tries to start `io` (whose block is not in flight) in `slot`, the top of the free list.
    /// Returns false when the backend is busy; an immediate failure counts as a completed, failed
    /// I/O. `submitted_ns` is the clock read of the burst this submission belongs to.
    fn try_submit(
        &mut self,
        slot: usize,
        (op, block): (IoOp, u64),
        submitted_ns: u64,
        phase: Phase,
    ) -> Result<bool, WorkloadError> {
        let tracked = self.tracked();
        debug_assert!(!tracked || self.tracker[block as usize] & TRACK_BUSY == 0);
        debug_assert_eq!(self.free_slot(), Some(slot));
        let lba = self.lba_of(block);
        // Unverified jobs (the benchmark case) skip the match: a jump table is an indirect jump.
        let generation = if self.verify_off() {
            None
        } else {
            self.expected_generation(op, block)
        };
        // Asked of writes only: a read never refills its buffer.
        let read_into_buffer = || op == IoOp::Write && self.restamp_after_read && self.slots[slot].op == IoOp::Read;
        // The buffer is touched only to stamp a write or clear a verified read's headers: a
        // plain benchmark I/O skips it.
        // fio's dedupe and compression make each unverified write's data (never the plain shape).
        let fills_content = !PLAIN && op == IoOp::Write && generation.is_none() && self.content.is_some();
        let touches_buffer = match (op, generation) {
            (IoOp::Write, Some(ExpectedGeneration::Exact(_))) | (IoOp::Read, Some(_)) => true,
            (IoOp::Write, None) => read_into_buffer(),
            _ => false,
        };
        if fills_content {
            self.fill_content(slot);
        } else if touches_buffer {
            let read_into_buffer = read_into_buffer();
            self.prepare_buffer(slot, op, generation, lba, read_into_buffer)?;
        }
        let sectors = self.io_sectors;
        // An accepted submission is one test of the outcome; a refused one goes out of line.
        if let Err(refusal) = self.backend.submit(slot, op, lba, sectors) {
            return self.submission_refused(refusal, slot, (op, block), generation, submitted_ns, phase);
        }
        self.record_submission(slot, (op, block), generation, submitted_ns);
        Ok(true)
    }

    /// `try_submit` after the backend refused the submission: busy (the slot stays free:
    /// false), or failed at once, which counts as a submitted I/O that completed with the
    /// failure.
    #[inline(never)]
    fn submission_refused(
        &mut self,
        refusal: SubmitError,
        slot: usize,
        io: (IoOp, u64),
        generation: Option<ExpectedGeneration>,
        submitted_ns: u64,
        phase: Phase,
    ) -> Result<bool, WorkloadError> {
        let SubmitError::Failed(error) = refusal else {
            return Ok(false);
        };
        self.record_submission(slot, io, generation, submitted_ns);
        self.complete(Completion::new(slot, Err(error)), submitted_ns, phase)?;
        Ok(true)
    }

    /// Takes free `slot` for `op` on `block`, submitted in the burst of `submitted_ns`.
    #[inline(always)]
    fn record_submission(
        &mut self,
        slot: usize,
        (op, block): (IoOp, u64),
        generation: Option<ExpectedGeneration>,
        submitted_ns: u64,
    ) {
        // Detail mode only: the second clock read costs as much as the engine's own work per
        // I/O on the host benchmark.
        let issued_ns = if !PLAIN && let Some(detail) = &mut self.result.detail {
            detail.depth_at_submit[depth_bucket(self.in_flight + 1)] += 1;
            self.backend.now_ns()
        } else {
            submitted_ns
        };
        let bytes = self.io_bytes;
        let entry = &mut self.slots[slot];
        self.free_head = entry.next_free;
        entry.next_free = IN_FLIGHT;
        entry.op = op;
        entry.block = block;
        entry.bytes = bytes;
        entry.submitted_ns = submitted_ns;
        if !PLAIN {
            // A plain job expects no generation and measures no issue time: it never reads
            // either, so they are not written.
            entry.generation = generation;
            entry.issued_ns = issued_ns;
        }
        self.in_flight += 1;
        if !PLAIN && op == IoOp::Write {
            self.writes_issued += 1;
        }
        if self.tracked() {
            self.tracker[block as usize] |= TRACK_BUSY;
        }
        self.last_progress_ns = submitted_ns;
    }
}
