//! Fields: `Field`, `IndexField` and `BankField` definitions, `Create*Field`
//! buffer fields, and a field's bits read and written through its register,
//! one access of the field's access width at a time.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use super::exec::Frame;
use super::interp::{Interpreter, MAX_OBJECT_BYTES, aml_error};
use super::name::{Path, is_name_start};
use super::object::{FieldKind, Object, Place};
use super::opcode::*;
use super::reader::Reader;
use crate::error::Result;

impl<'h> Interpreter<'h> {
    pub(super) fn field_definition(&mut self, f: &mut Frame, r: &mut Reader, ext: u8) -> Result<()> {
        let first = self.name_string(r)?;
        let first = self
            .resolve(&first, &f.scope)
            .unwrap_or_else(|| first.in_scope(&f.scope));
        let kind = match ext {
            FIELD_OP => FieldKind::Region(first),
            INDEX_FIELD_OP => {
                let data = self.name_string(r)?;
                let data = self.resolve(&data, &f.scope).unwrap_or_else(|| data.in_scope(&f.scope));
                FieldKind::Index { index: first, data }
            }
            _ => {
                let bank = self.name_string(r)?;
                let bank = self.resolve(&bank, &f.scope).unwrap_or_else(|| bank.in_scope(&f.scope));
                let value = self.eval_int(f, r)?;
                FieldKind::Bank {
                    region: first,
                    bank,
                    value,
                }
            }
        };
        let flags = self.byte(r)?;
        let mut access = flags & 0x0F;
        let update = (flags >> 5) & 3;
        let mut bit = 0u64;
        while r.pos < r.end {
            match self.peek(r) {
                Some(RESERVED_FIELD) => {
                    r.pos += 1;
                    bit = bit.saturating_add(self.pkg_value(r)? as u64);
                }
                Some(ACCESS_FIELD) => {
                    r.pos += 1;
                    access = self.byte(r)? & 0x0F;
                    self.byte(r)?;
                }
                Some(EXTENDED_ACCESS_FIELD) => {
                    r.pos += 1;
                    access = self.byte(r)? & 0x0F;
                    self.le(r, 2)?;
                }
                Some(CONNECT_FIELD) => return Err(self.err(r, "ConnectField (GPIO/serial bus) is not supported", 2)),
                _ => {
                    let name = self.name_seg(r)?;
                    // A PkgLength value has at most 28 bits.
                    let bits = self.pkg_value(r)? as u64;
                    let access_bytes = match access {
                        2 => 2,
                        3 => 4,
                        4 => 8,
                        _ => 1,
                    };
                    self.define(
                        f.scope.child(name),
                        Object::Field {
                            kind: kind.clone(),
                            bit_offset: bit,
                            bits,
                            access_bytes,
                            update,
                        },
                    );
                    bit = bit.saturating_add(bits);
                }
            }
        }
        Ok(())
    }

    pub(super) fn create_field(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<()> {
        let buffer = self.buffer_place(f, r)?;
        let index = self.eval_int(f, r)?;
        let (bit_offset, bits) = match op {
            CREATE_BIT_FIELD_OP => (index, 1),
            CREATE_BYTE_FIELD_OP => (index.saturating_mul(8), 8),
            CREATE_WORD_FIELD_OP => (index.saturating_mul(8), 16),
            CREATE_DWORD_FIELD_OP => (index.saturating_mul(8), 32),
            _ => (index.saturating_mul(8), 64),
        };
        let name = self.name_string(r)?;
        self.define(
            name.in_scope(&f.scope),
            Object::BufferField {
                buffer: Box::new(buffer),
                bit_offset,
                bits,
            },
        );
        Ok(())
    }

    /// The source buffer of a `Create*Field`: kept as a place when it is a
    /// name, local or argument, so writes through the field reach it.
    pub(super) fn buffer_place(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Place> {
        match self.peek(r) {
            Some(b) if (LOCAL0_OP..=ARG6_OP).contains(&b) || is_name_start(b) => self.target(f, r),
            _ => {
                let value = self.eval(f, r)?;
                Ok(Place::Owned(Box::new(value), 0))
            }
        }
    }

    pub(super) fn read_field(
        &mut self,
        path: &Path,
        kind: &FieldKind,
        bit_offset: u64,
        bits: u64,
        width: u8,
    ) -> Result<Object> {
        let end = field_end(path, bit_offset, bits)?;
        let unit_bits = u64::from(width) * 8;
        let first = bit_offset / unit_bits;
        let last = (end - 1) / unit_bits;
        // `bits <= MAX_OBJECT_BYTES * 8`: the byte count fits.
        let mut out = vec![0u8; bits.div_ceil(8) as usize];
        for unit in first..=last {
            let value = self.access(path, kind, unit * u64::from(width), width, None)?;
            let unit_start = unit * unit_bits;
            for b in 0..unit_bits {
                let absolute = unit_start + b;
                if absolute < bit_offset || absolute >= end {
                    continue;
                }
                if value >> b & 1 == 1 {
                    let o = absolute - bit_offset;
                    out[(o / 8) as usize] |= 1 << (o % 8);
                }
            }
        }
        Ok(field_value(out, bits))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_field(
        &mut self,
        path: &Path,
        kind: &FieldKind,
        bit_offset: u64,
        bits: u64,
        width: u8,
        update: u8,
        source: &[u8],
    ) -> Result<()> {
        let end = field_end(path, bit_offset, bits)?;
        let unit_bits = u64::from(width) * 8;
        let first = bit_offset / unit_bits;
        let last = (end - 1) / unit_bits;
        for unit in first..=last {
            // `unit <= last`, so `unit_start + unit_bits` is at most `end` rounded up to a unit.
            let unit_start = unit * unit_bits;
            let whole = unit_start >= bit_offset && unit_start + unit_bits <= end;
            let mut value = if whole {
                0
            } else {
                match update {
                    1 => u64::MAX,
                    2 => 0,
                    _ => self.access(path, kind, unit * u64::from(width), width, None)?,
                }
            };
            for b in 0..unit_bits {
                let absolute = unit_start + b;
                if absolute < bit_offset || absolute >= end {
                    continue;
                }
                let o = absolute - bit_offset;
                let bit = source
                    .get((o / 8) as usize)
                    .is_some_and(|byte| byte >> (o % 8) & 1 == 1);
                value = (value & !(1 << b)) | (u64::from(bit) << b);
            }
            if unit_bits < 64 {
                value &= (1u64 << unit_bits) - 1;
            }
            self.access(path, kind, unit * u64::from(width), width, Some(value))?;
        }
        Ok(())
    }

    /// One access of `width` bytes at `byte_offset` in the field's register
    /// space: a read (`write` None) or a write.
    fn access(
        &mut self,
        field: &Path,
        kind: &FieldKind,
        byte_offset: u64,
        width: u8,
        write: Option<u64>,
    ) -> Result<u64> {
        match kind {
            FieldKind::Region(region) => self.region_access(field, region, byte_offset, width, write),
            FieldKind::Index { index, data } => {
                self.store_named(index, Object::Integer(byte_offset))?;
                match write {
                    None => {
                        let value = self.read_named(data)?;
                        self.integer_of(&value, field, 0)
                    }
                    Some(v) => {
                        self.store_named(data, Object::Integer(v))?;
                        Ok(0)
                    }
                }
            }
            FieldKind::Bank { region, bank, value } => {
                self.store_named(bank, Object::Integer(*value))?;
                self.region_access(field, region, byte_offset, width, write)
            }
        }
    }
}

/// The bit after a field of `bits` bits at `bit_offset`: the size must be
/// 1..=`MAX_OBJECT_BYTES` * 8 and the end must not pass 2^64 (with the byte
/// offset of an access below it, so that the access's byte address fits too).
fn field_end(path: &Path, bit_offset: u64, bits: u64) -> Result<u64> {
    if bits == 0 || bits > MAX_OBJECT_BYTES * 8 {
        return Err(aml_error(path, 0, "field size out of range", bits));
    }
    bit_offset
        .checked_add(bits)
        .filter(|&end| end <= u64::MAX - 64)
        .ok_or_else(|| aml_error(path, 0, "field runs past the end of the address space", bit_offset))
}

pub(super) fn extract_bits(bytes: &[u8], bit_offset: u64, bits: u64) -> Option<Object> {
    let end = bit_offset.checked_add(bits)?;
    if end > bytes.len() as u64 * 8 || bits == 0 {
        return None;
    }
    let mut out = vec![0u8; bits.div_ceil(8) as usize];
    for o in 0..bits {
        let a = bit_offset + o;
        if bytes[(a / 8) as usize] >> (a % 8) & 1 == 1 {
            out[(o / 8) as usize] |= 1 << (o % 8);
        }
    }
    Some(field_value(out, bits))
}

/// A field's value read out as `bits` bits (little-endian bytes): an Integer up to 64 bits, a
/// Buffer beyond, as ACPI's field reads give.
fn field_value(out: Vec<u8>, bits: u64) -> Object {
    if bits <= 64 {
        let v = out
            .iter()
            .enumerate()
            .fold(0u64, |v, (i, b)| v | u64::from(*b) << (8 * i));
        Object::Integer(v)
    } else {
        Object::Buffer(out)
    }
}

pub(super) fn insert_bits(bytes: &mut [u8], bit_offset: u64, bits: u64, source: &[u8]) -> bool {
    let Some(end) = bit_offset.checked_add(bits) else {
        return false;
    };
    if end > bytes.len() as u64 * 8 {
        return false;
    }
    for o in 0..bits {
        let a = bit_offset + o;
        let bit = source.get((o / 8) as usize).is_some_and(|b| b >> (o % 8) & 1 == 1);
        let byte = &mut bytes[(a / 8) as usize];
        *byte = (*byte & !(1 << (a % 8))) | (u8::from(bit) << (a % 8));
    }
    true
}
