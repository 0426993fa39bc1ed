//! The parts of the FADT ("FACP") baremq uses: the ACPI PM timer.

use super::tables::{AddressSpace, Fields, table_bytes};
use super::{PhysMemory, Sdt};
use crate::error::{Result, TableSignature};

/// The ACPI PM timer's fixed rate: 3.579545 MHz.
pub const PM_TIMER_HZ: u64 = 3_579_545;
/// ACPI 1.0 FADT length; fields past it are read only when the table is long enough.
const FADT_V1_LEN: u32 = 116;
const PM_TMR_BLK: usize = 76;
const PM_TMR_LEN: usize = 91;
const FLAGS: usize = 112;
const X_PM_TMR_BLK: usize = 208;
/// FADT flags bit 8: the PM timer counts 32 bits (else 24).
const TMR_VAL_EXT: u32 = 1 << 8;
/// FADT flags bit 20: hardware-reduced ACPI (no PM timer, no fixed hardware).
const HW_REDUCED_ACPI: u32 = 1 << 20;

/// The ACPI PM timer: an I/O port counting up at [`PM_TIMER_HZ`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmTimer {
    pub port: u16,
    /// 24 or 32.
    pub bits: u32,
    /// Taken from `X_PM_TMR_BLK` (else `PM_TMR_BLK`).
    pub from_extended: bool,
}

/// What the FADT says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fadt {
    pub revision: u8,
    pub flags: u32,
    /// The PM timer, or why there is none usable.
    pub pm_timer: core::result::Result<PmTimer, &'static str>,
}

impl Fadt {
    /// Parses a validated FADT (at least the ACPI 1.0 length).
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Fadt> {
        table.expect(TableSignature::FADT, FADT_V1_LEN)?;
        let bytes = table_bytes(memory, table)?;
        let fields = Fields::new(TableSignature::FADT, &bytes);
        let flags = fields.u32(FLAGS)?;
        let bits = if flags & TMR_VAL_EXT != 0 { 32 } else { 24 };
        let legacy = fields.u32(PM_TMR_BLK)?;
        let legacy_len = fields.u8(PM_TMR_LEN)?;
        let extended = if bytes.len() >= X_PM_TMR_BLK + 12 {
            Some(fields.gas(X_PM_TMR_BLK)?)
        } else {
            None
        };
        let pm_timer = if flags & HW_REDUCED_ACPI != 0 {
            Err("hardware-reduced ACPI has no PM timer")
        } else {
            match extended.filter(|gas| gas.address != 0) {
                Some(gas) if gas.space != AddressSpace::Io => Err("X_PM_TMR_BLK is not in I/O space"),
                Some(gas) => match u16::try_from(gas.address) {
                    Ok(port) => Ok(PmTimer {
                        port,
                        bits,
                        from_extended: true,
                    }),
                    Err(_) => Err("X_PM_TMR_BLK is beyond the 64 KiB I/O space"),
                },
                None if legacy == 0 => Err("PM_TMR_BLK is 0"),
                None if legacy_len != 4 => Err("PM_TMR_LEN is not 4"),
                None => match u16::try_from(legacy) {
                    Ok(port) => Ok(PmTimer {
                        port,
                        bits,
                        from_extended: false,
                    }),
                    Err(_) => Err("PM_TMR_BLK is beyond the 64 KiB I/O space"),
                },
            }
        };
        Ok(Fadt {
            revision: table.revision,
            flags,
            pm_timer,
        })
    }
}
