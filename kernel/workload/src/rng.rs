//! Small deterministic pseudo-random generators (no allocation, no state beyond one word).

/// SplitMix64's finaliser: a bijective mixing of one word, used to derive independent seeds.
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// wyrand: a one-word generator with good statistical quality and a full 2^64 period.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: mix64(seed) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0xa076_1d64_78bd_642f);
        let product = u128::from(self.state) * u128::from(self.state ^ 0xe703_7ed1_a0b4_28db);
        // Fold the 128-bit product; truncation to the low half is intended.
        ((product >> 64) as u64) ^ (product as u64)
    }

    /// A value in `0..bound` (`bound > 0`), by Lemire's multiply-shift; the bias is below 2^-64 * bound.
    pub fn below(&mut self, bound: u64) -> u64 {
        // The high half of a 64x64 product is below `bound`.
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_different_seed_different_sequence() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut c = Rng::new(8);
        let mut differs = false;
        for _ in 0..100 {
            let x = a.next_u64();
            assert_eq!(x, b.next_u64());
            differs |= x != c.next_u64();
        }
        assert!(differs);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(1);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let v = rng.below(10);
            assert!(v < 10);
            seen[v as usize] += 1;
        }
        // Each value near 1000; a broken generator would leave some far off.
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }
}
