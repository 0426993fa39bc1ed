//! Quiesce (an atomic depth with paired full fences: no dispatch while raised) and freeze (the
//! usage count: no request enters, and the caller waits for those inside).

use super::*;

impl<D: Driver> Queue<D> {
    /// Raises the quiesce depth: no `queue_rq` starts until the matching [`Queue::unquiesce`].
    /// Does not wait for dispatches already running (see [`Queue::quiesce`]). Completions keep
    /// flowing.
    pub fn quiesce_nowait(&self) {
        if self.quiesce_check() != QuiesceCheck::LockFree {
            let _guard = self.lock_queue(None);
            self.quiesce_depth.fetch_add(1, Ordering::Relaxed);
        } else {
            self.quiesce_depth.fetch_add(1, Ordering::Relaxed);
        }
        // Pairs with the fences in `dispatch` and `recheck_need_run`.
        fence(Ordering::SeqCst);
    }

    /// Quiesces and waits until no CPU is inside the driver's `queue_rq` for this queue.
    /// Must not be called from a driver callback of this queue.
    pub fn quiesce(&self) {
        self.quiesce_nowait();
        for hq in self.hwqs.iter() {
            // Acquire pairs with the Release that frees the run token.
            while hq.run_state.load(Ordering::Acquire) & RUNNING != 0 {
                spin_loop();
            }
        }
    }

    /// Lowers the quiesce depth; at zero, runs every hardware queue so that requests inserted
    /// while quiesced are dispatched.
    pub fn unquiesce(&self, cpu: usize) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        let dec = |d: u32| d.checked_sub(1);
        let prev = if self.quiesce_check() != QuiesceCheck::LockFree {
            let _guard = self.lock_queue(Some(cpu));
            self.quiesce_depth
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, dec)
        } else {
            self.quiesce_depth
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, dec)
        };
        let prev = prev.map_err(|_| BlkError::NotQuiesced)?;
        if prev == 1 {
            // Pairs with the fence in `recheck_need_run`: an inserter that still saw us
            // quiesced has its pending bit visible to the loads below.
            fence(Ordering::SeqCst);
            for hwq in 0..self.hwqs.len() {
                if self.hwqs[hwq].has_pending() {
                    self.dispatch(cpu, hwq);
                }
            }
        }
        Ok(())
    }

    /// Whether the quiesce depth is above zero.
    pub fn is_quiesced(&self) -> bool {
        self.quiesced()
    }

    // ---------------------------------------------------------------- freeze

    /// Blocks new requests (`submit` fails with [`BlkError::Frozen`]); nests.
    pub fn freeze_start(&self) {
        let mut depth = self.freeze_depth.lock();
        if *depth == 0 {
            self.usage.set_frozen();
        }
        *depth += 1;
    }

    /// Waits, helping the queue along (as [`Queue::make_progress`]), until every request
    /// inside the queue has finished, for at most `timeout_ns`. Requires `freeze_start`.
    /// Requests cannot drain while the queue is quiesced.
    pub fn freeze_wait(&self, cpu: usize, timeout_ns: u64) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        let t0 = self.platform.now_ns();
        loop {
            if self.usage.is_drained(self.counters.usage_counts()) {
                return Ok(());
            }
            if !self.usage.is_frozen() {
                return Err(BlkError::NotFrozen);
            }
            self.make_progress(cpu);
            if self.platform.now_ns().saturating_sub(t0) > timeout_ns {
                return Err(BlkError::WaitTimeout {
                    what: "in-flight requests to drain (freeze)",
                    in_flight: self.usage.in_flight(self.counters.usage_counts()),
                });
            }
            spin_loop();
        }
    }

    /// `freeze_start` then `freeze_wait`. On timeout the queue stays frozen.
    pub fn freeze(&self, cpu: usize, timeout_ns: u64) -> Result<(), BlkError> {
        self.check_cpu(cpu)?;
        self.freeze_start();
        self.freeze_wait(cpu, timeout_ns)
    }

    /// Drops one freeze level; at zero, admits requests again.
    pub fn unfreeze(&self) -> Result<(), BlkError> {
        let mut depth = self.freeze_depth.lock();
        if *depth == 0 {
            return Err(BlkError::NotFrozen);
        }
        *depth -= 1;
        if *depth == 0 {
            self.usage.clear_frozen();
        }
        Ok(())
    }

    /// Whether the queue is frozen.
    pub fn is_frozen(&self) -> bool {
        self.usage.is_frozen()
    }
}
