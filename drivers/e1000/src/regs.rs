//! Register offsets and bits of the legacy-descriptor path (queue 0), from Intel's datasheets
//! for the 8254x, the 82574 and the 82576/I350.

/// What differs between the controllers this driver drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// 8254x (82540EM): the MAC address may have to be read from the EEPROM through EERD.
    E82540,
    /// 82574L: the 8254x layout on PCIe; the MAC address is loaded into RAL/RAH at reset.
    E82574,
    /// 82576 and I350: queue 0 at the legacy offsets, but each ring has to be enabled through
    /// RXDCTL/TXDCTL and the receive descriptor type and buffer size come from SRRCTL.
    Igb,
}

impl Family {
    /// The controller's name for console lines.
    pub fn name(self) -> &'static str {
        match self {
            Self::E82540 => "82540EM",
            Self::E82574 => "82574L",
            Self::Igb => "82576/I350",
        }
    }
}

/// Register offsets in BAR 0.
pub mod reg {
    pub const CTRL: u32 = 0x0000;
    pub const STATUS: u32 = 0x0008;
    pub const EERD: u32 = 0x0014;
    pub const ICR: u32 = 0x00c0;
    pub const IMS: u32 = 0x00d0;
    pub const IMC: u32 = 0x00d8;
    pub const RCTL: u32 = 0x0100;
    pub const TCTL: u32 = 0x0400;
    pub const TIPG: u32 = 0x0410;
    pub const RDBAL: u32 = 0x2800;
    pub const RDBAH: u32 = 0x2804;
    pub const RDLEN: u32 = 0x2808;
    /// 82576/I350 only: receive buffer size and descriptor type of queue 0.
    pub const SRRCTL: u32 = 0x280c;
    pub const RDH: u32 = 0x2810;
    pub const RDT: u32 = 0x2818;
    pub const RXDCTL: u32 = 0x2828;
    pub const TDBAL: u32 = 0x3800;
    pub const TDBAH: u32 = 0x3804;
    pub const TDLEN: u32 = 0x3808;
    pub const TDH: u32 = 0x3810;
    pub const TDT: u32 = 0x3818;
    pub const TXDCTL: u32 = 0x3828;
    /// Multicast table: 128 words.
    pub const MTA: u32 = 0x5200;
    pub const MTA_WORDS: u32 = 128;
    pub const RAL0: u32 = 0x5400;
    pub const RAH0: u32 = 0x5404;
    /// RAH: the address is valid (used by the receive filter).
    pub const RAH_AV: u32 = 1 << 31;
    /// STATUS: link up.
    pub const STATUS_LU: u32 = 1 << 1;
    /// RXDCTL/TXDCTL (82576/I350): the queue is enabled.
    pub const QUEUE_ENABLE: u32 = 1 << 25;
    /// SRRCTL (82576/I350): receive buffer size in KiB (bits 0-6), legacy descriptors (type 0).
    pub const SRRCTL_BSIZE_2K: u32 = 2;
    /// SRRCTL (82576/I350): drop frames when no descriptor is free rather than stall.
    pub const SRRCTL_DROP_EN: u32 = 1 << 31;
}

/// Device control bits.
pub mod ctrl {
    /// Link reset.
    pub const LRST: u32 = 1 << 3;
    /// Auto-speed detection (8254x).
    pub const ASDE: u32 = 1 << 5;
    /// Set link up.
    pub const SLU: u32 = 1 << 6;
    /// Invert loss-of-signal.
    pub const ILOS: u32 = 1 << 7;
    /// Device reset (self-clearing).
    pub const RST: u32 = 1 << 26;
    /// PHY reset.
    pub const PHY_RST: u32 = 1 << 31;
}

/// EEPROM read register of the 8254x: start, done, word address, data.
pub mod eerd {
    pub const START: u32 = 1;
    pub const DONE: u32 = 1 << 4;
    pub const ADDR_SHIFT: u32 = 8;
    pub const DATA_SHIFT: u32 = 16;
}

/// Receive control bits.
pub mod rctl {
    pub const EN: u32 = 1 << 1;
    /// Store bad packets.
    pub const SBP: u32 = 1 << 2;
    /// Unicast and multicast promiscuous.
    pub const UPE: u32 = 1 << 3;
    pub const MPE: u32 = 1 << 4;
    /// Long packets (over 1522 bytes).
    pub const LPE: u32 = 1 << 5;
    /// Broadcast accept.
    pub const BAM: u32 = 1 << 15;
    /// Buffer size field (bits 16-17; 0 with BSEX clear is 2048 bytes).
    pub const BSIZE_MASK: u32 = 3 << 16;
    pub const BSEX: u32 = 1 << 25;
    /// Strip the Ethernet CRC.
    pub const SECRC: u32 = 1 << 26;
}

/// Transmit control bits.
pub mod tctl {
    pub const EN: u32 = 1 << 1;
    /// Pad short packets.
    pub const PSP: u32 = 1 << 3;
    /// Collision threshold (bits 4-11).
    pub const CT_SHIFT: u32 = 4;
    /// Collision distance (bits 12-21).
    pub const COLD_SHIFT: u32 = 12;
    /// The values Intel recommends: 15 retries, a full-duplex collision distance of 64.
    pub const CT_DEFAULT: u32 = 0x0f;
    pub const COLD_FULL_DUPLEX: u32 = 0x40;
    /// Inter-packet gap for copper (IPGT 10, IPGR1 8, IPGR2 6).
    pub const TIPG_COPPER: u32 = 10 | (8 << 10) | (6 << 20);
}

/// The legacy descriptors (16 bytes each way).
pub mod desc {
    pub const LEN: usize = 16;
    /// Both: buffer address at 0, length (16 bits) at 8.
    pub const ADDR: usize = 0;
    pub const LENGTH: usize = 8;
    /// Receive: status at 12, errors at 13.
    pub const RX_STATUS: usize = 12;
    pub const RX_ERRORS: usize = 13;
    /// Transmit: command at 11, status at 12.
    pub const TX_CMD: usize = 11;
    pub const TX_STATUS: usize = 12;
    /// Status: descriptor done.
    pub const DD: u8 = 1;
    /// Receive status: end of packet.
    pub const EOP: u8 = 1 << 1;
    /// Transmit command: end of packet, insert FCS, report status.
    pub const CMD_EOP: u8 = 1;
    pub const CMD_IFCS: u8 = 1 << 1;
    pub const CMD_RS: u8 = 1 << 3;
    /// Receive errors that make a frame worthless: CRC/alignment, symbol, sequence, carrier
    /// extension, RX data (the checksum-error bits 5 and 6 are left to the stack).
    pub const RX_ERRORS_FATAL: u8 = 0b1001_0111;
}
