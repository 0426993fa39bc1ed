//! The driver's one error type.

use core::fmt;

/// Why the device could not be brought up or stopped being usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The device did not read back 0 after a reset.
    ResetTimeout { status: u8 },
    /// The device lacks a feature the driver needs.
    MissingFeature { name: &'static str, offered: u64 },
    /// The device refused the features the driver accepted (FEATURES_OK did not stick).
    FeaturesRefused { accepted: u64 },
    /// The device has no such queue, or offers a size the driver cannot use.
    QueueUnavailable { queue: u16, size: u16 },
    /// The queue's notification address lies outside the notification structure.
    NotifyOutOfRange { queue: u16, offset: u64, region_len: u32 },
    /// A DMA allocation failed.
    Dma(devhal::DmaError),
    /// The device set DEVICE_NEEDS_RESET or FAILED.
    DeviceFailed { status: u8 },
    /// The used ring's index moved by more than the queue holds.
    UsedIndexJumped { queue: u16, last: u16, now: u16, held: u16 },
    /// A used entry names a descriptor that does not exist or that the device does not hold.
    UsedBadId { queue: u16, id: u32 },
    /// A used receive entry claims more bytes than the buffer has, or fewer than a header.
    UsedBadLength { queue: u16, id: u32, len: u32, max: u32 },
    /// The device's MAC address is multicast or all zeros.
    BadMac([u8; 6]),
    /// The device configuration did not settle (config generation kept changing).
    ConfigUnstable,
    /// An earlier failure stopped the NIC.
    Stopped,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ResetTimeout { status } => write!(f, "device status reads {status:#x}, not 0, after reset"),
            Self::MissingFeature { name, offered } => {
                write!(f, "device does not offer {name} (features {offered:#x})")
            }
            Self::FeaturesRefused { accepted } => {
                write!(f, "device refused the features {accepted:#x} (FEATURES_OK cleared)")
            }
            Self::QueueUnavailable { queue, size } => write!(f, "queue {queue} unusable (size {size})"),
            Self::NotifyOutOfRange {
                queue,
                offset,
                region_len,
            } => write!(
                f,
                "queue {queue}'s notification offset {offset:#x} is outside the {region_len}-byte notification structure"
            ),
            Self::Dma(e) => write!(f, "{e}"),
            Self::DeviceFailed { status } => write!(f, "device reports failure (status {status:#x})"),
            Self::UsedIndexJumped { queue, last, now, held } => write!(
                f,
                "queue {queue}: used index went from {last} to {now}, past the {held} buffer(s) the device held"
            ),
            Self::UsedBadId { queue, id } => {
                write!(
                    f,
                    "queue {queue}: used entry names descriptor {id}, which the device does not hold"
                )
            }
            Self::UsedBadLength { queue, id, len, max } => write!(
                f,
                "queue {queue}: used entry for descriptor {id} claims {len} bytes (a header to {max} bytes expected)"
            ),
            Self::BadMac(m) => write!(f, "device MAC address {} is not a unicast address", net::MacAddress(*m)),
            Self::ConfigUnstable => write!(f, "device configuration kept changing while read"),
            Self::Stopped => write!(f, "the NIC was stopped by an earlier device failure"),
        }
    }
}

impl From<devhal::DmaError> for Error {
    fn from(e: devhal::DmaError) -> Self {
        Self::Dma(e)
    }
}
