//! ACPI table discovery and parsing over an abstract physical memory.
//!
//! Everything is read through [`PhysMemory`] (kernel: the identity-mapped low
//! 4 GiB; tests: fixture bytes placed at fake addresses). Tables are never
//! borrowed from memory: each read is a bounds-checked copy of the bytes it
//! needs, after the table's length and checksum were validated, so a
//! malformed table gives an [`crate::Error`], never an out-of-bounds
//! read, and every walk advances by at least one byte so it ends.
//!
//! The `acpi` crate (5.2.0, no default features) provides the layouts
//! ([`::acpi::sdt::SdtHeader`], [`::acpi::rsdp::Rsdp`], the MADT entry and
//! MCFG entry structs) and the signatures. Its own walkers are not used: they
//! trust the lengths inside the tables (a MADT entry of length 0 loops
//! forever, a table length below the header underflows, the RSDP checksum
//! reads `length` bytes past a 36-byte copy), see the crate README.

mod dmar;
mod fadt;
mod hpet;
mod ivrs;
mod madt;
mod mcfg;
mod numa;
mod rsdp;
mod sdt;
mod slit;
mod spcr;
mod srat;
mod tables;

pub use dmar::{Dmar, DmarUnit, ReservedRegion, vtd};
pub use fadt::{Fadt, PM_TIMER_HZ, PmTimer};
pub use hpet::{
    HPET_CAPABILITIES, HPET_CONFIG, HPET_MAIN_COUNTER, HPET_MAX_PERIOD_FS, HPET_REGISTER_BYTES, Hpet,
    hpet_counter_bits, hpet_counter_hz,
};
pub use ivrs::{AmdIommu, Ivrs, amdvi};
pub use madt::{Cpu, InterruptOverride, IoApic, IrqRoute, LocalApicNmi, Madt, NmiSource, Polarity, Trigger};
pub use mcfg::{EcamWindow, MAX_ECAM_WINDOWS, Mcfg, PHYS_ADDRESS_LIMIT};
pub use numa::{NodeLine, NumaNode, NumaTopology, cpu_index_order};
pub use rsdp::{BIOS_AREA, EBDA_POINTER, RSDP_V1_LEN, RSDP_V2_LEN, Rsdp};
pub use sdt::{MAX_TABLE_LEN, SDT_HEADER_LEN, Sdt};
pub use slit::Slit;
pub use spcr::{SPCR_MIN_LEN, SPCR_SIGNATURE, Spcr, SpcrPci, SpcrRegisters};
pub use srat::{CpuAffinity, MemoryAffinity, Srat};
pub use tables::{AddressSpace, GenericAddress};

use crate::error::{Error, Result, TableSignature};

/// Reads physical memory. The kernel implements it over its identity map of
/// the low 4 GiB; tests implement it over fixture bytes.
pub trait PhysMemory {
    /// Fills `out` with the bytes at `phys..phys + out.len()`, or errors
    /// (without partial guarantees) when any of them is not readable.
    fn read_bytes(&self, phys: u64, out: &mut [u8]) -> Result<()>;
}

impl<T: PhysMemory + ?Sized> PhysMemory for &T {
    fn read_bytes(&self, phys: u64, out: &mut [u8]) -> Result<()> {
        (**self).read_bytes(phys, out)
    }
}

/// A byte slice presented as physical memory starting at `base`.
#[derive(Debug, Clone, Copy)]
pub struct SliceMemory<'a> {
    base: u64,
    bytes: &'a [u8],
}

impl<'a> SliceMemory<'a> {
    /// `bytes[0]` is at physical address `base`.
    pub fn new(base: u64, bytes: &'a [u8]) -> SliceMemory<'a> {
        SliceMemory { base, bytes }
    }
}

impl PhysMemory for SliceMemory<'_> {
    fn read_bytes(&self, phys: u64, out: &mut [u8]) -> Result<()> {
        let error = Error::PhysRead { phys, len: out.len() };
        let start = phys.checked_sub(self.base).ok_or(error.clone())?;
        let start = usize::try_from(start).map_err(|_| error.clone())?;
        let end = start.checked_add(out.len()).ok_or(error.clone())?;
        let source = self.bytes.get(start..end).ok_or(error)?;
        out.copy_from_slice(source);
        Ok(())
    }
}

/// Types that may be copied out of arbitrary bytes: `Copy`, and every bit
/// pattern is a valid value.
///
/// # Safety
/// Implement only for types made of integers and byte arrays (the `acpi`
/// crate's `#[repr(C, packed)]` table structs), never for types with
/// references, enums, `bool` or invariants.
pub(crate) unsafe trait Plain: Copy {}

// SAFETY: all of these are `#[repr(C, packed)]` structs of integers, byte
// arrays and `Signature` (a transparent `[u8; 4]`), so any bytes are valid.
unsafe impl Plain for ::acpi::sdt::SdtHeader {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::rsdp::Rsdp {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::EntryHeader {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::LocalApicEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::LocalX2ApicEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::IoApicEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::InterruptSourceOverrideEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::NmiSourceEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::LocalApicNmiEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::X2ApicNmiEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::madt::LocalApicAddressOverrideEntry {}
// SAFETY: see above.
unsafe impl Plain for ::acpi::mcfg::McfgEntry {}

/// Copies a `T` out of the start of `bytes`; `None` if `bytes` is too short.
pub(crate) fn read_plain<T: Plain>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < core::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length check above keeps the read inside `bytes`;
    // `read_unaligned` has no alignment requirement; `T: Plain` makes any
    // bit pattern a valid `T`.
    Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// The byte-wise sum (mod 256) that ACPI checksums make zero.
pub(crate) fn byte_sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |sum, &byte| sum.wrapping_add(byte))
}

/// Which root table the walker uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootKind {
    /// 32-bit entries (ACPI 1.0).
    Rsdt,
    /// 64-bit entries (ACPI 2.0+).
    Xsdt,
}

/// The root table (XSDT or RSDT) and the memory it was read from.
#[derive(Debug)]
pub struct AcpiTables<M: PhysMemory> {
    memory: M,
    root: Sdt,
    kind: RootKind,
}

/// One table listed by the root table, header only (not checksummed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSummary {
    /// Physical address of the header.
    pub phys: u64,
    /// The header's signature.
    pub signature: TableSignature,
    /// The header's length field.
    pub length: u32,
}

impl<M: PhysMemory> AcpiTables<M> {
    /// Validates the root table the RSDP names: the XSDT when the RSDP is
    /// ACPI 2.0+ and has one, falling back to the RSDT if the XSDT is invalid
    /// (as Linux does). Returns the XSDT's error when both fail.
    pub fn new(memory: M, rsdp: &Rsdp) -> Result<AcpiTables<M>> {
        let mut xsdt_error = None;
        if let Some(xsdt) = rsdp.xsdt_address.filter(|&address| address != 0) {
            match validate_root(&memory, xsdt, RootKind::Xsdt) {
                Ok(root) => {
                    return Ok(AcpiTables {
                        memory,
                        root,
                        kind: RootKind::Xsdt,
                    });
                }
                Err(error) => xsdt_error = Some(error),
            }
        }
        if rsdp.rsdt_address == 0 {
            return Err(xsdt_error.unwrap_or(Error::RsdpNoRootTable));
        }
        match validate_root(&memory, u64::from(rsdp.rsdt_address), RootKind::Rsdt) {
            Ok(root) => Ok(AcpiTables {
                memory,
                root,
                kind: RootKind::Rsdt,
            }),
            Err(error) => Err(xsdt_error.unwrap_or(error)),
        }
    }

    /// Uses the root table at `phys`, validated (signature, length, checksum, whole entries).
    pub fn from_root(memory: M, phys: u64, kind: RootKind) -> Result<AcpiTables<M>> {
        let root = validate_root(&memory, phys, kind)?;
        Ok(AcpiTables { memory, root, kind })
    }

    /// The validated root table.
    pub fn root(&self) -> &Sdt {
        &self.root
    }

    /// Whether the walker uses the XSDT or the RSDT.
    pub fn root_kind(&self) -> RootKind {
        self.kind
    }

    /// The memory accessor.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    fn entry_size(&self) -> u32 {
        root_entry_size(self.kind)
    }

    /// Number of table addresses in the root table.
    pub fn entry_count(&self) -> usize {
        // The root was loaded with `length >= SDT_HEADER_LEN`.
        let entries = self.root.length.saturating_sub(SDT_HEADER_LEN) / self.entry_size();
        usize::try_from(entries).unwrap_or(usize::MAX)
    }

    /// The physical address in root entry `index` (may be 0: firmware leaves holes).
    pub fn entry(&self, index: usize) -> Result<u64> {
        let entry_size = self.entry_size();
        let offset = u32::try_from(index)
            .ok()
            .and_then(|index| index.checked_mul(entry_size))
            .and_then(|offset| offset.checked_add(SDT_HEADER_LEN))
            .unwrap_or(u32::MAX);
        match self.kind {
            RootKind::Rsdt => self.root.read_u32(&self.memory, offset).map(u64::from),
            RootKind::Xsdt => self.root.read_u64(&self.memory, offset),
        }
    }

    /// Headers of all listed tables; null entries are skipped, unreadable
    /// ones are yielded as errors.
    pub fn tables(&self) -> impl Iterator<Item = Result<TableSummary>> + '_ {
        (0..self.entry_count()).filter_map(move |index| {
            let phys = match self.entry(index) {
                Ok(0) => return None,
                Ok(phys) => phys,
                Err(error) => return Some(Err(error)),
            };
            Some(
                Sdt::peek_header(&self.memory, phys).map(|(signature, length)| TableSummary {
                    phys,
                    signature,
                    length,
                }),
            )
        })
    }

    /// Finds and validates the first table with `signature`.
    ///
    /// Entries whose header cannot be read are skipped (a broken pointer to
    /// some other table must not hide the MADT); a table that has the
    /// signature but fails validation is an error, not skipped.
    pub fn find(&self, signature: TableSignature) -> Result<Sdt> {
        for summary in self.tables() {
            let Ok(summary) = summary else { continue };
            if summary.signature == signature {
                return Sdt::load(&self.memory, summary.phys, Some(signature), SDT_HEADER_LEN);
            }
        }
        Err(Error::TableNotFound { signature })
    }

    /// Finds and parses the MADT.
    pub fn madt(&self) -> Result<Madt> {
        let table = self.find(TableSignature::MADT)?;
        Madt::parse(&self.memory, &table)
    }

    /// Finds the table with `signature` and parses it, `Ok(None)` when the
    /// root table lists none; a listed table that is invalid is an error.
    fn optional<T>(&self, signature: TableSignature, parse: impl FnOnce(&M, &Sdt) -> Result<T>) -> Result<Option<T>> {
        match self.find(signature) {
            Ok(table) => parse(&self.memory, &table).map(Some),
            Err(Error::TableNotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The SRAT, if listed.
    pub fn srat(&self) -> Result<Option<Srat>> {
        self.optional(TableSignature::SRAT, |m, t| Srat::parse(m, t))
    }

    /// The SLIT, if listed.
    pub fn slit(&self) -> Result<Option<Slit>> {
        self.optional(TableSignature::SLIT, |m, t| Slit::parse(m, t))
    }

    /// The NUMA layout from the SRAT (and a consistent SLIT), if there is an SRAT.
    pub fn numa(&self) -> Result<Option<NumaTopology>> {
        let Some(srat) = self.srat()? else { return Ok(None) };
        Ok(Some(NumaTopology::new(&srat, self.slit()?)))
    }

    /// The HPET table, if listed.
    pub fn hpet(&self) -> Result<Option<Hpet>> {
        self.optional(TableSignature::HPET, |m, t| Hpet::parse(m, t))
    }

    /// The FADT, if listed.
    pub fn fadt(&self) -> Result<Option<Fadt>> {
        self.optional(TableSignature::FADT, |m, t| Fadt::parse(m, t))
    }

    /// The DMAR (Intel VT-d), if listed.
    pub fn dmar(&self) -> Result<Option<Dmar>> {
        self.optional(TableSignature::DMAR, |m, t| Dmar::parse(m, t))
    }

    /// The IVRS (AMD-Vi), if listed.
    pub fn ivrs(&self) -> Result<Option<Ivrs>> {
        self.optional(TableSignature::IVRS, |m, t| Ivrs::parse(m, t))
    }

    /// Finds and parses the MCFG; `Ok(None)` when there is none (e.g. the `pc` machine).
    pub fn mcfg(&self) -> Result<Option<Mcfg>> {
        match self.find(TableSignature::MCFG) {
            Ok(table) => Mcfg::parse(&self.memory, &table).map(Some),
            Err(Error::TableNotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Finds and parses the SPCR (the firmware's console UART); `Ok(None)` when there is none.
    pub fn spcr(&self) -> Result<Option<Spcr>> {
        match self.find(SPCR_SIGNATURE) {
            Ok(table) => Spcr::parse(&self.memory, &table).map(Some),
            Err(Error::TableNotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The AML definition blocks: the DSDT the FADT names (`X_DSDT` when
    /// set, else `DSDT`), then every SSDT in root-table order, each as
    /// (table revision, bytes after the header). No FADT: SSDTs only.
    pub fn definition_blocks(&self) -> Result<alloc::vec::Vec<(u8, alloc::vec::Vec<u8>)>> {
        const DSDT: TableSignature = TableSignature(*b"DSDT");
        const SSDT: TableSignature = TableSignature(*b"SSDT");
        const FADT_DSDT: u32 = 40;
        const FADT_X_DSDT: u32 = 140;
        let mut blocks = alloc::vec::Vec::new();
        let body = |table: &Sdt| -> Result<(u8, alloc::vec::Vec<u8>)> {
            let bytes = tables::table_bytes(&self.memory, table)?;
            // `Sdt::load` checked `length >= SDT_HEADER_LEN`, so the body is there.
            let body = bytes.get(SDT_HEADER_LEN as usize..).unwrap_or_default();
            Ok((table.revision, body.to_vec()))
        };
        match self.find(TableSignature::FADT) {
            Ok(fadt) => {
                let extended = if fadt.length >= FADT_X_DSDT + 8 {
                    fadt.read_u64(&self.memory, FADT_X_DSDT)?
                } else {
                    0
                };
                let dsdt = if extended != 0 {
                    extended
                } else {
                    u64::from(fadt.read_u32(&self.memory, FADT_DSDT)?)
                };
                if dsdt != 0 {
                    let table = Sdt::load(&self.memory, dsdt, Some(DSDT), SDT_HEADER_LEN)?;
                    blocks.push(body(&table)?);
                }
            }
            Err(Error::TableNotFound { .. }) => {}
            Err(error) => return Err(error),
        }
        for summary in self.tables() {
            let Ok(summary) = summary else { continue };
            if summary.signature == SSDT {
                let table = Sdt::load(&self.memory, summary.phys, Some(SSDT), SDT_HEADER_LEN)?;
                blocks.push(body(&table)?);
            }
        }
        Ok(blocks)
    }
}

fn root_entry_size(kind: RootKind) -> u32 {
    match kind {
        RootKind::Rsdt => 4,
        RootKind::Xsdt => 8,
    }
}

fn validate_root(memory: &impl PhysMemory, phys: u64, kind: RootKind) -> Result<Sdt> {
    let signature = match kind {
        RootKind::Rsdt => TableSignature::RSDT,
        RootKind::Xsdt => TableSignature::XSDT,
    };
    let entry_size = root_entry_size(kind);
    let root = Sdt::load(memory, phys, Some(signature), SDT_HEADER_LEN)?;
    if !root.length.saturating_sub(SDT_HEADER_LEN).is_multiple_of(entry_size) {
        return Err(Error::RootTablePartialEntry {
            signature,
            length: root.length,
            entry_size,
        });
    }
    Ok(root)
}
