//! AML objects: the values and named objects of the namespace, and the
//! places a value is read from or stored to.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use super::name::{NameString, Path};

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
