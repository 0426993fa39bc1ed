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
    /// Extra arguments; `-m`, `-smp` and `-bios` here replace the defaults, and
    /// so does a console wired to stdio (`-serial ...` or `-chardev stdio,...`,
    /// e.g. a UART on COM2 or PCI only) for the default `-serial stdio` (COM1).
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
        for s in ["-nodefaults", "-display", "none", "-no-reboot"] {
            push(s);
        }
        let own_console = has(&["-serial"])
            || self
                .extra
                .windows(2)
                .any(|w| w[0] == "-chardev" && (w[1] == "stdio" || w[1].starts_with("stdio,")));
        if !own_console {
            push("-serial");
            push("stdio");
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

/// `-initrd` arguments that hand `files` to a Multiboot1 (or PVH) kernel as boot modules, each
/// with the string `PATH fio` (QEMU loads the part before the space and passes the whole entry
/// as the module's string), so the kernel knows them for fio job files. QEMU separates entries
/// with commas and reads `,,` as a comma; a path with a space cannot be passed.
///
/// With `pvh`, QEMU takes one file, the whole argument as its name, and passes no module string
/// (the kernel then recognises the job file by its first line, a `[section]`).
pub fn fio_initrd_args(files: &[PathBuf], pvh: bool) -> Result<Vec<String>, String> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    if pvh && files.len() > 1 {
        return Err("QEMU's PVH boot loads one -initrd module: give one fio job file".into());
    }
    let mut entries = Vec::new();
    for file in files {
        if !file.is_file() {
            return Err(format!("fio job file {} does not exist", file.display()));
        }
        let path = file.display().to_string();
        if path.contains(char::is_whitespace) {
            return Err(format!(
                "fio job file {path}: QEMU's -initrd cannot take a path with spaces"
            ));
        }
        if pvh {
            entries.push(path);
        } else {
            entries.push(format!("{} fio", path.replace(',', ",,")));
        }
    }
    Ok(vec!["-initrd".into(), entries.join(",")])
}

/// How a QEMU run ended.
#[derive(Debug)]
pub struct Outcome {
    /// QEMU's exit status; `None` when killed (timeout) or by a signal.
    pub exit_code: Option<i32>,
    pub output: String,
    pub elapsed: Duration,
    /// Monitor commands of the [`MonitorScript`] that were sent.
    pub monitor_sent: usize,
}

/// Human-monitor commands sent while QEMU runs: each `(TEXT, COMMAND)` when a
/// console line first contains TEXT (after the previous one was sent).
/// QEMU must have been started with `-monitor unix:SOCKET,server,nowait`.
#[derive(Debug, Clone)]
pub struct MonitorScript {
    pub socket: PathBuf,
    pub steps: Vec<(String, String)>,
}

/// Sends one command to the monitor at `socket` and waits (up to 2 s) for its next prompt.
fn send_monitor_command(socket: &Path, command: &str) -> Result<(), String> {
    use std::io::Read;
    let mut stream =
        std::os::unix::net::UnixStream::connect(socket).map_err(|e| format!("monitor {}: {e}", socket.display()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| format!("monitor: {e}"))?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    // The banner ends with the first prompt; the command's output ends with the second.
    for prompts in 1..=2 {
        if prompts == 2 {
            stream
                .write_all(format!("{command}\n").as_bytes())
                .map_err(|e| format!("monitor: {e}"))?;
        }
        while seen.windows(6).filter(|w| w == b"(qemu)").count() < prompts {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return Ok(()),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    }
    Ok(())
}

/// Streams a QEMU child's output into `tx`, a line at a time, from two threads: its console
/// (stdout, as the kernel wrote it, a trailing CR dropped) and its own messages (stderr, each
/// prefixed `qemu: `). The child must have been spawned with both piped.
pub fn forward_output(child: &mut Child, tx: mpsc::Sender<String>) -> [std::thread::JoinHandle<()>; 2] {
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let tx2 = tx.clone();
    [
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
    ]
}

/// Kills the child if it is still running when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the QEMU `binary` (the system's, or the one with the emulated Fusion controller) with
/// `args`; streams the console to stdout when `echo`. Writes the whole output to `log` when given.
pub fn run_with(
    binary: &Path,
    args: &[String],
    timeout: Duration,
    echo: bool,
    log: Option<&Path>,
) -> Result<Outcome, String> {
    run_scripted_with(binary, args, timeout, echo, log, None)
}

/// [`run_with`], sending `script`'s monitor commands as their console
/// lines appear.
pub fn run_scripted_with(
    binary: &Path,
    args: &[String],
    timeout: Duration,
    echo: bool,
    log: Option<&Path>,
    script: Option<&MonitorScript>,
) -> Result<Outcome, String> {
    let mut monitor_sent = 0;
    let start = Instant::now();
    // In the repository root, so scenario paths such as `tests/data/...` resolve.
    let child = Command::new(binary)
        .current_dir(crate::root())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let mut child = KillOnDrop(child);
    let (tx, rx) = mpsc::channel::<String>();
    let readers = forward_output(&mut child.0, tx);
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
                if let Some(script) = script
                    && let Some((text, command)) = script.steps.get(monitor_sent)
                    && !line.starts_with("qemu: ")
                    && line.contains(text.as_str())
                {
                    let note = match send_monitor_command(&script.socket, command) {
                        Ok(()) => format!("xtask: monitor command sent: {command}"),
                        Err(e) => format!("xtask: monitor command '{command}' failed: {e}"),
                    };
                    monitor_sent += 1;
                    output.push_str(&note);
                    output.push('\n');
                }
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
        monitor_sent,
    })
}

/// Creates a fresh disk image (sparse raw file, or qcow2 through qemu-img).
/// Sector 0 of a disk of `bytes` with an MBR partition table (what `sfdisk` writes for one Linux
/// partition): one entry, type 0x83, from sector 2048 to the end (at least one sector), and the
/// 0x55AA boot signature. The kernel must refuse write jobs on such a disk unless told `destroy=1`.
pub fn mbr_sector(bytes: u64) -> [u8; 512] {
    let mut sector = [0u8; 512];
    let sectors = u32::try_from(bytes / 512).unwrap_or(u32::MAX);
    let start = 2048u32.min(sectors.saturating_sub(1)).max(1);
    let length = sectors.saturating_sub(start).max(1);
    let entry = &mut sector[446..462];
    entry[4] = 0x83;
    entry[8..12].copy_from_slice(&start.to_le_bytes());
    entry[12..16].copy_from_slice(&length.to_le_bytes());
    sector[510] = 0x55;
    sector[511] = 0xAA;
    sector
}

pub fn create_image(path: &Path, bytes: u64, format: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    match format {
        "raw" | "mbr" => {
            let f = std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
            f.set_len(bytes)
                .map_err(|e| format!("sizing {}: {e}", path.display()))?;
            if format == "mbr" {
                use std::os::unix::fs::FileExt;
                f.write_all_at(&mbr_sector(bytes), 0)
                    .map_err(|e| format!("writing the MBR of {}: {e}", path.display()))?;
            }
            Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mbr_image_sector_holds_one_linux_partition_to_the_end() {
        let sector = mbr_sector(64 << 20);
        assert_eq!(&sector[510..], &[0x55, 0xAA]);
        let entry = &sector[446..462];
        assert_eq!((entry[0], entry[4]), (0x00, 0x83));
        assert_eq!(u32::from_le_bytes(entry[8..12].try_into().unwrap()), 2048);
        assert_eq!(u32::from_le_bytes(entry[12..16].try_into().unwrap()), 131_072 - 2048);
        assert!(sector[462..510].iter().all(|&b| b == 0), "one entry only");
        // A disk too small for sector 2048 still gets a non-empty entry inside it.
        let tiny = mbr_sector(4096);
        assert_eq!(u32::from_le_bytes(tiny[454..458].try_into().unwrap()), 7);
        assert_eq!(u32::from_le_bytes(tiny[458..462].try_into().unwrap()), 1);
    }

    fn machine(extra: &[&str]) -> Machine {
        Machine {
            accel: Accel::Tcg,
            firmware: Firmware::SeaBios,
            kernel: None,
            cdrom: None,
            append: Vec::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn serial_stdio_count(args: &[String]) -> usize {
        args.windows(2).filter(|w| w[0] == "-serial" && w[1] == "stdio").count()
    }

    #[test]
    fn com1_on_stdio_unless_the_scenario_wires_its_own_console() {
        assert_eq!(serial_stdio_count(&machine(&[]).args()), 1);
        assert_eq!(serial_stdio_count(&machine(&["-device", "nvme"]).args()), 1);
        // A COM2-only or PCI console: the chardev on stdio replaces COM1.
        let com2 = machine(&["-chardev", "stdio,id=sol", "-device", "isa-serial,chardev=sol,index=1"]).args();
        assert_eq!(serial_stdio_count(&com2), 0);
        assert!(com2.iter().any(|a| a == "isa-serial,chardev=sol,index=1"));
        // `-serial` given by the scenario replaces the default too.
        assert_eq!(serial_stdio_count(&machine(&["-serial", "null"]).args()), 0);
        // A chardev on another backend does not.
        assert_eq!(serial_stdio_count(&machine(&["-chardev", "socket,id=mon"]).args()), 1);
    }
}

#[cfg(test)]
mod fio_tests {
    use super::fio_initrd_args;
    use std::path::PathBuf;

    #[test]
    fn fio_initrd_args_escape_commas_and_mark_modules() {
        let dir = std::env::temp_dir().join(format!("xtask-fio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a,b.fio");
        let b = dir.join("c.fio");
        std::fs::write(&a, "[a]\n").unwrap();
        std::fs::write(&b, "[c]\n").unwrap();
        let args = fio_initrd_args(&[a.clone(), b.clone()], false).unwrap();
        assert_eq!(args[0], "-initrd");
        assert_eq!(
            args[1],
            format!("{} fio,{} fio", a.display().to_string().replace(',', ",,"), b.display())
        );
        assert!(fio_initrd_args(&[], false).unwrap().is_empty());
        assert!(fio_initrd_args(&[PathBuf::from("/nonexistent/x.fio")], false).is_err());
        assert_eq!(
            fio_initrd_args(std::slice::from_ref(&b), true).unwrap()[1],
            b.display().to_string()
        );
        assert!(fio_initrd_args(&[a, b], true).is_err(), "PVH takes one module");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
