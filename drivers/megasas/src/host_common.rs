//! The logical-drive request the MFI host ([`crate::blkdev`]) and the Fusion host
//! (`megasas_fusion::blkdev`) hand their controller ([`IoRequest`]). What every driver's host
//! shares (the cookie, one queue per drive, the reap's batch) is `drvkit::drive_queue`.

use crate::frame::Segment;

/// I/O operation of a logical-drive request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// READ of `blocks` blocks at `lba` into the segments.
    Read,
    /// WRITE of `blocks` blocks at `lba` from the segments.
    Write,
    /// SYNCHRONIZE CACHE of the whole drive (MFI sends the 10-byte CDB, Fusion the 16-byte
    /// one); `lba`, `blocks` and `sgl` must be 0 / empty.
    Flush,
}

/// One logical-drive or system-PD I/O request.
#[derive(Clone, Copy, Debug)]
pub struct IoRequest<'a> {
    /// Operation.
    pub op: IoOp,
    /// Logical drive target id, or with `system_pd` the system PD's (JBOD disk's) target:
    /// MFI its SCSI id (device id >> 8, LUN 0), Fusion its firmware device id.
    pub target: u8,
    /// The request is for a system PD (a JBOD disk exposed to the host), not a logical drive.
    pub system_pd: bool,
    /// First logical block (in the drive's block size).
    pub lba: u64,
    /// Number of logical blocks.
    pub blocks: u32,
    /// Data buffers; their lengths must add up to `blocks * block_size`.
    pub sgl: &'a [Segment],
}
