//! Probe of the NVMe driver (`drivers/nvme`): matches QEMU's `nvme` (1b36:0010, 8086:5845 with
//! `use-intel-id=on`) and any function of class 01h/08h/02h (NVMe I/O controller), parses the
//! `nvme.*` keys (through `nvme::Options`, the one parser; see [`configure`]), takes the
//! controller over with `nvme::Controller` (from any firmware state: SeaBIOS leaves it enabled),
//! plans one I/O queue pair and one MSI-X vector per CPU (`nvme::QueuePlan`: fewer queues than
//! CPUs are shared by groups of CPUs, INTx when MSI-X is off, every queue polled with
//! `nvme.irq=poll`, the first N queues polled with `nvme.poll_queues=N`: no vector, their CPUs
//! reap them while they wait), aims vector `h + 1` (queue `h`) at a CPU that submits to `h` per the one CPU
//! map (`cpumap`, `irq.affinity=`) and the admin vector 0 at the boot CPU, creates the queues
//! (`nvme::blkdev::Host`) and registers every namespace as `nvme<c>n<i>`.
//!
//! Everything about serving I/O (PRPs, completion validation, Abort, reset) is the driver
//! crate's, host-tested there; this file only does what needs the kernel: PCI, BAR0, DMA memory,
//! delays, vectors, the tick, and turning bus mastering off for a controller the driver declared
//! failed.

use crate::arch::console::kprintln;
use crate::arch::smp;
use crate::dev::block::{self, DeviceFacts, Disk, HostHooks};
use crate::dev::driver::PciDriver;
use crate::dev::hal::{KernelDelay, KernelDma, KernelMmio, node_of_cpu};
use crate::dev::interrupts::{self, DeviceIrqs, IrqHandler};
use crate::dev::{cpumap, pci};
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use blk::CompletionPolicy;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use nvme::blkdev::HostConfig;
use nvme::{IrqMode, Options, QueuePlan};
use platform::irq::InterruptMode;
use platform::pci::{DeviceMatch, PciFunction};

/// The driver's entry in the PCI driver table.
pub const DRIVER: PciDriver = PciDriver {
    name: "nvme",
    matches: &[
        DeviceMatch::id(nvme::PCI_IDS[0].0, nvme::PCI_IDS[0].1),
        DeviceMatch::id(nvme::PCI_IDS[1].0, nvme::PCI_IDS[1].1),
        DeviceMatch::class(0x01, 0x08).with_prog_if(0x02),
    ],
    configure,
    probe,
    floor_before_job: Some(floor_before_job),
    aim_for_jobs: None,
};

/// What the kernel glue takes from the command line besides the driver crate's options.
#[derive(Clone, Copy, Debug, Default)]
struct KernelOptions {
    /// The crate's options (`nvme.queues`, `nvme.irq`, `nvme.queue_depth`, `nvme.timeout_ms`,
    /// `nvme.irq_poll`, `nvme.poll_queues`, ...).
    driver: Options,
    /// `nvme.cross_vectors=1`: aim each I/O queue's vector at the *next* CPU's queue group
    /// instead of its own, so completions land on a CPU that did not submit them (a test of
    /// the remote completion path; never what a fast setup wants).
    cross_vectors: bool,
}

/// The `nvme.*` options, parsed once at boot.
static OPTIONS: spin::Once<KernelOptions> = spin::Once::new();

/// Parses the driver's command-line words, in one place: `nvme.cross_vectors` is the kernel
/// glue's own key; every other `nvme.*` word goes to `nvme::Options::parse`, which refuses an
/// unknown key with the list of accepted ones.
fn configure(words: &[&str]) -> Result<(), Error> {
    let mut cross_vectors = false;
    let mut rest = Vec::with_capacity(words.len());
    for &w in words {
        match w.strip_prefix("nvme.cross_vectors=") {
            Some("1" | "on") => cross_vectors = true,
            Some("0" | "off") => cross_vectors = false,
            Some(_) => return Err(Error::Config(format!("{w}: nvme.cross_vectors takes 0 or 1"))),
            None => rest.push(w),
        }
    }
    let driver = Options::parse(&rest.join(" "))
        .map_err(|e| Error::Config(format!("{e} (the kernel also accepts nvme.cross_vectors=0|1)")))?;
    OPTIONS.call_once(|| KernelOptions { driver, cross_vectors });
    Ok(())
}

fn options() -> KernelOptions {
    OPTIONS.get().copied().unwrap_or_default()
}

type Host = nvme::blkdev::Host<KernelMmio, KernelDma, KernelDelay>;

/// One controller as the kernel holds it.
struct Controller {
    host: Host,
    function: &'static PciFunction,
    name: String,
    /// The controller's interrupt vectors, owned for its lifetime (none when polled).
    irqs: spin::Once<DeviceIrqs>,
    /// Bus mastering is off after the driver declared the controller failed.
    abandoned: AtomicBool,
}

impl IrqHandler for Controller {
    /// Vector i is MSI-X table entry i (0: admin, h + 1: I/O queue h) or the INTx line (0).
    /// With `nvme.irq_poll=` a productive interrupt also masks its vector and opens its polling
    /// window (the driver's `handle_vector_adaptive` is `handle_vector` without the mode).
    fn handle(&self, vector_index: usize, cpu: usize) {
        self.host.handle_vector_adaptive(vector_index, cpu, self);
    }
}

/// The adaptive mode's vector mask: the MSI-X table entry's mask bit (the probe turns the mode
/// off for anything but MSI-X).
impl nvme::adaptive::VectorMask for Controller {
    fn set_masked(&self, vector: u16, masked: bool) {
        if let Some(irqs) = self.irqs.get()
            && let Err(e) = irqs.set_vector_masked(vector, masked)
        {
            log::error!("{}: MSI-X entry {vector} mask={masked}: {e}", self.name);
        }
    }
}

impl HostHooks for Controller {
    fn poll(&self, cpu: usize) -> usize {
        match self.host.plan().hwq_of_cpu(cpu) {
            Some(hwq) => self.host.poll_adaptive(hwq, cpu, self),
            None => 0,
        }
    }

    /// A CPU whose queue is polled (`nvme.poll_queues=`, `nvme.irq=poll`) has no interrupt to
    /// wake it, so it polls while it waits, as it does while a polling window is open.
    fn polling_window(&self, cpu: usize) -> bool {
        self.host.must_poll(cpu)
    }

    /// A job refills after as many completions as a doorbell may wait for: the SQ doorbell
    /// hands the device work it does while the CPU completes the rest of the reap (docs/bench.md
    /// "Refill within a reap"); `nvme.doorbell_batch=<depth>` turns it off.
    fn refill_after(&self) -> usize {
        self.host.controller().config().doorbell_batch as usize
    }

    fn tick(&self, cpu: usize) {
        // A window nobody polls (its CPU's job ended) is closed here once idle.
        self.host.poll_open_windows(cpu, self);
        // Polled queues raise no interrupt: a waiter that does not poll them (none of the
        // kernel's do) still finishes, one tick at a time.
        let plan = self.host.plan();
        for hwq in (0..plan.nr_io_queues()).filter(|&h| plan.is_polled(h)) {
            self.host.poll(hwq, cpu);
        }
        if let Err(e) = self.host.tick(cpu) {
            log::warn!("{}: timeout scan: {e}", self.name);
        }
        if self.host.controller().failed() && !self.abandoned.swap(true, Ordering::Relaxed) {
            // A controller that did not come back from a reset may still write into its
            // requests' buffers until it can no longer master the bus.
            match pci::set_bus_master(self.function, false) {
                Ok(()) => log::error!(
                    "{} ({}): controller out of service after a failed reset: bus mastering off",
                    self.name,
                    self.function.address
                ),
                Err(e) => log::error!(
                    "{} ({}): controller out of service, but bus mastering could not be turned off: {e}",
                    self.name,
                    self.function.address
                ),
            }
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let r = self.host.report();
        let c = &r.controller;
        let a = self.host.adaptive_counters();
        alloc::vec![
            ("nvme_commands", c.commands),
            ("nvme_errors", c.errors),
            ("nvme_error_retries", c.error_retries),
            ("nvme_bogus_cqes", c.bogus_cqes),
            ("nvme_aborts_sent", c.aborts_sent),
            ("nvme_aborts_succeeded", c.aborts_succeeded),
            ("nvme_resets", c.resets),
            ("nvme_resets_failed", c.resets_failed),
            ("nvme_reset_reissued", c.reset_reissued),
            ("nvme_reset_failed", c.reset_failed),
            ("nvme_failed_by_recovery", r.failed_by_recovery),
            ("nvme_refused_by_blk", r.refused_by_blk),
            // Reaped by polling: polled queues (blk counts them as `completions_irq` where the
            // controller also has interrupt queues) and polling windows.
            ("nvme_polled", r.polled),
            ("nvme_rejected", r.rejected),
            ("nvme_poll_windows", a.windows),
            ("nvme_window_polled", a.polled),
            ("nvme_window_budget_closes", a.budget_closes),
            ("nvme_unmask_catches", a.unmask_catches),
        ]
    }
}

impl crate::dev::PowerOff for Controller {
    fn power_off_name(&self) -> String {
        self.name.clone()
    }

    fn out_of_service(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed) || self.host.controller().failed()
    }

    fn shut_down(&self) -> Result<(), String> {
        // CC.SHN = normal, then SHST = complete within CAP.TO: the drive writes back what it
        // caches and records a clean shutdown, where a power cut would count as an unsafe one.
        self.host.controller().shutdown().map_err(|e| format!("{e}"))
    }
}

/// Controllers probed so far (`nvme0`, `nvme1`, ...).
static NEXT_CONTROLLER: AtomicUsize = AtomicUsize::new(0);

/// Every NVMe namespace by block-device name: its controller and namespace index (for the floor).
static NAMESPACES: spin::Mutex<Vec<(String, &'static Controller, usize)>> = spin::Mutex::new(Vec::new());

/// `nvme.floor=`: when set and `device` is an NVMe namespace, measures the device floor
/// (`nvme::blkdev::Host::measure_floor`: one-block reads posted straight to this CPU's I/O
/// queue, no block layer) at QD 1 and QD 32, prints one `floor:` line and returns the figures
/// for the job report. Between passes this CPU halts until an interrupt when the queue's vector
/// is aimed at it, and spins otherwise (polled queues, or the vector on another CPU of the
/// group, whose handler delivers the completions). Empty when off or not ours.
fn floor_before_job(device: &str, cpu: usize, job: super::FloorJob) -> Vec<(&'static str, u64)> {
    let opts = options();
    let Some(ios) = opts.driver.floor_ios else {
        return Vec::new();
    };
    let Some((controller, namespace)) = NAMESPACES
        .lock()
        .iter()
        .find(|(n, _, _)| n == device)
        .map(|(_, c, i)| (*c, *i))
    else {
        return Vec::new();
    };
    let Some(ns) = controller.host.namespaces().get(namespace) else {
        return Vec::new();
    };
    let bs = super::floor_read_bytes(job.bs, ns.lba_size, super::FLOOR_MAX_READ_ONE_PAGE);
    let plan = controller.host.plan();
    let own_hwq = plan.hwq_of_cpu(cpu);
    // Halt only when this CPU takes the queue's interrupt: a completion then always wakes it.
    let halts = controller.irqs.get().is_some()
        && plan
            .hwq_of_cpu(cpu)
            .and_then(|h| plan.vector_of_hwq(h))
            .zip(vector_cpus(plan, opts.cross_vectors).ok())
            .is_some_and(|(v, cpus)| cpus.get(usize::from(v)) == Some(&cpu));
    let how = if halts {
        "halting between interrupts"
    } else if controller.irqs.get().is_none() || plan.cpu_polls(cpu) {
        "polled"
    } else {
        "spinning, the queue's interrupt is on another CPU"
    };
    // The read is at most a page, so `run_floor` gives it one buffer.
    super::run_floor(device, bs, job, how, |depth, buffers| {
        let buffer = &buffers[0];
        let spec = nvme::blkdev::FloorSpec::new(depth, ios);
        // Called with interrupts disabled (the driver's locks are not interrupt-safe); `sti;
        // hlt` cannot miss the wake-up of a completion that `news` did not see yet.
        let mut wait = |news: &dyn Fn() -> bool| {
            if let Some(hwq) = own_hwq.filter(|_| controller.host.polling_window(cpu)) {
                // nvme.irq_poll: an interrupt during the floor opened a window, so the queue's
                // vector is masked and no interrupt would end a halt. Poll; the poll closes the
                // window (unmask, reap once more) once the queue has been idle.
                controller.host.poll_adaptive(hwq, cpu, controller);
            } else if !halts {
                core::hint::spin_loop();
            } else if !news() {
                x86_64::instructions::interrupts::enable_and_hlt();
                x86_64::instructions::interrupts::disable();
            }
        };
        x86_64::instructions::interrupts::without_interrupts(|| {
            controller
                .host
                .measure_floor(cpu, namespace, spec, buffer.phys(), bs as usize, &mut wait)
        })
        .map_err(|e| super::FloorFailure {
            buffer_with_device: matches!(e, nvme::Error::FloorStalled { .. }),
            error: format!("{e}"),
        })
    })
}

/// The CPU each vector of `plan` is aimed at: vector 0 (admin, polled by the driver) at the boot
/// CPU, vector v at the CPU the one CPU map gives the first hardware queue on v; with
/// `cross` at a CPU of the next queue group instead (a deliberately wrong map).
fn vector_cpus(plan: &QueuePlan, cross: bool) -> Result<Vec<usize>, Error> {
    let queues = plan.nr_io_queues();
    let map = cpumap::plan(queues, queues, None)?;
    if map.queue_of_cpu != plan.cpu_map() {
        return Err(Error::Device(format!(
            "nvme: the driver's CPU map {:?} differs from the kernel's {:?}",
            plan.cpu_map(),
            map.queue_of_cpu
        )));
    }
    let mut cpus = Vec::with_capacity(plan.nr_vectors());
    cpus.push(0);
    for v in 1..plan.nr_vectors() {
        let hwq = plan.hwqs_of_vector(v).next().unwrap_or(0);
        let cpu = if cross {
            let other = (hwq + 1) % queues;
            map.vector_cpus.get(other).copied().unwrap_or(0)
        } else {
            map.vector_cpus.get(hwq).copied().unwrap_or(0)
        };
        cpus.push(cpu);
    }
    Ok(cpus)
}

fn probe(function: &'static PciFunction) -> Result<(), Error> {
    let opts = options();
    let index = NEXT_CONTROLLER.fetch_add(1, Ordering::Relaxed);
    let name = format!("nvme{index}");
    let at = function.address;
    pci::claim(function)?;
    let mmio = KernelMmio(pci::bar_mmio(function, 0)?);
    let ncpus = smp::online();
    let table = function.msix.as_ref().map(|m| m.table_size);
    let (mode, fell_back) = opts.driver.irq_mode(table);
    if fell_back {
        log::warn!("{name} ({at}): nvme.irq=msix but the function has no MSI-X capability; using INTx");
    }
    // MSI-X is programmed and enabled before the controller is enabled (QEMU only signals a
    // vector that was enabled when its completion queue was created, and the safe order costs
    // nothing on hardware), so the vectors follow a provisional plan (the device's grant is not
    // known before Set Features) and are re-aimed if the grant is smaller.
    let provisional = opts
        .driver
        .provisional_plan(ncpus, table)
        .map_err(|e| Error::Device(format!("{name} ({at}): queue plan: {e}")))?;
    // The handlers need the host, which needs the queues: they reach it through this cell
    // (an interrupt before it is filled finds nothing to do; the admin queue is polled).
    let slot: &'static spin::Once<&'static Controller> = Box::leak(Box::new(spin::Once::new()));
    let mut irqs = match mode {
        IrqMode::Poll => {
            let p = pci::get().ok_or(Error::NoPci)?;
            platform::pci::set_intx_disabled(&p.access, at, true)?;
            None
        }
        IrqMode::MsiX { .. } | IrqMode::Intx => {
            let platform_mode = if mode == IrqMode::Intx {
                InterruptMode::Intx
            } else {
                InterruptMode::MsiX
            };
            let cpus = vector_cpus(&provisional, opts.cross_vectors)?;
            let handler: &'static dyn IrqHandler = Box::leak(Box::new(Deferred(slot)));
            let handlers = alloc::vec![handler; cpus.len()];
            // Rows of the interrupt table: `nvme0#0` (admin), `nvme0#1` (I/O queue 1), ...
            let label: &'static str = Box::leak(name.clone().into_boxed_str());
            Some(interrupts::setup_vectors(
                function,
                Some(platform_mode),
                &cpus,
                label,
                &handlers,
            )?)
        }
    };
    let mut config = opts.driver.config(ncpus);
    config.requested_io_queues = u16::try_from(provisional.nr_io_queues()).unwrap_or(u16::MAX - 1);
    let (device_node, node_from) = crate::dev::aml::controller_node(function);
    if let Some(node) = device_node {
        kprintln!("numa: {name} ({at}): controller memory on node {node} (from {node_from})");
    }
    let ctrl = nvme::Controller::new(mmio, KernelDma::on(device_node), KernelDelay, config)
        .map_err(|e| Error::Device(format!("{name} ({at}): bring-up failed: {e}")))?;
    let info = ctrl.info().clone();
    // The queue count is capped by what the controller granted and by the interrupt vectors
    // the CPUs had free (a short grant is a warning, not a failure).
    let granted_vectors = irqs.as_ref().map(|i| i.vectors().len());
    let vector_cap = match (granted_vectors, mode) {
        (Some(granted), IrqMode::MsiX { .. }) if granted < provisional.nr_vectors() => Some(granted),
        _ => None,
    };
    let plan = if usize::from(ctrl.max_io_queues()) < provisional.nr_io_queues() || vector_cap.is_some() {
        let (queues, plan_mode) = match vector_cap {
            Some(granted) => {
                // Polled queues need no vector: they come on top of one queue per vector left.
                let polled = provisional.nr_polled();
                let queues = u16::try_from(granted.saturating_sub(1).max(1) + polled).unwrap_or(u16::MAX);
                kprintln!(
                    "warning: {name} ({at}): only {granted} interrupt vector(s) free of the {} planned: using at most {queues} I/O queue pair(s)",
                    provisional.nr_vectors()
                );
                let queues = opts.driver.queues.map_or(queues, |q| q.min(queues));
                let vectors = u16::try_from(granted).unwrap_or(u16::MAX);
                (Some(queues), IrqMode::MsiX { vectors })
            }
            None => (opts.driver.queues, mode),
        };
        let plan = opts
            .driver
            .plan(ncpus, queues, ctrl.max_io_queues(), plan_mode)
            .map_err(|e| Error::Device(format!("{name} ({at}): queue plan: {e}")))?;
        if let Some(irqs) = irqs.as_mut() {
            for (v, cpu) in vector_cpus(&plan, opts.cross_vectors)?.into_iter().enumerate() {
                irqs.aim(v, cpu)?;
            }
        }
        if usize::from(ctrl.max_io_queues()) < provisional.nr_io_queues() {
            kprintln!(
                "{name} ({at}): the controller granted {} I/O queue pair(s) of the {} asked for: re-planned",
                ctrl.max_io_queues(),
                provisional.nr_io_queues()
            );
        }
        plan
    } else {
        provisional
    };
    kprintln!(
        "{name} ({at}): \"{}\" serial \"{}\" firmware {}, {} namespace(s), {} I/O queue pair(s) granted, {} used for {} CPU(s), {:?}, max transfer {} KiB",
        info.model,
        info.serial,
        info.firmware,
        ctrl.namespaces().len(),
        ctrl.max_io_queues(),
        plan.nr_io_queues(),
        ncpus,
        mode,
        ctrl.max_transfer() / 1024,
    );
    if opts.cross_vectors {
        kprintln!("{name}: nvme.cross_vectors=1: each I/O queue's vector is aimed at another queue's CPU");
    }
    if let Some(i) = &irqs
        && i.vectors().len() < plan.nr_vectors()
    {
        return Err(Error::Device(format!(
            "{name} ({at}): {} interrupt vector(s) granted of the {} planned",
            i.vectors().len(),
            plan.nr_vectors()
        )));
    }
    let mut adaptive = opts.driver.adaptive();
    if adaptive.is_some() && !matches!(mode, IrqMode::MsiX { .. }) {
        log::warn!(
            "{name} ({at}): nvme.irq_poll needs MSI-X (the per-vector mask bit); interrupts are {mode:?}: irq_poll off"
        );
        adaptive = None;
    }
    if let Some(a) = adaptive {
        kprintln!(
            "{name}: irq_poll: after an interrupt its vector is masked and the queue's CPU polls until {} us without a completion or {} completions",
            a.idle_ns / 1000,
            a.budget
        );
    }
    let hc = HostConfig {
        timeout_ns: opts.driver.timeout_ns(),
        // Every queue polled (`nvme.irq=poll`, or `nvme.poll_queues=` covering them all): the
        // device's policy is poll. Some polled: their CPUs poll through `polling_window`, and
        // the policy is the interrupt queues'.
        completion: if !plan.interrupts_enabled() {
            CompletionPolicy::Poll
        } else if cpumap::needs_remote_completion() {
            // Some CPUs' APIC ids are beyond a device interrupt's reach: their completions
            // land on reachable CPUs and travel back through the per-CPU completion lists.
            CompletionPolicy::Remote
        } else {
            CompletionPolicy::Irq
        },
        cq_budget: 0,
        adaptive,
    };
    let host = Host::new(ctrl, plan, hc, |_, _| block::platform())
        .map_err(|e| Error::Device(format!("{name} ({at}): creating the I/O queues: {e}")))?;
    let controller: &'static Controller = Box::leak(Box::new(Controller {
        host,
        function,
        name: name.clone(),
        irqs: spin::Once::new(),
        abandoned: AtomicBool::new(false),
    }));
    slot.call_once(|| controller);
    crate::dev::register_power_off(controller);
    if let Some(i) = irqs {
        controller.irqs.call_once(|| i);
    }
    let irq_text = match controller.irqs.get() {
        Some(i) => i.describe(),
        None => String::from("polled (no interrupts)"),
    };
    let irq_vectors = controller.irqs.get().map(DeviceIrqs::idt_vectors).unwrap_or_default();
    let plan = controller.host.plan();
    let mut layout = String::new();
    for hwq in 0..plan.nr_io_queues() {
        let cpus_of: Vec<usize> = (0..plan.ncpus()).filter(|&c| plan.hwq_of_cpu(c) == Some(hwq)).collect();
        match plan.vector_of_hwq(hwq) {
            Some(v) => layout += &format!(" q{}:cpus{:?}->v{v}", hwq + 1, cpus_of),
            None if mode == IrqMode::Poll => layout += &format!(" q{}:cpus{:?}->v0", hwq + 1, cpus_of),
            None => layout += &format!(" q{}:cpus{:?}->polled", hwq + 1, cpus_of),
        }
    }
    kprintln!("{name}: interrupts: {irq_text}");
    kprintln!("{name}: queues:{layout}");
    if mode != IrqMode::Poll && plan.nr_polled() > 0 {
        let cpus: Vec<usize> = (0..plan.ncpus()).filter(|&c| plan.cpu_polls(c)).collect();
        kprintln!(
            "{name}: nvme.poll_queues={}: {} of {} I/O queue pair(s) polled (IEN=0, no vector), CPUs {cpus:?} reap their own while they wait",
            opts.driver.poll_queues.unwrap_or(0),
            plan.nr_polled(),
            plan.nr_io_queues()
        );
    }
    let batch = controller.host.controller().config().doorbell_batch;
    kprintln!(
        "{name}: SQ tail doorbell after at most {batch} command(s) of a burst, and at its last; a job refills after {batch} completion(s) of a reap (nvme.doorbell_batch)"
    );
    report_queue_nodes(&name, controller);
    let depth = controller.host.controller().queue_depth();
    for (i, ns) in controller.host.namespaces().iter().enumerate() {
        let queue = controller
            .host
            .queue(i)
            .ok_or_else(|| Error::Device(format!("{name}: namespace {} has no queue", ns.nsid)))?;
        let facts = DeviceFacts {
            name: format!("{name}n{}", i + 1),
            model: format!("{} nsid {} ({at})", info.model, ns.nsid),
            sector_size: ns.lba_size,
            capacity_sectors: ns.blocks,
            max_inflight: depth,
            max_transfer_bytes: u32::try_from(ns.max_transfer).unwrap_or(u32::MAX),
            irq_vectors: irq_vectors.clone(),
            aliases: disks::names::nvme_aliases(pci::location(at), &info.serial, ns.nsid),
        };
        let extra = format!(
            "interrupts: {irq_text}; {} I/O queue pair(s), {depth} tags per queue",
            plan.nr_io_queues()
        );
        // The controller's tick runs once per tick, from its first namespace's disk.
        let hooks: &'static dyn HostHooks = if i == 0 {
            controller
        } else {
            Box::leak(Box::new(OtherNamespace(controller)))
        };
        NAMESPACES.lock().push((facts.name.clone(), controller, i));
        let disk: &'static Disk<_> = Box::leak(Box::new(Disk::with_queue(facts, queue, hooks, extra)));
        block::register(disk);
    }
    Ok(())
}

/// The hooks of a controller's second and later namespaces: poll and counters as the first's,
/// no tick of their own (the first namespace's disk ticks the whole controller).
struct OtherNamespace(&'static Controller);

impl HostHooks for OtherNamespace {
    fn poll(&self, cpu: usize) -> usize {
        self.0.poll(cpu)
    }
    fn polling_window(&self, cpu: usize) -> bool {
        self.0.polling_window(cpu)
    }
    fn refill_after(&self) -> usize {
        self.0.refill_after()
    }
    fn tick(&self, _cpu: usize) {}
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.0.counters()
    }
}

/// The handler installed before the host exists: it forwards to the controller once the I/O
/// queues are created (no I/O CQ can signal before that; an early admin vector is ignored, the
/// admin queue is polled).
struct Deferred(&'static spin::Once<&'static Controller>);

impl IrqHandler for Deferred {
    fn handle(&self, vector_index: usize, cpu: usize) {
        if let Some(c) = self.0.get() {
            c.handle(vector_index, cpu);
        }
    }
}

/// With an SRAT: the node of each I/O queue's rings (read back from their bus addresses)
/// against the node of the queue's first CPU.
fn report_queue_nodes(name: &str, controller: &Controller) {
    let fw = crate::arch::firmware::get();
    let Some(numa) = &fw.numa else { return };
    let plan = controller.host.plan();
    let ctrl = controller.host.controller();
    let mut line = String::new();
    let (mut local, mut total) = (0, 0);
    for hwq in 0..plan.nr_io_queues() {
        let Some((sq, cq)) = ctrl.io_queue_rings(hwq) else {
            continue;
        };
        let owner = (0..plan.ncpus()).find(|&c| plan.hwq_of_cpu(c) == Some(hwq));
        let cpu_node = owner.and_then(node_of_cpu);
        let ring_node = numa
            .node_of_address(sq)
            .filter(|&n| numa.node_of_address(cq) == Some(n));
        let fmt_node = |n: Option<u32>| n.map_or(String::from("?"), |n| format!("{n}"));
        total += 1;
        if cpu_node.is_some() && cpu_node == ring_node {
            local += 1;
        }
        line += &format!(
            " q{}:cpu{}(node {})->rings node {}",
            hwq + 1,
            owner.map_or(String::from("?"), |c| format!("{c}")),
            fmt_node(cpu_node),
            fmt_node(ring_node)
        );
    }
    kprintln!("numa: {name} queues:{line}");
    kprintln!("numa: {name}: {local} of {total} I/O queues have their rings on their CPU's node");
}
