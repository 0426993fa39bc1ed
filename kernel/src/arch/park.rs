//! Parking a CPU until another CPU wakes it: the kernel's side of the block
//! layer's sleeping queue lock (`quiesce=sleeping`, `blk::QuiesceCheck::Sleeping`).
//!
//! A CPU that finds the queue lock taken parks in [`wait_for_wake`]; the
//! holder's unlock calls [`wake`] for one parked CPU. Each CPU has a pending
//! flag and a "parked" flag:
//! - `wait_for_wake` runs with interrupts off: it announces itself (parked),
//!   runs a full fence, and returns at once if its pending flag is set (a wake
//!   that came before the wait is not lost). Otherwise it halts with
//!   `sti; hlt` (an interrupt that arrives between the check and the halt is
//!   taken right after `sti` and ends the `hlt`), then restores the
//!   interrupt flag it was called with.
//! - `wake` sets the target's pending flag, runs a full fence, and sends the
//!   wake IPI only if the target announced itself as parked (a CPU that is
//!   not waiting needs no interrupt; the flag is enough).
//!
//! The two fences make the store-buffer pattern safe: either the waiter sees
//! the pending flag or the waker sees the parked flag and sends the IPI.
//!
//! `wait_for_wake` may return early on any interrupt (a device interrupt, the
//! tick): the block layer re-registers and retries, so an early return costs
//! one more try, never a lost wake-up.
//!
//! Why the interrupt flag matters: the lock is taken with interrupts off
//! (task context through `irqs_off`, or inside an interrupt handler). The
//! halt needs interrupts on, so other interrupts may be taken while a CPU is
//! parked, and the wake IPI must be deliverable from inside any handler that
//! takes the lock: its vector (`VECTOR_WAKE`, class 0xF) is above every
//! device vector and above the block completion IPI (see `irq`). A lock
//! holder never parks, so an interrupt taken while parked never interrupts a
//! holder on this CPU.

use crate::arch::percpu::{self, MAX_CPUS};
use crate::arch::{apic, irq};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

/// Set by [`wake`], consumed by [`wait_for_wake`].
static PENDING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// The CPU is in (or entering) the halt of [`wait_for_wake`].
static PARKED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Wake IPIs sent (wakes of a CPU that was not parked send none).
static WAKE_IPIS: AtomicU64 = AtomicU64::new(0);

/// Parks this CPU (`cpu` is its index) until [`wake`] was called for it
/// since the last return, or any interrupt arrives. Restores the interrupt
/// flag it was called with.
pub fn wait_for_wake(cpu: usize) {
    if cpu >= MAX_CPUS || cpu != percpu::index() {
        // Only a CPU can park itself; anything else would halt the wrong CPU.
        core::hint::spin_loop();
        return;
    }
    let were_enabled = x86_64::instructions::interrupts::are_enabled();
    x86_64::instructions::interrupts::disable();
    PARKED[cpu].store(true, Ordering::Relaxed);
    // Pairs with the fence in `wake`: either the pending check below sees
    // the waker's flag, or the waker sees PARKED and sends the IPI.
    fence(Ordering::SeqCst);
    if !PENDING[cpu].swap(false, Ordering::Relaxed) {
        // `sti; hlt` back to back: a wake IPI sent after the check is taken
        // after `sti` and ends the `hlt`.
        x86_64::instructions::interrupts::enable_and_hlt();
        x86_64::instructions::interrupts::disable();
        // The wake that ended the halt (if it was one) is consumed here, so
        // the next wait does not return at once for it.
        PENDING[cpu].store(false, Ordering::Relaxed);
    }
    PARKED[cpu].store(false, Ordering::Relaxed);
    if were_enabled {
        x86_64::instructions::interrupts::enable();
    }
}

/// Wakes CPU `cpu` from [`wait_for_wake`] (or makes its next wait return at
/// once). Callable from any context, interrupts on or off.
pub fn wake(cpu: usize) {
    if cpu >= MAX_CPUS {
        return;
    }
    PENDING[cpu].store(true, Ordering::Relaxed);
    // Pairs with the fence in `wait_for_wake`.
    fence(Ordering::SeqCst);
    if cpu != percpu::index() && PARKED[cpu].load(Ordering::Relaxed) {
        WAKE_IPIS.fetch_add(1, Ordering::Relaxed);
        apic::send_ipi(
            percpu::cpu(cpu).apic_id.load(Ordering::Relaxed),
            apic::Delivery::Fixed(irq::VECTOR_WAKE),
        );
    }
}

/// Wake IPIs sent since boot.
pub fn wake_ipis() -> u64 {
    WAKE_IPIS.load(Ordering::Relaxed)
}
