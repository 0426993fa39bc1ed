//! Serial console on COM1 and the `log` backend.
//!
//! Output is line-atomic across CPUs: a whole line is written under one
//! spinlock with interrupts disabled. The panic and exception paths use
//! [`write_str_emergency`], which waits a bounded time for the lock and then
//! writes anyway, so a CPU that died holding the lock cannot silence the report.

use core::fmt::{self, Write};
use x86_64::instructions::interrupts;
use x86_64::instructions::port::Port;

const COM1: u16 = 0x3f8;
const LINE_STATUS: u16 = COM1 + 5;
const THR_EMPTY: u8 = 1 << 5;

static LOCK: spin::Mutex<()> = spin::Mutex::new(());

/// Programs COM1 for 115200 8N1 with FIFOs, interrupts off (polled output).
pub fn init() {
    let regs = |off: u16, v: u8| {
        // SAFETY: COM1 registers; writing them only reconfigures the UART.
        unsafe { Port::<u8>::new(COM1 + off).write(v) }
    };
    regs(1, 0x00); // no UART interrupts
    regs(3, 0x80); // DLAB on
    regs(0, 0x01); // divisor 1 = 115200 baud
    regs(1, 0x00);
    regs(3, 0x03); // 8 bits, no parity, one stop bit, DLAB off
    regs(2, 0xC7); // FIFO on, cleared, 14-byte threshold
    regs(4, 0x03); // DTR | RTS
}

fn put_byte(b: u8) {
    let mut status = Port::<u8>::new(LINE_STATUS);
    let mut data = Port::<u8>::new(COM1);
    // Bounded wait: a missing UART (all-ones or stuck) must not hang the kernel.
    for _ in 0..100_000 {
        // SAFETY: reading the 16550 line-status register has no side effects.
        if unsafe { status.read() } & THR_EMPTY != 0 {
            break;
        }
        core::hint::spin_loop();
    }
    // SAFETY: writing the transmit holding register sends one byte.
    unsafe { data.write(b) }
}

fn put_str(s: &str) {
    for b in s.bytes() {
        if b == b'\n' {
            put_byte(b'\r');
        }
        put_byte(b);
    }
}

struct Raw;

impl Write for Raw {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        put_str(s);
        Ok(())
    }
}

/// Writes formatted text as one atomic unit.
pub fn print(args: fmt::Arguments<'_>) {
    interrupts::without_interrupts(|| {
        let _guard = LOCK.lock();
        let _ = Raw.write_fmt(args);
    });
}

/// Writes even if another CPU holds the console lock (after a bounded wait).
pub fn print_emergency(args: fmt::Arguments<'_>) {
    interrupts::without_interrupts(|| {
        let mut guard = None;
        for _ in 0..2_000_000 {
            if let Some(g) = LOCK.try_lock() {
                guard = Some(g);
                break;
            }
            core::hint::spin_loop();
        }
        let _ = Raw.write_fmt(args);
        drop(guard);
    });
}

/// Prints a line to the console.
macro_rules! kprintln {
    () => { $crate::arch::console::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::arch::console::print(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints a line, bypassing a held console lock after a bounded wait.
macro_rules! emergency_println {
    ($($arg:tt)*) => { $crate::arch::console::print_emergency(format_args!("{}\n", format_args!($($arg)*))) };
}

// Path-scoped macros: users import them from here (`use crate::arch::console::kprintln`).
pub(crate) use {emergency_println, kprintln};

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let ns = crate::arch::time::now_ns();
        print(format_args!(
            "[{:5}.{:06}] cpu{} {:5} {}\n",
            ns / 1_000_000_000,
            (ns / 1000) % 1_000_000,
            crate::arch::percpu::index(),
            record.level(),
            record.args()
        ));
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

/// Installs the serial logger at `level`.
pub fn init_logger(level: log::LevelFilter) {
    // A second call only fails because a logger is already set; the level still applies.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
