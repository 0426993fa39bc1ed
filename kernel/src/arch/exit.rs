//! Ending a run: the final verdict line, then QEMU's `isa-debug-exit` device,
//! then (on a real machine, where that port write does nothing) the verdict
//! again every few seconds until power-off, so a serial-over-LAN console
//! that attaches late still sees how the run ended.
//!
//! Exit codes written to port 0xf4: 0x10 for success (the shell sees 33) and
//! 0x11 for failure (35). `verdict.repeat=` sets the repeat interval (`off`:
//! halt after the first line, as before); `verdict.repeats_before_exit=N`
//! prints N repeats before the port write, so a QEMU test sees the repeat.
//!
//! Only the first CPU to reach a verdict prints one: a second verdict (a
//! watchdog that fires on the CPU that is repeating, an AP that fails after
//! the boot CPU finished) would contradict the first.

use crate::arch::console::{emergency_println, kprintln};
use core::fmt::Write;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use x86_64::instructions::port::Port;

const DEBUG_EXIT_PORT: u16 = 0xf4;
const SUCCESS: u32 = 0x10;
const FAILURE: u32 = 0x11;

/// Seconds between repeats; 0 is off.
static REPEAT_S: AtomicU32 = AtomicU32::new(bootinfo::cmdline::DEFAULT_VERDICT_REPEAT_S);
static REPEATS_BEFORE_EXIT: AtomicU32 = AtomicU32::new(0);
const NOBODY: usize = usize::MAX;
/// The CPU that printed the verdict.
static ENDED_BY: AtomicUsize = AtomicUsize::new(NOBODY);

/// The verdict as printed (without `BAREMQ: `), for the repeats.
static VERDICT: spin::Mutex<heapless::String<200>> = spin::Mutex::new(heapless::String::new());
/// Figures of the finished jobs (`job NAME: N IOPS, E errors; ...`), for the repeats.
static JOBS: spin::Mutex<heapless::String<240>> = spin::Mutex::new(heapless::String::new());

/// Applies `verdict.repeat=` (`None`: off) and `verdict.repeats_before_exit=`.
pub fn configure_repeat(every_s: Option<u32>, before_exit: u32) {
    REPEAT_S.store(every_s.unwrap_or(0), Ordering::Relaxed);
    REPEATS_BEFORE_EXIT.store(before_exit, Ordering::Relaxed);
}

/// Records a finished job's figures for the repeated summary (the latest jobs
/// that fit in one line are kept).
pub fn note_job(name: &str, iops: u64, errors: u64) {
    let mut jobs = JOBS.lock();
    let mut entry: heapless::String<96> = heapless::String::new();
    let _ = write!(entry, "job {name}: {iops} IOPS, {errors} errors");
    if jobs.len() + entry.len() + 2 > jobs.capacity() {
        jobs.clear();
    }
    if !jobs.is_empty() {
        let _ = jobs.push_str("; ");
    }
    let _ = jobs.push_str(&entry);
}

/// Prints `BAREMQ: SUCCESS` and ends the run.
pub fn success() -> ! {
    claim_end();
    kprintln!("BAREMQ: SUCCESS");
    leave(SUCCESS, format_args!("SUCCESS"))
}

/// Prints `BAREMQ: FAILURE: <reason>` and ends the run.
pub fn failure(reason: core::fmt::Arguments<'_>) -> ! {
    claim_end();
    emergency_println!("BAREMQ: FAILURE: {}", reason);
    leave(FAILURE, format_args!("FAILURE: {reason}"))
}

/// Makes this CPU the one that ends the run. Another CPU that already did
/// keeps its verdict and this one halts; this CPU re-entering (an NMI during
/// its repeats) goes on repeating without a second verdict line.
fn claim_end() {
    let me = crate::arch::percpu::index();
    match ENDED_BY.compare_exchange(NOBODY, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(owner) if owner == me => repeat_forever(),
        Err(_) => halt_forever(),
    }
}

fn leave(code: u32, verdict: core::fmt::Arguments<'_>) -> ! {
    // Keep the verdict text: the reason's arguments may borrow the caller's frame.
    let mut line: heapless::String<200> = heapless::String::new();
    if write!(line, "{verdict}").is_err() {
        line.truncate(196);
        let _ = line.push_str("...");
    }
    *VERDICT.lock() = line;
    for n in 1..=REPEATS_BEFORE_EXIT.load(Ordering::Relaxed) {
        wait_seconds(REPEAT_S.load(Ordering::Relaxed).max(1));
        repeat_line(n);
    }
    // SAFETY: port 0xf4 is QEMU's isa-debug-exit (or unused on hardware); the
    // write terminates the VM and touches no memory.
    unsafe { Port::<u32>::new(DEBUG_EXIT_PORT).write(code) };
    // Still running: a real machine. Repeat until power-off.
    repeat_forever()
}

fn repeat_forever() -> ! {
    let every = REPEAT_S.load(Ordering::Relaxed);
    if every == 0 {
        halt_forever();
    }
    let mut n = REPEATS_BEFORE_EXIT.load(Ordering::Relaxed);
    loop {
        n = n.wrapping_add(1);
        wait_seconds(every);
        repeat_line(n);
    }
}

fn repeat_line(n: u32) {
    // try_lock: an NMI may have interrupted this CPU while it held one of them.
    let line = VERDICT.try_lock().map(|v| v.clone()).unwrap_or_default();
    let jobs = JOBS.try_lock().map(|j| j.clone()).unwrap_or_default();
    let since_s = crate::arch::time::uptime_ns() / 1_000_000_000;
    emergency_println!(
        "BAREMQ-REPEAT #{n} ({since_s} s since boot): {line}{}{jobs}",
        if jobs.is_empty() { "" } else { "; " }
    );
}

fn halt_forever() -> ! {
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

/// Waits `seconds`. With the clock calibrated and this CPU's tick running,
/// it halts with interrupts on between ticks, so its tick keeps the
/// watchdog fed; with the clock only, it spins on it; before calibration
/// it spins on the TSC assuming 3 GHz (an early failure's repeat need not be exact).
fn wait_seconds(seconds: u32) {
    let ns = u64::from(seconds) * 1_000_000_000;
    if crate::arch::time::ticks_to_ns(1 << 32) == 0 {
        let end = crate::arch::time::rdtsc().saturating_add(ns.saturating_mul(3));
        while crate::arch::time::rdtsc() < end {
            core::hint::spin_loop();
        }
        return;
    }
    let end = crate::arch::time::now_ns().saturating_add(ns);
    let ticking = crate::arch::percpu::current()
        .timer_ticks
        .load(core::sync::atomic::Ordering::Relaxed)
        != 0;
    if !ticking {
        // No tick on this CPU yet (the verdict came between calibration and
        // the tick's start): nothing would end a halt.
        while crate::arch::time::now_ns() < end {
            core::hint::spin_loop();
        }
        return;
    }
    // The verdict may come from inside an interrupt handler whose vector is
    // still in service, which would mask the tick: end it.
    crate::arch::apic::eoi();
    while crate::arch::time::now_ns() < end {
        x86_64::instructions::interrupts::enable_and_hlt();
        x86_64::instructions::interrupts::disable();
    }
}
