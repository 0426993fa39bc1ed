//! QEMU scenario definitions (`tests/*.scenarios`).
//!
//! A file holds scenarios; each starts with `[name]` and continues with
//! `key = value` lines (a line starting with `#` is a comment; values may contain `#`):
//!
//! | key | meaning |
//! |---|---|
//! | `description` | one line for humans |
//! | `qemu` | extra QEMU arguments (repeatable; split on whitespace; `{image:NAME}` becomes that image's path) |
//! | `append` | kernel command-line words (repeatable) |
//! | `timeout` | seconds per boot (default 60) |
//! | `expect` | `success` or `failure` (default success) |
//! | `output` | text that must appear in the serial output, in the given order (repeatable); never searched in the kernel's `cmdline: "..."` echo unless the text itself starts with `cmdline: "` |
//! | `absent` | text that must not appear (repeatable); one shaped like a counter (`name=0`, a per-CPU row `name   0`, an interrupt row ` 0xVV:   0`) fails the boot when the output never shows that counter or row, since it could never fire |
//! | `fewer` | `A < B`: in every `BAREMQ-JSON:` job report (at least one), kernel counter A's job total is below B's (e.g. `device_irqs_all_cpus < completed`); a counter missing from a report fails (repeatable) |
//! | `shares` | `JOB:W,JOB:W[,...] within P%`: the jobs' completed I/Os (from their `BAREMQ-JSON:` reports) stand in the proportion of the weights W, each share within P% of its own (e.g. fio's `flow`); a job without a report fails |
//! | `equal` | `A == B`: as `fewer`, but A's job total must equal B's (e.g. `device_irqs == device_irqs_all_cpus`: every device interrupt on the job's own CPUs) |
//! | `json` | `consistent`: every `BAREMQ-JSON:` job report must parse, carry every field, and agree with itself (see [`check_json_reports`]) |
//! | `image` | `NAME SIZE [raw\|qcow2\|mbr]`: a fresh disk image made before the first boot (`mbr`: raw, with an MBR partition table of one Linux partition in sector 0) |
//! | `requires` | `kvm`, `tcg`, or `tool:PROGRAM`: the scenario is SKIPPED when missing |
//! | `boot` | `pvh` (the PVH entry instead of Multiboot1), `iso-bios` or `iso-uefi` (a GRUB image instead of `-kernel`) |
//! | `slow_disk` | `IMAGE sector=N delay=DURATION [op=read\|write] [count=N]`: serve image IMAGE over NBD from xtask (`{nbd:IMAGE}` in a `qemu` argument becomes its `nbd://127.0.0.1:PORT/IMAGE` URL); on each boot's connection the first `count` (default 1) reads (or writes, `op=write`) that cover 512-byte sector N are answered DURATION late (e.g. `6500ms`; a delayed write is dropped, never written), on their own, so the guest's request timeout fires and its recovery runs while QEMU keeps going (see `nbd.rs`). A scenario in which nothing was delayed fails |
//! | `raid0_layout` | `IMAGE,IMAGE[,...] strip_kb=N`: after the last boot, the images (raw, in arm order) are read as the member disks of a RAID-0 LD with N KiB strips: every block the kernel's verify stamped must sit on the arm and at the offset striping gives its LD sector, and every arm must hold some (`raid0check.rs`) |
//! | `raid1_layout` | `IMAGE,IMAGE`: after the last boot, the two images (raw) are read as the member disks of a RAID-1 LD: every block the kernel's verify stamped must sit at its LD offset on both, the two copies the same byte for byte, and each image must hold some (`raid0check.rs`) |
//! | `hmp` | `TEXT => COMMAND`: when a console line first contains TEXT, send COMMAND to QEMU's human monitor (e.g. `mce ...` to inject a machine check); repeatable, in order; a boot whose TEXT never appeared fails |
//! | `fio` | a fio job file (path from the repository root) handed to the kernel as a boot module: `-initrd` with `-kernel` (Multiboot1) or `boot = pvh`, a GRUB `module2`/`module` line with `boot = iso-*` (repeatable: one module each, in order) |
//! | `emulator` | `stock` (default: the installed `qemu-system-x86_64`) or `fusion`: QEMU with the emulated MegaRAID Fusion controller (`cargo xtask qemu-fusion`, built first when missing; a failed build FAILS the scenario) |
//! | `attempts` | `1`, `2` or `3` (default 1): runs allowed before the scenario fails, for a scenario with a known outside cause of an occasional failure (an emulator's); each failed attempt is printed as `RETRY` with its failure and `attempts_why`, and its files are kept in `target/qemu-test/NAME.attemptN` |
//! | `attempts_why` | required with `attempts` above 1: the outside cause, printed with every retry |
//! | `next-boot` | (no value) the following keys describe another boot of the same scenario; images persist |
//!
//! `output` and `absent` values are kept verbatim: only the one space after `=` is dropped, so
//! leading spaces count (` 0x31:`, a zero cell of the interrupt table). A value whose trailing
//! spaces matter is quoted (`output = "write: ios=1024 "`); bare trailing whitespace and empty
//! values are refused.
//!
//! Every boot passes only on the kernel's exit code for the expected outcome *and* its verdict
//! line as the kernel's last line *and* every `output` line present *and* no `absent` line
//! present (see [`judge`]).

use std::fmt;

/// Expected verdict of a boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Success,
    Failure,
}

/// How the kernel is handed to QEMU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootMethod {
    /// `-kernel` (Multiboot1 path).
    Kernel,
    /// `-kernel` with the Multiboot1 header disabled in a copy of the image,
    /// so QEMU takes the Xen PVH entry note instead.
    Pvh,
    /// GRUB rescue image with SeaBIOS.
    IsoBios,
    /// GRUB rescue image with OVMF.
    IsoUefi,
}

/// One boot of a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    pub qemu: Vec<String>,
    pub append: Vec<String>,
    pub timeout_s: u64,
    pub expect: Expect,
    pub output: Vec<String>,
    pub absent: Vec<String>,
    pub method: BootMethod,
    /// Check the job reports' JSON lines for presence and consistency.
    pub json_check: bool,
    /// `fewer = A < B`: (A, B) counter names; every job report's total of A is below B's.
    pub fewer: Vec<(String, String)>,
    /// `shares = JOB:W,... within P%`: the jobs' I/O counts in the proportion of the weights.
    pub shares: Option<Shares>,
    /// `equal = A == B`: (A, B) counter names; every job report's totals of A and B are equal.
    pub equal: Vec<(String, String)>,
    /// `hmp = TEXT => COMMAND`: monitor commands sent when a console line contains TEXT.
    pub hmp: Vec<(String, String)>,
    /// `fio = PATH`: fio job files given to the kernel as boot modules, in order.
    pub fio: Vec<String>,
}

impl Default for Boot {
    fn default() -> Self {
        Boot {
            qemu: Vec::new(),
            append: Vec::new(),
            timeout_s: 60,
            expect: Expect::Success,
            output: Vec::new(),
            absent: Vec::new(),
            method: BootMethod::Kernel,
            json_check: false,
            fewer: Vec::new(),
            shares: None,
            equal: Vec::new(),
            hmp: Vec::new(),
            fio: Vec::new(),
        }
    }
}

/// A disk image a scenario needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub name: String,
    pub bytes: u64,
    pub format: String,
}

/// An image served over NBD with one late read (`slow_disk =`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowDisk {
    /// The image (declared with `image =`) and export name.
    pub image: String,
    /// Delay writes (true) or reads (false).
    pub writes: bool,
    /// 512-byte sector a delayed request covers.
    pub sector: u64,
    /// How late, in ns.
    pub delay_ns: u64,
    /// How many covering requests per boot are delayed.
    pub count: u32,
}

/// Member disks of a RAID-0 LD whose block placement is checked after the run (`raid0_layout =`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raid0Layout {
    /// The images (declared with `image =`), in arm order.
    pub images: Vec<String>,
    /// Strip size in bytes.
    pub strip_bytes: u64,
}

/// A requirement that, when unmet, makes the scenario SKIPPED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Kvm,
    /// Only under TCG (e.g. `int3`, which kvm-pvm cannot emulate).
    Tcg,
    Tool(String),
}

/// Which QEMU binary runs a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Emulator {
    /// The installed `qemu-system-x86_64`.
    #[default]
    Stock,
    /// QEMU 7.2 with the emulated Fusion controller (`qemu/megasas-fusion/`).
    Fusion,
}

/// A named scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    pub name: String,
    pub file: String,
    pub description: String,
    pub images: Vec<Image>,
    pub slow_disks: Vec<SlowDisk>,
    pub raid0_layout: Option<Raid0Layout>,
    /// The two member images of a RAID-1 LD whose mirroring is checked after the run
    /// (`raid1_layout =`).
    pub raid1_layout: Option<[String; 2]>,
    pub requires: Vec<Requirement>,
    pub boots: Vec<Boot>,
    pub emulator: Emulator,
    /// Runs allowed before the scenario fails (`attempts = N`, default 1), and the known
    /// outside cause that makes a second one necessary (`attempts_why`): printed whenever an
    /// attempt fails and the next one runs.
    pub attempts: u32,
    pub attempts_why: String,
}

/// A syntax or value error, with file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses a size like `64M`, `8G`, `4096`, `512K` (binary units): the kernel's
/// own parser, so scenarios, `--mem` and job words agree on what a size is.
pub use workload::values::parse_size;

/// Parses one scenario file.
pub fn parse(file: &str, text: &str) -> Result<Vec<Scenario>, ParseError> {
    let mut out: Vec<Scenario> = Vec::new();
    let err = |line: usize, message: String| ParseError {
        file: file.to_string(),
        line,
        message,
    };
    for (idx, raw) in text.lines().enumerate() {
        let lineno = idx + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(err(lineno, format!("scenario name '{name}' must be one word")));
            }
            if out.iter().any(|s| s.name == name) {
                return Err(err(lineno, format!("scenario '{name}' is defined twice")));
            }
            out.push(Scenario {
                name: name.to_string(),
                file: file.to_string(),
                description: String::new(),
                images: Vec::new(),
                slow_disks: Vec::new(),
                raid0_layout: None,
                raid1_layout: None,
                requires: Vec::new(),
                boots: vec![Boot::default()],
                emulator: Emulator::Stock,
                attempts: 1,
                attempts_why: String::new(),
            });
            continue;
        }
        let Some(sc) = out.last_mut() else {
            return Err(err(lineno, "a key before the first [scenario] header".into()));
        };
        if line == "next-boot" {
            sc.boots.push(Boot::default());
            continue;
        }
        let Some((key, value_raw)) = raw.trim_start().split_once('=') else {
            return Err(err(lineno, format!("expected 'key = value', found '{line}'")));
        };
        let key = key.trim();
        let value = match key {
            "output" | "absent" => pattern_value(key, value_raw).map_err(|m| err(lineno, m))?,
            _ => value_raw.trim(),
        };
        let boot = sc.boots.last_mut().expect("a scenario always has a boot");
        match key {
            "description" => sc.description = value.to_string(),
            "qemu" => boot.qemu.extend(value.split_whitespace().map(str::to_string)),
            "append" => boot.append.extend(value.split_whitespace().map(str::to_string)),
            "timeout" => {
                boot.timeout_s = value
                    .parse()
                    .ok()
                    .filter(|t| *t > 0)
                    .ok_or_else(|| err(lineno, format!("timeout '{value}' is not a positive number of seconds")))?
            }
            "expect" => {
                boot.expect = match value {
                    "success" => Expect::Success,
                    "failure" => Expect::Failure,
                    _ => return Err(err(lineno, format!("expect '{value}': use success or failure"))),
                }
            }
            "output" => boot.output.push(value.to_string()),
            "absent" => boot.absent.push(value.to_string()),
            "fewer" => {
                let pair = value
                    .split_once('<')
                    .map(|(a, b)| (a.trim(), b.trim()))
                    .filter(|(a, b)| is_counter_name(a) && is_counter_name(b));
                let Some((a, b)) = pair else {
                    return Err(err(lineno, format!("fewer '{value}': use COUNTER < COUNTER")));
                };
                boot.fewer.push((a.to_string(), b.to_string()));
            }
            "shares" => boot.shares = Some(parse_shares(value).map_err(|m| err(lineno, m))?),
            "equal" => {
                let pair = value
                    .split_once("==")
                    .map(|(a, b)| (a.trim(), b.trim()))
                    .filter(|(a, b)| is_counter_name(a) && is_counter_name(b));
                let Some((a, b)) = pair else {
                    return Err(err(lineno, format!("equal '{value}': use COUNTER == COUNTER")));
                };
                boot.equal.push((a.to_string(), b.to_string()));
            }
            "hmp" => {
                let step = value
                    .split_once(" => ")
                    .map(|(text, command)| (text.trim(), command.trim()))
                    .filter(|(text, command)| !text.is_empty() && !command.is_empty());
                let Some((text, command)) = step else {
                    return Err(err(lineno, format!("hmp '{value}': use TEXT => COMMAND")));
                };
                boot.hmp.push((text.to_string(), command.to_string()));
            }
            "json" => {
                if value != "consistent" {
                    return Err(err(lineno, format!("json '{value}': the only check is 'consistent'")));
                }
                boot.json_check = true;
            }
            "boot" => {
                boot.method = match value {
                    "kernel" => BootMethod::Kernel,
                    "pvh" => BootMethod::Pvh,
                    "iso-bios" => BootMethod::IsoBios,
                    "iso-uefi" => BootMethod::IsoUefi,
                    _ => {
                        return Err(err(
                            lineno,
                            format!("boot '{value}': use kernel, pvh, iso-bios or iso-uefi"),
                        ));
                    }
                }
            }
            "image" => {
                let parts: Vec<&str> = value.split_whitespace().collect();
                let (name, size, format) = match parts.as_slice() {
                    [n, s] => (*n, *s, "raw"),
                    [n, s, f] => (*n, *s, *f),
                    _ => return Err(err(lineno, format!("image '{value}': use NAME SIZE [raw|qcow2|mbr]"))),
                };
                let bytes = parse_size(size)
                    .filter(|b| *b > 0)
                    .ok_or_else(|| err(lineno, format!("image size '{size}' is not a size like 64M or 8G")))?;
                if !["raw", "qcow2", "mbr"].contains(&format) {
                    return Err(err(lineno, format!("image format '{format}': use raw, qcow2 or mbr")));
                }
                sc.images.push(Image {
                    name: name.to_string(),
                    bytes,
                    format: format.to_string(),
                });
            }
            "fio" => {
                if value.is_empty() || value.contains(char::is_whitespace) {
                    return Err(err(lineno, format!("fio '{value}': one job file path without spaces")));
                }
                boot.fio.push(value.to_string());
            }
            "emulator" => {
                sc.emulator = match value {
                    "stock" => Emulator::Stock,
                    "fusion" => Emulator::Fusion,
                    _ => return Err(err(lineno, format!("emulator '{value}': use stock or fusion"))),
                }
            }
            "attempts" => {
                sc.attempts = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=3).contains(n))
                    .ok_or_else(|| err(lineno, format!("attempts '{value}': 1, 2 or 3")))?
            }
            "attempts_why" => sc.attempts_why = value.to_string(),
            "slow_disk" => sc.slow_disks.push(parse_slow_disk(value).map_err(|m| err(lineno, m))?),
            "raid0_layout" => sc.raid0_layout = Some(parse_raid0_layout(value).map_err(|m| err(lineno, m))?),
            "raid1_layout" => sc.raid1_layout = Some(parse_raid1_layout(value).map_err(|m| err(lineno, m))?),
            "requires" => sc.requires.push(match value {
                "kvm" => Requirement::Kvm,
                "tcg" => Requirement::Tcg,
                v if v.starts_with("tool:") && v.len() > 5 => Requirement::Tool(v[5..].to_string()),
                _ => return Err(err(lineno, format!("requires '{value}': use kvm, tcg or tool:PROGRAM"))),
            }),
            _ => return Err(err(lineno, format!("unknown key '{key}'"))),
        }
    }
    for sc in &out {
        for d in &sc.slow_disks {
            if !sc.images.iter().any(|i| i.name == d.image && i.format == "raw") {
                return Err(err(
                    0,
                    format!(
                        "scenario '{}': slow_disk '{}' names no raw image (declare it with 'image = {} SIZE')",
                        sc.name, d.image, d.image
                    ),
                ));
            }
        }
        let layouts = sc
            .raid0_layout
            .iter()
            .flat_map(|l| &l.images)
            .map(|n| ("raid0_layout", n));
        for (key, name) in layouts.chain(sc.raid1_layout.iter().flatten().map(|n| ("raid1_layout", n))) {
            if !sc.images.iter().any(|i| i.name == *name && i.format == "raw") {
                return Err(err(
                    0,
                    format!("scenario '{}': {key} names '{name}', which is no raw image", sc.name),
                ));
            }
        }
        if sc.attempts > 1 && sc.attempts_why.is_empty() {
            return Err(err(
                0,
                format!(
                    "scenario '{}': attempts = {} needs 'attempts_why =' (the outside cause a retry works around)",
                    sc.name, sc.attempts
                ),
            ));
        }
        for (i, b) in sc.boots.iter().enumerate() {
            if b.output.is_empty() {
                return Err(err(
                    0,
                    format!(
                        "scenario '{}' boot {} checks no output: add at least one 'output ='",
                        sc.name,
                        i + 1
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// The prefix of the kernel's periodic repeat of its verdict (for a console that connects late).
pub const VERDICT_REPEAT: &str = "BAREMQ-REPEAT ";

/// The kernel echoes its command line on this line prefix; expected output is never searched there.
pub const CMDLINE_ECHO: &str = "cmdline: \"";

/// An `output`/`absent` value, kept verbatim: only the one space that separates it from `=` is
/// dropped, so leading spaces (a zero cell of the interrupt table) stay significant. A value
/// whose spaces at the end matter is written in double quotes (`absent = "ios=1024 "`); bare
/// trailing whitespace is refused, because it is invisible and editors strip it. An empty value
/// would match anything.
fn pattern_value<'a>(key: &str, raw: &'a str) -> Result<&'a str, String> {
    let raw = raw.strip_suffix('\r').unwrap_or(raw);
    let raw = raw.strip_prefix(' ').unwrap_or(raw);
    let value = if raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"') {
        &raw[1..raw.len() - 1]
    } else if raw.ends_with(char::is_whitespace) {
        return Err(format!(
            "{key} value '{raw}' ends in whitespace: write it in double quotes if the spaces matter, else remove them"
        ));
    } else {
        raw
    };
    if value.trim().is_empty() {
        return Err(format!("{key} value is empty or blank: it would match any output"));
    }
    Ok(value)
}

/// Parses `IMAGE sector=N delay=DURATION [op=read|write] [count=N]`.
fn parse_raid0_layout(value: &str) -> Result<Raid0Layout, String> {
    const USE: &str = "raid0_layout: use IMAGE,IMAGE[,...] strip_kb=N";
    let mut words = value.split_whitespace();
    let images: Vec<String> = words.next().ok_or(USE)?.split(',').map(str::to_string).collect();
    let strip_kb = words
        .next()
        .and_then(|w| w.strip_prefix("strip_kb="))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|k| k.is_power_of_two())
        .ok_or(USE)?;
    if images.len() < 2 || images.iter().any(String::is_empty) || words.next().is_some() {
        return Err(USE.to_string());
    }
    Ok(Raid0Layout {
        images,
        strip_bytes: strip_kb * 1024,
    })
}

/// Parses `IMAGE,IMAGE` (a RAID-1 LD's two member images).
fn parse_raid1_layout(value: &str) -> Result<[String; 2], String> {
    match value.split(',').map(str::trim).collect::<Vec<_>>().as_slice() {
        [a, b] if !a.is_empty() && !b.is_empty() && a != b && !value.contains(char::is_whitespace) => {
            Ok([a.to_string(), b.to_string()])
        }
        _ => Err("raid1_layout: use IMAGE,IMAGE (the mirror's two images)".to_string()),
    }
}

fn parse_slow_disk(value: &str) -> Result<SlowDisk, String> {
    let mut words = value.split_whitespace();
    let image = words
        .next()
        .ok_or("slow_disk: use IMAGE sector=N delay=DURATION [op=read|write] [count=N]")?;
    let (mut sector, mut delay_ns, mut count, mut writes) = (None, None, 1, false);
    for w in words {
        let (k, v) = w
            .split_once('=')
            .ok_or(format!("slow_disk: '{w}' is not key=value (sector, delay, op, count)"))?;
        match k {
            "sector" => {
                sector = Some(workload::values::parse_u64(v).ok_or(format!("slow_disk: sector '{v}' is not a number"))?)
            }
            "delay" => {
                delay_ns = Some(
                    workload::values::parse_duration_ns(v)
                        .filter(|d| *d > 0)
                        .ok_or(format!("slow_disk: delay '{v}' is not a duration like 2500ms"))?,
                )
            }
            "count" => {
                count = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or(format!("slow_disk: count '{v}' is not a positive number"))?
            }
            "op" => {
                writes = match v {
                    "read" => false,
                    "write" => true,
                    _ => return Err(format!("slow_disk: op '{v}': use read or write")),
                }
            }
            _ => return Err(format!("slow_disk: unknown key '{k}' (sector, delay, op, count)")),
        }
    }
    Ok(SlowDisk {
        image: image.to_string(),
        sector: sector.ok_or("slow_disk: sector=N is required")?,
        delay_ns: delay_ns.ok_or("slow_disk: delay=DURATION is required")?,
        count,
        writes,
    })
}

/// Replaces `{nbd:NAME}` placeholders with `nbd://127.0.0.1:PORT/NAME` for the slow disks being served.
pub fn substitute_nbd(arg: &str, servers: &[(String, u16)]) -> Result<String, String> {
    let mut out = arg.to_string();
    while let Some(start) = out.find("{nbd:") {
        let end = out[start..]
            .find('}')
            .map(|e| start + e)
            .ok_or(format!("unterminated placeholder in '{arg}'"))?;
        let name = &out[start + 5..end];
        let port = servers.iter().find(|(n, _)| n == name).map(|(_, p)| *p).ok_or(format!(
            "'{arg}' names NBD export '{name}', which no slow_disk declares"
        ))?;
        out.replace_range(start..=end, &format!("nbd://127.0.0.1:{port}/{name}"));
    }
    Ok(out)
}

/// Replaces `{image:NAME}` placeholders with image paths.
pub fn substitute(arg: &str, images: &[(String, std::path::PathBuf)]) -> Result<String, String> {
    let mut out = arg.to_string();
    while let Some(start) = out.find("{image:") {
        let end = out[start..]
            .find('}')
            .map(|e| start + e)
            .ok_or(format!("unterminated placeholder in '{arg}'"))?;
        let name = &out[start + 7..end];
        let path = images
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.display().to_string())
            .ok_or(format!(
                "'{arg}' names image '{name}', which the scenario does not declare"
            ))?;
        out.replace_range(start..=end, &path);
    }
    Ok(out)
}

/// What starts each of QEMU's own lines in a boot's output (`qemu::forward_output`).
const QEMU_LINE: &str = "qemu: ";

/// Judges one boot's outcome. Returns `Err(reason)` on failure.
///
/// A boot passes on the exit status for its expected outcome, the matching verdict as the last
/// line the kernel printed (QEMU's own `qemu:` lines may follow), every `output` in order (the
/// console's expected lines among themselves, QEMU's `qemu:` lines among themselves) and no
/// `absent`, both searched outside the kernel's echo of its command line, and no `absent` that
/// names a counter or table row the output never shows (it could never fail).
pub fn judge(boot: &Boot, exit_code: Option<i32>, output: &str) -> Result<(), String> {
    let (want_code, want_line) = match boot.expect {
        Expect::Success => (33, "BAREMQ: SUCCESS"),
        Expect::Failure => (35, "BAREMQ: FAILURE"),
    };
    if exit_code != Some(want_code) {
        return Err(format!(
            "QEMU exit status {} (expected {want_code} for {:?})",
            exit_code.map_or("none (killed)".to_string(), |c| c.to_string()),
            boot.expect
        ));
    }
    // QEMU's own lines, and the kernel's repeats of its verdict for a late console
    // (`BAREMQ-REPEAT ...`, `verdict.repeat=`), may follow the verdict.
    let last = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with(QEMU_LINE) && !l.starts_with(VERDICT_REPEAT));
    match last {
        Some(l) if l.trim_end().starts_with(want_line) => {}
        _ if output.lines().any(|l| l.trim_end().starts_with(want_line)) => {
            return Err(format!(
                "'{want_line}' is not the kernel's last line (last: '{}')",
                last.unwrap_or_default()
            ));
        }
        _ => return Err(format!("no '{want_line}' line in the output")),
    }
    // Same byte offsets as `output`, the echoed words blanked: only a pattern that itself starts
    // with the echo prefix (a check of the banner) is searched in the echo.
    let searched = without_cmdline_echo(output);
    // QEMU's own lines (`qemu: `, its stderr) reach the output through another pipe than the
    // console, so their place among the console's lines is not fixed: each stream's expected
    // lines are in order among themselves.
    let (mut from_console, mut from_qemu) = (0, 0);
    for want in &boot.output {
        let hay = if want.starts_with(CMDLINE_ECHO) {
            output
        } else {
            searched.as_str()
        };
        let from = if want.starts_with(QEMU_LINE) {
            &mut from_qemu
        } else {
            &mut from_console
        };
        match hay[*from..].find(want.as_str()) {
            Some(pos) => *from += pos + want.len(),
            None => {
                return Err(if hay.contains(want.as_str()) {
                    format!("'{want}' appears, but not after the previous expected output")
                } else if output.contains(want.as_str()) {
                    format!("expected output '{want}' appears only in the command-line echo")
                } else {
                    format!("expected output '{want}' is missing")
                });
            }
        }
    }
    if let Some(bad) = boot.absent.iter().find(|a| searched.contains(a.as_str())) {
        return Err(format!("output contains '{bad}', which must be absent"));
    }
    for a in &boot.absent {
        if let Some(label) = absent_label(a)
            && !label.appears_in(&searched)
        {
            return Err(format!(
                "absent '{a}' can never match: the output never shows {label}, so the check cannot fail"
            ));
        }
    }
    if boot.json_check {
        check_json_reports(output)?;
    }
    if !boot.fewer.is_empty() {
        check_fewer(output, &boot.fewer)?;
    }
    if let Some(shares) = &boot.shares {
        check_shares(output, shares)?;
    }
    if !boot.equal.is_empty() {
        check_counters(output, &boot.equal, "equal", |x, y| x == y, "does not equal")?;
    }
    Ok(())
}

/// `output` with the words of each command-line echo line replaced by U+0001, byte for byte (the
/// echo is ASCII; anything else is kept), so a pattern that is only a word of the scenario's own
/// `append` cannot be satisfied by the echo, and offsets stay those of `output`.
fn without_cmdline_echo(output: &str) -> String {
    let mut out = String::with_capacity(output.len());
    for line in output.split_inclusive('\n') {
        match line.strip_prefix(CMDLINE_ECHO) {
            Some(words) => {
                out.push_str(CMDLINE_ECHO);
                out.extend(
                    words
                        .chars()
                        .map(|c| if c.is_ascii() && c != '\n' { '\u{1}' } else { c }),
                );
            }
            None => out.push_str(line),
        }
    }
    out
}

/// What a counter-shaped `absent` pattern needs to see in the output to be able to match at all.
#[derive(Debug, PartialEq, Eq)]
enum AbsentLabel<'a> {
    /// `name=N...`: a totals-line or key=value counter; `name=` must appear.
    Assignment(&'a str),
    /// `name   N...` or ` 0xVV:   N...`: a table row; a line whose first word is `name` must appear.
    Row(&'a str),
}

impl AbsentLabel<'_> {
    fn appears_in(&self, output: &str) -> bool {
        match *self {
            AbsentLabel::Assignment(name) => output
                .match_indices(name)
                .any(|(i, _)| output[i + name.len()..].starts_with('=') && !preceded_by_word_char(output, i)),
            AbsentLabel::Row(name) => output.lines().any(|l| l.split_whitespace().next() == Some(name)),
        }
    }
}

impl fmt::Display for AbsentLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbsentLabel::Assignment(n) => write!(f, "counter '{n}='"),
            AbsentLabel::Row(n) => write!(f, "a table row '{n}'"),
        }
    }
}

fn preceded_by_word_char(s: &str, i: usize) -> bool {
    s[..i]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The counter or row label of a counter-shaped `absent` pattern: `name=DIGITS`, or a label
/// (`name` or `0xVV:`) followed by spaces and a digit. `None` for free text (an error message
/// that must not appear legitimately never does).
fn absent_label(pattern: &str) -> Option<AbsentLabel<'_>> {
    let p = pattern.trim_start();
    let label_len = p
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(p.len());
    let (label, rest) = p.split_at(label_len);
    if label.is_empty() || !label.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '0') {
        return None;
    }
    if let Some(value) = rest.strip_prefix('=') {
        let is_counter = !label.contains(':') && value.starts_with(|c: char| c.is_ascii_digit());
        return is_counter.then_some(AbsentLabel::Assignment(label));
    }
    let after_spaces = rest.trim_start_matches(' ');
    let row = rest.len() - after_spaces.len() >= 1
        && after_spaces.starts_with(|c: char| c.is_ascii_digit())
        && (label.contains('_') || label.starts_with("0x") && label.ends_with(':'));
    row.then_some(AbsentLabel::Row(label))
}

fn is_counter_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `shares = JOB:W,JOB:W within P%`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shares {
    pub jobs: Vec<(String, u64)>,
    pub within_percent: u32,
}

fn parse_shares(value: &str) -> Result<Shares, String> {
    const USE: &str = "shares: use JOB:WEIGHT,JOB:WEIGHT[,...] within P%";
    let (list, within) = value.split_once(" within ").ok_or(USE)?;
    let within_percent: u32 = within
        .trim()
        .strip_suffix('%')
        .and_then(|p| p.parse().ok())
        .filter(|p| (1..100).contains(p))
        .ok_or(USE)?;
    let mut jobs = Vec::new();
    for item in list.split(',') {
        let (name, weight) = item.trim().split_once(':').ok_or(USE)?;
        let weight: u64 = weight.parse().ok().filter(|w| *w > 0).ok_or(USE)?;
        jobs.push((name.to_string(), weight));
    }
    if jobs.len() < 2 {
        return Err(format!("{USE}: two jobs or more"));
    }
    Ok(Shares { jobs, within_percent })
}

/// Each named job's share of the named jobs' completed I/Os is within `within_percent` of its
/// share of the weights.
fn check_shares(output: &str, shares: &Shares) -> Result<(), String> {
    let mut ios = Vec::new();
    for parsed in crate::bench::results::parse_console(output) {
        let (_, r) = parsed.map_err(|e| format!("JSON line {}: {}", e.line, e.message))?;
        ios.push((r.job.name.clone(), r.ios));
    }
    let mut counts = Vec::new();
    for (name, _) in &shares.jobs {
        let n = ios
            .iter()
            .find(|(job, _)| job == name)
            .map(|(_, n)| *n)
            .ok_or_else(|| format!("shares: no report of job {name}"))?;
        counts.push(n);
    }
    let total_ios: u64 = counts.iter().sum();
    let total_weight: u64 = shares.jobs.iter().map(|(_, w)| w).sum();
    if total_ios == 0 {
        return Err("shares: the jobs completed no I/O".into());
    }
    for ((name, weight), n) in shares.jobs.iter().zip(&counts) {
        let share = *n as f64 / total_ios as f64;
        let wanted = *weight as f64 / total_weight as f64;
        if ((share / wanted) - 1.0).abs() * 100.0 > f64::from(shares.within_percent) {
            return Err(format!(
                "shares: job {name} did {n} of {total_ios} I/Os ({:.1}%), its weight asks {:.1}% (within {}%)",
                share * 100.0,
                wanted * 100.0,
                shares.within_percent
            ));
        }
    }
    Ok(())
}

/// `fewer = A < B`: in every job report of `output`, counter A's total is below B's.
fn check_fewer(output: &str, pairs: &[(String, String)]) -> Result<(), String> {
    check_counters(output, pairs, "fewer", |x, y| x < y, "is not fewer than")
}

/// Every job report of `output` must hold `holds(A's total, B's total)` for each (A, B) of
/// `pairs`; `key` and `fails` word the errors.
fn check_counters(
    output: &str,
    pairs: &[(String, String)],
    key: &str,
    holds: impl Fn(u64, u64) -> bool,
    fails: &str,
) -> Result<(), String> {
    let reports = crate::bench::results::parse_console(output);
    if reports.is_empty() {
        return Err(format!("{key}: no BAREMQ-JSON line in the output"));
    }
    for parsed in reports {
        let (_, r) = parsed.map_err(|e| format!("JSON line {}: {}", e.line, e.message))?;
        for (a, b) in pairs {
            let total = |name: &str| {
                r.counter_total(name)
                    .ok_or_else(|| format!("job {}: no counter {name} in its report", r.job.name))
            };
            let (x, y) = (total(a)?, total(b)?);
            if !holds(x, y) {
                return Err(format!("job {}: {a} = {x} {fails} {b} = {y}", r.job.name));
            }
        }
    }
    Ok(())
}

/// Checks every `BAREMQ-JSON:` line of `output`: it parses into a complete
/// job report, completed I/Os equal IOPS x runtime within rounding, the
/// per-CPU I/Os add up, latency percentiles are ordered and counted once per
/// I/O, bandwidth matches IOPS x block size, per-CPU rows have one value per
/// CPU, and a verifying job's verify passed. At least one line is required.
pub fn check_json_reports(output: &str) -> Result<(), String> {
    let reports = crate::bench::results::parse_console(output);
    if reports.is_empty() {
        return Err("no BAREMQ-JSON line in the output".into());
    }
    for parsed in reports {
        let (raw, r) = parsed.map_err(|e| format!("JSON line {}: {}", e.line, e.message))?;
        let name = &r.job.name;
        let fail = |what: String| Err(format!("job {name}: JSON report inconsistent: {what}"));
        let secs_ceil = r.runtime_ns.div_ceil(1_000_000_000).max(1);
        let predicted = u128::from(r.iops) * u128::from(r.runtime_ns) / 1_000_000_000;
        if predicted.abs_diff(u128::from(r.ios)) > u128::from(secs_ceil) {
            return fail(format!(
                "ios {} but iops {} x runtime {} ns = {predicted}",
                r.ios, r.iops, r.runtime_ns
            ));
        }
        let per_cpu: u64 = r.per_cpu.iter().map(|c| c.ios).sum();
        if per_cpu != r.ios {
            return fail(format!("per-CPU ios add up to {per_cpu}, total is {}", r.ios));
        }
        if r.per_cpu.len() != r.job.cpus.len() {
            return fail(format!(
                "{} per-CPU rows for {} CPUs",
                r.per_cpu.len(),
                r.job.cpus.len()
            ));
        }
        if let Some(c) = r.counters.iter().find(|c| c.per_cpu.len() != r.job.cpus.len()) {
            return fail(format!(
                "counter {} has {} values for {} CPUs",
                c.name,
                c.per_cpu.len(),
                r.job.cpus.len()
            ));
        }
        let l = &r.lat_ns;
        let order = [l.min, l.p50, l.p90, l.p99, l.p99_9, l.p99_99, l.max];
        if order.windows(2).any(|w| w[0] > w[1]) || l.samples != r.ios {
            return fail(format!(
                "latency percentiles {order:?} unordered or {} samples for {} ios",
                l.samples, r.ios
            ));
        }
        if raw["job"]["bs_sizes"].is_string() {
            // Variable block sizes: bs is their unit, so bytes are a whole number of units
            // between one unit per I/O and the largest size per I/O; bandwidth is bytes / runtime.
            let bw_predicted = u128::from(r.bytes) * 1_000_000_000 / u128::from(r.runtime_ns.max(1));
            if !r.bytes.is_multiple_of(r.job.bs) || r.bytes < r.ios * r.job.bs {
                return fail(format!(
                    "bytes {} for {} ios of at least bs {}",
                    r.bytes, r.ios, r.job.bs
                ));
            }
            if r.errors == 0 && bw_predicted.abs_diff(u128::from(r.bw_bytes)) > u128::from(r.job.bs) {
                return fail(format!("bw_bytes {} but bytes / runtime = {bw_predicted}", r.bw_bytes));
            }
        } else {
            let bw_predicted = r.iops * r.job.bs;
            if r.errors == 0 && r.bw_bytes.abs_diff(bw_predicted) > r.job.bs {
                return fail(format!("bw_bytes {} but iops x bs = {bw_predicted}", r.bw_bytes));
            }
        }
        let reads = raw["read"]["ios"].as_u64();
        let writes = raw["write"]["ios"].as_u64();
        match (reads, writes) {
            (Some(rd), Some(wr)) if rd + wr == r.ios => {}
            _ => return fail(format!("read.ios {reads:?} + write.ios {writes:?} != ios {}", r.ios)),
        }
        if r.job.verify != "none" && r.verify.result != "pass" {
            return fail(format!(
                "verify={} but verify result is {}",
                r.job.verify, r.verify.result
            ));
        }
        if r.result != "pass" || r.errors != 0 {
            return fail(format!("result {} with {} errors", r.result, r.errors));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
