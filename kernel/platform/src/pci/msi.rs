//! MSI and MSI-X: capability parsing, messages, and programming.
//!
//! Messages use the xAPIC format: address `0xFEE0_0000 | dest << 12`
//! (physical destination mode, no redirection hint), data = vector with
//! fixed delivery and edge trigger. The destination field has 8 bits, so an
//! APIC id above 255 needs interrupt remapping (not implemented) and is
//! refused with [`Error::ApicIdNeedsRemapping`].

use alloc::boxed::Box;
use core::sync::atomic::{AtomicU32, Ordering};
use pci_types::{ConfigRegionAccess, PciAddress};

use super::bar::BarSlot;
use super::config::ConfigSpace;
use crate::error::{Error, Result};
use crate::mmio::Mmio32;

/// Base of the xAPIC MSI address window.
pub const MSI_ADDRESS_BASE: u32 = 0xFEE0_0000;
/// Bytes per MSI-X table entry.
const MSIX_ENTRY_LEN: usize = 16;
/// Vector control bit 0: entry masked.
const MSIX_ENTRY_MASKED: u32 = 1;

/// An MSI / MSI-X message: the address written and the data written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsiMessage {
    /// Message address.
    pub address: u64,
    /// Message data (16 significant bits for MSI).
    pub data: u32,
}

impl MsiMessage {
    /// A fixed, edge-triggered message for `vector` to the local APIC `apic_id`
    /// (physical destination). Errors for APIC ids above 255 and for the
    /// exception vectors 0..=31.
    pub fn xapic(apic_id: u32, vector: u8) -> Result<MsiMessage> {
        if apic_id > 0xFF {
            return Err(Error::ApicIdNeedsRemapping { apic_id });
        }
        if vector < 0x20 {
            return Err(Error::ExceptionVector { vector });
        }
        Ok(MsiMessage {
            address: u64::from(MSI_ADDRESS_BASE | (apic_id << 12)),
            data: u32::from(vector),
        })
    }

    /// Destination APIC id encoded in the address.
    pub fn destination(&self) -> u8 {
        (self.address >> 12) as u8
    }

    /// Vector encoded in the data.
    pub fn vector(&self) -> u8 {
        self.data as u8
    }
}

/// A parsed MSI capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsiCapability {
    /// Offset of the capability header.
    pub offset: u8,
    /// Message address is 64-bit.
    pub is_64bit: bool,
    /// Per-vector mask and pending registers exist.
    pub per_vector_masking: bool,
    /// Vectors the function can generate (1, 2, 4, 8, 16 or 32).
    pub vectors_capable: u8,
}

impl MsiCapability {
    /// Parses the MSI capability at `offset`, checking it fits in configuration space.
    pub fn parse<A: ConfigRegionAccess + ?Sized>(access: &A, address: PciAddress, offset: u8) -> Result<MsiCapability> {
        let cfg = ConfigSpace::new(access, address);
        let control = cfg.read16(u16::from(offset) + 2)?;
        let multiple_capable = (control >> 1) & 0b111;
        let capability = MsiCapability {
            offset,
            is_64bit: control & (1 << 7) != 0,
            per_vector_masking: control & (1 << 8) != 0,
            // 0b110 and 0b111 are reserved: treat as a single vector.
            vectors_capable: if multiple_capable <= 5 {
                1 << multiple_capable
            } else {
                1
            },
        };
        let len = capability.size_bytes();
        if usize::from(offset) + usize::from(len) > 256 {
            return Err(Error::CapabilityOverrun {
                address,
                offset,
                id: super::CAP_MSI,
                len,
            });
        }
        Ok(capability)
    }

    /// Bytes the capability occupies, rounded up to whole dwords (what the
    /// dword-wide configuration accesses touch).
    pub fn size_bytes(&self) -> u8 {
        match (self.is_64bit, self.per_vector_masking) {
            (false, false) => 0x0C,
            (true, false) => 0x10,
            (false, true) => 0x14,
            (true, true) => 0x18,
        }
    }

    fn data_offset(&self) -> u16 {
        u16::from(self.offset) + if self.is_64bit { 0x0C } else { 0x08 }
    }

    fn mask_offset(&self) -> Option<u16> {
        self.per_vector_masking
            .then(|| u16::from(self.offset) + if self.is_64bit { 0x10 } else { 0x0C })
    }
}

/// Programs and enables MSI with `vectors` vectors (a power of two up to
/// what the function can do); the function then adds the vector index to
/// the low bits of `message.data`, so the block of vectors must be aligned
/// (see `VectorAllocator::allocate_block`). MSI is disabled while the
/// address and data are written; with per-vector masking, vectors in use
/// are unmasked and the rest masked.
pub fn msi_program<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    address: PciAddress,
    capability: &MsiCapability,
    message: MsiMessage,
    vectors: u16,
) -> Result<()> {
    if !vectors.is_power_of_two() || vectors > u16::from(capability.vectors_capable) {
        return Err(Error::MsiVectorCount {
            requested: vectors,
            capable: capability.vectors_capable,
        });
    }
    let cfg = ConfigSpace::new(access, address);
    let control_offset = u16::from(capability.offset) + 2;
    let control = cfg.read16(control_offset)? & !1;
    cfg.write16(control_offset, control)?;
    let address_offset = u16::from(capability.offset) + 4;
    cfg.write32(address_offset, message.address as u32)?;
    if capability.is_64bit {
        cfg.write32(address_offset + 4, (message.address >> 32) as u32)?;
    }
    cfg.write16(capability.data_offset(), message.data as u16)?;
    if let Some(mask_offset) = capability.mask_offset() {
        let used = if vectors >= 32 { u32::MAX } else { (1u32 << vectors) - 1 };
        cfg.write32(mask_offset, !used)?;
    }
    let enable_bits = u16::try_from(vectors.trailing_zeros()).unwrap_or(0) << 4;
    let control = (control & !(0b111 << 4)) | enable_bits | 1;
    cfg.write16(control_offset, control)
}

/// Clears the MSI enable bit.
pub fn msi_disable<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    address: PciAddress,
    capability: &MsiCapability,
) -> Result<()> {
    let cfg = ConfigSpace::new(access, address);
    let control_offset = u16::from(capability.offset) + 2;
    let control = cfg.read16(control_offset)?;
    cfg.write16(control_offset, control & !1)
}

/// A parsed MSI-X capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixCapability {
    /// Offset of the capability header.
    pub offset: u8,
    /// Number of table entries (1..=2048).
    pub table_size: u16,
    /// BAR holding the table.
    pub table_bir: u8,
    /// Offset of the table in that BAR (8-byte aligned).
    pub table_offset: u32,
    /// BAR holding the pending bit array.
    pub pba_bir: u8,
    /// Offset of the PBA in that BAR.
    pub pba_offset: u32,
}

impl MsixCapability {
    /// Parses the MSI-X capability at `offset`.
    pub fn parse<A: ConfigRegionAccess + ?Sized>(
        access: &A,
        address: PciAddress,
        offset: u8,
    ) -> Result<MsixCapability> {
        if usize::from(offset) + 12 > 256 {
            return Err(Error::CapabilityOverrun {
                address,
                offset,
                id: super::CAP_MSIX,
                len: 12,
            });
        }
        let cfg = ConfigSpace::new(access, address);
        let control = cfg.read16(u16::from(offset) + 2)?;
        let table = cfg.read32(u16::from(offset) + 4)?;
        let pba = cfg.read32(u16::from(offset) + 8)?;
        Ok(MsixCapability {
            offset,
            table_size: (control & 0x7FF) + 1,
            table_bir: (table & 0b111) as u8,
            table_offset: table & !0b111,
            pba_bir: (pba & 0b111) as u8,
            pba_offset: pba & !0b111,
        })
    }

    fn locate(&self, address: PciAddress, bars: &[BarSlot; 6], bir: u8, offset: u32, len: u64) -> Result<u64> {
        let bar = bars
            .get(usize::from(bir))
            .and_then(BarSlot::bar)
            .filter(|bar| bar.is_memory())
            .ok_or(Error::MsixBir { address, bir })?;
        // `offset < 2^32` and `len <= 2048 * 16`: no overflow.
        if u64::from(offset) + len > bar.size {
            return Err(Error::MsixOutOfBar {
                address,
                bir,
                offset,
                len,
                bar_size: bar.size,
            });
        }
        // BARs from `read_bars` end inside the physical address space; a
        // hand-made one near 2^64 is refused rather than wrapped.
        bar.address.checked_add(u64::from(offset)).ok_or(Error::BarAddress {
            address,
            slot: bir,
            base: bar.address,
            size: bar.size,
        })
    }

    /// Physical address and length of the table, checked against its BAR.
    pub fn table_region(&self, address: PciAddress, bars: &[BarSlot; 6]) -> Result<(u64, u64)> {
        let len = u64::from(self.table_size) * MSIX_ENTRY_LEN as u64;
        Ok((self.locate(address, bars, self.table_bir, self.table_offset, len)?, len))
    }

    /// Physical address and length of the pending bit array (one bit per
    /// entry, in 64-bit words), checked against its BAR.
    pub fn pba_region(&self, address: PciAddress, bars: &[BarSlot; 6]) -> Result<(u64, u64)> {
        let len = u64::from(self.table_size).div_ceil(64) * 8;
        Ok((self.locate(address, bars, self.pba_bir, self.pba_offset, len)?, len))
    }
}

/// Sets the MSI-X enable (bit 15) and function mask (bit 14) bits. The usual
/// sequence: enable with the function masked, program the table, unmask the
/// entries in use, then clear the function mask.
pub fn msix_set_control<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    address: PciAddress,
    capability: &MsixCapability,
    enabled: bool,
    function_masked: bool,
) -> Result<()> {
    let cfg = ConfigSpace::new(access, address);
    let control_offset = u16::from(capability.offset) + 2;
    let mut control = cfg.read16(control_offset)? & !(0b11 << 14);
    if enabled {
        control |= 1 << 15;
    }
    if function_masked {
        control |= 1 << 14;
    }
    cfg.write16(control_offset, control)
}

/// One MSI-X table entry as read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixEntry {
    /// The message.
    pub message: MsiMessage,
    /// Vector control bit 0.
    pub masked: bool,
}

/// An MSI-X table in a mapped BAR region.
#[derive(Debug)]
pub struct MsixTable<M: Mmio32> {
    mmio: M,
    table_offset: usize,
    entries: u16,
    /// Per entry, the vector-control word last read or written, or [`CONTROL_UNKNOWN`]. Only
    /// software changes it, so after one read a mask or unmask is a single write: no MMIO read
    /// (a PCIe round trip) when an interrupt-then-poll window masks a vector per I/O burst.
    controls: Box<[AtomicU32]>,
}

/// A vector-control word not read yet (bits 31:1 are reserved and read as zero on every device
/// we know, so the all-ones word never occurs).
const CONTROL_UNKNOWN: u32 = u32::MAX;

impl<M: Mmio32> MsixTable<M> {
    /// `mmio` maps (at least) the table, which starts at `table_offset`
    /// within it and has `entries` entries; errors unless the whole table
    /// lies inside the mapping.
    pub fn new(mmio: M, table_offset: usize, entries: u16) -> Result<MsixTable<M>> {
        let len = usize::from(entries) * MSIX_ENTRY_LEN;
        let region_len = mmio.region_len();
        let fits = table_offset.checked_add(len).is_some_and(|end| end <= region_len);
        if !fits || !table_offset.is_multiple_of(8) {
            return Err(Error::MmioRange {
                offset: table_offset,
                width: len,
                region_len,
            });
        }
        Ok(MsixTable {
            mmio,
            table_offset,
            entries,
            controls: (0..entries).map(|_| AtomicU32::new(CONTROL_UNKNOWN)).collect(),
        })
    }

    /// Number of entries.
    pub fn entries(&self) -> u16 {
        self.entries
    }

    fn entry_offset(&self, index: u16) -> Result<usize> {
        if index >= self.entries {
            return Err(Error::MsixEntryIndex {
                index,
                table_size: self.entries,
            });
        }
        Ok(self.table_offset + usize::from(index) * MSIX_ENTRY_LEN)
    }

    /// Masks entry `index`, then writes its address and data. The entry is
    /// left masked (the PCI spec forbids changing an unmasked entry); call
    /// [`MsixTable::unmask`] when the handler is registered.
    pub fn program(&self, index: u16, message: MsiMessage) -> Result<()> {
        let base = self.entry_offset(index)?;
        self.mask(index)?;
        self.mmio.write32(base, message.address as u32)?;
        self.mmio.write32(base + 4, (message.address >> 32) as u32)?;
        self.mmio.write32(base + 8, message.data)
    }

    fn set_masked(&self, index: u16, masked: bool) -> Result<()> {
        let control_offset = self.entry_offset(index)? + 12;
        let cached = &self.controls[usize::from(index)];
        // Relaxed: the word only carries the reserved bits to keep; racing maskers of one
        // vector end with one of their writes either way, as with a read-modify-write.
        let control = match cached.load(Ordering::Relaxed) {
            CONTROL_UNKNOWN => self.mmio.read32(control_offset)?,
            known => known,
        };
        let control = if masked {
            control | MSIX_ENTRY_MASKED
        } else {
            control & !MSIX_ENTRY_MASKED
        };
        self.mmio.write32(control_offset, control)?;
        cached.store(control, Ordering::Relaxed);
        Ok(())
    }

    /// Sets the entry's mask bit (other vector-control bits are kept).
    pub fn mask(&self, index: u16) -> Result<()> {
        self.set_masked(index, true)
    }

    /// Clears the entry's mask bit.
    pub fn unmask(&self, index: u16) -> Result<()> {
        self.set_masked(index, false)
    }

    /// Masks every entry.
    pub fn mask_all(&self) -> Result<()> {
        (0..self.entries).try_for_each(|index| self.mask(index))
    }

    /// Reads entry `index` back.
    pub fn read(&self, index: u16) -> Result<MsixEntry> {
        let base = self.entry_offset(index)?;
        let low = self.mmio.read32(base)?;
        let high = self.mmio.read32(base + 4)?;
        let data = self.mmio.read32(base + 8)?;
        let control = self.mmio.read32(base + 12)?;
        Ok(MsixEntry {
            message: MsiMessage {
                address: u64::from(high) << 32 | u64::from(low),
                data,
            },
            masked: control & MSIX_ENTRY_MASKED != 0,
        })
    }
}

/// Reads the pending bit of entry `index` from a mapped PBA starting at
/// `pba_offset` in `mmio`.
pub fn msix_pending<M: Mmio32>(mmio: &M, pba_offset: usize, index: u16) -> Result<bool> {
    let word = usize::from(index / 32) * 4;
    let word_offset = pba_offset.checked_add(word).ok_or(Error::MmioRange {
        offset: pba_offset,
        width: word + 4,
        region_len: mmio.region_len(),
    })?;
    Ok(mmio.read32(word_offset)? & (1 << (index % 32)) != 0)
}
