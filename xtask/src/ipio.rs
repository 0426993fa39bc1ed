//! `cargo xtask ipio`: the guest's work per I/O, exactly. The project's TCG plugin
//! (`xtask/scripts/tcg-profile/tbstats.c`, `mmio=on`) counts every guest instruction, memory
//! access and device-memory (MMIO) read and write of a run; two runs that differ only in job
//! length give the marginal cost of one I/O (boot and set-up cancel out). The counts do not move
//! with the host's load, so one run judges a change; a per-function table shows where
//! the instructions and the MMIO accesses are.
//!
//! ```text
//! cargo xtask ipio [--device null|md|nvme|nvme-poll|fusion|fusion-fastpath|fusion-balanced] [--qd N] [--top N] [--kernel ELF]
//!                   [--linux]
//! cargo xtask ipio --check [--budget FILE] [--device D] [--qd N] [--kernel ELF]
//! ```
//!
//! `--check` measures every line of the budget file (`xtask/ipio-budget.txt`, or those of the
//! given device and depth) and fails, naming each figure, when a count per I/O is over its
//! budget: an exact instruction budget, run by `cargo xtask test`.
//!
//! `--linux` also measures the Linux peer guest (`cargo xtask peer`) on the same device
//! ([`crate::ipio_linux`]) and prints both side by side.
//!
//! `nvme-poll` is `nvme` booted with `nvme.poll_queues=1`: its one I/O queue pair is polled (no
//! interrupt), the polled path's cost beside the interrupt path's.
//!
//! `--kernel` measures a kernel built elsewhere (another commit's, for a before/after) instead
//! of building this tree's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::qemu::{self, Accel, Firmware, Machine};
use crate::{build_kernel, root, setup};

/// The two job lengths, in 4 KiB I/Os, whose difference is measured. Size-bound jobs, not
/// timed ones: a timed job's I/O count moves with the host's load (a loaded host gave a 3 s run
/// barely more I/Os than the 1 s run, and per-second costs such as the timer tick then landed
/// on too few I/Os); a size-bound job does exactly this many whatever the load.
pub(crate) const JOB_IOS: [u64; 2] = [65_536, 196_608];

/// The job each measurement runs: 4k randread (the budget's), or a larger block, another
/// direction or stamped writes, to find what a byte costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) rw: &'static str,
    /// Block size in bytes, a multiple of 4 KiB.
    pub(crate) bs: u32,
    /// Writes stamped for verification (`--verify=crc32c --do_verify=0`): each block's header and
    /// CRC32C, and no read-back pass.
    pub(crate) stamped: bool,
}

impl Shape {
    /// The budget's job.
    pub(crate) const RANDREAD_4K: Shape = Shape {
        rw: "randread",
        bs: 4096,
        stamped: false,
    };

    /// `--rw` and `--bs` and `--stamped`, checked.
    fn new(rw: Option<&str>, bs: Option<&str>, stamped: bool) -> Result<Shape, String> {
        let rw = match rw.unwrap_or("randread") {
            "randread" => "randread",
            "read" => "read",
            "randwrite" => "randwrite",
            "write" => "write",
            other => return Err(format!("--rw '{other}': use randread, read, randwrite or write")),
        };
        let bs = match bs {
            None => 4096,
            Some(v) => {
                let digits = v.trim_end_matches(['k', 'K']);
                let kib: u32 = digits
                    .parse()
                    .ok()
                    .filter(|k: &u32| digits.len() < v.len() && *k >= 4 && k.is_multiple_of(4) && *k <= 1024)
                    .ok_or(format!(
                        "--bs '{v}': a size in KiB from 4k to 1024k, a multiple of 4k (e.g. 128k)"
                    ))?;
                kib * 1024
            }
        };
        if stamped && !rw.ends_with("write") {
            return Err(format!(
                "--stamped stamps written blocks: use it with --rw randwrite or write, not {rw}"
            ));
        }
        Ok(Shape { rw, bs, stamped })
    }

    /// `4k randread`, `128k read`, `4k randwrite stamped`.
    pub(crate) fn describe(self) -> String {
        format!(
            "{}k {}{}",
            self.bs / 1024,
            self.rw,
            if self.stamped { " stamped" } else { "" }
        )
    }

    /// The part of the run's file names after the device: empty for the budget's job.
    fn file_tag(self) -> String {
        if self == Shape::RANDREAD_4K {
            String::new()
        } else {
            format!(
                "-{}-{}k{}",
                self.rw,
                self.bs / 1024,
                if self.stamped { "-stamped" } else { "" }
            )
        }
    }

    /// The job's words for `ios` I/Os at depth `qd` on `device`: the budget's as kernel words,
    /// any other as a fio command line, which walks a 1 GiB region (the null disks hold 8 GiB)
    /// as often as the count needs.
    fn words(self, device: &str, qd: u32, ios: u64) -> String {
        let mut words = if self == Shape::RANDREAD_4K {
            format!("device={device} rw=randread bs=4k iodepth={qd} size={}k", ios * 4)
        } else {
            format!(
                "-- --name=ipio --ioengine=libaio --direct=1 --filename=/dev/{device} --rw={} --bs={}k \
                 --iodepth={qd} --size=1g --number_ios={ios}",
                self.rw,
                self.bs / 1024
            )
        };
        if self.stamped {
            words.push_str(" --verify=crc32c --do_verify=0");
        }
        words
    }
}

/// What the plugin counted in one run: per translated block (by start address), instructions run,
/// memory accesses and MMIO reads and writes.
#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    blocks: BTreeMap<u64, BlockCounts>,
    ios: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct BlockCounts {
    insns: u64,
    mem: u64,
    mmio_reads: u64,
    mmio_writes: u64,
}

impl BlockCounts {
    fn add(&mut self, other: &BlockCounts) {
        self.insns += other.insns;
        self.mem += other.mem;
        self.mmio_reads += other.mmio_reads;
        self.mmio_writes += other.mmio_writes;
    }
}

/// Reads the plugin's block file (`start insns runs mem other_page disas`) and its `.mmio`
/// companion (`start reads writes`).
fn parse_counts(blocks: &str, mmio: &str) -> Result<BTreeMap<u64, BlockCounts>, String> {
    let mut out: BTreeMap<u64, BlockCounts> = BTreeMap::new();
    let number = |s: Option<&str>, line: &str| -> Result<u64, String> {
        s.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("plugin output: bad line '{line}'"))
    };
    for line in blocks.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.split_whitespace();
        let start = f
            .next()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("plugin output: bad line '{line}'"))?;
        let insns = number(f.next(), line)?;
        let runs = number(f.next(), line)?;
        let mem = number(f.next(), line)?;
        let entry = out.entry(start).or_default();
        entry.insns += insns * runs;
        entry.mem += mem;
    }
    for line in mmio.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.split_whitespace();
        let start = f
            .next()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("plugin MMIO output: bad line '{line}'"))?;
        let entry = out.entry(start).or_default();
        entry.mmio_reads += number(f.next(), line)?;
        entry.mmio_writes += number(f.next(), line)?;
    }
    Ok(out)
}

/// Per I/O: (long run - short run) / (its I/Os - the short run's), per function and in total.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PerIo {
    /// Instructions, memory accesses, MMIO reads, MMIO writes.
    pub(crate) total: [f64; 4],
    pub(crate) functions: Vec<(String, [f64; 4])>,
}

fn marginal(short: &Counts, long: &Counts, function_of: impl Fn(u64) -> String) -> Result<PerIo, String> {
    if long.ios <= short.ios {
        return Err(format!(
            "the longer run did no more I/O ({} vs {}): nothing to divide",
            long.ios, short.ios
        ));
    }
    let ios = (long.ios - short.ios) as f64;
    let by_function = |c: &Counts| {
        let mut m: BTreeMap<String, BlockCounts> = BTreeMap::new();
        for (start, b) in &c.blocks {
            m.entry(function_of(*start)).or_default().add(b);
        }
        m
    };
    let (a, b) = (by_function(short), by_function(long));
    let as_array = |x: &BlockCounts| [x.insns as f64, x.mem as f64, x.mmio_reads as f64, x.mmio_writes as f64];
    let mut functions: Vec<(String, [f64; 4])> = b
        .iter()
        .map(|(name, after)| {
            let before = a.get(name).copied().unwrap_or_default();
            let (x, y) = (as_array(after), as_array(&before));
            (name.clone(), [0, 1, 2, 3].map(|i| (x[i] - y[i]) / ios))
        })
        .collect();
    functions.sort_by(|p, q| q.1[0].total_cmp(&p.1[0]));
    let mut total = [0.0; 4];
    for (_, v) in &functions {
        for i in 0..4 {
            total[i] += v[i];
        }
    }
    Ok(PerIo { total, functions })
}

/// The kernel's functions by address (`nm -n`), for the per-function table.
fn symbols(elf: &Path) -> Result<Vec<(u64, String)>, String> {
    let out = Command::new("nm")
        .args(["-n", "-C", "--defined-only"])
        .arg(elf)
        .output()
        .map_err(|e| format!("running nm (binutils): {e}"))?;
    let mut syms = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut p = line.splitn(3, ' ');
        let (Some(addr), Some(kind), Some(name)) = (p.next(), p.next(), p.next()) else {
            continue;
        };
        if matches!(kind, "t" | "T" | "w" | "W")
            && let Ok(a) = u64::from_str_radix(addr, 16)
        {
            // Drop the hash suffix of Rust symbols (`::h0123456789abcdef`).
            let name = match name.rfind("::h") {
                Some(i) if name.len() - i == 19 => &name[..i],
                _ => name,
            };
            syms.push((a, name.to_string()));
        }
    }
    Ok(syms)
}

fn function_at(syms: &[(u64, String)], addr: u64) -> String {
    match syms.partition_point(|(a, _)| *a <= addr) {
        0 => "(outside the kernel: firmware)".into(),
        i => syms[i - 1].1.clone(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Device {
    Null,
    Md,
    Nvme,
    /// `nvme` with its one I/O queue pair polled (`nvme.poll_queues=1`).
    NvmePoll,
    Fusion,
    /// The emulated Fusion controller as a Ventura with a RAID-0 LD over two disks in its RAID
    /// map: every 4k read goes by FastPath to a member disk.
    FusionFastPath,
    /// The emulated Fusion controller as an Aero with interrupt coalescing, in balanced mode
    /// (`megasas.perf_mode=balanced`): at QD32 the requests beyond 8 per data arm complete on the
    /// high-IOPS queues, whose interrupts the firmware coalesces.
    FusionBalanced,
}

impl Device {
    pub(crate) fn parse(s: &str) -> Result<Device, String> {
        Ok(match s {
            "null" => Device::Null,
            "md" => Device::Md,
            "nvme" => Device::Nvme,
            "nvme-poll" => Device::NvmePoll,
            "fusion" => Device::Fusion,
            "fusion-fastpath" => Device::FusionFastPath,
            "fusion-balanced" => Device::FusionBalanced,
            _ => {
                return Err(format!(
                    "--device '{s}': use null, md, nvme, nvme-poll, fusion, fusion-fastpath or fusion-balanced"
                ));
            }
        })
    }

    /// QEMU arguments (a null-co backend: the device model's cost, not a disk's) and the block
    /// device the job uses.
    pub(crate) fn qemu_and_name(self) -> (Vec<String>, &'static str) {
        let null = "driver=null-co,node-name=d0,size=8589934592,read-zeroes=on".to_string();
        let second = "driver=null-co,node-name=d1,size=8589934592,read-zeroes=on".to_string();
        let args: Vec<&str> = match self {
            Device::Null => vec![],
            Device::Md => vec![
                "-blockdev",
                &null,
                "-device",
                "megasas-gen2,id=hba0",
                "-device",
                "scsi-hd,drive=d0,bus=hba0.0",
            ],
            Device::Nvme | Device::NvmePoll => vec![
                "-blockdev",
                &null,
                "-device",
                "nvme,id=nvme0,serial=ipio0,max_ioqpairs=1",
                "-device",
                "nvme-ns,drive=d0,bus=nvme0",
            ],
            Device::Fusion | Device::FusionBalanced => vec![
                "-blockdev",
                &null,
                "-device",
                if self == Device::Fusion {
                    "megasas-fusion,id=f0,generation=invader"
                } else {
                    "megasas-fusion,id=f0,generation=aero,coalescing=on"
                },
                "-device",
                "scsi-hd,drive=d0,bus=f0.0,channel=0,scsi-id=0",
            ],
            Device::FusionFastPath => vec![
                "-blockdev",
                &null,
                "-blockdev",
                &second,
                "-device",
                "megasas-fusion,id=f0,generation=ventura,raid=raid0",
                "-device",
                "scsi-hd,drive=d0,bus=f0.0,channel=2,scsi-id=0",
                "-device",
                "scsi-hd,drive=d1,bus=f0.0,channel=2,scsi-id=1",
            ],
        };
        let name = match self {
            Device::Null => "null0",
            Device::Md => "md0",
            Device::Nvme | Device::NvmePoll => "nvme0n1",
            Device::Fusion | Device::FusionFastPath | Device::FusionBalanced => "mf0",
        };
        (args.into_iter().map(String::from).collect(), name)
    }

    /// Whether the device is the emulated Fusion controller (`cargo xtask qemu-fusion`'s QEMU).
    fn on_fusion_emulation(self) -> bool {
        matches!(self, Device::Fusion | Device::FusionFastPath | Device::FusionBalanced)
    }

    /// The kernel words the device's boot adds before the job.
    fn kernel_words(self) -> &'static [&'static str] {
        match self {
            Device::Null => &["null.size=8g"],
            Device::NvmePoll => &["nvme.poll_queues=1"],
            Device::FusionBalanced => &["megasas.perf_mode=balanced"],
            Device::Md | Device::Nvme | Device::Fusion | Device::FusionFastPath => &[],
        }
    }

    /// The block device and how its completions come, for output and file names.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Device::NvmePoll => "nvme0n1-polled",
            Device::FusionFastPath => "mf0-fastpath",
            Device::FusionBalanced => "mf0-balanced",
            other => other.qemu_and_name().1,
        }
    }
}

/// Builds the plugin (it is C; QEMU loads it) into `dir`.
fn build_plugin(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let so = dir.join("libtbstats.so");
    let src = root().join("xtask/scripts/tcg-profile/tbstats.c");
    let status = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .map_err(|e| format!("running cc for the TCG plugin: {e}"))?;
    if !status.success() {
        return Err(format!("cc failed to build {}", src.display()));
    }
    Ok(so)
}

/// The kernel, the plugin and the output folder that every measurement of one command shares.
pub(crate) struct Setup {
    kernel: PathBuf,
    plugin: PathBuf,
    dir: PathBuf,
}

impl Setup {
    /// Checks QEMU, builds this tree's release kernel unless `kernel` names one, and builds the
    /// plugin into `target/ipio/`.
    pub(crate) fn new(kernel: Option<PathBuf>) -> Result<Setup, String> {
        setup::ensure_qemu()?;
        let kernel = match kernel {
            Some(k) => k,
            None => build_kernel(false)?,
        };
        let dir = root().join("target/ipio");
        let plugin = build_plugin(&dir)?;
        Ok(Setup { kernel, plugin, dir })
    }

    /// A setup for a kernel already built (the bench's).
    pub(crate) fn for_kernel(kernel: &Path) -> Result<Setup, String> {
        Setup::new(Some(kernel.to_path_buf()))
    }

    /// The kernel's functions by address, for [`Setup::measure`]'s per-function table.
    fn symbols(&self) -> Result<Vec<(u64, String)>, String> {
        symbols(&self.kernel)
    }

    /// Runs the two size-bound jobs of `device` at queue depth `qd` under the plugin and
    /// returns the marginal cost of one I/O, per function as `function_of` names them.
    pub(crate) fn measure(
        &self,
        device: Device,
        qd: u32,
        shape: Shape,
        function_of: impl Fn(u64) -> String,
    ) -> Result<PerIo, String> {
        let binary = if device.on_fusion_emulation() {
            crate::qemufusion::ensure_binary()?
        } else {
            PathBuf::from("qemu-system-x86_64")
        };
        let (device_args, name) = device.qemu_and_name();
        let label = device.label();
        let dir = &self.dir;
        let mut runs = Vec::new();
        for job_ios in JOB_IOS {
            let tag = shape.file_tag();
            let out = dir.join(format!("{label}{tag}-qd{qd}-{job_ios}.txt"));
            let _ = std::fs::remove_file(&out);
            let _ = std::fs::remove_file(out.with_extension("txt.mmio"));
            let mut extra = vec![
                "-M".into(),
                "q35".into(),
                "-smp".into(),
                "1".into(),
                "-m".into(),
                "1G".into(),
                "-cpu".into(),
                "max".into(),
                "-plugin".into(),
                format!("{},arg=out={},arg=mmio=on", self.plugin.display(), out.display()),
            ];
            extra.extend(device_args.iter().cloned());
            let mut append: Vec<String> = device.kernel_words().iter().map(|w| w.to_string()).collect();
            append.extend(shape.words(name, qd, job_ios).split(' ').map(String::from));
            let m = Machine {
                accel: Accel::Tcg,
                firmware: Firmware::Qboot,
                kernel: Some(self.kernel.clone()),
                cdrom: None,
                append,
                extra,
            };
            let log = dir.join(format!("{label}{tag}-qd{qd}-{job_ios}.log"));
            println!(
                "xtask: ipio: {label} {} QD{qd}, a job of {job_ios} I/Os under the TCG plugin",
                shape.describe()
            );
            let run = qemu::run_with(&binary, &m.args(), Duration::from_secs(900), false, Some(&log))?;
            let ios: u64 = crate::bench::results::parse_console(&run.output)
                .into_iter()
                .filter_map(Result::ok)
                .map(|(_, r)| r.ios)
                .sum();
            if run.exit_code != Some(33) {
                return Err(format!("the run of {job_ios} I/Os failed; see {}", log.display()));
            }
            if ios != job_ios {
                return Err(format!(
                    "the job was to do {job_ios} I/Os and reported {ios}; see {}",
                    log.display()
                ));
            }
            let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()));
            let blocks = parse_counts(&read(&out)?, &read(&out.with_extension("txt.mmio")).unwrap_or_default())?;
            runs.push(Counts { blocks, ios });
        }
        marginal(&runs[0], &runs[1], function_of)
    }
}

/// The budget file `cargo xtask ipio --check` reads by default.
pub(crate) const BUDGET_FILE: &str = "xtask/ipio-budget.txt";

/// One line of the budget file: the most a device's I/O may cost at a queue depth.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Budget {
    pub(crate) device: Device,
    pub(crate) qd: u32,
    pub(crate) instructions: f64,
    pub(crate) mmio_reads: f64,
    pub(crate) mmio_writes: f64,
}

/// Parses the budget file: `#` comments, blank lines, and one line per measurement:
/// `DEVICE QD INSTRUCTIONS MMIO_READS MMIO_WRITES` (per I/O; device null, md, nvme or fusion;
/// `1,099` and `1099` alike). A device and depth listed twice is an error.
pub(crate) fn parse_budgets(text: &str) -> Result<Vec<Budget>, String> {
    let mut out: Vec<Budget> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |what: String| format!("budget line {}: {what} in '{}'", i + 1, raw.trim());
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [device, qd, insns, reads, writes] = fields.as_slice() else {
            return Err(at(format!(
                "{} fields; want DEVICE QD INSTRUCTIONS MMIO_READS MMIO_WRITES",
                fields.len()
            )));
        };
        let device = Device::parse(device).map_err(at)?;
        let qd: u32 = qd
            .parse()
            .ok()
            .filter(|q| (1..=1024).contains(q))
            .ok_or_else(|| at(format!("queue depth '{qd}' is not 1..1024")))?;
        let figure = |v: &str, what: &str| -> Result<f64, String> {
            v.replace(',', "")
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| at(format!("{what} '{v}' is not a number >= 0")))
        };
        let budget = Budget {
            device,
            qd,
            instructions: figure(insns, "instructions")?,
            mmio_reads: figure(reads, "MMIO reads")?,
            mmio_writes: figure(writes, "MMIO writes")?,
        };
        if out.iter().any(|b| b.device == device && b.qd == qd) {
            return Err(at(format!("{device:?} QD{qd} is listed twice")));
        }
        out.push(budget);
    }
    if out.is_empty() {
        return Err("the budget file lists no measurement".into());
    }
    Ok(out)
}

/// What a measurement `per_io` (instructions, memory accesses, MMIO reads, MMIO writes) spends
/// above `budget`: one line per figure over it; empty when within.
pub(crate) fn over_budget(budget: &Budget, per_io: [f64; 4]) -> Vec<String> {
    let name = budget.device.label();
    let mut over = Vec::new();
    let figures = [
        ("instructions", per_io[0], budget.instructions, 1),
        ("MMIO reads", per_io[2], budget.mmio_reads, 3),
        ("MMIO writes", per_io[3], budget.mmio_writes, 3),
    ];
    for (what, measured, most, decimals) in figures {
        if measured > most {
            over.push(format!(
                "{name} QD{}: {measured:.decimals$} {what} per I/O, over its budget of {most:.decimals$}",
                budget.qd
            ));
        }
    }
    over
}

/// `cargo xtask ipio --check`: measures every budget line (or those of `--device` / `--qd`)
/// and fails, naming each figure, when one is over.
fn check_budgets(measurer: &Setup, path: &Path, device: Option<Device>, qd: Option<u32>) -> Result<bool, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let budgets: Vec<Budget> = parse_budgets(&text)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .into_iter()
        .filter(|b| device.is_none_or(|d| d == b.device) && qd.is_none_or(|q| q == b.qd))
        .collect();
    if budgets.is_empty() {
        return Err(format!("{}: no budget line for that device and depth", path.display()));
    }
    let mut rows = Vec::new();
    let mut over = Vec::new();
    for b in &budgets {
        let t = measurer
            .measure(b.device, b.qd, Shape::RANDREAD_4K, |_| String::new())?
            .total;
        over.extend(over_budget(b, t));
        rows.push((b, t));
    }
    println!("\nipio --check ({}): per I/O, measured / budget", path.display());
    println!(
        "{:<8} {:>4} {:>21} {:>17} {:>17}",
        "device", "QD", "instructions", "MMIO reads", "MMIO writes"
    );
    for (b, t) in &rows {
        println!(
            "{:<8} {:>4} {:>10.1} / {:>8.0} {:>7.3} / {:>7.3} {:>7.3} / {:>7.3}",
            b.device.label(),
            b.qd,
            t[0],
            b.instructions,
            t[2],
            b.mmio_reads,
            t[3],
            b.mmio_writes
        );
    }
    if over.is_empty() {
        println!("ipio --check: every count within its budget");
        return Ok(true);
    }
    println!("ipio --check: FAILED");
    for o in &over {
        println!("  {o}");
    }
    Ok(false)
}

/// `cargo xtask ipio`.
pub fn cmd_ipio(args: &[String]) -> Result<bool, String> {
    let mut device = None;
    let mut qd = None;
    let mut top = 20usize;
    let mut kernel_path: Option<PathBuf> = None;
    let mut linux = false;
    let mut check = false;
    let mut budget_path = root().join(BUDGET_FILE);
    let (mut rw, mut bs, mut stamped) = (None, None, false);
    let mut options = crate::args::Options::new(args);
    while let Some(option) = options.next()? {
        match option {
            "--device" => device = Some(Device::parse(options.value()?)?),
            "--qd" => {
                let v = options.value()?;
                qd = Some(
                    v.parse()
                        .ok()
                        .filter(|q| (1..=1024).contains(q))
                        .ok_or(format!("--qd '{v}': 1..1024"))?,
                );
            }
            "--linux" => linux = true,
            "--rw" => rw = Some(options.value()?.to_string()),
            "--bs" => bs = Some(options.value()?.to_string()),
            "--stamped" => stamped = true,
            "--check" => check = true,
            "--budget" => {
                budget_path = PathBuf::from(options.value()?);
                check = true;
            }
            "--kernel" => {
                let v = PathBuf::from(options.value()?);
                if !v.is_file() {
                    return Err(format!("--kernel '{}': no such file", v.display()));
                }
                kernel_path = Some(v);
            }
            "--top" => {
                let v = options.value()?;
                top = v.parse().map_err(|_| format!("--top '{v}': a number"))?;
            }
            other => return Err(format!("ipio: unknown option '{other}'")),
        }
    }
    if check && linux {
        return Err("ipio: --check measures baremq against its budget file; leave out --linux".into());
    }
    let shape = Shape::new(rw.as_deref(), bs.as_deref(), stamped)?;
    if shape != Shape::RANDREAD_4K && (check || linux) {
        return Err(format!(
            "ipio: --rw, --bs and --stamped measure another job than the budget's and the peer's (4k randread); \
             leave them out with {}",
            if check { "--check" } else { "--linux" }
        ));
    }
    let measurer = Setup::new(kernel_path)?;
    if check {
        return check_budgets(&measurer, &budget_path, device, qd);
    }
    let (device, qd) = (device.unwrap_or(Device::Null), qd.unwrap_or(32));
    if linux && device == Device::NvmePoll {
        return Err(
            "ipio: --linux with nvme-poll: the peer measures interrupt-driven nvme only (its polled \
                    jobs are `peer run ... --jobs rr4k_qd1_hipri`)"
                .into(),
        );
    }
    let name = device.label();
    let syms = measurer.symbols()?;
    let per_io = measurer.measure(device, qd, shape, |a| function_at(&syms, a))?;
    let t = per_io.total;
    println!(
        "\nbaremq {name} {} QD{qd}, 1 vCPU: per I/O {:.0} instructions, {:.0} memory accesses, \
         {:.2} MMIO reads, {:.2} MMIO writes (marginal over runs of {} and {} I/Os){}",
        shape.describe(),
        t[0],
        t[1],
        t[2],
        t[3],
        JOB_IOS[0],
        JOB_IOS[1],
        if shape.bs > 4096 {
            format!("; per KiB {:.1} instructions", t[0] / f64::from(shape.bs / 1024))
        } else {
            String::new()
        }
    );
    println!(
        "\n{:>9} {:>8} {:>6} {:>6}  function (per I/O)",
        "insns", "mem", "mmio_r", "mmio_w"
    );
    for (f, v) in per_io.functions.iter().take(top) {
        if v[0].abs() < 0.5 && v[2].abs() < 0.005 && v[3].abs() < 0.005 {
            continue;
        }
        let short: String = f.chars().take(100).collect();
        println!("{:9.1} {:8.1} {:6.2} {:6.2}  {short}", v[0], v[1], v[2], v[3]);
    }
    let mmio: Vec<&(String, [f64; 4])> = per_io
        .functions
        .iter()
        .filter(|(_, v)| v[2] >= 0.005 || v[3] >= 0.005)
        .collect();
    if !mmio.is_empty() {
        println!("\nMMIO per I/O by function:");
        for (f, v) in mmio {
            println!("  {:6.2} reads {:6.2} writes  {f}", v[2], v[3]);
        }
    }
    println!("\n(plugin output in {})", measurer.dir.display());
    if linux {
        let l = crate::ipio_linux::measure(&measurer.plugin, &measurer.dir, name, qd)?;
        println!(
            "\nLinux 6.1 + fio (io_uring) {name} 4k randread QD{qd}, 1 vCPU: per I/O {:.0} instructions, \
             {:.2} MMIO reads, {:.2} MMIO writes",
            l[0], l[1], l[2]
        );
        println!(
            "\n| device, QD{qd} | baremq instructions | Linux instructions | Linux / baremq | baremq MMIO r / w | Linux MMIO r / w |"
        );
        println!("|---|--:|--:|--:|--:|--:|");
        println!(
            "| {name} | {:.0} | {:.0} | {:.1} | {:.2} / {:.2} | {:.2} / {:.2} |",
            t[0],
            l[0],
            l[0] / t[0],
            t[2],
            t[3],
            l[1],
            l[2]
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_keeps_the_budget_job_and_checks_the_others() {
        let plain = Shape::new(None, None, false).unwrap();
        assert_eq!(plain, Shape::RANDREAD_4K);
        assert_eq!(
            plain.words("md0", 32, 65_536),
            "device=md0 rw=randread bs=4k iodepth=32 size=262144k"
        );
        assert_eq!(plain.file_tag(), "");
        let big = Shape::new(Some("read"), Some("128k"), false).unwrap();
        assert_eq!(big.bs, 131_072);
        assert_eq!(
            big.words("nvme0n1", 8, 8192),
            "-- --name=ipio --ioengine=libaio --direct=1 --filename=/dev/nvme0n1 --rw=read --bs=128k \
             --iodepth=8 --size=1g --number_ios=8192"
        );
        assert_eq!(big.file_tag(), "-read-128k");
        let stamped = Shape::new(Some("randwrite"), None, true).unwrap();
        assert!(
            stamped
                .words("null0", 32, 10)
                .ends_with(" --verify=crc32c --do_verify=0")
        );
        assert_eq!(stamped.describe(), "4k randwrite stamped");
        for (rw, bs, stamped) in [
            (Some("randrw"), None, false),
            (None, Some("6k"), false),
            (None, Some("128"), false),
            (None, Some("2048k"), false),
            (None, Some("0k"), false),
            (Some("read"), None, true),
        ] {
            assert!(Shape::new(rw, bs, stamped).is_err(), "{rw:?} {bs:?} {stamped}");
        }
    }

    #[test]
    fn counts_join_blocks_and_mmio_by_start_address() {
        let blocks = "1000 10 5 20 0 ret\n2000 4 100 100 3 jmp\n";
        let mmio = "2000 7 9\n";
        let c = parse_counts(blocks, mmio).unwrap();
        assert_eq!(
            c[&0x1000],
            BlockCounts {
                insns: 50,
                mem: 20,
                mmio_reads: 0,
                mmio_writes: 0
            }
        );
        assert_eq!(c[&0x2000].insns, 400);
        assert_eq!((c[&0x2000].mmio_reads, c[&0x2000].mmio_writes), (7, 9));
        assert!(parse_counts("zz 1 2 3 4 x\n", "").is_err());
        assert!(parse_counts("", "1000 x 2\n").is_err());
    }

    #[test]
    fn the_marginal_cost_cancels_what_both_runs_share() {
        // Boot: 1000 instructions in f_boot in both runs; each I/O: 50 instructions in f_io and
        // one MMIO write (a doorbell).
        let run = |ios: u64| Counts {
            blocks: BTreeMap::from([
                (
                    0x100,
                    BlockCounts {
                        insns: 1000,
                        mem: 300,
                        ..Default::default()
                    },
                ),
                (
                    0x200,
                    BlockCounts {
                        insns: 50 * ios,
                        mem: 20 * ios,
                        mmio_reads: 0,
                        mmio_writes: ios,
                    },
                ),
            ]),
            ios,
        };
        let names = |a: u64| {
            if a < 0x200 {
                "f_boot".to_string()
            } else {
                "f_io".to_string()
            }
        };
        let m = marginal(&run(100), &run(400), names).unwrap();
        assert_eq!(m.total, [50.0, 20.0, 0.0, 1.0]);
        assert_eq!(m.functions[0].0, "f_io");
        assert!(marginal(&run(100), &run(100), names).is_err());
    }

    #[test]
    fn functions_are_found_by_address() {
        let syms = vec![(0x1000, "a".to_string()), (0x2000, "b".to_string())];
        assert_eq!(function_at(&syms, 0x1500), "a");
        assert_eq!(function_at(&syms, 0x2000), "b");
        assert!(function_at(&syms, 0x10).contains("outside"));
    }

    #[test]
    fn devices_parse_and_refuse_by_name() {
        assert_eq!(Device::parse("md").unwrap(), Device::Md);
        assert!(Device::parse("sata").unwrap_err().contains("sata"));
        assert_eq!(Device::Nvme.qemu_and_name().1, "nvme0n1");
        // The polled NVMe path: the same device and block device, one kernel word more.
        let polled = Device::parse("nvme-poll").unwrap();
        assert_eq!(polled.qemu_and_name(), Device::Nvme.qemu_and_name());
        assert_eq!(polled.kernel_words(), ["nvme.poll_queues=1"]);
        assert_eq!(polled.label(), "nvme0n1-polled");
        assert!(Device::parse("sata").unwrap_err().contains("nvme-poll"));
        // Balanced Fusion: the Aero with coalescing, forced into balanced mode by a kernel word.
        let balanced = Device::parse("fusion-balanced").unwrap();
        assert!(balanced.qemu_and_name().0.iter().any(|a| a.contains("coalescing=on")));
        assert_eq!(balanced.kernel_words(), ["megasas.perf_mode=balanced"]);
        assert_eq!(balanced.label(), "mf0-balanced");
        assert!(Device::parse("sata").unwrap_err().contains("fusion-balanced"));
        let b = parse_budgets("nvme 32 890 0 0.3\nnvme-poll 32 900 0 0.2\n").unwrap();
        assert_eq!((b[0].device, b[1].device), (Device::Nvme, Device::NvmePoll));
    }

    #[test]
    fn budgets_parse_with_comments_and_thousands_separators() {
        let text = "# device qd insns reads writes\n\nnull 32 1,105 0 0.005  # QD32\nmd 1 2100 0.01 1.1\n";
        let b = parse_budgets(text).unwrap();
        assert_eq!(
            b[0],
            Budget {
                device: Device::Null,
                qd: 32,
                instructions: 1105.0,
                mmio_reads: 0.0,
                mmio_writes: 0.005
            }
        );
        assert_eq!((b[1].device, b[1].qd, b[1].mmio_writes), (Device::Md, 1, 1.1));
    }

    #[test]
    fn bad_budget_lines_are_refused_by_line() {
        for (text, why) in [
            ("null 32 1105 0\n", "4 fields"),
            ("sata 32 1105 0 0\n", "sata"),
            ("null 0 1105 0 0\n", "queue depth '0'"),
            ("null 32 many 0 0\n", "instructions 'many'"),
            ("null 32 1105 -1 0\n", "MMIO reads '-1'"),
            ("null 32 1105 0 0\nnull 32 1200 0 0\n", "listed twice"),
            ("# nothing\n", "no measurement"),
        ] {
            let e = parse_budgets(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
        }
        assert!(
            parse_budgets("null 32 1105 0 0\nnull 3x 1 0 0\n")
                .unwrap_err()
                .contains("line 2")
        );
    }

    #[test]
    fn a_count_over_its_budget_is_named_and_one_within_is_not() {
        let b = parse_budgets("nvme 32 1780 0.005 0.12\n").unwrap().remove(0);
        assert!(over_budget(&b, [1780.0, 900.0, 0.0, 0.12]).is_empty());
        let over = over_budget(&b, [1780.4, 900.0, 0.01, 0.09]);
        assert_eq!(
            over,
            [
                "nvme0n1 QD32: 1780.4 instructions per I/O, over its budget of 1780.0",
                "nvme0n1 QD32: 0.010 MMIO reads per I/O, over its budget of 0.005"
            ]
        );
        assert_eq!(over_budget(&b, [1000.0, 0.0, 0.0, 0.2]).len(), 1);
    }

    #[test]
    fn the_project_budget_file_parses_and_covers_null0() {
        let text = std::fs::read_to_string(root().join(BUDGET_FILE)).unwrap();
        let b = parse_budgets(&text).unwrap();
        for qd in [1, 32] {
            assert!(b.iter().any(|x| x.device == Device::Null && x.qd == qd), "null QD{qd}");
        }
    }
}
