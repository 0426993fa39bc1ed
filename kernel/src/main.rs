//! baremq: a bare-metal storage unikernel.
//!
//! `kmain` is entered from the boot assembly (crate `boot`) in 64-bit mode on
//! the boot stack with the low 4 GiB identity-mapped. It reads the boot
//! information, brings the platform up, reports it, and runs what the command
//! line asks for. Every run ends with one final line, `BAREMQ: SUCCESS` or
//! `BAREMQ: FAILURE: <reason>`, and the matching QEMU exit code.
#![no_std]
#![no_main]

extern crate alloc;

// Linking the boot crate brings in the headers and `_start32` (ENTRY of the
// linker script). Without a use, rustc would drop it and lld would silently
// emit an image with entry 0.
use boot as _;

mod app;
mod arch;
mod dev;
mod error;

use arch::console::{emergency_println, kprintln};
use arch::{apic, console, cpu, exit, firmware, idt, irq, memory, percpu, smp, time, watchdog};
use bootinfo::BootInfo;
use bootinfo::memmap::Range;
use core::panic::PanicInfo;

/// Job keys owned by the workload engine (collected here, parsed there).
const JOB_KEYS: &[&str] = &workload::ACCEPTED_KEYS;
const JOB_KEYS_HELP: &str = "job keys: job, rw, rwmixread, rwmixwrite, bs, iodepth, cpus, runtime, size, offset, \
     device, verify, verify_generation, completion, quiesce, seed, stop_on_error, io_timeout";

static BOOT_INFO: spin::Once<BootInfo> = spin::Once::new();

#[unsafe(no_mangle)]
extern "C" fn kmain(magic: u32, info: u32) -> ! {
    // SAFETY: first instruction path on the BSP; slot 0 belongs to it.
    unsafe { percpu::init_current(0, 0) };
    time::boot_mark_at("firmware", boot::entry_tsc());
    time::boot_mark("entry");
    console::init();
    idt::init();
    kprintln!();
    kprintln!("baremq {} starting", env!("CARGO_PKG_VERSION"));

    let boot = match bootinfo::parse_boot_info(&memory::IdentityMap, magic, info as u64) {
        Ok(b) => BOOT_INFO.call_once(|| b),
        Err(e) => exit::failure(format_args!("boot information: {e}")),
    };
    kprintln!(
        "boot: protocol {}, loader \"{}\", info at {:#x}",
        boot.protocol.name(),
        boot.loader_name,
        info
    );
    kprintln!("cmdline: \"{}\"", boot.cmdline);
    let driver_prefixes = dev::registry::key_prefixes();
    let config = match bootinfo::cmdline::parse_with_drivers(&boot.cmdline, JOB_KEYS, JOB_KEYS_HELP, &driver_prefixes) {
        Ok(c) => c,
        Err(e) => exit::failure(format_args!("command line: {e}")),
    };
    exit::configure_repeat(config.verdict_repeat_s, config.verdict_repeats_before_exit);
    console::init_logger(match config.log {
        bootinfo::cmdline::LogLevel::Error => log::LevelFilter::Error,
        bootinfo::cmdline::LogLevel::Warn => log::LevelFilter::Warn,
        bootinfo::cmdline::LogLevel::Info => log::LevelFilter::Info,
        bootinfo::cmdline::LogLevel::Debug => log::LevelFilter::Debug,
        bootinfo::cmdline::LogLevel::Trace => log::LevelFilter::Trace,
    });

    let (image_start, image_end) = boot::kernel_image_range();
    let mut reserved = heapless::Vec::<Range, { 2 + bootinfo::parse::MAX_MODULES }>::new();
    let _ = reserved.push(Range {
        start: 0,
        end: 0x10_0000,
    });
    let _ = reserved.push(Range {
        start: image_start,
        end: image_end,
    });
    // Boot modules (fio job files) stay where the loader put them: keep the allocator off them.
    for range in boot.module_ranges() {
        let _ = reserved.push(range);
    }
    let mem = match memory::init(&boot.memory, &reserved) {
        Ok(m) => m,
        Err(e) => exit::failure(format_args!("memory: {e}")),
    };
    time::boot_mark("memory");
    if let Err(e) = console::apply_choice(&config.console) {
        exit::failure(format_args!("console: {e}"));
    }
    if let Some(fb) = &boot.framebuffer {
        match arch::framebuffer::init(fb) {
            Ok(line) => kprintln!("{line}"),
            Err(e) => kprintln!("framebuffer: not used: {e}"),
        }
    }
    // Every driver parses its own keys (with the heap up), so a bad one stops the boot
    // before any device is touched.
    if let Err(e) = dev::registry::configure(&config.driver_words) {
        exit::failure(format_args!("{e}"));
    }
    if let Err(e) = app::net::configure(&config.driver_words) {
        exit::failure(format_args!("{e}"));
    }
    if let Err(e) = app::fioserve::configure(&config.driver_words) {
        exit::failure(format_args!("{e}"));
    }
    if let Some(cpu) = app::net::polling_cpu()
        && !app::fioserve::enabled()
    {
        exit::failure(format_args!(
            "command line: net.cpu={cpu} names the CPU that polls the network while the box serves fio clients: \
             it needs fio.server=1"
        ));
    }
    cpu::init_descriptor_tables();
    apic::disable_legacy_pics();
    apic::choose_mode();
    apic::init_local(irq::VECTOR_SPURIOUS);
    percpu::current()
        .apic_id
        .store(apic::id(), core::sync::atomic::Ordering::Relaxed);
    report_platform(boot, &mem);
    kprintln!("{}", arch::mce::init());
    time::boot_mark("cpu");

    let fw = match firmware::discover(boot) {
        Ok(f) => f,
        Err(e) => exit::failure(format_args!("ACPI: {e}")),
    };
    kprintln!(
        "acpi: RSDP from {}, revision {}, OEM \"{}\"; MADT: {} CPUs, {} I/O APICs, {} overrides; MCFG: {}",
        fw.rsdp_from,
        fw.revision,
        fw.oem,
        fw.madt.cpus.len(),
        fw.madt.io_apics.len(),
        fw.madt.overrides.len(),
        match &fw.mcfg {
            Some(m) if !m.windows.is_empty() => "present (ECAM)",
            _ => "absent (port I/O config space)",
        }
    );
    let fw = firmware::set(fw);
    if config.console == bootinfo::console::ConsoleChoice::Auto {
        console::apply_auto(fw.spcr.as_ref().map(Option::as_ref));
    }
    for line in &fw.ignored {
        kprintln!("{line}");
    }
    let highest_apic_id = fw.madt.cpus.iter().map(|c| c.apic_id).max().unwrap_or(0);
    let opt_out = fw.dmar.as_ref().is_some_and(|d| d.x2apic_opt_out);
    let was_x2apic = apic::is_x2apic();
    let apic_mode = apic::honour_dmar_opt_out(opt_out, highest_apic_id, irq::VECTOR_SPURIOUS);
    if opt_out || was_x2apic != apic_mode.is_x2apic() {
        kprintln!(
            "apic: {} mode{}: {}",
            if apic_mode.is_x2apic() { "x2apic" } else { "xapic" },
            if was_x2apic != apic_mode.is_x2apic() {
                " (switched back)"
            } else {
                ""
            },
            apic_mode.reason()
        );
    }
    match arch::iommu::quiesce(fw.dmar.as_ref(), fw.ivrs.as_ref()) {
        Ok(lines) => lines.iter().for_each(|line| kprintln!("{line}")),
        Err(e) => exit::failure(format_args!("{e}")),
    }
    match time::set_references(fw.hpet.as_ref(), fw.pm_timer, config.clock) {
        Ok(lines) => lines.iter().for_each(|line| kprintln!("{line}")),
        Err(e) => exit::failure(format_args!("clock: {e}")),
    }
    // The calibration window runs while PCI is read; it closes before the
    // first user of the clock (the tick, then drivers' delays).
    time::calibration_start();
    time::boot_mark("acpi");
    let pci = dev::pci::init(fw.mcfg.as_ref());
    if let Err(e) = console::after_pci_enumeration() {
        exit::failure(format_args!("console: {e}"));
    }
    match pci {
        Ok(p) => {
            kprintln!("pci: {} functions via {}", p.functions.len(), p.mechanism);
            let roots: alloc::vec::Vec<alloc::string::String> =
                p.roots.iter().map(|(s, b)| alloc::format!("{s:04x}:{b:02x}")).collect();
            kprintln!("pci: root buses: {}", roots.join(" "));
            time::boot_mark("pci");
            for line in dev::aml::init(fw, p, config.aml) {
                kprintln!("{line}");
            }
            time::boot_mark("aml");
            kprintln!("{}", platform::pci::PciListing(&p.functions));
            // Each device's NUMA node, from the _PXM of its host bridge (or its own).
            for f in p
                .functions
                .iter()
                .filter(|f| !matches!(f.header, platform::pci::HeaderKind::Bridge { .. }))
            {
                if let Some((node, pxm)) = dev::aml::node_of(fw, p, f) {
                    kprintln!("pci: {} on numa node {node} (_PXM {pxm})", f.address);
                }
            }
        }
        Err(e) => exit::failure(format_args!("PCI: {e}")),
    }
    if let Err(e) = dev::interrupts::init_ioapics() {
        exit::failure(format_args!("I/O APIC: {e}"));
    }
    time::boot_mark("ioapic");
    let affinity = match config
        .irq_affinity
        .map(platform::irq::AffinityPolicy::parse)
        .transpose()
    {
        Ok(a) => a.unwrap_or(platform::irq::AffinityPolicy::Spread),
        Err(e) => exit::failure(format_args!("command line: {e}")),
    };
    let clock = match time::calibrate() {
        Ok(c) => c,
        Err(e) => exit::failure(format_args!("clock: {e}")),
    };
    time::boot_mark("clock");
    report_clock(&clock);
    let apic_ids: alloc::vec::Vec<u32> = if config.smp {
        fw.madt.usable_cpus().map(|c| c.apic_id).collect()
    } else {
        alloc::vec![apic::id()]
    };
    // The tick (heartbeat and idle backstop) runs on every CPU from here;
    // APs are watched from the moment they are online.
    watchdog::init(config.watchdog_ms);
    watchdog::start_this_cpu(false);
    let cpus = smp::start_aps(&apic_ids, config.max_cpus.map(|n| n as usize));
    let halt = match config.idle {
        bootinfo::cmdline::IdleMode::Halt => true,
        bootinfo::cmdline::IdleMode::Poll => false,
        bootinfo::cmdline::IdleMode::Auto => arch::idle::under_hypervisor(),
    };
    arch::idle::set_halt(halt);
    arch::idle::set_halt_poll_ns(u64::from(config.halt_poll_us) * 1000);
    kprintln!(
        "idle: {} while waiting for completions{}",
        match (halt, config.halt_poll_us) {
            (false, _) => alloc::string::String::from("poll"),
            (true, 0) => alloc::string::String::from("halt"),
            (true, us) => alloc::format!("halt after {us} us of polling"),
        },
        if config.idle == bootinfo::cmdline::IdleMode::Auto {
            " (idle=auto)"
        } else {
            ""
        }
    );
    match cpu::select_crc32c(config.crc32c) {
        Ok(line) => kprintln!("{line}"),
        Err(e) => exit::failure(format_args!("command line: {e}")),
    }
    dev::set_floor_depths(config.floor_depths);
    smp::report(&cpus);
    report_numa(fw, &cpus);
    // CPUs left out on purpose (`cpus.max=`, capacity) are fine; one that was started and
    // never came online is a fault of the box.
    if cpus.iter().any(|c| c.state == platform::cpus::CpuState::Failed) {
        exit::failure(format_args!("not every CPU came online"));
    }
    if let Err(e) = affinity.validate(smp::online() as u32) {
        exit::failure(format_args!("command line: irq.affinity: {e}"));
    }
    dev::cpumap::set_affinity(affinity);
    time::boot_mark("smp");

    if let Some(test) = config.test.filter(|t| *t != bootinfo::cmdline::SelfTest::Net) {
        app::selftest::run(test);
    }

    if let Err(e) = dev::null::create_null(&config) {
        exit::failure(format_args!("{e}"));
    }
    dev::registry::set_forced_failure(config.probe_fail);
    for outcome in dev::registry::probe_all() {
        if outcome.failed == 0 {
            kprintln!("{}: {} controller(s)", outcome.driver, outcome.claimed);
        } else {
            kprintln!(
                "{}: {} controller(s), {} failed and skipped",
                outcome.driver,
                outcome.claimed,
                outcome.failed
            );
        }
    }
    dev::block::seal();
    dev::block::report();
    time::boot_mark("devices");
    if config.test == Some(bootinfo::cmdline::SelfTest::Net) {
        app::net::test();
    }
    if app::fioserve::enabled() {
        kprintln!("boot phases (ms): {}", time::BootPhases);
        if !config.job_words.is_empty() {
            exit::failure(format_args!(
                "fio.server=1 runs fio jobs: a boot job beside it is a fio job (a fio boot module or fio words \
                 after --), not native job words"
            ));
        }
        let fio_files = app::fio::job_files(boot, config.fio_modules);
        app::fioserve::serve(
            &fio_files,
            &config.fio_words,
            &config.fio_overrides,
            bootinfo::memmap::totals(&boot.memory).usable,
        );
    }
    app::net::bring_up_at_boot();
    kprintln!("boot phases (ms): {}", time::BootPhases);
    let fio_files = app::fio::job_files(boot, config.fio_modules);
    if config.job_words.is_empty() && config.fio_words.is_empty() && fio_files.is_empty() {
        kprintln!("no job on the command line: platform and devices reported");
        dev::before_power_off();
        exit::success();
    }
    let outcome = if config.job_words.is_empty() {
        app::fio::run(
            &fio_files,
            &config.fio_words,
            &config.fio_overrides,
            bootinfo::memmap::totals(&boot.memory).usable,
            &app::jobs::online_cpus(),
        )
    } else if !config.fio_words.is_empty() || !fio_files.is_empty() {
        Err(alloc::string::String::from(
            "native job words (rw=..., job=...) and fio jobs (a fio boot module or words after --) cannot be              mixed in one boot: give one or the other",
        ))
    } else {
        app::jobs::run(&config.job_words)
    };
    dev::before_power_off();
    match outcome {
        Ok(true) => exit::success(),
        Ok(false) => exit::failure(format_args!("a job failed (see its report)")),
        Err(e) => exit::failure(format_args!("{e}")),
    }
}

fn report_platform(boot: &BootInfo, mem: &memory::MemoryReport) {
    kprintln!("cpu: {}", cpu::describe());
    kprintln!("memory map ({} entries):", boot.memory.len());
    for r in &boot.memory {
        kprintln!(
            "  {:#014x}-{:#014x} {:>10} KiB {}",
            r.start,
            r.end(),
            r.len / 1024,
            r.kind.name()
        );
    }
    let t = &mem.totals;
    kprintln!(
        "memory: ram {} MiB (usable + ACPI, rounded up to 2 MiB; usable {} KiB, reserved {} KiB, top {:#x}); heap {} MiB; free {} MiB (above 4 GiB: {} MiB mapped, {} MiB not mapped)",
        ram_mib(t.ram),
        t.usable / 1024,
        t.reserved / 1024,
        t.top,
        mem.heap_bytes >> 20,
        mem.free_bytes >> 20,
        mem.above_4g_mapped >> 20,
        mem.above_4g_unmapped >> 20
    );
}

/// One `numa:` line per node (CPUs by kernel index), or that there is no SRAT.
fn report_numa(fw: &firmware::Firmware, cpus: &[smp::CpuEntry]) {
    let Some(numa) = &fw.numa else {
        kprintln!("numa: no SRAT (one node)");
        return;
    };
    let mut by_index: alloc::vec::Vec<&smp::CpuEntry> = cpus.iter().collect();
    by_index.sort_by_key(|c| c.index);
    let apic_ids: alloc::vec::Vec<u32> = by_index.iter().map(|c| c.apic_id).collect();
    for node in &numa.nodes {
        kprintln!("numa: {}", numa.describe(node, &apic_ids));
    }
    for node in &numa.nodes {
        if let Some(row) = numa.distances_from(node.node) {
            kprintln!("numa: node {} distances (SLIT): {:?}", node.node, row);
        }
    }
    let unplaced = apic_ids.iter().filter(|&&id| fw.node_of_apic_id(id).is_none()).count();
    if unplaced > 0 {
        kprintln!("numa: {unplaced} CPU(s) not listed in the SRAT");
    }
    let (local, placed) = smp::stack_locality();
    kprintln!("numa: AP stacks: {local} of {placed} on their CPU's node");
    let (image_start, _) = boot::kernel_image_range();
    match fw.node_of_address(image_start) {
        Some(node) => kprintln!("numa: the kernel image is on node {node}"),
        None => kprintln!("numa: the kernel image lies in no SRAT memory range"),
    }
}

fn report_clock(clock: &time::Calibration) {
    kprintln!(
        "clock: tsc {}.{:03} MHz from {}; lapic timer {}.{:03} MHz (divide 16); within {} ppm over {}.{} ms; apic mode {} id {}",
        clock.tsc_hz / 1_000_000,
        (clock.tsc_hz / 1000) % 1000,
        clock.source.name(),
        clock.lapic_hz / 1_000_000,
        (clock.lapic_hz / 1000) % 1000,
        clock.error_ppm,
        clock.window_ns / 1_000_000,
        (clock.window_ns / 100_000) % 10,
        if apic::is_x2apic() { "x2apic" } else { "xapic" },
        apic::id()
    );
}

/// Installed RAM in MiB: the firmware map loses the legacy VGA/BIOS hole and
/// keeps a few pages for itself, so round the usable + ACPI total up to the
/// 2 MiB granularity memory is configured in.
fn ram_mib(bytes: u64) -> u64 {
    bytes.next_multiple_of(2 << 20) >> 20
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    x86_64::instructions::interrupts::disable();
    emergency_println!("PANIC on cpu{}: {}", percpu::index(), info);
    exit::failure(format_args!("kernel panic: {}", info.message()))
}
