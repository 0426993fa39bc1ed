//! First-run setup: the bare-metal target, QEMU, and GRUB image making.

use std::path::Path;
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

/// Writes a GRUB rescue image (BIOS and, when grub-efi is installed, UEFI)
/// holding `kernel`, with menu entries for Multiboot2 (default) and
/// Multiboot1, both passing `args`, and the serial console on COM1.
pub fn make_grub_image(kernel: &Path, out: &Path, args: &str, timeout_s: u32) -> Result<(), String> {
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
    let cfg = format!(
        "serial --unit=0 --speed=115200\n\
         terminal_input serial console\n\
         terminal_output serial console\n\
         set timeout={timeout_s}\n\
         set default=0\n\
         menuentry \"baremq (multiboot2) {args}\" {{\n    multiboot2 /boot/baremq {args}\n    boot\n}}\n\
         menuentry \"baremq (multiboot1) {args}\" {{\n    multiboot /boot/baremq {args}\n    boot\n}}\n\
         menuentry \"baremq: platform report only\" {{\n    multiboot2 /boot/baremq\n    boot\n}}\n"
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
    use super::parse_candidate;

    #[test]
    fn candidate_is_read_from_apt_cache_policy() {
        let policy = "qemu-system-x86:\n  Installed: (none)\n  Candidate: 1:7.2+dfsg-7+deb12u18+b3\n  Version table:\n";
        assert_eq!(parse_candidate(policy).as_deref(), Some("1:7.2+dfsg-7+deb12u18+b3"));
        assert_eq!(parse_candidate("x:\n  Installed: (none)\n  Candidate: (none)\n"), None);
        assert_eq!(parse_candidate(""), None);
    }
}
