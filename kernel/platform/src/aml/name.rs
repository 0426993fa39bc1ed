//! AML names: four-byte segments, absolute paths, and the NameString encoding.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::opcode::{DUAL_NAME_PREFIX, MULTI_NAME_PREFIX, PARENT_PREFIX_CHAR, ROOT_CHAR};

/// One four-character name segment (`_SB_`, `PCI0`).
pub type Seg = [u8; 4];

/// An absolute namespace path: the segments below the root `\`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Path(pub Vec<Seg>);

impl Path {
    /// The root `\`.
    pub fn root() -> Path {
        Path(Vec::new())
    }

    /// `self` with `seg` appended.
    pub fn child(&self, seg: Seg) -> Path {
        let mut segs = self.0.clone();
        segs.push(seg);
        Path(segs)
    }

    /// The parent scope (the root's parent is the root).
    pub fn parent(&self) -> Path {
        let mut segs = self.0.clone();
        segs.pop();
        Path(segs)
    }

    /// The last segment, if any.
    pub fn last(&self) -> Option<Seg> {
        self.0.last().copied()
    }

    /// Whether `self` lies strictly below `ancestor`.
    pub fn is_below(&self, ancestor: &Path) -> bool {
        self.0.len() > ancestor.0.len() && self.0.starts_with(&ancestor.0)
    }

    /// Parses `\_SB.PCI0` (absolute, dot-separated, short segments padded with `_`).
    pub fn parse(text: &str) -> Option<Path> {
        let rest = text.strip_prefix('\\')?;
        let mut segs = Vec::new();
        for part in rest.split('.').filter(|p| !p.is_empty()) {
            if part.len() > 4
                || !part
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            {
                return None;
            }
            let mut seg = *b"____";
            seg[..part.len()].copy_from_slice(part.as_bytes());
            segs.push(seg);
        }
        Some(Path(segs))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\\")?;
        for (i, seg) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            for &b in seg {
                let c = if b.is_ascii_graphic() { b as char } else { '?' };
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// A NameString as encoded: rooted, or `parents` levels up, then segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameString {
    pub rooted: bool,
    pub parents: u8,
    pub segs: Vec<Seg>,
}

impl NameString {
    /// Whether ACPI's upward search applies: a single segment with no prefix.
    pub fn searches_upward(&self) -> bool {
        !self.rooted && self.parents == 0 && self.segs.len() == 1
    }

    /// The path this names relative to `scope`, without searching.
    pub fn in_scope(&self, scope: &Path) -> Path {
        let mut base = if self.rooted { Path::root() } else { scope.clone() };
        for _ in 0..self.parents {
            base = base.parent();
        }
        let mut segs = base.0;
        segs.extend_from_slice(&self.segs);
        Path(segs)
    }

    /// Text form, for messages.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if self.rooted {
            out.push('\\');
        }
        for _ in 0..self.parents {
            out.push('^');
        }
        for (i, seg) in self.segs.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            out.extend(seg.iter().map(|&b| if b.is_ascii_graphic() { b as char } else { '?' }));
        }
        out
    }
}

/// Whether `b` can start a NameString (root, parent, a lead name character, a multi-segment prefix).
pub fn is_name_start(b: u8) -> bool {
    matches!(
        b,
        ROOT_CHAR | PARENT_PREFIX_CHAR | b'_' | b'A'..=b'Z' | DUAL_NAME_PREFIX | MULTI_NAME_PREFIX
    )
}

/// EISA id text (`PNP0A08`) of a compressed `_HID`/`_CID` integer. A
/// compressed id has 32 bits; a wider value is no EISA id and reads as its
/// hexadecimal value (so it cannot match one by its low bits).
pub fn eisa_id_text(value: u64) -> String {
    let Ok(v) = u32::try_from(value) else {
        return alloc::format!("{value:#x}");
    };
    let v = v.swap_bytes();
    let letter = |shift: u32| (((v >> shift) & 0x1F) as u8 + 0x40) as char;
    let mut out = String::new();
    out.push(letter(26));
    out.push(letter(21));
    out.push(letter(16));
    for shift in [12, 8, 4, 0] {
        let nibble = ((v >> shift) & 0xF) as u8;
        out.push(char::from_digit(u32::from(nibble), 16).map_or('?', |c| c.to_ascii_uppercase()));
    }
    out
}
