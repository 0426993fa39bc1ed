//! The NIC contract: what a network driver gives the room.

use crate::Error;
use core::fmt;

/// The longest Ethernet frame the stack builds: 1500 bytes of payload and the 14-byte header
/// (no VLAN tag, no frame check sequence: NICs add and strip that).
pub const ETHERNET_MAX_FRAME: usize = 1514;

/// A 48-bit Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacAddress(pub [u8; 6]);

impl MacAddress {
    /// Whether it can be an interface's own address (not multicast, not all zeros).
    pub fn is_unicast(&self) -> bool {
        self.0[0] & 1 == 0 && self.0 != [0; 6]
    }
}

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// Whether the NIC's link carries frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    Up,
    Down,
    /// The NIC does not report it (taken as up).
    Unknown,
}

/// Where a PCI NIC sits (for `net.if=` and the console line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciLocation {
    pub segment: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for PciLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.segment, self.bus, self.device, self.function
        )
    }
}

/// A network interface card as the room drives it.
///
/// The driver owns its receive and transmit rings and their DMA memory; frames cross the
/// contract as byte slices, copied in and out of the driver's buffers. Nothing here blocks: the
/// room calls [`Nic::poll`] (or [`Nic::on_interrupt`] from the NIC's interrupt) to let the
/// driver reclaim sent frames and re-post receive buffers, and then takes what arrived with
/// [`Nic::receive`]. Every value the device wrote (ring indices, lengths, buffer ids) is the
/// driver's to validate: a device that breaks the protocol is an [`Error::Device`], and the
/// driver stops using it.
pub trait Nic: Send {
    /// The address frames are sent from.
    fn mac(&self) -> MacAddress;

    /// The link as the NIC last reported it.
    fn link(&self) -> LinkState;

    /// Longest frame it sends and receives, Ethernet header included (at least
    /// [`ETHERNET_MAX_FRAME`]).
    fn max_frame(&self) -> usize;

    /// Reclaims transmitted frames and re-posts receive buffers; returns how many ring entries
    /// it found finished.
    fn poll(&mut self) -> Result<usize, Error>;

    /// What the NIC's interrupt handler calls. The default is a poll: a driver whose device
    /// needs its interrupt acknowledged overrides it.
    fn on_interrupt(&mut self) -> Result<usize, Error> {
        self.poll()
    }

    /// Hands the oldest received frame to `frame` and gives its buffer back to the device;
    /// `Ok(false)` when nothing arrived.
    fn receive(&mut self, frame: &mut dyn FnMut(&[u8])) -> Result<bool, Error>;

    /// Whether [`Nic::transmit`] has a free slot now.
    fn can_transmit(&self) -> bool;

    /// Queues one frame (Ethernet header included) for sending.
    fn transmit(&mut self, frame: &[u8]) -> Result<(), Error>;
}
