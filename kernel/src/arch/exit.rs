//! Ending a run: the final verdict line, then QEMU's `isa-debug-exit` device.
//!
//! Exit codes written to port 0xf4: 0x10 for success (the shell sees 33) and
//! 0x11 for failure (35). On hardware without the device the port write does
//! nothing and the CPU halts after the same final line.

use x86_64::instructions::port::Port;

const DEBUG_EXIT_PORT: u16 = 0xf4;
const SUCCESS: u32 = 0x10;
const FAILURE: u32 = 0x11;

/// Prints `BAREMQ: SUCCESS` and ends the run.
pub fn success() -> ! {
    crate::arch::console::kprintln!("BAREMQ: SUCCESS");
    leave(SUCCESS)
}

/// Prints `BAREMQ: FAILURE: <reason>` and ends the run.
pub fn failure(reason: core::fmt::Arguments<'_>) -> ! {
    crate::arch::console::emergency_println!("BAREMQ: FAILURE: {}", reason);
    leave(FAILURE)
}

fn leave(code: u32) -> ! {
    // SAFETY: port 0xf4 is QEMU's isa-debug-exit (or unused on hardware); the
    // write terminates the VM and touches no memory.
    unsafe { Port::<u32>::new(DEBUG_EXIT_PORT).write(code) };
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}
