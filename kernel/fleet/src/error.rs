//! The crate's one error type.

use alloc::string::String;
use core::fmt;

/// A refused `fio.server*` word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A word that is not one of the `fio.server*` words.
    UnknownWord { word: String },
    /// A word given twice.
    Duplicate { key: &'static str },
    /// A value that does not parse; `expected` says what would.
    BadValue {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    /// `fio.server.*` options without `fio.server=1`.
    OptionWithoutServer { key: &'static str },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownWord { word } => write!(
                f,
                "{word:?}: not a fio.server word (fio.server=1, fio.server.port=, fio.server.allow=, fio.server.writable=)"
            ),
            Error::Duplicate { key } => write!(f, "{key} given twice"),
            Error::BadValue { key, value, expected } => write!(f, "{key}={value:?}: expected {expected}"),
            Error::OptionWithoutServer { key } => {
                write!(f, "{key} without fio.server=1: the fio server is off")
            }
        }
    }
}
