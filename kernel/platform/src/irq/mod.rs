//! Interrupt vectors, dispatch, counters, affinity and routing plans.
//!
//! The split with the kernel: the kernel's IDT stubs call
//! [`IrqTable::dispatch`] with the vector and the current CPU index, and it
//! programs the LAPIC / I/O APIC / devices with what this module computes.

mod affinity;
mod dispatch;
mod routing;
mod vectors;

pub use affinity::{AffinityPolicy, MAX_AFFINITY_PAIRS};
pub use dispatch::{
    Dispatch, FnHandler, InterruptCountsDisplay, InterruptHandler, IrqTable, MAX_CPUS, MAX_LISTING_COLUMNS,
    Registration,
};
pub use routing::{
    InterruptMode, InterruptPlan, IoApicRedirection, PIIX3_PIRQ_ROUTE, PciIrqRouter, choose_interrupt_mode,
    ioapic_redirection_registers,
};
pub use vectors::{FIRST_DEVICE_VECTOR, LAST_DEVICE_VECTOR, VectorAllocator, VectorSpaces};
