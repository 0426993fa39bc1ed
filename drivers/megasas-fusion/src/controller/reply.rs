//! The reply queues: walking a queue's descriptors, validating each SMID against its slot,
//! decoding what the firmware wrote into the frame, and the host index writes; INTx.

use core::sync::atomic::{Ordering, fence};

use crate::slot::SmidSlot;

use crate::Mmio64;
use devhal::Delay;
use megasas::{IoError, IoErrorKind, MfiStatus};

use crate::regs::{self, FwState, FwStatus};

use super::io::CTX_SEQ_NUM;
use super::mapsync::MAP_SYNC_SLOT;
use super::{
    Completion, Controller, F_DATA_LEN, F_EX_STATUS, F_FUNCTION, F_RAID_CTX, FRAME_SIZE, FUNC_SCSI_IO, IoOutcome,
    Mistake, PAIR_IN_FLIGHT, PAIR_PEER_ANSWERED, PAIR_PRIMARY_ANSWERED, SENSE_SIZE, SmidState, read_reg,
};

/// Reply descriptor value of an unused slot.
const UNUSED_REPLY: u64 = u64::MAX;
/// RAID-context status: the FastPath request's configuration sequence number is stale.
const MFI_STAT_CONFIG_SEQ_MISMATCH: u8 = 0x67;

/// Result of an INTx interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntxResult {
    /// Neither status bit set: another device's interrupt.
    NotOurs,
    /// Replies reaped (count).
    Handled(usize),
    /// The firmware is in FAULT: start a reset.
    Fault(u32),
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    /// Walks reply queue `queue` (the handler of MSI-X vector `queue`), calling `sink` for each
    /// finished I/O. Returns the number of replies consumed. Returns 0 without touching
    /// anything while a reset runs.
    ///
    /// Generic over the sink, so the block binding's completion handler is inlined into the
    /// walk (no `dyn` call and no `Completion` built in memory per reply).
    pub fn reap<F: FnMut(Completion) + ?Sized>(&self, queue: u16, sink: &mut F) -> usize {
        let Some(_g) = self.gate.try_enter(usize::from(queue)) else {
            return 0;
        };
        if usize::from(queue) >= self.queues.len() {
            return 0;
        }
        self.reap_inner(queue, sink)
    }

    pub(super) fn reap_inner<F: FnMut(Completion) + ?Sized>(&self, queue: u16, sink: &mut F) -> usize {
        let depth = self.limits.reply_depth;
        let mut q = self.queues[usize::from(queue)].lock();
        let (ring, base) = self.mem.replies.ring(usize::from(queue));
        // The queue's descriptors, bounds- and alignment-checked once per walk: a descriptor
        // then costs only its index check.
        let descs = ring.atomic_u64s(base, depth as usize);
        let batch = (u32::from(self.limits.max_fw_cmds) / 4).max(1);
        let mut consumed = 0u32;
        let mut unreported = 0u32;
        // The index in a register while the walk runs; stored back before each host index write.
        let mut idx = q.last_idx;
        // Bounded: at most one lap per call, so a device that keeps posting cannot hold us.
        while consumed < depth {
            let slot = &descs[idx as usize];
            // One 8-byte load: the device writes a descriptor whole.
            let d = u64::from_le(slot.load(Ordering::Relaxed));
            if d & 0x0F == 0x0F || d as u32 == u32::MAX || (d >> 32) as u32 == u32::MAX {
                break;
            }
            // Pairs with the device's write of the frame status before the reply descriptor.
            fence(Ordering::Acquire);
            let smid = ((d >> 16) & 0xFFFF) as u16;
            if !self.mistake(Mistake::SlotsNotRestored) {
                slot.store(UNUSED_REPLY.to_le(), Ordering::Relaxed);
            }
            // Wraps at depth without a division.
            idx = if idx + 1 == depth { 0 } else { idx + 1 };
            if self.mistake(Mistake::HostIndexNoWrap) && idx == 0 {
                q.wrapped = true;
            }
            consumed += 1;
            unreported += 1;
            self.dispatch(smid, sink);
            if unreported >= batch {
                q.last_idx = idx;
                self.write_host_index(queue, idx, q.wrapped);
                unreported = 0;
            }
        }
        q.last_idx = idx;
        if consumed == depth {
            self.stats.walk_bound_hits.fetch_add(1, Ordering::Relaxed);
        }
        if unreported > 0 {
            self.write_host_index(queue, idx, q.wrapped);
        }
        consumed as usize
    }

    fn write_host_index(&self, queue: u16, idx: u32, wrapped: bool) {
        if self.mistake(Mistake::NoHostIndexWrite) {
            return;
        }
        // The all-ones stores must reach memory before the device may reuse the slots.
        fence(Ordering::Release);
        let mut idx = idx;
        if self.mistake(Mistake::HostIndexNoWrap) && wrapped {
            idx += self.limits.reply_depth;
        }
        if self.mistake(Mistake::HostIndexAhead) {
            idx = (idx + 1) % self.limits.reply_depth;
        }
        let q = if self.mistake(Mistake::HostIndexWrongQueue) {
            queue + 1
        } else {
            queue
        };
        if self.limits.combined && !self.mistake(Mistake::HostIndexWrongRegister) {
            let reg = regs::SUPPLEMENTARY_HOST_INDEX + 0x10 * u32::from(q >> 3);
            self.mmio.write32(reg, (u32::from(q & 7) << 24) | idx);
        } else {
            self.mmio.write32(regs::REPLY_HOST_INDEX, (u32::from(q) << 24) | idx);
        }
    }

    #[inline(always)]
    fn dispatch<F: FnMut(Completion) + ?Sized>(&self, smid: u16, sink: &mut F) {
        let io_tags = self.limits.io_tags;
        // One call of the sink, whichever way the completion comes, so it stays inlined here.
        let c = if smid == 0 || smid > self.limits.max_fw_cmds {
            match self.beyond_pool(smid) {
                Some(c) => c,
                None => return,
            }
        } else if smid > io_tags {
            let k = usize::from(smid - io_tags - 1);
            if !self.dcmd_reply_pending[k].swap(false, Ordering::AcqRel) {
                self.bogus(smid, "DCMD SMID not in flight");
            } else if k == MAP_SYNC_SLOT {
                self.map_sync_replied();
            } else if k == super::jbodmap::JBOD_SYNC_SLOT {
                self.jbod_sync_replied();
            }
            return;
        } else {
            match self.io_reply(smid) {
                Some(c) => c,
                None => return,
            }
        };
        sink(c);
    }

    /// The reply of I/O SMID `smid`: its completion, or None (bogus, or the first half of a
    /// RAID-1 write pair).
    #[inline(always)]
    fn io_reply(&self, smid: u16) -> Option<Completion> {
        let state = &self.smids[usize::from(smid)];
        let slot = &state.slot;
        let Some(word) = slot.in_flight() else {
            self.bogus(smid, "not in flight");
            return None;
        };
        if state.pair.load(Ordering::Relaxed) != 0 {
            return self.pair_half_answered(smid, PAIR_PRIMARY_ANSWERED);
        }
        let (outcome, bytes_done) = self.outcome_of(smid, state);
        let c = Completion {
            tag: u32::from(smid - 1),
            generation: SmidSlot::generation(word),
            cookie: state.cookie.load(Ordering::Relaxed),
            target: state.target.load(Ordering::Relaxed),
            outcome,
            bytes_done,
        };
        // A RAID-1 FastPath read no longer counts on its arm; before the tag is released, so
        // its next use starts uncounted.
        if state.mirror_pd.load(Ordering::Relaxed) != 0 {
            self.mirror_read_done(state);
        }
        // Balanced mode: the request no longer counts on its device.
        if self.limits.high_iops_queues != 0 {
            self.busy_done(state);
        }
        if self.peer_smids {
            self.off_firmware(state);
        }
        // Release the tag before handing the completion on, so the sink may reuse it at once.
        if !slot.finish(word) {
            self.bogus(smid, "raced");
            return None;
        }
        Some(c)
    }

    /// A reply naming a SMID above the pool of I/O and DCMD SMIDs: the peer half of a RAID-1
    /// FastPath write (SMID = its request's + max_fw_cmds) on a controller with peer SMIDs;
    /// anything else is bogus.
    #[cold]
    #[inline(never)]
    fn beyond_pool(&self, smid: u16) -> Option<Completion> {
        let m = self.limits.max_fw_cmds;
        match smid.checked_sub(m) {
            Some(primary) if self.peer_smids && smid > m && primary <= self.limits.io_tags => {
                self.pair_half_answered(primary, PAIR_PEER_ANSWERED)
            }
            _ => {
                self.bogus(smid, "out of range");
                None
            }
        }
    }

    /// One half (`half`: [`PAIR_PRIMARY_ANSWERED`] or [`PAIR_PEER_ANSWERED`]) of the RAID-1
    /// FastPath write pair on I/O SMID `primary` answered. The first half waits; the second
    /// completes the request, with the first error of the two (the data arm's, then the
    /// mirror's; Linux's `megasas_complete_r1_command` reports the one that failed), read
    /// from each half's frame and sense slot, which stay the pair's until it completes. A half
    /// of no pair in flight, or one answering twice, is bogus.
    #[cold]
    #[inline(never)]
    fn pair_half_answered(&self, primary: u16, half: u8) -> Option<Completion> {
        let peer = primary + self.limits.max_fw_cmds;
        let named = if half == PAIR_PEER_ANSWERED { peer } else { primary };
        let state = &self.smids[usize::from(primary)];
        let Some(word) = state.slot.in_flight() else {
            self.bogus(named, "no RAID-1 write pair in flight");
            return None;
        };
        let before = state.pair.fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
            (p & PAIR_IN_FLIGHT != 0 && p & half == 0).then_some(p | half)
        });
        let Ok(before) = before else {
            self.bogus(named, "RAID-1 write half not in flight");
            return None;
        };
        let both = PAIR_PRIMARY_ANSWERED | PAIR_PEER_ANSWERED;
        if (before | half) & both != both {
            return None;
        }
        let (mut outcome, bytes_done) = self.outcome_of(primary, state);
        if outcome == IoOutcome::Ok {
            outcome = self.outcome_of(peer, state).0;
        }
        state.pair.store(0, Ordering::Relaxed);
        if self.limits.high_iops_queues != 0 {
            self.busy_done(state);
        }
        self.off_firmware(state);
        if !state.slot.finish(word) {
            self.bogus(named, "raced");
            return None;
        }
        Some(Completion {
            tag: u32::from(primary - 1),
            generation: SmidSlot::generation(word),
            cookie: state.cookie.load(Ordering::Relaxed),
            target: state.target.load(Ordering::Relaxed),
            outcome,
            bytes_done,
        })
    }

    /// What the firmware wrote into the frame of `smid` (the request `state` describes, or its
    /// RAID-1 peer half): the outcome and the bytes moved.
    #[inline(always)]
    fn outcome_of(&self, smid: u16, state: &SmidState) -> (IoOutcome, u32) {
        let fo = FRAME_SIZE * usize::from(smid);
        // DataLength (0x1C) up to the RAID context's status word (0x74): one bounds check.
        let words = self
            .mem
            .frames
            .word_run::<{ (F_EX_STATUS - 2 - F_DATA_LEN) / 4 + 1 }>(fo + F_DATA_LEN);
        // ex_status (0x76) and status (0x77) share the RAID context's aligned word at 0x74: one
        // load for both.
        let status_word = words.read((F_EX_STATUS - 2 - F_DATA_LEN) / 4);
        let ex_status = (status_word >> 16) as u8;
        let status = (status_word >> 24) as u8;
        let bytes_done = words.read(0);
        // 0x2D with SCSI status GOOD is a completion with a residual: DataLength says how much
        // moved (Linux `map_cmd_status`). A read or write that moved less than asked
        // is not a success here (Linux's midlayer would retry the rest; blk has no partial
        // completion), so it fails rather than hand back a half-filled buffer.
        // Status 0 is tested alone first (two arms with the same value): the common case pays
        // no residual test.
        #[allow(clippy::if_same_then_else)]
        let outcome = if status == 0 {
            IoOutcome::Ok
        } else if status == 0x2D && ex_status == 0 && bytes_done >= state.required.load(Ordering::Relaxed) {
            IoOutcome::Ok
        } else if status == MFI_STAT_CONFIG_SEQ_MISMATCH
            && let Some(stale) = self.stale_route(fo, state.target.load(Ordering::Relaxed))
        {
            stale
        } else if status == 0x2D && ex_status == 0 {
            IoOutcome::Failed(IoError {
                kind: IoErrorKind::Other,
                mfi_status: MfiStatus(status),
                scsi_status: ex_status,
                sense: None,
            })
        } else {
            let mut sense = [0u8; SENSE_SIZE];
            self.mem
                .sense
                .read_bytes(SENSE_SIZE * (usize::from(smid) - 1), &mut sense);
            match IoError::classify(MfiStatus(status), ex_status, &sense) {
                Some(e) => IoOutcome::Failed(e),
                None => IoOutcome::Ok,
            }
        };
        (outcome, bytes_done)
    }

    /// Status 0x67 on the request in the frame at `fo` (LD `target`): a FastPath request routed
    /// with a RAID map, or a system-PD request by a JBOD map, that the firmware no longer has.
    /// That map goes off (unless a newer one is in use already) until its sync brings the new
    /// one, and the request may be issued again. None: neither kind of request.
    #[cold]
    #[inline(never)]
    fn stale_route(&self, fo: usize, target: u8) -> Option<IoOutcome> {
        let f = &self.mem.frames;
        let seq = f.read_u16(fo + F_RAID_CTX + CTX_SEQ_NUM);
        if self.was_ld_fastpath(fo) {
            self.stale_map_refused(target, seq);
            self.stats.stale_map_refusals.fetch_add(1, Ordering::Relaxed);
        } else if self.was_jbod_by_map(fo) {
            let named = f.read_u16(fo + F_RAID_CTX + 0x06);
            let device = named.saturating_sub(super::jbodmap::JBOD_TARGET_OFFSET) as u8;
            self.jbod_stale_refused(device, seq);
        } else {
            return None;
        }
        Some(IoOutcome::StaleMap)
    }

    /// Whether the frame at `fo` went by FastPath to a RAID member (Function SCSI IO, not the
    /// system-PD sub-type): read only for a status that needs it.
    fn was_ld_fastpath(&self, fo: usize) -> bool {
        let f = &self.mem.frames;
        f.read_u8(fo + F_FUNCTION) == FUNC_SCSI_IO && f.read_u8(fo + F_RAID_CTX + 0x18) & 0x30 == 0
    }

    /// Whether the frame at `fo` went to a system PD by the JBOD map (Function SCSI IO, the
    /// system-PD sub-type, a device handle): read only for a status that needs it.
    fn was_jbod_by_map(&self, fo: usize) -> bool {
        let f = &self.mem.frames;
        f.read_u8(fo + F_FUNCTION) == FUNC_SCSI_IO
            && f.read_u8(fo + F_RAID_CTX + 0x18) & 0x30 == 0x10
            && f.read_u16(fo) != 0xFFFF
    }

    fn bogus(&self, smid: u16, why: &str) {
        let n = self.stats.bogus_replies.fetch_add(1, Ordering::Relaxed);
        // Rate-limited: the first few and then every 1024th.
        if n < 8 || n.is_multiple_of(1024) {
            log::warn!(
                "megasas-fusion: dropped reply for SMID {smid} ({why}); {} so far",
                n + 1
            );
        }
    }

    /// INTx handler: reads the interrupt status (with the Aero zero-read retry).
    pub fn handle_intx(&self, sink: &mut dyn FnMut(Completion)) -> IntxResult {
        let st = read_reg(&self.mmio, self.generation, regs::INTR_STATUS);
        if st & (regs::INTR_DOORBELL | regs::INTR_REPLY) == 0 {
            return IntxResult::NotOurs;
        }
        if st & regs::INTR_DOORBELL != 0 {
            self.mmio.write32(regs::INTR_STATUS, st);
            let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
            if FwStatus(sp0).state() == FwState::Fault {
                return IntxResult::Fault(sp0);
            }
        }
        IntxResult::Handled(self.reap(0, sink))
    }
}
