//! Waiting for completions without spinning: `idle=halt|poll|auto`.
//!
//! In halt mode a CPU with nothing to do halts until an interrupt instead
//! of spinning; under a hypervisor a spinning vCPU takes host time from the
//! thread that emulates the device it is waiting for. No wake-up is lost:
//! the waiter announces itself, then checks for work, then halts with
//! `sti; hlt` (an interrupt that arrives between the two is taken after the
//! `hlt` starts and ends it); whoever publishes work for a CPU checks the
//! announcement after publishing and sends a wake IPI. Both sides put a
//! full fence between their store and their load, so at least one of them
//! sees the other's store. The per-CPU tick (`arch::watchdog`, 100 Hz) is the
//! backstop for anything that wakes no one.
//!
//! Halt polling (`idle.poll_us=`, Linux's guest haltpoll): before it halts, a waiting CPU spins
//! for up to that long checking for its work. Waking a halted vCPU costs the host a reschedule,
//! and when the host itself is idle its own CPUs sleep too (a nested wake-up of tens of µs);
//! a completion that arrives within the window is taken without either.

use crate::arch::percpu::{self, MAX_CPUS};
use crate::arch::{apic, irq, time};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

/// Whether CPUs halt while they wait (false: they spin).
static HALT: AtomicBool = AtomicBool::new(false);
/// How long a waiting CPU spins before it halts, in ns (0: it halts at once).
static HALT_POLL_NS: AtomicU64 = AtomicU64::new(0);
/// CPUs halted (or about to halt) in [`wait_until`].
static WAITING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Chooses halt (`true`) or poll.
pub fn set_halt(halt: bool) {
    HALT.store(halt, Ordering::Relaxed);
}

/// Sets the halt-polling window (`idle.poll_us=`).
pub fn set_halt_poll_ns(ns: u64) {
    HALT_POLL_NS.store(ns, Ordering::Relaxed);
}

/// The halt-polling window, ns.
pub fn halt_poll_ns() -> u64 {
    HALT_POLL_NS.load(Ordering::Relaxed)
}

/// Whether waiting CPUs halt.
pub fn halts() -> bool {
    HALT.load(Ordering::Relaxed)
}

/// Whether the CPU runs under a hypervisor (CPUID.1:ECX bit 31).
pub fn under_hypervisor() -> bool {
    raw_cpuid::CpuId::new()
        .get_feature_info()
        .is_some_and(|f| f.has_hypervisor())
}

/// Waits once: returns at once when `ready()` holds, else halts until the
/// next interrupt (a wake from [`wake`], a device interrupt, the tick). In
/// poll mode, or when the caller runs with interrupts off (nothing could end
/// a halt), it only pauses the CPU for a moment. Callers loop.
pub fn wait_until(ready: impl Fn() -> bool) {
    if !halts() || !x86_64::instructions::interrupts::are_enabled() {
        core::hint::spin_loop();
        return;
    }
    let poll_ns = halt_poll_ns();
    if poll_ns != 0 {
        let start = time::now_ns();
        while time::now_ns().saturating_sub(start) < poll_ns {
            if ready() {
                return;
            }
            core::hint::spin_loop();
        }
    }
    let me = percpu::index();
    x86_64::instructions::interrupts::disable();
    WAITING[me].store(true, Ordering::Relaxed);
    // Pairs with the fence in `wake`: either this check sees the work that
    // was published, or the publisher sees WAITING and sends the IPI.
    fence(Ordering::SeqCst);
    if !ready() {
        // `sti; hlt` back to back: a wake that arrives after the check is
        // taken right after sti and ends the hlt.
        x86_64::instructions::interrupts::enable_and_hlt();
    } else {
        x86_64::instructions::interrupts::enable();
    }
    WAITING[me].store(false, Ordering::Relaxed);
}

/// Called after work for CPU `cpu` was published: wakes it if it halted in
/// [`wait_until`]. Free in poll mode; on the CPU itself nothing is needed
/// (the interrupt that runs this already ended its hlt).
pub fn wake(cpu: usize) {
    // The own CPU first, before the fence: every inline completion (the null device) and every
    // completion on the submitting CPU lands here, and needs neither the fence nor an IPI.
    if !halts() || cpu >= MAX_CPUS || cpu == percpu::index() {
        return;
    }
    // Pairs with the fence in `wait_until`.
    fence(Ordering::SeqCst);
    if WAITING[cpu].swap(false, Ordering::Relaxed) {
        apic::send_ipi(
            percpu::cpu(cpu).apic_id.load(Ordering::Relaxed),
            apic::Delivery::Fixed(irq::VECTOR_WAKE),
        );
    }
}
