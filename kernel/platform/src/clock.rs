//! Clock calibration arithmetic: the TSC measured against a reference counter
//! of known rate (the PIT), or a counter of unknown rate (the LAPIC timer)
//! measured against a TSC of known rate, with an error bound for each
//! estimate so a caller can stop measuring as soon as it is good enough.
//!
//! Each reading of the other counter is bracketed by two TSC reads: the
//! counter was sampled somewhere between them. The error of an interval is
//! then at most half of each bracket's width (the midpoints stand for the
//! sampling instants) plus one tick of the counter's own quantisation,
//! both relative to the interval's length.

/// One reading of a counter, with the TSC just before and just after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bracketed {
    pub tsc_before: u64,
    pub tsc_after: u64,
    /// The counter's value as read (raw; [`Interval::between_down_counts`] turns two into ticks).
    pub count: u64,
}

impl Bracketed {
    /// Width of the bracket in TSC ticks (0 when the TSC went backwards).
    fn width(&self) -> u64 {
        self.tsc_after.saturating_sub(self.tsc_before)
    }

    /// The best guess for the sampling instant: the bracket's midpoint.
    fn midpoint(&self) -> u64 {
        self.tsc_before + self.width() / 2
    }
}

/// Two readings of the same counter and the ticks it counted between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub start: Bracketed,
    pub end: Bracketed,
    /// Ticks of the counter between the two readings.
    pub counted: u64,
}

impl Interval {
    /// The interval between two readings of a counter that counts down by one per tick and
    /// did not wrap in between. `None` when `end` is not later than `start` by both clocks (no
    /// tick counted, the TSC did not advance, or the counter went up: it wrapped or was reloaded).
    pub fn between_down_counts(start: Bracketed, end: Bracketed) -> Option<Interval> {
        let counted = start.count.checked_sub(end.count).filter(|&c| c > 0)?;
        let interval = Interval { start, end, counted };
        (interval.tsc_ticks() > 0).then_some(interval)
    }

    /// The interval between two readings of a counter that counts up by one
    /// per tick in `bits` bits (24 for a PM timer without TMR_VAL_EXT, 32 or
    /// 64): the difference is taken modulo 2^bits, so one wrap in between is
    /// counted right. More than one wrap cannot be seen in the counts; the
    /// caller keeps windows shorter than a wrap period. `None` as for
    /// [`Interval::between_down_counts`].
    pub fn between_up_counts(start: Bracketed, end: Bracketed, bits: u32) -> Option<Interval> {
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let counted = (end.count & mask).wrapping_sub(start.count & mask) & mask;
        if counted == 0 {
            return None;
        }
        let interval = Interval { start, end, counted };
        (interval.tsc_ticks() > 0).then_some(interval)
    }

    /// TSC ticks between the two sampling instants (midpoint to midpoint).
    pub fn tsc_ticks(&self) -> u64 {
        self.end.midpoint().saturating_sub(self.start.midpoint())
    }

    /// Upper bound of the relative error of a rate computed from this interval, in parts per
    /// million (rounded up; `u64::MAX` for an empty interval): half of each bracket against the
    /// interval's TSC length, plus one counter tick against the ticks counted.
    pub fn error_ppm(&self) -> u64 {
        let tsc = self.tsc_ticks();
        if tsc == 0 || self.counted == 0 {
            return u64::MAX;
        }
        let half_widths = (self.start.width() as u128 + self.end.width() as u128).div_ceil(2);
        let bracket_ppm = (half_widths * 1_000_000).div_ceil(tsc as u128);
        let tick_ppm = 1_000_000u128.div_ceil(self.counted as u128);
        u64::try_from(bracket_ppm + tick_ppm).unwrap_or(u64::MAX)
    }

    /// The TSC's rate when the counter runs at `counter_hz` (0 for an empty interval).
    pub fn tsc_hz(&self, counter_hz: u64) -> u64 {
        if self.counted == 0 {
            return 0;
        }
        let hz = self.tsc_ticks() as u128 * counter_hz as u128 / self.counted as u128;
        u64::try_from(hz).unwrap_or(u64::MAX)
    }

    /// The counter's rate when the TSC runs at `tsc_hz` (0 for an empty interval).
    pub fn counter_hz(&self, tsc_hz: u64) -> u64 {
        let tsc = self.tsc_ticks();
        if tsc == 0 {
            return 0;
        }
        let hz = self.counted as u128 * tsc_hz as u128 / tsc as u128;
        u64::try_from(hz).unwrap_or(u64::MAX)
    }
}

/// The counter the TSC (and the LAPIC timer) is measured against when
/// CPUID leaves 0x15/0x16 do not give the TSC rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// The HPET main counter (MMIO, 10 MHz or faster, 32 or 64 bits).
    Hpet,
    /// The ACPI PM timer (I/O port, 3.579545 MHz, 24 or 32 bits).
    PmTimer,
    /// PIT channel 2 (1.193182 MHz, counts down, 16 bits).
    Pit,
}

impl Reference {
    /// The order baremq tries them in: the HPET (fast, wide, memory-mapped),
    /// then the PM timer (present on every ACPI PC that is not
    /// hardware-reduced), then the PIT (which some boxes gate off).
    pub const PREFERENCE: [Reference; 3] = [Reference::Hpet, Reference::PmTimer, Reference::Pit];

    /// The first of [`Reference::PREFERENCE`] that is available.
    pub fn choose(hpet: bool, pm_timer: bool) -> Reference {
        if hpet {
            Reference::Hpet
        } else if pm_timer {
            Reference::PmTimer
        } else {
            Reference::Pit
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Reference::Hpet => "HPET",
            Reference::PmTimer => "ACPI PM timer",
            Reference::Pit => "PIT channel 2",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_counts_wrap_modulo_their_width() {
        // A 24-bit PM timer that wrapped once: 0xFFFF00 -> 0x000100 is 0x200 ticks.
        let iv = Interval::between_up_counts(at(0, 10, 0xFF_FF00), at(1_000, 1_010, 0x100), 24).unwrap();
        assert_eq!(iv.counted, 0x200);
        // Bits above the width (a 24-bit timer's port reads garbage there) are ignored.
        let iv = Interval::between_up_counts(at(0, 10, 0xAB00_0010), at(1_000, 1_010, 0xCD00_0020), 24).unwrap();
        assert_eq!(iv.counted, 0x10);
        // 64-bit HPET: plain difference.
        let iv = Interval::between_up_counts(at(0, 10, 5), at(1_000, 1_010, 1_000_005), 64).unwrap();
        assert_eq!(iv.counted, 1_000_000);
        // No tick counted, or no TSC progress: no interval.
        assert!(Interval::between_up_counts(at(0, 10, 7), at(1_000, 1_010, 7), 32).is_none());
        assert!(Interval::between_up_counts(at(1_000, 1_010, 7), at(1_000, 1_010, 9), 32).is_none());
    }

    #[test]
    fn reference_preference_is_hpet_then_pm_timer_then_pit() {
        assert_eq!(Reference::choose(true, true), Reference::Hpet);
        assert_eq!(Reference::choose(false, true), Reference::PmTimer);
        assert_eq!(Reference::choose(false, false), Reference::Pit);
    }

    fn at(before: u64, after: u64, count: u64) -> Bracketed {
        Bracketed {
            tsc_before: before,
            tsc_after: after,
            count,
        }
    }

    /// A 1 MHz counter against a 1 GHz TSC, read with tight brackets over 10 ms.
    #[test]
    fn tight_brackets_give_the_true_rate_and_a_small_bound() {
        let iv = Interval::between_down_counts(at(1_000, 1_010, 50_000), at(10_001_000, 10_001_010, 40_000)).unwrap();
        assert_eq!(iv.counted, 10_000);
        assert_eq!(iv.tsc_ticks(), 10_000_000);
        assert_eq!(iv.tsc_hz(1_000_000), 1_000_000_000);
        assert_eq!(iv.counter_hz(1_000_000_000), 1_000_000);
        // 10 ticks of bracket over 10 ms = 1 ppm, plus 1 of 10000 ticks = 100 ppm.
        assert_eq!(iv.error_ppm(), 101);
    }

    #[test]
    fn wide_brackets_raise_the_bound() {
        let tight = Interval::between_down_counts(at(0, 10, 5_000), at(1_000_000, 1_000_010, 4_000)).unwrap();
        let wide = Interval::between_down_counts(at(0, 20_000, 5_000), at(1_000_000, 1_020_000, 4_000)).unwrap();
        assert!(wide.error_ppm() > tight.error_ppm() + 10_000);
        // Both estimates still use the midpoints.
        assert_eq!(wide.tsc_ticks(), 1_000_000);
    }

    /// The true rate lies within the bound whatever instant inside each bracket the counter
    /// was really read at.
    #[test]
    fn the_bound_covers_every_sampling_instant_inside_the_brackets() {
        let counter_hz = 1_193_182u64;
        let tsc_hz = 2_600_000_000u64;
        // The counter was really sampled at `s` and `e` (TSC), each anywhere in a 3000-tick bracket.
        for (s_off, e_off) in [(0u64, 0u64), (0, 3_000), (3_000, 0), (1_500, 1_500), (3_000, 3_000)] {
            let s = 1_000_000 + s_off;
            let e = 1_000_000 + 13_000_000 + e_off;
            let count_at = |t: u64| 60_000 - (t as u128 * counter_hz as u128 / tsc_hz as u128) as u64;
            let iv = Interval::between_down_counts(
                at(1_000_000, 1_003_000, count_at(s)),
                at(14_000_000, 14_003_000, count_at(e)),
            )
            .unwrap();
            let estimate = iv.tsc_hz(counter_hz);
            let off_ppm = (estimate.abs_diff(tsc_hz) as u128 * 1_000_000 / tsc_hz as u128) as u64;
            assert!(
                off_ppm <= iv.error_ppm(),
                "sampled at +{s_off}/+{e_off}: {estimate} Hz is {off_ppm} ppm off, bound {}",
                iv.error_ppm()
            );
        }
    }

    #[test]
    fn no_interval_without_progress_or_after_a_wrap() {
        // Counter did not move.
        assert!(Interval::between_down_counts(at(0, 1, 100), at(1_000, 1_001, 100)).is_none());
        // Counter went up: it wrapped or was reloaded.
        assert!(Interval::between_down_counts(at(0, 1, 100), at(1_000, 1_001, 65_000)).is_none());
        // TSC did not advance.
        assert!(Interval::between_down_counts(at(1_000, 1_001, 100), at(1_000, 1_001, 50)).is_none());
    }

    #[test]
    fn empty_interval_reports_no_rate() {
        let iv = Interval {
            start: at(5, 5, 0),
            end: at(5, 5, 0),
            counted: 0,
        };
        assert_eq!(iv.error_ppm(), u64::MAX);
        assert_eq!(iv.tsc_hz(1_000), 0);
        assert_eq!(iv.counter_hz(1_000), 0);
    }
}
