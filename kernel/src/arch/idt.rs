//! The interrupt descriptor table, its entry stubs and the trap dispatcher.
//!
//! 256 stubs, 16 bytes apart, are generated in assembly: each pushes a zero
//! error code (unless the CPU pushed one), its vector number, and jumps to a
//! common path that saves every general-purpose register and calls
//! [`trap_dispatch`] with a pointer to the resulting [`TrapFrame`]. Stable
//! Rust has no `x86-interrupt` ABI, so this is the whole entry path.
//! Exceptions (vectors 0-31) are reported in full and end the run; vectors
//! 32-255 go to the interrupt dispatch table.

use crate::arch::cpu::{IST_DOUBLE_FAULT, IST_MACHINE_CHECK, IST_NMI};
use core::cell::UnsafeCell;
use x86_64::VirtAddr;
use x86_64::instructions::tables::lidt;
use x86_64::structures::DescriptorTablePointer;

core::arch::global_asm!(
    r#"
    .section .text.isr, "ax"
    .p2align 4
    .global isr_stubs
isr_stubs:
    .set vec, 0
    .rept 256
    .p2align 4
    .if (vec == 8) | (vec == 10) | (vec == 11) | (vec == 12) | (vec == 13) | (vec == 14) | (vec == 17) | (vec == 21) | (vec == 29) | (vec == 30)
    .else
    pushq $0
    .endif
    pushq $vec
    jmp isr_common
    .set vec, vec + 1
    .endr

isr_common:
    pushq %rax
    pushq %rbx
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %rbp
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, %rdi
    cld
    call {dispatch}
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rbp
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rbx
    popq %rax
    addq $16, %rsp
    iretq
"#,
    dispatch = sym trap_dispatch,
    options(att_syntax)
);

unsafe extern "C" {
    static isr_stubs: u8;
}

/// Registers saved on entry, lowest address first (the order of the pushes, reversed).
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    pub vector: u64,
    pub error_code: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

#[repr(C, align(16))]
struct Idt(UnsafeCell<[Gate; 256]>);

// SAFETY: written only by the BSP in `init` before any other CPU starts or
// any interrupt is enabled; read-only (by the CPU itself) afterwards.
unsafe impl Sync for Idt {}

static IDT: Idt = Idt(UnsafeCell::new(
    [Gate {
        offset_low: 0,
        selector: 0,
        ist: 0,
        type_attr: 0,
        offset_mid: 0,
        offset_high: 0,
        reserved: 0,
    }; 256],
));

/// Fills the IDT (once, on the BSP) and loads it on this CPU.
pub fn init() {
    // The asm stub table: stub n is at base + 16 * n.
    let base = core::ptr::addr_of!(isr_stubs) as u64;
    // SAFETY: single-threaded early boot with interrupts off (see `Idt`'s Sync).
    let gates = unsafe { &mut *IDT.0.get() };
    for (vector, gate) in gates.iter_mut().enumerate() {
        let handler = base + 16 * vector as u64;
        let ist = match vector {
            8 => IST_DOUBLE_FAULT,
            2 => IST_NMI,
            18 => IST_MACHINE_CHECK,
            _ => 0,
        };
        *gate = Gate {
            offset_low: handler as u16,
            selector: 0x08,
            ist,
            type_attr: 0x8E, // present, DPL 0, 64-bit interrupt gate (IF cleared on entry)
            offset_mid: (handler >> 16) as u16,
            offset_high: (handler >> 32) as u32,
            reserved: 0,
        };
    }
    load();
}

/// Marks `vector`'s gate not present (for the double-fault self-test: an
/// exception delivered through it escalates to #DF).
pub fn remove_gate_for_test(vector: u8) {
    // SAFETY: called with interrupts off by a self-test that ends the run;
    // clearing the present bit of one gate is a single byte store.
    unsafe { (*IDT.0.get())[vector as usize].type_attr &= !0x80 };
}

/// Loads the (already filled) IDT on this CPU.
pub fn load() {
    let ptr = DescriptorTablePointer {
        limit: (256 * 16 - 1) as u16,
        base: VirtAddr::new(IDT.0.get() as u64),
    };
    // SAFETY: the IDT is static and fully initialised by `init`.
    unsafe { lidt(&ptr) };
}

const EXCEPTION_NAMES: [&str; 32] = [
    "#DE divide error",
    "#DB debug",
    "NMI non-maskable interrupt",
    "#BP breakpoint",
    "#OF overflow",
    "#BR bound range exceeded",
    "#UD invalid opcode",
    "#NM device not available",
    "#DF double fault",
    "coprocessor segment overrun",
    "#TS invalid TSS",
    "#NP segment not present",
    "#SS stack-segment fault",
    "#GP general protection fault",
    "#PF page fault",
    "reserved 15",
    "#MF x87 floating-point error",
    "#AC alignment check",
    "#MC machine check",
    "#XM SIMD floating-point error",
    "#VE virtualization exception",
    "#CP control protection",
    "reserved 22",
    "reserved 23",
    "reserved 24",
    "reserved 25",
    "reserved 26",
    "reserved 27",
    "#HV hypervisor injection",
    "#VC VMM communication",
    "#SX security exception",
    "reserved 31",
];

extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    let vector = frame.vector as usize;
    if vector == 2 && crate::arch::watchdog::nmi_is_watchdog().is_none() {
        unknown_nmi(frame);
        return;
    }
    if vector < 32 {
        exception(frame);
    }
    crate::arch::irq::dispatch(vector as u8);
}

/// For vectors with their own IST stack, whether the handler really runs on it.
fn ist_note(vector: u64, stack: u64) -> &'static str {
    let ist = match vector {
        8 => IST_DOUBLE_FAULT,
        2 => IST_NMI,
        18 => IST_MACHINE_CHECK,
        _ => return "",
    };
    let top = crate::arch::cpu::ist_top(ist);
    if top != 0 && stack < top && stack >= top - crate::arch::cpu::IST_STACK_BYTES as u64 {
        " (on its IST stack)"
    } else {
        " (NOT on its IST stack)"
    }
}

/// NMIs that were not the watchdog's, machine-wide.
static UNKNOWN_NMIS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// Unknown NMIs reported line by line; later ones are only counted (a BMC
/// or a failing component can send them in bursts, and each line costs
/// milliseconds at 115200 baud with this CPU stopped).
const UNKNOWN_NMIS_REPORTED: u64 = 8;

/// An NMI nobody in the kernel sent: a BMC's diagnostic NMI, a
/// firmware-first error report, a PCI SERR# or IOCHK. It is reported with the
/// reason bits of port 0x61 and the run goes on: the NMI itself changes
/// nothing, and a real error also arrives as a machine check or a device error.
fn unknown_nmi(f: &TrapFrame) {
    let count = UNKNOWN_NMIS.fetch_add(1, core::sync::atomic::Ordering::Relaxed) + 1;
    if count > UNKNOWN_NMIS_REPORTED {
        return;
    }
    // SAFETY: reading the NMI status and control port has no side effect.
    let reason = unsafe { x86_64::instructions::port::Port::<u8>::new(0x61).read() };
    let what = match (reason & 0x80 != 0, reason & 0x40 != 0) {
        (true, true) => "PCI SERR# and IOCHK",
        (true, false) => "PCI SERR# (a device reported a system error)",
        (false, true) => "IOCHK (an I/O channel check)",
        (false, false) => "no reason in port 0x61 (a BMC, firmware or another CPU sent it)",
    };
    crate::arch::console::emergency_println!(
        "nmi: unknown NMI #{count} on cpu{} at rip={:#x}: {what}; reported and ignored, the run goes on{}",
        crate::arch::percpu::index(),
        f.rip,
        if count == UNKNOWN_NMIS_REPORTED {
            " (later ones are counted only)"
        } else {
            ""
        }
    );
}

/// Unknown NMIs seen so far (for the end-of-run report).
pub fn unknown_nmis() -> u64 {
    UNKNOWN_NMIS.load(core::sync::atomic::Ordering::Relaxed)
}

/// RFLAGS.IF: interrupts were enabled in the interrupted code.
const RFLAGS_IF: u64 = 1 << 9;

fn exception(f: &TrapFrame) -> ! {
    let cpu = crate::arch::percpu::index();
    if f.vector == 2
        && let Some(silent_ms) = crate::arch::watchdog::nmi_is_watchdog()
    {
        let interrupts = if f.rflags & RFLAGS_IF == 0 { "off" } else { "on" };
        crate::arch::console::emergency_println!(
            "watchdog: cpu{cpu} registers at the NMI (interrupts {interrupts} at rip={:#x}):",
            f.rip
        );
        print_registers(f);
        crate::arch::exit::failure(format_args!(
            "watchdog: cpu{cpu} made no progress for {silent_ms} ms (no timer tick handled; interrupts {interrupts} at rip={:#x})",
            f.rip
        ));
    }
    if f.vector == 18 {
        crate::arch::mce::report(cpu, f.rip);
    }
    let cr2 = x86_64::registers::control::Cr2::read_raw();
    crate::arch::console::emergency_println!(
        "EXCEPTION: {} (vector {}) on cpu{} error_code={:#x} rip={:#x} cr2={:#x}",
        EXCEPTION_NAMES[f.vector as usize & 31],
        f.vector,
        cpu,
        f.error_code,
        f.rip,
        cr2
    );
    print_registers(f);
    crate::arch::exit::failure(format_args!(
        "unhandled exception {} (vector {}) on cpu{} at rip={:#x}",
        EXCEPTION_NAMES[f.vector as usize & 31],
        f.vector,
        cpu,
        f.rip
    ))
}

/// The general-purpose registers, segments and flags of `f`, and the stack the handler runs on.
fn print_registers(f: &TrapFrame) {
    crate::arch::console::emergency_println!(
        "  rax={:#018x} rbx={:#018x} rcx={:#018x} rdx={:#018x}",
        f.rax,
        f.rbx,
        f.rcx,
        f.rdx
    );
    crate::arch::console::emergency_println!(
        "  rsi={:#018x} rdi={:#018x} rbp={:#018x} rsp={:#018x}",
        f.rsi,
        f.rdi,
        f.rbp,
        f.rsp
    );
    crate::arch::console::emergency_println!(
        "  r8 ={:#018x} r9 ={:#018x} r10={:#018x} r11={:#018x}",
        f.r8,
        f.r9,
        f.r10,
        f.r11
    );
    crate::arch::console::emergency_println!(
        "  r12={:#018x} r13={:#018x} r14={:#018x} r15={:#018x}",
        f.r12,
        f.r13,
        f.r14,
        f.r15
    );
    let stack: u64;
    // SAFETY: reads the stack pointer; no memory access.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) stack, options(nomem, nostack, preserves_flags)) };
    crate::arch::console::emergency_println!(
        "  cs={:#x} ss={:#x} rflags={:#x}; handler stack {:#x}{}",
        f.cs,
        f.ss,
        f.rflags,
        stack,
        ist_note(f.vector, stack)
    );
}
