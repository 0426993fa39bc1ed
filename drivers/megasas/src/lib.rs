//! MegaRAID SAS (MFI) driver core for QEMU's `megasas` (1000:0060) and `megasas-gen2` (1000:0079).
//!
//! The driver is generic over [`Mmio`] (the register BAR), [`Dma`] (memory with a bus address) and
//! [`Delay`] (bounded waits), so the kernel runs it on hardware and the host tests run it against
//! the fake device in [`fake`] (feature `fake`). The kernel does the PCI work (BAR mapping,
//! MSI-X/MSI/INTx programming, IRQ registration) and the block-layer glue.
//!
//! Flow: [`Controller::new`] (firmware to READY, INIT, CTRL_GET_INFO) → [`Controller::discover`]
//! (LD list, READ CAPACITY(16)) → program interrupts → [`Controller::enable_interrupts`] →
//! [`Controller::submit`] per request, [`Controller::handle_interrupt`] / [`Controller::reap`] per
//! interrupt or poll. See README.md for what QEMU implements and which of its quirks are handled.

#![no_std]

extern crate alloc;

mod controller;
pub mod dcmd;
mod error;
mod frame;
mod gate;
mod mem;
pub mod model;
mod options;
pub mod regs;
pub mod status;
mod tags;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

pub use controller::{Config, Controller, DriveTable, IoOp, IoRequest, IrqMode, LogicalDrive, Reaped, SENSE_LEN};
pub use dcmd::{Capacity, ControllerInfo, LdInfo, LdListEntry};
pub use devhal::{Delay, Dma, DmaError, DmaRegion, Mmio};
pub use error::{BogusReason, Error, Fault};
pub use frame::Segment;
pub use model::Model;
pub use options::{Options, choose_irq_mode};
pub use regs::{FwState, FwStatus};
pub use status::{IoError, IoErrorKind, IoStatus, MfiStatus, Sense};
