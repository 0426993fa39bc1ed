//! fio's `rate_process=poisson`: I/O start times of one direction as a Poisson process, i.e.
//! exponentially distributed gaps whose mean is the linear rate's interval (fio draws
//! `-ln(U) x mean` per I/O, `U` uniform in (0, 1]).
//!
//! The gap is computed without floating point per I/O: `U = x / 2^64` for a random non-zero
//! `x`; with `z` leading zeros, `U = f x 2^-z` where `f` in [1/2, 1), so
//! `-ln U = z ln 2 - ln f`, and `-ln f` comes from a table of 1025 points over [1/2, 1] (built
//! once per job and CPU) with linear interpolation (error below 2e-7). The tail is exact in
//! steps of ln 2, up to 64 ln 2 (about 44 mean gaps).

use alloc::boxed::Box;

use crate::rng::{Rng, mix64};

/// Table points over [1/2, 1]: `-ln f` in 32.32 fixed point.
const POINTS: usize = 1024;
/// ln 2 in 32.32 fixed point.
const LN_2_Q32: u64 = 2_977_044_472;

/// The gap generator of one direction on one CPU.
#[derive(Debug, Clone)]
pub struct PoissonArrivals {
    rng: Rng,
    /// `-ln(1/2 + i / (2 POINTS))` for `i` in `0..=POINTS`, 32.32 fixed point.
    table: Box<[u64; POINTS + 1]>,
}

impl PoissonArrivals {
    /// A generator whose gaps depend only on `seed` (the job's seed, fio's `randseed`, mixed with
    /// the CPU and direction by the caller).
    pub fn new(seed: u64) -> Self {
        let mut table = Box::new([0u64; POINTS + 1]);
        for (i, point) in table.iter_mut().enumerate() {
            let f = 0.5 + i as f64 / (2 * POINTS) as f64;
            // -ln f is in [0, ln 2], so the product fits easily; truncation is intended.
            *point = (-crate::skew::ln(f) * (1u64 << 32) as f64) as u64;
        }
        Self {
            rng: Rng::new(mix64(seed ^ 0x0070_6f69_7373_6f6e)),
            table,
        }
    }

    /// `-ln U` for the next uniform `U` in (0, 1], in 32.32 fixed point.
    pub fn next_exponential_q32(&mut self) -> u64 {
        let x = self.rng.next_u64() | 1;
        let zeros = x.leading_zeros();
        // m / 2^64 = f in [1/2, 1): the top bit is set; the next 10 bits pick the table interval,
        // the 32 after them the position inside it.
        let m = x << zeros;
        let index = ((m >> 53) & (POINTS as u64 - 1)) as usize;
        let fraction = (m >> 21) & 0xffff_ffff;
        let (high, low) = (self.table[index], self.table[index + 1]);
        // -ln f falls as f grows: interpolate down from the interval's start.
        let minus_ln_f = high - (((high - low) * fraction) >> 32);
        u64::from(zeros) * LN_2_Q32 + minus_ln_f
    }

    /// The time from one I/O start to the next: exponential with mean `mean_ns`.
    pub fn next_gap_ns(&mut self, mean_ns: u64) -> u64 {
        let gap = (u128::from(mean_ns) * u128::from(self.next_exponential_q32())) >> 32;
        u64::try_from(gap).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn table_ends_are_ln_2_and_zero() {
        let arrivals = PoissonArrivals::new(1);
        assert!(arrivals.table[0].abs_diff(LN_2_Q32) < 4, "{}", arrivals.table[0]);
        assert!(arrivals.table[POINTS] < 4);
    }

    #[test]
    fn gaps_have_the_exponential_mean_spread_and_tail() {
        let mut arrivals = PoissonArrivals::new(42);
        let mean = 1_000_000u64; // 1 ms: 1000 IOPS
        let gaps: Vec<u64> = (0..200_000).map(|_| arrivals.next_gap_ns(mean)).collect();
        let n = gaps.len() as f64;
        let average = gaps.iter().sum::<u64>() as f64 / n;
        assert!((average - 1e6).abs() < 1e6 * 0.01, "mean gap {average} ns");
        // An exponential's standard deviation equals its mean (a linear process has none).
        let variance = gaps.iter().map(|&g| (g as f64 - average).powi(2)).sum::<f64>() / n;
        let deviation = variance.sqrt();
        assert!((deviation - 1e6).abs() < 1e6 * 0.02, "deviation {deviation} ns");
        // P(gap > t) = e^(-t/mean): e^-1 = 36.8 %, e^-3 = 4.98 %, e^-0.1 = 90.5 %.
        for (t, want) in [(mean, 0.3679), (3 * mean, 0.0498), (mean / 10, 0.9048)] {
            let share = gaps.iter().filter(|&&g| g > t).count() as f64 / n;
            assert!((share - want).abs() < 0.005, "P(gap > {t}) = {share}, want {want}");
        }
    }

    #[test]
    fn exponential_matches_minus_ln_of_the_uniform_draw() {
        // The same draw through std's ln: the fixed-point path stays within 1e-6.
        let mut arrivals = PoissonArrivals::new(7);
        let mut rng = Rng::new(mix64(7 ^ 0x0070_6f69_7373_6f6e));
        for _ in 0..10_000 {
            let x = rng.next_u64() | 1;
            let want = -((x as f64) / 2f64.powi(64)).ln();
            let got = arrivals.next_exponential_q32() as f64 / 2f64.powi(32);
            assert!((got - want).abs() < 1e-6, "x={x:#x}: {got} vs {want}");
        }
    }

    #[test]
    fn same_seed_same_gaps_other_seed_other_gaps() {
        let mut a = PoissonArrivals::new(5);
        let mut b = PoissonArrivals::new(5);
        let mut c = PoissonArrivals::new(6);
        let first: Vec<u64> = (0..100).map(|_| a.next_gap_ns(1000)).collect();
        assert_eq!(first, (0..100).map(|_| b.next_gap_ns(1000)).collect::<Vec<_>>());
        assert_ne!(first, (0..100).map(|_| c.next_gap_ns(1000)).collect::<Vec<_>>());
    }
}
