//! The crate's one error type.

use core::fmt;

/// Everything that can go wrong between the bytes of a connection and a command or message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A command header whose CRC-16 does not match its first 20 bytes.
    BadHeaderCrc { sent: u16, computed: u16 },
    /// A fragment payload whose CRC-16 does not match the header's.
    BadPayloadCrc { opcode: u16, sent: u16, computed: u16 },
    /// A header with a protocol version other than fio 3.33's.
    VersionMismatch { sent: u16, expected: u16 },
    /// One fragment's payload over fio's limit of 1024 bytes.
    FragmentTooLarge { len: u32, limit: u32 },
    /// A reassembled command over the decoder's size limit.
    CommandTooLarge { len: usize, limit: usize },
    /// A fragment that continues a command with another opcode.
    FragmentOpcodeMismatch { first: u16, next: u16 },
    /// A fragment that continues a command with another tag.
    FragmentTagMismatch { first: u64, next: u64 },
    /// An opcode fio 3.33 does not define.
    UnknownOpcode(u16),
    /// A payload shorter than the structure it must hold.
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// A length or count from the wire that points past the payload or over a limit.
    LengthOutOfRange {
        what: &'static str,
        len: usize,
        limit: usize,
    },
    /// A value that does not fit its field on the wire.
    ValueOutOfRange { what: &'static str },
    /// A command that has no meaning in the session's present state.
    UnexpectedCommand { opcode: u16, state: &'static str },
    /// Bytes given to a session that has already finished.
    SessionOver,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::BadHeaderCrc { sent, computed } => {
                write!(
                    f,
                    "bad command header CRC-16 (sent {sent:#06x}, computed {computed:#06x})"
                )
            }
            Error::BadPayloadCrc { opcode, sent, computed } => write!(
                f,
                "bad payload CRC-16 on opcode {opcode} (sent {sent:#06x}, computed {computed:#06x})"
            ),
            Error::VersionMismatch { sent, expected } => {
                write!(f, "client/server protocol version mismatch ({sent} != {expected})")
            }
            Error::FragmentTooLarge { len, limit } => {
                write!(f, "fragment payload of {len} bytes is over the limit of {limit}")
            }
            Error::CommandTooLarge { len, limit } => {
                write!(f, "command of {len} bytes is over the limit of {limit}")
            }
            Error::FragmentOpcodeMismatch { first, next } => {
                write!(f, "fragment opcode {next} continues a command of opcode {first}")
            }
            Error::FragmentTagMismatch { first, next } => {
                write!(f, "fragment tag {next:#x} continues a command of tag {first:#x}")
            }
            Error::UnknownOpcode(op) => write!(f, "unknown opcode {op}"),
            Error::Truncated { what, need, have } => {
                write!(f, "{what}: payload of {have} bytes, needs {need}")
            }
            Error::LengthOutOfRange { what, len, limit } => {
                write!(f, "{what}: length {len} is out of range (limit {limit})")
            }
            Error::ValueOutOfRange { what } => write!(f, "{what} does not fit its wire field"),
            Error::UnexpectedCommand { opcode, state } => {
                write!(f, "opcode {opcode} is not expected while {state}")
            }
            Error::SessionOver => write!(f, "the session has finished"),
        }
    }
}
