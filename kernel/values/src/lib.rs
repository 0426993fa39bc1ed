//! Parsers for the value forms of baremq's command line and job words: sizes, durations, CPU lists,
//! booleans, integers. One leaf crate, so the boot-time command line and the workload's job words
//! read a value the same way.
//!
//! Each parser returns `None` on malformed input; the caller turns that into its own error naming
//! the key and the accepted form, which lives here next to the parser as a constant.

#![no_std]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate alloc;
#[cfg(test)]
extern crate std;

use core::fmt;

/// The form [`parse_size`] accepts, for error messages.
pub const SIZE_FORM: &str = "a byte count with an optional k, m, g or t suffix (powers of 1024), e.g. 4k or 64m";
/// The form [`parse_duration_ns`] accepts, for error messages.
pub const DURATION_FORM: &str =
    "a duration: a number with suffix us, ms, s or m (minutes); a bare number is seconds, e.g. 500ms or 5s";
/// The form [`CpuSet::parse`] accepts, for error messages.
pub const CPU_LIST_FORM: &str = "all, or a CPU list such as 0,2-3 (CPUs 0 to 255)";
/// The form [`parse_bool`] accepts, for error messages.
pub const BOOL_FORM: &str = "one of 1, 0, yes, no, true, false";

/// Parses a size: decimal digits with an optional `k`, `m`, `g` or `t` suffix (case-insensitive, powers
/// of 1024). Returns `None` on a malformed value or on overflow.
pub fn parse_size(text: &str) -> Option<u64> {
    let (digits, shift) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 10),
        b'm' | b'M' => (&text[..text.len() - 1], 20),
        b'g' | b'G' => (&text[..text.len() - 1], 30),
        b't' | b'T' => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    let base = parse_u64(digits)?;
    base.checked_mul(1u64 << shift)
}

/// Parses a duration into nanoseconds: a number with suffix `us`, `ms`, `s` or `m` (minutes); a bare
/// number is seconds, as in fio. Returns `None` on a malformed value or on overflow.
pub fn parse_duration_ns(text: &str) -> Option<u64> {
    let (digits, unit_ns) = if let Some(d) = text.strip_suffix("us") {
        (d, 1_000)
    } else if let Some(d) = text.strip_suffix("ms") {
        (d, 1_000_000)
    } else if let Some(d) = text.strip_suffix('s') {
        (d, 1_000_000_000)
    } else if let Some(d) = text.strip_suffix('m') {
        (d, 60_000_000_000)
    } else {
        (text, 1_000_000_000)
    };
    parse_u64(digits)?.checked_mul(unit_ns)
}

/// Parses an unsigned decimal integer (no sign, no suffix, not empty).
pub fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Parses an unsigned integer written in decimal or as `0x` hexadecimal.
pub fn parse_u64_any_radix(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() => u64::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None => parse_u64(text),
    }
}

/// Parses a boolean: `1`, `0`, `yes`, `no`, `true`, `false` (case-insensitive).
pub fn parse_bool(text: &str) -> Option<bool> {
    const TRUE: [&str; 3] = ["1", "yes", "true"];
    const FALSE: [&str; 3] = ["0", "no", "false"];
    if TRUE.iter().any(|t| t.eq_ignore_ascii_case(text)) {
        Some(true)
    } else if FALSE.iter().any(|t| t.eq_ignore_ascii_case(text)) {
        Some(false)
    } else {
        None
    }
}

/// The largest CPU number a [`CpuSet`] can hold, plus one (the kernel's CPU capacity).
pub const MAX_CPUS: u32 = 1024;

/// A set of CPU numbers below [`MAX_CPUS`], as a fixed bitmap (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuSet {
    words: [u64; (MAX_CPUS / 64) as usize],
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self {
            words: [0; (MAX_CPUS / 64) as usize],
        }
    }

    /// Builds a set from CPU numbers; numbers at or above [`MAX_CPUS`] are ignored.
    pub fn from_cpus(cpus: &[u32]) -> Self {
        let mut set = Self::new();
        for &cpu in cpus {
            set.insert(cpu);
        }
        set
    }

    /// Adds `cpu`; returns false (and changes nothing) when `cpu >= MAX_CPUS`.
    pub fn insert(&mut self, cpu: u32) -> bool {
        if cpu >= MAX_CPUS {
            return false;
        }
        self.words[(cpu / 64) as usize] |= 1 << (cpu % 64);
        true
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        cpu < MAX_CPUS && self.words[(cpu / 64) as usize] & (1 << (cpu % 64)) != 0
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..MAX_CPUS).filter(|&cpu| self.contains(cpu))
    }

    /// Parses a CPU list such as `0,2-3` (ascending or not; ranges are inclusive). `all` is handled by
    /// the caller, since it depends on which CPUs are online.
    pub fn parse(text: &str) -> Option<Self> {
        let mut set = Self::new();
        for part in text.split(',') {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (parse_u64(a)?, parse_u64(b)?),
                None => {
                    let cpu = parse_u64(part)?;
                    (cpu, cpu)
                }
            };
            if first > last || last >= u64::from(MAX_CPUS) {
                return None;
            }
            for cpu in first..=last {
                // In range: checked against MAX_CPUS above.
                set.insert(cpu as u32);
            }
        }
        Some(set)
    }
}

/// Formats as a compact CPU list (`0-3,8`), or `none` when empty.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut cpu = 0;
        while cpu < MAX_CPUS {
            if !self.contains(cpu) {
                cpu += 1;
                continue;
            }
            let start = cpu;
            while cpu + 1 < MAX_CPUS && self.contains(cpu + 1) {
                cpu += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == cpu {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{cpu}")?;
            }
            cpu += 1;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn sizes_use_binary_suffixes() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("64m"), Some(64 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("1t"), Some(1 << 40));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("k"), None);
        assert_eq!(parse_size("4kb"), None);
        assert_eq!(parse_size("-4k"), None);
        assert_eq!(parse_size("4.5k"), None);
        assert_eq!(parse_size("99999999999999999999"), None);
        assert_eq!(parse_size("17179869184g"), None, "overflow");
    }

    #[test]
    fn durations_default_to_seconds() {
        assert_eq!(parse_duration_ns("5"), Some(5_000_000_000));
        assert_eq!(parse_duration_ns("5s"), Some(5_000_000_000));
        assert_eq!(parse_duration_ns("250ms"), Some(250_000_000));
        assert_eq!(parse_duration_ns("10us"), Some(10_000));
        assert_eq!(parse_duration_ns("2m"), Some(120_000_000_000));
        assert_eq!(parse_duration_ns("ms"), None);
        assert_eq!(parse_duration_ns("5h"), None);
        assert_eq!(parse_duration_ns("1.5s"), None);
        assert_eq!(parse_duration_ns("999999999999999m"), None, "overflow");
    }

    #[test]
    fn integers_and_booleans() {
        assert_eq!(parse_u64_any_radix("0x10"), Some(16));
        assert_eq!(parse_u64_any_radix("16"), Some(16));
        assert_eq!(parse_u64_any_radix("0x"), None);
        assert_eq!(parse_u64_any_radix("0xg"), None);
        assert_eq!(parse_bool("YES"), Some(true));
        assert_eq!(parse_bool("0"), Some(false));
        assert_eq!(parse_bool("maybe"), None);
    }

    #[test]
    fn cpu_lists_round_trip() {
        let set = CpuSet::parse("0,2-3,8").unwrap();
        assert_eq!(set.iter().collect::<alloc::vec::Vec<_>>(), [0, 2, 3, 8]);
        assert_eq!(set.len(), 4);
        assert_eq!(set.to_string(), "0,2-3,8");
        assert_eq!(CpuSet::parse("3,1,2").unwrap().to_string(), "1-3");
        assert_eq!(CpuSet::parse("255").unwrap().to_string(), "255");
        // Server-scale CPU numbers: up to 1023.
        assert_eq!(CpuSet::parse("0-511,1023").unwrap().to_string(), "0-511,1023");
        assert_eq!(CpuSet::parse("256-767").unwrap().len(), 512);
        assert_eq!(CpuSet::new().to_string(), "none");
        for bad in ["", "1,", "3-1", "1024", "a", "1-", "-1", "0-1024"] {
            assert_eq!(CpuSet::parse(bad), None, "{bad:?} should be rejected");
        }
    }
}
