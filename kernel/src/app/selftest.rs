//! Built-in self-tests selected with `test=NAME`. Each either ends the run
//! itself (the fault tests end through the exception reporter) or returns
//! after checking what it measured; a failed check ends the run with
//! FAILURE and the measured figures.

use crate::arch::console::kprintln;
use crate::arch::{apic, exit, irq, percpu, smp, time, watchdog};
use crate::dev::interrupts::IrqHandler;
use alloc::vec::Vec;
use bootinfo::cmdline::SelfTest;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use platform::irq::InterruptMode;

pub fn run(test: SelfTest) {
    kprintln!("selftest: {}", test.name());
    match test {
        SelfTest::PageFault => {
            // Beyond the identity-mapped 4 GiB: not present.
            let p = 0x0dea_dbee_f000_u64 as *const u64;
            // SAFETY: deliberately invalid; the #PF handler ends the run.
            let v = unsafe { core::ptr::read_volatile(p) };
            crate::arch::exit::failure(format_args!("read of an unmapped address returned {v:#x}"));
        }
        SelfTest::InvalidOpcode => {
            // SAFETY: raises #UD; the handler ends the run.
            unsafe { core::arch::asm!("ud2") };
        }
        SelfTest::GeneralProtection => {
            // SAFETY: a non-canonical address raises #GP; the handler ends the run.
            unsafe { core::ptr::read_volatile(0x8000_0000_0000_0000u64 as *const u64) };
        }
        SelfTest::DoubleFault => {
            x86_64::instructions::interrupts::disable();
            crate::arch::idt::remove_gate_for_test(13);
            // SAFETY: #GP through a missing gate escalates to #DF, which ends the run.
            unsafe { core::ptr::read_volatile(0x8000_0000_0000_0000u64 as *const u64) };
        }
        SelfTest::Breakpoint => {
            // SAFETY: raises #BP; the handler ends the run (TCG only: kvm-pvm cannot emulate int3).
            unsafe { core::arch::asm!("int3") };
        }
        SelfTest::MachineCheck => {
            // SAFETY: raises vector 18 as a software interrupt; the #MC handler ends the run.
            unsafe { core::arch::asm!("int 18") };
        }
        SelfTest::Panic => panic!("deliberate panic requested by test=panic"),
        SelfTest::Timer => timer(),
        SelfTest::Ipi => ipi_ping_pong(),
        SelfTest::IpiStorm => {
            if let Err(e) = ipi_storm() {
                crate::arch::exit::failure(format_args!("ipistorm: {e}"));
            }
        }
        SelfTest::OnEachCpu => on_each_cpu(),
        SelfTest::Edu => {
            if let Err(e) = edu() {
                crate::arch::exit::failure(format_args!("edu: {e}"));
            }
        }
        SelfTest::Hang => hang(),
        SelfTest::MsiVectors => {
            if let Err(e) = msi_vectors() {
                exit::failure(format_args!("msivectors: {e}"));
            }
        }
        SelfTest::Nmi => self_nmi(),
        SelfTest::IommuLeftOn => {
            if let Err(e) = iommu_left_on() {
                exit::failure(format_args!("iommu: {e}"));
            }
        }
        // Needs the NIC probed: main runs it after the devices (`app::net::test`).
        SelfTest::Net => {}
    }
}

/// Sends this CPU an NMI the watchdog did not send: the handler must report
/// it (unknown NMI) and return, and this code must go on.
fn self_nmi() {
    let before = crate::arch::idt::unknown_nmis();
    crate::arch::apic::send_ipi(crate::arch::apic::id(), crate::arch::apic::Delivery::Nmi);
    let deadline = time::now_ns() + 1_000_000_000;
    while crate::arch::idt::unknown_nmis() == before && time::now_ns() < deadline {
        core::hint::spin_loop();
    }
    let seen = crate::arch::idt::unknown_nmis() - before;
    if seen != 1 {
        exit::failure(format_args!(
            "nmi: {seen} unknown NMIs seen after sending one to this CPU"
        ));
    }
    kprintln!("nmi: selftest: the unexpected NMI was reported and the run went on");
}

/// Does to the first VT-d unit what firmware sometimes leaves behind
/// (translation over an empty root table, interrupt remapping over an empty
/// table, queued invalidation on), then runs the boot's IOMMU check again
/// and checks that it found all three and turned them off.
fn iommu_left_on() -> Result<(), crate::error::Error> {
    use platform::acpi::vtd;
    use platform::mmio::{Mmio32, VolatileMmio};
    let fw = crate::arch::firmware::get();
    let Some(dmar) = fw.dmar.as_ref().filter(|d| !d.units.is_empty()) else {
        return Err(crate::error::Error::Device(
            "no VT-d unit (run QEMU with -device intel-iommu)".into(),
        ));
    };
    let base = dmar.units[0].register_base;
    let regs = crate::arch::memory::map_mmio(base, vtd::REGISTER_BYTES as u64)?;
    // SAFETY: the unit's register page, mapped uncached; nothing else runs on it now.
    let mmio = unsafe { VolatileMmio::new(regs, vtd::REGISTER_BYTES) };
    let write64 = |offset: usize, value: u64| -> Result<(), crate::error::Error> {
        mmio.write32(offset, value as u32)?;
        mmio.write32(offset + 4, (value >> 32) as u32)?;
        Ok(())
    };
    let command = |bit: u32| -> Result<(), crate::error::Error> {
        let status = mmio.read32(vtd::GSTS)? & !vtd::ONE_SHOT;
        mmio.write32(vtd::GCMD, status | bit)?;
        for _ in 0..1_000_000 {
            if mmio.read32(vtd::GSTS)? & bit != 0 {
                return Ok(());
            }
        }
        Err(crate::error::Error::Device(alloc::format!(
            "VT-d unit at {base:#x} did not take command {bit:#x}"
        )))
    };
    // Zeroed pages: an empty root table, interrupt remapping table and invalidation queue.
    let page = || -> Result<u64, crate::error::Error> {
        let phys = crate::arch::memory::alloc_frames(4096, 4096)?;
        // SAFETY: a fresh frame from the allocator, identity-mapped, owned here.
        unsafe { core::ptr::write_bytes(phys as *mut u8, 0, 4096) };
        Ok(phys)
    };
    write64(vtd::RTADDR, page()?)?;
    command(vtd::ROOT_TABLE_POINTER)?;
    write64(vtd::IQA, page()?)?;
    write64(vtd::IQT, 0)?;
    command(vtd::QUEUED_INVALIDATION)?;
    if dmar.interrupt_remapping {
        write64(vtd::IRTA, page()?)?;
        command(vtd::INTERRUPT_TABLE_POINTER)?;
        command(vtd::INTERRUPT_REMAPPING)?;
    }
    command(vtd::TRANSLATION)?;
    kprintln!(
        "iommu: selftest: unit at {base:#x} now has GSTS {:#x}, as firmware might leave it",
        mmio.read32(vtd::GSTS)?
    );
    for line in crate::arch::iommu::quiesce(Some(dmar), None)? {
        kprintln!("{line}");
    }
    let status = mmio.read32(vtd::GSTS)?;
    if status & (vtd::TRANSLATION | vtd::INTERRUPT_REMAPPING | vtd::QUEUED_INVALIDATION) != 0 {
        return Err(crate::error::Error::Device(alloc::format!(
            "VT-d unit at {base:#x} still has GSTS {status:#x} after the check"
        )));
    }
    kprintln!("iommu: selftest: everything firmware could leave on is off again (GSTS {status:#x})");
    Ok(())
}

/// Runs the LAPIC timer at 1 kHz and checks that the TSC clock advanced by
/// about one millisecond per tick over 200 ticks.
fn timer() {
    const HZ: u64 = 1000;
    const TICKS: u64 = 200;
    // The per-CPU tick counts into `timer_ticks`; run it at 1 kHz for the test.
    let ticks = &percpu::current().timer_ticks;
    let start_ticks = ticks.load(Ordering::Relaxed);
    let t0 = time::now_ns();
    watchdog::set_tick_rate(HZ);
    x86_64::instructions::interrupts::enable();
    let deadline = t0 + 5_000_000_000;
    let mut last = t0;
    while ticks.load(Ordering::Relaxed) - start_ticks < TICKS && time::now_ns() < deadline {
        let now = time::now_ns();
        if now < last {
            crate::arch::exit::failure(format_args!("clock went backwards: {now} < {last}"));
        }
        last = now;
        x86_64::instructions::hlt();
    }
    x86_64::instructions::interrupts::disable();
    watchdog::set_tick_rate(watchdog::TICK_HZ);
    let elapsed = time::now_ns() - t0;
    let got = ticks.load(Ordering::Relaxed) - start_ticks;
    let expected_ns = got * 1_000_000_000 / HZ;
    // The line names the ticks waited for: one more can land between the loop's last check and
    // the `cli` (a vCPU the host stalls there), and the ratio below uses what was counted.
    kprintln!(
        "timer: {TICKS} LAPIC ticks at {HZ} Hz (counted {got}) in {} us of TSC time (expected {} us, ratio {}.{:03})",
        elapsed / 1000,
        expected_ns / 1000,
        elapsed / expected_ns.max(1),
        (elapsed % expected_ns.max(1)) * 1000 / expected_ns.max(1)
    );
    if got < TICKS {
        crate::arch::exit::failure(format_args!("only {got} of {TICKS} timer interrupts within 5 s"));
    }
    // Generous bounds: TCG on a shared host delays interrupts, but a clock or
    // timer calibrated wrongly is off by far more than this.
    if elapsed < expected_ns / 2 || elapsed > expected_ns * 2 {
        crate::arch::exit::failure(format_args!(
            "clock and LAPIC timer disagree: {TICKS} ticks took {elapsed} ns, expected about {expected_ns} ns"
        ));
    }
    kprintln!("timer: clock and LAPIC timer agree");
}

static PONGS: AtomicU64 = AtomicU64::new(0);
static PING_FROM: AtomicU32 = AtomicU32::new(0);

fn on_ping(_vector: u8, _cpu: u32) {
    apic::send_ipi(
        PING_FROM.load(Ordering::Acquire),
        apic::Delivery::Fixed(irq::VECTOR_PONG),
    );
}

fn on_pong(_vector: u8, _cpu: u32) {
    PONGS.fetch_add(1, Ordering::Release);
}

/// Percentile of sorted samples (nearest rank).
fn percentile(sorted: &[u64], p: f64) -> u64 {
    let rank = ((p / 100.0) * sorted.len() as f64) as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// IPI round trips from CPU 0 to every other CPU: ping there, pong back.
fn ipi_ping_pong() {
    const PINGS: usize = 2000;
    let n = smp::online();
    if n < 2 {
        crate::arch::exit::failure(format_args!("test=ipi needs at least 2 CPUs online (have {n})"));
    }
    irq::register_fn(irq::VECTOR_PING, "ipi-ping", on_ping);
    irq::register_fn(irq::VECTOR_PONG, "ipi-pong", on_pong);
    PING_FROM.store(apic::id(), Ordering::Release);
    x86_64::instructions::interrupts::enable();
    for target in 1..n {
        let dest = percpu::cpu(target).apic_id.load(Ordering::Relaxed);
        let mut samples = Vec::with_capacity(PINGS);
        for _ in 0..PINGS {
            let before = PONGS.load(Ordering::Acquire);
            let t0 = time::rdtsc();
            apic::send_ipi(dest, apic::Delivery::Fixed(irq::VECTOR_PING));
            let deadline = time::now_ns() + 1_000_000_000;
            while PONGS.load(Ordering::Acquire) == before {
                if time::now_ns() > deadline {
                    crate::arch::exit::failure(format_args!("cpu{target} did not answer an IPI ping within 1 s"));
                }
                core::hint::spin_loop();
            }
            samples.push(time::ticks_to_ns(time::rdtsc() - t0));
        }
        samples.sort_unstable();
        kprintln!(
            "ipi: cpu0 <-> cpu{target} round trip over {PINGS} pings: min {} ns, p50 {} ns, p99 {} ns, max {} ns",
            samples[0],
            percentile(&samples, 50.0),
            percentile(&samples, 99.0),
            samples[PINGS - 1]
        );
    }
    x86_64::instructions::interrupts::disable();
    let pings: u64 = (1..n).map(|c| irq::TABLE.count(irq::VECTOR_PING, c as u32)).sum();
    let pongs = irq::TABLE.count(irq::VECTOR_PONG, 0);
    let expected = (PINGS * (n - 1)) as u64;
    kprintln!("ipi: {pings} pings handled on other CPUs, {pongs} pongs on cpu0 (expected {expected} each)");
    if pings != expected || pongs != expected {
        crate::arch::exit::failure(format_args!(
            "IPI counts do not balance: {pings} pings, {pongs} pongs, {expected} sent"
        ));
    }
}

static RAN_ON: [AtomicU32; percpu::MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; percpu::MAX_CPUS];

/// How many times this CPU ran `record_cpu`: CPU-local state, touched only
/// by its own CPU with interrupts off.
static LOCAL_RUNS: percpu::CpuLocal<u32> = crate::arch::percpu::cpu_local!(0);

fn record_cpu(target: usize) {
    let me = percpu::index();
    let runs = LOCAL_RUNS.with(|n| {
        *n += 1;
        *n
    });
    // Record who ran the work aimed at `target`, and how often it ran there.
    if runs == 2 {
        RAN_ON[target].store(me as u32, Ordering::Release);
    }
}

/// Runs a function on every CPU twice and checks that each ran it, on
/// itself, twice (counted in CPU-local state).
fn on_each_cpu() {
    smp::on_each_cpu(record_cpu);
    smp::on_each_cpu(record_cpu);
    let n = smp::online();
    let mut ok = 0;
    for (i, slot) in RAN_ON.iter().enumerate().take(n) {
        let who = slot.load(Ordering::Acquire);
        if who as usize != i {
            crate::arch::exit::failure(format_args!("work aimed at cpu{i} ran on cpu{who}"));
        }
        ok += 1;
    }
    kprintln!("oneach: ran on all {ok} online CPUs, each on its own CPU");
}

const EDU_VENDOR: u16 = 0x1234;
const EDU_DEVICE: u16 = 0x11e8;
const EDU_ID: usize = 0x00;
const EDU_IRQ_STATUS: usize = 0x24;
const EDU_IRQ_RAISE: usize = 0x60;
const EDU_IRQ_ACK: usize = 0x64;

/// QEMU's `edu` device as an interrupt source: acknowledges each interrupt.
struct Edu {
    mmio: &'static platform::mmio::VolatileMmio,
}

impl Edu {
    fn ack(&self) {
        use platform::mmio::Mmio32;
        // Acknowledge before EOI so a level-triggered INTx line drops.
        if let Ok(status) = self.mmio.read32(EDU_IRQ_STATUS) {
            let _ = self.mmio.write32(EDU_IRQ_ACK, status);
        }
    }
}

impl IrqHandler for Edu {
    fn handle(&self, _vector_index: usize, _cpu: usize) {
        self.ack();
    }
}

/// Finds and claims QEMU's `edu` device and checks its identification
/// register; the register window lives for the rest of the run.
fn claim_edu() -> Result<
    (
        &'static platform::pci::PciFunction,
        &'static platform::mmio::VolatileMmio,
    ),
    crate::error::Error,
> {
    use crate::dev::pci;
    use crate::error::Error;
    use platform::mmio::Mmio32;
    let function = pci::find(EDU_VENDOR, EDU_DEVICE)
        .next()
        .ok_or_else(|| Error::Device("no edu device (1234:11e8): add `-device edu` to QEMU".into()))?;
    pci::claim(function)?;
    let mmio: &'static platform::mmio::VolatileMmio =
        alloc::boxed::Box::leak(alloc::boxed::Box::new(pci::bar_mmio(function, 0)?));
    let id = mmio.read32(EDU_ID)?;
    if id & 0xFF != 0xED {
        return Err(Error::Device(alloc::format!(
            "edu identification register reads {id:#x}"
        )));
    }
    Ok((function, mmio))
}

/// Routes QEMU's `edu` device interrupt to every CPU in turn, by MSI and by
/// INTx, and checks by the per-CPU counts that each landed where aimed.
fn edu() -> Result<(), crate::error::Error> {
    use crate::dev::interrupts;
    use crate::error::Error;
    use platform::irq::InterruptMode;
    use platform::mmio::Mmio32;
    let (function, mmio) = claim_edu()?;
    let edu: &'static Edu = alloc::boxed::Box::leak(alloc::boxed::Box::new(Edu { mmio }));
    let n = smp::online();
    x86_64::instructions::interrupts::enable();
    for mode in [InterruptMode::Msi, InterruptMode::Intx] {
        let mut irq = interrupts::setup_vectors(function, Some(mode), &[0], "edu", &[edu])?;
        kprintln!("edu: {} at {}: {}", function.address, mode_name(mode), irq.describe());
        for target in 0..n {
            irq.aim(0, target)?;
            // Vector numbers are per CPU: aiming at another CPU may change it.
            let vector = irq.vectors()[0].vector;
            let before: Vec<u64> = (0..n).map(|c| irq::TABLE.count(vector, c as u32)).collect();
            mmio.write32(EDU_IRQ_RAISE, 1)?;
            let deadline = time::now_ns() + 1_000_000_000;
            while irq::TABLE.count(vector, target as u32) == before[target] {
                if time::now_ns() > deadline {
                    return Err(Error::Device(alloc::format!(
                        "{} interrupt aimed at cpu{target} did not arrive there within 1 s",
                        mode_name(mode)
                    )));
                }
                core::hint::spin_loop();
            }
            time::delay_us(1000);
            for (c, &was) in before.iter().enumerate() {
                let got = irq::TABLE.count(vector, c as u32) - was;
                let want = u64::from(c == target);
                if got != want {
                    return Err(Error::Device(alloc::format!(
                        "{} interrupt aimed at cpu{target}: cpu{c} handled {got} (expected {want})",
                        mode_name(mode)
                    )));
                }
            }
        }
        // Dropping the vectors masks the device and frees them for the next mode.
        drop(irq);
        kprintln!(
            "edu: {} interrupt delivered to each of {n} CPUs exactly where aimed",
            mode_name(mode)
        );
    }
    x86_64::instructions::interrupts::disable();
    kprintln!("interrupts per CPU:");
    kprintln!("{}", irq::TABLE.display(n));
    Ok(())
}

fn mode_name(mode: platform::irq::InterruptMode) -> &'static str {
    match mode {
        platform::irq::InterruptMode::MsiX => "MSI-X",
        platform::irq::InterruptMode::Msi => "MSI",
        platform::irq::InterruptMode::Intx => "INTx",
    }
}

static SELF_IPIS: AtomicU64 = AtomicU64::new(0);
static STORM_STOP: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
static STORM_EDU: spin::Once<&'static platform::mmio::VolatileMmio> = spin::Once::new();

/// The edu device during the IPI storm.
struct StormEdu(Edu);

impl IrqHandler for StormEdu {
    fn handle(&self, _vector_index: usize, _cpu: usize) {
        // A device interrupt whose handler sends an IPI, as the block layer's
        // completion path does (a softirq self-IPI): it must not disturb an IPI
        // that the interrupted code on this CPU is in the middle of sending.
        self.0.ack();
        apic::send_ipi(apic::id(), apic::Delivery::Fixed(irq::VECTOR_SELF_TEST));
    }
}

fn on_self_ipi(_vector: u8, _cpu: u32) {
    SELF_IPIS.fetch_add(1, Ordering::Relaxed);
}

/// Runs on CPU 1: makes the edu device interrupt CPU 0 over and over (the
/// emulated device runs under QEMU's global lock, like the MegaRAID
/// controller whose completions exposed the bug this test guards against).
fn storm_kicker(_arg: usize) {
    use platform::mmio::Mmio32;
    let Some(mmio) = STORM_EDU.get() else { return };
    while !STORM_STOP.load(Ordering::Acquire) {
        let _ = mmio.write32(EDU_IRQ_RAISE, 1);
        time::delay_ns(1_000);
    }
}

/// CPU 0 pings CPU 2 from task context while the edu device, kicked by CPU 1,
/// keeps interrupting CPU 0 and CPU 0's handler sends self-IPIs. A ping that
/// an interrupt retargets (the xAPIC ICR is two registers) is lost, and the
/// test fails on the missing pong.
fn ipi_storm() -> Result<(), crate::error::Error> {
    use crate::dev::interrupts;
    use crate::error::Error;
    const PINGS: usize = 20_000;
    if smp::online() < 3 {
        return Err(Error::CpuOffline {
            cpu: 2,
            online: smp::online(),
        });
    }
    let (function, mmio) = claim_edu()?;
    STORM_EDU.call_once(|| mmio);
    irq::register_fn(irq::VECTOR_PING, "ipi-ping", on_ping);
    irq::register_fn(irq::VECTOR_PONG, "ipi-pong", on_pong);
    irq::register_fn(irq::VECTOR_SELF_TEST, "self-ipi", on_self_ipi);
    let storm: &'static StormEdu = alloc::boxed::Box::leak(alloc::boxed::Box::new(StormEdu(Edu { mmio })));
    let edu_irq = interrupts::setup_vectors(
        function,
        Some(platform::irq::InterruptMode::Msi),
        &[0],
        "edu-storm",
        &[storm],
    )?;
    PING_FROM.store(apic::id(), Ordering::Release);
    let dest = percpu::cpu(2).apic_id.load(Ordering::Relaxed);
    x86_64::instructions::interrupts::enable();
    let kicker = smp::run_on(1, storm_kicker, 0).ok_or(Error::CpuOffline {
        cpu: 1,
        online: smp::online(),
    })?;
    for i in 0..PINGS {
        let before = PONGS.load(Ordering::Acquire);
        apic::send_ipi(dest, apic::Delivery::Fixed(irq::VECTOR_PING));
        let deadline = time::now_ns() + 200_000_000;
        while PONGS.load(Ordering::Acquire) == before {
            if time::now_ns() > deadline {
                return Err(Error::Device(alloc::format!(
                    "ping {i} of {PINGS} to cpu2 got no pong within 200 ms: an IPI was lost or misdirected \
                     ({} device interrupts with self-IPIs so far)",
                    SELF_IPIS.load(Ordering::Relaxed)
                )));
            }
            core::hint::spin_loop();
        }
    }
    STORM_STOP.store(true, Ordering::Release);
    smp::wait_done(1, kicker);
    x86_64::instructions::interrupts::disable();
    drop(edu_irq);
    kprintln!(
        "ipistorm: {PINGS} pings to cpu2 answered while cpu0 took {} device interrupts that each sent a self-IPI",
        SELF_IPIS.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Spins with interrupts off, forever: what a stuck CPU looks like.
fn spin_with_interrupts_off(_arg: usize) {
    x86_64::instructions::interrupts::disable();
    loop {
        core::hint::spin_loop();
    }
}

/// Hangs CPU 1 with interrupts off and waits: the watchdog on CPU 0 must
/// find it, take its registers by NMI and end the run with FAILURE. If the
/// run gets past the watchdog threshold and more, the watchdog failed.
fn hang() {
    let online = smp::online();
    if online < 2 {
        exit::failure(format_args!("test=hang needs at least 2 CPUs online (have {online})"));
    }
    let Some(threshold_ms) = watchdog::threshold_ms() else {
        exit::failure(format_args!("test=hang needs the watchdog on (watchdog=off was given)"));
    };
    let Some(_) = smp::run_on(1, spin_with_interrupts_off, 0) else {
        exit::failure(format_args!("cpu1 is busy"));
    };
    kprintln!("hang: cpu1 spins with interrupts off; the watchdog ({threshold_ms} ms) must report it");
    x86_64::instructions::interrupts::enable();
    let deadline = time::now_ns() + 3 * u64::from(threshold_ms) * 1_000_000 + 2_000_000_000;
    while time::now_ns() < deadline {
        x86_64::instructions::hlt();
    }
    exit::failure(format_args!(
        "test=hang: cpu1 has hung for 3x the watchdog threshold and nothing reported it"
    ));
}

/// Counts nothing: the multi-message MSI test only sets vectors up (the
/// function has no driver to make it interrupt).
struct Silent;

impl IrqHandler for Silent {
    fn handle(&self, _vector_index: usize, _cpu: usize) {}
}

/// Asks a function that offers multi-message MSI (QEMU's `nec-usb-xhci`
/// with `msix=off`: 16 vectors) for 8 and then 6 vectors, and checks what
/// the function's MSI capability holds: enabled, Multiple Message Enable =
/// log2(granted), the message data = the first vector of an aligned block,
/// the address aimed at CPU 0; then that dropping the vectors disables MSI
/// and frees the block.
fn msi_vectors() -> Result<(), crate::error::Error> {
    use crate::dev::{interrupts, pci};
    use crate::error::Error;
    let access = &pci::get().ok_or(Error::NoPci)?.access;
    let function = pci::get()
        .into_iter()
        .flat_map(|p| p.functions.iter())
        .find(|f| f.msix.is_none() && f.msi.is_some_and(|m| m.vectors_capable >= 8))
        .ok_or_else(|| {
            Error::Device(
                "no function offers 8 or more MSI vectors without MSI-X (add `-device nec-usb-xhci,msix=off`)".into(),
            )
        })?;
    let cap = function.msi.expect("found with MSI");
    let cfg = platform::pci::ConfigSpace::new(access, function.address);
    let control_at = u16::from(cap.offset) + 2;
    let data_at = u16::from(cap.offset) + if cap.is_64bit { 0x0C } else { 0x08 };
    let silent: &'static dyn IrqHandler = &Silent;
    for (asked, granted) in [(8usize, 8u16), (6, 4)] {
        let cpus = alloc::vec![0usize; asked];
        let handlers = alloc::vec![silent; asked];
        let irqs = interrupts::setup_vectors(function, Some(InterruptMode::Msi), &cpus, "msi-test", &handlers)?;
        kprintln!(
            "msivectors: {} asked for {asked}: {}",
            function.address,
            irqs.describe()
        );
        let granted_vectors = irqs.idt_vectors();
        let vectors: Vec<u8> = granted_vectors.iter().map(|v| v.vector).collect();
        let base = vectors[0];
        let control = cfg.read16(control_at)?;
        let data = cfg.read16(data_at)?;
        let address = cfg.read32(u16::from(cap.offset) + 4)?;
        let want_dest = percpu::cpu(0).apic_id.load(Ordering::Relaxed);
        let checks = [
            (vectors.len() == usize::from(granted), "granted count"),
            (
                vectors.iter().enumerate().all(|(i, &v)| v == base + i as u8),
                "consecutive vectors",
            ),
            (u16::from(base) % granted == 0, "block aligned to its size"),
            (control & 1 == 1, "MSI enabled"),
            (
                (control >> 4) & 0b111 == granted.trailing_zeros() as u16,
                "Multiple Message Enable",
            ),
            (data == u16::from(base), "message data = first vector"),
            ((address >> 12) & 0xFF == want_dest, "destination = cpu0's APIC id"),
        ];
        for (ok, what) in checks {
            if !ok {
                return Err(Error::Device(alloc::format!(
                    "{what} wrong: vectors {vectors:#x?}, control {control:#06x}, data {data:#06x}, address {address:#x}"
                )));
            }
        }
        drop(irqs);
        let control = cfg.read16(control_at)?;
        let still_allocated = granted_vectors
            .iter()
            .any(|v| irq::VECTORS.is_allocated(v.cpu, v.vector));
        if control & 1 != 0 || still_allocated {
            return Err(Error::Device(alloc::format!(
                "after drop: control {control:#06x}, vectors {vectors:#x?} still allocated: {still_allocated}"
            )));
        }
        kprintln!(
            "msivectors: {granted} vectors at {base:#x}..={:#x}: enabled with MME {}, data and address read back; dropped: MSI off, vectors free",
            base + (granted as u8 - 1),
            granted.trailing_zeros()
        );
    }
    Ok(())
}
