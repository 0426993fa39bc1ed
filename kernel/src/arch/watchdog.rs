//! The per-CPU tick and the watchdog.
//!
//! Every CPU runs its LAPIC timer at [`TICK_HZ`]. The tick records the time
//! it was handled (a heartbeat) and is the backstop that ends a halted
//! CPU's wait. A CPU that is *watched* (APs from the moment they are
//! online, the boot CPU while it runs jobs) and whose heartbeat is older
//! than the threshold (`watchdog=`, default 5000 ms) has stopped taking
//! interrupts: it spins with interrupts off, or is stuck in a handler.
//! Each CPU checks the next two CPUs on its tick; the first to see a silent
//! one sends it an NMI, which is delivered even with
//! interrupts off; its NMI handler prints its registers and ends the run
//! with the reason. If the NMI is not answered either, the detecting CPU
//! ends the run itself. With one CPU there is nobody to detect a hang.
//!
//! A stall of the whole machine is not a hang: when the host blocks every
//! vCPU (QEMU inside a device callback), an SMI runs long, or the VM is
//! paused while the clock runs on, every CPU misses its ticks. The detecting
//! CPU sees that on its own heartbeat (its previous tick is as old), prints
//! `watchdog: global stall of N ms (every CPU), continuing`, and the
//! silence of the others counts from then (`platform::cpus::watchdog_verdict`).

use crate::arch::percpu::{self, MAX_CPUS};
use crate::arch::{apic, exit, irq, time};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use platform::cpus::WatchdogVerdict;

/// Timer interrupts per second on every CPU.
pub const TICK_HZ: u64 = 100;
/// How long the detecting CPU waits for the stuck CPU's NMI report.
const NMI_ANSWER_NS: u64 = 500_000_000;
const NOBODY: usize = usize::MAX;
/// How many following CPUs each CPU's tick checks.
const BUDDIES: usize = 2;

/// Heartbeat: when each CPU last handled its tick (ns since boot).
static LAST_TICK_NS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Whether each CPU is watched.
static WATCHED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Threshold in ns; 0 is off.
static THRESHOLD_NS: AtomicU64 = AtomicU64::new(0);
/// The CPU that was found stuck and sent the NMI (NOBODY until then).
static STUCK_CPU: AtomicUsize = AtomicUsize::new(NOBODY);
/// How long it had gone without a tick when found.
static STUCK_FOR_NS: AtomicU64 = AtomicU64::new(0);
/// When the last global stall was reported (ns since boot; 0: never).
static LAST_GLOBAL_STALL_NS: AtomicU64 = AtomicU64::new(0);

/// Installs the tick handler and sets the threshold (on the boot CPU,
/// before the APs start). `None` switches detection off; the tick still runs.
pub fn init(threshold_ms: Option<u32>) {
    THRESHOLD_NS.store(
        threshold_ms.map_or(0, |ms| u64::from(ms) * 1_000_000),
        Ordering::Relaxed,
    );
    irq::register_fn(irq::VECTOR_TIMER, "tick", on_tick);
}

/// The threshold in milliseconds, `None` when detection is off.
pub fn threshold_ms() -> Option<u32> {
    let ns = THRESHOLD_NS.load(Ordering::Relaxed);
    (ns != 0).then_some((ns / 1_000_000) as u32)
}

/// Starts this CPU's tick; `watched` says whether it is watched from now on.
pub fn start_this_cpu(watched: bool) {
    let me = percpu::index();
    LAST_TICK_NS[me].store(time::now_ns(), Ordering::Relaxed);
    set_tick_rate(TICK_HZ);
    if watched {
        watch_this_cpu();
    }
}

/// Runs this CPU's LAPIC timer at `hz` (the tick self-test speeds it up, then restores [`TICK_HZ`]).
pub fn set_tick_rate(hz: u64) {
    apic::timer_periodic(irq::VECTOR_TIMER, (time::lapic_hz() / hz.max(1)).max(1) as u32);
}

/// Watches this CPU from now on (it must take interrupts from here).
pub fn watch_this_cpu() {
    let me = percpu::index();
    LAST_TICK_NS[me].store(time::now_ns(), Ordering::Relaxed);
    // Release pairs with the Acquire in `check_others`: the fresh heartbeat is seen first.
    WATCHED[me].store(true, Ordering::Release);
}

fn on_tick(_vector: u8, cpu: u32) {
    let me = cpu as usize;
    let now = time::now_ns();
    percpu::current().timer_ticks.fetch_add(1, Ordering::Relaxed);
    let previous = LAST_TICK_NS[me].swap(now, Ordering::Relaxed);
    let threshold = THRESHOLD_NS.load(Ordering::Relaxed);
    if threshold != 0 {
        check_others(me, now, previous, threshold);
    }
}

fn check_others(me: usize, now: u64, own_previous: u64, threshold: u64) {
    // Each CPU watches the next BUDDIES CPUs (by index, wrapping), not all of
    // them: O(1) per tick, so hundreds of CPUs do not spend their ticks
    // scanning each other, and every CPU still has watchers.
    let ncpus = super::smp::started().clamp(1, MAX_CPUS);
    for step in 1..=BUDDIES.min(ncpus - 1) {
        let other = (me + step) % ncpus;
        if !WATCHED[other].load(Ordering::Acquire) {
            continue;
        }
        let verdict = platform::cpus::watchdog_verdict(
            now,
            own_previous,
            LAST_TICK_NS[other].load(Ordering::Relaxed),
            LAST_GLOBAL_STALL_NS.load(Ordering::Relaxed),
            threshold,
        );
        let silent = match verdict {
            WatchdogVerdict::Fine => continue,
            WatchdogVerdict::GlobalStall { ms } => {
                report_global_stall(now, ms, threshold);
                return;
            }
            WatchdogVerdict::Hang { ms } => ms * 1_000_000,
        };
        // One report per run: the first detector claims it.
        if STUCK_CPU
            .compare_exchange(NOBODY, other, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        STUCK_FOR_NS.store(silent, Ordering::Release);
        crate::arch::console::emergency_println!(
            "watchdog: cpu{other} handled no timer tick for {} ms (threshold {} ms); cpu{me} sends it an NMI for its registers",
            silent / 1_000_000,
            threshold / 1_000_000
        );
        apic::send_ipi(percpu::cpu(other).apic_id.load(Ordering::Relaxed), apic::Delivery::Nmi);
        // The stuck CPU's NMI handler ends the run; if it never answers, end it here.
        let deadline = time::now_ns() + NMI_ANSWER_NS;
        while time::now_ns() < deadline {
            core::hint::spin_loop();
        }
        exit::failure(format_args!(
            "watchdog: cpu{other} made no progress for {} ms and did not answer an NMI",
            silent / 1_000_000
        ));
    }
}

/// Reports a global stall once: CPUs that resume after the first detector
/// find it already reported (within one threshold) and stay quiet.
fn report_global_stall(now: u64, ms: u64, threshold: u64) {
    let last = LAST_GLOBAL_STALL_NS.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) <= threshold {
        return;
    }
    if LAST_GLOBAL_STALL_NS
        .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        crate::arch::console::emergency_println!("watchdog: global stall of {ms} ms (every CPU), continuing");
    }
}

/// For the NMI handler: `Some(ms without a tick)` when this CPU is the one
/// the watchdog found stuck (the NMI is the watchdog's), else `None`.
pub fn nmi_is_watchdog() -> Option<u64> {
    (STUCK_CPU.load(Ordering::Acquire) == percpu::index()).then(|| STUCK_FOR_NS.load(Ordering::Acquire) / 1_000_000)
}
