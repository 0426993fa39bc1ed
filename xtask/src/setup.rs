//! First-run setup: the bare-metal target, QEMU, and GRUB image making.

use std::path::{Path, PathBuf};
use std::process::Command;

/// True when `program` is on PATH.
pub fn have_program(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
}

/// Installs the `x86_64-unknown-none` standard library when rustup lacks it.
pub fn ensure_target() -> Result<(), String> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| {
            format!("cannot run rustup ({e}); install the target by hand: rustup target add x86_64-unknown-none")
        })?;
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "x86_64-unknown-none")
    {
        return Ok(());
    }
    println!("xtask: installing the x86_64-unknown-none target (rustup target add x86_64-unknown-none)");
    crate::sh(Command::new("rustup").args(["target", "add", "x86_64-unknown-none"]))
}

/// Installs QEMU with apt when running as root; otherwise says how.
///
/// `qemu-utils` is asked for only when `qemu-img` is missing: a machine may carry a newer one
/// (from backports) that conflicts with the distribution's `qemu-system-x86`. When apt reports
/// such a conflict, the install is retried with every QEMU package pinned to the candidate
/// release of `qemu-system-x86` (downgrading the newer `qemu-utils`), and what was done is printed.
pub fn ensure_qemu() -> Result<(), String> {
    if have_program("qemu-system-x86_64") {
        return Ok(());
    }
    let mut packages = vec![String::from("qemu-system-x86")];
    if !have_program("qemu-img") {
        packages.push("qemu-utils".into());
    }
    let cmd = format!("apt-get update && apt-get install -y {}", packages.join(" "));
    if !is_root() {
        return Err(format!("qemu-system-x86_64 is not installed; run as root: {cmd}"));
    }
    println!("xtask: qemu-system-x86_64 is missing; installing it: {cmd}");
    crate::sh(Command::new("apt-get").arg("update"))?;
    let first = crate::sh(Command::new("apt-get").arg("install").arg("-y").args(&packages));
    if first.is_ok() {
        return Ok(());
    }
    let version = candidate_version("qemu-system-x86").ok_or_else(|| {
        format!(
            "apt-get could not install {} and has no candidate version to pin",
            packages.join(" ")
        )
    })?;
    let pinned = [
        format!("qemu-system-x86={version}"),
        format!("qemu-system-common={version}"),
        format!("qemu-utils={version}"),
    ];
    println!(
        "xtask: apt refused (likely a newer qemu-utils from another release); retrying with every QEMU package \
         pinned to {version}: apt-get install -y --allow-downgrades {}",
        pinned.join(" ")
    );
    crate::sh(
        Command::new("apt-get")
            .args(["install", "-y", "--allow-downgrades"])
            .args(&pinned),
    )
    .map_err(|e| {
        format!(
            "{e}\nxtask: could not install QEMU {version}; remove the conflicting qemu packages \
             (apt-get remove qemu-utils) and run again"
        )
    })
}

/// What `cargo xtask test` needs beyond QEMU, each as (what is looked for, the Debian package
/// that brings it): the GRUB image scenarios (BIOS and UEFI), the TCG plugin of `ipio --check`
/// (a C compiler, `nm`) and fio's own `fio_jsonplus_clat2csv` (xtask's fio-output tests). The
/// Fusion QEMU's build packages come from `qemufusion::BUILD_PACKAGES`.
pub const TEST_TOOLS: &[(Needed, &str)] = &[
    (Needed::Program("grub-mkrescue"), "grub-common"),
    (Needed::Path("/usr/lib/grub/i386-pc"), "grub-pc-bin"),
    (Needed::Path("/usr/lib/grub/x86_64-efi"), "grub-efi-amd64-bin"),
    (Needed::Program("xorriso"), "xorriso"),
    (Needed::Program("mformat"), "mtools"),
    (Needed::Path("/usr/share/qemu/OVMF.fd"), "ovmf"),
    // The NIC ROMs (iPXE) that boot QEMU from the network (`netboot --check`).
    (Needed::Path("/usr/lib/ipxe/qemu/efi-virtio.rom"), "ipxe-qemu"),
    (Needed::Program("cc"), "gcc"),
    (Needed::Program("nm"), "binutils"),
    (Needed::Program("fio_jsonplus_clat2csv"), "fio"),
];

/// How [`ensure_test_tools`] tells whether a package is already there.
#[derive(Debug, Clone, Copy)]
pub enum Needed {
    /// A program on PATH.
    Program(&'static str),
    /// A file or folder.
    Path(&'static str),
    /// An installed Debian package (`dpkg-query`).
    Package(&'static str),
}

impl Needed {
    fn is_there(self) -> bool {
        match self {
            Self::Program(program) => have_program(program),
            Self::Path(path) => Path::new(path).exists(),
            Self::Package(package) => package_installed(package),
        }
    }
}

/// Whether dpkg has `package` installed.
pub fn package_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// The packages of `tools` whose check fails, each once, in order.
fn missing_packages(tools: &[(Needed, &'static str)], is_there: impl Fn(Needed) -> bool) -> Vec<&'static str> {
    let mut missing: Vec<&'static str> = Vec::new();
    for &(needed, package) in tools {
        if !is_there(needed) && !missing.contains(&package) {
            missing.push(package);
        }
    }
    missing
}

/// Installs what `cargo xtask test` needs on a fresh machine (QEMU, then [`TEST_TOOLS`] and the
/// Fusion QEMU's build packages) when
/// run as root; otherwise fails with the exact command to run.
pub fn ensure_test_tools() -> Result<(), String> {
    ensure_qemu()?;
    // The Fusion scenarios build their QEMU: its build packages, installed here with the rest.
    let tools: Vec<(Needed, &'static str)> = TEST_TOOLS
        .iter()
        .copied()
        .chain(
            crate::qemufusion::BUILD_PACKAGES
                .iter()
                .map(|&p| (Needed::Package(p), p)),
        )
        .collect();
    let missing = missing_packages(&tools, Needed::is_there);
    if missing.is_empty() {
        return Ok(());
    }
    let cmd = format!("apt-get update && apt-get install -y {}", missing.join(" "));
    if !is_root() {
        return Err(format!(
            "the tests need packages that are not installed; run as root: {cmd}"
        ));
    }
    println!("xtask: installing what the tests need: {cmd}");
    crate::sh(Command::new("apt-get").arg("update"))?;
    apt_get_install(&missing, Recommends::Install)?;
    ensure_qemu_img()
}

/// `apt-get install -y [--no-install-recommends] PACKAGES`, waiting up to 10 minutes for another
/// apt to let go of its lock (the callers check for root and say what they install).
pub fn apt_get_install(packages: &[&str], recommends: Recommends) -> Result<(), String> {
    let mut cmd = Command::new("apt-get");
    cmd.args(["-o", "DPkg::Lock::Timeout=600", "install", "-y"]);
    if recommends == Recommends::Skip {
        cmd.arg("--no-install-recommends");
    }
    crate::sh(cmd.args(packages))
}

/// Whether [`apt_get_install`] brings a package's recommended packages too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recommends {
    /// With them: what a test tool needs to work (gcc recommends the C library's headers, which
    /// the TCG plugin includes).
    Install,
    /// Without them: build dependencies named one by one.
    Skip,
}

/// apt may resolve a conflict with a newer `qemu-utils` (from backports) by removing it, which
/// takes `qemu-img` away: brings back the release that matches `qemu-system-x86`.
fn ensure_qemu_img() -> Result<(), String> {
    if have_program("qemu-img") {
        return Ok(());
    }
    let version = candidate_version("qemu-system-x86")
        .ok_or("qemu-img is missing and apt has no qemu-system-x86 candidate to match")?;
    println!("xtask: qemu-img is gone; installing qemu-utils={version}");
    crate::sh(Command::new("apt-get").args(["install", "-y", "--allow-downgrades", &format!("qemu-utils={version}")]))
}

/// The Debian release of this machine (`VERSION_CODENAME` of /etc/os-release; bookworm when it
/// says none), for the deb-src lines of source downloads.
pub fn debian_codename() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("VERSION_CODENAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "bookworm".into())
}

/// The version apt would install for `package` (`apt-cache policy`'s "Candidate:").
fn candidate_version(package: &str) -> Option<String> {
    let out = Command::new("apt-cache").args(["policy", package]).output().ok()?;
    parse_candidate(&String::from_utf8_lossy(&out.stdout))
}

fn parse_candidate(policy: &str) -> Option<String> {
    policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:"))
        .map(str::trim)
        .filter(|v| !v.is_empty() && *v != "(none)")
        .map(String::from)
}

/// The UART GRUB's menu uses (`serial --port=... --speed=...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrubSerial {
    pub port: u16,
    pub speed: u32,
}

impl GrubSerial {
    /// The UART the kernel's `console=` word in `args` names, when it is a port-I/O UART
    /// (`ttyS0`-`ttyS3`, `io:PORT`, with its baud); else (`auto`, absent, `mmio:`, `pci:`, which
    /// GRUB 2.06 cannot address) COM1 at 115200.
    pub fn from_kernel_args(args: &str) -> GrubSerial {
        use bootinfo::console::{ConsoleChoice, DEFAULT_BAUD, PC_PORTS, UartRegisters, parse_console};
        let choice = args
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("console="))
            .find_map(parse_console);
        match choice {
            Some(ConsoleChoice::Uart {
                registers: UartRegisters::Io(port),
                baud,
            }) => GrubSerial {
                port,
                speed: baud.unwrap_or(DEFAULT_BAUD),
            },
            _ => GrubSerial {
                port: PC_PORTS[0],
                speed: DEFAULT_BAUD,
            },
        }
    }

    /// The grub.cfg line.
    pub fn command(self) -> String {
        format!("serial --port={:#x} --speed={}", self.port, self.speed)
    }
}

/// The GRUB lines that load fio job files as modules: each file is copied to
/// `/boot/fio/N-NAME` and loaded with the string `fio`, so the kernel knows it for a job file
/// (`module2` for the Multiboot2 entry, `module` for the Multiboot1 one).
fn grub_module_lines(command: &str, modules: &[(String, PathBuf)]) -> String {
    modules
        .iter()
        .map(|(name, _)| format!("    {command} /boot/fio/{name} fio\n"))
        .collect()
}

/// Writes a GRUB rescue image (BIOS and, when grub-efi is installed, UEFI)
/// holding `kernel`, with menu entries for Multiboot2 (default) and
/// Multiboot1, both passing `args` and loading `fio_files` as boot modules, and GRUB's serial
/// terminal on the UART the kernel's `console=` names (COM1 by default, see [`GrubSerial`]).
pub fn make_grub_image_with_modules(
    kernel: &Path,
    out: &Path,
    args: &str,
    timeout_s: u32,
    fio_files: &[PathBuf],
) -> Result<(), String> {
    make_grub_image_on(
        kernel,
        out,
        args,
        timeout_s,
        GrubSerial::from_kernel_args(args),
        fio_files,
    )
}

/// [`make_grub_image_with_modules`] with GRUB's serial terminal on `serial`.
pub fn make_grub_image_on(
    kernel: &Path,
    out: &Path,
    args: &str,
    timeout_s: u32,
    serial: GrubSerial,
    fio_files: &[PathBuf],
) -> Result<(), String> {
    if !have_program("grub-mkrescue") {
        return Err(
            "grub-mkrescue is missing: apt-get install -y grub-pc-bin grub-efi-amd64-bin grub-common xorriso mtools"
                .into(),
        );
    }
    let stage = out.with_extension("d");
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(stage.join("boot/grub")).map_err(|e| format!("creating {}: {e}", stage.display()))?;
    std::fs::copy(kernel, stage.join("boot/baremq")).map_err(|e| format!("copying the kernel: {e}"))?;
    let mut modules = Vec::new();
    for (index, file) in fio_files.iter().enumerate() {
        let base = file
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .replace(|c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '-', "_")
            })
            .unwrap_or_default();
        let name = format!("{}-{base}", index + 1);
        std::fs::create_dir_all(stage.join("boot/fio")).map_err(|e| format!("creating boot/fio: {e}"))?;
        std::fs::copy(file, stage.join("boot/fio").join(&name))
            .map_err(|e| format!("copying fio job file {}: {e}", file.display()))?;
        modules.push((name, file.clone()));
    }
    let mb2_modules = grub_module_lines("module2", &modules);
    let mb1_modules = grub_module_lines("module", &modules);
    let cfg = format!(
        "{}\n\
         insmod all_video\n\
         terminal_input serial console\n\
         terminal_output serial console\n\
         set timeout={timeout_s}\n\
         set default=0\n\
         menuentry \"baremq (multiboot2) {args}\" {{\n    multiboot2 /boot/baremq {args}\n{mb2_modules}    boot\n}}\n\
         menuentry \"baremq (multiboot1, BIOS only: UEFI gives it no ACPI) {args}\" {{\n    multiboot /boot/baremq {args}\n{mb1_modules}    boot\n}}\n\
         menuentry \"baremq: platform report only\" {{\n    multiboot2 /boot/baremq\n    boot\n}}\n",
        serial.command()
    );
    std::fs::write(stage.join("boot/grub/grub.cfg"), cfg).map_err(|e| format!("writing grub.cfg: {e}"))?;
    let status = Command::new("grub-mkrescue")
        .arg("-o")
        .arg(out)
        .arg(&stage)
        .output()
        .map_err(|e| format!("running grub-mkrescue: {e}"))?;
    if !status.status.success() {
        return Err(format!(
            "grub-mkrescue failed: {}",
            String::from_utf8_lossy(&status.stderr)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{GrubSerial, Needed, grub_module_lines, missing_packages, parse_candidate};

    #[test]
    fn grub_serial_follows_the_kernel_console() {
        let serial = |args: &str| GrubSerial::from_kernel_args(args).command();
        assert_eq!(serial(""), "serial --port=0x3f8 --speed=115200");
        assert_eq!(serial("log=info console=auto"), "serial --port=0x3f8 --speed=115200");
        assert_eq!(serial("console=ttyS1"), "serial --port=0x2f8 --speed=115200");
        assert_eq!(
            serial("rw=read console=io:0x2e8,9600"),
            "serial --port=0x2e8 --speed=9600"
        );
        // GRUB 2.06 cannot address these: COM1.
        assert_eq!(serial("console=pci:00:05.0"), "serial --port=0x3f8 --speed=115200");
        assert_eq!(
            serial("console=mmio:0xfe032000,4"),
            "serial --port=0x3f8 --speed=115200"
        );
        // A malformed value is the kernel's to refuse; GRUB keeps COM1.
        assert_eq!(serial("console=com2"), "serial --port=0x3f8 --speed=115200");
    }

    #[test]
    fn grub_module_lines_mark_fio_files() {
        let modules = vec![
            (
                "1-seq-128k.fio".to_string(),
                std::path::PathBuf::from("tests/fio/seq-128k.fio"),
            ),
            ("2-x.fio".to_string(), std::path::PathBuf::from("x.fio")),
        ];
        assert_eq!(
            grub_module_lines("module2", &modules),
            "    module2 /boot/fio/1-seq-128k.fio fio\n    module2 /boot/fio/2-x.fio fio\n"
        );
        assert_eq!(grub_module_lines("module", &[]), "");
    }

    #[test]
    fn missing_packages_are_listed_once_in_order() {
        let tools = [
            (Needed::Program("a"), "pkg-a"),
            (Needed::Program("b"), "pkg-b"),
            (Needed::Path("/c"), "pkg-a"),
            (Needed::Package("d"), "pkg-d"),
        ];
        let there = |n: Needed| matches!(n, Needed::Program("b"));
        assert_eq!(missing_packages(&tools, there), ["pkg-a", "pkg-d"]);
        assert!(missing_packages(&tools, |_| true).is_empty());
    }

    #[test]
    fn candidate_is_read_from_apt_cache_policy() {
        let policy = "qemu-system-x86:\n  Installed: (none)\n  Candidate: 1:7.2+dfsg-7+deb12u18+b3\n  Version table:\n";
        assert_eq!(parse_candidate(policy).as_deref(), Some("1:7.2+dfsg-7+deb12u18+b3"));
        assert_eq!(parse_candidate("x:\n  Installed: (none)\n  Candidate: (none)\n"), None);
        assert_eq!(parse_candidate(""), None);
    }
}
