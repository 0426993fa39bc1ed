//! The interrupt dispatch table and per-vector, per-CPU counters.
//!
//! Dispatch takes no lock: each vector's slot is one `AtomicPtr` to a
//! `'static` [`Registration`], so a single atomic load yields the name and
//! the handler object together (two separate atomics could pair one
//! registration's name with another's handler if a slot were re-registered
//! meanwhile).

use core::fmt;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Default CPU capacity of the counters (64 CPUs x 256 vectors x 8 bytes = 128 KiB).
pub const MAX_CPUS: usize = 64;

/// An interrupt handler: a typed object (a driver's queue, a device's
/// state) whose `handle` is called with the vector and the index of the CPU
/// it runs on. Runs in interrupt context.
pub trait InterruptHandler: Sync {
    /// Handles one interrupt of `vector` on CPU `cpu`.
    fn handle(&self, vector: u8, cpu: u32);
}

/// A handler that needs no state: a plain function of (vector, cpu).
#[derive(Debug, Clone, Copy)]
pub struct FnHandler(pub fn(vector: u8, cpu: u32));

impl InterruptHandler for FnHandler {
    fn handle(&self, vector: u8, cpu: u32) {
        (self.0)(vector, cpu);
    }
}

/// A handler object and a name for the listing.
///
/// Registrations are `'static` (a `static`, or leaked at init) so a
/// dispatch that loaded a pointer just before `unregister` still
/// dereferences valid memory, and so does the handler object it names.
pub struct Registration {
    /// Name shown by the `/proc/interrupts`-like listing.
    pub name: &'static str,
    /// The handler.
    pub handler: &'static dyn InterruptHandler,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What [`IrqTable::dispatch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// A handler ran.
    Handled,
    /// No handler was registered; the interrupt was only counted.
    Unhandled,
}

/// 256 handler slots plus counters for `CPUS` CPUs.
#[derive(Debug)]
pub struct IrqTable<const CPUS: usize = MAX_CPUS> {
    slots: [AtomicPtr<Registration>; 256],
    /// `counts[cpu][vector]`: each CPU's row is written only by that CPU.
    counts: [[AtomicU64; 256]; CPUS],
}

impl<const CPUS: usize> Default for IrqTable<CPUS> {
    fn default() -> Self {
        IrqTable::new()
    }
}

impl<const CPUS: usize> IrqTable<CPUS> {
    /// An empty table, usable in a `static`.
    pub const fn new() -> IrqTable<CPUS> {
        IrqTable {
            slots: [const { AtomicPtr::new(ptr::null_mut()) }; 256],
            counts: [const { [const { AtomicU64::new(0) }; 256] }; CPUS],
        }
    }

    /// Publishes `registration` for `vector`. Fails for exception vectors
    /// (0..=31) and if the slot is taken (unregister first).
    pub fn register(&self, vector: u8, registration: &'static Registration) -> Result<()> {
        if vector < 0x20 {
            return Err(Error::ExceptionVector { vector });
        }
        let new = ptr::from_ref(registration).cast_mut();
        // Release pairs with the Acquire load in `dispatch`: a CPU that sees
        // the pointer also sees the Registration's fields as initialised
        // (it may have been built just before, e.g. leaked from a Box).
        // Relaxed on failure: nothing is read through the current value.
        self.slots[usize::from(vector)]
            .compare_exchange(ptr::null_mut(), new, Ordering::Release, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| Error::HandlerPresent { vector })
    }

    /// Removes the handler for `vector` and returns it. A dispatch already
    /// running on another CPU may still call it: mask the source and wait
    /// for every CPU to pass a quiescent point before freeing what its
    /// handler object refers to.
    pub fn unregister(&self, vector: u8) -> Result<&'static Registration> {
        // Acquire: the returned reference is read here, pairing with the
        // Release in `register`.
        let old = self.slots[usize::from(vector)].swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: non-null slot values only ever come from `&'static
        // Registration` in `register`, so the pointee is valid forever.
        unsafe { old.as_ref() }.ok_or(Error::NoHandler { vector })
    }

    /// The registration for `vector`, if any.
    pub fn registration(&self, vector: u8) -> Option<&'static Registration> {
        // Acquire: pairs with the Release in `register` (fields visible).
        let current = self.slots[usize::from(vector)].load(Ordering::Acquire);
        // SAFETY: as in `unregister`: only `&'static Registration` is stored.
        unsafe { current.as_ref() }
    }

    /// Interrupt path: counts the interrupt for (`cpu`, `vector`) and calls
    /// the handler if one is registered. No lock, O(1). A `cpu` at or above
    /// `CPUS` is dispatched but not counted (it must not panic here).
    pub fn dispatch(&self, vector: u8, cpu: u32) -> Dispatch {
        if let Some(row) = self.counts.get(cpu as usize) {
            // Relaxed: a statistic; readers want eventual values, and no
            // other data is published through it.
            row[usize::from(vector)].fetch_add(1, Ordering::Relaxed);
        }
        match self.registration(vector) {
            Some(registration) => {
                registration.handler.handle(vector, cpu);
                Dispatch::Handled
            }
            None => Dispatch::Unhandled,
        }
    }

    /// Interrupts of `vector` counted on `cpu` (0 for a CPU beyond capacity).
    pub fn count(&self, vector: u8, cpu: u32) -> u64 {
        self.counts
            .get(cpu as usize)
            .map_or(0, |row| row[usize::from(vector)].load(Ordering::Relaxed))
    }

    /// Interrupts of `vector` on all CPUs.
    pub fn total(&self, vector: u8) -> u64 {
        (0..CPUS as u32).map(|cpu| self.count(vector, cpu)).sum()
    }

    /// A `/proc/interrupts`-like listing over the first `online_cpus` CPUs
    /// (clamped to `CPUS`): vectors with a handler or a non-zero count.
    pub fn display(&self, online_cpus: usize) -> InterruptCountsDisplay<'_, CPUS> {
        InterruptCountsDisplay {
            table: self,
            cpus: online_cpus.min(CPUS),
        }
    }
}

/// See [`IrqTable::display`].
#[derive(Debug)]
pub struct InterruptCountsDisplay<'a, const CPUS: usize> {
    table: &'a IrqTable<CPUS>,
    cpus: usize,
}

impl<const CPUS: usize> fmt::Display for InterruptCountsDisplay<'_, CPUS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "      ")?;
        for cpu in 0..self.cpus {
            write!(f, " {:>10}", CpuLabel(cpu))?;
        }
        writeln!(f)?;
        for vector in 0..=255u8 {
            let registration = self.table.registration(vector);
            let any = (0..self.cpus as u32).any(|cpu| self.table.count(vector, cpu) != 0);
            if registration.is_none() && !any {
                continue;
            }
            write!(f, " {vector:#04x}:")?;
            for cpu in 0..self.cpus as u32 {
                write!(f, " {:>10}", self.table.count(vector, cpu))?;
            }
            match registration {
                Some(registration) => writeln!(f, "  {}", registration.name)?,
                None => writeln!(f, "  (no handler)")?,
            }
        }
        Ok(())
    }
}

struct CpuLabel(usize);

impl fmt::Display for CpuLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Formatted into a small buffer first so the caller's width applies to the whole label.
        let mut label: heapless::String<16> = heapless::String::new();
        let _ = fmt::write(&mut label, format_args!("CPU{}", self.0));
        f.pad(&label)
    }
}
