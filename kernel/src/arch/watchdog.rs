//! The per-CPU tick and the watchdog.
//!
//! Every CPU runs its LAPIC timer at [`TICK_HZ`]. The tick records the time
//! it was handled (a heartbeat) and is the backstop that ends a halted
//! CPU's wait. A CPU that is *watched* (APs from the moment they are
//! online, the boot CPU while it runs jobs) and whose heartbeat is older
//! than the threshold (`watchdog=`, default 5000 ms) has stopped taking
//! interrupts: it spins with interrupts off, or is stuck in a handler.
//! The first CPU to see that sends it an NMI, which is delivered even with
//! interrupts off; its NMI handler prints its registers and ends the run
//! with the reason. If the NMI is not answered either, the detecting CPU
//! ends the run itself. With one CPU there is nobody to detect a hang.

use crate::arch::percpu::{self, MAX_CPUS};
use crate::arch::{apic, exit, irq, time};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Timer interrupts per second on every CPU.
pub const TICK_HZ: u64 = 100;
/// How long the detecting CPU waits for the stuck CPU's NMI report.
const NMI_ANSWER_NS: u64 = 500_000_000;
const NOBODY: usize = usize::MAX;

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
    LAST_TICK_NS[me].store(now, Ordering::Relaxed);
    let threshold = THRESHOLD_NS.load(Ordering::Relaxed);
    if threshold != 0 {
        check_others(me, now, threshold);
    }
}

fn check_others(me: usize, now: u64, threshold: u64) {
    // Only CPUs that came online are ever watched.
    for other in 0..MAX_CPUS {
        if other == me || !WATCHED[other].load(Ordering::Acquire) {
            continue;
        }
        let silent = now.saturating_sub(LAST_TICK_NS[other].load(Ordering::Relaxed));
        if silent <= threshold {
            continue;
        }
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

/// For the NMI handler: `Some(ms without a tick)` when this CPU is the one
/// the watchdog found stuck (the NMI is the watchdog's), else `None`.
pub fn nmi_is_watchdog() -> Option<u64> {
    (STUCK_CPU.load(Ordering::Acquire) == percpu::index()).then(|| STUCK_FOR_NS.load(Ordering::Acquire) / 1_000_000)
}
