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

/// Stamps every `bs`-byte block of `io` (one, or with variable block sizes several) with its own
/// header, the first at `stamp.lba`, each next `sectors_per_block` further, so any later read of
/// blocks can check each. Out of line: verify jobs only (see `check_read`).
#[inline(never)]
fn stamp_blocks(mode: VerifyMode, pattern: &[u8], stamp: BlockStamp, sectors_per_block: u64, bs: usize, io: &mut [u8]) {
    for (index, block) in io.chunks_exact_mut(bs).enumerate() {
        let lba = stamp.lba + index as u64 * sectors_per_block;
        stamp_block(mode, pattern, &BlockStamp { lba, ..stamp }, block);
    }
}

/// Clears the header of every `bs`-byte block of `io`, so a read that moves no data cannot pass
/// on a stale buffer.
#[inline(never)]
fn clear_headers(bs: usize, io: &mut [u8]) {
    for block in io.chunks_exact_mut(bs) {
        block[..HEADER_LEN.min(bs)].fill(0);
    }
}

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
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
        let bs = self.bs;
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
                let spb = u64::from(self.plan.sectors_per_block);
                let io = &mut buffer[..self.io_bytes as usize];
                stamp_blocks(mode, &self.plan.spec.verify_pattern, stamp, spb, bs, io);
            }
            (IoOp::Read, Some(_)) => clear_headers(bs, &mut buffer[..self.io_bytes as usize]),
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

    /// Checks every block of the `bytes` a read brought into `slot` (one block, or with variable
    /// block sizes several, each with its own stamp). Out of line: verify jobs only, and inlined
    /// it cost unverified jobs instructions per I/O in `run_phase`.
    #[inline(never)]
    pub(super) fn check_read(
        &mut self,
        slot: usize,
        lba: u64,
        bytes: usize,
        expected: ExpectedGeneration,
        done_ns: u64,
    ) {
        let bs = self.bs;
        let mode = self.plan.spec.verify;
        let seed = self.plan.spec.seed;
        let spb = u64::from(self.plan.sectors_per_block);
        for index in 0..(bytes / bs).max(1) {
            // The length was checked at submit time; a backend that shrank it since gets a
            // mismatch, not a panic.
            let buffer = self.backend.slot_buffer(slot);
            let block = buffer
                .get(index * bs..)
                .map_or(&[][..], |rest| &rest[..bs.min(rest.len())]);
            let block_lba = lba + index as u64 * spb;
            match check_stamped(mode, &self.plan.spec.verify_pattern, block_lba, seed, expected, block) {
                Ok(_) => self.result.verify.checked += 1,
                Err(mismatch) => {
                    self.result.verify.mismatches += 1;
                    self.live_counts.mismatches += 1;
                    if self.result.verify.first_mismatch.is_none() {
                        self.result.verify.first_mismatch = Some((done_ns, mismatch));
                    }
                    if self.plan.spec.stop_on_error {
                        self.shared.request_stop();
                    }
                }
            }
        }
    }
}
