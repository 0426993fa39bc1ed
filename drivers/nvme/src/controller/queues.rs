//! I/O queue pairs: their creation (sizes, doorbells, rings and PRP list pages near the CPU
//! that submits), the command slots per queue, the CIDs that name them and the ring arithmetic.

use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use spin::Mutex;

use crate::cmd::Sqe;
use crate::plan::QueuePlan;
use crate::prp;
use crate::regs::{CQE_SIZE, PAGE_SIZE, SQE_SIZE};
use crate::{Delay, Dma, Error, Mmio};
use devhal::{DmaBuf, DmaRing};

use super::{Admin, CmdSlot, Controller, CqState, IoQueue, SqState};

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Creates one I/O queue pair per hardware queue of `plan` (CQ `q` on the plan's vector,
    /// IEN = 0 for polled plans, then SQ `q`), with `nr_namespaces × depth` command slots each.
    /// Program and enable MSI-X before calling this.
    pub fn create_io_queues(&mut self, plan: &QueuePlan, nr_namespaces: usize) -> Result<(), Error> {
        if !self.io.is_empty() || self.queues_created.load(Ordering::Relaxed) {
            return Err(Error::InvalidConfig {
                field: "create_io_queues",
                value: self.io.len() as u64,
                accepted: "called once",
            });
        }
        let n = plan.nr_io_queues();
        if n == 0 || n > usize::from(self.max_io_queues) {
            return Err(Error::InvalidConfig {
                field: "plan I/O queues",
                value: n as u64,
                accepted: "1..=granted queues",
            });
        }
        if nr_namespaces == 0 {
            return Err(Error::NoNamespaces);
        }
        // SQ entries = every CID outstanding at once plus the one slot a full ring leaves empty;
        // CQ the same, so a CQ can never overflow.
        let max_entries = self.cap.max_queue_entries().min(65536);
        // The floor's slots take at most half of what the device allows.
        let floor_slots = self.config.floor_slots.min((max_entries - 1) / 2);
        let depth = self
            .config
            .queue_depth
            .min((max_entries - 1 - floor_slots) / nr_namespaces as u32)
            .min((65535 - floor_slots) / nr_namespaces as u32);
        if depth == 0 {
            return Err(Error::InvalidConfig {
                field: "namespaces per controller",
                value: nr_namespaces as u64,
                accepted: "at most CAP.MQES",
            });
        }
        let blk_cids = depth * nr_namespaces as u32;
        let cids = blk_cids + floor_slots;
        let entries = cids + 1;
        // Dataset Management's range list lives in the slot's list page: at least one page
        // when the controller has the command.
        let list_pages = prp::list_pages_needed(self.max_transfer).max(usize::from(self.info.dataset_management));
        let list_stride = list_pages * PAGE_SIZE;
        let mut queues = Vec::with_capacity(n);
        for hwq in 0..n {
            let qid = (hwq + 1) as u16;
            // The queue's rings and PRP lists go near the first CPU that submits to it.
            let owner = (0..plan.ncpus()).find(|&cpu| plan.hwq_of_cpu(cpu) == Some(hwq));
            let bad_db = Error::Unsupported {
                what: "doorbell offset beyond 32 bits",
                value: qid.into(),
            };
            let sq_doorbell = self.cap.doorbell(qid, false).ok_or(bad_db.clone())?;
            let cq_doorbell = self.cap.doorbell(qid, true).ok_or(bad_db)?;
            let prp_lists = if list_stride == 0 {
                None
            } else {
                Some(DmaBuf::alloc_for_cpu(
                    &self.dma,
                    list_stride * blk_cids as usize,
                    PAGE_SIZE,
                    owner,
                )?)
            };
            let sq_mem = DmaBuf::alloc_for_cpu(&self.dma, entries as usize * SQE_SIZE, PAGE_SIZE, owner)?;
            let cq_mem = DmaBuf::alloc_for_cpu(&self.dma, entries as usize * CQE_SIZE, PAGE_SIZE, owner)?;
            let (sq_phys, cq_phys) = (sq_mem.phys(), cq_mem.phys());
            let bad_ring = |_| Error::InvalidConfig {
                field: "queue ring",
                value: entries.into(),
                accepted: "entries the ring's page-aligned buffer holds",
            };
            let sq_mem = DmaRing::new(sq_mem, entries).map_err(bad_ring)?;
            let cq_mem = DmaRing::new(cq_mem, entries).map_err(bad_ring)?;
            queues.push(IoQueue {
                qid,
                sq_phys,
                cq_phys,
                vector: plan.vector_of_hwq(hwq).unwrap_or(0),
                ien: !plan.is_polled(hwq),
                entries,
                sq_doorbell,
                cq_doorbell,
                sq: Mutex::new(SqState {
                    mem: sq_mem,
                    tail: 0,
                    head: 0,
                    unrung: 0,
                    slots: vec![CmdSlot::default(); cids as usize],
                }),
                cq: Mutex::new(CqState {
                    mem: cq_mem,
                    head: 0,
                    phase: true,
                }),
                posted: AtomicU64::new(0),
                prp_lists,
                list_stride,
            });
        }
        self.io = queues;
        self.cids_per_sq = cids;
        self.floor_slots = floor_slots;
        // One bit more than the largest index needs, so index `cids` is always out of range.
        let index_bits = (32 - cids.leading_zeros()).min(16);
        self.index_mask = ((1u32 << index_bits) - 1) as u16;
        self.queue_depth = depth;
        let mut a = self.admin.lock();
        self.create_queues_on_device(&mut a)?;
        self.queues_created.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Creates every I/O CQ and SQ on the device. Takes no queue lock (the reset holds them).
    pub(super) fn create_queues_on_device(&self, a: &mut Admin) -> Result<(), Error> {
        for q in &self.io {
            let iv = if q.ien { q.vector } else { 0 };
            self.admin_cmd(a, Sqe::create_cq(0, q.qid, q.entries, q.cq_phys, iv, q.ien))?;
            self.admin_cmd(a, Sqe::create_sq(0, q.qid, q.entries, q.sq_phys, q.qid))?;
        }
        Ok(())
    }

    pub(super) fn queue(&self, hwq: usize) -> Option<&IoQueue> {
        self.io.get(hwq)
    }

    /// The interrupt vector of hardware queue `hwq`.
    pub fn vector_of(&self, hwq: usize) -> Option<u16> {
        self.queue(hwq).filter(|q| q.ien).map(|q| q.vector)
    }

    /// Command slots per I/O submission queue (the floor's included).
    pub fn cids_per_queue(&self) -> u32 {
        self.cids_per_sq
    }

    /// Slots per I/O queue kept for the floor: the last `floor_slots()` of `cids_per_queue()`.
    pub fn floor_slots(&self) -> u32 {
        self.floor_slots
    }

    /// The CID for the next use of `slot`, whose previous CID was `previous`: the sequence
    /// number above the index bits plus one (wrapping within its bits), then the slot index. One
    /// mask and one add (not two shifts by the field width and a test of it): the
    /// sequence's unit is `index_mask + 1`, 0 when the index takes all 16 bits.
    pub(super) fn next_cid(&self, previous: u16, slot: u16) -> u16 {
        next_cid(self.index_mask, previous, slot)
    }
}

/// [`Controller::next_cid`] for index bits `mask`.
#[inline]
fn next_cid(mask: u16, previous: u16, slot: u16) -> u16 {
    (previous & !mask).wrapping_add(mask.wrapping_add(1)) | slot
}

/// The ring index after `index` (below `entries`): a compare, not a division.
#[inline]
pub(super) fn next_index(index: u32, entries: u32) -> u32 {
    if index + 1 == entries { 0 } else { index + 1 }
}

/// Free entries of a ring of `entries` (one always left empty) from producer `tail` and
/// consumer `head`, both below `entries`: a compare, not a division.
#[inline]
pub(super) fn ring_free(tail: u32, head: u32, entries: u32) -> u32 {
    let used = if tail >= head {
        tail - head
    } else {
        tail + entries - head
    };
    entries - 1 - used
}

#[cfg(test)]
mod tests {
    use super::{next_cid, next_index, ring_free};

    #[test]
    fn next_cid_bumps_the_sequence_above_the_index_and_wraps_within_its_bits() {
        for bits in 1u32..=16 {
            let mask = ((1u32 << bits) - 1) as u16;
            for slot in [0u16, 1, mask / 2, mask] {
                for seq in [0u32, 1, 2, (1 << (16 - bits)) - 1] {
                    let previous = if bits == 16 { slot } else { (seq << bits) as u16 | slot };
                    // The shift form it replaced.
                    let expected = if bits >= 16 {
                        slot
                    } else {
                        let s = ((u32::from(previous) >> bits) + 1) & ((1 << (16 - bits)) - 1);
                        (s << bits) as u16 | slot
                    };
                    assert_eq!(next_cid(mask, previous, slot), expected, "{bits} {slot} {seq}");
                    assert_eq!(next_cid(mask, previous, slot) & mask, slot);
                }
            }
        }
        // 5 index bits: sequence 2047 wraps to 0.
        assert_eq!(next_cid(0x1F, 0xFFE3, 3), 3);
        assert_eq!(next_cid(0x1F, 0x0003, 3), 0x0023);
    }

    #[test]
    fn ring_free_is_the_modular_count() {
        for entries in [2u32, 5, 33, 1024] {
            for tail in 0..entries {
                for head in 0..entries {
                    let used = (tail + entries - head) % entries;
                    assert_eq!(
                        ring_free(tail, head, entries),
                        entries - 1 - used,
                        "{tail} {head} {entries}"
                    );
                    // `post`'s full test.
                    assert_eq!(
                        next_index(tail, entries) == head,
                        ring_free(tail, head, entries) == 0,
                        "{tail} {head} {entries}"
                    );
                }
            }
        }
        assert_eq!(ring_free(0, 0, 33), 32, "an empty ring leaves one entry unused");
        assert_eq!(ring_free(31, 0, 33), 1);
        assert_eq!(ring_free(4, 5, 33), 0, "full: tail just behind head");
    }
}
