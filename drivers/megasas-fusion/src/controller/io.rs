//! Submission: validating a request, composing its frame (SGL, chain frame, RAID context) and
//! posting its request descriptor.

use core::sync::atomic::{Ordering, fence};

use crate::Mmio64;
use devhal::Delay;
use megasas::Segment;

use drvkit::gate::Inside;

use crate::error::Error;
use crate::raidmap::{FastPathLd, FastPathRoute};
use crate::regs::{self, Generation};

use super::{
    Controller, F_CDB, F_CHAIN_OFFSET, F_CONTROL, F_DATA_LEN, F_DEV_HANDLE, F_FUNCTION, F_IO_FLAGS, F_RAID_CTX,
    F_SENSE_LEN, F_SENSE_LOW, F_SGL, F_SGL_FLAGS, F_SGL_OFFSET0, FRAME_SIZE, FUNC_LD_IO, FUNC_SCSI_IO, IoOp, IoRequest,
    LogicalDrive, Mistake, PAIR_IN_FLIGHT, SENSE_SIZE, SGE_SIZE, SmidState, desc, desc_with_handle, sge_bytes,
};

/// RAID context (G35) offsets a FastPath request fills: span/arm and the map's sequence number.
const CTX_SPAN_ARM: usize = 0x19;
/// The same in the Invader RAID context (0x19 there is num_sge).
const CTX_SPAN_ARM_INVADER: usize = 0x1C;
/// Invader RAID-context reg_lock_flags of a FastPath request: GRANT_DESTINATION_CUDA |
/// SEQ_NUM_ENABLE (Linux `megasas_build_ldio_fusion`).
const REG_LOCK_FASTPATH_INVADER: u8 = 0x88;
/// RAID context (G35) flow-specific word: a RAID-1 FastPath write's peer SMID.
const CTX_PEER_SMID: usize = 0x14;

pub(super) const CTX_SEQ_NUM: usize = 0x1A;

/// IoFlags: FastPath (Invader and later).
const IO_FLAGS_FAST_PATH: u16 = 0x4000;
/// RAID-context raid_flags: IO sub-type SYSTEM_PD (bits 5:4 = 1).
const RAID_FLAGS_SYSTEM_PD: u8 = 0x10;
/// RAID-context raid_flags (G35, byte 0x18): IO sub-type CACHE_BYPASS (sub-type 6 in the high
/// nibble), a FastPath write that skips the controller's cache.
const RAID_FLAGS_CACHE_BYPASS: u8 = 6 << 4;
/// G35 RAID-context routing flags: SQN (bit 4, every LD read and write) and SLD (bit 1, a
/// FastPath write that bypasses the controller's cache).
const ROUTING_SQN: u16 = 1 << 4;
const ROUTING_SLD: u16 = 1 << 1;
/// RAID-context raid_flags (G35): IO sub-type LDIO_BW_LIMIT (7 in the high nibble), a large
/// RAID-1 write sent on the LD path because the PCIe link limits the controller.
const RAID_FLAGS_LDIO_BW_LIMIT: u8 = 7 << 4;
/// G35 RAID-context raid_flags byte.
const CTX_RAID_FLAGS: usize = 0x18;
/// Control words.
const CONTROL_WRITE: u32 = 0x0100_0000;
const CONTROL_READ: u32 = 0x0200_0000;
/// SGE flags.
pub(crate) const SGE_CHAIN: u8 = 0x80;
pub(crate) const SGE_END_OF_LIST: u8 = 0x40;

/// A request [`Controller::validate`] accepted: its operation code, LBA and blocks (a read or
/// write), direction (None: no data) and byte count, for [`Controller::submit_validated`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validated {
    opcode: u8,
    lba: u64,
    blocks: u32,
    write: Option<bool>,
    len: u32,
}

impl Validated {
    /// The CDB: READ(16)/WRITE(16), or SYNCHRONIZE CACHE(10) (LBA 0 and 0 blocks: the whole
    /// LD, the only form Linux and FreeBSD send to (and intercept for) MegaRAID LDs).
    fn cdb(&self) -> [u8; 16] {
        cdb16(self.opcode, self.lba, self.blocks)
    }
}

/// What FastPath decided for an LD read or write: the member disk's route (None: the LD
/// path), a RAID-1 write's mirror route for its peer half, and the RAID-context marks Linux
/// gives it.
#[derive(Clone, Copy, Default)]
struct Steer {
    route: Option<FastPathRoute>,
    peer: Option<FastPathRoute>,
    /// RAID-context raid_flags (0: none).
    raid_flags: u8,
    /// A FastPath write past the controller's cache: routing flags SQN | SLD.
    cache_bypass: bool,
}

/// The submission section [`Controller::enter`] opened: no reset starts while it lives.
pub struct Entered<'a> {
    _inside: Inside<'a>,
}

fn cdb16(opcode: u8, lba: u64, blocks: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// The first 128 bytes of a request frame (everything before the SGL), composed on the stack
/// field by field and then written to the SMID's DMA frame as one run of stores
/// (`DmaBuf::write_u32s`: one bounds check, 16 eight-byte stores). Starts zeroed; offsets are
/// the `F_*` byte offsets, little-endian as the device reads them. (The whole 256-byte frame
/// as one image cost a `memset` call and 64 copy instructions per I/O; 128 bytes are zeroed
/// inline.)
struct FrameImage([u32; F_SGL / 4]);

impl FrameImage {
    #[inline(always)]
    fn new() -> Self {
        Self([0; F_SGL / 4])
    }

    #[inline(always)]
    fn set_u8(&mut self, off: usize, v: u8) {
        let shift = 8 * (off % 4);
        let w = &mut self.0[off / 4];
        *w = (*w & !(0xFF << shift)) | (u32::from(v) << shift);
    }

    /// `off` must be 2-byte aligned (every u16 field of the frame is).
    #[inline(always)]
    fn set_u16(&mut self, off: usize, v: u16) {
        debug_assert!(off.is_multiple_of(2));
        let shift = 8 * (off % 4);
        let w = &mut self.0[off / 4];
        *w = (*w & !(0xFFFF << shift)) | (u32::from(v) << shift);
    }

    /// `off` must be 4-byte aligned.
    #[inline(always)]
    fn set_u32(&mut self, off: usize, v: u32) {
        debug_assert!(off.is_multiple_of(4));
        self.0[off / 4] = v;
    }

    /// The 16-byte CDB field (the frame's CDB is 32 bytes; the rest stays zero).
    #[inline(always)]
    fn set_cdb(&mut self, cdb: &[u8; 16]) {
        for (k, chunk) in cdb.as_chunks::<4>().0.iter().enumerate() {
            self.0[F_CDB / 4 + k] = u32::from_le_bytes(*chunk);
        }
    }

    /// The image of eight-byte words `q` (as [`DmaBuf::write_u64s`] stores them).
    fn from_u64s(q: [u64; F_SGL / 8]) -> Self {
        let mut img = Self::new();
        for (k, w) in q.iter().enumerate() {
            img.0[2 * k] = *w as u32;
            img.0[2 * k + 1] = (*w >> 32) as u32;
        }
        img
    }
}

/// The two eight-byte words of a 16-byte CDB with `opcode`, a big-endian LBA at byte 2 and a
/// big-endian block count at byte 10 (READ(16)/WRITE(16)), as the frame holds them.
#[inline(always)]
fn cdb16_words(opcode: u8, lba: u64, blocks: u32) -> [u64; 2] {
    let be = lba.swap_bytes();
    [
        u64::from(opcode) | be << 16,
        be >> 48 | u64::from(blocks.swap_bytes()) << 16,
    ]
}

/// An IEEE 64-bit SGE as four little-endian words (address, length, flags in byte 15).
#[inline(always)]
fn sge_words(addr: u64, len: u32, flags: u8) -> [u32; 4] {
    [addr as u32, (addr >> 32) as u32, len, u32::from(flags) << 24]
}

/// What an LD read or write frame holds by the controller's generation, decided once at
/// bring-up ([`Controller::ld_rw_words`] adds what each request brings).
pub(super) struct LdFrame {
    /// RAID-context bytes 0x60..0x68 but the target: type/nseg, and the routing flags (G35) or
    /// lock flags (before), on the LD path, by FastPath, and by FastPath past the cache.
    ctx_ld: u64,
    ctx_fastpath: u64,
    ctx_bypass: u64,
    /// Shift of the SGE count in RAID-context bytes 0x78..0x80 (G35: the u16 at 0x7C; before:
    /// the byte at 0x79, a count of at most 8 leaving 0x7E zero).
    nsge_shift: u32,
    /// Shift of span/arm there (G35: 0x79; before: 0x7C).
    span_arm_shift: u32,
    /// The last data SGE's flags in its second eight-byte word (end of list from Invader on).
    eol: u64,
    /// Request descriptor flags of an LD read or write.
    ld_descriptor: u8,
}

impl LdFrame {
    pub(super) fn new(g: Generation) -> Self {
        let (ctx0, ld, fastpath, bypass) = if g.g35_raid_context() {
            (0x0012, ROUTING_SQN, ROUTING_SQN, ROUTING_SQN | ROUTING_SLD)
        } else {
            let fp = u16::from(REG_LOCK_FASTPATH_INVADER);
            if g == Generation::Invader {
                // Region type 0 | SEQ_NUM_ENABLE on the LD path.
                (0x12, 0x08, fp, fp)
            } else {
                (0, 0, fp, fp)
            }
        };
        let ctx = |flags: u16| ctx0 | u64::from(flags) << 32;
        Self {
            ctx_ld: ctx(ld),
            ctx_fastpath: ctx(fastpath),
            ctx_bypass: ctx(bypass),
            nsge_shift: if g.g35_raid_context() { 32 } else { 8 },
            span_arm_shift: if g.g35_raid_context() { 8 } else { 32 },
            eol: if g.end_of_list_flag() {
                u64::from(SGE_END_OF_LIST) << 56
            } else {
                0
            },
            ld_descriptor: g.ld_rw_descriptor(),
        }
    }
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    /// Submits an LD request with I/O tag `tag` (SMID `tag + 1`) whose completion goes to
    /// reply queue `queue`. `cookie` comes back in the [`Completion`](super::Completion). Returns
    /// the driver generation of this use of the tag. A flush when the firmware does not handle
    /// SYNCHRONIZE CACHE must not be submitted (see [`Controller::flush_goes_to_firmware`]).
    pub fn submit(&self, tag: u32, queue: u16, req: &IoRequest<'_>, cookie: u64) -> Result<u32, Error> {
        let entered = self.enter(queue).ok_or(Error::Resetting)?;
        let checked = self.validate(req)?;
        self.submit_validated(&entered, tag, queue, req, &checked, cookie)
    }

    /// [`Controller::submit`] for a request `validate` already accepted, inside a submission
    /// section the caller entered (blk's `queue_rq` validates before `Rq::issue` and posts
    /// after it): the request is neither checked nor the gate taken a second time.
    /// `req` must be the request `checked` came from. Inlined into the caller (blk's
    /// `queue_rq`): an LD read or write goes from there to the descriptor without another call.
    #[inline(always)]
    pub fn submit_validated(
        &self,
        _entered: &Entered<'_>,
        tag: u32,
        queue: u16,
        req: &IoRequest<'_>,
        checked: &Validated,
        cookie: u64,
    ) -> Result<u32, Error> {
        if self.is_dead() {
            return Err(Error::Dead);
        }
        // A read or write (a flush has no direction).
        if let Some(write) = checked.write
            && !req.system_pd
            && (1..=8).contains(&req.sgl.len())
            && self.config.word_frames()
        {
            return self.submit_ld_rw(tag, queue, req.target, write, checked, req.sgl, cookie);
        }
        self.submit_general(tag, queue, req, checked, cookie)
    }

    /// [`Controller::submit_validated`] by the general builder: every request but an LD read or
    /// write of 1 to 8 segments (and all of them under a test hook). Out of line, so that the
    /// LD path inlined into the caller carries none of it.
    #[inline(never)]
    fn submit_general(
        &self,
        tag: u32,
        queue: u16,
        req: &IoRequest<'_>,
        checked: &Validated,
        cookie: u64,
    ) -> Result<u32, Error> {
        self.submit_raw(
            tag,
            queue,
            req.target,
            req.system_pd,
            &checked.cdb(),
            checked.write,
            checked.len,
            req.sgl,
            cookie,
            false,
        )
    }

    /// Enters the submission section: while the guard lives no reset can start, so a caller
    /// can hand a request to its owner's bookkeeping (blk's `Rq::issue`) and then post it
    /// without a reset in between. None while a reset runs.
    pub fn enter(&self, queue: u16) -> Option<Entered<'_>> {
        self.gate
            .try_enter(usize::from(queue))
            .map(|inside| Entered { _inside: inside })
    }

    /// Checks a request without posting it: drive, range, segments. Returns what
    /// [`Controller::submit_validated`] needs: the CDB, the direction and the byte count.
    pub fn validate(&self, req: &IoRequest<'_>) -> Result<Validated, Error> {
        let drive = self
            .drives
            .iter()
            .find(|d| d.target == req.target && d.system_pd == req.system_pd)
            .ok_or(Error::NoSuchDrive { target: req.target })?;
        self.validate_on(drive, req)
    }

    /// [`Controller::validate`] for a request to `drive`, one of [`Controller::drives`] (the
    /// block binding keeps its drive's entry, so no lookup per I/O).
    #[inline(always)]
    pub(crate) fn validate_on(&self, drive: &LogicalDrive, req: &IoRequest<'_>) -> Result<Validated, Error> {
        let (opcode, lba, blocks, write, len) = match req.op {
            IoOp::Read | IoOp::Write => {
                let end = req.lba.checked_add(u64::from(req.blocks));
                if req.blocks == 0 || end.is_none_or(|e| e > drive.blocks) {
                    return Err(Error::BeyondEnd {
                        lba: req.lba,
                        blocks: req.blocks,
                        capacity: drive.blocks,
                    });
                }
                let len = u64::from(req.blocks) * u64::from(drive.block_size);
                let len = u32::try_from(len).map_err(|_| Error::TooManySegments {
                    count: req.sgl.len(),
                    max: usize::from(self.limits.max_sge),
                })?;
                let write = req.op == IoOp::Write;
                (if write { 0x8A } else { 0x88 }, req.lba, req.blocks, Some(write), len)
            }
            // SYNCHRONIZE CACHE(10) of the whole LD (`Validated::cdb`).
            IoOp::Flush => (0x35, 0, 0, None, 0),
        };
        if !self.mistake(Mistake::IgnoreMaxSge) && req.sgl.len() > usize::from(self.limits.max_sge) {
            return Err(Error::TooManySegments {
                count: req.sgl.len(),
                max: usize::from(self.limits.max_sge),
            });
        }
        let sum = match req.sgl {
            // The common case (one page, one buffer) without the loops below.
            [one] if one.len != 0 => u64::from(one.len),
            sgl => {
                if let Some(index) = sgl.iter().position(|s| s.len == 0)
                    && !self.mistake(Mistake::ZeroLengthSge)
                {
                    return Err(Error::ZeroLengthSegment { index });
                }
                sgl.iter().map(|s| u64::from(s.len)).sum()
            }
        };
        if sum != u64::from(len) {
            return Err(Error::SglLengthMismatch {
                sgl: sum,
                expected: u64::from(len),
            });
        }
        Ok(Validated {
            opcode,
            lba,
            blocks,
            write,
            len,
        })
    }

    /// The tag and reply queue a submission names, checked against the pool and the queue count
    /// (both builders, before a SMID is claimed).
    #[inline(always)]
    fn check_tag_queue(&self, tag: u32, queue: u16) -> Result<(), Error> {
        let tags = u32::from(self.limits.io_tags);
        if tag >= tags {
            return Err(Error::TagOutOfRange { tag, tags });
        }
        if queue >= self.limits.queues {
            return Err(Error::QueueOutOfRange {
                queue,
                queues: self.limits.queues,
            });
        }
        Ok(())
    }

    // Inlined into `submit_validated`: no ten arguments through the stack per I/O.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn submit_raw(
        &self,
        tag: u32,
        queue: u16,
        target: u8,
        system_pd: bool,
        cdb: &[u8; 16],
        rw: Option<bool>,
        len: u32,
        segs: &[Segment],
        cookie: u64,
        non_rw: bool,
    ) -> Result<u32, Error> {
        self.check_tag_queue(tag, queue)?;
        let mut smid = tag as u16 + 1;
        let state = &self.smids[usize::from(smid)];
        let slot = &state.slot;
        // Claim the tag before the frame is posted, so a reply can only match a posted frame.
        let generation = if self.mistake(Mistake::RepostOutstanding) {
            slot.force_claim()
        } else {
            slot.claim().ok_or(Error::TagBusy { tag })?
        };
        // Cookie and target are read by the reaper after it sees the reply; the Release fence
        // before the descriptor write orders these stores before the device can see the command.
        state.cookie.store(cookie, Ordering::Relaxed);
        let must_move = if !non_rw && matches!(cdb[0], 0x88 | 0x8A) {
            len
        } else {
            0
        };
        state.required.store(must_move, Ordering::Relaxed);
        state.target.store(target, Ordering::Relaxed);
        if self.peer_smids {
            self.fw_outstanding.fetch_add(1, Ordering::Relaxed);
            state.on_firmware.store(1, Ordering::Relaxed);
        }

        // The whole frame is composed here and written in one run of 8-byte stores, not
        // zeroed byte by byte with each field then stored through its own bounds check (about 750
        // instructions per I/O). Every byte is written, so nothing of the SMID's
        // previous use (status, DataLength, SGEs) survives, as with Linux's memset at free.
        let fo = FRAME_SIZE * usize::from(smid);
        let mut img = FrameImage::new();
        // A system PD without a RAID map (Linux `megasas_build_syspd_fusion`): DevHandle
        // 0xFFFF, the device id in the RAID context, FastPath SCSI IO (Function 0, FP_IO).
        // (A FastPath route rewrites the LD frame at the end, off the LD path.)
        img.set_u16(F_DEV_HANDLE, if system_pd { 0xFFFF } else { u16::from(target) });
        img.set_u8(
            F_FUNCTION,
            if self.mistake(Mistake::GarbageFunction) {
                0x5A
            } else if system_pd {
                FUNC_SCSI_IO
            } else {
                FUNC_LD_IO
            },
        );
        let sense = self.mem.sense.phys() + (SENSE_SIZE * (usize::from(smid) - 1)) as u64;
        let sense_low = if self.mistake(Mistake::SenseOutsidePool) {
            0x10
        } else {
            sense as u32
        };
        img.set_u32(F_SENSE_LOW, sense_low);
        img.set_u16(F_SGL_FLAGS, 0x0002);
        img.set_u8(
            F_SENSE_LEN,
            if self.mistake(Mistake::SenseLengthZero) {
                0
            } else {
                SENSE_SIZE as u8
            },
        );
        img.set_u8(F_SGL_OFFSET0, 0x20);
        let is_rw = !non_rw && !system_pd && rw.is_some() && cdb[0] != 0x9E;
        let data_len = if self.mistake(Mistake::DataLengthWrong) && is_rw {
            len + 512
        } else {
            len
        };
        img.set_u32(F_DATA_LEN, data_len);
        let mut io_flags = u16::from(cdb_len(cdb[0]));
        if system_pd
            && self.generation != Generation::Thunderbolt
            && !self.mistake(Mistake::SystemPdWithoutFastPathFlag)
        {
            io_flags |= IO_FLAGS_FAST_PATH;
        }
        img.set_u16(F_IO_FLAGS, io_flags);
        let mut control = match rw {
            Some(true) => CONTROL_WRITE,
            Some(false) => CONTROL_READ,
            None => 0,
        };
        if self.mistake(Mistake::WrongDirection) && rw == Some(true) {
            control = CONTROL_READ;
        }
        img.set_u32(F_CONTROL, control);
        img.set_cdb(cdb);
        let nsge = self.write_sgl(&mut img, fo, smid, state, segs);
        self.write_raid_context(&mut img, target, nsge, is_rw);
        if system_pd {
            img.set_u8(F_RAID_CTX + 0x18, RAID_FLAGS_SYSTEM_PD);
        }
        let mut flags = if system_pd {
            regs::DESC_FP_IO
        } else if is_rw {
            self.generation.ld_rw_descriptor()
        } else {
            regs::DESC_SCSI_IO
        };
        if self.mistake(Mistake::DescriptorMismatch) {
            flags = regs::DESC_HIGH_PRIORITY;
        }
        if self.mistake(Mistake::FastPathWithoutMap) {
            flags = regs::DESC_FP_IO;
            img.set_u8(F_FUNCTION, 0x00);
        }
        let mut msix = queue as u8;
        if self.mistake(Mistake::MsixIndexOutOfRange) {
            msix = self.limits.queues as u8;
        }
        if self.mistake(Mistake::SmidZero) {
            smid = 0;
        }
        if self.mistake(Mistake::SmidBeyondPool) {
            smid = self.limits.max_fw_cmds + 1;
        }
        // FastPath (a valid RAID map was read): an LD read or write inside one strip of a RAID-0
        // LD, or a RAID-1 read, goes to a member disk; one relaxed load for every other LD
        // command.
        let fastpath = if is_rw && self.fastpath.on() {
            let mut peer = None;
            let d = self.fastpath_frame(&mut img, target, cdb, usize::from(queue), msix, smid, &mut peer);
            if let (Some(d), Some(peer)) = (d, peer) {
                self.post_pair(&mut img, state, fo, smid, d, peer, queue, target);
                return Ok(generation);
            }
            d
        } else if system_pd {
            self.jbod_frame(&mut img, target, msix, smid)
        } else {
            None
        };
        let mut descriptor = fastpath.unwrap_or_else(|| desc(flags, msix, smid));
        if self.limits.high_iops_queues != 0 {
            // Balanced mode: the reply queue Linux's rule picks (MSIxIndex, bits 15:8).
            let q = self.balanced_queue(state, queue, target, system_pd, is_rw);
            descriptor = (descriptor & !0xFF00) | (u64::from(q) << 8);
        }
        self.mem.frames.write_u32s(fo, &img.0);
        // The frame must be visible to the device before the descriptor that names it.
        fence(Ordering::Release);
        self.post_descriptor(descriptor);
        if self.mistake(Mistake::RepostOutstanding) {
            self.post_descriptor(desc(flags, msix, smid));
        }
        Ok(generation)
    }

    /// [`Controller::submit_raw`] for an LD read or write of 1 to 8 segments, the frame composed
    /// as sixteen eight-byte words in registers and stored in one run: every field it holds is
    /// computed here (the same as the general builder writes, checked word for word by the
    /// tests), so nothing of the SMID's previous use survives, and no image is zeroed,
    /// patched and copied per I/O.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn submit_ld_rw(
        &self,
        tag: u32,
        queue: u16,
        target: u8,
        write: bool,
        checked: &Validated,
        segs: &[Segment],
        cookie: u64,
    ) -> Result<u32, Error> {
        // The caller sends 1 to 8 segments.
        let Some(first) = segs.first() else {
            return Err(Error::TooManySegments { count: 0, max: 8 });
        };
        self.check_tag_queue(tag, queue)?;
        let smid = tag as u16 + 1;
        let state = &self.smids[usize::from(smid)];
        // Claim the tag before the frame is posted, so a reply can only match a posted frame.
        let generation = state.slot.claim().ok_or(Error::TagBusy { tag })?;
        // Read by the reaper after it sees the reply; the Release fence before the descriptor
        // write orders these stores before the device can see the command.
        state.cookie.store(cookie, Ordering::Relaxed);
        state.required.store(checked.len, Ordering::Relaxed);
        state.target.store(target, Ordering::Relaxed);
        if self.peer_smids {
            self.fw_outstanding.fetch_add(1, Ordering::Relaxed);
            state.on_firmware.store(1, Ordering::Relaxed);
        }
        let fo = FRAME_SIZE * usize::from(smid);
        let f = &self.mem.frames;
        let n = segs.len();
        let eol = self.ld_frame.eol;
        // The first SGE goes with the frame's first 128 bytes, in one run of stores.
        let sge0 = [first.phys, u64::from(first.len) | if n == 1 { eol } else { 0 }];
        for (i, s) in segs.iter().enumerate().skip(1) {
            let flags = if i + 1 == n { eol } else { 0 };
            f.write_u64s(fo + F_SGL + SGE_SIZE * i, [s.phys, u64::from(s.len) | flags]);
        }
        // Slots a longer SGL of the SMID's previous use wrote.
        let previously = usize::from(state.sgl_slots.load(Ordering::Relaxed));
        for slot in n..previously {
            f.write_u64s(fo + F_SGL + SGE_SIZE * slot, [0, 0]);
        }
        if previously != n {
            state.sgl_slots.store(n as u8, Ordering::Relaxed);
        }
        let msix = queue as u8;
        // Composed twice, so that the LD path (FastPath off) folds the route and marks away.
        let (words, descriptor) = if self.fastpath.on() {
            let steer = self.fastpath_steer(write, checked.lba, checked.blocks, target, usize::from(queue), smid);
            let (words, descriptor) = self.ld_rw_words(&steer, target, write, checked, n, smid, msix);
            if steer.route.is_some() {
                self.stats.fastpath_ios.fetch_add(1, Ordering::Relaxed);
                if let Some(peer) = steer.peer {
                    // The pair copies the SGL from the frame.
                    f.write_u64s(fo + F_SGL, sge0);
                    let mut img = FrameImage::from_u64s(words);
                    self.post_pair(&mut img, state, fo, smid, descriptor, peer, queue, target);
                    return Ok(generation);
                }
            }
            (words, descriptor)
        } else {
            self.ld_rw_words(&Steer::default(), target, write, checked, n, smid, msix)
        };
        let mut descriptor = descriptor;
        if self.limits.high_iops_queues != 0 {
            // Balanced mode: the reply queue Linux's rule picks (MSIxIndex, bits 15:8).
            let q = self.balanced_queue(state, queue, target, false, true);
            descriptor = (descriptor & !0xFF00) | (u64::from(q) << 8);
        }
        let [w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15] = words;
        f.write_u64s(
            fo,
            [
                w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15, sge0[0], sge0[1],
            ],
        );
        // The frame must be visible to the device before the descriptor that names it.
        fence(Ordering::Release);
        self.post_descriptor(descriptor);
        Ok(generation)
    }

    /// The first 128 bytes of the frame of LD read or write `checked` (`nsge` segments) on
    /// SMID `smid`, steered by `steer`, as sixteen eight-byte words, and its request descriptor
    /// (reply queue `msix`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn ld_rw_words(
        &self,
        steer: &Steer,
        target: u8,
        write: bool,
        checked: &Validated,
        nsge: usize,
        smid: u16,
        msix: u8,
    ) -> ([u64; F_SGL / 8], u64) {
        debug_assert!((1..=8).contains(&nsge));
        let t = &self.ld_frame;
        let (handle, function, lba, io_flags, ctx, route) = match steer.route {
            Some(r) => (
                r.handle,
                FUNC_SCSI_IO,
                r.pd_lba,
                IO_FLAGS_FAST_PATH,
                if steer.cache_bypass {
                    t.ctx_bypass
                } else {
                    t.ctx_fastpath
                },
                u64::from(r.span_arm) << t.span_arm_shift | u64::from(r.seq) << 16,
            ),
            None => (u16::from(target), FUNC_LD_IO, checked.lba, 0, t.ctx_ld, 0),
        };
        let sense = self.mem.sense.phys() + (SENSE_SIZE * (usize::from(smid) - 1)) as u64;
        let control = if write { CONTROL_WRITE } else { CONTROL_READ };
        let cdb = cdb16_words(checked.opcode, lba, checked.blocks);
        let words: [u64; F_SGL / 8] = [
            // DevHandle, ChainOffset 0, Function.
            u64::from(handle) | u64::from(function) << 24,
            // SenseBufferLowAddress.
            (sense & 0xFFFF_FFFF) << 32,
            // SGLFlags, SenseBufferLength; SGLOffset0.
            0x0002 | (SENSE_SIZE as u64) << 16 | 0x20 << 32,
            // DataLength.
            u64::from(checked.len) << 32,
            // IoFlags: the CDB length (16), FastPath.
            u64::from(16 | io_flags) << 32,
            0,
            0,
            // Control: the direction.
            u64::from(control) << 32,
            cdb[0],
            cdb[1],
            0,
            0,
            // RAID context 0x60..0x68: type/nseg, routing or lock flags, the LD's target.
            ctx | u64::from(target) << 48,
            0,
            // Peer SMID, ex_status and status all zero.
            0,
            // 0x78..0x80: raid_flags, span/arm, sequence number, SGE count.
            u64::from(steer.raid_flags) | route | (nsge as u64) << t.nsge_shift,
        ];
        let descriptor = match steer.route {
            Some(r) => desc_with_handle(regs::DESC_FP_IO, msix, smid, r.handle),
            None => desc(t.ld_descriptor, msix, smid),
        };
        (words, descriptor)
    }

    /// Turns the LD read or write frame in `img` (its READ(16)/WRITE(16) CDB `cdb`) into
    /// FastPath to a RAID member when the RAID map gives it a route (Linux
    /// `megasas_build_ldio_fusion` with fp_possible): the disk's device handle, Function SCSI IO,
    /// the CDB naming the disk's block (`megasas_set_pd_lba`), the FastPath IoFlag, span/arm and
    /// the map's sequence number in the RAID context (the LD's target is there already); returns
    /// the FastPath descriptor, which names the handle. A RAID-1 read goes to the arm
    /// [`MirrorLoad`](crate::raidmap::MirrorLoad) picks and is counted there until its reply or
    /// a reset hands it back. A RAID-1 write goes to the data arm and `peer` gets the mirror's
    /// route for its peer half ([`Controller::post_pair`]), when the controller has peer SMIDs
    /// and `smid` is an I/O tag's (else the LD path). None: no route, the LD path. Out of line:
    /// only controllers with a valid RAID map come here.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn fastpath_frame(
        &self,
        img: &mut FrameImage,
        target: u8,
        cdb: &[u8; 16],
        lane: usize,
        msix: u8,
        smid: u16,
        peer: &mut Option<FastPathRoute>,
    ) -> Option<u64> {
        let write = match cdb[0] {
            0x88 => false,
            0x8A => true,
            _ => return None,
        };
        let lba = u64::from_be_bytes(cdb[2..10].try_into().ok()?);
        let blocks = u32::from_be_bytes(cdb[10..14].try_into().ok()?);
        let steer = self.fastpath_steer(write, lba, blocks, target, lane, smid);
        if steer.cache_bypass {
            img.set_u16(F_RAID_CTX + 0x04, ROUTING_SQN | ROUTING_SLD);
        }
        if steer.raid_flags != 0 {
            img.set_u8(F_RAID_CTX + CTX_RAID_FLAGS, steer.raid_flags);
        }
        *peer = steer.peer;
        let r = steer.route?;
        img.set_cdb(&cdb16(cdb[0], r.pd_lba, blocks));
        img.set_u16(F_DEV_HANDLE, r.handle);
        img.set_u8(F_FUNCTION, FUNC_SCSI_IO);
        img.set_u16(F_IO_FLAGS, u16::from(cdb_len(cdb[0])) | IO_FLAGS_FAST_PATH);
        if self.generation.g35_raid_context() {
            img.set_u8(F_RAID_CTX + CTX_SPAN_ARM, r.span_arm);
        } else {
            // Invader and Fury (legacy and extended maps): span/arm at 0x1C of their RAID
            // context, and the lock flags Linux gives FastPath there.
            img.set_u8(F_RAID_CTX + CTX_SPAN_ARM_INVADER, r.span_arm);
            img.set_u8(F_RAID_CTX + 0x04, REG_LOCK_FASTPATH_INVADER);
        }
        img.set_u16(F_RAID_CTX + CTX_SEQ_NUM, r.seq);
        self.stats.fastpath_ios.fetch_add(1, Ordering::Relaxed);
        Some(desc_with_handle(regs::DESC_FP_IO, msix, smid, r.handle))
    }

    /// The FastPath decision for an LD read or write of `blocks` blocks at `lba` of LD `target`
    /// on SMID `smid`, by the map in use seen from lane `lane` (`mapsync`): a RAID-0 request
    /// inside one strip, or a RAID-1 read, goes to a member disk (a RAID-1 read to the arm
    /// [`MirrorLoad`](crate::raidmap::MirrorLoad) picks, counted there until its reply or a
    /// reset hands it back); a RAID-1 write to the data arm, with the mirror's route for its
    /// peer half ([`Controller::post_pair`]) when the controller has peer SMIDs and `smid` is an
    /// I/O tag's. Only controllers with a valid RAID map come here.
    #[inline(always)]
    fn fastpath_steer(&self, write: bool, lba: u64, blocks: u32, target: u8, lane: usize, smid: u16) -> Steer {
        let mut steer = Steer::default();
        if let Some(lds) = self.fastpath.read(lane) {
            steer.route = self.route_in(&lds, &mut steer, write, lba, blocks, target, smid);
        }
        steer
    }

    /// [`Controller::fastpath_steer`] by the table `lds`: the route, with the marks and peer in
    /// `steer`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn route_in(
        &self,
        lds: &[FastPathLd],
        steer: &mut Steer,
        write: bool,
        lba: u64,
        blocks: u32,
        target: u8,
        smid: u16,
    ) -> Option<FastPathRoute> {
        let ld = lds.iter().find(|ld| ld.target == target)?;
        if write {
            return self.fastpath_write_route(steer, ld, lba, blocks, smid);
        }
        let r = ld.route(lba, blocks, false)?;
        Some(if ld.mirror {
            self.mirror_arm(ld, r, blocks, smid)
        } else {
            r
        })
    }

    /// The route of a write of `blocks` blocks at LD block `lba` of `ld` on SMID `smid`, with the
    /// RAID context marks Linux gives it in `steer`: a RAID-0 write inside one strip goes to its
    /// disk, a RAID-1 write to the data disk with the peer set to the mirror's route
    /// ([`Controller::peer_route`]), each marked past the controller cache when the map offers
    /// it; None (the LD path) otherwise, a large RAID-1 write on a PCIe-bandwidth-limited
    /// controller marked LDIO_BW_LIMIT. Out of line, so that FastPath reads pay one branch for
    /// what only writes need.
    #[inline(never)]
    fn fastpath_write_route(
        &self,
        steer: &mut Steer,
        ld: &FastPathLd,
        lba: u64,
        blocks: u32,
        smid: u16,
    ) -> Option<FastPathRoute> {
        let Some(r) = ld.route(lba, blocks, true) else {
            if self.config.pcie_bw_limited {
                self.mark_bw_limited(steer, ld, blocks);
            }
            return None;
        };
        if ld.mirror {
            steer.peer = self.peer_route(ld, r, smid, blocks);
            if steer.peer.is_none() {
                if self.config.pcie_bw_limited {
                    self.mark_bw_limited(steer, ld, blocks);
                }
                return None;
            }
        }
        if ld.cache_bypass {
            self.mark_cache_bypass(steer);
        }
        Some(r)
    }

    /// The mirror's route for the peer half of RAID-1 write `r` (`blocks` blocks) on SMID `smid`,
    /// counted on the firmware. None (the LD path) without peer SMIDs, for a SMID that is no I/O
    /// tag's (a test hook's), when the peer would take the requests on the firmware past the I/O
    /// tags (Linux's `fw_outstanding` against `can_queue` in `megasas_build_ldio_fusion`), or
    /// when the PCIe link limits the controller and the write is large or follows a large one
    /// ([`Controller::bw_limited_ld_write`]).
    fn peer_route(&self, ld: &FastPathLd, r: FastPathRoute, smid: u16, blocks: u32) -> Option<FastPathRoute> {
        let state = self.smids.get(usize::from(smid))?;
        if !self.peer_smids || smid == 0 || smid > self.limits.io_tags {
            return None;
        }
        let route = ld.mirror_route(r, 1)?;
        if self.fw_outstanding.fetch_add(1, Ordering::Relaxed) >= u32::from(self.limits.io_tags) {
            self.fw_outstanding.fetch_sub(1, Ordering::Relaxed);
            self.stats.raid1_pairs_over_depth.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self.bw_limited_ld_write(ld.target, blocks) && !self.mistake(Mistake::LargeRaid1WriteByFastPath) {
            self.fw_outstanding.fetch_sub(1, Ordering::Relaxed);
            self.stats.raid1_bw_limited_ld_writes.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        state.on_firmware.store(2, Ordering::Relaxed);
        Some(route)
    }

    /// On a PCIe-bandwidth-limited controller, whether a RAID-1 write of `blocks` blocks to LD
    /// `target` that could go as a FastPath pair takes the LD path instead, as Linux decides it:
    /// one over 32 KiB does and sets the LD's hint to 4; a small one takes 1 off a positive hint
    /// and does while more than 0 is left (so the three after a large one do). Always false on
    /// other controllers (no hints are kept).
    fn bw_limited_ld_write(&self, target: u8, blocks: u32) -> bool {
        let Some(hint) = self.r1_ldio_hint.get(usize::from(target)) else {
            return false;
        };
        if large_write(blocks) {
            hint.store(super::R1_LDIO_HINT, Ordering::Relaxed);
            return true;
        }
        hint.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| h.checked_sub(1))
            .is_ok_and(|before| before > 1)
    }

    /// A FastPath write to an LD whose map entry offers `fp_cache_bypass_capable` is marked
    /// past the controller's cache: the SLD routing flag and the CACHE_BYPASS sub-type, as
    /// Linux's `megasas_set_raidflag_cpu_affinity` marks them (a RAID-1 pair's peer copies this
    /// frame, so both halves carry it). Out of line: FastPath reads never come here.
    #[cold]
    #[inline(never)]
    fn mark_cache_bypass(&self, steer: &mut Steer) {
        if !self.mistake(Mistake::CacheBypassFlagsMissing) {
            steer.cache_bypass = true;
            steer.raid_flags = RAID_FLAGS_CACHE_BYPASS;
        }
    }

    /// A write of `blocks` blocks to LD `ld` that takes the LD path on a PCIe-bandwidth-limited
    /// controller: a RAID-1 LD's write over 32 KiB carries raid_flags sub-type LDIO_BW_LIMIT,
    /// which tells the firmware why (Linux marks every such write of a RAID-1 LD of its map,
    /// whatever kept it off FastPath). Out of line: only writes kept off FastPath on such
    /// controllers come here.
    #[cold]
    #[inline(never)]
    fn mark_bw_limited(&self, steer: &mut Steer, ld: &FastPathLd, blocks: u32) {
        if ld.mirror && (large_write(blocks) || self.mistake(Mistake::BwLimitMarkOnSmallWrite)) {
            steer.raid_flags = RAID_FLAGS_LDIO_BW_LIMIT;
        }
    }

    /// Takes the request on `state` out of [`Controller::fw_outstanding`] (its reply came, or a
    /// reset hands it back): exactly once, whoever gets there first.
    pub(super) fn off_firmware(&self, state: &SmidState) {
        let n = state.on_firmware.swap(0, Ordering::Relaxed);
        if n != 0 {
            self.fw_outstanding.fetch_sub(u32::from(n), Ordering::Relaxed);
        }
    }

    /// I/O requests on the firmware, RAID-1 peer halves included (0 without peer SMIDs).
    pub fn requests_on_firmware(&self) -> u32 {
        self.fw_outstanding.load(Ordering::Relaxed)
    }

    /// Posts a RAID-1 FastPath write as Linux's peer commands (`megasas_prepare_secondRaid1_IO`):
    /// the request in `img` on SMID `smid` to the data arm, and its copy on the peer SMID
    /// (`smid` + max_fw_cmds) to the mirror `peer`, with its own sense slot and the mirror's
    /// span/arm; each names the other's SMID in the RAID context and both reply on the same
    /// queue. The SGL (and a chain frame it points to) is the request's, copied from its frame.
    /// The request completes when both halves have answered (`reply`).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn post_pair(
        &self,
        img: &mut FrameImage,
        state: &SmidState,
        fo: usize,
        smid: u16,
        descriptor: u64,
        peer: FastPathRoute,
        queue: u16,
        target: u8,
    ) {
        let peer_smid = smid + self.limits.max_fw_cmds;
        let mut d = descriptor;
        if self.limits.high_iops_queues != 0 {
            let q = self.balanced_queue(state, queue, target, false, true);
            d = (d & !0xFF00) | (u64::from(q) << 8);
        }
        let msix = (d >> 8) as u8;
        img.set_u16(F_RAID_CTX + CTX_PEER_SMID, peer_smid);
        self.mem.frames.write_u32s(fo, &img.0);
        let pfo = FRAME_SIZE * usize::from(peer_smid);
        let sgl: [u32; (FRAME_SIZE - F_SGL) / 4] = self.mem.frames.read_u32s(fo + F_SGL);
        self.mem.frames.write_u32s(pfo + F_SGL, &sgl);
        img.set_u16(F_DEV_HANDLE, peer.handle);
        let sense = self.mem.sense.phys() + (SENSE_SIZE * (usize::from(peer_smid) - 1)) as u64;
        img.set_u32(F_SENSE_LOW, sense as u32);
        img.set_u8(F_RAID_CTX + CTX_SPAN_ARM, peer.span_arm);
        img.set_u16(F_RAID_CTX + CTX_PEER_SMID, smid);
        self.mem.frames.write_u32s(pfo, &img.0);
        state.pair.store(PAIR_IN_FLIGHT, Ordering::Relaxed);
        self.stats.raid1_write_pairs.fetch_add(1, Ordering::Relaxed);
        // Both frames and the pair mark before either descriptor.
        fence(Ordering::Release);
        self.post_descriptor(d);
        self.post_descriptor(desc_with_handle(regs::DESC_FP_IO, msix, peer_smid, peer.handle));
    }

    /// Balanced mode: the reply queue of a request submitted on latency queue `queue`, as Linux's
    /// `megasas_get_msix_index`. The request counts outstanding on its device until its reply or
    /// a reset hands it back; with more than 8 per data arm outstanding before it, it goes to a
    /// high-IOPS queue, 16 consecutive such requests to each in turn, where the firmware
    /// coalesces their interrupts. Only balanced mode comes here: the device counts and the
    /// batch counter are written by every CPU that submits to the device, as Linux's are.
    /// `#[cold]` keeps latency mode's submission free of it (its spills included).
    #[cold]
    #[inline(never)]
    fn balanced_queue(&self, state: &SmidState, queue: u16, target: u8, system_pd: bool, is_rw: bool) -> u8 {
        let device = usize::from(target) + if system_pd { 256 } else { 0 };
        let Some(busy) = self.busy.get(device) else {
            return queue as u8;
        };
        let before = busy.fetch_add(1, Ordering::Relaxed);
        state.busy_device.store(device as u16 + 1, Ordering::Relaxed);
        // Linux weighs an LD of the RAID map by its data arms (the row's data size); every
        // other device by one.
        let data_arms = if is_rw && !system_pd && self.fastpath.on() {
            self.fastpath
                .with(usize::from(queue), |lds| {
                    lds.iter().find(|ld| ld.target == target).map(FastPathLd::data_arms)
                })
                .unwrap_or(1)
        } else {
            1
        };
        if before <= data_arms * crate::layout::HIGH_IOPS_DEPTH_PER_ARM {
            return queue as u8;
        }
        let n = self.stats.high_iops_ios.fetch_add(1, Ordering::Relaxed) + 1;
        ((n / crate::layout::HIGH_IOPS_BATCH) % u64::from(self.limits.high_iops_queues)) as u8
    }

    /// Takes back the balanced-mode count of the request on `state`, if it has one: exactly
    /// once, whoever hands it back first (reply or reset). Out of line: latency mode's replies
    /// never come here.
    #[cold]
    #[inline(never)]
    pub(super) fn busy_done(&self, state: &SmidState) {
        let device = state.busy_device.swap(0, Ordering::Relaxed);
        if let Some(busy) = usize::from(device).checked_sub(1).and_then(|d| self.busy.get(d)) {
            busy.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Requests outstanding on a device in balanced mode (`system_pd`: a JBOD disk's device id);
    /// 0 in latency mode, where nothing counts.
    pub fn device_busy(&self, target: u8, system_pd: bool) -> u32 {
        let device = usize::from(target) + if system_pd { 256 } else { 0 };
        self.busy.get(device).map_or(0, |b| b.load(Ordering::Relaxed))
    }

    /// Turns a system-PD frame into a request by the JBOD map when the map in use has the
    /// device (Linux `megasas_build_syspd_fusion` with `use_seqnum_jbod_fp`): its device handle
    /// (frame and descriptor), the device id + 255 and the map's sequence number in the RAID
    /// context, with the type/nseg and sequence-number flags; or, without a JBOD map, by the RAID
    /// map's handle (`fast_path_io` in Linux), the target and RAID context left as by device id.
    /// Returns the descriptor. None: by device id (DevHandle 0xFFFF). Out of line and cold: LD
    /// requests never come here.
    #[cold]
    #[inline(never)]
    fn jbod_frame(&self, img: &mut FrameImage, device: u8, msix: u8, smid: u16) -> Option<u64> {
        let r = self.jbod.route(device)?;
        let c = F_RAID_CTX;
        img.set_u16(F_DEV_HANDLE, r.handle);
        if self.jbod.by_raid_map() {
            // Linux without a JBOD map: only the handle changes; the RAID context keeps the
            // device id as target and no sequence number.
            self.jbod.raid_map_ios.fetch_add(1, Ordering::Relaxed);
            return Some(desc_with_handle(regs::DESC_FP_IO, msix, smid, r.handle));
        }
        let named = if self.mistake(Mistake::JbodTargetNotOffset) {
            u16::from(device)
        } else {
            u16::from(device) + super::jbodmap::JBOD_TARGET_OFFSET
        };
        img.set_u16(c + 0x06, named);
        img.set_u16(c + CTX_SEQ_NUM, r.seq);
        if self.generation.g35_raid_context() {
            img.set_u16(c, 0x0012); // nseg 1, type CUDA
            img.set_u16(c + 0x04, ROUTING_SQN);
        } else {
            img.set_u8(c, 0x12); // type CUDA, nseg 1
            img.set_u8(c + 0x04, 0x88); // SEQ_NUM_ENABLE | GRANT_DESTINATION_CUDA
        }
        self.jbod.ios.fetch_add(1, Ordering::Relaxed);
        Some(desc_with_handle(regs::DESC_FP_IO, msix, smid, r.handle))
    }

    /// The RAID-1 read `r` (the data arm's route) sent to the arm the read balance picks, and
    /// counted outstanding there on SMID `smid`. A SMID outside the pool (a test hook's) or an
    /// LD the balance cannot keep reads the data arm uncounted.
    fn mirror_arm(&self, ld: &FastPathLd, r: FastPathRoute, blocks: u32, smid: u16) -> FastPathRoute {
        let picked = self.smids.get(usize::from(smid)).and_then(|state| {
            let (arm, pd) = self.mirror_load.pick(ld, r.pd_lba, blocks)?;
            match ld.mirror_route(r, arm) {
                Some(route) => {
                    state.mirror_pd.store(pd + 1, Ordering::Relaxed);
                    Some((arm, route))
                }
                None => {
                    self.mirror_load.done(pd);
                    None
                }
            }
        });
        let (arm, route) = picked.unwrap_or((0, r));
        self.stats.raid1_reads[arm].fetch_add(1, Ordering::Relaxed);
        route
    }

    /// Takes back the RAID-1 read count of the request on `state`, if it has one (its reply
    /// came, or a reset hands it back): exactly once, whoever gets there first.
    #[cold]
    pub(super) fn mirror_read_done(&self, state: &SmidState) {
        let pd = state.mirror_pd.swap(0, Ordering::Relaxed);
        if pd != 0 {
            self.mirror_load.done(pd - 1);
        }
    }

    /// RAID-1 FastPath reads sent to PD `pd` and not yet handed back.
    pub fn raid1_reads_outstanding(&self, pd: u16) -> u32 {
        self.mirror_load.pending(pd)
    }

    /// Writes the SGL into the frame at `fo` (its 8 slots zeroed first, so no SGE of the
    /// SMID's previous use survives) and the chain frame; sets the image's ChainOffset.
    /// Writes the SGL into the frame at `fo` and the chain frame, and the image's ChainOffset.
    /// Slots that the SMID's previous use wrote and this one does not are zeroed, so no SGE of
    /// an earlier request survives (Linux zeroes the whole frame at free); a run of
    /// single-segment requests zeroes nothing.
    #[inline(always)]
    fn write_sgl(&self, img: &mut FrameImage, fo: usize, smid: u16, state: &SmidState, segs: &[Segment]) -> usize {
        let f = &self.mem.frames;
        let set_sge = |slot: usize, addr: u64, len: u32, flags: u8| {
            f.write_u32s(fo + F_SGL + SGE_SIZE * slot, &sge_words(addr, len, flags));
        };
        let g = self.generation;
        let eol = g.end_of_list_flag();
        let n = segs.len();
        let flag_for = |i: usize| -> u8 {
            let mut fl = 0;
            if eol && i + 1 == n && !self.mistake(Mistake::MissingEndOfList) {
                fl |= SGE_END_OF_LIST;
            }
            if eol && i == 0 && n > 1 && self.mistake(Mistake::EarlyEndOfList) {
                fl |= SGE_END_OF_LIST;
            }
            fl
        };
        let addr_for = |i: usize, s: &Segment| -> u64 {
            if i == 0 && self.mistake(Mistake::AllOnesAddress) {
                u64::MAX
            } else {
                s.phys
            }
        };
        let len_for = |i: usize, s: &Segment| -> u32 {
            if i == 0 && self.mistake(Mistake::SglSumWrong) {
                s.len - 1
            } else {
                s.len
            }
        };
        let mut chain_offset = 0u8;
        // SGL slots this request writes.
        let mut used = n;
        if n <= 8 {
            for (i, s) in segs.iter().enumerate() {
                set_sge(i, addr_for(i, s), len_for(i, s), flag_for(i));
            }
            if self.mistake(Mistake::ChainOffsetWithoutChain) {
                chain_offset = 0x0F;
            }
        } else {
            let main = if self.mistake(Mistake::ChainNotInSlot7) { 6 } else { 7 };
            for (i, s) in segs.iter().take(main).enumerate() {
                set_sge(i, addr_for(i, s), len_for(i, s), flag_for(i));
            }
            let chain_off = self.mem.chain_stride * (usize::from(smid) - 1);
            let chain_phys = self.mem.chains.phys() + chain_off as u64;
            let rest = n - main;
            let chain_len = if self.mistake(Mistake::ChainLengthWrong) {
                16 * rest as u32 + 16
            } else {
                16 * rest as u32
            };
            set_sge(main, chain_phys, chain_len, g.chain_flags());
            for (j, s) in segs.iter().enumerate().skip(main) {
                let mut fl = flag_for(j);
                if j == main && self.mistake(Mistake::NestedChain) {
                    fl |= SGE_CHAIN;
                }
                self.mem.chains.write_bytes(
                    chain_off + 16 * (j - main),
                    &sge_bytes(addr_for(j, s), len_for(j, s), fl),
                );
            }
            chain_offset = 0x0F;
            used = main + 1;
        }
        let previously = usize::from(state.sgl_slots.load(Ordering::Relaxed));
        for slot in used..previously {
            f.write_u32s(fo + F_SGL + SGE_SIZE * slot, &[0; SGE_SIZE / 4]);
        }
        state.sgl_slots.store(used as u8, Ordering::Relaxed);
        if self.mistake(Mistake::BadChainOffset) {
            chain_offset = 0x10;
        }
        img.set_u8(F_CHAIN_OFFSET, chain_offset);
        n
    }

    fn write_raid_context(&self, img: &mut FrameImage, target: u8, nsge: usize, is_rw: bool) {
        let is_rw = is_rw || self.mistake(Mistake::RwContextOnNonRw);
        let c = F_RAID_CTX;
        let nsge = if self.mistake(Mistake::NumSgeWrong) {
            nsge + 1
        } else {
            nsge
        } as u16;
        // Type/nseg and the sequence number belong to LD read/write only; Linux and FreeBSD
        // leave them zero for every other LD command.
        if self.generation.g35_raid_context() {
            if is_rw {
                img.set_u16(c, 0x0012);
                img.set_u16(c + 0x04, ROUTING_SQN);
            }
            img.set_u16(c + 0x06, u16::from(target));
            img.set_u16(c + 0x1C, nsge & 0x0FFF);
        } else {
            if self.generation == Generation::Invader && is_rw {
                img.set_u8(c, 0x12);
                img.set_u8(c + 0x04, 0x08); // region type 0 | SEQ_NUM_ENABLE
            }
            img.set_u16(c + 0x06, u16::from(target));
            img.set_u8(c + 0x19, nsge as u8);
            img.set_u8(c + 0x1E, (nsge >> 8) as u8);
        }
        if !is_rw {
            // Linux gives the block-layer timeout (90 s by default).
            img.set_u16(c + 0x02, 90);
        }
    }

    #[inline(always)]
    pub(super) fn post_descriptor(&self, d: u64) {
        // The two-register mistakes (tests of the model's latch checks).
        if self.mistake(Mistake::HighWithoutLow) {
            self.mmio.write32(regs::REQ_DESC_HIGH, (d >> 32) as u32);
            return;
        }
        if self.mistake(Mistake::LowTwice) {
            self.mmio.write32(regs::REQ_DESC_LOW, d as u32);
            self.mmio.write32(regs::REQ_DESC_LOW, d as u32);
            self.mmio.write32(regs::REQ_DESC_HIGH, (d >> 32) as u32);
            return;
        }
        if self.atomic_port.load(Ordering::Relaxed) {
            // One 32-bit store carries flags, MSIxIndex and SMID.
            self.mmio.write32(regs::REQ_DESC_ATOMIC, d as u32);
        } else {
            // One 8-byte write (Linux's `writeq`): nothing for another CPU's post to split, so
            // no lock (the two-dword form needs one: FreeBSD's and 32-bit Linux's `hba_lock`).
            self.mmio.write64(regs::REQ_DESC_LOW, d);
        }
    }
}

/// A RAID-1 write of `blocks` 512-byte blocks is large: over Linux's `MR_LARGE_IO_MIN_SIZE`.
fn large_write(blocks: u32) -> bool {
    u64::from(blocks) * 512 > u64::from(super::R1_LARGE_WRITE_BYTES)
}

/// CDB length from the operation code's group (SPC): 6, 10, 12 or 16 bytes.
fn cdb_len(opcode: u8) -> u8 {
    match opcode >> 5 {
        0 => 6,
        1 | 2 => 10,
        5 => 12,
        _ => 16,
    }
}
