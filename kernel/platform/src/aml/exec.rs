//! Term lists: the named objects and scopes a table defines while it loads,
//! the statements and control flow (`If`, `While`, `Return`, ...) of method
//! bodies, and method calls.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::interp::{Interpreter, LoadProblem, aml_error};
use super::name::Path;
use super::object::{Object, ScopeKind};
use super::opcode::*;
use super::reader::Reader;
use super::region::DATA_TABLE_SPACE;
use crate::error::{Error, Result};

pub(super) enum Flow {
    Normal,
    Return(Object),
    Break,
    Continue,
}

pub(super) struct Frame {
    pub(super) scope: Path,
    pub(super) locals: [Object; 8],
    pub(super) args: Vec<Object>,
    pub(super) loading: bool,
}

impl Frame {
    pub(super) fn new(scope: Path, args: Vec<Object>, loading: bool) -> Frame {
        Frame {
            scope,
            locals: Default::default(),
            args,
            loading,
        }
    }
}

impl<'h> Interpreter<'h> {
    pub(super) fn exec_list(&mut self, f: &mut Frame, r: &mut Reader, table: usize) -> Result<Flow> {
        while r.pos < r.end {
            let start = r.pos;
            match self.exec_term(f, r, table) {
                Ok(Flow::Normal) => {}
                Ok(other) => return Ok(other),
                Err(error) => {
                    let budget = matches!(&error, Error::Aml { what, .. } if what.starts_with("step budget"));
                    if !f.loading || budget {
                        return Err(error);
                    }
                    self.load_problems.push(LoadProblem { table, error });
                    // Skip the failed object when its length is known, else the rest of this scope.
                    r.pos = start;
                    match self.skip_object(r) {
                        Some(next) if next > start => r.pos = next,
                        _ => return Ok(Flow::Normal),
                    }
                }
            }
        }
        Ok(Flow::Normal)
    }

    /// The end of the object at `r.pos` when it carries a PkgLength.
    fn skip_object(&self, r: &mut Reader) -> Option<usize> {
        let op = self.peek(r)?;
        let packaged = match op {
            SCOPE_OP | METHOD_OP | IF_OP | ELSE_OP | WHILE_OP | BUFFER_OP | PACKAGE_OP | VAR_PACKAGE_OP => 1,
            EXT_OP_PREFIX => match r.code.get(r.pos + 1)? {
                FIELD_OP..=BANK_FIELD_OP => 2,
                _ => return None,
            },
            _ => return None,
        };
        r.pos += packaged;
        self.pkg_end(r).ok()
    }

    fn with_scope(&mut self, f: &mut Frame, r: &mut Reader, table: usize, scope: Path, end: usize) -> Result<Flow> {
        let saved_scope = core::mem::replace(&mut f.scope, scope);
        let saved_end = core::mem::replace(&mut r.end, end);
        let result = self.exec_list(f, r, table);
        r.end = saved_end;
        f.scope = saved_scope;
        r.pos = end;
        result
    }

    /// One term. Dispatches to a helper per kind so that the frames on the
    /// nesting path (blocks, scopes, devices) stay small in debug builds too.
    fn exec_term(&mut self, f: &mut Frame, r: &mut Reader, table: usize) -> Result<Flow> {
        self.step(r)?;
        let Some(op) = self.peek(r) else {
            return Ok(Flow::Normal);
        };
        match op {
            SCOPE_OP => self.exec_scope_op(f, r, table),
            IF_OP => self.exec_if(f, r, table),
            WHILE_OP => self.exec_while(f, r, table),
            EXT_OP_PREFIX => {
                let ext = r.code.get(r.pos + 1).copied().unwrap_or(0);
                if (DEVICE_OP..=THERMAL_ZONE_OP).contains(&ext) {
                    self.exec_scoped_object(f, r, table, ext)
                } else {
                    self.exec_ext(f, r)
                }
            }
            _ => self.exec_term_other(f, r, table, op),
        }
    }

    /// `Scope`: its term list in the named scope.
    #[inline(never)]
    fn exec_scope_op(&mut self, f: &mut Frame, r: &mut Reader, table: usize) -> Result<Flow> {
        r.pos += 1;
        let end = self.pkg_end(r)?;
        let name = self.name_string(r)?;
        let path = self.resolve(&name, &f.scope).unwrap_or_else(|| name.in_scope(&f.scope));
        self.define_scope(&path, ScopeKind::Scope);
        self.enter(r)?;
        let flow = self.with_scope(f, r, table, path, end);
        self.depth -= 1;
        flow
    }

    /// `If` (and a following `Else`).
    #[inline(never)]
    fn exec_if(&mut self, f: &mut Frame, r: &mut Reader, table: usize) -> Result<Flow> {
        r.pos += 1;
        let end = self.pkg_end(r)?;
        let saved_end = core::mem::replace(&mut r.end, end);
        let predicate = self.eval_int(f, r);
        r.end = saved_end;
        let taken = predicate? != 0;
        let mut flow = Flow::Normal;
        if taken {
            self.enter(r)?;
            let scope = f.scope.clone();
            let result = self.with_scope(f, r, table, scope, end);
            self.depth -= 1;
            let flow = result?;
            if self.peek(r) == Some(ELSE_OP) {
                r.pos += 1;
                r.pos = self.pkg_end(r)?;
            }
            return Ok(flow);
        }
        r.pos = end;
        if self.peek(r) == Some(ELSE_OP) {
            r.pos += 1;
            let else_end = self.pkg_end(r)?;
            self.enter(r)?;
            let scope = f.scope.clone();
            let result = self.with_scope(f, r, table, scope, else_end);
            self.depth -= 1;
            flow = result?;
        }
        Ok(flow)
    }

    /// `While`.
    #[inline(never)]
    fn exec_while(&mut self, f: &mut Frame, r: &mut Reader, table: usize) -> Result<Flow> {
        r.pos += 1;
        let end = self.pkg_end(r)?;
        let start = r.pos;
        self.enter(r)?;
        let result = (|| -> Result<Flow> {
            loop {
                r.pos = start;
                let saved_end = core::mem::replace(&mut r.end, end);
                let predicate = self.eval_int(f, r);
                r.end = saved_end;
                if predicate? == 0 {
                    return Ok(Flow::Normal);
                }
                let scope = f.scope.clone();
                match self.with_scope(f, r, table, scope, end)? {
                    Flow::Break => return Ok(Flow::Normal),
                    Flow::Return(v) => return Ok(Flow::Return(v)),
                    Flow::Normal | Flow::Continue => {}
                }
            }
        })();
        self.depth -= 1;
        r.pos = end;
        result
    }

    /// The other statements and named objects.
    #[inline(never)]
    fn exec_term_other(&mut self, f: &mut Frame, r: &mut Reader, table: usize, op: u8) -> Result<Flow> {
        match op {
            NAME_OP => {
                r.pos += 1;
                let name = self.name_string(r)?;
                let value = self.eval(f, r)?;
                let path = name.in_scope(&f.scope);
                self.define(path, value);
                Ok(Flow::Normal)
            }
            METHOD_OP => {
                r.pos += 1;
                let end = self.pkg_end(r)?;
                let name = self.name_string(r)?;
                let flags = self.byte(r)?;
                let path = name.in_scope(&f.scope);
                self.define(
                    path,
                    Object::Method {
                        table,
                        start: r.pos,
                        end,
                        args: flags & 7,
                    },
                );
                r.pos = end;
                Ok(Flow::Normal)
            }
            ALIAS_OP => {
                r.pos += 1;
                let source = self.name_string(r)?;
                let alias = self.name_string(r)?;
                let target = self
                    .resolve(&source, &f.scope)
                    .unwrap_or_else(|| source.in_scope(&f.scope));
                self.define(alias.in_scope(&f.scope), Object::Alias(target));
                Ok(Flow::Normal)
            }
            EXTERNAL_OP => {
                r.pos += 1;
                self.name_string(r)?;
                self.byte(r)?;
                self.byte(r)?;
                Ok(Flow::Normal)
            }
            ELSE_OP => {
                r.pos += 1;
                r.pos = self.pkg_end(r)?;
                Ok(Flow::Normal)
            }
            NOOP_OP | BREAK_POINT_OP => {
                r.pos += 1;
                Ok(Flow::Normal)
            }
            RETURN_OP => {
                r.pos += 1;
                let value = self.eval(f, r)?;
                Ok(Flow::Return(value))
            }
            BREAK_OP => {
                r.pos += 1;
                Ok(Flow::Break)
            }
            CONTINUE_OP => {
                r.pos += 1;
                Ok(Flow::Continue)
            }
            NOTIFY_OP => {
                r.pos += 1;
                self.target(f, r)?;
                self.eval(f, r)?;
                Ok(Flow::Normal)
            }
            CREATE_DWORD_FIELD_OP
            | CREATE_WORD_FIELD_OP
            | CREATE_BYTE_FIELD_OP
            | CREATE_BIT_FIELD_OP
            | CREATE_QWORD_FIELD_OP => {
                r.pos += 1;
                self.create_field(f, r, op)?;
                Ok(Flow::Normal)
            }
            _ => {
                self.eval(f, r)?;
                Ok(Flow::Normal)
            }
        }
    }

    /// `Device`, `Processor`, `PowerResource`, `ThermalZone`: a named scope with its term list.
    #[inline(never)]
    fn exec_scoped_object(&mut self, f: &mut Frame, r: &mut Reader, table: usize, ext: u8) -> Result<Flow> {
        r.pos += 2;
        let end = self.pkg_end(r)?;
        let name = self.name_string(r)?;
        let kind = match ext {
            DEVICE_OP => ScopeKind::Device,
            PROCESSOR_OP => {
                // ProcID, PblkAddr, PblkLen.
                self.le(r, 6)?;
                ScopeKind::Processor
            }
            POWER_RES_OP => {
                // SystemLevel, ResourceOrder.
                self.le(r, 3)?;
                ScopeKind::PowerResource
            }
            _ => ScopeKind::ThermalZone,
        };
        let path = name.in_scope(&f.scope);
        self.define_scope(&path, kind);
        self.enter(r)?;
        let flow = self.with_scope(f, r, table, path, end);
        self.depth -= 1;
        flow
    }

    #[inline(never)]
    fn exec_ext(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Flow> {
        let ext = r.code.get(r.pos + 1).copied().unwrap_or(0);
        match ext {
            MUTEX_OP | EVENT_OP => {
                r.pos += 2;
                let name = self.name_string(r)?;
                if ext == MUTEX_OP {
                    self.byte(r)?;
                }
                let object = if ext == MUTEX_OP { Object::Mutex } else { Object::Event };
                self.define(name.in_scope(&f.scope), object);
            }
            OP_REGION_OP => {
                r.pos += 2;
                let name = self.name_string(r)?;
                let space = self.byte(r)?;
                let offset = self.eval_int(f, r)?;
                let len = self.eval_int(f, r)?;
                self.define(name.in_scope(&f.scope), Object::Region { space, offset, len });
            }
            DATA_REGION_OP => {
                r.pos += 2;
                let name = self.name_string(r)?;
                for _ in 0..3 {
                    self.eval(f, r)?;
                }
                // Table-backed regions are not supported: any access errors.
                self.define(
                    name.in_scope(&f.scope),
                    Object::Region {
                        space: DATA_TABLE_SPACE,
                        offset: 0,
                        len: 0,
                    },
                );
            }
            FIELD_OP | INDEX_FIELD_OP | BANK_FIELD_OP => {
                r.pos += 2;
                let end = self.pkg_end(r)?;
                let saved_end = core::mem::replace(&mut r.end, end);
                let result = self.field_definition(f, r, ext);
                r.end = saved_end;
                r.pos = end;
                result?;
            }
            CREATE_FIELD_OP => {
                r.pos += 2;
                let buffer = self.buffer_place(f, r)?;
                let bit_offset = self.eval_int(f, r)?;
                let bits = self.eval_int(f, r)?;
                let name = self.name_string(r)?;
                self.define(
                    name.in_scope(&f.scope),
                    Object::BufferField {
                        buffer: Box::new(buffer),
                        bit_offset,
                        bits,
                    },
                );
            }
            STALL_OP | SLEEP_OP => {
                // Stall / Sleep: no waiting at boot; the step budget bounds polling loops.
                r.pos += 2;
                self.eval(f, r)?;
            }
            SIGNAL_OP | RESET_OP | RELEASE_OP => {
                r.pos += 2;
                self.target(f, r)?;
            }
            FATAL_OP => {
                r.pos += 2;
                let kind = self.byte(r)?;
                let _code = self.le(r, 4)?;
                self.eval(f, r)?;
                return Err(self.err(r, "firmware executed Fatal", u64::from(kind)));
            }
            LOAD_TABLE_OP | LOAD_OP => {
                return Err(self.err(r, "Load/LoadTable (dynamic tables) is not supported", u64::from(ext)));
            }
            _ => {
                self.eval(f, r)?;
            }
        }
        Ok(Flow::Normal)
    }

    pub(super) fn call(&mut self, path: &Path, args: Vec<Object>) -> Result<Object> {
        let (table, start, end) = match self.nodes.get(path) {
            Some(Object::Method { table, start, end, .. }) => (*table, *start, *end),
            Some(Object::OsiMethod) => {
                let supported = match args.first() {
                    Some(Object::String(s)) => osi_supported(s),
                    _ => false,
                };
                return Ok(self.boolean(supported));
            }
            _ => return Err(aml_error(path, 0, "not a method", 0)),
        };
        let code = self
            .tables
            .get(table)
            .cloned()
            .ok_or_else(|| aml_error(path, 0, "method in an unknown table", table as u64))?;
        let mut reader = Reader { code, pos: start, end };
        self.enter(&reader)?;
        let saved_current = core::mem::replace(&mut self.current, path.clone());
        let mut frame = Frame::new(path.clone(), args, false);
        let result = self.exec_list(&mut frame, &mut reader, table);
        self.current = saved_current;
        self.depth -= 1;
        match result? {
            Flow::Return(value) => Ok(value),
            _ => Ok(Object::Uninitialized),
        }
    }
}

fn osi_supported(feature: &str) -> bool {
    const WINDOWS: [&str; 17] = [
        "Windows 2000",
        "Windows 2001",
        "Windows 2001 SP1",
        "Windows 2001.1",
        "Windows 2001 SP2",
        "Windows 2001.1 SP1",
        "Windows 2006",
        "Windows 2006.1",
        "Windows 2006 SP1",
        "Windows 2006 SP2",
        "Windows 2009",
        "Windows 2012",
        "Windows 2013",
        "Windows 2015",
        "Windows 2016",
        "Windows 2017",
        "Windows 2018",
    ];
    const OTHER: [&str; 9] = [
        "Windows 2017.2",
        "Windows 2018.2",
        "Windows 2019",
        "Windows 2020",
        "Windows 2021",
        "Windows 2022",
        "Module Device",
        "Processor Device",
        "Extended Address Space Descriptor",
    ];
    WINDOWS.contains(&feature) || OTHER.contains(&feature) || feature == "3.0 Thermal Model"
}
