//! Serial console on up to four 16550 UARTs (port I/O or MMIO) and the `log` backend.
//!
//! The console must work from the first line, before the command line or
//! ACPI is read, so [`init`] starts on a safe default: COM1 and COM2, each
//! that answers a scratch-register probe (COM1 alone when neither answers).
//! [`apply_choice`] then switches to what `console=` names, and
//! [`apply_auto`] (for `console=auto`) to the UART the ACPI SPCR names, or
//! keeps the probed ports; both print a `console:` line saying which UARTs
//! and why. A server's serial-over-LAN is usually COM2 or an SPCR UART.
//!
//! Output is line-atomic across CPUs: a whole line is written under one
//! spinlock with interrupts disabled. The panic and exception paths use
//! [`print_emergency`], which waits a bounded time for the lock and then
//! writes anyway, so a CPU that died holding the lock cannot silence the
//! report. Both paths write to every UART in [`OUTPUTS`], which are plain
//! atomics so no lock is needed to find them.

use alloc::string::String;
use bootinfo::console::{ConsoleChoice, DEFAULT_BAUD, PC_PORTS, PC_UART_CLOCK_HZ, UartRegisters, divisor};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use platform::acpi::{Spcr, SpcrRegisters};
use x86_64::instructions::interrupts;
use x86_64::instructions::port::Port;

/// 16550 register offsets (in register units; MMIO multiplies by the access width).
const DATA: u64 = 0;
const INTERRUPT_ENABLE: u64 = 1;
const FIFO_CONTROL: u64 = 2;
const LINE_CONTROL: u64 = 3;
const MODEM_CONTROL: u64 = 4;
const LINE_STATUS: u64 = 5;
const SCRATCH: u64 = 7;
const THR_EMPTY: u8 = 1 << 5;
const DLAB: u8 = 0x80;

const MAX_OUTPUTS: usize = 4;
/// The UARTs every line goes to, encoded by [`Uart::encode`]; 0 is an empty slot.
static OUTPUTS: [AtomicU64; MAX_OUTPUTS] = [const { AtomicU64::new(0) }; MAX_OUTPUTS];
/// The PCI function of a `console=pci:` UART (bus << 8 | device << 3 | function), or
/// `u32::MAX`: its BAR is checked again after PCI enumeration, which also
/// assigns it when the firmware did not (qboot leaves BARs to the kernel).
static PCI_CONSOLE: AtomicU32 = AtomicU32::new(u32::MAX);
/// The baud rate of the `console=pci:` UART; 0: as found.
static PCI_CONSOLE_BAUD: AtomicU32 = AtomicU32::new(0);

static LOCK: spin::Mutex<()> = spin::Mutex::new(());

/// A UART's registers as the output path reaches them. MMIO addresses are
/// identity-mapped (uncached) by [`apply_choice`]/[`apply_auto`] before use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Uart {
    Port(u16),
    Mmio { address: u64, access_bytes: u8 },
}

const KIND_PORT: u64 = 1 << 60;

impl Uart {
    fn from_registers(registers: UartRegisters) -> Uart {
        match registers {
            UartRegisters::Io(port) => Uart::Port(port),
            UartRegisters::Mmio { address, access_bytes } => Uart::Mmio { address, access_bytes },
        }
    }

    /// Port: bit 60 and the port. MMIO: the access width in bits 56..59 and the
    /// (52-bit) address. Never 0.
    fn encode(self) -> u64 {
        match self {
            Uart::Port(port) => KIND_PORT | u64::from(port),
            Uart::Mmio { address, access_bytes } => (u64::from(access_bytes) << 56) | address,
        }
    }

    fn decode(word: u64) -> Option<Uart> {
        if word == 0 {
            None
        } else if word & KIND_PORT != 0 {
            Some(Uart::Port(word as u16))
        } else {
            Some(Uart::Mmio {
                address: word & ((1 << 56) - 1),
                access_bytes: (word >> 56) as u8,
            })
        }
    }

    fn read(self, register: u64) -> u8 {
        match self {
            // SAFETY: reading a 16550 register (line status, scratch, divisor)
            // has no side effect on memory; the port was chosen as a UART.
            Uart::Port(port) => unsafe { Port::<u8>::new(port + register as u16).read() },
            Uart::Mmio { address, access_bytes } => {
                let at = address + register * u64::from(access_bytes);
                // SAFETY: `at` is inside the UART's register block, mapped
                // uncached before the UART was added; volatile, aligned to its width.
                unsafe {
                    match access_bytes {
                        4 => core::ptr::read_volatile(at as *const u32) as u8,
                        2 => core::ptr::read_volatile(at as *const u16) as u8,
                        _ => core::ptr::read_volatile(at as *const u8),
                    }
                }
            }
        }
    }

    fn write(self, register: u64, value: u8) {
        match self {
            // SAFETY: writing a 16550 register only reconfigures or feeds the UART.
            Uart::Port(port) => unsafe { Port::<u8>::new(port + register as u16).write(value) },
            Uart::Mmio { address, access_bytes } => {
                let at = address + register * u64::from(access_bytes);
                // SAFETY: as in `read`.
                unsafe {
                    match access_bytes {
                        4 => core::ptr::write_volatile(at as *mut u32, u32::from(value)),
                        2 => core::ptr::write_volatile(at as *mut u16, u16::from(value)),
                        _ => core::ptr::write_volatile(at as *mut u8, value),
                    }
                }
            }
        }
    }

    /// Whether a UART answers: its scratch register keeps two patterns, and
    /// the line status is not all ones (nothing decodes the address).
    fn answers(self) -> bool {
        if self.read(LINE_STATUS) == 0xFF {
            return false;
        }
        [0x55u8, 0xAA].iter().all(|&pattern| {
            self.write(SCRATCH, pattern);
            self.read(SCRATCH) == pattern
        })
    }

    /// 8N1, FIFOs on, no UART interrupts (output is polled), at the divisor
    /// given; `None` keeps the divisor the firmware programmed ("as is").
    fn program(self, divisor: Option<u16>) {
        self.write(INTERRUPT_ENABLE, 0);
        if let Some(divisor) = divisor {
            self.write(LINE_CONTROL, DLAB);
            self.write(DATA, divisor as u8);
            self.write(INTERRUPT_ENABLE, (divisor >> 8) as u8);
        }
        self.write(LINE_CONTROL, 0x03);
        self.write(FIFO_CONTROL, 0xC7); // FIFO on, both cleared, 14-byte threshold
        self.write(MODEM_CONTROL, 0x03); // DTR | RTS
    }

    /// The divisor latch as programmed now.
    fn current_divisor(self) -> u16 {
        let line = self.read(LINE_CONTROL);
        self.write(LINE_CONTROL, line | DLAB);
        let divisor = u16::from(self.read(DATA)) | u16::from(self.read(INTERRUPT_ENABLE)) << 8;
        self.write(LINE_CONTROL, line & !DLAB);
        divisor
    }

    fn put(self, byte: u8) {
        // Bounded wait: a missing UART (all ones or stuck) must not hang the kernel.
        for _ in 0..100_000 {
            if self.read(LINE_STATUS) & THR_EMPTY != 0 {
                break;
            }
            core::hint::spin_loop();
        }
        self.write(DATA, byte);
    }
}

impl fmt::Display for Uart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uart::Port(port) => write!(f, "io {port:#x}"),
            Uart::Mmio { address, access_bytes } => write!(f, "mmio {address:#x} ({}-bit)", access_bytes * 8),
        }
    }
}

fn set_outputs(uarts: &[Uart]) {
    for (slot, output) in OUTPUTS.iter().enumerate() {
        output.store(uarts.get(slot).map_or(0, |u| u.encode()), Ordering::Release);
    }
}

fn outputs() -> impl Iterator<Item = Uart> {
    OUTPUTS
        .iter()
        .filter_map(|output| Uart::decode(output.load(Ordering::Acquire)))
}

/// The early console: COM1 and COM2, each that answers (COM1 when neither
/// does). Nothing else is known yet, so each keeps the rate it was found at
/// (firmware with serial redirection programmed the one the BMC expects),
/// or gets 115200 when it was never programmed.
pub fn init() {
    let (com1, com2) = (Uart::Port(PC_PORTS[0]), Uart::Port(PC_PORTS[1]));
    let found: heapless::Vec<Uart, 2> = [com1, com2].into_iter().filter(|u| u.answers()).collect();
    let uarts = if found.is_empty() { &[com1][..] } else { &found[..] };
    for uart in uarts {
        program_as_found(*uart, PC_UART_CLOCK_HZ);
    }
    set_outputs(uarts);
}

/// Keeps a programmed divisor, else sets [`DEFAULT_BAUD`] from `clock_hz`;
/// returns whether it was kept.
fn program_as_found(uart: Uart, clock_hz: u32) -> bool {
    let kept = uart.current_divisor() != 0;
    uart.program(if kept { None } else { divisor(clock_hz, DEFAULT_BAUD) });
    kept
}

/// `io 0x2f8 115200`: the UART and the rate its divisor gives now.
fn describe(uart: Uart, clock_hz: u32) -> String {
    match uart.current_divisor() {
        0 => alloc::format!("{uart} (divisor 0)"),
        divisor => alloc::format!("{uart} {}", clock_hz / 16 / u32::from(divisor)),
    }
}

/// Programs `uart` at `baud`, or with `None` at the rate it was found at
/// (115200 when it was never programmed), and describes it.
fn start(uart: Uart, clock_hz: u32, baud: Option<u32>) -> Result<String, String> {
    let Some(baud) = baud else {
        let kept = program_as_found(uart, clock_hz);
        let how = if kept { "rate as found" } else { "was not programmed" };
        return Ok(alloc::format!("{}, {how}", describe(uart, clock_hz)));
    };
    let divisor = divisor(clock_hz, baud)
        .ok_or_else(|| alloc::format!("{uart}: no divisor gives {baud} baud from a {clock_hz} Hz clock"))?;
    uart.program(Some(divisor));
    Ok(alloc::format!("{uart} {baud}"))
}

/// Maps an MMIO UART's eight registers uncached.
fn map(uart: Uart) -> Result<(), String> {
    if let Uart::Mmio { address, access_bytes } = uart {
        crate::arch::memory::map_mmio(address, 8 * u64::from(access_bytes))
            .map_err(|e| alloc::format!("{uart}: {e}"))?;
    }
    Ok(())
}

/// Prints a `console:` line on the current outputs.
fn announce(what: &str, why: &str) {
    crate::arch::console::kprintln!("console: {what} ({why})");
}

/// Switches to the UART `console=` names (after the heap is up: an MMIO UART
/// is mapped). `Auto` changes nothing here. An error names what failed; the
/// early console still works then.
pub fn apply_choice(choice: &ConsoleChoice) -> Result<(), String> {
    let (uart, baud, why) = match *choice {
        ConsoleChoice::Auto => return Ok(()),
        ConsoleChoice::Uart { registers, baud } => (Uart::from_registers(registers), baud, "console="),
        ConsoleChoice::Pci {
            bus,
            device,
            function,
            baud,
        } => {
            PCI_CONSOLE.store(
                u32::from(bus) << 8 | u32::from(device) << 3 | u32::from(function),
                Ordering::Relaxed,
            );
            PCI_CONSOLE_BAUD.store(baud.unwrap_or(0), Ordering::Relaxed);
            match pci_uart_port(bus, device, function)? {
                Some(port) => (Uart::Port(port), baud, "console=pci"),
                None => {
                    announce(
                        &alloc::format!("pci {bus:02x}:{device:02x}.{function} has no I/O BAR assigned yet"),
                        "console=pci; switching after PCI enumeration",
                    );
                    return Ok(());
                }
            }
        }
    };
    map(uart)?;
    let what = start(uart, PC_UART_CLOCK_HZ, baud)?;
    // Tell the early ports where the console went, then switch.
    announce(&alloc::format!("switching to {what}"), why);
    set_outputs(&[uart]);
    announce(&what, why);
    Ok(())
}

/// For `console=auto`, once ACPI was read: the SPCR's UART when the table
/// names a usable one, else the probed COM1/COM2 kept from [`init`].
pub fn apply_auto(spcr: Result<Option<&Spcr>, &platform::Error>) {
    let probed = || {
        let mut list = String::new();
        for (i, uart) in outputs().enumerate() {
            let _ = write!(
                list,
                "{}{}",
                if i == 0 { "" } else { ", " },
                describe(uart, PC_UART_CLOCK_HZ)
            );
        }
        list
    };
    let spcr = match spcr {
        Ok(Some(spcr)) => spcr,
        Ok(None) => return announce(&probed(), "probe; no SPCR table"),
        Err(e) => return announce(&probed(), &alloc::format!("probe; SPCR not usable: {e}")),
    };
    let uart = match spcr.registers {
        _ if !spcr.is_16550_compatible() => {
            return announce(
                &probed(),
                &alloc::format!("probe; SPCR names a {} UART, not a 16550", spcr.interface_name()),
            );
        }
        SpcrRegisters::Absent => {
            // Dell's and HP's tables: no address, but HP's baud rate (9600) is the BMC's.
            let Some(baud) = spcr.baud else {
                return announce(&probed(), "probe; SPCR has no address, baud as is");
            };
            let divisor = divisor(PC_UART_CLOCK_HZ, baud);
            for uart in outputs() {
                uart.program(divisor);
            }
            return announce(
                &probed(),
                &alloc::format!("probe; SPCR has no address, asks {baud} baud"),
            );
        }
        SpcrRegisters::Io { port } => Uart::Port(port),
        SpcrRegisters::Mmio { address, access_bytes } => Uart::Mmio { address, access_bytes },
    };
    if let Some(pci) = spcr.pci.filter(|p| p.segment == 0) {
        // The firmware may leave decode off on a PCI UART (AMT serial-over-LAN does).
        pci_enable_decode(pci.bus, pci.device, pci.function, matches!(uart, Uart::Port(_)));
    }
    let clock = spcr.uart_clock_hz.unwrap_or(PC_UART_CLOCK_HZ);
    if let Err(e) = map(uart) {
        return announce(&probed(), &alloc::format!("probe; SPCR UART not usable: {e}"));
    }
    // A UART that fails the scratch test may still be the BMC's (some lack the
    // register): use it, but keep the probed ports too, so nothing is lost.
    let mut uarts: heapless::Vec<Uart, MAX_OUTPUTS> = heapless::Vec::new();
    let _ = uarts.push(uart);
    let answers = uart.answers();
    if !answers {
        uarts.extend(outputs().filter(|u| *u != uart).take(MAX_OUTPUTS - 1));
    }
    match start(uart, clock, spcr.baud) {
        Ok(what) => {
            if !outputs().any(|u| u == uart) {
                announce(&alloc::format!("switching to {what}"), "SPCR");
            }
            set_outputs(&uarts);
            if answers {
                announce(&what, "SPCR");
            } else {
                announce(
                    &what,
                    "SPCR; it fails the scratch-register probe, so the probed ports stay on",
                );
            }
        }
        Err(e) => announce(&probed(), &alloc::format!("probe; SPCR UART not usable: {e}")),
    }
}

/// After PCI enumeration (which sizes BARs with decode off, and assigns or
/// moves them): points a `console=pci:` console at its BAR, decode on.
pub fn after_pci_enumeration() -> Result<(), String> {
    let bdf = PCI_CONSOLE.load(Ordering::Relaxed);
    if bdf == u32::MAX {
        return Ok(());
    }
    let (bus, device, function) = ((bdf >> 8) as u8, ((bdf >> 3) & 31) as u8, (bdf & 7) as u8);
    let port = pci_uart_port(bus, device, function)?.ok_or_else(|| {
        alloc::format!(
            "pci {bus:02x}:{device:02x}.{function}: no I/O BAR even after PCI enumeration \
             (for a memory-mapped UART use console=mmio:ADDRESS[,WIDTH])"
        )
    })?;
    let uart = Uart::Port(port);
    if !outputs().any(|u| u == uart) {
        let baud = Some(PCI_CONSOLE_BAUD.load(Ordering::Relaxed)).filter(|b| *b != 0);
        let what = start(uart, PC_UART_CLOCK_HZ, baud)?;
        announce(&alloc::format!("switching to {what}"), "console=pci");
        set_outputs(&[uart]);
        announce(&what, "console=pci, after PCI enumeration");
    }
    Ok(())
}

// ---- PCI configuration through ports 0xCF8/0xCFC (segment 0; ACPI is not needed) ----

fn pci_config_address(bus: u8, device: u8, function: u8, offset: u8) -> u32 {
    0x8000_0000 | u32::from(bus) << 16 | u32::from(device) << 11 | u32::from(function) << 8 | u32::from(offset & 0xFC)
}

fn pci_read32(bus: u8, device: u8, function: u8, offset: u8) -> u32 {
    // SAFETY: the legacy configuration mechanism; the address register
    // selects a dword of configuration space, the data port reads it. Boot
    // runs on one CPU, so nothing interleaves.
    unsafe {
        Port::<u32>::new(0xCF8).write(pci_config_address(bus, device, function, offset));
        Port::<u32>::new(0xCFC).read()
    }
}

fn pci_write16(bus: u8, device: u8, function: u8, offset: u8, value: u16) {
    // SAFETY: as in `pci_read32`; a 16-bit write at the dword's offset.
    unsafe {
        Port::<u32>::new(0xCF8).write(pci_config_address(bus, device, function, offset));
        Port::<u16>::new(0xCFC + u16::from(offset & 2)).write(value);
    }
}

const PCI_COMMAND: u8 = 0x04;
const COMMAND_IO: u16 = 1 << 0;
const COMMAND_MEMORY: u16 = 1 << 1;

fn pci_enable_decode(bus: u8, device: u8, function: u8, io: bool) {
    let command = pci_read32(bus, device, function, PCI_COMMAND) as u16;
    let want = if io { COMMAND_IO } else { COMMAND_MEMORY };
    if command & want == 0 {
        pci_write16(bus, device, function, PCI_COMMAND, command | want);
    }
}

/// The first assigned I/O BAR of a PCI UART, with I/O decode turned on;
/// `None` when it has none (yet); an error when no function is there.
fn pci_uart_port(bus: u8, device: u8, function: u8) -> Result<Option<u16>, String> {
    let name = alloc::format!("pci {bus:02x}:{device:02x}.{function}");
    if pci_read32(bus, device, function, 0) as u16 == 0xFFFF {
        return Err(alloc::format!("{name}: no PCI function there"));
    }
    let header_type = (pci_read32(bus, device, function, 0x0C) >> 16) as u8 & 0x7F;
    let bars = if header_type == 0 { 6 } else { 2 };
    let mut slot = 0;
    while slot < bars {
        let bar = pci_read32(bus, device, function, 0x10 + 4 * slot);
        if bar & 1 == 1 {
            let port = bar & 0xFFFC;
            if port != 0 && port <= 0xFFF8 {
                pci_enable_decode(bus, device, function, true);
                return Ok(Some(port as u16));
            }
        }
        // A 64-bit memory BAR takes two slots.
        slot += if bar & 0b111 == 0b100 { 2 } else { 1 };
    }
    Ok(None)
}

// ---- output ----

fn put_str(s: &str) {
    for uart in outputs() {
        for b in s.bytes() {
            if b == b'\n' {
                uart.put(b'\r');
            }
            uart.put(b);
        }
    }
    crate::arch::framebuffer::put_str(s);
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
        let ns = crate::arch::time::uptime_ns();
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
