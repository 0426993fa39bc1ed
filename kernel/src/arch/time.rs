//! A monotonic nanosecond clock from the TSC, calibrated from CPUID leaf 0x15
//! (or 0x16) when the CPU reports it, else against a reference counter: the
//! HPET, then the ACPI PM timer (both found in the ACPI tables, see
//! [`set_references`]), then PIT channel 2. A reference that does not count
//! is reported and the next one is tried. The LAPIC timer is calibrated
//! against the TSC over the same window.
//!
//! The window is opened early ([`calibration_start`]) and closed when the
//! clock is first needed ([`calibrate`]): the boot work in between counts
//! towards it instead of a fixed busy wait. It closes as soon as the error
//! bound of the rates (bracketed reads, see `platform::clock`) is below
//! [`TARGET_PPM`]. The bound covers the measurement (bracket widths and one
//! tick of each counter); it takes the reference's nominal rate as exact (the
//! HPET's period register, the PM timer's 3.579545 MHz, the PIT's 1.193182 MHz).
//!
//! [`boot_mark`] records raw TSC stamps of the boot phases; [`BootPhases`]
//! prints them once the rate is known.

use bootinfo::cmdline::ClockReference;
use core::sync::atomic::{AtomicU64, Ordering};
use platform::acpi::{HPET_CAPABILITIES, HPET_CONFIG, HPET_MAIN_COUNTER, HPET_REGISTER_BYTES, Hpet, PmTimer};
use platform::clock::{Bracketed, Interval, Reference};
use platform::mmio::{Mmio32, VolatileMmio};
use x86_64::instructions::port::Port;

/// TSC ticks per second (0 until calibrated).
static TSC_HZ: AtomicU64 = AtomicU64::new(0);
/// 2^32 * 1e9 / TSC_HZ: nanoseconds per tick as 32.32 fixed point.
static NS_PER_TICK_FP: AtomicU64 = AtomicU64::new(0);
/// [`now_ns`] when the clock was calibrated: the origin of [`uptime_ns`].
static CALIBRATED_AT_NS: AtomicU64 = AtomicU64::new(0);
/// LAPIC timer ticks per second at divide-by-16.
static LAPIC_HZ: AtomicU64 = AtomicU64::new(0);

const PIT_HZ: u64 = 1_193_182;

/// Where the TSC frequency came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    CpuidCrystal,
    CpuidBaseFrequency,
    Hpet,
    PmTimer,
    Pit,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::CpuidCrystal => "CPUID 0x15 (crystal ratio)",
            Source::CpuidBaseFrequency => "CPUID 0x16 (base frequency)",
            Source::Hpet => "the HPET",
            Source::PmTimer => "the ACPI PM timer",
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

/// A monotonic clock in nanoseconds: the TSC scaled, counted from the TSC's zero (the CPU's
/// reset), 0 before calibration. For intervals and deadlines; [`uptime_ns`] is the one to print.
///
/// No origin is subtracted: the engine reads this twice per I/O at queue depth 1, and the
/// subtraction with its clamp (a CPU whose TSC lags the calibrating one's) would be 4 of its 10
/// instructions. A u64 TSC times a factor below 2^32 (a TSC above 1 GHz) fits in the u128
/// product, and the result in a u64 for 584 years of ticks.
#[inline]
pub fn now_ns() -> u64 {
    let fp = NS_PER_TICK_FP.load(Ordering::Relaxed);
    ((rdtsc() as u128 * fp as u128) >> 32) as u64
}

/// Nanoseconds since calibration (0 before it): the log's timestamps.
pub fn uptime_ns() -> u64 {
    now_ns().saturating_sub(CALIBRATED_AT_NS.load(Ordering::Relaxed))
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
/// Readings taken before giving up on a reference or LAPIC timer that does
/// not count (each costs a few port/MMIO reads: seconds, not a hang).
const MAX_SAMPLES: u32 = 2_000_000;
/// Readings at the start of a window, of which the narrowest brackets are kept.
const START_READINGS: u32 = 16;
/// Fresh windows tried after one ran out (OUT2 high) before the bound was met.
const MAX_WINDOWS: u32 = 4;
/// An up-counter that wraps sooner than this (the 24-bit PM timer: 4.7 s)
/// gets a fresh window in [`calibrate`] instead of the early one: the boot
/// work between the two could outlast a wrap, which the counts cannot show.
const EARLY_WINDOW_MIN_WRAP_S: u64 = 60;

/// Why the clock could not be calibrated.
#[derive(Debug, Clone, Copy)]
pub enum CalibrationError {
    /// No reference (nor the LAPIC timer) gave a usable interval.
    NoProgress { samples: u32, tried: &'static str },
}

impl core::fmt::Display for CalibrationError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CalibrationError::NoProgress { samples, tried } => write!(
                f,
                "the reference counter ({tried}) or the LAPIC timer did not count across {samples} readings; the TSC cannot be calibrated"
            ),
        }
    }
}

/// A counter the TSC can be measured against.
#[derive(Debug, Clone, Copy)]
enum Counter {
    /// The HPET main counter (register block mapped at `regs`), `bits` wide.
    Hpet { regs: usize, hz: u64, bits: u32 },
    /// The ACPI PM timer at an I/O port.
    PmTimer { port: u16, bits: u32 },
    /// PIT channel 2.
    Pit,
    /// No reference: CPUID gives the TSC rate, only the LAPIC timer is measured.
    None,
}

impl Counter {
    fn source(self) -> Source {
        match self {
            Counter::Hpet { .. } => Source::Hpet,
            Counter::PmTimer { .. } => Source::PmTimer,
            Counter::Pit | Counter::None => Source::Pit,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Counter::Hpet { .. } => Reference::Hpet.name(),
            Counter::PmTimer { .. } => Reference::PmTimer.name(),
            Counter::Pit => Reference::Pit.name(),
            Counter::None => "none",
        }
    }

    /// Whether a window may span the boot work before [`calibrate`].
    fn early_window_ok(self) -> bool {
        let (hz, bits) = match self {
            Counter::Hpet { hz, bits, .. } => (hz, bits),
            Counter::PmTimer { bits, .. } => (platform::acpi::PM_TIMER_HZ, bits),
            Counter::Pit | Counter::None => return true,
        };
        bits >= 64 || (1u64 << bits) / hz.max(1) >= EARLY_WINDOW_MIN_WRAP_S
    }
}

/// The references [`set_references`] found usable, in preference order (the PIT last).
static CANDIDATES: spin::Mutex<heapless::Vec<Counter, 3>> = spin::Mutex::new(heapless::Vec::new());

/// Takes the HPET and PM timer from the ACPI tables as calibration
/// references (used only when CPUID does not give the TSC rate). The HPET's
/// period register is checked and its main counter enabled if firmware left
/// it stopped. `forced` (`clock=`) keeps one reference only; it is an error
/// when that one is not there. Returns one line per reference for the boot log.
pub fn set_references(
    hpet: Option<&Hpet>,
    pm_timer: Option<PmTimer>,
    forced: ClockReference,
) -> Result<alloc::vec::Vec<alloc::string::String>, alloc::string::String> {
    use core::fmt::Write;
    let mut lines = alloc::vec::Vec::new();
    let mut line = alloc::string::String::new();
    let mut candidates = heapless::Vec::new();
    let wants = |reference| forced == ClockReference::Auto || forced == reference;
    if let Some(hpet) = hpet.filter(|_| wants(ClockReference::Hpet)) {
        match hpet_counter(hpet) {
            Ok(counter) => {
                if let Counter::Hpet { hz, bits, .. } = counter {
                    let _ = write!(line, "clock: HPET at {:#x}, {hz} Hz, {bits}-bit counter", hpet.base);
                }
                let _ = candidates.push(counter);
            }
            Err(e) => {
                let _ = write!(line, "clock: HPET at {:#x} not used: {e}", hpet.base);
            }
        }
        lines.push(core::mem::take(&mut line));
    }
    if let Some(pm) = pm_timer.filter(|_| wants(ClockReference::PmTimer)) {
        let _ = write!(line, "clock: ACPI PM timer at port {:#x}, {} bits", pm.port, pm.bits);
        lines.push(core::mem::take(&mut line));
        let _ = candidates.push(Counter::PmTimer {
            port: pm.port,
            bits: pm.bits,
        });
    }
    if wants(ClockReference::Pit) {
        let _ = candidates.push(Counter::Pit);
    }
    if candidates.is_empty() {
        let _ = write!(
            line,
            "clock={}: the ACPI tables name no usable {}",
            match forced {
                ClockReference::Hpet => "hpet",
                ClockReference::PmTimer => "pmtimer",
                _ => "?",
            },
            match forced {
                ClockReference::Hpet => "HPET",
                _ => "ACPI PM timer",
            }
        );
        return Err(line);
    }
    if forced != ClockReference::Auto {
        let _ = write!(
            line,
            "clock: only {} is used (clock= on the command line)",
            candidates[0].name()
        );
        lines.push(line);
    }
    *CANDIDATES.lock() = candidates;
    Ok(lines)
}

fn hpet_counter(hpet: &Hpet) -> Result<Counter, crate::error::Error> {
    let base = crate::arch::memory::map_mmio(hpet.base, HPET_REGISTER_BYTES as u64)?;
    // SAFETY: the HPET register block is mapped uncached above; nothing else
    // in the kernel touches it.
    let mmio = unsafe { VolatileMmio::new(base, HPET_REGISTER_BYTES) };
    let capabilities =
        u64::from(mmio.read32(HPET_CAPABILITIES)?) | (u64::from(mmio.read32(HPET_CAPABILITIES + 4)?) << 32);
    let hz = platform::acpi::hpet_counter_hz(capabilities)?;
    let bits = platform::acpi::hpet_counter_bits(capabilities);
    let config = mmio.read32(HPET_CONFIG)?;
    if config & 1 == 0 {
        // ENABLE_CNF starts the main counter; no comparator has its
        // interrupt enabled after reset, so nothing fires.
        mmio.write32(HPET_CONFIG, config | 1)?;
    }
    Ok(Counter::Hpet {
        regs: base as usize,
        hz,
        bits,
    })
}

/// One reading of the reference counter and of the LAPIC timer, each bracketed by TSC reads.
#[derive(Clone, Copy)]
struct Reading {
    reference: Bracketed,
    lapic: Bracketed,
    /// The reference has not run out (PIT: OUT2 still low after the latch; others always).
    in_window: bool,
}

/// Where the current calibration window started and against what (set by [`calibration_start`]).
static WINDOW_START: spin::Mutex<Option<(Counter, Reading)>> = spin::Mutex::new(None);

fn pit_ports() -> (Port<u8>, Port<u8>, Port<u8>) {
    (Port::new(0x61), Port::new(0x43), Port::new(0x42))
}

/// Starts the LAPIC timer free-running and (for the PIT) loads channel 2
/// with the full count in mode 0 (gate high, speaker off); returns the
/// narrowest of a few first readings after the reference started counting.
fn open_window(counter: Counter) -> Reading {
    crate::arch::apic::timer_start_free_running();
    if let Counter::Pit = counter {
        let (mut gate, mut mode, mut counter_port) = pit_ports();
        // SAFETY: PIT channel 2 and the speaker-gate port; channel 2 drives nothing
        // but the (disabled) speaker, so reprogramming it has no other effect.
        unsafe {
            let g = gate.read();
            gate.write((g & !0x02) | 0x01); // gate high, speaker off
            mode.write(0xB0); // channel 2, lo/hi byte, mode 0 (OUT2 rises at terminal count)
            counter_port.write(PIT_FULL_COUNT as u8);
            counter_port.write((PIT_FULL_COUNT >> 8) as u8);
        }
    }
    // The PIT count is loaded on the next PIT clock: until it runs below the
    // loaded value a reading may still be the old one.
    let mut first = read_counters(counter);
    for _ in 0..MAX_SAMPLES {
        if !matches!(counter, Counter::Pit) || first.reference.count < u64::from(PIT_FULL_COUNT) {
            break;
        }
        first = read_counters(counter);
    }
    // The error bound counts each end's bracket: start from the narrowest of
    // a few readings (a vCPU or an SMI can stretch any single one).
    let mut start = first;
    for _ in 0..START_READINGS {
        let r = read_counters(counter);
        if width(&r.reference) < width(&start.reference) {
            start.reference = r.reference;
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

/// Reads the reference counter between two TSC reads.
fn read_reference(counter: Counter) -> (Bracketed, bool) {
    match counter {
        Counter::Pit => {
            let (mut gate, mut mode, mut counter_port) = pit_ports();
            // SAFETY: latching and reading PIT channel 2 (programmed by
            // `open_window`) and reading the speaker-gate port have no effect
            // beyond the PIT's latch.
            unsafe {
                let before = rdtsc();
                mode.write(0x80); // counter latch, channel 2
                let after = rdtsc();
                let lo = counter_port.read();
                let hi = counter_port.read();
                let in_window = gate.read() & 0x20 == 0;
                let count = u64::from(u16::from_le_bytes([lo, hi]));
                (
                    Bracketed {
                        tsc_before: before,
                        tsc_after: after,
                        count,
                    },
                    in_window,
                )
            }
        }
        Counter::Hpet { regs, bits, .. } => {
            // SAFETY: `regs` is the HPET block `hpet_counter` mapped (and
            // never unmaps); only the read-only main counter is read here.
            let mmio = unsafe { VolatileMmio::new(regs as *mut u8, HPET_REGISTER_BYTES) };
            let read = |offset| u64::from(mmio.read32(offset).unwrap_or(0));
            let before = rdtsc();
            let count = if bits == 64 {
                // High, low, high: retry if the low half carried in between
                // (a few times: a broken block must not hang the boot; its
                // readings then make no usable interval and the next
                // reference is tried).
                let mut value = 0;
                for _ in 0..4 {
                    let high = read(HPET_MAIN_COUNTER + 4);
                    let low = read(HPET_MAIN_COUNTER);
                    value = (high << 32) | low;
                    if read(HPET_MAIN_COUNTER + 4) == high {
                        break;
                    }
                }
                value
            } else {
                read(HPET_MAIN_COUNTER)
            };
            let after = rdtsc();
            (
                Bracketed {
                    tsc_before: before,
                    tsc_after: after,
                    count,
                },
                true,
            )
        }
        Counter::PmTimer { port, .. } => {
            let mut port = Port::<u32>::new(port);
            let before = rdtsc();
            // SAFETY: the FADT names this port as the PM timer; reading it has no side effect.
            let count = u64::from(unsafe { port.read() });
            let after = rdtsc();
            (
                Bracketed {
                    tsc_before: before,
                    tsc_after: after,
                    count,
                },
                true,
            )
        }
        Counter::None => {
            let now = rdtsc();
            (
                Bracketed {
                    tsc_before: now,
                    tsc_after: now,
                    count: 0,
                },
                true,
            )
        }
    }
}

/// Reads the reference and the LAPIC timer, each between two TSC reads.
fn read_counters(counter: Counter) -> Reading {
    let (reference, in_window) = read_reference(counter);
    let lapic_before = rdtsc();
    let lapic = crate::arch::apic::timer_current();
    let lapic_after = rdtsc();
    Reading {
        reference,
        lapic: Bracketed {
            tsc_before: lapic_before,
            tsc_after: lapic_after,
            count: u64::from(lapic),
        },
        in_window,
    }
}

/// The counters calibration tries, in order: none when CPUID gives the TSC
/// rate, else the references [`set_references`] found, ending with the PIT.
fn candidates() -> heapless::Vec<Counter, 3> {
    let mut list = heapless::Vec::new();
    if cpuid_tsc_hz().is_some() {
        let _ = list.push(Counter::None);
        return list;
    }
    list = CANDIDATES.lock().clone();
    if list.is_empty() {
        let _ = list.push(Counter::Pit);
    }
    list
}

/// Opens the calibration window: from here the reference and the LAPIC
/// timer count while the boot goes on, and [`calibrate`] only waits for
/// what is still missing. Call on the BSP after the local APIC is enabled
/// and after [`set_references`].
pub fn calibration_start() {
    let first = candidates()[0];
    if first.early_window_ok() {
        *WINDOW_START.lock() = Some((first, open_window(first)));
    }
}

/// An estimate and its error bound.
struct Estimate {
    tsc_hz: u64,
    lapic_hz: u64,
    error_ppm: u64,
    window_ns: u64,
}

/// Rates from the window `start..end`: the TSC from CPUID when `cpuid_hz`
/// holds it (then only the LAPIC interval matters), else from the reference.
fn estimate(counter: Counter, start: &Reading, end: &Reading, cpuid_hz: Option<u64>) -> Option<Estimate> {
    let lapic = Interval::between_down_counts(start.lapic, end.lapic)?;
    let (tsc_hz, reference_ppm) = match (cpuid_hz, counter) {
        (Some(hz), _) => (hz, 0),
        (None, Counter::Hpet { hz, bits, .. }) => {
            let iv = Interval::between_up_counts(start.reference, end.reference, bits)?;
            (iv.tsc_hz(hz), iv.error_ppm())
        }
        (None, Counter::PmTimer { bits, .. }) => {
            let iv = Interval::between_up_counts(start.reference, end.reference, bits)?;
            (iv.tsc_hz(platform::acpi::PM_TIMER_HZ), iv.error_ppm())
        }
        (None, Counter::Pit | Counter::None) => {
            if !end.in_window {
                return None;
            }
            let pit = Interval::between_down_counts(start.reference, end.reference)?;
            (pit.tsc_hz(PIT_HZ), pit.error_ppm())
        }
    };
    let tsc_hz = tsc_hz.max(1);
    Some(Estimate {
        tsc_hz,
        lapic_hz: lapic.counter_hz(tsc_hz),
        error_ppm: reference_ppm.max(lapic.error_ppm()),
        window_ns: (lapic.tsc_ticks() as u128 * 1_000_000_000 / tsc_hz as u128) as u64,
    })
}

/// Measures against one reference until the bound is met (or the samples
/// run out); `None` when it never gave a usable interval.
fn measure(counter: Counter, early: Option<Reading>, cpuid_hz: Option<u64>) -> (Option<Estimate>, u32, u32) {
    let mut start = early.unwrap_or_else(|| open_window(counter));
    let mut best: Option<Estimate> = None;
    let mut windows = 1;
    let mut samples = 0u32;
    loop {
        let now = read_counters(counter);
        samples += 1;
        match estimate(counter, &start, &now, cpuid_hz) {
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
            None if cpuid_hz.is_none() && !now.in_window => {
                if windows >= MAX_WINDOWS {
                    break;
                }
                windows += 1;
                start = open_window(counter);
            }
            None => {}
        }
        if samples >= MAX_SAMPLES {
            break;
        }
    }
    log::debug!(
        "clock: {} readings against {}; start brackets reference {} lapic {} ticks",
        samples,
        counter.name(),
        width(&start.reference),
        width(&start.lapic)
    );
    (best, samples, windows)
}

/// Finishes calibration (opening a window first if [`calibration_start`] did
/// not): the TSC rate comes from CPUID leaf 0x15 (or 0x16) when the CPU
/// reports it; else it is measured against the first reference that counts
/// (HPET, ACPI PM timer, PIT), each read until the rates are known within
/// [`TARGET_PPM`].
pub fn calibrate() -> Result<Calibration, CalibrationError> {
    let cpuid = cpuid_tsc_hz();
    let mut early = WINDOW_START.lock().take();
    let mut samples = 0;
    let mut tried: &'static str = "none";
    let mut found = None;
    let list = candidates();
    for (i, &counter) in list.iter().enumerate() {
        let start = match early.take() {
            Some((c, reading)) if core::mem::discriminant(&c) == core::mem::discriminant(&counter) => Some(reading),
            _ => None,
        };
        let (best, n, windows) = measure(counter, start, cpuid.map(|(hz, _)| hz));
        samples = n;
        tried = counter.name();
        match best {
            Some(e) => {
                found = Some((counter, e, windows));
                break;
            }
            None => log::warn!(
                "clock: {} gave no usable interval ({n} readings, {windows} window(s)){}",
                counter.name(),
                if i + 1 < list.len() {
                    "; trying the next reference"
                } else {
                    ""
                }
            ),
        }
    }
    crate::arch::apic::timer_stop();
    let Some((counter, e, windows)) = found else {
        return Err(CalibrationError::NoProgress { samples, tried });
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
    CALIBRATED_AT_NS.store(now_ns(), Ordering::Relaxed);
    Ok(Calibration {
        tsc_hz: e.tsc_hz,
        source: cpuid.map_or(counter.source(), |(_, s)| s),
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

/// Set when the boot's first job starts its CPUs.
static FIRST_JOB_STARTED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The moment the boot's first job starts its CPUs, against the boot phases' TSC time:
/// `boot to first I/O: 72.4 ms from reset (boot phases 64.7, job set-up 7.7)`. `None` for every
/// later job: only the first one measures the boot.
pub fn first_job_start() -> Option<FirstJobStart> {
    let now = rdtsc();
    if FIRST_JOB_STARTED.swap(true, core::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let marks = BOOT_MARKS.lock();
    let phases_end = marks.0[..marks.1].last().map_or(0, |&(_, tsc)| tsc);
    Some(FirstJobStart { phases_end, now })
}

/// See [`first_job_start`].
pub struct FirstJobStart {
    phases_end: u64,
    now: u64,
}

impl core::fmt::Display for FirstJobStart {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "boot to first I/O: {} ms from reset (boot phases {}, job set-up {})",
            Millis(ticks_to_ns(self.now)),
            Millis(ticks_to_ns(self.phases_end)),
            Millis(ticks_to_ns(self.now.saturating_sub(self.phases_end)))
        )
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
