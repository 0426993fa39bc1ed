//! An lspci-like listing.

use core::fmt::{self, Write};

use pci_types::device_type::DeviceType;

use super::bar::BarSlot;
use super::caps::{CAP_MSI, CAP_MSIX, capability_name};
use super::enumerate::{HeaderKind, PciFunction};

/// Writes `DeviceType`'s CamelCase variant name as words ("SasController" -> "Sas Controller").
struct Spaced<'a, 'b> {
    out: &'a mut fmt::Formatter<'b>,
    first: bool,
}

impl Write for Spaced<'_, '_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for ch in text.chars() {
            if ch.is_ascii_uppercase() && !self.first {
                self.out.write_char(' ')?;
            }
            self.first = false;
            self.out.write_char(ch)?;
        }
        Ok(())
    }
}

/// Class name from `pci_types`' table, as words ("Unclassified device" when it has none).
pub fn class_name(class: u8, subclass: u8) -> impl fmt::Display {
    struct Name(DeviceType);
    impl fmt::Display for Name {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.0 == DeviceType::Unknown {
                return f.write_str("Unclassified device");
            }
            let mut spaced = Spaced { out: f, first: true };
            write!(spaced, "{:?}", self.0)
        }
    }
    Name(DeviceType::from((class, subclass)))
}

impl fmt::Display for PciFunction {
    /// One line like lspci -nn (with the segment and the root bus), then indented BARs, capabilities, interrupt and problems.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let address = self.address;
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{} {} [{:02x}{:02x}]: {:04x}:{:04x} (rev {:02x})",
            address.segment(),
            address.bus(),
            address.device(),
            address.function(),
            class_name(self.class, self.subclass),
            self.class,
            self.subclass,
            self.vendor_id,
            self.device_id,
            self.revision
        )?;
        if let HeaderKind::Bridge {
            primary,
            secondary,
            subordinate,
        } = self.header
        {
            write!(
                f,
                " bus: primary={primary:02x} secondary={secondary:02x} subordinate={subordinate:02x}"
            )?;
        }
        // Which host bridge's tree it is in: a server has one root bus per
        // socket or I/O stack, and only bus 00's tree is ever re-laid.
        write!(f, " root={:02x}", self.root_bus)?;
        writeln!(f)?;
        if self.interrupt_pin != 0 {
            let pin = (b'A' + (self.interrupt_pin.clamp(1, 4) - 1)) as char;
            writeln!(f, "\tinterrupt: pin {pin} line {}", self.interrupt_line)?;
        }
        for slot in &self.bars {
            match slot {
                BarSlot::Bar(bar) => writeln!(f, "\t{bar}")?,
                BarSlot::Invalid => writeln!(f, "\tBAR: invalid")?,
                BarSlot::Unused | BarSlot::Upper64 => {}
            }
        }
        for capability in &self.capabilities {
            write!(
                f,
                "\tcap [{:02x}] {}",
                capability.offset,
                capability_name(capability.id)
            )?;
            match capability.id {
                CAP_MSI => {
                    if let Some(msi) = self.msi.filter(|msi| msi.offset == capability.offset) {
                        write!(
                            f,
                            ": {}-bit, {} vector(s){}",
                            if msi.is_64bit { 64 } else { 32 },
                            msi.vectors_capable,
                            if msi.per_vector_masking {
                                ", per-vector masking"
                            } else {
                                ""
                            }
                        )?;
                    }
                }
                CAP_MSIX => {
                    if let Some(msix) = self.msix.filter(|msix| msix.offset == capability.offset) {
                        write!(
                            f,
                            ": {} entries, table BAR{}+{:#x}, PBA BAR{}+{:#x}",
                            msix.table_size, msix.table_bir, msix.table_offset, msix.pba_bir, msix.pba_offset
                        )?;
                    }
                }
                id if capability_name(id) == "Unknown" => write!(f, " (id {id:#04x})")?,
                _ => {}
            }
            writeln!(f)?;
        }
        for problem in &self.problems {
            writeln!(f, "\tproblem: {problem}")?;
        }
        if let Some(reason) = &self.refused {
            writeln!(f, "\trefused: {reason}")?;
        }
        Ok(())
    }
}

/// All functions, one block each.
#[derive(Debug, Clone, Copy)]
pub struct PciListing<'a>(pub &'a [PciFunction]);

impl fmt::Display for PciListing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for function in self.0 {
            write!(f, "{function}")?;
        }
        Ok(())
    }
}
