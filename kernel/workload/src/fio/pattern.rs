//! fio's `verify_pattern` grammar: items written one after another with nothing between them,
//! each adding bytes to the pattern:
//!
//! * `0x` / `0X` and hex digits: those bytes in the order written (`0xdeadbeef` is `de ad be
//!   ef`); an odd count makes the first digit a byte of its own (`0x123` is `01 23`); a `0x`
//!   after the digits starts the next item (`0xff0x14` is `ff 14`).
//! * a decimal integer in the range of a 32-bit `int`, optionally signed: its two's-complement
//!   bytes, least significant first, up to the last non-zero one (`66` is `42`, `-1024` is
//!   `00 fc ff ff`, `0` is one `00`).
//! * `"text"`: the bytes between the quotes (no escapes).
//!
//! fio's `'file'` (a pattern read from a file) and `%o` (the block's offset pasted in) are
//! refused: baremq has no files, and the offset stamp is not implemented. A pattern has at most
//! [`MAX_PATTERN`] bytes (fio's `MAX_PATTERN_SIZE`). The pattern is repeated over each block
//! from the block's first byte, as fio does with `verify=pattern`.

use alloc::string::String;
use alloc::vec::Vec;

/// Most bytes in one pattern (fio's `MAX_PATTERN_SIZE`).
pub const MAX_PATTERN: usize = 512;

/// What `verify_pattern` takes, for error messages.
pub const PATTERN_FORM: &str = "a pattern of 0x hex bytes, decimal integers and \"quoted text\" written one after another \
     (e.g. 0xdeadbeef, 66, \"abcd\"0xff), at most 512 bytes";

/// The bytes of a `verify_pattern` value, or why it is not one.
pub fn parse(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(String::from("an empty pattern"));
    }
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        at = match bytes[at] {
            b'"' => {
                let end = text[at + 1..]
                    .find('"')
                    .ok_or_else(|| String::from("a string without its closing quote"))?;
                out.extend_from_slice(&bytes[at + 1..at + 1 + end]);
                at + end + 2
            }
            b'\'' => return Err(String::from("'FILE' patterns read a file; baremq has no files")),
            b'%' => {
                return Err(String::from(
                    "%o (the block offset pasted into the pattern) is not implemented",
                ));
            }
            b'0' if bytes.get(at + 1).is_some_and(|b| *b == b'x' || *b == b'X')
                && bytes.get(at + 2).is_some_and(u8::is_ascii_hexdigit) =>
            {
                hex(bytes, at + 2, &mut out)
            }
            _ => decimal(text, at, &mut out)?,
        };
        if out.len() > MAX_PATTERN {
            return Err(alloc::format!(
                "a pattern of {} bytes, above the {MAX_PATTERN} allowed",
                out.len()
            ));
        }
    }
    if out.is_empty() {
        // Only `""`: fio asserts a filled item.
        return Err(String::from("an empty pattern"));
    }
    Ok(out)
}

/// Hex digits from `start` (just after `0x`); returns where the item ends.
fn hex(bytes: &[u8], start: usize, out: &mut Vec<u8>) -> usize {
    let mut end = start;
    while end < bytes.len() && bytes[end].is_ascii_hexdigit() {
        end += 1;
    }
    // `0xff0x14`: the last `0` belongs to the next item's `0x`.
    if end < bytes.len() && (bytes[end] == b'x' || bytes[end] == b'X') && bytes[end - 1] == b'0' && end - 1 > start {
        end -= 1;
    }
    let digit = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
    let mut at = start;
    if (end - start) % 2 == 1 {
        out.push(digit(bytes[at]));
        at += 1;
    }
    while at < end {
        out.push(digit(bytes[at]) << 4 | digit(bytes[at + 1]));
        at += 2;
    }
    end
}

/// A decimal integer from `start` (as C's `strtol`, stopping before a `0x`); returns where it ends.
fn decimal(text: &str, start: usize, out: &mut Vec<u8>) -> Result<usize, String> {
    let rest = &text[start..];
    let stop = rest
        .to_ascii_lowercase()
        .find("0x")
        .filter(|i| *i > 0)
        .unwrap_or(rest.len());
    let bytes = rest.as_bytes();
    let mut end = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    let digits_start = end;
    while end < stop && bytes[end].is_ascii_digit() {
        end += 1;
    }
    if end == digits_start {
        return Err(alloc::format!(
            "{rest:?} is not a hex number, decimal number or \"string\""
        ));
    }
    let value: i64 = rest[..end]
        .parse()
        .ok()
        .filter(|v| (i64::from(i32::MIN)..=i64::from(i32::MAX)).contains(v))
        .ok_or_else(|| alloc::format!("{} is outside a 32-bit int", &rest[..end]))?;
    // Two's complement in 32 bits, least significant byte first, up to the last non-zero byte.
    let mut word = value as i32 as u32;
    if word == 0 {
        out.push(0);
    }
    while word != 0 {
        out.push((word & 0xff) as u8);
        word >>= 8;
    }
    Ok(start + end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn fio_documented_examples() {
        // The examples of fio's lib/pattern.c and its HOWTO.
        assert_eq!(parse("\"abcd\"").unwrap(), b"abcd");
        assert_eq!(parse("-1024").unwrap(), [0x00, 0xfc, 0xff, 0xff]);
        assert_eq!(parse("66").unwrap(), [0x42]);
        assert_eq!(parse("0xFF0X1").unwrap(), [0xff, 0x01]);
        assert_eq!(parse("\"123\"0xFFeeCC").unwrap(), [0x31, 0x32, 0x33, 0xff, 0xee, 0xcc]);
        assert_eq!(parse("0xdeadbeef").unwrap(), [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(parse("0xff0x14").unwrap(), [0xff, 0x14]);
        assert_eq!(parse("0").unwrap(), [0x00]);
        assert_eq!(parse("0x123").unwrap(), [0x01, 0x23]);
        assert_eq!(parse("256").unwrap(), [0x00, 0x01]);
        assert_eq!(parse("-100xab\"1\"").unwrap(), [0xf6, 0xff, 0xff, 0xff, 0xab, 0x31]);
        assert_eq!(parse(&alloc::format!("0x{}", "fe".repeat(21))).unwrap(), vec![0xfe; 21]);
    }

    #[test]
    fn refusals_say_why() {
        for (text, words) in [
            ("'/tmp/pattern'", "file"),
            ("%o", "%o"),
            ("0xdead%o", "%o"),
            ("\"abc", "closing quote"),
            ("abc", "not a hex number"),
            ("4294967296", "32-bit"),
            ("", "empty"),
            ("\"\"", "empty"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(words), "{text:?}: {error}");
        }
        let long = alloc::format!("0x{}", "ab".repeat(MAX_PATTERN + 1));
        assert!(parse(&long).unwrap_err().contains("512"));
        assert_eq!(
            parse(&alloc::format!("0x{}", "ab".repeat(MAX_PATTERN))).unwrap().len(),
            MAX_PATTERN
        );
    }
}
