//! MFI frame layouts (QEMU 7.2's `hw/scsi/mfi.h`) and the builders that fill a frame in DMA memory.

use devhal::DmaBuf;

/// Frame command: INIT.
pub(crate) const CMD_INIT: u8 = 0x00;
/// Frame command: logical-drive read.
pub(crate) const CMD_LD_READ: u8 = 0x01;
/// Frame command: logical-drive write.
pub(crate) const CMD_LD_WRITE: u8 = 0x02;
/// Frame command: SCSI pass-through to a logical drive.
pub(crate) const CMD_LD_SCSI_IO: u8 = 0x03;
/// Frame command: SCSI pass-through to a physical device (system PD / JBOD disk).
pub(crate) const CMD_PD_SCSI_IO: u8 = 0x04;
/// Frame command: direct command (DCMD).
pub(crate) const CMD_DCMD: u8 = 0x05;
/// ABORT: context to abort at 0x18 (u64), its frame's bus address at 0x20 (u64).
pub(crate) const CMD_ABORT: u8 = 0x06;

/// Header offsets.
pub(crate) const OFF_CMD_STATUS: usize = 0x02;
pub(crate) const OFF_SENSE_LEN: usize = 0x01;
pub(crate) const OFF_SCSI_STATUS: usize = 0x03;
/// Size of the common header.
const HEADER_LEN: usize = 0x18;

/// Flag: do not post the completion to the reply queue (honoured by real firmware, ignored by QEMU).
pub(crate) const FLAG_DONT_POST: u16 = 0x0001;
/// Flag: SGL uses 64-bit elements.
pub(crate) const FLAG_SGL64: u16 = 0x0002;
/// Flag: the sense address is 64-bit.
pub(crate) const FLAG_SENSE64: u16 = 0x0004;
/// Flag: data flows host to device.
pub(crate) const FLAG_DIR_WRITE: u16 = 0x0008;
/// Flag: data flows device to host.
pub(crate) const FLAG_DIR_READ: u16 = 0x0010;

/// Size of one 64-bit SGE (packed: u64 address, u32 length).
pub(crate) const SGE64_LEN: usize = 12;
/// SGL offset in LD READ/WRITE frames and in DCMD frames.
pub(crate) const IO_SGL: usize = 0x28;
/// SGL offset in pass-through frames.
pub(crate) const PASS_SGL: usize = 0x30;
/// Bytes from the frame start that QEMU maps for the SGL (its 2 KiB window).
pub(crate) const QEMU_SGL_WINDOW: usize = 2048;
/// QEMU accepts at most this many SGEs per frame.
pub(crate) const QEMU_MAX_SGE: usize = 128;

/// DCMD opcode: controller information (2048-byte buffer).
pub(crate) const DCMD_CTRL_GET_INFO: u32 = 0x0101_0000;
/// DCMD opcode: logical drive list (buffer at most 1032 bytes on QEMU).
pub(crate) const DCMD_LD_GET_LIST: u32 = 0x0301_0000;
/// DCMD opcode: PD list query; mailbox byte 0 selects which PDs ([`PD_QUERY_EXPOSED_TO_HOST`]).
pub(crate) const DCMD_PD_LIST_QUERY: u32 = 0x0201_0100;
/// PD_LIST_QUERY mailbox byte 0: the PDs exposed to the host (system PDs, JBOD), as Linux asks.
pub(crate) const PD_QUERY_EXPOSED_TO_HOST: u8 = 5;
/// DCMD opcode: logical drive information (384 bytes).
pub(crate) const DCMD_LD_GET_INFO: u32 = 0x0302_0000;
/// DCMD opcode: flush caches (no data; mailbox byte 0 says which, [`FLUSH_CTRL_AND_DISK_CACHES`]).
/// On QEMU it only drains in-flight I/O.
pub(crate) const DCMD_CTRL_CACHE_FLUSH: u32 = 0x0110_1000;
/// DCMD opcode: shut the firmware down before power-off (no data; the firmware goes to READY).
pub(crate) const DCMD_CTRL_SHUTDOWN: u32 = 0x0105_0000;
/// CTRL_CACHE_FLUSH mailbox byte 0: the controller's cache and the disks' caches.
pub(crate) const FLUSH_CTRL_AND_DISK_CACHES: u8 = 0x03;

/// Queue-info block layout (32 bytes).
pub(crate) const QINFO_LEN: usize = 32;

/// One scatter-gather element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Bus address.
    pub phys: u64,
    /// Length in bytes.
    pub len: u32,
}

/// Fields of the common header that vary per command.
pub(crate) struct Header {
    pub cmd: u8,
    pub sense_len: u8,
    pub target: u8,
    pub cdb_len: u8,
    pub sge_count: u8,
    pub context: u32,
    pub flags: u16,
    pub data_len: u32,
}

impl Header {
    /// The 24-byte header as six little-endian words; `cmd_status` is the pending marker 0xFF,
    /// `lun` 0 (a non-zero byte 5 makes QEMU answer DEVICE_NOT_FOUND on LD I/O). Shifts,
    /// not `from_le_bytes` of single bytes (which go through the stack).
    #[inline(always)]
    fn words(&self) -> [u32; HEADER_LEN / 4] {
        [
            // cmd, sense_len, cmd_status 0xFF, reserved.
            u32::from(self.cmd) | u32::from(self.sense_len) << 8 | 0xFF << 16,
            // target, lun 0, cdb_len, sge_count.
            u32::from(self.target) | u32::from(self.cdb_len) << 16 | u32::from(self.sge_count) << 24,
            // Contexts are 32-bit: without CONTEXT64 QEMU drops the high word.
            self.context,
            0,
            u32::from(self.flags),
            self.data_len,
        ]
    }
}

/// A frame being filled: the frame pool plus the frame's offset in it.
pub(crate) struct FrameWriter<'a> {
    pub buf: &'a DmaBuf,
    pub base: usize,
}

impl FrameWriter<'_> {
    /// Writes the 24-byte header. `cmd_status` is set to the pending marker 0xFF; `lun` is 0 (a
    /// non-zero byte 5 makes QEMU answer DEVICE_NOT_FOUND on LD I/O).
    pub fn header(&self, h: &Header) {
        // As six little-endian words, so the frame (256-byte aligned) gets three 8-byte stores
        // (per-I/O work).
        self.buf.write_u32s(self.base, &h.words());
    }

    /// Writes a whole LD READ/WRITE frame of one segment: header, sense address, LBA and the
    /// one 64-bit SGE, as seven 8-byte stores in one bounds-checked run (not a header, two
    /// `u64_at` and an `sgl64` call, each with its own checks). The last store carries the
    /// SGE's 32-bit length and four zero bytes after it: still inside the frame's first 64
    /// bytes, past the one SGE that `sge_count` tells the device to read. (Storing the length alone costs its own bounds check: 180 instructions
    /// per submission against 159.)
    #[inline]
    pub fn ld_io_one_segment(&self, h: &Header, sense: u64, lba: u64, segment: &Segment) {
        let [w0, w1, w2, w3, w4, w5] = h.words().map(u64::from);
        self.buf.write_u64s(
            self.base,
            [
                w0 | w1 << 32,
                w2 | w3 << 32,
                w4 | w5 << 32,
                sense,
                lba,
                segment.phys,
                u64::from(segment.len),
            ],
        );
    }

    /// Writes a u32 at `off` within the frame.
    pub fn u32_at(&self, off: usize, v: u32) {
        self.buf.write_u32(self.base + off, v);
    }

    /// Writes a u64 as two little-endian words at `off` within the frame.
    pub fn u64_at(&self, off: usize, v: u64) {
        self.buf.write_u64(self.base + off, v);
    }

    /// Writes raw bytes at `off` within the frame.
    pub fn bytes_at(&self, off: usize, bytes: &[u8]) {
        self.buf.write_bytes(self.base + off, bytes);
    }

    /// Writes 64-bit SGEs starting at `off` within the frame.
    pub fn sgl64(&self, off: usize, sgl: &[Segment]) {
        for (i, s) in sgl.iter().enumerate() {
            let at = self.base + off + i * SGE64_LEN;
            self.buf.write_u64(at, s.phys);
            self.buf.write_u32(at + 8, s.len);
        }
    }
}

/// READ CAPACITY(16) CDB with a 32-byte allocation length.
pub(crate) fn cdb_read_capacity16() -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x9E;
    c[1] = 0x10;
    c[10..14].copy_from_slice(&32u32.to_be_bytes());
    c
}

/// READ(16) (0x88) or WRITE(16) (0x8A) of `blocks` blocks at `lba`.
pub(crate) fn cdb_rw16(opcode: u8, lba: u64, blocks: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// SYNCHRONIZE CACHE(10) of the whole drive. QEMU does not support the 16-byte form.
pub(crate) fn cdb_synchronize_cache10() -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x35;
    c
}

#[cfg(all(test, feature = "fake"))]
mod tests {
    use super::*;
    use devhal::fake::FakeMemory;

    fn header(sge_count: u8) -> Header {
        Header {
            cmd: CMD_LD_READ,
            sense_len: 64,
            target: 3,
            cdb_len: 16,
            sge_count,
            context: 0x1234_5678,
            flags: FLAG_SGL64 | FLAG_SENSE64 | FLAG_DIR_READ,
            data_len: 8,
        }
    }

    /// The one-run LD frame writes exactly the bytes of the field-by-field builders, zeroes the
    /// four bytes after its single SGE (the last 8-byte store) and writes nothing past them.
    #[test]
    fn one_segment_ld_frame_matches_the_field_builders() {
        let mem = FakeMemory::new(0x10_0000);
        let buf = DmaBuf::alloc(&mem.dma(), 1024, 256).unwrap();
        let segment = Segment {
            phys: 0x1_2345_6000,
            len: 4096,
        };
        let (sense, lba) = (0xAB_CDEF_0040, 0x0123_4567_89AB_CDEF);
        let general = FrameWriter { buf: &buf, base: 0 };
        general.header(&header(1));
        general.u64_at(0x18, sense);
        general.u64_at(0x20, lba);
        general.sgl64(IO_SGL, &[segment]);
        let one_run = FrameWriter { buf: &buf, base: 512 };
        buf.fill(512, 512, 0xEE);
        one_run.ld_io_one_segment(&header(1), sense, lba, &segment);
        let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
        buf.read_bytes(0, &mut a);
        buf.read_bytes(512, &mut b);
        let end = IO_SGL + SGE64_LEN;
        assert_eq!(a[..end], b[..end]);
        assert_eq!(b[2], 0xFF, "status byte is the pending marker");
        assert_eq!(b[end..end + 4], [0; 4], "the last store's high half");
        assert!(
            b[end + 4..].iter().all(|&x| x == 0xEE),
            "wrote past the SGE's 8-byte store: {:x?}",
            &b[end + 4..]
        );
    }
}
