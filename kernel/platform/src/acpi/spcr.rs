//! SPCR parsing: the Serial Port Console Redirection table, which names the
//! UART the firmware and the BMC's serial-over-LAN use.
//!
//! Layout (Microsoft's SPCR specification, revisions 1-4): after the 36-byte
//! header, the interface type (offset 36), a Generic Address Structure for the
//! registers (40), interrupt type, IRQ and GSI (52-57), a baud-rate code (58),
//! parity, stop bits, flow control, terminal type, language (59-63), the PCI
//! device/vendor id, bus, device, function, flags and segment (64-75), the
//! UART clock in Hz (76, revision 3+) and a precise baud rate (80, revision 4+).
//!
//! Real tables are often incomplete: Dell's and HP's in the corpus carry a
//! base address of zero ([`Spcr::is_empty`]), and HP's ask for 9600 baud.

use super::{PhysMemory, Sdt};
use crate::error::{Error, Result, TableSignature};

/// "SPCR".
pub const SPCR_SIGNATURE: TableSignature = TableSignature(*b"SPCR");
/// Length of a revision 1/2 table (every field up to the UART clock's slot).
pub const SPCR_MIN_LEN: u32 = 80;

const INTERFACE_TYPE: u32 = 36;
const BASE_ADDRESS: u32 = 40;
const INTERRUPT_TYPE: u32 = 52;
const IRQ: u32 = 53;
const GSI: u32 = 54;
const BAUD_CODE: u32 = 58;
const PCI_DEVICE_ID: u32 = 64;
const PCI_BUS: u32 = 68;
const PCI_SEGMENT: u32 = 75;
const UART_CLOCK: u32 = 76;
const PRECISE_BAUD: u32 = 80;

/// GAS address space ids.
const SPACE_MEMORY: u8 = 0;
const SPACE_IO: u8 = 1;

/// Interface types whose register set is a 16550 (or its 16450 subset).
const INTERFACE_16550: u8 = 0x00;
const INTERFACE_16450: u8 = 0x01;
const INTERFACE_16550_GAS: u8 = 0x12;

/// Where the UART's registers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpcrRegisters {
    /// Base address zero: the table names no UART (only baud and interrupt).
    Absent,
    /// Port I/O; the eight registers are at `port..port + 8`.
    Io { port: u16 },
    /// Memory-mapped; register `n` is at `address + n * access_bytes` and is
    /// accessed with that width (1, 2 or 4 bytes).
    Mmio { address: u64, access_bytes: u8 },
}

/// The PCI function of a PCI UART (when the table's device id is not 0xFFFF).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpcrPci {
    pub segment: u8,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
    pub vendor_id: u16,
    pub device_id: u16,
}

/// The parsed SPCR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spcr {
    /// Table revision.
    pub revision: u8,
    /// Interface type byte (0 = 16550, 1 = 16450, 0x12 = 16550 described by the GAS; others are
    /// ARM, SPI, etc. UARTs, see [`Spcr::is_16550_compatible`]).
    pub interface_type: u8,
    pub registers: SpcrRegisters,
    /// Interrupt type bits (bit 0 PC-AT PIC, bit 1 I/O APIC, ...).
    pub interrupt_type: u8,
    pub irq: u8,
    pub gsi: u32,
    /// Bits per second; `None` is "as is": keep what the firmware programmed.
    pub baud: Option<u32>,
    /// The UART's input clock in Hz (revision 3+, nonzero); `None`: the PC's 1.8432 MHz.
    pub uart_clock_hz: Option<u32>,
    pub pci: Option<SpcrPci>,
}

impl Spcr {
    /// Parses a validated table (header, length and checksum checked by [`Sdt::load`]).
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Spcr> {
        table.expect(SPCR_SIGNATURE, SPCR_MIN_LEN)?;
        let byte = |offset: u32| -> Result<u8> {
            let mut b = [0u8; 1];
            table.read(memory, offset, &mut b)?;
            Ok(b[0])
        };
        let u16_at = |offset: u32| -> Result<u16> {
            let mut b = [0u8; 2];
            table.read(memory, offset, &mut b)?;
            Ok(u16::from_le_bytes(b))
        };
        let mut gas = [0u8; 12];
        table.read(memory, BASE_ADDRESS, &mut gas)?;
        let registers = parse_registers(&gas)?;
        let baud = match byte(BAUD_CODE)? {
            0 => None,
            3 => Some(9600),
            4 => Some(19_200),
            6 => Some(57_600),
            7 => Some(115_200),
            code => {
                return Err(Error::SpcrValue {
                    field: "baud-rate code",
                    value: u64::from(code),
                });
            }
        };
        // Revision 4 may give any rate; it wins over the code when set.
        let precise_baud = if table.revision >= 4 && table.length >= PRECISE_BAUD + 4 {
            Some(table.read_u32(memory, PRECISE_BAUD)?).filter(|&b| b != 0)
        } else {
            None
        };
        let uart_clock_hz = if table.revision >= 3 {
            Some(table.read_u32(memory, UART_CLOCK)?).filter(|&hz| hz != 0)
        } else {
            None
        };
        let device_id = u16_at(PCI_DEVICE_ID)?;
        let vendor_id = u16_at(PCI_DEVICE_ID + 2)?;
        let pci = if device_id == 0xFFFF || vendor_id == 0xFFFF {
            None
        } else {
            let (device, function) = (byte(PCI_BUS + 1)?, byte(PCI_BUS + 2)?);
            if device > 31 || function > 7 {
                return Err(Error::SpcrValue {
                    field: "PCI device/function",
                    value: u64::from(device) << 8 | u64::from(function),
                });
            }
            Some(SpcrPci {
                segment: byte(PCI_SEGMENT)?,
                bus: byte(PCI_BUS)?,
                device,
                function,
                vendor_id,
                device_id,
            })
        };
        Ok(Spcr {
            revision: table.revision,
            interface_type: byte(INTERFACE_TYPE)?,
            registers,
            interrupt_type: byte(INTERRUPT_TYPE)?,
            irq: byte(IRQ)?,
            gsi: table.read_u32(memory, GSI)?,
            baud: precise_baud.or(baud),
            uart_clock_hz,
            pci,
        })
    }

    /// The table names no UART registers (base address zero): the console must be found otherwise.
    pub fn is_empty(&self) -> bool {
        self.registers == SpcrRegisters::Absent
    }

    /// Whether the interface type is a 16550-style register set this kernel can drive.
    pub fn is_16550_compatible(&self) -> bool {
        matches!(
            self.interface_type,
            INTERFACE_16550 | INTERFACE_16450 | INTERFACE_16550_GAS
        )
    }

    /// A short name for the interface type.
    pub fn interface_name(&self) -> &'static str {
        match self.interface_type {
            INTERFACE_16550 => "16550",
            INTERFACE_16450 => "16450",
            INTERFACE_16550_GAS => "16550 (GAS)",
            0x03 => "ARM PL011",
            0x0E => "ARM SBSA generic",
            _ => "unsupported UART type",
        }
    }
}

/// Reads the 12-byte Generic Address Structure of the registers.
fn parse_registers(gas: &[u8; 12]) -> Result<SpcrRegisters> {
    let (space, bit_width, access_size) = (gas[0], gas[1], gas[3]);
    let mut address = [0u8; 8];
    address.copy_from_slice(&gas[4..12]);
    let address = u64::from_le_bytes(address);
    if address == 0 {
        return Ok(SpcrRegisters::Absent);
    }
    match space {
        SPACE_IO => {
            // Eight byte-wide registers must fit below the end of the I/O space.
            let port = u16::try_from(address)
                .ok()
                .filter(|p| *p <= 0xFFF8)
                .ok_or(Error::SpcrValue {
                    field: "I/O port",
                    value: address,
                })?;
            Ok(SpcrRegisters::Io { port })
        }
        SPACE_MEMORY => {
            // Access size 0 is "legacy": the register bit width decides (Linux does the same).
            let access_bytes = match (access_size, bit_width) {
                (1, _) | (0, 0 | 8) => 1,
                (2, _) | (0, 16) => 2,
                (3, _) | (0, 32) => 4,
                _ => {
                    return Err(Error::SpcrValue {
                        field: "MMIO access width",
                        value: u64::from(if access_size == 0 { bit_width } else { access_size }),
                    });
                }
            };
            if address
                .checked_add(8 * u64::from(access_bytes))
                .is_none_or(|end| end > super::PHYS_ADDRESS_LIMIT)
            {
                return Err(Error::SpcrValue {
                    field: "MMIO address",
                    value: address,
                });
            }
            Ok(SpcrRegisters::Mmio { address, access_bytes })
        }
        other => Err(Error::SpcrValue {
            field: "address space id",
            value: u64::from(other),
        }),
    }
}
