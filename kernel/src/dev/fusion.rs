//! Probe of the MegaRAID Fusion driver (`drivers/megasas-fusion`): SAS2208 (Thunderbolt),
//! SAS3108/3008/33xx/32xx (Invader family), SAS35xx/34xx (Ventura) and SAS39xx/38xx (Aero).
//!
//! Every Fusion id of the driver's table is matched; `megasas_fusion::match_pci` decides, and
//! the ids Linux and FreeBSD refuse are reported with the reason and not brought up. The probe
//! maps the generation's register BAR, asks for one MSI-X vector per CPU (INTx without MSI-X),
//! runs the driver's bring-up and prints its first-boot report to the console whether or not it
//! succeeds; `megasas.report_only=1` stops there. Otherwise each logical drive is registered as
//! `mfN` (MFI's are `mdN`), one hardware queue per reply queue, on the controller's shared tags.
//!
//! It runs against the emulated controller of `qemu/megasas-fusion/` (`cargo xtask qemu-fusion`,
//! `tests/fusion.scenarios`), which Linux's driver accepts, and the driver against the crate's
//! host-side model; not yet on hardware.
//!
//! Key routing: Fusion and MFI share the `megasas.` prefix. `dev::registry` hands this driver
//! the words whose key [`owns_key`] says are Fusion's and MFI every other `megasas.*` word, so
//! a key neither knows is refused by MFI's parser.

use crate::arch::console::kprintln;
use crate::arch::smp;
use crate::dev::block::{self, HostHooks};
use crate::dev::driver::PciDriver;
use crate::dev::hal::{KernelDelay, KernelDma, KernelMmio};
use crate::dev::interrupts::{self, DeviceIrqs, IrqHandler};
use crate::dev::{cpumap, hosts, pci};
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use megasas_fusion::Mmio as _;
use megasas_fusion::{FUSION_IDS, Options, PciMatch, VENDOR_LSI};
use platform::irq::InterruptMode;
use platform::pci::{DeviceMatch, PciFunction};

/// One match rule per id of the driver's table (refused ids included: the probe says why).
const MATCHES: [DeviceMatch; FUSION_IDS.len()] = {
    let mut m = [DeviceMatch::id(VENDOR_LSI, 0); FUSION_IDS.len()];
    let mut i = 0;
    while i < FUSION_IDS.len() {
        m[i] = DeviceMatch::id(VENDOR_LSI, FUSION_IDS[i].0);
        i += 1;
    }
    m
};

/// The driver's entry in the PCI driver table. Its keys are `megasas.*` (see [`owns_key`]).
pub const DRIVER: PciDriver = PciDriver {
    name: "megasas-fusion",
    matches: &MATCHES,
    configure,
    probe,
    floor_before_job: None,
    aim_for_jobs: None,
};

/// The Fusion driver's own `megasas.*` keys (the rest of `megasas.*` is MFI's).
const FUSION_KEYS: [&str; 9] = [
    "report_only",
    "queues",
    "bringup_ms",
    "reset_wait_ms",
    "rdpq",
    "fastpath",
    "jbod_map",
    "perf_mode",
    "rdpq_fault",
];

/// The `megasas.*` keys both MegaRAID drivers take, each for its own controllers.
const SHARED_KEYS: [&str; 1] = ["timeout_ms"];

/// Whether the command-line word `prefix.key=value` belongs to the Fusion driver alone.
pub fn owns_key(prefix: &str, word: &str) -> bool {
    prefix == "megasas" && FUSION_KEYS.contains(&megasas_key(word))
}

/// Whether the command-line word `prefix.key=value` is one the MFI driver owns and the Fusion
/// driver takes too.
pub fn shares_key(prefix: &str, word: &str) -> bool {
    prefix == "megasas" && SHARED_KEYS.contains(&megasas_key(word))
}

fn megasas_key(word: &str) -> &str {
    let key = word.split_once('.').map_or("", |(_, rest)| rest);
    key.split_once('=').map_or(key, |(k, _)| k)
}

static OPTIONS: spin::Once<Options> = spin::Once::new();

/// Parses the Fusion words (`megasas.report_only`, `megasas.queues`, `megasas.bringup_ms`,
/// `megasas.reset_wait_ms`, `megasas.timeout_ms` (shared with MFI), `megasas.rdpq`, `megasas.fastpath`, `megasas.jbod_map`,
/// `megasas.perf_mode`, the test-only
/// `megasas.rdpq_fault`).
/// A word under this driver's own name (`megasas-fusion.x=...`) is refused: its keys are
/// `megasas.*`.
fn configure(words: &[&str]) -> Result<(), Error> {
    if let Some(w) = words.iter().find(|w| !w.starts_with("megasas.")) {
        return Err(Error::Config(format!(
            "{w}: the Fusion driver's keys are megasas.report_only, megasas.queues, megasas.bringup_ms, megasas.reset_wait_ms, megasas.timeout_ms, megasas.rdpq, megasas.fastpath, megasas.jbod_map, megasas.perf_mode and megasas.rdpq_fault (test only)"
        )));
    }
    let options = Options::parse(&words.join(" ")).map_err(|e| Error::Config(format!("{e}")))?;
    OPTIONS.call_once(|| options);
    Ok(())
}

fn options() -> Options {
    OPTIONS.get().copied().unwrap_or_default()
}

type Host = megasas_fusion::blkdev::Host<KernelMmio, KernelDelay>;

/// The request descriptor as one 8-byte store (`VolatileMmio::write64`): the BAR is mapped
/// uncached, so an aligned 64-bit `mov` reaches the controller as one 8-byte write, as Linux's
/// `writeq` does.
impl megasas_fusion::Mmio64 for KernelMmio {
    fn write64(&self, offset: u32, value: u64) {
        if let Err(e) = self.0.write64(offset as usize, value) {
            log::error!("device register write (8 bytes) at {offset:#x} refused: {e}");
        }
    }
}

struct Controller {
    host: Host,
    function: &'static PciFunction,
    irqs: spin::Once<DeviceIrqs>,
    intx: bool,
    abandoned: AtomicBool,
    /// Shut down for power-off: the tick leaves it alone.
    shut_down: AtomicBool,
}

impl IrqHandler for Controller {
    fn handle(&self, vector_index: usize, cpu: usize) {
        if self.intx {
            let _ = self.host.handle_intx(cpu);
        } else if let Ok(v) = u16::try_from(vector_index) {
            self.host.handle_vector(v, cpu);
        }
    }
}

impl HostHooks for Controller {
    fn poll(&self, cpu: usize) -> usize {
        self.host.poll(cpu)
    }

    fn tick(&self, cpu: usize) {
        if self.shut_down.load(Ordering::Acquire) {
            return;
        }
        self.host.tick(cpu);
        if self.host.is_dead() {
            let name = format!("megasas-fusion {}", self.function.address);
            pci::take_out_of_service(self.function, &name, &self.abandoned, || {
                self.host.abandon_after_bus_master_off(cpu)
            });
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.host.counters();
        alloc::vec![
            ("fusion_timeouts", c.timeouts),
            ("fusion_resets", c.resets),
            ("fusion_failed_by_reset", c.failed_by_reset),
            ("fusion_refused_completions", c.refused_completions),
            ("fusion_unknown_drive", c.unknown_drive),
            ("fusion_fastpath_ios", c.fastpath_ios),
            ("fusion_stale_map_refusals", c.stale_map_refusals),
            ("fusion_map_changes", c.map_changes),
            ("fusion_map_sync_failures", c.map_sync_failures),
            ("fusion_fastpath_ios_after_map_change", c.fastpath_ios_after_map_change),
            ("fusion_raid1_reads_arm0", c.raid1_reads_arm0),
            ("fusion_raid1_reads_arm1", c.raid1_reads_arm1),
            ("fusion_raid1_write_pairs", c.raid1_write_pairs),
            ("fusion_raid1_bw_limited_ld_writes", c.raid1_bw_limited_ld_writes),
            ("fusion_high_iops_ios", c.high_iops_ios),
            ("fusion_jbod_map_ios", c.jbod_map_ios),
            ("fusion_jbod_stale_refusals", c.jbod_stale_refusals),
            ("fusion_jbod_map_changes", c.jbod_map_changes),
            ("fusion_jbod_raid_map_ios", c.jbod_raid_map_ios),
        ]
    }
}

impl crate::dev::PowerOff for Controller {
    fn power_off_name(&self) -> String {
        format!("megasas-fusion {}", self.function.address)
    }

    fn out_of_service(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed) || self.host.is_dead()
    }

    fn shut_down(&self) -> Result<(), String> {
        // The tick stops first, so that no recovery step takes the shut-down firmware for a
        // dead one. Release pairs with the Acquire load in `tick`.
        self.shut_down.store(true, Ordering::Release);
        // CTRL_CACHE_FLUSH, then CTRL_SHUTDOWN.
        self.host.controller().shutdown().map_err(|e| format!("{e}"))
    }
}

/// Forwards a vector to the controller once it exists (vectors are set up before bring-up,
/// whose IOC INIT names how many there are; the reply queues are not enabled before `start`).
struct Deferred(&'static spin::Once<&'static Controller>);

impl IrqHandler for Deferred {
    fn handle(&self, vector_index: usize, cpu: usize) {
        if let Some(c) = self.0.get() {
            c.handle(vector_index, cpu);
        }
    }
}

static NEXT_DRIVE: spin::Mutex<usize> = spin::Mutex::new(0);

/// The PCIe link's current speed code (LNKSTA bits 3:0); None where the function has no link
/// registers (no Express capability, or a root-complex integrated endpoint), where Linux reads 0.
fn pcie_link_speed(function: &PciFunction) -> Option<u8> {
    let pci = pci::get()?;
    let cap = function.capabilities.iter().find(|c| c.id == platform::pci::CAP_PCIE)?;
    let cfg = platform::pci::ConfigSpace::new(&pci.access, function.address);
    let flags = cfg.read16(u16::from(cap.offset) + 2).ok()?;
    // Device/port types with link registers: endpoints (0, 1), ports (4, 5, 6), bridges (7, 8).
    if !matches!((flags >> 4) & 0xF, 0 | 1 | 4..=8) {
        return None;
    }
    let status = cfg.read16(u16::from(cap.offset) + 0x12).ok()?;
    Some((status & 0xF) as u8)
}

fn probe(function: &'static PciFunction) -> Result<(), Error> {
    let at = function.address;
    let (generation, product) = match megasas_fusion::match_pci(function.vendor_id, function.device_id) {
        PciMatch::Supported { generation, name } => (generation, name),
        PciMatch::Refused { generation, reason } => {
            kprintln!(
                "megasas-fusion {at}: {:04x}:{:04x} ({generation:?}) not brought up: {reason}",
                function.vendor_id,
                function.device_id
            );
            return Ok(());
        }
        PciMatch::NotFusion => {
            return Err(Error::Device(format!(
                "megasas-fusion: {at} ({:04x}:{:04x}) is not a Fusion controller",
                function.vendor_id, function.device_id
            )));
        }
    };
    let opts = options();
    kprintln!(
        "megasas-fusion {at}: {product} ({generation:?}), registers in BAR{}",
        generation.register_bar()
    );
    pci::claim(function)?;
    let mmio = KernelMmio(pci::bar_mmio(function, generation.register_bar())?);
    let ncpus = smp::online();
    // One vector (reply queue) per CPU up to the MSI-X table; INTx without MSI-X, or when a
    // settled SP0 says the firmware does not do MSI-X (Linux then uses INTx).
    let sp0 = mmio.read32(megasas_fusion::regs::SP0);
    let fw_msix = megasas_fusion::regs::msix_advertised(sp0);
    if fw_msix == Some(false) {
        kprintln!("megasas-fusion {at}: SP0 {sp0:#010x} says no MSI-X: using INTx");
    }
    // The reply-queue layout Linux would choose (balanced: 8 high-IOPS queues first), decided
    // from the scratch pads before the vectors are asked for; bring-up checks it again.
    let plan = megasas_fusion::layout::plan(&megasas_fusion::layout::PlanInput {
        generation,
        sp0,
        sp1: mmio.read32(megasas_fusion::regs::SP1),
        cpus: ncpus,
        msix_table: function.msix.as_ref().map_or(0, |m| usize::from(m.table_size)),
        link_speed: pcie_link_speed(function),
        requested: opts.perf_mode,
        max_queues: opts.max_queues.unwrap_or(0),
    });
    let nvectors = match fw_msix {
        Some(false) => 0,
        _ => plan.vectors,
    };
    let high_iops = if nvectors > 0 { plan.high_iops_queues } else { 0 };
    let slot: &'static spin::Once<&'static Controller> = Box::leak(Box::new(spin::Once::new()));
    let handler: &'static dyn IrqHandler = Box::leak(Box::new(Deferred(slot)));
    let (irqs, vector_cpus) = if nvectors > 0 {
        // One latency vector per CPU; the high-IOPS vectors before them spread over the same
        // CPUs (Linux aims them at the controller's NUMA node).
        let latency = nvectors - usize::from(high_iops);
        let map = cpumap::plan(latency, latency, None)?;
        let aimed: Vec<usize> = (0..usize::from(high_iops))
            .map(|k| map.vector_cpus[k % latency])
            .chain(map.vector_cpus.iter().copied())
            .collect();
        let handlers = alloc::vec![handler; nvectors];
        let irqs = interrupts::setup_vectors(function, Some(InterruptMode::MsiX), &aimed, "megasas-fusion", &handlers)?;
        let cpus = irqs.vectors().iter().map(|v| v.cpu).collect();
        (irqs, cpus)
    } else {
        let irqs = interrupts::setup_vectors(function, Some(InterruptMode::Intx), &[0], "megasas-fusion", &[handler])?;
        (irqs, Vec::new())
    };
    let intx = vector_cpus.is_empty();
    let mut config = megasas_fusion::Config::new(generation, vector_cpus);
    config.high_iops_queues = high_iops;
    config.coalesce_every_queue = nvectors > 0 && plan.mode == megasas_fusion::layout::PerfMode::Iops;
    let pcie_bw_limited = megasas_fusion::layout::pcie_bw_limited(generation, pcie_link_speed(function));
    config.pcie_bw_limited = pcie_bw_limited;
    opts.apply(&mut config);
    let mut report = megasas_fusion::Report::new();
    let (device_node, node_from) = crate::dev::aml::controller_node(function);
    if let Some(node) = device_node {
        kprintln!("numa: megasas-fusion {at}: controller memory on node {node} (from {node_from})");
    }
    let built = Host::new(
        mmio,
        &KernelDma::on(device_node),
        KernelDelay,
        block::platform(),
        {
            let mut host_config = megasas_fusion::blkdev::HostConfig::new(ncpus, config);
            opts.apply_host(&mut host_config);
            host_config
        },
        &mut report,
    );
    // The first-boot diagnostic, printed whatever happened.
    kprintln!("{report}");
    let host = built.map_err(|e| Error::Device(format!("megasas-fusion {at}: bring-up failed: {e}")))?;
    if opts.report_only {
        kprintln!("megasas-fusion {at}: megasas.report_only=1: stopping after bring-up, no drive registered");
        return Ok(());
    }
    let controller: &'static Controller = Box::leak(Box::new(Controller {
        host,
        function,
        irqs: spin::Once::new(),
        intx,
        abandoned: AtomicBool::new(false),
        shut_down: AtomicBool::new(false),
    }));
    crate::dev::register_power_off(controller);
    slot.call_once(|| controller);
    controller.irqs.call_once(|| irqs);
    controller.host.start();
    let irq_text = controller.irqs.get().map_or_else(String::new, DeviceIrqs::describe);
    let irq_vectors = controller.irqs.get().map(DeviceIrqs::idt_vectors).unwrap_or_default();
    kprintln!("megasas-fusion {at}: interrupts: {irq_text}");
    let limits = controller.host.controller().limits();
    let io_tags = u32::from(limits.io_tags);
    let rings = match (limits.rdpq, limits.rdpq_supported) {
        (true, _) => "RDPQ mode (one ring per queue)",
        (false, true) => "contiguous rings (RDPQ offered, turned off by megasas.rdpq=off)",
        (false, false) => "contiguous rings (the firmware offers no RDPQ)",
    };
    kprintln!(
        "megasas-fusion {at}: reply queues: {} x {} entries, {rings}; firmware commands {} (SP0 {}), {io_tags} I/O tags",
        limits.queues,
        limits.reply_depth,
        limits.max_fw_cmds,
        limits.raw_fw_cmds
    );
    let high = controller.host.controller().high_iops_queues();
    let layout = if high > 0 {
        format!(
            "balanced ({}): reply queues 0-{} high-IOPS (interrupts coalesced by the firmware), {}-{} latency, one per CPU",
            plan.reason,
            high - 1,
            high,
            limits.queues - 1
        )
    } else if plan.high_iops_queues > 0 {
        String::from("latency (balanced was planned; bring-up found otherwise, see the report)")
    } else if plan.mode == megasas_fusion::layout::PerfMode::Iops && limits.coalesced_queues > 0 {
        format!(
            "iops ({}): one reply queue per CPU, interrupts of queues 0-{} coalesced by the firmware{}",
            plan.reason,
            limits.coalesced_queues - 1,
            if limits.coalesced_queues < limits.queues {
                format!(
                    " ({}-{} not: a partial group of 8)",
                    limits.coalesced_queues,
                    limits.queues - 1
                )
            } else {
                String::new()
            }
        )
    } else if plan.mode == megasas_fusion::layout::PerfMode::Iops {
        String::from(
            "latency (iops was planned; fewer than 8 reply queues, or no coalescing at READY: nothing to coalesce)",
        )
    } else {
        format!("latency ({})", plan.reason)
    };
    kprintln!("megasas-fusion {at}: queue layout: {layout}");
    let fastpath = controller.host.controller().fastpath_lds();
    let fastpath_text = if !fastpath.is_empty() {
        fastpath
            .iter()
            .map(|ld| {
                format!(
                    "LD {} RAID-{} over {} disks, strip {} KiB{}",
                    ld.target,
                    u8::from(ld.mirror),
                    ld.arm_handles.len(),
                    (1u32 << ld.strip_shift) / 2,
                    match (ld.mirror, ld.write) {
                        (true, true) if pcie_bw_limited => {
                            " (reads, balanced over both; writes to both as FastPath pairs, but over 32 KiB and the three after each on the LD path: the PCIe link limits the controller)"
                        }
                        (true, true) => " (reads, balanced over both; writes to both as FastPath pairs)",
                        (true, false) => " (reads, balanced over both; writes on the LD path)",
                        (false, _) => "",
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    } else if opts.fastpath == Some(false) {
        String::from("off (megasas.fastpath=off)")
    } else {
        String::from("none (no FastPath-ready RAID-0 or RAID-1 LD in a valid RAID map)")
    };
    kprintln!("megasas-fusion {at}: FastPath: {fastpath_text}");
    let jbod = controller.host.controller().jbod_map_routes();
    let system_pds = controller.host.drives().iter().filter(|d| d.drive.system_pd).count();
    if system_pds > 0 && controller.host.controller().jbod_by_raid_map() {
        let list: Vec<String> = jbod
            .iter()
            .map(|r| format!("PD {} handle {:#x}", r.device, r.handle))
            .collect();
        kprintln!(
            "megasas-fusion {at}: JBOD sequence map: not offered; {} of {system_pds} JBOD disk(s) by the RAID map's device handle ({})",
            jbod.len(),
            list.join(", ")
        );
    } else if system_pds > 0 {
        let jbod_text = if !jbod.is_empty() {
            let list: Vec<String> = jbod
                .iter()
                .map(|r| format!("PD {} handle {:#x} sequence {:#x}", r.device, r.handle, r.seq))
                .collect();
            format!(
                "{} of {system_pds} JBOD disk(s) by device handle and sequence number ({})",
                jbod.len(),
                list.join(", ")
            )
        } else if opts.jbod_map == Some(false) {
            String::from("off (megasas.jbod_map=off): JBOD disks by device id")
        } else {
            String::from("none (not offered, or refused: see the report): JBOD disks by device id")
        };
        kprintln!("megasas-fusion {at}: JBOD sequence map: {jbod_text}");
    }
    let disks = hosts::ControllerDisks {
        next_drive: &NEXT_DRIVE,
        prefix: "mf",
        host: controller,
        max_inflight: io_tags,
        irq_vectors,
        extra: format!(
            "interrupts: {irq_text}; {} reply queue(s), {io_tags} I/O tags shared by the controller's drives",
            controller.host.controller().queues()
        ),
    };
    hosts::register_drives(
        &disks,
        controller.host.drives().iter().enumerate().map(|(i, d)| {
            Ok(hosts::Drive {
                queue: controller
                    .host
                    .queue(i)
                    .ok_or_else(|| Error::Device(format!("megasas-fusion {at}: drive {i} has no queue")))?,
                model: if d.drive.system_pd {
                    format!("{product} JBOD disk {} ({at})", d.drive.target)
                } else {
                    format!("{product} LD {} ({at})", d.drive.target)
                },
                sector_size: d.drive.block_size,
                capacity_sectors: d.drive.blocks,
                max_transfer_bytes: d.max_transfer_bytes,
                aliases: disks::names::raid_aliases(pci::location(at), d.drive.target),
            })
        }),
    )
}
