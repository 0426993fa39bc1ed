//! fio's skewed random offsets (`random_distribution=zipf:THETA`, `pareto:H`, `normal:DEV`):
//! which rank (0 = hottest) the next random I/O touches, and where that rank lies in the slice.
//!
//! zipf and pareto draw from a cumulative table built once when the job starts (the only floating
//! point of the crate, never per I/O): one entry per rank for the first [`EXACT_RANKS`] ranks,
//! then geometric buckets, each drawn uniformly inside. A draw is one binary search over at most
//! [`EXACT_RANKS`] + [`GEOMETRIC_BUCKETS`] entries. normal is fio's own integer generator: the
//! mean of 12 uniform draws over the slice plus a uniform spread of `DEV` percent, centred on the
//! middle rank. As in fio, ranks are then scattered over the slice by a seeded bijection, so the
//! hot blocks are not all adjacent.

use crate::rng::{Rng, mix64};
use alloc::vec::Vec;

/// A skewed distribution of fio's `random_distribution`, its parameter in thousandths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skew {
    /// `zipf:THETA`: rank `r` (1-based) drawn with weight `r^-THETA` (THETA > 0).
    Zipf {
        /// THETA × 1000.
        theta_milli: u32,
    },
    /// `pareto:H` (0 < H < 1): the hottest fraction H of the ranks takes 1 − H of the accesses.
    Pareto {
        /// H × 1000.
        h_milli: u32,
    },
    /// `normal:DEV` / `gauss:DEV`: fio's bell around the middle, widened by DEV percent.
    Normal {
        /// DEV × 1000 (percent of the slice).
        dev_milli: u32,
    },
}

impl core::fmt::Display for Skew {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (name, milli) = match *self {
            Self::Zipf { theta_milli } => ("zipf", theta_milli),
            Self::Pareto { h_milli } => ("pareto", h_milli),
            Self::Normal { dev_milli } => ("normal", dev_milli),
        };
        write!(f, "{name}:{}.{:03}", milli / 1000, milli % 1000)
    }
}

/// Ranks with an entry of their own in the table.
pub const EXACT_RANKS: u64 = 2048;
/// Buckets of growing width that cover the ranks after [`EXACT_RANKS`].
pub const GEOMETRIC_BUCKETS: u64 = 2048;
/// The table's total weight: cumulative weights are integers out of this.
const TOTAL_WEIGHT: u64 = 1 << 52;

/// The draw of one CPU's slice of `ranks` blocks.
#[derive(Debug, Clone)]
pub struct SkewedDraw {
    ranks: u64,
    kind: Kind,
    scatter: Scatter,
}

#[derive(Debug, Clone)]
enum Kind {
    /// `bounds[i]..bounds[i + 1]` are the ranks of bucket `i`; `cumulative[i]` the weight of
    /// buckets `0..=i` out of [`TOTAL_WEIGHT`] (the last is exactly that).
    Table { bounds: Vec<u64>, cumulative: Vec<u64> },
    /// fio's 12-draw bell with a spread of `spread` ranks.
    Bell { spread: u64 },
}

impl SkewedDraw {
    /// The distribution over `ranks` (>= 1) ranks, scattered with `seed`.
    pub fn new(skew: Skew, ranks: u64, seed: u64) -> Self {
        let ranks = ranks.max(1);
        let kind = match skew {
            Skew::Zipf { theta_milli } => {
                let theta = f64::from(theta_milli) / 1000.0;
                table(ranks, |first, end| zipf_weight(theta, first, end))
            }
            Skew::Pareto { h_milli } => {
                let h = f64::from(h_milli) / 1000.0;
                // fio draws rank = ranks * u^p with p = ln H / ln(1 - H), so
                // P(rank < x) = (x / ranks)^(1/p).
                let inverse_power = ln(1.0 - h) / ln(h);
                let n = ranks as f64;
                table(ranks, |first, end| {
                    pow(end as f64 / n, inverse_power) - pow(first as f64 / n, inverse_power)
                })
            }
            Skew::Normal { dev_milli } => Kind::Bell {
                spread: (u128::from(ranks) * u128::from(dev_milli))
                    .div_ceil(100_000)
                    .min(u128::from(ranks / 2)) as u64,
            },
        };
        Self {
            ranks,
            kind,
            scatter: Scatter::new(ranks, seed),
        }
    }

    /// The rank of the next draw (0 = the hottest), before scattering.
    pub fn next_rank(&self, rng: &mut Rng) -> u64 {
        match &self.kind {
            Kind::Table { bounds, cumulative } => {
                let point = rng.below(TOTAL_WEIGHT);
                let bucket = cumulative.partition_point(|&c| c <= point).min(cumulative.len() - 1);
                let (first, end) = (bounds[bucket], bounds[bucket + 1]);
                first + rng.below(end - first)
            }
            Kind::Bell { spread } => {
                // fio's gauss: the mean of 12 draws from 0..=ranks, rounded up ...
                let sum: u64 = (0..12).map(|_| rng.below(self.ranks + 1)).sum();
                // (All twelve near the top can round up to `ranks` itself: keep it inside, or the
                // halving below would never end.)
                let mut rank = sum.div_ceil(12).min(self.ranks - 1);
                // ... then a uniform step of up to half the spread either way, halved until
                // it stays inside.
                if *spread > 0 {
                    let mut step = rng.below(*spread) as i64 - (*spread / 2) as i64;
                    while rank as i64 + step >= self.ranks as i64 || (rank as i64 + step) < 0 {
                        step /= 2;
                    }
                    rank = (rank as i64 + step) as u64;
                }
                rank
            }
        }
    }

    /// The block (in `0..ranks`) of the next draw.
    pub fn next_block(&self, rng: &mut Rng) -> u64 {
        self.scatter.apply(self.next_rank(rng))
    }
}

/// Weight of zipf ranks `first..end` (0-based; rank r has weight (r + 1)^-theta): exact for one
/// rank, else the integral of x^-theta over `first + 0.5 .. end + 0.5`.
fn zipf_weight(theta: f64, first: u64, end: u64) -> f64 {
    if end == first + 1 {
        return pow(first as f64 + 1.0, -theta);
    }
    let (a, b) = (first as f64 + 0.5, end as f64 + 0.5);
    if (theta - 1.0).abs() < 1e-9 {
        return ln(b / a);
    }
    (pow(b, 1.0 - theta) - pow(a, 1.0 - theta)) / (1.0 - theta)
}

/// The bucket table over `ranks` ranks with `weight(first, end)` per bucket.
fn table(ranks: u64, weight: impl Fn(u64, u64) -> f64) -> Kind {
    let mut bounds = Vec::new();
    let exact = ranks.min(EXACT_RANKS);
    bounds.extend(0..=exact);
    if ranks > exact {
        let ratio = ln(ranks as f64 / exact as f64) / GEOMETRIC_BUCKETS as f64;
        for i in 1..=GEOMETRIC_BUCKETS {
            let bound = if i == GEOMETRIC_BUCKETS {
                ranks
            } else {
                ((exact as f64 * exp(ratio * i as f64)) as u64).min(ranks)
            };
            if bound > *bounds.last().unwrap_or(&0) {
                bounds.push(bound);
            }
        }
    }
    let weights: Vec<f64> = bounds.windows(2).map(|w| weight(w[0], w[1]).max(0.0)).collect();
    let sum: f64 = weights.iter().sum();
    let mut running = 0.0;
    let mut cumulative: Vec<u64> = weights
        .iter()
        .map(|w| {
            running += w;
            ((running / sum) * TOTAL_WEIGHT as f64) as u64
        })
        .collect();
    if let Some(last) = cumulative.last_mut() {
        *last = TOTAL_WEIGHT;
    }
    Kind::Table { bounds, cumulative }
}

/// A seeded bijection of `0..n`: invertible mixing steps on the smallest power of two not below
/// `n`, repeated while the value falls at or above `n` (cycle walking, under two steps on average).
#[derive(Debug, Clone)]
struct Scatter {
    n: u64,
    mask: u64,
    shift: u32,
    multiplier: u64,
    offset: u64,
}

impl Scatter {
    fn new(n: u64, seed: u64) -> Self {
        let bits = 64 - (n.max(1) - 1).leading_zeros();
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        Self {
            n,
            mask,
            shift: bits.div_ceil(2).max(1),
            multiplier: (mix64(seed ^ 0x7a69_7066) | 1) & mask,
            offset: mix64(seed ^ 0x6f66_6673) & mask,
        }
    }

    fn step(&self, x: u64) -> u64 {
        // Each step is a bijection of the masked domain: odd multiply, xor-shift, add.
        let x = x.wrapping_mul(self.multiplier) & self.mask;
        let x = x ^ (x >> self.shift);
        x.wrapping_add(self.offset) & self.mask
    }

    fn apply(&self, rank: u64) -> u64 {
        let mut x = self.step(rank);
        while x >= self.n {
            x = self.step(x);
        }
        x
    }
}

/// Natural logarithm of `x > 0`: x = m·2^e with m in [1, 2), ln m = 2·atanh((m−1)/(m+1)).
pub(crate) fn ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mantissa = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    let s = (mantissa - 1.0) / (mantissa + 1.0);
    let s2 = s * s;
    let (mut term, mut series) = (s, 0.0);
    let mut k = 1.0;
    while k < 60.0 {
        series += term / k;
        term *= s2;
        k += 2.0;
    }
    2.0 * series + exponent as f64 * core::f64::consts::LN_2
}

/// e^x for moderate x: x = k·ln 2 + r with |r| <= ln 2 / 2, a Taylor series for e^r.
fn exp(x: f64) -> f64 {
    if x < -700.0 {
        return 0.0;
    }
    let k = {
        let q = x / core::f64::consts::LN_2;
        // Round to nearest without `f64::round` (not in core).
        if q >= 0.0 { (q + 0.5) as i64 } else { (q - 0.5) as i64 }
    };
    let r = x - k as f64 * core::f64::consts::LN_2;
    let (mut term, mut sum) = (1.0, 1.0);
    for n in 1..30 {
        term *= r / f64::from(n);
        sum += term;
    }
    let k = k.clamp(-1022, 1023);
    sum * f64::from_bits(((k + 1023) as u64) << 52)
}

/// x^y for x >= 0.
fn pow(x: f64, y: f64) -> f64 {
    if x <= 0.0 { 0.0 } else { exp(y * ln(x)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_exp_pow_match_std() {
        for &x in &[1e-9, 0.001, 0.2, 0.5, 1.0, 1.5, 2.0, 10.0, 12345.678, 1e12] {
            assert!((ln(x) - x.ln()).abs() < 1e-12 * x.ln().abs().max(1.0), "ln {x}");
            assert!((pow(x, 1.2) - x.powf(1.2)).abs() <= 1e-11 * x.powf(1.2), "pow {x}");
            assert!((pow(x, -0.3) - x.powf(-0.3)).abs() <= 1e-11 * x.powf(-0.3), "pow {x}");
        }
        for &x in &[-20.0, -1.0, 0.0, 0.7, 5.0, 40.0] {
            assert!((exp(x) - x.exp()).abs() <= 1e-13 * x.exp(), "exp {x}");
        }
    }

    #[test]
    fn scatter_is_a_bijection() {
        for n in [1u64, 2, 3, 1000, 4096, 5000] {
            let s = Scatter::new(n, 99);
            let mut seen = alloc::vec![false; n as usize];
            for r in 0..n {
                let b = s.apply(r) as usize;
                assert!(!seen[b], "{n}: {b} twice");
                seen[b] = true;
            }
        }
    }

    /// Share of the draws that land on the hottest `top` blocks (by observed counts).
    fn hottest_share(draw: &SkewedDraw, blocks: u64, top: usize, draws: u32, seed: u64) -> f64 {
        let mut rng = Rng::new(seed);
        let mut counts = alloc::vec![0u32; blocks as usize];
        for _ in 0..draws {
            let b = draw.next_block(&mut rng);
            assert!(b < blocks);
            counts[b as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        f64::from(counts[..top].iter().sum::<u32>()) / f64::from(draws)
    }

    #[test]
    fn zipf_hottest_percent_takes_the_formula_share() {
        // Like fio's t/fio-genzipf: share of the hottest 1% and 10% of ranks, here from the
        // formula sum_{i<=k} i^-theta / sum_{i<=n} i^-theta, against 400k draws. 100k blocks use
        // the geometric buckets too.
        for (blocks, theta) in [(10_000u64, 1.2f64), (100_000, 1.2), (100_000, 0.8)] {
            let draw = SkewedDraw::new(
                Skew::Zipf {
                    theta_milli: (theta * 1000.0) as u32,
                },
                blocks,
                5,
            );
            let zeta = |k: u64| (1..=k).map(|i| (i as f64).powf(-theta)).sum::<f64>();
            for percent in [1u64, 10] {
                let top = blocks * percent / 100;
                let expected = zeta(top) / zeta(blocks);
                let got = hottest_share(&draw, blocks, top as usize, 400_000, 11);
                assert!(
                    (got - expected).abs() < 0.02,
                    "zipf {theta} over {blocks}: hottest {percent}% took {got:.4}, formula {expected:.4}"
                );
            }
        }
    }

    #[test]
    fn pareto_hottest_fraction_takes_the_rest() {
        // pareto:0.2: the hottest 20% of the ranks take 80% of the accesses; check the ranks
        // themselves (before scattering) and that blocks stay inside.
        for blocks in [1000u64, 1_000_000] {
            let draw = SkewedDraw::new(Skew::Pareto { h_milli: 200 }, blocks, 3);
            let mut rng = Rng::new(8);
            let hot = (0..200_000)
                .filter(|_| {
                    let r = draw.next_rank(&mut rng);
                    assert!(r < blocks);
                    r < blocks / 5
                })
                .count();
            assert!((158_000..162_000).contains(&hot), "{blocks}: {hot} of 200000");
        }
    }

    #[test]
    fn normal_is_a_centred_bell() {
        // fio's bell without spread: the mean of 12 uniforms, sigma = n / 12; about 68% of the
        // draws within one sigma of the middle.
        let blocks = 12_000u64;
        let draw = SkewedDraw::new(Skew::Normal { dev_milli: 0 }, blocks, 1);
        let mut rng = Rng::new(2);
        let within = (0..100_000)
            .filter(|_| {
                let r = draw.next_rank(&mut rng);
                assert!(r < blocks);
                r.abs_diff(6000) <= 1000
            })
            .count();
        assert!(
            (66_000..70_500).contains(&within),
            "{within} of 100000 within one sigma"
        );
        // A 50% spread widens it.
        let wide = SkewedDraw::new(Skew::Normal { dev_milli: 50_000 }, blocks, 1);
        let within_wide = (0..100_000)
            .filter(|_| {
                assert!(wide.next_block(&mut rng) < blocks);
                let r = wide.next_rank(&mut rng);
                assert!(r < blocks);
                r.abs_diff(6000) <= 1000
            })
            .count();
        assert!(within_wide < 60_000, "{within_wide}");
    }

    #[test]
    fn tiny_slices_stay_inside() {
        let mut rng = Rng::new(3);
        for ranks in [1u64, 2, 3] {
            for skew in [
                Skew::Normal { dev_milli: 0 },
                Skew::Normal { dev_milli: 100_000 },
                Skew::Zipf { theta_milli: 1200 },
                Skew::Pareto { h_milli: 999 },
            ] {
                let draw = SkewedDraw::new(skew, ranks, 1);
                assert!(
                    (0..2000).all(|_| draw.next_block(&mut rng) < ranks),
                    "{skew} over {ranks}"
                );
            }
        }
    }

    #[test]
    fn same_seed_same_blocks() {
        let a = SkewedDraw::new(Skew::Zipf { theta_milli: 1200 }, 50_000, 9);
        let b = SkewedDraw::new(Skew::Zipf { theta_milli: 1200 }, 50_000, 9);
        let (mut ra, mut rb) = (Rng::new(4), Rng::new(4));
        for _ in 0..1000 {
            assert_eq!(a.next_block(&mut ra), b.next_block(&mut rb));
        }
    }
}
