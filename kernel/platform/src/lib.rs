//! Host-testable platform logic for baremq.
//!
//! The kernel does the hardware access (MMIO mappings, port I/O, LAPIC,
//! IPIs); this crate holds the parts that are pure logic over small access
//! traits, so they are tested on the host with fixtures and fakes:
//!
//! * [`acpi`]: RSDP discovery, RSDT/XSDT walk, MADT and MCFG parsing over
//!   [`acpi::PhysMemory`].
//! * [`pci`]: enumeration over `pci_types::ConfigRegionAccess`, BAR sizing,
//!   capability walk, MSI / MSI-X parsing and programming, driver matching,
//!   ECAM and legacy (0xCF8) address computation, an lspci-like listing.
//! * [`irq`]: vector allocator, lock-free dispatch table with per-CPU
//!   counters, affinity policy and its `irq.affinity=` parser, interrupt
//!   mode planning, I/O APIC redirection entries.
//! * [`cpus`]: how many CPUs are started, the collapsed CPU table, which
//!   CPUs device interrupts can reach, ICR encodings, the watchdog's verdict.
//! * [`paging`]: the identity map's reach, RAM clipping and page choice.
//! * [`mmio`]: the [`mmio::Mmio32`] trait and a volatile implementation.
//!
//! Every value that comes from firmware or a device is validated before use;
//! malformed input yields an [`Error`], never a panic.
#![no_std]

extern crate alloc;

pub mod acpi;
pub mod aml;
pub mod clock;
pub mod cpus;
mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod irq;
pub mod mmio;
pub mod paging;
pub mod pci;

pub use error::{AFFINITY_FORMS, Error, Result, TableSignature, Token};
