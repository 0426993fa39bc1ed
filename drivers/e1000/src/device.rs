//! The controller: bring-up and frames through the two rings.

use crate::error::Error;
use crate::regs::{Family, ctrl, desc, eerd, rctl, reg, tctl};
use crate::ring::Ring;
use alloc::format;
use alloc::vec;
use core::sync::atomic::{Ordering, fence};
use devhal::{Delay, Dma, Mmio};
use net::{ETHERNET_MAX_FRAME, LinkState, MacAddress, Nic};

/// Descriptors per ring (a multiple of 8, as RDLEN/TDLEN require).
pub const RING_LEN: u16 = 256;
/// Bytes of each frame buffer: RCTL.BSIZE 2048 (SRRCTL 2 KiB on the 82576/I350).
pub const BUFFER_LEN: usize = 2048;
/// How long a reset may take to clear CTRL.RST (microseconds, polled every 10).
const RESET_TIMEOUT_US: u32 = 1_000_000;
/// How long to leave a resetting controller alone before the first read of CTRL (PCIe parts do
/// not answer reliably while their reset is under way).
const RESET_SETTLE_US: u32 = 1_000;
/// How long an EEPROM word read or a ring enable may take (microseconds, polled every 10).
const SHORT_TIMEOUT_US: u32 = 100_000;
/// Shortest frame worth handing on: an Ethernet header.
const ETHERNET_HEADER_LEN: usize = 14;

/// One Intel NIC, up and running.
pub struct E1000<M: Mmio> {
    mmio: M,
    family: Family,
    mac: MacAddress,
    rx: Ring,
    tx: Ring,
    /// The receive descriptor looked at next; the one before it is the driver's (RDT).
    rx_next: u16,
    /// The transmit descriptor filled next (TDT).
    tx_tail: u16,
    /// The oldest transmit descriptor not yet seen done.
    tx_clean: u16,
    /// Inside a frame that spans descriptors: dropping them up to the one with EOP.
    discarding: bool,
    /// The first protocol error; the device was disabled and reset then and every call fails.
    failed: Option<Error>,
    /// Received frames shorter than an Ethernet header (dropped).
    pub runts: u64,
    /// Received frames longer than the stack takes (dropped).
    pub oversize: u64,
    /// Received frames the device flagged with a CRC, symbol or sequence error (dropped).
    pub receive_errors: u64,
    /// Received frames that spanned several descriptors (dropped whole).
    pub fragmented: u64,
}

/// What a probe needs to name the NIC without bringing it up: its receiver and transmitter off
/// and interrupts masked (whatever firmware left running stops using memory), and its address.
/// No reset, no rings: [`E1000::new`] does those when the network is used.
pub fn identify<M: Mmio, W: Delay>(mmio: &M, family: Family, delay: &W) -> Result<MacAddress, Error> {
    stop_engines(mmio);
    read_mac(mmio, family, delay)
}

impl<M: Mmio> E1000<M> {
    /// Resets the controller and brings it up: interrupts masked, MAC address, link, both rings
    /// (every receive buffer but one given to the device), receiver and transmitter on.
    /// `delay` paces the bounded polls; `dma` gives ring and buffer memory, kept for the
    /// device's lifetime.
    pub fn new<D: Dma, W: Delay>(mmio: M, family: Family, dma: &D, delay: &W) -> Result<Self, Error> {
        reset(&mmio, delay)?;
        let mac = match read_mac(&mmio, family, delay) {
            Ok(m) => m,
            Err(e) => {
                quiesce(&mmio);
                return Err(e);
            }
        };
        for i in 0..reg::MTA_WORDS {
            mmio.write32(reg::MTA + 4 * i, 0);
        }
        let mut c = mmio.read32(reg::CTRL) | ctrl::SLU;
        if family == Family::E82540 {
            c |= ctrl::ASDE;
        }
        c &= !(ctrl::LRST | ctrl::PHY_RST | ctrl::ILOS);
        mmio.write32(reg::CTRL, c);
        let rings = Ring::new(dma, RING_LEN, BUFFER_LEN).and_then(|rx| Ok((rx, Ring::new(dma, RING_LEN, BUFFER_LEN)?)));
        let (rx, tx) = rings.map_err(Error::from)?;
        if let Err(e) = start_rings(&mmio, family, &rx, &tx, delay) {
            quiesce(&mmio);
            return Err(e);
        }
        Ok(Self {
            mmio,
            family,
            mac,
            rx,
            tx,
            rx_next: 0,
            tx_tail: 0,
            tx_clean: 0,
            discarding: false,
            failed: None,
            runts: 0,
            oversize: 0,
            receive_errors: 0,
            fragmented: 0,
        })
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// Ring lengths (receive, transmit).
    pub fn ring_lens(&self) -> (u16, u16) {
        (self.rx.len, self.tx.len)
    }

    /// The first failure, if the NIC stopped.
    pub fn failure(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    /// Records a protocol error, turns the receiver and transmitter off and resets the device:
    /// it gives up the rings and writes no more memory.
    fn stop(&mut self, e: Error) -> net::Error {
        let text = format!("e1000 ({}): {e}; device disabled and reset", self.family.name());
        quiesce(&self.mmio);
        self.failed.get_or_insert(e);
        net::Error::Device(text)
    }

    fn check(&self) -> Result<(), net::Error> {
        match &self.failed {
            Some(e) => Err(net::Error::Device(format!(
                "e1000 ({}): {}: {e}",
                self.family.name(),
                Error::Stopped
            ))),
            None => Ok(()),
        }
    }

    fn tx_in_flight(&self) -> u16 {
        self.tx.distance(self.tx_clean, self.tx_tail)
    }

    /// Takes back every transmit descriptor the device marked done, then checks that the head
    /// register has passed them and not the tail (read after the status bytes: the head only
    /// moves forward, so it covers every descriptor seen done).
    fn reclaim_transmitted(&mut self) -> Result<usize, Error> {
        let in_flight = self.tx_in_flight();
        let mut done = 0u16;
        while done < in_flight && self.tx.read_u8(self.tx_clean, desc::TX_STATUS) & desc::DD != 0 {
            self.tx_clean = self.tx.next(self.tx_clean);
            done += 1;
        }
        let head = self.mmio.read32(reg::TDH);
        let start = (self.tx_clean + self.tx.len - done) % self.tx.len;
        let ahead = u16::try_from(head)
            .ok()
            .filter(|h| *h < self.tx.len)
            .map(|h| self.tx.distance(start, h));
        if !ahead.is_some_and(|a| (done..=in_flight).contains(&a)) {
            return Err(Error::HeadOutOfRange {
                ring: "transmit",
                head,
                low: self.tx_clean,
                high: self.tx_tail,
            });
        }
        Ok(usize::from(done))
    }

    fn check_receive_head(&self) -> Result<(), Error> {
        let head = self.mmio.read32(reg::RDH);
        if head >= u32::from(self.rx.len) {
            return Err(Error::HeadOutOfRange {
                ring: "receive",
                head,
                low: 0,
                high: self.rx.len - 1,
            });
        }
        Ok(())
    }
}

impl<M: Mmio + Send> Nic for E1000<M> {
    fn mac(&self) -> MacAddress {
        self.mac
    }

    fn link(&self) -> LinkState {
        let s = self.mmio.read32(reg::STATUS);
        if s != u32::MAX && s & reg::STATUS_LU != 0 {
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
        if self.mmio.read32(reg::STATUS) == u32::MAX {
            return Err(self.stop(Error::DeviceGone));
        }
        self.check_receive_head().map_err(|e| self.stop(e))?;
        self.reclaim_transmitted().map_err(|e| self.stop(e))
    }

    fn receive(&mut self, frame: &mut dyn FnMut(&[u8])) -> Result<bool, net::Error> {
        self.check()?;
        // At most one pass over the ring per call: a device that keeps marking descriptors done
        // cannot hold the caller here; the next call goes on where this one stopped.
        for _ in 0..self.rx.len {
            let i = self.rx_next;
            let status = self.rx.read_u8(i, desc::RX_STATUS);
            if status & desc::DD == 0 {
                return Ok(false);
            }
            // Acquire: length and errors are read after the status that says they are written
            // (pairs with the device's descriptor write-back, status last).
            fence(Ordering::Acquire);
            let len = self.rx.read_u16(i, desc::LENGTH);
            let errors = self.rx.read_u8(i, desc::RX_ERRORS);
            if usize::from(len) > BUFFER_LEN {
                return Err(self.stop(Error::BadLength {
                    index: i,
                    len,
                    max: BUFFER_LEN,
                }));
            }
            let end_of_frame = status & desc::EOP != 0;
            let mut delivered = false;
            if self.discarding {
                self.discarding = !end_of_frame;
            } else if !end_of_frame {
                self.discarding = true;
                self.fragmented += 1;
            } else if errors & desc::RX_ERRORS_FATAL != 0 {
                self.receive_errors += 1;
            } else if usize::from(len) < ETHERNET_HEADER_LEN {
                self.runts += 1;
            } else if usize::from(len) > ETHERNET_MAX_FRAME {
                self.oversize += 1;
            } else {
                let mut bytes = vec![0u8; usize::from(len)];
                self.rx.read_buffer(i, BUFFER_LEN, &mut bytes);
                frame(&bytes);
                delivered = true;
            }
            self.rx.write_u8(i, desc::RX_ERRORS, 0);
            self.rx.write_u8(i, desc::RX_STATUS, 0);
            self.rx_next = self.rx.next(i);
            // Full fence: the cleared status reaches memory before the tail write gives the
            // descriptor back (a store and a later MMIO write the device acts on).
            fence(Ordering::SeqCst);
            self.mmio.write32(reg::RDT, u32::from(i));
            if delivered {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn can_transmit(&self) -> bool {
        self.failed.is_none() && self.tx_in_flight() < self.tx.len - 1
    }

    fn transmit(&mut self, frame: &[u8]) -> Result<(), net::Error> {
        self.check()?;
        if frame.len() > ETHERNET_MAX_FRAME {
            return Err(net::Error::FrameTooLong {
                len: frame.len(),
                max: ETHERNET_MAX_FRAME,
            });
        }
        if self.tx_in_flight() >= self.tx.len - 1 {
            self.reclaim_transmitted().map_err(|e| self.stop(e))?;
        }
        if self.tx_in_flight() >= self.tx.len - 1 {
            return Err(net::Error::TransmitFull);
        }
        let i = self.tx_tail;
        self.tx.write_buffer(i, BUFFER_LEN, frame);
        self.tx.write_u16(i, desc::LENGTH, frame.len() as u16);
        self.tx
            .write_u8(i, desc::TX_CMD, desc::CMD_EOP | desc::CMD_IFCS | desc::CMD_RS);
        self.tx.write_u8(i, desc::TX_STATUS, 0);
        self.tx_tail = self.tx.next(i);
        // Full fence: the buffer and descriptor reach memory before the tail write that hands
        // them to the device (pairs with the device's descriptor fetch after it sees TDT move).
        fence(Ordering::SeqCst);
        self.mmio.write32(reg::TDT, u32::from(self.tx_tail));
        Ok(())
    }
}

/// Masks every interrupt, resets the controller and waits (bounded) for CTRL.RST to clear.
fn reset<M: Mmio, W: Delay>(mmio: &M, delay: &W) -> Result<(), Error> {
    quiesce(mmio);
    delay.delay_us(RESET_SETTLE_US);
    let mut waited = RESET_SETTLE_US;
    loop {
        let c = mmio.read32(reg::CTRL);
        if c & ctrl::RST == 0 && c != u32::MAX {
            break;
        }
        if waited >= RESET_TIMEOUT_US {
            return Err(Error::ResetTimeout {
                ctrl: c,
                waited_us: waited,
            });
        }
        delay.delay_us(10);
        waited += 10;
    }
    // Reset leaves interrupts enabled on some parts: mask them all and clear what is pending.
    mmio.write32(reg::IMC, u32::MAX);
    let _ = mmio.read32(reg::ICR);
    Ok(())
}

/// Interrupts masked, receiver and transmitter off: the device's DMA engines stop.
fn stop_engines<M: Mmio>(mmio: &M) {
    mmio.write32(reg::IMC, u32::MAX);
    mmio.write32(reg::RCTL, 0);
    mmio.write32(reg::TCTL, 0);
}

/// The engines stopped and a reset asked for (not waited on): the device lets go of the rings.
fn quiesce<M: Mmio>(mmio: &M) {
    stop_engines(mmio);
    let c = mmio.read32(reg::CTRL);
    mmio.write32(reg::CTRL, c | ctrl::RST);
}

/// The address in receive-address register 0; on the 82540EM, the EEPROM's first three words
/// when RAL/RAH are empty. Written back with the address-valid bit so the receive filter
/// takes it.
fn read_mac<M: Mmio, W: Delay>(mmio: &M, family: Family, delay: &W) -> Result<MacAddress, Error> {
    let low = mmio.read32(reg::RAL0);
    let high = mmio.read32(reg::RAH0);
    let mut m = [0u8; 6];
    if low == 0 && high & 0xffff == 0 && family == Family::E82540 {
        for word in 0..3u8 {
            let w = read_eeprom(mmio, word, delay)?;
            m[2 * usize::from(word)..][..2].copy_from_slice(&w.to_le_bytes());
        }
    } else {
        m[..4].copy_from_slice(&low.to_le_bytes());
        m[4..].copy_from_slice(&(high as u16).to_le_bytes());
    }
    let mac = MacAddress(m);
    if !mac.is_unicast() {
        return Err(Error::BadMac(m));
    }
    mmio.write32(reg::RAL0, u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
    mmio.write32(reg::RAH0, u32::from(u16::from_le_bytes([m[4], m[5]])) | reg::RAH_AV);
    Ok(mac)
}

fn read_eeprom<M: Mmio, W: Delay>(mmio: &M, word: u8, delay: &W) -> Result<u16, Error> {
    mmio.write32(reg::EERD, eerd::START | (u32::from(word) << eerd::ADDR_SHIFT));
    let mut waited = 0;
    loop {
        let v = mmio.read32(reg::EERD);
        if v & eerd::DONE != 0 && v != u32::MAX {
            return Ok((v >> eerd::DATA_SHIFT) as u16);
        }
        if waited >= SHORT_TIMEOUT_US {
            return Err(Error::EepromTimeout { word });
        }
        delay.delay_us(10);
        waited += 10;
    }
}

/// Sets `bit` in the 82576/I350 queue register `at` and waits (bounded) for it to read back.
fn enable_queue<M: Mmio, W: Delay>(mmio: &M, at: u32, ring: &'static str, delay: &W) -> Result<(), Error> {
    mmio.write32(at, mmio.read32(at) | reg::QUEUE_ENABLE);
    let mut waited = 0;
    loop {
        let v = mmio.read32(at);
        if v & reg::QUEUE_ENABLE != 0 && v != u32::MAX {
            return Ok(());
        }
        if waited >= SHORT_TIMEOUT_US {
            return Err(Error::QueueEnableTimeout { ring });
        }
        delay.delay_us(10);
        waited += 10;
    }
}

/// Programs both rings and turns the receiver and transmitter on: receive with broadcasts,
/// 2048-byte buffers and the CRC stripped; transmit with short frames padded.
fn start_rings<M: Mmio, W: Delay>(mmio: &M, family: Family, rx: &Ring, tx: &Ring, delay: &W) -> Result<(), Error> {
    mmio.write32(reg::RDBAL, rx.phys() as u32);
    mmio.write32(reg::RDBAH, (rx.phys() >> 32) as u32);
    mmio.write32(reg::RDLEN, rx.byte_len());
    mmio.write32(reg::RDH, 0);
    mmio.write32(reg::RDT, 0);
    if family == Family::Igb {
        mmio.write32(reg::SRRCTL, reg::SRRCTL_BSIZE_2K | reg::SRRCTL_DROP_EN);
        enable_queue(mmio, reg::RXDCTL, "receive", delay)?;
    }
    mmio.write32(reg::RCTL, rctl::EN | rctl::BAM | rctl::SECRC);
    // Every descriptor but the last to the device: head == tail would mean none.
    mmio.write32(reg::RDT, u32::from(rx.len - 1));

    mmio.write32(reg::TDBAL, tx.phys() as u32);
    mmio.write32(reg::TDBAH, (tx.phys() >> 32) as u32);
    mmio.write32(reg::TDLEN, tx.byte_len());
    mmio.write32(reg::TDH, 0);
    mmio.write32(reg::TDT, 0);
    if family == Family::Igb {
        enable_queue(mmio, reg::TXDCTL, "transmit", delay)?;
    }
    mmio.write32(reg::TIPG, tctl::TIPG_COPPER);
    mmio.write32(
        reg::TCTL,
        tctl::EN | tctl::PSP | (tctl::CT_DEFAULT << tctl::CT_SHIFT) | (tctl::COLD_FULL_DUPLEX << tctl::COLD_SHIFT),
    );
    Ok(())
}
