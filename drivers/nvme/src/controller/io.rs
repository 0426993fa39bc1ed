//! Submission: a command posted on an I/O submission queue under its lock (the block layer's
//! issue inside), the PRP list pages, and the tail doorbell, deferred over a burst.

use core::sync::atomic::{Ordering, fence};

use crate::cmd::IoCmd;
use crate::regs::SQE_SIZE;
use crate::{Delay, Dma, Error, Mmio};
use devhal::DmaRing;

use super::queues::next_index;
use super::{Controller, IoQueue, PostError, STATE_LIVE, STATE_RESETTING, SlotFlags, SqState};

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// PRP list memory of command slot `slot` on `hwq`: (slice, bus address).
    ///
    /// # Safety
    /// The caller holds the block-layer tag that `slot` stands for on `hwq`, so nobody else
    /// uses this list, and the command using it is not in flight.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn prp_list(&self, hwq: usize, slot: u16) -> (&mut [u64], u64) {
        match self.queue(hwq).and_then(|q| q.prp_lists.as_ref().map(|l| (q, l))) {
            Some((q, lists)) if u32::from(slot) < self.cids_per_sq - self.floor_slots => {
                let off = usize::from(slot) * q.list_stride;
                // SAFETY: the caller's promise; in bounds since the lists cover every slot
                // below the floor's.
                let slice = unsafe { lists.u64_slice(off, q.list_stride / 8) };
                (slice, lists.phys() + off as u64)
            }
            _ => (&mut [], 0),
        }
    }

    /// Posts `cmd` (as its builder made it: CID 0) for command slot `slot` on hardware queue `hwq`
    /// (the CID is set here).
    /// `issue(request)` runs under the SQ lock once the command is sure to be posted, and returns
    /// the block-layer generation and the issue time (the reset's order), so a completion can
    /// never arrive for a request the block layer has not yet marked issued; a post that fails
    /// gives `request` back with the error
    /// (moved by value, not through an `Option` the closure takes it from). Rings the
    /// doorbell unless `defer_doorbell`.
    pub(crate) fn post<R>(
        &self,
        hwq: usize,
        slot: u16,
        mut cmd: IoCmd,
        defer_doorbell: bool,
        request: R,
        issue: impl FnOnce(R) -> (u16, u64),
    ) -> Result<(), (PostError, R)> {
        let Some(q) = self.queue(hwq) else {
            return Err((
                PostError::Failed(Error::InvalidConfig {
                    field: "hwq",
                    value: hwq as u64,
                    accepted: "an existing I/O queue",
                }),
                request,
            ));
        };
        let index = usize::from(slot);
        let mut guard = q.sq.lock();
        let sq = &mut *guard;
        // Checked once, under the lock (not also before it): a reset holds every SQ lock while it
        // runs, so the state cannot change between this check and the post.
        let state = self.state.load(Ordering::Acquire);
        if state != STATE_LIVE {
            return Err((not_live(state), request));
        }
        // The slot's record, bounds-checked once for the whole post, not indexed and
        // checked at each use.
        let Some(record) = sq.slots.get_mut(index).filter(|r| !r.outstanding()) else {
            return Err((
                PostError::Failed(Error::InvalidConfig {
                    field: "command slot",
                    value: slot.into(),
                    accepted: "a free command slot",
                }),
                request,
            ));
        };
        let cid = self.next_cid(record.cid(), slot);
        // The builders make every command with CID 0.
        cmd.set_first_cid(cid);
        // Full when the tail would catch up with the head: the same test as `ring_free(..) == 0`
        // (one entry is always left empty; `drain` accepts only an SQ head below the queue size),
        // without computing the count.
        let tail = sq.tail;
        let next_tail = next_index(tail, q.entries);
        if next_tail == sq.head {
            return Err((PostError::Busy, request));
        }
        // The entry and the slot's copy of the command go out from registers before `issue`
        // (whose calls would make the compiler keep them on the stack). The device
        // reads the entry only once the tail passes it, below, after `issue`.
        write_cmd(&sq.mem, tail, &cmd);
        record.cmd = cmd;
        let (generation, posted_ns) = issue(request);
        // Only SQ lock holders write it: a plain increment.
        q.posted.store(q.posted.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        record.set_live(cid);
        record.generation = generation;
        record.flags = SlotFlags {
            reissued_by_reset: record.flags.handed_back,
            ..SlotFlags::default()
        };
        record.posted_ns = posted_ns;
        sq.tail = next_tail;
        // A deferred doorbell is rung anyway once `doorbell_batch` commands wait behind it, so
        // the device works on them while the rest of the burst is built (one
        // doorbell per 32-command burst would put device and CPU in lock-step).
        sq.unrung += 1;
        if !defer_doorbell || sq.unrung >= self.config.doorbell_batch {
            self.ring_sq(q, sq);
        }
        Ok(())
    }

    pub(super) fn ring_sq(&self, q: &IoQueue, sq: &mut SqState) {
        // Release: the entries are in memory before the doorbell store makes the device read them.
        fence(Ordering::Release);
        self.mmio.write32(q.sq_doorbell, sq.tail);
        sq.unrung = 0;
    }

    /// Rings hardware queue `hwq`'s SQ doorbell if commands were posted with it deferred.
    pub(crate) fn commit(&self, hwq: usize) {
        if let Some(q) = self.queue(hwq) {
            let mut sq = q.sq.lock();
            if sq.unrung > 0 {
                self.ring_sq(q, &mut sq);
            }
        }
    }
}

/// Writes I/O command `cmd` into entry `slot` of an SQ: one index check and eight 8-byte stores
/// of the words composed in registers.
#[inline(always)]
pub(super) fn write_cmd(mem: &DmaRing<SQE_SIZE>, slot: u32, cmd: &IoCmd) {
    mem.entry(slot).write_u64s(cmd.sqe_words());
}

/// Why a post found the controller not live (out of line: the hot path keeps one compare).
#[cold]
#[inline(never)]
fn not_live(state: u8) -> PostError {
    if state == STATE_RESETTING {
        PostError::Busy
    } else {
        PostError::Failed(Error::NotOperational)
    }
}
