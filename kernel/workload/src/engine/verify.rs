//! Verification on the I/O path: the generation an I/O writes or expects, stamping a write's
//! buffer, checking what a read brought in, the failed writes a verify pass skips, and
//! `verify_backlog`.

use super::{CpuRun, IoBackend, IoOp, Slot};
use crate::error::WorkloadError;
use crate::job::{ExpectedGeneration, VerifyMode};
use crate::plan::{JobPlan, VerifyScheme};
use crate::verify::{BlockStamp, HEADER_LEN, MAX_GENERATION, check_stamped, stamp_block};

/// Failed writes a single-pass verify job remembers per CPU (the verify pass skips their blocks);
/// past this many, it reads every written block unchecked.
pub const MAX_FAILED_WRITES: usize = 4096;

/// Generation word flags in the tracker: the low 30 bits are the block's generation.
pub(super) const TRACK_BUSY: u32 = 1 << 31;
pub(super) const TRACK_UNKNOWN: u32 = 1 << 30;
pub(super) const TRACK_GENERATION: u32 = MAX_GENERATION;

/// Blocks one CPU keeps for `verify_backlog` (0 when the job has no backlog).
pub(super) fn backlog_capacity(plan: &JobPlan) -> usize {
    if plan.verify.has_verify_pass() {
        plan.spec.verify_backlog as usize
    } else {
        0
    }
}

/// Stamps every verify unit of `io` (a block, or `verify_interval` bytes of one; with variable
/// block sizes an I/O holds several) with its own header, the first at `stamp.lba`, each next
/// `unit_sectors` further, so any later read of blocks can check each. Out of line: verify jobs
/// only (see `check_read`).
#[inline(never)]
fn stamp_units(mode: VerifyMode, pattern: &[u8], stamp: BlockStamp, unit_sectors: u64, unit: usize, io: &mut [u8]) {
    for (index, chunk) in io.chunks_exact_mut(unit).enumerate() {
        let lba = stamp.lba + index as u64 * unit_sectors;
        stamp_block(mode, pattern, &BlockStamp { lba, ..stamp }, chunk);
    }
}

/// Clears the header of every verify unit of `io`, so a read that moves no data cannot pass on
/// a stale buffer.
#[inline(never)]
fn clear_headers(unit: usize, io: &mut [u8]) {
    for chunk in io.chunks_exact_mut(unit) {
        chunk[..HEADER_LEN.min(unit)].fill(0);
    }
}

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
    /// The verify unit in bytes and sectors: the block, or fio's `verify_interval` (which the
    /// planner has checked divides the block into whole sectors).
    fn verify_unit(&self) -> (usize, u64) {
        let spb = u64::from(self.plan.sectors_per_block);
        let interval = self.plan.spec.verify_interval as usize;
        if interval == 0 || interval >= self.bs {
            (self.bs, spb)
        } else {
            (interval, spb * interval as u64 / self.bs as u64)
        }
    }

    /// verify_backlog: a write of `block` completed; every N of them are due to be read back.
    #[cold]
    pub(super) fn note_backlog_write(&mut self, block: u64) {
        if self.verify_off() {
            return;
        }
        self.backlog_written.push(block);
        if self.backlog_written.len() >= self.plan.spec.verify_backlog as usize {
            let room = self.backlog_pending.capacity() - self.backlog_pending.len();
            let take = self.backlog_written.len().min(room);
            // Read back oldest first (`next_from` pops from the end).
            self.backlog_pending
                .splice(0..0, self.backlog_written.drain(..take).rev());
            self.backlog_written.clear();
        }
    }

    /// The generation an I/O of `op` on `block` writes or expects (verify jobs only).
    pub(super) fn expected_generation(&self, op: IoOp, block: u64) -> Option<ExpectedGeneration> {
        match (self.plan.verify, op) {
            // Verify with trims is refused when the job is planned.
            (VerifyScheme::Off, _) | (_, IoOp::Flush | IoOp::Trim) => None,
            (VerifyScheme::ReadOnly(expected), _) => Some(expected),
            // A block whose write failed may hold the old or the new data: read it (the read's
            // own outcome counts) but expect nothing, so it ends up unchecked, not a mismatch.
            (VerifyScheme::SinglePass, IoOp::Read)
                if self.failed_writes_overflow || self.failed_writes.binary_search(&block).is_ok() =>
            {
                None
            }
            (VerifyScheme::SinglePass, _) => Some(ExpectedGeneration::Exact(1)),
            (VerifyScheme::Tracked, IoOp::Write) => {
                let current = self.tracker[block as usize] & TRACK_GENERATION;
                Some(ExpectedGeneration::Exact((current + 1).min(MAX_GENERATION)))
            }
            (VerifyScheme::Tracked, IoOp::Read) => {
                let word = self.tracker[block as usize];
                let current = word & TRACK_GENERATION;
                (word & TRACK_UNKNOWN == 0 && current != 0).then_some(ExpectedGeneration::Exact(current))
            }
        }
    }

    /// Stamps a write's buffer or clears a verified read's headers before `try_submit` hands the
    /// slot to the backend.
    pub(super) fn prepare_buffer(
        &mut self,
        slot: usize,
        op: IoOp,
        generation: Option<ExpectedGeneration>,
        lba: u64,
        read_into_buffer: bool,
    ) -> Result<(), WorkloadError> {
        let seed = self.plan.spec.seed;
        let (unit, unit_sectors) = self.verify_unit();
        let mode = self.plan.spec.verify;
        let buffer = self.backend.slot_buffer(slot);
        if buffer.len() < self.buffer_bytes {
            return Err(WorkloadError::BufferTooSmall {
                slot,
                len: buffer.len(),
                needed: self.buffer_bytes,
            });
        }
        match (op, generation) {
            (IoOp::Write, Some(ExpectedGeneration::Exact(generation))) => {
                let stamp = BlockStamp { lba, seed, generation };
                let io = &mut buffer[..self.io_bytes as usize];
                stamp_units(mode, &self.plan.spec.verify_pattern, stamp, unit_sectors, unit, io);
            }
            (IoOp::Read, Some(_)) => clear_headers(unit, &mut buffer[..self.io_bytes as usize]),
            (IoOp::Write, None) if read_into_buffer => {
                let stamp = BlockStamp {
                    lba,
                    seed,
                    generation: 0,
                };
                let pattern = &self.plan.spec.buffer_pattern;
                super::run::fill_write_data(pattern, &stamp, &mut buffer[..self.io_bytes as usize]);
            }
            _ => {}
        }
        Ok(())
    }

    /// fio's dedupe and compression: fills a write's buffer with the next content. Out of line:
    /// inlined into the submission it cost the plain shape instructions per I/O.
    #[inline(never)]
    pub(super) fn fill_content(&mut self, slot: usize) {
        let buffer = self.backend.slot_buffer(slot);
        let bytes = (self.io_bytes as usize).min(buffer.len());
        if let Some(content) = &mut self.content {
            let key = content.next_key();
            content.fill(key, &mut buffer[..bytes]);
        }
    }

    /// Remembers every block of a failed write (several with variable block sizes) for the verify
    /// pass, which reads them unchecked. Preallocated: no allocation on the I/O path.
    #[cold]
    pub(super) fn note_failed_write(&mut self, slot: Slot) {
        for block in slot.block..slot.block + (slot.bytes as usize / self.bs) as u64 {
            if self.failed_writes.len() < MAX_FAILED_WRITES {
                self.failed_writes.push(block);
            } else {
                self.failed_writes_overflow = true;
            }
        }
    }

    /// Checks every verify unit of the `bytes` a read brought into `slot` (a block or
    /// `verify_interval` bytes of one; with variable block sizes an I/O holds several), each with
    /// its own stamp. Out of line: verify jobs only, and inlined it cost unverified jobs
    /// instructions per I/O in `run_phase`.
    #[inline(never)]
    pub(super) fn check_read(
        &mut self,
        slot: usize,
        lba: u64,
        bytes: usize,
        expected: ExpectedGeneration,
        done_ns: u64,
    ) {
        let (unit, unit_sectors) = self.verify_unit();
        let mode = self.plan.spec.verify;
        let seed = self.plan.spec.seed;
        for index in 0..(bytes / unit).max(1) {
            // The length was checked at submit time; a backend that shrank it since gets a
            // mismatch, not a panic.
            let buffer = self.backend.slot_buffer(slot);
            let block = buffer
                .get(index * unit..)
                .map_or(&[][..], |rest| &rest[..unit.min(rest.len())]);
            let block_lba = lba + index as u64 * unit_sectors;
            match check_stamped(mode, &self.plan.spec.verify_pattern, block_lba, seed, expected, block) {
                Ok(_) => self.result.verify.checked += 1,
                Err(mismatch) => {
                    self.result.verify.mismatches += 1;
                    self.live_counts.mismatches += 1;
                    if self.result.verify.first_mismatch.is_none() {
                        self.result.verify.first_mismatch = Some((done_ns, mismatch));
                    }
                    if self.plan.spec.stops_on(crate::job::ErrorClass::Verify) {
                        self.shared.request_stop();
                    }
                }
            }
        }
    }
}
