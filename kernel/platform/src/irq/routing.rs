//! Choosing a device's interrupt mode, and I/O APIC redirection entries.

use core::fmt;

use crate::acpi::{IrqRoute, Madt};
use crate::error::{Error, Result};
use crate::pci::PciFunction;

/// The three ways a PCI function can interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptMode {
    /// MSI-X: one table entry per vector, each with its own destination.
    MsiX,
    /// MSI: one address, a power-of-two block of consecutive vectors.
    Msi,
    /// Legacy INTx pin through the I/O APIC.
    Intx,
}

impl InterruptMode {
    fn name(self) -> &'static str {
        match self {
            InterruptMode::MsiX => "MSI-X",
            InterruptMode::Msi => "MSI",
            InterruptMode::Intx => "INTx",
        }
    }
}

/// The mode chosen for a function and what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptPlan {
    /// Use `vectors` MSI-X entries (of `table_size`).
    MsiX {
        /// Vectors to allocate and program.
        vectors: u16,
        /// Entries the table has.
        table_size: u16,
    },
    /// Use MSI with `vectors` (a power of two) vectors.
    Msi {
        /// Vectors to allocate as one aligned block.
        vectors: u16,
    },
    /// Use the INTx pin, routed through the MADT.
    Intx {
        /// 1..=4 for INTA..INTD.
        pin: u8,
        /// Firmware-assigned line.
        line: u8,
        /// GSI, polarity and trigger for the I/O APIC.
        route: IrqRoute,
    },
}

impl InterruptPlan {
    /// The mode.
    pub fn mode(&self) -> InterruptMode {
        match self {
            InterruptPlan::MsiX { .. } => InterruptMode::MsiX,
            InterruptPlan::Msi { .. } => InterruptMode::Msi,
            InterruptPlan::Intx { .. } => InterruptMode::Intx,
        }
    }

    /// Vectors the plan needs.
    pub fn vectors(&self) -> u16 {
        match self {
            InterruptPlan::MsiX { vectors, .. } | InterruptPlan::Msi { vectors } => *vectors,
            InterruptPlan::Intx { .. } => 1,
        }
    }
}

impl fmt::Display for InterruptPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterruptPlan::MsiX { vectors, table_size } => {
                write!(f, "MSI-X, {vectors} vector(s) of {table_size} table entries")
            }
            InterruptPlan::Msi { vectors } => write!(f, "MSI, {vectors} vector(s)"),
            InterruptPlan::Intx { pin, line, route } => write!(
                f,
                "INTx pin {} line {line} -> GSI {} {} {}",
                (b'A' + pin.clamp(&1, &4) - 1) as char,
                route.gsi,
                if route.level { "level" } else { "edge" },
                if route.active_low { "active-low" } else { "active-high" }
            ),
        }
    }
}

/// Picks MSI-X, then MSI, then INTx (or exactly `forced`), for up to
/// `wanted` vectors (0 is taken as 1). MSI gets the largest power of two not
/// above `wanted` and what the function can do. INTx needs a pin and a line
/// other than 0xFF; its route comes from the MADT's overrides (without a
/// MADT: GSI = line, level, active low).
pub fn choose_interrupt_mode(
    function: &PciFunction,
    wanted: u16,
    forced: Option<InterruptMode>,
    madt: Option<&Madt>,
) -> Result<InterruptPlan> {
    let wanted = wanted.max(1);
    let address = function.address;
    let msix = || {
        function.msix.map(|msix| InterruptPlan::MsiX {
            vectors: wanted.min(msix.table_size),
            table_size: msix.table_size,
        })
    };
    let msi = || {
        function.msi.map(|msi| {
            let limit = wanted.min(u16::from(msi.vectors_capable));
            // Largest power of two not above `limit` (limit >= 1).
            InterruptPlan::Msi {
                vectors: 1 << (15 - limit.leading_zeros()),
            }
        })
    };
    let intx = || -> Option<Result<InterruptPlan>> {
        if function.interrupt_pin == 0 {
            return None;
        }
        let (pin, line) = (function.interrupt_pin, function.interrupt_line);
        if pin > 4 || line == 0xFF {
            return Some(Err(Error::IntxLine { address, line }));
        }
        let route = match madt {
            Some(madt) => madt.pci_line_route(line),
            None => IrqRoute {
                gsi: u32::from(line),
                active_low: true,
                level: true,
            },
        };
        Some(Ok(InterruptPlan::Intx { pin, line, route }))
    };
    match forced {
        Some(mode) => {
            let plan = match mode {
                InterruptMode::MsiX => msix().map(Ok),
                InterruptMode::Msi => msi().map(Ok),
                InterruptMode::Intx => intx(),
            };
            plan.unwrap_or(Err(Error::ModeUnavailable {
                address,
                mode: mode.name(),
            }))
        }
        None => msix()
            .or_else(msi)
            .map(Ok)
            .or_else(intx)
            .unwrap_or(Err(Error::NoInterruptSource { address })),
    }
}

/// An I/O APIC redirection table entry (fixed delivery, physical destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoApicRedirection {
    /// Vector delivered.
    pub vector: u8,
    /// Destination local APIC id (xAPIC: 8 bits).
    pub destination: u8,
    /// Active-low input.
    pub active_low: bool,
    /// Level-triggered input.
    pub level: bool,
    /// Masked.
    pub masked: bool,
}

impl IoApicRedirection {
    /// An entry for `route` delivering `vector` to `apic_id`. Errors for
    /// exception vectors and for APIC ids that do not fit 8 bits.
    pub fn new(route: &IrqRoute, vector: u8, apic_id: u32, masked: bool) -> Result<IoApicRedirection> {
        if vector < 0x20 {
            return Err(Error::ExceptionVector { vector });
        }
        let destination = u8::try_from(apic_id).map_err(|_| Error::ApicIdNeedsRemapping { apic_id })?;
        Ok(IoApicRedirection {
            vector,
            destination,
            active_low: route.active_low,
            level: route.level,
            masked,
        })
    }

    /// The 64-bit register value: vector (0..=7), delivery mode fixed
    /// (8..=10 = 0), physical destination mode (11 = 0), polarity (13),
    /// trigger (15), mask (16), destination (56..=63).
    pub fn encode(&self) -> u64 {
        u64::from(self.vector)
            | u64::from(self.active_low) << 13
            | u64::from(self.level) << 15
            | u64::from(self.masked) << 16
            | u64::from(self.destination) << 56
    }

    /// Decodes a register value (read-only status bits are ignored).
    pub fn decode(value: u64) -> IoApicRedirection {
        IoApicRedirection {
            vector: value as u8,
            destination: (value >> 56) as u8,
            active_low: value & (1 << 13) != 0,
            level: value & (1 << 15) != 0,
            masked: value & (1 << 16) != 0,
        }
    }
}

/// The I/O APIC register indices (low, high dwords) of redirection entry
/// `pin`; `None` beyond the 120 entries the 8-bit index can reach.
pub fn ioapic_redirection_registers(pin: u8) -> Option<(u8, u8)> {
    if pin >= 120 {
        return None;
    }
    let low = 0x10 + pin * 2;
    Some((low, low + 1))
}

/// A chipset PCI interrupt router (the south bridge that maps a device's
/// INTx pin to a PIRQ line and on to an I/O APIC input). Without AML `_PRT`
/// evaluation, baremq knows the two QEMU chipsets' fixed wiring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PciIrqRouter {
    /// PIIX3 (QEMU `pc`): PIRQ A-D, each routed to an ISA IRQ by config
    /// registers 0x60-0x63 (bit 7 disables); the ISA IRQ is the GSI.
    Piix3,
    /// ICH9 LPC (QEMU `q35`): in APIC mode PIRQ A-H drive GSI 16-23 directly.
    Ich9,
}

/// Offset of the PIIX3's PIRQ A route-control register (PIRQ n is at +n).
pub const PIIX3_PIRQ_ROUTE: u16 = 0x60;

impl PciIrqRouter {
    /// The router function's vendor:device, if it is one of these.
    pub fn from_id(vendor: u16, device: u16) -> Option<PciIrqRouter> {
        match (vendor, device) {
            (0x8086, 0x7000) => Some(PciIrqRouter::Piix3),
            (0x8086, 0x2918) => Some(PciIrqRouter::Ich9),
            _ => None,
        }
    }

    /// The PIRQ (0 = A) that INTx `pin` (1..=4 = INTA..INTD) of a bus-0
    /// device in `slot` drives, or `None` when the pin is invalid or the slot
    /// is wired by chipset registers baremq does not read (ICH9 slots 25-31).
    pub fn pirq(self, slot: u8, pin: u8) -> Option<u8> {
        if !(1..=4).contains(&pin) || slot > 31 {
            return None;
        }
        let pin0 = pin - 1;
        match self {
            // Slot 1 is the PIIX3 itself, so slot 2 pin A lands on PIRQ B.
            PciIrqRouter::Piix3 => Some((slot.wrapping_sub(1).wrapping_add(pin0)) & 3),
            // Devices avoid PIRQ A-D (kept for PCIe ports): (slot + pin) % 4 + 4.
            PciIrqRouter::Ich9 if slot < 25 => Some((slot + pin0) % 4 + 4),
            PciIrqRouter::Ich9 => None,
        }
    }

    /// The I/O APIC input a PIRQ drives independently of the ISA routing
    /// registers (ICH9 in APIC mode), with its polarity and trigger.
    pub fn direct_route(self, pirq: u8) -> Option<IrqRoute> {
        match self {
            PciIrqRouter::Piix3 => None,
            PciIrqRouter::Ich9 if pirq < 8 => Some(IrqRoute {
                gsi: 16 + u32::from(pirq),
                active_low: true,
                level: true,
            }),
            PciIrqRouter::Ich9 => None,
        }
    }
}
