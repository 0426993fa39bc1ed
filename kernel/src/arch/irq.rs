//! Interrupt dispatch for vectors 32-255 through the platform crate's
//! lock-free [`IrqTable`]: registration at init, one Acquire load and an
//! indirect call in the interrupt path, per-vector per-CPU counts.

use platform::irq::{FnHandler, InterruptHandler, IrqTable, Registration, VectorAllocator};

/// Local APIC timer.
pub const VECTOR_TIMER: u8 = 0x20;
/// Wakes a CPU so its idle loop looks at its work mailbox.
pub const VECTOR_WAKE: u8 = 0xF0;
/// IPI ping (measurement) and its reply.
pub const VECTOR_PING: u8 = 0xF1;
pub const VECTOR_PONG: u8 = 0xF2;
/// Block-layer remote completion (and the "softirq" self-IPI). Deliberately in
/// the lowest priority class with the timer (0x20-0x2F; the legacy PIC's cascade
/// input maps here and never fires): a CPU parked on the sleeping queue lock
/// inside this handler (`park`) must still take the wake IPI (class 0xF), which
/// the local APIC holds back while a vector of its own class or higher is in
/// service.
pub const VECTOR_BLK_COMPLETE: u8 = 0x22;
/// Self-IPIs raised by the IPI-storm self-test's timer handler.
pub const VECTOR_SELF_TEST: u8 = 0xF4;
/// Local APIC spurious-interrupt vector (never acknowledged with EOI).
pub const VECTOR_SPURIOUS: u8 = 0xFF;

/// Every vector's handler and counts.
pub static TABLE: IrqTable = IrqTable::new();
/// Device vectors (0x30..=0xEF).
pub static VECTORS: VectorAllocator = VectorAllocator::new();

/// Installs the handler object `handler` for `vector` under `name`. The
/// registration lives for the rest of the run (a dispatch racing
/// [`unregister`] must still find it valid).
pub fn register(vector: u8, name: &'static str, handler: &'static dyn InterruptHandler) -> Result<(), platform::Error> {
    let reg: &'static Registration = alloc::boxed::Box::leak(alloc::boxed::Box::new(Registration { name, handler }));
    TABLE.register(vector, reg)
}

/// Installs a stateless handler function for one of the kernel's fixed
/// vectors. A taken vector is a kernel bug: it panics with the name.
pub fn register_fn(vector: u8, name: &'static str, handler: fn(vector: u8, cpu: u32)) {
    let handler: &'static FnHandler = alloc::boxed::Box::leak(alloc::boxed::Box::new(FnHandler(handler)));
    if let Err(e) = register(vector, name, handler) {
        panic!("cannot register interrupt handler '{name}' on vector {vector:#x}: {e}");
    }
}

/// Removes `vector`'s handler; the caller has masked its source first.
pub fn unregister(vector: u8) -> Result<(), platform::Error> {
    TABLE.unregister(vector).map(|_| ())
}

/// Called by the IDT's common entry for vectors 32-255.
pub(crate) fn dispatch(vector: u8) {
    if vector == VECTOR_SPURIOUS {
        return;
    }
    TABLE.dispatch(vector, crate::arch::percpu::index() as u32);
    super::apic::eoi();
}
