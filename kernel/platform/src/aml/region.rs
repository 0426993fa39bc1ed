//! Operation regions: the hardware access the kernel provides, the host's
//! fixed stand-in, and the address an access reaches (for a `PCI_Config`
//! region, which function).

use pci_types::PciAddress;

use super::interp::{Interpreter, aml_error};
use super::name::Path;
use super::object::Object;
use crate::error::Result;

/// Configuration-space offset of a PCI bridge's secondary bus number.
const PCI_SECONDARY_BUS: u64 = 0x19;

// Operation region spaces (RegionSpace), as the specification numbers them.
const SYSTEM_MEMORY: u8 = 0x00;
const SYSTEM_IO: u8 = 0x01;
const PCI_CONFIG: u8 = 0x02;
/// The space a `DataTableRegion`'s region gets: one no handler serves (the
/// OEM range), so that any access to it is an error.
pub(super) const DATA_TABLE_SPACE: u8 = 0xFE;

/// Where an operation region lives, as the handler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionSpace {
    /// `SystemMemory`: physical address.
    Memory,
    /// `SystemIO`: port.
    Io,
    /// `PCI_Config` of one function: offset into its configuration space.
    PciConfig(PciAddress),
}

/// Hardware access for operation regions. The kernel implements it with
/// real port, MMIO and configuration-space accesses; the host (preflight,
/// tests) uses [`FixedRegions`]. `Send`: the kernel keeps its interpreter,
/// handler included, for `_PRT` tables evaluated on demand on any CPU.
pub trait RegionHandler: Send {
    /// Reads `width` (1, 2, 4 or 8) bytes at `address` in `space`.
    fn read(&mut self, space: RegionSpace, address: u64, width: u8) -> Result<u64>;
    /// Writes `width` bytes.
    fn write(&mut self, space: RegionSpace, address: u64, width: u8, value: u64) -> Result<()>;
}

/// The host's region handler: every read returns `value` (0 by default:
/// "nothing set"), writes are dropped. Both are counted.
#[derive(Debug, Default, Clone)]
pub struct FixedRegions {
    pub value: u64,
    pub reads: u64,
    pub writes: u64,
}

impl RegionHandler for FixedRegions {
    fn read(&mut self, _space: RegionSpace, _address: u64, width: u8) -> Result<u64> {
        self.reads += 1;
        Ok(if width >= 8 {
            self.value
        } else {
            self.value & ((1u64 << (u32::from(width) * 8)) - 1)
        })
    }

    fn write(&mut self, _space: RegionSpace, _address: u64, _width: u8, _value: u64) -> Result<()> {
        self.writes += 1;
        Ok(())
    }
}

impl<'h> Interpreter<'h> {
    pub(super) fn region_access(
        &mut self,
        field: &Path,
        region: &Path,
        byte_offset: u64,
        width: u8,
        write: Option<u64>,
    ) -> Result<u64> {
        let Some(Object::Region { space, offset, len }) = self.nodes.get(region).cloned() else {
            return Err(aml_error(field, 0, "field's region is not an operation region", 0));
        };
        if byte_offset.checked_add(u64::from(width)).is_none_or(|end| end > len) {
            return Err(aml_error(
                field,
                0,
                "field access past its region's length",
                byte_offset,
            ));
        }
        let address = offset
            .checked_add(byte_offset)
            .ok_or_else(|| aml_error(field, 0, "region address overflows", offset))?;
        let space = match space {
            SYSTEM_MEMORY => RegionSpace::Memory,
            SYSTEM_IO => RegionSpace::Io,
            PCI_CONFIG => RegionSpace::PciConfig(self.pci_address_of(&region.parent())),
            other => {
                return Err(aml_error(
                    region,
                    0,
                    "operation region space not supported",
                    u64::from(other),
                ));
            }
        };
        match write {
            None => self.regions.read(space, address, width),
            Some(value) => self.regions.write(space, address, width, value).map(|_| 0),
        }
    }

    /// The PCI function a `PCI_Config` region in `device` reaches: `_ADR` of
    /// the device, on its host bridge's segment (`_SEG`), on the bus reached
    /// from the host bridge's `_BBN` through the secondary bus numbers of the
    /// PCI bridges (devices with `_ADR`) in between.
    fn pci_address_of(&mut self, device: &Path) -> PciAddress {
        if let Some(found) = self.pci_cache.get(device) {
            return *found;
        }
        if self.resolving_pci {
            // _ADR/_BBN/_SEG themselves read PCI_Config: assume bus 0 rather than recurse.
            return PciAddress::new(0, 0, 0, 0);
        }
        self.resolving_pci = true;
        let saved_steps = self.steps;
        let adr = self.quiet_integer(&device.child(*b"_ADR")).unwrap_or(0);
        let mut bridge = device.clone();
        let mut found_bridge = false;
        loop {
            if self.is_host_bridge(&bridge) {
                found_bridge = true;
                break;
            }
            if bridge.0.is_empty() {
                break;
            }
            bridge = bridge.parent();
        }
        // A `_SEG` or `_BBN` too wide for its field counts as absent (0), as discovery reports it.
        let (segment, mut bus) = if found_bridge {
            (
                self.quiet_integer(&bridge.child(*b"_SEG"))
                    .and_then(|segment| u16::try_from(segment).ok())
                    .unwrap_or(0),
                self.quiet_integer(&bridge.child(*b"_BBN"))
                    .and_then(|bus| u8::try_from(bus).ok())
                    .unwrap_or(0),
            )
        } else {
            (0, 0)
        };
        // Each PCI bridge between the host bridge and the device: its
        // secondary bus number (config offset 0x19) is the next bus down.
        if found_bridge {
            for depth in bridge.0.len() + 1..device.0.len() {
                let node = Path(device.0[..depth].to_vec());
                let Some(hop) = self.quiet_integer(&node.child(*b"_ADR")) else {
                    break;
                };
                let at = PciAddress::new(segment, bus, ((hop >> 16) & 0x1F) as u8, (hop & 0x7) as u8);
                match self
                    .regions
                    .read(RegionSpace::PciConfig(at), PCI_SECONDARY_BUS, 1)
                    .map(u8::try_from)
                {
                    Ok(Ok(secondary)) if secondary != 0 && secondary != 0xFF => bus = secondary,
                    // Not a bridge the firmware numbered: keep the bus above.
                    _ => break,
                }
            }
        }
        self.steps = saved_steps;
        self.resolving_pci = false;
        let address = PciAddress::new(segment, bus, ((adr >> 16) & 0x1F) as u8, (adr & 0x7) as u8);
        self.pci_cache.insert(device.clone(), address);
        address
    }
}
