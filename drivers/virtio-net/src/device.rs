//! The network device: bring-up and frames through the two queues.

use crate::error::Error;
use crate::queue::SplitQueue;
use crate::regs::{Region, VirtioRegs, common, feature, netcfg, status};
use alloc::format;
use alloc::vec;
use devhal::{Delay, Dma};
use net::{ETHERNET_MAX_FRAME, LinkState, MacAddress, Nic};

/// Bytes of `virtio_net_hdr` with VERSION_1 (`num_buffers` included).
pub const NET_HEADER_LEN: usize = 12;
/// Largest queue the driver sets up.
pub const QUEUE_SIZE_MAX: u16 = 256;
/// Features the driver accepts when offered (VERSION_1 and MAC are required).
pub const FEATURES_WANTED: u64 = feature::VERSION_1 | feature::NET_MAC | feature::NET_STATUS;
/// Bytes of each frame buffer: the header and a full frame, rounded up.
const BUFFER_LEN: usize = 2048;
const RECEIVE_QUEUE: u16 = 0;
const TRANSMIT_QUEUE: u16 = 1;
/// How long a reset may take to read back 0 (microseconds, polled every 10).
const RESET_TIMEOUT_US: u32 = 1_000_000;

/// One virtio network device, up and running.
pub struct VirtioNet<R: VirtioRegs> {
    regs: R,
    features: u64,
    mac: MacAddress,
    rx: SplitQueue,
    tx: SplitQueue,
    /// The first protocol error; the device was reset then and every call fails.
    failed: Option<Error>,
    /// Received frames too short to hold a header and an Ethernet header (dropped).
    pub runts: u64,
}

impl<R: VirtioRegs> VirtioNet<R> {
    /// Resets the device and brings it up: features, MAC address, both queues (every receive
    /// buffer posted), DRIVER_OK. `delay` paces the reset's poll; `dma` gives ring and buffer
    /// memory, kept for the device's lifetime.
    pub fn new<D: Dma, W: Delay>(regs: R, dma: &D, delay: &W) -> Result<Self, Error> {
        reset(&regs, delay)?;
        let mut s = status::ACKNOWLEDGE;
        regs.write8(Region::Common, common::DEVICE_STATUS, s);
        s |= status::DRIVER;
        regs.write8(Region::Common, common::DEVICE_STATUS, s);
        let offered = read_features(&regs);
        for (bit, name) in [(feature::VERSION_1, "VERSION_1"), (feature::NET_MAC, "MAC")] {
            if offered & bit == 0 {
                fail(&regs);
                return Err(Error::MissingFeature { name, offered });
            }
        }
        let features = offered & FEATURES_WANTED;
        for half in 0..2u32 {
            regs.write32(Region::Common, common::DRIVER_FEATURE_SELECT, half);
            regs.write32(Region::Common, common::DRIVER_FEATURE, (features >> (32 * half)) as u32);
        }
        s |= status::FEATURES_OK;
        regs.write8(Region::Common, common::DEVICE_STATUS, s);
        if regs.read8(Region::Common, common::DEVICE_STATUS) & status::FEATURES_OK == 0 {
            fail(&regs);
            return Err(Error::FeaturesRefused { accepted: features });
        }
        regs.write16(Region::Common, common::CONFIG_MSIX_VECTOR, common::NO_VECTOR);
        let mac = match read_mac(&regs) {
            Ok(m) => m,
            Err(e) => {
                fail(&regs);
                return Err(e);
            }
        };
        let queues = SplitQueue::new(&regs, dma, RECEIVE_QUEUE, QUEUE_SIZE_MAX, BUFFER_LEN).and_then(|rx| {
            Ok((
                rx,
                SplitQueue::new(&regs, dma, TRANSMIT_QUEUE, QUEUE_SIZE_MAX, BUFFER_LEN)?,
            ))
        });
        let (mut rx, tx) = match queues {
            Ok(q) => q,
            Err(e) => {
                fail(&regs);
                return Err(e);
            }
        };
        let ids: alloc::vec::Vec<u16> = rx.free_ids().collect();
        for id in ids {
            rx.post(id, BUFFER_LEN, true);
        }
        s |= status::DRIVER_OK;
        regs.write8(Region::Common, common::DEVICE_STATUS, s);
        rx.notify(&regs);
        let device_status = regs.read8(Region::Common, common::DEVICE_STATUS);
        if device_status & (status::DEVICE_NEEDS_RESET | status::FAILED) != 0 {
            fail(&regs);
            return Err(Error::DeviceFailed { status: device_status });
        }
        Ok(Self {
            regs,
            features,
            mac,
            rx,
            tx,
            failed: None,
            runts: 0,
        })
    }

    /// The features in use.
    pub fn features(&self) -> u64 {
        self.features
    }

    /// Queue sizes (receive, transmit).
    pub fn queue_sizes(&self) -> (u16, u16) {
        (self.rx.size, self.tx.size)
    }

    /// The first failure, if the NIC stopped.
    pub fn failure(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    /// Records a protocol error and resets the device: it gives back every buffer and writes
    /// no more memory.
    fn stop(&mut self, e: Error) -> net::Error {
        let text = format!("virtio-net: {e}; device reset and stopped");
        self.regs.write8(Region::Common, common::DEVICE_STATUS, 0);
        self.failed.get_or_insert(e);
        net::Error::Device(text)
    }

    fn check(&self) -> Result<(), net::Error> {
        match &self.failed {
            Some(e) => Err(net::Error::Device(format!("virtio-net: {}: {e}", Error::Stopped))),
            None => Ok(()),
        }
    }

    fn reclaim_transmitted(&mut self) -> Result<usize, Error> {
        let mut n = 0;
        while self.tx.take_used()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

impl<R: VirtioRegs> Nic for VirtioNet<R> {
    fn mac(&self) -> MacAddress {
        self.mac
    }

    fn link(&self) -> LinkState {
        if self.features & feature::NET_STATUS == 0 {
            return LinkState::Unknown;
        }
        if self.regs.read16(Region::Device, netcfg::STATUS) & netcfg::LINK_UP != 0 {
            LinkState::Up
        } else {
            LinkState::Down
        }
    }

    fn max_frame(&self) -> usize {
        ETHERNET_MAX_FRAME
    }

    fn poll(&mut self) -> Result<usize, net::Error> {
        self.check()?;
        let s = self.regs.read8(Region::Common, common::DEVICE_STATUS);
        if s & (status::DEVICE_NEEDS_RESET | status::FAILED) != 0 {
            return Err(self.stop(Error::DeviceFailed { status: s }));
        }
        self.reclaim_transmitted().map_err(|e| self.stop(e))
    }

    fn on_interrupt(&mut self) -> Result<usize, net::Error> {
        // Reading the ISR status acknowledges an INTx interrupt.
        let _ = self.regs.read8(Region::Isr, 0);
        self.poll()
    }

    fn receive(&mut self, frame: &mut dyn FnMut(&[u8])) -> Result<bool, net::Error> {
        self.check()?;
        loop {
            let (id, len) = match self.rx.take_used() {
                Ok(Some(entry)) => entry,
                Ok(None) => return Ok(false),
                Err(e) => return Err(self.stop(e)),
            };
            let max = (NET_HEADER_LEN + ETHERNET_MAX_FRAME) as u32;
            if len > max || len as usize > self.rx.buffer_len {
                return Err(self.stop(Error::UsedBadLength {
                    queue: RECEIVE_QUEUE,
                    id: u32::from(id),
                    len,
                    max,
                }));
            }
            let len = len as usize;
            let got = if len < NET_HEADER_LEN + 14 {
                self.runts += 1;
                false
            } else {
                let mut bytes = vec![0u8; len - NET_HEADER_LEN];
                self.rx.read_buffer(id, NET_HEADER_LEN, &mut bytes);
                frame(&bytes);
                true
            };
            self.rx.post(id, BUFFER_LEN, true);
            self.rx.notify(&self.regs);
            if got {
                return Ok(true);
            }
        }
    }

    fn can_transmit(&self) -> bool {
        self.failed.is_none() && self.tx.free_ids().next().is_some()
    }

    fn transmit(&mut self, frame: &[u8]) -> Result<(), net::Error> {
        self.check()?;
        if frame.len() > ETHERNET_MAX_FRAME {
            return Err(net::Error::FrameTooLong {
                len: frame.len(),
                max: ETHERNET_MAX_FRAME,
            });
        }
        if self.tx.free_ids().next().is_none() {
            self.reclaim_transmitted().map_err(|e| self.stop(e))?;
        }
        let Some(id) = self.tx.free_ids().next() else {
            return Err(net::Error::TransmitFull);
        };
        // An all-zero header: no checksum offload, no segmentation.
        self.tx.write_buffer(id, 0, &[0u8; NET_HEADER_LEN]);
        self.tx.write_buffer(id, NET_HEADER_LEN, frame);
        self.tx.post(id, NET_HEADER_LEN + frame.len(), false);
        self.tx.notify(&self.regs);
        Ok(())
    }
}

fn reset<R: VirtioRegs, W: Delay>(regs: &R, delay: &W) -> Result<(), Error> {
    regs.write8(Region::Common, common::DEVICE_STATUS, 0);
    let mut waited = 0;
    loop {
        let s = regs.read8(Region::Common, common::DEVICE_STATUS);
        if s == 0 {
            return Ok(());
        }
        if waited >= RESET_TIMEOUT_US {
            return Err(Error::ResetTimeout { status: s });
        }
        delay.delay_us(10);
        waited += 10;
    }
}

/// Tells the device the driver gave up on it.
fn fail<R: VirtioRegs>(regs: &R) {
    let s = regs.read8(Region::Common, common::DEVICE_STATUS);
    regs.write8(Region::Common, common::DEVICE_STATUS, s | status::FAILED);
}

fn read_features<R: VirtioRegs>(regs: &R) -> u64 {
    let mut features = 0;
    for half in 0..2u32 {
        regs.write32(Region::Common, common::DEVICE_FEATURE_SELECT, half);
        features |= u64::from(regs.read32(Region::Common, common::DEVICE_FEATURE)) << (32 * half);
    }
    features
}

/// The MAC address, read until the configuration generation is the same before and after.
fn read_mac<R: VirtioRegs>(regs: &R) -> Result<MacAddress, Error> {
    for _ in 0..16 {
        let before = regs.read8(Region::Common, common::CONFIG_GENERATION);
        let mut mac = [0u8; 6];
        for (i, b) in mac.iter_mut().enumerate() {
            *b = regs.read8(Region::Device, netcfg::MAC + i as u32);
        }
        if regs.read8(Region::Common, common::CONFIG_GENERATION) == before {
            let mac = MacAddress(mac);
            return if mac.is_unicast() {
                Ok(mac)
            } else {
                Err(Error::BadMac(mac.0))
            };
        }
    }
    Err(Error::ConfigUnstable)
}
