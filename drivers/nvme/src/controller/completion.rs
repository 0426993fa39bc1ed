//! Completions: draining a completion queue, validating every entry against the queue and its
//! outstanding commands, and re-posting commands that failed without DNR.

use core::sync::atomic::{Ordering, fence};

use crate::cmd::Cqe;
use crate::regs::CQE_SIZE;
use crate::status::{NvmeStatus, StatusKind};
use crate::{Delay, Dma, Mmio};
use devhal::DmaBuf;

use super::io::{advance_tail, write_cmd};
use super::queues::{next_index, ring_free};
use super::{Accepted, BogusCqe, CmdSlot, Controller, IoQueue, bump};

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
            // test when delivering).
            let mut out = [Accepted {
                slot: 0,
                generation: 0,
                status: NvmeStatus(0),
            }; BATCH];
            let mut accepted = 0;
            let mut n = 0;
            let more;
            {
                // Each entry is validated as it is read, under both locks, not copied
                // into a batch under the CQ lock and validated from it under the SQ lock. The SQ
                // lock first: the order `reset` takes them in.
                let mut guard = q.sq.lock();
                let sq = &mut *guard;
                let mut cq = q.cq.lock();
                let limit = BATCH.min(left as usize);
                let mut ring = false;
                while n < limit {
                    let Some(cqe) = read_io_cqe(&cq.mem, cq.head, cq.phase) else {
                        break;
                    };
                    n += 1;
                    cq.head = next_index(cq.head, q.entries);
                    if cq.head == 0 {
                        cq.phase = !cq.phase;
                    }
                    // The slot's record as `validate` found it, not indexed and
                    // bounds-checked again here.
                    match self.validate(q, &mut sq.slots, &cqe) {
                        Err(why) => self.count_bogus(q.qid, why),
                        Ok((index, slot)) => {
                            sq.head = u32::from(cqe.sq_head);
                            let status = NvmeStatus(cqe.status);
                            if !status.is_success() {
                                bump(&self.counters.errors);
                                // Not a command being aborted by a timeout, nor one the
                                // controller aborted: those end with their status.
                                let aborted =
                                    matches!(status.kind(), StatusKind::AbortRequested | StatusKind::AbortedSqDeleted);
                                if status.retryable()
                                    && !aborted
                                    && slot.timeout_stage == 0
                                    && slot.retries < self.config.max_retries
                                {
                                    slot.retries += 1;
                                    if ring_free(sq.tail, sq.head, q.entries) > 0 {
                                        // A fresh CID, so a late copy of the failed entry
                                        // cannot complete the retry.
                                        slot.cid = self.next_cid(slot.cid, index as u16);
                                        slot.cmd.set_cid(slot.cid);
                                        let cmd = slot.cmd;
                                        bump(&self.counters.error_retries);
                                        write_cmd(&sq.mem, sq.tail, &cmd);
                                        advance_tail(sq, q.entries);
                                        ring = true;
                                        continue;
                                    }
                                }
                            }
                            slot.outstanding = false;
                            out[accepted] = Accepted {
                                slot: index as u16,
                                generation: slot.generation,
                                status,
                            };
                            accepted += 1;
                        }
                    }
                }
                if n > 0 {
                    // Entries are read before the head doorbell gives their slots back.
                    fence(Ordering::SeqCst);
                    self.mmio.write32(q.cq_doorbell, cq.head);
                }
                // Re-check once after the doorbell: an entry posted meanwhile is not re-signalled.
                more = read_io_cqe(&cq.mem, cq.head, cq.phase).is_some();
                drop(cq);
                if ring {
                    self.ring_sq(q, sq);
                }
            }
            left -= n as u32;
            if accepted > 0 {
                // One count per batch, not one locked add per completion.
                self.counters.completions.fetch_add(accepted as u64, Ordering::Relaxed);
            }
            accepted_total += accepted;
            for a in &out[..accepted] {
                deliver(*a);
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

    /// Checks a CQE against the queue and its outstanding commands (`slots`, the SQ's command
    /// records); returns the slot index its CID names and the slot's record (so the caller
    /// neither decodes the CID nor indexes the records again).
    fn validate<'s>(
        &self,
        q: &IoQueue,
        slots: &'s mut [CmdSlot],
        cqe: &Cqe,
    ) -> Result<(usize, &'s mut CmdSlot), BogusCqe> {
        if cqe.sq_id != q.qid {
            return Err(BogusCqe::WrongSq {
                cq: q.qid,
                sq_id: cqe.sq_id,
            });
        }
        if u32::from(cqe.sq_head) >= q.entries {
            return Err(BogusCqe::BadSqHead {
                sq: q.qid,
                sq_head: cqe.sq_head,
                entries: q.entries,
            });
        }
        let index = self.slot_of(cqe.cid);
        match slots.get_mut(index) {
            Some(s) if s.outstanding && s.cid == cqe.cid => Ok((index, s)),
            _ => Err(BogusCqe::NotOutstanding {
                sq: q.qid,
                cid: cqe.cid,
            }),
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
    /// before it halts). A CQ whose lock is held is being drained: counts as news.
    pub(crate) fn cq_pending(&self, hwq: usize) -> bool {
        self.queue(hwq).is_some_and(|q| {
            q.cq.try_lock()
                .is_none_or(|cq| read_io_cqe(&cq.mem, cq.head, cq.phase).is_some())
        })
    }
}

/// [`read_cqe`] for an I/O queue: DW0 (command specific, unused by reads, writes, flushes and
/// Dataset Management) and DW1 (reserved) are not read, so `result` is 0 (two loads
/// fewer per completion).
#[inline(always)]
fn read_io_cqe(mem: &DmaBuf, head: u32, phase: bool) -> Option<Cqe> {
    read_cqe_words::<false>(mem, head, phase)
}

/// The CQE at `head` if its phase tag matches `phase`; DW0 and DW1 only `WITH_RESULT`.
#[inline(always)]
pub(super) fn read_cqe_words<const WITH_RESULT: bool>(mem: &DmaBuf, head: u32, phase: bool) -> Option<Cqe> {
    // One bounds check for the entry's four words.
    let entry = mem.word_run::<4>(head as usize * CQE_SIZE);
    let dw3 = entry.read(3);
    if (dw3 & (1 << 16) != 0) != phase {
        return None;
    }
    // Acquire: the rest of the entry is read only after its phase tag was seen.
    fence(Ordering::Acquire);
    let (dw0, dw1) = if WITH_RESULT {
        (entry.read(0), entry.read(1))
    } else {
        (0, 0)
    };
    Some(Cqe::from_dwords([dw0, dw1, entry.read(2), dw3]))
}
