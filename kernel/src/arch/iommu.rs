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
            if dmar.x2apic_opt_out { "set" } else { "clear" }
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
        // Nothing decodes there, so nothing translates either.
        let _ = write!(line, "registers read all-ones (not decoded); skipped");
        return Ok(line);
    }
    let mut turned_off = Vec::new();
    let mut status = gsts;
    for (bit, name) in vtd::DISABLE_ORDER {
        if status & bit == 0 {
            continue;
        }
        if bit == vtd::QUEUED_INVALIDATION {
            drain_invalidation_queue(&mmio, base)?;
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

fn read64(mmio: &VolatileMmio, offset: usize) -> Result<u64, Error> {
    Ok(u64::from(mmio.read32(offset)?) | (u64::from(mmio.read32(offset + 4)?) << 32))
}

/// Queues a wait descriptor behind whatever firmware left in the
/// invalidation queue and waits for its status write: the queue may only
/// be turned off once it is empty (QEMU refuses otherwise).
fn drain_invalidation_queue(mmio: &VolatileMmio, base: u64) -> Result<(), Error> {
    let iqa = read64(mmio, vtd::IQA)?;
    let (queue, queue_bytes, tail, descriptor_bytes) = vtd::queue_layout(iqa, read64(mmio, vtd::IQT)?);
    let coherent = read64(mmio, vtd::ECAP)? & vtd::ECAP_COHERENT != 0;
    let status = memory::alloc_frames_below_4g(4096, 4096)?;
    let status_ptr = status as *mut u32;
    // Below 4 GiB the queue is in the identity map; above, map it (it is
    // memory the unit reads, reserved by firmware).
    let slot = if queue + queue_bytes <= 1 << 32 {
        (queue + tail) as *mut u64
    } else {
        memory::map_mmio(queue, queue_bytes)?
            .wrapping_add(tail as usize)
            .cast::<u64>()
    };
    let [low, high] = vtd::wait_descriptor(status, 1);
    // SAFETY: `status` is a fresh frame owned here; `slot` is the queue
    // entry at the tail, inside the queue (tail < queue size) and mapped; the
    // unit reads it only after the tail register moves past it.
    unsafe {
        status_ptr.write_volatile(0);
        slot.write_volatile(low);
        slot.add(1).write_volatile(high);
        if descriptor_bytes == 32 {
            slot.add(2).write_volatile(0);
            slot.add(3).write_volatile(0);
        }
        if !coherent {
            core::arch::x86_64::_mm_clflush(slot.cast::<u8>());
            core::arch::x86_64::_mm_clflush(status_ptr.cast::<u8>());
            core::arch::x86_64::_mm_mfence();
        }
    }
    let new_tail = (tail + descriptor_bytes) % queue_bytes;
    mmio.write32(vtd::IQT, new_tail as u32)?;
    mmio.write32(vtd::IQT + 4, 0)?;
    for _ in 0..MAX_STATUS_POLLS {
        if !coherent {
            // SAFETY: the status frame is owned here and identity-mapped.
            unsafe { core::arch::x86_64::_mm_clflush(status_ptr.cast::<u8>()) };
        }
        // SAFETY: as above.
        if unsafe { status_ptr.read_volatile() } == 1 {
            return Ok(());
        }
        core::hint::spin_loop();
    }
    Err(Error::Device(alloc::format!(
        "iommu: VT-d unit at {base:#x} did not complete a wait descriptor in its invalidation queue (IQA {iqa:#x}); it cannot be turned off safely"
    )))
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
    if control == u64::MAX {
        // Firmware did not enable the unit's MMIO window (its PCI capability
        // holds the enable bit): a unit without registers is not translating.
        let _ = write!(line, "registers read all-ones (MMIO not enabled); skipped");
    } else if control & amdvi::IOMMU_ENABLE != 0 {
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
