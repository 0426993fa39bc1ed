//! The engine's backend on one CPU: the block device's queue, the CPU's DMA buffers and its part
//! of the done board, and how one CPU's share of a job is set up and run.

use super::*;

/// Codes reported in `IoError::Rejected` when a request never reached the device.
const REJECTED_BEYOND_END: u32 = 1;
const REJECTED_FROZEN: u32 = 2;
const REJECTED_LONGER_THAN_BUFFER: u32 = 98;
const REJECTED_OTHER: u32 = 99;

fn rejection_code(e: &BlkError) -> u32 {
    match e {
        BlkError::BeyondEnd { .. } => REJECTED_BEYOND_END,
        BlkError::Frozen => REJECTED_FROZEN,
        _ => REJECTED_OTHER,
    }
}

pub(super) struct KernelBackend<'a> {
    pub(super) dev: &'static dyn BlockDevice,
    pub(super) cpu: usize,
    pub(super) buffers: Vec<DmaBuffer>,
    pub(super) bs: usize,
    /// Block-layer (512-byte) sectors per device sector.
    pub(super) scale: u64,
    /// The most device sectors one request may move: what fits in `bs` (one compare per I/O
    /// instead of a multiply, a shift and a compare).
    pub(super) max_sectors: u32,
    pub(super) poll: bool,
    /// Submitted with `submit_deferred` since the last `commit` (the doorbell may be unrung).
    pub(super) uncommitted: bool,
    /// The device may leave a doorbell for `commit` (`BlockDevice::defers_doorbell`): only then
    /// does a submission leave `uncommitted` set (a `dyn` call per reap less).
    pub(super) defers: bool,
    /// The device can open an interrupt-then-poll window (`BlockDevice::has_polling_window`):
    /// only then is it asked on every reap.
    pub(super) windows: bool,
    /// Collect a burst's I/Os and hand them to the device together at `commit`
    /// (`BlockDevice::submit_batch`: one run-token round trip, one doorbell, one call). Off at
    /// iodepth 1 (nothing to batch), where an I/O's own submission time is
    /// measured (fio's slat, the detail mode) and over a file set (which switches devices
    /// between I/Os).
    pub(super) batch: bool,
    /// The burst collected so far (`batch`), as the bios `submit_batch` takes; also I/Os the
    /// device had no tag for, retried at the next `commit`. Each is in flight for the engine.
    pub(super) pending: heapless::Vec<blk::Bio<'a>, { blk::SUBMIT_BATCH_CHUNK }>,
    /// Each slot's whole buffer as one segment, built once (`whole_segments`): the bio of an I/O
    /// that fills its buffer (every I/O of a fixed-size job) borrows its slot's, so a burst's
    /// bios are built once, at `submit`, with no segment written per I/O.
    pub(super) segments: &'a [Segment],
    /// The device sectors of an I/O that fills its slot's buffer: such an I/O's bio takes the
    /// slot's whole segment ([`NEVER`] when no I/O fills it exactly on this device).
    pub(super) whole_sectors: u32,
    /// `whole_sectors` when the backend batches (`batch`), else [`NEVER`]: the common case,
    /// an I/O that joins the burst over its whole segment, is one compare.
    pub(super) batch_sectors: u32,
    pub(super) overflow: Vec<Completion>,
    /// The job traces request stages (`trace=`; the trace runs exactly then): each reaped
    /// completion is recorded.
    pub(super) traced: bool,
    /// Neither `poll`, nor `windows`, nor `traced`, nor refill points ([`reap_plain`]): a reap
    /// is the commit and the board's walk, after one look instead of four.
    pub(super) reap_plain: bool,
    /// A reap that finds more successes than this hands out only this many
    /// (`BlockDevice::refill_after`; 0: all), so that the engine refills their slots, and the
    /// next reap sends them to the device, before it completes the rest (handed out whole by
    /// that next reap): the device works while the CPU completes (NVMe's SQ doorbell;
    /// docs/bench.md "Refill within a reap").
    pub(super) refill_after: usize,
    /// Successes taken from the board that a refill point held back for the next reap.
    pub(super) carried: u64,
    /// This CPU's words of the done board for the job's slots (its queue depth), cut once:
    /// one word per reap at QD 64 or less, with no lookup per reap; `run_share`
    /// clears anything above them when the job ends.
    pub(super) done: done::CpuDone<'static, blk::Status>,
    /// Where this backend's window of the CPU's done-board slots starts (0 unless the CPU runs
    /// several job contexts by turns).
    pub(super) first_slot: usize,
    /// The CPU runs several job contexts by turns (`arch::turns`): a reap hands the CPU over
    /// after its commit, and an idle wait halts only when every context is idle.
    pub(super) turns: bool,
    pub(super) next_tick_ns: u64,
    pub(super) progress: Option<(&'a JobShared, ProgressMeter, u64, &'a str)>,
}

/// Whether a backend's reap is the plain one: the job does not poll (`poll`), the device opens
/// no interrupt-then-poll window (`windows`), the job does not trace request stages (`traced`),
/// hands every reap out whole (`refill_after` 0) and has its CPU to itself (not `turns`).
fn reap_plain(poll: bool, windows: bool, traced: bool, refill_after: usize, turns: bool) -> bool {
    !poll && !windows && !traced && refill_after == 0 && !turns
}

/// No request's length in device sectors (`KernelBackend::whole_sectors`): a buffer holds at
/// most `u32::MAX / 512` sectors, so no request is this long.
const NEVER: u32 = u32::MAX;

/// The bio of slot `slot`'s I/O: `op` of `nr_sectors` at `sector`, over `segments` (the
/// slot's; a trim or a flush moves no data and takes none). Its cookie is the slot's place on
/// the CPU's part of the done board: the backend's window starts at `first_slot`.
#[inline(always)]
fn bio_of(
    first_slot: usize,
    slot: usize,
    op: IoOp,
    sector: u64,
    nr_sectors: u32,
    segments: &[Segment],
) -> blk::Bio<'_> {
    let cookie = block::cookie(first_slot + slot);
    match op {
        IoOp::Read => blk::Bio::read(sector, nr_sectors, segments, cookie),
        IoOp::Write => blk::Bio::write(sector, nr_sectors, segments, cookie),
        // fio's trim: the block's range, no data.
        IoOp::Trim => blk::Bio::discard(sector, nr_sectors, cookie),
        // fio's fsync / end_fsync: the device's cache flush, no data.
        IoOp::Flush => blk::Bio::flush(cookie),
    }
}

/// The slot a bio of a backend whose window starts at `first_slot` was submitted from
/// (`bio_of`).
fn slot_of(first_slot: usize, bio: &blk::Bio<'_>) -> usize {
    bio.cookie as usize - first_slot
}

/// Each of `buffers` whole, as one segment of `bytes` bytes (`KernelBackend::segments`).
fn whole_segments(buffers: &[DmaBuffer], bytes: usize) -> Vec<Segment> {
    buffers
        .iter()
        .map(|b| {
            // SAFETY: each buffer is at least `bytes` long and stays allocated for the job (the
            // backend owns it). Its segment reaches a device only in the bio of its slot's I/O,
            // and the engine touches a slot's buffer only while the slot is not in flight (its
            // slot contract), so from submission to completion nothing else accesses it.
            unsafe { Segment::with_virt(b.phys(), b.as_ptr(), bytes as u32) }
        })
        .collect()
}

/// Lists slots `first + i` for each bit `i` of `bits` as successes after the `n` completions
/// `out` holds; returns how many it holds now (what does not fit waits in `overflow` for the
/// next reap). For a word the engine's mask does not carry (`KernelBackend::take_done`). Out of
/// line: the benchmark's reaps never come here.
/// Plain values in and out, not a struct or a `Taken` that the caller would keep in memory
/// on every reap to make the call possible.
#[inline(never)]
fn list_successes(out: &mut [Completion], n: usize, overflow: &mut Vec<Completion>, first: usize, bits: u64) -> usize {
    let mut n = n;
    for_each_bit(bits, |i| {
        n = list_one(out, n, overflow, Completion::new(first + i, Ok(())))
    });
    n
}

/// [`list_successes`] for one completion with another status than success.
#[inline(never)]
fn list_failure(
    out: &mut [Completion],
    n: usize,
    overflow: &mut Vec<Completion>,
    slot: usize,
    status: Status,
) -> usize {
    let result = match status {
        Status::Ok => Ok(()),
        Status::Timeout => Err(IoError::Timeout),
        Status::Aborted => Err(IoError::Aborted),
        other => Err(IoError::Device { status: other as u32 }),
    };
    list_one(out, n, overflow, Completion::new(slot, result))
}

#[inline(always)]
fn list_one(out: &mut [Completion], n: usize, overflow: &mut Vec<Completion>, c: Completion) -> usize {
    if n < out.len() {
        out[n] = c;
        n + 1
    } else {
        overflow.push(c);
        n
    }
}

/// Records in the stage trace that `cpu` reaped what the board took.
#[inline(never)]
fn trace_reaped(cpu: usize, first_slot: usize, taken: Taken<blk::Status>) {
    match taken {
        Taken::Successes { first, bits } => {
            for_each_bit(bits, |i| crate::arch::stagetrace::reaped(cpu, first_slot + first + i))
        }
        Taken::Other { slot, .. } => crate::arch::stagetrace::reaped(cpu, first_slot + slot),
    }
}

impl<'a> KernelBackend<'a> {
    /// The most sectors of `scale` 512-byte sectors that fit in a buffer of `bs` bytes: at most
    /// bs / 512, which fits in u32 (bs is a u32 of the plan).
    pub(super) fn max_sectors(bs: usize, scale: u64) -> u32 {
        (bs as u64 / (scale * 512)) as u32
    }

    /// The device sectors of an I/O that fills a buffer of `bs` bytes, if one does ([`NEVER`]
    /// if not).
    pub(super) fn whole_sectors(bs: usize, scale: u64) -> u32 {
        let sectors = Self::max_sectors(bs, scale);
        if u64::from(sectors) * scale * 512 == bs as u64 {
            sectors
        } else {
            NEVER
        }
    }

    /// Moves completions kept back by an earlier reap into `out`; returns how many.
    #[cold]
    pub(super) fn drain_overflow(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.overflow.pop() {
                Some(c) => {
                    out[n] = c;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Drives `dev`, whose sectors are `scale` block-layer sectors, from now on.
    pub(super) fn drive(&mut self, dev: &'static dyn BlockDevice, scale: u64) {
        self.dev = dev;
        self.scale = scale;
        self.max_sectors = Self::max_sectors(self.bs, scale);
        self.whole_sectors = Self::whole_sectors(self.bs, scale);
        self.batch_sectors = if self.batch { self.whole_sectors } else { NEVER };
        self.defers = dev.defers_doorbell();
        self.windows = dev.has_polling_window();
        self.refill_after = dev.refill_after();
        self.reap_plain = reap_plain(self.poll, self.windows, self.traced, self.refill_after, self.turns);
    }

    /// Hands the collected burst to the device, then rings what this CPU's deferred
    /// submissions left unrung.
    #[inline(always)]
    pub(super) fn commit(&mut self) {
        if !self.pending.is_empty() {
            self.submit_pending();
        }
        if self.uncommitted {
            self.uncommitted = false;
            self.dev.commit(self.cpu);
        }
    }

    /// Submits `bio` on its own (deferred: `commit` rings).
    #[inline(always)]
    pub(super) fn submit_now(&mut self, bio: &blk::Bio<'_>) -> Result<(), SubmitError> {
        match self.dev.submit_deferred(self.cpu, bio) {
            Ok(_) => {
                self.uncommitted = self.defers;
                Ok(())
            }
            // Out of line: an accepted request is one test of the outcome.
            Err(e) => self.refused(e),
        }
    }

    /// What the engine hears of a submission the device refused: busy (no tag: the burst so
    /// far is rung and the device's progress pushed), or failed.
    #[inline(never)]
    pub(super) fn refused(&mut self, e: BlkError) -> Result<(), SubmitError> {
        if let BlkError::TagsExhausted { .. } = e {
            self.commit();
            self.dev.make_progress(self.cpu);
            return Err(SubmitError::Busy);
        }
        log::warn!("{}: request rejected: {e}", self.dev.facts().name);
        Err(SubmitError::Failed(IoError::Rejected {
            code: rejection_code(&e),
        }))
    }

    /// `submit` of what does not fill its slot's buffer: a flush, which moves no data (into
    /// the burst when batching), or a shorter I/O (variable block sizes), which goes alone
    /// after the burst so far (the order stays the engine's), over a segment of its length.
    #[inline(never)]
    pub(super) fn submit_other(
        &mut self,
        slot: usize,
        op: IoOp,
        sector: u64,
        nr_sectors: u32,
    ) -> Result<(), SubmitError> {
        let segments: &'a [Segment] = self.segments;
        let whole = core::slice::from_ref(&segments[slot]);
        let moves_data = matches!(op, IoOp::Read | IoOp::Write);
        if !moves_data {
            let bio = bio_of(self.first_slot, slot, op, sector, nr_sectors, whole);
            return if self.batch {
                self.collect(bio)
            } else {
                self.submit_now(&bio)
            };
        }
        if !self.pending.is_empty() {
            self.submit_pending();
        }
        // Below the buffer's length (`submit` checked the sectors against `max_sectors`).
        let part = [whole[0].slice(0, nr_sectors * 512)];
        self.submit_now(&bio_of(self.first_slot, slot, op, sector, nr_sectors, &part))
    }

    /// Adds `bio` to the burst, submitting the burst first when it is full.
    #[inline(always)]
    pub(super) fn collect(&mut self, bio: blk::Bio<'a>) -> Result<(), SubmitError> {
        // `>=`, not `is_full`'s `==`: past it the compiler knows there is room, and the push
        // tests nothing again.
        if self.pending.len() >= self.pending.capacity() {
            self.submit_pending();
            if self.pending.len() >= self.pending.capacity() {
                // No tag for any of them yet.
                return Err(SubmitError::Busy);
            }
        }
        // Room: checked above.
        let _ = self.pending.push(bio);
        Ok(())
    }

    /// Submits the collected burst in one `submit_batch` call. A bio the device refuses
    /// completes at once with the rejection (as an unbatched refusal does); one it has no tag
    /// for stays pending, with those after it, for the next `commit`.
    pub(super) fn submit_pending(&mut self) {
        if let [bio] = self.pending[..] {
            // A burst of one (QD1): the plain submission, without the batch's set-up.
            let outcome = self.dev.submit_deferred(self.cpu, &bio);
            self.uncommitted = self.defers;
            match outcome {
                Ok(_) => self.pending.clear(),
                Err(BlkError::TagsExhausted { .. }) => self.dev.make_progress(self.cpu),
                Err(e) => {
                    self.pending.clear();
                    self.reject(slot_of(self.first_slot, &bio), &e);
                }
            }
            return;
        }
        let mut done = 0;
        while done < self.pending.len() {
            let outcome = self.dev.submit_batch(self.cpu, &self.pending[done..]);
            done += outcome.accepted;
            match outcome.error {
                None => break,
                Some(BlkError::TagsExhausted { .. }) => {
                    self.dev.make_progress(self.cpu);
                    break;
                }
                Some(e) => {
                    let slot = slot_of(self.first_slot, &self.pending[done]);
                    self.reject(slot, &e);
                    done += 1;
                }
            }
        }
        if done == self.pending.len() {
            self.pending.clear();
        } else {
            let left = self.pending.len() - done;
            self.pending.copy_within(done.., 0);
            self.pending.truncate(left);
        }
    }

    /// Rings what the engine submitted, polls where the device wants it, and takes this
    /// CPU's completions off the done board: with `MASK` (`poll_reaped`) the first-attempt
    /// successes of slots below 64 as bits, everything else as `Completion`s in `out`.
    #[inline(always)]
    pub(super) fn reap<const MASK: bool>(&mut self, out: &mut [Completion]) -> Reaped {
        // The engine reaps after every burst of submissions (its issue, then this): the burst
        // ends here, with one doorbell, before anything waits for its completions.
        self.commit();
        // One flag for the three looks a plain reap skips.
        if !self.reap_plain
            && let Some(traced) = self.poll_or_trace::<MASK>(out)
        {
            return traced;
        }
        let n = self.overflow_first(out);
        let (succeeded, n) = self.take_done::<MASK, false>(out, n);
        Reaped { succeeded, listed: n }
    }

    /// `reap`'s looks after the commit where the job polls, the device may open a polling
    /// window, the job traces request stages or the device has refill points: polls where
    /// due, then, for a traced job, takes the completions with their trace, and hands out the
    /// successes up to the refill point (`None`: the caller takes them, untraced and whole).
    #[inline(never)]
    pub(super) fn poll_or_trace<const MASK: bool>(&mut self, out: &mut [Completion]) -> Option<Reaped> {
        // An interrupt-then-poll window (megasas.irq_poll, nvme.irq_poll) masks the interrupt:
        // poll while open.
        if self.poll || (self.windows && self.dev.polling_window(self.cpu)) {
            self.dev.poll(self.cpu);
        }
        if self.turns {
            // The burst is at the device (committed): the other contexts of this CPU take
            // their turn before this one looks for its completions.
            crate::arch::turns::yield_turn();
        }
        if !self.traced && self.refill_after == 0 && !self.turns {
            return None;
        }
        let n = self.overflow_first(out);
        // Asked once per reap, not per completion, whether stages are traced: the
        // walk without the trace has one value and one branch fewer per completion.
        let (succeeded, n) = if self.traced {
            self.take_done::<MASK, true>(out, n)
        } else {
            self.take_done::<MASK, false>(out, n)
        };
        if self.turns && (succeeded != 0 || n != 0) {
            crate::arch::turns::progress();
        }
        if !MASK {
            // A listing reap lists what a refill point held back too.
            let carried = core::mem::take(&mut self.carried);
            let n = if carried != 0 {
                list_successes(out, n, &mut self.overflow, 0, carried)
            } else {
                n
            };
            return Some(Reaped { succeeded, listed: n });
        }
        if self.refill_after == 0 {
            return Some(Reaped { succeeded, listed: n });
        }
        // One refill point per run of completions: its first part goes out alone (the lowest
        // slots), then what was held back goes out whole with whatever completed since. Every
        // `refill_after` instead cost 47 instructions per I/O more on NVMe for no better
        // figure (docs/bench.md "Refill within a reap").
        let (now, rest) = if self.carried != 0 {
            (succeeded | core::mem::take(&mut self.carried), 0)
        } else {
            split_successes(succeeded, self.refill_after)
        };
        self.carried = rest;
        Some(Reaped {
            succeeded: now,
            listed: n,
        })
    }

    /// What a reap could not hand out last time goes first (rare: more completions than the
    /// engine's array at once, or a burst's bio the device refused at submission): moved into
    /// `out`, returns how many.
    #[inline(always)]
    pub(super) fn overflow_first(&mut self, out: &mut [Completion]) -> usize {
        if self.overflow.is_empty() {
            0
        } else {
            self.drain_overflow(out)
        }
    }

    /// Takes this CPU's completions off the done board (see `reap`), after the `n` already in
    /// `out`; returns the successes' mask and how many `out` holds. `TRACED`: the job traces
    /// request stages, and each completion is recorded.
    #[inline(always)]
    pub(super) fn take_done<const MASK: bool, const TRACED: bool>(
        &mut self,
        out: &mut [Completion],
        n: usize,
    ) -> (u64, usize) {
        let mut succeeded = 0u64;
        let mut n = n;
        let overflow = &mut self.overflow;
        let cpu = self.cpu;
        let first_slot = self.first_slot;
        // The board hands a word's successes over as bits: with `MASK`, those of
        // slots below 64 go to the engine as they come, without a status read or a branch
        // each. The closure stays this small so that it is inlined into the board's walk (a
        // call with a `Taken` through the stack costs about 30 instructions per reap, what QD1
        // pays per I/O); everything else is listed out of line.
        self.done.take_split(|taken| {
            if TRACED {
                trace_reaped(cpu, first_slot, taken);
            }
            match taken {
                Taken::Successes { first: 0, bits } if MASK => succeeded |= bits,
                Taken::Successes { first, bits } => n = list_successes(out, n, overflow, first, bits),
                Taken::Other { slot, status } => n = list_failure(out, n, overflow, slot, status),
            }
        });
        (succeeded, n)
    }

    /// Waits for a completion of this CPU, as the engine's `idle` does when the CPU runs this
    /// context alone (the last of a round of idle contexts when it runs several); the burst is
    /// committed.
    fn wait_alone(&mut self, in_flight: usize) {
        // I/Os still pending had no tag: nothing of ours may be at the device to wake us.
        if self.poll || in_flight == 0 || !self.pending.is_empty() {
            // Polled completions need this CPU to poll; with nothing in
            // flight (tags busy elsewhere) no completion would wake it.
            core::hint::spin_loop();
            return;
        }
        if self.windows && self.dev.polling_window(self.cpu) {
            // The poll closes the window (and re-reaps) once the device goes quiet; only then
            // is halting safe.
            self.dev.poll(self.cpu);
            return;
        }
        // A completion delivered from another CPU's interrupt handler wakes
        // this CPU (block's end_io -> idle::wake); idle=poll spins here. A lone context looks
        // at its own words; contexts by turns at the CPU's (any of theirs ends the wait).
        if self.turns {
            let cpu = self.cpu;
            idle::wait_until(|| block::done_board().has_pending(cpu));
        } else {
            let done = &self.done;
            idle::wait_until(|| done.has_pending());
        }
    }

    /// Ends slot `slot`'s I/O, which the device refused, with the refusal (reaped next).
    #[cold]
    pub(super) fn reject(&mut self, slot: usize, e: &BlkError) {
        log::warn!("{}: request rejected: {e}", self.dev.facts().name);
        self.overflow.push(Completion::new(
            slot,
            Err(IoError::Rejected {
                code: rejection_code(e),
            }),
        ));
    }
}

impl<'a> IoBackend for KernelBackend<'a> {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        let b = &self.buffers[slot];
        // SAFETY: the buffer is this backend's own DMA memory of at least `bs`
        // bytes; the engine touches it only while the slot is not in flight.
        unsafe { core::slice::from_raw_parts_mut(b.as_ptr(), self.bs) }
    }

    // Inlined into the engine's `try_submit`: a call frame per I/O less.
    #[inline(always)]
    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError> {
        let segments: &'a [Segment] = self.segments;
        let whole = &segments[slot..=slot];
        let sector = lba * self.scale;
        // An I/O that fills its buffer takes the slot's whole segment as it is and, when the
        // backend batches, joins the burst (the common case first: one compare).
        if sectors == self.batch_sectors {
            let nr_sectors = sectors * self.scale as u32;
            return self.collect(bio_of(self.first_slot, slot, op, sector, nr_sectors, whole));
        }
        // Not batched (iodepth 1, the detail mode, a file set), filling its buffer (or a trim):
        // straight to the device. Deferred: `poll_completions` (the engine's next step) rings
        // once for the burst.
        if sectors == self.whole_sectors {
            let nr_sectors = sectors * self.scale as u32;
            return self.submit_now(&bio_of(self.first_slot, slot, op, sector, nr_sectors, whole));
        }
        // Only here can an I/O be longer than its buffer: `whole_sectors` (and `batch_sectors`)
        // are `max_sectors` or `NEVER`, so the two compares above need no bound of their own.
        if sectors > self.max_sectors {
            return Err(SubmitError::Failed(IoError::Rejected {
                code: REJECTED_LONGER_THAN_BUFFER,
            }));
        }
        self.submit_other(slot, op, sector, sectors * self.scale as u32)
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        self.reap::<false>(out).listed
    }

    #[inline(always)]
    fn poll_reaped(&mut self, out: &mut [Completion]) -> Reaped {
        self.reap::<true>(out)
    }

    fn now_ns(&self) -> u64 {
        time::now_ns()
    }

    fn idle(&mut self, in_flight: usize) {
        // Nothing of this context waits uncommitted, for the device or for the other contexts'
        // turns.
        self.commit();
        if self.turns {
            crate::arch::turns::idle_turn(|| self.wait_alone(in_flight));
        } else {
            self.wait_alone(in_flight);
        }
    }

    fn periodic(&mut self, now_ns: u64) {
        if now_ns >= self.next_tick_ns {
            self.next_tick_ns = now_ns + 100_000_000;
            self.dev.make_progress(self.cpu);
            self.dev.tick(self.cpu);
        }
        if let Some((shared, meter, next_line_ns, job)) = &mut self.progress
            && now_ns >= *next_line_ns
        {
            *next_line_ns = now_ns + 1_000_000_000;
            let mut line = String::new();
            if meter
                .write_line(&mut line, job, now_ns, shared.total(), shared.any_verifying())
                .is_ok()
            {
                crate::arch::console::print(format_args!("{line}"));
            }
        }
    }
}

/// Runs share `index` of the job (`ctx.plan.cpus[index]`) on this CPU, its completions in the
/// CPU's done-board slots from `first_slot` on.
pub(super) fn run_share(ctx: &JobContext<'_>, index: usize, first_slot: usize) -> Result<CpuResult, WorkloadError> {
    let cpu = ctx.plan.cpus[index].cpu as usize;
    // The largest I/O: bs, or with variable block sizes the largest of them.
    let bs = ctx.plan.max_io_bytes() as usize;
    let fw = crate::arch::firmware::get();
    // fio's numa_mem_policy=bind:N / prefer:N names the node; else the CPU's own.
    let node = ctx
        .plan
        .spec
        .buffer_node
        .or_else(|| fw.node_of_apic_id(percpu::current().apic_id.load(core::sync::atomic::Ordering::Relaxed)));
    // numa_mem_policy=interleave:LIST: slot by slot over the listed nodes.
    let interleave = &ctx.plan.spec.buffer_interleave;
    let node_of_slot = |slot: usize| {
        if interleave.is_empty() {
            node
        } else {
            Some(interleave[slot % interleave.len()])
        }
    };
    let mut buffers = Vec::with_capacity(ctx.plan.iodepth as usize);
    for slot in 0..ctx.plan.iodepth as usize {
        match DmaBuffer::on_node(bs, 4096, node_of_slot(slot)) {
            Ok(b) => buffers.push(b),
            Err(e) => {
                log::error!("cpu{cpu}: no DMA memory for the job's buffers: {e}");
                return Err(WorkloadError::BufferTooSmall {
                    slot: buffers.len(),
                    len: 0,
                    needed: bs,
                });
            }
        }
    }
    if let Some(numa) = &fw.numa {
        let local = buffers
            .iter()
            .enumerate()
            .filter(|(slot, b)| node_of_slot(*slot).is_some_and(|n| numa.range_is_on_node(b.phys(), bs as u64, n)))
            .count();
        *ctx.placements[index].lock() = Some(BufferPlacement {
            cpu,
            node,
            local,
            remote: buffers.len() - local,
        });
    }
    let scale = u64::from(ctx.dev.facts().sector_size / 512);
    let segments = whole_segments(&buffers, bs);
    let batch = ctx.plan.iodepth > 1 && ctx.shared.detail().is_none() && ctx.file_devs.is_empty();
    let whole_sectors = KernelBackend::whole_sectors(bs, scale);
    let windows = ctx.dev.has_polling_window();
    let traced = ctx.plan.spec.trace_every != 0;
    let refill_after = ctx.dev.refill_after();
    // Every CPU the kernel runs has its part of the board (it has `MAX_CPUS`).
    let Some(done) = block::done_board().cpu_window(cpu, first_slot, buffers.len()) else {
        return Err(WorkloadError::CpuIndexOutOfRange {
            index: cpu,
            cpus: block::done_board().ncpus(),
        });
    };
    let turns = crate::arch::turns::shared();
    let mut backend = KernelBackend {
        dev: ctx.dev,
        cpu,
        buffers,
        bs,
        scale,
        max_sectors: KernelBackend::max_sectors(bs, scale),
        poll: ctx.poll,
        uncommitted: false,
        defers: ctx.dev.defers_doorbell(),
        windows,
        batch,
        pending: heapless::Vec::new(),
        segments: &segments,
        whole_sectors,
        batch_sectors: if batch { whole_sectors } else { NEVER },
        overflow: Vec::with_capacity(ctx.plan.iodepth as usize),
        traced,
        reap_plain: reap_plain(ctx.poll, windows, traced, refill_after, turns),
        refill_after,
        carried: 0,
        done,
        first_slot,
        turns,
        next_tick_ns: 0,
        progress: (index == 0).then(|| {
            (
                ctx.shared,
                ProgressMeter::new(ctx.start_ns),
                ctx.start_ns + 1_000_000_000,
                ctx.plan.spec.name.as_str(),
            )
        }),
    };
    if ctx.file_devs.is_empty() {
        workload::run_cpu(ctx.plan, index, &mut backend, ctx.shared)
    } else {
        files::run_cpu_over_files(ctx, index, &mut backend)
    }
}

/// One context a CPU runs: share `index` of the job at `ctx` (a `JobContext`'s address), with
/// its window of the CPU's done-board slots from `first_slot`.
pub(super) struct Share {
    pub(super) ctx: usize,
    pub(super) index: usize,
    pub(super) first_slot: usize,
    pub(super) slots: usize,
}

/// Runs this CPU's shares (the address of a `Vec<Share>`): one in place, several by turns.
pub(super) fn worker(shares_addr: usize) {
    // SAFETY: `run_on_cpus` passes the address of a `Vec<Share>` that outlives every worker
    // (it waits for all of them before returning); each share's context likewise.
    let shares = unsafe { &*(shares_addr as *const Vec<Share>) };
    let run = |i: usize| {
        let share = &shares[i];
        // SAFETY: as above.
        let ctx = unsafe { &*(share.ctx as *const JobContext<'_>) };
        let r = run_share(ctx, share.index, share.first_slot);
        if r.is_err() {
            ctx.shared.request_stop();
        }
        *ctx.results[share.index].lock() = Some(r);
    };
    if let Err(no_stack) = crate::arch::turns::run_by_turns(shares.len(), &run) {
        for share in shares {
            // SAFETY: as above.
            let ctx = unsafe { &*(share.ctx as *const JobContext<'_>) };
            ctx.shared.request_stop();
            *ctx.results[share.index].lock() = Some(Err(WorkloadError::NoContextStack {
                cpu: percpu::index() as u32,
                bytes: no_stack.bytes,
            }));
        }
    }
    // The reaps looked at the shares' own slots only: a completion above them belongs to no
    // request of these jobs; it is counted as bogus (`bogus_cookies`) rather than left for the
    // next.
    let cpu = percpu::index();
    let used = shares.iter().map(|s| s.first_slot + s.slots).max().unwrap_or(0);
    let stray = block::done_board().take_stray(cpu, used);
    if stray != 0 {
        log::warn!("cpu{cpu}: {stray} completion(s) for slots no job here used, counted as bogus");
    }
}
