//! `cargo xtask peer run`: one boot of the peer guest on one scenario. The guest's `/init`
//! (`xtask/peer/guest/init`) reads its settings from the kernel command line (`peer_*` words)
//! and prints its results as lines of a small protocol; this module builds the QEMU command,
//! streams the console, keeps the protocol lines and times the boot from the host.
//!
//! Files, per run, under the cache's `results/` (TAG = `SCENARIO-ACCEL-smpN-rTAG`):
//! `TAG.cmd` (the QEMU command), `TAG.log` (the whole console), `TAG.results` (the protocol
//! lines and a `HOSTTIME` line), which `peer table` reads.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::Built;

/// The guest's jobs on a disk (`peer_jobs`).
pub const JOBS: &[&str] = &[
    "rr4k_qd1",
    "rr4k_qd32",
    "sr128k_qd8",
    "rw4k_qd32",
    "vf4k",
    "irqs",
    "rr4k_qd1_hipri",
    "rr4k_qd32_hipri",
];

/// The guest's null_blk modes (`peer_nbmodes`).
pub const NULLBLK_MODES: &[&str] = &["irq0", "irq1", "poll"];

/// The file the `megasas-shm` disk lives in.
const SHM_FILE: &str = "/dev/shm/peer-disk.raw";

/// The 8 GiB null-co backend of the `*-nullco` scenarios: reads return zeros, writes vanish.
const NULLCO: &str = "driver=null-co,node-name=d0,size=8589934592,read-zeroes=on";

/// Where the disk is and what the guest does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// megasas-gen2 with one scsi-hd on null-co: /dev/sda in the guest.
    MegasasNullco,
    /// megasas-gen2 with one scsi-hd on a raw file in /dev/shm.
    MegasasShm,
    /// QEMU nvme, one I/O queue pair per vCPU, on null-co: /dev/nvme0n1.
    NvmeNullco,
    /// No device: the guest's own null_blk.
    Nullblk,
    /// Any device given by QEMU arguments; the guest loads megaraid_sas or nvme.
    Custom,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::MegasasNullco,
        Scenario::MegasasShm,
        Scenario::NvmeNullco,
        Scenario::Nullblk,
        Scenario::Custom,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::MegasasNullco => "megasas-nullco",
            Scenario::MegasasShm => "megasas-shm",
            Scenario::NvmeNullco => "nvme-nullco",
            Scenario::Nullblk => "nullblk",
            Scenario::Custom => "custom",
        }
    }

    pub fn parse(word: &str) -> Result<Scenario, String> {
        Scenario::ALL.into_iter().find(|s| s.name() == word).ok_or_else(|| {
            let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
            format!("peer run: unknown scenario '{word}'; use one of {}", names.join(", "))
        })
    }
}

/// The driver the guest loads for a custom device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guest {
    Megasas,
    Nvme,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Tcg,
    Kvm,
}

impl Accel {
    fn name(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

/// Everything one run is told.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    pub scenario: Scenario,
    pub smp: u32,
    /// The run's own name (the `rTAG` of its files).
    pub tag: String,
    /// `None`: the guest's default jobs.
    pub jobs: Option<Vec<String>>,
    /// `None`: every null_blk mode.
    pub nbmodes: Option<Vec<String>>,
    pub runtime_s: u32,
    pub ramp_s: u32,
    pub accel: Accel,
    pub cpu: Option<String>,
    pub qemu: PathBuf,
    pub qemu_extra: Vec<String>,
    pub device_args: Vec<String>,
    pub guest: Guest,
    pub mem: String,
    pub timeout_s: u64,
    /// More kernel command-line words.
    pub append: Vec<String>,
    /// Parameters of the scenario's storage module (`name=value` or `name`), given to its
    /// `insmod`: busybox's does not read `module.name=value` words from the kernel command line.
    pub module_args: Vec<String>,
    /// The guest prints each job's fio JSON document.
    pub json: bool,
    /// megasas-shm: QEMU's cache and aio modes of the file.
    pub cache: String,
    pub aio: String,
    pub shm_bytes: u64,
    pub verbose: bool,
    pub dry_run: bool,
}

impl RunOptions {
    /// The defaults of `scenario` on `smp` vCPUs.
    pub fn new(scenario: Scenario, smp: u32, tag: &str) -> RunOptions {
        RunOptions {
            scenario,
            smp,
            tag: tag.to_string(),
            jobs: None,
            nbmodes: None,
            runtime_s: 10,
            ramp_s: 1,
            accel: Accel::Tcg,
            cpu: None,
            qemu: PathBuf::from("qemu-system-x86_64"),
            qemu_extra: Vec::new(),
            device_args: Vec::new(),
            guest: Guest::Megasas,
            mem: "1G".into(),
            timeout_s: 240,
            append: Vec::new(),
            module_args: Vec::new(),
            json: true,
            cache: "none".into(),
            aio: "io_uring".into(),
            shm_bytes: 1 << 30,
            verbose: false,
            dry_run: false,
        }
    }

    /// `SCENARIO [SMP] [TAG] [OPTIONS]`; each of JOBS, NBMODES, RUNTIME, RAMP, ACCEL, QEMU,
    /// QEMU_EXTRA, DEVICE_ARGS, GUEST and MODULE_ARGS in `env` is the default of its option.
    pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<RunOptions, String> {
        let mut positional: Vec<&str> = Vec::new();
        let mut flags: Vec<(&str, Option<&str>)> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            if let Some(flag) = a.strip_prefix("--") {
                let (name, inline) = match flag.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (flag, None),
                };
                let takes_value = !matches!(name, "no-json" | "verbose" | "dry-run");
                let value = if !takes_value {
                    if inline.is_some() {
                        return Err(format!("peer run: --{name} takes no value"));
                    }
                    None
                } else if inline.is_some() {
                    inline
                } else {
                    i += 1;
                    Some(
                        args.get(i)
                            .map(String::as_str)
                            .ok_or(format!("peer run: --{name} needs a value"))?,
                    )
                };
                flags.push((name, value));
            } else {
                positional.push(a);
            }
            i += 1;
        }
        let scenario = Scenario::parse(
            positional
                .first()
                .ok_or("peer run: give a scenario: megasas-nullco, megasas-shm, nvme-nullco, nullblk or custom")?,
        )?;
        let smp = match positional.get(1) {
            None => 1,
            Some(v) => v
                .parse()
                .ok()
                .filter(|n| (1..=255).contains(n))
                .ok_or(format!("peer run: SMP '{v}': a number of vCPUs, 1..255"))?,
        };
        let tag = positional.get(2).copied().unwrap_or("1");
        if tag.is_empty() || !tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "peer run: TAG '{tag}': letters, digits and '_' only (it names files and goes on the kernel command line)"
            ));
        }
        if let Some(extra) = positional.get(3) {
            return Err(format!(
                "peer run: unexpected '{extra}' (SCENARIO [SMP] [TAG] [OPTIONS])"
            ));
        }
        let mut o = RunOptions::new(scenario, smp, tag);
        // The environment first, then the flags over it.
        let knobs = [
            ("JOBS", "jobs"),
            ("NBMODES", "nbmodes"),
            ("RUNTIME", "runtime"),
            ("RAMP", "ramp"),
            ("ACCEL", "accel"),
            ("QEMU", "qemu"),
            ("QEMU_EXTRA", "qemu-extra"),
            ("DEVICE_ARGS", "device-args"),
            ("GUEST", "guest"),
            ("MODULE_ARGS", "module-args"),
        ];
        for (var, flag) in knobs {
            if let Some(v) = env(var).filter(|v| !v.is_empty()) {
                o.set(flag, Some(&v))
                    .map_err(|e| format!("{e} (from the environment variable {var})"))?;
            }
        }
        for (name, value) in flags {
            o.set(name, value)?;
        }
        match (scenario, o.device_args.is_empty()) {
            (Scenario::Custom, true) => {
                return Err(
                    "peer run: custom needs the disk's QEMU arguments: --device-args \"-blockdev ... -device ...\" \
                            (or DEVICE_ARGS)"
                        .into(),
                );
            }
            (Scenario::Custom, false) | (_, true) => {}
            (_, false) => {
                return Err(format!(
                    "peer run: --device-args (DEVICE_ARGS) is for the custom scenario, not {}",
                    scenario.name()
                ));
            }
        }
        Ok(o)
    }

    /// Sets one option from its flag name (without `--`).
    fn set(&mut self, name: &str, value: Option<&str>) -> Result<(), String> {
        let v = value.unwrap_or("");
        let seconds = |what: &str, min: u32| {
            v.parse::<u32>()
                .ok()
                .filter(|s| *s >= min)
                .ok_or(format!("peer run: --{what} '{v}': whole seconds, at least {min}"))
        };
        let list = |known: &[&str], what: &str| -> Result<Vec<String>, String> {
            let items: Vec<String> = v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
            if items.is_empty() {
                return Err(format!("peer run: --{what} is empty; use some of {}", known.join(",")));
            }
            match items.iter().find(|i| !known.contains(&i.as_str())) {
                Some(bad) => Err(format!(
                    "peer run: --{what}: unknown '{bad}'; use some of {}",
                    known.join(",")
                )),
                None => Ok(items),
            }
        };
        match name {
            "jobs" => self.jobs = Some(list(JOBS, "jobs")?),
            "nbmodes" => self.nbmodes = Some(list(NULLBLK_MODES, "nbmodes")?),
            "runtime" => self.runtime_s = seconds("runtime", 1)?,
            "ramp" => self.ramp_s = seconds("ramp", 0)?,
            "accel" => {
                self.accel = match v {
                    "tcg" => Accel::Tcg,
                    "kvm" => Accel::Kvm,
                    _ => return Err(format!("peer run: --accel '{v}': tcg or kvm")),
                }
            }
            "cpu" => self.cpu = Some(v.to_string()),
            "qemu" => self.qemu = PathBuf::from(v),
            "qemu-extra" => self.qemu_extra = v.split_whitespace().map(str::to_string).collect(),
            "device-args" => self.device_args = v.split_whitespace().map(str::to_string).collect(),
            "guest" => {
                self.guest = match v {
                    "megasas" => Guest::Megasas,
                    "nvme" => Guest::Nvme,
                    _ => return Err(format!("peer run: --guest '{v}': megasas or nvme")),
                }
            }
            "mem" => {
                crate::scenario::parse_size(v).ok_or(format!("peer run: --mem '{v}': a size such as 1G"))?;
                self.mem = v.to_string();
            }
            "timeout" => {
                self.timeout_s = v
                    .parse()
                    .ok()
                    .filter(|t| *t > 0)
                    .ok_or(format!("peer run: --timeout '{v}': seconds"))?
            }
            "append" => self.append = v.split_whitespace().map(str::to_string).collect(),
            "module-args" => self.module_args = module_args(v)?,
            "cache" => {
                if !matches!(v, "none" | "writeback" | "writethrough" | "directsync" | "unsafe") {
                    return Err(format!(
                        "peer run: --cache '{v}': none, writeback, writethrough, directsync or unsafe"
                    ));
                }
                self.cache = v.to_string();
            }
            "aio" => {
                if !matches!(v, "io_uring" | "native" | "threads") {
                    return Err(format!("peer run: --aio '{v}': io_uring, native or threads"));
                }
                self.aio = v.to_string();
            }
            "shm-size" => {
                self.shm_bytes = crate::scenario::parse_size(v)
                    .filter(|b| *b >= 1 << 20)
                    .ok_or(format!("peer run: --shm-size '{v}': a size of at least 1M"))?
            }
            "no-json" => self.json = false,
            "verbose" => self.verbose = true,
            "dry-run" => self.dry_run = true,
            other => {
                return Err(format!(
                    "peer run: unknown option '--{other}' (see `cargo xtask peer help`)"
                ));
            }
        }
        Ok(())
    }

    /// The run's name: `SCENARIO-ACCEL-smpN-rTAG`, with the cache and aio modes of a
    /// megasas-shm disk when they are not the defaults.
    pub fn file_tag(&self) -> String {
        let mut t = format!(
            "{}-{}-smp{}-r{}",
            self.scenario.name(),
            self.accel.name(),
            self.smp,
            self.tag
        );
        if self.scenario == Scenario::MegasasShm && (self.cache != "none" || self.aio != "io_uring") {
            t.push_str(&format!("-{}-{}", self.cache, self.aio));
        }
        t
    }

    /// What the guest's `/init` calls the scenario.
    fn guest_scenario(&self) -> &'static str {
        match self.scenario {
            Scenario::MegasasNullco | Scenario::MegasasShm => "megasas",
            Scenario::NvmeNullco => "nvme",
            Scenario::Nullblk => "nullblk",
            Scenario::Custom => match self.guest {
                Guest::Megasas => "megasas",
                Guest::Nvme => "nvme",
            },
        }
    }

    /// The kernel command line: the console, no reboot on panic, and the guest's settings.
    pub fn kernel_command_line(&self) -> String {
        let mut words = vec![
            "console=ttyS0".to_string(),
            "quiet".into(),
            "panic=-1".into(),
            format!("peer_scn={}", self.guest_scenario()),
            format!("peer_tag={}", self.file_tag()),
            format!("peer_rt={}", self.runtime_s),
            format!("peer_ramp={}", self.ramp_s),
            format!("peer_json={}", u8::from(self.json)),
        ];
        if let Some(jobs) = &self.jobs {
            words.push(format!("peer_jobs={}", jobs.join(",")));
        }
        if let Some(modes) = &self.nbmodes {
            words.push(format!("peer_nbmodes={}", modes.join(",")));
        }
        if !self.module_args.is_empty() {
            words.push(format!("peer_modargs={}", self.module_args.join(",")));
        }
        words.extend(self.append.iter().cloned());
        words.join(" ")
    }

    /// The disk's QEMU arguments.
    fn disk_args(&self) -> Vec<String> {
        let words = |s: &[&str]| s.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        match self.scenario {
            Scenario::MegasasNullco => words(&[
                "-blockdev",
                NULLCO,
                "-device",
                "megasas-gen2,id=hba0",
                "-device",
                "scsi-hd,drive=d0,bus=hba0.0",
            ]),
            Scenario::MegasasShm => vec![
                "-drive".into(),
                format!(
                    "if=none,id=d0,file={SHM_FILE},format=raw,cache={},aio={}",
                    self.cache, self.aio
                ),
                "-device".into(),
                "megasas-gen2,id=hba0".into(),
                "-device".into(),
                "scsi-hd,drive=d0,bus=hba0.0".into(),
            ],
            Scenario::NvmeNullco => vec![
                "-blockdev".into(),
                NULLCO.into(),
                "-device".into(),
                format!("nvme,id=nvme0,serial=peer0,max_ioqpairs={}", self.smp),
                "-device".into(),
                "nvme-ns,drive=d0,bus=nvme0".into(),
            ],
            Scenario::Nullblk => Vec::new(),
            Scenario::Custom => self.device_args.clone(),
        }
    }

    /// QEMU's arguments (not the binary) booting `kernel` with `initrd`.
    pub fn qemu_args(&self, kernel: &Path, initrd: &Path) -> Vec<String> {
        let mut a: Vec<String> = match self.accel {
            Accel::Tcg => vec![
                "-accel".into(),
                "tcg,thread=multi".into(),
                "-cpu".into(),
                self.cpu.clone().unwrap_or_else(|| "max".into()),
            ],
            Accel::Kvm => vec![
                "-enable-kvm".into(),
                "-cpu".into(),
                self.cpu.clone().unwrap_or_else(|| "host".into()),
            ],
        };
        a.extend(self.qemu_extra.iter().cloned());
        a.extend([
            "-smp".into(),
            self.smp.to_string(),
            "-m".into(),
            self.mem.clone(),
            "-nographic".into(),
            "-no-reboot".into(),
            "-nic".into(),
            "none".into(),
            "-kernel".into(),
            kernel.display().to_string(),
            "-initrd".into(),
            initrd.display().to_string(),
            "-append".into(),
            self.kernel_command_line(),
        ]);
        a.extend(self.disk_args());
        a
    }
}

/// The words of `--module-args`: each `name=value` or a bare `name`, the name a module
/// parameter's (letters, digits, `_`). They travel to the guest as one comma-separated kernel
/// command-line word, so a value holds no comma (no array parameters).
fn module_args(v: &str) -> Result<Vec<String>, String> {
    let words: Vec<String> = v.split_whitespace().map(str::to_string).collect();
    if words.is_empty() {
        return Err("peer run: --module-args is empty; give NAME=VALUE words, e.g. perf_mode=1".into());
    }
    for w in &words {
        let (name, value) = w.split_once('=').unwrap_or((w, ""));
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "peer run: --module-args '{w}': a parameter name is letters, digits and '_'"
            ));
        }
        if value.contains(',') || value.contains('"') {
            return Err(format!(
                "peer run: --module-args '{w}': no ',' or '\"' in a value (the words travel comma-separated)"
            ));
        }
    }
    Ok(words)
}

/// The start of the protocol line in a console line (`RESULT`, `PEER_T_*`, `PEER_ERR`,
/// `PEER_VERIFY`, `PEER_DONE`), which may follow a terminal escape the kernel's console left.
pub fn protocol_line(line: &str) -> Option<&str> {
    ["RESULT ", "PEER_T_", "PEER_ERR", "PEER_VERIFY ", "PEER_DONE"]
        .iter()
        .filter_map(|m| line.find(m))
        .min()
        .map(|i| line[i..].trim_end())
}

/// One `RESULT TAG/JOB key=value ...` line.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerResult {
    /// `TAG/JOB` (null_blk: `TAG/MODE/JOB`).
    pub name: String,
    pub values: BTreeMap<String, String>,
}

impl PeerResult {
    pub fn parse(line: &str) -> Option<PeerResult> {
        let mut words = line.split_whitespace();
        if words.next()? != "RESULT" {
            return None;
        }
        let name = words.next()?.to_string();
        let values = words
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Some(PeerResult { name, values })
    }

    /// The name without the run's tag: `rr4k_qd1`, `rr4k_qd32x2`, `irq0/rr4k_qd1`.
    pub fn job(&self) -> &str {
        self.name.split_once('/').map_or(&self.name, |(_, j)| j)
    }
}

/// Host times of a run, in milliseconds from starting QEMU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostTimes {
    pub first_console_ms: Option<u64>,
    pub init_ms: Option<u64>,
    pub fio_start_ms: Option<u64>,
    pub total_ms: u64,
}

impl HostTimes {
    pub fn line(&self, tag: &str) -> String {
        let ms = |v: Option<u64>| v.map_or("NA".to_string(), |v| v.to_string());
        format!(
            "HOSTTIME {tag} first_console_ms={} init_ms={} fio_start_ms={} total_ms={}",
            ms(self.first_console_ms),
            ms(self.init_ms),
            ms(self.fio_start_ms),
            self.total_ms
        )
    }
}

/// What one run printed.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub tag: String,
    /// The whole console.
    pub log: PathBuf,
    pub results: Vec<PeerResult>,
    pub host: HostTimes,
    /// The guest reached `PEER_DONE`.
    pub done: bool,
    /// `PEER_ERR` lines, and `PEER_VERIFY ... FAILED`.
    pub errors: Vec<String>,
    pub timed_out: bool,
}

impl Outcome {
    /// Reads the protocol lines of a console (one line at a time, as they come).
    fn take(&mut self, line: &str) {
        let Some(p) = protocol_line(line) else { return };
        if let Some(r) = PeerResult::parse(p) {
            self.results.push(r);
        } else if p.starts_with("PEER_DONE") {
            self.done = true;
        } else if p.starts_with("PEER_ERR") || (p.starts_with("PEER_VERIFY") && !p.ends_with(" ok")) {
            self.errors.push(p.to_string());
        }
    }

    /// Ok when the guest ran every job and reported nothing wrong.
    pub fn verdict(&self) -> Result<(), String> {
        if self.timed_out {
            return Err(format!("the guest did not finish in time (see {})", self.log.display()));
        }
        if !self.done {
            let why = if self.errors.is_empty() {
                String::new()
            } else {
                format!(": {}", self.errors.join(" | "))
            };
            return Err(format!(
                "the guest stopped before PEER_DONE{why} (see {})",
                self.log.display()
            ));
        }
        if !self.errors.is_empty() {
            return Err(format!(
                "the guest reported {}: {} (see {})",
                if self.errors.len() == 1 { "an error" } else { "errors" },
                self.errors.join(" | "),
                self.log.display()
            ));
        }
        Ok(())
    }
}

/// The uncompressed ELF kernel inside the compressed one (KVM boots it at its PVH entry:
/// some hosts' KVM cannot run the bzImage's decompressor), extracted once beside it.
fn vmlinux(built: &Built) -> Result<PathBuf, String> {
    let out = built.dir.join(format!("kernel/vmlinux-{}", built.kernel_version));
    if out.is_file() {
        return Ok(out);
    }
    let image =
        fs::read(&built.kernel_image).map_err(|e| format!("peer run: {}: {e}", built.kernel_image.display()))?;
    let start = image
        .windows(6)
        .position(|w| w == b"\xfd7zXZ\0")
        .ok_or("peer run: the kernel image holds no xz stream to extract the ELF kernel from")?;
    let mut child = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("peer run: cannot run xz: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let payload = image[start..].to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&payload));
    let result = child.wait_with_output().map_err(|e| format!("peer run: xz: {e}"))?;
    let _ = writer.join();
    if !result.status.success() || !result.stdout.starts_with(b"\x7fELF") {
        return Err("peer run: xz could not extract the ELF kernel".into());
    }
    fs::write(&out, result.stdout).map_err(|e| format!("peer run: {}: {e}", out.display()))?;
    Ok(out)
}

/// A fresh megasas-shm file of the asked size.
fn ensure_shm_file(bytes: u64) -> Result<(), String> {
    if fs::metadata(SHM_FILE).is_ok_and(|m| m.len() == bytes) {
        return Ok(());
    }
    let _ = fs::remove_file(SHM_FILE);
    crate::sh(Command::new("fallocate").args(["-l", &bytes.to_string(), SHM_FILE]))
        .map_err(|e| format!("peer run: creating {SHM_FILE}: {e}"))
}

/// Boots the guest; prints the protocol lines as they come and a `HOSTTIME` line; writes the
/// run's files. Err only when QEMU cannot be started or the files cannot be written.
pub fn run(built: &Built, o: &RunOptions) -> Result<Outcome, String> {
    let kernel = match o.accel {
        Accel::Tcg => built.kernel_image.clone(),
        Accel::Kvm => vmlinux(built)?,
    };
    let args = o.qemu_args(&kernel, &built.initrd);
    let tag = o.file_tag();
    let results = built.results_dir();
    fs::create_dir_all(&results).map_err(|e| format!("peer run: creating {}: {e}", results.display()))?;
    let shown = std::iter::once(o.qemu.display().to_string())
        .chain(args.iter().map(|a| shell_word(a)))
        .collect::<Vec<_>>()
        .join(" ");
    let file = |ext: &str| results.join(format!("{tag}.{ext}"));
    fs::write(file("cmd"), format!("{shown}\n")).map_err(|e| format!("peer run: writing {tag}.cmd: {e}"))?;
    if o.dry_run {
        println!("{shown}");
        return Ok(Outcome {
            tag,
            done: true,
            ..Outcome::default()
        });
    }
    if o.scenario == Scenario::MegasasShm {
        ensure_shm_file(o.shm_bytes)?;
    }
    println!("xtask: peer: running {tag}: {shown}");
    let log_path = file("log");
    let mut log = std::io::BufWriter::new(
        fs::File::create(&log_path).map_err(|e| format!("peer run: {}: {e}", log_path.display()))?,
    );
    let start = Instant::now();
    let mut child = Command::new(&o.qemu)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("peer run: cannot start {}: {e}", o.qemu.display()))?;
    // (from stdout, when read, the line)
    let (tx, rx) = mpsc::channel::<(bool, Instant, String)>();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let tx_err = tx.clone();
    let readers = [
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
                let text = String::from_utf8_lossy(&line).trim_end_matches('\r').to_string();
                if tx.send((true, Instant::now(), text)).is_err() {
                    break;
                }
            }
        }),
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
                let text = String::from_utf8_lossy(&line).trim_end().to_string();
                if tx_err.send((false, Instant::now(), text)).is_err() {
                    break;
                }
            }
        }),
    ];
    let ms = |at: Instant| u64::try_from(at.duration_since(start).as_millis()).unwrap_or(u64::MAX);
    let deadline = start + Duration::from_secs(o.timeout_s);
    let mut outcome = Outcome {
        tag: tag.clone(),
        log: log_path.clone(),
        ..Outcome::default()
    };
    let mut kept: Vec<String> = Vec::new();
    loop {
        let now = Instant::now();
        if now >= deadline {
            outcome.timed_out = true;
            break;
        }
        let (from_console, at, line) = match rx.recv_timeout(deadline - now) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                outcome.timed_out = true;
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if !from_console {
            // QEMU's own complaints (a bad -device, a missing file) matter: show them.
            println!("qemu: {line}");
            let _ = writeln!(log, "qemu: {line}");
            continue;
        }
        let _ = writeln!(log, "{line}");
        outcome.host.first_console_ms.get_or_insert(ms(at));
        if line.contains("PEER_T_INIT") {
            outcome.host.init_ms.get_or_insert(ms(at));
        }
        if line.contains("PEER_T_FIO_START") {
            outcome.host.fio_start_ms.get_or_insert(ms(at));
        }
        if o.verbose {
            println!("{line}");
        }
        outcome.take(&line);
        if let Some(p) = protocol_line(&line) {
            if !o.verbose {
                println!("{p}");
            }
            kept.push(p.to_string());
        }
    }
    if outcome.timed_out {
        let _ = child.kill();
        let _ = writeln!(log, "xtask: QEMU killed after the {} s timeout", o.timeout_s);
        println!("xtask: peer: QEMU killed after the {} s timeout", o.timeout_s);
    }
    let status = child.wait().map_err(|e| format!("peer run: waiting for QEMU: {e}"))?;
    for r in readers {
        let _ = r.join();
    }
    outcome.host.total_ms = ms(Instant::now());
    log.flush()
        .map_err(|e| format!("peer run: writing {}: {e}", log_path.display()))?;
    let host_line = outcome.host.line(&tag);
    println!("{host_line}");
    kept.push(host_line);
    fs::write(file("results"), kept.join("\n") + "\n").map_err(|e| format!("peer run: writing {tag}.results: {e}"))?;
    if !outcome.timed_out && !status.success() && !outcome.done {
        outcome.errors.push(format!("QEMU exited with {status}"));
    }
    match outcome.verdict() {
        Ok(()) => println!(
            "xtask: peer: {tag}: {} results in {}",
            outcome.results.len(),
            results.display()
        ),
        Err(e) => println!("xtask: peer: {tag} FAILED: {e}"),
    }
    Ok(outcome)
}

/// `word` as the shell would need it to read it back as one word.
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn positionals_give_scenario_cpus_and_tag() {
        let o = RunOptions::parse(&words(&["nullblk"]), &no_env).unwrap();
        assert_eq!((o.scenario, o.smp, o.tag.as_str()), (Scenario::Nullblk, 1, "1"));
        let o = RunOptions::parse(&words(&["nvme-nullco", "4", "sbs"]), &no_env).unwrap();
        assert_eq!((o.scenario, o.smp, o.tag.as_str()), (Scenario::NvmeNullco, 4, "sbs"));
        assert_eq!(o.file_tag(), "nvme-nullco-tcg-smp4-rsbs");
    }

    #[test]
    fn bad_words_are_refused_with_what_is_wrong() {
        let err = |w: &[&str]| RunOptions::parse(&words(w), &no_env).unwrap_err();
        assert!(err(&[]).contains("give a scenario"));
        assert!(err(&["sata"]).contains("unknown scenario 'sata'"));
        assert!(err(&["nullblk", "0"]).contains("SMP '0'"));
        assert!(err(&["nullblk", "two"]).contains("SMP 'two'"));
        assert!(err(&["nullblk", "1", "a/b"]).contains("TAG 'a/b'"));
        assert!(err(&["nullblk", "1", "t", "more"]).contains("unexpected 'more'"));
        assert!(err(&["nullblk", "--jobs", "rr4k_qd2"]).contains("unknown 'rr4k_qd2'"));
        assert!(err(&["nullblk", "--nbmodes", "irq2"]).contains("unknown 'irq2'"));
        assert!(err(&["nullblk", "--runtime", "0"]).contains("--runtime '0'"));
        assert!(err(&["nullblk", "--runtime"]).contains("--runtime needs a value"));
        assert!(err(&["nullblk", "--accel", "hvf"]).contains("tcg or kvm"));
        assert!(err(&["nullblk", "--frob", "1"]).contains("unknown option '--frob'"));
        assert!(err(&["nullblk", "--verbose=1"]).contains("takes no value"));
        assert!(err(&["custom"]).contains("custom needs"));
        assert!(err(&["nullblk", "--device-args", "-device x"]).contains("is for the custom scenario"));
        assert!(err(&["custom", "--device-args", "-device x", "--guest", "sata"]).contains("megasas or nvme"));
    }

    #[test]
    fn the_environment_sets_defaults_and_flags_win() {
        let env = |name: &str| match name {
            "JOBS" => Some("rr4k_qd1,vf4k".to_string()),
            "RUNTIME" => Some("2".to_string()),
            "QEMU_EXTRA" => Some("-plugin p.so,arg=out=x".to_string()),
            "RAMP" => Some(String::new()),
            _ => None,
        };
        let o = RunOptions::parse(&words(&["megasas-nullco", "--runtime=5"]), &env).unwrap();
        assert_eq!(o.jobs, Some(words(&["rr4k_qd1", "vf4k"])));
        assert_eq!(o.runtime_s, 5, "the flag beats RUNTIME");
        assert_eq!(o.ramp_s, 1, "an empty variable is unset");
        assert_eq!(o.qemu_extra, words(&["-plugin", "p.so,arg=out=x"]));
        let bad = |name: &str| (name == "ACCEL").then(|| "xen".to_string());
        let e = RunOptions::parse(&words(&["nullblk"]), &bad).unwrap_err();
        assert!(e.contains("ACCEL"), "{e}");
    }

    #[test]
    fn the_command_line_carries_the_guest_settings() {
        let mut o = RunOptions::parse(
            &words(&[
                "nullblk",
                "2",
                "x",
                "--jobs",
                "rr4k_qd1",
                "--nbmodes",
                "irq0,poll",
                "--runtime",
                "2",
                "--ramp",
                "0",
            ]),
            &no_env,
        )
        .unwrap();
        assert_eq!(
            o.kernel_command_line(),
            "console=ttyS0 quiet panic=-1 peer_scn=nullblk peer_tag=nullblk-tcg-smp2-rx peer_rt=2 peer_ramp=0 \
             peer_json=1 peer_jobs=rr4k_qd1 peer_nbmodes=irq0,poll"
        );
        o.json = false;
        o.append = words(&["no_timer_check"]);
        assert!(
            o.kernel_command_line()
                .ends_with("peer_json=0 peer_jobs=rr4k_qd1 peer_nbmodes=irq0,poll no_timer_check")
        );
        let custom = RunOptions::parse(
            &words(&[
                "custom",
                "--guest",
                "nvme",
                "--device-args",
                "-device nvme,id=n -device nvme-ns,drive=d0",
            ]),
            &no_env,
        )
        .unwrap();
        assert!(custom.kernel_command_line().contains("peer_scn=nvme "));
    }

    #[test]
    fn module_args_reach_the_guest_as_one_comma_separated_word() {
        let o = RunOptions::parse(
            &words(&["megasas-nullco", "--module-args", "perf_mode=1  poll_queues=0 verbose"]),
            &no_env,
        )
        .unwrap();
        assert_eq!(o.module_args, words(&["perf_mode=1", "poll_queues=0", "verbose"]));
        let line = o.kernel_command_line();
        assert!(
            line.contains(" peer_modargs=perf_mode=1,poll_queues=0,verbose"),
            "{line}"
        );
        // Without the option the guest is told nothing: its modules load with their defaults.
        let plain = RunOptions::parse(&words(&["megasas-nullco"]), &no_env).unwrap();
        assert!(!plain.kernel_command_line().contains("peer_modargs"));
        let env = |name: &str| (name == "MODULE_ARGS").then(|| "msix_vectors=4".to_string());
        let from_env = RunOptions::parse(&words(&["megasas-nullco"]), &env).unwrap();
        assert_eq!(from_env.module_args, words(&["msix_vectors=4"]));
        let flag_wins = RunOptions::parse(&words(&["megasas-nullco", "--module-args=perf_mode=2"]), &env).unwrap();
        assert_eq!(flag_wins.module_args, words(&["perf_mode=2"]));
    }

    #[test]
    fn module_args_that_cannot_travel_are_refused() {
        let err = |v: &str| RunOptions::parse(&words(&["nvme-nullco", "--module-args", v]), &no_env).unwrap_err();
        assert!(err("").contains("--module-args is empty"));
        assert!(err("  ").contains("--module-args is empty"));
        assert!(err("irq_affinity=1,2").contains("no ','"));
        assert!(err("name=\"a\"").contains("no ','"));
        assert!(err("=1").contains("a parameter name"));
        assert!(err("nvme.poll_queues=1").contains("'nvme.poll_queues=1'"));
    }

    #[test]
    fn qemu_gets_the_same_device_flags_as_baremq() {
        let o = RunOptions::parse(&words(&["nvme-nullco", "2", "--qemu-extra", "-plugin p.so"]), &no_env).unwrap();
        let a = o.qemu_args(Path::new("/k/vmlinuz"), Path::new("/k/initrd.cpio.gz"));
        let joined = a.join(" ");
        assert!(
            joined.starts_with(
                "-accel tcg,thread=multi -cpu max -plugin p.so -smp 2 -m 1G -nographic -no-reboot -nic none"
            )
        );
        assert!(joined.contains("-kernel /k/vmlinuz -initrd /k/initrd.cpio.gz -append console=ttyS0"));
        assert!(joined.ends_with(
            "-blockdev driver=null-co,node-name=d0,size=8589934592,read-zeroes=on -device \
             nvme,id=nvme0,serial=peer0,max_ioqpairs=2 -device nvme-ns,drive=d0,bus=nvme0"
        ));
        let shm = RunOptions::parse(
            &words(&["megasas-shm", "--cache", "writeback", "--aio", "threads"]),
            &no_env,
        )
        .unwrap();
        assert_eq!(shm.file_tag(), "megasas-shm-tcg-smp1-r1-writeback-threads");
        assert!(shm.qemu_args(Path::new("k"), Path::new("i")).join(" ").contains(
            "file=/dev/shm/peer-disk.raw,format=raw,cache=writeback,aio=threads -device megasas-gen2,id=hba0"
        ));
        let kvm = RunOptions::parse(&words(&["nullblk", "--accel", "kvm"]), &no_env).unwrap();
        assert_eq!(
            kvm.qemu_args(Path::new("k"), Path::new("i"))[..3],
            words(&["-enable-kvm", "-cpu", "host"])
        );
        assert_eq!(kvm.file_tag(), "nullblk-kvm-smp1-r1");
    }

    #[test]
    fn protocol_lines_are_found_behind_console_noise() {
        assert_eq!(
            protocol_line("\x1b[?25lPEER_T_INIT uptime=1.5 kernel=6.1\r"),
            Some("PEER_T_INIT uptime=1.5 kernel=6.1")
        );
        assert_eq!(
            protocol_line("RESULT t/rr4k_qd1 iops=5"),
            Some("RESULT t/rr4k_qd1 iops=5")
        );
        assert_eq!(
            protocol_line("[    1.0] sd 0:0:0:0: [sda] 16777216 512-byte logical blocks"),
            None
        );
        assert_eq!(protocol_line("PEER_INFO sda queue_depth=32"), None);
    }

    #[test]
    fn results_and_verdicts_come_from_the_lines() {
        let r = PeerResult::parse(
            "RESULT nullblk-tcg-smp1-r1/irq0/rr4k_qd32x1 iops=12345 bw_MBps=50.6 lat_p50_us=80.1 lat_p99_us=120.0 \
             lat_mean_us=81.0 clat_p50_us=0.0 clat_p99_us=0.0 dir=read err=0",
        )
        .unwrap();
        assert_eq!(r.job(), "irq0/rr4k_qd32x1");
        assert_eq!(r.values["iops"], "12345");
        assert_eq!(r.values["dir"], "read");
        assert!(PeerResult::parse("RESULTS x").is_none());

        let mut o = Outcome::default();
        for line in [
            "noise",
            "PEER_T_INIT uptime=1",
            "RESULT t/rr4k_qd1 iops=1",
            "PEER_VERIFY vf4k ok",
            "PEER_DONE uptime=9",
        ] {
            o.take(line);
        }
        assert_eq!(o.results.len(), 1);
        assert!(o.verdict().is_ok());
        o.take("PEER_VERIFY vf4k FAILED");
        o.take("PEER_ERR insmod x failed");
        let e = o.verdict().unwrap_err();
        assert!(e.contains("PEER_VERIFY vf4k FAILED | PEER_ERR insmod x failed"), "{e}");
        let mut unfinished = Outcome::default();
        assert!(unfinished.verdict().unwrap_err().contains("before PEER_DONE"));
        unfinished.errors.push("QEMU exited with exit status: 1".into());
        assert!(unfinished.verdict().unwrap_err().contains("PEER_DONE: QEMU exited"));
        let late = Outcome {
            timed_out: true,
            ..Outcome::default()
        };
        assert!(late.verdict().unwrap_err().contains("in time"));
    }

    #[test]
    fn the_host_line_says_na_for_what_never_came() {
        let h = HostTimes {
            first_console_ms: Some(310),
            init_ms: Some(2900),
            fio_start_ms: None,
            total_ms: 5000,
        };
        assert_eq!(
            h.line("t"),
            "HOSTTIME t first_console_ms=310 init_ms=2900 fio_start_ms=NA total_ms=5000"
        );
    }

    #[test]
    fn shell_words_quote_only_when_needed() {
        assert_eq!(shell_word("-smp"), "-smp");
        assert_eq!(shell_word("console=ttyS0 quiet"), "'console=ttyS0 quiet'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
