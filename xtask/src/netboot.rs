//! `cargo xtask netboot DIR`: the tree a TFTP (or HTTP) server serves so that a rack boots baremq
//! from the network, and `cargo xtask netboot --check`, which boots it end to end in QEMU.
//!
//! The tree holds the kernel with its debug sections stripped (what crosses the wire), the job
//! files, an iPXE script for BIOS boxes (iPXE loads the kernel as a Multiboot image and each job
//! file as a module) and GRUB's network boot for UEFI boxes (`grub-mknetdir`: GRUB's EFI image
//! loads `grub/grub.cfg`, which loads the kernel with `multiboot2` and the jobs with `module2`).
//! Every path inside is relative to the tree's root, so any server root works.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::args::Options;
use crate::qemu::{self, Accel, Firmware, Machine};
use crate::{build_kernel, root, scenario, sh};

const USAGE: &str = "usage: cargo xtask netboot DIR [--debug] [--fio JOB.fio]... [-- ARGS...]\n       \
                     cargo xtask netboot --check";

/// The kernel's name in the tree.
const KERNEL: &str = "baremq.elf";
/// The iPXE script a DHCP server names as the boot file for iPXE clients.
const IPXE_SCRIPT: &str = "boot.ipxe";
/// GRUB's EFI image, what a DHCP server names for UEFI clients (`grub-mknetdir`'s layout).
const GRUB_EFI: &str = "grub/x86_64-efi/core.efi";
/// Where GRUB's modules live on this machine (Debian's `grub-efi-amd64-bin`).
const GRUB_EFI_MODULES: &str = "/usr/lib/grub/x86_64-efi";
/// iPXE keeps the kernel's and every module's command line, URI included, in one buffer of 512
/// bytes (its Multiboot loader's limit); each URI is counted as if its server part were this
/// long, the longest `tftp://` address.
const MULTIBOOT_CMDLINE_BUDGET: usize = 512;
const URI_PREFIX_ALLOWANCE: usize = "tftp://255.255.255.255/".len();

/// What goes into a tree.
struct Tree {
    kernel: PathBuf,
    jobs: Vec<PathBuf>,
    args: Vec<String>,
}

pub fn cmd_netboot(args: &[String]) -> Result<bool, String> {
    let mut debug = false;
    let mut check = false;
    let mut jobs = Vec::new();
    let mut dir = None;
    let mut kernel_args = Vec::new();
    let (own, after) = match args.iter().position(|a| a == "--") {
        Some(at) => (&args[..at], &args[at + 1..]),
        None => (args, &args[args.len()..]),
    };
    kernel_args.extend(after.iter().cloned());
    let mut options = Options::new(own);
    while let Some(option) = options.next()? {
        match option {
            "--debug" => debug = true,
            "--check" => check = true,
            "--fio" => jobs.push(PathBuf::from(options.value()?)),
            word if word.starts_with('-') => return Err(format!("netboot: unknown option '{word}'\n{USAGE}")),
            path if dir.is_none() => dir = Some(PathBuf::from(path)),
            extra => return Err(format!("netboot: one folder only ('{extra}')\n{USAGE}")),
        }
    }
    if check {
        if dir.is_some() || !jobs.is_empty() || !kernel_args.is_empty() {
            return Err(format!("netboot --check builds its own tree\n{USAGE}"));
        }
        return run_check(debug);
    }
    let dir = dir.ok_or(USAGE)?;
    let kernel = build_kernel(debug)?;
    let tree = Tree {
        kernel,
        jobs,
        args: kernel_args,
    };
    write_tree(&dir, &tree)?;
    println!("xtask: netboot tree in {}", dir.display());
    println!(
        "  serve it over TFTP (or HTTP); point the DHCP server's boot file at {IPXE_SCRIPT} for iPXE \
         (BIOS boxes, or iPXE chained from the NIC's ROM) and at {GRUB_EFI} for UEFI boxes"
    );
    Ok(true)
}

/// Writes the tree for `tree` into `dir` (created if needed; files of an earlier tree replaced).
fn write_tree(dir: &Path, tree: &Tree) -> Result<(), String> {
    std::fs::create_dir_all(dir.join("fio")).map_err(|e| format!("netboot: {}: {e}", dir.display()))?;
    strip(&tree.kernel, &dir.join(KERNEL))?;
    let mut modules = Vec::new();
    for (index, job) in tree.jobs.iter().enumerate() {
        let name = job
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
            .ok_or_else(|| {
                format!(
                    "netboot: job file {}: its name must be letters, digits, '.', '_' or '-' (it becomes a URI)",
                    job.display()
                )
            })?;
        let target = format!("fio/{}-{name}", index + 1);
        std::fs::copy(job, dir.join(&target)).map_err(|e| format!("netboot: copying {}: {e}", job.display()))?;
        modules.push(target);
    }
    let args = tree.args.join(" ");
    check_budget(&args, &modules)?;
    std::fs::write(dir.join(IPXE_SCRIPT), ipxe_script(&args, &modules))
        .map_err(|e| format!("netboot: writing {IPXE_SCRIPT}: {e}"))?;
    grub_netdir(dir)?;
    std::fs::write(dir.join("grub/grub.cfg"), grub_cfg(&args, &modules))
        .map_err(|e| format!("netboot: writing grub/grub.cfg: {e}"))?;
    Ok(())
}

/// The kernel without its debug sections: a tenth of the size, the same code.
pub(crate) fn strip(kernel: &Path, out: &Path) -> Result<(), String> {
    let tool = ["llvm-objcopy", "objcopy"]
        .into_iter()
        .find(|t| {
            Command::new(t)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or("netboot: objcopy (binutils) or llvm-objcopy is needed to strip the kernel")?;
    sh(Command::new(tool).arg("--strip-debug").arg(kernel).arg(out))?;
    let size = std::fs::metadata(out)
        .map_err(|e| format!("netboot: {}: {e}", out.display()))?
        .len();
    println!("xtask: netboot: {} is {} KiB stripped", out.display(), size / 1024);
    Ok(())
}

/// iPXE's one 512-byte buffer for every command line it hands over (see [`MULTIBOOT_CMDLINE_BUDGET`]).
fn check_budget(args: &str, modules: &[String]) -> Result<(), String> {
    let kernel = URI_PREFIX_ALLOWANCE + KERNEL.len() + 1 + args.len() + 1;
    let used = kernel
        + modules
            .iter()
            .map(|m| URI_PREFIX_ALLOWANCE + m.len() + " fio".len() + 1)
            .sum::<usize>();
    if used > MULTIBOOT_CMDLINE_BUDGET {
        return Err(format!(
            "netboot: the kernel's words and {} job file(s) need about {used} bytes of command line; iPXE hands \
             over at most {MULTIBOOT_CMDLINE_BUDGET}: shorten the words or put them in a job file",
            modules.len()
        ));
    }
    Ok(())
}

fn ipxe_script(args: &str, modules: &[String]) -> String {
    let mut s = String::from("#!ipxe\n# baremq: the kernel as a Multiboot image, each fio job file as a module.\n");
    // Relative URIs resolve against this script's own, so the tree works from any server root.
    let _ = writeln!(s, "kernel {KERNEL} {args}");
    for module in modules {
        let _ = writeln!(s, "module {module} fio");
    }
    s.push_str("boot\n");
    s
}

fn grub_cfg(args: &str, modules: &[String]) -> String {
    let mut s = String::from("set timeout=0\nmenuentry \"baremq\" {\n");
    let _ = writeln!(s, "  multiboot2 /{KERNEL} {args}");
    for module in modules {
        let _ = writeln!(s, "  module2 /{module} fio");
    }
    s.push_str("  boot\n}\n");
    s
}

/// GRUB's network boot images and modules under `dir/grub` (`grub-mknetdir`).
fn grub_netdir(dir: &Path) -> Result<(), String> {
    if !Path::new(GRUB_EFI_MODULES).is_dir() {
        return Err(format!(
            "netboot: {GRUB_EFI_MODULES} is missing: install grub-efi-amd64-bin (apt-get install -y \
             grub-efi-amd64-bin) for the UEFI network boot"
        ));
    }
    sh(Command::new("grub-mknetdir")
        .arg(format!("--net-directory={}", dir.display()))
        .arg("--subdir=grub")
        .arg("-d")
        .arg(GRUB_EFI_MODULES))
}

/// Boots a tree with a small fio job twice in QEMU, from its built-in TFTP server: SeaBIOS with
/// the NIC's iPXE ROM running `boot.ipxe`, and OVMF loading GRUB's EFI image. Each must run the
/// job (its module string a TFTP URI for iPXE) and end with the kernel's success.
fn run_check(debug: bool) -> Result<bool, String> {
    crate::setup::ensure_test_tools()?;
    let dir = root().join("target/netboot-check");
    let _ = std::fs::remove_dir_all(&dir);
    let job = root().join("tests/fio/netboot.fio");
    let tree = Tree {
        kernel: build_kernel(debug)?,
        jobs: vec![job],
        args: vec!["null.size=16m".into()],
    };
    write_tree(&dir, &tree)?;
    let mut ok = true;
    for (name, firmware, bootfile, module) in [
        (
            "iPXE (BIOS)",
            Firmware::SeaBios,
            IPXE_SCRIPT,
            "tftp://10.0.2.2/fio/1-netboot.fio fio",
        ),
        ("GRUB (UEFI)", Firmware::Ovmf, GRUB_EFI, "fio"),
    ] {
        let machine = Machine {
            accel: Accel::Tcg,
            firmware,
            kernel: None,
            cdrom: None,
            append: Vec::new(),
            extra: vec![
                "-M".into(),
                "q35".into(),
                "-m".into(),
                "512M".into(),
                "-netdev".into(),
                format!("user,id=n0,tftp={},bootfile={bootfile}", dir.display()),
                "-device".into(),
                "virtio-net-pci,netdev=n0,bootindex=1".into(),
                "-boot".into(),
                "n".into(),
            ],
        };
        if firmware == Firmware::SeaBios && machine.args().iter().any(|a| a == qemu::QBOOT) {
            return Err("netboot check: qboot cannot boot from the network; SeaBIOS must be used".into());
        }
        let log = dir.join(format!(
            "{}.log",
            if firmware == Firmware::Ovmf { "grub" } else { "ipxe" }
        ));
        let out = qemu::run_with(
            Path::new("qemu-system-x86_64"),
            &machine.args(),
            Duration::from_secs(240),
            false,
            Some(&log),
        )?;
        let boot = scenario::Boot {
            output: vec![
                format!("fio: boot module 1 \"{module}\": job file"),
                "job netboot: PASSED".into(),
            ],
            ..scenario::Boot::default()
        };
        match scenario::judge(&boot, out.exit_code, &out.output) {
            Ok(()) => println!(
                "xtask: netboot check: {name}: PASSED in {:.1} s (log {})",
                out.elapsed.as_secs_f64(),
                log.display()
            ),
            Err(why) => {
                ok = false;
                println!("xtask: netboot check: {name}: FAILED: {why} (log {})", log.display());
            }
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_load_the_kernel_and_each_job_by_relative_path() {
        let modules = vec!["fio/1-a.fio".to_string(), "fio/2-b.fio".to_string()];
        let ipxe = ipxe_script("null.size=16m log=info", &modules);
        assert!(ipxe.starts_with("#!ipxe\n"));
        assert!(ipxe.contains(
            "\nkernel baremq.elf null.size=16m log=info\nmodule fio/1-a.fio fio\nmodule fio/2-b.fio fio\nboot\n"
        ));
        let grub = grub_cfg("null.size=16m", &modules);
        assert!(grub.contains(
            "  multiboot2 /baremq.elf null.size=16m\n  module2 /fio/1-a.fio fio\n  module2 /fio/2-b.fio fio\n  boot\n"
        ));
    }

    #[test]
    fn command_lines_beyond_ipxes_buffer_are_refused() {
        assert!(check_budget("null.size=16m", &["fio/1-a.fio".into()]).is_ok());
        let long = "x".repeat(460);
        let error = check_budget(&long, &["fio/1-a.fio".into()]).unwrap_err();
        assert!(error.contains("512"), "{error}");
    }
}
