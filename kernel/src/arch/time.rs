//! A monotonic nanosecond clock from the TSC, calibrated from CPUID leaf 0x15
//! (or 0x16) when the CPU reports it, else against PIT channel 2. The LAPIC
//! timer is calibrated against the TSC over the same window.
//!
//! The window is opened early ([`calibration_start`]) and closed when the
//! clock is first needed ([`calibrate`]): the boot work in between counts
//! towards it instead of a fixed busy wait. It closes as soon as the error
//! bound of the rates (bracketed reads, see `platform::clock`) is below
//! [`TARGET_PPM`].
//!
//! [`boot_mark`] records raw TSC stamps of the boot phases; [`BootPhases`]
//! prints them once the rate is known.

use core::sync::atomic::{AtomicU64, Ordering};
use platform::clock::{Bracketed, Interval};
use x86_64::instructions::port::Port;

/// TSC ticks per second (0 until calibrated).
static TSC_HZ: AtomicU64 = AtomicU64::new(0);
/// 2^32 * 1e9 / TSC_HZ: nanoseconds per tick as 32.32 fixed point.
static NS_PER_TICK_FP: AtomicU64 = AtomicU64::new(0);
static TSC_ORIGIN: AtomicU64 = AtomicU64::new(0);
/// LAPIC timer ticks per second at divide-by-16.
static LAPIC_HZ: AtomicU64 = AtomicU64::new(0);

const PIT_HZ: u64 = 1_193_182;

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
    /// Bound of the relative error of the measured rates (parts per million).
    pub error_ppm: u64,
    /// Length of the window the rates were measured over.
    pub window_ns: u64,
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

/// How good a calibration must be before it stops: 1/2048 of the rate, the
/// bound Linux's quick PIT calibration accepts. Under QEMU/TCG a bracketed
/// read costs about a microsecond, so this takes 4-5 ms of PIT time, which
/// [`calibration_start`] lets the rest of the boot spend.
const TARGET_PPM: u64 = 488;
/// PIT channel 2 runs down from this (mode 0); OUT2 rises when it reaches 0,
/// after about 55 ms, which ends a window.
const PIT_FULL_COUNT: u16 = 0xFFFF;
/// Readings taken before giving up on a PIT or LAPIC timer that does not
/// count (each costs a few port/MMIO reads: seconds, not a hang).
const MAX_SAMPLES: u32 = 2_000_000;
/// Readings at the start of a window, of which the narrowest brackets are kept.
const START_READINGS: u32 = 16;
/// Fresh windows tried after one ran out (OUT2 high) before the bound was met.
const MAX_WINDOWS: u32 = 4;

/// Why the clock could not be calibrated.
#[derive(Debug, Clone, Copy)]
pub enum CalibrationError {
    /// The PIT or the LAPIC timer never gave a usable interval.
    NoProgress { samples: u32 },
}

impl core::fmt::Display for CalibrationError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CalibrationError::NoProgress { samples } => write!(
                f,
                "the PIT (channel 2) or the LAPIC timer did not count across {samples} readings; the TSC cannot be calibrated"
            ),
        }
    }
}

/// One reading of PIT channel 2 and of the LAPIC timer, each bracketed by TSC reads.
#[derive(Clone, Copy)]
struct Reading {
    pit: Bracketed,
    lapic: Bracketed,
    /// OUT2 was still low after the PIT latch: the count had not run out.
    pit_in_window: bool,
}

/// Where the current calibration window started (set by [`calibration_start`]).
static WINDOW_START: spin::Mutex<Option<Reading>> = spin::Mutex::new(None);

fn pit_ports() -> (Port<u8>, Port<u8>, Port<u8>) {
    (Port::new(0x61), Port::new(0x43), Port::new(0x42))
}

/// Loads PIT channel 2 with the full count in mode 0 (gate high, speaker
/// off) and starts the LAPIC timer free-running; returns the first reading
/// after the PIT started counting (when `need_pit`: a machine whose TSC rate
/// CPUID gives may have no PIT at all, and then nothing waits for one).
fn open_window(need_pit: bool) -> Reading {
    let (mut gate, mut mode, mut counter) = pit_ports();
    crate::arch::apic::timer_start_free_running();
    // SAFETY: PIT channel 2 and the speaker-gate port; channel 2 drives nothing
    // but the (disabled) speaker, so reprogramming it has no other effect.
    unsafe {
        let g = gate.read();
        gate.write((g & !0x02) | 0x01); // gate high, speaker off
        mode.write(0xB0); // channel 2, lo/hi byte, mode 0 (OUT2 rises at terminal count)
        counter.write(PIT_FULL_COUNT as u8);
        counter.write((PIT_FULL_COUNT >> 8) as u8);
    }
    // The count is loaded on the next PIT clock: until it runs below the
    // loaded value a reading may still be the old one.
    let mut first = read_counters();
    for _ in 0..MAX_SAMPLES {
        if !need_pit || first.pit.count < u64::from(PIT_FULL_COUNT) {
            break;
        }
        first = read_counters();
    }
    // The error bound counts each end's bracket: start from the narrowest of
    // a few readings (a vCPU or an SMI can stretch any single one).
    let mut start = first;
    for _ in 0..START_READINGS {
        let r = read_counters();
        if width(&r.pit) < width(&start.pit) {
            start.pit = r.pit;
        }
        if width(&r.lapic) < width(&start.lapic) {
            start.lapic = r.lapic;
        }
    }
    start
}

fn width(b: &Bracketed) -> u64 {
    b.tsc_after.saturating_sub(b.tsc_before)
}

/// Latches and reads PIT channel 2 and reads the LAPIC timer, each between two TSC reads.
fn read_counters() -> Reading {
    let (mut gate, mut mode, mut counter) = pit_ports();
    // SAFETY: latching and reading PIT channel 2 (programmed by `open_window`)
    // and reading the speaker-gate port have no effect beyond the PIT's latch.
    unsafe {
        let before = rdtsc();
        mode.write(0x80); // counter latch, channel 2
        let after = rdtsc();
        let lapic_before = rdtsc();
        let lapic = crate::arch::apic::timer_current();
        let lapic_after = rdtsc();
        let lo = counter.read();
        let hi = counter.read();
        let pit_in_window = gate.read() & 0x20 == 0;
        Reading {
            pit: Bracketed {
                tsc_before: before,
                tsc_after: after,
                count: u64::from(u16::from_le_bytes([lo, hi])),
            },
            lapic: Bracketed {
                tsc_before: lapic_before,
                tsc_after: lapic_after,
                count: u64::from(lapic),
            },
            pit_in_window,
        }
    }
}

/// Opens the calibration window: from here the PIT and the LAPIC timer
/// count while the boot goes on, and [`calibrate`] only waits for what is
/// still missing. Call on the BSP after the local APIC is enabled.
pub fn calibration_start() {
    *WINDOW_START.lock() = Some(open_window(cpuid_tsc_hz().is_none()));
}

/// An estimate and its error bound.
struct Estimate {
    tsc_hz: u64,
    lapic_hz: u64,
    error_ppm: u64,
    window_ns: u64,
}

/// Rates from the window `start..end`: the TSC from CPUID when `cpuid_hz`
/// holds it (then only the LAPIC interval matters), else from the PIT.
fn estimate(start: &Reading, end: &Reading, cpuid_hz: Option<u64>) -> Option<Estimate> {
    let lapic = Interval::between_down_counts(start.lapic, end.lapic)?;
    let (tsc_hz, pit_ppm) = match cpuid_hz {
        Some(hz) => (hz, 0),
        None => {
            if !end.pit_in_window {
                return None;
            }
            let pit = Interval::between_down_counts(start.pit, end.pit)?;
            (pit.tsc_hz(PIT_HZ), pit.error_ppm())
        }
    };
    let tsc_hz = tsc_hz.max(1);
    Some(Estimate {
        tsc_hz,
        lapic_hz: lapic.counter_hz(tsc_hz),
        error_ppm: pit_ppm.max(lapic.error_ppm()),
        window_ns: (lapic.tsc_ticks() as u128 * 1_000_000_000 / tsc_hz as u128) as u64,
    })
}

/// Finishes calibration (opening a window first if [`calibration_start`] did
/// not): reads the PIT and LAPIC timer until the rates are known within
/// [`TARGET_PPM`], opening a fresh window when one ran out first. The TSC
/// rate comes from CPUID leaf 0x15 (or 0x16) when the CPU reports it.
pub fn calibrate() -> Result<Calibration, CalibrationError> {
    let cpuid = cpuid_tsc_hz();
    let need_pit = cpuid.is_none();
    let mut start = WINDOW_START.lock().take().unwrap_or_else(|| open_window(need_pit));
    let mut best: Option<Estimate> = None;
    let mut windows = 1;
    let mut samples = 0u32;
    loop {
        let now = read_counters();
        samples += 1;
        match estimate(&start, &now, cpuid.map(|(hz, _)| hz)) {
            Some(e) => {
                let done = e.error_ppm <= TARGET_PPM;
                if best.as_ref().is_none_or(|b| e.error_ppm < b.error_ppm) {
                    best = Some(e);
                }
                if done {
                    break;
                }
            }
            // The PIT ran out before the bound was met (a preempted vCPU, a
            // slow machine): start over, a few times.
            None if cpuid.is_none() && !now.pit_in_window => {
                if windows >= MAX_WINDOWS {
                    break;
                }
                windows += 1;
                start = open_window(need_pit);
            }
            None => {}
        }
        if samples >= MAX_SAMPLES {
            break;
        }
    }
    crate::arch::apic::timer_stop();
    log::debug!(
        "clock: {samples} readings; start brackets pit {} lapic {} ticks",
        width(&start.pit),
        width(&start.lapic)
    );
    let Some(e) = best else {
        return Err(CalibrationError::NoProgress { samples });
    };
    if e.error_ppm > TARGET_PPM {
        log::warn!(
            "clock: calibration reached only +-{} ppm (target {TARGET_PPM}) after {windows} window(s)",
            e.error_ppm
        );
    }
    TSC_HZ.store(e.tsc_hz, Ordering::Relaxed);
    NS_PER_TICK_FP.store(((1_000_000_000u128 << 32) / e.tsc_hz as u128) as u64, Ordering::Relaxed);
    LAPIC_HZ.store(e.lapic_hz, Ordering::Relaxed);
    TSC_ORIGIN.store(rdtsc(), Ordering::Relaxed);
    Ok(Calibration {
        tsc_hz: e.tsc_hz,
        source: cpuid.map_or(Source::Pit, |(_, s)| s),
        lapic_hz: e.lapic_hz,
        error_ppm: e.error_ppm,
        window_ns: e.window_ns,
    })
}

/// Most boot phases [`boot_mark`] records.
const MAX_BOOT_MARKS: usize = 16;

/// Raw TSC readings at the end of each boot phase, taken before the clock is
/// calibrated too (they are converted when printed). Only the BSP writes
/// them, in order, before any AP runs.
static BOOT_MARKS: spin::Mutex<([(&str, u64); MAX_BOOT_MARKS], usize)> =
    spin::Mutex::new(([("", 0); MAX_BOOT_MARKS], 0));

/// Records the end of boot phase `name` (the phase started at the previous
/// mark; the first mark's phase starts at TSC 0, which under QEMU is the
/// moment the VM started, on real hardware the CPU's reset).
pub fn boot_mark(name: &'static str) {
    boot_mark_at(name, rdtsc());
}

/// Records the end of boot phase `name` at TSC value `now` (taken earlier).
pub fn boot_mark_at(name: &'static str, now: u64) {
    let mut marks = BOOT_MARKS.lock();
    let n = marks.1;
    if n < MAX_BOOT_MARKS {
        marks.0[n] = (name, now);
        marks.1 = n + 1;
    }
}

/// The recorded boot phases in milliseconds, one line: `name ms, name ms, ...; total ms`.
pub struct BootPhases;

impl core::fmt::Display for BootPhases {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let marks = BOOT_MARKS.lock();
        let (list, n) = (&marks.0, marks.1);
        let mut previous = 0u64;
        for (i, &(name, tsc)) in list[..n].iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {}", Millis(ticks_to_ns(tsc.saturating_sub(previous))))?;
            previous = tsc;
        }
        write!(f, "; total {}", Millis(ticks_to_ns(previous)))
    }
}

/// Nanoseconds shown as milliseconds with one decimal.
struct Millis(u64);

impl core::fmt::Display for Millis {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let tenths = (self.0 + 50_000) / 100_000;
        write!(f, "{}.{}", tenths / 10, tenths % 10)
    }
}
