//! A small, bounded AML interpreter: loads the DSDT and SSDTs into a
//! namespace and evaluates the objects baremq asks for (`_HID`, `_CRS`,
//! `_PRT`, ...), executing method bodies directly from the byte code.
//!
//! Why our own: the `acpi` crate's interpreter (6.x) and the older `aml`
//! crate need nightly Rust (`allocator_api`, `decl_macro`), and 6.1's has
//! `todo!()`/`panic!()` paths for opcodes real firmware uses (`Match`,
//! `Load`, `CopyObject`): a panic would stop the boot, and an AML failure
//! must only ever cost the AML results. Here every failure is an
//! [`Error::Aml`], and the work is bounded: a step budget per evaluation
//! and in all, a nesting depth limit (the boot stack is 512 KiB), and no
//! waiting (`Sleep`, `Stall`, `Acquire`, `Wait` return at once).
//!
//! Supported: the whole ACPI 6 term grammar except `Load`/`LoadTable`,
//! `ConnectField` and the serial-bus/GPIO/EC/SMBus/IPMI address spaces
//! (each an error naming it). Known simplifications: names a method
//! creates stay in the namespace after it returns; `Store` to a named
//! integer or buffer converts, other stores replace; `\_OSI` answers true
//! for "Windows 2000".."Windows 2022" and a few features, false otherwise
//! (as Linux does).

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use pci_types::PciAddress;

use super::name::{NameString, Path, Seg, eisa_id_text, is_name_start};
use crate::error::{Error, Result, Token};

/// Steps (opcodes) one top-level evaluation may take.
pub const STEPS_PER_EVALUATION: u64 = 400_000;
/// Steps all loading and evaluation together may take.
pub const STEPS_IN_ALL: u64 = 8_000_000;
/// Nesting depth (expressions, blocks and method calls together).
pub const MAX_DEPTH: u32 = 48;
/// Stack the interpreter may use below the frame that started an evaluation.
/// Checked at every nesting level, whatever the build: a debug build's frames
/// are many times a release build's, and the kernel runs AML on its 512 KiB
/// boot stack.
pub const STACK_BUDGET: usize = 160 * 1024;
/// Configuration-space offset of a PCI bridge's secondary bus number.
const PCI_SECONDARY_BUS: u64 = 0x19;
/// Largest field or buffer the interpreter builds, in bytes.
const MAX_OBJECT_BYTES: u64 = 64 * 1024;

/// Where an operation region lives, as the handler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionSpace {
    /// `SystemMemory`: physical address.
    Memory,
    /// `SystemIO`: port.
    Io,
    /// `PCI_Config` of one function: offset into its configuration space.
    PciConfig(PciAddress),
}

/// Hardware access for operation regions. The kernel implements it with
/// real port, MMIO and configuration-space accesses; the host (preflight,
/// tests) uses [`FixedRegions`].
pub trait RegionHandler {
    /// Reads `width` (1, 2, 4 or 8) bytes at `address` in `space`.
    fn read(&mut self, space: RegionSpace, address: u64, width: u8) -> Result<u64>;
    /// Writes `width` bytes.
    fn write(&mut self, space: RegionSpace, address: u64, width: u8, value: u64) -> Result<()>;
}

/// The host's region handler: every read returns `value` (0 by default:
/// "nothing set"), writes are dropped. Both are counted.
#[derive(Debug, Default, Clone)]
pub struct FixedRegions {
    pub value: u64,
    pub reads: u64,
    pub writes: u64,
}

impl RegionHandler for FixedRegions {
    fn read(&mut self, _space: RegionSpace, _address: u64, width: u8) -> Result<u64> {
        self.reads += 1;
        Ok(if width >= 8 {
            self.value
        } else {
            self.value & ((1u64 << (u32::from(width) * 8)) - 1)
        })
    }

    fn write(&mut self, _space: RegionSpace, _address: u64, _width: u8, _value: u64) -> Result<()> {
        self.writes += 1;
        Ok(())
    }
}

/// Where a stored value goes or a referenced value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Place {
    Null,
    Debug,
    Local(u8),
    Arg(u8),
    Named(Path),
    /// Element `index` of a package, buffer or string.
    Elem(Box<Place>, u64),
    /// Element `index` of a value that lives nowhere (writes are dropped).
    Owned(Box<Object>, u64),
}

/// How a field reaches its register.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    Region(Path),
    /// Write the byte offset to `index`, then access `data`.
    Index {
        index: Path,
        data: Path,
    },
    /// Write `value` to `bank`, then access `region`.
    Bank {
        region: Path,
        bank: Path,
        value: u64,
    },
}

/// An AML object.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Object {
    #[default]
    Uninitialized,
    Integer(u64),
    String(String),
    Buffer(Vec<u8>),
    Package(Vec<Object>),
    /// A named object referred to by name (package elements, devices).
    Name(Path),
    /// A package element naming an object not defined when the package was
    /// built (a forward reference): resolved when used, from `scope`.
    LazyName {
        name: NameString,
        scope: Path,
    },
    /// `RefOf` / `Index` result.
    Reference(Box<Place>),
    Method {
        table: usize,
        start: usize,
        end: usize,
        args: u8,
    },
    /// `\_OSI`.
    OsiMethod,
    /// `Scope`, `Device`, `Processor`, `PowerResource`, `ThermalZone`.
    Scope(ScopeKind),
    Mutex,
    Event,
    Region {
        space: u8,
        offset: u64,
        len: u64,
    },
    Field {
        kind: FieldKind,
        bit_offset: u64,
        bits: u64,
        access_bytes: u8,
        update: u8,
    },
    BufferField {
        buffer: Box<Place>,
        bit_offset: u64,
        bits: u64,
    },
    Alias(Path),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeKind {
    Scope,
    Device,
    Processor,
    PowerResource,
    ThermalZone,
}

enum Flow {
    Normal,
    Return(Object),
    Break,
    Continue,
}

struct Frame {
    scope: Path,
    locals: [Object; 8],
    args: Vec<Object>,
    loading: bool,
}

impl Frame {
    fn new(scope: Path, args: Vec<Object>, loading: bool) -> Frame {
        Frame {
            scope,
            locals: Default::default(),
            args,
            loading,
        }
    }
}

struct Reader {
    code: Rc<[u8]>,
    pos: usize,
    end: usize,
}

/// A loading problem: the error and the table (0 = DSDT, then SSDTs in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadProblem {
    pub table: usize,
    pub error: Error,
}

/// The namespace and the interpreter over it.
pub struct Interpreter<'h> {
    nodes: BTreeMap<Path, Object>,
    tables: Vec<Rc<[u8]>>,
    regions: &'h mut dyn RegionHandler,
    int64: bool,
    steps: u64,
    steps_total: u64,
    evaluation_limit: u64,
    depth: u32,
    pci_cache: BTreeMap<Path, PciAddress>,
    resolving_pci: bool,
    /// What went wrong while loading (the rest of the table was still loaded where possible).
    pub load_problems: Vec<LoadProblem>,
    current: Path,
    /// Address of a local in the frame that started the evaluation (0: none yet).
    stack_base: usize,
    /// The most stack any evaluation used (bytes below its base).
    stack_high_water: usize,
}

/// The address of a local of this (never inlined) function's frame: where the stack is now.
#[inline(never)]
fn stack_position() -> usize {
    let marker = 0u8;
    core::hint::black_box(core::ptr::addr_of!(marker)) as usize
}

fn seg(s: &[u8; 4]) -> Seg {
    *s
}

fn aml_error(at: &Path, offset: usize, what: &'static str, value: u64) -> Error {
    let mut text = String::new();
    let _ = core::fmt::write(&mut text, format_args!("{at}"));
    Error::Aml {
        at: Token::new(&text),
        offset: offset as u32,
        what,
        value,
    }
}

impl<'h> Interpreter<'h> {
    /// An empty namespace with the predefined objects. `dsdt_revision` < 2
    /// means 32-bit integers.
    pub fn new(regions: &'h mut dyn RegionHandler, dsdt_revision: u8) -> Interpreter<'h> {
        let mut nodes = BTreeMap::new();
        for name in [b"_SB_", b"_GPE", b"_PR_", b"_TZ_", b"_SI_"] {
            nodes.insert(Path::root().child(seg(name)), Object::Scope(ScopeKind::Scope));
        }
        nodes.insert(Path::root().child(*b"_OSI"), Object::OsiMethod);
        nodes.insert(
            Path::root().child(*b"_OS_"),
            Object::String("Microsoft Windows NT".into()),
        );
        nodes.insert(Path::root().child(*b"_REV"), Object::Integer(2));
        nodes.insert(Path::root().child(*b"_GL_"), Object::Mutex);
        Interpreter {
            nodes,
            tables: Vec::new(),
            regions,
            int64: dsdt_revision >= 2,
            steps: 0,
            steps_total: 0,
            evaluation_limit: STEPS_PER_EVALUATION,
            depth: 0,
            pci_cache: BTreeMap::new(),
            resolving_pci: false,
            load_problems: Vec::new(),
            current: Path::root(),
            stack_base: 0,
            stack_high_water: 0,
        }
    }

    /// Steps taken so far, loading included.
    pub fn steps_total(&self) -> u64 {
        self.steps_total
    }

    /// The most stack (bytes) one evaluation or table load used; at most about [`STACK_BUDGET`].
    pub fn stack_high_water(&self) -> usize {
        self.stack_high_water
    }

    /// Objects in the namespace.
    pub fn object_count(&self) -> usize {
        self.nodes.len()
    }

    /// Loads one definition block (the table without its 36-byte header).
    /// Errors inside a scope skip that scope's rest and are kept in
    /// [`Interpreter::load_problems`]; only running out of steps stops it.
    pub fn load_table(&mut self, aml: &[u8]) -> Result<()> {
        let table = self.tables.len();
        let code: Rc<[u8]> = Rc::from(aml);
        self.tables.push(code.clone());
        let mut reader = Reader {
            code,
            pos: 0,
            end: aml.len(),
        };
        let mut frame = Frame::new(Path::root(), Vec::new(), true);
        self.steps = 0;
        self.current = Path::root();
        self.stack_base = stack_position();
        // Loading a big DSDT takes more steps than one method evaluation.
        self.evaluation_limit = STEPS_IN_ALL;
        let result = self.exec_list(&mut frame, &mut reader, table);
        self.evaluation_limit = STEPS_PER_EVALUATION;
        result.map(|_| ())
    }

    /// Whether `path` names an object.
    pub fn exists(&self, path: &Path) -> bool {
        self.nodes.contains_key(path)
    }

    /// The object stored at `path` (no evaluation).
    pub fn object(&self, path: &Path) -> Option<&Object> {
        self.nodes.get(path)
    }

    /// Paths of every `Device`, in namespace order.
    pub fn devices(&self) -> Vec<Path> {
        self.nodes
            .iter()
            .filter(|(_, o)| matches!(o, Object::Scope(ScopeKind::Device)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Evaluates `path`: calls it when it is a method, reads it otherwise.
    pub fn evaluate(&mut self, path: &Path, args: Vec<Object>) -> Result<Object> {
        self.steps = 0;
        self.depth = 0;
        self.stack_base = stack_position();
        let path = self.follow_alias(path.clone());
        let value = match self.nodes.get(&path) {
            None => return Err(aml_error(&path, 0, "no such object", 0)),
            Some(Object::Method { .. } | Object::OsiMethod) => self.call(&path, args)?,
            Some(_) => self.read_named(&path)?,
        };
        self.resolve_value(value)
    }

    /// Evaluates `path` to an integer, `Ok(None)` when it does not exist.
    pub fn evaluate_integer(&mut self, path: &Path) -> Result<Option<u64>> {
        if !self.exists(path) {
            return Ok(None);
        }
        let value = self.evaluate(path, Vec::new())?;
        self.integer_of(&value, path, 0).map(Some)
    }

    /// Turns references into the values they name (results handed out).
    fn resolve_value(&mut self, value: Object) -> Result<Object> {
        match value {
            Object::Reference(place) => {
                let mut frame = Frame::new(Path::root(), Vec::new(), false);
                self.read_place(&mut frame, &place)
            }
            other => Ok(other),
        }
    }

    fn follow_alias(&self, mut path: Path) -> Path {
        for _ in 0..8 {
            match self.nodes.get(&path) {
                Some(Object::Alias(target)) => path = target.clone(),
                _ => break,
            }
        }
        path
    }

    /// ACPI name search: a bare segment is looked for in the scope, then
    /// each parent up to the root; other names are exact.
    pub fn resolve(&self, name: &NameString, scope: &Path) -> Option<Path> {
        if name.searches_upward() {
            let mut base = scope.clone();
            loop {
                let candidate = base.child(name.segs[0]);
                if self.nodes.contains_key(&candidate) {
                    return Some(self.follow_alias(candidate));
                }
                if base.0.is_empty() {
                    return None;
                }
                base = base.parent();
            }
        }
        let path = name.in_scope(scope);
        self.nodes.contains_key(&path).then(|| self.follow_alias(path))
    }

    fn ones(&self) -> u64 {
        if self.int64 { u64::MAX } else { 0xFFFF_FFFF }
    }

    fn int_bytes(&self) -> usize {
        if self.int64 { 8 } else { 4 }
    }

    fn err(&self, r: &Reader, what: &'static str, value: u64) -> Error {
        aml_error(&self.current, r.pos, what, value)
    }

    fn step(&mut self, r: &Reader) -> Result<()> {
        self.steps += 1;
        self.steps_total += 1;
        if self.steps > self.evaluation_limit {
            return Err(self.err(
                r,
                "step budget of one evaluation spent (a loop that never ends?)",
                self.steps,
            ));
        }
        if self.steps_total > STEPS_IN_ALL {
            return Err(self.err(r, "step budget for all AML spent", self.steps_total));
        }
        Ok(())
    }

    fn enter(&mut self, r: &Reader) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return Err(self.err(r, "nesting deeper than the limit", u64::from(MAX_DEPTH)));
        }
        // The stack grows down: what lies between the base and here is in use.
        let used = self.stack_base.saturating_sub(stack_position());
        self.stack_high_water = self.stack_high_water.max(used);
        if used > STACK_BUDGET {
            self.depth -= 1;
            return Err(self.err(r, "nesting uses more stack than the limit", used as u64));
        }
        Ok(())
    }

    // ---- byte-code reading ----------------------------------------------------------------

    fn byte(&self, r: &mut Reader) -> Result<u8> {
        if r.pos >= r.end {
            return Err(self.err(r, "byte code ends inside an object", r.end as u64));
        }
        let b = r.code[r.pos];
        r.pos += 1;
        Ok(b)
    }

    fn peek(&self, r: &Reader) -> Option<u8> {
        (r.pos < r.end).then(|| r.code[r.pos])
    }

    fn le(&self, r: &mut Reader, n: usize) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..n {
            v |= u64::from(self.byte(r)?) << (8 * i);
        }
        Ok(v)
    }

    /// PkgLength's value (which counts its own bytes).
    fn pkg_value(&self, r: &mut Reader) -> Result<usize> {
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
    fn pkg_end(&self, r: &mut Reader) -> Result<usize> {
        let start = r.pos;
        let len = self.pkg_value(r)?;
        let end = start.checked_add(len).filter(|&e| e <= r.end && e >= r.pos);
        end.ok_or_else(|| self.err(r, "package length runs past its enclosing object", len as u64))
    }

    fn name_seg(&self, r: &mut Reader) -> Result<Seg> {
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

    fn name_string(&self, r: &mut Reader) -> Result<NameString> {
        let mut name = NameString {
            rooted: false,
            parents: 0,
            segs: Vec::new(),
        };
        match self.peek(r) {
            Some(b'\\') => {
                r.pos += 1;
                name.rooted = true;
            }
            Some(b'^') => {
                while self.peek(r) == Some(b'^') {
                    r.pos += 1;
                    name.parents = name.parents.saturating_add(1);
                }
            }
            _ => {}
        }
        match self.byte(r)? {
            0x00 => {}
            0x2E => {
                name.segs.push(self.name_seg(r)?);
                name.segs.push(self.name_seg(r)?);
            }
            0x2F => {
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

    // ---- term lists -------------------------------------------------------------------------

    fn exec_list(&mut self, f: &mut Frame, r: &mut Reader, table: usize) -> Result<Flow> {
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
            0x10 | 0x14 | 0xA0 | 0xA1 | 0xA2 | 0x11 | 0x12 | 0x13 => 1,
            0x5B => match r.code.get(r.pos + 1)? {
                0x81..=0x87 => 2,
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

    fn define(&mut self, path: Path, object: Object) {
        self.nodes.insert(path, object);
    }

    fn define_scope(&mut self, path: &Path, kind: ScopeKind) {
        match self.nodes.get(path) {
            Some(Object::Scope(_)) if kind == ScopeKind::Scope => {}
            _ => {
                self.nodes.insert(path.clone(), Object::Scope(kind));
            }
        }
    }

    /// One term. Dispatches to a helper per kind so that the frames on the
    /// nesting path (blocks, scopes, devices) stay small in debug builds too.
    fn exec_term(&mut self, f: &mut Frame, r: &mut Reader, table: usize) -> Result<Flow> {
        self.step(r)?;
        let Some(op) = self.peek(r) else {
            return Ok(Flow::Normal);
        };
        match op {
            0x10 => self.exec_scope_op(f, r, table),
            0xA0 => self.exec_if(f, r, table),
            0xA2 => self.exec_while(f, r, table),
            0x5B => {
                let ext = r.code.get(r.pos + 1).copied().unwrap_or(0);
                if (0x82..=0x85).contains(&ext) {
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
            if self.peek(r) == Some(0xA1) {
                r.pos += 1;
                r.pos = self.pkg_end(r)?;
            }
            return Ok(flow);
        }
        r.pos = end;
        if self.peek(r) == Some(0xA1) {
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
            0x08 => {
                r.pos += 1;
                let name = self.name_string(r)?;
                let value = self.eval(f, r)?;
                let path = name.in_scope(&f.scope);
                self.define(path, value);
                Ok(Flow::Normal)
            }
            0x14 => {
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
            0x06 => {
                r.pos += 1;
                let source = self.name_string(r)?;
                let alias = self.name_string(r)?;
                let target = self
                    .resolve(&source, &f.scope)
                    .unwrap_or_else(|| source.in_scope(&f.scope));
                self.define(alias.in_scope(&f.scope), Object::Alias(target));
                Ok(Flow::Normal)
            }
            0x15 => {
                r.pos += 1;
                self.name_string(r)?;
                self.byte(r)?;
                self.byte(r)?;
                Ok(Flow::Normal)
            }
            0xA1 => {
                r.pos += 1;
                r.pos = self.pkg_end(r)?;
                Ok(Flow::Normal)
            }
            0xA3 | 0xCC => {
                r.pos += 1;
                Ok(Flow::Normal)
            }
            0xA4 => {
                r.pos += 1;
                let value = self.eval(f, r)?;
                Ok(Flow::Return(value))
            }
            0xA5 => {
                r.pos += 1;
                Ok(Flow::Break)
            }
            0x9F => {
                r.pos += 1;
                Ok(Flow::Continue)
            }
            0x86 => {
                r.pos += 1;
                self.target(f, r)?;
                self.eval(f, r)?;
                Ok(Flow::Normal)
            }
            0x8A | 0x8B | 0x8C | 0x8D | 0x8F => {
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
            0x82 => ScopeKind::Device,
            0x83 => {
                // ProcID, PblkAddr, PblkLen.
                self.le(r, 6)?;
                ScopeKind::Processor
            }
            0x84 => {
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
            0x01 | 0x02 => {
                r.pos += 2;
                let name = self.name_string(r)?;
                if ext == 0x01 {
                    self.byte(r)?;
                }
                let object = if ext == 0x01 { Object::Mutex } else { Object::Event };
                self.define(name.in_scope(&f.scope), object);
            }
            0x80 => {
                r.pos += 2;
                let name = self.name_string(r)?;
                let space = self.byte(r)?;
                let offset = self.eval_int(f, r)?;
                let len = self.eval_int(f, r)?;
                self.define(name.in_scope(&f.scope), Object::Region { space, offset, len });
            }
            0x88 => {
                r.pos += 2;
                let name = self.name_string(r)?;
                for _ in 0..3 {
                    self.eval(f, r)?;
                }
                // Table-backed regions are not supported: any access errors.
                self.define(
                    name.in_scope(&f.scope),
                    Object::Region {
                        space: 0xFE,
                        offset: 0,
                        len: 0,
                    },
                );
            }
            0x81 | 0x86 | 0x87 => {
                r.pos += 2;
                let end = self.pkg_end(r)?;
                let saved_end = core::mem::replace(&mut r.end, end);
                let result = self.field_definition(f, r, ext);
                r.end = saved_end;
                r.pos = end;
                result?;
            }
            0x13 => {
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
            0x21 | 0x22 => {
                // Stall / Sleep: no waiting at boot; the step budget bounds polling loops.
                r.pos += 2;
                self.eval(f, r)?;
            }
            0x24 | 0x26 | 0x27 => {
                r.pos += 2;
                self.target(f, r)?;
            }
            0x32 => {
                r.pos += 2;
                let kind = self.byte(r)?;
                let _code = self.le(r, 4)?;
                self.eval(f, r)?;
                return Err(self.err(r, "firmware executed Fatal", u64::from(kind)));
            }
            0x1F | 0x20 => {
                return Err(self.err(r, "Load/LoadTable (dynamic tables) is not supported", u64::from(ext)));
            }
            _ => {
                self.eval(f, r)?;
            }
        }
        Ok(Flow::Normal)
    }

    fn field_definition(&mut self, f: &mut Frame, r: &mut Reader, ext: u8) -> Result<()> {
        let first = self.name_string(r)?;
        let first = self
            .resolve(&first, &f.scope)
            .unwrap_or_else(|| first.in_scope(&f.scope));
        let kind = match ext {
            0x81 => FieldKind::Region(first),
            0x86 => {
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
                Some(0x00) => {
                    r.pos += 1;
                    bit += self.pkg_value(r)? as u64;
                }
                Some(0x01) => {
                    r.pos += 1;
                    access = self.byte(r)? & 0x0F;
                    self.byte(r)?;
                }
                Some(0x03) => {
                    r.pos += 1;
                    access = self.byte(r)? & 0x0F;
                    self.le(r, 2)?;
                }
                Some(0x02) => return Err(self.err(r, "ConnectField (GPIO/serial bus) is not supported", 2)),
                _ => {
                    let name = self.name_seg(r)?;
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
                    bit += bits;
                }
            }
        }
        Ok(())
    }

    fn create_field(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<()> {
        let buffer = self.buffer_place(f, r)?;
        let index = self.eval_int(f, r)?;
        let (bit_offset, bits) = match op {
            0x8D => (index, 1),
            0x8C => (index.saturating_mul(8), 8),
            0x8B => (index.saturating_mul(8), 16),
            0x8A => (index.saturating_mul(8), 32),
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
    fn buffer_place(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Place> {
        match self.peek(r) {
            Some(b) if (0x60..=0x6E).contains(&b) || is_name_start(b) => self.target(f, r),
            _ => {
                let value = self.eval(f, r)?;
                Ok(Place::Owned(Box::new(value), 0))
            }
        }
    }

    // ---- expressions ------------------------------------------------------------------------

    fn eval_int(&mut self, f: &mut Frame, r: &mut Reader) -> Result<u64> {
        let at = r.pos;
        let value = self.eval(f, r)?;
        let scope = f.scope.clone();
        self.integer_of(&value, &scope, at)
    }

    fn eval(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Object> {
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
            0x72 => a.wrapping_add(b),
            0x74 => a.wrapping_sub(b),
            0x77 => a.wrapping_mul(b),
            0x79 => {
                if b >= 64 {
                    0
                } else {
                    a << b
                }
            }
            0x7A => {
                if b >= 64 {
                    0
                } else {
                    a >> b
                }
            }
            0x7B => a & b,
            0x7C => !(a & b),
            0x7D => a | b,
            0x7E => !(a | b),
            0x7F => a ^ b,
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
            0x00..=0x0E | 0xFF | 0x11..=0x13 | 0x60..=0x6E => self.eval_data(f, r, op),
            0x73 | 0x83 | 0x84 | 0x87..=0x8F => self.eval_objects(f, r, op),
            0x70..=0x82 | 0x85 => self.eval_arith(f, r, op),
            0x90..=0x95 => self.eval_logic(f, r, op),
            0x96..=0x9E => self.eval_convert(f, r, op),
            0x5B => self.eval_ext_expr(f, r),
            b if is_name_start(b) => self.eval_name(f, r, op),
            _ => Err(self.err(r, "unsupported opcode", u64::from(op))),
        }
    }

    /// Literals, buffers, packages, locals and arguments.
    #[inline(never)]
    fn eval_data(&mut self, f: &mut Frame, r: &mut Reader, op: u8) -> Result<Object> {
        let value = match op {
            0x00 => Object::Integer(0),
            0x01 => Object::Integer(1),
            0xFF => Object::Integer(self.ones()),
            0x0A => Object::Integer(self.le(r, 1)?),
            0x0B => Object::Integer(self.le(r, 2)?),
            0x0C => Object::Integer(self.le(r, 4)?),
            0x0E => Object::Integer(self.le(r, 8)? & self.ones()),
            0x0D => {
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
            0x11 => {
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
            0x12 | 0x13 => {
                let end = self.pkg_end(r)?;
                let saved_end = core::mem::replace(&mut r.end, end);
                let result = self.package_body(f, r, op == 0x13);
                r.end = saved_end;
                r.pos = end;
                Object::Package(result?)
            }
            0x60..=0x67 => f.locals[usize::from(op - 0x60)].clone(),
            0x68..=0x6E => {
                let value = f.args.get(usize::from(op - 0x68)).cloned().unwrap_or_default();
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
            0x70 => {
                let value = self.eval(f, r)?;
                self.store_to_target(f, r, value)?
            }
            0x71 => Object::Reference(Box::new(self.target(f, r)?)),
            0x72 | 0x74 | 0x77 | 0x79 | 0x7A | 0x7B | 0x7C | 0x7D | 0x7E | 0x7F | 0x85 => {
                return self.binary(f, r, op);
            }
            0x78 => {
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
            0x80..=0x82 => {
                let a = self.eval_int(f, r)?;
                let value = match op {
                    0x80 => !a & self.ones(),
                    0x81 => {
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
            0x75 | 0x76 => {
                let place = self.target(f, r)?;
                let current = self.read_place(f, &place)?;
                let scope = f.scope.clone();
                let current = self.integer_of(&current, &scope, r.pos)?;
                let value = if op == 0x75 {
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
            0x73 => {
                let a = self.eval(f, r)?;
                let b = self.eval(f, r)?;
                let value = self.concat(a, b, r)?;
                self.store_to_target(f, r, value)?
            }
            0x84 => {
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
            0x83 => {
                let value = self.eval(f, r)?;
                self.deref(f, value, r)?
            }
            0x87 => {
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
            0x88 => {
                let base = match self.peek(r) {
                    Some(b) if (0x60..=0x6E).contains(&b) || is_name_start(b) => {
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
            0x89 => {
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
                    0 => true,
                    1 => value == operand,
                    2 => value <= operand,
                    3 => value < operand,
                    4 => value >= operand,
                    _ => value > operand,
                };
                let mut found = self.ones();
                for (i, item) in items.iter().enumerate().skip(start as usize) {
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
            0x8E => {
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
            0x8A | 0x8B | 0x8C | 0x8D | 0x8F => {
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
            0x90 | 0x91 => {
                let a = self.eval_int(f, r)?;
                let b = self.eval_int(f, r)?;
                let truth = if op == 0x90 { a != 0 && b != 0 } else { a != 0 || b != 0 };
                self.boolean(truth)
            }
            0x92 => {
                let a = self.eval_int(f, r)?;
                self.boolean(a == 0)
            }
            0x93..=0x95 => {
                let a = self.eval(f, r)?;
                let b = self.eval(f, r)?;
                let ordering = self.compare(&a, &b, r)?;
                let truth = match op {
                    0x93 => ordering == core::cmp::Ordering::Equal,
                    0x94 => ordering == core::cmp::Ordering::Greater,
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
            0x96 => {
                let a = self.eval(f, r)?;
                let value = Object::Buffer(self.to_buffer(&a, r)?);
                self.store_to_target(f, r, value)?
            }
            0x97 | 0x98 => {
                let a = self.eval(f, r)?;
                let text = match &a {
                    Object::Integer(v) if op == 0x97 => alloc::format!("{v}"),
                    Object::Integer(v) => alloc::format!("0x{v:X}"),
                    Object::String(s) => s.clone(),
                    Object::Buffer(b) => {
                        let parts: Vec<String> = b
                            .iter()
                            .map(|x| {
                                if op == 0x97 {
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
            0x99 => {
                let a = self.eval(f, r)?;
                let value = match &a {
                    Object::String(s) => Object::Integer(parse_integer_text(s) & self.ones()),
                    other => Object::Integer(self.integer_of(other, &Path::root(), r.pos)?),
                };
                self.store_to_target(f, r, value)?
            }
            0x9C => {
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
            0x9D => {
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
            0x9E => {
                let source = self.eval(f, r)?;
                let index = self.eval_int(f, r)? as usize;
                let len = self.eval_int(f, r)? as usize;
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
            0x12 => {
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
            0x23 => {
                self.target(f, r)?;
                self.le(r, 2)?;
                // Acquired (there is one thread at boot).
                Object::Integer(0)
            }
            0x25 => {
                self.target(f, r)?;
                self.eval(f, r)?;
                Object::Integer(0)
            }
            0x28 | 0x29 => {
                let a = self.eval_int(f, r)?;
                let value = if ext == 0x28 { from_bcd(a) } else { to_bcd(a) };
                let place = self.target(f, r)?;
                self.store(f, &place, Object::Integer(value))?;
                Object::Integer(value)
            }
            0x30 => Object::Integer(1),
            0x31 => Object::Uninitialized,
            // Timer: 100 ns units; the step count stands in for time.
            0x33 => Object::Integer(self.steps_total),
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

    fn undefined(&self, name: &NameString, r: &Reader) -> Error {
        let mut text = String::new();
        let _ = core::fmt::write(&mut text, format_args!("{}: {}", self.current, name.text()));
        Error::Aml {
            at: Token::new(&text),
            offset: r.pos as u32,
            what: "name not found",
            value: 0,
        }
    }

    fn boolean(&self, truth: bool) -> Object {
        Object::Integer(if truth { self.ones() } else { 0 })
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

    fn deref(&mut self, f: &mut Frame, value: Object, r: &Reader) -> Result<Object> {
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

    /// For `Index(Local0, ..)` where Local0 holds a reference: what it refers to.
    fn place_value_if_reference(&self, f: &Frame, place: &Place) -> Option<Place> {
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

    /// A Target or SuperName.
    fn target(&mut self, f: &mut Frame, r: &mut Reader) -> Result<Place> {
        let op = self.peek(r).ok_or_else(|| self.err(r, "missing target", 0))?;
        match op {
            0x00 => {
                r.pos += 1;
                Ok(Place::Null)
            }
            0x60..=0x67 => {
                r.pos += 1;
                Ok(Place::Local(op - 0x60))
            }
            0x68..=0x6E => {
                r.pos += 1;
                Ok(Place::Arg(op - 0x68))
            }
            0x5B if r.code.get(r.pos + 1) == Some(&0x31) => {
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

    // ---- values -----------------------------------------------------------------------------

    fn integer_of(&mut self, value: &Object, at: &Path, offset: usize) -> Result<u64> {
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

    fn to_buffer(&self, value: &Object, r: &Reader) -> Result<Vec<u8>> {
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

    fn concat(&self, a: Object, b: Object, r: &Reader) -> Result<Object> {
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

    fn compare(&mut self, a: &Object, b: &Object, r: &Reader) -> Result<core::cmp::Ordering> {
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

    // ---- places -----------------------------------------------------------------------------

    fn read_named(&mut self, path: &Path) -> Result<Object> {
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
                        code: Rc::from(&[][..]),
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

    fn read_place(&mut self, f: &mut Frame, place: &Place) -> Result<Object> {
        match place {
            Place::Null | Place::Debug => Ok(Object::Uninitialized),
            Place::Local(i) => Ok(f.locals[usize::from(*i)].clone()),
            Place::Arg(i) => Ok(f.args.get(usize::from(*i)).cloned().unwrap_or_default()),
            Place::Named(path) => self.read_named(path),
            Place::Elem(base, index) => {
                let base = self.read_place(f, base)?;
                self.element(base, *index)
            }
            Place::Owned(value, index) => self.element((**value).clone(), *index),
        }
    }

    fn element(&mut self, base: Object, index: u64) -> Result<Object> {
        let at = self.current.clone();
        let base = match base {
            Object::Reference(place) => {
                let mut frame = Frame::new(Path::root(), Vec::new(), false);
                self.read_place(&mut frame, &place)?
            }
            other => other,
        };
        let i = usize::try_from(index).unwrap_or(usize::MAX);
        match base {
            Object::Package(items) => items
                .get(i)
                .cloned()
                .ok_or_else(|| aml_error(&at, 0, "package index out of range", index)),
            Object::Buffer(bytes) => bytes
                .get(i)
                .map(|&b| Object::Integer(u64::from(b)))
                .ok_or_else(|| aml_error(&at, 0, "buffer index out of range", index)),
            Object::String(s) => s
                .as_bytes()
                .get(i)
                .map(|&b| Object::Integer(u64::from(b)))
                .ok_or_else(|| aml_error(&at, 0, "string index out of range", index)),
            _ => Err(aml_error(&at, 0, "Index of a value that has no elements", index)),
        }
    }

    /// Reads an operator's target operand and stores `value` there; the operator's own result is
    /// `value` too (Store, the arithmetic operators, Concatenate...).
    fn store_to_target(&mut self, f: &mut Frame, r: &mut Reader, value: Object) -> Result<Object> {
        let place = self.target(f, r)?;
        self.store(f, &place, value.clone())?;
        Ok(value)
    }

    fn store(&mut self, f: &mut Frame, place: &Place, value: Object) -> Result<()> {
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
                let mut container = match &**base {
                    Place::Named(path) => self
                        .nodes
                        .get(&self.follow_alias(path.clone()))
                        .cloned()
                        .unwrap_or_default(),
                    other => self.read_place(f, other)?,
                };
                let at = self.current.clone();
                match &mut container {
                    Object::Package(items) => {
                        let slot = items
                            .get_mut(index)
                            .ok_or_else(|| aml_error(&at, 0, "package index out of range", index as u64))?;
                        *slot = value;
                    }
                    Object::Buffer(bytes) => {
                        let byte = self.integer_of(&value, &at, 0)? as u8;
                        let slot = bytes
                            .get_mut(index)
                            .ok_or_else(|| aml_error(&at, 0, "buffer index out of range", index as u64))?;
                        *slot = byte;
                    }
                    _ => {
                        return Err(aml_error(
                            &at,
                            0,
                            "store through Index into a value without elements",
                            0,
                        ));
                    }
                }
                match &**base {
                    Place::Named(path) => {
                        let path = self.follow_alias(path.clone());
                        self.nodes.insert(path, container);
                        Ok(())
                    }
                    Place::Local(i) => {
                        f.locals[usize::from(*i)] = container;
                        Ok(())
                    }
                    other => self.store(f, &other.clone(), container),
                }
            }
            Place::Owned(..) => Ok(()),
        }
    }

    fn store_named(&mut self, path: &Path, value: Object) -> Result<()> {
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

    // ---- fields and regions -----------------------------------------------------------------

    fn read_field(&mut self, path: &Path, kind: &FieldKind, bit_offset: u64, bits: u64, width: u8) -> Result<Object> {
        if bits == 0 || bits > MAX_OBJECT_BYTES * 8 {
            return Err(aml_error(path, 0, "field size out of range", bits));
        }
        let unit_bits = u64::from(width) * 8;
        let first = bit_offset / unit_bits;
        let last = (bit_offset + bits - 1) / unit_bits;
        let mut out = vec![0u8; bits.div_ceil(8) as usize];
        for unit in first..=last {
            let value = self.access(path, kind, unit * u64::from(width), width, None)?;
            let unit_start = unit * unit_bits;
            for b in 0..unit_bits {
                let absolute = unit_start + b;
                if absolute < bit_offset || absolute >= bit_offset + bits {
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
    fn write_field(
        &mut self,
        path: &Path,
        kind: &FieldKind,
        bit_offset: u64,
        bits: u64,
        width: u8,
        update: u8,
        source: &[u8],
    ) -> Result<()> {
        if bits == 0 || bits > MAX_OBJECT_BYTES * 8 {
            return Err(aml_error(path, 0, "field size out of range", bits));
        }
        let unit_bits = u64::from(width) * 8;
        let first = bit_offset / unit_bits;
        let last = (bit_offset + bits - 1) / unit_bits;
        for unit in first..=last {
            let unit_start = unit * unit_bits;
            let whole = unit_start >= bit_offset && unit_start + unit_bits <= bit_offset + bits;
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
                if absolute < bit_offset || absolute >= bit_offset + bits {
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

    fn region_access(
        &mut self,
        field: &Path,
        region: &Path,
        byte_offset: u64,
        width: u8,
        write: Option<u64>,
    ) -> Result<u64> {
        let Some(Object::Region { space, offset, len }) = self.nodes.get(region).cloned() else {
            return Err(aml_error(field, 0, "field's region is not an operation region", 0));
        };
        if byte_offset.checked_add(u64::from(width)).is_none_or(|end| end > len) {
            return Err(aml_error(
                field,
                0,
                "field access past its region's length",
                byte_offset,
            ));
        }
        let address = offset
            .checked_add(byte_offset)
            .ok_or_else(|| aml_error(field, 0, "region address overflows", offset))?;
        let space = match space {
            0 => RegionSpace::Memory,
            1 => RegionSpace::Io,
            2 => RegionSpace::PciConfig(self.pci_address_of(&region.parent())),
            other => {
                return Err(aml_error(
                    region,
                    0,
                    "operation region space not supported",
                    u64::from(other),
                ));
            }
        };
        match write {
            None => self.regions.read(space, address, width),
            Some(value) => self.regions.write(space, address, width, value).map(|_| 0),
        }
    }

    /// The PCI function a `PCI_Config` region in `device` reaches: `_ADR` of
    /// the device, on its host bridge's segment (`_SEG`), on the bus reached
    /// from the host bridge's `_BBN` through the secondary bus numbers of the
    /// PCI bridges (devices with `_ADR`) in between.
    fn pci_address_of(&mut self, device: &Path) -> PciAddress {
        if let Some(found) = self.pci_cache.get(device) {
            return *found;
        }
        if self.resolving_pci {
            // _ADR/_BBN/_SEG themselves read PCI_Config: assume bus 0 rather than recurse.
            return PciAddress::new(0, 0, 0, 0);
        }
        self.resolving_pci = true;
        let saved_steps = self.steps;
        let adr = self.quiet_integer(&device.child(*b"_ADR")).unwrap_or(0);
        let mut bridge = device.clone();
        let mut found_bridge = false;
        loop {
            if self.is_host_bridge(&bridge) {
                found_bridge = true;
                break;
            }
            if bridge.0.is_empty() {
                break;
            }
            bridge = bridge.parent();
        }
        let (segment, mut bus) = if found_bridge {
            (
                self.quiet_integer(&bridge.child(*b"_SEG")).unwrap_or(0) as u16,
                self.quiet_integer(&bridge.child(*b"_BBN")).unwrap_or(0) as u8,
            )
        } else {
            (0, 0)
        };
        // Each PCI bridge between the host bridge and the device: its
        // secondary bus number (config offset 0x19) is the next bus down.
        if found_bridge {
            for depth in bridge.0.len() + 1..device.0.len() {
                let node = Path(device.0[..depth].to_vec());
                let Some(hop) = self.quiet_integer(&node.child(*b"_ADR")) else {
                    break;
                };
                let at = PciAddress::new(segment, bus, ((hop >> 16) & 0x1F) as u8, (hop & 0x7) as u8);
                match self.regions.read(RegionSpace::PciConfig(at), PCI_SECONDARY_BUS, 1) {
                    Ok(secondary) if secondary != 0 && secondary != 0xFF => bus = secondary as u8,
                    // Not a bridge the firmware numbered: keep the bus above.
                    _ => break,
                }
            }
        }
        self.steps = saved_steps;
        self.resolving_pci = false;
        let address = PciAddress::new(segment, bus, ((adr >> 16) & 0x1F) as u8, (adr & 0x7) as u8);
        self.pci_cache.insert(device.clone(), address);
        address
    }

    /// Evaluates an integer object inside another evaluation (steps and depth kept).
    fn quiet_integer(&mut self, path: &Path) -> Option<u64> {
        if !self.exists(path) {
            return None;
        }
        let saved_depth = self.depth;
        let value = match self.nodes.get(path) {
            Some(Object::Method { .. }) => self.call(path, Vec::new()),
            _ => self.read_named(path),
        };
        self.depth = saved_depth;
        let value = value.ok()?;
        self.integer_of(&value, path, 0).ok()
    }

    /// Whether `device`'s `_HID` or `_CID` names a PCI host bridge (PNP0A03, PNP0A08).
    pub fn is_host_bridge(&mut self, device: &Path) -> bool {
        if !matches!(self.nodes.get(device), Some(Object::Scope(ScopeKind::Device))) {
            return false;
        }
        self.ids(device).iter().any(|id| id == "PNP0A03" || id == "PNP0A08")
    }

    /// `_HID` then `_CID` ids of a device, as text (errors give none).
    pub fn ids(&mut self, device: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for name in [*b"_HID", *b"_CID"] {
            let path = device.child(name);
            // Plain names are read without starting a new evaluation (this
            // also runs inside one, for PCI_Config regions).
            let value = match self.nodes.get(&path) {
                None => continue,
                Some(Object::Method { .. }) => {
                    let saved_depth = self.depth;
                    let value = self.call(&path, Vec::new());
                    self.depth = saved_depth;
                    match value {
                        Ok(v) => v,
                        Err(_) => continue,
                    }
                }
                Some(other) => other.clone(),
            };
            let items = match value {
                Object::Package(items) => items,
                other => vec![other],
            };
            for item in items {
                match item {
                    Object::Integer(v) => out.push(eisa_id_text(v)),
                    Object::String(s) => out.push(s),
                    _ => {}
                }
            }
        }
        out
    }

    fn call(&mut self, path: &Path, args: Vec<Object>) -> Result<Object> {
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

fn parse_integer_text(s: &str) -> u64 {
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

fn extract_bits(bytes: &[u8], bit_offset: u64, bits: u64) -> Option<Object> {
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

fn insert_bits(bytes: &mut [u8], bit_offset: u64, bits: u64, source: &[u8]) -> bool {
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
