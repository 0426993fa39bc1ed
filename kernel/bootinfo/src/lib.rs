//! Hardware-independent boot logic for baremq, host-tested on byte fixtures:
//!
//! * [`parse`]: the boot information of Multiboot1, Multiboot2 and PVH loaders
//!   (memory map, command line, ACPI RSDP, loader name, boot modules), read through a
//!   [`PhysMemory`] accessor so a malformed structure gives an error instead of
//!   a wild read;
//! * [`memmap`]: turning a firmware memory map into page-aligned usable ranges
//!   with reserved regions carved out;
//! * [`cmdline`]: the kernel command line as a typed configuration;
//! * [`console`]: the `console=` forms and 16550 divisor arithmetic.
#![no_std]
#![forbid(unsafe_code)]

pub mod cmdline;
pub mod console;
mod error;
/// The checks the fuzz targets and the fixed-count fuzz pass run (feature `fuzz`: they parse job
/// words with the workload's key list, which the kernel's bootinfo does not link).
#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;
pub mod memmap;
pub mod parse;

pub use error::Error;
pub use memmap::{MemoryKind, MemoryRegion};
pub use parse::{BootInfo, BootModule, PhysMemory, Protocol, parse_boot_info};
