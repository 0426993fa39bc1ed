//! The AML byte stream: bytes, little-endian integers, package lengths and
//! name strings, each checked against the end of the enclosing object.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::interp::Interpreter;
use super::name::{NameString, Seg};
use super::opcode::*;
use crate::error::Result;

/// A position in one table's byte code, and where the enclosing object ends.
pub(super) struct Reader {
    pub(super) code: Arc<[u8]>,
    pub(super) pos: usize,
    pub(super) end: usize,
}

impl<'h> Interpreter<'h> {
    pub(super) fn byte(&self, r: &mut Reader) -> Result<u8> {
        if r.pos >= r.end {
            return Err(self.err(r, "byte code ends inside an object", r.end as u64));
        }
        let b = r.code[r.pos];
        r.pos += 1;
        Ok(b)
    }

    pub(super) fn peek(&self, r: &Reader) -> Option<u8> {
        (r.pos < r.end).then(|| r.code[r.pos])
    }

    pub(super) fn le(&self, r: &mut Reader, n: usize) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..n {
            v |= u64::from(self.byte(r)?) << (8 * i);
        }
        Ok(v)
    }

    /// PkgLength's value (which counts its own bytes).
    pub(super) fn pkg_value(&self, r: &mut Reader) -> Result<usize> {
        let lead = self.byte(r)?;
        let follow = lead >> 6;
        if follow == 0 {
            return Ok(usize::from(lead & 0x3F));
        }
        let mut v = usize::from(lead & 0x0F);
        for i in 0..follow {
            v |= usize::from(self.byte(r)?) << (4 + 8 * usize::from(i));
        }
        Ok(v)
    }

    /// Reads a PkgLength and returns where the package ends (checked against the enclosing end).
    pub(super) fn pkg_end(&self, r: &mut Reader) -> Result<usize> {
        let start = r.pos;
        let len = self.pkg_value(r)?;
        let end = start.checked_add(len).filter(|&e| e <= r.end && e >= r.pos);
        end.ok_or_else(|| self.err(r, "package length runs past its enclosing object", len as u64))
    }

    pub(super) fn name_seg(&self, r: &mut Reader) -> Result<Seg> {
        let mut s = [0u8; 4];
        for (i, out) in s.iter_mut().enumerate() {
            let b = self.byte(r)?;
            let ok = b == b'_' || b.is_ascii_uppercase() || (i > 0 && b.is_ascii_digit());
            if !ok {
                return Err(self.err(r, "invalid character in a name segment", u64::from(b)));
            }
            *out = b;
        }
        Ok(s)
    }

    pub(super) fn name_string(&self, r: &mut Reader) -> Result<NameString> {
        let mut name = NameString {
            rooted: false,
            parents: 0,
            segs: Vec::new(),
        };
        match self.peek(r) {
            Some(ROOT_CHAR) => {
                r.pos += 1;
                name.rooted = true;
            }
            Some(PARENT_PREFIX_CHAR) => {
                while self.peek(r) == Some(PARENT_PREFIX_CHAR) {
                    r.pos += 1;
                    name.parents = name.parents.saturating_add(1);
                }
            }
            _ => {}
        }
        match self.byte(r)? {
            NULL_NAME => {}
            DUAL_NAME_PREFIX => {
                name.segs.push(self.name_seg(r)?);
                name.segs.push(self.name_seg(r)?);
            }
            MULTI_NAME_PREFIX => {
                let count = self.byte(r)?;
                for _ in 0..count {
                    name.segs.push(self.name_seg(r)?);
                }
            }
            _ => {
                r.pos -= 1;
                name.segs.push(self.name_seg(r)?);
            }
        }
        Ok(name)
    }
}
