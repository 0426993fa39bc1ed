//! ACPI Machine Language: the DSDT's and SSDTs' namespace, evaluated for
//! PCI host bridges (`_SEG`, `_BBN`, `_CRS`, `_PXM`) and INTx routing
//! (`_PRT`, interrupt links). See `interp` for why this is baremq's own
//! interpreter and how its work is bounded.
//!
//! Every failure is an error value: the kernel reports it and falls back to
//! the MCFG bus scan and the firmware interrupt line.
//!
//! The interpreter, one concept a file: `interp` (its state and bounds),
//! `object` (AML objects and places), `opcode` (the AML byte values by their
//! specification names), `reader` (the byte stream), `namespace`
//! (definitions and name search), `exec` (term lists, control flow, method
//! calls), `eval` (expressions), `place` (operands that name a place; reads
//! and stores), `convert` (implicit conversions), `field` (fields and buffer
//! fields), `region` (operation regions and their handler) and `query` (what
//! the kernel asks). `bridges` and `resource` use it for host bridges and
//! `_PRT`; `name` holds AML names.

mod bridges;
mod convert;
mod eval;
mod exec;
mod field;
mod interp;
mod name;
mod namespace;
mod object;
mod opcode;
mod place;
mod query;
mod reader;
mod region;
pub mod resource;

pub use bridges::{
    DeviceProximity, Discovery, HostBridge, Problem, PrtRoute, PrtScope, PrtTable, RouteSource, discover,
    discover_deferred,
};
pub use interp::{Interpreter, LoadProblem, MAX_DEPTH, STACK_BUDGET, STEPS_IN_ALL, STEPS_PER_EVALUATION};
pub use name::{NameString, Path, Seg, eisa_id_text};
pub use object::{FieldKind, Object, Place, ScopeKind};
pub use region::{FixedRegions, RegionHandler, RegionSpace};
pub use resource::{Interrupt, Resources, Window, WindowKind};

use alloc::vec::Vec;

/// Loads every block into a new interpreter (the DSDT's revision sets the
/// integer width). A block that fails is recorded in `load_problems`; the
/// others still load.
pub fn load<'h>(regions: &'h mut dyn RegionHandler, blocks: &[(u8, Vec<u8>)]) -> Interpreter<'h> {
    let revision = blocks.first().map_or(2, |(revision, _)| *revision);
    let mut interp = Interpreter::new(regions, revision);
    for (index, (_, aml)) in blocks.iter().enumerate() {
        if let Err(error) = interp.load_table(aml) {
            interp.load_problems.push(LoadProblem { table: index, error });
        }
    }
    interp
}

/// A `width`-byte (1, 2, 4 or 8) access to configuration space at `offset`
/// through 32-bit accesses: the dword(s) holding it are read, and for a
/// write, merged and written back. The access must not cross the 4 KiB space.
pub fn config_access<A: pci_types::ConfigRegionAccess + ?Sized>(
    config: &crate::pci::ConfigSpace<'_, A>,
    offset: u64,
    width: u8,
    write: Option<u64>,
) -> crate::Result<u64> {
    let bad = |what| crate::Error::Aml {
        at: crate::Token::new("PCI_Config region"),
        offset: u32::try_from(offset).unwrap_or(u32::MAX),
        what,
        value: u64::from(width),
    };
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Err(bad("access width is not 1, 2, 4 or 8 bytes"));
    }
    // The offset is the region's (AML's) plus the field's: anything up to 2^64 - 1.
    let Some(end) = offset.checked_add(u64::from(width)).filter(|&end| end <= 4096) else {
        return Err(bad("access past the 4 KiB configuration space"));
    };
    let first = offset & !3;
    let last = (end - 1) & !3;
    // Up to 12 bytes: the dwords that hold the access.
    let mut bytes = [0u8; 12];
    for (i, dword) in (first..=last).step_by(4).enumerate() {
        // `dword < 4096`: it fits.
        let value = config.read32(dword as u16)?;
        bytes[i * 4..i * 4 + 4].copy_from_slice(&value.to_le_bytes());
    }
    let at = (offset - first) as usize;
    let span = &mut bytes[at..at + usize::from(width)];
    match write {
        None => {
            let mut value = [0u8; 8];
            value[..span.len()].copy_from_slice(span);
            Ok(u64::from_le_bytes(value))
        }
        Some(value) => {
            span.copy_from_slice(&value.to_le_bytes()[..usize::from(width)]);
            for (i, dword) in (first..=last).step_by(4).enumerate() {
                let word = u32::from_le_bytes([bytes[i * 4], bytes[i * 4 + 1], bytes[i * 4 + 2], bytes[i * 4 + 3]]);
                config.write32(dword as u16, word)?;
            }
            Ok(0)
        }
    }
}

/// The (device, function) path from `function`'s root bus down to it: each
/// PCI bridge crossed (found by its secondary bus among `functions`), then
/// the function itself. `None` when a bus on the way has no bridge leading
/// to it (or the chain loops).
pub fn pci_path(functions: &[crate::pci::PciFunction], function: &crate::pci::PciFunction) -> Option<Vec<(u8, u8)>> {
    use crate::pci::HeaderKind;
    let segment = function.address.segment();
    let mut path = alloc::vec![(function.address.device(), function.address.function())];
    let mut bus = function.address.bus();
    while bus != function.root_bus {
        if path.len() > 32 {
            return None;
        }
        let bridge = functions.iter().find(|f| {
            f.address.segment() == segment
                && f.root_bus == function.root_bus
                && matches!(f.header, HeaderKind::Bridge { secondary, .. } if secondary == bus)
        })?;
        path.insert(0, (bridge.address.device(), bridge.address.function()));
        bus = bridge.address.bus();
    }
    Some(path)
}
