//! The crate's single error type.
//!
//! Every variant carries the offending value and, where it helps, what was
//! accepted, so a boot log line is enough to see what the firmware or the
//! device got wrong.

use core::fmt;

use pci_types::PciAddress;

/// A four-byte ACPI table signature, printed with non-printable bytes escaped
/// (firmware may hand us garbage, and printing must never panic).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TableSignature(pub [u8; 4]);

impl TableSignature {
    /// "APIC": the Multiple APIC Description Table.
    pub const MADT: TableSignature = TableSignature(*b"APIC");
    /// "MCFG": PCI Express memory-mapped configuration space.
    pub const MCFG: TableSignature = TableSignature(*b"MCFG");
    /// "RSDT": the 32-bit root table.
    pub const RSDT: TableSignature = TableSignature(*b"RSDT");
    /// "XSDT": the 64-bit root table.
    pub const XSDT: TableSignature = TableSignature(*b"XSDT");
    /// "SRAT": CPU and memory affinity (NUMA).
    pub const SRAT: TableSignature = TableSignature(*b"SRAT");
    /// "SLIT": distances between proximity domains.
    pub const SLIT: TableSignature = TableSignature(*b"SLIT");
    /// "HPET": the High Precision Event Timer.
    pub const HPET: TableSignature = TableSignature(*b"HPET");
    /// "FACP": the Fixed ACPI Description Table (FADT).
    pub const FADT: TableSignature = TableSignature(*b"FACP");
    /// "DMAR": Intel VT-d remapping units.
    pub const DMAR: TableSignature = TableSignature(*b"DMAR");
    /// "IVRS": AMD-Vi IOMMUs.
    pub const IVRS: TableSignature = TableSignature(*b"IVRS");
}

impl fmt::Display for TableSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &byte in &self.0 {
            if byte.is_ascii_graphic() || byte == b' ' {
                write!(f, "{}", byte as char)?;
            } else {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for TableSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// A short copy of an offending command-line token (the error type must not
/// borrow the command line). Longer tokens are cut and marked with "...".
#[derive(Clone, PartialEq, Eq)]
pub struct Token(heapless::String<32>);

impl Token {
    /// Copies up to 29 bytes of `text` (cut on a char boundary), adding "..." when cut.
    pub fn new(text: &str) -> Token {
        let mut out = heapless::String::new();
        let mut cut = false;
        for ch in text.chars() {
            if out.len() + ch.len_utf8() > 29 {
                cut = true;
                break;
            }
            // Cannot fail: the length was checked just above.
            let _ = out.push(ch);
        }
        if cut {
            let _ = out.push_str("...");
        }
        Token(out)
    }

    /// The stored (possibly shortened) text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0.as_str())
    }
}

/// The accepted forms of `irq.affinity=`, quoted in every parse error.
pub const AFFINITY_FORMS: &str = "accepted forms: `spread`, `cpu:N` (every vector to CPU N), `I:C[,I:C...]` (vector index I to CPU C, others spread)";

/// Everything that can go wrong in this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ---- physical memory / MMIO --------------------------------------------------------------
    /// The physical-memory accessor could not read `len` bytes at `phys`.
    PhysRead { phys: u64, len: usize },
    /// An MMIO access at `offset` (of `width` bytes) falls outside a region of `region_len` bytes
    /// or is not aligned to `width`.
    MmioRange {
        offset: usize,
        width: usize,
        region_len: usize,
    },

    // ---- ACPI --------------------------------------------------------------------------------
    /// No valid RSDP in the EBDA's first KiB nor in 0xE0000..=0xFFFFF.
    RsdpNotFound,
    /// The RSDP bytes handed over (e.g. from a Multiboot2 tag) are shorter than the structure.
    RsdpTooShort { len: usize, needed: usize },
    /// The RSDP does not start with "RSD PTR ".
    RsdpSignature { found: [u8; 8] },
    /// The ACPI 1.0 checksum over the first 20 bytes does not sum to zero.
    RsdpChecksum { sum: u8 },
    /// The ACPI 2.0+ `length` field is not 36 (the only defined size).
    RsdpLength { length: u32 },
    /// The ACPI 2.0+ extended checksum over 36 bytes does not sum to zero.
    RsdpExtendedChecksum { sum: u8 },
    /// The RSDP names no root table (RSDT and XSDT addresses both zero).
    RsdpNoRootTable,
    /// The EFI system table the loader named does not lead to an RSDP.
    EfiSystemTable { phys: u64, reason: &'static str },
    /// A table's header says `length`, outside `min..=max`.
    TableLength {
        signature: TableSignature,
        phys: u64,
        length: u32,
        min: u32,
        max: u32,
    },
    /// A table's bytes do not sum to zero.
    TableChecksum {
        signature: TableSignature,
        phys: u64,
        sum: u8,
    },
    /// The table at `phys` carries `found` where `expected` was required.
    TableSignatureMismatch {
        phys: u64,
        expected: TableSignature,
        found: TableSignature,
    },
    /// A read inside a validated table would run past its `length`.
    TableOverrun {
        signature: TableSignature,
        offset: u32,
        len: u32,
        length: u32,
    },
    /// RSDT/XSDT payload is not a whole number of 4/8-byte entries.
    RootTablePartialEntry {
        signature: TableSignature,
        length: u32,
        entry_size: u32,
    },
    /// The root table lists no table with this signature.
    TableNotFound { signature: TableSignature },
    /// A MADT entry at `offset` declares a length that runs past the table end.
    MadtEntryOverrun {
        offset: u32,
        entry_type: u8,
        length: u8,
        table_length: u32,
    },
    /// A MADT entry declares a length shorter than its type requires (0 and 1 included).
    MadtEntryTooShort {
        offset: u32,
        entry_type: u8,
        length: u8,
        min: u8,
    },
    /// An interrupt source override names a bus other than 0 (ISA).
    MadtOverrideBus { bus: u8, irq: u8 },
    /// A sub-table entry (SRAT, DMAR, IVRS) declares a length shorter than its type requires.
    AcpiEntryTooShort {
        signature: TableSignature,
        offset: u32,
        entry_type: u16,
        length: u32,
        min: u32,
    },
    /// A sub-table entry (SRAT, DMAR, IVRS) runs past the end of its table.
    AcpiEntryOverrun {
        signature: TableSignature,
        offset: u32,
        entry_type: u16,
        length: u32,
        table_length: u32,
    },
    /// The SLIT's locality count does not fit its length (count squared bytes are needed).
    SlitSize { localities: u64, length: u32 },
    /// The HPET table's base address is not a non-zero memory address.
    HpetAddress { space: &'static str, address: u64 },
    /// The HPET's counter period (femtoseconds) is 0 or slower than the specification's 100 ns.
    HpetPeriod { period_fs: u32 },
    /// MCFG payload is not a whole number of 16-byte entries.
    McfgPartialEntry { length: u32 },
    /// An MCFG entry has start bus > end bus.
    McfgBusRange { index: usize, start: u8, end: u8 },
    /// More MCFG entries than the fixed capacity.
    McfgCapacity { capacity: usize },
    /// An MCFG window whose decoded region (`base + (bus << 20)` for its
    /// buses) would pass the 52-bit physical address space or wrap past 2^64.
    McfgWindowAddress {
        index: usize,
        base: u64,
        bus_start: u8,
        bus_end: u8,
    },
    /// An SPCR field holds a value the specification does not define (or a
    /// UART cannot use), e.g. a reserved baud-rate code or an 8-byte access width.
    SpcrValue { field: &'static str, value: u64 },

    // ---- PCI ---------------------------------------------------------------------------------
    /// A configuration-space offset that is unaligned or beyond the space (256 legacy, 4096 ECAM).
    ConfigOffset { offset: u16, limit: u16 },
    /// Legacy port-I/O configuration access can only reach segment 0.
    ConfigSegment { address: PciAddress },
    /// An ECAM access to a bus outside the window's bus range.
    EcamBus { bus: u8, start: u8, end: u8 },
    /// An ECAM window's segment differs from the address's segment.
    EcamSegment { segment: u16, window: u16 },
    /// A 64-bit BAR in slot 5 (its upper half would be slot 6, which does not exist) or slot 1 of a bridge.
    Bar64InLastSlot { address: PciAddress, slot: u8 },
    /// A memory BAR with the reserved type encoding 0b11.
    BarReservedType { address: PciAddress, slot: u8, raw: u32 },
    /// A BAR whose size is beyond the 52-bit physical address space (e.g. a
    /// 64-bit BAR that sizes to 2^63): it can never be placed.
    BarTooLarge { address: PciAddress, slot: u8, size: u64 },
    /// A BAR whose assigned `base + size` passes the 52-bit physical address space.
    BarAddress {
        address: PciAddress,
        slot: u8,
        base: u64,
        size: u64,
    },
    /// Resource assignment could not place this BAR in the window it needs
    /// (`window_start..window_end`, with everything else placed): the
    /// function is refused (memory) or its I/O BAR left off.
    BarDoesNotFit {
        address: PciAddress,
        slot: u8,
        size: u64,
        window_start: u64,
        window_end: u64,
    },
    /// A memory BAR left unassigned behind a bridge whose window the firmware
    /// programmed: baremq keeps firmware windows as they are, so it cannot be placed.
    UnassignedBehindFirmwareWindow {
        address: PciAddress,
        slot: u8,
        bridge: PciAddress,
    },
    /// No bus number is left (in the ECAM window's range) for the bus behind this bridge.
    BusNumbersExhausted { bridge: PciAddress },
    /// The function sits behind a bridge that was refused.
    BehindRefusedBridge { address: PciAddress, bridge: PciAddress },
    /// A memory BAR the firmware left unassigned under a root bus other than
    /// the one baremq lays out: only the firmware knows what that host bridge routes.
    UnassignedUnderOtherRoot { address: PciAddress, slot: u8, root: u8 },
    /// A bridge under a root bus other than the one baremq lays out has no
    /// (or impossible) bus numbers: nothing behind it can be reached.
    BridgeNotNumberedUnderOtherRoot { bridge: PciAddress, root: u8 },
    /// A BAR index the header type does not have.
    BarIndex { address: PciAddress, slot: u8, count: u8 },
    /// A capability pointer below 0x40 (inside the standard header) or above 0xFC.
    CapabilityPointer { address: PciAddress, pointer: u8 },
    /// The capability list revisits `offset`: a loop.
    CapabilityLoop { address: PciAddress, offset: u8 },
    /// A capability's registers would run past the end of configuration space.
    CapabilityOverrun {
        address: PciAddress,
        offset: u8,
        id: u8,
        len: u8,
    },
    /// More capabilities than fit in the fixed list (cannot happen without a loop, kept for safety).
    CapabilityCapacity { address: PciAddress, capacity: usize },
    /// The MSI-X table/PBA names BAR `bir`, which is not a memory BAR of this function.
    MsixBir { address: PciAddress, bir: u8 },
    /// The MSI-X table (or PBA) runs past the end of its BAR.
    MsixOutOfBar {
        address: PciAddress,
        bir: u8,
        offset: u32,
        len: u64,
        bar_size: u64,
    },
    /// An MSI-X entry index beyond the table.
    MsixEntryIndex { index: u16, table_size: u16 },
    /// MSI cannot give this many vectors (must be 1..=capable, rounded to a power of two).
    MsiVectorCount { requested: u16, capable: u8 },
    /// An xAPIC MSI address holds 8 destination bits; larger APIC ids need interrupt remapping.
    ApicIdNeedsRemapping { apic_id: u32 },
    /// Vectors 0..=31 are CPU exceptions and cannot be a device's interrupt vector.
    ExceptionVector { vector: u8 },
    /// The function has no MSI-X, no MSI and no INTx pin.
    NoInterruptSource { address: PciAddress },
    /// The requested interrupt mode is not offered by the function.
    ModeUnavailable { address: PciAddress, mode: &'static str },
    /// The function's interrupt line register is 0xFF (not connected) or otherwise unusable.
    IntxLine { address: PciAddress, line: u8 },
    /// No I/O APIC in the MADT handles this GSI.
    NoIoApicForGsi { gsi: u32 },

    // ---- interrupt vectors, dispatch, affinity -----------------------------------------------
    /// Not enough free vectors (`requested` contiguous, aligned to `requested`).
    VectorsExhausted { requested: u16 },
    /// The vector is outside the allocatable range or reserved for the kernel.
    VectorNotAllocatable { vector: u8, first: u8, last: u8 },
    /// The vector was already reserved/allocated.
    VectorInUse { vector: u8 },
    /// The vector was not allocated (double free).
    VectorNotAllocated { vector: u8 },
    /// A handler is already registered for the vector.
    HandlerPresent { vector: u8 },
    /// No handler is registered for the vector.
    NoHandler { vector: u8 },
    /// A CPU index at or beyond the number of online CPUs (or the counters' capacity).
    CpuOutOfRange { cpu: u32, limit: u32 },
    /// `irq.affinity=` could not be parsed: the offending token and why.
    AffinityParse { token: Token, reason: &'static str },
    /// Capacity of the affinity list exceeded.
    AffinityCapacity { capacity: usize },
    // ---- AML --------------------------------------------------------------------------------
    /// AML could not be loaded or evaluated: where (method path, name or
    /// "resource template"), the byte offset in its table, what, and the value.
    Aml {
        at: Token,
        offset: u32,
        what: &'static str,
        value: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Error::*;
        match self {
            PhysRead { phys, len } => write!(f, "cannot read {len} bytes of physical memory at {phys:#x}"),
            MmioRange {
                offset,
                width,
                region_len,
            } => write!(
                f,
                "MMIO access of {width} bytes at offset {offset:#x} is outside the {region_len:#x}-byte region or unaligned"
            ),
            RsdpNotFound => write!(f, "no valid ACPI RSDP in the EBDA or at 0xE0000..=0xFFFFF"),
            RsdpTooShort { len, needed } => {
                write!(f, "RSDP copy is {len} bytes, {needed} are needed")
            }
            RsdpSignature { found } => write!(f, "RSDP signature is {found:02x?}, expected \"RSD PTR \""),
            RsdpChecksum { sum } => write!(f, "RSDP checksum over 20 bytes sums to {sum:#04x}, expected 0"),
            RsdpLength { length } => write!(f, "RSDP length field is {length}, expected 36"),
            RsdpExtendedChecksum { sum } => {
                write!(f, "RSDP extended checksum over 36 bytes sums to {sum:#04x}, expected 0")
            }
            RsdpNoRootTable => write!(f, "RSDP has neither an RSDT nor an XSDT address"),
            EfiSystemTable { phys, reason } => {
                write!(f, "EFI system table at {phys:#x} gives no RSDP: {reason}")
            }
            TableLength {
                signature,
                phys,
                length,
                min,
                max,
            } => write!(
                f,
                "ACPI table {signature} at {phys:#x} declares length {length}, accepted {min}..={max}"
            ),
            TableChecksum { signature, phys, sum } => {
                write!(f, "ACPI table {signature} at {phys:#x} sums to {sum:#04x}, expected 0")
            }
            TableSignatureMismatch { phys, expected, found } => {
                write!(f, "ACPI table at {phys:#x} is {found}, expected {expected}")
            }
            TableOverrun {
                signature,
                offset,
                len,
                length,
            } => write!(
                f,
                "read of {len} bytes at offset {offset} runs past the end of ACPI table {signature} (length {length})"
            ),
            RootTablePartialEntry {
                signature,
                length,
                entry_size,
            } => write!(
                f,
                "{signature} length {length} leaves a partial {entry_size}-byte entry after the 36-byte header"
            ),
            TableNotFound { signature } => write!(f, "ACPI table {signature} is not listed by the root table"),
            MadtEntryOverrun {
                offset,
                entry_type,
                length,
                table_length,
            } => write!(
                f,
                "MADT entry type {entry_type} at offset {offset} with length {length} runs past the table end ({table_length})"
            ),
            MadtEntryTooShort {
                offset,
                entry_type,
                length,
                min,
            } => write!(
                f,
                "MADT entry type {entry_type} at offset {offset} has length {length}, at least {min} required"
            ),
            AcpiEntryTooShort {
                signature,
                offset,
                entry_type,
                length,
                min,
            } => write!(
                f,
                "{signature} entry type {entry_type:#x} at offset {offset} has length {length}, at least {min} required"
            ),
            AcpiEntryOverrun {
                signature,
                offset,
                entry_type,
                length,
                table_length,
            } => write!(
                f,
                "{signature} entry type {entry_type:#x} at offset {offset} with length {length} runs past the table end ({table_length})"
            ),
            SlitSize { localities, length } => write!(
                f,
                "SLIT lists {localities} localities, whose {localities}x{localities} distances do not fit its length {length}"
            ),
            HpetAddress { space, address } => write!(
                f,
                "HPET table gives base {address:#x} in {space} space; a non-zero memory address is required"
            ),
            HpetPeriod { period_fs } => write!(
                f,
                "HPET counter period is {period_fs} fs; accepted 1..=100000000 (10 MHz or faster)"
            ),
            MadtOverrideBus { bus, irq } => {
                write!(
                    f,
                    "MADT interrupt source override for IRQ {irq} names bus {bus}, only 0 (ISA) is defined"
                )
            }
            McfgPartialEntry { length } => {
                write!(
                    f,
                    "MCFG length {length} leaves a partial 16-byte entry after the 44-byte header"
                )
            }
            McfgBusRange { index, start, end } => {
                write!(f, "MCFG entry {index} has start bus {start} above end bus {end}")
            }
            McfgCapacity { capacity } => write!(f, "MCFG lists more than {capacity} ECAM windows"),
            McfgWindowAddress {
                index,
                base,
                bus_start,
                bus_end,
            } => write!(
                f,
                "MCFG entry {index}: ECAM base {base:#x} for buses {bus_start}..={bus_end} runs past the 52-bit physical address space"
            ),
            SpcrValue { field, value } => write!(f, "SPCR: {field} {value:#x} is not usable for a 16550 console"),
            ConfigOffset { offset, limit } => write!(
                f,
                "PCI configuration offset {offset:#x} is unaligned or not below {limit:#x}"
            ),
            ConfigSegment { address } => {
                write!(f, "port I/O configuration access reaches segment 0 only, not {address}")
            }
            EcamBus { bus, start, end } => {
                write!(
                    f,
                    "bus {bus:#04x} is outside the ECAM window's buses {start:#04x}..={end:#04x}"
                )
            }
            EcamSegment { segment, window } => {
                write!(f, "segment {segment:#x} is not the ECAM window's segment {window:#x}")
            }
            Bar64InLastSlot { address, slot } => {
                write!(f, "{address}: 64-bit BAR{slot} has no slot left for its upper half")
            }
            BarReservedType { address, slot, raw } => {
                write!(
                    f,
                    "{address}: BAR{slot} = {raw:#010x} uses the reserved memory type 0b11"
                )
            }
            BarTooLarge { address, slot, size } => write!(
                f,
                "{address}: BAR{slot} sizes to {size:#x} bytes, beyond the 52-bit physical address space; refused"
            ),
            BarAddress {
                address,
                slot,
                base,
                size,
            } => write!(
                f,
                "{address}: BAR{slot} at {base:#x} + {size:#x} bytes runs past the 52-bit physical address space; refused"
            ),
            BarDoesNotFit {
                address,
                slot,
                size,
                window_start,
                window_end,
            } => write!(
                f,
                "{address}: BAR{slot} ({size:#x} bytes) does not fit in the free part of {window_start:#x}..{window_end:#x}"
            ),
            UnassignedBehindFirmwareWindow { address, slot, bridge } => write!(
                f,
                "{address}: BAR{slot} is unassigned behind bridge {bridge}, whose window the firmware set; cannot place it"
            ),
            BusNumbersExhausted { bridge } => {
                write!(f, "bridge {bridge}: no bus number left for its secondary bus")
            }
            BehindRefusedBridge { address, bridge } => {
                write!(f, "{address}: behind refused bridge {bridge}")
            }
            UnassignedUnderOtherRoot { address, slot, root } => write!(
                f,
                "{address}: BAR{slot} is unassigned under root bus {root:02x}, whose windows only the firmware knows; not probed"
            ),
            BridgeNotNumberedUnderOtherRoot { bridge, root } => write!(
                f,
                "bridge {bridge} under root bus {root:02x} has no bus numbers from the firmware; nothing behind it is scanned"
            ),
            BarIndex { address, slot, count } => {
                write!(f, "{address}: BAR{slot} does not exist, this header has {count} BARs")
            }
            CapabilityPointer { address, pointer } => {
                write!(f, "{address}: capability pointer {pointer:#04x} is outside 0x40..=0xfc")
            }
            CapabilityLoop { address, offset } => {
                write!(f, "{address}: capability list loops back to offset {offset:#04x}")
            }
            CapabilityOverrun {
                address,
                offset,
                id,
                len,
            } => write!(
                f,
                "{address}: capability {id:#04x} at {offset:#04x} needs {len} bytes, past the end of configuration space"
            ),
            CapabilityCapacity { address, capacity } => {
                write!(f, "{address}: more than {capacity} capabilities")
            }
            MsixBir { address, bir } => {
                write!(
                    f,
                    "{address}: MSI-X structure in BAR{bir}, which is not a memory BAR of this function"
                )
            }
            MsixOutOfBar {
                address,
                bir,
                offset,
                len,
                bar_size,
            } => write!(
                f,
                "{address}: MSI-X structure at BAR{bir}+{offset:#x} ({len} bytes) runs past the BAR's {bar_size:#x} bytes"
            ),
            MsixEntryIndex { index, table_size } => {
                write!(f, "MSI-X entry {index} is beyond the table of {table_size} entries")
            }
            MsiVectorCount { requested, capable } => write!(
                f,
                "MSI cannot provide {requested} vectors: accepted a power of two from 1 to {capable}"
            ),
            ApicIdNeedsRemapping { apic_id } => write!(
                f,
                "APIC id {apic_id} does not fit the 8-bit xAPIC MSI destination (0..=255); it needs interrupt remapping"
            ),
            ExceptionVector { vector } => {
                write!(
                    f,
                    "vector {vector:#04x} is a CPU exception vector; device vectors must be 0x20..=0xff"
                )
            }
            NoInterruptSource { address } => write!(f, "{address}: no MSI-X, no MSI and no INTx pin"),
            ModeUnavailable { address, mode } => write!(f, "{address}: interrupt mode {mode} is not offered"),
            IntxLine { address, line } => {
                write!(
                    f,
                    "{address}: interrupt line {line:#04x} is not a routable IRQ (0..=0xfe)"
                )
            }
            NoIoApicForGsi { gsi } => write!(f, "no I/O APIC in the MADT covers GSI {gsi}"),
            VectorsExhausted { requested } => {
                write!(f, "no block of {requested} free interrupt vectors is left")
            }
            VectorNotAllocatable { vector, first, last } => write!(
                f,
                "vector {vector:#04x} is outside the allocatable range {first:#04x}..={last:#04x}"
            ),
            VectorInUse { vector } => write!(f, "vector {vector:#04x} is already in use"),
            VectorNotAllocated { vector } => write!(f, "vector {vector:#04x} is not allocated"),
            HandlerPresent { vector } => write!(f, "vector {vector:#04x} already has a handler"),
            NoHandler { vector } => write!(f, "vector {vector:#04x} has no handler"),
            CpuOutOfRange { cpu, limit } => {
                write!(f, "CPU {cpu} is out of range: accepted 0..{limit}")
            }
            AffinityParse { token, reason } => write!(
                f,
                "irq.affinity: bad token \"{}\": {reason}; {AFFINITY_FORMS}",
                token.as_str()
            ),
            AffinityCapacity { capacity } => {
                write!(f, "irq.affinity lists more than {capacity} vector:cpu pairs")
            }
            Aml {
                at,
                offset,
                what,
                value,
            } => {
                write!(f, "AML {} at byte {offset:#x}: {what} ({value:#x})", at.as_str())
            }
        }
    }
}

impl core::error::Error for Error {}

/// Shorthand used throughout the crate.
pub type Result<T> = core::result::Result<T, Error>;
