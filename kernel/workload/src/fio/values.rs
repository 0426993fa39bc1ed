//! fio's value grammar (fio's HOWTO, "Parameter types"): sizes with `k/m/g/t/p` suffixes, an
//! optional `i` and `B`, any case, in powers of 1024 (fio's default `kb_base=1024`); `0x` hex;
//! `N%`; times with `us`/`ms`/`s`/`m`/`h`/`d` (a bare number is seconds, or microseconds for the
//! options whose unit is µs); booleans `0 1 yes no true false on off`.

/// The form [`size`] accepts, for error messages.
pub const SIZE_FORM: &str = "a size: an integer or 0x hex with an optional k/m/g/t/p suffix, \
                             optionally followed by i and/or B, any case, powers of 1024 (4k, 4KiB, 1MB, 10GiB)";
/// The form [`time_ns`] accepts, for error messages.
pub const TIME_FORM: &str = "a time: an integer with an optional unit us, ms, s, m, h or d (bare: seconds)";
/// The form [`boolean`] accepts, for error messages.
pub const BOOL_FORM: &str = "a boolean: 0, 1, yes, no, true, false, on or off";

/// An unsigned integer, decimal or `0x` hex.
pub fn integer(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        if hex.is_empty() {
            return None;
        }
        return u64::from_str_radix(hex, 16).ok();
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A size in bytes: `4k`, `4K`, `4KiB`, `4kb`, `1MB`, `10GiB`, `0x1000`. fio reads `k`, `kb`, `kib`
/// all as 1024 with its default `kb_base`, and so does this.
pub fn size(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.starts_with("0x") || text.starts_with("0X") {
        // Hex takes no suffix (its digits include b).
        return integer(text);
    }
    let mut rest = text;
    rest = rest.strip_suffix(['b', 'B']).unwrap_or(rest);
    let binary = rest.ends_with(['i', 'I']);
    rest = rest.strip_suffix(['i', 'I']).unwrap_or(rest);
    let shift = match rest.as_bytes().last() {
        Some(b'k' | b'K') => 10,
        Some(b'm' | b'M') => 20,
        Some(b'g' | b'G') => 30,
        Some(b't' | b'T') => 40,
        Some(b'p' | b'P') => 50,
        _ => 0,
    };
    if shift == 0 && binary {
        return None;
    }
    if shift != 0 {
        rest = &rest[..rest.len() - 1];
    }
    if rest.starts_with("0x") || rest.starts_with("0X") {
        return None;
    }
    integer(rest)?.checked_mul(1u64 << shift)
}

/// A size or a percentage of the device (`size`, `offset`, `filesize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeOrPercent {
    /// Bytes.
    Bytes(u64),
    /// Percent of the device, 1 to 100.
    Percent(u8),
}

/// `N%` (1 to 100) or a [`size`].
pub fn size_or_percent(text: &str) -> Option<SizeOrPercent> {
    match text.trim().strip_suffix('%') {
        Some(p) => integer(p)
            .filter(|p| (1..=100).contains(p))
            .map(|p| SizeOrPercent::Percent(p as u8)),
        None => size(text).map(SizeOrPercent::Bytes),
    }
}

/// A time in nanoseconds; a bare number is in `bare_unit_ns` (seconds for most options,
/// microseconds for `thinktime`-like ones).
pub fn time_ns(text: &str, bare_unit_ns: u64) -> Option<u64> {
    let text = text.trim();
    let units: [(&str, u64); 7] = [
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("d", 86_400_000_000_000),
        ("", 0),
    ];
    let lower = text.to_ascii_lowercase();
    for (suffix, unit) in units {
        if suffix.is_empty() {
            return integer(text)?.checked_mul(bare_unit_ns);
        }
        if let Some(digits) = lower.strip_suffix(suffix)
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            return integer(digits)?.checked_mul(unit);
        }
    }
    None
}

/// A boolean in any of fio's spellings.
pub fn boolean(text: &str) -> Option<bool> {
    const TRUE: [&str; 4] = ["1", "yes", "true", "on"];
    const FALSE: [&str; 4] = ["0", "no", "false", "off"];
    let text = text.trim();
    if TRUE.iter().any(|t| t.eq_ignore_ascii_case(text)) {
        Some(true)
    } else if FALSE.iter().any(|t| t.eq_ignore_ascii_case(text)) {
        Some(false)
    } else {
        None
    }
}

use alloc::string::String;

/// The machine's figures fio's value expressions may name: `$ncpus`, `$mb_memory`, `$pagesize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FioEnv {
    /// Online CPUs.
    pub ncpus: u64,
    /// Memory in MiB.
    pub mb_memory: u64,
    /// Page size in bytes.
    pub pagesize: u64,
}

/// The form [`expression`] accepts, for error messages.
pub const EXPRESSION_FORM: &str = "an integer expression: numbers (with size suffixes such as 4k), $ncpus, \
                                   $mb_memory, $pagesize, + - * / % and parentheses";

/// Evaluates fio's arithmetic in a value (`10*10*1000*$mb_memory`, `$ncpus/2`, `(4k+4k)*2`) to an
/// integer, with checked arithmetic; `None` when malformed, divided by zero or overflowing.
/// Without `env`, a `$` keyword is malformed.
pub fn expression(text: &str, env: Option<&FioEnv>) -> Option<u64> {
    let mut parser = Expression {
        text: text.as_bytes(),
        at: 0,
        env,
    };
    let value = parser.sum()?;
    parser.blanks();
    (parser.at == parser.text.len()).then_some(value)
}

struct Expression<'a> {
    text: &'a [u8],
    at: usize,
    env: Option<&'a FioEnv>,
}

impl Expression<'_> {
    fn blanks(&mut self) {
        while self.text.get(self.at).is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.blanks();
        self.text.get(self.at).copied()
    }

    fn sum(&mut self) -> Option<u64> {
        let mut value = self.product()?;
        loop {
            match self.peek() {
                Some(b'+') => {
                    self.at += 1;
                    value = value.checked_add(self.product()?)?;
                }
                Some(b'-') => {
                    self.at += 1;
                    value = value.checked_sub(self.product()?)?;
                }
                _ => return Some(value),
            }
        }
    }

    fn product(&mut self) -> Option<u64> {
        let mut value = self.term()?;
        loop {
            match self.peek() {
                Some(b'*') => {
                    self.at += 1;
                    value = value.checked_mul(self.term()?)?;
                }
                Some(b'/') => {
                    self.at += 1;
                    value = value.checked_div(self.term()?)?;
                }
                Some(b'%') => {
                    self.at += 1;
                    value = value.checked_rem(self.term()?)?;
                }
                _ => return Some(value),
            }
        }
    }

    fn term(&mut self) -> Option<u64> {
        match self.peek()? {
            b'(' => {
                self.at += 1;
                let value = self.sum()?;
                (self.peek()? == b')').then(|| self.at += 1)?;
                Some(value)
            }
            b'$' => {
                let start = self.at + 1;
                let mut end = start;
                while self
                    .text
                    .get(end)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
                {
                    end += 1;
                }
                self.at = end;
                let env = self.env?;
                match &self.text[start..end] {
                    b"ncpus" => Some(env.ncpus),
                    b"mb_memory" => Some(env.mb_memory),
                    b"pagesize" => Some(env.pagesize),
                    _ => None,
                }
            }
            _ => {
                let start = self.at;
                let mut end = start;
                while self.text.get(end).is_some_and(|b| b.is_ascii_alphanumeric()) {
                    end += 1;
                }
                self.at = end;
                size(core::str::from_utf8(&self.text[start..end]).ok()?)
            }
        }
    }
}

/// One entry of `percentile_list`: the text as written (printed back by the output side) and the
/// value in millionths of a percent (`99.9` → 99_900_000), exact for up to six decimals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Percentile {
    /// As written, e.g. `99.9`.
    pub text: String,
    /// In millionths of a percent: 1 to 100_000_000.
    pub millionths: u64,
}

/// fio's default `percentile_list`.
pub const DEFAULT_PERCENTILES: &str = "1:5:10:20:30:40:50:60:70:80:90:95:99:99.5:99.9:99.95:99.99";
/// Most entries fio accepts in `percentile_list`.
pub const MAX_PERCENTILES: usize = 20;

/// A `percentile_list` value: up to 20 decimals above 0 and at most 100, separated by `:`.
pub fn percentiles(text: &str) -> Option<alloc::vec::Vec<Percentile>> {
    let mut out = alloc::vec::Vec::new();
    for part in text.split(':') {
        let part = part.trim();
        let (whole, fraction) = part.split_once('.').unwrap_or((part, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.len() > 6 {
            return None;
        }
        if !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
        let mut frac: u64 = if fraction.is_empty() { 0 } else { fraction.parse().ok()? };
        for _ in fraction.len()..6 {
            frac *= 10;
        }
        let millionths = whole.checked_mul(1_000_000)?.checked_add(frac)?;
        if millionths == 0 || millionths > 100_000_000 {
            return None;
        }
        out.push(Percentile {
            text: String::from(part),
            millionths,
        });
    }
    (out.len() <= MAX_PERCENTILES).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_every_fio_spelling_in_base_1024() {
        for (text, bytes) in [
            ("512", 512u64),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4kib", 4096),
            ("4kb", 4096),
            ("4KB", 4096),
            ("1MB", 1 << 20),
            ("1m", 1 << 20),
            ("10GiB", 10 << 30),
            ("2t", 2 << 40),
            ("1p", 1 << 50),
            ("0x1000", 4096),
            ("512B", 512),
            ("512b", 512),
            ("0xb", 11),
        ] {
            assert_eq!(size(text), Some(bytes), "{text}");
        }
        for bad in ["", "k", "4q", "4.5k", "-4k", "4kk", "0x", "0x10k", "4i", "99999999999p"] {
            assert_eq!(size(bad), None, "{bad:?} should be refused");
        }
    }

    #[test]
    fn percent_forms() {
        assert_eq!(size_or_percent("20%"), Some(SizeOrPercent::Percent(20)));
        assert_eq!(size_or_percent("100%"), Some(SizeOrPercent::Percent(100)));
        assert_eq!(size_or_percent("1g"), Some(SizeOrPercent::Bytes(1 << 30)));
        assert_eq!(size_or_percent("0%"), None);
        assert_eq!(size_or_percent("101%"), None);
    }

    #[test]
    fn times_default_to_the_options_unit() {
        let s = 1_000_000_000;
        assert_eq!(time_ns("60", s), Some(60 * s));
        assert_eq!(time_ns("500ms", s), Some(500_000_000));
        assert_eq!(time_ns("10us", s), Some(10_000));
        assert_eq!(time_ns("2m", s), Some(120 * s));
        assert_eq!(time_ns("1h", s), Some(3600 * s));
        assert_eq!(time_ns("1d", s), Some(86_400 * s));
        assert_eq!(time_ns("5S", s), Some(5 * s));
        assert_eq!(time_ns("250", 1_000), Some(250_000), "thinktime: bare microseconds");
        for bad in ["", "s", "1.5s", "5x", "-1"] {
            assert_eq!(time_ns(bad, s), None, "{bad:?}");
        }
    }

    #[test]
    fn booleans_and_integers() {
        for t in ["1", "yes", "TRUE", "on"] {
            assert_eq!(boolean(t), Some(true));
        }
        for t in ["0", "no", "false", "Off"] {
            assert_eq!(boolean(t), Some(false));
        }
        assert_eq!(boolean("maybe"), None);
        assert_eq!(integer("0x2a"), Some(42));
        assert_eq!(integer("42"), Some(42));
        assert_eq!(integer("4k"), None);
    }

    #[test]
    fn expressions_with_fio_keywords() {
        let env = FioEnv {
            ncpus: 4,
            mb_memory: 512,
            pagesize: 4096,
        };
        assert_eq!(expression("10*10*1000*$mb_memory", Some(&env)), Some(51_200_000));
        assert_eq!(expression("$ncpus", Some(&env)), Some(4));
        assert_eq!(expression("$ncpus / 2", Some(&env)), Some(2));
        assert_eq!(expression("(4k+4k)*2", Some(&env)), Some(16384));
        assert_eq!(expression("$pagesize*2-1", Some(&env)), Some(8191));
        assert_eq!(expression("7 % 4", None), Some(3));
        for bad in ["$ncpus", "$nope", "1/0", "(1", "1+", "2-3", "4q", ""] {
            assert_eq!(
                expression(bad, if bad == "$ncpus" { None } else { Some(&env) }),
                None,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn percentile_lists() {
        let list = percentiles(DEFAULT_PERCENTILES).unwrap();
        assert_eq!(list.len(), 17);
        assert_eq!(list[14].text, "99.9");
        assert_eq!(list[14].millionths, 99_900_000);
        assert_eq!(percentiles("50:99.999").unwrap()[1].millionths, 99_999_000);
        assert_eq!(percentiles("100").unwrap()[0].millionths, 100_000_000);
        for bad in [
            "",
            "0",
            "101",
            "50:",
            "a",
            "99.1234567",
            "1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21",
        ] {
            assert!(percentiles(bad).is_none(), "{bad:?}");
        }
    }
}
