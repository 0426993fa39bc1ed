//! Dispatch: running a hardware queue (its run token, the CPUs' pending bits, the requests the
//! driver turned away) and handing requests to the driver's `queue_rq`.

use super::*;

impl<D: Driver> Queue<D> {
    /// Runs hardware queue `hwq` from CPU `cpu`: dispatches pending requests to the driver
    /// unless the queue is quiesced or another CPU is already dispatching (that CPU then runs
    /// again on our behalf).
    pub fn run_hw_queue(&self, cpu: usize, hwq: usize) {
        if hwq >= self.hwqs.len() || cpu >= self.ncpus {
            return;
        }
        if self.need_run(hwq) || self.recheck_need_run(cpu, hwq) {
            self.dispatch(cpu, hwq);
        }
    }

    pub(super) fn need_run(&self, hwq: usize) -> bool {
        !self.quiesced() && self.hwqs[hwq].has_pending()
    }

    /// The slow re-check after the lockless check said "nothing to do", so that a run is never
    /// lost when `unquiesce` races with an insert (the store-buffer pattern: the inserter
    /// stores its pending bit then loads the depth; `unquiesce` stores the depth then loads the
    /// pending bits; each side needs a full barrier between its store and its load).
    pub(super) fn recheck_need_run(&self, cpu: usize, hwq: usize) -> bool {
        match self.quiesce_check() {
            QuiesceCheck::LockFree => {
                // Pairs with the fence in `quiesce_nowait`/`unquiesce` (and in
                // `after_completion`): either we see their store or they see ours.
                fence(Ordering::SeqCst);
                self.need_run(hwq)
            }
            QuiesceCheck::Locked | QuiesceCheck::Sleeping => {
                let _guard = self.lock_queue(Some(cpu));
                bump(&self.counters.cpu(cpu).hot_path_locks);
                // `quiesce_nowait`/`unquiesce` change the depth under this lock, so under it
                // we see the latest depth (the regressing Linux design).
                self.need_run(hwq)
            }
        }
    }

    /// Takes the run token (or hands the run to its holder) and dispatches until no rerun is
    /// requested.
    pub(super) fn dispatch(&self, cpu: usize, hwq: usize) {
        let at = self.run_context(cpu, hwq);
        let hq = at.hq;
        let mut s = hq.run_state.load(Ordering::Relaxed);
        loop {
            if s & RUNNING != 0 {
                // Someone is dispatching: ask it to go round once more. An RMW (not a plain
                // load) so that we act on the latest value; Release pairs with the Acquire
                // swap of the holder, which then sees our pending bit.
                match hq
                    .run_state
                    .compare_exchange_weak(s, s | RERUN, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    Err(now) => s = now,
                }
            } else {
                // Acquire pairs with the Release that freed the token: the previous holder's
                // FIFO updates are visible.
                match hq
                    .run_state
                    .compare_exchange_weak(s, RUNNING, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(now) => s = now,
                }
            }
        }
        self.run_with_token(&at, &[], false);
    }

    /// Dispatches while holding the run token, until no rerun is requested, then releases it.
    /// `direct`: requests to dispatch, in order, after whatever is already waiting (the
    /// direct-issue path; empty for none); if the queue turns out to be quiesced they are
    /// parked on the dispatch FIFO instead and `true` is returned: the caller must then
    /// re-check (`run_hw_queue`), as an insert would. `defer`: the pass that carries `direct`
    /// may leave the doorbell to [`Queue::commit`].
    #[inline(always)]
    pub(super) fn run_with_token(&self, at: &RunContext<'_>, mut direct: &[u32], defer: bool) -> bool {
        let hq = at.hq;
        let mut parked = false;
        bump(&at.counters.queue_runs);
        loop {
            // Full fence; the access just before is an atomic RMW (the counter bump on the
            // first round, the RERUN swap below on later ones), hence `fence_after_rmw`. Pairs
            // with the fence in `quiesce_nowait`: either `quiesce` sees RUNNING and waits for
            // us, or we see the raised depth and dispatch nothing.
            fence_after_rmw();
            if !self.quiesced() {
                // Only the pass with this CPU's own requests defers: a rerun for others rings.
                let defer = defer && !direct.is_empty();
                self.dispatch_once(at, core::mem::take(&mut direct), defer);
            } else if !direct.is_empty() {
                // SAFETY: we hold the run token, which guards the FIFO.
                let fifo = unsafe { &mut *hq.fifo.get() };
                self.append_in_order(fifo, core::mem::take(&mut direct));
                hq.dispatch_nonempty.store(true, Ordering::Relaxed);
                parked = true;
            }
            // Release pairs with the Acquire that takes the token next.
            match hq
                .run_state
                .compare_exchange(RUNNING, 0, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return parked,
                Err(_) => {
                    // RERUN was set: consume it and go again. Acquire pairs with the
                    // requester's AcqRel CAS.
                    hq.run_state.swap(RUNNING, Ordering::AcqRel);
                }
            }
        }
    }

    /// One dispatch pass; the caller holds the run token. `direct` joins the end of the line,
    /// in order. `defer`: the last request goes with `last == false` and its doorbell is left
    /// to [`Queue::commit`] (a pass that is turned away rings at once, as always).
    #[inline(always)]
    pub(super) fn dispatch_once(&self, at: &RunContext<'_>, direct: &[u32], defer: bool) {
        let hq = at.hq;
        // SAFETY: we hold the run token (RUNNING), which guards the FIFO.
        let fifo = unsafe { &mut *hq.fifo.get() };
        if !direct.is_empty() && fifo.is_empty() {
            // The direct-issue case: nothing waits on the FIFO, so the request goes to the
            // driver without the FIFO push and pop. `dispatch_nonempty` is false
            // already: it mirrors the FIFO whenever the token is free. Other CPUs' software
            // queues are not collected in this pass: a CPU that marked its queue pending then
            // runs the hardware queue, and finding the token taken it sets RERUN, so our
            // release fails and `run_with_token` makes a full pass for it.
            self.dispatch_direct(at, direct, defer);
            return;
        }
        // Collect software queues with work. Clear a CPU's bit before taking its list: a push
        // that finds the list non-empty relies on the bit being set or about to be taken.
        for (w, word) in hq.pending.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // Acquire pairs with the Release fetch_or in `insert`.
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                let c = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let chain = self.sw_queues[c].take_newest_first();
                fifo.append_newest_first(chain, &self.links);
            }
        }
        self.append_in_order(fifo, direct);
        if fifo.is_empty() {
            hq.dispatch_nonempty.store(false, Ordering::Relaxed);
            return;
        }
        let (gen_before, ctx) = self.pass_context(at);
        let counters = at.counters;
        let mut uncommitted = false;
        let mut turned_away = false;
        while let Some(index) = fifo.pop_front(&self.links) {
            let last = fifo.is_empty() && !defer;
            // SAFETY: the request came off our FIFO, so the block layer owns it and we are the
            // only context touching it. It may have been queued for another hardware queue (a
            // changed CPU map): it goes to this one.
            unsafe { self.slot(index).data_mut().hwq = ctx.hwq };
            match self.dispatch_one(at, &ctx, index, last) {
                Dispatched::Queued => uncommitted = !last,
                Dispatched::Ended => {}
                Dispatched::TurnedAway => {
                    fifo.push_front(index, &self.links);
                    turned_away = true;
                    break;
                }
            }
        }
        if uncommitted {
            self.ring_or_defer(&ctx, counters, defer && !turned_away);
        }
        hq.dispatch_nonempty.store(!fifo.is_empty(), Ordering::Relaxed);
        if turned_away {
            self.after_turned_away(at.hwq, at.set, gen_before);
        }
    }

    /// [`Queue::dispatch_once`] for requests that have nothing ahead of them: no FIFO push and
    /// pop, and no `dispatch_nonempty` store unless the driver turns one away (then it and
    /// those after it wait on the FIFO, in order). The last of them goes with `last == true`
    /// unless `defer`, so a burst rings the doorbell once.
    #[inline(always)]
    pub(super) fn dispatch_direct(&self, at: &RunContext<'_>, indices: &[u32], defer: bool) {
        if let [index] = *indices {
            // One request (every unbatched submission): no loop.
            self.dispatch_alone(at, index, defer);
            return;
        }
        // Out of line, where its loop keeps its values in registers (inlined into a
        // submission, it could not).
        if at.trace {
            self.dispatch_list::<true>(at, indices, defer);
        } else {
            self.dispatch_list::<false>(at, indices, defer);
        }
    }

    /// [`Queue::dispatch_direct`] of several requests. `TRACED`: the stage trace is on (the
    /// untraced copy tests nothing for it).
    #[inline(never)]
    fn dispatch_list<const TRACED: bool>(&self, at: &RunContext<'_>, indices: &[u32], defer: bool) {
        let at = &RunContext {
            trace: TRACED && at.trace,
            ..*at
        };
        let (gen_before, ctx) = self.pass_context(at);
        let counters = at.counters;
        let mut uncommitted = false;
        // All but the last go with `last == false`: their loop carries no test for it.
        let Some((&final_index, front)) = indices.split_last() else {
            return;
        };
        for (position, &index) in front.iter().enumerate() {
            match self.dispatch_one(at, &ctx, index, false) {
                Dispatched::Queued => uncommitted = true,
                Dispatched::Ended => {}
                Dispatched::TurnedAway => {
                    self.list_turned_away(at, &ctx, &indices[position..], uncommitted, gen_before);
                    return;
                }
            }
        }
        match self.dispatch_one(at, &ctx, final_index, !defer) {
            Dispatched::Queued => uncommitted = defer,
            Dispatched::Ended => {}
            Dispatched::TurnedAway => {
                self.list_turned_away(at, &ctx, core::slice::from_ref(&final_index), uncommitted, gen_before);
                return;
            }
        }
        if uncommitted {
            self.ring_or_defer(&ctx, counters, defer);
        }
    }

    /// [`Queue::dispatch_list`] after the driver turned away `rest[0]`: it and the requests
    /// after it wait on the FIFO, in order, and what went before rings now (`uncommitted`), as
    /// in `dispatch_once`.
    #[cold]
    #[inline(never)]
    fn list_turned_away(
        &self,
        at: &RunContext<'_>,
        ctx: &HwCtx<'_, D>,
        rest: &[u32],
        uncommitted: bool,
        gen_before: u32,
    ) {
        let hq = at.hq;
        // SAFETY: we hold the run token (RUNNING), which guards the FIFO.
        let fifo = unsafe { &mut *hq.fifo.get() };
        fifo.push_front(rest[0], &self.links);
        self.append_in_order(fifo, &rest[1..]);
        hq.dispatch_nonempty.store(true, Ordering::Relaxed);
        if uncommitted {
            self.ring_or_defer(ctx, at.counters, false);
        }
        self.after_turned_away(at.hwq, at.set, gen_before);
    }

    /// [`Queue::dispatch_direct`] for one request.
    #[inline(always)]
    pub(super) fn dispatch_alone(&self, at: &RunContext<'_>, index: u32, defer: bool) {
        let (gen_before, ctx) = self.pass_context(at);
        let counters = at.counters;
        match self.dispatch_one(at, &ctx, index, !defer) {
            Dispatched::Queued => {
                if defer {
                    self.ring_or_defer(&ctx, counters, true);
                }
            }
            Dispatched::Ended => {}
            Dispatched::TurnedAway => {
                let hq = at.hq;
                // SAFETY: we hold the run token (RUNNING), which guards the FIFO.
                let fifo = unsafe { &mut *hq.fifo.get() };
                fifo.push_front(index, &self.links);
                hq.dispatch_nonempty.store(true, Ordering::Relaxed);
                self.after_turned_away(at.hwq, at.set, gen_before);
            }
        }
    }

    /// Appends `indices` to the back of the dispatch FIFO in order (the caller holds the run
    /// token, which guards it).
    pub(super) fn append_in_order(&self, fifo: &mut crate::list::Fifo, indices: &[u32]) {
        for &index in indices {
            self.links.set(index, crate::list::EMPTY);
            fifo.append_newest_first(index, &self.links);
        }
    }

    /// What a dispatch pass needs beyond `at`: its tag set's "freed" sequence before the pass
    /// (the restart protocol's snapshot) and the driver's context.
    #[inline(always)]
    pub(super) fn pass_context(&self, at: &RunContext<'_>) -> (u32, HwCtx<'_, D>) {
        let gen_before = at.host.freed_seq();
        let ctx = HwCtx {
            queue: self,
            hwq: at.hwq as u16,
            cpu: at.cpu as u16,
        };
        (gen_before, ctx)
    }

    /// Hands request `index` (off the FIFO, or issued directly) to the driver. Its slot already
    /// names `ctx`'s hardware queue: its submitter filled it for this one (a direct issue), or
    /// the FIFO pass restamped it.
    #[inline(always)]
    pub(super) fn dispatch_one(&self, at: &RunContext<'_>, ctx: &HwCtx<'_, D>, index: u32, last: bool) -> Dispatched {
        let counters = at.counters;
        let cpu = usize::from(ctx.cpu);
        // SAFETY: a request index the queue hands to dispatch came from a checked lookup.
        let slot = unsafe { self.held_slot(index) };
        debug_assert_eq!(
            // SAFETY: the block layer owns the request until the driver gets the handle.
            unsafe { slot.data() }.hwq,
            ctx.hwq
        );
        // Whatever brings a request here leaves it QUEUED.
        slot.move_state(state::QUEUED, state::DRIVER);
        // SAFETY: state is DRIVER and this is the only handle.
        let rq = unsafe { Rq::new(self, slot, at.counters, index, ctx.cpu, false, true, at.trace) };
        bump(&counters.dispatched);
        self.stage_if(at.trace, cpu, index, crate::driver::Stage::Dispatch);
        match self.driver.queue_rq(ctx, rq, last) {
            Ok(()) => {
                self.stage_if(at.trace, cpu, index, crate::driver::Stage::Doorbell);
                Dispatched::Queued
            }
            Err(QueueRqError::Busy(rq) | QueueRqError::DevBusy(rq)) => {
                // The handle the driver gives back is the one it got: the same slot.
                let given_back = rq.into_index();
                debug_assert_eq!(given_back, index);
                slot.set_state(state::QUEUED);
                bump(&counters.requeued);
                Dispatched::TurnedAway
            }
            Err(QueueRqError::Io(rq, status)) => {
                rq.end(if status.is_ok() { Status::IoError } else { status });
                Dispatched::Ended
            }
        }
    }

    /// After a pass whose last request went with `last == false`: leaves the doorbell to
    /// [`Queue::commit`] (`defer`) or rings it now.
    #[inline(always)]
    pub(super) fn ring_or_defer(&self, ctx: &HwCtx<'_, D>, counters: &CpuCounters, defer: bool) {
        if defer {
            self.defer_commit(usize::from(ctx.cpu), usize::from(ctx.hwq));
        } else {
            bump(&counters.commits);
            self.driver.commit_rqs(ctx);
        }
    }

    /// A request was turned away and waits on the FIFO (`dispatch_nonempty` stored).
    #[cold]
    pub(super) fn after_turned_away(&self, hwq: usize, set: usize, gen_before: u32) {
        // Restart protocol (Linux's SCHED_RESTART): we store "FIFO non-empty" (and, with
        // tags shared across queues, our restart bit) then load the tag set's "freed"
        // sequence; a completer bumps the sequence then loads "FIFO non-empty" and the
        // restart bits. Full fences on both sides (this one pairs with the one in
        // `HostTags::free`) mean that either it reruns (or kicks) us, or we see that
        // resources were freed meanwhile and go again ourselves.
        if self.host_shared {
            self.tag_sets[set].want_restart(self.sharer_ids[set]);
        }
        fence(Ordering::SeqCst);
        if self.tag_sets[set].freed_seq() != gen_before {
            self.hwqs[hwq].run_state.fetch_or(RERUN, Ordering::Relaxed);
        }
    }
}
