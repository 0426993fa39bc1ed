//! Completion status decoding (NVMe base specification 1.4): SCT, SC, CRD, More, DNR, and what it means for the
//! block layer.

use core::fmt;

/// A completion's status field (CQE DW3 bits 31:17), decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmeStatus(pub u16);

/// What a status means, for the driver's decisions and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusKind {
    /// Successful completion.
    Success,
    /// Invalid command opcode (00/01h).
    InvalidOpcode,
    /// Invalid field in command (00/02h).
    InvalidField,
    /// Command ID conflict (00/03h).
    CidConflict,
    /// Data transfer error (00/04h).
    DataTransfer,
    /// Commands aborted due to power loss notification (00/05h).
    PowerLoss,
    /// Internal error (00/06h).
    Internal,
    /// Command abort requested (00/07h): the answer to an Abort that worked.
    AbortRequested,
    /// Command aborted due to SQ deletion (00/08h).
    AbortedSqDeleted,
    /// Invalid namespace or format (00/0Bh).
    InvalidNamespace,
    /// Command sequence error (00/0Ch).
    CommandSequence,
    /// PRP offset invalid (00/13h).
    PrpOffsetInvalid,
    /// LBA out of range (00/80h).
    LbaOutOfRange,
    /// Capacity exceeded (00/81h).
    CapacityExceeded,
    /// Namespace not ready (00/82h).
    NamespaceNotReady,
    /// A command-specific status (SCT 1): queue creation errors, abort limit, features ...
    CommandSpecific(u8),
    /// Write fault (02/80h).
    WriteFault,
    /// Unrecovered read error (02/81h).
    UnrecoveredRead,
    /// End-to-end guard/application/reference tag check error (02/82h-84h).
    EndToEnd,
    /// Compare failure (02/85h).
    CompareFailure,
    /// Access denied (02/86h).
    AccessDenied,
    /// Another media or data integrity error (SCT 2).
    Media(u8),
    /// Path related status (SCT 3).
    Path(u8),
    /// Vendor specific (SCT 7) or reserved types.
    Other {
        /// Status code type.
        sct: u8,
        /// Status code.
        sc: u8,
    },
}

impl NvmeStatus {
    /// Success.
    pub const SUCCESS: Self = Self(0);

    /// From the raw dword 3 of a CQE.
    pub fn from_dw3(dw3: u32) -> Self {
        Self((dw3 >> 17) as u16)
    }
    /// Status code.
    pub fn sc(self) -> u8 {
        self.0 as u8
    }
    /// Status code type.
    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }
    /// Command retry delay index (0: retry at once).
    pub fn crd(self) -> u8 {
        ((self.0 >> 11) & 3) as u8
    }
    /// More: further information in the Error Information log page.
    pub fn more(self) -> bool {
        self.0 & (1 << 13) != 0
    }
    /// Do Not Retry.
    pub fn dnr(self) -> bool {
        self.0 & (1 << 14) != 0
    }
    /// Whether the command succeeded (SCT 0, SC 0; CRD/M/DNR ignored): one mask test of the
    /// two fields, not two shifts, two masks and two compares.
    #[inline]
    pub fn is_success(self) -> bool {
        self.0 & 0x7FF == 0
    }
    /// Whether the command may succeed if retried (an error without DNR).
    pub fn retryable(self) -> bool {
        !self.is_success() && !self.dnr()
    }

    /// The meaning.
    pub fn kind(self) -> StatusKind {
        use StatusKind as K;
        match (self.sct(), self.sc()) {
            (0, 0x00) => K::Success,
            (0, 0x01) => K::InvalidOpcode,
            (0, 0x02) => K::InvalidField,
            (0, 0x03) => K::CidConflict,
            (0, 0x04) => K::DataTransfer,
            (0, 0x05) => K::PowerLoss,
            (0, 0x06) => K::Internal,
            (0, 0x07) => K::AbortRequested,
            (0, 0x08) => K::AbortedSqDeleted,
            (0, 0x0B) => K::InvalidNamespace,
            (0, 0x0C) => K::CommandSequence,
            (0, 0x13) => K::PrpOffsetInvalid,
            (0, 0x80) => K::LbaOutOfRange,
            (0, 0x81) => K::CapacityExceeded,
            (0, 0x82) => K::NamespaceNotReady,
            (1, sc) => K::CommandSpecific(sc),
            (2, 0x80) => K::WriteFault,
            (2, 0x81) => K::UnrecoveredRead,
            (2, 0x82..=0x84) => K::EndToEnd,
            (2, 0x85) => K::CompareFailure,
            (2, 0x86) => K::AccessDenied,
            (2, sc) => K::Media(sc),
            (3, sc) => K::Path(sc),
            (sct, sc) => K::Other { sct, sc },
        }
    }

    /// The block layer's status for this completion.
    pub fn to_blk(self) -> blk::Status {
        if self.is_success() {
            // Every I/O that succeeds: two compares, not the full decode.
            return blk::Status::Ok;
        }
        match self.kind() {
            StatusKind::Success => blk::Status::Ok,
            StatusKind::InvalidOpcode => blk::Status::NotSupported,
            StatusKind::AbortRequested | StatusKind::AbortedSqDeleted | StatusKind::PowerLoss => blk::Status::Aborted,
            _ => blk::Status::IoError,
        }
    }

    fn describe(self) -> &'static str {
        use StatusKind as K;
        match self.kind() {
            K::Success => "success",
            K::InvalidOpcode => "invalid opcode",
            K::InvalidField => "invalid field in command",
            K::CidConflict => "command id conflict",
            K::DataTransfer => "data transfer error",
            K::PowerLoss => "aborted: power loss notification",
            K::Internal => "internal error",
            K::AbortRequested => "aborted as requested",
            K::AbortedSqDeleted => "aborted: SQ deleted",
            K::InvalidNamespace => "invalid namespace or format",
            K::CommandSequence => "command sequence error",
            K::PrpOffsetInvalid => "PRP offset invalid",
            K::LbaOutOfRange => "LBA out of range",
            K::CapacityExceeded => "capacity exceeded",
            K::NamespaceNotReady => "namespace not ready",
            K::CommandSpecific(0x00) => "completion queue invalid",
            K::CommandSpecific(0x01) => "invalid queue identifier",
            K::CommandSpecific(0x02) => "invalid queue size",
            K::CommandSpecific(0x03) => "abort command limit exceeded",
            K::CommandSpecific(0x08) => "invalid interrupt vector",
            K::CommandSpecific(0x0C) => "invalid queue deletion",
            K::CommandSpecific(0x0D) => "feature identifier not saveable",
            K::CommandSpecific(0x0E) => "feature not changeable",
            K::CommandSpecific(_) => "command specific error",
            K::WriteFault => "write fault",
            K::UnrecoveredRead => "unrecovered read error",
            K::EndToEnd => "end-to-end protection check error",
            K::CompareFailure => "compare failure",
            K::AccessDenied => "access denied",
            K::Media(_) => "media or data integrity error",
            K::Path(_) => "path error",
            K::Other { .. } => "vendor specific or reserved status",
        }
    }
}

impl fmt::Display for NvmeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "status {:#06x} (SCT {} SC {:#04x}{}{}: {})",
            self.0,
            self.sct(),
            self.sc(),
            if self.dnr() { ", DNR" } else { "" },
            if self.more() { ", M" } else { "" },
            self.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn success_is_sct_0_and_sc_0_whatever_crd_more_and_dnr_hold() {
        for raw in 0..=u16::MAX {
            let s = NvmeStatus(raw);
            assert_eq!(s.is_success(), s.sct() == 0 && s.sc() == 0, "status {raw:#06x}");
            assert_eq!(s.is_success(), s.kind() == StatusKind::Success, "status {raw:#06x}");
        }
    }

    #[test]
    fn qemu_statuses_decode() {
        let media = NvmeStatus(0x0281);
        assert_eq!(media.kind(), StatusKind::UnrecoveredRead);
        assert!(!media.dnr());
        assert!(media.retryable());
        assert_eq!(media.to_blk(), blk::Status::IoError);
        let range = NvmeStatus(0x4080);
        assert_eq!(range.kind(), StatusKind::LbaOutOfRange);
        assert!(range.dnr() && !range.retryable());
        assert_eq!(NvmeStatus(0x4002).kind(), StatusKind::InvalidField);
        assert_eq!(NvmeStatus(0x4013).kind(), StatusKind::PrpOffsetInvalid);
        assert_eq!(NvmeStatus(0x4108).kind(), StatusKind::CommandSpecific(8));
        assert_eq!(NvmeStatus(0x0280).kind(), StatusKind::WriteFault);
        assert_eq!(NvmeStatus(0x4001).to_blk(), blk::Status::NotSupported);
        assert_eq!(NvmeStatus(0x0007).to_blk(), blk::Status::Aborted);
        let m = NvmeStatus(0x6281);
        assert!(m.more() && m.dnr());
        assert_eq!(m.crd(), 0);
        assert_eq!(NvmeStatus(0x1806).crd(), 3);
        assert!(NvmeStatus(0x4000).is_success());
        assert_eq!(
            range.to_string(),
            "status 0x4080 (SCT 0 SC 0x80, DNR: LBA out of range)"
        );
        assert_eq!(NvmeStatus::from_dw3(0x4281 << 17 | 1 << 16 | 5), NvmeStatus(0x4281));
    }
}
