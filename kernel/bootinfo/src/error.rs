use core::fmt;

/// Everything that can go wrong while reading boot information or the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The entry register held a magic value of no supported protocol.
    UnknownBootMagic(u32),
    /// A read of boot information fell outside memory the accessor can reach.
    UnreadableMemory { addr: u64, len: usize },
    /// A structure's declared size is impossible (zero, too small, or too large).
    BadStructure {
        what: &'static str,
        detail: &'static str,
        value: u64,
    },
    /// More entries than the fixed-capacity table holds; nothing is dropped silently.
    TooMany { what: &'static str, capacity: usize },
    /// The loader gave no memory map at all.
    NoMemoryMap,
    /// A command-line word `key=value` whose key is not known.
    UnknownKey {
        key: heapless::String<64>,
        accepted: &'static str,
        also: &'static str,
    },
    /// A command-line value that does not parse.
    BadValue {
        key: &'static str,
        value: heapless::String<64>,
        expected: &'static str,
    },
    /// A command-line word with no `=value`.
    MissingValue { key: heapless::String<64> },
    /// The same key given twice.
    DuplicateKey { key: &'static str },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownBootMagic(m) => write!(
                f,
                "unknown boot magic {m:#010x} (expected Multiboot1 0x2badb002, Multiboot2 0x36d76289 or PVH 0x336ec578)"
            ),
            Error::UnreadableMemory { addr, len } => {
                write!(
                    f,
                    "boot information at {addr:#x} (+{len} bytes) is outside readable memory"
                )
            }
            Error::BadStructure { what, detail, value } => {
                write!(f, "malformed {what}: {detail} ({value:#x})")
            }
            Error::TooMany { what, capacity } => {
                write!(f, "too many {what}: more than {capacity} are not supported")
            }
            Error::NoMemoryMap => write!(f, "the boot loader provided no memory map"),
            Error::UnknownKey { key, accepted, also } => {
                write!(f, "unknown command-line key '{key}'; accepted keys: {accepted}")?;
                if !also.is_empty() {
                    write!(f, "; {also}")?;
                }
                Ok(())
            }
            Error::BadValue { key, value, expected } => {
                write!(
                    f,
                    "invalid value '{value}' for command-line key '{key}'; expected {expected}"
                )
            }
            Error::MissingValue { key } => {
                write!(f, "command-line word '{key}' has no value; write it as {key}=VALUE")
            }
            Error::DuplicateKey { key } => write!(f, "command-line key '{key}' is given twice"),
        }
    }
}

/// Copies `s` into a bounded string, marking truncation with "...".
pub(crate) fn bounded<const N: usize>(s: &str) -> heapless::String<N> {
    let mut out = heapless::String::new();
    for c in s.chars() {
        if out.len() + c.len_utf8() > N.saturating_sub(3) {
            let _ = out.push_str("...");
            break;
        }
        let _ = out.push(c);
    }
    out
}
