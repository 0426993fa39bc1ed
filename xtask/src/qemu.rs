//! Building QEMU command lines and running QEMU with a timeout, kill-on-drop,
//! and the serial console captured (and optionally streamed).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const QBOOT: &str = "/usr/share/qemu/qboot.rom";
pub const OVMF: &str = "/usr/share/qemu/OVMF.fd";

/// Accelerator choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Tcg,
    Kvm,
}

/// Firmware choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firmware {
    /// qboot when installed, else SeaBIOS.
    Qboot,
    SeaBios,
    Ovmf,
}

/// A QEMU invocation.
#[derive(Debug, Clone)]
pub struct Machine {
    pub accel: Accel,
    pub firmware: Firmware,
    pub kernel: Option<PathBuf>,
    pub cdrom: Option<PathBuf>,
    pub append: Vec<String>,
    /// Extra arguments; `-m`, `-smp` and `-bios` here replace the defaults.
    pub extra: Vec<String>,
}

impl Machine {
    /// The full argument vector.
    pub fn args(&self) -> Vec<String> {
        let has = |flag: &[&str]| self.extra.iter().any(|a| flag.contains(&a.as_str()));
        let mut a: Vec<String> = Vec::new();
        let mut push = |s: &str| a.push(s.to_string());
        match self.accel {
            Accel::Tcg => push("-accel"),
            Accel::Kvm => push("-accel"),
        }
        push(match self.accel {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        });
        if self.accel == Accel::Kvm {
            // kvm-pvm (this kind of machine) refuses to set IA32_ARCH_CAPABILITIES.
            push("-cpu");
            push("host,-arch-capabilities");
        }
        match self.firmware {
            _ if has(&["-bios"]) => {}
            Firmware::Qboot if Path::new(QBOOT).exists() => {
                push("-bios");
                push(QBOOT);
            }
            Firmware::Ovmf => {
                push("-bios");
                push(OVMF);
            }
            _ => {}
        }
        if !has(&["-m"]) {
            push("-m");
            push("256M");
        }
        if !has(&["-smp"]) {
            push("-smp");
            push("1");
        }
        for s in ["-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio"] {
            push(s);
        }
        for s in ["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"] {
            push(s);
        }
        if let Some(k) = &self.kernel {
            push("-kernel");
            push(&k.display().to_string());
            push("-append");
            push(&self.append.join(" "));
        }
        if let Some(iso) = &self.cdrom {
            push("-cdrom");
            push(&iso.display().to_string());
        }
        a.extend(self.extra.iter().cloned());
        a
    }
}

/// How a QEMU run ended.
#[derive(Debug)]
pub struct Outcome {
    /// QEMU's exit status; `None` when killed (timeout) or by a signal.
    pub exit_code: Option<i32>,
    pub output: String,
    pub elapsed: Duration,
}

/// Kills the child if it is still running when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs QEMU with `args`; streams the console to stdout when `echo`. Writes
/// the whole output to `log` when given.
pub fn run(args: &[String], timeout: Duration, echo: bool, log: Option<&Path>) -> Result<Outcome, String> {
    run_with(Path::new("qemu-system-x86_64"), args, timeout, echo, log)
}

/// [`run`] with another QEMU binary (e.g. the one with the emulated Fusion controller).
pub fn run_with(
    binary: &Path,
    args: &[String],
    timeout: Duration,
    echo: bool,
    log: Option<&Path>,
) -> Result<Outcome, String> {
    let start = Instant::now();
    let child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let mut child = KillOnDrop(child);
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.0.stdout.take().expect("piped stdout");
    let stderr = child.0.stderr.take().expect("piped stderr");
    let tx2 = tx.clone();
    let readers = [
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
                let line = String::from_utf8_lossy(&line).trim_end_matches('\r').to_string();
                if tx.send(line).is_err() {
                    break;
                }
            }
        }),
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx2.send(format!("qemu: {line}")).is_err() {
                    break;
                }
            }
        }),
    ];
    let deadline = start + timeout;
    let mut output = String::new();
    let mut timed_out = false;
    loop {
        let now = Instant::now();
        if now >= deadline {
            timed_out = true;
            break;
        }
        match rx.recv_timeout(deadline - now) {
            Ok(line) => {
                if echo {
                    println!("{line}");
                    let _ = std::io::stdout().flush();
                }
                output.push_str(&line);
                output.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let exit_code = if timed_out {
        let _ = child.0.kill();
        let _ = child.0.wait();
        output.push_str(&format!(
            "xtask: QEMU killed after the {} s timeout\n",
            timeout.as_secs()
        ));
        None
    } else {
        child.0.wait().map_err(|e| format!("waiting for QEMU: {e}"))?.code()
    };
    drop(child);
    for r in readers {
        let _ = r.join();
    }
    if let Some(path) = log {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(path, &output);
    }
    Ok(Outcome {
        exit_code,
        output,
        elapsed: start.elapsed(),
    })
}

/// Creates a fresh disk image (sparse raw file, or qcow2 through qemu-img).
pub fn create_image(path: &Path, bytes: u64, format: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    match format {
        "raw" => {
            let f = std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
            f.set_len(bytes).map_err(|e| format!("sizing {}: {e}", path.display()))
        }
        _ => {
            let status = Command::new("qemu-img")
                .args([
                    "create",
                    "-q",
                    "-f",
                    format,
                    &path.display().to_string(),
                    &bytes.to_string(),
                ])
                .status()
                .map_err(|e| format!("running qemu-img: {e}"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("qemu-img create failed for {}", path.display()))
            }
        }
    }
}
