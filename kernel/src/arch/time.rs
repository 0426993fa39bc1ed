//! A monotonic nanosecond clock from the TSC, calibrated from CPUID leaf 0x15
//! (or 0x16) when the CPU reports it, else against PIT channel 2. The LAPIC
//! timer is calibrated over the same PIT window. Five PIT windows are measured
//! and the median (by TSC ticks) is used, so one delayed port read under a
//! hypervisor cannot skew the clock.

use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::instructions::port::Port;

/// TSC ticks per second (0 until calibrated).
static TSC_HZ: AtomicU64 = AtomicU64::new(0);
/// 2^32 * 1e9 / TSC_HZ: nanoseconds per tick as 32.32 fixed point.
static NS_PER_TICK_FP: AtomicU64 = AtomicU64::new(0);
static TSC_ORIGIN: AtomicU64 = AtomicU64::new(0);
/// LAPIC timer ticks per second at divide-by-16.
static LAPIC_HZ: AtomicU64 = AtomicU64::new(0);

const PIT_HZ: u64 = 1_193_182;
const PIT_WINDOW_MS: u64 = 10;
/// PIT windows measured; the median is used. Under a hypervisor one port read can be delayed by
/// hundreds of milliseconds (a descheduled vCPU, a contended device lock), which makes that window
/// read far too long or too short; one outlier must not set the clock (seen: 33x).
const PIT_WINDOWS: usize = 5;

/// Where the TSC frequency came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    CpuidCrystal,
    CpuidBaseFrequency,
    Pit,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::CpuidCrystal => "CPUID 0x15 (crystal ratio)",
            Source::CpuidBaseFrequency => "CPUID 0x16 (base frequency)",
            Source::Pit => "PIT channel 2",
        }
    }
}

/// What calibration found.
#[derive(Debug, Clone, Copy)]
pub struct Calibration {
    pub tsc_hz: u64,
    pub source: Source,
    pub lapic_hz: u64,
}

/// Reads the time-stamp counter.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects and is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Nanoseconds since calibration (0 before it).
#[inline]
pub fn now_ns() -> u64 {
    let fp = NS_PER_TICK_FP.load(Ordering::Relaxed);
    let ticks = rdtsc().saturating_sub(TSC_ORIGIN.load(Ordering::Relaxed));
    ((ticks as u128 * fp as u128) >> 32) as u64
}

/// Converts TSC ticks to nanoseconds.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    ((ticks as u128 * NS_PER_TICK_FP.load(Ordering::Relaxed) as u128) >> 32) as u64
}

/// LAPIC timer frequency (divide by 16) in Hz.
pub fn lapic_hz() -> u64 {
    LAPIC_HZ.load(Ordering::Relaxed)
}

/// Busy-waits `ns` nanoseconds.
pub fn delay_ns(ns: u64) {
    let end = now_ns().saturating_add(ns);
    while now_ns() < end {
        core::hint::spin_loop();
    }
}

/// Busy-waits `us` microseconds.
pub fn delay_us(us: u64) {
    delay_ns(us.saturating_mul(1000));
}

fn cpuid_tsc_hz() -> Option<(u64, Source)> {
    let id = raw_cpuid::CpuId::new();
    if let Some(hz) = id.get_tsc_info().and_then(|t| t.tsc_frequency()) {
        return Some((hz, Source::CpuidCrystal));
    }
    let base = id.get_processor_frequency_info()?.processor_base_frequency() as u64;
    (base > 0).then_some((base * 1_000_000, Source::CpuidBaseFrequency))
}

/// Measures TSC and LAPIC-timer ticks across a PIT channel-2 one-shot of
/// `PIT_WINDOW_MS`. Returns (tsc ticks, lapic ticks).
fn pit_window() -> (u64, u64) {
    let mut gate = Port::<u8>::new(0x61);
    let mut mode = Port::<u8>::new(0x43);
    let mut counter = Port::<u8>::new(0x42);
    let count = (PIT_HZ * PIT_WINDOW_MS / 1000) as u16;
    crate::arch::apic::timer_start_free_running();
    // SAFETY: PIT channel 2 and the speaker-gate port; channel 2 drives nothing
    // but the (disabled) speaker, so reprogramming it has no other effect.
    unsafe {
        let g = gate.read();
        gate.write((g & !0x02) | 0x01); // gate high, speaker off
        mode.write(0xB0); // channel 2, lo/hi byte, mode 0 (interrupt on terminal count)
        counter.write(count as u8);
        counter.write((count >> 8) as u8);
        let lapic0 = crate::arch::apic::timer_current();
        let t0 = rdtsc();
        let mut spins: u64 = 0;
        // OUT2 (bit 5) rises at terminal count. Bounded: a broken PIT must not hang boot.
        while gate.read() & 0x20 == 0 && spins < 2_000_000_000 {
            spins += 1;
        }
        let t1 = rdtsc();
        let lapic1 = crate::arch::apic::timer_current();
        (t1 - t0, lapic0.wrapping_sub(lapic1) as u64)
    }
}

/// Calibrates the clock. Runs on the BSP with interrupts off, after the local APIC is enabled.
pub fn calibrate() -> Calibration {
    let mut windows = [(0u64, 0u64); PIT_WINDOWS];
    for w in &mut windows {
        *w = pit_window();
    }
    windows.sort_unstable_by_key(|&(tsc, _)| tsc);
    let (tsc_window, lapic_window) = windows[PIT_WINDOWS / 2];
    let (tsc_hz, source) = match cpuid_tsc_hz() {
        Some(found) => found,
        None => (tsc_window * 1000 / PIT_WINDOW_MS, Source::Pit),
    };
    // The LAPIC rate relative to the TSC over the PIT window holds whichever
    // source gave the TSC frequency.
    let lapic_hz = if tsc_window == 0 {
        0
    } else {
        (lapic_window as u128 * tsc_hz as u128 / tsc_window as u128) as u64
    };
    let tsc_hz = tsc_hz.max(1);
    TSC_HZ.store(tsc_hz, Ordering::Relaxed);
    NS_PER_TICK_FP.store(((1_000_000_000u128 << 32) / tsc_hz as u128) as u64, Ordering::Relaxed);
    LAPIC_HZ.store(lapic_hz, Ordering::Relaxed);
    TSC_ORIGIN.store(rdtsc(), Ordering::Relaxed);
    crate::arch::apic::timer_stop();
    Calibration {
        tsc_hz,
        source,
        lapic_hz,
    }
}
