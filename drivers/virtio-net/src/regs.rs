//! The device's register structures, as the kernel finds them through the PCI capabilities.

/// One of the structures a virtio-pci capability points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// `virtio_pci_common_cfg`.
    Common,
    /// Queue notifications.
    Notify,
    /// ISR status (read to acknowledge an INTx interrupt).
    Isr,
    /// The network device's configuration (MAC address, link status).
    Device,
}

/// Access to the device's register structures with the field's own width (the specification
/// requires 8-bit fields to be accessed with 8-bit accesses, and so on).
///
/// An implementation bounds-checks `offset` against the structure's length; an access outside
/// it reads all-ones and writes nothing.
pub trait VirtioRegs: Send {
    fn read8(&self, region: Region, offset: u32) -> u8;
    fn read16(&self, region: Region, offset: u32) -> u16;
    fn read32(&self, region: Region, offset: u32) -> u32;
    fn write8(&self, region: Region, offset: u32, value: u8);
    fn write16(&self, region: Region, offset: u32, value: u16);
    fn write32(&self, region: Region, offset: u32, value: u32);
    /// Bytes of the structure.
    fn region_len(&self, region: Region) -> u32;
    /// `notify_off_multiplier` of the notification capability.
    fn notify_multiplier(&self) -> u32;
}

/// Offsets in `virtio_pci_common_cfg`.
pub mod common {
    pub const DEVICE_FEATURE_SELECT: u32 = 0x00;
    pub const DEVICE_FEATURE: u32 = 0x04;
    pub const DRIVER_FEATURE_SELECT: u32 = 0x08;
    pub const DRIVER_FEATURE: u32 = 0x0c;
    pub const CONFIG_MSIX_VECTOR: u32 = 0x10;
    pub const NUM_QUEUES: u32 = 0x12;
    pub const DEVICE_STATUS: u32 = 0x14;
    pub const CONFIG_GENERATION: u32 = 0x15;
    pub const QUEUE_SELECT: u32 = 0x16;
    pub const QUEUE_SIZE: u32 = 0x18;
    pub const QUEUE_MSIX_VECTOR: u32 = 0x1a;
    pub const QUEUE_ENABLE: u32 = 0x1c;
    pub const QUEUE_NOTIFY_OFF: u32 = 0x1e;
    pub const QUEUE_DESC: u32 = 0x20;
    pub const QUEUE_DRIVER: u32 = 0x28;
    pub const QUEUE_DEVICE: u32 = 0x30;
    /// Length of the structure up to here.
    pub const LEN: u32 = 0x38;
    /// "No MSI-X vector".
    pub const NO_VECTOR: u16 = 0xffff;
}

/// Bits of `device_status`.
pub mod status {
    pub const ACKNOWLEDGE: u8 = 1;
    pub const DRIVER: u8 = 2;
    pub const DRIVER_OK: u8 = 4;
    pub const FEATURES_OK: u8 = 8;
    pub const DEVICE_NEEDS_RESET: u8 = 0x40;
    pub const FAILED: u8 = 0x80;
}

/// Feature bits the driver knows.
pub mod feature {
    /// The device has a MAC address in its configuration.
    pub const NET_MAC: u64 = 1 << 5;
    /// The device reports link status in its configuration.
    pub const NET_STATUS: u64 = 1 << 16;
    /// Virtio 1.0 or later (the modern interface).
    pub const VERSION_1: u64 = 1 << 32;
}

/// Offsets in the network device's configuration.
pub mod netcfg {
    pub const MAC: u32 = 0;
    pub const STATUS: u32 = 6;
    pub const LINK_UP: u16 = 1;
}
