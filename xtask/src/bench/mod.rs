//! `cargo xtask bench`: runs a matrix of workload jobs in QEMU, one boot after another, and writes
//! `target/bench/results.json`, `results.csv`, `ratios.csv`, SVG plots and a summary on stdout.
//! See docs/bench.md.

pub mod ipio;
pub mod matrix;
pub mod plots;
pub mod results;
pub mod summary;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::qemu::{self, Accel, Firmware, Machine};
use matrix::{BootPlan, DeviceKind, Matrix, QemuBinary};
use results::{BootResult, Record, RunInfo};

const USAGE: &str = "\
usage: cargo xtask bench [options]
  --matrix NAME     matrix to run (default quick; see --list)
  --list            print the matrices and the boots of the chosen one, run nothing
  --runtime DUR     runtime of every job, e.g. 500ms or 3s (default: the matrix's)
  --repeat N        run the whole matrix N times (1-20, default 1); figures are medians
  --debug           debug kernel (default release)
  --kvm             use KVM (default TCG)
  --verbose         stream every boot's console
  --replot          rebuild CSV, plots and summary from target/bench/results.json, run nothing
  --ipio            after the matrix, the work per I/O (cargo xtask ipio) of null0 QD32 and QD1,
                    md0 and nvme0n1 QD32: printed after the summary, written to ipio.json/ipio.csv
                    (several minutes)";

/// Most passes `--repeat` accepts.
const MAX_REPEAT: u32 = 20;

/// Parsed command-line options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) matrix: String,
    pub(crate) list: bool,
    pub(crate) runtime_ms: Option<u64>,
    pub(crate) repeat: u32,
    pub(crate) debug: bool,
    pub(crate) accel: Accel,
    pub(crate) verbose: bool,
    pub(crate) replot: bool,
    pub(crate) ipio: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut o = Options {
            matrix: matrix::MATRICES[0].name.to_string(),
            list: false,
            runtime_ms: None,
            repeat: 1,
            debug: false,
            accel: Accel::Tcg,
            verbose: false,
            replot: false,
            ipio: false,
        };
        let mut options = crate::args::Options::new(args);
        while let Some(option) = options.next()? {
            let mut value = || options.value().map_err(|e| format!("bench: {e}\n{USAGE}"));
            match option {
                "--matrix" => o.matrix = value()?.to_string(),
                "--runtime" => o.runtime_ms = Some(matrix::parse_runtime_ms(value()?)?),
                "--repeat" => {
                    let v = value()?;
                    o.repeat = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_REPEAT).contains(n))
                        .ok_or_else(|| format!("bench: --repeat '{v}': use a count from 1 to {MAX_REPEAT}"))?;
                }
                "--list" => o.list = true,
                "--debug" => o.debug = true,
                "--release" => o.debug = false,
                "--kvm" => o.accel = Accel::Kvm,
                "--tcg" => o.accel = Accel::Tcg,
                "--verbose" => o.verbose = true,
                "--replot" => o.replot = true,
                "--ipio" => o.ipio = true,
                "-h" | "--help" => return Err(USAGE.to_string()),
                other => return Err(format!("bench: unknown option '{other}'\n{USAGE}")),
            }
        }
        Ok(o)
    }
}

/// `cargo xtask bench [--matrix NAME] ...`. `Ok(false)` when a boot or a job failed (after writing
/// everything that was measured).
pub fn cmd_bench(args: &[String]) -> Result<bool, String> {
    let opts = Options::parse(args)?;
    let matrix = matrix::find(&opts.matrix)?;
    let runtime_ms = opts.runtime_ms.unwrap_or(matrix.runtime_ms);
    let boots = matrix.boots(runtime_ms)?;
    let out_dir = crate::root().join("target/bench");
    if opts.list {
        print!("{}", list_text(matrix, &boots));
        return Ok(true);
    }
    if opts.replot {
        let path = out_dir.join("results.json");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let records = results::from_json(&text)?;
        let replot_matrix = match records.first() {
            Some(r) => matrix::find(&r.run.matrix)?,
            None => matrix,
        };
        let ok = write_outputs(&records, replot_matrix, &out_dir, false)?;
        return Ok(ok && records.iter().all(Record::ok));
    }
    if opts.accel == Accel::Kvm && !Path::new("/dev/kvm").exists() {
        return Err("--kvm: /dev/kvm does not exist on this machine; run without --kvm (TCG)".into());
    }
    crate::setup::ensure_qemu()?;
    let kernel = crate::build_kernel(opts.debug)?;
    let matrix_ok = run_matrix(matrix, &boots, &kernel, &opts, runtime_ms, &out_dir)?;
    if !opts.ipio {
        return Ok(matrix_ok);
    }
    match ipio::run(&kernel, &out_dir) {
        Ok(rows) => {
            println!("\n{}", ipio::render(&rows));
            println!(
                "bench: wrote {0}/ipio.json, {0}/ipio.csv",
                out_dir.strip_prefix(crate::root()).unwrap_or(&out_dir).display()
            );
            Ok(matrix_ok)
        }
        Err(e) => {
            println!("\nbench: --ipio FAILED: {e}");
            Ok(false)
        }
    }
}

fn list_text(selected: &Matrix, boots: &[BootPlan]) -> String {
    let mut s = String::from("matrices:\n");
    for m in matrix::MATRICES {
        let points = m.points().len();
        let boot_count = m.boots(m.runtime_ms).map_or(0, |b| b.len());
        s.push_str(&format!(
            "  {:<6} {points:>4} jobs in {boot_count:>3} boots, {} each, -smp {}: {}\n",
            m.name,
            matrix::runtime_word(m.runtime_ms),
            m.smp,
            m.about
        ));
    }
    let jobs: usize = boots.iter().map(|b| b.jobs.len()).sum();
    let runtime_ms = boots.first().map_or(selected.runtime_ms, |b| b.runtime_ms);
    s.push_str(&format!(
        "\nmatrix '{}': {jobs} jobs x {} = {} s of measurement, plus boot time, in {} boots:\n",
        selected.name,
        matrix::runtime_word(runtime_ms),
        jobs as u64 * runtime_ms / 1000,
        boots.len()
    ));
    for b in boots {
        s.push_str(&format!(
            "  boot {:>2}: {} -smp {} -m {}, {} jobs, timeout {} s\n    kernel: {}\n",
            b.index,
            b.device.key(),
            b.smp,
            b.mem,
            b.jobs.len(),
            b.timeout_s(),
            b.kernel_args().join(" ")
        ));
    }
    s
}

/// Runs `boots` (one after another), writing results, CSV, plots and the summary to `out_dir`
/// (also `cargo xtask lab`'s runner).
pub(crate) fn run_matrix(
    matrix: &Matrix,
    boots: &[BootPlan],
    kernel: &Path,
    opts: &Options,
    runtime_ms: u64,
    out_dir: &Path,
) -> Result<bool, String> {
    let logs = out_dir.join("logs");
    // Logs of an earlier run would be mistaken for this one's.
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let run = RunInfo {
        matrix: matrix.name.to_string(),
        accel: match opts.accel {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
        .into(),
        runtime_ms,
    };
    let mut images: Vec<(DeviceKind, PathBuf)> = Vec::new();
    let mut records: Vec<Record> = Vec::new();
    let mut boot_problems: Vec<String> = Vec::new();
    println!(
        "bench: matrix '{}', {} jobs in {} boots, {} per job, {} pass(es), {}",
        matrix.name,
        boots.iter().map(|b| b.jobs.len()).sum::<usize>(),
        boots.len(),
        matrix::runtime_word(runtime_ms),
        opts.repeat,
        run.accel
    );
    // The Fusion controller lives in a QEMU of its own: built (or found in the cache) before the
    // first boot, so a missing binary fails the run up front.
    let fusion_qemu = if boots.iter().any(|b| b.device.qemu_binary() == QemuBinary::Fusion) {
        Some(crate::qemufusion::ensure_binary()?)
    } else {
        None
    };
    let runner = BootRunner {
        run: &run,
        kernel,
        opts,
        logs: &logs,
        boots_per_pass: boots.len(),
        fusion_qemu: fusion_qemu.as_deref(),
    };
    // Passes run the whole matrix again, so slow drift of a shared machine spreads over every
    // point instead of biasing the ones that happen to run last.
    for repeat in 0..opts.repeat {
        for boot in boots {
            let image = match boot.device.image_bytes() {
                None => None,
                Some(bytes) => match images.iter().find(|(d, _)| *d == boot.device) {
                    Some((_, path)) => Some(path.clone()),
                    None => {
                        let path = out_dir.join(format!("disk-{}.raw", boot.device.key()));
                        qemu::create_image(&path, bytes, "raw")?;
                        images.push((boot.device, path.clone()));
                        Some(path)
                    }
                },
            };
            let result = runner.run_boot(boot, repeat, image.as_deref())?;
            boot_problems.extend(
                result
                    .boot_problems
                    .iter()
                    .map(|p| format!("pass {repeat} boot {} ({}): {p}", boot.index, boot.device.key())),
            );
            records.extend(result.records);
            // Written after every boot, so an interrupted run keeps what it measured.
            std::fs::write(out_dir.join("results.json"), results::to_json(&records)?)
                .map_err(|e| format!("writing results.json: {e}"))?;
        }
    }
    for image in images.iter().map(|(_, p)| p) {
        let _ = std::fs::remove_file(image);
    }
    let outputs_ok = write_outputs(&records, matrix, out_dir, true)?;
    let failed_jobs: Vec<&Record> = records.iter().filter(|r| !r.ok()).collect();
    if boot_problems.is_empty() && failed_jobs.is_empty() && outputs_ok {
        println!("bench: all {} jobs clean", records.len());
        return Ok(true);
    }
    println!("\nbench: FAILED");
    for p in &boot_problems {
        println!("  {p}");
    }
    for r in failed_jobs {
        println!("  job {} ({}): {}", r.report.job.name, r.point, r.problems.join("; "));
    }
    Ok(false)
}

/// What every boot of a run shares.
struct BootRunner<'a> {
    run: &'a RunInfo,
    kernel: &'a Path,
    opts: &'a Options,
    logs: &'a Path,
    boots_per_pass: usize,
    /// The Fusion QEMU binary, when a boot needs it.
    fusion_qemu: Option<&'a Path>,
}

/// The QEMU binary a boot on `device` runs: the system's, or the Fusion build `fusion_qemu`.
pub(crate) fn qemu_binary_for(device: DeviceKind, fusion_qemu: Option<&Path>) -> Result<PathBuf, String> {
    match device.qemu_binary() {
        QemuBinary::System => Ok(PathBuf::from("qemu-system-x86_64")),
        QemuBinary::Fusion => fusion_qemu.map(Path::to_path_buf).ok_or_else(|| {
            format!(
                "{}: needs the Fusion QEMU binary (cargo xtask qemu-fusion), which this run did not resolve",
                device.label()
            )
        }),
    }
}

impl BootRunner<'_> {
    /// Boots QEMU for `boot` in pass `repeat` and collects what its console reports.
    fn run_boot(&self, boot: &BootPlan, repeat: u32, image: Option<&Path>) -> Result<BootResult, String> {
        let BootRunner {
            run,
            kernel,
            opts,
            logs,
            boots_per_pass: total,
            fusion_qemu,
        } = *self;
        let binary = qemu_binary_for(boot.device, fusion_qemu)?;
        let mut extra: Vec<String> = ["-M", "q35", "-smp", &boot.smp.to_string(), "-m", &boot.mem]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if let Some(image) = image {
            extra.extend(boot.device.qemu_args(image));
        }
        let machine = Machine {
            accel: opts.accel,
            firmware: Firmware::Qboot,
            kernel: Some(kernel.to_path_buf()),
            cdrom: None,
            append: boot.kernel_args(),
            extra,
        };
        let log_path = logs.join(boot.log_name(repeat));
        let log_shown = log_path
            .strip_prefix(crate::root())
            .unwrap_or(&log_path)
            .display()
            .to_string();
        let pass = if opts.repeat > 1 {
            format!("pass {}/{}, ", repeat + 1, opts.repeat)
        } else {
            String::new()
        };
        println!(
            "\nbench: {pass}boot {}/{total}: {}, {} jobs, -smp {} (log {log_shown})",
            boot.index + 1,
            boot.device.label(),
            boot.jobs.len(),
            boot.smp
        );
        let outcome = qemu::run_with(
            &binary,
            &machine.args(),
            Duration::from_secs(boot.timeout_s()),
            opts.verbose,
            Some(&log_path),
        )?;
        let verdict = crate::scenario::judge(&crate::scenario::Boot::default(), outcome.exit_code, &outcome.output);
        let result = results::collect_boot(run, boot, repeat, &log_shown, &outcome.output, verdict);
        for r in &result.records {
            println!(
                "  {:<26} {:>9} IOPS {:>9} MB/s  p99 {:>10} us  {}",
                r.report.job.name,
                r.report.iops,
                results::megabytes(r.report.bw_bytes),
                results::micros(r.report.lat_ns.p99),
                if r.ok() {
                    "ok".to_string()
                } else {
                    format!("FAILED: {}", r.problems.join("; "))
                }
            );
        }
        for p in &result.boot_problems {
            println!("  FAILED: {p}");
        }
        println!(
            "  ({:.1} s, {})",
            outcome.elapsed.as_secs_f64(),
            if result.ok() { "clean" } else { "FAILED" }
        );
        Ok(result)
    }
}

/// Writes results.json (unless `json` is false), results.csv, ratios.csv and the plots, and prints
/// the summary. Returns false when a plot could not be drawn (the rest is still written).
pub(crate) fn write_outputs(records: &[Record], matrix: &Matrix, out_dir: &Path, json: bool) -> Result<bool, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let write = |name: &str, text: String| {
        let path = out_dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    if json {
        write("results.json", results::to_json(records)?)?;
    }
    write("results.csv", results::to_csv(records))?;
    write("ratios.csv", summary::ratios_csv(records))?;
    println!("\n{}", summary::render(records));
    let medians: Vec<Record> = summary::medians(records).into_iter().map(|p| p.record).collect();
    let plots_ok = match plots::write_all(&medians, &matrix.base, out_dir) {
        Ok(files) => {
            let names: Vec<String> = files
                .iter()
                .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            println!("bench: plots: {}", names.join(", "));
            true
        }
        Err(e) => {
            println!("bench: plots FAILED: {e}");
            false
        }
    };
    println!(
        "bench: wrote {0}/results.json, {0}/results.csv, {0}/ratios.csv",
        out_dir.strip_prefix(crate::root()).unwrap_or(out_dir).display()
    );
    Ok(plots_ok)
}
