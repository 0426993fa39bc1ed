//! Per-CPU descriptor tables (GDT + TSS with IST stacks) and the CPU identity report.

use crate::arch::percpu;
use alloc::boxed::Box;
use x86_64::VirtAddr;
use x86_64::instructions::segmentation::{CS, DS, ES, SS, Segment};
use x86_64::instructions::tables::load_tss;
use x86_64::structures::gdt::{Descriptor, SegmentSelector};

/// IST slots (1-based in the IDT, 0-based in the TSS).
pub const IST_DOUBLE_FAULT: u8 = 1;
pub const IST_NMI: u8 = 2;
pub const IST_MACHINE_CHECK: u8 = 3;
/// Size of each IST stack.
pub const IST_STACK_BYTES: usize = 16 * 1024;

/// Builds and loads this CPU's GDT and TSS. Needs the heap (IST stacks).
pub fn init_descriptor_tables() {
    let slot = percpu::current();
    // SAFETY: this CPU's own slot, written once here before the GDT/TSS are
    // loaded; they are never mutated again, so the 'static borrows stay valid.
    let (gdt, tss) = unsafe { (&mut *slot.gdt.get(), &mut *slot.tss.get()) };
    for ist in [IST_DOUBLE_FAULT, IST_NMI, IST_MACHINE_CHECK] {
        let stack = Box::leak(alloc::vec![0u8; IST_STACK_BYTES].into_boxed_slice());
        let top = VirtAddr::from_ptr(stack.as_ptr()) + IST_STACK_BYTES as u64;
        tss.interrupt_stack_table[(ist - 1) as usize] = top.align_down(16u64);
    }
    let code = gdt.append(Descriptor::kernel_code_segment());
    let data = gdt.append(Descriptor::kernel_data_segment());
    // SAFETY: `tss` lives in a static per-CPU slot (never moved or freed).
    let tss_sel = gdt.append(unsafe { Descriptor::tss_segment_unchecked(tss) });
    debug_assert_eq!(code, SegmentSelector(0x08), "the IDT gates use selector 0x08");
    // SAFETY: the GDT is in a static slot and never changes after this point.
    unsafe {
        gdt.load_unsafe();
        CS::set_reg(code);
        DS::set_reg(data);
        ES::set_reg(data);
        SS::set_reg(data);
        load_tss(tss_sel);
    }
    enable_machine_check();
}

/// Sets CR4.MCE when the CPU has machine-check exceptions: with it clear, a
/// machine check shuts the CPU down (the board resets, no message); with it
/// set, #MC reaches the IDT and is reported ([`crate::arch::mce`]). Needs
/// the IST stack set up just before.
fn enable_machine_check() {
    let has_mce = raw_cpuid::CpuId::new().get_feature_info().is_some_and(|f| f.has_mce());
    if has_mce {
        // SAFETY: the CPU has the feature, so the bit is defined; setting it
        // only changes how a machine check is delivered.
        unsafe {
            x86_64::registers::control::Cr4::update(|flags| {
                flags.insert(x86_64::registers::control::Cr4Flags::MACHINE_CHECK_EXCEPTION)
            })
        };
    }
}

/// Top of this CPU's IST stack `ist` (1-based), 0 before its TSS is set up.
pub fn ist_top(ist: u8) -> u64 {
    let slot = percpu::current();
    // SAFETY: the TSS is written only by this CPU during its bring-up, which
    // has finished (or not started, and then the table reads zero).
    let tss = unsafe { &*slot.tss.get() };
    // The TSS is packed: copy the table out rather than borrow into it.
    let table = { tss.interrupt_stack_table };
    table.get(usize::from(ist).wrapping_sub(1)).map_or(0, |v| v.as_u64())
}

/// The CPU's vendor, brand string and the features baremq cares about.
pub fn describe() -> heapless::String<192> {
    use core::fmt::Write;
    let id = raw_cpuid::CpuId::new();
    let mut s = heapless::String::new();
    let vendor = id.get_vendor_info();
    let brand = id.get_processor_brand_string();
    let _ = write!(
        s,
        "{} \"{}\"",
        vendor.as_ref().map(|v| v.as_str()).unwrap_or("unknown-vendor"),
        brand.as_ref().map(|b| b.as_str().trim()).unwrap_or("unknown model")
    );
    if let Some(f) = id.get_feature_info() {
        let _ = write!(
            s,
            " family {} model {} stepping {}",
            f.family_id(),
            f.model_id(),
            f.stepping_id()
        );
        let _ = write!(s, "; x2apic={}", yes_no(f.has_x2apic()));
        let _ = write!(s, " tsc-deadline={}", yes_no(f.has_tsc_deadline()));
    }
    let invariant = id.get_advanced_power_mgmt_info().is_some_and(|p| p.has_invariant_tsc());
    let _ = write!(s, " invariant-tsc={}", yes_no(invariant));
    s
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Applies `crc32c=` to the workload's checksum and returns the line the boot prints.
///
/// `auto` uses the SSE4.2 instruction when CPUID reports it on bare metal, and the table under
/// a hypervisor: QEMU's TCG emulates `crc32` in a helper call, slower than the table (null0
/// randrw with crc32c verify, `-cpu max`: 0.77-0.79x the IOPS), and this project's kvm-pvm
/// reports SSE4.2 yet stops the guest with an emulation failure on `crc32`, which a kernel
/// cannot catch. `hw` forces the instruction and fails when the CPU lacks it.
pub fn select_crc32c(mode: bootinfo::cmdline::Crc32cMode) -> Result<heapless::String<160>, &'static str> {
    use bootinfo::cmdline::Crc32cMode;
    use core::fmt::Write;
    use crc32c::{Crc32cImpl, allow_hardware, available, selected};
    let has_instruction = available(Crc32cImpl::Sse42);
    let id = raw_cpuid::CpuId::new();
    let hypervisor = id.get_hypervisor_info().map(|h| h.identify());
    let (allow, why) = match mode {
        Crc32cMode::Table => (false, "crc32c=table"),
        Crc32cMode::Hardware if !has_instruction => {
            return Err("crc32c=hw: this CPU has no SSE4.2 crc32 instruction (CPUID.1:ECX bit 20)");
        }
        Crc32cMode::Hardware => (true, "crc32c=hw"),
        Crc32cMode::Auto => match hypervisor {
            None => (has_instruction, "crc32c=auto, bare metal"),
            Some(raw_cpuid::Hypervisor::QEMU) => (false, "crc32c=auto, QEMU TCG emulates the instruction slowly"),
            Some(_) => (false, "crc32c=auto under a hypervisor; crc32c=hw uses the instruction"),
        },
    };
    allow_hardware(allow);
    let mut line = heapless::String::new();
    let _ = write!(
        line,
        "crc32c: {} ({why}; SSE4.2 {})",
        selected().as_str(),
        if has_instruction { "present" } else { "absent" }
    );
    Ok(line)
}
