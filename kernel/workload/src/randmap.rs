//! fio's random map without a map: a seeded, full-period permutation of `0..n`, so a random job
//! touches every block exactly once per pass (fio's default; `norandommap` turns it off).
//!
//! fio keeps a bitmap of the blocks done, or walks an LFSR (`random_generator=lfsr`). This is the
//! LFSR's idea with no memory at all: a linear congruential step modulo `m`, the smallest power of
//! two not below `n`, has full period when the multiplier is 1 mod 4 and the increment odd (Hull
//! and Dobell), so it visits each of `0..m` once per `m` steps. A bijective scramble of the
//! `log2(m)`-bit value hides the LCG's weak low bits, and values at or above `n` are skipped
//! (cycle walking; since `m < 2n`, under two steps per block on average).

use crate::rng::mix64;

/// One pass over `0..n` in a seeded order; call [`RandomMap::next_index`] `n` times per pass.
#[derive(Debug, Clone)]
pub struct RandomMap {
    n: u64,
    mask: u64,
    bits: u32,
    state: u64,
    multiplier: u64,
    increment: u64,
    scramble: u64,
}

impl RandomMap {
    /// The permutation of `0..n` (`n >= 1`) for `seed`.
    pub fn new(n: u64, seed: u64) -> Self {
        let n = n.max(1);
        let bits = 64 - (n - 1).leading_zeros();
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let a = mix64(seed ^ 0x6d61_7061_6e64_6f6d);
        let b = mix64(seed.rotate_left(17) ^ 0x7065_726d_7574_6521);
        Self {
            n,
            mask,
            bits,
            state: mix64(seed) & mask,
            // 1 mod 4 and odd increment: full period modulo any power of two.
            multiplier: ((a << 2) | 1) & mask,
            increment: (b | 1) & mask,
            scramble: (mix64(a ^ b) | 1) & mask,
        }
    }

    /// A bijection of `bits`-bit values: xor-shift then an odd multiply, both invertible mod 2^bits.
    fn scrambled(&self, x: u64) -> u64 {
        let shift = (self.bits / 2).max(1);
        let mut v = x ^ (x >> shift);
        v = v.wrapping_mul(self.scramble) & self.mask;
        v ^ (v >> shift)
    }

    /// The next index of the pass; after `n` calls the next pass starts (the same order again).
    pub fn next_index(&mut self) -> u64 {
        loop {
            self.state = self.state.wrapping_mul(self.multiplier).wrapping_add(self.increment) & self.mask;
            let v = self.scrambled(self.state);
            if v < self.n {
                return v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn every_index_once_per_pass_for_many_sizes_and_seeds() {
        for n in [1u64, 2, 3, 5, 8, 63, 64, 65, 1000, 4096, 12_345] {
            for seed in [0u64, 1, 0xdead_beef, u64::MAX] {
                let mut map = RandomMap::new(n, seed);
                for pass in 0..2 {
                    let mut seen = vec![false; n as usize];
                    for _ in 0..n {
                        let i = map.next_index();
                        assert!(i < n, "n={n} seed={seed}: {i} out of range");
                        assert!(!seen[i as usize], "n={n} seed={seed} pass {pass}: {i} twice");
                        seen[i as usize] = true;
                    }
                }
            }
        }
    }

    #[test]
    fn order_depends_on_the_seed_and_is_not_sequential() {
        let take = |seed| {
            let mut map = RandomMap::new(1 << 16, seed);
            (0..64).map(|_| map.next_index()).collect::<alloc::vec::Vec<_>>()
        };
        let a = take(1);
        assert_eq!(a, take(1));
        assert_ne!(a, take(2));
        let ascending = a.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(ascending < 4, "looks sequential: {a:?}");
    }
}
