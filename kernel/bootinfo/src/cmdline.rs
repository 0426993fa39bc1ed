//! The kernel command line: `key=value` words separated by whitespace, turned
//! into a typed [`Config`]. Workload-job keys (owned by the workload engine)
//! are collected unparsed in [`Config::job_words`], in order, and so are the
//! words of PCI drivers (`megasas.irq=...`: every key under a driver prefix
//! given to [`parse_with_drivers`]) in [`Config::driver_words`]: each driver
//! parses its own keys, in one place, in its own crate.
//!
//! Kernel keys:
//!
//! | key | values |
//! |---|---|
//! | `log` | `error`, `warn`, `info`, `debug`, `trace` |
//! | `test` | a built-in self-test name (see [`SelfTest`]) |
//! | `irq.affinity` | passed to the interrupt-affinity parser |
//! | `smp` | `on` (default) or `off`: start only the boot CPU |
//! | `cpus.max` | the most CPUs started, the boot CPU included (1-65535; default: every CPU the MADT lists, up to the kernel's capacity); the others are reported as not started |
//! | `probe.fail` | `BB:DD.F` (hex): the probe of that PCI function fails on purpose, to test that a failing controller is reported and skipped |
//! | `idle` | `auto` (default: `halt` under a hypervisor, else `poll`), `halt`, `poll`: how a CPU waiting for completions idles |
//! | `idle.poll_us` | microseconds (0-10000) a waiting CPU spins before it halts (halt polling); default [`DEFAULT_HALT_POLL_US`] |
//! | `crc32c` | `auto` (default: the SSE4.2 instruction on bare metal when CPUID reports it, the table under a hypervisor), `hw` (the instruction; a CPU without it is an error), `table` |
//! | `clock` | `auto` (default), `hpet`, `pmtimer`, `pit`: the counter the TSC is calibrated against when CPUID gives no TSC rate; `auto` tries the HPET, then the ACPI PM timer, then the PIT; a named one is used alone and is an error when absent |
//! | `floor.depths` | `1,32` (default), `1` or `32`: the queue depths at which the device floor (`megasas.floor=`, `nvme.floor=`) is measured before each job ([`FloorDepths`]) |
//! | `watchdog` | `off`, or milliseconds (100-600000, default 5000) without a timer tick after which a CPU is reported stuck |
//! | `null.size` | size of the null block device `null0` (e.g. `1g`); absent: no null device |
//! | `null.block_size` | `512` (default) or `4096` |
//! | `null.memory` | `off` (default) or `on`: keep written data (needs SIZE bytes of heap) |
//! | `null.mode` | `immediate` (default: completes through the completion policy), `inline`, or `stuck` (never completes: a hung device, to test stall detection) |
//! | `null.queues` | hardware queues of `null0` (default: one per CPU; `1` makes CPUs share one) |
//! | `console` | `auto` (default), `ttyS0`..`ttyS3`, `io:PORT`, `mmio:ADDRESS[,WIDTH]`, `pci:BB:DD.F`, with an optional `,BAUD` (see [`crate::console`]) |
//! | `verdict.repeat` | `off`, or seconds (1-3600, default 5) between repeats of the final verdict line when the run ends on a machine without QEMU's exit device |
//! | `verdict.repeats_before_exit` | repeats (0-100, default 0) printed before QEMU's exit device is written (for tests of the repeat) |
//! | `fio.override.KEY` | `fio.override.runtime=2s`: fio option `KEY=VALUE` applied to every job of a fio job file or fio command line, after the job's own options (to shorten published jobs in tests); a bare flag is `fio.override.KEY=` |
//! | `fio.modules` | `on` (default): run the boot modules that are fio job files; `off`: ignore them |
//! | `fio.server`, `fio.server.*` | the fio server's words (`fio.server=1`, `.port`, `.allow`, `.writable`), kept in [`Config::driver_words`] and parsed by the `fleet` crate |
//! | `net.*` | the network room's words (`net.ip`, `net.gw`, `net.dhcp`, `net.if`), kept in [`Config::driver_words`] when `net` is among the driver prefixes and parsed by the `net` crate |
//!
//! Words after a standalone `--` are fio command-line words (`--name=a --rw=randread ...`),
//! kept unparsed in [`Config::fio_words`] for the workload crate's fio front-end.

use crate::console::{CONSOLE_FORMS, ConsoleChoice, parse_console};
use crate::error::{Error, bounded};
use heapless::Vec;

/// Maximum number of job words kept.
pub const MAX_JOB_WORDS: usize = 128;
/// Maximum number of driver words kept.
pub const MAX_DRIVER_WORDS: usize = 32;

/// The kernel keys, as printed in an unknown-key error.
pub const KERNEL_KEYS: &str = "log, test, irq.affinity, smp, cpus.max, probe.fail, idle, idle.poll_us, floor.depths, watchdog, crc32c, clock, \
     aml, \
     null.size, null.block_size, null.memory, null.mode, null.queues, console, verdict.repeat, verdict.repeats_before_exit, \
     fio.modules, fio.override.KEY, fio.server, fio.server.port, fio.server.allow, fio.server.writable \
     (and fio command-line words after --)";

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// Built-in self-tests, run instead of the normal job (used by the QEMU scenarios).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelfTest {
    /// Touch an unmapped address: must be reported as #PF (vector 14).
    PageFault,
    /// Execute `ud2`: must be reported as #UD (vector 6).
    InvalidOpcode,
    /// Load a non-canonical address: must be reported as #GP (vector 13).
    GeneralProtection,
    /// `int3`: must be reported as #BP (vector 3). TCG only; kvm-pvm cannot run it.
    Breakpoint,
    /// A #GP whose IDT gate is not present: the CPU escalates to #DF (vector 8),
    /// which must be handled on its own IST stack.
    DoubleFault,
    /// Call `panic!`: must be caught by the panic handler.
    Panic,
    /// Check the TSC clock against LAPIC timer ticks.
    Timer,
    /// IPI round trips between CPU pairs, with figures.
    Ipi,
    /// IPIs sent from task context while a fast timer's handler sends its
    /// own IPIs on the same CPU: none may be lost or misdirected.
    IpiStorm,
    /// Run a function on every CPU and check each ran.
    OnEachCpu,
    /// Route the `edu` device's interrupt to every CPU (MSI) and via INTx.
    Edu,
    /// Hang CPU 1 with interrupts off: the watchdog must report it and fail the run.
    Hang,
    /// Multi-message MSI on a function that offers several vectors: an
    /// aligned block, programmed and read back, freed when dropped.
    MsiVectors,
    /// `int 18`: the #MC handler must report MCG_STATUS and the banks and end
    /// the run with a machine-check verdict (a software-raised #MC; the banks hold nothing).
    MachineCheck,
    /// Send this CPU an NMI nobody expects: it must be reported and the run go on.
    Nmi,
    /// Turn on DMA translation, interrupt remapping and queued invalidation
    /// in the first VT-d unit (as firmware might leave them), then check that
    /// the boot's IOMMU check turns them off again.
    IommuLeftOn,
    /// Bring the network interface up (DHCP or `net.ip=`), ping its gateway, and succeed only
    /// on the echo reply; runs after the devices are probed. No NIC: SKIPPED, a failure exit.
    Net,
}

impl SelfTest {
    const ALL: &'static [(&'static str, SelfTest)] = &[
        ("pagefault", SelfTest::PageFault),
        ("ud2", SelfTest::InvalidOpcode),
        ("gpf", SelfTest::GeneralProtection),
        ("int3", SelfTest::Breakpoint),
        ("doublefault", SelfTest::DoubleFault),
        ("panic", SelfTest::Panic),
        ("timer", SelfTest::Timer),
        ("ipi", SelfTest::Ipi),
        ("ipistorm", SelfTest::IpiStorm),
        ("oneach", SelfTest::OnEachCpu),
        ("edu", SelfTest::Edu),
        ("hang", SelfTest::Hang),
        ("msivectors", SelfTest::MsiVectors),
        ("mce", SelfTest::MachineCheck),
        ("nmi", SelfTest::Nmi),
        ("iommu", SelfTest::IommuLeftOn),
        ("net", SelfTest::Net),
    ];
    const FORMS: &'static str = "one of pagefault, ud2, gpf, int3, doublefault, panic, timer, ipi, ipistorm, oneach, edu, hang, msivectors, mce, nmi, iommu, net";

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }
}

/// What a CPU with nothing to do does while it waits for completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleMode {
    /// `halt` under a hypervisor (a spinning vCPU takes host time from the
    /// device emulation), `poll` on bare metal (lowest latency).
    Auto,
    /// Halt until an interrupt (or the periodic tick).
    Halt,
    /// Spin.
    Poll,
}

/// Default `idle.poll_us`: how long a waiting CPU spins before it halts.
pub const DEFAULT_HALT_POLL_US: u32 = 0;
/// Longest `idle.poll_us` accepted.
pub const MAX_HALT_POLL_US: u32 = 10_000;

/// The counter the TSC is calibrated against when CPUID gives no TSC rate (`clock=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockReference {
    /// The HPET, else the ACPI PM timer, else the PIT (a reference that does not count is skipped).
    Auto,
    /// Only the HPET.
    Hpet,
    /// Only the ACPI PM timer.
    PmTimer,
    /// Only PIT channel 2.
    Pit,
}

/// How the workload's CRC32C is computed (`crc32c=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crc32cMode {
    /// The SSE4.2 instruction when CPUID reports it on bare metal; the table under a hypervisor
    /// (TCG emulates the instruction slower than the table; this project's kvm-pvm stops the
    /// guest on `crc32`).
    Auto,
    /// The instruction; a CPU without SSE4.2 is an error.
    Hardware,
    /// Slicing-by-8 tables.
    Table,
}

/// The queue depths of the device floor (`floor.depths=`): both by default; one of them keeps
/// the floor short and next to each job (`xtask/scripts/floor-pairs.sh` pairs QD32 jobs with a
/// QD32 floor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorDepths {
    /// QD 1, then QD 32.
    Both,
    /// QD 1 only.
    Qd1,
    /// QD 32 only.
    Qd32,
}

impl FloorDepths {
    /// Whether the floor is measured at queue depth `depth` (1 or 32).
    pub const fn includes(self, depth: u16) -> bool {
        matches!(
            (self, depth),
            (FloorDepths::Both, _) | (FloorDepths::Qd1, 1) | (FloorDepths::Qd32, 32)
        )
    }
}

/// Longest `watchdog=` threshold accepted, in milliseconds.
pub const MAX_WATCHDOG_MS: u32 = 600_000;
/// Shortest `watchdog=` threshold accepted (several timer ticks), in milliseconds.
pub const MIN_WATCHDOG_MS: u32 = 100;

/// How the null block device completes requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullDeviceMode {
    /// Issued, then completed at once through the completion policy.
    Immediate,
    /// Completed inside the driver's queue_rq.
    Inline,
    /// Never completed: a hung device, for testing stall detection.
    Stuck,
}

/// Default `verdict.repeat`: seconds between repeats of the final verdict.
pub const DEFAULT_VERDICT_REPEAT_S: u32 = 5;

/// The parsed kernel command line.
#[derive(Debug, Clone)]
pub struct Config<'a> {
    pub log: LogLevel,
    pub test: Option<SelfTest>,
    pub irq_affinity: Option<&'a str>,
    pub smp: bool,
    /// `aml=`: evaluate the DSDT/SSDTs for host bridges, `_PRT` and `_PXM` (off: MCFG scan and firmware lines only).
    pub aml: bool,
    /// `cpus.max=`: the most CPUs started, the boot CPU included (None: no cap).
    pub max_cpus: Option<u32>,
    /// `probe.fail=BB:DD.F`: (bus, device, function) whose probe fails on purpose.
    pub probe_fail: Option<(u8, u8, u8)>,
    /// `idle=`: how a waiting CPU idles.
    pub idle: IdleMode,
    /// `idle.poll_us=`: spin this long before halting.
    pub halt_poll_us: u32,
    /// `crc32c=`: instruction or table for the workload's checksums.
    pub crc32c: Crc32cMode,
    /// `floor.depths=`: the device floor's queue depths.
    pub floor_depths: FloorDepths,
    /// `clock=`: the calibration reference.
    pub clock: ClockReference,
    /// `watchdog=`: milliseconds without a timer tick after which a CPU is
    /// reported as stuck; `None` is `watchdog=off`.
    pub watchdog_ms: Option<u32>,
    /// Bytes of the null block device, if one is wanted.
    pub null_size: Option<u64>,
    pub null_block_size: u32,
    pub null_memory: bool,
    /// Complete null requests inside the driver's queue_rq.
    pub null_mode: NullDeviceMode,
    /// Hardware queues of the null device (None: one per CPU).
    pub null_queues: Option<u32>,
    /// `console=`: which UART(s) carry the console.
    pub console: ConsoleChoice,
    /// `verdict.repeat=`: seconds between repeats of the final verdict after the run
    /// (on a machine where QEMU's exit device did not end it); `None` is `off`.
    pub verdict_repeat_s: Option<u32>,
    /// `verdict.repeats_before_exit=`: repeats printed before the exit device is written.
    pub verdict_repeats_before_exit: u32,
    /// Workload-engine words (`rw=...`, `bs=...`, ...), in command-line order.
    pub job_words: Vec<&'a str, MAX_JOB_WORDS>,
    /// Words under a PCI driver's prefix (`megasas.irq=msi`), in order, for that driver to parse.
    pub driver_words: Vec<&'a str, MAX_DRIVER_WORDS>,
    /// Words after a standalone `--`: a fio command line, unparsed.
    pub fio_words: Vec<&'a str, MAX_JOB_WORDS>,
    /// `fio.override.KEY=VALUE` words as (`KEY`, `VALUE`), in order.
    pub fio_overrides: Vec<(&'a str, &'a str), MAX_FIO_OVERRIDES>,
    /// `fio.modules=`: whether boot modules that are fio job files run.
    pub fio_modules: bool,
}

/// Most `fio.override.KEY=VALUE` words.
pub const MAX_FIO_OVERRIDES: usize = 16;

impl Default for Config<'_> {
    fn default() -> Self {
        Config {
            log: LogLevel::Info,
            test: None,
            irq_affinity: None,
            smp: true,
            aml: true,
            max_cpus: None,
            probe_fail: None,
            idle: IdleMode::Auto,
            halt_poll_us: DEFAULT_HALT_POLL_US,
            crc32c: Crc32cMode::Auto,
            floor_depths: FloorDepths::Both,
            clock: ClockReference::Auto,
            watchdog_ms: Some(5000),
            null_size: None,
            null_block_size: 512,
            null_memory: false,
            null_mode: NullDeviceMode::Immediate,
            null_queues: None,
            console: ConsoleChoice::Auto,
            verdict_repeat_s: Some(DEFAULT_VERDICT_REPEAT_S),
            verdict_repeats_before_exit: 0,
            job_words: Vec::new(),
            driver_words: Vec::new(),
            fio_words: Vec::new(),
            fio_overrides: Vec::new(),
            fio_modules: true,
        }
    }
}

fn choose<T: Copy>(key: &'static str, value: &str, table: &[(&str, T)], expected: &'static str) -> Result<T, Error> {
    table
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, v)| *v)
        .ok_or_else(|| Error::BadValue {
            key,
            value: bounded(value),
            expected,
        })
}

/// Parses `cmdline`. Words whose key is in `job_keys` are kept for the
/// workload engine; `job_keys_help` is appended to the unknown-key message.
pub fn parse<'a>(cmdline: &'a str, job_keys: &[&str], job_keys_help: &'static str) -> Result<Config<'a>, Error> {
    parse_with_drivers(cmdline, job_keys, job_keys_help, &[])
}

/// [`parse`], also keeping every word whose key is `PREFIX.name` for a
/// prefix in `driver_prefixes` (e.g. `megasas`) in [`Config::driver_words`].
pub fn parse_with_drivers<'a>(
    cmdline: &'a str,
    job_keys: &[&str],
    job_keys_help: &'static str,
    driver_prefixes: &[&str],
) -> Result<Config<'a>, Error> {
    let mut cfg = Config::default();
    let mut seen: Vec<&'static str, 32> = Vec::new();
    let mut once = |key: &'static str| -> Result<(), Error> {
        if seen.contains(&key) {
            return Err(Error::DuplicateKey { key });
        }
        let _ = seen.push(key);
        Ok(())
    };
    let mut words = cmdline.split_whitespace();
    for word in words.by_ref() {
        if word == "--" {
            break;
        }
        let Some((key, value)) = word.split_once('=') else {
            return Err(Error::MissingValue { key: bounded(word) });
        };
        match key {
            "log" => {
                once("log")?;
                cfg.log = choose(
                    "log",
                    value,
                    &[
                        ("error", LogLevel::Error),
                        ("warn", LogLevel::Warn),
                        ("info", LogLevel::Info),
                        ("debug", LogLevel::Debug),
                        ("trace", LogLevel::Trace),
                    ],
                    "one of error, warn, info, debug, trace",
                )?;
            }
            "test" => {
                once("test")?;
                cfg.test = Some(choose("test", value, SelfTest::ALL, SelfTest::FORMS)?);
            }
            "irq.affinity" => {
                once("irq.affinity")?;
                if value.is_empty() {
                    return Err(Error::MissingValue { key: bounded(key) });
                }
                cfg.irq_affinity = Some(value);
            }
            "smp" => {
                once("smp")?;
                cfg.smp = choose("smp", value, &[("on", true), ("off", false)], "on or off")?;
            }
            "aml" => {
                once("aml")?;
                cfg.aml = choose("aml", value, &[("on", true), ("off", false)], "on or off")?;
            }
            "cpus.max" => {
                once("cpus.max")?;
                cfg.max_cpus =
                    Some(
                        value
                            .parse()
                            .ok()
                            .filter(|n| (1..=65535).contains(n))
                            .ok_or_else(|| Error::BadValue {
                                key: "cpus.max",
                                value: bounded(value),
                                expected: "a number of CPUs from 1 to 65535",
                            })?,
                    );
            }
            "probe.fail" => {
                once("probe.fail")?;
                cfg.probe_fail = Some(parse_bdf(value).ok_or_else(|| Error::BadValue {
                    key: "probe.fail",
                    value: bounded(value),
                    expected: "a PCI address BB:DD.F in hex (device up to 1f, function up to 7), e.g. 00:04.0",
                })?);
            }
            "idle" => {
                once("idle")?;
                cfg.idle = choose(
                    "idle",
                    value,
                    &[
                        ("auto", IdleMode::Auto),
                        ("halt", IdleMode::Halt),
                        ("poll", IdleMode::Poll),
                    ],
                    "auto, halt or poll",
                )?;
            }
            "idle.poll_us" => {
                once("idle.poll_us")?;
                cfg.halt_poll_us =
                    value
                        .parse()
                        .ok()
                        .filter(|us| *us <= MAX_HALT_POLL_US)
                        .ok_or_else(|| Error::BadValue {
                            key: "idle.poll_us",
                            value: bounded(value),
                            expected: "microseconds from 0 to 10000",
                        })?;
            }
            "floor.depths" => {
                once("floor.depths")?;
                cfg.floor_depths = choose(
                    "floor.depths",
                    value,
                    &[
                        ("1,32", FloorDepths::Both),
                        ("1", FloorDepths::Qd1),
                        ("32", FloorDepths::Qd32),
                    ],
                    "1,32, 1 or 32",
                )?;
            }
            "crc32c" => {
                once("crc32c")?;
                cfg.crc32c = choose(
                    "crc32c",
                    value,
                    &[
                        ("auto", Crc32cMode::Auto),
                        ("hw", Crc32cMode::Hardware),
                        ("table", Crc32cMode::Table),
                    ],
                    "auto, hw or table",
                )?;
            }
            "clock" => {
                once("clock")?;
                cfg.clock = choose(
                    "clock",
                    value,
                    &[
                        ("auto", ClockReference::Auto),
                        ("hpet", ClockReference::Hpet),
                        ("pmtimer", ClockReference::PmTimer),
                        ("pit", ClockReference::Pit),
                    ],
                    "auto, hpet, pmtimer or pit",
                )?;
            }
            "watchdog" => {
                once("watchdog")?;
                cfg.watchdog_ms = match value {
                    "off" => None,
                    ms => Some(
                        ms.parse()
                            .ok()
                            .filter(|ms| (MIN_WATCHDOG_MS..=MAX_WATCHDOG_MS).contains(ms))
                            .ok_or_else(|| Error::BadValue {
                                key: "watchdog",
                                value: bounded(value),
                                expected: "off, or milliseconds from 100 to 600000",
                            })?,
                    ),
                };
            }
            "null.size" => {
                once("null.size")?;
                let bytes = values::parse_size(value)
                    .filter(|b| *b >= 4096 && b % 4096 == 0)
                    .ok_or_else(|| Error::BadValue {
                        key: "null.size",
                        value: bounded(value),
                        expected: "a size that is a multiple of 4 KiB, e.g. 64m or 1g (suffixes k, m, g, t)",
                    })?;
                cfg.null_size = Some(bytes);
            }
            "null.block_size" => {
                once("null.block_size")?;
                cfg.null_block_size = choose(
                    "null.block_size",
                    value,
                    &[("512", 512), ("4096", 4096), ("4k", 4096)],
                    "512 or 4096",
                )?;
            }
            "null.memory" => {
                once("null.memory")?;
                cfg.null_memory = choose("null.memory", value, &[("on", true), ("off", false)], "on or off")?;
            }
            "null.mode" => {
                once("null.mode")?;
                cfg.null_mode = choose(
                    "null.mode",
                    value,
                    &[
                        ("immediate", NullDeviceMode::Immediate),
                        ("inline", NullDeviceMode::Inline),
                        ("stuck", NullDeviceMode::Stuck),
                    ],
                    "immediate, inline or stuck",
                )?;
            }
            "null.queues" => {
                once("null.queues")?;
                cfg.null_queues =
                    Some(
                        value
                            .parse()
                            .ok()
                            .filter(|q| (1..=64).contains(q))
                            .ok_or_else(|| Error::BadValue {
                                key: "null.queues",
                                value: bounded(value),
                                expected: "a number from 1 to 64",
                            })?,
                    );
            }
            "console" => {
                once("console")?;
                cfg.console = parse_console(value).ok_or_else(|| Error::BadValue {
                    key: "console",
                    value: bounded(value),
                    expected: CONSOLE_FORMS,
                })?;
            }
            "verdict.repeat" => {
                once("verdict.repeat")?;
                cfg.verdict_repeat_s = match value {
                    "off" => None,
                    s => Some(
                        s.parse()
                            .ok()
                            .filter(|s| (1..=3600).contains(s))
                            .ok_or_else(|| Error::BadValue {
                                key: "verdict.repeat",
                                value: bounded(value),
                                expected: "off, or seconds from 1 to 3600",
                            })?,
                    ),
                };
            }
            "verdict.repeats_before_exit" => {
                once("verdict.repeats_before_exit")?;
                cfg.verdict_repeats_before_exit =
                    value
                        .parse()
                        .ok()
                        .filter(|n| *n <= 100)
                        .ok_or_else(|| Error::BadValue {
                            key: "verdict.repeats_before_exit",
                            value: bounded(value),
                            expected: "a number from 0 to 100",
                        })?;
            }
            "fio.modules" => {
                once("fio.modules")?;
                cfg.fio_modules = choose("fio.modules", value, &[("on", true), ("off", false)], "on or off")?;
            }
            _ if key == "fio.server" || key.starts_with("fio.server.") => {
                cfg.driver_words.push(word).map_err(|_| Error::TooMany {
                    what: "driver words on the command line",
                    capacity: MAX_DRIVER_WORDS,
                })?;
            }
            _ if key.starts_with("fio.override.") => {
                let option = &key["fio.override.".len()..];
                if option.is_empty() {
                    return Err(Error::MissingValue { key: bounded(key) });
                }
                cfg.fio_overrides.push((option, value)).map_err(|_| Error::TooMany {
                    what: "fio.override words on the command line",
                    capacity: MAX_FIO_OVERRIDES,
                })?;
            }
            _ if key
                .split_once('.')
                .is_some_and(|(prefix, _)| driver_prefixes.contains(&prefix)) =>
            {
                cfg.driver_words.push(word).map_err(|_| Error::TooMany {
                    what: "driver words on the command line",
                    capacity: MAX_DRIVER_WORDS,
                })?;
            }
            _ if job_keys.contains(&key) => {
                cfg.job_words.push(word).map_err(|_| Error::TooMany {
                    what: "job words on the command line",
                    capacity: MAX_JOB_WORDS,
                })?;
            }
            _ => {
                return Err(Error::UnknownKey {
                    key: bounded(key),
                    accepted: KERNEL_KEYS,
                    also: job_keys_help,
                });
            }
        }
    }
    for word in words {
        cfg.fio_words.push(word).map_err(|_| Error::TooMany {
            what: "fio words after --",
            capacity: MAX_JOB_WORDS,
        })?;
    }
    Ok(cfg)
}

/// `BB:DD.F` in hex: bus 00-ff, device 00-1f, function 0-7.
fn parse_bdf(value: &str) -> Option<(u8, u8, u8)> {
    let (bus, rest) = value.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str, max: u8| {
        (!s.is_empty() && s.len() <= 2)
            .then(|| u8::from_str_radix(s, 16).ok())
            .flatten()
            .filter(|v| *v <= max)
    };
    Some((hex(bus, 0xff)?, hex(device, 0x1f)?, hex(function, 7)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;

    const JOB_KEYS: &[&str] = &["rw", "bs", "job"];

    #[test]
    fn empty_line_gives_defaults() {
        let c = parse("", JOB_KEYS, "").unwrap();
        assert_eq!(c.log, LogLevel::Info);
        assert!(c.test.is_none() && c.smp && c.job_words.is_empty() && c.driver_words.is_empty());
    }

    #[test]
    fn typed_values_and_job_words_in_order() {
        let c = parse_with_drivers(
            "log=debug test=ud2 rw=randread megasas.irq=msi megasas.bogus=3 bs=4k smp=off irq.affinity=cpu:1",
            JOB_KEYS,
            "",
            &["megasas", "nvme"],
        )
        .unwrap();
        assert_eq!(c.log, LogLevel::Debug);
        assert_eq!(c.test, Some(SelfTest::InvalidOpcode));
        // Driver words are kept unparsed, in order, for the driver (which refuses `bogus`).
        assert_eq!(c.driver_words.as_slice(), &["megasas.irq=msi", "megasas.bogus=3"]);
        assert!(!c.smp);
        assert_eq!(c.irq_affinity, Some("cpu:1"));
        assert_eq!(c.job_words.as_slice(), &["rw=randread", "bs=4k"]);
    }

    #[test]
    fn fio_words_after_double_dash_and_overrides() {
        let c = parse(
            "log=warn fio.override.runtime=2s fio.override.time_based= fio.modules=off -- --name=a --rw=read x=1",
            JOB_KEYS,
            "",
        )
        .unwrap();
        assert_eq!(c.fio_words.as_slice(), &["--name=a", "--rw=read", "x=1"]);
        assert_eq!(c.fio_overrides.as_slice(), &[("runtime", "2s"), ("time_based", "")]);
        assert!(!c.fio_modules);
        assert!(parse("", JOB_KEYS, "").unwrap().fio_modules);
        assert!(parse("fio.override.=1", JOB_KEYS, "").is_err());
        assert!(parse("fio.modules=maybe", JOB_KEYS, "").is_err());
        let c = parse("fio.server=1 fio.server.port=9000 log=info", JOB_KEYS, "").unwrap();
        assert_eq!(c.driver_words.as_slice(), &["fio.server=1", "fio.server.port=9000"]);
        assert!(parse("-- ", JOB_KEYS, "").unwrap().fio_words.is_empty());
    }

    #[test]
    fn unknown_key_is_named_with_accepted_keys() {
        let e = parse("log=info bogus=1", JOB_KEYS, "job keys: rw, bs").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unknown command-line key 'bogus'"), "{msg}");
        assert!(msg.contains("log, test") && msg.contains("job keys: rw, bs"), "{msg}");
    }

    #[test]
    fn malformed_values_name_key_value_and_forms() {
        let msg = parse("log=loud", JOB_KEYS, "").unwrap_err().to_string();
        assert!(
            msg.contains("'loud'") && msg.contains("'log'") && msg.contains("error, warn"),
            "{msg}"
        );
        // Without a driver owning the prefix, its keys are unknown.
        let msg = parse("megasas.irq_cpu=1", JOB_KEYS, "").unwrap_err().to_string();
        assert!(msg.contains("unknown command-line key 'megasas.irq_cpu'"), "{msg}");
        let msg = parse_with_drivers("nvme.queues=1", JOB_KEYS, "", &["megasas"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown command-line key 'nvme.queues'"), "{msg}");
        let msg = parse("test=explode", JOB_KEYS, "").unwrap_err().to_string();
        assert!(msg.contains("pagefault") && msg.contains("'explode'"), "{msg}");
    }

    #[test]
    fn missing_value_and_duplicates_are_errors() {
        assert!(matches!(
            parse("verbose", JOB_KEYS, ""),
            Err(Error::MissingValue { .. })
        ));
        assert!(matches!(
            parse("irq.affinity=", JOB_KEYS, ""),
            Err(Error::MissingValue { .. })
        ));
        assert_eq!(
            parse("log=info log=debug", JOB_KEYS, "").unwrap_err(),
            Error::DuplicateKey { key: "log" }
        );
    }

    #[test]
    fn idle_and_watchdog_keys() {
        let c = parse("", JOB_KEYS, "").unwrap();
        assert_eq!((c.idle, c.watchdog_ms), (IdleMode::Auto, Some(5000)));
        let c = parse("idle=halt watchdog=250", JOB_KEYS, "").unwrap();
        assert_eq!((c.idle, c.watchdog_ms), (IdleMode::Halt, Some(250)));
        assert_eq!(parse("watchdog=off", JOB_KEYS, "").unwrap().watchdog_ms, None);
        assert_eq!(parse("idle.poll_us=50", JOB_KEYS, "").unwrap().halt_poll_us, 50);
        assert_eq!(parse("", JOB_KEYS, "").unwrap().halt_poll_us, DEFAULT_HALT_POLL_US);
        for bad in [
            "watchdog=99",
            "watchdog=600001",
            "watchdog=1s",
            "idle=sleep",
            "idle.poll_us=10001",
            "idle.poll_us=5us",
        ] {
            let msg = parse(bad, JOB_KEYS, "").unwrap_err().to_string();
            assert!(msg.contains(bad.split_once('=').unwrap().1), "{bad}: {msg}");
        }
    }

    #[test]
    fn floor_depths_key() {
        assert_eq!(parse("", JOB_KEYS, "").unwrap().floor_depths, FloorDepths::Both);
        for (word, depths, one, thirty_two) in [
            ("floor.depths=1,32", FloorDepths::Both, true, true),
            ("floor.depths=1", FloorDepths::Qd1, true, false),
            ("floor.depths=32", FloorDepths::Qd32, false, true),
        ] {
            let c = parse(word, JOB_KEYS, "").unwrap();
            assert_eq!(c.floor_depths, depths, "{word}");
            assert_eq!((depths.includes(1), depths.includes(32)), (one, thirty_two), "{word}");
        }
        for bad in ["floor.depths=16", "floor.depths=32,1", "floor.depths="] {
            let msg = parse(bad, JOB_KEYS, "").unwrap_err().to_string();
            assert!(
                msg.contains("floor.depths") && msg.contains("1,32, 1 or 32"),
                "{bad}: {msg}"
            );
        }
        let twice = parse("floor.depths=1 floor.depths=32", JOB_KEYS, "")
            .unwrap_err()
            .to_string();
        assert!(twice.contains("floor.depths"), "{twice}");
    }

    #[test]
    fn clock_key() {
        assert_eq!(parse("", JOB_KEYS, "").unwrap().clock, ClockReference::Auto);
        for (word, reference) in [
            ("clock=auto", ClockReference::Auto),
            ("clock=hpet", ClockReference::Hpet),
            ("clock=pmtimer", ClockReference::PmTimer),
            ("clock=pit", ClockReference::Pit),
        ] {
            assert_eq!(parse(word, JOB_KEYS, "").unwrap().clock, reference, "{word}");
        }
        let msg = parse("clock=tsc", JOB_KEYS, "").unwrap_err().to_string();
        assert!(
            msg.contains("clock") && msg.contains("'tsc'") && msg.contains("auto, hpet, pmtimer or pit"),
            "{msg}"
        );
        assert_eq!(
            parse("clock=pit clock=hpet", JOB_KEYS, "").unwrap_err(),
            Error::DuplicateKey { key: "clock" }
        );
    }

    #[test]
    fn crc32c_key() {
        assert_eq!(parse("", JOB_KEYS, "").unwrap().crc32c, Crc32cMode::Auto);
        for (word, mode) in [
            ("crc32c=auto", Crc32cMode::Auto),
            ("crc32c=hw", Crc32cMode::Hardware),
            ("crc32c=table", Crc32cMode::Table),
        ] {
            assert_eq!(parse(word, JOB_KEYS, "").unwrap().crc32c, mode, "{word}");
        }
        let msg = parse("crc32c=sse", JOB_KEYS, "").unwrap_err().to_string();
        assert!(
            msg.contains("crc32c") && msg.contains("'sse'") && msg.contains("auto, hw or table"),
            "{msg}"
        );
        assert_eq!(
            parse("crc32c=hw crc32c=table", JOB_KEYS, "").unwrap_err(),
            Error::DuplicateKey { key: "crc32c" }
        );
    }

    #[test]
    fn unknown_key_lists_every_kernel_key() {
        let msg = parse("nosuchkey=1", JOB_KEYS, "").unwrap_err().to_string();
        for key in ["idle", "watchdog", "crc32c", "null.queues"] {
            assert!(msg.contains(key), "{key} missing from: {msg}");
        }
    }

    #[test]
    fn null_device_keys() {
        let c = parse(
            "null.size=64m null.block_size=4096 null.memory=on null.mode=inline",
            JOB_KEYS,
            "",
        )
        .unwrap();
        assert_eq!(c.null_size, Some(64 << 20));
        assert_eq!(c.null_block_size, 4096);
        assert!(c.null_memory && c.null_mode == NullDeviceMode::Inline);
        assert_eq!(
            parse("null.mode=stuck", JOB_KEYS, "").unwrap().null_mode,
            NullDeviceMode::Stuck
        );
        let msg = parse("null.size=100", JOB_KEYS, "").unwrap_err().to_string();
        assert!(msg.contains("'100'") && msg.contains("multiple of 4 KiB"), "{msg}");
        assert!(parse("null.block_size=1024", JOB_KEYS, "").is_err());
        assert_eq!(values::parse_size("2g"), Some(2 << 30));
        assert_eq!(values::parse_size("12x"), None);
        assert_eq!(values::parse_size("99999999999t"), None);
    }

    #[test]
    fn console_and_verdict_keys() {
        use crate::console::UartRegisters;
        let c = parse("", JOB_KEYS, "").unwrap();
        assert_eq!(c.console, ConsoleChoice::Auto);
        assert_eq!((c.verdict_repeat_s, c.verdict_repeats_before_exit), (Some(5), 0));
        let c = parse(
            "console=ttyS1,115200 verdict.repeat=2 verdict.repeats_before_exit=3",
            JOB_KEYS,
            "",
        )
        .unwrap();
        assert_eq!(
            c.console,
            ConsoleChoice::Uart {
                registers: UartRegisters::Io(0x2f8),
                baud: Some(115_200)
            }
        );
        assert_eq!((c.verdict_repeat_s, c.verdict_repeats_before_exit), (Some(2), 3));
        assert_eq!(
            parse("verdict.repeat=off", JOB_KEYS, "").unwrap().verdict_repeat_s,
            None
        );
        let msg = parse("console=com2", JOB_KEYS, "").unwrap_err().to_string();
        assert!(
            msg.contains("'com2'") && msg.contains("'console'") && msg.contains("ttyS0..ttyS3, io:PORT"),
            "{msg}"
        );
        for bad in [
            "verdict.repeat=0",
            "verdict.repeat=1h",
            "verdict.repeats_before_exit=101",
        ] {
            let msg = parse(bad, JOB_KEYS, "").unwrap_err().to_string();
            assert!(msg.contains(bad.split_once('=').unwrap().0), "{bad}: {msg}");
        }
        assert_eq!(
            parse("console=auto console=ttyS0", JOB_KEYS, "").unwrap_err(),
            Error::DuplicateKey { key: "console" }
        );
    }

    #[test]
    fn self_test_names_round_trip() {
        for (name, t) in SelfTest::ALL {
            assert_eq!(t.name(), *name);
            let line = std::format!("test={name}");
            assert_eq!(parse(&line, JOB_KEYS, "").unwrap().test, Some(*t));
        }
    }

    #[test]
    fn cpus_max_and_probe_fail_keys() {
        let c = parse("", JOB_KEYS, "").unwrap();
        assert_eq!((c.max_cpus, c.probe_fail), (None, None));
        let c = parse("cpus.max=48 probe.fail=0a:1f.7", JOB_KEYS, "").unwrap();
        assert_eq!(c.max_cpus, Some(48));
        assert_eq!(c.probe_fail, Some((0x0a, 0x1f, 7)));
        for bad in [
            "cpus.max=0",
            "cpus.max=65536",
            "cpus.max=all",
            "probe.fail=00:20.0",
            "probe.fail=00:04.8",
            "probe.fail=100:04.0",
            "probe.fail=00:04",
            "probe.fail=:04.0",
        ] {
            let (key, value) = bad.split_once('=').unwrap();
            let msg = parse(bad, JOB_KEYS, "").unwrap_err().to_string();
            assert!(
                msg.contains(key) && msg.contains(&std::format!("'{value}'")),
                "{bad}: {msg}"
            );
        }
        assert_eq!(
            parse("cpus.max=2 cpus.max=3", JOB_KEYS, "").unwrap_err(),
            Error::DuplicateKey { key: "cpus.max" }
        );
    }
}
