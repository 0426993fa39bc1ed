//! Log-linear latency histogram: fixed size, no allocation when recording, mergeable.
//!
//! Values below 2^[`SUB_BUCKET_BITS`] get one bucket each. Above that, every range `[2^k, 2^(k+1))`
//! is split into 2^`SUB_BUCKET_BITS` equal buckets, so a bucket is never wider than 1/32 of the values
//! it holds. Percentiles report the bucket midpoint (clamped to the observed min and max), which is
//! within 1/64 (about 1.6%) of the exact nearest-rank value.

use alloc::boxed::Box;
use alloc::vec;

/// Linear sub-buckets per power of two, as a power of two.
pub const SUB_BUCKET_BITS: u32 = 5;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Number of buckets: one exact range plus one range per power of two up to 2^63.
pub const BUCKETS: usize = ((64 - SUB_BUCKET_BITS + 1) as usize) * (SUB_BUCKETS as usize);

/// Percentiles of interest as parts per million: p50, p90, p99, p99.9, p99.99.
pub const REPORT_PERCENTILES_PPM: [(&str, u32); 5] = [
    ("p50", 500_000),
    ("p90", 900_000),
    ("p99", 990_000),
    ("p99.9", 999_000),
    ("p99.99", 999_900),
];

/// The bucket holding `value`.
pub const fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS {
        return value as usize;
    }
    let top_bit = 63 - value.leading_zeros();
    let shift = top_bit - SUB_BUCKET_BITS;
    let range = (shift + 1) as usize;
    // `value >> shift` is in [SUB_BUCKETS, 2 * SUB_BUCKETS).
    range * SUB_BUCKETS as usize + ((value >> shift) - SUB_BUCKETS) as usize
}

/// The smallest and largest value of bucket `index` (inclusive); `index < BUCKETS`.
pub const fn bucket_bounds(index: usize) -> (u64, u64) {
    let range = index / SUB_BUCKETS as usize;
    let sub = (index % SUB_BUCKETS as usize) as u64;
    if range == 0 {
        return (sub, sub);
    }
    let shift = (range - 1) as u32;
    let low = (SUB_BUCKETS + sub) << shift;
    (low, low + ((1u64 << shift) - 1))
}

/// A latency histogram in nanoseconds (any unit works; the reports assume ns).
#[derive(Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: Box<[u64]>,
    samples: u64,
    sum: u128,
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
    /// An empty histogram; allocates its bucket array (about 15 KiB) once, here.
    pub fn new() -> Self {
        Self {
            counts: vec![0u64; BUCKETS].into_boxed_slice(),
            samples: 0,
            sum: 0,
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
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.samples += other.samples;
        self.sum += other.sum;
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

    /// Mean value rounded down, or 0 when empty.
    pub fn mean(&self) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        // The mean lies between min and max, so it fits in u64.
        (self.sum / u128::from(self.samples)) as u64
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use alloc::vec::Vec;

    #[test]
    fn buckets_tile_the_whole_range() {
        let mut expected_low = 0u64;
        for index in 0..BUCKETS {
            let (low, high) = bucket_bounds(index);
            assert_eq!(low, expected_low, "bucket {index} must start where the previous ended");
            assert!(high >= low);
            assert_eq!(bucket_of(low), index);
            assert_eq!(bucket_of(high), index);
            // Width relative to the values held stays within 1/32 once past the exact range.
            if low >= SUB_BUCKETS {
                assert!((high - low + 1) * SUB_BUCKETS <= low, "bucket {index} too wide");
            }
            expected_low = high.wrapping_add(1);
        }
        assert_eq!(expected_low, 0, "the last bucket must end at u64::MAX");
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let h = LatencyHistogram::new();
        assert_eq!(
            (h.samples(), h.min(), h.max(), h.mean(), h.percentile_ppm(500_000)),
            (0, 0, 0, 0, 0)
        );
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
        assert_eq!((h.min(), h.max()), (1, 20));
    }

    fn exact_percentile(sorted: &[u64], ppm: u32) -> u64 {
        let rank = (sorted.len() as u128 * u128::from(ppm)).div_ceil(1_000_000).max(1);
        sorted[(rank - 1) as usize]
    }

    /// Property: for many random distributions, every reported percentile is within 1/64 of the
    /// exact nearest-rank percentile of the same samples, and min/max/mean are exact.
    #[test]
    fn percentiles_stay_within_error_bound_of_exact_values() {
        let mut rng = Rng::new(0x5eed);
        for case in 0..300 {
            let n = 1 + rng.below(3000) as usize;
            let shape = case % 4;
            let values: Vec<u64> = (0..n)
                .map(|_| match shape {
                    0 => rng.below(1000),
                    1 => 1_000 + rng.below(1_000_000),
                    // Log-uniform over 2^0..2^40: exercises many ranges.
                    2 => {
                        let bits = rng.below(40);
                        (1u64 << bits) + rng.below(1u64 << bits)
                    }
                    // Heavy tail: mostly small, some huge.
                    _ => {
                        if rng.below(100) < 2 {
                            rng.below(u64::MAX / 2)
                        } else {
                            20_000 + rng.below(5_000)
                        }
                    }
                })
                .collect();
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
                    error <= exact / 64,
                    "case {case} ppm {ppm}: exact {exact}, histogram {approx}"
                );
            }
        }
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
