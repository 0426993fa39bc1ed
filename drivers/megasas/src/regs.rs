//! Register offsets, doorbell bits and the firmware status word (QEMU 7.2's `hw/scsi/mfi.h`).

use core::fmt;

/// Outbound message 0: firmware status word (same value as [`OSP0`]).
pub const OMSG0: u32 = 0x18;
/// Inbound doorbell: firmware control bits ([`IDB_ABORT`] ...).
pub const IDB: u32 = 0x20;
/// Outbound interrupt status (INTx only; reads 0 under MSI/MSI-X).
pub const OSTS: u32 = 0x30;
/// Outbound interrupt mask. All-ones masks **and soft-resets the firmware on QEMU**.
pub const OMSK: u32 = 0x34;
/// Inbound queue port: posts a frame whose address fits in 32 bits.
pub const IQP: u32 = 0x40;
/// Outbound doorbell clear: acknowledges (and lowers) the INTx line.
pub const ODCR0: u32 = 0xA0;
/// Outbound scratch pad 0: firmware status word.
pub const OSP0: u32 = 0xB0;
/// Inbound low queue port: posts a frame with the high word latched by [`IQPH`].
pub const IQPL: u32 = 0xC0;
/// Inbound high queue port: latches the high 32 bits for the next [`IQPL`] write.
pub const IQPH: u32 = 0xC4;
/// Host diagnostic register (adapter reset).
pub const DIAG: u32 = 0xF8;
/// Write-sequence register that unlocks [`DIAG`].
pub const SEQ: u32 = 0xFC;

/// Doorbell: abort every outstanding command.
pub const IDB_ABORT: u32 = 0x01;
/// Doorbell: move to READY.
pub const IDB_READY: u32 = 0x02;
/// Doorbell: MFI mode (ignored by QEMU).
pub const IDB_MFIMODE: u32 = 0x04;
/// Doorbell: clear the WAIT_HANDSHAKE condition.
pub const IDB_CLEAR_HANDSHAKE: u32 = 0x08;
/// Doorbell: acknowledge BOOT_MSG_PENDING.
pub const IDB_HOTPLUG: u32 = 0x10;
/// Doorbell: stop the adapter (QEMU: state becomes FAULT).
pub const IDB_STOP_ADP: u32 = 0x20;
/// What Linux writes to leave OPERATIONAL: abort, ready, MFI mode.
pub const IDB_RESET_FLAGS: u32 = IDB_ABORT | IDB_READY | IDB_MFIMODE;

/// DIAG: the write-enable state reached after [`SEQ_UNLOCK`].
pub const DIAG_WRITE_ENABLE: u32 = 0x80;
/// DIAG: reset the adapter (only while write-enabled).
pub const DIAG_RESET_ADAPTER: u32 = 0x04;
/// Magic values written to [`SEQ`], in order, to write-enable [`DIAG`].
pub const SEQ_UNLOCK: [u32; 6] = [0x0, 0x4, 0xB, 0x2, 0x7, 0xD];

/// Firmware state, the top nibble of the status word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwState {
    /// 0x0
    Undefined,
    /// 0x1
    BbInit,
    /// 0x4
    FwInit,
    /// 0x6: needs [`IDB_CLEAR_HANDSHAKE`].
    WaitHandshake,
    /// 0x7
    FwInit2,
    /// 0x8
    DeviceScan,
    /// 0x9: needs [`IDB_HOTPLUG`].
    BootMsgPending,
    /// 0xA
    FlushCache,
    /// 0xB: accepts the INIT frame.
    Ready,
    /// 0xC: INIT done, reply queue live.
    Operational,
    /// 0xF
    Fault,
    /// Any other nibble.
    Other(u8),
}

impl FwState {
    /// Decodes the state nibble (bits 31:28 of the status word).
    pub const fn from_nibble(n: u8) -> Self {
        match n & 0xF {
            0x0 => Self::Undefined,
            0x1 => Self::BbInit,
            0x4 => Self::FwInit,
            0x6 => Self::WaitHandshake,
            0x7 => Self::FwInit2,
            0x8 => Self::DeviceScan,
            0x9 => Self::BootMsgPending,
            0xA => Self::FlushCache,
            0xB => Self::Ready,
            0xC => Self::Operational,
            0xF => Self::Fault,
            other => Self::Other(other),
        }
    }

    /// The state nibble.
    pub const fn nibble(self) -> u8 {
        match self {
            Self::Undefined => 0x0,
            Self::BbInit => 0x1,
            Self::FwInit => 0x4,
            Self::WaitHandshake => 0x6,
            Self::FwInit2 => 0x7,
            Self::DeviceScan => 0x8,
            Self::BootMsgPending => 0x9,
            Self::FlushCache => 0xA,
            Self::Ready => 0xB,
            Self::Operational => 0xC,
            Self::Fault => 0xF,
            Self::Other(n) => n & 0xF,
        }
    }
}

impl fmt::Display for FwState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Undefined => "UNDEFINED",
            Self::BbInit => "BB_INIT",
            Self::FwInit => "FW_INIT",
            Self::WaitHandshake => "WAIT_HANDSHAKE",
            Self::FwInit2 => "FW_INIT_2",
            Self::DeviceScan => "DEVICE_SCAN",
            Self::BootMsgPending => "BOOT_MSG_PENDING",
            Self::FlushCache => "FLUSH_CACHE",
            Self::Ready => "READY",
            Self::Operational => "OPERATIONAL",
            Self::Fault => "FAULT",
            Self::Other(_) => "UNKNOWN",
        };
        write!(f, "{name} (0x{:X})", self.nibble())
    }
}

/// The firmware status word read from [`OSP0`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwStatus(pub u32);

impl FwStatus {
    /// Firmware state (bits 31:28).
    pub const fn state(self) -> FwState {
        FwState::from_nibble((self.0 >> 28) as u8)
    }
    /// Maximum number of commands the firmware accepts (bits 15:0), `fw_cmds`.
    pub const fn max_cmds(self) -> u16 {
        (self.0 & 0xFFFF) as u16
    }
    /// Maximum scatter-gather elements per command (bits 23:16).
    pub const fn max_sge(self) -> u8 {
        ((self.0 >> 16) & 0xFF) as u8
    }
    /// Bit 26: MSI-X supported.
    pub const fn msix_capable(self) -> bool {
        self.0 & (1 << 26) != 0
    }
}

impl fmt::Display for FwStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "0x{:08X}: state {}, max_cmds {}, max_sge {}",
            self.0,
            self.state(),
            self.max_cmds(),
            self.max_sge()
        )
    }
}
