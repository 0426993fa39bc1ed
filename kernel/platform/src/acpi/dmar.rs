//! DMAR (Intel VT-d): remapping hardware units, reserved memory regions, and
//! the platform flags (interrupt remapping, x2APIC opt-out); plus the
//! register bits baremq uses to find and turn off what firmware left on.

use alloc::vec::Vec;

use super::tables::{EntryHeader, Fields, entries, table_bytes};
use super::{PhysMemory, Sdt};
use crate::error::{Result, TableSignature};

/// Header (36) + host address width (1) + flags (1) + reserved (10).
const DMAR_FIXED_LEN: u32 = 48;
const TYPE_DRHD: u16 = 0;
const TYPE_RMRR: u16 = 1;
const TYPE_ATSR: u16 = 2;
const TYPE_RHSA: u16 = 3;

/// DMAR flags bit 0: the platform supports interrupt remapping.
const FLAG_INTR_REMAP: u8 = 1 << 0;
/// Bit 1: firmware asks the OS not to enable x2APIC mode (if it can avoid it).
const FLAG_X2APIC_OPT_OUT: u8 = 1 << 1;
/// Bit 2: firmware asks for DMA protection to stay on until the OS takes over.
const FLAG_DMA_CTRL_PLATFORM_OPT_IN: u8 = 1 << 2;

/// One DMA remapping hardware unit (DRHD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmarUnit {
    pub segment: u16,
    /// Physical address of its register page(s).
    pub register_base: u64,
    /// Flags bit 0: it covers every PCI device of the segment not named by another unit.
    pub include_pci_all: bool,
    /// Device scope entries it lists (bytes after the 16-byte header).
    pub scope_bytes: u16,
}

/// A reserved memory region (RMRR): DMA firmware keeps doing (USB, BMC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedRegion {
    pub segment: u16,
    pub base: u64,
    /// Inclusive end.
    pub limit: u64,
}

/// The parsed DMAR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dmar {
    /// DMA physical addressability in bits (the field plus one).
    pub host_address_width: u16,
    pub interrupt_remapping: bool,
    pub x2apic_opt_out: bool,
    pub dma_control_opt_in: bool,
    pub units: Vec<DmarUnit>,
    pub reserved_regions: Vec<ReservedRegion>,
    /// ATSR, RHSA, ANDD, SATC and unknown structures, counted.
    pub other_structures: u32,
}

fn min_len(structure: u16) -> usize {
    match structure {
        TYPE_DRHD => 16,
        TYPE_RMRR => 24,
        TYPE_ATSR => 8,
        TYPE_RHSA => 20,
        _ => 4,
    }
}

impl Dmar {
    /// Parses a validated DMAR; structure lengths are checked before reads.
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Dmar> {
        table.expect(TableSignature::DMAR, DMAR_FIXED_LEN)?;
        let bytes = table_bytes(memory, table)?;
        let fields = Fields::new(TableSignature::DMAR, &bytes);
        let flags = fields.u8(37)?;
        let mut dmar = Dmar {
            host_address_width: u16::from(fields.u8(36)?) + 1,
            interrupt_remapping: flags & FLAG_INTR_REMAP != 0,
            x2apic_opt_out: flags & FLAG_X2APIC_OPT_OUT != 0,
            dma_control_opt_in: flags & FLAG_DMA_CTRL_PLATFORM_OPT_IN != 0,
            units: Vec::new(),
            reserved_regions: Vec::new(),
            other_structures: 0,
        };
        for entry in entries(fields, DMAR_FIXED_LEN as usize, EntryHeader::WordType, min_len)? {
            let e = entry.bytes;
            match entry.entry_type {
                TYPE_DRHD => dmar.units.push(DmarUnit {
                    include_pci_all: e.u8(4)? & 1 != 0,
                    segment: e.u16(6)?,
                    register_base: e.u64(8)?,
                    // The entry is 16..=65535 bytes (`min_len`, a 16-bit length).
                    scope_bytes: u16::try_from(e.bytes.len().saturating_sub(16)).unwrap_or(u16::MAX),
                }),
                TYPE_RMRR => dmar.reserved_regions.push(ReservedRegion {
                    segment: e.u16(6)?,
                    base: e.u64(8)?,
                    limit: e.u64(16)?,
                }),
                _ => dmar.other_structures = dmar.other_structures.saturating_add(1),
            }
        }
        Ok(dmar)
    }
}

/// VT-d register offsets and bits (Intel VT-d specification, chapter 11).
pub mod vtd {
    /// Capability register (64-bit).
    pub const CAP: usize = 0x08;
    /// Global command register (32-bit, write).
    pub const GCMD: usize = 0x18;
    /// Global status register (32-bit, read).
    pub const GSTS: usize = 0x1C;
    /// Protected memory enable register (32-bit).
    pub const PMEN: usize = 0x64;
    /// Root table address register (64-bit).
    pub const RTADDR: usize = 0x20;
    /// Invalidation queue tail (64-bit) and address (64-bit) registers.
    pub const IQT: usize = 0x88;
    pub const IQA: usize = 0x90;
    /// Interrupt remapping table address register (64-bit).
    pub const IRTA: usize = 0xB8;
    /// GCMD/GSTS bit 30: set (GCMD) / root table pointer latched (GSTS).
    pub const ROOT_TABLE_POINTER: u32 = 1 << 30;
    /// GCMD/GSTS bit 24: set (GCMD) / interrupt remap table pointer latched (GSTS).
    pub const INTERRUPT_TABLE_POINTER: u32 = 1 << 24;
    /// Bytes of the register page to map.
    pub const REGISTER_BYTES: usize = 0x1000;

    /// GSTS/GCMD bit 31: DMA translation enabled.
    pub const TRANSLATION: u32 = 1 << 31;
    /// Bit 26: queued invalidation enabled.
    pub const QUEUED_INVALIDATION: u32 = 1 << 26;
    /// Bit 25: interrupt remapping enabled.
    pub const INTERRUPT_REMAPPING: u32 = 1 << 25;
    /// Bit 23: compatibility-format interrupts allowed (a state, not an
    /// engine; left as firmware set it).
    pub const COMPATIBILITY_FORMAT: u32 = 1 << 23;
    /// GSTS bits that are one-shot commands in GCMD (root table pointer,
    /// fault log, write-buffer flush, interrupt remap table pointer): they
    /// must be written as 0 when GSTS is echoed back into GCMD.
    pub const ONE_SHOT: u32 = (1 << 30) | (1 << 29) | (1 << 27) | (1 << 24);
    /// PMEN bit 31: enable protected memory regions; bit 0: their status.
    pub const PMEN_ENABLE: u32 = 1 << 31;
    pub const PMEN_STATUS: u32 = 1 << 0;
    /// CAP bits 5 and 6: protected low / high memory regions exist (PMEN is implemented).
    pub const CAP_PROTECTED_REGIONS: u64 = (1 << 5) | (1 << 6);

    /// The engines to turn off, in order: translation first, then interrupt
    /// remapping, then queued invalidation (the other two use its queue).
    pub const DISABLE_ORDER: [(u32, &str); 3] = [
        (TRANSLATION, "DMA translation"),
        (INTERRUPT_REMAPPING, "interrupt remapping"),
        (QUEUED_INVALIDATION, "queued invalidation"),
    ];

    /// ECAP bit 0: the unit snoops memory (no cache flush needed for what it reads).
    pub const ECAP_COHERENT: u64 = 1 << 0;
    /// Extended capability register (64-bit).
    pub const ECAP: usize = 0x10;
    /// IQA bit 11: 256-bit descriptors (else 128-bit); bits 2:0: queue size, 2^n pages.
    pub const IQA_WIDE_DESCRIPTORS: u64 = 1 << 11;
    /// IQT bits 18:4: the tail, a byte offset into the queue.
    pub const IQT_MASK: u64 = 0x7_FFF0;

    /// Where the next descriptor goes and the queue's size in bytes, from IQA and IQT.
    pub fn queue_layout(iqa: u64, iqt: u64) -> (u64, u64, u64, u64) {
        let base = iqa & !0xFFF;
        let bytes = 4096u64 << (iqa & 7);
        let descriptor = if iqa & IQA_WIDE_DESCRIPTORS != 0 { 32 } else { 16 };
        (base, bytes, (iqt & IQT_MASK) % bytes, descriptor)
    }

    /// An invalidation wait descriptor (type 5) that writes `data` to
    /// `status_address` when every descriptor before it is done: the
    /// specification's way to drain the queue before turning it off.
    pub fn wait_descriptor(status_address: u64, data: u32) -> [u64; 2] {
        const TYPE_WAIT: u64 = 0x5;
        const STATUS_WRITE: u64 = 1 << 5;
        [
            TYPE_WAIT | STATUS_WRITE | (u64::from(data) << 32),
            status_address & !0x3,
        ]
    }

    /// The GCMD value that keeps every persistent enable of `gsts` except `bit`.
    pub fn command_without(gsts: u32, bit: u32) -> u32 {
        gsts & !ONE_SHOT & !bit
    }

    /// Names of the engines `gsts` shows enabled (for the report).
    pub fn enabled_names(gsts: u32) -> impl Iterator<Item = &'static str> {
        DISABLE_ORDER
            .into_iter()
            .filter(move |(bit, _)| gsts & bit != 0)
            .map(|(_, name)| name)
    }
}
