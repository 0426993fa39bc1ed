//! Interrupt dispatch for vectors 32-255.
//!
//! Handlers are registered at init into a table of atomics; the interrupt
//! path is one Acquire load and an indirect call, no lock.

use crate::idt::TrapFrame;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Local APIC timer.
pub const VECTOR_TIMER: u8 = 0x20;
/// Local APIC spurious-interrupt vector (never acknowledged with EOI).
pub const VECTOR_SPURIOUS: u8 = 0xFF;

/// An interrupt handler: gets the vector it was raised on.
pub type Handler = fn(vector: u8);

static HANDLERS: [AtomicUsize; 256] = [const { AtomicUsize::new(0) }; 256];
static STRAY: AtomicUsize = AtomicUsize::new(0);

/// Installs `handler` for `vector`. Registration happens at init, before the
/// source is unmasked; the Release store pairs with the Acquire load in
/// [`dispatch`], so a CPU that sees the pointer sees everything the
/// registering code wrote before it.
pub fn register(vector: u8, handler: Handler) {
    assert!(vector >= 32, "vector {vector} is an exception vector");
    HANDLERS[vector as usize].store(handler as usize, Ordering::Release);
}

/// Interrupts that arrived on a vector with no handler.
pub fn stray_count() -> usize {
    STRAY.load(Ordering::Relaxed)
}

pub(crate) fn dispatch(vector: u8, _frame: &mut TrapFrame) {
    if vector == VECTOR_SPURIOUS {
        return;
    }
    let raw = HANDLERS[vector as usize].load(Ordering::Acquire);
    if raw == 0 {
        STRAY.fetch_add(1, Ordering::Relaxed);
    } else {
        // SAFETY: only `register` stores non-zero values, and it stores `Handler` pointers.
        let handler: Handler = unsafe { core::mem::transmute::<usize, Handler>(raw) };
        handler(vector);
    }
    crate::apic::eoi();
}
