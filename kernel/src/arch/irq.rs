//! Interrupt dispatch for vectors 32-255 through the platform crate's
//! lock-free [`IrqTable`]: registration at init, one Acquire load and an
//! indirect call in the interrupt path, per-vector per-CPU counts.
//!
//! Vector numbers are per CPU: the kernel's fixed vectors are registered on
//! every CPU, a device vector only on the CPU it is aimed at, taken from
//! that CPU's own space ([`VECTORS`]).

use crate::arch::percpu;
use platform::irq::{FnHandler, InterruptHandler, IrqTable, Registration, VectorSpaces};

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

/// Every CPU's handlers and counts.
pub static TABLE: IrqTable<{ percpu::MAX_CPUS }> = IrqTable::new();
/// Each CPU's device vectors (0x30..=0xEF); numbers no CPU uses are handed out first.
pub static VECTORS: VectorSpaces<{ percpu::MAX_CPUS }> = VectorSpaces::new();

/// Installs the handler object `handler` for `vector` on every CPU under
/// `name`. The registration lives for the rest of the run (a dispatch
/// racing [`unregister`] must still find it valid).
pub fn register(vector: u8, name: &'static str, handler: &'static dyn InterruptHandler) -> Result<(), platform::Error> {
    TABLE.register(vector, leak_registration(name, handler))
}

/// A registration that lives for the rest of the run.
pub fn leak_registration(name: &'static str, handler: &'static dyn InterruptHandler) -> &'static Registration {
    alloc::boxed::Box::leak(alloc::boxed::Box::new(Registration { name, handler }))
}

/// Installs a stateless handler function for one of the kernel's fixed
/// vectors. A taken vector is a kernel bug: it panics with the name.
pub fn register_fn(vector: u8, name: &'static str, handler: fn(vector: u8, cpu: u32)) {
    let handler: &'static FnHandler = alloc::boxed::Box::leak(alloc::boxed::Box::new(FnHandler(handler)));
    if let Err(e) = register(vector, name, handler) {
        panic!("cannot register interrupt handler '{name}' on vector {vector:#x}: {e}");
    }
}

/// Called by the IDT's common entry for vectors 32-255.
pub(crate) fn dispatch(vector: u8) {
    if vector == VECTOR_SPURIOUS {
        return;
    }
    TABLE.dispatch(vector, percpu::index() as u32);
    super::apic::eoi();
}
