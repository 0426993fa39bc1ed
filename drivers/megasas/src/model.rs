//! The two controller models QEMU 7.2 emulates (`hw/scsi/megasas.c`).

use core::fmt;

use crate::regs;

/// PCI vendor id of LSI / Broadcom.
pub const PCI_VENDOR_LSI: u16 = 0x1000;

/// A supported MegaRAID MFI controller model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// 1000:0060, QEMU `megasas` (SAS 1078, Linux's "ppc" register template).
    Sas1078,
    /// 1000:0079, QEMU `megasas-gen2` (SAS 2108, Linux's "gen2" register template).
    Sas2108Gen2,
}

impl Model {
    /// Both models, for probing.
    pub const ALL: [Model; 2] = [Model::Sas1078, Model::Sas2108Gen2];

    /// Matches a PCI vendor/device pair.
    pub const fn from_pci_id(vendor: u16, device: u16) -> Option<Self> {
        match (vendor, device) {
            (PCI_VENDOR_LSI, 0x0060) => Some(Self::Sas1078),
            (PCI_VENDOR_LSI, 0x0079) => Some(Self::Sas2108Gen2),
            _ => None,
        }
    }

    /// PCI device id.
    pub const fn device_id(self) -> u16 {
        match self {
            Self::Sas1078 => 0x0060,
            Self::Sas2108Gen2 => 0x0079,
        }
    }

    /// Index of the 64-bit memory BAR holding the registers (16 KiB; MSI-X table at +0x2000).
    pub const fn mmio_bar(self) -> u8 {
        match self {
            Self::Sas1078 => 0,
            Self::Sas2108Gen2 => 1,
        }
    }

    /// Index of the 256-byte I/O-port BAR that mirrors registers 0x00-0xFF.
    pub const fn io_bar(self) -> u8 {
        match self {
            Self::Sas1078 => 2,
            Self::Sas2108Gen2 => 0,
        }
    }

    /// Register holding the firmware status word. QEMU mirrors it at OMSG0 and OSP0; scratch pad 0
    /// is what Linux reads on gen2 and newer.
    pub const fn status_register(self) -> u32 {
        regs::OSP0
    }

    /// OSTS bits meaning "this INTx interrupt is ours" (Linux `clear_intr_ppc` / `_gen2`).
    pub const fn intx_pending_bits(self) -> u32 {
        match self {
            Self::Sas1078 => 0x8000_0000,
            Self::Sas2108Gen2 => 0x0000_0005,
        }
    }

    /// OMSK value that unmasks the reply interrupt. Never all-ones: that resets QEMU's firmware.
    pub const fn unmask_value(self) -> u32 {
        match self {
            Self::Sas1078 => !0x8000_0000,
            Self::Sas2108Gen2 => !0x0000_0005,
        }
    }

    /// Short name as QEMU calls the device.
    pub const fn qemu_name(self) -> &'static str {
        match self {
            Self::Sas1078 => "megasas",
            Self::Sas2108Gen2 => "megasas-gen2",
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chip = match self {
            Self::Sas1078 => "SAS1078",
            Self::Sas2108Gen2 => "SAS2108",
        };
        write!(f, "{} ({chip}, 1000:{:04x})", self.qemu_name(), self.device_id())
    }
}
