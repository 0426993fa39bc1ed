//! The kernel command-line words a driver owns: `driver.key=value`, and the bounded numbers in
//! them. Every driver's `Options::parse` walks its words with [`words`] and checks numbers with
//! [`number_in`], then turns a `None` into its own error naming what is accepted.

use core::ops::RangeInclusive;
use core::str::FromStr;

/// One `driver.key=value` word of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word<'a> {
    /// The whole word, as written (for error messages).
    pub word: &'a str,
    /// What stands between `driver.` and the first `=`.
    pub key: &'a str,
    /// What follows the first `=` (empty when there is none).
    pub value: &'a str,
}

/// The whitespace-separated words of `cmdline` that start with `driver` followed by a dot, in
/// order; every other word is skipped (it belongs to someone else).
pub fn words<'a>(cmdline: &'a str, driver: &'a str) -> impl Iterator<Item = Word<'a>> + 'a {
    cmdline.split_ascii_whitespace().filter_map(move |word| {
        let rest = word.strip_prefix(driver)?.strip_prefix('.')?;
        let (key, value) = rest.split_once('=').unwrap_or((rest, ""));
        Some(Word { word, key, value })
    })
}

/// `value` as a number inside `range`; `None` when it is not a number of that type or lies
/// outside.
pub fn number_in<T: FromStr + PartialOrd>(value: &str, range: RangeInclusive<T>) -> Option<T> {
    value.parse().ok().filter(|n| range.contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_only_the_drivers_own_and_split_at_the_first_equals() {
        let got: alloc::vec::Vec<_> =
            words("quiet nvme.irq=poll nvmex.a=1 megasas.x=1 nvme.flag nvme.k=a=b", "nvme").collect();
        assert_eq!(
            got,
            [
                Word {
                    word: "nvme.irq=poll",
                    key: "irq",
                    value: "poll"
                },
                Word {
                    word: "nvme.flag",
                    key: "flag",
                    value: ""
                },
                Word {
                    word: "nvme.k=a=b",
                    key: "k",
                    value: "a=b"
                },
            ]
        );
        assert_eq!(words("", "nvme").count(), 0);
    }

    #[test]
    fn numbers_are_parsed_and_bounded() {
        assert_eq!(number_in::<u16>("128", 1..=128), Some(128));
        assert_eq!(number_in::<u16>("1", 1..=128), Some(1));
        assert_eq!(number_in::<u16>("0", 1..=128), None);
        assert_eq!(number_in::<u16>("129", 1..=128), None);
        assert_eq!(number_in::<u16>("70000", 1..=u16::MAX), None);
        assert_eq!(number_in::<u32>("-1", 0..=u32::MAX), None);
        assert_eq!(number_in::<u32>("1s", 0..=u32::MAX), None);
        assert_eq!(number_in::<u32>("", 0..=u32::MAX), None);
    }
}
