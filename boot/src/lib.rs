//! Boot entry for baremq: the Multiboot1 (a.out kludge), Multiboot2 and PVH
//! headers, the 32-bit entry that enables long mode with identity paging of
//! the low 4 GiB, and the real-mode trampoline application processors start in.
//!
//! Everything is one `global_asm!` so it lands in one object file: the linker
//! pulls that object in through `ENTRY(_start32)`, and the headers come with it.
#![no_std]

core::arch::global_asm!(
    include_str!("entry.S"),
    include_str!("ap_trampoline.S"),
    options(att_syntax)
);

unsafe extern "C" {
    static boot_pml4: u8;
    static ap_trampoline_start: u8;
    static ap_trampoline_end: u8;
    static __kernel_start: u8;
    static __kernel_end: u8;
    static boot_entry_tsc: u64;
}

/// The TSC when the loader handed over to the kernel (`_start32`), for the
/// boot-phase report: under QEMU the TSC starts at 0 when the VM does.
pub fn entry_tsc() -> u64 {
    // SAFETY: written once by the entry code before any Rust runs, never after.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(boot_entry_tsc)) }
}

/// Physical address of the boot PML4 (identity mapping of 0..4 GiB).
pub fn boot_pml4_address() -> u64 {
    core::ptr::addr_of!(boot_pml4) as u64
}

/// Physical start and end of the loaded kernel image, `.bss` included.
pub fn kernel_image_range() -> (u64, u64) {
    (
        core::ptr::addr_of!(__kernel_start) as u64,
        core::ptr::addr_of!(__kernel_end) as u64,
    )
}

/// The AP real-mode trampoline image, to be copied to [`AP_TRAMPOLINE_BASE`].
pub fn ap_trampoline_image() -> &'static [u8] {
    let start = core::ptr::addr_of!(ap_trampoline_start);
    let end = core::ptr::addr_of!(ap_trampoline_end);
    // SAFETY: both symbols delimit one contiguous read-only blob in `.rodata`
    // emitted by the assembly above; end >= start by construction.
    unsafe { core::slice::from_raw_parts(start, end as usize - start as usize) }
}

/// Physical address the AP trampoline is linked for (a SIPI vector of 0x08).
pub const AP_TRAMPOLINE_BASE: u64 = 0x8000;

/// Byte offsets inside the trampoline of the words the BSP patches before
/// each start-up IPI: CR3, the 64-bit entry point, the stack top and the
/// argument passed to the entry point.
pub mod trampoline_layout {
    /// Offset of the u32 CR3 value (the boot PML4 lies below 4 GiB).
    pub const CR3: usize = 8;
    /// Offset of the u64 address of the Rust AP entry function.
    pub const ENTRY: usize = 16;
    /// Offset of the u64 initial stack pointer.
    pub const STACK: usize = 24;
    /// Offset of the u64 argument passed in RDI.
    pub const ARG: usize = 32;
    /// Offset of the u32 flag the AP sets once it runs 64-bit code.
    pub const STARTED: usize = 40;
}
