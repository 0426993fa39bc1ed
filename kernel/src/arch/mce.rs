//! Machine-check architecture: the boot line (bank count, errors logged
//! before this boot) and the #MC report.
//!
//! CR4.MCE is set per CPU by [`crate::arch::cpu::init_descriptor_tables`].
//! A machine check then reaches vector 18 (on its own IST stack) and
//! [`report`] prints IA32_MCG_STATUS and every bank whose status is valid,
//! then ends the run with a FAILURE verdict, instead of the silent reset a
//! clear CR4.MCE gives.

use alloc::string::String;
use core::fmt::Write;
use x86_64::registers::control::{Cr4, Cr4Flags};
use x86_64::registers::model_specific::Msr;

const MCG_CAP: u32 = 0x179;
const MCG_STATUS: u32 = 0x17A;
/// IA32_MCi_STATUS is at 0x401 + 4 i; ADDR and MISC follow it.
const MC0_STATUS: u32 = 0x401;

const STATUS_VALID: u64 = 1 << 63;
const STATUS_OVERFLOW: u64 = 1 << 62;
const STATUS_UNCORRECTED: u64 = 1 << 61;
const STATUS_MISC_VALID: u64 = 1 << 59;
const STATUS_ADDR_VALID: u64 = 1 << 58;
const STATUS_CONTEXT_CORRUPT: u64 = 1 << 57;

const MCG_RIPV: u64 = 1 << 0;
const MCG_EIPV: u64 = 1 << 1;
const MCG_MCIP: u64 = 1 << 2;

fn read(msr: u32) -> u64 {
    // SAFETY: only called for MCA registers after CPUID reported MCA, and for
    // banks below MCG_CAP's count; reading them has no side effect.
    unsafe { Msr::new(msr).read() }
}

/// Whether CPUID reports the machine-check architecture (the MSRs exist).
fn has_mca() -> bool {
    raw_cpuid::CpuId::new().get_feature_info().is_some_and(|f| f.has_mca())
}

fn bank_count() -> u32 {
    (read(MCG_CAP) & 0xFF) as u32
}

/// One bank's status in words, e.g. `status=0x... (uncorrected, context corrupt) addr=0x...`.
fn describe_bank(out: &mut impl Write, bank: u32, status: u64) {
    let _ = write!(out, "bank {bank} status={status:#018x}");
    let flags = [
        (STATUS_UNCORRECTED, "uncorrected"),
        (STATUS_CONTEXT_CORRUPT, "processor context corrupt"),
        (STATUS_OVERFLOW, "overflow"),
    ];
    let mut first = true;
    for (bit, name) in flags {
        if status & bit != 0 {
            let _ = write!(out, "{}{name}", if first { " (" } else { ", " });
            first = false;
        }
    }
    if !first {
        let _ = out.write_char(')');
    }
    if status & STATUS_ADDR_VALID != 0 {
        let _ = write!(out, " addr={:#x}", read(MC0_STATUS + 4 * bank + 1));
    }
    if status & STATUS_MISC_VALID != 0 {
        let _ = write!(out, " misc={:#x}", read(MC0_STATUS + 4 * bank + 2));
    }
}

/// The boot line: CR4.MCE, the bank count, and any bank that logged an error
/// before this boot (printed, then cleared so a later report shows only new ones).
pub fn init() -> String {
    let enabled = Cr4::read().contains(Cr4Flags::MACHINE_CHECK_EXCEPTION);
    if !has_mca() {
        return alloc::format!(
            "mce: CR4.MCE {}; no machine-check architecture (no banks to read)",
            if enabled { "on" } else { "off" }
        );
    }
    let banks = bank_count();
    let mut line = alloc::format!("mce: CR4.MCE {}, {banks} MCA banks", if enabled { "on" } else { "off" });
    let mut logged = 0;
    for bank in 0..banks {
        let status = read(MC0_STATUS + 4 * bank);
        if status & STATUS_VALID == 0 {
            continue;
        }
        logged += 1;
        line.push_str("; logged before this boot: ");
        describe_bank(&mut line, bank, status);
        // SAFETY: writing 0 to a bank's status is architecturally allowed and
        // only clears the logged error.
        unsafe { Msr::new(MC0_STATUS + 4 * bank).write(0) };
    }
    if logged == 0 {
        line.push_str(", none holds an error");
    }
    line
}

/// The #MC handler: prints MCG_STATUS and the banks, then ends the run.
pub fn report(cpu: usize, rip: u64) -> ! {
    use crate::arch::console::emergency_println;
    if !has_mca() {
        crate::arch::exit::failure(format_args!(
            "machine check on cpu{cpu} at rip={rip:#x} (no machine-check architecture to read)"
        ));
    }
    let mcg = read(MCG_STATUS);
    emergency_println!(
        "MACHINE CHECK on cpu{cpu} at rip={rip:#x}: MCG_STATUS={mcg:#x} (restart ip {}, error ip {}, in progress {})",
        if mcg & MCG_RIPV != 0 { "valid" } else { "invalid" },
        if mcg & MCG_EIPV != 0 { "valid" } else { "invalid" },
        if mcg & MCG_MCIP != 0 { "yes" } else { "no" },
    );
    let mut errors = 0;
    for bank in 0..bank_count() {
        let status = read(MC0_STATUS + 4 * bank);
        if status & STATUS_VALID != 0 {
            errors += 1;
            // No heap here: the interrupted code may hold its lock.
            let mut line: heapless::String<192> = heapless::String::new();
            describe_bank(&mut line, bank, status);
            emergency_println!("  {line}");
        }
    }
    crate::arch::exit::failure(format_args!(
        "machine check on cpu{cpu} at rip={rip:#x}: MCG_STATUS={mcg:#x}, {errors} bank(s) with an error"
    ))
}
