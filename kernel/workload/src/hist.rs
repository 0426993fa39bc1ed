//! Log-linear latency histogram on fio's layout: fixed size, no allocation when recording, mergeable.
//!
//! The layout is fio's (`stat.h`: 6 bits, 29 groups): values below 128 get one bucket each; above
//! that, every range `[2^k, 2^(k+1))` is split into 64 equal buckets, up to `[2^33, 2^34)`, and
//! anything larger lands in the last bucket. That gives 1856 buckets (14.5 KiB of `u64` counts), and
//! a bucket is never wider than 1/64 of the values it holds. Because the layout is fio's, fio's own
//! figures fall out of it by construction: the percentile of a list entry is the representative
//! value ([`bucket_value`], the bucket's mean as fio computes it) of the first bucket whose running
//! count reaches the entry, and json+ `bins` are the non-zero buckets keyed by that value.
//!
//! Besides the counts the histogram keeps the exact sum, the sum of squares (for the sample
//! standard deviation), the minimum and the maximum. Recording is the index arithmetic, one
//! increment and those four updates: no loop, no branch on the layout (the small values too).
//!
//! baremq's own report keeps its percentile rule ([`LatencyHistogram::percentile_ppm`]: nearest rank,
//! bucket midpoint clamped to [min, max]); fio's rule is [`LatencyHistogram::fio_percentile`].

use alloc::boxed::Box;
use alloc::vec;

/// Linear buckets per power of two, as a power of two (fio's `FIO_IO_U_PLAT_BITS`).
pub const SUB_BUCKET_BITS: u32 = 6;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Groups of [`SUB_BUCKETS`] buckets (fio's `FIO_IO_U_PLAT_GROUP_NR`).
pub const GROUPS: usize = 29;
/// Number of buckets (fio's `FIO_IO_U_PLAT_NR`): 1856.
pub const BUCKETS: usize = GROUPS * SUB_BUCKETS as usize;
/// Values below this have a bucket of their own.
const EXACT_BELOW: u64 = SUB_BUCKETS << 1;
/// The first value that lands in the last bucket although it lies past that bucket's range:
/// 2^34 ns, about 17 s. Everything from here on is counted, but only as "at least this".
pub const SATURATED_FROM: u64 = 1 << (GROUPS as u32 + SUB_BUCKET_BITS - 1);

/// Percentiles of interest as parts per million: p50, p90, p99, p99.9, p99.99.
pub const REPORT_PERCENTILES_PPM: [(&str, u32); 5] = [
    ("p50", 500_000),
    ("p90", 900_000),
    ("p99", 990_000),
    ("p99.9", 999_000),
    ("p99.99", 999_900),
];

/// The bucket holding `value` (fio's `plat_val_to_idx`).
#[inline(always)]
pub const fn bucket_of(value: u64) -> usize {
    // Branch-free: bits below the 6 that select the bucket inside the group, 0 for a
    // value below 128 (`| SUB_BUCKETS` puts the top bit at 6 or above). Then `value >> dropped`
    // is the group's 64 plus the bucket inside it, or the value itself below 128, so one shift and
    // one add give fio's index either way.
    let dropped = 63 - SUB_BUCKET_BITS - (value | SUB_BUCKETS).leading_zeros();
    let index = ((dropped as usize) << SUB_BUCKET_BITS) + (value >> dropped) as usize;
    if index < BUCKETS { index } else { BUCKETS - 1 }
}

/// The smallest and largest value of bucket `index` (inclusive); `index < BUCKETS`. The last bucket
/// also holds everything from [`SATURATED_FROM`] on, so it ends at `u64::MAX`.
pub const fn bucket_bounds(index: usize) -> (u64, u64) {
    if (index as u64) < EXACT_BELOW {
        return (index as u64, index as u64);
    }
    let dropped = (index >> SUB_BUCKET_BITS) as u32 - 1;
    let sub = (index as u64) & (SUB_BUCKETS - 1);
    let low = (SUB_BUCKETS + sub) << dropped;
    if index == BUCKETS - 1 {
        return (low, u64::MAX);
    }
    (low, low + ((1u64 << dropped) - 1))
}

/// The value fio reports for bucket `index` (fio's `plat_idx_to_val`): the value itself below 128,
/// otherwise the mean of the bucket's range rounded down (the last bucket as if it ended at 2^34).
pub const fn bucket_value(index: usize) -> u64 {
    if (index as u64) < EXACT_BELOW {
        return index as u64;
    }
    let dropped = (index >> SUB_BUCKET_BITS) as u32 - 1;
    let sub = (index as u64) & (SUB_BUCKETS - 1);
    // base + (sub + 0.5) * 2^dropped, in integers; `dropped` is at least 1 here.
    ((SUB_BUCKETS + sub) << dropped) + (1u64 << (dropped - 1))
}

/// A percentile as fio writes it in a `percentile_list`, held as millionths of a percent so the
/// kernel needs no floating point: `99.99` is `99_990_000`. Valid values are 1..=100_000_000.
pub type PercentMicros = u64;

/// fio's default `percentile_list`: 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9,
/// 99.95, 99.99.
pub const FIO_DEFAULT_PERCENTILES: [PercentMicros; 17] = [
    1_000_000, 5_000_000, 10_000_000, 20_000_000, 30_000_000, 40_000_000, 50_000_000, 60_000_000, 70_000_000,
    80_000_000, 90_000_000, 95_000_000, 99_000_000, 99_500_000, 99_900_000, 99_950_000, 99_990_000,
];

/// A latency histogram in nanoseconds (any unit works; the reports assume ns).
#[derive(Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// An array of known length: `bucket_of` is below it, so recording needs no bounds check.
    counts: Box<[u64; BUCKETS]>,
    samples: u64,
    sum: u128,
    sum_of_squares: u128,
    min: u64,
    max: u64,
}

impl core::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("samples", &self.samples)
            .field("min", &self.min())
            .field("max", &self.max())
            .finish_non_exhaustive()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram; allocates its bucket array (14.5 KiB) once, here.
    pub fn new() -> Self {
        Self {
            counts: match vec![0u64; BUCKETS].into_boxed_slice().try_into() {
                Ok(counts) => counts,
                Err(_) => unreachable!("a vector of BUCKETS counts"),
            },
            samples: 0,
            sum: 0,
            sum_of_squares: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Records one value. Never allocates.
    #[inline]
    pub fn record(&mut self, value: u64) {
        self.counts[bucket_of(value)] += 1;
        self.samples += 1;
        self.sum += u128::from(value);
        // A u64 squared fits in u128; the sum saturates instead of wrapping (2^64 samples of 2^32 ns),
        // on a branch out of line: `saturating_add` selects with two conditional moves on every
        // value.
        // Stored as it comes, mended on the cold branch: a `checked_add` match compiles to a
        // select of both halves (four instructions more per I/O). Once saturated the
        // sum stays there: `MAX` plus a square overflows again, plus 0 is `MAX`.
        let (squares, overflowed) = self
            .sum_of_squares
            .overflowing_add(u128::from(value) * u128::from(value));
        self.sum_of_squares = squares;
        if overflowed {
            self.saturate_squares();
        }
        // Stored only when it moves: a compare each, not a compare, a select and a store.
        if value < self.min {
            self.min = value;
        }
        if value > self.max {
            self.max = value;
        }
    }

    /// Records `value` `count` times: exactly what `count` calls of [`LatencyHistogram::record`]
    /// do (the sum of squares saturates the same way). For a run of equal values, e.g. the I/Os
    /// of one submission burst reaped together (one clock read each side).
    pub fn record_n(&mut self, value: u64, count: u64) {
        if count <= 1 {
            if count == 1 {
                self.record(value);
            }
            return;
        }
        self.counts[bucket_of(value)] += count;
        self.samples += count;
        // Both factors are below 2^64: the product fits in u128.
        self.sum += u128::from(value) * u128::from(count);
        let squares = (u128::from(value) * u128::from(value)).checked_mul(u128::from(count));
        match squares.and_then(|squares| self.sum_of_squares.checked_add(squares)) {
            Some(squares) => self.sum_of_squares = squares,
            None => self.saturate_squares(),
        }
        if value < self.min {
            self.min = value;
        }
        if value > self.max {
            self.max = value;
        }
    }

    #[cold]
    fn saturate_squares(&mut self) {
        self.sum_of_squares = u128::MAX;
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.samples += other.samples;
        self.sum += other.sum;
        self.sum_of_squares = self.sum_of_squares.saturating_add(other.sum_of_squares);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Number of values recorded.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Smallest value, or 0 when empty.
    pub fn min(&self) -> u64 {
        if self.samples == 0 { 0 } else { self.min }
    }

    /// Largest value, or 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Exact sum of the values.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// Count of bucket `index` (0 past the end).
    pub fn bucket_count(&self, index: usize) -> u64 {
        self.counts.get(index).copied().unwrap_or(0)
    }

    /// The non-zero buckets as (fio's bucket value, count), in increasing order: json+ `bins`.
    pub fn bins(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, count)| **count != 0)
            .map(|(index, count)| (bucket_value(index), *count))
    }

    /// Mean value rounded down, or 0 when empty.
    pub fn mean(&self) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        // The mean lies between min and max, so it fits in u64.
        (self.sum / u128::from(self.samples)) as u64
    }

    /// The mean in millionths (the fraction fio prints as a float with six decimals), rounded to
    /// nearest; 0 when empty.
    pub fn mean_micros(&self) -> u128 {
        ratio_micros(self.sum, u128::from(self.samples))
    }

    /// The sample standard deviation (divided by n - 1, as fio's `calc_lat`) in millionths, rounded
    /// down; 0 with fewer than two samples.
    pub fn stddev_micros(&self) -> u128 {
        stddev_micros(u128::from(self.samples), self.sum, self.sum_of_squares)
    }

    /// The nearest-rank percentile `ppm` (parts per million, 1..=1_000_000), approximated by its
    /// bucket's midpoint and clamped to [min, max]; 0 when empty. `ppm` above a million counts as a million.
    pub fn percentile_ppm(&self, ppm: u32) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        let ppm = u128::from(ppm.min(1_000_000));
        // Nearest rank: the smallest value with at least ceil(n * p) samples at or below it.
        let rank = (u128::from(self.samples) * ppm).div_ceil(1_000_000).max(1);
        let mut seen: u128 = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += u128::from(count);
            if seen >= rank {
                let (low, high) = bucket_bounds(index);
                let midpoint = low + (high - low) / 2;
                return midpoint.clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// fio's percentile (`calc_clat_percentiles`): the value of the first bucket whose running count
    /// reaches `percent / 100 * n`; `percent` in millionths of a percent (clamped to 100%). 0 when
    /// empty.
    pub fn fio_percentile(&self, percent: PercentMicros) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        let percent = u128::from(percent.min(100_000_000));
        let wanted = percent * u128::from(self.samples);
        let mut seen: u128 = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += u128::from(count);
            // seen >= percent / 10^8 * n, without division.
            if seen * 100_000_000 >= wanted {
                return bucket_value(index);
            }
        }
        bucket_value(BUCKETS - 1)
    }
}

/// `numerator / denominator` in millionths, rounded to nearest (0 when the denominator is 0);
/// saturates instead of overflowing.
pub fn ratio_micros(numerator: u128, denominator: u128) -> u128 {
    if denominator == 0 {
        return 0;
    }
    match numerator.checked_mul(1_000_000) {
        Some(scaled) => (scaled + denominator / 2) / denominator,
        None => (numerator / denominator).saturating_mul(1_000_000),
    }
}

/// The sample standard deviation of `n` values with sum `sum` and sum of squares `squares`, in
/// millionths, rounded down (0 when `n < 2`).
pub fn stddev_micros(n: u128, sum: u128, squares: u128) -> u128 {
    if n < 2 {
        return 0;
    }
    // variance = (n * Σx² - (Σx)²) / (n (n - 1)); the numerator is never negative, but rounding of
    // a saturated Σx² could make it so, hence the saturating subtraction.
    let denominator = n * (n - 1);
    let (Some(n_squares), Some(sum_squared)) = (n.checked_mul(squares), sum.checked_mul(sum)) else {
        // Too large for exact integers: the mean of squares minus the squared mean, in whole units.
        let mean = sum / n;
        let variance = (squares / n).saturating_sub(mean * mean) * n / (n - 1);
        return isqrt(variance).saturating_mul(1_000_000);
    };
    let numerator = n_squares.saturating_sub(sum_squared);
    match numerator.checked_mul(1_000_000_000_000) {
        // sqrt(variance * 10^12) = stddev * 10^6.
        Some(scaled) => isqrt(scaled / denominator),
        None => isqrt(numerator / denominator).saturating_mul(1_000_000),
    }
}

/// The integer square root (rounded down).
pub fn isqrt(value: u128) -> u128 {
    if value < 2 {
        return value;
    }
    // Newton's iteration from a power of two at or above the root; it decreases monotonically.
    let mut x = 1u128 << (128 - value.leading_zeros()).div_ceil(2);
    loop {
        let next = (x + value / x) / 2;
        if next >= x {
            return x;
        }
        x = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use alloc::vec::Vec;

    #[test]
    fn record_n_is_n_records() {
        let values = [
            0,
            1,
            127,
            128,
            4_999,
            1 << 20,
            SATURATED_FROM,
            1 << 40,
            1 << 63,
            u64::MAX,
        ];
        for &value in &values {
            for count in [0u64, 1, 2, 3, 32, 1000] {
                let (mut once, mut each) = (LatencyHistogram::new(), LatencyHistogram::new());
                // A value recorded before, so min, max and the sums start elsewhere.
                once.record(77);
                each.record(77);
                once.record_n(value, count);
                for _ in 0..count {
                    each.record(value);
                }
                assert_eq!(once, each, "{value} x {count}");
                assert_eq!(
                    (once.samples(), once.sum(), once.min(), once.max()),
                    (each.samples(), each.sum(), each.min(), each.max())
                );
            }
        }
        // The sum of squares saturates as repeated records make it: u64::MAX squared is
        // below u128::MAX, twice it is not.
        let mut h = LatencyHistogram::new();
        h.record_n(u64::MAX, 2);
        let mut g = LatencyHistogram::new();
        g.record(u64::MAX);
        g.record(u64::MAX);
        assert_eq!(h, g);
        // And a product that overflows on its own saturates too.
        let mut big = LatencyHistogram::new();
        big.record_n(u64::MAX, u64::MAX);
        assert_eq!(big.samples(), u64::MAX);
    }

    #[test]
    fn layout_is_fios() {
        assert_eq!(BUCKETS, 1856);
        // 14.5 KiB of counts per histogram (the old 32-per-power layout had 1920 buckets, 15 KiB).
        assert_eq!(BUCKETS * core::mem::size_of::<u64>(), 14_848);
        // Values below 128 are exact; 128 and 129 share the first 2-wide bucket.
        assert_eq!(bucket_of(127), 127);
        assert_eq!((bucket_of(128), bucket_of(129), bucket_of(130)), (128, 128, 129));
        // Worked examples of fio's plat_val_to_idx: 1000 -> group 4 (3 bits dropped), 1 ms -> 954.
        assert_eq!(bucket_of(1000), 4 * 64 + ((1000 >> 3) & 63));
        assert_eq!(bucket_of(1_000_000), 954);
        // The value of a bucket is its mean, as plat_idx_to_val rounds it.
        assert_eq!(bucket_value(100), 100);
        assert_eq!(bucket_value(128), 129);
        assert_eq!(bucket_value(954), (64 + 58) * 8192 + 4096);
        // The last group covers [2^33, 2^34); larger values saturate into its last bucket.
        assert_eq!(bucket_of((1 << 34) - 1), BUCKETS - 1);
        assert_eq!(bucket_of(SATURATED_FROM), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_value(BUCKETS - 1), (127u64 << 27) + (1 << 26));
    }

    #[test]
    fn buckets_tile_the_whole_range() {
        let mut expected_low = 0u64;
        for index in 0..BUCKETS {
            let (low, high) = bucket_bounds(index);
            assert_eq!(low, expected_low, "bucket {index} must start where the previous ended");
            assert!(high >= low);
            assert_eq!(bucket_of(low), index);
            assert_eq!(bucket_of(high), index);
            let value = bucket_value(index);
            assert!(
                value >= low && value <= high,
                "bucket {index}: value {value} outside [{low}, {high}]"
            );
            assert_eq!(bucket_of(value), index);
            // Width relative to the values held stays within 1/64 once past the exact range.
            if low >= EXACT_BELOW && index != BUCKETS - 1 {
                assert!((high - low + 1) * SUB_BUCKETS <= low, "bucket {index} too wide");
            }
            expected_low = high.wrapping_add(1);
        }
        assert_eq!(expected_low, 0, "the last bucket must end at u64::MAX");
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let h = LatencyHistogram::new();
        assert_eq!(
            (h.samples(), h.min(), h.max(), h.mean(), h.percentile_ppm(500_000)),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(
            (h.fio_percentile(50_000_000), h.mean_micros(), h.stddev_micros()),
            (0, 0, 0)
        );
        assert_eq!(h.bins().count(), 0);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = LatencyHistogram::new();
        for v in 1..=20 {
            h.record(v);
        }
        assert_eq!(h.percentile_ppm(500_000), 10);
        assert_eq!(h.percentile_ppm(1_000_000), 20);
        assert_eq!(h.percentile_ppm(1), 1);
        assert_eq!(h.mean(), 10); // 210 / 20 = 10.5, rounded down
        assert_eq!(h.mean_micros(), 10_500_000);
        assert_eq!((h.min(), h.max()), (1, 20));
        // fio's rule: the first value whose running count reaches p% of n.
        assert_eq!(h.fio_percentile(50_000_000), 10);
        assert_eq!(h.fio_percentile(99_990_000), 20);
        assert_eq!(h.fio_percentile(1_000_000), 1);
        // Sample stddev of 1..=20: sqrt(35) = 5.916079...
        assert_eq!(h.stddev_micros(), 5_916_079);
        assert_eq!(
            h.bins().collect::<Vec<_>>(),
            (1..=20).map(|v| (v, 1)).collect::<Vec<_>>()
        );
    }

    fn exact_percentile(sorted: &[u64], ppm: u32) -> u64 {
        let rank = (sorted.len() as u128 * u128::from(ppm)).div_ceil(1_000_000).max(1);
        sorted[(rank - 1) as usize]
    }

    fn random_values(rng: &mut Rng, case: usize) -> Vec<u64> {
        let n = 1 + rng.below(3000) as usize;
        (0..n)
            .map(|_| match case % 4 {
                0 => rng.below(1000),
                1 => 1_000 + rng.below(1_000_000),
                // Log-uniform over 2^0..2^34: exercises every group.
                2 => {
                    let bits = rng.below(33);
                    (1u64 << bits) + rng.below(1u64 << bits)
                }
                // Heavy tail: mostly small, some up to the saturation point.
                _ => {
                    if rng.below(100) < 2 {
                        rng.below(SATURATED_FROM)
                    } else {
                        20_000 + rng.below(5_000)
                    }
                }
            })
            .collect()
    }

    /// Property: for many random distributions, every reported percentile is within 1/128 (half a
    /// bucket) of the exact nearest-rank percentile of the same samples, and min/max/mean are exact.
    #[test]
    fn percentiles_stay_within_error_bound_of_exact_values() {
        let mut rng = Rng::new(0x5eed);
        for case in 0..300 {
            let values = random_values(&mut rng, case);
            let n = values.len();
            let mut h = LatencyHistogram::new();
            for &v in &values {
                h.record(v);
            }
            let mut sorted = values.clone();
            sorted.sort_unstable();
            assert_eq!(h.min(), sorted[0]);
            assert_eq!(h.max(), sorted[n - 1]);
            let exact_mean = (values.iter().map(|&v| u128::from(v)).sum::<u128>() / n as u128) as u64;
            assert_eq!(h.mean(), exact_mean);
            for ppm in [1, 100_000, 500_000, 900_000, 990_000, 999_000, 999_900, 1_000_000] {
                let exact = exact_percentile(&sorted, ppm);
                let approx = h.percentile_ppm(ppm);
                let error = approx.abs_diff(exact);
                assert!(
                    error <= exact / 128,
                    "case {case} ppm {ppm}: exact {exact}, histogram {approx}"
                );
            }
        }
    }

    /// fio's percentile and stddev, computed the way fio computes them (floating point over the same
    /// buckets and samples), agree with the integer versions.
    #[test]
    fn fio_figures_match_a_floating_point_reference() {
        let mut rng = Rng::new(0xf10);
        for case in 0..200 {
            let values = random_values(&mut rng, case);
            let mut h = LatencyHistogram::new();
            for &v in &values {
                h.record(v);
            }
            let n = values.len() as f64;
            for percent in FIO_DEFAULT_PERCENTILES {
                let wanted = percent as f64 / 1e6 / 100.0 * n;
                let mut seen = 0u64;
                let mut reference = None;
                for index in 0..BUCKETS {
                    seen += h.bucket_count(index);
                    if seen as f64 >= wanted {
                        reference = Some(bucket_value(index));
                        break;
                    }
                }
                assert_eq!(
                    Some(h.fio_percentile(percent)),
                    reference,
                    "case {case} percent {percent}"
                );
            }
            let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
            let variance = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
            if values.len() > 1 {
                let stddev = h.stddev_micros() as f64 / 1e6;
                let reference = variance.sqrt();
                assert!(
                    (stddev - reference).abs() <= reference * 1e-9 + 1e-6,
                    "case {case}: {stddev} vs {reference}"
                );
            }
            assert!(((h.mean_micros() as f64 / 1e6) - mean).abs() <= mean * 1e-12 + 1e-6);
            let bins: Vec<(u64, u64)> = h.bins().collect();
            assert_eq!(bins.iter().map(|b| b.1).sum::<u64>(), values.len() as u64);
            assert!(bins.windows(2).all(|w| w[0].0 < w[1].0));
        }
    }

    #[test]
    fn saturated_values_are_counted_in_the_last_bucket() {
        let mut h = LatencyHistogram::new();
        h.record(SATURATED_FROM * 4);
        h.record(5);
        assert_eq!(h.bucket_count(BUCKETS - 1), 1);
        assert_eq!((h.min(), h.max()), (5, SATURATED_FROM * 4));
        // fio reports the last bucket's value; baremq's own rule clamps the bucket's midpoint into
        // [min, max], which gives the exact maximum here.
        assert_eq!(h.fio_percentile(100_000_000), bucket_value(BUCKETS - 1));
        assert_eq!(h.percentile_ppm(1_000_000), SATURATED_FROM * 4);
    }

    #[test]
    fn the_sum_of_squares_saturates_and_stays_saturated() {
        let mut h = LatencyHistogram::new();
        h.record(u64::MAX);
        let one = u128::from(u64::MAX) * u128::from(u64::MAX);
        assert_eq!(h.sum_of_squares, one);
        // Two squares of 2^64 - 1 pass u128::MAX: the sum stops there, as do later ones.
        h.record(u64::MAX);
        assert_eq!(h.sum_of_squares, u128::MAX);
        h.record(3);
        assert_eq!(h.sum_of_squares, u128::MAX);
        let mut merged = LatencyHistogram::new();
        merged.record(2);
        merged.merge(&h);
        assert_eq!(merged.sum_of_squares, u128::MAX);
        assert_eq!(merged.samples(), 4);
    }

    #[test]
    fn isqrt_is_the_floor_of_the_root() {
        let mut rng = Rng::new(3);
        for value in (0..1000u128).chain((0..1000).map(|_| u128::from(rng.next_u64()) * u128::from(rng.next_u64()))) {
            let root = isqrt(value);
            assert!(root * root <= value, "{value}");
            assert!((root + 1).checked_mul(root + 1).is_none_or(|sq| sq > value), "{value}");
        }
        assert_eq!(isqrt(u128::MAX), u128::from(u64::MAX));
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut rng = Rng::new(9);
        let mut all = LatencyHistogram::new();
        let mut parts = [
            LatencyHistogram::new(),
            LatencyHistogram::new(),
            LatencyHistogram::new(),
        ];
        for i in 0..5000 {
            let v = rng.below(10_000_000);
            all.record(v);
            parts[i % 3].record(v);
        }
        let mut merged = LatencyHistogram::new();
        for part in &parts {
            merged.merge(part);
        }
        assert_eq!(merged, all);
        // Merging an empty histogram changes nothing (its min is the u64::MAX sentinel).
        merged.merge(&LatencyHistogram::new());
        assert_eq!(merged, all);
    }
}
