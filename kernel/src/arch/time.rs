//! A monotonic nanosecond clock from the TSC, calibrated from CPUID leaf 0x15
//! (or 0x16) when the CPU reports it, else against PIT channel 2. The LAPIC
//! timer is calibrated over the same PIT window, whose ends are latched reads
//! of the PIT count bracketed by TSC reads (see [`pit_window`]); the median of
//! three windows is used.

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
/// Channel 2 runs one-shot from the full count (about 54.9 ms).
const PIT_FULL_COUNT: u16 = 0xFFFF;
/// PIT ticks between the start and end samples (about 33.5 ms), leaving room before the count
/// wraps for the end samples.
const PIT_WINDOW_TICKS: u16 = 40_000;
/// Samples taken at each end of the window; the one read the fastest wins.
const SAMPLES: usize = 8;
/// Bound on the wait for the window to pass: a broken PIT must not hang boot.
const MAX_POLLS: u64 = 100_000_000;

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

/// One reading of PIT channel 2's count, bracketed by TSC reads.
#[derive(Clone, Copy)]
struct PitSample {
    /// Midpoint of the TSC bracket around the latch command.
    tsc: u64,
    /// Bracket width: how long the latch (a trapped port write under a hypervisor) took.
    width: u64,
    count: u16,
    lapic: u32,
}

fn pit_sample(mode: &mut Port<u8>, counter: &mut Port<u8>) -> PitSample {
    let t_a = rdtsc();
    // SAFETY: the counter-latch command for channel 2 (0x80) and reads of its count; channel 2
    // drives nothing but the (disabled) speaker.
    let (lo, hi, lapic, t_b) = unsafe {
        mode.write(0x80);
        let lapic = crate::arch::apic::timer_current();
        let t_b = rdtsc();
        (counter.read(), counter.read(), lapic, t_b)
    };
    PitSample {
        tsc: t_a + (t_b - t_a) / 2,
        width: t_b - t_a,
        count: u16::from_le_bytes([lo, hi]),
        lapic,
    }
}

/// The sample with the narrowest bracket among `SAMPLES` readings whose count is at most
/// `not_above` (the count only falls; a higher one has wrapped).
fn best_pit_sample(mode: &mut Port<u8>, counter: &mut Port<u8>, not_above: u16) -> Option<PitSample> {
    (0..SAMPLES)
        .map(|_| pit_sample(mode, counter))
        .filter(|s| s.count <= not_above)
        .min_by_key(|s| s.width)
}

/// Measures TSC and LAPIC-timer ticks against PIT channel 2 counting down.
/// Returns (tsc ticks, lapic ticks, PIT ticks), or `None` when the PIT does
/// not count.
///
/// Each end of the window is a latched read of the count bracketed by two TSC
/// reads, and the narrowest of several brackets is used: under a hypervisor a
/// port access can take milliseconds (a descheduled vCPU, a contended device
/// lock), and a window that ends at "the first poll that sees the count run
/// out" is long by that much (seen: the TSC rate read 3x too high on a loaded
/// host, which stretched every timeout).
fn pit_window() -> Option<(u64, u64, u64)> {
    let mut gate = Port::<u8>::new(0x61);
    let mut mode = Port::<u8>::new(0x43);
    let mut counter = Port::<u8>::new(0x42);
    crate::arch::apic::timer_start_free_running();
    // SAFETY: PIT channel 2 and the speaker-gate port; channel 2 drives nothing
    // but the (disabled) speaker, so reprogramming it has no other effect.
    unsafe {
        let g = gate.read();
        gate.write((g & !0x02) | 0x01); // gate high, speaker off
        mode.write(0xB0); // channel 2, lo/hi byte, mode 0 (one-shot)
        counter.write(PIT_FULL_COUNT as u8);
        counter.write((PIT_FULL_COUNT >> 8) as u8);
    }
    let first = best_pit_sample(&mut mode, &mut counter, PIT_FULL_COUNT)?;
    let mut polls = 0;
    while first.count.saturating_sub(pit_sample(&mut mode, &mut counter).count) < PIT_WINDOW_TICKS {
        polls += 1;
        if polls > MAX_POLLS {
            return None;
        }
    }
    let last = best_pit_sample(&mut mode, &mut counter, first.count)?;
    let pit_ticks = u64::from(first.count - last.count);
    (pit_ticks > 0 && last.tsc > first.tsc).then(|| {
        (
            last.tsc - first.tsc,
            first.lapic.wrapping_sub(last.lapic) as u64,
            pit_ticks,
        )
    })
}

/// Calibrates the clock. Runs on the BSP with interrupts off, after the local APIC is enabled.
pub fn calibrate() -> Calibration {
    // The median of three windows, by TSC rate: one window can still be skewed when every
    // sample at one of its ends was slow.
    let mut windows = [(0u64, 0u64, 1u64); 3];
    for w in &mut windows {
        *w = pit_window().unwrap_or((0, 0, 1));
    }
    windows.sort_unstable_by_key(|&(tsc, _, pit)| u128::from(tsc) * u128::from(PIT_HZ) / u128::from(pit));
    let (tsc_window, lapic_window, pit_ticks) = windows[1];
    let (tsc_hz, source) = match cpuid_tsc_hz() {
        Some(found) => found,
        None => (
            (u128::from(tsc_window) * u128::from(PIT_HZ) / u128::from(pit_ticks)) as u64,
            Source::Pit,
        ),
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
