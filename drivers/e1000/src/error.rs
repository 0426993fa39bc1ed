//! The driver's one error type.

use core::fmt;

/// Why the device could not be brought up or stopped being usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// CTRL.RST did not clear within the bound.
    ResetTimeout { ctrl: u32, waited_us: u32 },
    /// An EEPROM read through EERD did not finish.
    EepromTimeout { word: u8 },
    /// The MAC address is multicast or all zeros.
    BadMac([u8; 6]),
    /// A ring's queue-enable bit (RXDCTL/TXDCTL, 82576/I350) did not read back set.
    QueueEnableTimeout { ring: &'static str },
    /// A DMA allocation failed.
    Dma(devhal::DmaError),
    /// A head register names a descriptor outside the ring, or outside the part the device owns.
    HeadOutOfRange {
        ring: &'static str,
        head: u32,
        low: u16,
        high: u16,
    },
    /// A receive descriptor claims more bytes than its buffer holds.
    BadLength { index: u16, len: u16, max: usize },
    /// The device's registers read all ones: it is gone from the bus.
    DeviceGone,
    /// An earlier failure stopped the NIC.
    Stopped,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ResetTimeout { ctrl, waited_us } => write!(
                f,
                "device reset did not finish: CTRL reads {ctrl:#010x} (RST still set) after {waited_us} us"
            ),
            Self::EepromTimeout { word } => write!(f, "EEPROM read of word {word} did not finish"),
            Self::BadMac(m) => write!(f, "device MAC address {} is not a unicast address", net::MacAddress(*m)),
            Self::QueueEnableTimeout { ring } => write!(f, "the {ring} ring's enable bit did not stick"),
            Self::Dma(e) => write!(f, "{e}"),
            Self::HeadOutOfRange { ring, head, low, high } => write!(
                f,
                "{ring} head register reads {head}, outside the descriptors {low}..={high} the device owns"
            ),
            Self::BadLength { index, len, max } => write!(
                f,
                "receive descriptor {index} claims {len} bytes, more than its {max}-byte buffer"
            ),
            Self::DeviceGone => write!(f, "device registers read all ones (gone from the bus)"),
            Self::Stopped => write!(f, "the NIC was stopped by an earlier device failure"),
        }
    }
}

impl From<devhal::DmaError> for Error {
    fn from(e: devhal::DmaError) -> Self {
        Self::Dma(e)
    }
}
