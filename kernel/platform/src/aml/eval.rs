//! Expressions (TermArgs): literals, buffers and packages, locals and
//! arguments, arithmetic, logic, conversions, and names (a method call or a
//! named object's value). Each evaluates to an object.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::convert::parse_integer_text;
use super::exec::Frame;
use super::interp::{Interpreter, MAX_OBJECT_BYTES};
use super::name::{Path, is_name_start};
use super::object::{Object, Place, ScopeKind};
use super::opcode::*;
use super::reader::Reader;
use crate::error::Result;

impl<'h> Interpreter<'h> {
    pub(super) fn eval_int(&mut self, f: &mut Frame, r: &mut Reader) -> Result<u64> {
        let at = r.pos;
        let value = self.eval(f, r)?;
        // Most operands are integers already: no conversion, and no copy of the scope that a
        // conversion error would name.
        if let Object::Integer(v) = value {
            return Ok(v);
        }
        let scope = f.scope.clone();
        self.integer_of(&value, &scope, at)
    }

    pub(super) fn eval(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Object> {
        self.step(r)?;
        self.enter(r)?;
        let result = self.eval_inner(f, r);
        self.depth -= 1;
        result
    }

    fn binary(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let a = self.eval_int(f, r)?;
        let b = self.eval_int(f, r)?;
        let value = match op {
            ADD_OP => a.wrapping_add(b),
            SUBTRACT_OP => a.wrapping_sub(b),
            MULTIPLY_OP => a.wrapping_mul(b),
            SHIFT_LEFT_OP => {
                if b >= 64 {
                    0
                } else {
                    a << b
                }
            }
            SHIFT_RIGHT_OP => {
                if b >= 64 {
                    0
                } else {
                    a >> b
                }
            }
            AND_OP => a & b,
            NAND_OP => !(a & b),
            OR_OP => a | b,
            NOR_OP => !(a | b),
            XOR_OP => a ^ b,
            _ => {
                if b == 0 {
                    return Err(self.err(r, "Mod by zero", 0));
                }
                a % b
            }
        } & self.ones();
        self.store_to_target(f, r, Object::Integer(value))
    }

    /// Dispatches on the opcode to a helper per group: each helper's frame holds only its
    /// own group's locals (a debug build gives every local of a function its own slot, and
    /// every nesting level passes through here).
    fn eval_inner(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Object> {
        let op = self.byte(r)?;
        match op {
            ZERO_OP..=QWORD_PREFIX | ONES_OP | BUFFER_OP..=VAR_PACKAGE_OP | LOCAL0_OP..=ARG6_OP => {
                self.eval_data(f, r, op)
            }
            CONCAT_OP | DEREF_OF_OP | CONCAT_RES_OP | SIZE_OF_OP..=CREATE_QWORD_FIELD_OP => self.eval_objects(f, r, op),
            STORE_OP..=FIND_SET_RIGHT_BIT_OP | MOD_OP => self.eval_arith(f, r, op),
            LAND_OP..=LLESS_OP => self.eval_logic(f, r, op),
            TO_BUFFER_OP..=MID_OP => self.eval_convert(f, r, op),
            EXT_OP_PREFIX => self.eval_ext_expr(f, r),
            b if is_name_start(b) => self.eval_name(f, r, op),
            _ => Err(self.err(r, "unsupported opcode", u64::from(op))),
        }
    }

    /// Literals, buffers, packages, locals and arguments.
    #[inline(never)]
    fn eval_data(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let value = match op {
            ZERO_OP => Object::Integer(0),
            ONE_OP => Object::Integer(1),
            ONES_OP => Object::Integer(self.ones()),
            BYTE_PREFIX => Object::Integer(self.le(r, 1)?),
            WORD_PREFIX => Object::Integer(self.le(r, 2)?),
            DWORD_PREFIX => Object::Integer(self.le(r, 4)?),
            QWORD_PREFIX => Object::Integer(self.le(r, 8)? & self.ones()),
            STRING_PREFIX => {
                let mut s = String::new();
                loop {
                    let b = self.byte(r)?;
                    if b == 0 {
                        break;
                    }
                    s.push(b as char);
                }
                Object::String(s)
            }
            BUFFER_OP => {
                let end = self.pkg_end(r)?;
                let saved_end = core::mem::replace(&mut r.end, end);
                let size = self.eval_int(f, r);
                r.end = saved_end;
                let size = size?;
                if size > MAX_OBJECT_BYTES {
                    return Err(self.err(r, "buffer larger than the interpreter's limit", size));
                }
                let mut bytes = r.code[r.pos..end].to_vec();
                if bytes.len() < size as usize {
                    bytes.resize(size as usize, 0);
                }
                r.pos = end;
                Object::Buffer(bytes)
            }
            PACKAGE_OP | VAR_PACKAGE_OP => {
                let end = self.pkg_end(r)?;
                let saved_end = core::mem::replace(&mut r.end, end);
                let result = self.package_body(f, r, op == VAR_PACKAGE_OP);
                r.end = saved_end;
                r.pos = end;
                Object::Package(result?)
            }
            LOCAL0_OP..=LOCAL7_OP => f.locals[usize::from(op - LOCAL0_OP)].clone(),
            ARG0_OP..=ARG6_OP => {
                let value = f.args.get(usize::from(op - ARG0_OP)).cloned().unwrap_or_default();
                match value {
                    Object::Reference(place) => self.read_place(f, &place)?,
                    other => other,
                }
            }
            _ => return Err(self.err(r, "unsupported opcode", u64::from(op))),
        };
        Ok(value)
    }

    /// Store, RefOf and integer arithmetic.
    #[inline(never)]
    fn eval_arith(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let value = match op {
            STORE_OP => {
                let value = self.eval(f, r)?;
                self.store_to_target(f, r, value)?
            }
            REF_OF_OP => Object::Reference(Box::new(self.target(f, r)?)),
            ADD_OP | SUBTRACT_OP | MULTIPLY_OP | SHIFT_LEFT_OP | SHIFT_RIGHT_OP | AND_OP | NAND_OP | OR_OP | NOR_OP
            | XOR_OP | MOD_OP => {
                return self.binary(f, r, op);
            }
            DIVIDE_OP => {
                let a = self.eval_int(f, r)?;
                let b = self.eval_int(f, r)?;
                if b == 0 {
                    return Err(self.err(r, "Divide by zero", 0));
                }
                let remainder = self.target(f, r)?;
                let quotient = self.target(f, r)?;
                self.store(f, &remainder, Object::Integer(a % b))?;
                self.store(f, &quotient, Object::Integer(a / b))?;
                Object::Integer(a / b)
            }
            NOT_OP..=FIND_SET_RIGHT_BIT_OP => {
                let a = self.eval_int(f, r)?;
                let value = match op {
                    NOT_OP => !a & self.ones(),
                    FIND_SET_LEFT_BIT_OP => {
                        if a == 0 {
                            0
                        } else {
                            64 - u64::from(a.leading_zeros())
                        }
                    }
                    _ => {
                        if a == 0 {
                            0
                        } else {
                            u64::from(a.trailing_zeros()) + 1
                        }
                    }
                };
                self.store_to_target(f, r, Object::Integer(value))?
            }
            INCREMENT_OP | DECREMENT_OP => {
                let place = self.target(f, r)?;
                let current = self.read_place(f, &place)?;
                let scope = f.scope.clone();
                let current = self.integer_of(&current, &scope, r.pos)?;
                let value = if op == INCREMENT_OP {
                    current.wrapping_add(1)
                } else {
                    current.wrapping_sub(1)
                } & self.ones();
                self.store(f, &place, Object::Integer(value))?;
                Object::Integer(value)
            }
            _ => return Err(self.err(r, "unsupported opcode", u64::from(op))),
        };
        Ok(value)
    }

    /// Concatenation, references, Index, Match, SizeOf, ObjectType, buffer fields.
    #[inline(never)]
    fn eval_objects(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let value = match op {
            CONCAT_OP => {
                let a = self.eval(f, r)?;
                let b = self.eval(f, r)?;
                let value = self.concat(a, b, r)?;
                self.store_to_target(f, r, value)?
            }
            CONCAT_RES_OP => {
                let a = self.eval(f, r)?;
                let b = self.eval(f, r)?;
                let mut bytes = self.to_buffer(&a, r)?;
                // Drop the first template's end tag (0x79, checksum).
                if bytes.len() >= 2 && bytes[bytes.len() - 2] == 0x79 {
                    bytes.truncate(bytes.len() - 2);
                }
                bytes.extend(self.to_buffer(&b, r)?);
                let value = Object::Buffer(bytes);
                self.store_to_target(f, r, value)?
            }
            DEREF_OF_OP => {
                let value = self.eval(f, r)?;
                self.deref(f, value, r)?
            }
            SIZE_OF_OP => {
                let place = self.target(f, r)?;
                let value = self.read_place(f, &place)?;
                let value = self.deref(f, value, r)?;
                Object::Integer(match &value {
                    Object::String(s) => s.len() as u64,
                    Object::Buffer(b) => b.len() as u64,
                    Object::Package(p) => p.len() as u64,
                    _ => return Err(self.err(r, "SizeOf an object without a size", 0)),
                })
            }
            INDEX_OP => {
                let base = match self.peek(r) {
                    Some(b) if (LOCAL0_OP..=ARG6_OP).contains(&b) || is_name_start(b) => {
                        let place = self.target(f, r)?;
                        // A local or argument holding a reference indexes what it refers to.
                        match self.place_value_if_reference(f, &place) {
                            Some(inner) => inner,
                            None => place,
                        }
                    }
                    _ => {
                        let value = self.eval(f, r)?;
                        match value {
                            Object::Reference(place) => *place,
                            other => Place::Owned(Box::new(other), 0),
                        }
                    }
                };
                let index = self.eval_int(f, r)?;
                let reference = match base {
                    Place::Owned(value, _) => Place::Owned(value, index),
                    other => Place::Elem(Box::new(other), index),
                };
                let value = Object::Reference(Box::new(reference));
                self.store_to_target(f, r, value)?
            }
            MATCH_OP => {
                let package = self.eval(f, r)?;
                let package = self.deref(f, package, r)?;
                let op1 = self.byte(r)?;
                let obj1 = self.eval_int(f, r)?;
                let op2 = self.byte(r)?;
                let obj2 = self.eval_int(f, r)?;
                let start = self.eval_int(f, r)?;
                let Object::Package(items) = package else {
                    return Err(self.err(r, "Match on something other than a package", 0));
                };
                let test = |op: u8, value: u64, operand: u64| match op {
                    MTR => true,
                    MEQ => value == operand,
                    MLE => value <= operand,
                    MLT => value < operand,
                    MGE => value >= operand,
                    // MGT, and any other value.
                    _ => value > operand,
                };
                let mut found = self.ones();
                let start = usize::try_from(start).unwrap_or(usize::MAX);
                for (i, item) in items.iter().enumerate().skip(start) {
                    if let Object::Integer(v) = item
                        && test(op1, *v, obj1)
                        && test(op2, *v, obj2)
                    {
                        found = i as u64;
                        break;
                    }
                }
                Object::Integer(found)
            }
            OBJECT_TYPE_OP => {
                let place = self.target(f, r)?;
                let code = match &place {
                    Place::Named(path) => match self.nodes.get(path) {
                        Some(Object::Integer(_)) => 1,
                        Some(Object::String(_)) => 2,
                        Some(Object::Buffer(_)) => 3,
                        Some(Object::Package(_)) => 4,
                        Some(Object::Field { .. }) => 5,
                        Some(Object::Scope(ScopeKind::Device)) => 6,
                        Some(Object::Event) => 7,
                        Some(Object::Method { .. } | Object::OsiMethod) => 8,
                        Some(Object::Mutex) => 9,
                        Some(Object::Region { .. }) => 10,
                        Some(Object::Scope(ScopeKind::PowerResource)) => 11,
                        Some(Object::Scope(ScopeKind::Processor)) => 12,
                        Some(Object::Scope(ScopeKind::ThermalZone)) => 13,
                        Some(Object::BufferField { .. }) => 14,
                        _ => 0,
                    },
                    other => match self.read_place(f, other)? {
                        Object::Integer(_) => 1,
                        Object::String(_) => 2,
                        Object::Buffer(_) => 3,
                        Object::Package(_) => 4,
                        _ => 0,
                    },
                };
                Object::Integer(code)
            }
            CREATE_DWORD_FIELD_OP
            | CREATE_WORD_FIELD_OP
            | CREATE_BYTE_FIELD_OP
            | CREATE_BIT_FIELD_OP
            | CREATE_QWORD_FIELD_OP => {
                self.create_field(f, r, op)?;
                Object::Integer(0)
            }
            _ => return Err(self.err(r, "unsupported opcode", u64::from(op))),
        };
        Ok(value)
    }

    /// Logical operators and comparisons.
    #[inline(never)]
    fn eval_logic(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let value = match op {
            LAND_OP | LOR_OP => {
                let a = self.eval_int(f, r)?;
                let b = self.eval_int(f, r)?;
                let truth = if op == LAND_OP {
                    a != 0 && b != 0
                } else {
                    a != 0 || b != 0
                };
                self.boolean(truth)
            }
            LNOT_OP => {
                let a = self.eval_int(f, r)?;
                self.boolean(a == 0)
            }
            LEQUAL_OP..=LLESS_OP => {
                let a = self.eval(f, r)?;
                let b = self.eval(f, r)?;
                let ordering = self.compare(&a, &b, r)?;
                let truth = match op {
                    LEQUAL_OP => ordering == core::cmp::Ordering::Equal,
                    LGREATER_OP => ordering == core::cmp::Ordering::Greater,
                    _ => ordering == core::cmp::Ordering::Less,
                };
                self.boolean(truth)
            }
            _ => return Err(self.err(r, "unsupported opcode", u64::from(op))),
        };
        Ok(value)
    }

    /// Conversions, CopyObject and Mid.
    #[inline(never)]
    fn eval_convert(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let value = match op {
            TO_BUFFER_OP => {
                let a = self.eval(f, r)?;
                let value = Object::Buffer(self.to_buffer(&a, r)?);
                self.store_to_target(f, r, value)?
            }
            TO_DECIMAL_STRING_OP | TO_HEX_STRING_OP => {
                let a = self.eval(f, r)?;
                let text = match &a {
                    Object::Integer(v) if op == TO_DECIMAL_STRING_OP => alloc::format!("{v}"),
                    Object::Integer(v) => alloc::format!("0x{v:X}"),
                    Object::String(s) => s.clone(),
                    Object::Buffer(b) => {
                        let parts: Vec<String> = b
                            .iter()
                            .map(|x| {
                                if op == TO_DECIMAL_STRING_OP {
                                    alloc::format!("{x}")
                                } else {
                                    alloc::format!("0x{x:02X}")
                                }
                            })
                            .collect();
                        parts.join(",")
                    }
                    _ => return Err(self.err(r, "cannot convert to a string", 0)),
                };
                let value = Object::String(text);
                self.store_to_target(f, r, value)?
            }
            TO_INTEGER_OP => {
                let a = self.eval(f, r)?;
                let value = match &a {
                    Object::String(s) => Object::Integer(parse_integer_text(s) & self.ones()),
                    other => Object::Integer(self.integer_of(other, &Path::root(), r.pos)?),
                };
                self.store_to_target(f, r, value)?
            }
            TO_STRING_OP => {
                let a = self.eval(f, r)?;
                let len = self.eval_int(f, r)?;
                let bytes = self.to_buffer(&a, r)?;
                let text: String = bytes
                    .iter()
                    .take(len.min(bytes.len() as u64) as usize)
                    .take_while(|&&b| b != 0)
                    .map(|&b| b as char)
                    .collect();
                let value = Object::String(text);
                self.store_to_target(f, r, value)?
            }
            COPY_OBJECT_OP => {
                let value = self.eval(f, r)?;
                let place = self.target(f, r)?;
                match &place {
                    Place::Named(path) => {
                        self.nodes.insert(path.clone(), value.clone());
                    }
                    Place::Local(i) => f.locals[usize::from(*i)] = value.clone(),
                    other => self.store(f, other, value.clone())?,
                }
                value
            }
            MID_OP => {
                let source = self.eval(f, r)?;
                // Past the end (or past usize) takes nothing.
                let index = usize::try_from(self.eval_int(f, r)?).unwrap_or(usize::MAX);
                let len = usize::try_from(self.eval_int(f, r)?).unwrap_or(usize::MAX);
                let value = match source {
                    Object::String(s) => Object::String(s.chars().skip(index).take(len).collect()),
                    other => {
                        let bytes = self.to_buffer(&other, r)?;
                        Object::Buffer(bytes.iter().skip(index).take(len).copied().collect())
                    }
                };
                self.store_to_target(f, r, value)?
            }
            _ => return Err(self.err(r, "unsupported opcode", u64::from(op))),
        };
        Ok(value)
    }

    /// Extended (0x5B) expression opcodes.
    #[inline(never)]
    fn eval_ext_expr(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Object> {
        let ext = self.byte(r)?;
        let value = match ext {
            COND_REF_OF_OP => {
                let name_at = r.pos;
                let exists = match self.peek(r) {
                    Some(b) if is_name_start(b) => {
                        let name = self.name_string(r)?;
                        self.resolve(&name, &f.scope).map(Place::Named)
                    }
                    _ => {
                        r.pos = name_at;
                        Some(self.target(f, r)?)
                    }
                };
                let place = self.target(f, r)?;
                match exists {
                    Some(found) => {
                        self.store(f, &place, Object::Reference(Box::new(found)))?;
                        Object::Integer(self.ones())
                    }
                    None => Object::Integer(0),
                }
            }
            ACQUIRE_OP => {
                self.target(f, r)?;
                self.le(r, 2)?;
                // Acquired (there is one thread at boot).
                Object::Integer(0)
            }
            WAIT_OP => {
                self.target(f, r)?;
                self.eval(f, r)?;
                Object::Integer(0)
            }
            FROM_BCD_OP | TO_BCD_OP => {
                let a = self.eval_int(f, r)?;
                let value = if ext == FROM_BCD_OP { from_bcd(a) } else { to_bcd(a) };
                let place = self.target(f, r)?;
                self.store(f, &place, Object::Integer(value))?;
                Object::Integer(value)
            }
            REVISION_OP => Object::Integer(1),
            DEBUG_OP => Object::Uninitialized,
            // Timer: 100 ns units; the step count stands in for time.
            TIMER_OP => Object::Integer(self.steps_total),
            _ => return Err(self.err(r, "unsupported extended opcode 0x5B", u64::from(ext))),
        };
        Ok(value)
    }

    /// A name: a method call or a named object's value.
    #[inline(never)]
    fn eval_name(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let value = match op {
            b if is_name_start(b) => {
                r.pos -= 1;
                let name = self.name_string(r)?;
                let Some(path) = self.resolve(&name, &f.scope) else {
                    return Err(self.undefined(&name, r));
                };
                match self.nodes.get(&path) {
                    Some(Object::Method { args, .. }) => {
                        let count = *args;
                        let mut values = Vec::with_capacity(usize::from(count));
                        for _ in 0..count {
                            values.push(self.eval(f, r)?);
                        }
                        self.call(&path, values)?
                    }
                    Some(Object::OsiMethod) => {
                        let arg = self.eval(f, r)?;
                        self.call(&path, vec![arg])?
                    }
                    _ => self.read_named(&path)?,
                }
            }
            _ => return Err(self.err(r, "unsupported opcode", u64::from(op))),
        };
        Ok(value)
    }

    fn package_body(&mut self, f: &mut Frame, r: &mut Reader, variable: bool) -> Result<Vec<Object>> {
        let count = if variable {
            self.eval_int(f, r)?
        } else {
            u64::from(self.byte(r)?)
        };
        if count > MAX_OBJECT_BYTES {
            return Err(self.err(r, "package larger than the interpreter's limit", count));
        }
        let mut items = Vec::new();
        while r.pos < r.end {
            match self.peek(r) {
                Some(b) if is_name_start(b) => {
                    let name = self.name_string(r)?;
                    items.push(match self.resolve(&name, &f.scope) {
                        Some(path) => Object::Name(path),
                        None => Object::LazyName {
                            name,
                            scope: f.scope.clone(),
                        },
                    });
                }
                _ => {
                    let value = self.eval(f, r)?;
                    items.push(value);
                }
            }
        }
        if items.len() < count as usize {
            items.resize(count as usize, Object::Uninitialized);
        }
        Ok(items)
    }
}

fn from_bcd(mut v: u64) -> u64 {
    let mut out = 0u64;
    let mut scale = 1u64;
    while v != 0 {
        out = out.wrapping_add((v & 0xF) * scale);
        scale = scale.wrapping_mul(10);
        v >>= 4;
    }
    out
}

fn to_bcd(mut v: u64) -> u64 {
    let mut out = 0u64;
    let mut shift = 0;
    while v != 0 && shift < 64 {
        out |= (v % 10) << shift;
        v /= 10;
        shift += 4;
    }
    out
}
