//! Submission: the gate a controller reset closes, request validation against the drive table
//! and the controller's limits, and building and posting the I/O frames.

use core::hint::spin_loop;
use core::sync::atomic::{Ordering, fence};

use crate::Error;
use crate::frame::{self, Header, Segment};
use crate::regs;
use crate::status::MfiStatus;
use crate::tags;
use crate::{Delay, Dma, Mmio};

use super::{Controller, DriveSlot, IoOp, IoRequest, SENSE_LEN};

/// An I/O request [`Controller::check`] validated (drive, range, transfer size, segments),
/// with the drive's block size; only `check` makes one.
#[derive(Debug)]
pub struct CheckedRequest<'r> {
    req: &'r IoRequest<'r>,
    block_size: u32,
}

/// A logical drive's read or write of one data segment: the block binding's common I/O, checked
/// by [`Controller::check_ld_io`] and posted by [`Controller::submit_ld_io`] without an
/// [`IoRequest`] (the same frame as [`Controller::submit_checked`] of the equivalent request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LdIo {
    /// A write (else a read).
    pub write: bool,
    /// Logical drive target id.
    pub target: u8,
    /// First logical block (in the drive's block size).
    pub lba: u64,
    /// Number of logical blocks.
    pub blocks: u32,
    /// The data buffer: `blocks * block_size` bytes.
    pub segment: Segment,
}

/// An [`LdIo`] that [`Controller::check_ld_io`] validated; only it makes one.
#[derive(Clone, Copy, Debug)]
pub struct CheckedLdIo(LdIo);

/// A submitter's pass through the controller: while one exists, a controller reset waits. Get it
/// with [`Controller::begin_submit`] before handing a request to the block layer's `issue`, so a
/// reset in progress makes the request go back to the queue instead.
pub struct SubmitGuard<'a> {
    // Leaving the gate on drop is a Release decrement: the frame stores and the doorbell happen
    // before the reset sees the count drop.
    _inside: drvkit::gate::Inside<'a>,
}

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Posts the frame of `tag`. Never one 64-bit store: QEMU splits it low half first and posts
    /// with the wrong high word; IQPH is written before IQPL. Inlined
    /// (a frame below 4 GiB is one store); a frame above goes through [`Self::post_high`].
    #[inline(always)]
    pub(super) fn post(&self, tag: u16, frame_bytes: usize) {
        let phys = self.pool.phys_at(usize::from(tag) * self.frame_stride);
        let extra = (frame_bytes.saturating_sub(1) / 64).min(15) as u32;
        let low = (phys as u32) | (extra << 1) | 1;
        let high = (phys >> 32) as u32;
        // The frame stores must be visible before the doorbell. On x86 stores are not reordered
        // with the later uncached MMIO store; the fence stops the compiler from doing so.
        fence(Ordering::Release);
        if high == 0 {
            // IQP implies high word 0 and is a single store: no lock.
            self.mmio.write32(regs::IQP, low);
        } else {
            self.post_high(high, low);
        }
    }

    /// Posts a frame above 4 GiB: IQPH, then IQPL, under `post_lock`.
    #[inline(never)]
    fn post_high(&self, high: u32, low: u32) {
        // IQPH latches a high word that the next IQPL consumes: two CPUs interleaving
        // IQPH/IQPH/IQPL/IQPL would post one frame with the other's high word.
        while self
            .post_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        self.mmio.write32(regs::IQPH, high);
        self.mmio.write32(regs::IQPL, low);
        self.post_lock.store(false, Ordering::Release);
    }

    /// The drive slot `target` names in the LD or the system PD table, with its block size (0:
    /// no such drive).
    #[inline(always)]
    fn drive_slot(&self, system_pd: bool, target: u8) -> Result<(&DriveSlot, u32), Error> {
        let table: &[DriveSlot] = if system_pd { &self.pds } else { &self.drives };
        let slot = table.get(usize::from(target)).ok_or(Error::NoSuchDrive { target })?;
        // Acquire pairs with the Release store in `discover`.
        let block_size = slot.block_size.load(Ordering::Acquire);
        if block_size == 0 {
            return Err(Error::NoSuchDrive { target });
        }
        Ok((slot, block_size))
    }

    /// Checks a read or write of `blocks` at `lba` against the drive's capacity and the
    /// controller's transfer limit; returns the bytes it moves.
    #[inline(always)]
    fn check_extent(&self, slot: &DriveSlot, target: u8, lba: u64, blocks: u32, block_size: u32) -> Result<u64, Error> {
        if blocks == 0 {
            return Err(Error::InvalidRequest {
                reason: "read or write of zero blocks",
            });
        }
        let capacity = slot.blocks.load(Ordering::Relaxed);
        if lba.checked_add(u64::from(blocks)).is_none_or(|end| end > capacity) {
            return Err(Error::BeyondEnd {
                target,
                lba,
                blocks,
                capacity,
            });
        }
        let bytes = u64::from(blocks) * u64::from(block_size);
        if bytes > self.max_transfer_bytes() {
            return Err(Error::TransferTooLarge {
                bytes,
                max: self.max_transfer_bytes(),
            });
        }
        Ok(bytes)
    }

    /// Checks a read or write request against the drive table and the controller limits.
    fn validate(&self, req: &IoRequest<'_>) -> Result<u32, Error> {
        let (slot, block_size) = self.drive_slot(req.system_pd, req.target)?;
        if req.op == IoOp::Flush {
            if req.blocks != 0 || req.lba != 0 || !req.sgl.is_empty() {
                return Err(Error::InvalidRequest {
                    reason: "a flush carries no LBA, blocks or data segments",
                });
            }
            return Ok(block_size);
        }
        let bytes = self.check_extent(slot, req.target, req.lba, req.blocks, block_size)?;
        if req.sgl.is_empty() || req.sgl.len() > usize::from(self.max_sge) {
            return Err(Error::TooManySegments {
                count: req.sgl.len(),
                max: self.max_sge,
            });
        }
        let total = if let [s] = req.sgl {
            // The common single-segment I/O without the loop.
            check_segment(0, s)?;
            u64::from(s.len)
        } else {
            let mut total = 0u64;
            for (index, s) in req.sgl.iter().enumerate() {
                check_segment(index, s)?;
                total += u64::from(s.len);
            }
            total
        };
        if total != bytes {
            return Err(Error::SglLengthMismatch {
                sgl_bytes: total,
                expected: bytes,
            });
        }
        Ok(block_size)
    }

    /// Validates a logical drive's read or write of one segment for [`Self::submit_ld_io`]: the
    /// checks [`Self::check`] makes of the same request as an [`IoRequest`], with the same
    /// errors (one segment is within every controller's limit: `max_sge` is at least 1), in
    /// registers rather than through a request on the stack.
    #[inline(always)]
    pub fn check_ld_io(&self, _guard: &SubmitGuard<'_>, io: LdIo) -> Result<CheckedLdIo, Error> {
        if self.ld_io_fits(&io) {
            return Ok(CheckedLdIo(io));
        }
        self.check_ld_io_exact(io)
    }

    /// The checks of [`Self::check_ld_io`] as one yes or no, with no error to build: the
    /// submission's common case. A request it refuses goes through
    /// [`Self::check_ld_io_exact`], which names what is wrong.
    #[inline(always)]
    fn ld_io_fits(&self, io: &LdIo) -> bool {
        let Some(slot) = self.drives.get(usize::from(io.target)) else {
            return false;
        };
        // Acquire pairs with the Release store in `discover`.
        let block_size = slot.block_size.load(Ordering::Acquire);
        let capacity = slot.blocks.load(Ordering::Relaxed);
        let bytes = u64::from(io.blocks) * u64::from(block_size);
        // `bytes != 0` stands for a drive (block size not 0) and blocks not 0; the segment's
        // length then equals a length that is not 0.
        bytes != 0
            && io
                .lba
                .checked_add(u64::from(io.blocks))
                .is_some_and(|end| end <= capacity)
            && bytes <= self.max_transfer_bytes()
            && io.segment.phys != 0
            && u64::from(io.segment.len) == bytes
    }

    /// [`Self::check_ld_io`] check by check, for a request [`Self::ld_io_fits`] refused.
    #[cold]
    #[inline(never)]
    fn check_ld_io_exact(&self, io: LdIo) -> Result<CheckedLdIo, Error> {
        let (slot, block_size) = self.drive_slot(false, io.target)?;
        let bytes = self.check_extent(slot, io.target, io.lba, io.blocks, block_size)?;
        check_segment(0, &io.segment)?;
        if u64::from(io.segment.len) != bytes {
            return Err(Error::SglLengthMismatch {
                sgl_bytes: u64::from(io.segment.len),
                expected: bytes,
            });
        }
        Ok(CheckedLdIo(io))
    }

    /// Checks a request against the drive table and the controller limits without submitting it.
    /// A test convenience (the block binding checks with [`Self::check`]).
    #[cfg(any(test, feature = "fake"))]
    pub fn check_request(&self, req: &IoRequest<'_>) -> Result<(), Error> {
        self.validate(req).map(|_| ())
    }

    /// Validates `req` once, for [`Self::submit_checked`]: the block layer's `queue_rq` checks
    /// inside the submission critical section and then submits without checking again (one
    /// check per I/O, not two). A [`CheckedRequest`] can only be made here.
    #[inline]
    pub fn check<'r>(&self, _guard: &SubmitGuard<'_>, req: &'r IoRequest<'r>) -> Result<CheckedRequest<'r>, Error> {
        Ok(CheckedRequest {
            req,
            block_size: self.validate(req)?,
        })
    }

    /// Enters the submission critical section. Fails with [`Error::Resetting`] while a controller
    /// reset runs (requeue and retry) and [`Error::NotOperational`] when the controller is down.
    /// [`Self::begin_submit_on`] lane 0: for the admin path and tests; the I/O path names its CPU.
    pub fn begin_submit(&self) -> Result<SubmitGuard<'_>, Error> {
        self.begin_submit_on(0)
    }

    /// [`Self::begin_submit`] through lane `lane` of the submission gate (the submitting CPU:
    /// each CPU's count on its own cache line, folded into [`SUBMIT_LANES`](super::SUBMIT_LANES)).
    #[inline]
    pub fn begin_submit_on(&self, lane: usize) -> Result<SubmitGuard<'_>, Error> {
        // Either the reset sees this submitter's count, or this submitter sees the gate closed
        // (`drvkit::gate`, Dekker's pattern).
        let Some(inside) = self.submit_gate.try_enter(lane) else {
            return Err(Error::Resetting);
        };
        let guard = SubmitGuard { _inside: inside };
        if !self.is_operational() {
            return Err(Error::NotOperational);
        }
        Ok(guard)
    }

    /// Submits one I/O on `tag` (the MFI context carries the tag in its low 15 bits). Validates
    /// the request first (target, range, segments): an invalid one never reaches the device.
    /// Completion is reported by [`Self::reap`]. A test convenience (cookie 0, lane 0); the block
    /// binding submits through [`Self::begin_submit_on`], [`Self::check`] and
    /// [`Self::submit_checked`].
    #[cfg(any(test, feature = "fake"))]
    pub fn submit(&self, tag: u16, req: &IoRequest<'_>) -> Result<(), Error> {
        let guard = self.begin_submit()?;
        self.submit_cookie(&guard, tag, req, 0)
    }

    /// Submits one I/O on `tag`, validated first, inside a critical section already entered,
    /// remembering `cookie` for the completion ([`Done::cookie`](super::Done::cookie)). The tag
    /// goes FREE -> PREPARED while the frame is built and POSTED just before the doorbell, so no
    /// reply can match it before the frame is posted.
    pub fn submit_cookie(
        &self,
        guard: &SubmitGuard<'_>,
        tag: u16,
        req: &IoRequest<'_>,
        cookie: u64,
    ) -> Result<(), Error> {
        let checked = self.check(guard, req)?;
        self.submit_checked(guard, tag, &checked, cookie)
    }

    /// [`Self::submit_cookie`] of a request [`Self::check`] validated in the same critical
    /// section (what it checked against does not change meanwhile: the drive table is filled by
    /// [`Self::discover`] at bring-up, before any I/O).
    pub fn submit_checked(
        &self,
        _guard: &SubmitGuard<'_>,
        tag: u16,
        checked: &CheckedRequest<'_>,
        cookie: u64,
    ) -> Result<(), Error> {
        let (req, block_size) = (checked.req, checked.block_size);
        // The tag's record, bounds-checked once for the whole submission.
        let Some(entry) = self.tags.entry(tag) else {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        };
        let generation = entry.claim(tag)?;
        entry.set_cookie(cookie);
        let context = tags::encode_context(tag, generation, false);
        let w = self.frame(tag);
        // The sense buffer is zero: cleared after any completion that may have written it.
        let sense = self.sense_phys(tag);
        let frame_bytes = match req.op {
            IoOp::Read | IoOp::Write if req.system_pd => {
                // A JBOD disk: SCSI READ(16)/WRITE(16) through PD pass-through, as Linux's
                // megasas_build_dcdb does for system PDs (no LD READ/WRITE frame for a PD).
                let (opcode, dir) = if req.op == IoOp::Read {
                    (0x88, frame::FLAG_DIR_READ)
                } else {
                    (0x8A, frame::FLAG_DIR_WRITE)
                };
                w.header(&Header {
                    cmd: frame::CMD_PD_SCSI_IO,
                    sense_len: SENSE_LEN as u8,
                    target: req.target,
                    cdb_len: 16,
                    sge_count: req.sgl.len() as u8,
                    context,
                    flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | dir,
                    // Pass-through counts bytes (validated to fit u32 by the transfer limit).
                    data_len: req.blocks * block_size,
                });
                w.u64_at(0x18, sense);
                w.bytes_at(0x20, &frame::cdb_rw16(opcode, req.lba, req.blocks));
                w.sgl64(frame::PASS_SGL, req.sgl);
                frame::PASS_SGL + req.sgl.len() * frame::SGE64_LEN
            }
            IoOp::Read | IoOp::Write => {
                let (cmd, dir) = if req.op == IoOp::Read {
                    (frame::CMD_LD_READ, frame::FLAG_DIR_READ)
                } else {
                    (frame::CMD_LD_WRITE, frame::FLAG_DIR_WRITE)
                };
                let header = Header {
                    cmd,
                    sense_len: SENSE_LEN as u8,
                    target: req.target,
                    // Harmless on 7.2.16+, required by 7.2.0-7.2.15.
                    cdb_len: 16,
                    sge_count: req.sgl.len() as u8,
                    context,
                    flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | dir,
                    // LD READ/WRITE count blocks, not bytes.
                    data_len: req.blocks,
                };
                if let [segment] = req.sgl {
                    // The common single-segment I/O: the whole frame in one run of stores.
                    w.ld_io_one_segment(&header, sense, req.lba, segment);
                } else {
                    w.header(&header);
                    w.u64_at(0x18, sense);
                    w.u64_at(0x20, req.lba);
                    w.sgl64(frame::IO_SGL, req.sgl);
                }
                frame::IO_SGL + req.sgl.len() * frame::SGE64_LEN
            }
            IoOp::Flush => {
                // Zero-data commands still need one SGE on QEMU.
                let dummy = Segment {
                    phys: self.pool.phys_at(self.dummy_off),
                    len: 1,
                };
                w.header(&Header {
                    cmd: if req.system_pd {
                        frame::CMD_PD_SCSI_IO
                    } else {
                        frame::CMD_LD_SCSI_IO
                    },
                    sense_len: SENSE_LEN as u8,
                    target: req.target,
                    cdb_len: 10,
                    sge_count: 1,
                    context,
                    flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64,
                    data_len: 0,
                });
                w.u64_at(0x18, sense);
                w.bytes_at(0x20, &frame::cdb_synchronize_cache10());
                w.sgl64(frame::PASS_SGL, &[dummy]);
                frame::PASS_SGL + frame::SGE64_LEN
            }
        };
        entry.set_frame_len(frame_bytes as u16);
        entry.publish(tags::POSTED, generation);
        self.post(tag, frame_bytes);
        Ok(())
    }

    /// [`Self::submit_checked`] of a one-segment logical drive read or write that
    /// [`Self::check_ld_io`] validated in the same critical section: the same frame, the same
    /// tag states, posted from registers: the block binding's common I/O, without an [`IoRequest`]
    /// and a [`CheckedRequest`] on the stack and a call.
    #[inline(always)]
    pub fn submit_ld_io(
        &self,
        _guard: &SubmitGuard<'_>,
        tag: u16,
        checked: CheckedLdIo,
        cookie: u64,
    ) -> Result<(), Error> {
        let io = checked.0;
        let Some(entry) = self.tags.entry(tag) else {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        };
        let generation = entry.claim(tag)?;
        entry.set_cookie(cookie);
        let (cmd, dir) = if io.write {
            (frame::CMD_LD_WRITE, frame::FLAG_DIR_WRITE)
        } else {
            (frame::CMD_LD_READ, frame::FLAG_DIR_READ)
        };
        // The sense buffer is zero: cleared after any completion that may have written it.
        let sense = self.sense_phys(tag);
        let header = Header {
            cmd,
            sense_len: SENSE_LEN as u8,
            target: io.target,
            // Harmless on 7.2.16+, required by 7.2.0-7.2.15.
            cdb_len: 16,
            sge_count: 1,
            context: tags::encode_context(tag, generation, false),
            flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | dir,
            // LD READ/WRITE count blocks, not bytes.
            data_len: io.blocks,
        };
        self.frame(tag).ld_io_one_segment(&header, sense, io.lba, &io.segment);
        const FRAME_BYTES: usize = frame::IO_SGL + frame::SGE64_LEN;
        entry.set_frame_len(FRAME_BYTES as u16);
        entry.publish(tags::POSTED, generation);
        self.post(tag, FRAME_BYTES);
        Ok(())
    }

    /// How often the I/O frame of `tag` was posted again by [`Self::resubmit`] since it was
    /// submitted (0 for a tag out of range). For the tag's owner.
    pub fn resubmits(&self, tag: u16) -> u16 {
        self.tags.entry(tag).map_or(0, |e| e.reposts())
    }

    /// Posts the I/O frame of `tag` again, unchanged but for a new generation: for a command the
    /// device answered BUSY (counted, see [`Self::resubmits`]). Only the owner of the tag may call
    /// it, after the command's completion was reported (the tag is FREE and its frame still holds
    /// the request).
    pub fn resubmit(&self, _guard: &SubmitGuard<'_>, tag: u16) -> Result<(), Error> {
        let Some(entry) = self.tags.entry(tag) else {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        };
        let frame_bytes = entry.frame_len() as usize;
        if frame_bytes == 0 {
            return Err(Error::InvalidRequest {
                reason: "resubmit of a tag that never carried an I/O frame",
            });
        }
        let generation = entry.claim(tag)?;
        entry.note_repost();
        let w = self.frame(tag);
        w.u32_at(0x08, tags::encode_context(tag, generation, false));
        // Status back to pending, sense length back to the buffer size (the BUSY completion's
        // `read_completion` cleared the old sense).
        w.bytes_at(frame::OFF_SENSE_LEN, &[SENSE_LEN as u8, MfiStatus::PENDING.0, 0]);
        entry.publish(tags::POSTED, generation);
        self.post(tag, frame_bytes);
        Ok(())
    }
}

/// A data segment must have an address and a length (`index` names it in the error).
#[inline(always)]
fn check_segment(index: usize, s: &Segment) -> Result<(), Error> {
    if s.phys == 0 || s.len == 0 {
        return Err(Error::BadSegment {
            index,
            phys: s.phys,
            len: s.len,
        });
    }
    Ok(())
}
