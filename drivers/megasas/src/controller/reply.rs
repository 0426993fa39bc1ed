//! The reply queue: interrupt claim, reaping under the reaper gate, and validation of every
//! context and frame status the device wrote before anything completes.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::error::{BogusReason, Fault};
use crate::frame;
use crate::gate::GateOutcome;
use crate::regs;
use crate::status::{IoStatus, MfiStatus, SCSI_CHECK_CONDITION, SCSI_GOOD};
use crate::tags::{self, TagTable};
use crate::{Delay, Dma, Mmio};

use super::{Controller, Done, IrqMode, Polled, RING_CI, RING_ENTRIES, RING_PI, RING_SENTINEL, Reaped, SENSE_LEN};

/// Rounds of lock-drain-unlock-recheck one `reap` call makes.
const MAX_REAP_ROUNDS: u32 = 64;
/// Reply-queue faults logged one by one; after that they are only counted (the host logs a
/// summary per second), so a hostile device cannot flood the console.
const FAULT_LOG_FIRST: u64 = 16;
/// How many generations a polled command's reply-queue echo may lag behind its tag.
const POLLED_ECHO_WINDOW: u16 = 256;

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Reads status and sense of a completed frame. A completion with any status but MFI OK and
    /// SCSI GOOD may have left sense behind: the tag's sense buffer is cleared here, before the
    /// tag is free again, so the next command on it starts from a zeroed buffer (a stale response
    /// code never decodes as fresh sense) without a store per submission.
    pub(super) fn read_completion(&self, tag: u16, mfi: MfiStatus) -> Polled {
        let base = usize::from(tag) * self.frame_stride;
        let scsi = self.pool.read_u8(base + frame::OFF_SCSI_STATUS);
        let mut sense = [0u8; SENSE_LEN];
        let mut sense_len = 0;
        if mfi != MfiStatus::OK && scsi == SCSI_CHECK_CONDITION {
            // The device wrote how many sense bytes it stored; never read past our buffer.
            sense_len = usize::from(self.pool.read_u8(base + frame::OFF_SENSE_LEN)).min(SENSE_LEN);
            self.pool
                .read_bytes(self.sense_off + usize::from(tag) * SENSE_LEN, &mut sense[..sense_len]);
        }
        if mfi != MfiStatus::OK || scsi != SCSI_GOOD {
            self.clear_sense(tag);
        }
        Polled {
            mfi,
            scsi,
            sense,
            sense_len,
        }
    }

    /// INTx only: whether the (possibly shared) interrupt is ours; if so it is acknowledged by
    /// writing OSTS back to ODCR0, before the queue is drained (the doorbell is a counter the ack zeroes).
    pub fn intx_claim(&self) -> bool {
        let status = self.mmio.read32(regs::OSTS);
        if status & self.model.intx_pending_bits() == 0 {
            return false;
        }
        self.mmio.write32(regs::ODCR0, status);
        true
    }

    /// Interrupt entry point: acknowledges as `mode` requires and drains the reply queue.
    /// Returns `None` when an INTx interrupt was not ours.
    pub fn handle_interrupt(&self, mode: IrqMode, mut complete: impl FnMut(u16, IoStatus)) -> Option<Reaped> {
        self.handle_interrupt_with(mode, |d| complete(d.tag, d.status))
    }

    /// [`Self::handle_interrupt`] reporting each completion as a [`Done`].
    pub fn handle_interrupt_with(&self, mode: IrqMode, complete: impl FnMut(Done)) -> Option<Reaped> {
        // MSI/MSI-X: OSTS reads 0 there, so it says nothing about whether work arrived.
        if mode == IrqMode::Intx && !self.intx_claim() {
            return None;
        }
        Some(self.reap_with(complete))
    }

    /// Whether the reply ring holds entries not yet reaped (a memory read, no register access).
    pub fn replies_pending(&self) -> bool {
        // Acquire pairs with the device's producer store, made after the entries.
        let pi = self.ring.atomic_u32(RING_PI).load(Ordering::Acquire);
        pi != self.ci.load(Ordering::Relaxed) && pi < self.ring_entries
    }

    /// Whether the device's producer index differs from the consumer index (a memory read, no
    /// register access): false means a reap would find nothing to take. An index out of range
    /// counts as moved, so the reap records it as a fault.
    #[inline]
    pub fn reply_ring_moved(&self) -> bool {
        // Acquire pairs with the device's producer store, as in `drain`.
        self.ring.atomic_u32(RING_PI).load(Ordering::Acquire) != self.ci.load(Ordering::Relaxed)
    }

    /// Drains the reply queue: every context is validated (range, in flight, generation, frame
    /// status written) before it completes anything; a bad one is counted and logged as a
    /// controller fault and skipped. `complete(tag, status)` runs for each accepted completion,
    /// after the tag has been handed back (so it may resubmit on the same tag).
    pub fn reap(&self, mut complete: impl FnMut(u16, IoStatus)) -> Reaped {
        self.reap_with(|d| complete(d.tag, d.status))
    }

    /// [`Self::reap`] reporting each completion as a [`Done`] (with its cookie and whether an
    /// abort was pending). Also handles the replies of ABORT frames.
    pub fn reap_with(&self, complete: impl FnMut(Done)) -> Reaped {
        self.reap_budget(u32::MAX, complete)
    }

    /// [`Self::reap_with`] consuming at most `max_entries` reply entries (accepted or not), so
    /// an interrupt handler's work is bounded; `more_pending` says entries were left.
    pub fn reap_budget(&self, max_entries: u32, mut complete: impl FnMut(Done)) -> Reaped {
        let pi_word = self.ring.atomic_u32(RING_PI);
        // Nothing produced since the last consumed entry: nothing to take, and nothing a gate
        // holder needs to be told about (an empty poll does not take the gate, zero the
        // result or store the consumer index back). `ci` never passes `pi`, so a `ci` read while
        // another context drains can equal `pi` only when everything is consumed; a producer
        // index out of range still goes through `drain`, which records it as a fault.
        // Acquire pairs with the device's producer store, as in `drain`.
        if pi_word.load(Ordering::Acquire) == self.ci.load(Ordering::Relaxed) {
            return Reaped::default();
        }
        let mut out = Reaped::default();
        let remaining = core::cell::Cell::new(max_entries);
        let work_left = || {
            let pi = pi_word.load(Ordering::Acquire);
            pi != self.ci.load(Ordering::Relaxed) && pi < self.ring_entries
        };
        let outcome = {
            let out = &mut out;
            let complete = &mut complete;
            // Bounded so an interrupt handler cannot be held forever by a device that keeps
            // producing; `more_pending` tells the caller to come back.
            self.gate.run(
                MAX_REAP_ROUNDS,
                || self.drain(out, complete, &remaining),
                || remaining.get() > 0 && work_left(),
            )
        };
        out.contended = outcome == GateOutcome::Contended;
        out.more_pending = outcome == GateOutcome::MorePending
            || (outcome == GateOutcome::Idle && remaining.get() == 0 && work_left());
        out
    }

    fn record_fault(&self, out: &mut Reaped, fault: Fault) {
        out.faults += 1;
        out.first_fault.get_or_insert(fault);
        let n = self.faults.fetch_add(1, Ordering::Relaxed);
        // Rate limit: a hostile device must not flood the console. The count stays exact.
        if n < FAULT_LOG_FIRST {
            log::error!("megasas: controller fault: {fault}");
        } else if n == FAULT_LOG_FIRST {
            log::error!("megasas: controller fault: {fault}; further faults are counted, not logged one by one");
        }
    }

    /// Consumes entries from CI up to PI; the caller holds `gate`.
    pub(super) fn drain(&self, out: &mut Reaped, complete: &mut impl FnMut(Done), remaining: &core::cell::Cell<u32>) {
        let entries = self.ring_entries;
        let slots = self.ring_slots();
        let heads = self.frame_heads();
        let mut ci = self.ci.load(Ordering::Relaxed);
        // Bounded: each pass consumes at most one ring's worth; the outer loop re-reads PI.
        'passes: for _ in 0..2 {
            // Acquire pairs with the device's producer store, made after the entries and frames.
            let pi = self.ring.atomic_u32(RING_PI).load(Ordering::Acquire);
            if pi >= entries {
                self.record_fault(out, Fault::ProducerOutOfRange { producer: pi, entries });
                break;
            }
            if pi == ci {
                break;
            }
            while ci != pi {
                if remaining.get() == 0 {
                    break 'passes;
                }
                remaining.set(remaining.get() - 1);
                // `ci < entries`, the slice's length.
                let slot = &slots[ci as usize];
                let ctx = slot.load(Ordering::Relaxed);
                slot.store(RING_SENTINEL, Ordering::Relaxed);
                // The one call of `complete`: inlined here, the common reply passes its `Done`
                // in registers rather than through a call with it in memory.
                match self.accept(ctx, heads, out) {
                    Ok(Some(done)) => complete(done),
                    Ok(None) => {}
                    Err(reason) => self.record_fault(
                        out,
                        Fault::BogusContext {
                            context: ctx,
                            slot: ci,
                            reason,
                        },
                    ),
                }
                ci = if ci + 1 == entries { 0 } else { ci + 1 };
            }
        }
        self.ci.store(ci, Ordering::Relaxed);
        // The device may read CI (QEMU does not compare it, real firmware may).
        self.ring.atomic_u32(RING_CI).store(ci, Ordering::Release);
    }

    /// The first word of every tag's frame, bounds-checked once per drain (see [`FrameHeads`]).
    fn frame_heads(&self) -> FrameHeads<'_> {
        let step = self.frame_stride / 4;
        FrameHeads {
            words: self.pool.atomic_u32s(0, usize::from(self.ntags) * step),
            step,
        }
    }

    /// The reply ring's entries as one slice, bounds-checked once per drain instead of once per
    /// entry.
    fn ring_slots(&self) -> &[AtomicU32] {
        self.ring.atomic_u32s(RING_ENTRIES, self.ring_entries as usize)
    }

    /// Validates one context and hands its command back: the completion to report, if any (a
    /// polled echo reports none).
    #[inline(always)]
    fn accept(&self, ctx: u32, heads: FrameHeads<'_>, out: &mut Reaped) -> Result<Option<Done>, BogusReason> {
        let (tag, polled, generation) = tags::decode_context(ctx);
        // The tag's record, bounds-checked once for the whole reply. The context's
        // tag field is 15 bits, so it fits a u16.
        let Some(entry) = self.tags.entry(tag as u16) else {
            return Err(BogusReason::TagOutOfRange { tag, tags: self.ntags });
        };
        let tag = tag as u16;
        if polled {
            // QEMU posts polled commands too (it ignores DONT_POST); their poller owns them and
            // the echo is dropped. It must name one of the tag's recent generations (several
            // polled commands may finish before the reaper runs, and the tag may be FREE again);
            // anything else is invented and counted. The current generation is an echo only if
            // its command is polled or done; an older one whatever the tag does now: the tag may
            // already be claimed again (the next polled command's frame being built, an ABORT
            // frame), and an echo completes nothing.
            let (state, current) = entry.load();
            let behind = current.wrapping_sub(generation);
            let plausible = if behind == 0 {
                matches!(state, tags::POLLED | tags::FREE | tags::QUARANTINED)
            } else {
                behind < POLLED_ECHO_WINDOW
            };
            if !plausible {
                return Err(BogusReason::StaleGeneration {
                    tag,
                    expected: current,
                    found: generation,
                });
            }
            out.polled_echoes += 1;
            return Ok(None);
        }
        // The frame's first word: byte 2 the MFI status, byte 3 the SCSI status. Acquire pairs
        // with the device's store of the status byte, after sense and data. `tag` has a record,
        // so it is below the tag count and its frame's word is there (were it not, it would read
        // as still pending: refused).
        let status_word = || {
            heads
                .word(tag)
                .map_or(u32::from(MfiStatus::PENDING.0) << 16, |w| w.load(Ordering::Acquire))
        };
        let (state, current) = entry.load();
        if state == tags::ABORT_FRAME {
            if current != generation {
                return Err(BogusReason::StaleGeneration {
                    tag,
                    expected: current,
                    found: generation,
                });
            }
            let mfi = MfiStatus((status_word() >> 16) as u8);
            if mfi == MfiStatus::PENDING {
                return Err(BogusReason::StatusPending { tag });
            }
            return Ok(self.abort_replied(tag, generation, mfi, out));
        }
        // The word read above (Acquire) is the one `check` would read again.
        TagTable::check_loaded(tag, (state, current), generation)?;
        let word = status_word();
        // MFI OK and SCSI GOOD, the common reply, read nothing more of the frame. Any other
        // status goes through `read_completion` (which also clears what sense it may have left);
        // `IoError::classify` is `None` for MFI OK whatever the SCSI status and sense.
        let ok = word >> 16 == 0;
        let status = if ok {
            IoStatus::Success
        } else {
            let mfi = MfiStatus((word >> 16) as u8);
            if mfi == MfiStatus::PENDING {
                return Err(BogusReason::StatusPending { tag });
            }
            match self.read_completion(tag, mfi).error() {
                None => IoStatus::Success,
                Some(e) => {
                    log::warn!("megasas: tag {tag}: {e}");
                    IoStatus::Failed(e)
                }
            }
        };
        // The cookie cannot change before the tag is FREE again, which `complete` below does.
        let cookie = entry.cookie();
        let accepted = entry.complete(tag, generation)?;
        let aborted = accepted == tags::Accepted::Aborting;
        if aborted {
            // The device gave the command up (or finished it) while an abort was pending.
            self.aborts_confirmed.fetch_add(1, Ordering::Relaxed);
        }
        out.completed += 1;
        Ok(Some(Done {
            tag,
            cookie,
            status,
            aborted,
        }))
    }
}

/// The first word of each tag's frame (command and SCSI status bytes), for the reaper: the
/// frames' words as one slice, bounds-checked when it was made, so a tag's word costs one
/// comparison.
#[derive(Clone, Copy)]
struct FrameHeads<'a> {
    /// The frame area's words.
    words: &'a [AtomicU32],
    /// Words from one frame to the next.
    step: usize,
}

impl<'a> FrameHeads<'a> {
    /// The first word of `tag`'s frame; `None` for a tag out of range.
    #[inline(always)]
    fn word(self, tag: u16) -> Option<&'a AtomicU32> {
        self.words.get(usize::from(tag) * self.step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tag's head is the word `tag * step` words from tag 0's; none past the frame area.
    #[test]
    fn frame_heads_step_by_the_stride_and_stop_at_the_tag_count() {
        let words: [AtomicU32; 9] = core::array::from_fn(|i| AtomicU32::new(i as u32));
        let heads = FrameHeads { words: &words, step: 3 };
        let got: [Option<u32>; 4] = core::array::from_fn(|t| heads.word(t as u16).map(|w| w.load(Ordering::Relaxed)));
        assert_eq!(got, [Some(0), Some(3), Some(6), None]);
    }
}
