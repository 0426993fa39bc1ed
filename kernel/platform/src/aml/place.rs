//! Places: the Target and SuperName operands, and reading and storing
//! through names, locals, arguments, references and package or buffer
//! elements (a store to a named integer or buffer converts, others replace).

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use super::exec::Frame;
use super::field::{extract_bits, insert_bits};
use super::interp::{Interpreter, aml_error};
use super::name::{Path, is_name_start};
use super::object::{Object, Place};
use super::opcode::*;
use super::reader::Reader;
use crate::error::Result;

impl<'h> Interpreter<'h> {
    /// A Target or SuperName.
    pub(super) fn target(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Place> {
        let op = self.peek(r).ok_or_else(|| self.err(r, "missing target", 0))?;
        match op {
            ZERO_OP => {
                r.pos += 1;
                Ok(Place::Null)
            }
            LOCAL0_OP..=LOCAL7_OP => {
                r.pos += 1;
                Ok(Place::Local(op - LOCAL0_OP))
            }
            ARG0_OP..=ARG6_OP => {
                r.pos += 1;
                Ok(Place::Arg(op - ARG0_OP))
            }
            EXT_OP_PREFIX if r.code.get(r.pos + 1) == Some(&DEBUG_OP) => {
                r.pos += 2;
                Ok(Place::Debug)
            }
            b if is_name_start(b) => {
                let name = self.name_string(r)?;
                match self.resolve(&name, &f.scope) {
                    Some(path) => Ok(Place::Named(path)),
                    None => Err(self.undefined(&name, r)),
                }
            }
            _ => {
                let value = self.eval(f, r)?;
                match value {
                    Object::Reference(place) => Ok(*place),
                    Object::Name(path) => Ok(Place::Named(path)),
                    _ => Err(self.err(r, "target is not a reference", u64::from(op))),
                }
            }
        }
    }

    /// For `Index(Local0, ..)` where Local0 holds a reference: what it refers to.
    pub(super) fn place_value_if_reference(&self, f: &Frame, place: &Place) -> Option<Place> {
        let value = match place {
            Place::Local(i) => f.locals.get(usize::from(*i))?,
            Place::Arg(i) => f.args.get(usize::from(*i))?,
            _ => return None,
        };
        match value {
            Object::Reference(inner) => Some((**inner).clone()),
            _ => None,
        }
    }

    pub(super) fn deref(&mut self, f: &mut Frame, value: Object, r: &Reader) -> Result<Object> {
        match value {
            Object::Reference(place) => self.read_place(f, &place),
            Object::Name(path) => self.read_named(&path),
            Object::LazyName { name, scope } => match self.resolve(&name, &scope) {
                Some(path) => self.read_named(&path),
                None => Err(self.undefined(&name, r)),
            },
            Object::String(text) => {
                let path = Path::parse(&text).ok_or_else(|| self.err(r, "DerefOf a string that is not a path", 0))?;
                self.read_named(&path)
            }
            other => Ok(other),
        }
    }

    pub(super) fn read_named(&mut self, path: &Path) -> Result<Object> {
        let path = self.follow_alias(path.clone());
        let object = self
            .nodes
            .get(&path)
            .cloned()
            .ok_or_else(|| aml_error(&path, 0, "no such object", 0))?;
        match object {
            Object::Field {
                kind,
                bit_offset,
                bits,
                access_bytes,
                ..
            } => self.read_field(&path, &kind, bit_offset, bits, access_bytes),
            Object::BufferField {
                buffer,
                bit_offset,
                bits,
            } => {
                let mut frame = Frame::new(Path::root(), Vec::new(), false);
                let source = self.read_place(&mut frame, &buffer)?;
                let bytes = self.to_buffer(
                    &source,
                    &Reader {
                        code: Arc::from(&[][..]),
                        pos: 0,
                        end: 0,
                    },
                )?;
                extract_bits(&bytes, bit_offset, bits)
                    .ok_or_else(|| aml_error(&path, 0, "buffer field outside its buffer", bit_offset))
            }
            Object::Method { .. } | Object::OsiMethod => self.call(&path, Vec::new()),
            Object::Integer(_) | Object::String(_) | Object::Buffer(_) | Object::Package(_) | Object::Uninitialized => {
                Ok(object)
            }
            _ => Ok(Object::Name(path)),
        }
    }

    pub(super) fn read_place(&mut self, f: &mut Frame, place: &Place) -> Result<Object> {
        match place {
            Place::Null | Place::Debug => Ok(Object::Uninitialized),
            Place::Local(i) => Ok(f.locals[usize::from(*i)].clone()),
            Place::Arg(i) => Ok(f.args.get(usize::from(*i)).cloned().unwrap_or_default()),
            Place::Named(path) => self.read_named(path),
            Place::Elem(base, index) => {
                // An element of a package, buffer or string held in a local or a plain named
                // object is read where it is: copying the whole container per element read
                // would make a loop over a package quadratic.
                let held = match &**base {
                    Place::Local(i) => f.locals.get(usize::from(*i)),
                    Place::Named(path) => self.nodes.get(path),
                    _ => None,
                };
                if let Some(held @ (Object::Package(_) | Object::Buffer(_) | Object::String(_))) = held {
                    return element_of(held, *index, &self.current);
                }
                let base = self.read_place(f, base)?;
                self.element(base, *index)
            }
            Place::Owned(value, index) => self.element((**value).clone(), *index),
        }
    }

    fn element(&mut self, base: Object, index: u64) -> Result<Object> {
        let base = match base {
            Object::Reference(place) => {
                let mut frame = Frame::new(Path::root(), Vec::new(), false);
                self.read_place(&mut frame, &place)?
            }
            other => other,
        };
        element_of(&base, index, &self.current)
    }

    /// Reads an operator's target operand and stores `value` there; the operator's own result is
    /// `value` too (Store, the arithmetic operators, Concatenate...).
    pub(super) fn store_to_target(&mut self, f: &mut Frame, r: &mut Reader, value: Object) -> Result<Object> {
        let place = self.target(f, r)?;
        self.store(f, &place, value.clone())?;
        Ok(value)
    }

    pub(super) fn store(&mut self, f: &mut Frame, place: &Place, value: Object) -> Result<()> {
        let value = match value {
            // A stored reference to a field stores the field's value (ACPI implicit conversion).
            Object::Name(path) if matches!(self.nodes.get(&path), Some(Object::Field { .. })) => {
                self.read_named(&path)?
            }
            other => other,
        };
        match place {
            Place::Null | Place::Debug => Ok(()),
            Place::Local(i) => {
                f.locals[usize::from(*i)] = value;
                Ok(())
            }
            Place::Arg(i) => {
                let i = usize::from(*i);
                if let Some(Object::Reference(inner)) = f.args.get(i).cloned() {
                    return self.store(f, &inner, value);
                }
                if f.args.len() <= i {
                    f.args.resize(i + 1, Object::Uninitialized);
                }
                f.args[i] = value;
                Ok(())
            }
            Place::Named(path) => self.store_named(path, value),
            Place::Elem(base, index) => {
                let index = usize::try_from(*index).unwrap_or(usize::MAX);
                // A buffer element takes the value's low byte, converted before the buffer is
                // taken out of its place (the value may refer to that buffer).
                let into_buffer = match &**base {
                    Place::Named(path) => {
                        matches!(
                            self.nodes.get(&self.follow_alias(path.clone())),
                            Some(Object::Buffer(_))
                        )
                    }
                    Place::Local(i) => matches!(f.locals[usize::from(*i)], Object::Buffer(_)),
                    _ => false,
                };
                let byte = if into_buffer {
                    let at = self.current.clone();
                    Some(self.integer_of(&value, &at, 0)? as u8)
                } else {
                    None
                };
                // A named or local container is moved out and back, not copied: a loop that fills
                // a package element by element (QEMU's 128-entry `_PRT`) stays linear.
                let (mut container, named) = match &**base {
                    Place::Named(path) => {
                        let path = self.follow_alias(path.clone());
                        match self.nodes.get_mut(&path) {
                            Some(object) => (core::mem::take(object), Some(path)),
                            None => (Object::Uninitialized, None),
                        }
                    }
                    Place::Local(i) => (core::mem::take(&mut f.locals[usize::from(*i)]), None),
                    other => (self.read_place(f, other)?, None),
                };
                let stored = match &mut container {
                    Object::Package(items) => items
                        .get_mut(index)
                        .map(|slot| *slot = value)
                        .ok_or_else(|| aml_error(&self.current, 0, "package index out of range", index as u64)),
                    Object::Buffer(bytes) => {
                        let byte = match byte {
                            Some(byte) => Ok(byte),
                            None => {
                                let at = self.current.clone();
                                self.integer_of(&value, &at, 0).map(|v| v as u8)
                            }
                        };
                        byte.and_then(|byte| {
                            bytes
                                .get_mut(index)
                                .map(|slot| *slot = byte)
                                .ok_or_else(|| aml_error(&self.current, 0, "buffer index out of range", index as u64))
                        })
                    }
                    _ => Err(aml_error(
                        &self.current,
                        0,
                        "store through Index into a value without elements",
                        0,
                    )),
                };
                match &**base {
                    Place::Named(_) => {
                        if let Some(path) = named {
                            self.nodes.insert(path, container);
                        }
                        stored
                    }
                    Place::Local(i) => {
                        f.locals[usize::from(*i)] = container;
                        stored
                    }
                    other => {
                        stored?;
                        self.store(f, &other.clone(), container)
                    }
                }
            }
            Place::Owned(..) => Ok(()),
        }
    }

    pub(super) fn store_named(&mut self, path: &Path, value: Object) -> Result<()> {
        let path = self.follow_alias(path.clone());
        let existing = self.nodes.get(&path).cloned();
        let at = path.clone();
        match existing {
            Some(Object::Field {
                kind,
                bit_offset,
                bits,
                access_bytes,
                update,
            }) => {
                let bytes = match &value {
                    Object::Integer(v) => v.to_le_bytes().to_vec(),
                    Object::Buffer(b) => b.clone(),
                    Object::String(s) => s.as_bytes().to_vec(),
                    _ => return Err(aml_error(&at, 0, "store of a non-data value into a field", 0)),
                };
                self.write_field(&path, &kind, bit_offset, bits, access_bytes, update, &bytes)
            }
            Some(Object::BufferField {
                buffer,
                bit_offset,
                bits,
            }) => {
                let source_bytes = match &value {
                    Object::Integer(v) => v.to_le_bytes().to_vec(),
                    Object::Buffer(b) => b.clone(),
                    _ => return Err(aml_error(&at, 0, "store of a non-integer into a buffer field", 0)),
                };
                let mut frame = Frame::new(Path::root(), Vec::new(), false);
                let mut target = match &*buffer {
                    Place::Named(p) => self
                        .nodes
                        .get(&self.follow_alias(p.clone()))
                        .cloned()
                        .unwrap_or_default(),
                    other => self.read_place(&mut frame, other)?,
                };
                let Object::Buffer(bytes) = &mut target else {
                    return Err(aml_error(&at, 0, "buffer field over a value that is not a buffer", 0));
                };
                if !insert_bits(bytes, bit_offset, bits, &source_bytes) {
                    return Err(aml_error(&at, 0, "buffer field outside its buffer", bit_offset));
                }
                match &*buffer {
                    Place::Named(p) => {
                        let p = self.follow_alias(p.clone());
                        self.nodes.insert(p, target);
                        Ok(())
                    }
                    // A field over a method's local buffer: the local is not reachable from here.
                    _ => Ok(()),
                }
            }
            Some(Object::Integer(_)) => {
                let v = self.integer_of(&value, &at, 0)?;
                self.nodes.insert(path, Object::Integer(v));
                Ok(())
            }
            Some(Object::Buffer(old)) if !matches!(value, Object::Package(_)) => {
                let src = match &value {
                    Object::Integer(v) => v.to_le_bytes().to_vec(),
                    Object::Buffer(b) => b.clone(),
                    Object::String(s) => s.as_bytes().to_vec(),
                    _ => Vec::new(),
                };
                let mut bytes = vec![0u8; old.len()];
                for (d, s) in bytes.iter_mut().zip(src.iter()) {
                    *d = *s;
                }
                self.nodes.insert(path, Object::Buffer(bytes));
                Ok(())
            }
            _ => {
                self.nodes.insert(path, value);
                Ok(())
            }
        }
    }
}

/// Element `index` of a package (the element), buffer or string (the byte as an integer).
fn element_of(base: &Object, index: u64, at: &Path) -> Result<Object> {
    let i = usize::try_from(index).unwrap_or(usize::MAX);
    match base {
        Object::Package(items) => items
            .get(i)
            .cloned()
            .ok_or_else(|| aml_error(at, 0, "package index out of range", index)),
        Object::Buffer(bytes) => bytes
            .get(i)
            .map(|&b| Object::Integer(u64::from(b)))
            .ok_or_else(|| aml_error(at, 0, "buffer index out of range", index)),
        Object::String(s) => s
            .as_bytes()
            .get(i)
            .map(|&b| Object::Integer(u64::from(b)))
            .ok_or_else(|| aml_error(at, 0, "string index out of range", index)),
        _ => Err(aml_error(at, 0, "Index of a value that has no elements", index)),
    }
}
