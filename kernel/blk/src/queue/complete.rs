//! Completion: a device's report of an issue checked against its slot, routed by the completion
//! policy (inline, the submitter's CPU by IPI, or a poller), ended on the done board, and the
//! reruns a freed tag allows; batches of completions from one reap.

use super::*;

impl<D: Driver> Queue<D> {
    /// Reports that the hardware completed the issue `token` (from [`Rq::issue`]) on hardware
    /// queue `hwq`, on CPU `cpu` (typically from the interrupt handler). This is the only way
    /// a completion enters the block layer.
    ///
    /// The values come from the device, so they are validated and a refused completion changes
    /// nothing: an out-of-range tag is [`BlkError::TagOutOfRange`]; a token whose generation is
    /// not the slot's current one (an earlier issue of the tag: late after a timeout, or a
    /// stale context) is [`BlkError::StaleCompletion`], counted in `stale_completions`; a
    /// current-generation token whose request is no longer in flight (a double completion) is
    /// [`BlkError::NotInFlight`], counted in `spurious_completions`. Never blocks.
    pub fn complete(&self, cpu: usize, hwq: usize, token: IssueToken, status: Status) -> Result<(), BlkError> {
        self.claim_issue(cpu, hwq, token, Claim::Complete(status))
    }

    /// Opens a batch of completions reaped together on CPU `cpu` from hardware queue `hwq`
    /// (one interrupt's, or one poll's): each [`CompletionBatch::complete`] is
    /// [`Queue::complete`] without checking `cpu` and `hwq` again, and the queue's rerun check
    /// after a completion runs once, when the batch is dropped, instead of once per completion
    /// (with the lock-free re-check; the locked variants keep theirs per completion). Linux's
    /// completion batches end the same way (`blk_mq_end_request_batch`).
    ///
    /// An out-of-range `cpu` or `hwq` is refused here, as [`Queue::complete`] would refuse each
    /// completion.
    pub fn completion_batch(&self, cpu: usize, hwq: usize) -> Result<CompletionBatch<'_, D>, BlkError> {
        self.check_cpu(cpu)?;
        self.check_hwq(hwq)?;
        Ok(CompletionBatch {
            queue: self,
            cpu,
            hwq,
            // Under a locked variant each completion keeps its own check, and the batch owes
            // none (a variant switched meanwhile costs at most one check more).
            defers_check: self.quiesce_check() == QuiesceCheck::LockFree,
            check_owed: false,
        })
    }

    /// Takes an issued request back from the device and puts it in line to be dispatched (and
    /// issued, with a new generation) again, for example after a controller reset; the driver
    /// calls it only once the device has provably given up the tag (see [`TimeoutAction`]).
    /// Validated and refused exactly like [`Queue::complete`] (the two race through the same
    /// CAS: the first wins). While the request's timeout handler runs, the requeue is recorded
    /// and applied after it (unless the handler returns `Done`). Counted in `requeued`. May
    /// dispatch (call the driver's `queue_rq`) before it returns.
    pub fn requeue(&self, cpu: usize, hwq: usize, token: IssueToken) -> Result<(), BlkError> {
        self.claim_issue(cpu, hwq, token, Claim::Requeue)
    }

    /// Calls `f(hwq, token)` for every request issued to the device and not yet completed (the
    /// state at the moment each slot is looked at; requests may complete meanwhile, which
    /// `complete`/`requeue` then refuse). For a driver's controller reset: it completes or
    /// requeues each token. `hwq` is a hardware queue to pass back with the token (with shared
    /// tags, the first queue of the set; any queue of the set is accepted).
    pub fn for_each_issued(&self, mut f: impl FnMut(usize, IssueToken)) {
        for index in 0..self.slots.len() as u32 {
            // Acquire pairs with the Release store in `Rq::issue`.
            let w = self.slot(index).word.load(Ordering::Acquire);
            if matches!(state::of(w), state::ISSUED | state::TIMEOUT) {
                let set = (index / self.depth) as usize;
                let tag = index % self.depth;
                f(
                    usize::from(self.set_hwqs[set][0]),
                    IssueToken::new(tag, state::generation(w)),
                );
            }
        }
    }

    /// The claim behind `complete` and `requeue`: validates `token`, then moves its issue from
    /// ISSUED to COMPLETING/QUEUED by one CAS of the whole word (state + generation), or, while
    /// the timeout handler owns it, records the claim for the handler's context to apply.
    pub(super) fn claim_issue(&self, cpu: usize, hwq: usize, token: IssueToken, claim: Claim) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        self.check_hwq(hwq)?;
        self.claim_checked(cpu, hwq, token, claim, false)
    }

    /// [`Queue::claim_issue`] for a checked `cpu` and `hwq`. `rerun_covered`: a completion's
    /// rerun check is left to the caller (a [`CompletionBatch`]; see `after_completion`).
    #[inline(always)]
    pub(super) fn claim_checked(
        &self,
        cpu: usize,
        hwq: usize,
        token: IssueToken,
        claim: Claim,
        rerun_covered: bool,
    ) -> Result<(), BlkError> {
        let tag = token.tag();
        if tag >= self.depth {
            bump(&self.counters.cpu(cpu).spurious_completions);
            return Err(BlkError::TagOutOfRange { tag, depth: self.depth });
        }
        let generation = token.generation();
        let index = self.set_of(hwq) as u32 * self.depth + tag;
        let slot = self.slot(index);
        loop {
            // Acquire pairs with the Release store in `Rq::issue`.
            let w = slot.word.load(Ordering::Acquire);
            let current = state::generation(w);
            if current != generation {
                bump(&self.counters.cpu(cpu).stale_completions);
                return Err(BlkError::StaleCompletion {
                    tag,
                    generation,
                    current,
                });
            }
            // The CASes compare the whole word, generation included: they claim exactly the
            // issue the token names.
            match state::of(w) {
                state::ISSUED => {
                    let next = match claim {
                        Claim::Complete(_) => state::pack(generation, state::COMPLETING),
                        // The issue is over; its generation retires with it.
                        Claim::Requeue => state::pack(generation.wrapping_add(1), state::QUEUED),
                    };
                    if slot
                        .word
                        .compare_exchange(w, next, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        match claim {
                            Claim::Complete(status) => {
                                let tracing = self.tracing();
                                self.stage_if(tracing, cpu, index, crate::driver::Stage::DeviceComplete);
                                self.route_completion(cpu, slot, index, status, rerun_covered, tracing);
                            }
                            Claim::Requeue => self.requeue_owned(cpu, index),
                        }
                        return Ok(());
                    }
                }
                state::TIMEOUT => {
                    // The claim travels in the word itself, so the handler's context reads it
                    // with the state. Release pairs with the Acquire of the timeout path's
                    // failed CAS / swap.
                    let late = match claim {
                        Claim::Complete(status) => status as u8,
                        Claim::Requeue => state::LATE_REQUEUE,
                    };
                    if slot
                        .word
                        .compare_exchange(
                            w,
                            state::pack_late(generation, late),
                            Ordering::Release,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                    {
                        return Ok(());
                    }
                }
                other => {
                    bump(&self.counters.cpu(cpu).spurious_completions);
                    return Err(BlkError::NotInFlight {
                        hwq,
                        tag,
                        state: state::name(other),
                    });
                }
            }
        }
    }

    /// Puts an owned request (state QUEUED) back on its submitting CPU's software queue, on the
    /// hardware queue that CPU maps to (the one it was dispatched on), and runs that queue.
    pub(super) fn requeue_owned(&self, cpu: usize, index: u32) {
        let slot = self.slot(index);
        slot.deadline.store(0, Ordering::Relaxed);
        slot.set_status(Status::Ok);
        // SAFETY: the slot is QUEUED and we claimed it, so we own it.
        let submit_cpu = usize::from(unsafe { slot.data() }.submit_cpu);
        let hwq = usize::from(self.counters.route(submit_cpu).hwq);
        bump(&self.counters.cpu(cpu).requeued);
        // Software queues are multi-producer: pushing onto another CPU's is fine.
        self.insert(submit_cpu, hwq, index);
        self.run_hw_queue(cpu, hwq);
    }

    /// Sends a claimed completion (state COMPLETING, or DRIVER from a handle's `complete`) of
    /// `slot` (`self.slot(index)`) with `status` where the policy says. The status, and the
    /// COMPLETING state, go into the slot only when the request waits on a completion list;
    /// finished here, it is passed along.
    #[inline(always)]
    pub(crate) fn route_completion(
        &self,
        cpu: usize,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        rerun_covered: bool,
        tracing: bool,
    ) {
        self.route_completion_in(cpu, self.counters.cpu(cpu), slot, index, status, rerun_covered, tracing);
    }

    /// [`Queue::route_completion`] with CPU `cpu`'s counters block at hand.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn route_completion_in(
        &self,
        cpu: usize,
        counters: &CpuCounters,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        rerun_covered: bool,
        tracing: bool,
    ) {
        match self.completion_policy() {
            CompletionPolicy::Irq => {
                bump(&counters.completions_irq);
                self.finish(cpu, counters, slot, index, status, rerun_covered, tracing);
            }
            CompletionPolicy::Poll => {
                bump(&counters.completions_poll);
                self.finish(cpu, counters, slot, index, status, rerun_covered, tracing);
            }
            CompletionPolicy::Local => {
                bump(&counters.completions_local);
                slot.set_state(state::COMPLETING);
                slot.set_status(status);
                self.stage_if(tracing, cpu, index, crate::driver::Stage::ListPush);
                if self.done_lists[cpu].push(index, &self.links) {
                    bump(&counters.softirqs);
                    self.platform.raise_completion_softirq(cpu);
                }
            }
            CompletionPolicy::Remote => {
                // SAFETY: the slot is claimed (or handed over by its handle), so we own it.
                let target = usize::from(unsafe { slot.data() }.submit_cpu);
                if target == cpu {
                    bump(&counters.completions_irq);
                    self.finish(cpu, counters, slot, index, status, rerun_covered, tracing);
                } else {
                    bump(&counters.completions_remote);
                    slot.set_state(state::COMPLETING);
                    slot.set_status(status);
                    self.stage_if(tracing, cpu, index, crate::driver::Stage::ListPush);
                    if self.done_lists[target].push(index, &self.links) {
                        bump(&counters.ipis);
                        self.platform.send_completion_ipi(target);
                    }
                }
            }
        }
    }

    /// Finishes the requests on CPU `cpu`'s completion list, oldest first: what the kernel's
    /// completion IPI / softirq handler on that CPU calls. Returns how many.
    pub fn run_completions(&self, cpu: usize) -> usize {
        if cpu >= self.ncpus {
            return 0;
        }
        let mut n = 0;
        let counters = self.counters.cpu(cpu);
        for index in self.done_lists[cpu].take_all(&self.links) {
            let tracing = self.tracing();
            self.stage_if(tracing, cpu, index, crate::driver::Stage::Softirq);
            let slot = self.slot(index);
            // The list's push (Release) published the status `route_completion` stored.
            self.finish(cpu, counters, slot, index, slot.status(), false, tracing);
            n += 1;
        }
        // A sharer of our host tag set freed tags while we held turned-away requests, and
        // kicked us (see `HostTags`): rerun them.
        if self.host_shared && self.tag_sets[0].take_restart(self.sharer_ids[0]) {
            for hwq in 0..self.hwqs.len() {
                if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
                    self.run_hw_queue(cpu, hwq);
                }
            }
        }
        n
    }

    /// Hands a claimed completion of `slot` (`self.slot(index)`) to the driver's `complete`.
    /// `rerun_covered`: the rerun check after it is someone else's (see `after_completion`);
    /// `tracing`: stage tracing as the caller read it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish(
        &self,
        cpu: usize,
        counters: &CpuCounters,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        rerun_covered: bool,
        tracing: bool,
    ) {
        if !D::HAS_COMPLETE {
            // What the default `complete` does, without the handle: end it with its status.
            let how = Ending {
                inline: false,
                rerun_covered,
                tracing,
            };
            self.end_request_in(cpu, counters, slot, index, status, how);
            return;
        }
        // The driver's `complete` reads it through `Rq::status`.
        slot.set_status(status);
        slot.set_state(state::DRIVER);
        // SAFETY: the slot was COMPLETING and ours (claimed by CAS or taken off a completion
        // list); it is DRIVER now and this is the only handle.
        let rq = unsafe { Rq::new(self, slot, counters, index, cpu as u16, true, rerun_covered, tracing) };
        self.driver.complete(rq);
    }

    /// The single exit: reports the completion, frees the tag, leaves the queue. `how`: whether
    /// it ended in `queue_rq` and whether its rerun check is someone else's ([`Ending`]).
    #[inline]
    pub(crate) fn end_request(&self, cpu: usize, index: u32, status: Status, how: Ending) {
        self.end_request_in(cpu, self.counters.cpu(cpu), self.slot(index), index, status, how);
    }

    /// [`Queue::end_request`] with the slot already looked up (an [`Rq`] carries it).
    /// Inlined into every completion path: with the rerun check, the status and the done board
    /// carried in, a call costs more instructions per I/O than the code it would save.
    #[inline(always)]
    pub(crate) fn end_request_in(
        &self,
        cpu: usize,
        counters: &CpuCounters,
        slot: &Slot<D::Pdu>,
        index: u32,
        status: Status,
        how: Ending,
    ) {
        let Ending {
            inline,
            rerun_covered,
            tracing,
        } = how;
        let (hwq, tag, parent, set) = {
            // SAFETY: called through an `Rq` (consumed), which owned the slot.
            let d = unsafe { slot.data() };
            (usize::from(d.hwq), d.tag, d.parent, usize::from(d.set))
        };
        self.stage_if(tracing, cpu, index, crate::driver::Stage::EndIo);
        if parent == NO_PARENT
            && let Some(board) = self.done_board
            && !tracing
        {
            // SAFETY: as above; the slot stays ours until it is freed below.
            let d = unsafe { slot.data() };
            // A refusal (a cookie that is no slot, a slot already done) is counted by the
            // board, which the platform reports; the request has ended either way.
            let _ = board.deliver_from(cpu, usize::from(d.submit_cpu), d.cookie, status);
        } else {
            self.end_io_full(cpu, index, status, parent);
        }
        bump(&counters.completed);
        if inline {
            bump(&counters.completions_inline);
        }
        if !status.is_ok() {
            bump(&counters.completed_with_error);
        }
        slot.set_state(state::FREE);
        // Release inside `free` publishes the FREE state and our last reads to the next owner.
        // It also bumps the set's "freed" sequence and fences (the restart protocol).
        debug_assert!(set < self.tag_sets.len());
        // SAFETY: a slot's set is fixed when the queue builds it, one of its tag sets.
        let host = unsafe { self.tag_sets.get_unchecked(set) };
        let freed = host.free_hinted(cpu, &counters.tag_hint, tag, self.sharer_of(set));
        debug_assert!(freed, "tag {tag} freed twice");
        self.usage.exit(&counters.usage);
        self.after_completion(cpu, set, hwq, rerun_covered);
    }

    /// [`Queue::end_request`]'s report through [`Platform::end_io`]: a whole [`Completion`]
    /// for an unsplit request, or the bio's once its last part has ended. Cold: the kernel's
    /// platform has a done board, so it comes here only for split bios and stage tracing.
    #[cold]
    pub(super) fn end_io_full(&self, cpu: usize, index: u32, status: Status, parent: u32) {
        let completion = {
            // SAFETY: called by `end_request`, which owns the slot until it frees it.
            let d = unsafe { self.slot(index).data() };
            Completion {
                cookie: d.cookie,
                op: d.op,
                sector: d.sector,
                nr_sectors: d.nr_sectors,
                status,
                hwq: d.hwq,
                tag: d.tag,
                submit_cpu: d.submit_cpu,
                complete_cpu: cpu as u16,
            }
        };
        if parent == NO_PARENT {
            self.platform.end_io(&completion);
            return;
        }
        // The slot goes back free with no parent, as `take_request` expects it.
        // SAFETY: as above.
        unsafe { self.slot(index).data_mut() }.parent = NO_PARENT;
        if let Some(done) = self.splits.part_done(parent, status) {
            // The last part of a split bio: the bio ends, once, as the submitter gave it.
            self.platform.end_io(&Completion {
                cookie: done.cookie,
                op: done.op,
                sector: done.sector,
                nr_sectors: done.nr_sectors,
                status: done.status,
                ..completion
            });
            self.splits.release(cpu, parent);
        }
    }

    /// Reruns the queue after a completion (always with `run_queue_on_completion`, otherwise
    /// only if the driver had turned requests away). The tag free just before bumped the set's
    /// "freed" sequence and ran a full fence, which pairs with the fence in `dispatch_once`'s
    /// restart protocol (and serves as the lock-free quiesce re-check's fence).
    ///
    /// `rerun_covered`: with the lock-free re-check, the rerun of `hwq` is someone else's:
    /// - the request ended on the CPU that holds `hwq`'s run token (inside `queue_rq`: ended
    ///   there, or completed there through a local completion policy). That pass goes on
    ///   through its FIFO, a CPU that inserts meanwhile requests the rerun itself
    ///   (`run_hw_queue`), and a request turned away later in the pass sees the "freed"
    ///   sequence moved (the restart protocol) and goes again;
    /// - or it came from a [`CompletionBatch`], whose end runs this check once, after the
    ///   batch's last tag free (and its fence).
    ///
    /// The locked variants keep their lock per completion (they model that cost).
    ///
    /// Inlined: with `rerun_covered` (a completion batch's, a dispatch pass's) it is two loads
    /// and two branches, which a call would double.
    #[inline(always)]
    pub(super) fn after_completion(&self, cpu: usize, set: usize, hwq: usize, rerun_covered: bool) {
        let check = self.quiesce_check();
        if !(rerun_covered && check == QuiesceCheck::LockFree) {
            self.rerun_after_free(cpu, hwq, check);
        }
        if self.set_spans_hwqs {
            self.rerun_set_sharers(cpu, set, hwq);
        }
    }

    /// The rerun check of `hwq` after a tag free (`after_completion`, and a completion batch's
    /// end): dispatch what waits there, under quiesce variant `check`.
    #[inline(always)]
    pub(super) fn rerun_after_free(&self, cpu: usize, hwq: usize, check: QuiesceCheck) {
        if self.run_on_completion {
            // The fence above already did the lock-free re-check's job; the locked variant
            // still takes its lock when the lockless check says "nothing to do".
            let locked = check != QuiesceCheck::LockFree;
            if self.need_run(hwq) || (locked && self.recheck_need_run(cpu, hwq)) {
                self.dispatch(cpu, hwq);
            }
        } else if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
            self.run_hw_queue(cpu, hwq);
        }
    }

    /// The other hardware queues of tag set `set` that hold turned-away requests, rerun after
    /// a tag of the set was freed (`after_completion`, for sets that serve several queues).
    #[inline(never)]
    pub(super) fn rerun_set_sharers(&self, cpu: usize, set: usize, hwq: usize) {
        for &h in self.set_hwqs[set].iter() {
            let h = usize::from(h);
            if h != hwq && self.hwqs[h].dispatch_nonempty.load(Ordering::Relaxed) {
                self.run_hw_queue(cpu, h);
            }
        }
    }
}

/// Completions reaped together from one hardware queue: see [`Queue::completion_batch`].
/// Dropping it runs the queue's rerun check once if any of its completions left it there (the
/// other queues of a shared tag set were rerun by each completion, as without a batch).
pub struct CompletionBatch<'a, D: Driver> {
    queue: &'a Queue<D>,
    cpu: usize,
    hwq: usize,
    /// Its completions leave their rerun check to the drop (the lock-free re-check).
    defers_check: bool,
    /// A completion was finished with its rerun check left to the drop.
    check_owed: bool,
}

impl<D: Driver> CompletionBatch<'_, D> {
    /// [`Queue::complete`] of `token` with `status`, validated and refused exactly as there.
    #[inline]
    pub fn complete(&mut self, token: IssueToken, status: Status) -> Result<(), BlkError> {
        self.queue
            .claim_checked(self.cpu, self.hwq, token, Claim::Complete(status), self.defers_check)?;
        self.check_owed = self.defers_check;
        Ok(())
    }
}

impl<D: Driver> Drop for CompletionBatch<'_, D> {
    fn drop(&mut self) {
        if self.check_owed {
            let q = self.queue;
            q.rerun_after_free(self.cpu, self.hwq, q.quiesce_check());
        }
    }
}

/// What a `claim_issue` does with the issue it claims.
#[derive(Clone, Copy)]
pub(super) enum Claim {
    Complete(Status),
    Requeue,
}
