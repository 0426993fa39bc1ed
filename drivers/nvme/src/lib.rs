//! NVMe driver core for QEMU 7.2's `nvme` (1b36:0010, 8086:5845) and real controllers: one I/O
//! queue pair and one MSI-X vector per CPU (or per group of CPUs), PRP lists, Identify, error
//! decoding, Abort and controller reset.
//!
//! The driver is generic over [`Mmio`] (BAR0), [`Dma`] (memory with a bus address) and [`Delay`]
//! (bounded waits), so the kernel runs it on hardware and the host tests run it against the fake
//! controller in [`fake`] (feature `fake`). The kernel does the PCI work (BAR0, MSI-X/INTx, IRQ
//! registration); [`blkdev::Host`] is the block-layer binding.
//!
//! Flow: [`Controller::new`] (take over from firmware, enable, Identify, Set Features Number of
//! Queues) → [`QueuePlan::new`] (queues and vectors) → program MSI-X → [`blkdev::Host::new`]
//! (create the I/O queues, one `blk::Queue` per namespace) → [`blkdev::Host::handle_vector`] per
//! interrupt, [`blkdev::Host::poll`] for polled queues, [`blkdev::Host::tick`] for timeouts.
//! With `nvme.irq_poll=` ([`adaptive`]) the kernel calls [`blkdev::Host::handle_vector_adaptive`]
//! and [`blkdev::Host::poll_adaptive`] instead, with a [`adaptive::VectorMask`].
//! README.md has the details and the kernel integration steps.

#![no_std]

extern crate alloc;

pub mod adaptive;
pub mod blkdev;
pub mod cmd;
mod controller;
mod error;
mod options;
pub mod plan;
pub mod prp;
pub mod regs;
pub mod status;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

pub use controller::{
    Accepted, BogusCqe, Config, Controller, ControllerInfo, DEFAULT_DOORBELL_BATCH, NamespaceInfo, PostError, Report,
    ResetOutcome, TimeoutVerdict,
};
pub use devhal::{Delay, Dma, DmaError, DmaRegion, Mmio};
pub use error::Error;
pub use options::{IrqChoice, Options};
pub use plan::{IrqMode, QueuePlan};
pub use status::{NvmeStatus, StatusKind};

/// PCI vendor:device ids the driver binds: QEMU's nvme and the same device with `use-intel-id=on`.
pub const PCI_IDS: [(u16, u16); 2] = [(0x1b36, 0x0010), (0x8086, 0x5845)];
/// PCI class code of NVMe controllers (mass storage, NVM, NVMe I/O).
pub const PCI_CLASS: u32 = 0x01_08_02;
