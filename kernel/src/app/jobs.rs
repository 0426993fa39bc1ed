//! Runs workload jobs from the command line on the block devices: each
//! submitting CPU runs the workload engine's loop over its own backend (no
//! shared lock), the first CPU prints progress once a second, and each job
//! ends with the fio-like report and one `BAREMQ-JSON:` line.

use crate::arch::console::kprintln;
use crate::arch::memory::DmaBuffer;
use crate::arch::{idle, irq, percpu, smp, time};
use crate::dev::block::{self, BlockDevice, MAX_SLOTS_PER_CPU};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use blk::done::{Taken, for_each_bit};
use blk::{BlkError, CompletionPolicy, QuiesceCheck, Segment, Status};
use core::fmt::Write;
use workload::{
    Completion, CpuResult, DeviceInfo, IoBackend, IoError, IoOp, JobPlan, JobReport, JobShared, ProgressMeter, Reaped,
    SubmitError, WorkloadError, split_successes,
};

mod files;

/// Traced requests whose raw events a job's `BAREMQ-TRACE:` line carries (the summary uses all).
const TRACE_EXPORT_REQUESTS: usize = 500;

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

struct KernelBackend<'a> {
    dev: &'static dyn BlockDevice,
    cpu: usize,
    buffers: Vec<DmaBuffer>,
    bs: usize,
    /// Block-layer (512-byte) sectors per device sector.
    scale: u64,
    /// The most device sectors one request may move: what fits in `bs` (one compare per I/O
    /// instead of a multiply, a shift and a compare).
    max_sectors: u32,
    poll: bool,
    /// Submitted with `submit_deferred` since the last `commit` (the doorbell may be unrung).
    uncommitted: bool,
    /// The device may leave a doorbell for `commit` (`BlockDevice::defers_doorbell`): only then
    /// does a submission leave `uncommitted` set (a `dyn` call per reap less).
    defers: bool,
    /// The device can open an interrupt-then-poll window (`BlockDevice::has_polling_window`):
    /// only then is it asked on every reap.
    windows: bool,
    /// Collect a burst's I/Os and hand them to the device together at `commit`
    /// (`BlockDevice::submit_batch`: one run-token round trip, one doorbell, one call; issue
    /// 22). Off at iodepth 1 (nothing to batch), where an I/O's own submission time is
    /// measured (fio's slat, the detail mode) and over a file set (which switches devices
    /// between I/Os).
    batch: bool,
    /// The burst collected so far (`batch`), as the bios `submit_batch` takes; also I/Os the
    /// device had no tag for, retried at the next `commit`. Each is in flight for the engine.
    pending: heapless::Vec<blk::Bio<'a>, { blk::SUBMIT_BATCH_CHUNK }>,
    /// Each slot's whole buffer as one segment, built once (`whole_segments`): the bio of an I/O
    /// that fills its buffer (every I/O of a fixed-size job) borrows its slot's, so a burst's
    /// bios are built once, at `submit`, with no segment written per I/O.
    segments: &'a [Segment],
    /// The device sectors of an I/O that fills its slot's buffer: such an I/O's bio takes the
    /// slot's whole segment ([`NEVER`] when no I/O fills it exactly on this device).
    whole_sectors: u32,
    /// `whole_sectors` when the backend batches (`batch`), else [`NEVER`]: the common case,
    /// an I/O that joins the burst over its whole segment, is one compare.
    batch_sectors: u32,
    overflow: Vec<Completion>,
    /// The job traces request stages (`trace=`; the trace runs exactly then): each reaped
    /// completion is recorded.
    traced: bool,
    /// Neither `poll`, nor `windows`, nor `traced`, nor refill points ([`reap_plain`]): a reap
    /// is the commit and the board's walk, after one look instead of four.
    reap_plain: bool,
    /// A reap that finds more successes than this hands out only this many
    /// (`BlockDevice::refill_after`; 0: all), so that the engine refills their slots, and the
    /// next reap sends them to the device, before it completes the rest (handed out whole by
    /// that next reap): the device works while the CPU completes (NVMe's SQ doorbell;
    /// docs/bench.md "Refill within a reap").
    refill_after: usize,
    /// Successes taken from the board that a refill point held back for the next reap.
    carried: u64,
    /// This CPU's words of the done board for the job's slots (its queue depth), cut once:
    /// one word per reap at QD 64 or less, with no lookup per reap; `run_share`
    /// clears anything above them when the job ends.
    done: blk::done::CpuDone<'static>,
    next_tick_ns: u64,
    progress: Option<(&'a JobShared, ProgressMeter, u64, &'a str)>,
}

/// Whether a backend's reap is the plain one: the job does not poll (`poll`), the device opens
/// no interrupt-then-poll window (`windows`), the job does not trace request stages (`traced`)
/// and hands every reap out whole (`refill_after` 0).
fn reap_plain(poll: bool, windows: bool, traced: bool, refill_after: usize) -> bool {
    !poll && !windows && !traced && refill_after == 0
}

/// No request's length in device sectors (`KernelBackend::whole_sectors`): a buffer holds at
/// most `u32::MAX / 512` sectors, so no request is this long.
const NEVER: u32 = u32::MAX;

/// The bio of slot `slot`'s I/O: `op` of `nr_sectors` at `sector`, over `segments` (the
/// slot's; a trim or a flush moves no data and takes none).
#[inline(always)]
fn bio_of(slot: usize, op: IoOp, sector: u64, nr_sectors: u32, segments: &[Segment]) -> blk::Bio<'_> {
    let cookie = block::cookie(slot);
    match op {
        IoOp::Read => blk::Bio::read(sector, nr_sectors, segments, cookie),
        IoOp::Write => blk::Bio::write(sector, nr_sectors, segments, cookie),
        // fio's trim: the block's range, no data.
        IoOp::Trim => blk::Bio::discard(sector, nr_sectors, cookie),
        // fio's fsync / end_fsync: the device's cache flush, no data.
        IoOp::Flush => blk::Bio::flush(cookie),
    }
}

/// The slot a bio of this backend was submitted from (`block::cookie` is the slot).
fn slot_of(bio: &blk::Bio<'_>) -> usize {
    bio.cookie as usize
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
fn trace_reaped(cpu: usize, taken: Taken) {
    match taken {
        Taken::Successes { first, bits } => for_each_bit(bits, |i| crate::arch::stagetrace::reaped(cpu, first + i)),
        Taken::Other { slot, .. } => crate::arch::stagetrace::reaped(cpu, slot),
    }
}

impl<'a> KernelBackend<'a> {
    /// The most sectors of `scale` 512-byte sectors that fit in a buffer of `bs` bytes: at most
    /// bs / 512, which fits in u32 (bs is a u32 of the plan).
    fn max_sectors(bs: usize, scale: u64) -> u32 {
        (bs as u64 / (scale * 512)) as u32
    }

    /// The device sectors of an I/O that fills a buffer of `bs` bytes, if one does ([`NEVER`]
    /// if not).
    fn whole_sectors(bs: usize, scale: u64) -> u32 {
        let sectors = Self::max_sectors(bs, scale);
        if u64::from(sectors) * scale * 512 == bs as u64 {
            sectors
        } else {
            NEVER
        }
    }

    /// Moves completions kept back by an earlier reap into `out`; returns how many.
    #[cold]
    fn drain_overflow(&mut self, out: &mut [Completion]) -> usize {
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
    fn drive(&mut self, dev: &'static dyn BlockDevice, scale: u64) {
        self.dev = dev;
        self.scale = scale;
        self.max_sectors = Self::max_sectors(self.bs, scale);
        self.whole_sectors = Self::whole_sectors(self.bs, scale);
        self.batch_sectors = if self.batch { self.whole_sectors } else { NEVER };
        self.defers = dev.defers_doorbell();
        self.windows = dev.has_polling_window();
        self.refill_after = dev.refill_after();
        self.reap_plain = reap_plain(self.poll, self.windows, self.traced, self.refill_after);
    }

    /// Hands the collected burst to the device, then rings what this CPU's deferred
    /// submissions left unrung.
    #[inline(always)]
    fn commit(&mut self) {
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
    fn submit_now(&mut self, bio: &blk::Bio<'_>) -> Result<(), SubmitError> {
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
    fn refused(&mut self, e: BlkError) -> Result<(), SubmitError> {
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
    fn submit_other(&mut self, slot: usize, op: IoOp, sector: u64, nr_sectors: u32) -> Result<(), SubmitError> {
        let segments: &'a [Segment] = self.segments;
        let whole = core::slice::from_ref(&segments[slot]);
        let moves_data = matches!(op, IoOp::Read | IoOp::Write);
        if !moves_data {
            let bio = bio_of(slot, op, sector, nr_sectors, whole);
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
        self.submit_now(&bio_of(slot, op, sector, nr_sectors, &part))
    }

    /// Adds `bio` to the burst, submitting the burst first when it is full.
    #[inline(always)]
    fn collect(&mut self, bio: blk::Bio<'a>) -> Result<(), SubmitError> {
        if self.pending.is_full() {
            self.submit_pending();
            if self.pending.is_full() {
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
    fn submit_pending(&mut self) {
        if let [bio] = self.pending[..] {
            // A burst of one (QD1): the plain submission, without the batch's set-up.
            let outcome = self.dev.submit_deferred(self.cpu, &bio);
            self.uncommitted = self.defers;
            match outcome {
                Ok(_) => self.pending.clear(),
                Err(BlkError::TagsExhausted { .. }) => self.dev.make_progress(self.cpu),
                Err(e) => {
                    self.pending.clear();
                    self.reject(slot_of(&bio), &e);
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
                    let slot = slot_of(&self.pending[done]);
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
    fn reap<const MASK: bool>(&mut self, out: &mut [Completion]) -> Reaped {
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
    fn poll_or_trace<const MASK: bool>(&mut self, out: &mut [Completion]) -> Option<Reaped> {
        // An interrupt-then-poll window (megasas.irq_poll, nvme.irq_poll) masks the interrupt:
        // poll while open.
        if self.poll || (self.windows && self.dev.polling_window(self.cpu)) {
            self.dev.poll(self.cpu);
        }
        if !self.traced && self.refill_after == 0 {
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
    fn overflow_first(&mut self, out: &mut [Completion]) -> usize {
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
    fn take_done<const MASK: bool, const TRACED: bool>(&mut self, out: &mut [Completion], n: usize) -> (u64, usize) {
        let mut succeeded = 0u64;
        let mut n = n;
        let overflow = &mut self.overflow;
        let cpu = self.cpu;
        // The board hands a word's successes over as bits: with `MASK`, those of
        // slots below 64 go to the engine as they come, without a status read or a branch
        // each. The closure stays this small so that it is inlined into the board's walk (a
        // call with a `Taken` through the stack costs about 30 instructions per reap, what QD1
        // pays per I/O); everything else is listed out of line.
        self.done.take_split(|taken| {
            if TRACED {
                trace_reaped(cpu, taken);
            }
            match taken {
                Taken::Successes { first: 0, bits } if MASK => succeeded |= bits,
                Taken::Successes { first, bits } => n = list_successes(out, n, overflow, first, bits),
                Taken::Other { slot, status } => n = list_failure(out, n, overflow, slot, status),
            }
        });
        (succeeded, n)
    }

    /// Ends slot `slot`'s I/O, which the device refused, with the refusal (reaped next).
    #[cold]
    fn reject(&mut self, slot: usize, e: &BlkError) {
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
            return self.collect(bio_of(slot, op, sector, nr_sectors, whole));
        }
        // Not batched (iodepth 1, the detail mode, a file set), filling its buffer (or a trim):
        // straight to the device. Deferred: `poll_completions` (the engine's next step) rings
        // once for the burst.
        if sectors == self.whole_sectors {
            let nr_sectors = sectors * self.scale as u32;
            return self.submit_now(&bio_of(slot, op, sector, nr_sectors, whole));
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
        self.commit();
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
        // this CPU (block's end_io -> idle::wake); idle=poll spins here.
        let cpu = self.cpu;
        idle::wait_until(|| block::done_board().has_pending(cpu));
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

struct JobContext<'a> {
    plan: &'a JobPlan,
    shared: &'a JobShared,
    dev: &'static dyn BlockDevice,
    /// A job over a `filename` list: its files' devices, in order (empty otherwise).
    file_devs: Vec<&'static dyn BlockDevice>,
    /// Per CPU, the requests sent to each file's device (reads, writes, trims, flushes).
    file_sent: Vec<spin::Mutex<Vec<[u64; 4]>>>,
    poll: bool,
    start_ns: u64,
    results: Vec<spin::Mutex<Option<Result<CpuResult, WorkloadError>>>>,
    /// Where each CPU's buffers landed (with an SRAT), for the `numa:` lines.
    placements: Vec<spin::Mutex<Option<BufferPlacement>>>,
}

/// One submitting CPU's NUMA node and how many of its DMA buffers lie wholly
/// in that node's SRAT memory ranges (checked from their physical addresses,
/// independently of how the allocator chose them).
#[derive(Debug, Clone, Copy)]
struct BufferPlacement {
    cpu: usize,
    node: Option<u32>,
    local: usize,
    remote: usize,
}

fn run_share(ctx: &JobContext<'_>, index: usize) -> Result<CpuResult, WorkloadError> {
    let cpu = ctx.plan.cpus[index].cpu as usize;
    // The largest I/O: bs, or with variable block sizes the largest of them.
    let bs = ctx.plan.max_io_bytes() as usize;
    let fw = crate::arch::firmware::get();
    let node = fw.node_of_apic_id(percpu::current().apic_id.load(core::sync::atomic::Ordering::Relaxed));
    let mut buffers = Vec::with_capacity(ctx.plan.iodepth as usize);
    for _ in 0..ctx.plan.iodepth {
        match DmaBuffer::on_node(bs, 4096, node) {
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
        let local = node.map_or(0, |n| {
            buffers
                .iter()
                .filter(|b| numa.range_is_on_node(b.phys(), bs as u64, n))
                .count()
        });
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
    let Some(done) = block::done_board().cpu_below(cpu, buffers.len()) else {
        return Err(WorkloadError::CpuIndexOutOfRange {
            index: cpu,
            cpus: block::done_board().ncpus(),
        });
    };
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
        reap_plain: reap_plain(ctx.poll, windows, traced, refill_after),
        refill_after,
        carried: 0,
        done,
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
    let result = if ctx.file_devs.is_empty() {
        workload::run_cpu(ctx.plan, index, &mut backend, ctx.shared)
    } else {
        files::run_cpu_over_files(ctx, index, &mut backend)
    };
    // The reaps looked at the job's own slots only: a completion above them belongs to no
    // request of this job; it is counted as bogus (`bogus_cookies`) rather than left for the next.
    let stray = block::done_board().take_stray(cpu, backend.buffers.len());
    if stray != 0 {
        log::warn!("cpu{cpu}: {stray} completion(s) for slots this job never used, counted as bogus");
    }
    result
}

fn worker(ctx_addr: usize) {
    // SAFETY: `run_job` passes the address of a JobContext that outlives every
    // worker (it waits for all of them before returning).
    let ctx = unsafe { &*(ctx_addr as *const JobContext<'_>) };
    let me = percpu::index() as u32;
    let Some(index) = ctx.plan.cpus.iter().position(|s| s.cpu == me) else {
        return;
    };
    let r = run_share(ctx, index);
    if r.is_err() {
        ctx.shared.request_stop();
    }
    *ctx.results[index].lock() = Some(r);
}

/// The `numa:` lines of a job (only with an SRAT): each CPU's node and its
/// buffers' locality, then one verdict line that a scenario can require.
fn report_buffer_placement(ctx: &JobContext<'_>) {
    let placements: Vec<BufferPlacement> = ctx.placements.iter().filter_map(|p| *p.lock()).collect();
    if placements.is_empty() {
        return;
    }
    let mut line = alloc::format!("numa: job {} buffers:", ctx.plan.spec.name);
    for (i, p) in placements.iter().enumerate() {
        let sep = if i == 0 { " " } else { ", " };
        let _ = match p.node {
            Some(node) => write!(
                line,
                "{sep}cpu{} node {node} ({} local, {} remote)",
                p.cpu, p.local, p.remote
            ),
            None => write!(line, "{sep}cpu{} in no SRAT node ({} unplaced)", p.cpu, p.remote),
        };
    }
    kprintln!("{line}");
    let total: usize = placements.iter().map(|p| p.local + p.remote).sum();
    let remote: usize = placements.iter().map(|p| p.remote).sum();
    if remote == 0 {
        kprintln!(
            "numa: job {}: all {total} buffers of {} CPUs are on their CPU's node",
            ctx.plan.spec.name,
            placements.len()
        );
    } else {
        kprintln!(
            "numa: job {}: {remote} of {total} buffers are not on their CPU's node ({} node fallbacks since boot)",
            ctx.plan.spec.name,
            crate::arch::memory::node_fallbacks()
        );
    }
}

fn device_info(d: &dyn BlockDevice) -> DeviceInfo {
    let f = d.facts();
    DeviceInfo {
        name: f.name.clone(),
        sector_size: f.sector_size,
        capacity_sectors: f.capacity_sectors,
        max_iodepth: f.max_inflight.clamp(1, MAX_SLOTS_PER_CPU as u32),
        max_transfer_bytes: f.max_transfer_bytes,
    }
}

/// The one mapping between the workload's completion policies (what a job
/// names) and the block layer's (what a queue runs). Both directions use it.
const COMPLETION_POLICIES: [(workload::CompletionPolicy, CompletionPolicy); 4] = [
    (workload::CompletionPolicy::Irq, CompletionPolicy::Irq),
    (workload::CompletionPolicy::Local, CompletionPolicy::Local),
    (workload::CompletionPolicy::Remote, CompletionPolicy::Remote),
    (workload::CompletionPolicy::Poll, CompletionPolicy::Poll),
];
const QUIESCE_POLICIES: [(workload::QuiescePolicy, QuiesceCheck); 3] = [
    (workload::QuiescePolicy::LockFree, QuiesceCheck::LockFree),
    (workload::QuiescePolicy::Locked, QuiesceCheck::Locked),
    (workload::QuiescePolicy::Sleeping, QuiesceCheck::Sleeping),
];

/// `table`'s right side for `left`. Both tables list every variant of both
/// enums, so a miss is a kernel bug.
fn to_right<L: PartialEq + Copy, R: Copy>(table: &[(L, R)], left: L) -> R {
    table
        .iter()
        .find(|(l, _)| *l == left)
        .map(|(_, r)| *r)
        .expect("every policy is listed")
}

/// `table`'s left side for `right`.
fn to_left<L: Copy, R: PartialEq + Copy>(table: &[(L, R)], right: R) -> L {
    table
        .iter()
        .find(|(_, r)| *r == right)
        .map(|(l, _)| *l)
        .expect("every policy is listed")
}

/// The block-layer policies a job runs with: its own, else the device's current ones.
fn map_policies(plan: &JobPlan, dev: &dyn BlockDevice) -> (CompletionPolicy, QuiesceCheck) {
    let (cur_c, cur_q) = dev.policies();
    (
        plan.spec
            .completion
            .map_or(cur_c, |p| to_right(&COMPLETION_POLICIES, p)),
        plan.spec.quiesce.map_or(cur_q, |p| to_right(&QUIESCE_POLICIES, p)),
    )
}

/// Runs planned jobs at the same time, each on its own CPUs (a fio wave; native jobs come one at
/// a time); returns whether each passed. The kernel counters of each report are read over the
/// whole run, so with several jobs on one device they cover all of them (a line says so).
fn run_jobs(plans: &[JobPlan], detail: Option<workload::DetailOptions>) -> Result<Vec<(bool, JobReport)>, String> {
    // Each plan's devices: its one device, or its files' devices in order (the first is the
    // plan's `device`).
    let mut plan_devs: Vec<Vec<&'static dyn BlockDevice>> = Vec::with_capacity(plans.len());
    for plan in plans {
        let mut found = Vec::new();
        for info in plan.devices() {
            found.push(block::find(&info.name).ok_or_else(|| alloc::format!("no device {}", info.name))?);
        }
        plan_devs.push(found);
    }
    let devs: Vec<&'static dyn BlockDevice> = plan_devs.iter().map(|d| d[0]).collect();
    let policies: Vec<(CompletionPolicy, QuiesceCheck)> = plans
        .iter()
        .zip(&devs)
        .map(|(plan, dev)| map_policies(plan, *dev))
        .collect();
    for ((plan, devs), (completion, quiesce)) in plans.iter().zip(&plan_devs).zip(&policies) {
        for dev in devs {
            dev.set_policies(*completion, *quiesce);
        }
        for w in &plan.warnings {
            kprintln!("warning: job {}: {w}", plan.spec.name);
        }
    }
    if plans.len() > 1 && plans.iter().any(|p| p.spec.trace_every != 0) {
        return Err("trace= is for one job at a time, not for jobs that run at the same time".into());
    }
    // `megasas.floor=` / `nvme.floor=`: what the device allows with no block layer, for the
    // report's fractions (before the counters are read, so the job's figures hold none of it).
    let floors: Vec<_> = plans
        .iter()
        .map(|plan| crate::dev::floor_before_job(&plan.device.name, percpu::index(), plan.spec.bs))
        .collect();
    // After the floor (it runs on this CPU): a single-vector controller's interrupt goes to its
    // jobs' only submitting CPU until the reports are out.
    let job_devices: Vec<crate::dev::driver::JobDevices<'_>> = plans
        .iter()
        .map(|plan| crate::dev::driver::JobDevices {
            name: &plan.spec.name,
            devices: plan.devices().iter().map(|d| d.name.as_str()).collect(),
            cpus: plan.cpus.iter().map(|slice| slice.cpu as usize).collect(),
        })
        .collect();
    let _aims = crate::dev::aim_interrupts_for_jobs(&job_devices);
    let ncpu = smp::online();
    // Device vector numbers are per CPU: each counts on its own CPU only.
    let count_per_cpu = |vectors: &[crate::dev::interrupts::Vector]| -> Vec<u64> {
        let mut counts = alloc::vec![0u64; ncpu];
        for v in vectors {
            if let Some(c) = counts.get_mut(v.cpu) {
                *c += v.count();
            }
        }
        counts
    };
    let ipis_per_cpu = || -> Vec<u64> {
        (0..ncpu)
            .map(|c| irq::TABLE.count(irq::VECTOR_BLK_COMPLETE, c as u32))
            .collect()
    };
    // A plan's device interrupts per CPU, over all of its devices.
    let plan_irqs = |devs: &[&'static dyn BlockDevice]| -> Vec<u64> {
        let mut counts = alloc::vec![0u64; ncpu];
        for d in devs {
            for (sum, c) in counts.iter_mut().zip(count_per_cpu(&d.irq_vectors())) {
                *sum += c;
            }
        }
        counts
    };
    let irqs_before: Vec<Vec<u64>> = plan_devs.iter().map(|d| plan_irqs(d)).collect();
    let ipis_before = ipis_per_cpu();
    let blk_before: Vec<Vec<_>> = plan_devs
        .iter()
        .map(|devs| devs.iter().map(|d| d.counters()).collect())
        .collect();
    let wake_ipis_before = crate::arch::park::wake_ipis();
    let driver_before: Vec<Vec<_>> = plan_devs
        .iter()
        .map(|devs| devs.iter().map(|d| d.driver_counters()).collect())
        .collect();
    let bogus_before = block::done_board().bogus();
    let trace_every = plans.first().map_or(0, |p| p.spec.trace_every);
    let trace_event_ns = if trace_every != 0 {
        let ns = crate::arch::stagetrace::cost_per_event_ns(ncpu);
        crate::arch::stagetrace::start(trace_every, ncpu);
        devs[0].set_stage_trace(true);
        ns
    } else {
        0
    };
    let shareds: Vec<JobShared> = plans
        .iter()
        .map(|plan| match detail {
            Some(options) => JobShared::with_detail(plan, options),
            None => JobShared::new(plan),
        })
        .collect();
    let start_ns = time::now_ns();
    // Built whole before any address is taken: the workers hold these addresses until they end.
    let contexts: Vec<JobContext<'_>> = plans
        .iter()
        .zip(&shareds)
        .zip(&plan_devs)
        .zip(&policies)
        .map(|(((plan, shared), devs), (completion, _))| JobContext {
            plan,
            shared,
            dev: devs[0],
            file_devs: if plan.files.is_empty() {
                Vec::new()
            } else {
                devs.clone()
            },
            file_sent: (0..plan.cpus.len()).map(|_| spin::Mutex::new(Vec::new())).collect(),
            poll: *completion == CompletionPolicy::Poll,
            start_ns,
            results: (0..plan.cpus.len()).map(|_| spin::Mutex::new(None)).collect(),
            placements: (0..plan.cpus.len()).map(|_| spin::Mutex::new(None)).collect(),
        })
        .collect();
    for (plan, (completion, quiesce)) in plans.iter().zip(&policies) {
        kprintln!(
            "job {}: {} on {} ({} CPUs: {}), iodepth {} per CPU, completion={} quiesce={}",
            plan.spec.name,
            plan.spec.rw.as_str(),
            plan.devices()
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(":"),
            plan.cpus.len(),
            {
                // A list for a few CPUs, ranges (`0-127`) for many.
                let cpus: Vec<u32> = plan.cpus.iter().map(|s| s.cpu).collect();
                if cpus.len() <= platform::irq::MAX_LISTING_COLUMNS {
                    alloc::format!("{cpus:?}")
                } else {
                    alloc::format!("{}", workload::values::CpuSet::from_cpus(&cpus))
                }
            },
            plan.iodepth,
            to_left(&COMPLETION_POLICIES, *completion).as_str(),
            to_left(&QUIESCE_POLICIES, *quiesce).as_str(),
        );
    }
    if plans.len() > 1 {
        kprintln!(
            "jobs {}: running at the same time; each report's kernel counters cover all of them",
            plans
                .iter()
                .map(|p| p.spec.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let me = percpu::index() as u32;
    let mut waits = Vec::new();
    let mut mine = None;
    for ctx in &contexts {
        let addr = ctx as *const JobContext<'_> as usize;
        for slice in &ctx.plan.cpus {
            if slice.cpu == me {
                mine = Some(addr);
            } else {
                match smp::run_on(slice.cpu as usize, worker, addr) {
                    Some(t) => waits.push((slice.cpu as usize, t)),
                    None => return Err(alloc::format!("cpu{} is offline or busy", slice.cpu)),
                }
            }
        }
    }
    x86_64::instructions::interrupts::enable();
    if let Some(addr) = mine {
        worker(addr);
    }
    for (cpu, t) in waits {
        smp::wait_done(cpu, t);
    }
    for ctx in &contexts {
        report_buffer_placement(ctx);
    }
    // A CPU's error (a stall, a bogus completion) is the verdict, before the drain.
    let mut all_results: Vec<Vec<workload::CpuResult>> = Vec::with_capacity(plans.len());
    for ctx in &contexts {
        let plan = ctx.plan;
        let mut results = Vec::with_capacity(plan.cpus.len());
        for (i, r) in ctx.results.iter().enumerate() {
            match r.lock().take() {
                Some(Ok(res)) => results.push(res),
                Some(Err(e)) => return Err(alloc::format!("job {}: cpu{}: {e}", plan.spec.name, plan.cpus[i].cpu)),
                None => {
                    return Err(alloc::format!(
                        "job {}: cpu{} returned no result",
                        plan.spec.name,
                        plan.cpus[i].cpu
                    ));
                }
            }
        }
        all_results.push(results);
    }
    // Drain: nothing of these jobs may still be in flight when the next starts.
    let deadline = time::now_ns() + 5_000_000_000;
    for (plan, devs) in plans.iter().zip(&plan_devs) {
        for dev in devs {
            while dev.in_flight() > 0 && time::now_ns() < deadline {
                dev.make_progress(me as usize);
                core::hint::spin_loop();
            }
            if dev.in_flight() > 0 {
                return Err(alloc::format!(
                    "job {}: {} request(s) still in flight on {} 5 s after every CPU finished: the device stopped \
                     completing",
                    plan.spec.name,
                    dev.in_flight(),
                    dev.facts().name
                ));
            }
        }
    }
    let mut passed = Vec::with_capacity(plans.len());
    for (index, ctx) in contexts.iter().enumerate() {
        let plan = ctx.plan;
        let these_devs = &plan_devs[index];
        let irqs_before = &irqs_before[index];
        let blk_before = &blk_before[index];
        // A block-layer counter's growth over the plan's devices.
        let delta = |field: fn(&blk::CounterSnapshot) -> u64| -> u64 {
            these_devs
                .iter()
                .zip(blk_before)
                .map(|(d, before)| field(&d.counters()) - field(before))
                .sum()
        };
        let quiesce = policies[index].1;
        let results = &all_results[index];
        let mut trace_events = Vec::new();
        let mut trace_summary = None;
        if trace_every != 0 {
            devs[0].set_stage_trace(false);
            crate::arch::stagetrace::stop();
            let (events, dropped) = crate::arch::stagetrace::collect(ncpu);
            trace_events = events
                .into_iter()
                .map(|(cpu, ns, request, stage)| workload::StageEvent {
                    cpu,
                    ns,
                    request,
                    stage,
                })
                .collect();
            let mut summary = workload::summarise(&trace_events, trace_every, dropped);
            summary.event_cost_ns = trace_event_ns;
            trace_summary = Some(summary);
        }
        let mut report = JobReport::new(plan, results).map_err(|e| e.to_string())?;
        if let Some(summary) = trace_summary {
            report.set_stages(summary);
        }
        let per_plan_cpu = |after: Vec<u64>, before: &[u64]| -> Vec<u64> {
            plan.cpus
                .iter()
                .map(|s| after[s.cpu as usize] - before[s.cpu as usize])
                .collect()
        };
        let all_irqs: u64 = plan_irqs(these_devs).iter().zip(irqs_before).map(|(a, b)| a - b).sum();
        report
            .add_counter("device_irqs", per_plan_cpu(plan_irqs(these_devs), irqs_before))
            .map_err(|e| e.to_string())?;
        report
            .add_counter("completion_ipis", per_plan_cpu(ipis_per_cpu(), &ipis_before))
            .map_err(|e| e.to_string())?;
        let totals = [
            ("device_irqs_all_cpus", all_irqs),
            ("submitted", delta(|c| c.submitted)),
            // Reads and writes above the device's transfer or segment limit, split by blk (each
            // part counts in `submitted` and `completed`).
            ("split_bios", delta(|c| c.split_bios)),
            ("completed", delta(|c| c.completed)),
            ("requeued", delta(|c| c.requeued)),
            ("completions_inline", delta(|c| c.completions_inline)),
            ("completions_irq", delta(|c| c.completions_irq)),
            ("completions_local", delta(|c| c.completions_local)),
            ("completions_remote", delta(|c| c.completions_remote)),
            ("completions_poll", delta(|c| c.completions_poll)),
            ("ipis", delta(|c| c.ipis)),
            ("softirqs", delta(|c| c.softirqs)),
            ("hot_path_locks", delta(|c| c.hot_path_locks)),
            // The queue lock's contention (quiesce=locked/sleeping): acquisitions that
            // found it taken, parks in `wait_for_wake`, wake-ups sent by unlocks.
            ("lock_contended", delta(|c| c.lock_contended)),
            ("lock_sleeps", delta(|c| c.lock_sleeps)),
            ("lock_wakeups", delta(|c| c.lock_wakeups)),
            (
                "lock_wakeup_ipis_sent",
                crate::arch::park::wake_ipis() - wake_ipis_before,
            ),
            ("timeouts", delta(|c| c.timeouts)),
            ("spurious_completions", delta(|c| c.spurious_completions)),
            ("bogus_cookies", block::done_board().bogus() - bogus_before),
        ];
        for (name, value) in totals {
            report.add_total(name, value);
        }
        for (dev, before) in these_devs.iter().zip(&driver_before[index]) {
            for ((name, after), (_, before)) in dev.driver_counters().into_iter().zip(before.clone()) {
                if these_devs.len() == 1 {
                    report.add_total(name, after - before);
                } else {
                    report.add_total(&alloc::format!("{}_{name}", dev.facts().name), after - before);
                }
            }
        }
        report_file_requests(ctx, &mut report);
        let flushes: u64 = results.iter().map(|r| r.flush.ios).sum();
        if flushes > 0 {
            report.add_total("flushes", flushes);
            report.add_total("flush_errors", results.iter().map(|r| r.flush.errors).sum());
        }
        for (name, value) in floors[index].clone() {
            report.add_total(name, value);
        }
        let mut text = String::new();
        let _ = report.write_human(&mut text);
        if quiesce != QuiesceCheck::LockFree {
            kprintln!(
                "job {}: queue lock ({}): acquisitions={} contended={} parks={} wakeups={} wake_ipis={}",
                plan.spec.name,
                to_left(&QUIESCE_POLICIES, quiesce).as_str(),
                delta(|c| c.hot_path_locks),
                delta(|c| c.lock_contended),
                delta(|c| c.lock_sleeps),
                delta(|c| c.lock_wakeups),
                crate::arch::park::wake_ipis() - wake_ipis_before,
            );
        }
        crate::arch::console::print(format_args!("{text}"));
        let mut json = String::new();
        let _ = report.write_json_line(&mut json);
        crate::arch::console::print(format_args!("{json}\n"));
        if trace_every != 0 {
            // The raw samples, for `cargo xtask lab --trace` (Chrome / Perfetto trace).
            // At most TRACE_EXPORT_REQUESTS whole timelines: a console line, not a dump.
            let exported = workload::stages::first_requests(&trace_events, TRACE_EXPORT_REQUESTS);
            let line = workload::stages::trace_line(&plan.spec.name, trace_every, &exported);
            crate::arch::console::print(format_args!("{line}"));
        }
        crate::arch::exit::note_job(&report.plan.spec.name, report.total.iops, report.errors);
        passed.push((report.passed(), report));
    }
    Ok(passed)
}

/// A job over a `filename` list: prints the requests it sent to each file's device and adds
/// them to the report's totals (`file_DEVICE_reads`, ..._writes, ..._trims, ..._flushes), which
/// the fio document carries under its `baremq` key. They count what the job sent, its ramp and
/// verify pass included.
fn report_file_requests(ctx: &JobContext<'_>, report: &mut JobReport) {
    if ctx.file_devs.is_empty() {
        return;
    }
    let mut sums = alloc::vec![[0u64; 4]; ctx.file_devs.len()];
    for cpu in &ctx.file_sent {
        for (sum, sent) in sums.iter_mut().zip(cpu.lock().iter()) {
            for (s, n) in sum.iter_mut().zip(sent) {
                *s += n;
            }
        }
    }
    for (dev, [reads, writes, trims, flushes]) in ctx.file_devs.iter().zip(sums) {
        let name = &dev.facts().name;
        kprintln!(
            "job {}: file /dev/{name}: {reads} reads, {writes} writes, {trims} trims, {flushes} flushes",
            ctx.plan.spec.name
        );
        for (kind, value) in [
            ("reads", reads),
            ("writes", writes),
            ("trims", trims),
            ("flushes", flushes),
        ] {
            report.add_total(&alloc::format!("file_{name}_{kind}"), value);
        }
    }
}

/// Prints fio's output of a run (`--output-format`, the logs) from its jobs' reports: the
/// `BAREMQ-FIO-JSON:` line (json, json+) or fio's text report (normal), then the `BAREMQ-LOG:`
/// rows. `metas[i]` describes `reports[i]` (job options as written, fio's group).
pub fn print_fio_output(options: &workload::FioOutputOptions, reports: &[JobReport], metas: &[workload::FioJobMeta]) {
    let jobs: Vec<workload::FioJob<'_>> = reports
        .iter()
        .zip(metas)
        .map(|(report, meta)| workload::FioJob { report, meta })
        .collect();
    let mut text = String::new();
    let written = match options.output_format {
        workload::FioOutputFormat::Normal => workload::report::write_fio_text(&mut text, options, &jobs),
        _ => workload::report::write_fio_json_line(&mut text, options, &jobs),
    };
    let logs = workload::report::write_log_lines(&mut text, options, &jobs);
    if written.is_err() || logs.is_err() {
        kprintln!("fio output: formatting failed");
        return;
    }
    crate::arch::console::print(format_args!("{text}"));
}

/// Prepares the boot CPU for running jobs: it takes interrupts from here on
/// (its jobs need them), so the watchdog watches it too.
pub fn prepare() {
    x86_64::instructions::interrupts::enable();
    crate::arch::watchdog::watch_this_cpu();
}

/// The block devices as the workload engine sees them; an error when there is none.
pub fn devices() -> Result<Vec<DeviceInfo>, String> {
    let infos: Vec<DeviceInfo> = block::devices().iter().map(|d| device_info(*d)).collect();
    if infos.is_empty() {
        return Err(
            "jobs were given but there is no block device (add a controller and disk, or null.size=SIZE)".into(),
        );
    }
    Ok(infos)
}

/// The online CPUs, in order.
pub fn online_cpus() -> Vec<u32> {
    (0..smp::online() as u32).collect()
}

/// Parses and runs the jobs in `words`. Returns Err with a message on a bad
/// job or a run that could not complete; Ok(false) when a job failed.
pub fn run(words: &[&str]) -> Result<bool, String> {
    prepare();
    let specs = workload::parse_jobs(words.iter().copied()).map_err(|e| e.to_string())?;
    if specs.is_empty() {
        return Ok(true);
    }
    let infos = devices()?;
    let online = online_cpus();
    let mut all_passed = true;
    for spec in &specs {
        all_passed &= run_specs(core::slice::from_ref(spec), &infos, &online, None)?
            .iter()
            .all(|(p, _)| *p);
    }
    kprintln!("interrupts per CPU since boot (like /proc/interrupts):");
    kprintln!("{}", irq::TABLE.display(smp::online()));
    Ok(all_passed)
}

/// Plans and runs jobs at the same time (one job, or a fio wave): Ok(whether each passed, and
/// its report), or Err when one cannot be planned or run. `detail`: also measure what fio's
/// output needs (`workload::detail`).
pub fn run_specs(
    specs: &[workload::JobSpec],
    infos: &[DeviceInfo],
    online: &[u32],
    detail: Option<workload::DetailOptions>,
) -> Result<Vec<(bool, JobReport)>, String> {
    let mut plans = Vec::with_capacity(specs.len());
    let mut need = 0u64;
    for spec in specs {
        // A job may name its device by a stable alias (`blk::names`); the planner knows the
        // primary names.
        let mut spec = spec.clone();
        if let Some(name) = &spec.device {
            let d = block::find(name).ok_or_else(|| {
                alloc::format!(
                    "job {:?}: no device named {name:?} (available: {})",
                    spec.name,
                    block::names_and_aliases()
                )
            })?;
            spec.device = Some(d.facts().name.clone());
        }
        for file in &mut spec.files {
            if let Some(d) = block::find(&file.device) {
                file.device = d.facts().name.clone();
            }
        }
        let mut plan = workload::plan_job(&spec, infos, online).map_err(|e| e.to_string())?;
        let dev = block::find(&plan.device.name).ok_or_else(|| alloc::format!("no device {}", plan.device.name))?;
        for info in plan.devices() {
            let each = block::find(&info.name).ok_or_else(|| alloc::format!("no device {}", info.name))?;
            if plan.spec.rw.trims() && each.max_discard_sectors() == 0 {
                return Err(alloc::format!(
                    "job {}: rw={} needs discard (trim), and device {} ({}) has no discard command",
                    plan.spec.name,
                    plan.spec.rw.as_str(),
                    info.name,
                    each.facts().model
                ));
            }
            if plan.spec.rw.writes() || plan.spec.rw.trims() {
                // A trim destroys data as a write does.
                super::safety::check_before_writes(&plan.spec.name, each, plan.spec.destroy)?;
            }
        }
        // Record the policies in force, so the report names them rather than "default".
        let (c, q) = map_policies(&plan, dev);
        plan.spec.completion = Some(to_left(&COMPLETION_POLICIES, c));
        plan.spec.quiesce = Some(to_left(&QUIESCE_POLICIES, q));
        // Every submitting CPU gets iodepth DMA buffers of the largest I/O's bytes: refuse jobs
        // that cannot fit instead of failing half-way through their allocations.
        let job_need =
            u64::from(plan.iodepth) * u64::from(plan.max_io_bytes()).next_multiple_of(4096) * plan.cpus.len() as u64;
        need += job_need;
        let free = crate::arch::memory::free_bytes();
        if need > free / 2 {
            return Err(alloc::format!(
                "job {}: needs {} MiB of DMA buffers (iodepth {} x bs {} x {} CPUs{}); only {} MiB of memory is free",
                plan.spec.name,
                job_need >> 20,
                plan.iodepth,
                plan.max_io_bytes(),
                plan.cpus.len(),
                if specs.len() > 1 {
                    ", beside the jobs running with it"
                } else {
                    ""
                },
                free >> 20
            ));
        }
        plans.push(plan);
    }
    let passed = run_jobs(&plans, detail)?;
    for (plan, (ok, _)) in plans.iter().zip(&passed) {
        kprintln!("job {}: {}", plan.spec.name, if *ok { "PASSED" } else { "FAILED" });
    }
    Ok(passed)
}
