//! `cargo xtask serve` and `cargo xtask fleet N`: QEMU boxes booted with `fio.server=1`, each on
//! QEMU's user network with its fio port forwarded to 127.0.0.1, for the desk's stock
//! `fio --client`. And `cargo xtask fleet-check`: the real fio client against such boxes, run by
//! `cargo xtask test`.

mod bench;

pub use bench::cmd_fleet_bench;

use crate::{RunDevice, args, build_kernel, qemu, root, setup, split_dashdash};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The port a box's fio server listens on inside its VM (fio's default).
const GUEST_PORT: u16 = 8765;
/// The first host port of `serve` and `fleet` (fio's default, so one box needs no port).
const DEFAULT_HOST_PORT: u16 = 8765;
/// How long a box may take to boot to its `listening` line (TCG).
const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// The console line that says a box serves.
const LISTENING: &str = "fio.server: ";
const LISTENING_TAIL: &str = " listening on ";
/// How long one fio client run of the check may take (its jobs are a few seconds).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// How one box is booted.
#[derive(Debug, Clone)]
struct BoxSpec {
    name: String,
    device: RunDevice,
    disk: PathBuf,
    host_port: u16,
    smp: u32,
    kvm: bool,
    /// Distinguishes the boxes' MAC addresses (and so their fio hostnames).
    index: u8,
    /// Kernel words beside `fio.server=1`.
    words: Vec<String>,
    /// fio job files the box runs at boot, before it serves (boot modules).
    fio_files: Vec<PathBuf>,
}

/// A running QEMU box: its console lines as they come, all of them kept, QEMU killed on drop.
struct RunningBox {
    name: String,
    host_port: u16,
    child: Child,
    lines: Receiver<String>,
    output: String,
    echo: bool,
    log: PathBuf,
}

impl Drop for RunningBox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::write(&self.log, &self.output);
    }
}

impl RunningBox {
    fn start(spec: &BoxSpec, kernel: &Path, echo: bool) -> Result<Self, String> {
        let mut append = vec!["fio.server=1".to_string()];
        append.extend(spec.words.iter().cloned());
        let mut extra = vec![
            "-M".into(),
            "q35".into(),
            "-smp".into(),
            spec.smp.to_string(),
            "-m".into(),
            "512M".into(),
        ];
        extra.extend(spec.device.qemu_args(&spec.disk, spec.smp));
        extra.extend(qemu::fio_initrd_args(&spec.fio_files, false)?);
        extra.extend([
            "-netdev".into(),
            format!("user,id=n0,hostfwd=tcp:127.0.0.1:{}-:{GUEST_PORT}", spec.host_port),
            "-device".into(),
            format!(
                "virtio-net-pci,netdev=n0,disable-legacy=on,mac=52:54:00:12:34:{:02x}",
                0x56u8.wrapping_add(spec.index)
            ),
        ]);
        let machine = qemu::Machine {
            accel: if spec.kvm { qemu::Accel::Kvm } else { qemu::Accel::Tcg },
            firmware: qemu::Firmware::Qboot,
            kernel: Some(kernel.to_path_buf()),
            cdrom: None,
            append,
            extra,
        };
        let args = machine.args();
        if echo {
            println!("xtask: {}: qemu-system-x86_64 {}", spec.name, args.join(" "));
        }
        let mut child = Command::new("qemu-system-x86_64")
            .current_dir(root())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: cannot start qemu-system-x86_64: {e}", spec.name))?;
        let (tx, rx) = mpsc::channel::<String>();
        crate::qemu::forward_output(&mut child, tx);
        let dir = root().join("target/fleet");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self {
            name: spec.name.clone(),
            host_port: spec.host_port,
            child,
            lines: rx,
            output: String::new(),
            echo,
            log: dir.join(format!("{}.log", spec.name)),
        })
    }

    fn take(&mut self, line: String) -> String {
        if self.echo {
            println!("[{}] {line}", self.name);
            let _ = std::io::stdout().flush();
        }
        self.output.push_str(&line);
        self.output.push('\n');
        line
    }

    /// Waits for a console line that `matches`; Err when QEMU ends first or `timeout` passes.
    fn wait_for(&mut self, what: &str, timeout: Duration, matches: impl Fn(&str) -> bool) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let line = self.take(line);
                    if matches(&line) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{}: no {what} within {} s (console in {})",
                        self.name,
                        timeout.as_secs(),
                        self.log.display()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let last: Vec<&str> = self.output.lines().rev().take(5).collect();
                    return Err(format!(
                        "{}: QEMU ended before {what}; last lines: {}",
                        self.name,
                        last.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    ));
                }
            }
        }
    }

    fn wait_listening(&mut self) -> Result<String, String> {
        self.wait_for("'listening' line", BOOT_TIMEOUT, |l| {
            l.starts_with(LISTENING) && l.contains(LISTENING_TAIL)
        })
    }

    /// Takes every line that has arrived; false when QEMU has ended.
    fn drain(&mut self) -> bool {
        loop {
            match self.lines.try_recv() {
                Ok(line) => {
                    self.take(line);
                }
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn client_arg(&self) -> String {
        format!("--client=127.0.0.1,{}", self.host_port)
    }
}

/// Options common to `serve` and `fleet`.
struct ServeOptions {
    device: RunDevice,
    port: u16,
    smp: u32,
    kvm: bool,
    disk: Option<PathBuf>,
    words: Vec<String>,
    fio_files: Vec<PathBuf>,
}

fn parse_options(
    opts: &[String],
    kernel_args: &[String],
    command: &str,
) -> Result<(ServeOptions, Vec<String>), String> {
    let mut o = ServeOptions {
        device: RunDevice::Nvme,
        port: DEFAULT_HOST_PORT,
        smp: 2,
        kvm: false,
        disk: None,
        words: kernel_args.to_vec(),
        fio_files: Vec::new(),
    };
    let mut positional = Vec::new();
    let mut options = args::Options::new(opts);
    while let Some(option) = options.next()? {
        match option {
            "--device" => o.device = device_option(options.value()?)?,
            "--port" => {
                let v = options.value()?;
                o.port = v
                    .parse()
                    .ok()
                    .filter(|p| *p >= 1024)
                    .ok_or(format!("--port '{v}': a TCP port from 1024 to 65535"))?;
            }
            "--smp" => o.smp = smp_option(options.value()?)?,
            "--kvm" => o.kvm = true,
            "--fio" => o.fio_files.push(PathBuf::from(options.value()?)),
            "--disk" if command == "serve" => o.disk = Some(PathBuf::from(options.value()?)),
            other if !other.starts_with('-') => positional.push(other.to_string()),
            other => return Err(format!("{command}: unknown option '{other}' (see `cargo xtask help`)")),
        }
    }
    if o.words.iter().any(|w| w.starts_with("fio.server.port=")) {
        return Err(format!(
            "{command}: the box's port is {GUEST_PORT} inside QEMU; choose the desk's port with --port"
        ));
    }
    Ok((o, positional))
}

/// `--device` of the server commands.
fn device_option(v: &str) -> Result<RunDevice, String> {
    match v {
        "megasas" => Ok(RunDevice::Megasas),
        "nvme" => Ok(RunDevice::Nvme),
        _ => Err(format!("--device '{v}': use nvme or megasas")),
    }
}

/// `--smp` of the server commands: one CPU polls the network, so at least two.
fn smp_option(v: &str) -> Result<u32, String> {
    v.parse().ok().filter(|n| (2..=255).contains(n)).ok_or(format!(
        "--smp '{v}': 2..255 (cpu0 polls the network, jobs run on the others)"
    ))
}

/// A disk image of `bytes` at `path`, created when missing.
fn ensure_disk(path: &Path, bytes: u64) -> Result<(), String> {
    if !path.exists() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        println!("xtask: creating disk image {} ({} MiB)", path.display(), bytes >> 20);
        qemu::create_image(path, bytes, "raw")?;
    }
    Ok(())
}

fn boot_boxes(specs: &[BoxSpec], echo: bool) -> Result<Vec<RunningBox>, String> {
    setup::ensure_qemu()?;
    let kernel = build_kernel(false)?;
    let mut boxes = Vec::new();
    for spec in specs {
        boxes.push(RunningBox::start(spec, &kernel, echo)?);
    }
    for b in &mut boxes {
        b.wait_listening()?;
    }
    Ok(boxes)
}

/// Keeps streaming the boxes' consoles until one QEMU ends (Ctrl-C ends them all: QEMU is in
/// the terminal's process group, and the boxes are killed when xtask exits).
fn stream(boxes: &mut [RunningBox]) -> Result<bool, String> {
    loop {
        for b in boxes.iter_mut() {
            if !b.drain() {
                return Err(format!("{}: QEMU ended (console in {})", b.name, b.log.display()));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The desk's command lines: fio attaches a job file to the `--client` before it, so each client
/// is followed by the job file; or one `--client=FILE` naming a host list (written here).
fn print_client_line(boxes: &[RunningBox]) -> Result<(), String> {
    let clients: Vec<String> = boxes.iter().map(|b| format!("{} JOB.fio", b.client_arg())).collect();
    println!();
    println!("xtask: {} box(es) serve; drive them with:", boxes.len());
    println!("    fio {}", clients.join(" "));
    if boxes.len() > 1 {
        let list = root().join("target/fleet/hosts.list");
        let hosts: String = boxes.iter().map(|b| format!("127.0.0.1,{}\n", b.host_port)).collect();
        std::fs::write(&list, hosts).map_err(|e| format!("{}: {e}", list.display()))?;
        println!("or, with the host list written to {}:", list.display());
        println!("    fio --client={} JOB.fio", list.display());
    }
    println!("xtask: Ctrl-C stops them");
    println!();
    Ok(())
}

/// `cargo xtask serve [--device D] [--port P] [--smp N] [--kvm] [--disk PATH] [-- WORDS]`.
pub fn cmd_serve(args: &[String]) -> Result<bool, String> {
    let (opts, kernel_args) = split_dashdash(args);
    let (o, positional) = parse_options(opts, kernel_args, "serve")?;
    if let Some(p) = positional.first() {
        return Err(format!("serve: unexpected '{p}'"));
    }
    let disk = o.disk.clone().unwrap_or_else(|| root().join(crate::DEFAULT_DISK));
    ensure_disk(&disk, crate::DEFAULT_DISK_BYTES)?;
    let spec = BoxSpec {
        name: "box1".into(),
        device: o.device,
        disk,
        host_port: o.port,
        smp: o.smp,
        kvm: o.kvm,
        index: 0,
        words: o.words,
        fio_files: o.fio_files,
    };
    let mut boxes = boot_boxes(&[spec], true)?;
    print_client_line(&boxes)?;
    stream(&mut boxes)
}

/// `cargo xtask fleet N [--device D] [--port P] [--smp N] [--kvm] [-- WORDS]`: N boxes on
/// consecutive ports, each with its own disk image under target/fleet/.
pub fn cmd_fleet(args: &[String]) -> Result<bool, String> {
    let (opts, kernel_args) = split_dashdash(args);
    let (o, positional) = parse_options(opts, kernel_args, "fleet")?;
    let n: u16 = match positional.as_slice() {
        [n] => n
            .parse()
            .ok()
            .filter(|n| (1..=16).contains(n))
            .ok_or(format!("fleet '{n}': a number of boxes from 1 to 16"))?,
        _ => return Err("fleet: give the number of boxes, e.g. `cargo xtask fleet 3`".into()),
    };
    if u32::from(o.port) + u32::from(n) - 1 > u32::from(u16::MAX) {
        return Err(format!(
            "fleet: ports {}..{} pass 65535",
            o.port,
            u32::from(o.port) + u32::from(n) - 1
        ));
    }
    let mut specs = Vec::new();
    for i in 0..n {
        let disk = root().join(format!("target/fleet/box{}.img", i + 1));
        ensure_disk(&disk, crate::DEFAULT_DISK_BYTES)?;
        specs.push(BoxSpec {
            name: format!("box{}", i + 1),
            device: o.device,
            disk,
            host_port: o.port + i,
            smp: o.smp,
            kvm: o.kvm,
            index: i as u8,
            words: o.words.clone(),
            fio_files: o.fio_files.clone(),
        });
    }
    let mut boxes = boot_boxes(&specs, true)?;
    print_client_line(&boxes)?;
    stream(&mut boxes)
}

// ---------------------------------------------------------------------------------------------
// fleet-check: the real fio client against QEMU boxes.

/// A free TCP port on 127.0.0.1 (the kernel picks it; it is free again once the probe closes).
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// What one `fio --client` run gave.
struct ClientRun {
    success: bool,
    stdout: String,
    stderr: String,
}

fn run_client(clients: &[String], job: &Path, json: bool) -> Result<ClientRun, String> {
    let mut args = clients.to_vec();
    if json {
        args.push("--output-format=json".into());
    }
    args.push(job.display().to_string());
    run_client_args(&args)
}

/// Runs `fio ARGS`, killed after [`CLIENT_TIMEOUT`].
fn run_client_args(args: &[String]) -> Result<ClientRun, String> {
    let mut cmd = Command::new("fio");
    cmd.current_dir(root()).args(args);
    let shown = format!("{cmd:?}").replace('"', "");
    println!("xtask: fleet-check: $ {shown}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run fio: {e}"))?;
    let read_all = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = r.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read_all(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("waiting for fio: {e}"))? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(format!(
            "the fio client did not end within {} s (killed): {stdout}{stderr}",
            CLIENT_TIMEOUT.as_secs()
        ));
    };
    Ok(ClientRun {
        success: status.success(),
        stdout,
        stderr,
    })
}

/// fio's JSON document in the client's output (it may print text lines before it).
fn client_json(run: &ClientRun) -> Result<Value, String> {
    let start = run
        .stdout
        .find('{')
        .ok_or_else(|| format!("no JSON in the client's output: {}", run.stdout))?;
    serde_json::from_str(&run.stdout[start..]).map_err(|e| format!("the client's JSON: {e}"))
}

/// Runs `job` with JSON output through the client `one` on `box_`, which must succeed, and
/// returns the client's run with the box's own document of it (the newest, once the box says
/// the run ended).
fn run_to_document(one: &[String], jobs: &[&Path], box_: &mut RunningBox) -> Result<(ClientRun, Value), String> {
    // Job files right after the --client they are for: fio sends every one of those, but only
    // the first of the job files given after other options.
    let mut args = one.to_vec();
    args.extend(jobs.iter().map(|j| j.display().to_string()));
    args.push("--output-format=json".into());
    let run = run_client_args(&args)?;
    if !run.success {
        return Err(format!("the client failed: {}{}", run.stdout, run.stderr));
    }
    box_.wait_for("run end", Duration::from_secs(60), |l| {
        l.starts_with("fio.server: run ended")
    })?;
    box_.drain();
    let doc = box_documents(&box_.output)?
        .pop()
        .ok_or("the box printed no fio document")?;
    Ok((run, doc))
}

/// fio's PROBE as a client on 127.0.0.1 sends it, framed as protocol `version`.
fn probe_frame(version: u16) -> Vec<u8> {
    let mut frame = Vec::new();
    let probe = fioserver::ClientProbe {
        flags: 0,
        server: "127.0.0.1".into(),
    };
    fioserver::encode_command(&mut frame, fioserver::Opcode::Probe, 1, &probe.encode());
    if version != fioserver::SERVER_VERSION {
        // The header's version field, then the header's CRC-16 again.
        let at = fioserver::HEADER_VERSION;
        frame[at..at + 2].copy_from_slice(&version.to_le_bytes());
        let crc = fioserver::crc16(&frame[..fioserver::HEADER_CRC_SPAN]);
        let at = fioserver::HEADER_CMD_CRC;
        frame[at..at + 2].copy_from_slice(&crc.to_le_bytes());
    }
    frame
}

/// Connects to a box's fio port and sends a PROBE framed as fio's protocol `version`; returns
/// how many bytes came back before the box closed the connection (`None`: it did not close
/// within 10 s).
fn probe_with_version(port: u16, version: u16) -> Result<Option<usize>, String> {
    use std::io::Read;
    let frame = probe_frame(version);
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    sock.write_all(&frame).map_err(|e| format!("send: {e}"))?;
    let mut got = 0;
    let mut buf = [0u8; 4096];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return Ok(Some(got)),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(Some(got)),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Ok(None);
            }
            Err(e) => return Err(format!("receive: {e}")),
        }
    }
}

/// The box's own fio documents (`BAREMQ-FIO-JSON:` lines), newest last.
fn box_documents(output: &str) -> Result<Vec<Value>, String> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("BAREMQ-FIO-JSON: "))
        .map(|doc| serde_json::from_str(doc).map_err(|e| format!("the box's BAREMQ-FIO-JSON line: {e}")))
        .collect()
}

/// Checks that every job of the client's `client_stats` carries the box's figures: per
/// direction I/O counts and bytes equal to the box's own document, the same job names.
fn same_figures(client: &Value, boxdoc: &Value) -> Result<String, String> {
    let stats = client["client_stats"]
        .as_array()
        .ok_or("the client's JSON has no client_stats")?;
    let jobs = boxdoc["jobs"].as_array().ok_or("the box's document has no jobs")?;
    let client_jobs: Vec<&Value> = stats.iter().filter(|j| j["jobname"] != "All clients").collect();
    if client_jobs.len() != jobs.len() {
        return Err(format!(
            "the client reports {} job(s), the box {}",
            client_jobs.len(),
            jobs.len()
        ));
    }
    let mut summary = Vec::new();
    for (c, b) in client_jobs.iter().zip(jobs) {
        if c["jobname"] != b["jobname"] {
            return Err(format!(
                "job names differ: client {} box {}",
                c["jobname"], b["jobname"]
            ));
        }
        let mut total = 0;
        for dir in ["read", "write", "trim"] {
            for key in ["total_ios", "io_bytes"] {
                let (cv, bv) = (&c[dir][key], &b[dir][key]);
                if cv.as_u64().is_none() || cv != bv {
                    return Err(format!("job {}: {dir}.{key}: client {cv}, box {bv}", c["jobname"]));
                }
            }
            total += c[dir]["total_ios"].as_u64().unwrap_or(0);
        }
        if total == 0 {
            return Err(format!("job {}: no I/O at all", c["jobname"]));
        }
        summary.push(format!(
            "{}: read {} write {} I/Os",
            c["jobname"], c["read"]["total_ios"], c["write"]["total_ios"]
        ));
    }
    Ok(summary.join(", "))
}

/// One step of the check: its name and verdict.
struct Verdict {
    name: &'static str,
    result: Result<String, String>,
}

fn expect_refusal(run: &ClientRun, wanted: &str) -> Result<String, String> {
    let all = format!("{}{}", run.stdout, run.stderr);
    if run.success {
        return Err(format!("the client exited with success; output: {all}"));
    }
    let line = all
        .lines()
        .find(|l| l.contains(wanted))
        .ok_or_else(|| format!("no '{wanted}' in the client's output: {all}"))?;
    if !all.contains("exited with error 22") {
        return Err(format!("the client did not report error 22: {all}"));
    }
    Ok(format!("refused: {}", line.trim()))
}

/// `cargo xtask fleet-check`: boots three boxes with `fio.server=1` and drives them with the real
/// fio client. Fails (with SKIPPED) when no fio 3.33 is installed.
pub fn cmd_fleet_check(args: &[String]) -> Result<bool, String> {
    if let Some(a) = args.first() {
        return Err(format!("fleet-check: unknown option '{a}'"));
    }
    match Command::new("fio").arg("--version").output() {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == "fio-3.33" => {}
        Ok(out) => {
            println!(
                "xtask: fleet-check: SKIPPED (counts as failed): fio 3.33 is needed (its protocol), found {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
            return Ok(false);
        }
        Err(e) => {
            println!("xtask: fleet-check: SKIPPED (counts as failed): no fio client ({e}); install fio 3.33");
            return Ok(false);
        }
    }
    let dir = root().join("target/fleet-check");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // A job writing to a device the box does not let clients write to (null0 exists, and only
    // nvme0n1 is writable).
    let forbidden = dir.join("write-null0.fio");
    std::fs::write(
        &forbidden,
        "[write-null]\nioengine=libaio\ndirect=1\nfilename=/dev/null0\nrw=write\nbs=4k\nsize=1m\n",
    )
    .map_err(|e| format!("{}: {e}", forbidden.display()))?;
    // A second job file for one connection; one job CPU, so it waits for the first file's job.
    let write_first = dir.join("write-first.fio");
    std::fs::write(
        &write_first,
        "[global]\nfilename=/dev/nvme0n1\nioengine=libaio\ndirect=1\n[write-first]\nrw=write\nbs=4k\nverify=crc32c\n",
    )
    .map_err(|e| format!("{}: {e}", write_first.display()))?;
    let then_read = dir.join("then-read.fio");
    std::fs::write(&then_read, "[then-read]\nstonewall\nrw=read\nbs=64k\n")
        .map_err(|e| format!("{}: {e}", then_read.display()))?;
    // Two clones, reported each on its own and then as one.
    let clones = dir.join("clones.fio");
    let clones_text = "[clones]\nioengine=libaio\ndirect=1\nfilename=/dev/nvme0n1\nrw=randread\nbs=4k\nnumjobs=2\n";
    std::fs::write(&clones, clones_text).map_err(|e| format!("{}: {e}", clones.display()))?;
    let clones_grouped = dir.join("clones-grouped.fio");
    std::fs::write(&clones_grouped, format!("{clones_text}group_reporting\n"))
        .map_err(|e| format!("{}: {e}", clones_grouped.display()))?;
    // The second box's boot job, run before it serves.
    let boot_job = dir.join("boot-read.fio");
    std::fs::write(
        &boot_job,
        "[boot-read]\nioengine=libaio\ndirect=1\nfilename=/dev/null0\nrw=randread\nbs=4k\niodepth=8\n",
    )
    .map_err(|e| format!("{}: {e}", boot_job.display()))?;
    let mut specs: Vec<BoxSpec> = Vec::new();
    for i in 0..3u8 {
        // Fresh disks: the partition guard must not see an earlier run's bytes.
        let disk = dir.join(format!("box{}.img", i + 1));
        let _ = std::fs::remove_file(&disk);
        ensure_disk(&disk, 64 << 20)?;
        specs.push(BoxSpec {
            name: format!("check{}", i + 1),
            device: RunDevice::Nvme,
            disk,
            host_port: free_port()?,
            smp: 2,
            kvm: false,
            index: i,
            words: [
                "fio.server.writable=nvme0n1",
                "null.size=64M",
                // Published jobs shortened: 4 MiB each, and 6 s for a time-based one (longer
                // than the client's 5 s ETA timeout).
                "fio.override.size=4m",
                "fio.override.runtime=6s",
            ]
            .map(String::from)
            .to_vec(),
            fio_files: Vec::new(),
        });
    }
    // The second box serves only the desk (QEMU's user network shows it as the gateway), runs a
    // boot job first, and polls the network on cpu1 of three (jobs on cpu0 and cpu2).
    specs[1].words.push("fio.server.allow=10.0.2.2/32".into());
    specs[1].words.push("net.cpu=1".into());
    specs[1].smp = 3;
    specs[1].fio_files.push(boot_job);
    // The third serves a network the desk is not on.
    specs[2].words.push("fio.server.allow=192.168.0.0/16".into());
    let specs_disk0 = specs[0].disk.clone();
    let mut boxes = boot_boxes(&specs, false)?;
    let mut verdicts = Vec::new();
    let one = [boxes[0].client_arg()];
    let write_verify = root().join("tests/fio/write-verify.fio");
    let seq = root().join("tests/fio/seq-128k.fio");

    // 1. A verify job; the client's figures are the box's.
    let mut step = |name, f: &mut dyn FnMut(&mut Vec<RunningBox>) -> Result<String, String>| {
        let result = f(&mut boxes);
        println!(
            "xtask: fleet-check: {name}: {}",
            match &result {
                Ok(s) => format!("ok ({s})"),
                Err(e) => format!("FAILED: {e}"),
            }
        );
        verdicts.push(Verdict { name, result });
    };
    step("verify job, figures equal the box's", &mut |boxes| {
        let (run, doc) = run_to_document(&one, &[&write_verify], &mut boxes[0])?;
        let client = client_json(&run)?;
        let job = &client["client_stats"][0];
        if job["error"] != 0 {
            return Err(format!("the job reports error {}", job["error"]));
        }
        same_figures(&client, &doc)
    });
    // 2. Job after job on the same box, each longer than the client's ETA timeout.
    step("second job file on the same box (two 6 s waves)", &mut |boxes| {
        let (run, doc) = run_to_document(&one, &[&seq], &mut boxes[0])?;
        same_figures(&client_json(&run)?, &doc)
    });
    // 2b. Two job files on one connection: fio's server runs them as one file (the first file's
    // [global] holds on into the second), one START each, one RUN.
    step("two job files on one connection", &mut |boxes| {
        let (run, doc) = run_to_document(&one, &[&write_first, &then_read], &mut boxes[0])?;
        let client = client_json(&run)?;
        let names: Vec<&str> = client["client_stats"]
            .as_array()
            .map(|a| a.iter().filter_map(|j| j["jobname"].as_str()).collect())
            .unwrap_or_default();
        if names != ["write-first", "then-read"] {
            return Err(format!(
                "expected the jobs of both files in order, the client shows {names:?}"
            ));
        }
        if client["client_stats"][1]["read"]["io_bytes"].as_u64().unwrap_or(0) == 0 {
            return Err("the second file's job read nothing".into());
        }
        // The first file's [global] holds on into the second, as in fio.
        boxes[0]
            .output
            .lines()
            .find(|l| l.starts_with("fio.server: job \"then-read\"") && l.contains("nvme0n1"))
            .ok_or("the second file's job does not read nvme0n1, the first file's [global] filename")?;
        same_figures(&client, &doc)
    });
    // 2c. Another protocol version than fio 3.33's: the box closes the connection, as fio's own
    // server does, and its console names both versions.
    step("another protocol version closed", &mut |boxes| {
        let version = fioserver::SERVER_VERSION - 1;
        match probe_with_version(boxes[0].host_port, version)? {
            Some(0) => {}
            Some(n) => return Err(format!("the box answered a version {version} probe with {n} bytes")),
            None => {
                return Err(format!(
                    "the box kept a version {version} probe's connection open for 10 s"
                ));
            }
        }
        boxes[0].wait_for("version line", Duration::from_secs(30), |l| {
            l.contains(&format!(
                "version mismatch ({} != {})",
                fioserver::SERVER_VERSION - 1,
                fioserver::SERVER_VERSION
            ))
        })
    });
    // 2d. A boot job beside fio.server=1 (box 2): it runs before the box listens, on the CPUs
    // client jobs get (not cpu1, which polls the network there).
    step("boot job before serving", &mut |boxes| {
        let out = &boxes[1].output;
        let passed = out
            .find("fio.server: boot job(s) passed")
            .ok_or("box 2 printed no 'boot job(s) passed' line")?;
        let listening = out.find(LISTENING_TAIL).ok_or("box 2 never listened")?;
        if passed > listening {
            return Err("box 2 listened before its boot job ended".into());
        }
        let placed = out
            .lines()
            .find(|l| l.starts_with("fio job \"boot-read\": group"))
            .ok_or("no placement line for the boot job")?;
        if !placed.contains(" on CPUs 0,") {
            return Err(format!("the boot job should run on cpu0 only: {placed}"));
        }
        Ok(format!(
            "passed before listening, {}",
            placed.split(", ioengine").next().unwrap_or(placed)
        ))
    });
    // 2e. net.cpu=1 (box 2): cpu1 polls, the clones of numjobs=2 run on cpu0 and cpu2, one TS
    // each without group_reporting and one for both with it, as fio reports them.
    step("net.cpu, numjobs with and without group_reporting", &mut |boxes| {
        let two = [boxes[1].client_arg()];
        boxes[1]
            .output
            .lines()
            .find(|l| l.contains(LISTENING_TAIL) && l.contains("cpu1 polls the network, jobs run on cpus 0,2"))
            .ok_or("box 2 does not poll on cpu1 with jobs on cpus 0 and 2")?;
        let (run, doc) = run_to_document(&two, &[&clones], &mut boxes[1])?;
        let client = client_json(&run)?;
        let each = same_figures(&client, &doc)?;
        // fio's client adds its "All clients" sum as soon as a box announces two TS.
        let ios: Vec<u64> = client["client_stats"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|j| j["jobname"] != "All clients")
                    .map(|j| j["read"]["total_ios"].as_u64().unwrap_or(0))
                    .collect()
            })
            .unwrap_or_default();
        if ios.len() != 2 || ios.contains(&0) {
            return Err(format!(
                "numjobs=2: expected a TS per clone, the client shows read I/Os {ios:?}"
            ));
        }
        let placed = boxes[1]
            .output
            .lines()
            .rev()
            .find(|l| l.starts_with("fio.server: job \"clones\""))
            .unwrap_or_default();
        if !placed.contains("cpus=0,2") {
            return Err(format!("the clones should run on cpu0 and cpu2: {placed}"));
        }
        let (run, doc) = run_to_document(&two, &[&clones_grouped], &mut boxes[1])?;
        let client = client_json(&run)?;
        let grouped = same_figures(&client, &doc)?;
        let stats = client["client_stats"]
            .as_array()
            .map_or(0, |a| a.iter().filter(|j| j["jobname"] != "All clients").count());
        if stats != 1 {
            return Err(format!(
                "numjobs=2 with group_reporting: expected one TS, the client shows {stats}"
            ));
        }
        Ok(format!("per clone {each}; grouped {grouped}"))
    });
    // 3. An option the front-end refuses comes back as fio's text and a failing exit.
    step("refused option", &mut |_| {
        let run = run_client(&one, &root().join("tests/fio/refused-zonemode.fio"), false)?;
        expect_refusal(&run, "zonemode")
    });
    // 3b. A job file on the box's disk (fio's LOAD_FILE) is not served.
    step("--remote-config refused", &mut |_| {
        let mut args = one.to_vec();
        args.push("--remote-config=/srv/jobs/remote.fio".into());
        let run = run_client_args(&args)?;
        expect_refusal(&run, "--remote-config")
    });
    // 4. A write to a device that is not writable is refused, naming it.
    step("write to a device not in fio.server.writable", &mut |_| {
        let run = run_client(&one, &forbidden, false)?;
        expect_refusal(&run, "not in fio.server.writable")
    });
    // 5. A client killed mid-run: its jobs stop, and the next client is served.
    step(
        "second client busy, client killed mid-run, next client served",
        &mut |boxes| {
            let mut cmd = Command::new("fio");
            cmd.current_dir(root())
                .args(&one)
                .arg(&seq)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = cmd.spawn().map_err(|e| format!("cannot run fio: {e}"))?;
            let started = boxes[0].wait_for("job start", Duration::from_secs(60), |l| {
                l.starts_with("fio.server: job \"seq-read\"")
            });
            // A second client while the first one's jobs run: turned away as busy.
            let busy = started
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|_| run_client(&one, &write_verify, false))
                .and_then(|run| expect_refusal(&run, "fio server busy: serving 10.0.2.2:"));
            let _ = child.kill();
            let _ = child.wait();
            started?;
            let busy = busy?;
            boxes[0].wait_for("'went away' line", Duration::from_secs(30), |l| l.contains("went away"))?;
            boxes[0].wait_for("'stopped early' line", Duration::from_secs(30), |l| {
                l.starts_with("fio.server: run stopped early")
            })?;
            let run = run_client(&one, &forbidden, false)?;
            // Served (the box's own refusal of this job), not turned away as busy.
            let served = expect_refusal(&run, "not in fio.server.writable")?;
            Ok(format!("second client {busy}; after the kill {served}"))
        },
    );
    // 6. Two boxes, two --client: each box's jobs, and fio's "All clients" sum.
    step("two boxes, All clients", &mut |boxes| {
        // fio attaches a job file to the --client before it: one after each.
        let job = write_verify.display().to_string();
        let run = run_client_args(&[
            "--output-format=json".into(),
            boxes[0].client_arg(),
            job.clone(),
            boxes[1].client_arg(),
            job,
        ])?;
        if !run.success {
            return Err(format!("the client failed: {}{}", run.stdout, run.stderr));
        }
        let client = client_json(&run)?;
        let stats = client["client_stats"].as_array().ok_or("no client_stats")?;
        let all = stats
            .iter()
            .find(|j| j["jobname"] == "All clients")
            .ok_or("no 'All clients' entry")?;
        let per_box: Vec<u64> = stats
            .iter()
            .filter(|j| j["jobname"] != "All clients")
            .map(|j| j["write"]["total_ios"].as_u64().unwrap_or(0))
            .collect();
        if per_box.len() != 2 || per_box.contains(&0) {
            return Err(format!("expected one write job per box, got write I/Os {per_box:?}"));
        }
        let sum: u64 = per_box.iter().sum();
        if all["write"]["total_ios"].as_u64() != Some(sum) {
            return Err(format!("All clients write I/Os {} != {sum}", all["write"]["total_ios"]));
        }
        Ok(format!("write I/Os {per_box:?}, All clients {sum}"))
    });
    // 7 (box 1, after its last write): a disk that carries a partition table is not written,
    // whatever the client sends: refused as fio's text and a failing exit.
    step("partition guard holds over the network", &mut |boxes| {
        let disk = &specs_disk0;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(disk)
            .map_err(|e| format!("{}: {e}", disk.display()))?;
        let bytes = file.metadata().map_err(|e| e.to_string())?.len();
        file.write_all(&qemu::mbr_sector(bytes))
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("{}: {e}", disk.display()))?;
        let run = run_client(&one, &write_verify, false)?;
        let refused = expect_refusal(&run, "refusing to write to nvme0n1: it carries")?;
        boxes[0].wait_for("'job file refused' line", Duration::from_secs(30), |l| {
            l.starts_with("fio.server: job file refused: job write-and-verify: refusing to write to nvme0n1")
        })?;
        Ok(refused)
    });
    // 8. A client outside the allow-list is reset: the client fails, the box names it.
    step("client outside fio.server.allow reset", &mut |boxes| {
        let run = run_client(&[boxes[2].client_arg()], &write_verify, false)?;
        if run.success {
            return Err(format!("the client exited with success: {}{}", run.stdout, run.stderr));
        }
        let line = boxes[2].wait_for("refusal line", Duration::from_secs(30), |l| {
            l.contains("refused (reset): not in fio.server.allow (192.168.0.0/16)")
        })?;
        if boxes[2].output.contains("job file accepted") {
            return Err("the box accepted a job from a client outside its allow-list".into());
        }
        Ok(line)
    });
    for b in &mut boxes {
        b.drain();
    }
    let failed: Vec<&Verdict> = verdicts.iter().filter(|v| v.result.is_err()).collect();
    println!(
        "xtask: fleet-check: {} of {} passed (consoles in target/fleet/)",
        verdicts.len() - failed.len(),
        verdicts.len()
    );
    for v in &failed {
        println!("xtask: fleet-check: FAILED: {}", v.name);
    }
    Ok(failed.is_empty())
}
