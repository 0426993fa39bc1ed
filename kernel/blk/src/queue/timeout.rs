//! Polling and timeouts: the driver's poll, and the periodic tick that finds requests past their
//! deadline, asks the driver, and takes a late completion into account.

use super::*;

impl<D: Driver> Queue<D> {
    /// Polls hardware queue `hwq` through the driver's `poll`; returns completions found.
    pub fn poll(&self, cpu: usize, hwq: usize) -> Result<usize, BlkError> {
        self.check_cpu(cpu)?;
        self.check_hwq(hwq)?;
        let ctx = HwCtx {
            queue: self,
            hwq: hwq as u16,
            cpu: cpu as u16,
        };
        Ok(self.driver.poll(&ctx))
    }

    /// The periodic tick: runs the driver's timeout handler for every issued request whose
    /// deadline (issue time + `timeout_ns`) has passed, and reruns queues that hold turned-away
    /// requests. Returns the number of requests that timed out.
    pub fn tick(&self, cpu: usize) -> Result<usize, BlkError> {
        self.check_cpu(cpu)?;
        let mut expired = 0;
        if self.timeout_ns != 0 {
            let now = self.platform.now_ns();
            for index in 0..self.slots.len() as u32 {
                if self.check_timeout(cpu, index, now) {
                    expired += 1;
                }
            }
        }
        for hwq in 0..self.hwqs.len() {
            if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
                self.run_hw_queue(cpu, hwq);
            }
        }
        Ok(expired)
    }

    pub(super) fn check_timeout(&self, cpu: usize, index: u32, now: u64) -> bool {
        let slot = self.slot(index);
        let w = slot.word.load(Ordering::Relaxed);
        if state::of(w) != state::ISSUED {
            return false;
        }
        let deadline = slot.deadline.load(Ordering::Relaxed);
        if deadline == 0 || now < deadline {
            return false;
        }
        let generation = state::generation(w);
        // Claim it; a racing completion wins or loses this CAS. Acquire pairs with the Release
        // in `Rq::issue`.
        if slot
            .word
            .compare_exchange(
                w,
                state::pack(generation, state::TIMEOUT),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        // The slot may have been finished and reissued between our loads and the claim:
        // check the deadline of what we actually claimed.
        let deadline = slot.deadline.load(Ordering::Relaxed);
        let action = if deadline == 0 || now < deadline {
            None
        } else {
            let counters = self.counters.cpu(cpu);
            bump(&counters.timeouts);
            let mut view = TimedOutRq {
                queue: self,
                index,
                generation,
            };
            let action = self.driver.timeout(&mut view);
            let next = match action {
                TimeoutAction::ResetTimer => Some(self.timeout_ns),
                TimeoutAction::ResetTimerAfter(ns) => Some(ns),
                TimeoutAction::Done(_) | TimeoutAction::Requeue => None,
            };
            if let Some(after) = next {
                bump(&counters.timeout_resets);
                slot.deadline.store(now.saturating_add(after).max(1), Ordering::Relaxed);
            }
            Some(action)
        };
        let timeout_word = state::pack(generation, state::TIMEOUT);
        match action {
            None | Some(TimeoutAction::ResetTimer | TimeoutAction::ResetTimerAfter(_)) => {
                // Hand it back to the hardware unless a claim arrived meanwhile. Release pairs
                // with the Acquire in `claim_issue`.
                if let Err(now_word) = slot.word.compare_exchange(
                    timeout_word,
                    state::pack(generation, state::ISSUED),
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    self.apply_late_claim(cpu, index, generation, now_word);
                }
            }
            Some(TimeoutAction::Done(status)) => {
                // Whether or not a claim arrived meanwhile, the driver's verdict stands. The
                // timed-out issue is retired: the generation moves on, so a completion the
                // device still reports for it is refused as stale. Acquire pairs with the
                // Release CAS of a claim that raced the handler.
                slot.word.swap(
                    state::pack(generation.wrapping_add(1), state::COMPLETING),
                    Ordering::Acquire,
                );
                self.route_completion(cpu, slot, index, status, false, self.tracing());
            }
            Some(TimeoutAction::Requeue) => {
                match slot.word.compare_exchange(
                    timeout_word,
                    state::pack(generation.wrapping_add(1), state::QUEUED),
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(_) => self.requeue_owned(cpu, index),
                    // It completed while the handler ran: apply that instead of issuing it
                    // again.
                    Err(now_word) => self.apply_late_claim(cpu, index, generation, now_word),
                }
            }
        }
        action.is_some()
    }

    /// Applies the claim recorded while the timeout handler ran (state TIMEOUT_COMPLETED, the
    /// only other way out of TIMEOUT): a completion with its status, or a requeue.
    pub(super) fn apply_late_claim(&self, cpu: usize, index: u32, generation: u16, word: u32) {
        debug_assert_eq!(state::of(word), state::TIMEOUT_COMPLETED);
        let slot = self.slot(index);
        let late = state::late(word);
        if late == state::LATE_REQUEUE {
            slot.word.store(
                state::pack(generation.wrapping_add(1), state::QUEUED),
                Ordering::Relaxed,
            );
            self.requeue_owned(cpu, index);
        } else {
            slot.word
                .store(state::pack(generation, state::COMPLETING), Ordering::Relaxed);
            self.route_completion(cpu, slot, index, Status::from_u8(late), false, self.tracing());
        }
    }
}
