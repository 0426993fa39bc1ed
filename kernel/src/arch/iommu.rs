//! IOMMUs left on by firmware: every Intel VT-d unit (DMAR) and AMD-Vi unit
//! (IVRS) is looked at before any device is set up. baremq programs devices
//! with physical addresses and plain MSI messages, so DMA translation,
//! interrupt remapping and VT-d protected memory regions (which block DMA
//! even with translation off) would make every command time out; whatever
//! is on is turned off here and logged.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use platform::acpi::{Dmar, Ivrs, amdvi, vtd};
use platform::mmio::{Mmio32, VolatileMmio};

use crate::arch::memory;
use crate::error::Error;

/// Status reads before a unit that does not acknowledge a command is
/// reported (the specification gives no time; hardware takes microseconds).
const MAX_STATUS_POLLS: u32 = 10_000_000;

/// Looks at every unit; returns the report lines, or the first unit that
/// would not turn off (the boot stops: DMA through it cannot work).
pub fn quiesce(dmar: Option<&Dmar>, ivrs: Option<&Ivrs>) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    if let Some(dmar) = dmar {
        lines.push(alloc::format!(
            "iommu: DMAR: {} VT-d unit(s), interrupt remapping {}, x2APIC opt-out {}",
            dmar.units.len(),
            if dmar.interrupt_remapping {
                "supported"
            } else {
                "not supported"
            },
            if dmar.x2apic_opt_out {
                "set (noted: baremq picks the APIC mode from CPUID before reading ACPI)"
            } else {
                "clear"
            }
        ));
        for unit in &dmar.units {
            lines.push(vtd_unit(unit.register_base, unit.segment)?);
        }
    }
    if let Some(ivrs) = ivrs {
        lines.push(alloc::format!("iommu: IVRS: {} AMD-Vi unit(s)", ivrs.units.len()));
        for unit in &ivrs.units {
            lines.push(amd_unit(unit.base, unit.segment, unit.device_id)?);
        }
    }
    if lines.is_empty() {
        lines.push(String::from("iommu: no DMAR or IVRS table"));
    }
    Ok(lines)
}

fn map(base: u64, len: usize) -> Result<VolatileMmio, Error> {
    if base == 0 || !base.is_multiple_of(0x1000) {
        return Err(Error::Device(alloc::format!(
            "iommu: register base {base:#x} from the ACPI table is not a page address"
        )));
    }
    let regs = memory::map_mmio(base, len as u64)?;
    // SAFETY: the unit's register page is mapped uncached above and nothing
    // else in the kernel touches it.
    Ok(unsafe { VolatileMmio::new(regs, len) })
}

fn poll(mmio: &VolatileMmio, offset: usize, mask: u32, want_set: bool) -> Result<bool, Error> {
    for _ in 0..MAX_STATUS_POLLS {
        if (mmio.read32(offset)? & mask != 0) == want_set {
            return Ok(true);
        }
        core::hint::spin_loop();
    }
    Ok(false)
}

fn vtd_unit(base: u64, segment: u16) -> Result<String, Error> {
    let mmio = map(base, vtd::REGISTER_BYTES)?;
    let mut line = alloc::format!("iommu: VT-d unit at {base:#x} (segment {segment}): ");
    let gsts = mmio.read32(vtd::GSTS)?;
    if gsts == u32::MAX {
        return Err(Error::Device(alloc::format!(
            "iommu: VT-d unit at {base:#x} reads all-ones: no registers there"
        )));
    }
    let mut turned_off = Vec::new();
    let mut status = gsts;
    for (bit, name) in vtd::DISABLE_ORDER {
        if status & bit == 0 {
            continue;
        }
        mmio.write32(vtd::GCMD, vtd::command_without(status, bit))?;
        if !poll(&mmio, vtd::GSTS, bit, false)? {
            return Err(Error::Device(alloc::format!(
                "iommu: VT-d unit at {base:#x} left {name} on after the command to turn it off (GSTS {:#x})",
                mmio.read32(vtd::GSTS)?
            )));
        }
        turned_off.push(name);
        status = mmio.read32(vtd::GSTS)?;
    }
    let capabilities = u64::from(mmio.read32(vtd::CAP)?) | (u64::from(mmio.read32(vtd::CAP + 4)?) << 32);
    if capabilities & vtd::CAP_PROTECTED_REGIONS != 0 {
        let pmen = mmio.read32(vtd::PMEN)?;
        if pmen & vtd::PMEN_ENABLE != 0 {
            mmio.write32(vtd::PMEN, pmen & !vtd::PMEN_ENABLE)?;
            if !poll(&mmio, vtd::PMEN, vtd::PMEN_STATUS, false)? {
                return Err(Error::Device(alloc::format!(
                    "iommu: VT-d unit at {base:#x} kept its protected memory regions on (PMEN {:#x}); DMA to them is blocked",
                    mmio.read32(vtd::PMEN)?
                )));
            }
            turned_off.push("protected memory regions");
        }
    }
    if turned_off.is_empty() {
        let _ = write!(
            line,
            "translation, interrupt remapping and queued invalidation off (GSTS {gsts:#x})"
        );
    } else {
        let _ = write!(
            line,
            "firmware left on: {}; turned off (GSTS was {gsts:#x})",
            turned_off.join(", ")
        );
    }
    Ok(line)
}

fn amd_unit(base: u64, segment: u16, device_id: u16) -> Result<String, Error> {
    let mmio = map(base, 0x1000)?;
    let control = u64::from(mmio.read32(amdvi::CONTROL)?) | (u64::from(mmio.read32(amdvi::CONTROL + 4)?) << 32);
    let mut line = alloc::format!(
        "iommu: AMD-Vi unit at {base:#x} (segment {segment}, {:02x}:{:02x}.{}): ",
        device_id >> 8,
        (device_id >> 3) & 0x1F,
        device_id & 7
    );
    if control & amdvi::IOMMU_ENABLE != 0 {
        mmio.write32(amdvi::CONTROL, (control & !amdvi::IOMMU_ENABLE) as u32)?;
        if mmio.read32(amdvi::CONTROL)? & amdvi::IOMMU_ENABLE as u32 != 0 {
            return Err(Error::Device(alloc::format!(
                "iommu: AMD-Vi unit at {base:#x} kept IommuEn set after it was cleared"
            )));
        }
        let _ = write!(line, "firmware left IommuEn on; turned off (control was {control:#x})");
    } else {
        let _ = write!(line, "off (control {control:#x})");
    }
    Ok(line)
}
