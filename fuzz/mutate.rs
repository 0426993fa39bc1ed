//! Deterministic input generation for the fixed-count fuzz passes that run
//! in `cargo test` (libFuzzer does its own mutation under `cargo xtask fuzz`).
//!
//! Not a crate: the fuzz test files of bootinfo, platform and workload
//! include it with `#[path]`, so all of them share one generator without a
//! dependency between the crates. The checks themselves live in the crates
//! (`bootinfo::fuzz`, `platform::fuzz`) or in the test file
//! (`kernel/workload/tests/fuzz.rs`), and the cargo-fuzz targets call the
//! same functions.
//!
//! Each input is, one time in four, random bytes of random length; otherwise
//! a seed (a valid input) with one to four stacked mutations: truncation, bit
//! flips, random bytes, a field set to an extreme value (0, 1, all-ones,
//! sign bits, values just below 2^32 and 2^64) as a u8/u16/u32/u64, a zeroed
//! range, or a copied chunk.

/// SplitMix64: small, fast, and the same sequence on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Values that break length and address arithmetic.
pub const EXTREMES: [u64; 16] = [
    0,
    1,
    2,
    7,
    0x7F,
    0xFF,
    0xFFFF,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    0x1_0000_0000,
    0xFFFF_FFFF_FFFF_F001,
    0xFFFF_FFFF_FFF0_0000,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];

/// Writes generated input number `index` of a pass into `out` and returns
/// its length; `seeds` are valid inputs to mutate (may be empty).
pub fn generate(rng: &mut Rng, seeds: &[&[u8]], out: &mut [u8]) -> usize {
    if seeds.is_empty() || rng.below(4) == 0 {
        let len = rng.below(out.len().min(512) + 1);
        for byte in &mut out[..len] {
            *byte = rng.next_u64() as u8;
        }
        return len;
    }
    let seed = seeds[rng.below(seeds.len())];
    let mut len = seed.len().min(out.len());
    out[..len].copy_from_slice(&seed[..len]);
    for _ in 0..=rng.below(4) {
        len = mutate(rng, out, len);
    }
    len
}

/// One mutation of `out[..len]`; returns the new length.
fn mutate(rng: &mut Rng, out: &mut [u8], len: usize) -> usize {
    match rng.below(7) {
        // Truncate.
        0 => rng.below(len + 1),
        // Flip one bit.
        1 if len > 0 => {
            let at = rng.below(len);
            out[at] ^= 1 << rng.below(8);
            len
        }
        // A random byte.
        2 if len > 0 => {
            let at = rng.below(len);
            out[at] = rng.next_u64() as u8;
            len
        }
        // A field set to an extreme value, often at an aligned offset.
        3 | 4 if len > 0 => {
            let width = 1 << rng.below(4);
            let value = EXTREMES[rng.below(EXTREMES.len())].to_le_bytes();
            let mut at = rng.below(len);
            if rng.below(2) == 0 {
                at &= !(width - 1);
            }
            let end = (at + width).min(len);
            out[at..end].copy_from_slice(&value[..end - at]);
            len
        }
        // Zero a range.
        5 if len > 0 => {
            let at = rng.below(len);
            let end = (at + 1 + rng.below(16)).min(len);
            out[at..end].fill(0);
            len
        }
        // Copy a chunk over another place (grows the input up to the buffer).
        6 if len > 0 => {
            let from = rng.below(len);
            let take = (1 + rng.below(32)).min(len - from);
            let to = rng.below(len + 1);
            let end = (to + take).min(out.len());
            out.copy_within(from..from + (end - to), to);
            len.max(end)
        }
        _ => len,
    }
}

/// Runs `check` on `count` generated inputs of at most `N` bytes,
/// deterministic for a given `seed`. `check` panics on a broken invariant;
/// the failing input is then printed as hex (to turn into a regression
/// test). The pass runs on its own thread: if it has not finished after
/// `limit`, a parser loops, and the test fails naming the input it was on.
pub fn run<const N: usize>(
    name: &str,
    seed: u64,
    count: usize,
    seeds: Vec<Vec<u8>>,
    limit: std::time::Duration,
    check: fn(&[u8]),
) {
    use std::sync::{Arc, Mutex, mpsc};
    let current: Arc<Mutex<Vec<u8>>> = Arc::new(Mutex::new(Vec::new()));
    let (done, finished) = mpsc::channel();
    let worker_current = Arc::clone(&current);
    let worker = std::thread::spawn(move || {
        let seed_slices: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
        let mut rng = Rng::new(seed);
        let mut buffer = vec![0u8; N];
        for _ in 0..count {
            let len = generate(&mut rng, &seed_slices, &mut buffer);
            let input = &buffer[..len];
            {
                let mut slot = worker_current.lock().unwrap_or_else(|poison| poison.into_inner());
                slot.clear();
                slot.extend_from_slice(input);
            }
            check(input);
        }
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => {
            let _ = worker.join();
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The worker panicked: report its input, then its panic.
            let input = current.lock().unwrap_or_else(|poison| poison.into_inner()).clone();
            eprintln!("fuzz {name}: failing input ({} bytes): {input:02x?}", input.len());
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let input = current.lock().unwrap_or_else(|poison| poison.into_inner()).clone();
            panic!(
                "fuzz {name}: not finished after {limit:?}: a parser loops on ({} bytes) {input:02x?}",
                input.len()
            );
        }
    }
}
