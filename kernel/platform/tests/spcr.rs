//! SPCR parsing against the tables of real servers (copied from the acpidump
//! text in `tests/acpi-corpus/`), hand-built tables for every register
//! kind, the table the QEMU console scenarios load, and hostile inputs.

mod common;

use common::{FakePhys, checksum_fix, firmware, qemu_madt, sdt, xsdt_body};
use platform::Error;
use platform::acpi::{AcpiTables, RootKind, Rsdp, SPCR_SIGNATURE, Sdt, SliceMemory, Spcr, SpcrPci, SpcrRegisters};

/// Bytes from the hex rows of an acpidump table ("53 50 43 52 ...").
fn from_dump(rows: &[&str]) -> Vec<u8> {
    rows.iter()
        .flat_map(|row| row.split_whitespace())
        .map(|byte| u8::from_str_radix(byte, 16).expect("hex byte"))
        .collect()
}

/// Dell PowerEdge R820 (`PowerEdge_R820_E5985CCBA349.acpidump`): no address, baud "as is".
const DELL_R820: &[&str] = &[
    "53 50 43 52 50 00 00 00 01 EB 44 45 4C 4C 20 20",
    "50 45 5F 53 43 33 20 20 01 00 00 00 44 45 4C 4C",
    "01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    "00 00 00 00 03 04 04 00 00 00 00 00 01 02 01 00",
    "FF FF FF FF 00 00 00 00 00 00 00 00 00 00 00 00",
];
/// HP ProLiant DL165 G7 (`ProLiant_DL165_G7_1979FBF2D488.acpidump`): no address, 9600 baud, IRQ 3.
const HP_DL165: &[&str] = &[
    "53 50 43 52 50 00 00 00 01 2B 48 50 20 20 20 20",
    "50 72 6F 4C 69 61 6E 74 02 02 12 20 4D 53 46 54",
    "97 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    "00 00 00 00 01 03 00 00 00 00 03 00 01 00 00 00",
    "FF FF FF FF 00 00 00 00 00 00 00 00 00 00 00 00",
];
/// HP ProLiant DL360 G7 (`ProLiant_DL360_G7_60DCEE46526A.acpidump`): no address, 9600 baud, IRQ 4.
const HP_DL360: &[&str] = &[
    "53 50 43 52 50 00 00 00 01 C8 48 50 20 20 20 20",
    "53 50 43 52 52 42 53 55 01 00 00 00 D2 04 00 00",
    "2E 16 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    "00 00 00 00 01 04 00 00 00 00 03 00 01 03 00 00",
    "FF FF FF FF 00 00 00 00 00 00 00 00 00 00 00 00",
];

const AT: u64 = 0x7FE_0000;

fn parse(bytes: &[u8]) -> platform::Result<Spcr> {
    let memory = SliceMemory::new(AT, bytes);
    let table = Sdt::load(&memory, AT, Some(SPCR_SIGNATURE), 36)?;
    Spcr::parse(&memory, &table)
}

/// The 44 bytes after the header of a revision 1/2 table, with `edit` applied.
fn body(edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut body = vec![0u8; 44];
    // Offsets below are table offsets; the body starts at 36.
    body[64 - 36..68 - 36].copy_from_slice(&[0xFF; 4]); // not a PCI UART
    edit(&mut body);
    body
}

fn gas(body: &mut [u8], space: u8, bit_width: u8, access: u8, address: u64) {
    body[4] = space;
    body[5] = bit_width;
    body[7] = access;
    body[8..16].copy_from_slice(&address.to_le_bytes());
}

#[test]
fn real_servers_tables_are_empty_with_their_baud_rates() {
    let dell = parse(&from_dump(DELL_R820)).unwrap();
    assert!(dell.is_empty() && dell.is_16550_compatible());
    assert_eq!((dell.baud, dell.irq, dell.gsi, dell.pci), (None, 4, 4, None));
    let dl165 = parse(&from_dump(HP_DL165)).unwrap();
    assert!(dl165.is_empty());
    assert_eq!((dl165.baud, dl165.irq, dl165.interrupt_type), (Some(9600), 3, 1));
    let dl360 = parse(&from_dump(HP_DL360)).unwrap();
    assert!(dl360.is_empty());
    assert_eq!((dl360.baud, dl360.irq, dl360.revision), (Some(9600), 4, 1));
    // Revision 1 tables carry no UART clock even though the slot is there.
    assert_eq!(dl360.uart_clock_hz, None);
}

#[test]
fn corpus_copies_match_the_dumps() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/acpi-corpus");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the ACPI corpus {} is part of the repository: {e}", dir.display()));
    let mut found = 0;
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if !line.starts_with("SPCR @") {
                continue;
            }
            let rows: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.trim().is_empty())
                .map(|l| l.split_once(": ").expect("offset: bytes").1.get(..47).unwrap_or(""))
                .collect();
            let bytes = from_dump(&rows);
            let name = entry.file_name().to_string_lossy().into_owned();
            let copy = [DELL_R820, HP_DL165, HP_DL360]
                .into_iter()
                .map(from_dump)
                .find(|c| c[..] == bytes[..]);
            assert!(copy.is_some(), "{name}: its SPCR is not among the embedded copies");
            parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            found += 1;
        }
    }
    assert_eq!(found, 3, "the corpus README lists three SPCR tables");
}

#[test]
fn io_port_uart() {
    let table = sdt(
        b"SPCR",
        2,
        &body(|b| {
            gas(b, 1, 8, 1, 0x2F8);
            b[58 - 36] = 7;
        }),
    );
    let spcr = parse(&table).unwrap();
    assert_eq!(spcr.registers, SpcrRegisters::Io { port: 0x2F8 });
    assert_eq!((spcr.baud, spcr.interface_name()), (Some(115_200), "16550"));
}

#[test]
fn mmio_uart_with_access_width_and_clock() {
    // Revision 3: 32-bit registers 4 bytes apart, a 48 MHz clock, on PCI 0001:02:03.4.
    let table = sdt(
        b"SPCR",
        3,
        &body(|b| {
            b[0] = 0x12;
            gas(b, 0, 32, 3, 0xFE03_2000);
            b[58 - 36] = 0;
            b[64 - 36..68 - 36].copy_from_slice(&[0x34, 0x12, 0x86, 0x80]);
            b[68 - 36..71 - 36].copy_from_slice(&[2, 3, 4]);
            b[75 - 36] = 1;
            b[76 - 36..80 - 36].copy_from_slice(&48_000_000u32.to_le_bytes());
        }),
    );
    let spcr = parse(&table).unwrap();
    assert_eq!(
        spcr.registers,
        SpcrRegisters::Mmio {
            address: 0xFE03_2000,
            access_bytes: 4
        }
    );
    assert!(spcr.is_16550_compatible() && !spcr.is_empty());
    assert_eq!((spcr.baud, spcr.uart_clock_hz), (None, Some(48_000_000)));
    assert_eq!(
        spcr.pci,
        Some(SpcrPci {
            segment: 1,
            bus: 2,
            device: 3,
            function: 4,
            vendor_id: 0x8086,
            device_id: 0x1234
        })
    );
    // Legacy access size 0: the register bit width decides.
    let legacy = sdt(b"SPCR", 2, &body(|b| gas(b, 0, 8, 0, 0xFED0_0000)));
    assert_eq!(
        parse(&legacy).unwrap().registers,
        SpcrRegisters::Mmio {
            address: 0xFED0_0000,
            access_bytes: 1
        }
    );
}

#[test]
fn revision_4_precise_baud_wins_over_the_code() {
    let mut b = body(|b| {
        gas(b, 1, 8, 1, 0x3F8);
        b[58 - 36] = 7;
    });
    b.extend_from_slice(&1_500_000u32.to_le_bytes());
    b.extend_from_slice(&[0u8; 4]);
    assert_eq!(parse(&sdt(b"SPCR", 4, &b)).unwrap().baud, Some(1_500_000));
    // The same bytes under revision 2 ignore the extra field.
    assert_eq!(parse(&sdt(b"SPCR", 2, &b)).unwrap().baud, Some(115_200));
}

#[test]
fn other_uart_types_are_parsed_but_not_compatible() {
    let table = sdt(
        b"SPCR",
        2,
        &body(|b| {
            b[0] = 0x03;
            gas(b, 0, 32, 3, 0x9000_0000);
        }),
    );
    let spcr = parse(&table).unwrap();
    assert!(!spcr.is_16550_compatible());
    assert_eq!(spcr.interface_name(), "ARM PL011");
}

/// A change to a table body.
type BodyEdit = dyn Fn(&mut [u8]);

#[test]
fn hostile_tables_are_refused_with_the_field() {
    let cases: [(&str, Box<BodyEdit>); 6] = [
        ("baud-rate code", Box::new(|b| b[58 - 36] = 5)),
        ("address space id", Box::new(|b| gas(b, 2, 8, 1, 0xCF8))),
        ("I/O port", Box::new(|b| gas(b, 1, 8, 1, 0x1_0000))),
        ("MMIO access width", Box::new(|b| gas(b, 0, 64, 4, 0xFE00_0000))),
        ("MMIO address", Box::new(|b| gas(b, 0, 8, 1, u64::MAX - 3))),
        (
            "PCI device/function",
            Box::new(|b| {
                b[64 - 36..68 - 36].copy_from_slice(&[1, 0, 0x86, 0x80]);
                b[69 - 36] = 32;
            }),
        ),
    ];
    for (field, edit) in cases {
        let table = sdt(
            b"SPCR",
            2,
            &body(|b| {
                gas(b, 1, 8, 1, 0x3F8);
                edit(b);
            }),
        );
        match parse(&table) {
            Err(Error::SpcrValue { field: got, .. }) => assert_eq!(got, field),
            other => panic!("{field}: {other:?}"),
        }
        let message = parse(&table).unwrap_err().to_string();
        assert!(message.starts_with("SPCR: ") && message.contains(field), "{message}");
    }
    // Too short for the fixed fields; a broken checksum.
    assert!(matches!(
        parse(&sdt(b"SPCR", 2, &[0u8; 20])),
        Err(Error::TableLength { min: 80, .. })
    ));
    let mut table = sdt(b"SPCR", 2, &body(|_| {}));
    table[40] ^= 1;
    assert!(matches!(parse(&table), Err(Error::TableChecksum { .. })));
    checksum_fix(&mut table, 9);
    assert!(parse(&table).is_ok());
}

#[test]
fn found_through_the_root_table_or_absent() {
    let memory = firmware(qemu_madt(1), None);
    let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
    let tables = AcpiTables::new(&memory, &rsdp).unwrap();
    assert_eq!(tables.spcr(), Ok(None));

    // An XSDT listing an SPCR: found and parsed.
    let (xsdt_at, spcr_at) = (0x10_0000u64, 0x10_1000u64);
    let mut memory = FakePhys::new();
    memory.place(xsdt_at, sdt(b"XSDT", 1, &xsdt_body(&[spcr_at])));
    memory.place(spcr_at, sdt(b"SPCR", 2, &body(|b| gas(b, 1, 8, 1, 0x2F8))));
    let tables = AcpiTables::from_root(&memory, xsdt_at, RootKind::Xsdt).unwrap();
    let spcr = tables.spcr().unwrap().expect("listed");
    assert_eq!(spcr.registers, SpcrRegisters::Io { port: 0x2F8 });
    // A listed SPCR that fails validation is an error, not "absent".
    memory.poke(spcr_at + 40, &[0xEE]);
    let tables = AcpiTables::from_root(&memory, xsdt_at, RootKind::Xsdt).unwrap();
    assert!(matches!(tables.spcr(), Err(Error::TableChecksum { .. })));
}

#[test]
fn the_qemu_scenario_tables() {
    let empty = parse(include_bytes!("../../../tests/data/spcr-no-address-115200.bin")).unwrap();
    assert!(empty.is_empty() && empty.is_16550_compatible());
    assert_eq!((empty.baud, empty.irq), (Some(115_200), 4));
    // Both are loaded by tests/console.scenarios through `-acpitable file=`.
    let bytes = include_bytes!("../../../tests/data/spcr-com2.bin");
    let spcr = parse(bytes).unwrap();
    assert_eq!(spcr.registers, SpcrRegisters::Io { port: 0x2F8 });
    assert_eq!((spcr.baud, spcr.pci, spcr.revision), (Some(57_600), None, 2));
}
