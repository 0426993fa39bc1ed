//! Intel gigabit Ethernet controllers driven through legacy descriptors, as the network room's
//! [`net::Nic`].
//!
//! One driver covers the controllers whose queue 0 keeps the 8254x register layout and the
//! legacy 16-byte receive and transmit descriptors: the 82540EM (QEMU's `e1000`), the 82574L
//! (QEMU's `e1000e`), and the 82576 and I350 of servers (their queue-0 registers sit at the same
//! offsets; they also need the queue-enable bits and a descriptor type of their own, see
//! [`Family`]). The kernel maps BAR 0 and hands it over as a [`devhal::Mmio`]; this crate does
//! the rest: reset, MAC address, link, one receive and one transmit ring in DMA memory from
//! [`devhal::Dma`], and frames in and out through them.
//!
//! Interrupts are masked (IMC all): the room polls the NIC. Everything the device writes
//! (descriptor status, lengths, errors, head registers) is checked before use; a device that
//! breaks the protocol is disabled and reset, and the NIC fails every later call with the reason.

#![no_std]

extern crate alloc;

mod device;
mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod regs;
mod ring;

pub use device::{BUFFER_LEN, E1000, RING_LEN, identify};
pub use error::Error;
pub use regs::{Family, ctrl, desc, rctl, reg, tctl};

/// PCI vendor id of Intel.
pub const PCI_VENDOR: u16 = 0x8086;
/// 82540EM desktop adapter (QEMU `-device e1000`).
pub const PCI_DEVICE_82540EM: u16 = 0x100e;
/// 82574L (QEMU `-device e1000e`).
pub const PCI_DEVICE_82574L: u16 = 0x10d3;
/// 82576 (QEMU 8's `-device igb`).
pub const PCI_DEVICE_82576: u16 = 0x10c9;
/// I350 copper.
pub const PCI_DEVICE_I350: u16 = 0x1521;

/// The controller family of a PCI device id this driver knows.
pub fn family_of(device_id: u16) -> Option<Family> {
    match device_id {
        PCI_DEVICE_82540EM => Some(Family::E82540),
        PCI_DEVICE_82574L => Some(Family::E82574),
        PCI_DEVICE_82576 | PCI_DEVICE_I350 => Some(Family::Igb),
        _ => None,
    }
}
