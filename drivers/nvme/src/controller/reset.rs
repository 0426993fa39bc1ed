//! Recovery: the timeout ladder (Abort, then a controller reset) and the reset itself, which
//! hands every command in flight back to the block layer or fails it, never both.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use crate::cmd::{Sqe, cns};
use crate::{Delay, Dma, Error, Mmio};

use super::{Controller, ResetOutcome, STATE_FAILED, STATE_LIVE, STATE_RESETTING, TimeoutVerdict, bump};

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Handles the timeout of command slot `slot` (generation `generation`) on hardware queue `hwq`.
    /// First time: sends Abort and waits again (QEMU answers "not aborted"; a controller that
    /// does abort completes the command with Abort Requested through its CQ). Second time, or
    /// when the Abort itself fails or CSTS shows a fatal state: resets the controller, after which
    /// the device no longer owns the command. Returns the verdict and, after a reset, what the
    /// reset did with the other commands in flight (the caller fails or requeues those it
    /// lists); the verdict is `Failed` only if the reset failed this command.
    pub(crate) fn timeout(&self, hwq: usize, slot: u16, generation: u16) -> (TimeoutVerdict, Option<ResetOutcome>) {
        let Some(q) = self.queue(hwq) else {
            return (TimeoutVerdict::Wait, None);
        };
        let (stage, cid) = {
            let mut sq = q.sq.lock();
            match sq.slots.get_mut(usize::from(slot)) {
                Some(s) if s.outstanding() && s.generation == generation => {
                    let stage = s.flags.timeout_stage;
                    s.flags.timeout_stage = stage.saturating_add(1);
                    (stage, s.cid())
                }
                // Completed (delivery on its way) or already dealt with: keep waiting for it.
                _ => return (TimeoutVerdict::Wait, None),
            }
        };
        let csts = self.csts();
        let broken = csts.gone() || csts.fatal() || self.failed();
        if stage == 0 && !broken {
            bump(&self.counters.aborts_sent);
            let result = {
                let mut a = self.admin.lock();
                self.admin_cmd(&mut a, Sqe::abort(0, q.qid, cid))
            };
            match result {
                Ok(dw0) => {
                    if dw0 & 1 == 0 {
                        bump(&self.counters.aborts_succeeded);
                        log::warn!("nvme: queue {} cid {cid} timed out; aborted", q.qid);
                    } else {
                        log::warn!(
                            "nvme: queue {} cid {cid} timed out; controller did not abort it, waiting once more before a reset",
                            q.qid
                        );
                    }
                    return (TimeoutVerdict::Wait, None);
                }
                Err(e) => log::warn!("nvme: abort of queue {} cid {cid} failed ({e}); resetting", q.qid),
            }
        }
        let outcome = self.reset(Some((hwq, slot)));
        // Failed only if this reset failed this command: it may have picked an older aborted
        // command as the culprit and handed this one back (blk requeues it: the handler waits),
        // and another CPU's reset may have handed it back before this one.
        if outcome.failed.iter().any(|&(h, s, _)| h == hwq && s == slot) {
            (TimeoutVerdict::Failed, Some(outcome))
        } else {
            (TimeoutVerdict::Wait, Some(outcome))
        }
    }

    /// Controller reset: CC.EN = 0, wait RDY = 0 (the device gives up every command), zero all
    /// queue memory, re-create the admin queue and the I/O queues. Every command in flight is
    /// handed back (`handed_back`: the caller requeues it through blk), except the culprit and
    /// commands a reset already handed back once, which are returned in `failed`.
    ///
    /// `trigger` is the timed-out command whose second expiry asked for the reset. The culprit
    /// is, of every command already aborted once (the trigger included), the one posted first:
    /// when one command holds up the device (a backend answering one read late), those posted
    /// after it often wait behind it and reach their second expiry in the same scan, and the
    /// scan's order says nothing about which one is stuck.
    ///
    /// When the controller does not come back it is marked failed; then every command is
    /// returned failed if the disable worked (the device let go), and kept (never handed back)
    /// if even the disable failed.
    pub(crate) fn reset(&self, trigger: Option<(usize, u16)>) -> ResetOutcome {
        let _serial = self.reset_lock.lock();
        self.state.store(STATE_RESETTING, Ordering::Release);
        bump(&self.counters.resets);
        let mut a = self.admin.lock();
        let mut sqs: Vec<_> = self.io.iter().map(|q| q.sq.lock()).collect();
        let mut cqs: Vec<_> = self.io.iter().map(|q| q.cq.lock()).collect();
        let mut outcome = ResetOutcome::default();
        // No SQ doorbell can be rung now (we hold every SQ lock). One admin round trip before
        // the disable makes the controller act on the doorbells already rung: QEMU 7.2 fetches
        // SQ entries later, in its main loop, and entries it fetches while the disable drains
        // the backend are parked by the drain and completed after the queues were freed (QEMU
        // segfaulted in the held-read scenario). Harmless elsewhere; skipped when the
        // controller is already broken.
        let csts = self.csts();
        if !(csts.gone() || csts.fatal()) {
            a.buf.zero();
            let phys = a.buf.phys();
            if let Err(e) = self.admin_cmd(&mut a, Sqe::identify(0, cns::CONTROLLER, 0, phys)) {
                log::warn!("nvme: reset: admin round trip before the disable failed ({e})");
            }
        }
        if let Err(e) = self.disable() {
            log::error!("nvme: reset: disable failed ({e}); commands stay with the device");
            bump(&self.counters.resets_failed);
            self.state.store(STATE_FAILED, Ordering::Release);
            return outcome;
        }
        // The device has let go of everything: zero the rings (a late entry may have landed).
        for (sq, cq) in sqs.iter_mut().zip(cqs.iter_mut()) {
            sq.mem.buf().zero();
            sq.tail = 0;
            sq.head = 0;
            sq.unrung = 0;
            cq.mem.buf().zero();
            cq.head = 0;
            cq.phase = true;
        }
        let back = self
            .enable_admin(&mut a)
            .and_then(|()| self.set_number_of_queues(&mut a, self.config.requested_io_queues))
            .and_then(|granted| {
                if usize::from(granted) < self.io.len() {
                    Err(Error::Unsupported {
                        what: "I/O queues granted after reset",
                        value: granted.into(),
                    })
                } else {
                    Ok(())
                }
            })
            .and_then(|()| self.create_queues_on_device(&mut a));
        outcome.ok = back.is_ok();
        let culprit = trigger.and_then(|_| {
            let mut oldest: Option<(u64, usize, u16)> = None;
            for (hwq, sq) in sqs.iter().enumerate() {
                for (cid, s) in sq.slots.iter().enumerate() {
                    if s.outstanding() && s.flags.timeout_stage > 0 && oldest.is_none_or(|(at, _, _)| s.posted_ns < at)
                    {
                        oldest = Some((s.posted_ns, hwq, cid as u16));
                    }
                }
            }
            oldest.map(|(_, hwq, cid)| (hwq, cid)).or(trigger)
        });
        if let Err(e) = &back {
            log::error!("nvme: reset: controller did not come back ({e}); failing every command");
            bump(&self.counters.resets_failed);
        }
        // Nothing is re-posted here: a command handed back goes through the block layer again
        // (`Queue::requeue`, done by the caller once no lock is held), which gives it a new
        // generation and a fresh deadline, and the driver a fresh slot state (timeout stage 0).
        // Re-posting it here would keep the deadline it had before the reset, which may have
        // passed during the reset: it would be aborted at once and a second reset would fail
        // it and every other re-posted command.
        for (hwq, sq) in sqs.iter_mut().enumerate() {
            for cid in 0..sq.slots.len() {
                let slot = sq.slots[cid];
                if !slot.outstanding() {
                    continue;
                }
                let is_culprit = culprit == Some((hwq, cid as u16));
                let s = &mut sq.slots[cid];
                s.end();
                if is_culprit {
                    outcome.culprit = Some((hwq, cid as u16, slot.generation));
                }
                if !outcome.ok || is_culprit || slot.flags.reissued_by_reset {
                    outcome.failed.push((hwq, cid as u16, slot.generation));
                    bump(&self.counters.reset_failed);
                } else {
                    s.flags.handed_back = true;
                    outcome.handed_back.push((hwq, cid as u16, slot.generation));
                    bump(&self.counters.reset_reissued);
                }
            }
        }
        outcome.reissued = outcome.handed_back.len();
        self.state
            .store(if outcome.ok { STATE_LIVE } else { STATE_FAILED }, Ordering::Release);
        log::warn!(
            "nvme: controller reset {}: {} command(s) re-issued, {} failed",
            if outcome.ok { "done" } else { "FAILED" },
            outcome.reissued,
            outcome.failed.len()
        );
        drop(cqs);
        drop(sqs);
        outcome
    }

    /// The block layer refused to requeue a command a reset handed back (it had ended some
    /// other way): the next use of the slot is a new request, not a re-issue.
    pub(crate) fn forget_handed_back(&self, hwq: usize, slot: u16) {
        if let Some(q) = self.queue(hwq) {
            let mut sq = q.sq.lock();
            if let Some(s) = sq.slots.get_mut(usize::from(slot))
                && !s.outstanding()
            {
                s.flags.handed_back = false;
            }
        }
    }
}
