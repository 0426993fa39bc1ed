//! Kernel command-line options of the driver: `nvme.queues=`, `nvme.irq=`, `nvme.queue_depth=`,
//! `nvme.timeout_ms=`, `nvme.floor=`, `nvme.irq_poll=`, `nvme.doorbell_batch=`, `nvme.poll_queues=`.

use alloc::string::String;

use devhal::options::{Word, number_in, words};

use crate::Error;

/// The interrupt mode asked for with `nvme.irq=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqChoice {
    /// MSI-X (one vector per I/O queue, plus the admin vector).
    MsiX,
    /// Legacy INTx (one line for every queue).
    Intx,
    /// No interrupts: polled I/O queues (IEN = 0), `completion=poll`.
    Poll,
}

/// Options parsed from the kernel command line. `None` means "automatic".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `nvme.queues=N`: at most N I/O queue pairs per controller (default: one per CPU).
    pub queues: Option<u16>,
    /// `nvme.irq=auto|msix|intx|poll`.
    pub irq: Option<IrqChoice>,
    /// `nvme.queue_depth=N`: block-layer tags per namespace per queue (default 128).
    pub queue_depth: Option<u32>,
    /// `nvme.timeout_ms=N`: request timeout (default 30000); the first expiry sends Abort, the
    /// second resets the controller.
    pub timeout_ms: Option<u64>,
    /// `nvme.floor=on|off|N`: before each job on an NVMe namespace, measure the device floor
    /// ([`crate::blkdev::Host::measure_floor`]) with N reads at QD 1 and at QD 32 (`on`:
    /// [`DEFAULT_FLOOR_IOS`]). Also reserves [`crate::blkdev::FLOOR_SLOTS`] command slots per
    /// I/O queue for it.
    pub floor_ios: Option<u32>,
    /// `nvme.irq_poll=on|off|N`: adaptive interrupt-then-poll completion
    /// ([`crate::adaptive`]), closing a vector's polling window after N µs without a completion
    /// (`on`: 50). MSI-X only (the vector's mask bit).
    pub irq_poll_idle_us: Option<u32>,
    /// `nvme.doorbell_batch=N`: within a block-layer burst, ring the SQ tail doorbell after at
    /// most N commands (and after the burst's last), so the device starts on the first ones
    /// while the CPU builds the rest (default [`crate::DEFAULT_DOORBELL_BATCH`]; 1..=queue depth).
    pub doorbell_batch: Option<u32>,
    /// `nvme.poll_queues=N`: the first N I/O queue pairs (those of the first CPUs in the CPU
    /// map) are polled: created with IEN = 0 and no vector, reaped by the CPUs that submit to
    /// them while they wait. N at or above the queue count polls every queue; 0 (the default)
    /// none. Unlike Linux's, these are not extra queues: a CPU has one queue pair, polled or not.
    pub poll_queues: Option<u16>,
}

/// Reads per queue depth of `nvme.floor=on`.
pub const DEFAULT_FLOOR_IOS: u32 = 10_000;

fn bad(word: &str, accepted: &'static str) -> Error {
    Error::BadOption {
        word: String::from(word),
        accepted,
    }
}

impl Options {
    /// Parses whitespace-separated `key=value` words; words not starting with `nvme.` are
    /// ignored, unknown `nvme.` keys and bad values are errors naming what is accepted.
    pub fn parse(cmdline: &str) -> Result<Self, Error> {
        let mut out = Self::default();
        for Word { word, key, value } in words(cmdline, "nvme") {
            match key {
                "queues" => {
                    out.queues = Some(number_in(value, 1..=65534).ok_or_else(|| bad(word, "nvme.queues=1..=65534"))?)
                }
                "irq" => {
                    out.irq = match value {
                        "auto" => None,
                        "msix" => Some(IrqChoice::MsiX),
                        "intx" => Some(IrqChoice::Intx),
                        "poll" => Some(IrqChoice::Poll),
                        _ => return Err(bad(word, "nvme.irq=auto|msix|intx|poll")),
                    }
                }
                "queue_depth" => {
                    out.queue_depth =
                        Some(number_in(value, 1..=4096).ok_or_else(|| bad(word, "nvme.queue_depth=1..=4096"))?)
                }
                "timeout_ms" => {
                    out.timeout_ms =
                        Some(number_in(value, 1..=3_600_000).ok_or_else(|| bad(word, "nvme.timeout_ms=1..=3600000"))?)
                }
                "floor" => {
                    out.floor_ios = match value {
                        "on" => Some(DEFAULT_FLOOR_IOS),
                        "off" => None,
                        n => Some(
                            number_in(n, 1..=1_000_000)
                                .ok_or_else(|| bad(word, "nvme.floor=on|off|1..=1000000 reads"))?,
                        ),
                    }
                }
                "irq_poll" => {
                    out.irq_poll_idle_us = match value {
                        "on" => Some(crate::adaptive::DEFAULT_IDLE_US),
                        "off" => None,
                        n => Some(
                            number_in(n, 1..=10_000)
                                .ok_or_else(|| bad(word, "nvme.irq_poll=on|off|1..=10000 (us idle)"))?,
                        ),
                    }
                }
                "doorbell_batch" => {
                    out.doorbell_batch = Some(
                        number_in(value, 1..=4096)
                            .ok_or_else(|| bad(word, "nvme.doorbell_batch=1..=queue depth (commands per doorbell)"))?,
                    )
                }
                "poll_queues" => {
                    out.poll_queues = Some(number_in(value, 0..=65534).ok_or_else(|| {
                        bad(
                            word,
                            "nvme.poll_queues=0..=65534 (the first N I/O queue pairs are polled)",
                        )
                    })?)
                }
                _ => {
                    return Err(bad(
                        word,
                        "nvme.queues, nvme.irq, nvme.queue_depth, nvme.timeout_ms, nvme.floor, nvme.irq_poll, \
                         nvme.doorbell_batch or nvme.poll_queues",
                    ));
                }
            }
        }
        // A batch above the queue depth could never fill: refused rather than silently read
        // as "one doorbell per burst" (which is `nvme.doorbell_batch=<depth>`).
        if let Some(batch) = out.doorbell_batch {
            let depth = out.queue_depth.unwrap_or(crate::Config::default().queue_depth);
            if batch > depth {
                return Err(Error::BadOption {
                    word: alloc::format!("nvme.doorbell_batch={batch}"),
                    accepted: "nvme.doorbell_batch=1..=queue depth (nvme.queue_depth, default 128)",
                });
            }
        }
        Ok(out)
    }

    /// The driver config with these options applied (the queue count also capped by `ncpus`).
    pub fn config(&self, ncpus: usize) -> crate::Config {
        let mut c = crate::Config::default();
        let cpus = u16::try_from(ncpus).unwrap_or(u16::MAX - 1).max(1);
        c.requested_io_queues = self.queues.unwrap_or(cpus).min(cpus);
        if let Some(d) = self.queue_depth {
            c.queue_depth = d;
        }
        if self.floor_ios.is_some() {
            c.floor_slots = crate::blkdev::FLOOR_SLOTS;
        }
        if let Some(b) = self.doorbell_batch {
            c.doorbell_batch = b;
        }
        c
    }

    /// The interrupt mode for a function whose MSI-X table has `msix_entries` entries (`None`:
    /// no MSI-X capability). Automatic: MSI-X when present, else INTx. Returns the mode and
    /// whether `nvme.irq=msix` had to fall back to INTx (worth a log line).
    pub fn irq_mode(&self, msix_entries: Option<u16>) -> (crate::IrqMode, bool) {
        use crate::IrqMode;
        let msix = msix_entries.filter(|&n| n > 0).map(|vectors| IrqMode::MsiX { vectors });
        match self.irq {
            Some(IrqChoice::Poll) => (IrqMode::Poll, false),
            Some(IrqChoice::Intx) => (IrqMode::Intx, false),
            Some(IrqChoice::MsiX) => msix.map_or((IrqMode::Intx, true), |m| (m, false)),
            None => (msix.unwrap_or(IrqMode::Intx), false),
        }
    }

    /// The plan to program interrupts with before bring-up (the device's grant is not known
    /// yet; QEMU grants what is asked). Re-plan with [`crate::QueuePlan::new`] if
    /// [`crate::Controller::max_io_queues`] turns out smaller than its queue count.
    pub fn provisional_plan(&self, ncpus: usize, msix_entries: Option<u16>) -> Result<crate::QueuePlan, Error> {
        self.plan(ncpus, self.queues, u16::MAX - 1, self.irq_mode(msix_entries).0)
    }

    /// The plan for `ncpus` CPUs, at most `queues` queue pairs, `device_max` granted and
    /// interrupts `mode`, with `nvme.poll_queues=` applied (for a re-plan after the grant).
    pub fn plan(
        &self,
        ncpus: usize,
        queues: Option<u16>,
        device_max: u16,
        mode: crate::IrqMode,
    ) -> Result<crate::QueuePlan, Error> {
        crate::QueuePlan::with_poll_queues(ncpus, queues, device_max, mode, self.poll_queues.unwrap_or(0))
    }

    /// The interrupt-then-poll settings of `nvme.irq_poll=` for
    /// [`crate::blkdev::HostConfig::adaptive`] (`None`: off).
    pub fn adaptive(&self) -> Option<crate::adaptive::AdaptiveConfig> {
        self.irq_poll_idle_us.map(|us| crate::adaptive::AdaptiveConfig {
            idle_ns: u64::from(us) * 1000,
            ..crate::adaptive::AdaptiveConfig::default()
        })
    }

    /// The timeout in ns for [`crate::blkdev::HostConfig::timeout_ns`].
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ms.unwrap_or(30_000).saturating_mul(1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irq_poll_is_on_off_or_an_idle_time() {
        use crate::adaptive::{AdaptiveConfig, DEFAULT_BUDGET};
        assert_eq!(Options::parse("").unwrap().adaptive(), None);
        assert_eq!(
            Options::parse("nvme.irq_poll=on").unwrap().adaptive(),
            Some(AdaptiveConfig::default())
        );
        assert_eq!(AdaptiveConfig::default().idle_ns, 50_000);
        assert_eq!(
            Options::parse("nvme.irq_poll=200").unwrap().adaptive(),
            Some(AdaptiveConfig {
                idle_ns: 200_000,
                budget: DEFAULT_BUDGET
            })
        );
        assert_eq!(
            Options::parse("nvme.irq_poll=on nvme.irq_poll=off").unwrap().adaptive(),
            None
        );
        let e = alloc::string::ToString::to_string(&Options::parse("nvme.irq_poll=maybe").unwrap_err());
        assert!(
            e.contains("nvme.irq_poll=maybe") && e.contains("on|off|1..=10000"),
            "{e}"
        );
    }

    #[test]
    fn parses_known_keys_and_refuses_the_rest() {
        let o = Options::parse("console=ttyS0 nvme.queues=2 nvme.irq=poll nvme.queue_depth=64 nvme.timeout_ms=500")
            .unwrap();
        assert_eq!(o.queues, Some(2));
        assert_eq!(o.irq, Some(IrqChoice::Poll));
        assert_eq!(o.queue_depth, Some(64));
        assert_eq!(o.timeout_ns(), 500_000_000);
        assert_eq!(o.config(4).requested_io_queues, 2);
        assert_eq!(o.config(1).requested_io_queues, 1);
        assert_eq!(Options::parse("").unwrap().config(8).requested_io_queues, 8);
        assert_eq!(Options::parse("nvme.irq=auto").unwrap().irq, None);
        use crate::IrqMode;
        let auto = Options::default();
        assert_eq!(auto.irq_mode(Some(65)), (IrqMode::MsiX { vectors: 65 }, false));
        assert_eq!(auto.irq_mode(None), (IrqMode::Intx, false));
        let want_msix = Options::parse("nvme.irq=msix").unwrap();
        assert_eq!(want_msix.irq_mode(None), (IrqMode::Intx, true));
        assert_eq!(o.irq_mode(Some(65)), (IrqMode::Poll, false));
        let p = o.provisional_plan(4, Some(65)).unwrap();
        assert_eq!(p.nr_io_queues(), 2);
        assert_eq!(p.mode(), IrqMode::Poll);
        for bad in [
            "nvme.queues=0",
            "nvme.queues=x",
            "nvme.irq=msi",
            "nvme.queue_depth=0",
            "nvme.foo=1",
            "nvme.timeout_ms=0",
            "nvme.floor=0",
            "nvme.floor=yes",
            "nvme.floor=1000001",
            "nvme.irq_poll=0",
            "nvme.irq_poll=10001",
            "nvme.irq_poll=fast",
        ] {
            let e = Options::parse(bad).unwrap_err();
            assert!(
                matches!(&e, Error::BadOption { word, .. } if word == bad),
                "{bad}: {e:?}"
            );
        }
        // The list of accepted keys names every key, the floor's included.
        use alloc::string::ToString;
        let e = Options::parse("nvme.foo=1").unwrap_err();
        assert!(e.to_string().contains("nvme.floor"), "{e}");
        let e = Options::parse("nvme.floor=yes").unwrap_err();
        assert!(e.to_string().contains("on|off|1..=1000000"), "{e}");
    }

    #[test]
    fn doorbell_batch_is_one_to_the_queue_depth() {
        assert_eq!(Options::parse("").unwrap().doorbell_batch, None);
        assert_eq!(
            Options::parse("").unwrap().config(1).doorbell_batch,
            crate::DEFAULT_DOORBELL_BATCH
        );
        let o = Options::parse("nvme.doorbell_batch=4").unwrap();
        assert_eq!((o.doorbell_batch, o.config(2).doorbell_batch), (Some(4), 4));
        assert_eq!(
            Options::parse("nvme.doorbell_batch=1")
                .unwrap()
                .config(1)
                .doorbell_batch,
            1
        );
        // Up to the queue depth: the default 128, or nvme.queue_depth's, in either order.
        assert_eq!(
            Options::parse("nvme.doorbell_batch=128").unwrap().doorbell_batch,
            Some(128)
        );
        assert_eq!(
            Options::parse("nvme.doorbell_batch=256 nvme.queue_depth=256")
                .unwrap()
                .doorbell_batch,
            Some(256)
        );
        use alloc::string::ToString;
        for bad in [
            "nvme.doorbell_batch=0",
            "nvme.doorbell_batch=x",
            "nvme.doorbell_batch=",
            "nvme.doorbell_batch=4097",
        ] {
            let e = Options::parse(bad).unwrap_err();
            assert!(
                matches!(&e, Error::BadOption { word, .. } if word == bad),
                "{bad}: {e:?}"
            );
            assert!(e.to_string().contains("1..=queue depth"), "{bad}: {e}");
        }
        for (line, word) in [
            ("nvme.doorbell_batch=129", "nvme.doorbell_batch=129"),
            ("nvme.queue_depth=16 nvme.doorbell_batch=32", "nvme.doorbell_batch=32"),
            ("nvme.doorbell_batch=32 nvme.queue_depth=16", "nvme.doorbell_batch=32"),
        ] {
            let e = Options::parse(line).unwrap_err();
            assert!(
                matches!(&e, Error::BadOption { word: w, .. } if w == word),
                "{line}: {e:?}"
            );
            assert!(e.to_string().contains("queue depth"), "{line}: {e}");
        }
        let e = Options::parse("nvme.foo=1").unwrap_err();
        assert!(e.to_string().contains("nvme.doorbell_batch"), "{e}");
    }

    #[test]
    fn poll_queues_is_a_count_of_queues() {
        use crate::IrqMode;
        assert_eq!(Options::parse("").unwrap().poll_queues, None);
        let o = Options::parse("nvme.poll_queues=1").unwrap();
        assert_eq!(o.poll_queues, Some(1));
        let p = o.provisional_plan(2, Some(3)).unwrap();
        assert_eq!((p.nr_io_queues(), p.nr_polled(), p.nr_vectors()), (2, 1, 2));
        assert!(p.cpu_polls(0) && !p.cpu_polls(1));
        assert_eq!(p.mode(), IrqMode::MsiX { vectors: 3 });
        // More than the queues: all polled; 0: none.
        let all = Options::parse("nvme.poll_queues=64")
            .unwrap()
            .provisional_plan(4, Some(5))
            .unwrap();
        assert_eq!((all.nr_polled(), all.nr_vectors()), (4, 1));
        let none = Options::parse("nvme.poll_queues=0")
            .unwrap()
            .provisional_plan(4, Some(5))
            .unwrap();
        assert_eq!((none.nr_polled(), none.nr_vectors()), (0, 5));
        // The re-plan after a short grant keeps them.
        assert_eq!(o.plan(4, None, 2, IrqMode::MsiX { vectors: 3 }).unwrap().nr_polled(), 1);
        use alloc::string::ToString;
        for bad in [
            "nvme.poll_queues=",
            "nvme.poll_queues=x",
            "nvme.poll_queues=-1",
            "nvme.poll_queues=65535",
            "nvme.poll_queues=all",
        ] {
            let e = Options::parse(bad).unwrap_err();
            assert!(
                matches!(&e, Error::BadOption { word, .. } if word == bad),
                "{bad}: {e:?}"
            );
            assert!(e.to_string().contains("nvme.poll_queues=0..=65534"), "{bad}: {e}");
        }
        let e = Options::parse("nvme.foo=1").unwrap_err();
        assert!(e.to_string().contains("nvme.poll_queues"), "{e}");
    }

    #[test]
    fn floor_takes_on_off_or_a_count_and_reserves_slots() {
        assert_eq!(Options::parse("").unwrap().floor_ios, None);
        assert_eq!(Options::parse("").unwrap().config(1).floor_slots, 0);
        let on = Options::parse("nvme.floor=on").unwrap();
        assert_eq!(on.floor_ios, Some(DEFAULT_FLOOR_IOS));
        assert_eq!(on.config(1).floor_slots, crate::blkdev::FLOOR_SLOTS);
        assert_eq!(Options::parse("nvme.floor=500").unwrap().floor_ios, Some(500));
        assert_eq!(Options::parse("nvme.floor=1000000").unwrap().floor_ios, Some(1_000_000));
        let off = Options::parse("nvme.floor=500 nvme.floor=off").unwrap();
        assert_eq!(off.floor_ios, None);
        assert_eq!(off.config(2).floor_slots, 0);
    }
}
