//! Probe of the LSI MegaRAID SAS (MFI) driver (`drivers/megasas`): matches
//! QEMU's `megasas` (SAS1078) and `megasas-gen2` (SAS2108), parses the
//! `megasas.*` keys (through `megasas::Options`, the one parser), builds the
//! driver's `megasas::Host` (bring-up, discovery, one `blk` queue per logical
//! drive on shared host tags, the abort/reset ladder), sets up its interrupt
//! vectors and registers each drive's queue as a block device `mdN`.
//!
//! Everything about serving I/O is the driver crate's (`megasas::blkdev`,
//! host-tested there); this file only does what needs the kernel: PCI, BARs,
//! DMA memory, delays, vectors, and turning bus mastering off for a
//! controller the driver declared dead.

use crate::arch::console::kprintln;
use crate::arch::{smp, time};
use crate::dev::block::{self, HostHooks};
use crate::dev::driver::{AimGuard, JobDevices, PciDriver};
use crate::dev::hal::{KernelDelay, KernelDma, KernelMmio, Placement};
use crate::dev::interrupts::{self, DeviceIrqs, IrqHandler};
use crate::dev::{cpumap, hosts, pci};
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use megasas::{Model, MsixVectors, Options};
use platform::irq::InterruptMode;
use platform::pci::{DeviceMatch, PciFunction};

/// The driver's entry in the PCI driver table.
pub const DRIVER: PciDriver = PciDriver {
    name: "megasas",
    matches: &[DeviceMatch::id(0x1000, 0x0060), DeviceMatch::id(0x1000, 0x0079)],
    configure,
    probe,
    floor_before_job: Some(floor_before_job),
    aim_for_jobs: Some(aim_for_jobs),
};

/// The `megasas.*` options, parsed once at boot.
static OPTIONS: spin::Once<Options> = spin::Once::new();

/// Parses the driver's command-line words (`megasas.irq=msi`, ...).
fn configure(words: &[&str]) -> Result<(), Error> {
    let line = words.join(" ");
    let options = Options::parse(&line).map_err(|e| Error::Config(format!("{e}")))?;
    OPTIONS.call_once(|| options);
    Ok(())
}

fn options() -> Options {
    OPTIONS.get().copied().unwrap_or_default()
}

type Mr = megasas::Host<KernelMmio, KernelDma, KernelDelay>;

/// One controller as the kernel holds it: the driver's host, its vectors
/// and what the kernel did about a stuck line or a dead controller.
struct Controller {
    host: Mr,
    function: &'static PciFunction,
    /// The controller's interrupt vectors, owned for its lifetime. Written only to re-aim its
    /// single vector around a job ([`aim_for_jobs`], interrupts off, nothing in flight);
    /// read by the interrupt-then-poll mode's mask and unmask.
    irqs: spin::Once<spin::RwLock<DeviceIrqs>>,
    /// The interrupt mode the probe chose (only a single MSI-X vector is re-aimed for jobs).
    irq_mode: megasas::IrqMode,
    /// The INTx line was masked because it stayed asserted with nothing to reap.
    intx_masked: AtomicBool,
    /// Bus mastering is off and the requests in flight were failed.
    abandoned: AtomicBool,
    /// Shut down for power-off: the tick leaves it alone.
    shut_down: AtomicBool,
}

impl IrqHandler for Controller {
    /// Every vector reaps the one reply queue (QEMU signals only vector 0;
    /// with `megasas.msix_vectors=all` the others are aimed but stay silent).
    fn handle(&self, _vector_index: usize, cpu: usize) {
        let out = self.host.handle_interrupt_adaptive(cpu, self);
        if out.intx_stuck && !self.intx_masked.swap(true, Ordering::Relaxed) {
            log::error!(
                "megasas {}: INTx stays asserted with nothing to reap: line masked, the controller is now served by the tick only",
                self.function.address
            );
            if let Some(irqs) = self.irqs.get()
                && let Err(e) = irqs.read().mask()
            {
                log::error!("megasas {}: masking its INTx line: {e}", self.function.address);
            }
        }
    }
}

/// The adaptive mode's vector mask: MSI-X entry 0, the one the controller signals (the probe
/// turns the mode off for anything but MSI-X).
impl megasas::VectorMask for Controller {
    fn set_masked(&self, masked: bool) {
        if let Some(irqs) = self.irqs.get()
            && let Err(e) = irqs.read().set_vector_masked(0, masked)
        {
            log::error!("megasas {}: MSI-X entry 0 mask={masked}: {e}", self.function.address);
        }
    }
}

impl HostHooks for Controller {
    fn poll(&self, cpu: usize) -> usize {
        self.host.poll_adaptive(cpu, self) as usize
    }

    /// One vector for the whole controller: its window is every CPU's.
    fn polling_window(&self, _cpu: usize) -> bool {
        self.host.polling_window()
    }

    fn tick(&self, cpu: usize) {
        if self.shut_down.load(Ordering::Acquire) {
            return;
        }
        self.host.tick(cpu);
        // A window nobody polls (no job running) is closed here once idle.
        if self.host.polling_window() {
            self.host.poll_adaptive(cpu, self);
        }
        if self.host.is_dead() {
            let name = format!("megasas {}", self.function.address);
            pci::take_out_of_service(self.function, &name, &self.abandoned, || {
                self.host.abandon_after_bus_master_off(cpu)
            });
        }
    }

    fn irq_vectors(&self) -> Option<Vec<crate::dev::interrupts::Vector>> {
        self.irqs.get().map(|i| i.read().idt_vectors())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let r = self.host.controller().recovery_counters();
        let h = self.host.counters();
        let a = self.host.adaptive_counters();
        alloc::vec![
            ("mfi_timeouts", h.timeouts),
            ("mfi_aborts_sent", r.aborts_sent),
            ("mfi_aborts_confirmed", r.aborts_confirmed),
            ("mfi_aborts_failed", r.aborts_failed),
            ("mfi_resets", r.resets),
            ("mfi_reset_failed_commands", r.reset_failed_commands),
            ("mfi_busy_retries", h.busy_retries),
            // Completions the block layer did not accept (stale or not in flight): dropped, counted.
            ("mfi_stale_completions", h.refused_completions),
            ("mfi_interrupts", h.interrupts),
            ("mfi_poll_windows", a.windows),
            ("mfi_window_polled", a.polled),
            ("mfi_window_budget_closes", a.budget_closes),
            ("mfi_unmask_catches", a.unmask_catches),
            ("mfi_windows_skipped_for_large_transfers", a.large_transfer_skips),
        ]
    }
}

impl crate::dev::PowerOff for Controller {
    fn power_off_name(&self) -> String {
        format!("megasas {}", self.function.address)
    }

    fn out_of_service(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed) || self.host.is_dead()
    }

    fn shut_down(&self) -> Result<(), String> {
        // The tick stops first, so that no recovery step takes the shut-down firmware for a
        // dead one. Release pairs with the Acquire load in `tick`.
        self.shut_down.store(true, Ordering::Release);
        // CTRL_CACHE_FLUSH (controller and disk caches), then CTRL_SHUTDOWN, polled.
        self.host
            .controller()
            .flush_and_shut_down(megasas::ADMIN_TAG)
            .map_err(|e| format!("{e}"))
    }
}

fn mode_to_platform(m: megasas::IrqMode) -> Option<InterruptMode> {
    match m {
        megasas::IrqMode::Msix => Some(InterruptMode::MsiX),
        megasas::IrqMode::Msi => Some(InterruptMode::Msi),
        megasas::IrqMode::Intx => Some(InterruptMode::Intx),
        megasas::IrqMode::Polled => None,
    }
}

static NEXT_DRIVE: spin::Mutex<usize> = spin::Mutex::new(0);

/// Every MegaRAID drive by block-device name: its controller and drive index (for the floor).
static DRIVES: spin::Mutex<Vec<(String, &'static Controller, usize)>> = spin::Mutex::new(Vec::new());

/// `megasas.floor=`: when set and `device` is a MegaRAID drive, measures the device floor
/// (`megasas::Host::measure_floor`: reads straight to the controller; between passes over the
/// ring this CPU halts until an interrupt, or spins in polled mode) at QD 1 and QD 32, prints one
/// `floor:` line and returns the figures for the job report. Empty when off or not ours.
fn floor_before_job(device: &str, cpu: usize, job: super::FloorJob) -> Vec<(&'static str, u64)> {
    let Some(ios) = options().floor_ios else {
        return Vec::new();
    };
    let Some((controller, drive)) = DRIVES
        .lock()
        .iter()
        .find(|(n, _, _)| n == device)
        .map(|(_, c, d)| (*c, *d))
    else {
        return Vec::new();
    };
    let Some(info) = controller.host.drives().get(drive) else {
        return Vec::new();
    };
    let most = super::FLOOR_MAX_READ_ONE_SGE.min(info.max_transfer_bytes);
    let bs = super::floor_read_bytes(job.bs, info.drive.block_size, most);
    let polled = controller.irqs.get().is_none();
    let how = if polled { "polled" } else { "halting between interrupts" };
    super::run_floor(device, bs, job, how, |depth, buffers| {
        let spec = megasas::FloorSpec::new(depth, ios);
        // Halt until an interrupt between passes in interrupt modes: a spinning vCPU takes
        // host time from QEMU's device emulation (TCG). `sti; hlt` cannot miss the wake-up.
        let mut wait = |news: &dyn Fn() -> bool| {
            if polled {
                core::hint::spin_loop();
            } else if controller.host.polling_window() {
                controller.host.poll_adaptive(cpu, controller);
            } else {
                x86_64::instructions::interrupts::disable();
                if news() {
                    x86_64::instructions::interrupts::enable();
                } else {
                    x86_64::instructions::interrupts::enable_and_hlt();
                }
            }
        };
        let segs: Vec<megasas::Segment> = buffers
            .iter()
            .map(|b| megasas::Segment {
                phys: b.phys(),
                len: bs,
            })
            .collect();
        controller
            .host
            .measure_floor_into(cpu, drive, spec, &segs, &mut wait)
            .map_err(|e| super::FloorFailure {
                error: format!("{e}"),
                // Any failed run may have left reads with the device: keep the buffer theirs.
                buffer_with_device: true,
            })
    })
}

/// A controller whose single vector [`aim_for_jobs`] re-aimed, and where it was aimed before.
struct Aimed {
    controller: &'static Controller,
    /// The drive the log lines name (the first job's).
    drive: String,
    /// The jobs' names, for the log lines.
    jobs: String,
    home: usize,
}

/// The vectors [`aim_for_jobs`] re-aimed; dropping it (after the jobs' reports) aims each back
/// at the CPU it had before, so that a job on several CPUs always finds the boot's aim.
#[must_use = "dropping it aims the vectors back at once"]
struct JobAims(Vec<Aimed>);

impl Drop for JobAims {
    fn drop(&mut self) {
        for a in self.0.drain(..) {
            match reaim(a.controller, a.home) {
                Ok(()) => kprintln!("{}: vector 0 back at cpu{} after job {}", a.drive, a.home, a.jobs),
                Err(why) => kprintln!(
                    "{}: vector 0 stays at its job's CPU after job {} (not aimed back at cpu{}: {why})",
                    a.drive,
                    a.jobs,
                    a.home
                ),
            }
        }
    }
}

/// Aims each MegaRAID controller's single MSI-X vector at the one CPU that submits to its
/// drives in `plans` (jobs that start together, every clone counted), before their first I/O:
/// the completion interrupt then lands on the halted submitter itself, not on another CPU whose
/// handler must wake it with an IPI (a double wake-up: without the aim, md0 QD1 on cpu1 of two
/// takes 1.58x the p50 of one vCPU). Nothing changes when the jobs submit from several CPUs, when the
/// vector already points at the CPU, for MSI, INTx, polled mode or more than one vector
/// (`megasas.msix_vectors=N` above 1, `all`), and with `megasas.irq_cpu=N`, the user's explicit
/// aim. Each re-aim prints one line
/// (`md0: vector 0 aimed at cpu1 for job qd1`).
fn aim_for_jobs(plans: &[JobDevices<'_>]) -> AimGuard {
    let mut aimed = Vec::new();
    if options().irq_cpu.is_some() {
        return Box::new(JobAims(aimed));
    }
    let drives = DRIVES.lock().clone();
    let mut controllers: Vec<&'static Controller> = Vec::new();
    for (_, c, _) in &drives {
        if !controllers.iter().any(|k| core::ptr::eq(*k, *c)) {
            controllers.push(c);
        }
    }
    for c in controllers {
        let jobs: Vec<&JobDevices<'_>> = plans
            .iter()
            .filter(|p| {
                // A job over a `filename` list counts for each of its devices.
                drives
                    .iter()
                    .any(|(name, k, _)| core::ptr::eq(*k, c) && p.devices.contains(&name.as_str()))
            })
            .collect();
        let mut cpus = jobs.iter().flat_map(|p| p.cpus.iter().copied());
        let Some(cpu) = cpus.next() else {
            continue;
        };
        if cpus.any(|other| other != cpu) {
            continue;
        }
        let Some(home) = single_msix_vector_cpu(c) else {
            continue;
        };
        if home == cpu {
            continue;
        }
        // The controller's first drive the jobs use (a file-list job's first device may be
        // another controller's).
        let drive = drives
            .iter()
            .find(|(name, k, _)| core::ptr::eq(*k, c) && jobs[0].devices.contains(&name.as_str()))
            .map_or_else(|| String::from(jobs[0].devices[0]), |(name, _, _)| name.clone());
        let names = jobs.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
        match reaim(c, cpu) {
            Ok(()) => {
                kprintln!(
                    "{drive}: vector 0 aimed at cpu{cpu} for job {names} (its only submitting CPU; was cpu{home})"
                );
                aimed.push(Aimed {
                    controller: c,
                    drive,
                    jobs: names,
                    home,
                });
            }
            Err(why) => kprintln!("{drive}: vector 0 stays at cpu{home} for job {names}: {why}"),
        }
    }
    Box::new(JobAims(aimed))
}

/// The CPU of the controller's vector when it has exactly one and it is MSI-X (an entry that
/// can be masked while it is reprogrammed).
fn single_msix_vector_cpu(c: &Controller) -> Option<usize> {
    if c.irq_mode != megasas::IrqMode::Msix {
        return None;
    }
    match c.irqs.get()?.read().vectors() {
        [one] => Some(one.cpu),
        _ => None,
    }
}

/// Re-aims the controller's vector 0 at `cpu` while nothing is in flight on any of its drives,
/// so that no completion can be signalled during the change (`DeviceIrqs::aim` also masks the
/// MSI-X entry while it rewrites it, registers the handler on the new CPU first and reads the
/// entry back).
fn reaim(c: &'static Controller, cpu: usize) -> Result<(), String> {
    use x86_64::instructions::interrupts::without_interrupts;
    let irqs = c.irqs.get().ok_or("the controller has no interrupt vectors")?;
    let in_flight: usize = c.host.queues().iter().map(|q| q.in_flight()).sum();
    if in_flight > 0 {
        return Err(format!("{in_flight} request(s) in flight"));
    }
    let me = crate::arch::percpu::index();
    // An interrupt-then-poll window keeps the entry masked, and the re-aim unmasks it: close
    // the window first (nothing is in flight, so it closes after its idle time and no
    // interrupt reopens it), so that the entry's mask is the driver's idea of it.
    let deadline = time::now_ns() + 100_000_000;
    while c.host.polling_window() {
        if time::now_ns() >= deadline {
            return Err("its interrupt-then-poll window stayed open for 100 ms".into());
        }
        without_interrupts(|| c.host.poll_adaptive(me, c));
        core::hint::spin_loop();
    }
    // Interrupts off: the write lock must not be held when this CPU's own handler (a reader)
    // runs.
    without_interrupts(|| irqs.write().aim(0, cpu)).map_err(|e| format!("{e}"))?;
    // Nothing was in flight; a reap makes sure no completion waits for an interrupt that went
    // to the old CPU's released vector.
    let caught = without_interrupts(|| c.host.poll_adaptive(me, c));
    if caught > 0 {
        log::warn!(
            "megasas {}: {caught} completion(s) reaped after the re-aim",
            c.function.address
        );
    }
    Ok(())
}

fn probe_one(function: &'static PciFunction, model: Model, opts: &Options) -> Result<(), Error> {
    let at = function.address;
    pci::claim(function)?;
    let mmio = KernelMmio(pci::bar_mmio(function, model.mmio_bar())?);
    let (mode, fell_back) = megasas::choose_irq_mode(opts.irq, function.msix.is_some(), function.msi.is_some());
    if fell_back {
        log::warn!("megasas {at}: requested interrupt mode unavailable; using {mode:?}");
    }
    // One reply queue: one hardware queue. Vector 0 is the one the controller
    // signals; more can be asked for (megasas.msix_vectors) and are aimed by
    // the same CPU map.
    let nvectors = match (opts.msix_vectors, &function.msix) {
        (None, _) => 1,
        (Some(MsixVectors::Count(n)), _) => usize::from(n),
        (Some(MsixVectors::All), Some(msix)) => usize::from(msix.table_size),
        (Some(MsixVectors::All), None) => 1,
    };
    let map = cpumap::plan(1, nvectors, opts.irq_cpu.map(|c| c as usize))?;
    let mut hc = megasas::HostConfig::new(smp::online(), mode);
    hc.apply_options(opts);
    if hc.adaptive.is_some() && mode != megasas::IrqMode::Msix {
        // Only an explicit `megasas.irq_poll=on|N` gets here (the default is off without MSI-X).
        log::warn!(
            "megasas {at}: megasas.irq_poll needs MSI-X (a vector mask; OMSK would stop the reply ring); interrupts are {mode:?}: off"
        );
        hc.adaptive = None;
    }
    match &hc.adaptive {
        Some(a) => kprintln!(
            "megasas {at}: completions: interrupt-then-poll windows ({} us idle, {} per window{}, none after a transfer over {} KiB; megasas.irq_poll=off for one interrupt per batch)",
            a.idle_ns / 1000,
            a.budget,
            if opts.irq_poll == megasas::IrqPoll::Auto {
                ", the MSI-X default"
            } else {
                ""
            },
            megasas::MAX_POLLED_TRANSFER_BYTES / 1024
        ),
        None => kprintln!("megasas {at}: completions: one interrupt per batch ({mode:?})"),
    }
    hc.cpu_map = Some(map.queue_of_cpu.clone());
    let (node, node_from) = crate::dev::aml::controller_node(function);
    let placement: &'static Placement = Box::leak(Box::default());
    let host = Mr::new(
        model,
        mmio,
        KernelDma {
            device_node: node,
            placement: Some(placement),
        },
        KernelDelay,
        block::platform(),
        hc,
    )
    .map_err(|e| Error::Device(format!("megasas {at}: bring-up failed: {e}")))?;
    if let Some(node) = node {
        kprintln!(
            "numa: megasas {at}: controller memory on node {node} (from {node_from}): {} of {} allocations there",
            placement.on_node.load(Ordering::Relaxed),
            placement.all.load(Ordering::Relaxed)
        );
    }
    let ctrl = host.controller();
    let info = ctrl.info();
    kprintln!(
        "megasas {at}: {:?} \"{}\" firmware {} package {}, {} commands ({} tags: {} for I/O, 1 admin), {} SGEs, max transfer {} KiB, request timeout {} ms",
        model,
        info.product,
        info.firmware,
        info.package,
        info.max_cmds,
        ctrl.max_inflight(),
        ctrl.max_inflight() - 1,
        ctrl.max_segments(),
        ctrl.max_transfer_bytes() / 1024,
        host.queue(0).map_or(0, |q| q.timeout_ns() / 1_000_000),
    );
    let controller: &'static Controller = Box::leak(Box::new(Controller {
        host,
        function,
        irqs: spin::Once::new(),
        irq_mode: mode,
        intx_masked: AtomicBool::new(false),
        abandoned: AtomicBool::new(false),
        shut_down: AtomicBool::new(false),
    }));
    crate::dev::register_power_off(controller);
    match mode_to_platform(mode) {
        Some(m) => {
            let handler: &'static dyn IrqHandler = controller;
            let handlers = alloc::vec![handler; map.vector_cpus.len()];
            let irqs = interrupts::setup_vectors(function, Some(m), &map.vector_cpus, "megasas", &handlers)?;
            controller.irqs.call_once(|| spin::RwLock::new(irqs));
        }
        None => {
            // Polled: keep INTx quiet at the PCI level; the ring still needs the
            // controller's own interrupt enabled to advance (QEMU).
            let p = pci::get().ok_or(Error::NoPci)?;
            platform::pci::set_intx_disabled(&p.access, at, true)?;
        }
    }
    controller
        .host
        .start()
        .map_err(|e| Error::Device(format!("megasas {at}: enabling interrupts: {e}")))?;
    let irq_text = match controller.irqs.get() {
        Some(i) => i.read().describe(),
        None => String::from("polled (no interrupts)"),
    };
    let irq_vectors = controller
        .irqs
        .get()
        .map(|i| i.read().idt_vectors())
        .unwrap_or_default();
    kprintln!("megasas {at}: interrupts: {irq_text}");
    let io_tags = u32::from(controller.host.controller().max_inflight() - 1);
    let disks = hosts::ControllerDisks {
        next_drive: &NEXT_DRIVE,
        prefix: "md",
        host: controller,
        max_inflight: io_tags,
        irq_vectors,
        extra: format!("interrupts: {irq_text}; {io_tags} I/O tags shared by the controller's drives"),
    };
    // register_drives names this controller's drives md<first>, md<first + 1>, ... in drive
    // order (NEXT_DRIVE is only taken by MegaRAID probes, which run one at a time).
    let first = *NEXT_DRIVE.lock();
    hosts::register_drives(
        &disks,
        controller.host.drives().iter().enumerate().map(|(i, d)| {
            Ok(hosts::Drive {
                queue: controller
                    .host
                    .queue(i)
                    .ok_or_else(|| Error::Device(format!("megasas {at}: drive {i} has no queue")))?,
                model: format!("{} ({at})", d.model),
                sector_size: d.drive.block_size,
                capacity_sectors: d.drive.blocks,
                max_transfer_bytes: d.max_transfer_bytes,
                aliases: disks::names::raid_aliases(pci::location(at), d.drive.target),
            })
        }),
    )?;
    let mut named = DRIVES.lock();
    for i in 0..controller.host.drives().len() {
        named.push((format!("md{}", first + i), controller, i));
    }
    Ok(())
}

fn probe(function: &'static PciFunction) -> Result<(), Error> {
    let model = Model::from_pci_id(function.vendor_id, function.device_id)
        .ok_or_else(|| Error::Device(format!("megasas: {} is not a supported model", function.address)))?;
    probe_one(function, model, &options())
}
