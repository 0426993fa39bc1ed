//! `cargo xtask peer`: the Linux peer, the baseline baremq is measured against. A Debian Linux
//! guest (the kernel package `linux-image-amd64` depends on, a static fio 3.33 built from
//! Debian's source package, busybox) booted in the same QEMU with the same device flags as
//! baremq, running fio with io_uring, `--direct=1` and scheduler `none`.
//!
//! ```text
//! cargo xtask peer build                        kernel, fio, busybox and initramfs, once
//! cargo xtask peer run SCENARIO [SMP] [TAG] [OPTIONS]
//! cargo xtask peer table                        Markdown tables of every saved run
//! ```
//!
//! Everything lives in one cache directory ([`peer_dir`]): `BAREMQ_PEER_DIR`, else
//! `$XDG_CACHE_HOME/baremq/peer`, else `~/.cache/baremq/peer`. The guest's `/init` is
//! `xtask/peer/guest/init`; the lines it prints (`RESULT`, `PEER_*`) are read by
//! [`run`](run::run), by `cargo xtask ipio --linux` and by `xtask/scripts/side-by-side.sh`.
//! `cargo xtask fio-compare` boots the same kernel and initramfs with an `/init` of its own.

mod build;
pub mod cpio;
pub mod run;
mod table;

use std::path::PathBuf;

pub use build::{Built, ensure_built};

pub const USAGE: &str = "\
usage: cargo xtask peer build
       cargo xtask peer run SCENARIO [SMP] [TAG] [OPTIONS]
       cargo xtask peer table

build   downloads and builds the Linux peer under $BAREMQ_PEER_DIR (default ~/.cache/baremq/peer):
        Debian's kernel package, busybox-static, fio 3.33 from Debian's source package (static),
        and an initramfs with the guest's /init (xtask/peer/guest/init). Does nothing when
        everything is there. Run as root it installs the Debian packages it needs.
run     boots the peer in QEMU (TCG) and runs fio jobs; prints one RESULT line per job and writes
        the console and the results under the cache's results/ (builds first if needed).
        SCENARIO: megasas-nullco   megasas-gen2 + scsi-hd on an 8 GiB null-co disk (/dev/sda)
                  megasas-shm      megasas-gen2 + scsi-hd on a raw file in /dev/shm
                  nvme-nullco      QEMU nvme, one queue pair per vCPU, on null-co (/dev/nvme0n1)
                  nullblk          the guest's own null_blk, no device (--nbmodes)
                  custom           any device: --device-args \"-blockdev ... -device ...\" --guest megasas|nvme
        SMP: vCPUs (default 1). TAG: names the run's files, SCENARIO-ACCEL-smpN-rTAG (default 1).
        options (each also read from the environment variable named after it):
          --jobs J,J,...        (JOBS) rr4k_qd1 rr4k_qd32 sr128k_qd8 rw4k_qd32 vf4k irqs
                                rr4k_qd1_hipri rr4k_qd32_hipri (default: the first four)
          --nbmodes M,M,...     (NBMODES) nullblk modes irq0 irq1 poll (default: all three)
          --runtime S           (RUNTIME) seconds per job (default 10)
          --ramp S              (RAMP) fio ramp time, seconds (default 1)
          --accel tcg|kvm       (ACCEL) default tcg
          --qemu BINARY         (QEMU) default qemu-system-x86_64
          --qemu-extra \"ARGS\"   (QEMU_EXTRA) more QEMU arguments, e.g. -plugin ...
          --device-args \"ARGS\"  (DEVICE_ARGS) custom: the disk's QEMU arguments
          --guest megasas|nvme  (GUEST) custom: which driver the guest loads (default megasas)
          --module-args \"K=V ...\" (MODULE_ARGS) parameters of the storage module (megaraid_sas,
                                nvme or null_blk) on its insmod, e.g. perf_mode=1, poll_queues=1
        options without an environment variable:
          --mem SIZE (1G)  --cpu MODEL (max; host with kvm)  --timeout S (240)  --append \"WORDS\"
          --no-json (no fio JSON on the console)  --cache none|writeback  --aio io_uring|native|threads
          --shm-size SIZE (1G; megasas-shm)  --verbose (echo the whole console)  --dry-run
table   Markdown tables (IOPS, MB/s, p50/p99 latency, boot timing) of the cache's results/
";

/// `cargo xtask peer ...`.
pub fn cmd_peer(args: &[String]) -> Result<bool, String> {
    let env = |name: &str| std::env::var(name).ok();
    match args.first().map(String::as_str) {
        Some("build") => {
            if let Some(extra) = args.get(1) {
                return Err(format!("peer build: unexpected '{extra}'\n{USAGE}"));
            }
            ensure_built(&peer_dir(&env)?)?;
            Ok(true)
        }
        Some("run") => {
            let options = run::RunOptions::parse(&args[1..], &env)?;
            let built = ensure_built(&peer_dir(&env)?)?;
            let outcome = run::run(&built, &options)?;
            Ok(outcome.verdict().is_ok())
        }
        Some("table") => {
            if let Some(extra) = args.get(1) {
                return Err(format!("peer table: unexpected '{extra}'\n{USAGE}"));
            }
            let results = peer_dir(&env)?.join("results");
            print!("{}", table::tables(&results)?);
            Ok(true)
        }
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            Ok(true)
        }
        Some(other) => Err(format!("peer: unknown command '{other}'\n{USAGE}")),
        None => Err(format!("peer: give a command\n{USAGE}")),
    }
}

/// The cache directory of the peer: `BAREMQ_PEER_DIR`, else `$XDG_CACHE_HOME/baremq/peer`,
/// else `$HOME/.cache/baremq/peer`.
pub fn peer_dir(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    if let Some(dir) = set("BAREMQ_PEER_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(cache) = set("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(cache).join("baremq/peer"));
    }
    set("HOME")
        .map(|home| PathBuf::from(home).join(".cache/baremq/peer"))
        .ok_or_else(|| "peer: none of BAREMQ_PEER_DIR, XDG_CACHE_HOME and HOME is set".into())
}

/// The peer's directory from the process environment.
pub fn default_dir() -> Result<PathBuf, String> {
    peer_dir(&|name| std::env::var(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_cache_directory_follows_the_environment() {
        let all = [("BAREMQ_PEER_DIR", "/p"), ("XDG_CACHE_HOME", "/c"), ("HOME", "/h")];
        assert_eq!(peer_dir(&env_of(&all)).unwrap(), PathBuf::from("/p"));
        assert_eq!(
            peer_dir(&env_of(&[
                ("BAREMQ_PEER_DIR", ""),
                ("XDG_CACHE_HOME", "/c"),
                ("HOME", "/h")
            ]))
            .unwrap(),
            PathBuf::from("/c/baremq/peer")
        );
        assert_eq!(
            peer_dir(&env_of(&[("HOME", "/h")])).unwrap(),
            PathBuf::from("/h/.cache/baremq/peer")
        );
        assert!(peer_dir(&env_of(&[])).unwrap_err().contains("BAREMQ_PEER_DIR"));
    }

    #[test]
    fn unknown_commands_and_stray_words_are_refused() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(
            cmd_peer(&words(&["frobnicate"]))
                .unwrap_err()
                .contains("unknown command 'frobnicate'")
        );
        assert!(cmd_peer(&words(&[])).unwrap_err().contains("give a command"));
        assert!(
            cmd_peer(&words(&["build", "now"]))
                .unwrap_err()
                .contains("unexpected 'now'")
        );
        assert!(
            cmd_peer(&words(&["table", "x"]))
                .unwrap_err()
                .contains("unexpected 'x'")
        );
        // The scenario is checked before anything is built or booted.
        assert!(
            cmd_peer(&words(&["run", "sata"]))
                .unwrap_err()
                .contains("unknown scenario 'sata'")
        );
    }
}
