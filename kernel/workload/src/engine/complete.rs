//! Counting what completed: a completion's statistics, its block and verify outcome, latency
//! runs, and the failed or retried I/Os kept and logged.

use super::verify::{TRACK_BUSY, TRACK_UNKNOWN};
use super::{
    Completion, CpuRun, IoBackend, IoOp, IoRecord, LatencyRun, LiveCounts, MAX_ERROR_RECORDS, OpStats, Phase, Slot,
};
use crate::error::WorkloadError;
use crate::job::ExpectedGeneration;
use crate::plan::VerifyScheme;
use crate::ratelimit::Verdict;

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
    #[inline(always)]
    pub(super) fn complete(&mut self, completion: Completion, done_ns: u64, phase: Phase) -> Result<(), WorkloadError> {
        let bogus = |reason| WorkloadError::BogusCompletion {
            cpu: self.slice.cpu,
            slot: completion.slot,
            reason,
        };
        let Some(entry) = self.slots.get_mut(completion.slot) else {
            return Err(bogus("is out of range"));
        };
        if !entry.in_flight() {
            return Err(bogus("is not in flight"));
        }
        // Only what every I/O needs is read here; the rare paths read the slot again (it keeps
        // its fields until the next submission in it).
        let (op, block, bytes, submitted_ns) = (entry.op, entry.block, entry.bytes, entry.submitted_ns);
        // Pushed on the free list: back into use first, as the slot whose buffer is warm.
        entry.next_free = self.free_head;
        // Below the depth, which fits in u32.
        self.free_head = completion.slot as u32;
        self.in_flight -= 1;
        let phase = Self::shaped(phase);
        if !PLAIN && op == IoOp::Flush {
            self.complete_flush(completion, self.slots[completion.slot], done_ns, phase);
            return Ok(());
        }
        if !PLAIN {
            self.live_counts.ios += 1;
        }
        let tracked = self.tracked();
        let block_index = block as usize;
        // The main phase's I/Os count in their direction's statistics (a flush has returned
        // above), the verify pass's in its own.
        let measured = phase == Phase::Main;
        match completion.result {
            Ok(()) => {
                let bytes = u64::from(bytes);
                if !PLAIN {
                    self.live_counts.bytes += bytes;
                }
                if measured {
                    let latency_ns = done_ns.saturating_sub(submitted_ns);
                    if !PLAIN && self.latency_search.is_some() && op != IoOp::Trim {
                        self.latency_target_sample(latency_ns, done_ns)?;
                    }
                    if self.latency_runs {
                        self.add_success(op, latency_ns, bytes);
                    } else {
                        let stats = self.stats_of(op);
                        stats.ios += 1;
                        stats.bytes += bytes;
                        stats.latency.record(latency_ns);
                    }
                    if !PLAIN && let Some(detail) = &mut self.result.detail {
                        let issued_ns = self.slots[completion.slot].issued_ns;
                        let direction = match op {
                            IoOp::Read => &mut detail.read,
                            IoOp::Trim => &mut detail.trim,
                            _ => &mut detail.write,
                        };
                        direction.slat.record(issued_ns.saturating_sub(submitted_ns));
                        direction.clat.record(done_ns.saturating_sub(issued_ns));
                    }
                } else {
                    self.result.verify.pass_reads += 1;
                }
                if !PLAIN && op == IoOp::Write && phase == Phase::Main && self.plan.spec.verify_backlog != 0 {
                    self.note_backlog_write(block);
                }
                // Unverified jobs expect nothing: no generation, no check.
                if !self.verify_off() {
                    match (op, self.slots[completion.slot].generation) {
                        (IoOp::Write, Some(ExpectedGeneration::Exact(generation))) if tracked => {
                            self.tracker[block_index] = generation;
                        }
                        (IoOp::Read, Some(expected)) => {
                            let lba = self.lba_of(block);
                            self.check_read(completion.slot, lba, bytes as usize, expected, done_ns)
                        }
                        (IoOp::Read, None) => self.result.verify.unchecked += 1,
                        _ => {}
                    }
                }
            }
            Err(_) => {
                if !PLAIN {
                    self.live_counts.errors += 1;
                }
                if measured {
                    let stats = self.stats_of(op);
                    stats.ios += 1;
                    stats.errors += 1;
                } else {
                    self.result.verify.pass_reads += 1;
                }
                self.result.errors += 1;
                let slot = self.slots[completion.slot];
                if let (IoOp::Write, Some(ExpectedGeneration::Exact(generation))) = (op, slot.generation)
                    && tracked
                {
                    // The block may hold the old or the new version: stop expecting either, but keep
                    // counting so the next write gets a fresh generation.
                    self.tracker[block_index] = TRACK_UNKNOWN | generation;
                }
                if op == IoOp::Write && self.plan.verify == VerifyScheme::SinglePass {
                    self.note_failed_write(slot);
                }
                if op == IoOp::Read && !self.verify_off() {
                    // Every read of a verify job ends up checked, unchecked, or a mismatch.
                    self.result.verify.unchecked += 1;
                }
                let class = if op == IoOp::Read {
                    crate::job::ErrorClass::Read
                } else {
                    crate::job::ErrorClass::Write
                };
                if self.plan.spec.stops_on(class) {
                    self.shared.request_stop();
                }
            }
        }
        if tracked {
            self.tracker[block_index] &= !TRACK_BUSY;
            self.deferred.block_freed(block);
        }
        if completion.result.is_err() || completion.retries > 0 {
            self.note_unusual(
                &completion,
                self.slots[completion.slot],
                self.lba_of(block),
                done_ns,
                phase,
            );
        }
        Ok(())
    }

    /// The main phase's statistics of `op`'s direction (a flush keeps its own,
    /// `complete_flush`, and never comes here).
    #[inline(always)]
    fn stats_of(&mut self, op: IoOp) -> &mut OpStats {
        // Reads first, then writes: a read's statistics after one compare (a `match` tests
        // trims first).
        if op == IoOp::Read {
            &mut self.result.read
        } else if op == IoOp::Write {
            &mut self.result.write
        } else {
            &mut self.result.trim
        }
    }

    /// Counts a main-phase success of `op` of `bytes` that took `latency_ns` into the reap's
    /// run (see [`LatencyRun`]); a different one records the run so far and starts another.
    #[inline(always)]
    fn add_success(&mut self, op: IoOp, latency_ns: u64, bytes: u64) {
        let run = &mut self.latency_run;
        if run.latency_ns == latency_ns && run.op == op {
            run.count += 1;
            run.bytes += bytes;
        } else {
            self.record_latency_run();
            self.latency_run = LatencyRun {
                op,
                latency_ns,
                count: 1,
                bytes,
            };
        }
    }

    /// Records the reap's run of equal latencies in its direction's statistics.
    #[inline(always)]
    pub(super) fn record_latency_run(&mut self) {
        let LatencyRun {
            op,
            latency_ns,
            count,
            bytes,
        } = self.latency_run;
        if count == 0 {
            return;
        }
        // Emptied: an equal success next counts from nothing.
        self.latency_run.count = 0;
        self.latency_run.bytes = 0;
        let stats = self.stats_of(op);
        stats.ios += count;
        stats.bytes += bytes;
        stats.latency.record_n(latency_ns, count);
    }

    /// What the progress line shows. A plain job counts nothing apart per I/O: with no verify
    /// pass, no flush and no ramp, its completed I/Os, bytes and errors are exactly those of its
    /// statistics, summed here once per reap.
    pub(super) fn live_counts(&self) -> LiveCounts {
        if PLAIN {
            let r = &self.result;
            LiveCounts {
                ios: r.read.ios + r.write.ios + r.trim.ios,
                bytes: r.read.bytes + r.write.bytes + r.trim.bytes,
                errors: r.errors,
                mismatches: 0,
            }
        } else {
            self.live_counts
        }
    }

    /// Counts, keeps (the first few) and logs (rate-limited) a failed or retried I/O.
    pub(super) fn note_unusual(&mut self, completion: &Completion, slot: Slot, lba: u64, done_ns: u64, phase: Phase) {
        let record = IoRecord {
            at_ns: done_ns,
            op: slot.op,
            lba,
            // The planner checked the sector size (non-zero, dividing bs).
            sectors: slot.bytes / self.plan.device.sector_size,
            result: completion.result,
            retries: completion.retries,
            in_verify_pass: phase == Phase::VerifyPass,
        };
        if completion.result.is_err() && self.result.error_records.len() < MAX_ERROR_RECORDS {
            self.result.error_records.push(record);
        }
        if completion.retries > 0 {
            self.result.retried += 1;
            if self.result.retried_records.len() < MAX_ERROR_RECORDS {
                self.result.retried_records.push(record);
            }
        }
        if let Verdict::Print { suppressed_before } = self.log_limit.check(done_ns) {
            let cpu = self.slice.cpu;
            if suppressed_before == 0 {
                self.backend.log_line(format_args!("cpu{cpu}: {record}"));
            } else {
                self.backend.log_line(format_args!(
                    "cpu{cpu}: {record} ({suppressed_before} similar lines suppressed)"
                ));
            }
        }
    }

    /// Says how many per-I/O lines the rate limit held back since the last one printed.
    pub(super) fn flush_suppressed_log(&mut self) {
        let suppressed = self.log_limit.take_pending_suppressed();
        if suppressed > 0 {
            let cpu = self.slice.cpu;
            self.backend.log_line(format_args!(
                "cpu{cpu}: {suppressed} more lines about failed or retried I/Os suppressed"
            ));
        }
        self.result.log_lines_suppressed = self.log_limit.total_suppressed();
    }
}
