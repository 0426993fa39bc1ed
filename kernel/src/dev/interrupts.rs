//! Device interrupts: N vectors per PCI function with a typed handler each,
//! by MSI-X (entry i -> its own IDT vector -> its own CPU), multi-message MSI
//! (a block of vectors, one destination), or INTx through the I/O APIC.
//!
//! [`setup_vectors`] returns a [`DeviceIrqs`] that owns the vectors: dropping
//! it masks the device's interrupts and frees the IDT vectors and their
//! dispatch entries. Counts per vector and CPU are the dispatch table's
//! (`arch::irq::TABLE`).
//!
//! The mode logic (what a function supports, MADT overrides for INTx, MSI
//! message format, redirection-entry encoding) is the host-tested
//! `platform::irq` / `platform::pci` code; this module does the register
//! writes.

use crate::arch::{firmware, irq, memory, percpu, smp};
use crate::dev::pci;
use crate::error::Error;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use platform::irq::{
    InterruptHandler, InterruptMode, InterruptPlan, IoApicRedirection, PIIX3_PIRQ_ROUTE, PciIrqRouter, Registration,
};
use platform::mmio::{Mmio32, VolatileMmio};
use platform::pci::{MsiMessage, MsixTable, PciFunction};

const IOREGSEL: usize = 0x00;
const IOWIN: usize = 0x10;

fn ioapic_mmio(address: u32) -> Result<VolatileMmio, Error> {
    let base = memory::map_mmio(address as u64, 0x20)?;
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

/// A device's interrupt handler. `vector_index` is the position of the
/// vector in the [`setup_vectors`] request (MSI-X entry i, MSI vector i);
/// `cpu` is the CPU it runs on. Runs in interrupt context.
pub trait IrqHandler: Sync {
    fn handle(&self, vector_index: usize, cpu: usize);
}

/// What the dispatch table holds for one device vector: the typed handler
/// and the vector's index.
struct VectorSlot {
    handler: &'static dyn IrqHandler,
    index: usize,
}

impl InterruptHandler for VectorSlot {
    fn handle(&self, _vector: u8, cpu: u32) {
        self.handler.handle(self.index, cpu as usize);
    }
}

/// One granted vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vector {
    /// IDT vector (a number in `cpu`'s own vector space).
    pub vector: u8,
    /// CPU it is aimed at.
    pub cpu: usize,
}

impl Vector {
    /// Interrupts counted for this vector on its CPU.
    pub fn count(&self) -> u64 {
        irq::TABLE.count(self.vector, self.cpu as u32)
    }
}

/// Returns `vector` to `cpu`'s allocator after removing its handler there.
fn release(v: Vector) -> Result<(), platform::Error> {
    irq::TABLE
        .unregister_on(v.cpu as u32, v.vector)
        .map(|_| ())
        .and_then(|()| irq::VECTORS.free(v.cpu, v.vector))
}

/// A device's interrupt vectors. Owns them: dropping it masks the device's
/// interrupts (MSI-X entries masked and the function disabled, MSI
/// disabled, INTx pin masked) and frees the IDT vectors and their dispatch
/// entries.
pub struct DeviceIrqs {
    function: PciFunction,
    plan: InterruptPlan,
    vectors: Vec<Vector>,
    /// Each vector's registration (moves with the vector when it is re-aimed).
    registrations: Vec<&'static Registration>,
    requested: usize,
    msix: Option<MsixTable<VolatileMmio>>,
}

impl DeviceIrqs {
    /// The granted vectors, in request order (fewer than requested when the
    /// device or mode offers fewer: MSI gives a power of two, INTx one).
    pub fn vectors(&self) -> &[Vector] {
        &self.vectors
    }

    /// The granted vectors with their CPUs, for counting a device's interrupts.
    pub fn idt_vectors(&self) -> Vec<Vector> {
        self.vectors.clone()
    }

    /// One line for the device report.
    pub fn describe(&self) -> String {
        match self.vectors.as_slice() {
            [one] => format!("{} on vector {:#x} -> cpu{}", self.plan, one.vector, one.cpu),
            many => {
                let mut s = format!("{}", self.plan);
                if many.len() < self.requested {
                    s += &format!(" ({} of {} requested)", many.len(), self.requested);
                }
                s += " on vectors";
                for (i, v) in many.iter().enumerate() {
                    s += &format!(" #{i}:{:#x}->cpu{}", v.vector, v.cpu);
                }
                s
            }
        }
    }

    /// Re-aims vector `index` at `cpu`. Multi-message MSI has one
    /// destination for all its vectors: only index 0 can be aimed (and moves them all).
    pub fn aim(&mut self, index: usize, cpu: usize) -> Result<(), Error> {
        let online = smp::online();
        if cpu >= online || !percpu::cpu(cpu).online.load(Ordering::Acquire) {
            return Err(Error::CpuOffline { cpu, online });
        }
        let granted = self.vectors.len();
        let Some(v) = self.vectors.get(index).copied() else {
            return Err(Error::Device(format!(
                "{}: no interrupt vector #{index} ({granted} granted)",
                self.function.address
            )));
        };
        let apic_id = percpu::cpu(cpu).apic_id.load(Ordering::Relaxed);
        if !platform::cpus::interrupt_reachable(apic_id) {
            return Err(Error::Device(format!(
                "{}: cpu{cpu} has APIC id {apic_id}, which a device interrupt cannot reach without interrupt remapping",
                self.function.address
            )));
        }
        let pci = pci::get().ok_or(Error::NoPci)?;
        // Vector numbers are per CPU: a vector aimed elsewhere gets a number
        // on the new CPU first (registered there before the device can use
        // it); the old one is released once the device points at the new one.
        let old = self.vectors.clone();
        let v = if v.cpu == cpu { v } else { self.take_on(index, cpu)? };
        let result = self.program(index, cpu, apic_id, v, pci);
        let (keep, drop): (Vec<Vector>, Vec<Vector>) = if result.is_ok() {
            (self.vectors.clone(), old)
        } else {
            (old, self.vectors.clone())
        };
        for gone in drop.iter().filter(|d| !keep.contains(d)) {
            if let Err(e) = release(*gone) {
                log::error!(
                    "irq: {}: freeing vector {:#x} on cpu{}: {e}",
                    self.function.address,
                    gone.vector,
                    gone.cpu
                );
            }
        }
        self.vectors = keep;
        result
    }

    /// Takes a vector (MSI: a block for every vector) on `cpu` for vector
    /// `index` and registers its handler(s) there; `self.vectors` names the
    /// new ones. Returns the new vector `index`.
    fn take_on(&mut self, index: usize, cpu: usize) -> Result<Vector, Error> {
        let moving: Vec<usize> = match self.plan {
            InterruptPlan::Msi { .. } => (0..self.vectors.len()).collect(),
            _ => alloc::vec![index],
        };
        // The same number(s) on the new CPU when free there, so a vector keeps its number.
        let numbers: Vec<u8> = match self.plan {
            InterruptPlan::Msi { vectors } => {
                let old = self.vectors[0].vector;
                let base = if irq::VECTORS.take_exact(cpu, old, vectors) {
                    old
                } else {
                    irq::VECTORS.allocate_block(cpu, vectors)?
                };
                (0..moving.len() as u8).map(|i| base + i).collect()
            }
            _ => {
                let old = self.vectors[index].vector;
                if irq::VECTORS.take_exact(cpu, old, 1) {
                    alloc::vec![old]
                } else {
                    alloc::vec![irq::VECTORS.allocate(cpu)?]
                }
            }
        };
        for (k, &i) in moving.iter().enumerate() {
            if let Err(e) = irq::TABLE.register_on(cpu as u32, numbers[k], self.registrations[i]) {
                for (j, &n) in numbers.iter().enumerate() {
                    if j < k {
                        let _ = irq::TABLE.unregister_on(cpu as u32, n);
                    }
                    let _ = irq::VECTORS.free(cpu, n);
                }
                return Err(e.into());
            }
        }
        for (k, &i) in moving.iter().enumerate() {
            self.vectors[i] = Vector {
                vector: numbers[k],
                cpu,
            };
        }
        Ok(self.vectors[index])
    }

    /// Points the device's vector `index` (already registered as `v` on `cpu`) at `apic_id`.
    fn program(&mut self, index: usize, cpu: usize, apic_id: u32, v: Vector, pci: &pci::Pci) -> Result<(), Error> {
        match &self.plan {
            InterruptPlan::MsiX { .. } => {
                let table = self.msix.as_ref().ok_or(Error::NoPci)?;
                let entry = index as u16;
                let message = MsiMessage::xapic(apic_id, v.vector)?;
                table.mask(entry)?;
                table.program(entry, message)?;
                // Read the entry back: a table that did not take the message
                // would send this vector's interrupts somewhere else.
                let read = table.read(entry)?;
                if read.message != message {
                    return Err(Error::Device(format!(
                        "{}: MSI-X entry {entry} reads back {:#x}/{:#x}, programmed {:#x}/{:#x}",
                        self.function.address, read.message.address, read.message.data, message.address, message.data
                    )));
                }
                table.unmask(entry)?;
            }
            InterruptPlan::Msi { vectors } => {
                if index != 0 {
                    return Err(Error::Device(format!(
                        "{}: MSI vectors share one destination; aim vector #0",
                        self.function.address
                    )));
                }
                let cap = self.function.msi.as_ref().ok_or(Error::NoPci)?;
                platform::pci::msi_program(
                    &pci.access,
                    self.function.address,
                    cap,
                    MsiMessage::xapic(apic_id, v.vector)?,
                    *vectors,
                )?;
            }
            InterruptPlan::Intx { .. } => {
                ioapic_route(&self.plan, v.vector, apic_id, false)?;
            }
        }
        debug_assert!(self.vectors[index].cpu == cpu);
        Ok(())
    }

    /// Sets or clears MSI-X entry `index`'s mask bit (the device keeps a message that arrives
    /// masked pending and sends it on unmask). For a driver's interrupt-then-poll mode.
    pub fn set_vector_masked(&self, index: u16, masked: bool) -> Result<(), Error> {
        let table = self.msix.as_ref().ok_or_else(|| {
            Error::Device(format!(
                "{}: only MSI-X entries can be masked one by one",
                self.function.address
            ))
        })?;
        if masked {
            table.mask(index)?;
        } else {
            table.unmask(index)?;
        }
        Ok(())
    }

    /// Stops the device interrupting (MSI/MSI-X disabled, INTx pin masked);
    /// the vectors stay allocated (e.g. a stuck INTx line, masked from its own handler).
    pub fn mask(&self) -> Result<(), Error> {
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
                if let Some(v) = self.vectors.first() {
                    let apic_id = percpu::cpu(v.cpu).apic_id.load(Ordering::Relaxed);
                    ioapic_route(&self.plan, v.vector, apic_id, true)?;
                }
                platform::pci::set_intx_disabled(&pci.access, address, true)?;
            }
        }
        Ok(())
    }
}

impl Drop for DeviceIrqs {
    fn drop(&mut self) {
        if let Err(e) = self.mask() {
            log::error!("irq: {}: masking its interrupts: {e}", self.function.address);
        }
        // The source is masked: no new dispatch can start. One already running
        // on another CPU still finds its (leaked, 'static) registration valid.
        for v in &self.vectors {
            if let Err(e) = release(*v) {
                log::error!(
                    "irq: {}: freeing vector {:#x} on cpu{}: {e}",
                    self.function.address,
                    v.vector,
                    v.cpu
                );
            }
        }
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
    // The chipset's router wires bus 00 of segment 0 only; a function under another root bus
    // (another host bridge) is not its to route.
    if function.address.bus() != 0 || function.address.segment() != 0 || function.root_bus != 0 {
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

/// Sets up one interrupt vector per entry of `cpus` for `function` (MSI-X,
/// else MSI, else INTx, or exactly `mode`), each with its typed handler
/// (`handlers[i]` gets `vector_index` i), and aims vector i at `cpus[i]`.
///
/// MSI-X gives entry i its own IDT vector aimed at `cpus[i]`; MSI gives the
/// largest power of two the function offers, all aimed at `cpus[0]` (one
/// message address); INTx gives one. Fewer vectors than asked is not an
/// error: [`DeviceIrqs::vectors`] says what was granted, and a driver whose
/// vectors share work lets vector 0 do all of it.
pub fn setup_vectors(
    function: &PciFunction,
    mode: Option<InterruptMode>,
    cpus: &[usize],
    name: &'static str,
    handlers: &[&'static dyn IrqHandler],
) -> Result<DeviceIrqs, Error> {
    let address = function.address;
    if cpus.is_empty() || cpus.len() != handlers.len() {
        return Err(Error::Device(format!(
            "{address}: {} CPU(s) and {} handler(s) for its interrupt vectors: need one of each per vector, at least one",
            cpus.len(),
            handlers.len()
        )));
    }
    let online = smp::online();
    if let Some(&cpu) = cpus.iter().find(|&&c| c >= online) {
        return Err(Error::CpuOffline { cpu, online });
    }
    let wanted = u16::try_from(cpus.len()).map_err(|_| Error::Device(format!("{address}: too many vectors")))?;
    let pci = pci::get().ok_or(Error::NoPci)?;
    let mut plan = platform::irq::choose_interrupt_mode(function, wanted, mode, Some(&firmware::get().madt))?;
    if let InterruptPlan::Intx { pin, line, route } = plan {
        // _PRT first (the firmware's own routing, as an ACPI OS uses it); without a route
        // there, the firmware's interrupt line and the chipset router.
        let madt = &firmware::get().madt;
        let route = match crate::dev::aml::intx_route(pci, function, |irq| madt.isa_irq_route(irq)) {
            Some((route, source)) => {
                log::info!(
                    "irq: {address} INTx pin {} -> GSI {} {} {} from {source}",
                    (b'A' + pin.clamp(1, 4) - 1) as char,
                    route.gsi,
                    if route.level { "level" } else { "edge" },
                    if route.active_low { "active-low" } else { "active-high" }
                );
                route
            }
            None => chipset_intx_route(function, route)?,
        };
        plan = InterruptPlan::Intx { pin, line, route };
    }
    let granted = usize::from(plan.vectors()).min(cpus.len());
    if let Some(&cpu) = cpus[..granted]
        .iter()
        .find(|&&c| !platform::cpus::interrupt_reachable(percpu::cpu(c).apic_id.load(Ordering::Relaxed)))
    {
        return Err(Error::Device(format!(
            "{address}: cpu{cpu}'s APIC id is above 255, which a device interrupt cannot reach without interrupt remapping"
        )));
    }
    // Each vector comes from its CPU's own space: MSI needs one aligned block
    // on its one CPU; MSI-X and INTx one vector each, on the CPU it is aimed
    // at. A CPU whose space is full ends the MSI-X grant there (fewer vectors
    // is not an error; the driver plans with what it got); no vector at all is.
    let msi_block = matches!(plan, InterruptPlan::Msi { .. });
    let mut vectors: Vec<Vector> = Vec::with_capacity(granted);
    match plan {
        InterruptPlan::Msi { vectors: block } => {
            let base = irq::VECTORS.allocate_block(cpus[0], block)?;
            vectors.extend((0..granted as u8).map(|i| Vector {
                vector: base + i,
                cpu: cpus[0],
            }));
        }
        _ => {
            for &cpu in &cpus[..granted] {
                match irq::VECTORS.allocate(cpu) {
                    Ok(vector) => vectors.push(Vector { vector, cpu }),
                    Err(e) if vectors.is_empty() => return Err(e.into()),
                    Err(_) => {
                        log::warn!(
                            "irq: {address}: cpu{cpu} has no free interrupt vector; {} of {} vector(s) granted",
                            vectors.len(),
                            cpus.len()
                        );
                        break;
                    }
                }
            }
        }
    }
    let granted = vectors.len();
    // From here on, `irqs` owns the vectors: an error below drops it, which
    // masks the function and frees them.
    let mut irqs = DeviceIrqs {
        function: function.clone(),
        plan,
        vectors: Vec::new(),
        registrations: Vec::new(),
        requested: cpus.len(),
        msix: None,
    };
    for (i, v) in vectors.iter().enumerate() {
        let slot: &'static VectorSlot = alloc::boxed::Box::leak(alloc::boxed::Box::new(VectorSlot {
            handler: handlers[i],
            index: i,
        }));
        let label: &'static str = if granted == 1 {
            name
        } else {
            alloc::boxed::Box::leak(format!("{name}#{i}").into_boxed_str())
        };
        let registration = irq::leak_registration(label, slot);
        if let Err(e) = irq::TABLE.register_on(v.cpu as u32, v.vector, registration) {
            // This vector and those not registered yet are not in `irqs`.
            for rest in &vectors[i..] {
                let _ = irq::VECTORS.free(rest.cpu, rest.vector);
            }
            return Err(e.into());
        }
        irqs.vectors.push(*v);
        irqs.registrations.push(registration);
    }
    match &irqs.plan {
        InterruptPlan::MsiX { table_size, .. } => {
            let cap = function.msix.as_ref().ok_or(Error::NoPci)?;
            let (phys, len) = cap.table_region(address, &function.bars)?;
            let base = memory::map_mmio(phys, len)?;
            // SAFETY: the MSI-X table lies inside a BAR now mapped uncached.
            let mmio = unsafe { VolatileMmio::new(base, len as usize) };
            let table = MsixTable::new(mmio, 0, *table_size)?;
            platform::pci::msix_set_control(&pci.access, address, cap, true, true)?;
            table.mask_all()?;
            irqs.msix = Some(table);
            platform::pci::set_intx_disabled(&pci.access, address, true)?;
        }
        InterruptPlan::Msi { .. } => platform::pci::set_intx_disabled(&pci.access, address, true)?,
        InterruptPlan::Intx { .. } => platform::pci::set_intx_disabled(&pci.access, address, false)?,
    }
    for i in 0..irqs.vectors.len() {
        let cpu = irqs.vectors[i].cpu;
        if msi_block && i > 0 {
            break; // one message for the whole block, written with vector 0
        }
        irqs.aim(i, cpu)?;
    }
    if let (InterruptPlan::MsiX { .. }, Some(cap)) = (&irqs.plan, &function.msix) {
        platform::pci::msix_set_control(&pci.access, address, cap, true, false)?;
    }
    Ok(irqs)
}
