//! Little-endian field access at fixed offsets, bounds-checked: fio's wire encoding is little
//! endian whatever the host.

use crate::Error;
use alloc::vec::Vec;

/// Writes `v` at `off` in `buf`, which the caller has sized for the structure.
pub(crate) fn put_u16(buf: &mut [u8], off: usize, v: u16) {
    buf[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Writes `values` as consecutive little-endian u64s from `off`.
pub(crate) fn put_u64s(buf: &mut [u8], off: usize, values: &[u64]) {
    for (i, &v) in values.iter().enumerate() {
        put_u64(buf, off + 8 * i, v);
    }
}

/// fio carries doubles as the IEEE 754 bits of the value in a u64 (its `pack754`). Zero,
/// subnormals, infinities and NaN have no meaning in a statistic and travel as 0, which fio
/// unpacks as 0.0.
pub(crate) fn f64_to_wire(v: f64) -> u64 {
    if v.is_normal() { v.to_bits() } else { 0 }
}

pub(crate) fn f64_from_wire(bits: u64) -> f64 {
    let v = f64::from_bits(bits);
    if v.is_normal() { v } else { 0.0 }
}

/// Copies `text` into a fixed C string field of `len` bytes at `off`, always leaving room for the
/// terminating NUL; returns whether it had to be cut.
pub(crate) fn put_cstr(buf: &mut [u8], off: usize, len: usize, text: &str) -> bool {
    let bytes = text.as_bytes();
    let take = bytes.len().min(len - 1);
    buf[off..off + take].copy_from_slice(&bytes[..take]);
    buf[off + take..off + len].fill(0);
    take < bytes.len()
}

/// A bounds-checked view of a received payload.
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Fields<'a> {
    /// A payload that must be at least `need` bytes long to hold `what`.
    pub(crate) fn new(bytes: &'a [u8], need: usize, what: &'static str) -> Result<Self, Error> {
        if bytes.len() < need {
            return Err(Error::Truncated {
                what,
                need,
                have: bytes.len(),
            });
        }
        Ok(Self { bytes, what })
    }

    fn array<const N: usize>(&self, off: usize) -> Result<[u8; N], Error> {
        self.bytes
            .get(off..off + N)
            .and_then(|s| s.try_into().ok())
            .ok_or(Error::Truncated {
                what: self.what,
                need: off + N,
                have: self.bytes.len(),
            })
    }

    pub(crate) fn u8(&self, off: usize) -> Result<u8, Error> {
        Ok(self.array::<1>(off)?[0])
    }

    pub(crate) fn u16(&self, off: usize) -> Result<u16, Error> {
        Ok(u16::from_le_bytes(self.array(off)?))
    }

    pub(crate) fn u32(&self, off: usize) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array(off)?))
    }

    pub(crate) fn u64(&self, off: usize) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.array(off)?))
    }

    pub(crate) fn f64(&self, off: usize) -> Result<f64, Error> {
        Ok(f64_from_wire(self.u64(off)?))
    }

    pub(crate) fn u64s(&self, off: usize, out: &mut [u64]) -> Result<(), Error> {
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = self.u64(off + 8 * i)?;
        }
        Ok(())
    }

    /// `count` consecutive u64s from `off`.
    pub(crate) fn u64_vec(&self, off: usize, count: usize) -> Result<Vec<u64>, Error> {
        let mut out = alloc::vec![0u64; count];
        self.u64s(off, &mut out)?;
        Ok(out)
    }

    /// The C string in the fixed field of `len` bytes at `off`: up to its first NUL, or the
    /// whole field. Bytes that are not UTF-8 are replaced, so a hostile name cannot fail a
    /// report.
    pub(crate) fn cstr(&self, off: usize, len: usize) -> Result<alloc::string::String, Error> {
        let field = self.bytes.get(off..off + len).ok_or(Error::Truncated {
            what: self.what,
            need: off + len,
            have: self.bytes.len(),
        })?;
        Ok(text_until_nul(field))
    }
}

/// The bytes up to the first NUL as text (invalid UTF-8 replaced).
pub(crate) fn text_until_nul(bytes: &[u8]) -> alloc::string::String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    alloc::string::String::from_utf8_lossy(&bytes[..end]).into_owned()
}
