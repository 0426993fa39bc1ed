//! `cargo xtask ipio`: the guest's work per I/O, exactly. The project's TCG plugin
//! (`xtask/scripts/tcg-profile/tbstats.c`, `mmio=on`) counts every guest instruction, memory
//! access and device-memory (MMIO) read and write of a run; two runs that differ only in job
//! length give the marginal cost of one I/O (boot and set-up cancel out). The counts do not move
//! with the host's load, so one run judges a change (issue 22); a per-function table shows where
//! the instructions and the MMIO accesses are.
//!
//! ```text
//! cargo xtask ipio [--device null|md|nvme|fusion] [--qd N] [--top N] [--kernel ELF]
//!                   [--linux [--peer run-peer.sh]]
//! ```
//!
//! `--linux` also measures the Linux peer guest on the same device ([`crate::ipio_linux`]) and
//! prints both side by side.
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
const JOB_IOS: [u64; 2] = [65_536, 196_608];

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
struct PerIo {
    total: [f64; 4],
    functions: Vec<(String, [f64; 4])>,
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
enum Device {
    Null,
    Md,
    Nvme,
    Fusion,
}

impl Device {
    fn parse(s: &str) -> Result<Device, String> {
        Ok(match s {
            "null" => Device::Null,
            "md" => Device::Md,
            "nvme" => Device::Nvme,
            "fusion" => Device::Fusion,
            _ => return Err(format!("--device '{s}': use null, md, nvme or fusion")),
        })
    }

    /// QEMU arguments (a null-co backend: the device model's cost, not a disk's) and the block
    /// device the job uses.
    fn qemu_and_name(self) -> (Vec<String>, &'static str) {
        let null = "driver=null-co,node-name=d0,size=8589934592,read-zeroes=on".to_string();
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
            Device::Nvme => vec![
                "-blockdev",
                &null,
                "-device",
                "nvme,id=nvme0,serial=ipio0,max_ioqpairs=1",
                "-device",
                "nvme-ns,drive=d0,bus=nvme0",
            ],
            Device::Fusion => vec![
                "-blockdev",
                &null,
                "-device",
                "megasas-fusion,id=f0,generation=invader",
                "-device",
                "scsi-hd,drive=d0,bus=f0.0,channel=0,scsi-id=0",
            ],
        };
        let name = match self {
            Device::Null => "null0",
            Device::Md => "md0",
            Device::Nvme => "nvme0n1",
            Device::Fusion => "mf0",
        };
        (args.into_iter().map(String::from).collect(), name)
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

/// `cargo xtask ipio`.
pub fn cmd_ipio(args: &[String]) -> Result<bool, String> {
    let mut device = Device::Null;
    let mut qd = 32u32;
    let mut top = 20usize;
    let mut kernel_path: Option<PathBuf> = None;
    let mut linux = false;
    // Where `xtask/scripts/side-by-side.sh` finds the peer too (`PEER_TOOLS` overrides).
    let mut peer = std::env::var_os("PEER_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/tools/peer"))
        .join("run-peer.sh");
    let mut i = 0;
    while i < args.len() {
        let value = |i: &mut usize| -> Result<&String, String> {
            *i += 1;
            args.get(*i).ok_or_else(|| format!("{} needs a value", args[*i - 1]))
        };
        match args[i].as_str() {
            "--device" => device = Device::parse(value(&mut i)?)?,
            "--qd" => {
                let v = value(&mut i)?;
                qd = v
                    .parse()
                    .ok()
                    .filter(|q| (1..=1024).contains(q))
                    .ok_or(format!("--qd '{v}': 1..1024"))?;
            }
            "--linux" => linux = true,
            "--peer" => peer = PathBuf::from(value(&mut i)?),
            "--kernel" => {
                let v = PathBuf::from(value(&mut i)?);
                if !v.is_file() {
                    return Err(format!("--kernel '{}': no such file", v.display()));
                }
                kernel_path = Some(v);
            }
            "--top" => {
                let v = value(&mut i)?;
                top = v.parse().map_err(|_| format!("--top '{v}': a number"))?;
            }
            other => return Err(format!("ipio: unknown option '{other}'")),
        }
        i += 1;
    }
    setup::ensure_qemu()?;
    let kernel = match kernel_path {
        Some(k) => k,
        None => build_kernel(false)?,
    };
    let dir = root().join("target/ipio");
    let plugin = build_plugin(&dir)?;
    let binary = if device == Device::Fusion {
        crate::qemufusion::ensure_binary()?
    } else {
        PathBuf::from("qemu-system-x86_64")
    };
    let (device_args, name) = device.qemu_and_name();
    let mut runs = Vec::new();
    for job_ios in JOB_IOS {
        let out = dir.join(format!("{name}-qd{qd}-{job_ios}.txt"));
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
            format!("{},arg=out={},arg=mmio=on", plugin.display(), out.display()),
        ];
        extra.extend(device_args.iter().cloned());
        let mut append: Vec<String> = Vec::new();
        if device == Device::Null {
            append.push("null.size=8g".into());
        }
        append.extend(
            format!("device={name} rw=randread bs=4k iodepth={qd} size={}k", job_ios * 4)
                .split(' ')
                .map(String::from),
        );
        let m = Machine {
            accel: Accel::Tcg,
            firmware: Firmware::Qboot,
            kernel: Some(kernel.clone()),
            cdrom: None,
            append,
            extra,
        };
        let log = dir.join(format!("{name}-qd{qd}-{job_ios}.log"));
        println!("xtask: ipio: {name} QD{qd}, a job of {job_ios} I/Os under the TCG plugin");
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
    let syms = symbols(&kernel)?;
    let per_io = marginal(&runs[0], &runs[1], |a| function_at(&syms, a))?;
    let t = per_io.total;
    println!(
        "\nbaremq {name} 4k randread QD{qd}, 1 vCPU: per I/O {:.0} instructions, {:.0} memory accesses, \
         {:.2} MMIO reads, {:.2} MMIO writes (marginal over runs of {} and {} I/Os)",
        t[0], t[1], t[2], t[3], runs[0].ios, runs[1].ios
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
    println!("\n(plugin output in {})", dir.display());
    if linux {
        let l = crate::ipio_linux::measure(&peer, &plugin, &dir, name, qd)?;
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
    }
}
