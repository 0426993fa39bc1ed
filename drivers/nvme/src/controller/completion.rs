//! Completions: draining a completion queue, validating every entry against the queue and its
//! outstanding commands, and re-posting commands that failed without DNR.

use core::mem::MaybeUninit;
use core::sync::atomic::{Ordering, fence};

use crate::cmd::Cqe;
use crate::regs::CQE_SIZE;
use crate::status::{NvmeStatus, StatusKind};
use crate::{Delay, Dma, Mmio};
use devhal::RingView;

use super::io::write_cmd;
use super::queues::{next_index, ring_free};
use super::{Accepted, BogusCqe, CmdSlot, Controller, CqState, IoQueue, LIVE, SqState, bump};

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Drains hardware queue `hwq`'s CQ: at most `budget` entries, stopping at the first phase
    /// mismatch; rings the CQ head doorbell once; validates every entry; re-posts commands that
    /// failed without DNR (up to `max_retries`); hands each accepted completion to `deliver`
    /// after all locks are released. Returns (accepted, entries left when the budget ran out).
    pub(crate) fn drain(&self, hwq: usize, budget: u32, mut deliver: impl FnMut(Accepted)) -> (usize, bool) {
        let Some(q) = self.queue(hwq) else {
            return (0, false);
        };
        const BATCH: usize = 32;
        let mut accepted_total = 0;
        let mut left = budget;
        loop {
            // The accepted completions, packed: `out[..accepted]` (no per-entry `Option` to
            // test when delivering), the rest never read, so never initialised.
            let mut out = [MaybeUninit::<Accepted>::uninit(); BATCH];
            let mut accepted = 0;
            let limit = BATCH.min(left as usize);
            // Entries this pass may still take (one counter for the loop, not a count and its
            // limit).
            let mut room = limit;
            let more;
            {
                // Each entry is validated as it is read, under both locks, not copied
                // into a batch under the CQ lock and validated from it under the SQ lock. The SQ
                // lock first: the order `reset` takes them in.
                let mut guard = q.sq.lock();
                let SqState {
                    mem: sq_mem,
                    tail: sq_tail,
                    head: sq_head_at,
                    slots,
                    ..
                } = &mut *guard;
                let slots = &mut slots[..];
                let mut cq_guard = q.cq.lock();
                let CqState {
                    mem: cq_mem,
                    head: cq_head,
                    phase: cq_phase,
                } = &mut *cq_guard;
                let mut ring = false;
                // What the loop reads and advances, in locals: the acquire fence of every
                // entry would have them reloaded from the queue's state otherwise.
                let (entries, mask) = (q.entries, self.index_mask);
                let sq_base = u32::from(q.qid) << 16;
                let (mut head, mut phase) = (*cq_head, *cq_phase);
                let cq_ring = cq_mem.view();
                let mut sq_head = *sq_head_at;
                while room > 0 {
                    let Some((dw2, dw3)) = read_io_cqe(cq_ring, head, phase) else {
                        break;
                    };
                    room -= 1;
                    head += 1;
                    if head == entries {
                        // Once per pass over the ring: a branch, not a select every entry.
                        core::hint::cold_path();
                        head = 0;
                        phase = !phase;
                    }
                    // The slot's record as `validate` found it, not indexed and
                    // bounds-checked again here.
                    match validate(slots, sq_base, entries, mask, dw2, dw3) {
                        Err(()) => self.count_bogus(q.qid, bogus_why(q, dw2, dw3)),
                        Ok((index, slot)) => {
                            sq_head = dw2 & 0xFFFF;
                            let status = NvmeStatus::from_dw3(dw3);
                            if !status.is_success() {
                                bump(&self.counters.errors);
                                // Not a command being aborted by a timeout, nor one the
                                // controller aborted: those end with their status.
                                let aborted =
                                    matches!(status.kind(), StatusKind::AbortRequested | StatusKind::AbortedSqDeleted);
                                if status.retryable()
                                    && !aborted
                                    && slot.flags.timeout_stage == 0
                                    && slot.flags.retries < self.config.max_retries
                                {
                                    slot.flags.retries += 1;
                                    if ring_free(*sq_tail, sq_head, entries) > 0 {
                                        // A fresh CID, so a late copy of the failed entry
                                        // cannot complete the retry.
                                        let cid = self.next_cid(slot.cid(), index as u16);
                                        slot.set_live(cid);
                                        slot.cmd.set_cid(cid);
                                        bump(&self.counters.error_retries);
                                        write_cmd(sq_mem, *sq_tail, &slot.cmd);
                                        *sq_tail = next_index(*sq_tail, entries);
                                        ring = true;
                                        continue;
                                    }
                                }
                            }
                            slot.end();
                            // `accepted <= n < limit <= BATCH`: the mask never wraps, and costs
                            // less than an index check.
                            out[accepted % BATCH].write(Accepted {
                                slot: index as u16,
                                generation: slot.generation,
                                status,
                            });
                            accepted += 1;
                        }
                    }
                }
                *cq_head = head;
                *cq_phase = phase;
                *sq_head_at = sq_head;
                if room < limit {
                    // Entries are read before the head doorbell gives their slots back.
                    fence(Ordering::SeqCst);
                    self.mmio.write32(q.cq_doorbell, head);
                }
                // Re-check once after the doorbell: an entry posted meanwhile is not re-signalled.
                more = read_io_cqe(cq_ring, head, phase).is_some();
                drop(cq_guard);
                if ring {
                    self.ring_sq(q, &mut guard);
                }
            }
            left -= (limit - room) as u32;
            if accepted > 0 {
                // One count per batch, not one locked add per completion.
                self.counters.completions.fetch_add(accepted as u64, Ordering::Relaxed);
            }
            accepted_total += accepted;
            for a in &out[..accepted] {
                // SAFETY: the loop above wrote `out[..accepted]`, in order.
                deliver(unsafe { a.assume_init() });
            }
            if !more {
                return (accepted_total, false);
            }
            if left == 0 {
                bump(&self.counters.budget_exhausted);
                return (accepted_total, true);
            }
        }
    }

    /// Counts a refused CQE and logs it, rate limited (the first 16, then every 1024th).
    pub(super) fn count_bogus(&self, qid: u16, why: BogusCqe) {
        let n = bump(&self.counters.bogus_cqes);
        let within_budget = self
            .log_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
            .is_ok();
        if within_budget {
            log::warn!("nvme: queue {qid}: refused completion entry: {why:?} ({n} so far)");
        } else if n.is_multiple_of(1024) {
            log::warn!("nvme: {n} completion entries refused so far (latest on queue {qid}: {why:?})");
        }
    }

    /// Whether hardware queue `hwq`'s CQ holds an entry not yet reaped (a floor run's "news"
    /// before it halts, a poll's test before it drains). A CQ whose lock is held is being drained:
    /// counts as news.
    pub(crate) fn cq_pending(&self, hwq: usize) -> bool {
        self.queue(hwq).is_some_and(|q| {
            q.cq.try_lock()
                .is_none_or(|cq| read_io_cqe(cq.mem.view(), cq.head, cq.phase).is_some())
        })
    }
}

/// The CQE at `head` of an I/O queue as its DW2 and DW3, if its phase tag matches `phase`. DW0
/// (command specific, unused by reads, writes, flushes and Dataset Management) and DW1
/// (reserved) are not read.
#[inline(always)]
fn read_io_cqe(ring: RingView<'_, CQE_SIZE>, head: u32, phase: bool) -> Option<(u32, u32)> {
    // One index check for the entry's words.
    let entry = ring.entry(head);
    let dw3 = entry.read_u32(3);
    if (dw3 & (1 << 16) != 0) != phase {
        return None;
    }
    // Acquire: the rest of the entry is read only after its phase tag was seen.
    fence(Ordering::Acquire);
    Some((entry.read_u32(2), dw3))
}

/// Checks an I/O CQE (`dw2`, `dw3`) against its queue and the queue's outstanding commands
/// (`slots`, the SQ's command records): the SQ id is the queue's (`sq_base`: the id shifted
/// into DW2's upper half), the SQ head below `entries`, the CID names an outstanding slot
/// (`mask`: the CID's index bits) with this CID. Returns the slot index and the slot's
/// record (so the caller neither decodes the CID nor indexes the records again); why it was
/// refused is [`bogus_why`]'s to say, out of line.
#[inline(always)]
fn validate(
    slots: &mut [CmdSlot],
    sq_base: u32,
    entries: u32,
    mask: u16,
    dw2: u32,
    dw3: u32,
) -> Result<(usize, &mut CmdSlot), ()> {
    // One compare for SQID and SQHD: with the SQID right, the difference is SQHD; with it wrong,
    // at least 2^16, which no queue's entries exceed.
    if dw2.wrapping_sub(sq_base) >= entries {
        return Err(());
    }
    let cid = dw3 as u16;
    let index = usize::from(cid & mask);
    match slots.get_mut(index) {
        // Outstanding with this CID: one compare against the record's CID and its LIVE bit.
        Some(s) if s.live == u32::from(cid) | LIVE => Ok((index, s)),
        _ => Err(()),
    }
}

/// Why [`validate`] refused an entry (out of line: the hot path keeps only its compares).
#[cold]
#[inline(never)]
fn bogus_why(q: &IoQueue, dw2: u32, dw3: u32) -> BogusCqe {
    let cqe = Cqe::from_dwords([0, 0, dw2, dw3]);
    if cqe.sq_id != q.qid {
        BogusCqe::WrongSq {
            cq: q.qid,
            sq_id: cqe.sq_id,
        }
    } else if u32::from(cqe.sq_head) >= q.entries {
        BogusCqe::BadSqHead {
            sq: q.qid,
            sq_head: cqe.sq_head,
            entries: q.entries,
        }
    } else {
        BogusCqe::NotOutstanding {
            sq: q.qid,
            cid: cqe.cid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_compare_agrees_with_the_sq_id_and_sq_head_checks() {
        let ids = [0u16, 1, 2, 3, 255, 256, 0x7FFF, 0xFFFE, 0xFFFF];
        let heads = [0u16, 1, 2, 31, 32, 33, 128, 129, 0x7FFF, 0xFFFE, 0xFFFF];
        for qid in [1u16, 2, 3, 0xFFFF] {
            for entries in [2u32, 33, 129, 1024, 65535, 65536] {
                for &sq_id in &ids {
                    for &sq_head in &heads {
                        let dw2 = u32::from(sq_head) | u32::from(sq_id) << 16;
                        let mut slots = [CmdSlot::default(); 4];
                        slots[1].set_live(0x21);
                        let ok = validate(&mut slots, u32::from(qid) << 16, entries, 0x3, dw2, 0x21).is_ok();
                        assert_eq!(
                            ok,
                            sq_id == qid && u32::from(sq_head) < entries,
                            "qid {qid} entries {entries} sq_id {sq_id} sq_head {sq_head}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_cid_is_accepted_only_for_its_outstanding_slot() {
        let mut slots = [CmdSlot::default(); 4];
        slots[1].set_live(0x21);
        slots[2].set_live(0x42);
        slots[2].end();
        let check = |slots: &mut [CmdSlot], dw3: u32| validate(slots, 1 << 16, 8, 0x1F, 1 << 16, dw3).map(|(i, _)| i);
        assert_eq!(check(&mut slots, 0x21), Ok(1));
        // The phase and status bits above the CID do not matter.
        assert_eq!(check(&mut slots, 0xFFFE_0021 | 1 << 16), Ok(1));
        assert_eq!(check(&mut slots, 0x41), Err(()), "an earlier CID of the slot");
        assert_eq!(check(&mut slots, 0x42), Err(()), "not outstanding");
        assert_eq!(check(&mut slots, 0x23), Err(()), "a slot never posted");
        assert_eq!(check(&mut slots, 0x1F), Err(()), "beyond the slots");
        assert!(slots[1].outstanding() && slots[1].cid() == 0x21);
        assert!(!slots[2].outstanding() && slots[2].cid() == 0x42);
    }
}
