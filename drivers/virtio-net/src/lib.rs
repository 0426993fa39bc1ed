//! The virtio network device over modern virtio-pci (virtio 1.0 and later), as the network
//! room's [`net::Nic`].
//!
//! The kernel finds the device's register structures through its PCI capabilities (common
//! configuration, notifications, ISR status, device configuration) and hands them over as one
//! [`VirtioRegs`]; this crate does the rest: reset, feature negotiation (`VERSION_1` required,
//! `MAC` required, `STATUS` when offered; nothing else), one receive and one transmit split
//! virtqueue in DMA memory from [`devhal::Dma`], and frames in and out through them.
//!
//! The device's interrupts are not used: the driver asks the device not to interrupt and the
//! room polls it. Everything the device writes into memory (used-ring index, entries' buffer ids
//! and lengths) or its registers (queue sizes, notification offsets) is checked before use; a
//! device that breaks the protocol is reset (which makes it give every buffer back) and the NIC
//! fails every later call with the reason.

#![no_std]

extern crate alloc;

mod device;
mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod queue;
mod regs;

pub use device::{FEATURES_WANTED, NET_HEADER_LEN, QUEUE_SIZE_MAX, VirtioNet};
pub use error::Error;
pub use regs::{Region, VirtioRegs, common, feature, status};

/// PCI vendor id of virtio devices.
pub const PCI_VENDOR: u16 = 0x1af4;
/// PCI device id of a modern (1.0+) network device: 0x1040 + device type 1.
pub const PCI_DEVICE_MODERN: u16 = 0x1041;
/// PCI device id of a transitional network device (legacy and modern interfaces).
pub const PCI_DEVICE_TRANSITIONAL: u16 = 0x1000;
