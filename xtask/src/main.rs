//! `cargo xtask`: build, boot, test and package baremq.
//!
//! ```text
//! cargo xtask build [--debug]
//! cargo xtask run [OPTIONS] [-- KERNEL ARGS...]     the main job
//! cargo xtask qemu-test [--filter PATTERN] [--jobs N] [--debug] [--kvm] [--list] [--strict-skips]
//! cargo xtask test                                   every check CI runs
//! cargo xtask image [--debug] [--serial-port P] [--serial-speed B] [--fio JOB.fio]... [-- KERNEL ARGS...]
//!                                                    bootable GRUB image (BIOS + UEFI)
//! cargo xtask lab [--quick] [--device null|md|nvme|all]
//! cargo xtask fuzz TARGET [-- LIBFUZZER ARGS...]     cargo-fuzz (nightly only; --list)
//! cargo xtask preflight ACPIDUMP|DIR...              what baremq would do on a box, from its acpidump
//! cargo xtask fio-out CONSOLE_LOG DIR [--output NAME] [--split]   fio's files from a console
//! cargo xtask fio-compare JOB.fio|-- WORDS [--device nvme|md] [--override KEY=VALUE]...   real fio vs baremq
//! cargo xtask qemu-fusion                            QEMU with the emulated Fusion controller
//! cargo xtask ipio [--device D] [--qd N] [--top N]   exact guest instructions and MMIO per I/O
//! cargo xtask peer build|run|table                   the Linux peer guest, for comparisons
//! ```

#![forbid(unsafe_code)]

mod acpidump;
mod args;
mod bench;
mod elfcheck;
mod fiocheck;
mod fiocompare;
mod fioout;
mod fuzz;
mod ipio;
mod ipio_linux;
mod lab;
mod nbd;
mod netboot;
mod peer;
mod preflight;
mod qemu;
mod qemufusion;
mod raid0check;
mod runner;
mod scenario;
#[cfg(test)]
mod scenario_checks;
mod serve;
mod setup;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

An option that takes a value is written `--key value` or `--key=value` (fio's form), e.g. --smp=4.

commands:
  build [--debug]                 build the kernel ELF and check its boot headers
  run [options] [-- ARGS...]      boot baremq in QEMU, stream the console, exit with the kernel's verdict
      --debug                     debug kernel (default: release)
      --kvm                       use KVM (default: TCG)
      --smp N                     CPUs (default 2; up to 255, TCG's limit)
      --mem SIZE                  memory, e.g. 512M (default 512M)
      --machine pc|q35            machine type (default q35)
      --bios qboot|seabios|ovmf   firmware (default qboot)
      --timeout S                 kill QEMU after S seconds (default 300)
      --device megasas|nvme|fusion
                                  the disk's controller: megasas-gen2 (default; the disk is md0),
                                  NVMe with one I/O queue pair and one MSI-X vector per CPU (nvme0n1),
                                  or the emulated MegaRAID Fusion (Invader) of `qemu-fusion` (mf0)
      --disk PATH                 disk image behind the controller
                                  (default target/baremq-disk.img, 256 MiB, created on first use)
      --no-disk                   no controller and no disk
      --net virtio|e1000|e1000e|none
                                  a NIC on QEMU's user network (DHCP server and gateway 10.0.2.2):
                                  virtio-net-pci, modern only (disable-legacy=on), or Intel's
                                  82540EM (e1000) or 82574L (e1000e); default none.
                                  Try it with -- test=net (docs/network.md)
      --fio JOB.fio               run a fio job file (repeatable: in order); it reaches the kernel as a
                                  boot module (-initrd); no default job then. Shorten a published job
                                  with kernel words, e.g. -- fio.override.runtime=2s (docs/fio.md)
      --output-format normal|json|json+
                                  fio's output (as fio's option): the kernel prints fio's document
      --output FILE               write that document to FILE and the fio logs beside it (as fio)
      ARGS                        kernel command line, e.g. -- log=debug test=timer; without ARGS the
                                  default job runs: mixed random read/write with crc32c verify on the
                                  disk (md0 or nvme0n1) from every CPU for about ten seconds
  serve [options] [-- ARGS...]    boot one box with fio.server=1 (docs/fleet.md) on QEMU's user network, its
                                  fio port forwarded to 127.0.0.1:PORT; prints the `fio --client` line and
                                  streams the console until Ctrl-C
      --device nvme|megasas       (default nvme)   --port P (default 8765)   --smp N (default 2, at least 2)
      --kvm | --disk PATH         ARGS: kernel words, e.g. fio.server.writable=nvme0n1
      --fio JOB.fio               a boot job the box runs (and must pass) before it serves (repeatable)
  fleet N [options] [-- ARGS...]  N such boxes on ports P..P+N-1, each with its own disk in target/fleet/;
                                  prints the `fio --client=... JOB.fio --client=... JOB.fio` line and a
                                  host list for --client=FILE (options as serve)
  fleet-check                     the real fio 3.33 client against three fio.server boxes: figures equal the
                                  box's, job after job, refusals, a busy and a killed client, All clients,
                                  the partition guard, the allow-list (run by test; no fio 3.33 fails it)
  fleet-bench [options]           figures, not a test: the netboot image's size, QEMU start to the first
                                  answered PROBE, one job's IOPS from the box's command line and through
                                  the fio client in one boot, and the interrupts per CPU after it
      --device nvme|megasas       (default nvme)   --smp N (default 2)   --kvm
      --job FILE                  (default: 4k random reads at depth 32)   --runtime S (default 10)
  qemu-test [options]             run the QEMU scenarios in tests/*.scenarios
      --filter PATTERN            only scenarios whose name contains PATTERN
      --strict-skips              a SKIPPED scenario not listed in tests/expected-skips fails the run
      --jobs N                    parallel QEMUs (default: number of cores)
      --debug | --kvm | --list
  test                            fmt, clippy, host tests, loom models, ipio --check, fleet-check,
                                  netboot --check, then qemu-test
  image [--debug] [--serial-port PORT] [--serial-speed BAUD] [--fio JOB.fio]... [-- ARGS...]
                                  GRUB rescue image (BIOS and UEFI) at target/baremq.iso; GRUB's
                                  serial line follows ARGS' console= (ttyS*/io:), else COM1 115200;
                                  each --fio file is loaded by a module2 (module) line of the
                                  Multiboot2 (1) entry
  netboot DIR [--debug] [--fio JOB.fio]... [-- ARGS...]
                                  the tree a TFTP/HTTP server serves to boot baremq from the network:
                                  the stripped kernel, the job files, boot.ipxe (iPXE, BIOS: kernel +
                                  a module per job) and GRUB's network boot (grub/x86_64-efi/core.efi
                                  and grub/grub.cfg, UEFI: multiboot2 + module2); docs/netboot.md
      --check                     boot such a tree in QEMU from its built-in TFTP server, through
                                  iPXE (SeaBIOS) and GRUB (OVMF), and check the job runs
  bench [options]                 run a benchmark matrix in QEMU; results, CSV and plots in target/bench/
      --matrix quick|smoke|full   which matrix (default quick; --list shows them)
      --repeat N | --runtime DUR | --replot | --verbose | --debug | --kvm   (see docs/bench.md)
  lab [options]                   the Linux threads' experiments (quiesce designs x CPUs x depth, completion
                                  policies) per device; table, CSV and plots in target/lab/
      --quick | --device null|md|nvme|all | --runtime DUR | --list | --replot   (see docs/lab.md)
  fuzz TARGET [-- ARGS...]        run a cargo-fuzz target for longer (nightly + cargo-fuzz; --list)
  preflight ACPIDUMP|DIR...       read the text Linux's `acpidump` printed on a box and show what baremq
                                  would do there (console, CPUs, I/O APICs, NUMA, PCI segments, AML host
                                  bridges and _PRT, clock, IOMMU, refusals), using the kernel's own ACPI
                                  code; fails if the boot would stop. A folder: one line per dump in it
                                  and a total (a fleet's dumps at once)
  fio-out CONSOLE_LOG DIR         fio's files from a captured console: the BAREMQ-FIO-JSON document
      --output NAME               (DIR/NAME, default fio.json) and every BAREMQ-LOG line's log file
      --split                     also one document per job, <rw>-<iodepth>-<numjobs>.json (bench-fio)
  ipio [options]                  guest instructions, memory accesses and MMIO reads/writes per I/O,
                                  exact (TCG plugin, two job lengths), with a per-function table
      --device null|md|nvme|nvme-poll|fusion (default null; nvme-poll: nvme.poll_queues=1)   --qd N (default 32)   --top N (default 20)
      --rw randread|read|randwrite|write   --bs SIZE (4k..1024k)   --stamped (verify-stamped writes)
                                     another job than 4k randread: what a byte costs
      --kernel ELF                   measure a kernel built elsewhere (a before/after)
      --linux                        also the Linux peer guest (`cargo xtask peer`), side by side
      --check [--budget FILE]        measure every line of xtask/ipio-budget.txt (or FILE; only
                                     --device / --qd when given) and fail, naming the figures,
                                     when a count is over its budget (run by `test`)
  fio-compare JOB.fio | -- WORDS  the same job file (or fio command-line words) by real fio (fio 3.33
                                  in the Linux peer guest of `cargo xtask peer`) and
                                  by baremq, each on a fresh
                                  disk behind the same QEMU controller: I/O counts, groups, jobs run at
                                  the same time, blocks touched; table and documents in
                                  target/fio-compare/NAME/ (docs/fio.md); fails when they differ
      --device nvme|md            (default nvme)   --smp N (default 2)   --disk-size SIZE (256M)
      --override KEY=VALUE        force a fio option for every job on both sides (e.g. runtime=2s)
      --timeout S | --out DIR
  fio-check JOB.fio|DIR...        whether fio job files would run on baremq, decided on the host by the
                                  kernel's own fio front-end (parse, meaning, refusals, CPU placement,
                                  planning), without booting: one line per file and a total; fails if
                                  any is refused
      --cpus N                    CPUs of the box (default 2)
      --device NAME[:SIZE]        a disk of the box (repeatable; default nvme0n1:64g)
      --override KEY=VALUE        force a fio option for every job (e.g. filename=/dev/nvme0n1)
  peer build | run SCENARIO [SMP] [TAG] | table   the Linux peer (Debian kernel, fio 3.33) in QEMU,
                                  cached in ~/.cache/baremq/peer (`cargo xtask peer help`; xtask/README.md)
  qemu-fusion                     build QEMU 7.2 with the emulated MegaRAID Fusion controller
                                  (qemu/megasas-fusion/, cached outside the checkout); prints the
                                  binary's path as the last line
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match cmd.as_str() {
        "build" => cmd_build(rest).map(|_| true),
        "run" => cmd_run(rest),
        "qemu-test" => runner::cmd_qemu_test(rest),
        "serve" => serve::cmd_serve(rest),
        "fleet" => serve::cmd_fleet(rest),
        "fleet-check" => serve::cmd_fleet_check(rest),
        "fleet-bench" => serve::cmd_fleet_bench(rest),
        "test" => cmd_test(rest),
        "image" => cmd_image(rest).map(|_| true),
        "bench" => bench::cmd_bench(rest),
        "lab" => lab::cmd_lab(rest),
        "fuzz" => fuzz::cmd_fuzz(rest),
        "preflight" => preflight::cmd_preflight(rest),
        "fio-out" => fioout::cmd_fio_out(rest),
        "fio-compare" => fiocompare::cmd_fio_compare(rest),
        "fio-check" => fiocheck::cmd_fio_check(rest),
        "netboot" => netboot::cmd_netboot(rest),
        "qemu-fusion" => qemufusion::cmd_qemu_fusion(rest),
        "ipio" => ipio::cmd_ipio(rest),
        "peer" => peer::cmd_peer(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(true)
        }
        other => Err(format!("unknown command '{other}'\n{USAGE}")),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Disk image `cargo xtask run` attaches by default (created on first use).
const DEFAULT_DISK: &str = "target/baremq-disk.img";
const DEFAULT_DISK_BYTES: u64 = 256 << 20;
/// The main job: mixed random I/O with verification from every CPU, completions carried back
/// to each submitting CPU (the block layer's remote policy), about ten seconds under TCG.
const DEFAULT_JOB: &str = "rw=randrw rwmixread=70 bs=4k iodepth=16 runtime=6s verify=crc32c completion=remote";

/// The controller `cargo xtask run` puts the disk behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunDevice {
    /// `megasas-gen2` with one SCSI disk: `md0`.
    Megasas,
    /// `nvme` with `max_ioqpairs` = CPUs and one MSI-X vector per queue pair plus the admin
    /// vector: `nvme0n1`.
    Nvme,
    /// The emulated MegaRAID Fusion controller (Invader) of `cargo xtask qemu-fusion`, one
    /// logical drive: `mf0`.
    Fusion,
}

impl RunDevice {
    /// The block device the default job runs on.
    fn block_device(self) -> &'static str {
        match self {
            RunDevice::Megasas => "md0",
            RunDevice::Nvme => "nvme0n1",
            RunDevice::Fusion => "mf0",
        }
    }

    /// QEMU arguments for the controller and `disk` with `cpus` CPUs.
    fn qemu_args(self, disk: &Path, cpus: u32) -> Vec<String> {
        let drive = |id: &str| format!("if=none,id={id},file={},format=raw,cache=writeback", disk.display());
        match self {
            RunDevice::Megasas => vec![
                "-device".into(),
                "megasas-gen2,id=hba0".into(),
                "-drive".into(),
                drive("d0"),
                "-device".into(),
                "scsi-hd,bus=hba0.0,drive=d0,scsi-id=0".into(),
            ],
            RunDevice::Nvme => vec![
                "-drive".into(),
                drive("nvm0"),
                "-device".into(),
                format!(
                    "nvme,id=nvme0,serial=baremq0,max_ioqpairs={cpus},msix_qsize={}",
                    cpus + 1
                ),
                "-device".into(),
                "nvme-ns,drive=nvm0,bus=nvme0,nsid=1".into(),
            ],
            RunDevice::Fusion => vec![
                "-device".into(),
                "megasas-fusion,id=fusion0,generation=invader".into(),
                "-drive".into(),
                drive("f0"),
                "-device".into(),
                "scsi-hd,bus=fusion0.0,drive=f0,channel=0,scsi-id=0".into(),
            ],
        }
    }
}

/// The NIC `cargo xtask run --net` adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunNet {
    None,
    /// `virtio-net-pci` on QEMU's user network, with only the modern (virtio 1.0+) interface.
    Virtio,
    /// QEMU's Intel 82540EM (`e1000`).
    E1000,
    /// QEMU's Intel 82574L (`e1000e`).
    E1000e,
}

impl RunNet {
    /// QEMU arguments for the NIC and its user-mode network (QEMU's DHCP server hands out
    /// 10.0.2.15; the gateway 10.0.2.2 answers pings).
    fn qemu_args(self) -> Vec<String> {
        let device = match self {
            RunNet::None => return Vec::new(),
            RunNet::Virtio => "virtio-net-pci,netdev=n0,disable-legacy=on",
            RunNet::E1000 => "e1000,netdev=n0",
            RunNet::E1000e => "e1000e,netdev=n0",
        };
        vec![
            "-netdev".into(),
            "user,id=n0".into(),
            "-device".into(),
            format!("{device},mac=52:54:00:12:34:56"),
        ]
    }
}

/// The workspace root (parent of this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Runs a command in the workspace root, echoing it; Err when it fails.
pub fn sh(cmd: &mut Command) -> Result<(), String> {
    cmd.current_dir(root());
    let shown = format!("{cmd:?}").replace('"', "");
    println!("xtask: $ {shown}");
    let status = cmd.status().map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("command failed ({status}): {shown}"))
    }
}

/// Splits `[options] [-- args]`.
fn split_dashdash(args: &[String]) -> (&[String], &[String]) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[]),
    }
}

/// Builds the kernel and checks the ELF. Returns its path.
pub fn build_kernel(debug: bool) -> Result<PathBuf, String> {
    setup::ensure_target()?;
    let mut cmd = Command::new(cargo());
    cmd.args(["build", "-p", "kernel", "--target", "x86_64-unknown-none"]);
    if !debug {
        cmd.arg("--release");
    }
    sh(&mut cmd)?;
    let path = root()
        .join("target/x86_64-unknown-none")
        .join(if debug { "debug" } else { "release" })
        .join("kernel");
    let bytes = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let report = elfcheck::check(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "xtask: kernel {} ok: entry {:#x}, {} PT_LOAD, multiboot1 at +{:#x}, multiboot2 at +{:#x}, PVH entry {:#x}",
        path.display(),
        report.entry,
        report.loads,
        report.multiboot1_offset,
        report.multiboot2_offset,
        report.pvh_entry
    );
    Ok(path)
}

fn cmd_build(args: &[String]) -> Result<PathBuf, String> {
    let mut debug = false;
    let mut options = args::Options::new(args);
    while let Some(option) = options.next()? {
        match option {
            "--debug" => debug = true,
            "--release" => debug = false,
            other => return Err(format!("build: unknown option '{other}'")),
        }
    }
    build_kernel(debug)
}

fn cmd_run(args: &[String]) -> Result<bool, String> {
    let (opts, kernel_args) = split_dashdash(args);
    let mut debug = false;
    let mut accel = qemu::Accel::Tcg;
    let mut smp = "2".to_string();
    let mut mem = "512M".to_string();
    let mut machine = "q35".to_string();
    let mut firmware = qemu::Firmware::Qboot;
    let mut timeout = 300u64;
    let mut disk: Option<PathBuf> = Some(root().join(DEFAULT_DISK));
    let mut device = RunDevice::Megasas;
    let mut net = RunNet::None;
    let mut fio_files: Vec<PathBuf> = Vec::new();
    let mut output_format: Option<String> = None;
    let mut output: Option<PathBuf> = None;
    let mut options = args::Options::new(opts);
    while let Some(option) = options.next()? {
        match option {
            "--debug" => debug = true,
            "--release" => debug = false,
            "--kvm" => accel = qemu::Accel::Kvm,
            "--tcg" => accel = qemu::Accel::Tcg,
            "--smp" => {
                let v = options.value()?;
                v.parse::<u32>()
                    .ok()
                    .filter(|n| (1..=255).contains(n))
                    .ok_or(format!("--smp '{v}': use 1..255 (TCG's limit)"))?;
                smp = v.to_string();
            }
            "--mem" => {
                let v = options.value()?;
                scenario::parse_size(v).ok_or(format!("--mem '{v}': use a size like 512M or 2G"))?;
                mem = v.to_string();
            }
            "--machine" => {
                let v = options.value()?;
                if v != "pc" && v != "q35" {
                    return Err(format!("--machine '{v}': use pc or q35"));
                }
                machine = v.to_string();
            }
            "--bios" => {
                firmware = match options.value()? {
                    "qboot" => qemu::Firmware::Qboot,
                    "seabios" => qemu::Firmware::SeaBios,
                    "ovmf" => {
                        return Err(
                            "--bios ovmf needs a GRUB image: use `cargo xtask image` (see docs/real-box.md)".into(),
                        );
                    }
                    v => return Err(format!("--bios '{v}': use qboot or seabios")),
                }
            }
            "--timeout" => {
                let v = options.value()?;
                timeout = v
                    .parse()
                    .ok()
                    .filter(|t| *t > 0)
                    .ok_or(format!("--timeout '{v}': seconds, > 0"))?;
            }
            "--disk" => disk = Some(PathBuf::from(options.value()?)),
            "--no-disk" => disk = None,
            "--fio" => fio_files.push(PathBuf::from(options.value()?)),
            "--output-format" => {
                let v = options.value()?;
                if !matches!(v, "normal" | "json" | "json+" | "json,normal" | "json+,normal") {
                    return Err(format!("--output-format '{v}': use normal, json or json+ (as fio)"));
                }
                output_format = Some(v.to_string());
            }
            "--output" => output = Some(PathBuf::from(options.value()?)),
            "--device" => {
                device = match options.value()? {
                    "megasas" => RunDevice::Megasas,
                    "nvme" => RunDevice::Nvme,
                    "fusion" => RunDevice::Fusion,
                    v => return Err(format!("--device '{v}': use megasas, nvme or fusion")),
                }
            }
            "--net" => {
                net = match options.value()? {
                    "virtio" => RunNet::Virtio,
                    "e1000" => RunNet::E1000,
                    "e1000e" => RunNet::E1000e,
                    "none" => RunNet::None,
                    v => return Err(format!("--net '{v}': use virtio, e1000, e1000e or none")),
                }
            }
            other => return Err(format!("run: unknown option '{other}' (see `cargo xtask help`)")),
        }
    }
    setup::ensure_qemu()?;
    let kernel = build_kernel(debug)?;
    let cpus: u32 = smp.parse().map_err(|_| format!("--smp '{smp}': use 1..255"))?;
    let mut extra = vec!["-M".into(), machine, "-smp".into(), smp, "-m".into(), mem];
    let mut append = kernel_args.to_vec();
    if let Some(path) = &disk {
        if !path.exists() {
            println!(
                "xtask: creating the default disk image {} ({} MiB)",
                path.display(),
                DEFAULT_DISK_BYTES >> 20
            );
            qemu::create_image(path, DEFAULT_DISK_BYTES, "raw")?;
        }
        extra.extend(device.qemu_args(path, cpus));
        if append.is_empty() && fio_files.is_empty() {
            let job = format!("{DEFAULT_JOB} device={}", device.block_device());
            append = job.split_whitespace().map(str::to_string).collect();
            println!("xtask: default job: {job}");
        }
    }
    extra.extend(net.qemu_args());
    extra.extend(qemu::fio_initrd_args(&fio_files, false)?);
    if output.is_some() && output_format.as_deref().is_none_or(|f| f.starts_with("normal")) {
        return Err("--output FILE takes fio's JSON document: add --output-format json or json+".into());
    }
    if let Some(format) = &output_format {
        // fio's run options go to the kernel as fio command-line words (after a standalone --).
        if !append.iter().any(|w| w == "--") {
            append.push("--".into());
        }
        append.push(format!("--output-format={format}"));
    }
    let m = qemu::Machine {
        accel,
        firmware,
        kernel: Some(kernel),
        cdrom: None,
        append,
        extra,
    };
    let args = m.args();
    // The Fusion controller lives in a QEMU of its own (built on first use, then cached).
    let binary = if disk.is_some() && device == RunDevice::Fusion {
        qemufusion::ensure_binary()?
    } else {
        PathBuf::from("qemu-system-x86_64")
    };
    println!("xtask: {} {}", binary.display(), args.join(" "));
    let out = qemu::run_with(
        &binary,
        &args,
        Duration::from_secs(timeout),
        true,
        Some(&root().join("target/run.log")),
    )?;
    if let Some(file) = &output {
        for written in fioout::save_run_outputs(&out.output, file)? {
            println!("xtask: wrote {}", written.display());
        }
    }
    let verdict = scenario::judge(
        &scenario::Boot {
            output: vec![],
            ..scenario::Boot::default()
        },
        out.exit_code,
        &out.output,
    );
    match verdict {
        Ok(()) => {
            println!("xtask: run succeeded in {:.2} s", out.elapsed.as_secs_f64());
            Ok(true)
        }
        Err(why) => {
            println!("xtask: run FAILED: {why}");
            Ok(false)
        }
    }
}

fn cmd_test(args: &[String]) -> Result<bool, String> {
    if let Some(a) = args.first() {
        return Err(format!("test: unknown option '{a}'"));
    }
    setup::ensure_target()?;
    setup::ensure_test_tools()?;
    // Every crate that runs on bare metal: the kernel and each library it links.
    let bare_metal = [
        "kernel",
        "boot",
        "bootinfo",
        "values",
        "crc32c",
        "disks",
        "done",
        "fioserver",
        "fleet",
        "blk",
        "platform",
        "workload",
        "devhal",
        "drvkit",
        "nullblk",
        "megasas",
        "megasas-fusion",
        "nvme",
        "net",
        "virtio-net",
        "e1000",
    ];
    sh(Command::new(cargo()).args(["fmt", "--all", "--check"]))?;
    sh(Command::new(cargo()).args(["clippy", "--all-targets", "--", "-D", "warnings"]))?;
    sh(Command::new(cargo())
        .args(["clippy", "--target", "x86_64-unknown-none"])
        .args(bare_metal.iter().flat_map(|c| ["-p", c]))
        .args(["--", "-D", "warnings"]))?;
    sh(Command::new(cargo()).args(["test"]))?;
    runner::run_loom()?;
    // The exact work per I/O against xtask/ipio-budget.txt (TCG plugin, docs/bench.md); the
    // scenarios run whatever it finds, and both verdicts count.
    let budgets_ok = ipio::cmd_ipio(&["--check".to_string()])?;
    // The stock fio client driving fio.server boxes (a missing fio fails it, saying SKIPPED).
    let fleet_ok = serve::cmd_fleet_check(&[])?;
    // A rack's way to boot: iPXE (BIOS) and GRUB (UEFI) from QEMU's TFTP server.
    let netboot_ok = netboot::cmd_netboot(&["--check".to_string()])?;
    // A skip not listed in tests/expected-skips fails the run: a scenario that silently never runs
    // tests nothing.
    let scenarios_ok = runner::cmd_qemu_test(&["--strict-skips".to_string()])?;
    Ok(budgets_ok && fleet_ok && netboot_ok && scenarios_ok)
}

fn cmd_image(args: &[String]) -> Result<PathBuf, String> {
    let (opts, kernel_args) = split_dashdash(args);
    let kernel_args = kernel_args.join(" ");
    let mut debug = false;
    let mut serial = setup::GrubSerial::from_kernel_args(&kernel_args);
    let mut fio_files: Vec<PathBuf> = Vec::new();
    let mut options = args::Options::new(opts);
    while let Some(option) = options.next()? {
        match option {
            "--debug" => debug = true,
            "--serial-port" => {
                let v = options.value()?;
                let port = match v {
                    "ttyS0" | "com1" => Some(0x3f8),
                    "ttyS1" | "com2" => Some(0x2f8),
                    _ => v
                        .strip_prefix("0x")
                        .map_or_else(|| v.parse().ok(), |hex| u16::from_str_radix(hex, 16).ok()),
                };
                serial.port = port.filter(|p| *p != 0).ok_or(format!(
                    "--serial-port '{v}': an I/O port like 0x2f8, or ttyS0, ttyS1, com1, com2"
                ))?;
            }
            "--serial-speed" => {
                let v = options.value()?;
                serial.speed = v
                    .parse()
                    .ok()
                    .filter(|b| bootinfo::console::divisor(bootinfo::console::PC_UART_CLOCK_HZ, *b).is_some())
                    .ok_or(format!(
                        "--serial-speed '{v}': a baud rate such as 115200, 57600 or 9600"
                    ))?;
            }
            "--fio" => {
                let file = PathBuf::from(options.value()?);
                if !file.is_file() {
                    return Err(format!("image: fio job file {} does not exist", file.display()));
                }
                fio_files.push(file);
            }
            other => return Err(format!("image: unknown option '{other}'")),
        }
    }
    let kernel = build_kernel(debug)?;
    let out = root().join("target/baremq.iso");
    setup::make_grub_image_on(&kernel, &out, &kernel_args, 5, serial, &fio_files)?;
    println!(
        "xtask: wrote {} (GRUB, BIOS and UEFI; GRUB's menu on `{}`; the kernel's console: {})",
        out.display(),
        serial.command(),
        kernel_args
            .split_whitespace()
            .find(|w| w.starts_with("console="))
            .unwrap_or("console=auto (SPCR, else COM1 and COM2)")
    );
    Ok(out)
}
