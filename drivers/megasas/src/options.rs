//! Kernel command-line options of the driver (`megasas.irq=`, `megasas.irq_cpu=`,
//! `megasas.queue_depth=`, `megasas.msix_vectors=`, `megasas.timeout_ms=`, `megasas.floor=`, `megasas.irq_poll=`) and the automatic choice of interrupt mode.

use devhal::options::{Word, number_in, words};

use crate::Error;
use crate::controller::IrqMode;

/// Reads per queue depth of `megasas.floor=on`.
pub const DEFAULT_FLOOR_IOS: u32 = 10_000;

/// Idle window of `megasas.irq_poll=on`, µs.
pub const DEFAULT_IRQ_POLL_IDLE_US: u32 = drvkit::adaptive::DEFAULT_IDLE_US;

/// Options parsed from the kernel command line. `None` means "automatic".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `megasas.irq=msix|msi|intx|poll`.
    pub irq: Option<IrqMode>,
    /// `megasas.irq_cpu=N`: CPU the MSI/MSI-X message is aimed at.
    pub irq_cpu: Option<u32>,
    /// `megasas.queue_depth=N`: cap on I/O commands in flight per controller (all its drives
    /// together); [`crate::HostConfig::apply_options`] makes it `Config::max_tags = N + 1` (the
    /// admin tag).
    pub queue_depth: Option<u16>,
    /// `megasas.msix_vectors=N|all`: interrupt vectors to ask for (default 1: the controller
    /// signals only reply queue 0, vector 0); `all` asks for every MSI-X table entry.
    pub msix_vectors: Option<MsixVectors>,
    /// `megasas.timeout_ms=N` (100..=600000): a request's timeout, the first step of the
    /// abort/reset ladder ([`crate::HostConfig::timeout_ns`]; default 30 s).
    pub timeout_ms: Option<u32>,
    /// `megasas.floor=on|off|N`: before each job on a MegaRAID drive, measure the device floor
    /// ([`crate::Host::measure_floor`]) with N reads at QD 1 and at QD 32 (`on`: 10000).
    pub floor_ios: Option<u32>,
    /// `megasas.irq_poll=on|off|N`: adaptive interrupt-then-poll completion
    /// ([`crate::blkdev::AdaptiveConfig`]), closing a polling window after N µs without a
    /// completion (`on`: 50). MSI-X only (the vector's mask bit). Absent: on with MSI-X.
    pub irq_poll: IrqPoll,
}

/// `megasas.irq_poll=`: whether completions use interrupt-then-poll windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IrqPoll {
    /// Not given: on (50 µs idle window) when the interrupts are MSI-X, off otherwise. Measured
    /// better than one interrupt per I/O at QD 1 and QD 32 (docs/performance.md).
    #[default]
    Auto,
    /// `on` or `N`: windows closing after this many µs without a completion (MSI-X only).
    On { idle_us: u32 },
    /// `off`: one interrupt per completion batch.
    Off,
}

impl IrqPoll {
    /// The idle window in µs under interrupt mode `mode`, or `None` for no windows.
    pub fn idle_us(self, mode: IrqMode) -> Option<u32> {
        match self {
            Self::Auto if mode == IrqMode::Msix => Some(DEFAULT_IRQ_POLL_IDLE_US),
            Self::Auto | Self::Off => None,
            Self::On { idle_us } => Some(idle_us),
        }
    }
}

/// How many MSI-X vectors `megasas.msix_vectors=` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsixVectors {
    /// This many (1..=2048, capped to the table size).
    Count(u16),
    /// Every entry of the MSI-X table.
    All,
}

impl Options {
    /// Parses whitespace-separated `key=value` words; words not starting with `megasas.` are
    /// ignored, unknown `megasas.` keys and bad values are errors naming what is accepted.
    pub fn parse(cmdline: &str) -> Result<Self, Error> {
        let mut out = Self::default();
        for Word { word, key, value } in words(cmdline, "megasas") {
            match key {
                "irq" => {
                    out.irq = match value {
                        "auto" => None,
                        "msix" => Some(IrqMode::Msix),
                        "msi" => Some(IrqMode::Msi),
                        "intx" => Some(IrqMode::Intx),
                        "poll" | "polled" => Some(IrqMode::Polled),
                        _ => return Err(bad(word, "megasas.irq", "auto, msix, msi, intx or poll")),
                    }
                }
                "irq_cpu" => {
                    out.irq_cpu = Some(
                        number_in(value, 0..=u32::MAX).ok_or_else(|| bad(word, "megasas.irq_cpu", "a CPU number"))?,
                    )
                }
                "queue_depth" => {
                    out.queue_depth = Some(
                        number_in(value, 1..=crate::tags::MAX_TAGS)
                            .ok_or_else(|| bad(word, "megasas.queue_depth", "1..=32767"))?,
                    )
                }
                "msix_vectors" => {
                    out.msix_vectors = Some(match value {
                        "all" => MsixVectors::All,
                        n => MsixVectors::Count(
                            number_in(n, 1..=2048)
                                .ok_or_else(|| bad(word, "megasas.msix_vectors", "1..=2048 or all"))?,
                        ),
                    })
                }
                "timeout_ms" => {
                    out.timeout_ms = Some(
                        number_in(value, 100..=600_000)
                            .ok_or_else(|| bad(word, "megasas.timeout_ms", "100..=600000"))?,
                    )
                }
                "floor" => {
                    out.floor_ios = match value {
                        "on" => Some(DEFAULT_FLOOR_IOS),
                        "off" => None,
                        n => Some(
                            n.parse()
                                .ok()
                                .filter(|n| (1..=1_000_000).contains(n))
                                .ok_or_else(|| bad(word, "megasas.floor", "on, off or 1..=1000000 reads"))?,
                        ),
                    }
                }
                "irq_poll" => {
                    out.irq_poll = match value {
                        "on" => IrqPoll::On {
                            idle_us: DEFAULT_IRQ_POLL_IDLE_US,
                        },
                        "off" => IrqPoll::Off,
                        n => IrqPoll::On {
                            idle_us: n
                                .parse()
                                .ok()
                                .filter(|n| (1..=10_000).contains(n))
                                .ok_or_else(|| bad(word, "megasas.irq_poll", "on, off or 1..=10000 us idle"))?,
                        },
                    }
                }
                _ => {
                    return Err(bad(
                        word,
                        "megasas option",
                        "irq, irq_cpu, queue_depth, msix_vectors, timeout_ms, floor or irq_poll",
                    ));
                }
            }
        }
        Ok(out)
    }
}

fn bad(word: &str, option: &'static str, expected: &'static str) -> Error {
    Error::BadOption {
        option,
        value: alloc::string::String::from(word),
        expected,
    }
}

/// Picks the interrupt mode: the requested one if the device offers it, else the best available
/// (MSI-X, then MSI, then INTx). Returns the mode and whether the request had to be overridden.
pub fn choose_irq_mode(requested: Option<IrqMode>, has_msix: bool, has_msi: bool) -> (IrqMode, bool) {
    let best = if has_msix {
        IrqMode::Msix
    } else if has_msi {
        IrqMode::Msi
    } else {
        IrqMode::Intx
    };
    match requested {
        None => (best, false),
        Some(IrqMode::Msix) if !has_msix => (best, true),
        Some(IrqMode::Msi) if !has_msi => (best, true),
        Some(mode) => (mode, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_driver_words_and_ignores_the_rest() {
        let o =
            Options::parse("console=ttyS0 megasas.irq=intx megasas.irq_cpu=3 quiet megasas.queue_depth=64").unwrap();
        assert_eq!(
            o,
            Options {
                irq: Some(IrqMode::Intx),
                irq_cpu: Some(3),
                queue_depth: Some(64),
                msix_vectors: None,
                timeout_ms: None,
                floor_ios: None,
                irq_poll: IrqPoll::Auto,
            }
        );
        assert_eq!(
            Options::parse("megasas.floor=on").unwrap().floor_ios,
            Some(DEFAULT_FLOOR_IOS)
        );
        assert_eq!(Options::parse("megasas.floor=500").unwrap().floor_ios, Some(500));
        assert_eq!(
            Options::parse("megasas.floor=500 megasas.floor=off").unwrap().floor_ios,
            None
        );
        assert_eq!(Options::parse("megasas.irq=auto").unwrap().irq, None);
        assert_eq!(
            Options::parse("megasas.msix_vectors=all").unwrap().msix_vectors,
            Some(MsixVectors::All)
        );
        assert_eq!(
            Options::parse("megasas.msix_vectors=4").unwrap().msix_vectors,
            Some(MsixVectors::Count(4))
        );
        assert_eq!(Options::parse("").unwrap(), Options::default());
        assert_eq!(Options::parse("megasas.irq=poll").unwrap().irq, Some(IrqMode::Polled));
        assert_eq!(
            Options::parse("megasas.timeout_ms=1500").unwrap().timeout_ms,
            Some(1500)
        );
        let mut hc = crate::HostConfig::new(1, IrqMode::Msix);
        hc.apply_options(&Options::parse("megasas.timeout_ms=1500").unwrap());
        assert_eq!(hc.timeout_ns, 1_500_000_000);
    }

    #[test]
    fn rejects_bad_values_with_what_is_accepted() {
        for (line, option) in [
            ("megasas.irq=msi-x", "megasas.irq"),
            ("megasas.irq_cpu=-1", "megasas.irq_cpu"),
            ("megasas.queue_depth=0", "megasas.queue_depth"),
            ("megasas.queue_depth=40000", "megasas.queue_depth"),
            ("megasas.depth=4", "megasas option"),
            ("megasas.msix_vectors=0", "megasas.msix_vectors"),
            ("megasas.msix_vectors=many", "megasas.msix_vectors"),
            ("megasas.timeout_ms=99", "megasas.timeout_ms"),
            ("megasas.timeout_ms=600001", "megasas.timeout_ms"),
            ("megasas.timeout_ms=1s", "megasas.timeout_ms"),
            ("megasas.floor=0", "megasas.floor"),
            ("megasas.floor=yes", "megasas.floor"),
            ("megasas.irq_poll=0", "megasas.irq_poll"),
            ("megasas.irq_poll=fast", "megasas.irq_poll"),
        ] {
            match Options::parse(line) {
                Err(e @ Error::BadOption { option: o, .. }) => {
                    assert_eq!(o, option, "{line}");
                    assert!(alloc::string::ToString::to_string(&e).contains(line), "{e}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn irq_poll_is_on_by_default_with_msix_only() {
        let auto = Options::parse("").unwrap().irq_poll;
        assert_eq!(auto, IrqPoll::Auto);
        assert_eq!(auto.idle_us(IrqMode::Msix), Some(DEFAULT_IRQ_POLL_IDLE_US));
        for mode in [IrqMode::Msi, IrqMode::Intx, IrqMode::Polled] {
            assert_eq!(auto.idle_us(mode), None, "{mode:?}");
        }
        let off = Options::parse("megasas.irq_poll=off").unwrap().irq_poll;
        assert_eq!((off, off.idle_us(IrqMode::Msix)), (IrqPoll::Off, None));
        let on = Options::parse("megasas.irq_poll=200").unwrap().irq_poll;
        assert_eq!(on, IrqPoll::On { idle_us: 200 });
        // Explicit: the kernel refuses it with a log line when the mode is not MSI-X.
        assert_eq!(on.idle_us(IrqMode::Intx), Some(200));
    }

    #[test]
    fn automatic_choice_prefers_msix_and_overrides_unavailable_requests() {
        assert_eq!(choose_irq_mode(None, true, true), (IrqMode::Msix, false));
        assert_eq!(choose_irq_mode(None, false, true), (IrqMode::Msi, false));
        assert_eq!(choose_irq_mode(None, false, false), (IrqMode::Intx, false));
        assert_eq!(choose_irq_mode(Some(IrqMode::Intx), true, true), (IrqMode::Intx, false));
        assert_eq!(
            choose_irq_mode(Some(IrqMode::Polled), true, true),
            (IrqMode::Polled, false)
        );
        assert_eq!(choose_irq_mode(Some(IrqMode::Msix), false, true), (IrqMode::Msi, true));
        assert_eq!(choose_irq_mode(Some(IrqMode::Msi), true, false), (IrqMode::Msix, true));
    }
}
