//! MegaRAID SAS **Fusion** driver core (the MPT-based interface of SAS2208 and every later
//! MegaRAID: SAS3108 "Invader", SAS35xx "Ventura", SAS39xx "Aero").
//!
//! Tested against the model of the firmware in [`fake`] only, not on hardware. The transport
//! shares DCMD reply layouts, status decoding and the LD list with the MFI driver (`megasas`).
//! With a RAID map (dynamic on Ventura and Aero, the legacy 64-LD or extended 256-LD map on
//! Invader and Fury) RAID-0 reads and writes inside one strip, and RAID-1 reads, go FastPath
//! straight to the member disk ([`raidmap`]); everything else takes the firmware LD-I/O path.
//!
//! Flow: [`match_pci`] → [`Controller::bring_up`] (writes a [`Report`], the first-boot
//! diagnostic) → install vector handlers → [`Controller::enable_interrupts`] →
//! [`Controller::submit`] / [`Controller::reap`] per vector → [`Controller::reset`] (OCR) on
//! timeouts or FAULT. [`blkdev::Host`] binds it to the block layer.

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod blkdev;
mod controller;
mod diag;
mod error;
pub mod layout;
mod mem;
mod options;
mod pci;
pub mod raidmap;
pub mod regs;
mod slot;
mod sync;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

pub use controller::{
    Completion, Config, Controller, DCMD_CACHE_FLUSH, DCMD_CTRL_GET_INFO, DCMD_LD_GET_LIST, DCMD_SHUTDOWN, DCMD_SMIDS,
    DCMD_SYSTEM_PD_MAP_GET_INFO, Entered, FRAME_SIZE, Health, IntxResult, IoOp, IoOutcome, IoRequest, JbodRoute,
    Limits, LogicalDrive, Mistake, SENSE_SIZE, Stats, Validated, outcome_retryable,
};
pub use devhal::{Delay, Dma, Mmio};

/// The register window plus one 8-byte register write: the request descriptor goes to
/// 0xC0 as a single 64-bit access, as Linux's `megasas_write_64bit_req_desc` does with
/// `writeq` on 64-bit kernels (one 64-bit store where the CPU emits a single 8-byte write), so no lock keeps two CPUs' low/high pairs apart and one MMIO write per I/O
/// is saved. The window must be mapped so that the write reaches the device as one 8-byte
/// transaction (x86-64: an aligned `mov` to uncached memory).
pub trait Mmio64: Mmio {
    /// Writes `value` to the 64-bit register at byte `offset` (8-byte aligned) in one access.
    fn write64(&self, offset: u32, value: u64);
}
pub use diag::{Report, Step};
pub use error::Error;
pub use megasas::{ControllerInfo, IoError, IoErrorKind, Segment};
pub use options::Options;
pub use pci::{FUSION_IDS, PciMatch, VENDOR_LSI, match_pci};
pub use regs::Generation;
