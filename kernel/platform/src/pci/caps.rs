//! The capability list walk.

use pci_types::{ConfigRegionAccess, PciAddress};

use super::config::{ConfigSpace, STATUS_CAPABILITY_LIST};
use crate::error::{Error, Result};

/// Power management.
pub const CAP_PM: u8 = 0x01;
/// MSI.
pub const CAP_MSI: u8 = 0x05;
/// Vendor specific.
pub const CAP_VENDOR: u8 = 0x09;
/// PCI Express.
pub const CAP_PCIE: u8 = 0x10;
/// MSI-X.
pub const CAP_MSIX: u8 = 0x11;

/// Capabilities fit between 0x40 and 0xFF on dword boundaries: at most 48.
pub const MAX_CAPABILITIES: usize = 48;

/// One entry of the capability list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// Capability id.
    pub id: u8,
    /// Offset of its header in configuration space.
    pub offset: u8,
}

/// A short name for a capability id.
pub fn capability_name(id: u8) -> &'static str {
    match id {
        CAP_PM => "Power Management",
        0x02 => "AGP",
        0x03 => "VPD",
        0x04 => "Slot ID",
        CAP_MSI => "MSI",
        0x06 => "CompactPCI Hot Swap",
        0x07 => "PCI-X",
        0x08 => "HyperTransport",
        CAP_VENDOR => "Vendor Specific",
        0x0A => "Debug Port",
        0x0C => "PCI Hot-Plug",
        0x0D => "Subsystem IDs",
        0x0E => "AGP 8x",
        0x0F => "Secure Device",
        CAP_PCIE => "Express",
        CAP_MSIX => "MSI-X",
        0x12 => "SATA",
        0x13 => "Advanced Features",
        0x14 => "Enhanced Allocation",
        0x15 => "Flattening Portal Bridge",
        _ => "Unknown",
    }
}

/// Walks the capability list: pointer at 0x34 (0x14 for CardBus), low two
/// bits ignored, every pointer must be in 0x40..=0xFC, and a revisited
/// offset is reported as a loop. An id of 0xFF ends the walk (what a
/// function that went away reads as). At most 48 steps.
pub fn walk_capabilities<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    address: PciAddress,
    header_type: u8,
) -> Result<heapless::Vec<Capability, MAX_CAPABILITIES>> {
    let cfg = ConfigSpace::new(access, address);
    let mut list = heapless::Vec::new();
    if cfg.status()? & STATUS_CAPABILITY_LIST == 0 {
        return Ok(list);
    }
    let pointer_offset = if header_type & 0x7F == 2 { 0x14 } else { 0x34 };
    let mut pointer = cfg.read8(pointer_offset)? & 0xFC;
    let mut visited = [0u64; 4];
    while pointer != 0 {
        if pointer < 0x40 {
            return Err(Error::CapabilityPointer { address, pointer });
        }
        let bit = usize::from(pointer);
        if visited[bit / 64] & (1 << (bit % 64)) != 0 {
            return Err(Error::CapabilityLoop {
                address,
                offset: pointer,
            });
        }
        visited[bit / 64] |= 1 << (bit % 64);
        let header = cfg.read32(u16::from(pointer))?;
        let id = header as u8;
        if id == 0xFF {
            break;
        }
        list.push(Capability { id, offset: pointer })
            .map_err(|_| Error::CapabilityCapacity {
                address,
                capacity: MAX_CAPABILITIES,
            })?;
        pointer = (header >> 8) as u8 & 0xFC;
    }
    Ok(list)
}
