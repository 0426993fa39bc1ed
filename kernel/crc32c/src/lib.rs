//! CRC32C (Castagnoli, as in iSCSI and ext4): reflected polynomial 0x82F63B78, initial value and final
//! XOR 0xFFFFFFFF.
//!
//! Two implementations give identical results: the SSE4.2 `crc32` instruction (eight bytes per
//! instruction, three independent streams merged with shift tables), used when CPUID says the CPU
//! has it, and a table-driven one (eight bytes per step, "slicing by 8", tables built at compile
//! time) otherwise. The choice is made once, at the first
//! use, and cached. The instruction works on general-purpose registers only, so it needs no SSE state
//! and is safe in a kernel that never enables SSE.

#![no_std]
// The only exception is the SSE4.2 CRC32C instruction, in `hw`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate alloc;
#[cfg(test)]
extern crate std;

use core::sync::atomic::{AtomicBool, Ordering};

const POLY_REFLECTED: u32 = 0x82f6_3b78;

/// Which implementation computes the CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crc32cImpl {
    /// Slicing-by-8 tables: any CPU.
    Table,
    /// The SSE4.2 `crc32` instruction.
    Sse42,
}

impl Crc32cImpl {
    /// `table` or `sse4.2`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::Sse42 => "sse4.2",
        }
    }
}

/// Whether the instruction may be used by default: yes on hosted targets (tests, benchmarks, host
/// tools); no on bare metal (`target_os = "none"`, the kernel) until [`allow_hardware`] says so,
/// because some hypervisors cannot run it: under the project machine's kvm-pvm the guest dies
/// with "KVM internal error, emulation failure" on `crc32`, even with CPUID reporting SSE4.2 and
/// CR4.OSFXSR set, and a kernel cannot catch that.
const HARDWARE_BY_DEFAULT: bool = !cfg!(target_os = "none");

static HARDWARE_ALLOWED: AtomicBool = AtomicBool::new(HARDWARE_BY_DEFAULT);

/// Lets the CRC use the SSE4.2 instruction when the CPU has it (`true`), or keeps it on the table
/// (`false`). Takes effect for later calls on every CPU. A kernel calls it at boot, e.g. from a
/// command-line switch, on machines where the instruction is known to run.
pub fn allow_hardware(allowed: bool) {
    // Relaxed: a standalone flag read per CRC; both settings compute the same values, so a CPU
    // that sees the change late is only slower or faster for a moment.
    HARDWARE_ALLOWED.store(allowed, Ordering::Relaxed);
}

/// Whether the SSE4.2 instruction may be used (see [`allow_hardware`]).
pub fn hardware_allowed() -> bool {
    // Relaxed: see `allow_hardware`.
    HARDWARE_ALLOWED.load(Ordering::Relaxed)
}

/// The instruction path, if it is allowed and the CPU has it.
#[inline]
fn active_hardware() -> Option<hw::Sse42> {
    if hardware_allowed() { hw::Sse42::detect() } else { None }
}

/// The implementation [`crc32c`] and [`Crc32c`] use: SSE4.2 when it is allowed and CPUID reports
/// it. CPUID runs once (it is slow, and traps to the hypervisor in a VM); the answer is cached.
#[inline]
pub fn selected() -> Crc32cImpl {
    if active_hardware().is_some() {
        Crc32cImpl::Sse42
    } else {
        Crc32cImpl::Table
    }
}

/// Whether `implementation` can run on this CPU (whether or not it is allowed).
pub fn available(implementation: Crc32cImpl) -> bool {
    match implementation {
        Crc32cImpl::Table => true,
        Crc32cImpl::Sse42 => hw::Sse42::detect().is_some(),
    }
}

const fn build_tables() -> [[u32; 256]; 8] {
    let mut tables = [[0u32; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    // tables[k][b]: the CRC contribution of byte b followed by k zero bytes.
    let mut k = 1;
    while k < 8 {
        let mut byte = 0;
        while byte < 256 {
            let prev = tables[k - 1][byte];
            tables[k][byte] = (prev >> 8) ^ tables[0][(prev & 0xff) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
}

static TABLES: [[u32; 256]; 8] = build_tables();

/// Bytes each of the three interleaved streams of the SSE4.2 path covers per round. The `crc32`
/// instruction has a latency of about three cycles and a throughput of one per cycle, so three
/// independent streams keep it busy; their CRCs are then merged with [`ShiftTables`].
const STRIPE: usize = 256;

/// The raw CRC state after feeding `count` zero bytes to `state` (a linear map of `state`).
const fn feed_zeros(mut state: u32, count: usize) -> u32 {
    let table = build_tables();
    let mut i = 0;
    while i < count {
        state = (state >> 8) ^ table[0][(state & 0xff) as usize];
        i += 1;
    }
    state
}

/// The map "feed `count` zero bytes" as four byte-indexed tables: the image of a state is the XOR of
/// the images of its four bytes, since the map is linear.
struct ShiftTables([[u32; 256]; 4]);

impl ShiftTables {
    const fn new(count: usize) -> Self {
        let mut basis = [0u32; 32];
        let mut bit = 0;
        while bit < 32 {
            basis[bit] = feed_zeros(1 << bit, count);
            bit += 1;
        }
        let mut tables = [[0u32; 256]; 4];
        let mut lane = 0;
        while lane < 4 {
            let mut byte = 0;
            while byte < 256 {
                let mut image = 0;
                let mut bit = 0;
                while bit < 8 {
                    if byte & (1 << bit) != 0 {
                        image ^= basis[lane * 8 + bit];
                    }
                    bit += 1;
                }
                tables[lane][byte] = image;
                byte += 1;
            }
            lane += 1;
        }
        Self(tables)
    }

    #[inline]
    fn shift(&self, state: u32) -> u32 {
        let t = &self.0;
        t[0][(state & 0xff) as usize]
            ^ t[1][((state >> 8) & 0xff) as usize]
            ^ t[2][((state >> 16) & 0xff) as usize]
            ^ t[3][(state >> 24) as usize]
    }
}

/// Moves a stream's state past one and two stripes of the streams after it.
static SHIFT_ONE_STRIPE: ShiftTables = ShiftTables::new(STRIPE);
static SHIFT_TWO_STRIPES: ShiftTables = ShiftTables::new(2 * STRIPE);

/// The raw state over `a || b || c`, given the state over `a` from the real start and the states over
/// `b` and `c` each started from zero (the three stripes are [`STRIPE`] bytes long).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline]
fn merge_stripes(a: u32, b: u32, c: u32) -> u32 {
    SHIFT_TWO_STRIPES.shift(a) ^ SHIFT_ONE_STRIPE.shift(b) ^ c
}

/// An incremental CRC32C computation.
#[derive(Debug, Clone, Copy)]
pub struct Crc32c {
    state: u32,
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh computation.
    pub const fn new() -> Self {
        Self { state: !0 }
    }

    /// Feeds `bytes`, with the implementation [`selected`] for this CPU.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        match active_hardware() {
            Some(sse42) => self.state = sse42.update(self.state, bytes),
            None => self.update_table(bytes),
        }
    }

    /// Feeds `bytes` with `implementation`, or with the table if this CPU lacks it or it is not
    /// allowed (tests and benchmarks compare the two).
    pub fn update_with(&mut self, implementation: Crc32cImpl, bytes: &[u8]) {
        match (implementation, active_hardware()) {
            (Crc32cImpl::Sse42, Some(sse42)) => self.state = sse42.update(self.state, bytes),
            _ => self.update_table(bytes),
        }
    }

    fn update_table(&mut self, bytes: &[u8]) {
        let mut crc = self.state;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            crc = table_word(crc, u64::from_le_bytes(word));
        }
        for &byte in chunks.remainder() {
            crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(byte)) & 0xff) as usize];
        }
        self.state = crc;
    }

    /// The CRC of everything fed so far.
    pub const fn finish(&self) -> u32 {
        !self.state
    }

    /// Goes on word by word, for a producer that has each 8-byte word in a register anyway
    /// (a payload generator): no second pass over memory. The implementation is chosen once,
    /// here, as [`Crc32c::update`] would choose it.
    pub fn words(self) -> WordFeed {
        WordFeed {
            state: self.state,
            hardware: active_hardware(),
        }
    }
}

/// A [`Crc32c`] fed one 8-byte word at a time ([`Crc32c::words`]).
#[derive(Debug, Clone, Copy)]
pub struct WordFeed {
    state: u32,
    hardware: Option<hw::Sse42>,
}

impl WordFeed {
    /// Feeds `word`'s eight bytes in little-endian order (as `update(&word.to_le_bytes())`).
    #[inline(always)]
    pub fn feed(&mut self, word: u64) {
        self.state = match self.hardware {
            Some(sse42) => sse42.word_value(self.state, word),
            None => table_word(self.state, word),
        };
    }

    /// Back to a [`Crc32c`], to feed bytes or finish.
    pub fn into_crc(self) -> Crc32c {
        Crc32c { state: self.state }
    }
}

/// One slicing-by-8 step: the raw state `crc` over the eight bytes of `word`, little-endian.
#[inline(always)]
fn table_word(crc: u32, word: u64) -> u32 {
    let low = (word as u32) ^ crc;
    let high = (word >> 32) as u32;
    TABLES[7][(low & 0xff) as usize]
        ^ TABLES[6][((low >> 8) & 0xff) as usize]
        ^ TABLES[5][((low >> 16) & 0xff) as usize]
        ^ TABLES[4][(low >> 24) as usize]
        ^ TABLES[3][(high & 0xff) as usize]
        ^ TABLES[2][((high >> 8) & 0xff) as usize]
        ^ TABLES[1][((high >> 16) & 0xff) as usize]
        ^ TABLES[0][(high >> 24) as usize]
}

/// The CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = Crc32c::new();
    crc.update(bytes);
    crc.finish()
}

/// The CRC32C of `bytes` computed with `implementation` (the table if the CPU lacks it).
pub fn crc32c_with(implementation: Crc32cImpl, bytes: &[u8]) -> u32 {
    let mut crc = Crc32c::new();
    crc.update_with(implementation, bytes);
    crc.finish()
}

/// The SSE4.2 path: the only `unsafe` code of the crate.
#[allow(unsafe_code)]
mod hw {
    #[cfg(target_arch = "x86_64")]
    use core::sync::atomic::{AtomicU8, Ordering};

    #[cfg(target_arch = "x86_64")]
    const UNKNOWN: u8 = 0;
    #[cfg(target_arch = "x86_64")]
    const ABSENT: u8 = 1;
    #[cfg(target_arch = "x86_64")]
    const PRESENT: u8 = 2;

    /// What CPUID said about SSE4.2, once asked. Set only from CPUID's answer.
    #[cfg(target_arch = "x86_64")]
    static SSE42: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// Proof that this CPU executes the SSE4.2 `crc32` instruction: only [`Sse42::detect`] makes one.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Sse42(Proof);

    /// Unconstructible where there is no such instruction.
    #[cfg(target_arch = "x86_64")]
    type Proof = ();
    #[cfg(not(target_arch = "x86_64"))]
    type Proof = core::convert::Infallible;

    impl Sse42 {
        /// `Some` when CPUID leaf 1 reports SSE4.2 (ECX bit 20). CPUID runs on the first call only.
        #[cfg(target_arch = "x86_64")]
        #[inline]
        pub(super) fn detect() -> Option<Self> {
            // Relaxed: the value is a pure function of the CPU, so threads that race to detect it
            // store the same answer, and nothing else is published through it.
            match SSE42.load(Ordering::Relaxed) {
                PRESENT => Some(Self(())),
                ABSENT => None,
                _ => Self::ask_cpuid(),
            }
        }

        #[cfg(target_arch = "x86_64")]
        #[cold]
        fn ask_cpuid() -> Option<Self> {
            const CPUID_FEATURES: u32 = 1;
            const ECX_SSE42: u32 = 1 << 20;
            // CPUID exists on every x86_64 CPU.
            let present = core::arch::x86_64::__cpuid(CPUID_FEATURES).ecx & ECX_SSE42 != 0;
            // Relaxed: see `detect`.
            SSE42.store(if present { PRESENT } else { ABSENT }, Ordering::Relaxed);
            present.then_some(Self(()))
        }

        #[cfg(not(target_arch = "x86_64"))]
        #[inline]
        pub(super) fn detect() -> Option<Self> {
            None
        }

        /// Continues the raw (not yet inverted) CRC state `crc` over `bytes`: three interleaved
        /// streams over rounds of three stripes, merged per round, then one stream for the rest.
        #[cfg(target_arch = "x86_64")]
        #[inline]
        pub(super) fn update(self, crc: u32, bytes: &[u8]) -> u32 {
            let mut state = crc;
            let mut rounds = bytes.chunks_exact(3 * super::STRIPE);
            for round in &mut rounds {
                let (a, rest) = round.split_at(super::STRIPE);
                let (b, c) = rest.split_at(super::STRIPE);
                let (mut sa, mut sb, mut sc) = (u64::from(state), 0, 0);
                for ((wa, wb), wc) in a.chunks_exact(8).zip(b.chunks_exact(8)).zip(c.chunks_exact(8)) {
                    sa = self.word(sa, wa);
                    sb = self.word(sb, wb);
                    sc = self.word(sc, wc);
                }
                // The 64-bit form zero-extends its 32-bit result.
                state = super::merge_stripes(sa as u32, sb as u32, sc as u32);
            }
            let rest = rounds.remainder();
            let mut state = u64::from(state);
            let mut words = rest.chunks_exact(8);
            for word in &mut words {
                state = self.word(state, word);
            }
            let mut state = state as u32;
            for &byte in words.remainder() {
                // SAFETY: as above, for the byte form `crc32 r32, r8`.
                unsafe {
                    core::arch::asm!(
                        "crc32 {state:e}, {byte}",
                        state = inout(reg) state,
                        byte = in(reg_byte) byte,
                        options(pure, nomem, nostack, preserves_flags),
                    );
                }
            }
            state
        }

        /// The raw state `crc` over the eight bytes of `data`, little-endian.
        #[cfg(target_arch = "x86_64")]
        #[inline(always)]
        pub(super) fn word_value(self, crc: u32, data: u64) -> u32 {
            // The 64-bit form zero-extends its 32-bit result.
            self.step(u64::from(crc), data) as u32
        }

        /// One `crc32` step over the eight bytes of `word` (little-endian).
        #[cfg(target_arch = "x86_64")]
        #[inline(always)]
        fn word(self, state: u64, word: &[u8]) -> u64 {
            let mut le = [0u8; 8];
            le.copy_from_slice(word);
            self.step(state, u64::from_le_bytes(le))
        }

        /// One `crc32 r64, r64`.
        #[cfg(target_arch = "x86_64")]
        #[inline(always)]
        fn step(self, mut state: u64, data: u64) -> u64 {
            // SAFETY: `self` exists only if CPUID reported SSE4.2, so the instruction exists.
            // `crc32 r64, r64` reads and writes only the two registers named: no memory, no stack,
            // and it leaves the flags alone.
            unsafe {
                core::arch::asm!(
                    "crc32 {state}, {data}",
                    state = inout(reg) state,
                    data = in(reg) data,
                    options(pure, nomem, nostack, preserves_flags),
                );
            }
            state
        }

        #[cfg(not(target_arch = "x86_64"))]
        pub(super) fn update(self, _crc: u32, _bytes: &[u8]) -> u32 {
            match self.0 {}
        }

        #[cfg(not(target_arch = "x86_64"))]
        pub(super) fn word_value(self, _crc: u32, _data: u64) -> u32 {
            match self.0 {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Test data: xorshift64*, enough to vary lengths, alignments and contents.
    struct Rng(u64);

    impl Rng {
        fn new(seed: u64) -> Self {
            Self(seed | 1)
        }

        fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next_u64() % bound
        }
    }

    /// One bit at a time, straight from the definition; the reference for the table version.
    fn bitwise(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY_REFLECTED
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn known_vectors() {
        // The standard check value of the CRC-32/ISCSI catalogue entry.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        // RFC 3720 appendix B.4 test patterns.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
        let descending: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&descending), 0x113f_db5c);
        assert_eq!(crc32c(&[]), 0);
    }

    #[test]
    fn detection_is_cached_and_consistent() {
        let first = selected();
        assert_eq!(selected(), first);
        assert!(available(first));
        assert!(available(Crc32cImpl::Table));
        // On an x86_64 host with SSE4.2 (every CPU since 2008), the instruction is chosen.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(first == Crc32cImpl::Sse42, std::is_x86_feature_detected!("sse4.2"));
    }

    #[test]
    fn words_fed_one_by_one_give_the_crc_of_their_bytes_with_either_implementation() {
        let mut rng = Rng::new(0x77);
        for allowed in [true, false] {
            // Both implementations give the same values, so tests running beside this one are
            // not disturbed by the switch.
            allow_hardware(allowed);
            for words in [0usize, 1, 5, 64, 509] {
                let data: Vec<u64> = (0..words).map(|_| rng.next_u64()).collect();
                let bytes: Vec<u8> = data.iter().flat_map(|w| w.to_le_bytes()).collect();
                let tail = [0xa5u8, 0x5a, 0x01];
                let mut head = Crc32c::new();
                head.update(&tail);
                let mut feed = head.words();
                for w in &data {
                    feed.feed(*w);
                }
                let mut crc = feed.into_crc();
                crc.update(&tail);
                let mut all = tail.to_vec();
                all.extend_from_slice(&bytes);
                all.extend_from_slice(&tail);
                assert_eq!(
                    crc.finish(),
                    crc32c_with(Crc32cImpl::Table, &all),
                    "{words} words, hardware {allowed}"
                );
            }
        }
        allow_hardware(HARDWARE_BY_DEFAULT);
    }

    #[test]
    fn hardware_and_table_agree_on_random_inputs_lengths_alignments_and_splits() {
        if !available(Crc32cImpl::Sse42) {
            std::eprintln!("no SSE4.2 on this CPU: only the table is tested");
        }
        let mut rng = Rng::new(0x5eed);
        let backing: Vec<u8> = (0..9000).map(|_| rng.next_u64() as u8).collect();
        for round in 0..2000 {
            let len = match round % 4 {
                0 => rng.below(16) as usize,
                1 => rng.below(300) as usize,
                _ => rng.below(8192) as usize,
            };
            // Every start alignment modulo 8, and beyond.
            let start = rng.below(64) as usize;
            let data = &backing[start..start + len];
            let table = crc32c_with(Crc32cImpl::Table, data);
            let hardware = crc32c_with(Crc32cImpl::Sse42, data);
            assert_eq!(hardware, table, "len {len} start {start}");
            if len <= 64 {
                assert_eq!(table, bitwise(data), "len {len} start {start}");
            }
            // Incremental updates that mix the two give the same result.
            let split = if len == 0 {
                0
            } else {
                rng.below(len as u64 + 1) as usize
            };
            let mut mixed = Crc32c::new();
            mixed.update_with(Crc32cImpl::Sse42, &data[..split]);
            mixed.update_with(Crc32cImpl::Table, &data[split..]);
            assert_eq!(mixed.finish(), table, "len {len} split {split}");
            assert_eq!(crc32c(data), table);
        }
    }

    #[test]
    fn merging_stripes_equals_one_pass() {
        // The merge is pure table arithmetic, so it is checked with the table CRC on any CPU.
        let mut rng = Rng::new(3);
        let data: Vec<u8> = (0..3 * STRIPE).map(|_| rng.next_u64() as u8).collect();
        let raw = |state: u32, bytes: &[u8]| {
            let mut crc = Crc32c { state };
            crc.update_table(bytes);
            crc.state
        };
        for start in [!0u32, 0, 0x1234_5678] {
            let a = raw(start, &data[..STRIPE]);
            let b = raw(0, &data[STRIPE..2 * STRIPE]);
            let c = raw(0, &data[2 * STRIPE..]);
            assert_eq!(merge_stripes(a, b, c), raw(start, &data));
        }
        assert_eq!(feed_zeros(0, 1000), 0);
    }

    #[test]
    fn sliced_matches_bitwise_for_any_split() {
        let mut rng = Rng::new(42);
        for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 63, 512, 4096 + 3] {
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let expected = bitwise(&data);
            assert_eq!(crc32c(&data), expected, "len {len}");
            let split = if len == 0 { 0 } else { rng.below(len as u64) as usize };
            let mut crc = Crc32c::new();
            crc.update(&data[..split]);
            crc.update(&data[split..]);
            assert_eq!(crc.finish(), expected, "len {len} split {split}");
        }
    }
}
