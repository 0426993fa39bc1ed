//! `cargo xtask qemu-test`: runs every scenario in `tests/*.scenarios` in
//! parallel, one line per scenario, and a closing `N passed, N failed, N skipped`.

use crate::nbd;
use crate::qemu::{self, Accel, Firmware, Machine};
use crate::scenario::{self, BootMethod, Requirement, Scenario};
use crate::{build_kernel, cargo, root, setup};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// The RAID-0 placement check runs only here, after a scenario's boots.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail(String),
    Skipped(String),
}

/// Loads every scenario file, sorted by file then definition order.
pub(crate) fn load_scenarios() -> Result<Vec<Scenario>, String> {
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
    // A `-kernel` boot without its own `-bios` runs on qboot; falling back to SeaBIOS unseen would
    // change what the scenario tests (qboot assigns no PCI resources, SeaBIOS does).
    let on_qboot = |b: &scenario::Boot| {
        matches!(b.method, BootMethod::Kernel | BootMethod::Pvh) && !b.qemu.iter().any(|a| a == "-bios")
    };
    if sc.boots.iter().any(on_qboot) && !Path::new(qemu::QBOOT).exists() {
        return Some(format!("{} is missing (it comes with qemu-system-x86)", qemu::QBOOT));
    }
    None
}

/// `tests/expected-skips`: the scenarios that may be SKIPPED on the machines CI runs on, one
/// `NAME: why` per line (`#` comments). With `--strict-skips` any other skip fails the run.
fn load_expected_skips() -> Result<Vec<(String, String)>, String> {
    let path = root().join("tests/expected-skips");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    parse_expected_skips(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn parse_expected_skips(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(':') {
            Some((name, why)) if !name.trim().is_empty() && !why.trim().is_empty() => {
                out.push((name.trim().to_string(), why.trim().to_string()))
            }
            _ => return Err(format!("line {}: use 'SCENARIO: why it may be skipped'", i + 1)),
        }
    }
    Ok(out)
}

/// Runs `sc` up to its `attempts`: a failed attempt's files are kept beside the next one's
/// (`target/qemu-test/NAME.attemptN`) and the failure is printed with the scenario's
/// `attempts_why`. Returns the last verdict and, when an attempt failed, a note for the
/// result line.
fn run_with_attempts(sc: &Scenario, kernel: &Path, accel: Accel) -> (Verdict, String) {
    let mut note = String::new();
    let mut attempt = 1;
    loop {
        let v = run_scenario(sc, kernel, accel);
        let Verdict::Fail(why) = &v else {
            return (v, note);
        };
        if attempt >= sc.attempts {
            return (v, note);
        }
        let dir = root().join("target/qemu-test").join(&sc.name);
        let kept = root()
            .join("target/qemu-test")
            .join(format!("{}.attempt{attempt}", sc.name));
        let _ = std::fs::remove_dir_all(&kept);
        let _ = std::fs::rename(&dir, &kept);
        println!(
            "RETRY   {:40} attempt {attempt} of {} failed: {why} (files in {}); known outside cause: {}",
            sc.name,
            sc.attempts,
            kept.display(),
            sc.attempts_why
        );
        note = format!(
            "  (attempt {} of {}; attempt {attempt} failed, see RETRY above)",
            attempt + 1,
            sc.attempts
        );
        attempt += 1;
    }
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
            if img.format == "qcow2" { "qcow2" } else { "img" }
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
        // `fio = PATH`: job files as boot modules (paths from the repository root).
        let fio_files: Vec<PathBuf> = boot.fio.iter().map(|f| root().join(f)).collect();
        if boot.method == BootMethod::Kernel || boot.method == BootMethod::Pvh {
            match qemu::fio_initrd_args(&fio_files, boot.method == BootMethod::Pvh) {
                Ok(args) => m.extra.extend(args),
                Err(e) => return Verdict::Fail(e),
            }
        }
        if boot.method == BootMethod::Pvh {
            match pvh_only_copy(kernel, &dir.join("kernel-pvh")) {
                Ok(k) => m.kernel = Some(k),
                Err(e) => return Verdict::Fail(e),
            }
        } else if boot.method != BootMethod::Kernel {
            let iso = dir.join(format!("boot{}.iso", n + 1));
            if let Err(e) = setup::make_grub_image_with_modules(kernel, &iso, &boot.append.join(" "), 0, &fio_files) {
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
        let script = (!boot.hmp.is_empty()).then(|| qemu::MonitorScript {
            socket: dir.join(format!("monitor{}.sock", n + 1)),
            steps: boot.hmp.clone(),
        });
        if let Some(script) = &script {
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return Verdict::Fail(format!("creating {}: {e}", dir.display()));
            }
            m.extra.push("-monitor".into());
            m.extra.push(format!("unix:{},server,nowait", script.socket.display()));
        }
        let timeout = Duration::from_secs(boot.timeout_s);
        let binary = match sc.emulator {
            scenario::Emulator::Stock => PathBuf::from("qemu-system-x86_64"),
            scenario::Emulator::Fusion => match crate::qemufusion::shared_binary() {
                Ok(b) => b,
                Err(e) => return Verdict::Fail(e),
            },
        };
        let out = match qemu::run_scripted_with(&binary, &m.args(), timeout, false, Some(&log), script.as_ref()) {
            Ok(o) => o,
            Err(e) => return Verdict::Fail(e),
        };
        if let Some((text, _)) = boot.hmp.get(out.monitor_sent) {
            return Verdict::Fail(format!(
                "hmp: no console line contained '{text}', so its command was never sent; log {}",
                log.display()
            ));
        }
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
    // The RAID-0 LD's blocks, read back from its member disks by striping alone.
    if let Some(layout) = &sc.raid0_layout {
        let paths: Vec<&Path> = layout
            .images
            .iter()
            .filter_map(|name| images.iter().find(|(n, _)| n == name).map(|(_, p)| p.as_path()))
            .collect();
        if let Err(why) = crate::raid0check::check_files(&paths, layout.strip_bytes) {
            return Verdict::Fail(why);
        }
    }
    // The RAID-1 LD's blocks, read back from both member disks: the same, at the same place.
    if let Some(names) = &sc.raid1_layout {
        let paths: Vec<&Path> = names
            .iter()
            .filter_map(|name| images.iter().find(|(n, _)| n == name).map(|(_, p)| p.as_path()))
            .collect();
        if let Err(why) = crate::raid0check::check_mirror_files(&paths) {
            return Verdict::Fail(why);
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
    let mut strict_skips = false;
    let mut options = crate::args::Options::new(args);
    while let Some(option) = options.next()? {
        match option {
            "--filter" => filter = Some(options.value()?.to_string()),
            "--jobs" => {
                let v = options.value()?;
                jobs = v
                    .parse()
                    .ok()
                    .filter(|j| *j > 0)
                    .ok_or(format!("--jobs '{v}': a number > 0"))?;
            }
            "--debug" => debug = true,
            "--kvm" => accel = Accel::Kvm,
            "--list" => list = true,
            "--strict-skips" => strict_skips = true,
            other => return Err(format!("qemu-test: unknown option '{other}'")),
        }
    }
    let mut scenarios = load_scenarios()?;
    let expected_skips = load_expected_skips()?;
    if let Some((name, _)) = expected_skips
        .iter()
        .find(|(n, _)| !scenarios.iter().any(|s| s.name == *n))
    {
        return Err(format!(
            "tests/expected-skips names '{name}', which no scenario file defines"
        ));
    }
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
                    let (v, retried) = run_with_attempts(&sc, &kernel, accel);
                    let secs = t0.elapsed().as_secs_f64();
                    let line = match &v {
                        Verdict::Pass => format!("PASS    {:40} {secs:6.2}s{retried}", sc.name),
                        Verdict::Skipped(w) => format!("SKIPPED {:40} {secs:6.2}s  {w}", sc.name),
                        Verdict::Fail(w) => format!("FAIL    {:40} {secs:6.2}s  {w}", sc.name),
                    };
                    let mut r = results.lock().expect("results lock");
                    println!("{line}");
                    r.push((sc.name.clone(), v));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "a scenario worker panicked")?;
    }
    let r = results.lock().expect("results lock");
    let passed = r.iter().filter(|(_, v)| *v == Verdict::Pass).count();
    let skips: Vec<(&String, &String)> = r
        .iter()
        .filter_map(|(n, v)| match v {
            Verdict::Skipped(why) => Some((n, why)),
            _ => None,
        })
        .collect();
    let failed = r.len() - passed - skips.len();
    let mut unexpected = 0;
    if !skips.is_empty() {
        println!("skipped scenarios:");
        for (name, why) in &skips {
            match expected_skips.iter().find(|(n, _)| n == *name) {
                Some((_, expected)) => println!("  {name}: {why} (expected here: {expected})"),
                None if strict_skips => {
                    unexpected += 1;
                    println!("  {name}: {why} -- NOT in tests/expected-skips: counted as a failure");
                }
                None => println!("  {name}: {why}"),
            }
        }
    }
    println!("qemu-test finished in {:.1}s", started.elapsed().as_secs_f64());
    println!(
        "{passed} passed, {} failed, {} skipped",
        failed + unexpected,
        skips.len() - unexpected
    );
    Ok(failed + unexpected == 0)
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
    let mut total = 0;
    for args in [
        &["-p", "blk", "--test", "loom"][..],
        &["-p", "done", "--test", "loom"],
        &["-p", "drvkit", "--test", "loom"],
        &["-p", "megasas", "--lib", "loom"],
        &["-p", "nvme", "--lib", "loom"],
        &["-p", "megasas-fusion", "--lib", "loom"],
    ] {
        let ran = loom_run(args)?;
        if ran == 0 {
            return Err(format!(
                "loom: `cargo test {}` ran no test: a renamed model module would pass unseen",
                args.join(" ")
            ));
        }
        total += ran;
    }
    println!("xtask: loom: {total} models passed");
    Ok(())
}

/// One loom invocation, with the code's own `debug_assert!`s on (the block layer's protocol
/// invariants are debug assertions; `--release` alone would compile them out) and the models'
/// optimisation kept. Returns how many tests ran, from libtest's summary lines.
fn loom_run(args: &[&str]) -> Result<usize, String> {
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root())
        .env("RUSTFLAGS", "--cfg loom -C debug-assertions=on")
        .env("LOOM_MAX_PREEMPTIONS", "3")
        .args(["test", "--release", "--target-dir", "target/loom"])
        .args(args);
    let shown = format!("{cmd:?}").replace('"', "");
    println!("xtask: $ {shown}");
    let out = cmd.output().map_err(|e| format!("cannot run {shown}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("command failed ({}): {shown}", out.status));
    }
    libtest_passed(&stdout).ok_or_else(|| format!("{shown}: no libtest summary line in its output"))
}

/// Sums `N passed` over libtest's `test result:` lines; None when there is no such line.
fn libtest_passed(stdout: &str) -> Option<usize> {
    let counts: Vec<usize> = stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("test result: "))
        .filter_map(|r| r.split_once(". ").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_summed_and_zero_is_visible() {
        let two = "running 2 tests\ntest a ... ok\n\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 5 filtered out; finished in 1.2s\n";
        assert_eq!(libtest_passed(two), Some(2));
        let none = "running 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 7 filtered out; finished in 0.0s\n";
        assert_eq!(libtest_passed(none), Some(0));
        assert_eq!(libtest_passed(&format!("{two}{two}")), Some(4));
        assert_eq!(libtest_passed("error: no such test target"), None);
    }

    #[test]
    fn expected_skips_need_a_reason() {
        let list = parse_expected_skips("# comment\n\nx2apic-kvm: needs --kvm\n").unwrap();
        assert_eq!(list, [("x2apic-kvm".to_string(), "needs --kvm".to_string())]);
        assert!(parse_expected_skips("x2apic-kvm\n").unwrap_err().contains("line 1"));
        assert!(parse_expected_skips("x2apic-kvm:   \n").is_err());
    }

    #[test]
    fn the_checked_in_expected_skips_name_real_scenarios() {
        let skips = load_expected_skips().unwrap();
        let scenarios = load_scenarios().unwrap();
        for (name, _) in &skips {
            assert!(scenarios.iter().any(|s| s.name == *name), "{name}");
        }
    }
}
