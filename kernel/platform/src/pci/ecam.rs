//! Configuration address computation: ECAM (memory-mapped) and legacy 0xCF8.

use alloc::vec::Vec;
use core::ops::RangeInclusive;

use pci_types::{ConfigRegionAccess, PciAddress};

use crate::acpi::EcamWindow;
use crate::error::{Error, Result};
use crate::mmio::Mmio32;

/// ECAM configuration space per function.
const ECAM_FUNCTION_LEN: u16 = 4096;

/// Byte offset of `address`/`offset` from the window's [`EcamWindow::region_base`]:
/// `(bus - bus_start) << 20 | device << 15 | function << 12 | offset`.
pub fn ecam_offset(window: &EcamWindow, address: PciAddress, offset: u16) -> Result<usize> {
    if address.segment() != window.segment {
        return Err(Error::EcamSegment {
            segment: address.segment(),
            window: window.segment,
        });
    }
    let bus = address.bus();
    if !(window.bus_start..=window.bus_end).contains(&bus) {
        return Err(Error::EcamBus {
            bus,
            start: window.bus_start,
            end: window.bus_end,
        });
    }
    if offset >= ECAM_FUNCTION_LEN || !offset.is_multiple_of(4) {
        return Err(Error::ConfigOffset {
            offset,
            limit: ECAM_FUNCTION_LEN,
        });
    }
    Ok((usize::from(bus - window.bus_start) << 20)
        | (usize::from(address.device()) << 15)
        | (usize::from(address.function()) << 12)
        | usize::from(offset))
}

/// The dword written to port 0xCF8 for configuration mechanism #1:
/// enable bit, bus, device, function, register (offset below 256, aligned).
pub fn legacy_config_address(address: PciAddress, offset: u16) -> Result<u32> {
    if address.segment() != 0 {
        return Err(Error::ConfigSegment { address });
    }
    if offset >= 256 || !offset.is_multiple_of(4) {
        return Err(Error::ConfigOffset { offset, limit: 256 });
    }
    Ok(0x8000_0000
        | (u32::from(address.bus()) << 16)
        | (u32::from(address.device()) << 11)
        | (u32::from(address.function()) << 8)
        | u32::from(offset))
}

/// `ConfigRegionAccess` over a mapped ECAM window. Accesses outside the
/// window (other segment, bus out of range, bad offset) read all-ones, as
/// an absent function does, and writes to them are dropped.
#[derive(Debug)]
pub struct EcamAccess<M: Mmio32> {
    mmio: M,
    window: EcamWindow,
}

impl<M: Mmio32> EcamAccess<M> {
    /// `mmio` must map the window from [`EcamWindow::region_base`] for
    /// [`EcamWindow::region_len`] bytes; a shorter mapping is an error.
    pub fn new(mmio: M, window: EcamWindow) -> Result<EcamAccess<M>> {
        let needed = window.region_len();
        if u64::try_from(mmio.region_len()).unwrap_or(u64::MAX) < needed {
            return Err(Error::MmioRange {
                offset: 0,
                // At most 256 buses of 1 MiB.
                width: usize::try_from(needed).unwrap_or(usize::MAX),
                region_len: mmio.region_len(),
            });
        }
        Ok(EcamAccess { mmio, window })
    }

    /// The window.
    pub fn window(&self) -> &EcamWindow {
        &self.window
    }
}

impl<M: Mmio32> ConfigRegionAccess for EcamAccess<M> {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        ecam_offset(&self.window, address, offset)
            .and_then(|byte_offset| self.mmio.read32(byte_offset))
            .unwrap_or(u32::MAX)
    }

    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        if let Ok(byte_offset) = ecam_offset(&self.window, address, offset) {
            let _ = self.mmio.write32(byte_offset, value);
        }
    }
}

/// Every mapped ECAM window of the machine (every segment, every MCFG entry)
/// as one `ConfigRegionAccess`: an access goes to the first window that
/// decodes its segment and bus; anything else reads all-ones (an absent
/// function) and writes to it are dropped.
#[derive(Debug)]
pub struct EcamWindows<M: Mmio32> {
    windows: Vec<EcamAccess<M>>,
}

impl<M: Mmio32> EcamWindows<M> {
    /// The windows in MCFG order (the first one wins where two overlap).
    pub fn new(windows: Vec<EcamAccess<M>>) -> EcamWindows<M> {
        EcamWindows { windows }
    }

    /// No window at all.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// The windows.
    pub fn windows(&self) -> impl Iterator<Item = &EcamWindow> {
        self.windows.iter().map(EcamAccess::window)
    }

    /// What to scan: per segment (in increasing order), the bus range from its
    /// lowest window's first bus to its highest window's last bus (buses in a
    /// gap between windows read as absent).
    pub fn segments(&self) -> Vec<(u16, RangeInclusive<u8>)> {
        let mut segments: Vec<(u16, RangeInclusive<u8>)> = Vec::new();
        for window in self.windows() {
            match segments.iter_mut().find(|(segment, _)| *segment == window.segment) {
                Some((_, buses)) => {
                    *buses = (*buses.start()).min(window.bus_start)..=(*buses.end()).max(window.bus_end)
                }
                None => segments.push((window.segment, window.bus_start..=window.bus_end)),
            }
        }
        segments.sort_by_key(|(segment, _)| *segment);
        segments
    }

    fn window_for(&self, address: PciAddress) -> Option<&EcamAccess<M>> {
        self.windows.iter().find(|access| {
            let window = access.window();
            window.segment == address.segment() && (window.bus_start..=window.bus_end).contains(&address.bus())
        })
    }
}

impl<M: Mmio32> ConfigRegionAccess for EcamWindows<M> {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        // SAFETY: forwarded contract.
        self.window_for(address)
            .map_or(u32::MAX, |access| unsafe { access.read(address, offset) })
    }

    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        if let Some(access) = self.window_for(address) {
            // SAFETY: forwarded contract.
            unsafe { access.write(address, offset, value) }
        }
    }
}
