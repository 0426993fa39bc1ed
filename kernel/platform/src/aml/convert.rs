//! ACPI's implicit conversions between integers, strings and buffers, and
//! the comparison and concatenation built on them. Integers are 32 or 64
//! bits wide, as the DSDT's revision says.

use alloc::vec::Vec;

use super::exec::Frame;
use super::interp::{Interpreter, aml_error};
use super::name::Path;
use super::object::Object;
use super::reader::Reader;
use crate::error::Result;

impl<'h> Interpreter<'h> {
    pub(super) fn boolean(&self, truth: bool) -> Object {
        Object::Integer(if truth { self.ones() } else { 0 })
    }

    pub(super) fn integer_of(&mut self, value: &Object, at: &Path, offset: usize) -> Result<u64> {
        match value {
            Object::Integer(v) => Ok(*v),
            Object::Buffer(bytes) => {
                let mut v = 0u64;
                for (i, b) in bytes.iter().take(self.int_bytes()).enumerate() {
                    v |= u64::from(*b) << (8 * i);
                }
                Ok(v)
            }
            Object::String(s) => Ok(parse_hex_prefix(s) & self.ones()),
            Object::Reference(place) => {
                let mut frame = Frame::new(Path::root(), Vec::new(), false);
                let inner = self.read_place(&mut frame, place)?;
                self.integer_of(&inner, at, offset)
            }
            _ => Err(aml_error(at, offset, "value is not an integer", 0)),
        }
    }

    pub(super) fn to_buffer(&self, value: &Object, r: &Reader) -> Result<Vec<u8>> {
        match value {
            Object::Buffer(b) => Ok(b.clone()),
            Object::Integer(v) => Ok(v.to_le_bytes()[..self.int_bytes()].to_vec()),
            Object::String(s) => {
                let mut b = s.as_bytes().to_vec();
                b.push(0);
                Ok(b)
            }
            _ => Err(self.err(r, "value cannot become a buffer", 0)),
        }
    }

    pub(super) fn concat(&self, a: Object, b: Object, r: &Reader) -> Result<Object> {
        match a {
            Object::Integer(x) => {
                let mut bytes = x.to_le_bytes()[..self.int_bytes()].to_vec();
                let y = match b {
                    Object::Integer(y) => y,
                    Object::Buffer(ref bb) => {
                        bytes.extend_from_slice(bb);
                        return Ok(Object::Buffer(bytes));
                    }
                    _ => return Err(self.err(r, "Concatenate operand types differ", 0)),
                };
                bytes.extend_from_slice(&y.to_le_bytes()[..self.int_bytes()]);
                Ok(Object::Buffer(bytes))
            }
            Object::String(mut s) => {
                match b {
                    Object::String(t) => s.push_str(&t),
                    Object::Integer(v) => s.push_str(&alloc::format!("{v:X}")),
                    Object::Buffer(bb) => bb.iter().for_each(|x| s.push_str(&alloc::format!("{x:02X}"))),
                    _ => return Err(self.err(r, "Concatenate operand types differ", 0)),
                }
                Ok(Object::String(s))
            }
            Object::Buffer(mut bytes) => {
                bytes.extend(self.to_buffer(&b, r)?);
                Ok(Object::Buffer(bytes))
            }
            _ => Err(self.err(r, "Concatenate of an unsupported type", 0)),
        }
    }

    pub(super) fn compare(&mut self, a: &Object, b: &Object, r: &Reader) -> Result<core::cmp::Ordering> {
        match a {
            Object::String(s) => match b {
                Object::String(t) => Ok(s.as_str().cmp(t.as_str())),
                other => {
                    let bytes = self.to_buffer(other, r)?;
                    Ok(s.as_bytes().cmp(&bytes))
                }
            },
            Object::Buffer(x) => {
                let y = self.to_buffer(b, r)?;
                Ok(x.as_slice().cmp(y.as_slice()))
            }
            _ => {
                let x = self.integer_of(a, &Path::root(), r.pos)?;
                let y = self.integer_of(b, &Path::root(), r.pos)?;
                Ok(x.cmp(&y))
            }
        }
    }
}

fn parse_hex_prefix(s: &str) -> u64 {
    let s = s.trim_start_matches("0x").trim_start_matches("0X");
    let mut v = 0u64;
    for c in s.chars() {
        match c.to_digit(16) {
            Some(d) => v = v.wrapping_mul(16).wrapping_add(u64::from(d)),
            None => break,
        }
    }
    v
}

pub(super) fn parse_integer_text(s: &str) -> u64 {
    if s.starts_with("0x") || s.starts_with("0X") {
        return parse_hex_prefix(s);
    }
    let mut v = 0u64;
    for c in s.chars() {
        match c.to_digit(10) {
            Some(d) => v = v.wrapping_mul(10).wrapping_add(u64::from(d)),
            None => break,
        }
    }
    v
}
