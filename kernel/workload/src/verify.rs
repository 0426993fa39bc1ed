//! The on-disk verify format: a header stamped into every written block, and the check of a read block.
//!
//! # Block layout (little-endian)
//!
//! | bytes  | field        | meaning                                                        |
//! |--------|--------------|----------------------------------------------------------------|
//! | 0..8   | magic        | [`VERIFY_MAGIC`] (ASCII `BAREMQv1`)                            |
//! | 8..16  | lba          | first sector of the block                                      |
//! | 16..24 | seed         | the job seed                                                   |
//! | 24..28 | generation   | how many times this job has written the block (1 = first)      |
//! | 28..32 | block_size   | the block size in bytes                                        |
//! | 32..36 | kind         | 1 = crc32c, 2 = pattern, 3 = fio's `verify_pattern`            |
//! | 36..40 | crc32c       | CRC32C of the whole block with this field as zero (crc32c kind), 0 for pattern |
//! | 40..48 | reserved     | zero                                                           |
//! | 48..   | payload      | pseudo-random words derived from (seed, lba, generation)       |
//!
//! Both kinds carry the same header and payload. `crc32c` checks the header fields and the checksum
//! (corruption anywhere in the block is caught by the CRC); `pattern` checks the header fields and then
//! compares the payload word by word, so a mismatch names the exact byte offset.
//!
//! Kind 3 (fio's `verify_pattern` without a `verify` option, which fio 3.33 checks as a header
//! plus the pattern) has the same header with CRC 0, and the job's pattern as the payload: the
//! pattern is laid from the block's first byte and the header written over its first 48 bytes,
//! as fio lays its own (40-byte) header over the pattern. fio's `verify=pattern` has no header at
//! all ([`fill_fio_pattern`]).
//!
//! Because the payload is a pure function of (seed, lba, generation), a later boot can check a disk
//! without any state from the boot that wrote it, as long as it knows the seed and the generation.

use core::fmt;

use crate::crc32c::Crc32c;
use crate::job::{ExpectedGeneration, VerifyMode};
use crate::rng::mix64;

/// Header magic: ASCII `BAREMQv1` read as a little-endian u64.
pub const VERIFY_MAGIC: u64 = u64::from_le_bytes(*b"BAREMQv1");
/// Header length in bytes; the smallest block that can be verified.
pub const HEADER_LEN: usize = 48;
/// The largest generation number (the engine keeps two flag bits beside it in a u32).
pub const MAX_GENERATION: u32 = (1 << 30) - 1;

const MAGIC_AT: usize = 0;
const LBA_AT: usize = 8;
const SEED_AT: usize = 16;
const GENERATION_AT: usize = 24;
const BLOCK_SIZE_AT: usize = 28;
const KIND_AT: usize = 32;
const CRC_AT: usize = 36;
const RESERVED_AT: usize = 40;

const KIND_CRC32C: u32 = 1;
const KIND_PATTERN: u32 = 2;
const KIND_FIO_PATTERN: u32 = 3;

/// The identity of one written block version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockStamp {
    /// First sector of the block.
    pub lba: u64,
    /// Job seed.
    pub seed: u64,
    /// Write count of this block within the job (1 = first write).
    pub generation: u32,
}

/// Which header field or data failed to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchField {
    /// The magic number (the block was never stamped, or is badly corrupted).
    Magic,
    /// The verify kind (written with another `verify=` mode).
    Kind,
    /// The LBA (a misdirected read or write).
    Lba,
    /// The job seed (written by another job).
    Seed,
    /// The block size.
    BlockSize,
    /// The generation (a lost or stale write).
    Generation,
    /// The reserved header bytes.
    Reserved,
    /// The CRC32C over the block: expected is the CRC of the data read, found is the stored CRC.
    Checksum,
    /// A payload word at this byte offset within the block.
    Data {
        /// Byte offset of the 8-byte word (or shorter tail) within the block.
        byte_offset: u32,
    },
}

impl fmt::Display for MismatchField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Magic => f.write_str("magic"),
            Self::Kind => f.write_str("verify kind"),
            Self::Lba => f.write_str("lba"),
            Self::Seed => f.write_str("seed"),
            Self::BlockSize => f.write_str("block size"),
            Self::Generation => f.write_str("generation"),
            Self::Reserved => f.write_str("reserved"),
            Self::Checksum => f.write_str("crc32c"),
            Self::Data { byte_offset } => write!(f, "data at byte {byte_offset}"),
        }
    }
}

impl MismatchField {
    /// A short machine-readable name (used in the JSON report).
    pub fn key(&self) -> &'static str {
        match self {
            Self::Magic => "magic",
            Self::Kind => "kind",
            Self::Lba => "lba",
            Self::Seed => "seed",
            Self::BlockSize => "block_size",
            Self::Generation => "generation",
            Self::Reserved => "reserved",
            Self::Checksum => "crc32c",
            Self::Data { .. } => "data",
        }
    }
}

/// The first difference found in one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyMismatch {
    /// The block's first sector, as requested (not as found).
    pub lba: u64,
    /// What differed.
    pub field: MismatchField,
    /// The value the block should hold.
    pub expected: u64,
    /// The value read.
    pub found: u64,
}

impl fmt::Display for VerifyMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            MismatchField::Lba | MismatchField::Generation | MismatchField::BlockSize => write!(
                f,
                "verify mismatch at LBA {}: {} expected {}, found {}",
                self.lba, self.field, self.expected, self.found
            ),
            _ => write!(
                f,
                "verify mismatch at LBA {}: {} expected {:#x}, found {:#x}",
                self.lba, self.field, self.expected, self.found
            ),
        }
    }
}

fn kind_code(mode: VerifyMode) -> u32 {
    match mode {
        VerifyMode::Pattern | VerifyMode::FioPattern => KIND_PATTERN,
        VerifyMode::FioPatternHeader => KIND_FIO_PATTERN,
        // `None` never reaches the format; stamping it as crc32c keeps the function total.
        VerifyMode::Crc32c | VerifyMode::None => KIND_CRC32C,
    }
}

fn read_u64(block: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&block[at..at + 8]);
    u64::from_le_bytes(bytes)
}

fn read_u32(block: &[u8], at: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&block[at..at + 4]);
    u32::from_le_bytes(bytes)
}

/// The payload word stream of one block version: a 64-bit xorshift* sequence from a mixed seed.
struct PayloadWords {
    state: u64,
}

impl PayloadWords {
    fn new(stamp: &BlockStamp) -> Self {
        let mixed = mix64(stamp.seed ^ mix64(stamp.lba ^ (u64::from(stamp.generation) << 40)));
        // xorshift needs a non-zero state.
        Self { state: mixed | 1 }
    }

    #[inline]
    fn next_word(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Stamps `block` (its whole length is the block size) for `stamp`. `block` must be at least
/// [`HEADER_LEN`] bytes and at most `u32::MAX`; the planner guarantees both (sector size >= 512).
pub fn fill_block(mode: VerifyMode, stamp: &BlockStamp, block: &mut [u8]) {
    write_header(mode, stamp, block);
    let mut words = PayloadWords::new(stamp);
    // The CRC field is still zero here. Each payload word is fed to the CRC while it is in a
    // register: one pass over the block, not a second one to checksum it.
    let mut crc = (mode == VerifyMode::Crc32c).then(|| {
        let mut header = Crc32c::new();
        header.update(&block[..HEADER_LEN]);
        header.words()
    });
    let mut chunks = block[HEADER_LEN..].chunks_exact_mut(8);
    for chunk in &mut chunks {
        let word = words.next_word();
        chunk.copy_from_slice(&word.to_le_bytes());
        if let Some(crc) = &mut crc {
            crc.feed(word);
        }
    }
    let tail = chunks.into_remainder();
    let last = words.next_word().to_le_bytes();
    let tail_len = tail.len();
    tail.copy_from_slice(&last[..tail_len]);
    if let Some(crc) = crc {
        let mut crc = crc.into_crc();
        crc.update(&last[..tail_len]);
        block[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.finish().to_le_bytes());
    }
}

/// The header of `stamp` in the first [`HEADER_LEN`] bytes of `block`, CRC field zero.
fn write_header(mode: VerifyMode, stamp: &BlockStamp, block: &mut [u8]) {
    debug_assert!(block.len() >= HEADER_LEN);
    let block_size = u32::try_from(block.len()).unwrap_or(u32::MAX);
    block[MAGIC_AT..MAGIC_AT + 8].copy_from_slice(&VERIFY_MAGIC.to_le_bytes());
    block[LBA_AT..LBA_AT + 8].copy_from_slice(&stamp.lba.to_le_bytes());
    block[SEED_AT..SEED_AT + 8].copy_from_slice(&stamp.seed.to_le_bytes());
    block[GENERATION_AT..GENERATION_AT + 4].copy_from_slice(&stamp.generation.to_le_bytes());
    block[BLOCK_SIZE_AT..BLOCK_SIZE_AT + 4].copy_from_slice(&block_size.to_le_bytes());
    block[KIND_AT..KIND_AT + 4].copy_from_slice(&kind_code(mode).to_le_bytes());
    block[CRC_AT..HEADER_LEN].fill(0);
}

/// CRC32C of the block with the CRC field read as zero. The header goes through a copy with that
/// field zeroed, so the CRC runs over whole 8-byte words (three calls split at the field would
/// fall back to byte steps around it).
fn block_crc(block: &[u8]) -> u32 {
    let mut header = [0u8; HEADER_LEN];
    header.copy_from_slice(&block[..HEADER_LEN]);
    header[CRC_AT..CRC_AT + 4].fill(0);
    let mut crc = Crc32c::new();
    crc.update(&header);
    crc.update(&block[HEADER_LEN..]);
    crc.finish()
}

/// The header checks of [`check_block`] (every kind has them): returns the generation found.
fn check_header(
    mode: VerifyMode,
    lba: u64,
    seed: u64,
    expected: ExpectedGeneration,
    block: &[u8],
) -> Result<u32, VerifyMismatch> {
    let mismatch = |field, expected: u64, found: u64| VerifyMismatch {
        lba,
        field,
        expected,
        found,
    };
    if block.len() < HEADER_LEN {
        return Err(mismatch(
            MismatchField::BlockSize,
            HEADER_LEN as u64,
            block.len() as u64,
        ));
    }
    let magic = read_u64(block, MAGIC_AT);
    if magic != VERIFY_MAGIC {
        return Err(mismatch(MismatchField::Magic, VERIFY_MAGIC, magic));
    }
    let kind = read_u32(block, KIND_AT);
    if kind != kind_code(mode) {
        return Err(mismatch(
            MismatchField::Kind,
            u64::from(kind_code(mode)),
            u64::from(kind),
        ));
    }
    let found_lba = read_u64(block, LBA_AT);
    if found_lba != lba {
        return Err(mismatch(MismatchField::Lba, lba, found_lba));
    }
    let found_seed = read_u64(block, SEED_AT);
    if found_seed != seed {
        return Err(mismatch(MismatchField::Seed, seed, found_seed));
    }
    let found_size = read_u32(block, BLOCK_SIZE_AT);
    if u64::from(found_size) != block.len() as u64 {
        return Err(mismatch(
            MismatchField::BlockSize,
            block.len() as u64,
            u64::from(found_size),
        ));
    }
    let generation = read_u32(block, GENERATION_AT);
    match expected {
        ExpectedGeneration::Exact(want) if generation != want => {
            return Err(mismatch(
                MismatchField::Generation,
                u64::from(want),
                u64::from(generation),
            ));
        }
        ExpectedGeneration::Any if generation == 0 || generation > MAX_GENERATION => {
            // Report the nearest valid bound as the expectation.
            let bound = if generation == 0 { 1 } else { MAX_GENERATION };
            return Err(mismatch(
                MismatchField::Generation,
                u64::from(bound),
                u64::from(generation),
            ));
        }
        _ => {}
    }
    let reserved = read_u64(block, RESERVED_AT);
    if reserved != 0 {
        return Err(mismatch(MismatchField::Reserved, 0, reserved));
    }
    Ok(generation)
}

/// Checks a block read back from `lba`. Returns the generation found on success, or the first field
/// that differs. `seed` is the job seed and `expected` the generation the block should carry.
pub fn check_block(
    mode: VerifyMode,
    lba: u64,
    seed: u64,
    expected: ExpectedGeneration,
    block: &[u8],
) -> Result<u32, VerifyMismatch> {
    let generation = check_header(mode, lba, seed, expected, block)?;
    let mismatch = |field, expected: u64, found: u64| VerifyMismatch {
        lba,
        field,
        expected,
        found,
    };
    match mode {
        VerifyMode::Crc32c | VerifyMode::None => {
            let stored = read_u32(block, CRC_AT);
            let computed = block_crc(block);
            if stored != computed {
                return Err(mismatch(
                    MismatchField::Checksum,
                    u64::from(computed),
                    u64::from(stored),
                ));
            }
        }
        // Their payload is the job's pattern: `check_stamped` checks it.
        VerifyMode::FioPatternHeader => {}
        VerifyMode::Pattern | VerifyMode::FioPattern => {
            let stored_crc = read_u32(block, CRC_AT);
            if stored_crc != 0 {
                return Err(mismatch(MismatchField::Reserved, 0, u64::from(stored_crc)));
            }
            let stamp = BlockStamp { lba, seed, generation };
            let mut words = PayloadWords::new(&stamp);
            let payload = &block[HEADER_LEN..];
            let mut chunks = payload.chunks_exact(8);
            // Whole words first, compared as integers; only a difference needs the details.
            for (index, chunk) in (&mut chunks).enumerate() {
                let want = words.next_word();
                let got = read_u64(chunk, 0);
                if got != want {
                    // Block sizes are at most 16 MiB, so the offset fits in u32.
                    let byte_offset = (HEADER_LEN + index * 8) as u32;
                    return Err(mismatch(MismatchField::Data { byte_offset }, want, got));
                }
            }
            let tail = chunks.remainder();
            if !tail.is_empty() {
                let want = words.next_word().to_le_bytes();
                if tail != &want[..tail.len()] {
                    let mut expected = [0u8; 8];
                    expected[..tail.len()].copy_from_slice(&want[..tail.len()]);
                    let mut found = [0u8; 8];
                    found[..tail.len()].copy_from_slice(tail);
                    let byte_offset = (block.len() - tail.len()) as u32;
                    return Err(mismatch(
                        MismatchField::Data { byte_offset },
                        u64::from_le_bytes(expected),
                        u64::from_le_bytes(found),
                    ));
                }
            }
        }
    }
    Ok(generation)
}

/// Writes the data of a block for `mode`: fio's pattern repeated over the block for
/// [`VerifyMode::FioPattern`], else [`fill_block`]'s header and payload.
pub fn stamp_block(mode: VerifyMode, pattern: &[u8], stamp: &BlockStamp, block: &mut [u8]) {
    match mode {
        VerifyMode::FioPattern => fill_fio_pattern(pattern, block),
        VerifyMode::FioPatternHeader => {
            fill_fio_pattern(pattern, block);
            write_header(mode, stamp, block);
        }
        _ => fill_block(mode, stamp, block),
    }
}

/// Checks a block read back for `mode`: [`check_fio_pattern`] for [`VerifyMode::FioPattern`]
/// (which returns the expected generation, or 1: a fixed pattern carries none), else
/// [`check_block`].
pub fn check_stamped(
    mode: VerifyMode,
    pattern: &[u8],
    lba: u64,
    seed: u64,
    expected: ExpectedGeneration,
    block: &[u8],
) -> Result<u32, VerifyMismatch> {
    match mode {
        VerifyMode::FioPattern => {
            check_fio_pattern(pattern, lba, block, 0)?;
            Ok(match expected {
                ExpectedGeneration::Exact(generation) => generation,
                ExpectedGeneration::Any => 1,
            })
        }
        VerifyMode::FioPatternHeader => {
            let generation = check_header(mode, lba, seed, expected, block)?;
            let crc = read_u32(block, CRC_AT);
            if crc != 0 {
                return Err(VerifyMismatch {
                    lba,
                    field: MismatchField::Reserved,
                    expected: 0,
                    found: u64::from(crc),
                });
            }
            check_fio_pattern(pattern, lba, block, HEADER_LEN)?;
            Ok(generation)
        }
        _ => check_block(mode, lba, seed, expected, block),
    }
}

/// fio's `verify=pattern`: `pattern` repeated over the whole block from its first byte (an empty
/// pattern leaves the block as it is; the front-end never gives one).
pub fn fill_fio_pattern(pattern: &[u8], block: &mut [u8]) {
    if pattern.is_empty() {
        return;
    }
    let first = pattern.len().min(block.len());
    block[..first].copy_from_slice(&pattern[..first]);
    // Double the filled part until the block is full: log2(block / pattern) copies.
    let mut filled = first;
    while filled < block.len() {
        let take = filled.min(block.len() - filled);
        block.copy_within(..take, filled);
        filled += take;
    }
}

/// Checks that `block` (read from `lba`) from byte `from` on is `pattern` repeated from the
/// block's first byte (byte `i` is `pattern[i % len]`). The first difference is reported as
/// [`MismatchField::Data`] at the start of its 8-byte word, with the expected and found bytes of
/// that word (little-endian; bytes outside `from..` and a shorter tail are zero).
pub fn check_fio_pattern(pattern: &[u8], lba: u64, block: &[u8], from: usize) -> Result<(), VerifyMismatch> {
    if pattern.is_empty() || from >= block.len() {
        return Ok(());
    }
    // Whole repetitions from the first one at or after `from`; the bytes before it one by one.
    let first_whole = from.div_ceil(pattern.len()) * pattern.len();
    let head_differs = (from..first_whole.min(block.len())).any(|i| block[i] != pattern[i % pattern.len()]);
    let differs = block[first_whole.min(block.len())..]
        .chunks(pattern.len())
        .position(|chunk| chunk != &pattern[..chunk.len()]);
    let start = match (head_differs, differs) {
        (true, _) => from,
        (false, Some(chunk_index)) => first_whole + chunk_index * pattern.len(),
        (false, None) => return Ok(()),
    };
    let byte = (start..block.len())
        .find(|&i| block[i] != pattern[i % pattern.len()])
        .unwrap_or(start);
    let word = byte / 8 * 8;
    let end = (word + 8).min(block.len());
    let (mut expected, mut found) = ([0u8; 8], [0u8; 8]);
    for (k, i) in (word..end).enumerate().filter(|(_, i)| *i >= from) {
        expected[k] = pattern[i % pattern.len()];
        found[k] = block[i];
    }
    Err(VerifyMismatch {
        lba,
        // Block sizes are at most 16 MiB, so the offset fits in u32.
        field: MismatchField::Data {
            byte_offset: word as u32,
        },
        expected: u64::from_le_bytes(expected),
        found: u64::from_le_bytes(found),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    const SEED: u64 = 0xfeed;

    fn stamped(mode: VerifyMode, lba: u64, generation: u32, len: usize) -> alloc::vec::Vec<u8> {
        let mut block = vec![0u8; len];
        fill_block(
            mode,
            &BlockStamp {
                lba,
                seed: SEED,
                generation,
            },
            &mut block,
        );
        block
    }

    #[test]
    fn stamped_blocks_check_clean_in_both_modes() {
        for mode in [VerifyMode::Crc32c, VerifyMode::Pattern] {
            for len in [512, 4096, 520] {
                let block = stamped(mode, 77, 3, len);
                assert_eq!(check_block(mode, 77, SEED, ExpectedGeneration::Exact(3), &block), Ok(3));
                assert_eq!(check_block(mode, 77, SEED, ExpectedGeneration::Any, &block), Ok(3));
            }
        }
    }

    #[test]
    fn payload_depends_on_lba_seed_and_generation() {
        let base = stamped(VerifyMode::Pattern, 8, 1, 4096);
        assert_ne!(
            base[HEADER_LEN..],
            stamped(VerifyMode::Pattern, 16, 1, 4096)[HEADER_LEN..]
        );
        assert_ne!(
            base[HEADER_LEN..],
            stamped(VerifyMode::Pattern, 8, 2, 4096)[HEADER_LEN..]
        );
        let mut other_seed = vec![0u8; 4096];
        fill_block(
            VerifyMode::Pattern,
            &BlockStamp {
                lba: 8,
                seed: SEED + 1,
                generation: 1,
            },
            &mut other_seed,
        );
        assert_ne!(base[HEADER_LEN..], other_seed[HEADER_LEN..]);
    }

    #[test]
    fn header_fields_are_reported_by_name() {
        let mode = VerifyMode::Crc32c;
        let block = stamped(mode, 100, 2, 512);
        let exact2 = ExpectedGeneration::Exact(2);
        let err = check_block(mode, 108, SEED, exact2, &block).unwrap_err();
        assert_eq!(
            err,
            VerifyMismatch {
                lba: 108,
                field: MismatchField::Lba,
                expected: 108,
                found: 100
            }
        );
        assert_eq!(
            err.to_string(),
            "verify mismatch at LBA 108: lba expected 108, found 100"
        );
        let err = check_block(mode, 100, SEED ^ 1, exact2, &block).unwrap_err();
        assert_eq!(
            (err.field, err.expected, err.found),
            (MismatchField::Seed, SEED ^ 1, SEED)
        );
        let err = check_block(mode, 100, SEED, ExpectedGeneration::Exact(3), &block).unwrap_err();
        assert_eq!((err.field, err.expected, err.found), (MismatchField::Generation, 3, 2));
        let err = check_block(VerifyMode::Pattern, 100, SEED, exact2, &block).unwrap_err();
        assert_eq!((err.field, err.expected, err.found), (MismatchField::Kind, 2, 1));
        let err = check_block(mode, 100, SEED, exact2, &[0u8; 512]).unwrap_err();
        assert_eq!(
            (err.field, err.expected, err.found),
            (MismatchField::Magic, VERIFY_MAGIC, 0)
        );
        let err = check_block(mode, 100, SEED, exact2, &block[..256]).unwrap_err();
        assert_eq!(
            (err.field, err.expected, err.found),
            (MismatchField::BlockSize, 256, 512)
        );
        let err = check_block(mode, 100, SEED, exact2, &[0u8; 16]).unwrap_err();
        assert_eq!(err.field, MismatchField::BlockSize);
    }

    #[test]
    fn crc_catches_any_single_bit_flip_in_payload() {
        let mode = VerifyMode::Crc32c;
        let block = stamped(mode, 5, 1, 512);
        for byte in (HEADER_LEN..512).step_by(37) {
            for bit in [0, 3, 7] {
                let mut bad = block.clone();
                bad[byte] ^= 1 << bit;
                let err = check_block(mode, 5, SEED, ExpectedGeneration::Exact(1), &bad).unwrap_err();
                assert_eq!(err.field, MismatchField::Checksum, "byte {byte} bit {bit}");
                assert_eq!(err.found, u64::from(read_u32(&block, CRC_AT)));
                assert_ne!(err.expected, err.found);
            }
        }
        // A flipped stored CRC is a checksum mismatch too.
        let mut bad = block.clone();
        bad[CRC_AT] ^= 0x80;
        assert_eq!(
            check_block(mode, 5, SEED, ExpectedGeneration::Any, &bad)
                .unwrap_err()
                .field,
            MismatchField::Checksum
        );
    }

    #[test]
    fn pattern_names_the_corrupted_word() {
        let mode = VerifyMode::Pattern;
        let block = stamped(mode, 9, 4, 4096);
        let mut bad = block.clone();
        bad[1000] ^= 0xff;
        let err = check_block(mode, 9, SEED, ExpectedGeneration::Exact(4), &bad).unwrap_err();
        assert_eq!(err.field, MismatchField::Data { byte_offset: 1000 });
        assert_eq!(err.expected, read_u64(&block, 1000));
        assert_eq!(err.found, read_u64(&bad, 1000));
        assert!(err.to_string().contains("data at byte 1000"), "{err}");
        // Corruption in the reserved header bytes is found too.
        let mut bad = block;
        bad[RESERVED_AT + 2] = 1;
        assert_eq!(
            check_block(mode, 9, SEED, ExpectedGeneration::Any, &bad)
                .unwrap_err()
                .field,
            MismatchField::Reserved
        );
    }

    #[test]
    fn pattern_checks_a_partial_last_word() {
        let mode = VerifyMode::Pattern;
        let block = stamped(mode, 2, 1, 523);
        let mut bad = block.clone();
        bad[521] ^= 1;
        let err = check_block(mode, 2, SEED, ExpectedGeneration::Exact(1), &bad).unwrap_err();
        assert_eq!(err.field, MismatchField::Data { byte_offset: 520 });
        assert_eq!(
            err.expected & 0xff_ffff,
            u64::from(block[520]) | u64::from(block[521]) << 8 | u64::from(block[522]) << 16
        );
        assert_eq!(err.expected ^ err.found, 1 << 8);
    }

    #[test]
    fn any_generation_rejects_zero() {
        let mode = VerifyMode::Crc32c;
        let block = stamped(mode, 1, 0, 512);
        let err = check_block(mode, 1, SEED, ExpectedGeneration::Any, &block).unwrap_err();
        assert_eq!((err.field, err.expected, err.found), (MismatchField::Generation, 1, 0));
    }

    #[test]
    fn fio_pattern_repeats_over_the_block_and_names_the_first_difference() {
        let pattern = [0xde, 0xad, 0xbe];
        let mut block = vec![0u8; 4096];
        stamp_block(
            VerifyMode::FioPattern,
            &pattern,
            &BlockStamp {
                lba: 9,
                seed: SEED,
                generation: 1,
            },
            &mut block,
        );
        assert!(
            block.iter().enumerate().all(|(i, b)| *b == pattern[i % 3]),
            "repeated from byte 0"
        );
        assert_eq!(
            check_stamped(
                VerifyMode::FioPattern,
                &pattern,
                9,
                SEED,
                ExpectedGeneration::Exact(3),
                &block
            ),
            Ok(3)
        );
        // A block larger than the pattern's tail: 4096 is not a multiple of 3.
        assert_eq!(block[4095], pattern[4095 % 3]);
        block[1000] ^= 0x40;
        let mismatch = check_fio_pattern(&pattern, 9, &block, 0).unwrap_err();
        assert_eq!(mismatch.field, MismatchField::Data { byte_offset: 1000 });
        assert_eq!(mismatch.lba, 9);
        assert_eq!(mismatch.expected.to_le_bytes()[0], pattern[1000 % 3]);
        assert_eq!(mismatch.found.to_le_bytes()[0], pattern[1000 % 3] ^ 0x40);
        // A baremq-stamped block is not the pattern; a pattern longer than the block is cut.
        let stamped = stamped(VerifyMode::Crc32c, 9, 1, 512);
        assert!(check_fio_pattern(&pattern, 9, &stamped, 0).is_err());
        let long: alloc::vec::Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        let mut small = vec![0u8; 512];
        fill_fio_pattern(&long, &mut small);
        assert_eq!(small[..], long[..512]);
        assert!(check_fio_pattern(&long, 0, &small, 0).is_ok());
        // A stale tail (the last 3 bytes) is caught too.
        let mut tail = vec![0u8; 512];
        fill_fio_pattern(&pattern, &mut tail);
        tail[511] = !tail[511];
        assert_eq!(
            check_fio_pattern(&pattern, 0, &tail, 0).unwrap_err().field,
            MismatchField::Data { byte_offset: 504 }
        );
    }

    #[test]
    fn fio_pattern_with_header_lays_the_pattern_from_byte_0_under_the_header() {
        let pattern = *b"0123456789abc"; // 13 bytes: the header ends inside a repetition
        let stamp = BlockStamp {
            lba: 24,
            seed: SEED,
            generation: 2,
        };
        let mut block = vec![0u8; 4096];
        stamp_block(VerifyMode::FioPatternHeader, &pattern, &stamp, &mut block);
        assert_eq!(read_u64(&block, MAGIC_AT), VERIFY_MAGIC);
        assert_eq!(read_u32(&block, KIND_AT), KIND_FIO_PATTERN);
        assert!(
            (HEADER_LEN..4096).all(|i| block[i] == pattern[i % 13]),
            "fio's layout after the header"
        );
        let check =
            |block: &[u8], expected| check_stamped(VerifyMode::FioPatternHeader, &pattern, 24, SEED, expected, block);
        assert_eq!(check(&block, ExpectedGeneration::Exact(2)), Ok(2));
        // The header is checked: a block of another LBA or generation fails.
        assert_eq!(
            check(&block, ExpectedGeneration::Exact(3)).unwrap_err().field,
            MismatchField::Generation
        );
        assert_eq!(
            check_stamped(
                VerifyMode::FioPatternHeader,
                &pattern,
                32,
                SEED,
                ExpectedGeneration::Any,
                &block
            )
            .unwrap_err()
            .field,
            MismatchField::Lba
        );
        // So is the pattern: the first byte after the header (inside a repetition) and later ones.
        for at in [HEADER_LEN, 52, 4095] {
            let mut bad = block.clone();
            bad[at] ^= 1;
            let mismatch = check(&bad, ExpectedGeneration::Any).unwrap_err();
            assert_eq!(
                mismatch.field,
                MismatchField::Data {
                    byte_offset: (at / 8 * 8) as u32
                },
                "byte {at}"
            );
        }
        // A plain pattern block (no header) is refused by its magic.
        let mut plain = vec![0u8; 4096];
        fill_fio_pattern(&pattern, &mut plain);
        assert_eq!(
            check(&plain, ExpectedGeneration::Any).unwrap_err().field,
            MismatchField::Magic
        );
    }
}
