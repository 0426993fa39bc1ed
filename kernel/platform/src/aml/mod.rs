//! ACPI Machine Language: the DSDT's and SSDTs' namespace, evaluated for
//! PCI host bridges (`_SEG`, `_BBN`, `_CRS`, `_PXM`) and INTx routing
//! (`_PRT`, interrupt links). See `interp` for why this is baremq's own
//! interpreter and how its work is bounded.
//!
//! Every failure is an error value: the kernel reports it and falls back to
//! the MCFG bus scan and the firmware interrupt line.

mod bridges;
mod interp;
mod name;
pub mod resource;

pub use bridges::{
    DeviceProximity, Discovery, HostBridge, Problem, PrtRoute, PrtScope, PrtTable, RouteSource, discover,
};
pub use interp::{
    FieldKind, FixedRegions, Interpreter, LoadProblem, MAX_DEPTH, Object, Place, RegionHandler, RegionSpace,
    STEPS_IN_ALL, STEPS_PER_EVALUATION, ScopeKind,
};
pub use name::{NameString, Path, Seg, eisa_id_text};
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
