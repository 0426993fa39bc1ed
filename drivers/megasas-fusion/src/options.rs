//! Kernel command-line keys of the Fusion driver.
//!
//! `megasas.report_only=1` stops after bring-up (the first-boot diagnostic only: no block
//! device is registered); `megasas.queues=N` caps the reply queues (and vectors) used;
//! `megasas.bringup_ms=N` sets the overall bring-up deadline; `megasas.reset_wait_ms=N` how long a
//! timed-out request may still finish on its own before the controller is reset (Linux's
//! `resetwaittime`, default 180 s); `megasas.timeout_ms=N` how long a request may take before
//! it times out (default 90 s, Linux's SCSI timeout for MegaRAID; the MFI driver takes the same
//! key); `megasas.rdpq=off` keeps the contiguous reply rings even
//! when the firmware offers RDPQ (Linux's `rdpq_enable=0`); `megasas.fastpath=off` keeps every
//! LD read and write on the firmware LD path although the RAID map allows FastPath;
//! `megasas.jbod_map=off` keeps JBOD disks on the path by device id although the firmware
//! offers the JBOD sequence map; `megasas.perf_mode=balanced|iops|latency` overrides the reply-queue layout Linux's rule
//! would choose ([`crate::layout::plan`]; balanced and iops still need the firmware's interrupt
//! coalescing);
//! `megasas.rdpq_fault=window` (test only) breaks the RDPQ array's 4 GiB group window, so that a
//! test sees the firmware refuse IOC INIT. The MFI driver's keys
//! (`megasas.irq`, `megasas.irq_cpu`, `megasas.queue_depth`) are left to it; any other
//! `megasas.` key is an error naming the accepted ones.

use devhal::options::{Word, number_in, words};

use crate::Error;
use crate::layout::PerfMode;

/// Options parsed from the kernel command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `megasas.report_only=0|1`.
    pub report_only: bool,
    /// `megasas.queues=N` (1..=128).
    pub max_queues: Option<u16>,
    /// `megasas.bringup_ms=N` (1000..=600000).
    pub bringup_ms: Option<u32>,
    /// `megasas.reset_wait_ms=N` (1000..=600000).
    pub reset_wait_ms: Option<u32>,
    /// `megasas.timeout_ms=N` (100..=600000), shared with the MFI driver.
    pub timeout_ms: Option<u32>,
    /// `megasas.rdpq=on|off` (default: on when the firmware offers it).
    pub rdpq: Option<bool>,
    /// `megasas.fastpath=on|off` (default: on when the firmware has a RAID map).
    pub fastpath: Option<bool>,
    /// `megasas.jbod_map=on|off` (default: on when CTRL_GET_INFO offers the JBOD sequence map).
    pub jbod_map: Option<bool>,
    /// `megasas.perf_mode=balanced|iops|latency` (default: Linux's rule, [`crate::layout::plan`]).
    pub perf_mode: Option<PerfMode>,
    /// `megasas.rdpq_fault=window`, test only: a broken RDPQ array (see
    /// [`crate::Config::rdpq_window_fault`]).
    pub rdpq_window_fault: bool,
}

/// Keys of the MFI driver, accepted and ignored here.
const MFI_KEYS: [&str; 3] = ["irq", "irq_cpu", "queue_depth"];

impl Options {
    /// Parses whitespace-separated words; words not starting with `megasas.` are ignored.
    pub fn parse(cmdline: &str) -> Result<Self, Error> {
        let mut out = Self::default();
        for Word { key, value, .. } in words(cmdline, "megasas") {
            match key {
                "report_only" => {
                    out.report_only = match value {
                        "1" | "" | "yes" | "on" => true,
                        "0" | "no" | "off" => false,
                        _ => return Err(bad("megasas.report_only", "0 or 1")),
                    }
                }
                "queues" => {
                    out.max_queues = Some(number_in(value, 1..=128).ok_or_else(|| bad("megasas.queues", "1..=128"))?);
                }
                "bringup_ms" => {
                    out.bringup_ms = Some(
                        number_in(value, 1000..=600_000).ok_or_else(|| bad("megasas.bringup_ms", "1000..=600000"))?,
                    );
                }
                "reset_wait_ms" => {
                    out.reset_wait_ms = Some(
                        number_in(value, 1000..=600_000)
                            .ok_or_else(|| bad("megasas.reset_wait_ms", "1000..=600000"))?,
                    );
                }
                "timeout_ms" => {
                    out.timeout_ms =
                        Some(number_in(value, 100..=600_000).ok_or_else(|| bad("megasas.timeout_ms", "100..=600000"))?);
                }
                "rdpq" => {
                    out.rdpq = Some(match value {
                        "1" | "yes" | "on" => true,
                        "0" | "no" | "off" => false,
                        _ => return Err(bad("megasas.rdpq", "on or off")),
                    })
                }
                "fastpath" => {
                    out.fastpath = Some(match value {
                        "1" | "yes" | "on" => true,
                        "0" | "no" | "off" => false,
                        _ => return Err(bad("megasas.fastpath", "on or off")),
                    })
                }
                "jbod_map" => {
                    out.jbod_map = Some(match value {
                        "1" | "yes" | "on" => true,
                        "0" | "no" | "off" => false,
                        _ => return Err(bad("megasas.jbod_map", "on or off")),
                    })
                }
                "perf_mode" => {
                    out.perf_mode = Some(match value {
                        "balanced" => PerfMode::Balanced,
                        "iops" => PerfMode::Iops,
                        "latency" => PerfMode::Latency,
                        _ => return Err(bad("megasas.perf_mode", "balanced, iops or latency")),
                    })
                }
                "rdpq_fault" => match value {
                    "window" => out.rdpq_window_fault = true,
                    _ => return Err(bad("megasas.rdpq_fault", "window (test only)")),
                },
                k if MFI_KEYS.contains(&k) => {}
                _ => {
                    return Err(bad(
                        "megasas option",
                        "report_only, queues, bringup_ms, reset_wait_ms, timeout_ms, rdpq, fastpath, jbod_map, perf_mode, rdpq_fault (Fusion) or irq, irq_cpu, queue_depth (MFI)",
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Applies the options that belong to the block binding (`reset_wait_ms`).
    pub fn apply_host(&self, host: &mut crate::blkdev::HostConfig) {
        if let Some(ms) = self.reset_wait_ms {
            host.reset_wait_ns = u64::from(ms) * 1_000_000;
        }
        if let Some(ms) = self.timeout_ms {
            host.timeout_ns = u64::from(ms) * 1_000_000;
        }
    }

    /// Applies the options to a controller configuration.
    pub fn apply(&self, cfg: &mut crate::Config) {
        if let Some(q) = self.max_queues {
            cfg.max_queues = q;
        }
        if let Some(ms) = self.bringup_ms {
            cfg.bringup_budget_us = u64::from(ms) * 1000;
        }
        if let Some(rdpq) = self.rdpq {
            cfg.rdpq = rdpq;
        }
        if let Some(fastpath) = self.fastpath {
            cfg.fastpath = fastpath;
        }
        if let Some(jbod_map) = self.jbod_map {
            cfg.jbod_map = jbod_map;
        }
        cfg.rdpq_window_fault |= self.rdpq_window_fault;
    }
}

fn bad(what: &'static str, expected: &'static str) -> Error {
    Error::BadConfig { what, expected }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fusion_keys_ignores_mfi_keys_and_rejects_the_rest() {
        let o = Options::parse(
            "console=ttyS0 megasas.report_only=1 megasas.irq=msix megasas.queues=8 megasas.bringup_ms=5000 megasas.reset_wait_ms=5000 megasas.timeout_ms=4000 megasas.rdpq=off megasas.fastpath=off megasas.perf_mode=latency megasas.jbod_map=off",
        )
        .unwrap();
        assert_eq!(
            o,
            Options {
                report_only: true,
                max_queues: Some(8),
                bringup_ms: Some(5000),
                reset_wait_ms: Some(5000),
                timeout_ms: Some(4000),
                rdpq: Some(false),
                fastpath: Some(false),
                jbod_map: Some(false),
                perf_mode: Some(PerfMode::Latency),
                rdpq_window_fault: false,
            }
        );
        assert!(Options::parse("megasas.rdpq_fault=window").unwrap().rdpq_window_fault);
        assert_eq!(
            Options::parse("megasas.perf_mode=balanced").unwrap().perf_mode,
            Some(PerfMode::Balanced)
        );
        assert_eq!(
            Options::parse("megasas.perf_mode=iops").unwrap().perf_mode,
            Some(PerfMode::Iops)
        );
        assert_eq!(Options::parse("quiet").unwrap(), Options::default());
        assert!(Options::parse("megasas.report_only").unwrap().report_only);
        for bad in [
            "megasas.report_only=maybe",
            "megasas.queues=0",
            "megasas.queues=129",
            "megasas.bringup_ms=10",
            "megasas.reset_wait_ms=999",
            "megasas.timeout_ms=99",
            "megasas.timeout_ms=600001",
            "megasas.rdpq",
            "megasas.rdpq=maybe",
            "megasas.fastpath=maybe",
            "megasas.fast_path=on",
            "megasas.rdpq_fault=yes",
            "megasas.perf_mode=high",
            "megasas.jbod_map=maybe",
            "megasas.perf_mode",
        ] {
            assert!(Options::parse(bad).is_err(), "{bad}");
        }
        let mut cfg = crate::Config::new(crate::Generation::Aero, alloc::vec![0, 1]);
        assert!(cfg.rdpq, "RDPQ is used when offered unless turned off");
        assert!(cfg.jbod_map, "the JBOD map is used when offered unless turned off");
        assert!(
            cfg.fastpath,
            "FastPath is used when the map allows it unless turned off"
        );
        o.apply(&mut cfg);
        assert_eq!(
            (
                cfg.max_queues,
                cfg.bringup_budget_us,
                cfg.rdpq,
                cfg.fastpath,
                cfg.jbod_map
            ),
            (8, 5_000_000, false, false, false)
        );
        assert_eq!(Options::parse("megasas.rdpq=on").unwrap().rdpq, Some(true));
        let mut host = crate::blkdev::HostConfig::new(2, cfg);
        assert_eq!(host.reset_wait_ns, 180_000_000_000, "Linux's default");
        assert_eq!(host.timeout_ns, 90_000_000_000, "Linux's SCSI timeout for MegaRAID");
        o.apply_host(&mut host);
        assert_eq!(host.reset_wait_ns, 5_000_000_000);
        assert_eq!(host.timeout_ns, 4_000_000_000);
    }
}
