//! Reads the text Linux's `acpidump` prints (one hex dump per table) and
//! rebuilds the tables in a fake physical memory with a fresh RSDP and XSDT,
//! so the kernel's own `platform::acpi` code can walk them on the host.
//!
//! The format: a header line `SIG @ 0xADDRESS`, then lines
//! `    OFFSET: HH HH ... (up to 16 bytes)  ASCII`, then a blank line. The
//! addresses in shared dumps are often zeroed, so tables are placed anew.

use std::collections::BTreeMap;

use platform::acpi::{AcpiTables, PhysMemory, Rsdp};

/// One table from the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedTable {
    /// The name on the header line (`APIC`, `SSDT`, `RSDP`, ...).
    pub name: String,
    /// 1-based line of the header, for messages.
    pub line: usize,
    pub bytes: Vec<u8>,
}

impl DumpedTable {
    /// The signature bytes (the first four bytes; "RSD " for the RSDP).
    pub fn signature(&self) -> [u8; 4] {
        let mut sig = [0u8; 4];
        for (out, b) in sig.iter_mut().zip(&self.bytes) {
            *out = *b;
        }
        sig
    }

    /// The table's own length field (bytes 4..8), if it has a header.
    pub fn length_field(&self) -> Option<u32> {
        self.bytes
            .get(4..8)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Message prefixes of ACPICA's own diagnostics, which collected dumps
/// carry between tables (acpidump prints them while reading the tables).
const DIAGNOSTIC_PREFIXES: [&str; 4] = ["Firmware Warning", "Firmware Error", "ACPI Warning", "ACPI Error"];

/// A parsed dump: its tables and the ACPICA diagnostics found between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    pub tables: Vec<DumpedTable>,
    pub diagnostics: Vec<String>,
}

/// A table header's name as acpidump versions spell it: the RSDP is `RSDP` in current ones,
/// `RSD PTR` or its four-byte signature padded with a space (`RSD  @ 0x...`) in older ones.
fn table_name(name: &str) -> &str {
    match name.trim_end() {
        "RSD" | "RSD PTR" => "RSDP",
        name => name,
    }
}

/// Whether `line` has the shape of a table header, `NAME @ 0xADDRESS` (the name not checked).
fn is_table_header(line: &str) -> bool {
    line.split_once(" @ ")
        .is_some_and(|(name, rest)| !name.trim().is_empty() && rest.trim_start().starts_with("0x"))
}

/// Whether `text` starts as acpidump's output does: its first line, past blank ones and ACPICA's
/// diagnostics (which acpidump prints while it reads the tables), is a table header.
pub fn looks_like_a_dump(text: &str) -> bool {
    text.lines()
        .find(|l| !l.trim().is_empty() && !DIAGNOSTIC_PREFIXES.iter().any(|p| l.starts_with(p)))
        .is_some_and(is_table_header)
}

/// Parses `acpidump` text. Each table's offsets must run on without gaps,
/// and a table with an SDT header must hold exactly the bytes its length
/// field names (a cut-off dump is an error, not a shorter table). Any other
/// line is an error, except ACPICA diagnostics, which are kept as such.
pub fn parse(text: &str) -> Result<Dump, String> {
    let mut tables: Vec<DumpedTable> = Vec::new();
    let mut diagnostics = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        if DIAGNOSTIC_PREFIXES.iter().any(|p| line.starts_with(p)) {
            diagnostics.push(format!("line {line_no}: {line}"));
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            let (name, _) = line
                .split_once(" @ ")
                .ok_or_else(|| format!("line {line_no}: expected `NAME @ 0xADDRESS` or a hex line, found {line:?}"))?;
            let name = table_name(name);
            if !is_table_header(line) || name.is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("line {line_no}: malformed table header {line:?}"));
            }
            tables.push(DumpedTable {
                name: name.to_string(),
                line: line_no,
                bytes: Vec::new(),
            });
            continue;
        }
        let table = tables
            .last_mut()
            .ok_or_else(|| format!("line {line_no}: hex data before any `NAME @ 0x...` header"))?;
        let (offset, rest) = line
            .trim_start()
            .split_once(':')
            .ok_or_else(|| format!("line {line_no}: expected `OFFSET: HH HH ...`, found {line:?}"))?;
        let offset = usize::from_str_radix(offset, 16)
            .map_err(|_| format!("line {line_no}: offset {offset:?} is not hexadecimal"))?;
        if offset != table.bytes.len() {
            return Err(format!(
                "line {line_no}: table {} continues at offset {offset:#x}, expected {:#x}",
                table.name,
                table.bytes.len()
            ));
        }
        // Up to 16 two-digit groups separated by single spaces; the ASCII
        // column follows after two spaces and is ignored.
        let hex = rest.strip_prefix(' ').unwrap_or(rest);
        let hex = hex.split("  ").next().unwrap_or("");
        let mut count = 0;
        for group in hex.split(' ').filter(|g| !g.is_empty()) {
            let byte = (group.len() == 2)
                .then(|| u8::from_str_radix(group, 16).ok())
                .flatten()
                .ok_or_else(|| format!("line {line_no}: {group:?} is not a hex byte"))?;
            table.bytes.push(byte);
            count += 1;
        }
        if count == 0 || count > 16 {
            return Err(format!("line {line_no}: {count} bytes on a line (1 to 16 expected)"));
        }
    }
    if tables.is_empty() {
        return Err("no tables in the dump (expected `NAME @ 0x...` headers)".into());
    }
    for table in &tables {
        if table.name == "RSDP" {
            continue;
        }
        match table.length_field() {
            Some(length) if length as usize == table.bytes.len() => {}
            Some(length) => {
                return Err(format!(
                    "table {} (line {}): its length field says {length} bytes, the dump holds {}",
                    table.name,
                    table.line,
                    table.bytes.len()
                ));
            }
            None => {
                return Err(format!(
                    "table {} (line {}): {} bytes, shorter than a table header",
                    table.name,
                    table.line,
                    table.bytes.len()
                ));
            }
        }
    }
    Ok(Dump { tables, diagnostics })
}

/// Physical memory made of disjoint byte regions.
#[derive(Debug, Default, Clone)]
pub struct RebuiltMemory {
    regions: BTreeMap<u64, Vec<u8>>,
}

impl PhysMemory for RebuiltMemory {
    fn read_bytes(&self, phys: u64, out: &mut [u8]) -> platform::Result<()> {
        let error = platform::Error::PhysRead { phys, len: out.len() };
        let (&base, bytes) = self.regions.range(..=phys).next_back().ok_or(error.clone())?;
        let start = usize::try_from(phys - base).map_err(|_| error.clone())?;
        let source = start
            .checked_add(out.len())
            .and_then(|end| bytes.get(start..end))
            .ok_or(error)?;
        out.copy_from_slice(source);
        Ok(())
    }
}

/// Where the rebuilt tables go: page-aligned, one after another, from 256 MiB.
const FIRST_TABLE_AT: u64 = 0x1000_0000;
/// Tables that firmware does not list in the XSDT (the root tables
/// themselves, the FACS which has no checksum, the DSDT reached through the FADT).
const NOT_LISTED: [&[u8; 4]; 4] = [b"RSDT", b"XSDT", b"FACS", b"DSDT"];

fn fix_checksum(bytes: &mut [u8], at: usize) {
    bytes[at] = 0;
    let sum = bytes.iter().fold(0u8, |s, &b| s.wrapping_add(b));
    bytes[at] = sum.wrapping_neg();
}

/// The rebuilt firmware: memory holding the tables and an XSDT, and the
/// RSDP (ACPI 2.0) that names it.
pub struct Rebuilt {
    pub memory: RebuiltMemory,
    pub rsdp: Rsdp,
    /// Signatures listed in the XSDT, in dump order.
    pub listed: Vec<String>,
}

/// Places every table except those in [`NOT_LISTED`] and the RSDP, and
/// writes an XSDT and an RSDP for them (the dump's own root tables may
/// point at zeroed addresses).
pub fn rebuild(tables: &[DumpedTable]) -> Rebuilt {
    let mut memory = RebuiltMemory::default();
    let mut at = FIRST_TABLE_AT;
    let mut addresses = Vec::new();
    let mut listed = Vec::new();
    for table in tables {
        let sig = table.signature();
        if table.name == "RSDP" || sig == *b"RSD " || NOT_LISTED.contains(&&sig) {
            continue;
        }
        memory.regions.insert(at, table.bytes.clone());
        addresses.push(at);
        listed.push(String::from_utf8_lossy(&sig).into_owned());
        at += (table.bytes.len() as u64).div_ceil(0x1000).max(1) * 0x1000;
    }
    place_dsdt(tables, &mut memory, &mut at);
    let mut xsdt = Vec::new();
    xsdt.extend_from_slice(b"XSDT");
    xsdt.extend_from_slice(&((36 + 8 * addresses.len()) as u32).to_le_bytes());
    xsdt.push(1);
    xsdt.push(0);
    xsdt.extend_from_slice(b"BAREMQ"); // OEM id
    xsdt.extend_from_slice(b"PREFLITE"); // OEM table id
    xsdt.extend_from_slice(&[0; 12]); // OEM revision, creator id and revision
    assert_eq!(xsdt.len(), 36);
    for address in &addresses {
        xsdt.extend_from_slice(&address.to_le_bytes());
    }
    fix_checksum(&mut xsdt, 9);
    let xsdt_at = at;
    memory.regions.insert(xsdt_at, xsdt);

    let mut rsdp = Vec::new();
    rsdp.extend_from_slice(b"RSD PTR ");
    rsdp.push(0);
    rsdp.extend_from_slice(b"BAREMQ");
    rsdp.push(2);
    rsdp.extend_from_slice(&0u32.to_le_bytes());
    rsdp.extend_from_slice(&36u32.to_le_bytes());
    rsdp.extend_from_slice(&xsdt_at.to_le_bytes());
    rsdp.extend_from_slice(&[0; 4]);
    {
        let (v1, _) = rsdp.split_at_mut(20);
        fix_checksum(v1, 8);
    }
    fix_checksum(&mut rsdp, 32);
    let rsdp = Rsdp::parse(&rsdp).expect("the RSDP built here is well formed");
    Rebuilt { memory, rsdp, listed }
}

/// FADT offsets of the 32-bit `DSDT` and 64-bit `X_DSDT` pointers.
const FADT_DSDT: usize = 40;
const FADT_X_DSDT: usize = 140;

/// Places the dump's DSDT after the listed tables and points the FADT at it
/// (`X_DSDT` when the FADT is long enough to have it, `DSDT` too), fixing
/// the FADT's checksum. Without a DSDT or FADT nothing changes.
fn place_dsdt(tables: &[DumpedTable], memory: &mut RebuiltMemory, at: &mut u64) {
    let Some(dsdt) = tables.iter().find(|t| t.signature() == *b"DSDT") else {
        return;
    };
    let Some((&fadt_at, fadt)) = memory.regions.iter_mut().find(|(_, bytes)| bytes.starts_with(b"FACP")) else {
        return;
    };
    let dsdt_at = *at;
    if fadt.len() >= FADT_DSDT + 4 {
        fadt[FADT_DSDT..FADT_DSDT + 4].copy_from_slice(&(dsdt_at as u32).to_le_bytes());
    }
    if fadt.len() >= FADT_X_DSDT + 8 {
        fadt[FADT_X_DSDT..FADT_X_DSDT + 8].copy_from_slice(&dsdt_at.to_le_bytes());
    }
    fix_checksum(fadt, 9);
    let _ = fadt_at;
    memory.regions.insert(dsdt_at, dsdt.bytes.clone());
    *at += (dsdt.bytes.len() as u64).div_ceil(0x1000).max(1) * 0x1000;
}

impl Rebuilt {
    /// The kernel's table walker over the rebuilt tables.
    pub fn tables(&self) -> platform::Result<AcpiTables<&RebuiltMemory>> {
        AcpiTables::new(&self.memory, &self.rsdp)
    }
}
