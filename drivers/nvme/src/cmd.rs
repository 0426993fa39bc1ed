//! Submission and completion queue entries, and the commands the driver builds (NVMe base specification 1.4).

/// Admin opcodes.
pub mod admin {
    /// Delete I/O Submission Queue.
    pub const DELETE_SQ: u8 = 0x00;
    /// Create I/O Submission Queue.
    pub const CREATE_SQ: u8 = 0x01;
    /// Delete I/O Completion Queue.
    pub const DELETE_CQ: u8 = 0x04;
    /// Create I/O Completion Queue.
    pub const CREATE_CQ: u8 = 0x05;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
}

/// NVM (I/O) opcodes.
pub mod io {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Dataset Management (deallocate: discard/trim).
    pub const DATASET_MANAGEMENT: u8 = 0x09;
}

/// Dataset Management CDW11 bit 2: Attribute - Deallocate (AD).
pub const DSM_ATTRIBUTE_DEALLOCATE: u32 = 1 << 2;

/// One 16-byte Dataset Management range as the two little-endian u64 words of the range list:
/// context attributes (0) and the length in logical blocks, then the starting LBA.
pub fn dsm_range(slba: u64, blocks: u32) -> [u64; 2] {
    [u64::from(blocks) << 32, slba]
}

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace.
    pub const NAMESPACE: u32 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u32 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u32 = 0x02;
}

/// Feature identifier: Number of Queues.
pub const FEATURE_NUMBER_OF_QUEUES: u32 = 0x07;

/// A 64-byte submission queue entry as 16 dwords.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe(pub [u32; 16]);

impl Sqe {
    /// An entry with opcode `opcode`, command id `cid` and namespace `nsid` (PSDT = 0: PRPs).
    pub fn new(opcode: u8, cid: u16, nsid: u32) -> Self {
        let mut dw = [0u32; 16];
        dw[0] = u32::from(opcode) | u32::from(cid) << 16;
        dw[1] = nsid;
        Self(dw)
    }
    /// Opcode.
    pub fn opcode(&self) -> u8 {
        self.0[0] as u8
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        (self.0[0] >> 16) as u16
    }
    /// Replaces the command identifier.
    pub fn set_cid(&mut self, cid: u16) {
        self.0[0] = (self.0[0] & 0xFFFF) | u32::from(cid) << 16;
    }
    /// Namespace id.
    pub fn nsid(&self) -> u32 {
        self.0[1]
    }
    /// PRP entry 1.
    pub fn prp1(&self) -> u64 {
        u64::from(self.0[6]) | u64::from(self.0[7]) << 32
    }
    /// PRP entry 2.
    pub fn prp2(&self) -> u64 {
        u64::from(self.0[8]) | u64::from(self.0[9]) << 32
    }
    /// Sets both PRP entries.
    pub fn set_prps(&mut self, prp1: u64, prp2: u64) {
        self.0[6] = prp1 as u32;
        self.0[7] = (prp1 >> 32) as u32;
        self.0[8] = prp2 as u32;
        self.0[9] = (prp2 >> 32) as u32;
    }
    /// Command dword `n` (10..=15).
    pub fn cdw(&self, n: usize) -> u32 {
        self.0[n]
    }
    /// The entry as little-endian bytes.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        for (i, d) in self.0.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&d.to_le_bytes());
        }
        b
    }
    /// An entry from little-endian bytes.
    pub fn from_bytes(b: &[u8; 64]) -> Self {
        let mut dw = [0u32; 16];
        for (i, d) in dw.iter_mut().enumerate() {
            *d = u32::from_le_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]]);
        }
        Self(dw)
    }

    /// Identify with `cns` into the page at `prp1` (for namespace `nsid` where CNS needs one).
    pub fn identify(cid: u16, cns: u32, nsid: u32, prp1: u64) -> Self {
        let mut s = Self::new(admin::IDENTIFY, cid, nsid);
        s.set_prps(prp1, 0);
        s.0[10] = cns;
        s
    }

    /// Set Features Number of Queues, asking for `sq` submission and `cq` completion queues.
    pub fn set_number_of_queues(cid: u16, sq: u16, cq: u16) -> Self {
        let mut s = Self::new(admin::SET_FEATURES, cid, 0);
        s.0[10] = FEATURE_NUMBER_OF_QUEUES;
        s.0[11] = u32::from(cq - 1) << 16 | u32::from(sq - 1);
        s
    }

    /// Create I/O Completion Queue `qid` of `entries` entries at `base` (physically contiguous),
    /// interrupt vector `iv`, interrupts enabled when `ien`.
    pub fn create_cq(cid: u16, qid: u16, entries: u32, base: u64, iv: u16, ien: bool) -> Self {
        let mut s = Self::new(admin::CREATE_CQ, cid, 0);
        s.set_prps(base, 0);
        s.0[10] = (entries - 1) << 16 | u32::from(qid);
        s.0[11] = u32::from(iv) << 16 | u32::from(ien) << 1 | 1;
        s
    }

    /// Create I/O Submission Queue `qid` of `entries` entries at `base`, bound to CQ `cqid`.
    pub fn create_sq(cid: u16, qid: u16, entries: u32, base: u64, cqid: u16) -> Self {
        let mut s = Self::new(admin::CREATE_SQ, cid, 0);
        s.set_prps(base, 0);
        s.0[10] = (entries - 1) << 16 | u32::from(qid);
        s.0[11] = u32::from(cqid) << 16 | 1;
        s
    }

    /// Abort command `target_cid` on submission queue `sqid`.
    pub fn abort(cid: u16, sqid: u16, target_cid: u16) -> Self {
        let mut s = Self::new(admin::ABORT, cid, 0);
        s.0[10] = u32::from(target_cid) << 16 | u32::from(sqid);
        s
    }

    /// Read or Write of `blocks` logical blocks at `slba` (PRPs set separately).
    pub fn read_write(write: bool, cid: u16, nsid: u32, slba: u64, blocks: u32) -> Self {
        let mut s = Self::new(if write { io::WRITE } else { io::READ }, cid, nsid);
        s.0[10] = slba as u32;
        s.0[11] = (slba >> 32) as u32;
        s.0[12] = (blocks - 1) & 0xFFFF;
        s
    }

    /// Dataset Management with the Deallocate attribute over the one range (see [`dsm_range`])
    /// in the list at `list_phys` (PRP1).
    pub fn deallocate(cid: u16, nsid: u32, list_phys: u64) -> Self {
        let mut s = Self::new(io::DATASET_MANAGEMENT, cid, nsid);
        s.set_prps(list_phys, 0);
        // NR is 0-based: one range.
        s.0[10] = 0;
        s.0[11] = DSM_ATTRIBUTE_DEALLOCATE;
        s
    }

    /// Flush of namespace `nsid`.
    pub fn flush(cid: u16, nsid: u32) -> Self {
        Self::new(io::FLUSH, cid, nsid)
    }
}

/// An I/O command as the I/O queues post it and keep it for an error retry: the dwords a
/// read, write, flush or Dataset Management command uses (CDW0 with the CID, NSID, PRP1, PRP2,
/// CDW10-11, CDW12); every other dword of the 64-byte entry is zero. 36 bytes kept per command
/// instead of a 64-byte copy, written to the ring from registers as eight 8-byte stores
/// ([`IoCmd::sqe_words`]), not built on the stack and copied twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCmd {
    /// CDW0 (opcode; CID in bits 16-31) and the NSID above it.
    cdw0_nsid: u64,
    prp1: u64,
    prp2: u64,
    /// CDW10 and CDW11 (a read or write's starting LBA).
    cdw10_11: u64,
    cdw12: u32,
}

impl IoCmd {
    fn new(opcode: u8, nsid: u32) -> Self {
        Self {
            cdw0_nsid: u64::from(opcode) | u64::from(nsid) << 32,
            ..Self::default()
        }
    }

    /// Read or Write of `blocks` logical blocks at `slba` (PRPs set separately; CID 0).
    pub fn read_write(write: bool, nsid: u32, slba: u64, blocks: u32) -> Self {
        Self {
            cdw10_11: slba,
            cdw12: (blocks - 1) & 0xFFFF,
            ..Self::new(if write { io::WRITE } else { io::READ }, nsid)
        }
    }

    /// Dataset Management with the Deallocate attribute over the one range (see [`dsm_range`])
    /// in the list at `list_phys` (PRP1; CID 0).
    pub fn deallocate(nsid: u32, list_phys: u64) -> Self {
        Self {
            prp1: list_phys,
            // NR is 0-based (one range) in CDW10; the attribute in CDW11.
            cdw10_11: u64::from(DSM_ATTRIBUTE_DEALLOCATE) << 32,
            ..Self::new(io::DATASET_MANAGEMENT, nsid)
        }
    }

    /// Flush of namespace `nsid` (CID 0).
    pub fn flush(nsid: u32) -> Self {
        Self::new(io::FLUSH, nsid)
    }

    /// Sets PRP1 and PRP2.
    pub fn set_prps(&mut self, prp1: u64, prp2: u64) {
        self.prp1 = prp1;
        self.prp2 = prp2;
    }

    /// Sets the command id.
    pub fn set_cid(&mut self, cid: u16) {
        self.cdw0_nsid = (self.cdw0_nsid & !0xFFFF_0000) | u64::from(cid) << 16;
    }

    /// Sets the command id of a command as its builder made it (CID 0): an OR, no mask.
    #[inline(always)]
    pub fn set_first_cid(&mut self, cid: u16) {
        debug_assert_eq!(self.cdw0_nsid & 0xFFFF_0000, 0, "a command posted once already");
        self.cdw0_nsid |= u64::from(cid) << 16;
    }

    /// The 64-byte entry as eight little-endian u64 words (CDW0 and NSID, CDW2-3, MPTR, PRP1,
    /// PRP2, CDW10-11, CDW12-13, CDW14-15).
    #[inline(always)]
    pub fn sqe_words(&self) -> [u64; 8] {
        [
            self.cdw0_nsid,
            0,
            0,
            self.prp1,
            self.prp2,
            self.cdw10_11,
            u64::from(self.cdw12),
            0,
        ]
    }

    /// The entry as an [`Sqe`].
    pub fn to_sqe(&self) -> Sqe {
        let w = self.sqe_words();
        Sqe(core::array::from_fn(|i| (w[i / 2] >> (32 * (i % 2))) as u32))
    }
}

/// A decoded 16-byte completion queue entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific result (DW0).
    pub result: u32,
    /// SQ head pointer the controller reports.
    pub sq_head: u16,
    /// Submission queue the command came from.
    pub sq_id: u16,
    /// Command identifier.
    pub cid: u16,
    /// Phase tag.
    pub phase: bool,
    /// Status field (DW3 bits 31:17): SC, SCT, CRD, M, DNR.
    pub status: u16,
}

impl Cqe {
    /// Decodes the four dwords of an entry.
    pub fn from_dwords(dw: [u32; 4]) -> Self {
        Self {
            result: dw[0],
            sq_head: dw[2] as u16,
            sq_id: (dw[2] >> 16) as u16,
            cid: dw[3] as u16,
            phase: dw[3] & (1 << 16) != 0,
            status: (dw[3] >> 17) as u16,
        }
    }
    /// Encodes the entry (the fake device writes these).
    pub fn to_dwords(&self) -> [u32; 4] {
        [
            self.result,
            0,
            u32::from(self.sq_head) | u32::from(self.sq_id) << 16,
            u32::from(self.cid) | u32::from(self.phase) << 16 | u32::from(self.status) << 17,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_cmd_is_the_entry_the_sqe_builders_make() {
        let (prp1, prp2) = (0xAAAA_BBBB_CCCC_D000, 0x1111_2222_3333_4000);
        for write in [false, true] {
            let mut c = IoCmd::read_write(write, 7, 0x1_0000_0002, 8);
            c.set_prps(prp1, prp2);
            let mut first = c;
            first.set_first_cid(0x1234);
            c.set_cid(0x1234);
            assert_eq!(first, c, "the first CID set without the mask is the same");
            let mut s = Sqe::read_write(write, 0x1234, 7, 0x1_0000_0002, 8);
            s.set_prps(prp1, prp2);
            assert_eq!(c.to_sqe(), s);
            c.set_cid(0xFEDC);
            s.set_cid(0xFEDC);
            assert_eq!(c.to_sqe(), s, "a new CID replaces the old one only");
        }
        let mut c = IoCmd::flush(3);
        c.set_cid(9);
        assert_eq!(c.to_sqe(), Sqe::flush(9, 3));
        let mut c = IoCmd::deallocate(2, 0x1234_5000);
        c.set_cid(0xFFFF);
        assert_eq!(c.to_sqe(), Sqe::deallocate(0xFFFF, 2, 0x1234_5000));
        let blocks_max = IoCmd::read_write(false, 1, u64::MAX, 0x1_0000);
        assert_eq!(blocks_max.to_sqe(), Sqe::read_write(false, 0, 1, u64::MAX, 0x1_0000));
    }

    #[test]
    fn sqe_fields_land_in_the_right_dwords() {
        let mut s = Sqe::read_write(true, 0x1234, 7, 0x1_0000_0002, 8);
        s.set_prps(0xAAAA_BBBB_CCCC_D000, 0x1111_2222_3333_4000);
        assert_eq!(s.0[0], 0x1234_0001);
        assert_eq!(s.0[1], 7);
        assert_eq!(s.0[6], 0xCCCC_D000);
        assert_eq!(s.0[7], 0xAAAA_BBBB);
        assert_eq!(s.0[9], 0x1111_2222);
        assert_eq!(s.0[10], 2);
        assert_eq!(s.0[11], 1);
        assert_eq!(s.0[12], 7);
        assert_eq!(Sqe::from_bytes(&s.to_bytes()), s);
        let cq = Sqe::create_cq(1, 3, 256, 0x10000, 3, true);
        assert_eq!(cq.0[10], 0x00FF_0003);
        assert_eq!(cq.0[11], 0x0003_0003);
        let polled = Sqe::create_cq(1, 3, 256, 0x10000, 0, false);
        assert_eq!(polled.0[11], 1);
        assert_eq!(Sqe::create_sq(1, 3, 2, 0x10000, 3).0[11], 0x0003_0001);
        assert_eq!(Sqe::set_number_of_queues(0, 4, 4).0[11], 0x0003_0003);
        assert_eq!(Sqe::abort(0, 2, 777).0[10], 777 << 16 | 2);
    }

    #[test]
    fn cqe_round_trips() {
        let c = Cqe {
            result: 1,
            sq_head: 5,
            sq_id: 2,
            cid: 0xBEEF,
            phase: true,
            status: 0x4281,
        };
        let dw = c.to_dwords();
        assert_eq!(dw[3] >> 17, 0x4281);
        assert_eq!(Cqe::from_dwords(dw), c);
    }
}
