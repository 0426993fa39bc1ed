//! `cargo xtask qemu-test`: runs every scenario in `tests/*.scenarios` in
//! parallel, one line per scenario, and a closing `N passed, N failed, N skipped`.

use crate::nbd;
use crate::qemu::{self, Accel, Firmware, Machine};
use crate::scenario::{self, BootMethod, Requirement, Scenario};
use crate::{build_kernel, cargo, root, setup, sh};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail(String),
    Skipped(String),
}

/// Loads every scenario file, sorted by file then definition order.
fn load_scenarios() -> Result<Vec<Scenario>, String> {
    let dir = root().join("tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "scenarios"))
        .collect();
    files.sort();
    let mut all = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("reading {}: {e}", f.display()))?;
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        for s in scenario::parse(&name, &text).map_err(|e| e.to_string())? {
            if all.iter().any(|o: &Scenario| o.name == s.name) {
                return Err(format!("scenario '{}' is defined in two files", s.name));
            }
            all.push(s);
        }
    }
    Ok(all)
}

fn unmet_requirement(sc: &Scenario, accel: Accel) -> Option<String> {
    for r in &sc.requires {
        match r {
            Requirement::Kvm if accel != Accel::Kvm => return Some("needs --kvm".into()),
            Requirement::Tcg if accel != Accel::Tcg => return Some("needs TCG (kvm-pvm cannot run it)".into()),
            Requirement::Tool(t) if !setup::have_program(t) => return Some(format!("'{t}' is not installed")),
            _ => {}
        }
    }
    if sc.boots.iter().any(|b| b.method == BootMethod::IsoUefi) && !Path::new(qemu::OVMF).exists() {
        return Some(format!("{} is missing (apt-get install ovmf)", qemu::OVMF));
    }
    None
}

fn run_scenario(sc: &Scenario, kernel: &Path, accel: Accel) -> Verdict {
    if let Some(why) = unmet_requirement(sc, accel) {
        return Verdict::Skipped(why);
    }
    let dir = root().join("target/qemu-test").join(&sc.name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut images = Vec::new();
    for img in &sc.images {
        let path = dir.join(format!(
            "{}.{}",
            img.name,
            if img.format == "raw" { "img" } else { "qcow2" }
        ));
        if let Err(e) = qemu::create_image(&path, img.bytes, &img.format) {
            return Verdict::Fail(e);
        }
        images.push((img.name.clone(), path));
    }
    // Slow disks are served for the whole scenario (every boot connects anew).
    let mut servers = Vec::new();
    for d in &sc.slow_disks {
        let Some((_, path)) = images.iter().find(|(n, _)| *n == d.image) else {
            return Verdict::Fail(format!("slow_disk '{}' names no image", d.image));
        };
        let rule = nbd::SlowRule {
            op: if d.writes {
                nbd::SlowOp::Write
            } else {
                nbd::SlowOp::Read
            },
            sector: d.sector,
            delay: Duration::from_nanos(d.delay_ns),
            count: d.count,
        };
        match nbd::NbdServer::start(path, &d.image, rule) {
            Ok(s) => servers.push((d.image.clone(), s)),
            Err(e) => return Verdict::Fail(e),
        }
    }
    let ports: Vec<(String, u16)> = servers.iter().map(|(n, s)| (n.clone(), s.port())).collect();
    for (n, boot) in sc.boots.iter().enumerate() {
        let extra: Result<Vec<String>, String> = boot
            .qemu
            .iter()
            .map(|a| scenario::substitute(a, &images).and_then(|a| scenario::substitute_nbd(&a, &ports)))
            .collect();
        let extra = match extra {
            Ok(e) => e,
            Err(e) => return Verdict::Fail(e),
        };
        let mut m = Machine {
            accel,
            firmware: Firmware::Qboot,
            kernel: Some(kernel.to_path_buf()),
            cdrom: None,
            append: boot.append.clone(),
            extra,
        };
        if boot.method == BootMethod::Pvh {
            match pvh_only_copy(kernel, &dir.join("kernel-pvh")) {
                Ok(k) => m.kernel = Some(k),
                Err(e) => return Verdict::Fail(e),
            }
        } else if boot.method != BootMethod::Kernel {
            let iso = dir.join(format!("boot{}.iso", n + 1));
            if let Err(e) = setup::make_grub_image(kernel, &iso, &boot.append.join(" "), 0) {
                return Verdict::Fail(e);
            }
            m.kernel = None;
            m.cdrom = Some(iso);
            m.firmware = if boot.method == BootMethod::IsoUefi {
                Firmware::Ovmf
            } else {
                Firmware::SeaBios
            };
        }
        let log = dir.join(format!("boot{}.log", n + 1));
        let binary = match sc.emulator {
            scenario::Emulator::Stock => PathBuf::from("qemu-system-x86_64"),
            scenario::Emulator::Fusion => match crate::qemufusion::shared_binary() {
                Ok(b) => b,
                Err(e) => return Verdict::Fail(e),
            },
        };
        let out = match qemu::run_with(
            &binary,
            &m.args(),
            Duration::from_secs(boot.timeout_s),
            false,
            Some(&log),
        ) {
            Ok(o) => o,
            Err(e) => return Verdict::Fail(e),
        };
        if let Err(why) = scenario::judge(boot, out.exit_code, &out.output) {
            let tail: Vec<&str> = out.output.lines().rev().take(25).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let boot_no = if sc.boots.len() > 1 {
                format!(" (boot {})", n + 1)
            } else {
                String::new()
            };
            return Verdict::Fail(format!(
                "{why}{boot_no}; log {}\n      | {}",
                log.display(),
                tail.join("\n      | ")
            ));
        }
    }
    // A slow disk that delayed nothing tested no recovery: the scenario is wrong, not passing.
    for ((name, server), d) in servers.iter().zip(&sc.slow_disks) {
        if server.delayed() == 0 {
            return Verdict::Fail(format!(
                "slow_disk {name}: no {} covered sector {}, so nothing was delayed",
                if d.writes { "write" } else { "read" },
                d.sector
            ));
        }
    }
    Verdict::Pass
}

/// Writes a copy of `kernel` whose Multiboot1 magic is zeroed: QEMU looks for
/// Multiboot1 before the PVH note, so the copy boots through PVH.
fn pvh_only_copy(kernel: &Path, out: &Path) -> Result<PathBuf, String> {
    let mut bytes = std::fs::read(kernel).map_err(|e| format!("reading {}: {e}", kernel.display()))?;
    let report = crate::elfcheck::check(&bytes)?;
    bytes[report.multiboot1_offset..report.multiboot1_offset + 4].fill(0);
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    std::fs::write(out, &bytes).map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok(out.to_path_buf())
}

/// `cargo xtask qemu-test`. Ok(true) when nothing failed.
pub fn cmd_qemu_test(args: &[String]) -> Result<bool, String> {
    let mut filter: Option<String> = None;
    let mut jobs = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let mut debug = false;
    let mut accel = Accel::Tcg;
    let mut list = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--filter" => {
                i += 1;
                filter = Some(args.get(i).ok_or("--filter needs a pattern")?.clone());
            }
            "--jobs" => {
                i += 1;
                let v = args.get(i).ok_or("--jobs needs a number")?;
                jobs = v
                    .parse()
                    .ok()
                    .filter(|j| *j > 0)
                    .ok_or(format!("--jobs '{v}': a number > 0"))?;
            }
            "--debug" => debug = true,
            "--kvm" => accel = Accel::Kvm,
            "--list" => list = true,
            other => return Err(format!("qemu-test: unknown option '{other}'")),
        }
        i += 1;
    }
    let mut scenarios = load_scenarios()?;
    if let Some(f) = &filter {
        scenarios.retain(|s| s.name.contains(f.as_str()));
        if scenarios.is_empty() {
            return Err(format!("no scenario name contains '{f}'"));
        }
    }
    if list {
        for s in &scenarios {
            println!("{:32} {} ({})", s.name, s.description, s.file);
        }
        return Ok(true);
    }
    setup::ensure_qemu()?;
    let kernel = build_kernel(debug)?;
    if scenarios.iter().any(|s| s.emulator == scenario::Emulator::Fusion) {
        // Built (or found in the cache) once, before the scenarios compete for the CPUs; a
        // failure fails those scenarios, it never skips them.
        match crate::qemufusion::shared_binary() {
            Ok(b) => println!("xtask: Fusion scenarios use {}", b.display()),
            Err(e) => println!("xtask: the Fusion QEMU did not build: {e}"),
        }
    }
    println!("xtask: running {} scenarios, {} at a time", scenarios.len(), jobs);
    let total = scenarios.len();
    let queue = Arc::new(Mutex::new(scenarios.into_iter().collect::<VecDeque<_>>()));
    let results = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let workers: Vec<_> = (0..jobs.min(total))
        .map(|_| {
            let (queue, results, kernel) = (queue.clone(), results.clone(), kernel.clone());
            std::thread::spawn(move || {
                loop {
                    let Some(sc) = queue.lock().expect("queue lock").pop_front() else {
                        break;
                    };
                    let t0 = Instant::now();
                    let v = run_scenario(&sc, &kernel, accel);
                    let secs = t0.elapsed().as_secs_f64();
                    let line = match &v {
                        Verdict::Pass => format!("PASS    {:40} {secs:6.2}s", sc.name),
                        Verdict::Skipped(w) => format!("SKIPPED {:40} {secs:6.2}s  {w}", sc.name),
                        Verdict::Fail(w) => format!("FAIL    {:40} {secs:6.2}s  {w}", sc.name),
                    };
                    let mut r = results.lock().expect("results lock");
                    println!("{line}");
                    r.push(v);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "a scenario worker panicked")?;
    }
    let r = results.lock().expect("results lock");
    let passed = r.iter().filter(|v| **v == Verdict::Pass).count();
    let skipped = r.iter().filter(|v| matches!(v, Verdict::Skipped(_))).count();
    let failed = r.len() - passed - skipped;
    println!("qemu-test finished in {:.1}s", started.elapsed().as_secs_f64());
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    Ok(failed == 0)
}

/// Runs the loom models of the lock-free code (separate target dir: the
/// `--cfg loom` flag rebuilds every dependency): the block layer's models
/// (quiesce vs insert, completion lists, tags, freeze, done board, host tags, timeouts,
/// Busy restart, sleeping lock), the MegaRAID reply-queue reaper gate and tag state machine,
/// and the Fusion SMID slot protocol.
pub fn run_loom() -> Result<(), String> {
    let model = root().join("kernel/blk/tests/loom.rs");
    if !model.exists() {
        return Err(format!("{} is missing: the loom models must exist", model.display()));
    }
    let loom = |args: &[&str]| {
        sh(Command::new(cargo())
            .env("RUSTFLAGS", "--cfg loom")
            .env("LOOM_MAX_PREEMPTIONS", "3")
            .args(["test", "--release", "--target-dir", "target/loom"])
            .args(args))
    };
    loom(&["-p", "blk", "--test", "loom"])?;
    loom(&["-p", "megasas", "--lib", "loom"])?;
    loom(&["-p", "nvme", "--lib", "loom"])?;
    loom(&["-p", "megasas-fusion", "--lib", "loom"])
}
