//! Built-in self-tests selected with `test=NAME`. Each either ends the run
//! itself (the fault tests end through the exception reporter) or returns
//! after checking what it measured; a failed check ends the run with
//! FAILURE and the measured figures.

use crate::{apic, irq, kprintln, percpu, time};
use bootinfo::cmdline::SelfTest;
use core::sync::atomic::Ordering;

pub fn run(test: SelfTest) {
    kprintln!("selftest: {}", test.name());
    match test {
        SelfTest::PageFault => {
            // Beyond the identity-mapped 4 GiB: not present.
            let p = 0x0dea_dbee_f000_u64 as *const u64;
            // SAFETY: deliberately invalid; the #PF handler ends the run.
            let v = unsafe { core::ptr::read_volatile(p) };
            crate::exit::failure(format_args!("read of an unmapped address returned {v:#x}"));
        }
        SelfTest::InvalidOpcode => {
            // SAFETY: raises #UD; the handler ends the run.
            unsafe { core::arch::asm!("ud2") };
        }
        SelfTest::GeneralProtection => {
            // SAFETY: a non-canonical address raises #GP; the handler ends the run.
            unsafe { core::ptr::read_volatile(0x8000_0000_0000_0000u64 as *const u64) };
        }
        SelfTest::Breakpoint => {
            // SAFETY: raises #BP; the handler ends the run (TCG only: kvm-pvm cannot emulate int3).
            unsafe { core::arch::asm!("int3") };
        }
        SelfTest::Panic => panic!("deliberate panic requested by test=panic"),
        SelfTest::Timer => timer(),
        other => crate::exit::failure(format_args!("self-test '{}' is not available yet", other.name())),
    }
}

fn on_timer(_vector: u8) {
    percpu::current().timer_ticks.fetch_add(1, Ordering::Relaxed);
}

/// Runs the LAPIC timer at 1 kHz and checks that the TSC clock advanced by
/// about one millisecond per tick over 200 ticks.
fn timer() {
    const HZ: u64 = 1000;
    const TICKS: u64 = 200;
    irq::register(irq::VECTOR_TIMER, on_timer);
    let period = (time::lapic_hz() / HZ) as u32;
    let ticks = &percpu::current().timer_ticks;
    let start_ticks = ticks.load(Ordering::Relaxed);
    let t0 = time::now_ns();
    apic::timer_periodic(irq::VECTOR_TIMER, period);
    x86_64::instructions::interrupts::enable();
    let deadline = t0 + 5_000_000_000;
    let mut last = t0;
    while ticks.load(Ordering::Relaxed) - start_ticks < TICKS && time::now_ns() < deadline {
        let now = time::now_ns();
        if now < last {
            crate::exit::failure(format_args!("clock went backwards: {now} < {last}"));
        }
        last = now;
        x86_64::instructions::hlt();
    }
    x86_64::instructions::interrupts::disable();
    apic::timer_stop();
    let elapsed = time::now_ns() - t0;
    let got = ticks.load(Ordering::Relaxed) - start_ticks;
    let expected_ns = got * 1_000_000_000 / HZ;
    kprintln!(
        "timer: {got} LAPIC ticks at {HZ} Hz in {} us of TSC time (expected {} us, ratio {}.{:03})",
        elapsed / 1000,
        expected_ns / 1000,
        elapsed / expected_ns.max(1),
        (elapsed % expected_ns.max(1)) * 1000 / expected_ns.max(1)
    );
    if got < TICKS {
        crate::exit::failure(format_args!("only {got} of {TICKS} timer interrupts within 5 s"));
    }
    // Generous bounds: TCG on a shared host delays interrupts, but a clock or
    // timer calibrated wrongly is off by far more than this.
    if elapsed < expected_ns / 2 || elapsed > expected_ns * 2 {
        crate::exit::failure(format_args!(
            "clock and LAPIC timer disagree: {TICKS} ticks took {elapsed} ns, expected about {expected_ns} ns"
        ));
    }
    kprintln!("timer: clock and LAPIC timer agree");
}
