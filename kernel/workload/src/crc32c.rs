//! CRC32C (Castagnoli, as in iSCSI and ext4): reflected polynomial 0x82F63B78, initial value and final
//! XOR 0xFFFFFFFF. Table-driven, eight bytes per step ("slicing by 8"), tables built at compile time.

const POLY_REFLECTED: u32 = 0x82f6_3b78;

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

    /// Feeds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut crc = self.state;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let low = u32::from_le_bytes([word[0], word[1], word[2], word[3]]) ^ crc;
            let high = u32::from_le_bytes([word[4], word[5], word[6], word[7]]);
            crc = TABLES[7][(low & 0xff) as usize]
                ^ TABLES[6][((low >> 8) & 0xff) as usize]
                ^ TABLES[5][((low >> 16) & 0xff) as usize]
                ^ TABLES[4][(low >> 24) as usize]
                ^ TABLES[3][(high & 0xff) as usize]
                ^ TABLES[2][((high >> 8) & 0xff) as usize]
                ^ TABLES[1][((high >> 16) & 0xff) as usize]
                ^ TABLES[0][(high >> 24) as usize];
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
}

/// The CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = Crc32c::new();
    crc.update(bytes);
    crc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use alloc::vec::Vec;

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
