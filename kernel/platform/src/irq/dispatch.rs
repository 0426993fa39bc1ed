//! The interrupt dispatch table and per-vector, per-CPU counters.
//!
//! Vector numbers are per CPU, as in Linux: vector 0x31 on cpu3 and vector
//! 0x31 on cpu4 may belong to two devices, so a device that wants "one
//! vector per CPU" costs one vector on each CPU instead of many from a
//! shared pool. The kernel's own vectors (timer, IPIs) are registered on
//! every CPU at once ([`IrqTable::register`]); device vectors on the one
//! CPU they are aimed at ([`IrqTable::register_on`]).
//!
//! Dispatch takes no lock: each (CPU, vector) slot is one `AtomicPtr` to a
//! `'static` [`Registration`], so a single atomic load yields the name and
//! the handler object together (two separate atomics could pair one
//! registration's name with another's handler if a slot were re-registered
//! meanwhile).

use alloc::vec::Vec;
use core::fmt;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Default CPU capacity of the table: 1024 CPUs (a two-socket 2026 server has up to 768
/// hardware threads). Each CPU costs 256 handler pointers and 256 counters, 4 KiB, so the
/// kernel's table is 4 MiB of `.bss`.
pub const MAX_CPUS: usize = 1024;

/// Above this many CPUs the listing prints one line per vector with totals and CPU ranges
/// instead of one column per CPU (a 255-CPU table of columns is unreadable).
pub const MAX_LISTING_COLUMNS: usize = 16;

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

/// 256 handler slots and 256 counters for each of `CPUS` CPUs.
#[derive(Debug)]
pub struct IrqTable<const CPUS: usize = MAX_CPUS> {
    /// `slots[cpu][vector]`.
    slots: [[AtomicPtr<Registration>; 256]; CPUS],
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
            slots: [const { [const { AtomicPtr::new(ptr::null_mut()) }; 256] }; CPUS],
            counts: [const { [const { AtomicU64::new(0) }; 256] }; CPUS],
        }
    }

    /// Publishes `registration` for `vector` on every CPU (the kernel's own
    /// vectors). Fails for exception vectors (0..=31) and if the vector is
    /// taken on any CPU (nothing is changed then).
    pub fn register(&self, vector: u8, registration: &'static Registration) -> Result<()> {
        for cpu in 0..CPUS {
            if let Err(e) = self.register_on(cpu as u32, vector, registration) {
                for done in 0..cpu {
                    let _ = self.unregister_on(done as u32, vector);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Publishes `registration` for `vector` on CPU `cpu` only (a device
    /// vector aimed at that CPU). Fails for exception vectors, a CPU beyond
    /// capacity, and a taken slot (unregister first).
    pub fn register_on(&self, cpu: u32, vector: u8, registration: &'static Registration) -> Result<()> {
        if vector < 0x20 {
            return Err(Error::ExceptionVector { vector });
        }
        let slot = self.slot(cpu, vector).ok_or(Error::CpuOutOfRange {
            cpu,
            limit: CPUS as u32,
        })?;
        let new = ptr::from_ref(registration).cast_mut();
        // Release pairs with the Acquire load in `dispatch`: a CPU that sees
        // the pointer also sees the Registration's fields as initialised
        // (it may have been built just before, e.g. leaked from a Box).
        // Relaxed on failure: nothing is read through the current value.
        slot.compare_exchange(ptr::null_mut(), new, Ordering::Release, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| Error::HandlerPresent { vector })
    }

    fn slot(&self, cpu: u32, vector: u8) -> Option<&AtomicPtr<Registration>> {
        self.slots.get(cpu as usize).map(|row| &row[usize::from(vector)])
    }

    /// Removes the handler for `vector` from every CPU and returns it (the
    /// first one found). A dispatch already running on another CPU may still
    /// call it: mask the source and wait for every CPU to pass a quiescent
    /// point before freeing what its handler object refers to.
    pub fn unregister(&self, vector: u8) -> Result<&'static Registration> {
        let mut found = None;
        for cpu in 0..CPUS as u32 {
            if let Ok(old) = self.unregister_on(cpu, vector) {
                found.get_or_insert(old);
            }
        }
        found.ok_or(Error::NoHandler { vector })
    }

    /// Removes the handler for `vector` on CPU `cpu` and returns it.
    pub fn unregister_on(&self, cpu: u32, vector: u8) -> Result<&'static Registration> {
        let slot = self.slot(cpu, vector).ok_or(Error::NoHandler { vector })?;
        // Acquire: the returned reference is read here, pairing with the
        // Release in `register_on`.
        let old = slot.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: non-null slot values only ever come from `&'static
        // Registration` in `register_on`, so the pointee is valid forever.
        unsafe { old.as_ref() }.ok_or(Error::NoHandler { vector })
    }

    /// The registration for `vector` on CPU `cpu`, if any.
    pub fn registration_on(&self, cpu: u32, vector: u8) -> Option<&'static Registration> {
        // Acquire: pairs with the Release in `register_on` (fields visible).
        let current = self.slot(cpu, vector)?.load(Ordering::Acquire);
        // SAFETY: as in `unregister_on`: only `&'static Registration` is stored.
        unsafe { current.as_ref() }
    }

    /// Interrupt path: counts the interrupt for (`cpu`, `vector`) and calls
    /// the CPU's handler for it if one is registered. No lock, O(1). A `cpu`
    /// at or above `CPUS` has no handlers and is not counted (it must not
    /// panic here).
    pub fn dispatch(&self, vector: u8, cpu: u32) -> Dispatch {
        if let Some(row) = self.counts.get(cpu as usize) {
            // Relaxed: a statistic; readers want eventual values, and no
            // other data is published through it.
            row[usize::from(vector)].fetch_add(1, Ordering::Relaxed);
        }
        match self.registration_on(cpu, vector) {
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

/// One listing row: a vector and the registration it has on some CPUs
/// (`None`: CPUs where it has none but counted interrupts).
struct Row {
    vector: u8,
    registration: Option<&'static Registration>,
}

impl<const CPUS: usize> InterruptCountsDisplay<'_, CPUS> {
    /// Whether CPU `cpu` belongs to `row` (has that registration for the vector).
    fn in_row(&self, row: &Row, cpu: u32) -> bool {
        let here = self.table.registration_on(cpu, row.vector);
        match (here, row.registration) {
            (Some(a), Some(b)) => ptr::eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// Every row to print: per vector, one per distinct registration (in
    /// order of the first CPU that has it), then one for counted interrupts
    /// on CPUs without a handler.
    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for vector in 0..=255u8 {
            let mut seen: Vec<&'static Registration> = Vec::new();
            let mut unhandled = false;
            for cpu in 0..self.cpus as u32 {
                match self.table.registration_on(cpu, vector) {
                    Some(r) if !seen.iter().any(|s| ptr::eq(*s, r)) => seen.push(r),
                    Some(_) => {}
                    None => unhandled |= self.table.count(vector, cpu) != 0,
                }
            }
            rows.extend(seen.into_iter().map(|r| Row {
                vector,
                registration: Some(r),
            }));
            if unhandled {
                rows.push(Row {
                    vector,
                    registration: None,
                });
            }
        }
        rows
    }

    fn name(row: &Row) -> &'static str {
        row.registration.map_or("(no handler)", |r| r.name)
    }
}

impl<const CPUS: usize> fmt::Display for InterruptCountsDisplay<'_, CPUS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cpus > MAX_LISTING_COLUMNS {
            // One line per row: the total and the CPUs that counted any, as ranges.
            for row in self.rows() {
                let counted: Vec<u32> = (0..self.cpus as u32)
                    .filter(|&cpu| self.in_row(&row, cpu) && self.table.count(row.vector, cpu) != 0)
                    .collect();
                let total: u64 = counted.iter().map(|&cpu| self.table.count(row.vector, cpu)).sum();
                write!(f, " {:#04x}: {total:>10} on ", row.vector)?;
                if counted.is_empty() {
                    write!(f, "no CPU")?;
                } else {
                    write!(f, "{} CPU(s) (", counted.len())?;
                    write_ranges(f, &counted)?;
                    write!(f, ")")?;
                }
                writeln!(f, "  {}", Self::name(&row))?;
            }
            return Ok(());
        }
        write!(f, "      ")?;
        for cpu in 0..self.cpus {
            write!(f, " {:>10}", CpuLabel(cpu))?;
        }
        writeln!(f)?;
        for row in self.rows() {
            write!(f, " {:#04x}:", row.vector)?;
            for cpu in 0..self.cpus as u32 {
                let count = if self.in_row(&row, cpu) {
                    self.table.count(row.vector, cpu)
                } else {
                    0
                };
                write!(f, " {count:>10}")?;
            }
            writeln!(f, "  {}", Self::name(&row))?;
        }
        Ok(())
    }
}

/// Writes sorted CPU numbers as `cpu0-3,7,9-10`.
fn write_ranges(f: &mut fmt::Formatter<'_>, cpus: &[u32]) -> fmt::Result {
    let mut i = 0;
    let mut first = true;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        write!(f, "{}{start}", if first { "cpu" } else { "," })?;
        if end != start {
            write!(f, "-{end}")?;
        }
        first = false;
        i += 1;
    }
    Ok(())
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
