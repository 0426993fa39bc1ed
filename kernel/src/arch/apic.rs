//! Local APIC (x2APIC when the CPU has it, xAPIC otherwise), the legacy PICs,
//! the LAPIC timer and inter-processor interrupts.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use x86_64::instructions::port::Port;
use x86_64::registers::model_specific::Msr;

const IA32_APIC_BASE: u32 = 0x1B;
const APIC_BASE_ENABLE: u64 = 1 << 11;
const APIC_BASE_X2APIC: u64 = 1 << 10;

// Register offsets in the xAPIC MMIO page; the x2APIC MSR is 0x800 + offset/16.
const REG_ID: u32 = 0x20;
const REG_TPR: u32 = 0x80;
const REG_EOI: u32 = 0xB0;
const REG_SVR: u32 = 0xF0;
const REG_ICR_LOW: u32 = 0x300;
const REG_ICR_HIGH: u32 = 0x310;
const REG_LVT_TIMER: u32 = 0x320;
const REG_LVT_LINT0: u32 = 0x350;
const REG_LVT_LINT1: u32 = 0x360;
const REG_LVT_ERROR: u32 = 0x370;
const REG_TIMER_INITIAL: u32 = 0x380;
const REG_TIMER_CURRENT: u32 = 0x390;
const REG_TIMER_DIVIDE: u32 = 0x3E0;

const LVT_MASKED: u32 = 1 << 16;
const TIMER_PERIODIC: u32 = 1 << 17;
/// Divide configuration value for "divide by 16".
const DIVIDE_BY_16: u32 = 0b0011;

static X2APIC: AtomicBool = AtomicBool::new(false);
/// CPUID says the CPU has x2APIC (recorded by `choose_mode`).
static CPU_HAS_X2APIC: AtomicBool = AtomicBool::new(false);
/// Firmware handed over the BSP's APIC already in x2APIC mode.
static FIRMWARE_LEFT_X2APIC: AtomicBool = AtomicBool::new(false);
static XAPIC_BASE: AtomicU64 = AtomicU64::new(0xFEE0_0000);

/// Whether the local APICs run in x2APIC mode.
pub fn is_x2apic() -> bool {
    X2APIC.load(Ordering::Relaxed)
}

fn read(reg: u32) -> u32 {
    if is_x2apic() {
        // SAFETY: x2APIC registers are architectural MSRs once x2APIC is enabled.
        unsafe { Msr::new(0x800 + (reg >> 4)).read() as u32 }
    } else {
        let addr = XAPIC_BASE.load(Ordering::Relaxed) + reg as u64;
        // SAFETY: the xAPIC page is identity-mapped uncached (boot page tables,
        // 3-4 GiB window); a volatile 32-bit read is the architected access.
        unsafe { core::ptr::read_volatile(addr as *const u32) }
    }
}

fn write(reg: u32, value: u32) {
    if is_x2apic() {
        // SAFETY: as in `read`; writes to these registers only affect the local APIC.
        unsafe { Msr::new(0x800 + (reg >> 4)).write(value as u64) }
    } else {
        let addr = XAPIC_BASE.load(Ordering::Relaxed) + reg as u64;
        // SAFETY: as in `read`.
        unsafe { core::ptr::write_volatile(addr as *mut u32, value) }
    }
}

/// Remaps the 8259 PICs to vectors 0x20-0x2F and masks every line, so a
/// stray legacy IRQ can never land on an exception vector.
pub fn disable_legacy_pics() {
    let out = |port: u16, v: u8| {
        // SAFETY: the 8259 command/data ports; this is the standard init sequence.
        unsafe { Port::<u8>::new(port).write(v) }
    };
    out(0x20, 0x11);
    out(0xA0, 0x11);
    out(0x21, 0x20);
    out(0xA1, 0x28);
    out(0x21, 0x04);
    out(0xA1, 0x02);
    out(0x21, 0x01);
    out(0xA1, 0x01);
    out(0x21, 0xFF);
    out(0xA1, 0xFF);
}

/// Chooses the mode (on the BSP; APs follow it) from CPUID.
pub fn choose_mode() {
    let has_x2 = raw_cpuid::CpuId::new()
        .get_feature_info()
        .is_some_and(|f| f.has_x2apic());
    X2APIC.store(has_x2, Ordering::Relaxed);
    CPU_HAS_X2APIC.store(has_x2, Ordering::Relaxed);
    // SAFETY: reading IA32_APIC_BASE has no side effects.
    let apic_base = unsafe { Msr::new(IA32_APIC_BASE).read() };
    FIRMWARE_LEFT_X2APIC.store(apic_base & APIC_BASE_X2APIC != 0, Ordering::Relaxed);
    let base = apic_base & 0x000F_FFFF_FFFF_F000;
    if base != 0 {
        XAPIC_BASE.store(base, Ordering::Relaxed);
    }
}

/// Honours the DMAR's x2APIC opt-out once ACPI has been read (the mode was
/// chosen from CPUID before that). Runs on the BSP before any AP starts, so
/// going back to xAPIC only concerns this CPU: its APIC is disabled (the
/// architected way out of x2APIC) and set up again in xAPIC mode.
pub fn honour_dmar_opt_out(
    dmar_x2apic_opt_out: bool,
    highest_apic_id: u32,
    spurious_vector: u8,
) -> platform::cpus::ApicModeChoice {
    let choice = platform::cpus::apic_mode_after_dmar(
        CPU_HAS_X2APIC.load(Ordering::Relaxed),
        FIRMWARE_LEFT_X2APIC.load(Ordering::Relaxed),
        dmar_x2apic_opt_out,
        highest_apic_id,
    );
    if is_x2apic() && !choice.is_x2apic() {
        let mut msr = Msr::new(IA32_APIC_BASE);
        // SAFETY: clearing both enable bits is the only permitted way from
        // x2APIC to xAPIC mode; no AP runs yet and interrupts are not enabled,
        // so nothing is lost while this CPU's APIC is off.
        unsafe {
            let v = msr.read() & !(APIC_BASE_ENABLE | APIC_BASE_X2APIC);
            msr.write(v);
        }
        X2APIC.store(false, Ordering::Relaxed);
        init_local(spurious_vector);
    }
    choice
}

/// Enables this CPU's local APIC: software-enabled with `spurious_vector`,
/// LINT0/LINT1/error/timer masked, accepting every priority.
pub fn init_local(spurious_vector: u8) {
    let mut msr = Msr::new(IA32_APIC_BASE);
    // SAFETY: setting the enable bits of IA32_APIC_BASE is the architected way
    // to turn the local APIC on; the base address is left as firmware set it.
    unsafe {
        let mut v = msr.read() | APIC_BASE_ENABLE;
        if is_x2apic() {
            v |= APIC_BASE_X2APIC;
        }
        msr.write(v);
    }
    write(REG_TPR, 0);
    write(REG_LVT_TIMER, LVT_MASKED);
    write(REG_LVT_LINT0, LVT_MASKED);
    write(REG_LVT_LINT1, LVT_MASKED);
    write(REG_LVT_ERROR, LVT_MASKED);
    write(REG_SVR, 0x100 | spurious_vector as u32);
}

/// This CPU's APIC id.
pub fn id() -> u32 {
    let raw = read(REG_ID);
    if is_x2apic() { raw } else { raw >> 24 }
}

/// Signals end of interrupt.
pub fn eoi() {
    write(REG_EOI, 0);
}

/// Starts the timer counting down from its maximum, masked (for calibration).
pub fn timer_start_free_running() {
    write(REG_TIMER_DIVIDE, DIVIDE_BY_16);
    write(REG_LVT_TIMER, LVT_MASKED);
    write(REG_TIMER_INITIAL, u32::MAX);
}

/// Current count of the timer.
pub fn timer_current() -> u32 {
    read(REG_TIMER_CURRENT)
}

/// Fires `vector` every `ticks` timer ticks (divide by 16).
pub fn timer_periodic(vector: u8, ticks: u32) {
    write(REG_TIMER_DIVIDE, DIVIDE_BY_16);
    write(REG_LVT_TIMER, TIMER_PERIODIC | vector as u32);
    write(REG_TIMER_INITIAL, ticks.max(1));
}

/// Stops the timer.
pub fn timer_stop() {
    write(REG_LVT_TIMER, LVT_MASKED);
    write(REG_TIMER_INITIAL, 0);
}

/// ICR delivery modes used by baremq.
#[derive(Clone, Copy)]
pub enum Delivery {
    Fixed(u8),
    /// Non-maskable interrupt (vector 2), delivered even with interrupts off.
    Nmi,
    Init,
    InitDeassert,
    Startup(u8),
}

/// Sends an IPI to the CPU with `apic_id` and waits until the xAPIC accepted it.
pub fn send_ipi(apic_id: u32, delivery: Delivery) {
    let low: u32 = match delivery {
        Delivery::Fixed(v) => v as u32,
        Delivery::Nmi => 0x0000_0400,          // NMI delivery mode, edge
        Delivery::Init => 0x0000_C500,         // INIT, level, assert
        Delivery::InitDeassert => 0x0000_8500, // INIT, level, de-assert
        Delivery::Startup(page) => 0x0000_4600 | page as u32,
    };
    write_icr(apic_id, low);
}

/// Sends a fixed IPI to every CPU but this one (destination shorthand).
pub fn send_ipi_all_others(vector: u8) {
    write_icr(0, (0b11 << 18) | vector as u32);
}

/// Writes the interrupt command register: destination APIC id and the low
/// word (vector, delivery mode, shorthand).
fn write_icr(apic_id: u32, low: u32) {
    if is_x2apic() {
        let mut icr = Msr::new(0x830);
        // SAFETY: one 64-bit write to the x2APIC ICR sends the IPI.
        unsafe { icr.write(platform::cpus::icr_x2apic(apic_id, low)) };
    } else {
        // xAPIC mode only exists with 8-bit ids (the firmware must hand over
        // in x2APIC mode above 255), so this never drops an IPI in practice.
        let Some((high, low)) = platform::cpus::icr_xapic(apic_id, low) else {
            log::error!("apic: IPI to APIC id {apic_id} dropped: xAPIC mode addresses ids up to 255 only");
            return;
        };
        // The xAPIC ICR is two registers: an interrupt between the writes whose
        // handler sends its own IPI would retarget ours (a wake IPI then lands
        // on the wrong CPU and is lost). Keep the pair atomic on this CPU.
        x86_64::instructions::interrupts::without_interrupts(|| {
            write(REG_ICR_HIGH, high);
            write(REG_ICR_LOW, low);
            wait_icr_idle();
        });
    }
}

/// xAPIC: waits (bounded) until the delivery-status bit says the IPI was sent.
fn wait_icr_idle() {
    for _ in 0..1_000_000 {
        if read(REG_ICR_LOW) & (1 << 12) == 0 {
            break;
        }
        core::hint::spin_loop();
    }
}
