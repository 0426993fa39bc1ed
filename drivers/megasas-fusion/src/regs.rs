//! Fusion register map, scratch-pad decoding and doorbell values (as Linux's `megaraid_sas.h`
//! and FreeBSD's `mrsas.h` define them).
//!
//! Scratch pads are numbered the Linux way: SP0-SP3 at 0xB0/0xB4/0xB8/0xBC.

use core::fmt;

pub use megasas::regs::{FwState, FwStatus};

/// Doorbell (write: command bits; read bit 0: the previous command is still in progress).
pub const DOORBELL: u32 = 0x000;
/// Diagnostic write-sequence register (unlock keys).
pub const WRITE_SEQUENCE: u32 = 0x004;
/// Host diagnostic register.
pub const HOST_DIAG: u32 = 0x008;
/// Interrupt status: bit 0 doorbell/state change, bit 3 reply descriptor.
pub const INTR_STATUS: u32 = 0x030;
/// Interrupt mask (1 = masked).
pub const INTR_MASK: u32 = 0x034;
/// Reply-post host index (non-combined mode).
pub const REPLY_HOST_INDEX: u32 = 0x06C;
/// Scratch pad 0: firmware status word.
pub const SP0: u32 = 0x0B0;
/// Scratch pad 1: queue and chain limits, feature bits.
pub const SP1: u32 = 0x0B4;
/// Scratch pad 2.
pub const SP2: u32 = 0x0B8;
/// Scratch pad 3.
pub const SP3: u32 = 0x0BC;
/// Request descriptor, low dword (latched).
pub const REQ_DESC_LOW: u32 = 0x0C0;
/// Request descriptor, high dword (commits the latched low dword).
pub const REQ_DESC_HIGH: u32 = 0x0C4;
/// Atomic 32-bit request descriptor port (Aero, after IOC INIT, when SP1 bit 24 says so).
pub const REQ_DESC_ATOMIC: u32 = 0x0C8;
/// First supplementary reply-post host index register (combined mode).
pub const SUPPLEMENTARY_HOST_INDEX: u32 = 0x30C;

/// Interrupt status bit: doorbell / firmware state change.
pub const INTR_DOORBELL: u32 = 1 << 0;
/// Interrupt status bit: a reply descriptor was posted.
pub const INTR_REPLY: u32 = 1 << 3;
/// Mask value that enables both interrupt sources.
pub const INTR_ENABLE_MASK: u32 = !(INTR_DOORBELL | INTR_REPLY);
/// Mask value that disables every interrupt source.
pub const INTR_DISABLE_MASK: u32 = 0xFFFF_FFFF;

/// Doorbell: abort everything and go back to READY (only in OPERATIONAL).
pub const DB_RESET_TO_READY: u32 = 0x07;
/// Doorbell: clear handshake (state WAIT_HANDSHAKE).
pub const DB_CLEAR_HANDSHAKE: u32 = 0x18;
/// Doorbell: hotplug (state BOOT_MESSAGE_PENDING).
pub const DB_HOTPLUG: u32 = 0x10;
/// Doorbell: stop the adapter for good.
pub const DB_STOP_ADAPTER: u32 = 0x20;
/// Doorbell read bit: the last doorbell command is still being processed.
pub const DB_IN_PROGRESS: u32 = 1 << 0;

/// Host diagnostic: diagnostic register write enabled.
pub const DIAG_DRWE: u32 = 1 << 7;
/// Host diagnostic: reset the adapter.
pub const DIAG_RESET_ADAPTER: u32 = 1 << 2;
/// The seven keys that unlock the host diagnostic register, written in order to WRITE_SEQUENCE.
pub const DIAG_UNLOCK_KEYS: [u32; 7] = [0x0, 0xF, 0x4, 0xB, 0x2, 0x7, 0xD];

/// SP0 bit 26 (not in FAULT): MSI-X capable, SP1 queue fields valid.
pub const SP0_MSIX_CAPABLE: u32 = 1 << 26;
/// SP0 bit 1 (in FAULT): a diag reset can recover this fault.
pub const SP0_FAULT_RESETTABLE: u32 = 1 << 1;

/// Controller generation; the order matches Linux's classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Generation {
    /// SAS2208 (0x005B, 0x002F).
    Thunderbolt,
    /// SAS3108/3008/33xx/32xx (0x005D, 0x005F, 0x00CE, 0x00CF, 0x0052, 0x0053).
    Invader,
    /// SAS35xx/34xx tri-mode (0x0014-0x0017, 0x001B, 0x001C).
    Ventura,
    /// SAS39xx/38xx (0x10E1, 0x10E2, 0x10E5, 0x10E6).
    Aero,
}

impl Generation {
    /// The memory BAR holding the registers (F: BAR1 before Ventura, BAR0 from Ventura on).
    pub const fn register_bar(self) -> u8 {
        match self {
            Self::Thunderbolt | Self::Invader => 1,
            Self::Ventura | Self::Aero => 0,
        }
    }
    /// Ventura and later use the G35 RAID-context layout.
    pub const fn g35_raid_context(self) -> bool {
        matches!(self, Self::Ventura | Self::Aero)
    }
    /// Invader and later put an end-of-list flag on the last data SGE and use chain flags 0x80.
    pub const fn end_of_list_flag(self) -> bool {
        !matches!(self, Self::Thunderbolt)
    }
    /// Flags byte of a chain SGE in an I/O frame.
    pub const fn chain_flags(self) -> u8 {
        match self {
            Self::Thunderbolt => 0x83,
            _ => 0x80,
        }
    }
    /// Above this many reply queues the generation needs combined mode (None: never).
    pub const fn combined_above(self) -> Option<u16> {
        match self {
            Self::Thunderbolt => None,
            Self::Invader => Some(8),
            Self::Ventura | Self::Aero => Some(16),
        }
    }
    /// The most reply queues the generation's SP1 field can report.
    pub const fn max_queues(self) -> u16 {
        match self {
            Self::Thunderbolt => 32,
            _ => 128,
        }
    }
    /// Descriptor type byte for LD read/write without a RAID map.
    pub const fn ld_rw_descriptor(self) -> u8 {
        match self {
            Self::Invader => DESC_NO_LOCK,
            _ => DESC_LD_IO,
        }
    }
    /// Register reads may transiently return 0 (L and F re-read up to three times).
    pub const fn zero_read_glitch(self) -> bool {
        matches!(self, Self::Aero)
    }
    /// Short name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Thunderbolt => "Thunderbolt (SAS2208)",
            Self::Invader => "Invader (SAS3108 class)",
            Self::Ventura => "Ventura (SAS35xx class)",
            Self::Aero => "Aero (SAS39xx/38xx class)",
        }
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Request descriptor type: SCSI IO (MFI pass-through, LD non-read/write).
pub const DESC_SCSI_IO: u8 = 0x00;
/// Request descriptor type: MFA (IOC INIT only).
pub const DESC_MFA: u8 = 0x02;
/// Request descriptor type: LD read/write without region lock (Invader).
pub const DESC_NO_LOCK: u8 = 0x04;
/// Request descriptor type: high priority (task management).
pub const DESC_HIGH_PRIORITY: u8 = 0x06;
/// Request descriptor type: FastPath.
pub const DESC_FP_IO: u8 = 0x0C;
/// Request descriptor type: LD read/write.
pub const DESC_LD_IO: u8 = 0x0E;

/// Decoded SP1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sp1(pub u32);

impl Sp1 {
    /// Reply queues the firmware offers for `generation`.
    pub const fn fw_queues(self, generation: Generation) -> u16 {
        match generation {
            Generation::Thunderbolt => (self.0 & 0x1F) as u16 + 1,
            _ => ((self.0 >> 14) & 0xFF) as u16 + 1,
        }
    }
    /// Max chain frame size in bytes, raised to at least 1 KiB as Linux does.
    pub const fn chain_bytes(self) -> u32 {
        let units = (self.0 >> 5) & 0x1F;
        let unit = if self.0 & (1 << 22) != 0 { 512 } else { 128 };
        let b = units * unit;
        if b < 1024 { 1024 } else { b }
    }
    /// RDPQ mode supported (not used by this driver).
    pub const fn rdpq(self) -> bool {
        self.0 & (1 << 23) != 0
    }
    /// Bit 24: FW handles SYNCHRONIZE CACHE; on Aero after IOC INIT also: atomic descriptors.
    pub const fn bit24(self) -> bool {
        self.0 & (1 << 24) != 0
    }
    /// Bit 25: FW accepts 64-bit control-structure addresses.
    pub const fn ctrl64(self) -> bool {
        self.0 & (1 << 25) != 0
    }
    /// Bit 26: the firmware coalesces the interrupts of the reply queues IOC INIT's
    /// `replyqueue_mask` names (the condition of balanced mode, [`crate::layout`]).
    pub const fn intr_coalescing(self) -> bool {
        self.0 & (1 << 26) != 0
    }
}

/// Fault code and sub-code of a FAULT status word.
pub const fn fault_codes(sp0: u32) -> (u16, u8) {
    (((sp0 >> 16) & 0x0FFF) as u16, ((sp0 >> 8) & 0xFF) as u8)
}

/// Whether SP0 (read before bring-up, to choose the interrupt mode) says the firmware does MSI-X
/// (bit 26; Linux falls back to INTx without it). Only a settled READY or OPERATIONAL
/// word is trusted: during power-on or in FAULT the bit says nothing yet, so `None`.
pub fn msix_advertised(sp0: u32) -> Option<bool> {
    match FwStatus(sp0).state() {
        FwState::Ready | FwState::Operational => Some(sp0 & SP0_MSIX_CAPABLE != 0),
        _ => None,
    }
}

#[cfg(test)]
mod msix_tests {
    use super::*;

    #[test]
    fn msix_is_judged_only_from_settled_states() {
        assert_eq!(msix_advertised(0xB400_0100), Some(true));
        assert_eq!(msix_advertised(0xB000_0100), Some(false));
        assert_eq!(msix_advertised(0xC000_0100), Some(false));
        assert_eq!(msix_advertised(0x0000_0100), None);
        assert_eq!(msix_advertised(0xF000_0002), None);
    }
}
