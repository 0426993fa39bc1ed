//! MegaRAID SAS (MFI) driver for QEMU's `megasas` (1000:0060) and `megasas-gen2` (1000:0079).
//!
//! The driver is generic over [`Mmio`] (the register BAR), [`Dma`] (memory with a bus address) and
//! [`Delay`] (bounded waits), so the kernel runs it on hardware and the host tests run it against
//! the fake device in [`fake`] (feature `fake`). The kernel does the PCI work (BAR mapping,
//! MSI-X/MSI/INTx programming, IRQ registration); the block-layer binding is [`blkdev::Host`].
//!
//! Flow for the kernel: [`Host::new`] (bring-up, discovery, one `blk::Queue` per drive on a
//! host-wide tag set) → program interrupts → [`Host::start`] → [`Host::handle_interrupt`] per
//! interrupt, [`Host::tick`] per tick. Underneath, [`Controller`] does firmware bring-up, INIT,
//! discovery, submission, reaping, ABORT and controller reset. See README.md for what QEMU
//! implements and which of its quirks are handled.

#![no_std]

extern crate alloc;

pub mod blkdev;
mod controller;
pub mod dcmd;
mod error;
pub mod floor;
mod frame;
mod gate;
pub mod host_common;
pub mod model;
mod options;
pub mod regs;
pub mod status;
mod tags;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

pub use blkdev::{
    AdaptiveConfig, AdaptiveCounters, DriveInfo, Host, HostConfig, HostCounters, IrqOutcome, MAX_POLLED_TRANSFER_BYTES,
    VectorMask,
};
pub use controller::{
    ADMIN_TAG, CheckedLdIo, CheckedRequest, CommandState, Config, Controller, Done, DriveTable, IoOp, IoRequest,
    IrqMode, LdIo, LogicalDrive, Reaped, RecoveryCounters, SENSE_LEN, SubmitGuard,
};
pub use dcmd::{Capacity, ControllerInfo, LdInfo, LdListEntry};
pub use devhal::{Delay, Dma, DmaError, DmaRegion, Mmio};
pub use error::{BogusReason, Error, Fault};
pub use floor::{FLOOR_COOKIE, FloorResult, FloorSpec};
pub use frame::Segment;
pub use model::Model;
pub use options::{IrqPoll, MsixVectors, Options, choose_irq_mode};
pub use regs::{FwState, FwStatus};
pub use status::{IoError, IoErrorKind, IoStatus, MfiStatus, Sense};
