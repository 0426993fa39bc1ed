//! `cargo xtask bench`: runs a matrix of workload jobs in QEMU and writes
//! results and plots. (Being implemented.)

/// `cargo xtask bench [--matrix NAME] ...`.
pub fn cmd_bench(_args: &[String]) -> Result<bool, String> {
    Err("cargo xtask bench is not implemented yet".into())
}
