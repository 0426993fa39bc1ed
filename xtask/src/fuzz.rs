//! `cargo xtask fuzz`: runs the cargo-fuzz targets in `fuzz/` (nightly and
//! cargo-fuzz only; not part of `cargo xtask test` or CI). Each target calls
//! the same check as the fixed-count fuzz pass in `cargo test`, so the
//! long runs here and the short deterministic ones there test the same
//! invariants.

use std::process::Command;

use crate::{root, sh};

/// Every target: name (a `[[bin]]` of `fuzz/Cargo.toml`), the check it
/// calls, and the `cargo test` pass that runs the same check.
pub const TARGETS: &[(&str, &str, &str)] = &[
    (
        "multiboot1",
        "bootinfo::fuzz::multiboot1",
        "kernel/bootinfo/tests/fuzz.rs",
    ),
    (
        "multiboot2",
        "bootinfo::fuzz::multiboot2",
        "kernel/bootinfo/tests/fuzz.rs",
    ),
    ("pvh", "bootinfo::fuzz::pvh", "kernel/bootinfo/tests/fuzz.rs"),
    (
        "memory_map",
        "bootinfo::fuzz::memory_map",
        "kernel/bootinfo/tests/fuzz.rs",
    ),
    (
        "command_line",
        "bootinfo::fuzz::command_line",
        "kernel/bootinfo/tests/fuzz.rs",
    ),
    (
        "acpi_rsdp",
        "platform::fuzz::acpi_rsdp",
        "kernel/platform/tests/fuzz_passes.rs",
    ),
    (
        "acpi_tables",
        "platform::fuzz::acpi_tables",
        "kernel/platform/tests/fuzz_passes.rs",
    ),
    (
        "acpi_madt",
        "platform::fuzz::acpi_madt",
        "kernel/platform/tests/fuzz_passes.rs",
    ),
    (
        "acpi_mcfg",
        "platform::fuzz::acpi_mcfg",
        "kernel/platform/tests/fuzz_passes.rs",
    ),
    (
        "acpi_server_tables",
        "platform::fuzz::acpi_server_tables",
        "kernel/platform/tests/fuzz_passes.rs",
    ),
    (
        "pci_config",
        "platform::fuzz::pci_config",
        "kernel/platform/tests/fuzz_passes.rs",
    ),
    (
        "pci_assign",
        "platform::fuzz::pci_assign",
        "kernel/platform/tests/fuzz_passes.rs",
    ),
    (
        "job_words",
        "job_words in kernel/workload/tests/fuzz.rs",
        "kernel/workload/tests/fuzz.rs",
    ),
];

pub const USAGE: &str = "\
usage: cargo xtask fuzz TARGET [-- LIBFUZZER ARGS...]
       cargo xtask fuzz --list
  runs `cargo +nightly fuzz run TARGET` on the targets in fuzz/ (needs the nightly toolchain and
  cargo-fuzz; not part of `cargo xtask test`). Example, 30 seconds:
       cargo xtask fuzz acpi_madt -- -max_total_time=30
  Crashes are written to fuzz/artifacts/TARGET/, the corpus to fuzz/corpus/TARGET/.";

pub fn cmd_fuzz(args: &[String]) -> Result<bool, String> {
    let (opts, fuzzer_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    match opts {
        [flag] if flag == "--list" => {
            println!("{:<14} {:<45} same check in cargo test", "target", "check");
            for (name, check, test) in TARGETS {
                println!("{name:<14} {check:<45} {test}");
            }
            Ok(true)
        }
        [target] if !target.starts_with('-') => {
            if !TARGETS.iter().any(|(name, _, _)| name == target) {
                let names: Vec<&str> = TARGETS.iter().map(|(name, _, _)| *name).collect();
                return Err(format!("fuzz: no target '{target}'; targets: {}", names.join(", ")));
            }
            check_tools()?;
            let mut cmd = nightly_cargo();
            cmd.args(["fuzz", "run", "--fuzz-dir", "fuzz", target.as_str()]);
            if !fuzzer_args.is_empty() {
                cmd.arg("--").args(fuzzer_args);
            }
            sh(&mut cmd)?;
            Ok(true)
        }
        _ => Err(USAGE.to_string()),
    }
}

/// `cargo +nightly` through the rustup proxy, with the variables that pin
/// the workspace's stable toolchain removed (`cargo xtask` runs under it).
fn nightly_cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .current_dir(root());
    cmd
}

/// A clear message, with the install command, when nightly or cargo-fuzz is missing.
fn check_tools() -> Result<(), String> {
    let nightly = nightly_cargo().arg("--version").output();
    if !nightly.is_ok_and(|out| out.status.success()) {
        return Err(
            "fuzz: the nightly toolchain is missing (cargo-fuzz needs it); install it with\n  \
             rustup toolchain install nightly\nthen cargo-fuzz with\n  cargo +nightly install cargo-fuzz"
                .into(),
        );
    }
    let fuzz = nightly_cargo().args(["fuzz", "--version"]).output();
    if !fuzz.is_ok_and(|out| out.status.success()) {
        return Err("fuzz: cargo-fuzz is not installed; install it with\n  cargo +nightly install cargo-fuzz".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table matches `fuzz/Cargo.toml` and `fuzz/fuzz_targets/`, and
    /// every target's check is called by its file.
    #[test]
    fn targets_match_the_fuzz_crate() {
        let manifest = std::fs::read_to_string(root().join("fuzz/Cargo.toml")).unwrap();
        let bins: Vec<&str> = manifest
            .lines()
            .filter_map(|line| line.strip_prefix("name = \""))
            .filter_map(|rest| rest.strip_suffix('"'))
            .filter(|name| *name != "baremq-fuzz")
            .collect();
        let names: Vec<&str> = TARGETS.iter().map(|(name, _, _)| *name).collect();
        assert_eq!(bins, names);
        for (name, check, test) in TARGETS {
            let source = std::fs::read_to_string(root().join(format!("fuzz/fuzz_targets/{name}.rs"))).unwrap();
            let called = check.split_whitespace().next().unwrap();
            assert!(source.contains(called), "{name}.rs does not call {called}");
            let test_source = std::fs::read_to_string(root().join(test)).unwrap();
            let function = called.rsplit("::").next().unwrap();
            assert!(test_source.contains(function), "{test} does not run {function}");
        }
    }

    #[test]
    fn unknown_target_and_bad_usage_are_errors() {
        let error = cmd_fuzz(&["nope".to_string()]).unwrap_err();
        assert!(error.contains("no target 'nope'") && error.contains("acpi_madt"));
        assert!(cmd_fuzz(&[]).unwrap_err().contains("usage"));
        assert!(cmd_fuzz(&["--bogus".to_string()]).unwrap_err().contains("usage"));
        assert!(cmd_fuzz(&["--list".to_string()]).unwrap());
    }
}
