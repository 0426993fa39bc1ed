//! The CRC-16 that fio puts on every command header and payload: polynomial 0x8005 processed
//! bit-reflected (0xA001), initial value 0, no final XOR (the parameters also known as
//! CRC-16/ARC).

/// The reflected form of the polynomial x^16 + x^15 + x^2 + 1.
const POLY_REFLECTED: u16 = 0xA001;

/// One table entry per byte value, built at compile time from the polynomial.
const TABLE: [u16; 256] = build_table();

const fn build_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u16;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
}

/// fio's CRC-16 of `bytes`.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc >> 8) ^ TABLE[usize::from((crc ^ u16::from(b)) as u8)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC computed bit by bit from the definition, without the table.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &b in bytes {
            crc ^= u16::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY_REFLECTED
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }

    #[test]
    fn check_value_of_the_standard_string() {
        // The catalogue check value of CRC-16/ARC.
        assert_eq!(crc16(b"123456789"), 0xBB3D);
    }

    #[test]
    fn empty_input_is_zero() {
        assert_eq!(crc16(&[]), 0);
    }

    #[test]
    fn table_entries_match_the_polynomial() {
        // Entries that follow from the definition: one bit set in the low byte.
        assert_eq!(TABLE[0x01], 0xC0C1);
        assert_eq!(TABLE[0x80], 0xA001);
        assert_eq!(TABLE[0xFF], 0x4040);
    }

    #[test]
    fn table_and_bitwise_agree() {
        let data: [u8; 64] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
        for len in 0..data.len() {
            assert_eq!(crc16(&data[..len]), crc16_bitwise(&data[..len]), "length {len}");
        }
    }
}
