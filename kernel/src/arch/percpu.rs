//! Per-CPU state reached through the GS base register in O(1).
//!
//! Each CPU's GS base points at its own [`PerCpu`] slot in a static array;
//! the first two words of the slot are a self pointer and the CPU's logical
//! index, so `mov gs:[8]` yields the index without touching shared memory.
//! Fields shared with other CPUs are atomics; CPU-private mutable state goes
//! in [`CpuLocal`], which only hands out `&mut` with interrupts disabled.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use x86_64::instructions::interrupts;
use x86_64::registers::model_specific::GsBase;
use x86_64::structures::gdt::GlobalDescriptorTable;
use x86_64::structures::tss::TaskStateSegment;

/// The most CPUs baremq brings up: the one limit, the capacity of the
/// interrupt dispatch table's per-CPU counts (`platform::irq::MAX_CPUS`), so
/// every CPU that runs is also counted. Every per-CPU array in the kernel is
/// sized by it.
pub const MAX_CPUS: usize = platform::irq::MAX_CPUS;

/// One CPU's slot.
#[repr(C, align(64))]
pub struct PerCpu {
    self_ptr: UnsafeCell<*const PerCpu>,
    index: UnsafeCell<usize>,
    /// Local APIC id (set before the CPU is marked online).
    pub apic_id: AtomicU32,
    /// Set once the CPU runs its idle loop with interrupts enabled.
    pub online: AtomicBool,
    /// LAPIC timer interrupts handled.
    pub timer_ticks: AtomicU64,
    pub(crate) tss: UnsafeCell<TaskStateSegment>,
    pub(crate) gdt: UnsafeCell<GlobalDescriptorTable<8>>,
}

// SAFETY: the UnsafeCell fields are written only by the owning CPU during its
// own bring-up (before anything else can see the slot as online) and read-only
// afterwards; every other field is atomic.
unsafe impl Sync for PerCpu {}

#[allow(clippy::declare_interior_mutable_const)] // used only to initialise the array below
const EMPTY: PerCpu = PerCpu {
    self_ptr: UnsafeCell::new(core::ptr::null()),
    index: UnsafeCell::new(0),
    apic_id: AtomicU32::new(0),
    online: AtomicBool::new(false),
    timer_ticks: AtomicU64::new(0),
    tss: UnsafeCell::new(TaskStateSegment::new()),
    gdt: UnsafeCell::new(GlobalDescriptorTable::empty()),
};

static CPUS: [PerCpu; MAX_CPUS] = [EMPTY; MAX_CPUS];

/// Points this CPU's GS base at slot `index`. Called first thing on each CPU.
///
/// # Safety
/// Must be called once per CPU, by that CPU, with an index no other CPU uses.
pub unsafe fn init_current(index: usize, apic_id: u32) {
    assert!(index < MAX_CPUS, "CPU index {index} exceeds MAX_CPUS {MAX_CPUS}");
    let slot = &CPUS[index];
    // SAFETY: per the contract, only this CPU touches its slot's cells now.
    unsafe {
        *slot.self_ptr.get() = slot;
        *slot.index.get() = index;
    }
    slot.apic_id.store(apic_id, Ordering::Relaxed);
    GsBase::write(x86_64::VirtAddr::new(slot as *const PerCpu as u64));
}

/// This CPU's logical index.
#[inline]
pub fn index() -> usize {
    let idx: usize;
    // SAFETY: GS base points at this CPU's PerCpu (set by init_current before
    // any caller runs); offset 8 is `index`, a plain word.
    unsafe { core::arch::asm!("mov {}, gs:[8]", out(reg) idx, options(nostack, readonly, preserves_flags)) };
    idx
}

/// This CPU's slot.
#[inline]
pub fn current() -> &'static PerCpu {
    &CPUS[index()]
}

/// Slot of CPU `index`.
pub fn cpu(index: usize) -> &'static PerCpu {
    &CPUS[index]
}

/// CPU-private mutable state, one `T` per CPU.
pub struct CpuLocal<T> {
    slots: [UnsafeCell<T>; MAX_CPUS],
}

// SAFETY: slot i is only accessed by CPU i (enforced by `with`, which indexes
// by the current CPU) with interrupts disabled, so no two contexts alias it.
unsafe impl<T: Send> Sync for CpuLocal<T> {}

/// A [`CpuLocal`] whose every slot starts as the constant expression `$init`.
macro_rules! cpu_local {
    ($init:expr) => {
        $crate::arch::percpu::CpuLocal::from_slots(
            [const { core::cell::UnsafeCell::new($init) }; $crate::arch::percpu::MAX_CPUS],
        )
    };
}
pub(crate) use cpu_local;

impl<T> CpuLocal<T> {
    /// Wraps one slot per CPU (use the [`cpu_local!`] macro).
    pub const fn from_slots(slots: [UnsafeCell<T>; MAX_CPUS]) -> Self {
        CpuLocal { slots }
    }

    /// Runs `f` on this CPU's value with interrupts disabled (so an interrupt
    /// handler on this CPU cannot observe or alias it mid-update).
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        interrupts::without_interrupts(|| {
            // SAFETY: see the Sync impl: this CPU's slot, interrupts off, and
            // `f` cannot migrate to another CPU (no preemption in baremq).
            f(unsafe { &mut *self.slots[index()].get() })
        })
    }
}
