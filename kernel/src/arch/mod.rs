//! The machine layer: everything that is about the CPU and the board, not
//! about a device or a job.
//!
//! What lives here: per-CPU state through GS ([`percpu`]), descriptor tables
//! and IST stacks ([`cpu`]), the IDT and its entry stubs ([`idt`]), vector
//! numbers and the interrupt dispatch table ([`irq`]), the local APIC and IPIs
//! ([`apic`]), the TSC clock and LAPIC timer calibration ([`time`]), physical
//! memory, heap and DMA buffers ([`memory`]) over the page-table code
//! ([`paging`]), ACPI discovery ([`firmware`]), IOMMUs left on by firmware ([`iommu`]), AP bring-up and running work on
//! other CPUs ([`smp`]), halting while waiting for completions ([`idle`]),
//! parking on the block layer's sleeping queue lock ([`park`]), per-stage request
//! timestamps in per-CPU rings ([`stagetrace`]),
//! the per-CPU tick and the watchdog ([`watchdog`]), several job contexts on one CPU by turns
//! ([`turns`]),
//! the serial console and logger ([`console`]) with its copy on the loader's
//! framebuffer ([`framebuffer`]), machine-check reporting
//! ([`mce`]), and the end of a run ([`exit`]).
//!
//! What it may use: the library crates (`platform`, `bootinfo`, `boot`) and
//! other `arch` modules, never `crate::dev` or `crate::app`. Inside, the
//! order is percpu/paging at the bottom, then memory, cpu, apic, irq, time,
//! framebuffer, console, exit, mce, watchdog, idle, park, stagetrace, idt, smp, turns: no module imports one above it.

pub mod apic;
pub mod console;
pub mod cpu;
pub mod exit;
pub mod firmware;
pub mod framebuffer;
pub mod idle;
pub mod idt;
pub mod iommu;
pub mod irq;
pub mod mce;
pub mod memory;
pub mod paging;
pub mod park;
pub mod percpu;
pub mod smp;
pub mod stagetrace;
pub mod time;
pub mod turns;
pub mod watchdog;
