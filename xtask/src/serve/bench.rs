//! `cargo xtask fleet-bench`: what serving fio clients costs a box, in figures (a benchmark, not a
//! pass/fail test):
//! - the kernel image a network boot sends (debug sections stripped), and the time from QEMU's
//!   start to the first PROBE the box answers;
//! - one job in one boot, first from the box's own command line (a boot module, before the box
//!   serves), then sent twice by the stock fio client: the IOPS of each, the ratio of the first
//!   client run to the command line's, and how far the two client runs differ (the host's noise);
//! - the interrupts each CPU took after the client's run: the NIC has no vector (polled by the
//!   CPU that runs no job), so the measured CPUs take only their disk's.

use super::{
    BoxSpec, LISTENING_TAIL, RunningBox, boot_boxes, box_documents, client_json, device_option, ensure_disk, free_port,
    probe_frame, run_client_args, smp_option,
};
use crate::{RunDevice, args, build_kernel, root, setup};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a box may take to answer its first PROBE (TCG).
const FIRST_PROBE_TIMEOUT: Duration = Duration::from_secs(180);
/// How long one attempt to have a PROBE answered may take: the resolution of the figure.
const PROBE_ATTEMPT_MS: u64 = 100;
/// A ratio of client to command-line IOPS within this much of 1 counts as "the same".
const SAME_WITHIN: f64 = 0.02;
/// Client runs of the job after the command line's one.
const CLIENT_RUNS: usize = 2;

struct BenchOptions {
    device: RunDevice,
    smp: u32,
    kvm: bool,
    job: Option<PathBuf>,
    runtime_s: u32,
}

fn parse(args: &[String]) -> Result<BenchOptions, String> {
    let mut o = BenchOptions {
        device: RunDevice::Nvme,
        smp: 2,
        kvm: false,
        job: None,
        runtime_s: 10,
    };
    let mut options = args::Options::new(args);
    while let Some(option) = options.next()? {
        match option {
            "--device" => o.device = device_option(options.value()?)?,
            "--smp" => o.smp = smp_option(options.value()?)?,
            "--kvm" => o.kvm = true,
            "--job" => o.job = Some(PathBuf::from(options.value()?)),
            "--runtime" => {
                let v = options.value()?;
                o.runtime_s = v
                    .parse()
                    .ok()
                    .filter(|s| (1..=600).contains(s))
                    .ok_or(format!("--runtime '{v}': seconds, 1..600"))?;
            }
            other => {
                return Err(format!(
                    "fleet-bench: unknown option '{other}' (see `cargo xtask help`)"
                ));
            }
        }
    }
    Ok(o)
}

/// The job both runs use when none is given: 4k random reads at depth 32, time based.
fn default_job(device: RunDevice, runtime_s: u32, dir: &Path) -> Result<PathBuf, String> {
    let name = device.block_device();
    let path = dir.join("randread-4k-qd32.fio");
    let text = format!(
        "[randread-4k-qd32]\nfilename=/dev/{name}\nioengine=libaio\ndirect=1\nrw=randread\nbs=4k\niodepth=32\n\
         time_based\nruntime={runtime_s}s\n"
    );
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Sends fio 3.33's PROBE to 127.0.0.1:`port` until a box answers it; the time it took.
fn first_probe(port: u16, started: Instant) -> Result<Duration, String> {
    let frame = probe_frame(fioserver::SERVER_VERSION);
    let attempt = Duration::from_millis(PROBE_ATTEMPT_MS);
    while started.elapsed() < FIRST_PROBE_TIMEOUT {
        // Before the box listens QEMU accepts the connection and then closes it, or holds it
        // while its own SYN to the guest waits for an answer: a fresh connection every attempt.
        let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        if let Ok(mut sock) = std::net::TcpStream::connect_timeout(&to, attempt)
            && sock.set_read_timeout(Some(attempt)).is_ok()
            && sock.write_all(&frame).is_ok()
        {
            let mut decoder = fioserver::Decoder::default();
            let mut buf = [0u8; 4096];
            while let Ok(n) = sock.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut input = &buf[..n];
                match decoder.next_command(&mut input) {
                    Ok(Some(cmd)) if cmd.opcode == fioserver::Opcode::Probe as u16 => return Ok(started.elapsed()),
                    Ok(_) => {}
                    Err(e) => return Err(format!("the box's PROBE answer: {e}")),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!("no PROBE answered within {} s", FIRST_PROBE_TIMEOUT.as_secs()))
}

/// IOPS of each job in a fio document's `jobs` (or a client's `client_stats`), by name.
fn job_iops(jobs: &Value) -> Vec<(String, f64)> {
    jobs.as_array()
        .map(|a| {
            a.iter()
                .filter(|j| j["jobname"] != "All clients")
                .map(|j| {
                    let iops = ["read", "write", "trim"]
                        .iter()
                        .map(|d| j[*d]["iops"].as_f64().unwrap_or(0.0))
                        .sum();
                    (j["jobname"].as_str().unwrap_or("?").to_string(), iops)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The rows of the last interrupt table in `console` (after its header line).
fn last_irq_table(console: &str) -> Vec<String> {
    let lines: Vec<&str> = console.lines().collect();
    let Some(start) = lines
        .iter()
        .rposition(|l| l.starts_with("interrupts per CPU since boot"))
    else {
        return Vec::new();
    };
    lines[start + 1..]
        .iter()
        .take_while(|l| l.starts_with(' ') || l.starts_with("0x") || l.trim_start().starts_with("CPU"))
        .map(|l| (*l).to_string())
        .collect()
}

/// `cargo xtask fleet-bench [--device nvme|megasas] [--smp N] [--kvm] [--job FILE] [--runtime S]`.
pub fn cmd_fleet_bench(args: &[String]) -> Result<bool, String> {
    let o = parse(args)?;
    match std::process::Command::new("fio").arg("--version").output() {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == "fio-3.33" => {}
        _ => return Err("fleet-bench: the fio 3.33 client is needed (apt-get install fio)".into()),
    }
    setup::ensure_qemu()?;
    let dir = root().join("target/fleet-bench");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let job = match &o.job {
        Some(j) => j.clone(),
        None => default_job(o.device, o.runtime_s, &dir)?,
    };
    let kernel = build_kernel(false)?;
    let stripped = dir.join("kernel.stripped");
    crate::netboot::strip(&kernel, &stripped)?;
    let image_kib = std::fs::metadata(&stripped).map_err(|e| e.to_string())?.len() / 1024;

    let disk = dir.join("disk.img");
    ensure_disk(&disk, crate::DEFAULT_DISK_BYTES)?;
    let spec = |words: Vec<String>, fio_files: Vec<PathBuf>| -> Result<BoxSpec, String> {
        Ok(BoxSpec {
            name: "bench".into(),
            device: o.device,
            disk: disk.clone(),
            host_port: free_port()?,
            smp: o.smp,
            kvm: o.kvm,
            index: 0,
            words,
            fio_files,
        })
    };

    // 1. Power-on to the first answered PROBE, on a box with nothing else to do.
    let plain = spec(Vec::new(), Vec::new())?;
    let started = Instant::now();
    let mut first = RunningBox::start(&plain, &kernel, false)?;
    let first_line = first
        .lines
        .recv_timeout(FIRST_PROBE_TIMEOUT)
        .map(|line| {
            first.take(line);
            started.elapsed()
        })
        .map_err(|_| "the box printed nothing".to_string());
    let probe = first_probe(plain.host_port, started);
    first.drain();
    let phases = first
        .output
        .lines()
        .rfind(|l| l.starts_with("boot phases (ms):"))
        .map(str::to_string)
        .unwrap_or_default();
    drop(first);
    let probe = probe?;
    let first_line = first_line?;

    // 2. The same job from the command line (a boot module, run before serving), then from the
    // client, in one boot.
    let words = vec!["--".into(), "--output-format=json".into()];
    let served = spec(words, vec![job.clone()])?;
    let mut boxes = boot_boxes(std::slice::from_ref(&served), false)?;
    let bench = &mut boxes[0];
    let booted = box_documents(&bench.output)?
        .pop()
        .ok_or("the boot job printed no fio document")?;
    // The client's run twice: how far two runs of one side differ says what a difference
    // between the sides is worth on this host.
    let mut clients = Vec::new();
    for _ in 0..CLIENT_RUNS {
        let run = run_client_args(&[
            bench.client_arg(),
            job.display().to_string(),
            "--output-format=json".into(),
        ])?;
        if !run.success {
            return Err(format!("the client's run failed: {}{}", run.stdout, run.stderr));
        }
        bench.wait_for("run end", Duration::from_secs(120), |l| {
            l.starts_with("fio.server: run ended")
        })?;
        clients.push(client_json(&run)?);
    }
    bench.drain();
    let listening = bench
        .output
        .lines()
        .find(|l| l.contains(LISTENING_TAIL))
        .unwrap_or_default()
        .to_string();
    let irqs = last_irq_table(&bench.output);

    println!();
    println!(
        "fleet-bench: {} (on {}, {} vCPUs)",
        job.display(),
        o.device.block_device(),
        o.smp
    );
    println!("  netboot kernel image (stripped): {image_kib} KiB");
    println!(
        "  QEMU start to the first answered PROBE: {} ms (+/- {PROBE_ATTEMPT_MS} ms); to the box's first console \
         line: {} ms; the box's own {phases}",
        probe.as_millis(),
        first_line.as_millis()
    );
    println!("  {}", listening.trim());
    let mut all_same = true;
    let on_box = job_iops(&booted["jobs"]);
    let through_client: Vec<Vec<(String, f64)>> = clients.iter().map(|c| job_iops(&c["client_stats"])).collect();
    for (i, (name, cmdline)) in on_box.iter().enumerate() {
        let runs: Vec<f64> = through_client.iter().filter_map(|r| r.get(i).map(|j| j.1)).collect();
        let Some(first) = runs.first().copied() else {
            println!("  job {name}: the client reports no such job");
            all_same = false;
            continue;
        };
        let ratio = if *cmdline > 0.0 { first / cmdline } else { 0.0 };
        let same = (ratio - 1.0).abs() <= SAME_WITHIN;
        all_same &= same;
        let shown: Vec<String> = runs.iter().map(|r| format!("{r:.0}")).collect();
        let spread = runs.iter().copied().fold(f64::MIN, f64::max) / runs.iter().copied().fold(f64::MAX, f64::min);
        println!(
            "  job {name}: command line {cmdline:.0} IOPS; fio client {} IOPS (its runs differ by {:.1}%); \
             first client run / command line {ratio:.3} ({})",
            shown.join(", "),
            (spread - 1.0) * 100.0,
            if same { "within 2%" } else { "NOT within 2%" }
        );
    }
    println!("  interrupts per CPU after the client's run (the NIC has no vector: cpu0 polls it):");
    for row in &irqs {
        println!("    {row}");
    }
    println!(
        "fleet-bench: {} (consoles in target/fleet/)",
        if all_same {
            "the client's IOPS are within 2% of the command line's"
        } else {
            "the client's IOPS differ from the command line's by more than 2%"
        }
    );
    Ok(true)
}
