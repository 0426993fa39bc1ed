//! The room's one error type.

use alloc::string::String;
use core::fmt;

/// What went wrong in the network room: a `net.*` word, a choice of interface, the stack, or a
/// NIC (a driver reports its own failures as [`Error::Device`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A `net.*` word with a key the room does not know.
    UnknownKey { word: String },
    /// A `net.*` key given twice.
    DuplicateKey { key: &'static str },
    /// A `net.*` word whose value does not parse; `expected` says what would.
    BadValue { word: String, expected: &'static str },
    /// `net.*` words that contradict each other.
    Conflict { why: &'static str },
    /// No NIC is registered.
    NoInterface,
    /// `net.if=` names no registered NIC; `available` lists those there are.
    NoSuchInterface { wanted: String, available: String },
    /// The frame is longer than the NIC sends.
    FrameTooLong { len: usize, max: usize },
    /// Every transmit slot is in flight.
    TransmitFull,
    /// A socket operation the stack refused.
    Socket { what: &'static str, why: String },
    /// A NIC or its driver failed (the device broke the protocol, a ring could not be set up).
    Device(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownKey { word } => write!(
                f,
                "{word}: unknown network key (accepted: {})",
                crate::config::ACCEPTED_KEYS
            ),
            Self::DuplicateKey { key } => write!(f, "{key} given twice"),
            Self::BadValue { word, expected } => write!(f, "{word}: expected {expected}"),
            Self::Conflict { why } => write!(f, "{why}"),
            Self::NoInterface => write!(f, "no network interface (no NIC was found)"),
            Self::NoSuchInterface { wanted, available } => {
                write!(f, "net.if={wanted}: no such interface (there are: {available})")
            }
            Self::FrameTooLong { len, max } => {
                write!(f, "frame of {len} bytes is longer than the NIC's {max}")
            }
            Self::TransmitFull => write!(f, "every transmit slot is in flight"),
            Self::Socket { what, why } => write!(f, "{what}: {why}"),
            Self::Device(why) => write!(f, "{why}"),
        }
    }
}
