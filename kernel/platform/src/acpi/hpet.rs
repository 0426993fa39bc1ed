//! The HPET table and the HPET's capability register: where the timer block
//! is and how fast its main counter runs.

use super::tables::{AddressSpace, Fields, GenericAddress, table_bytes};
use super::{PhysMemory, Sdt};
use crate::error::{Error, Result, TableSignature};

/// Header (36) + block id (4) + base address GAS (12) + number (1) + minimum tick (2) + page protection (1).
const HPET_TABLE_LEN: u32 = 56;
/// Register offsets in the timer block (IA-PC HPET specification 1.0a).
pub const HPET_CAPABILITIES: usize = 0x000;
pub const HPET_CONFIG: usize = 0x010;
pub const HPET_MAIN_COUNTER: usize = 0x0F0;
/// Bytes of the register block to map.
pub const HPET_REGISTER_BYTES: usize = 0x400;
/// The specification's slowest allowed period: 100 ns (10 MHz at the least).
pub const HPET_MAX_PERIOD_FS: u32 = 100_000_000;

/// The parsed HPET table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hpet {
    /// Physical address of the register block (memory space, checked).
    pub base: u64,
    /// Event timer block id: PCI vendor id in bits 31:16, counter size bit 13.
    pub block_id: u32,
    /// HPET sequence number.
    pub number: u8,
    /// Minimum clock ticks for periodic mode without lost interrupts.
    pub minimum_tick: u16,
}

impl Hpet {
    /// Parses a validated HPET table; the base must be a non-zero memory address.
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Hpet> {
        table.expect(TableSignature::HPET, HPET_TABLE_LEN)?;
        let bytes = table_bytes(memory, table)?;
        let fields = Fields::new(TableSignature::HPET, &bytes);
        let gas: GenericAddress = fields.gas(40)?;
        if gas.space != AddressSpace::Memory || gas.address == 0 {
            return Err(Error::HpetAddress {
                space: gas.space.name(),
                address: gas.address,
            });
        }
        Ok(Hpet {
            base: gas.address,
            block_id: fields.u32(36)?,
            number: fields.u8(52)?,
            minimum_tick: fields.u16(53)?,
        })
    }

    /// The PCI vendor id of the timer block.
    pub fn vendor_id(&self) -> u16 {
        (self.block_id >> 16) as u16
    }
}

/// The main counter's rate from the general capabilities register
/// (period in femtoseconds in bits 63:32), or an error for a period of 0 or
/// one slower than the specification allows (a block that reads all-ones or
/// zero is not an HPET).
pub fn hpet_counter_hz(capabilities: u64) -> Result<u64> {
    let period_fs = (capabilities >> 32) as u32;
    if period_fs == 0 || period_fs > HPET_MAX_PERIOD_FS {
        return Err(Error::HpetPeriod { period_fs });
    }
    Ok(1_000_000_000_000_000 / u64::from(period_fs))
}

/// Whether the main counter is 64 bits wide (capabilities bit 13); else 32.
pub fn hpet_counter_bits(capabilities: u64) -> u32 {
    if capabilities & (1 << 13) != 0 { 64 } else { 32 }
}
