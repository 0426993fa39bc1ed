//! MFI and SCSI completion statuses, sense decoding, and their mapping to I/O outcomes.

use core::fmt;

/// The MFI `cmd_status` byte the firmware writes into a completed frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MfiStatus(pub u8);

impl MfiStatus {
    /// Success.
    pub const OK: Self = Self(0x00);
    /// Unknown frame command.
    pub const INVALID_CMD: Self = Self(0x01);
    /// Bad DCMD opcode.
    pub const INVALID_DCMD: Self = Self(0x02);
    /// Bad DCMD buffer size, or INIT with too many reply entries.
    pub const INVALID_PARAMETER: Self = Self(0x03);
    /// ABORT frame whose context did not match.
    pub const ABORT_NOT_POSSIBLE: Self = Self(0x05);
    /// No such logical or physical drive.
    pub const DEVICE_NOT_FOUND: Self = Self(0x0C);
    /// LD still initialising.
    pub const LD_INIT_IN_PROGRESS: Self = Self(0x18);
    /// LBA beyond the logical drive (real firmware; QEMU uses sense instead).
    pub const LD_LBA_OUT_OF_RANGE: Self = Self(0x19);
    /// Too many SGEs for a DCMD, or an unmappable INIT queue-info block.
    pub const MEMORY_NOT_AVAILABLE: Self = Self(0x20);
    /// The target returned a non-GOOD SCSI status; see `scsi_status` and sense.
    pub const SCSI_DONE_WITH_ERROR: Self = Self(0x2D);
    /// Command cancelled by an abort or reset.
    pub const SCSI_IO_FAILED: Self = Self(0x2E);
    /// SCSI reservation conflict.
    pub const SCSI_RESERVATION_CONFLICT: Self = Self(0x2F);
    /// Logical drive offline.
    pub const LD_OFFLINE: Self = Self(0x33);
    /// The driver's "still pending" marker, written before posting.
    pub const PENDING: Self = Self(0xFF);

    /// Symbolic name, when the code is one the driver knows.
    pub const fn name(self) -> &'static str {
        match self.0 {
            0x00 => "OK",
            0x01 => "INVALID_CMD",
            0x02 => "INVALID_DCMD",
            0x03 => "INVALID_PARAMETER",
            0x04 => "INVALID_SEQUENCE_NUMBER",
            0x05 => "ABORT_NOT_POSSIBLE",
            0x0C => "DEVICE_NOT_FOUND",
            0x0E => "FLASH_ALLOC_FAIL",
            0x18 => "LD_INIT_IN_PROGRESS",
            0x19 => "LD_LBA_OUT_OF_RANGE",
            0x20 => "MEMORY_NOT_AVAILABLE",
            0x2D => "SCSI_DONE_WITH_ERROR",
            0x2E => "SCSI_IO_FAILED",
            0x2F => "SCSI_RESERVATION_CONFLICT",
            0x32 => "WRONG_STATE",
            0x33 => "LD_OFFLINE",
            0xFF => "PENDING",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Display for MfiStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MFI status 0x{:02X} {}", self.0, self.name())
    }
}

/// SCSI status byte: GOOD.
pub const SCSI_GOOD: u8 = 0x00;
/// SCSI status byte: CHECK CONDITION (sense data follows).
pub const SCSI_CHECK_CONDITION: u8 = 0x02;
/// SCSI status byte: BUSY (QEMU also uses it when all frame slots are taken).
pub const SCSI_BUSY: u8 = 0x08;
/// SCSI status byte: RESERVATION CONFLICT.
pub const SCSI_RESERVATION_CONFLICT: u8 = 0x18;
/// SCSI status byte: TASK SET FULL.
pub const SCSI_TASK_SET_FULL: u8 = 0x28;

/// Sense key: NOT READY.
pub const KEY_NOT_READY: u8 = 0x2;
/// Sense key: MEDIUM ERROR.
pub const KEY_MEDIUM_ERROR: u8 = 0x3;
/// Sense key: HARDWARE ERROR.
pub const KEY_HARDWARE_ERROR: u8 = 0x4;
/// Sense key: ILLEGAL REQUEST.
pub const KEY_ILLEGAL_REQUEST: u8 = 0x5;
/// Sense key: UNIT ATTENTION.
pub const KEY_UNIT_ATTENTION: u8 = 0x6;
/// Sense key: DATA PROTECT.
pub const KEY_DATA_PROTECT: u8 = 0x7;
/// Sense key: ABORTED COMMAND.
pub const KEY_ABORTED_COMMAND: u8 = 0xB;

/// Decoded SCSI sense: key, additional sense code and qualifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sense {
    /// Sense key (4 bits).
    pub key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
}

impl Sense {
    /// Decodes fixed-format (0x70/0x71, with or without the VALID bit) or descriptor-format
    /// (0x72/0x73) sense data. Returns `None` for anything shorter than the fields it needs or
    /// with an unknown response code: the bytes come from the device and are not trusted.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let code = *data.first()? & 0x7F;
        match code {
            0x70 | 0x71 => {
                let key = *data.get(2)? & 0xF;
                // The additional length (byte 7) tells whether ASC/ASCQ are present; QEMU always
                // sends 18 bytes, but a short device reply must not make us read stale bytes.
                let additional = usize::from(*data.get(7)?);
                let (asc, ascq) = if additional >= 6 && data.len() >= 14 {
                    (data[12], data[13])
                } else {
                    (0, 0)
                };
                Some(Self { key, asc, ascq })
            }
            0x72 | 0x73 => Some(Self {
                key: *data.get(1)? & 0xF,
                asc: *data.get(2)?,
                ascq: *data.get(3)?,
            }),
            _ => None,
        }
    }

    /// Name of the sense key.
    pub const fn key_name(self) -> &'static str {
        match self.key {
            0x0 => "NO SENSE",
            0x1 => "RECOVERED ERROR",
            0x2 => "NOT READY",
            0x3 => "MEDIUM ERROR",
            0x4 => "HARDWARE ERROR",
            0x5 => "ILLEGAL REQUEST",
            0x6 => "UNIT ATTENTION",
            0x7 => "DATA PROTECT",
            0x8 => "BLANK CHECK",
            0x9 => "VENDOR SPECIFIC",
            0xA => "COPY ABORTED",
            0xB => "ABORTED COMMAND",
            0xD => "VOLUME OVERFLOW",
            0xE => "MISCOMPARE",
            _ => "RESERVED",
        }
    }

    /// Description of the ASC/ASCQ pair, for the pairs a driver on QEMU is likely to see.
    pub const fn description(self) -> &'static str {
        match (self.asc, self.ascq) {
            (0x00, 0x00) => "no additional sense information",
            (0x00, 0x06) => "I/O process terminated (host I/O error)",
            (0x04, 0x01) => "logical unit is becoming ready",
            (0x04, _) => "logical unit not ready",
            (0x0C, 0x00) => "write error",
            (0x11, 0x00) => "unrecovered read error",
            (0x1A, 0x00) => "parameter list length error",
            (0x20, 0x00) => "invalid command operation code",
            (0x21, 0x00) => "logical block address out of range",
            (0x24, 0x00) => "invalid field in CDB",
            (0x25, 0x00) => "logical unit not supported",
            (0x27, 0x00) => "write protected",
            (0x28, 0x00) => "not ready to ready change, medium may have changed",
            (0x29, _) => "power on, reset, or bus device reset occurred",
            (0x2A, 0x09) => "capacity data has changed",
            (0x3A, _) => "medium not present",
            (0x44, 0x00) => "internal target failure",
            (0x47, 0x00) => "SCSI parity error",
            (0x55, 0x04) => "insufficient registration resources",
            _ => "unlisted ASC/ASCQ",
        }
    }
}

impl fmt::Display for Sense {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sense key 0x{:X} {}, ASC/ASCQ {:02X}/{:02X} ({})",
            self.key,
            self.key_name(),
            self.asc,
            self.ascq,
            self.description()
        )
    }
}

/// What kind of failure a completed command had, for the block layer to map to its own errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoErrorKind {
    /// The logical drive does not exist or is offline.
    NoDevice,
    /// The controller or target is busy (SCSI BUSY / TASK SET FULL, or QEMU out of frame slots).
    Busy,
    /// UNIT ATTENTION, e.g. 06/29/00 after a reset: retry.
    UnitAttention,
    /// NOT READY.
    NotReady,
    /// MEDIUM ERROR (unrecovered read error, write error).
    Medium,
    /// HARDWARE ERROR (QEMU: also a short SGL or a missing SGE).
    Hardware,
    /// The request addressed blocks past the end of the drive.
    OutOfRange,
    /// ILLEGAL REQUEST other than out of range (unsupported command, bad CDB field).
    IllegalRequest,
    /// DATA PROTECT (write protected).
    DataProtect,
    /// The host's backing I/O failed (QEMU reports EIO as 0B/00/06).
    HostIo,
    /// Cancelled by an abort or controller reset (MFI 0x2E, or ABORTED COMMAND sense).
    Aborted,
    /// The controller rejected the frame itself (MFI status other than the ones above).
    Controller,
    /// A SCSI status or sense the driver does not classify.
    Other,
}

impl IoErrorKind {
    /// Whether retrying the same request may succeed.
    pub const fn is_retryable(self) -> bool {
        matches!(self, Self::Busy | Self::UnitAttention | Self::NotReady | Self::Aborted)
    }
}

/// A failed command: the raw statuses plus decoded sense, small enough to pass by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoError {
    /// Classification.
    pub kind: IoErrorKind,
    /// The frame's MFI status.
    pub mfi_status: MfiStatus,
    /// The frame's SCSI status byte.
    pub scsi_status: u8,
    /// Decoded sense data, when the device returned any.
    pub sense: Option<Sense>,
}

impl IoError {
    /// Classifies a completed frame. Returns `None` for success.
    pub fn classify(mfi_status: MfiStatus, scsi_status: u8, sense_bytes: &[u8]) -> Option<Self> {
        if mfi_status == MfiStatus::OK {
            return None;
        }
        let sense = Sense::decode(sense_bytes);
        let kind = match mfi_status {
            MfiStatus::DEVICE_NOT_FOUND | MfiStatus::LD_OFFLINE => IoErrorKind::NoDevice,
            MfiStatus::LD_LBA_OUT_OF_RANGE => IoErrorKind::OutOfRange,
            MfiStatus::SCSI_IO_FAILED => IoErrorKind::Aborted,
            MfiStatus::LD_INIT_IN_PROGRESS => IoErrorKind::NotReady,
            MfiStatus::SCSI_RESERVATION_CONFLICT => IoErrorKind::Other,
            MfiStatus::SCSI_DONE_WITH_ERROR => match scsi_status {
                SCSI_BUSY | SCSI_TASK_SET_FULL => IoErrorKind::Busy,
                SCSI_CHECK_CONDITION => sense.map_or(IoErrorKind::Other, kind_from_sense),
                _ => IoErrorKind::Other,
            },
            _ => IoErrorKind::Controller,
        };
        Some(Self {
            kind,
            mfi_status,
            scsi_status,
            sense,
        })
    }

    /// Whether retrying the same request may succeed.
    pub const fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

fn kind_from_sense(s: Sense) -> IoErrorKind {
    match s.key {
        KEY_UNIT_ATTENTION => IoErrorKind::UnitAttention,
        KEY_NOT_READY => IoErrorKind::NotReady,
        KEY_MEDIUM_ERROR => IoErrorKind::Medium,
        KEY_HARDWARE_ERROR => IoErrorKind::Hardware,
        KEY_ILLEGAL_REQUEST if s.asc == 0x21 => IoErrorKind::OutOfRange,
        KEY_ILLEGAL_REQUEST => IoErrorKind::IllegalRequest,
        KEY_DATA_PROTECT => IoErrorKind::DataProtect,
        // QEMU's scsi-disk turns a host EIO into ABORTED COMMAND 00/06; retrying it just fails again.
        KEY_ABORTED_COMMAND if s.asc == 0x00 && s.ascq == 0x06 => IoErrorKind::HostIo,
        KEY_ABORTED_COMMAND => IoErrorKind::Aborted,
        _ => IoErrorKind::Other,
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}: {}, SCSI status 0x{:02X}",
            self.kind, self.mfi_status, self.scsi_status
        )?;
        match self.sense {
            Some(s) => write!(f, ", {s}"),
            None => Ok(()),
        }
    }
}

/// Outcome of one I/O command, handed to the completion callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoStatus {
    /// The command completed with MFI status OK.
    Success,
    /// The command failed.
    Failed(IoError),
}

impl IoStatus {
    /// Whether the command succeeded.
    pub const fn is_ok(&self) -> bool {
        matches!(self, Self::Success)
    }
}

impl fmt::Display for IoStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Success => f.write_str("success"),
            Self::Failed(e) => e.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn fixed(code: u8, key: u8, asc: u8, ascq: u8) -> [u8; 18] {
        let mut s = [0u8; 18];
        s[0] = code;
        s[2] = key;
        s[7] = 10;
        s[12] = asc;
        s[13] = ascq;
        s
    }

    #[test]
    fn sense_decodes_fixed_synthetic_and_descriptor_formats() {
        let want = Sense {
            key: 5,
            asc: 0x21,
            ascq: 0,
        };
        assert_eq!(Sense::decode(&fixed(0x70, 5, 0x21, 0)), Some(want));
        // QEMU's synthetic sense sets the VALID bit: 0xF0.
        assert_eq!(Sense::decode(&fixed(0xF0, 5, 0x21, 0)), Some(want));
        assert_eq!(Sense::decode(&[0x72, 0x05, 0x21, 0x00]), Some(want));
        // Too short for ASC/ASCQ: the key alone, never stale bytes.
        let mut short = fixed(0x70, 3, 0x11, 0);
        short[7] = 0;
        assert_eq!(
            Sense::decode(&short),
            Some(Sense {
                key: 3,
                asc: 0,
                ascq: 0
            })
        );
        assert_eq!(Sense::decode(&fixed(0x70, 3, 0x11, 0)[..7]), None);
        assert_eq!(Sense::decode(&[]), None);
        assert_eq!(Sense::decode(&[0x00; 18]), None);
        assert_eq!(Sense::decode(&[0x72, 0x05]), None);
        let text = want.to_string();
        assert!(text.contains("ILLEGAL REQUEST") && text.contains("21/00") && text.contains("out of range"));
    }

    #[test]
    fn statuses_map_to_kinds() {
        let dne = MfiStatus::SCSI_DONE_WITH_ERROR;
        let cases: &[(MfiStatus, u8, &[u8], IoErrorKind)] = &[
            (MfiStatus::DEVICE_NOT_FOUND, 0, &[], IoErrorKind::NoDevice),
            (MfiStatus::LD_OFFLINE, 0, &[], IoErrorKind::NoDevice),
            (MfiStatus::SCSI_IO_FAILED, 0, &[], IoErrorKind::Aborted),
            (MfiStatus::LD_LBA_OUT_OF_RANGE, 0, &[], IoErrorKind::OutOfRange),
            (MfiStatus::INVALID_CMD, 0, &[], IoErrorKind::Controller),
            (dne, SCSI_BUSY, &[], IoErrorKind::Busy),
            (dne, SCSI_TASK_SET_FULL, &[], IoErrorKind::Busy),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0x70, 6, 0x29, 0),
                IoErrorKind::UnitAttention,
            ),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0x70, 2, 0x04, 1),
                IoErrorKind::NotReady,
            ),
            (dne, SCSI_CHECK_CONDITION, &fixed(0x70, 3, 0x11, 0), IoErrorKind::Medium),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0xF0, 4, 0x44, 0),
                IoErrorKind::Hardware,
            ),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0x70, 5, 0x21, 0),
                IoErrorKind::OutOfRange,
            ),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0x70, 5, 0x20, 0),
                IoErrorKind::IllegalRequest,
            ),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0x70, 7, 0x27, 0),
                IoErrorKind::DataProtect,
            ),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0x70, 0xB, 0x00, 6),
                IoErrorKind::HostIo,
            ),
            (
                dne,
                SCSI_CHECK_CONDITION,
                &fixed(0x70, 0xB, 0x47, 0),
                IoErrorKind::Aborted,
            ),
            (dne, SCSI_CHECK_CONDITION, &[], IoErrorKind::Other),
            (dne, SCSI_RESERVATION_CONFLICT, &[], IoErrorKind::Other),
        ];
        for &(mfi, scsi, sense, kind) in cases {
            let e = IoError::classify(mfi, scsi, sense).expect("an error");
            assert_eq!(e.kind, kind, "{mfi} scsi 0x{scsi:02X}");
        }
        assert_eq!(IoError::classify(MfiStatus::OK, 0, &[]), None);
        assert!(IoErrorKind::UnitAttention.is_retryable() && !IoErrorKind::Medium.is_retryable());
    }
}
