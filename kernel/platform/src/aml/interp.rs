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

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use pci_types::PciAddress;

use super::exec::Frame;
use super::name::{NameString, Path, Seg};
use super::object::{Object, ScopeKind};
use super::reader::Reader;
use super::region::RegionHandler;
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
/// Largest field or buffer the interpreter builds, in bytes.
pub(super) const MAX_OBJECT_BYTES: u64 = 64 * 1024;

/// A loading problem: the error and the table (0 = DSDT, then SSDTs in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadProblem {
    pub table: usize,
    pub error: Error,
}

/// The namespace and the interpreter over it.
pub struct Interpreter<'h> {
    pub(super) nodes: BTreeMap<Path, Object>,
    pub(super) tables: Vec<Arc<[u8]>>,
    pub(super) regions: &'h mut dyn RegionHandler,
    int64: bool,
    pub(super) steps: u64,
    pub(super) steps_total: u64,
    evaluation_limit: u64,
    pub(super) depth: u32,
    pub(super) pci_cache: BTreeMap<Path, PciAddress>,
    pub(super) resolving_pci: bool,
    /// What went wrong while loading (the rest of the table was still loaded where possible).
    pub load_problems: Vec<LoadProblem>,
    pub(super) current: Path,
    /// Address of a local in the frame that started the evaluation (0: none yet).
    pub(super) stack_base: usize,
    /// The most stack any evaluation used (bytes below its base).
    stack_high_water: usize,
}

/// The address of a local of this (never inlined) function's frame: where the stack is now.
#[inline(never)]
pub(super) fn stack_position() -> usize {
    let marker = 0u8;
    core::hint::black_box(core::ptr::addr_of!(marker)) as usize
}

fn seg(s: &[u8; 4]) -> Seg {
    *s
}

pub(super) fn aml_error(at: &Path, offset: usize, what: &'static str, value: u64) -> Error {
    let mut text = String::new();
    let _ = core::fmt::write(&mut text, format_args!("{at}"));
    Error::Aml {
        at: Token::new(&text),
        offset: u32::try_from(offset).unwrap_or(u32::MAX),
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
        let code: Arc<[u8]> = Arc::from(aml);
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

    pub(super) fn ones(&self) -> u64 {
        if self.int64 { u64::MAX } else { 0xFFFF_FFFF }
    }

    pub(super) fn int_bytes(&self) -> usize {
        if self.int64 { 8 } else { 4 }
    }

    pub(super) fn err(&self, r: &Reader, what: &'static str, value: u64) -> Error {
        aml_error(&self.current, r.pos, what, value)
    }

    pub(super) fn undefined(&self, name: &NameString, r: &Reader) -> Error {
        let mut text = String::new();
        let _ = core::fmt::write(&mut text, format_args!("{}: {}", self.current, name.text()));
        Error::Aml {
            at: Token::new(&text),
            offset: u32::try_from(r.pos).unwrap_or(u32::MAX),
            what: "name not found",
            value: 0,
        }
    }

    pub(super) fn step(&mut self, r: &Reader) -> Result<()> {
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

    pub(super) fn enter(&mut self, r: &Reader) -> Result<()> {
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
}
