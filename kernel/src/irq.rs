//! Interrupt dispatch for vectors 32-255 through the platform crate's
//! lock-free [`IrqTable`]: registration at init, one Acquire load and an
//! indirect call in the interrupt path, per-vector per-CPU counts.

use crate::idt::TrapFrame;
use platform::irq::{IrqHandlerFn, IrqTable, Registration, VectorAllocator};

/// Local APIC timer.
pub const VECTOR_TIMER: u8 = 0x20;
/// Wakes a CPU so its idle loop looks at its work mailbox.
pub const VECTOR_WAKE: u8 = 0xF0;
/// IPI ping (measurement) and its reply.
pub const VECTOR_PING: u8 = 0xF1;
pub const VECTOR_PONG: u8 = 0xF2;
/// Block-layer remote completion.
pub const VECTOR_BLK_COMPLETE: u8 = 0xF3;
/// Self-IPIs raised by the IPI-storm self-test's timer handler.
pub const VECTOR_SELF_TEST: u8 = 0xF4;
/// Local APIC spurious-interrupt vector (never acknowledged with EOI).
pub const VECTOR_SPURIOUS: u8 = 0xFF;

/// Every vector's handler and counts.
pub static TABLE: IrqTable = IrqTable::new();
/// Device vectors (0x30..=0xEF).
pub static VECTORS: VectorAllocator = VectorAllocator::new();

/// Installs `handler` for `vector` under `name`, passing it `context`.
pub fn register(vector: u8, name: &'static str, handler: IrqHandlerFn, context: usize) {
    let reg: &'static Registration =
        alloc::boxed::Box::leak(alloc::boxed::Box::new(Registration { name, handler, context }));
    if let Err(e) = TABLE.register(vector, reg) {
        panic!("cannot register interrupt handler '{name}' on vector {vector:#x}: {e}");
    }
}

pub(crate) fn dispatch(vector: u8, _frame: &mut TrapFrame) {
    if vector == VECTOR_SPURIOUS {
        return;
    }
    TABLE.dispatch(vector, crate::percpu::index() as u32);
    crate::apic::eoi();
}
