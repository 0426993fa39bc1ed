//! Device interrupt routing: MSI-X, MSI, or INTx through the I/O APIC, aimed
//! at a chosen CPU, with the mode reported per device.
//!
//! The mode logic (what a function supports, MADT overrides for INTx, MSI
//! message format, redirection-entry encoding) is the host-tested
//! `platform::irq` / `platform::pci` code; this module does the register
//! writes.

use crate::error::Error;
use crate::{firmware, irq, paging, pci, percpu, smp};
use alloc::format;
use alloc::string::String;
use core::sync::atomic::Ordering;
use platform::irq::{InterruptMode, InterruptPlan, IoApicRedirection, IrqHandlerFn, PIIX3_PIRQ_ROUTE, PciIrqRouter};
use platform::mmio::{Mmio32, VolatileMmio};
use platform::pci::{MsiMessage, MsixTable, PciFunction};

const IOREGSEL: usize = 0x00;
const IOWIN: usize = 0x10;

fn ioapic_mmio(address: u32) -> Result<VolatileMmio, Error> {
    let base = paging::map_mmio(address as u64, 0x20)?;
    // SAFETY: the I/O APIC window (two 32-bit registers) is mapped uncached.
    Ok(unsafe { VolatileMmio::new(base, 0x20) })
}

fn ioapic_write(mmio: &VolatileMmio, reg: u8, value: u32) -> Result<(), Error> {
    mmio.write32(IOREGSEL, reg as u32)?;
    mmio.write32(IOWIN, value)?;
    Ok(())
}

fn ioapic_read(mmio: &VolatileMmio, reg: u8) -> Result<u32, Error> {
    mmio.write32(IOREGSEL, reg as u32)?;
    Ok(mmio.read32(IOWIN)?)
}

static IOAPIC_LOCK: spin::Mutex<()> = spin::Mutex::new(());

/// Masks every I/O APIC input (firmware may leave some unmasked).
pub fn init_ioapics() -> Result<usize, Error> {
    let fw = firmware::get();
    let mut pins = 0;
    for io in &fw.madt.io_apics {
        let mmio = ioapic_mmio(io.address)?;
        let count = ((ioapic_read(&mmio, 1)? >> 16) & 0xFF) as u8 + 1;
        for pin in 0..count {
            if let Some((low, _)) = platform::irq::ioapic_redirection_registers(pin) {
                ioapic_write(&mmio, low, 1 << 16)?;
            }
        }
        pins += count as usize;
    }
    Ok(pins)
}

fn ioapic_route(plan: &InterruptPlan, vector: u8, apic_id: u32, masked: bool) -> Result<(), Error> {
    let InterruptPlan::Intx { route, .. } = plan else {
        return Ok(());
    };
    let (io, pin) = firmware::get().madt.io_apic_for_gsi(route.gsi)?;
    let entry = IoApicRedirection::new(route, vector, apic_id, masked)?.encode();
    let pin = u8::try_from(pin).map_err(|_| Error::Device(format!("GSI {} pin {pin} out of range", route.gsi)))?;
    let (low, high) = platform::irq::ioapic_redirection_registers(pin)
        .ok_or_else(|| Error::Device(format!("I/O APIC pin {pin} out of range")))?;
    let mmio = ioapic_mmio(io.address)?;
    let _g = IOAPIC_LOCK.lock();
    // Mask while the destination changes, then write the full entry.
    ioapic_write(&mmio, low, 1 << 16)?;
    ioapic_write(&mmio, high, (entry >> 32) as u32)?;
    ioapic_write(&mmio, low, entry as u32)?;
    Ok(())
}

/// A device interrupt that has been set up.
pub struct DeviceIrq {
    pub function: PciFunction,
    pub plan: InterruptPlan,
    pub vector: u8,
    pub cpu: usize,
    msix: Option<MsixTable<VolatileMmio>>,
}

impl DeviceIrq {
    /// One line for the device report.
    pub fn describe(&self) -> String {
        format!("{} on vector {:#x} -> cpu{}", self.plan, self.vector, self.cpu)
    }

    /// Re-aims the interrupt at `cpu`.
    pub fn aim(&mut self, cpu: usize) -> Result<(), Error> {
        let online = smp::online();
        if !percpu::cpu(cpu).online.load(Ordering::Acquire) {
            return Err(Error::CpuOffline { cpu, online });
        }
        let apic_id = percpu::cpu(cpu).apic_id.load(Ordering::Relaxed);
        let pci = pci::get().ok_or(Error::NoPci)?;
        let address = self.function.address;
        match &self.plan {
            InterruptPlan::MsiX { .. } => {
                let table = self.msix.as_ref().ok_or(Error::NoPci)?;
                table.mask(0)?;
                table.program(0, MsiMessage::xapic(apic_id, self.vector)?)?;
                table.unmask(0)?;
            }
            InterruptPlan::Msi { vectors } => {
                let cap = self.function.msi.as_ref().ok_or(Error::NoPci)?;
                platform::pci::msi_program(
                    &pci.access,
                    address,
                    cap,
                    MsiMessage::xapic(apic_id, self.vector)?,
                    *vectors,
                )?;
            }
            InterruptPlan::Intx { .. } => ioapic_route(&self.plan, self.vector, apic_id, false)?,
        }
        self.cpu = cpu;
        Ok(())
    }

    /// Stops the device interrupting (MSI/MSI-X disabled, INTx pin masked).
    pub fn disable(&mut self) -> Result<(), Error> {
        let pci = pci::get().ok_or(Error::NoPci)?;
        let address = self.function.address;
        match &self.plan {
            InterruptPlan::MsiX { .. } => {
                if let (Some(t), Some(cap)) = (&self.msix, &self.function.msix) {
                    t.mask_all()?;
                    platform::pci::msix_set_control(&pci.access, address, cap, false, true)?;
                }
            }
            InterruptPlan::Msi { .. } => {
                if let Some(cap) = &self.function.msi {
                    platform::pci::msi_disable(&pci.access, address, cap)?;
                }
            }
            InterruptPlan::Intx { .. } => {
                let apic_id = percpu::cpu(self.cpu).apic_id.load(Ordering::Relaxed);
                ioapic_route(&self.plan, self.vector, apic_id, true)?;
                platform::pci::set_intx_disabled(&pci.access, address, true)?;
            }
        }
        Ok(())
    }
}

const PIRQ_ROUTE_DISABLED: u32 = 0x80;

/// Makes a bus-0 function's INTx pin reach the I/O APIC whatever the
/// firmware programmed (qboot programs no PIRQ router), and returns the
/// route to use. The chipset wiring is `platform::irq::PciIrqRouter`'s: on a
/// PIIX3 the pin's PIRQ is routed to the firmware's interrupt line (that
/// ISA IRQ is the GSI); on an ICH9 the PIRQ drives GSI 16-23 directly.
fn chipset_intx_route(
    function: &PciFunction,
    route: platform::acpi::IrqRoute,
) -> Result<platform::acpi::IrqRoute, Error> {
    let pci = pci::get().ok_or(Error::NoPci)?;
    if function.address.bus() != 0 {
        return Ok(route);
    }
    let Some((router_fn, router)) = pci
        .functions
        .iter()
        .find_map(|f| PciIrqRouter::from_id(f.vendor_id, f.device_id).map(|r| (f, r)))
    else {
        return Ok(route);
    };
    let Some(pirq) = router.pirq(function.address.device(), function.interrupt_pin) else {
        return Ok(route);
    };
    if let Some(direct) = router.direct_route(pirq) {
        return Ok(direct);
    }
    let cfg = platform::pci::ConfigSpace::new(&pci.access, router_fn.address);
    let regs = cfg.read32(PIIX3_PIRQ_ROUTE)?;
    let shift = 8 * u32::from(pirq);
    let current = (regs >> shift) & 0xFF;
    let want = u32::from(function.interrupt_line);
    if current & PIRQ_ROUTE_DISABLED != 0 || current != want {
        log::info!(
            "irq: PIRQ{} was {current:#x}; routing it to IRQ {want}",
            (b'A' + pirq) as char
        );
        cfg.write32(PIIX3_PIRQ_ROUTE, (regs & !(0xFF << shift)) | (want << shift))?;
    }
    Ok(route)
}

/// Sets up one interrupt for `function` (MSI-X, else MSI, else INTx, or
/// exactly `forced`), registers `handler` on a fresh vector, and aims it at `cpu`.
pub fn setup(
    function: &PciFunction,
    forced: Option<InterruptMode>,
    cpu: usize,
    name: &'static str,
    handler: IrqHandlerFn,
    context: usize,
) -> Result<DeviceIrq, Error> {
    let pci = pci::get().ok_or(Error::NoPci)?;
    let mut plan = platform::irq::choose_interrupt_mode(function, 1, forced, Some(&firmware::get().madt))?;
    if let InterruptPlan::Intx { pin, line, route } = plan {
        plan = InterruptPlan::Intx {
            pin,
            line,
            route: chipset_intx_route(function, route)?,
        };
    }
    let vector = irq::VECTORS.allocate()?;
    irq::register(vector, name, handler, context);
    let address = function.address;
    let mut msix = None;
    match &plan {
        InterruptPlan::MsiX { table_size, .. } => {
            let cap = function.msix.as_ref().ok_or(Error::NoPci)?;
            let (phys, len) = cap.table_region(address, &function.bars)?;
            let base = paging::map_mmio(phys, len)?;
            // SAFETY: the MSI-X table lies inside a BAR now mapped uncached.
            let mmio = unsafe { VolatileMmio::new(base, len as usize) };
            let table = MsixTable::new(mmio, 0, *table_size)?;
            platform::pci::msix_set_control(&pci.access, address, cap, true, true)?;
            table.mask_all()?;
            msix = Some(table);
            platform::pci::set_intx_disabled(&pci.access, address, true)?;
        }
        InterruptPlan::Msi { .. } => platform::pci::set_intx_disabled(&pci.access, address, true)?,
        InterruptPlan::Intx { .. } => platform::pci::set_intx_disabled(&pci.access, address, false)?,
    }
    let mut irq = DeviceIrq {
        function: function.clone(),
        plan,
        vector,
        cpu,
        msix,
    };
    irq.aim(cpu)?;
    if let (InterruptPlan::MsiX { .. }, Some(cap)) = (&irq.plan, &function.msix) {
        platform::pci::msix_set_control(&pci.access, address, cap, true, false)?;
    }
    Ok(irq)
}
