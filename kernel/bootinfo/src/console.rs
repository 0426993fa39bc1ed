//! The `console=` value and 16550 UART arithmetic.
//!
//! Forms: `auto` (the default: the ACPI SPCR's UART when it names one, else
//! every one of COM1 and COM2 that answers a probe), `ttyS0`..`ttyS3` (the PC
//! ports 0x3f8, 0x2f8, 0x3e8, 0x2e8), `io:PORT`, `mmio:ADDRESS[,WIDTH]`
//! (registers WIDTH = 1, 2 or 4 bytes wide and apart), `pci:BB:DD.F` (the
//! I/O BAR of a PCI UART on segment 0, hex like `lspci`); each but `auto` may
//! end with `,BAUD` (e.g. `console=ttyS1,115200`).

/// Input clock of a PC UART: 1.8432 MHz, so divisor 1 is 115200 baud.
pub const PC_UART_CLOCK_HZ: u32 = 1_843_200;
/// The usual speed of a server's serial console.
pub const DEFAULT_BAUD: u32 = 115_200;
/// I/O ports of `ttyS0`..`ttyS3` (COM1-COM4).
pub const PC_PORTS: [u16; 4] = [0x3f8, 0x2f8, 0x3e8, 0x2e8];

/// Accepted forms, quoted in the error for a bad `console=` value.
pub const CONSOLE_FORMS: &str = "auto, ttyS0..ttyS3, io:PORT, mmio:ADDRESS[,WIDTH] (WIDTH 1, 2 or 4 bytes) \
     or pci:BB:DD.F (hex), the last four with an optional ,BAUD (e.g. ttyS1,115200 or io:0x2f8,9600)";

/// Where a UART's eight registers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UartRegisters {
    /// Port I/O at `port..port + 8`.
    Io(u16),
    /// Register `n` at `address + n * access_bytes`, accessed with that width.
    Mmio { address: u64, access_bytes: u8 },
}

/// What `console=` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleChoice {
    /// SPCR, else probe COM1 and COM2.
    Auto,
    /// A UART at a fixed address; `baud` `None` means [`DEFAULT_BAUD`].
    Uart {
        registers: UartRegisters,
        baud: Option<u32>,
    },
    /// The I/O BAR of PCI function `bus:device.function` (segment 0).
    Pci {
        bus: u8,
        device: u8,
        function: u8,
        baud: Option<u32>,
    },
}

/// The divisor-latch value for `baud` from a `clock_hz` input clock (the
/// UART divides by 16 first), rounded to the nearest; `None` when no divisor
/// in 1..=65535 comes within 3% of the rate.
pub fn divisor(clock_hz: u32, baud: u32) -> Option<u16> {
    if baud == 0 {
        return None;
    }
    let sixteenths = u64::from(baud) * 16;
    let rounded = (u64::from(clock_hz) + sixteenths / 2) / sixteenths;
    let divisor = u16::try_from(rounded).ok().filter(|d| *d != 0)?;
    let actual = u64::from(clock_hz) / (16 * u64::from(divisor));
    (actual.abs_diff(u64::from(baud)) * 100 <= u64::from(baud) * 3).then_some(divisor)
}

fn number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Slowest rate accepted on the command line (the old teletype floor).
const MIN_BAUD: u32 = 50;

fn baud(text: &str) -> Option<u32> {
    let baud: u32 = text.parse().ok().filter(|b| *b >= MIN_BAUD)?;
    divisor(PC_UART_CLOCK_HZ, baud).map(|_| baud)
}

/// Parses a `console=` value; `None` for anything that is not one of [`CONSOLE_FORMS`].
pub fn parse_console(value: &str) -> Option<ConsoleChoice> {
    if value == "auto" {
        return Some(ConsoleChoice::Auto);
    }
    let (kind, rest) = if let Some(n) = value.strip_prefix("ttyS") {
        ("tty", n)
    } else {
        value.split_once(':')?
    };
    let mut fields = rest.split(',');
    let target = fields.next()?;
    let extra: heapless::Vec<&str, 2> = fields.by_ref().take(2).collect();
    if fields.next().is_some() {
        return None;
    }
    let plain_baud = |extra: &[&str]| -> Option<Option<u32>> {
        match extra {
            [] => Some(None),
            [b] => baud(b).map(Some),
            _ => None,
        }
    };
    match kind {
        "tty" => {
            let index: usize = target.parse().ok().filter(|_| target.len() == 1)?;
            Some(ConsoleChoice::Uart {
                registers: UartRegisters::Io(*PC_PORTS.get(index)?),
                baud: plain_baud(&extra)?,
            })
        }
        "io" => {
            let port = number(target).filter(|p| *p != 0 && *p <= 0xFFF8)?;
            Some(ConsoleChoice::Uart {
                registers: UartRegisters::Io(port as u16),
                baud: plain_baud(&extra)?,
            })
        }
        "mmio" => {
            let address = number(target).filter(|a| *a != 0 && *a < 1 << 52)?;
            let width = |w: &str| match w {
                "1" => Some(1),
                "2" => Some(2),
                "4" => Some(4),
                _ => None,
            };
            // One extra field is the width when it is 1, 2 or 4 (no UART runs at 4 baud).
            let (access_bytes, baud) = match extra.as_slice() {
                [] => (1, None),
                [w] if width(w).is_some() => (width(w)?, None),
                [b] => (1, Some(baud(b)?)),
                [w, b] => (width(w)?, Some(baud(b)?)),
                _ => return None,
            };
            Some(ConsoleChoice::Uart {
                registers: UartRegisters::Mmio { address, access_bytes },
                baud,
            })
        }
        "pci" => {
            let (bus, slot) = target.split_once(':')?;
            let (device, function) = slot.split_once('.')?;
            let hex = |t: &str, max: u8| {
                u8::from_str_radix(t, 16)
                    .ok()
                    .filter(|v| *v <= max && !t.is_empty() && t.len() <= 2)
            };
            Some(ConsoleChoice::Pci {
                bus: hex(bus, 0xFF)?,
                device: hex(device, 31)?,
                function: hex(function, 7)?,
                baud: plain_baud(&extra)?,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_for_standard_and_odd_rates() {
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 115_200), Some(1));
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 57_600), Some(2));
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 9600), Some(12));
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 300), Some(384));
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 50), Some(2304));
        // A 48 MHz clock (Intel LPSS-style UARTs) reaches 3 Mbaud and 115200 within 0.2%.
        assert_eq!(divisor(48_000_000, 3_000_000), Some(1));
        assert_eq!(divisor(48_000_000, 115_200), Some(26));
        // Too fast for the clock, zero, or too slow for 16 bits.
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 230_400), None);
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 0), None);
        assert_eq!(divisor(PC_UART_CLOCK_HZ, 1), None);
        assert_eq!(divisor(0, 9600), None);
    }

    #[test]
    fn every_form() {
        use ConsoleChoice::*;
        use UartRegisters::*;
        let cases = [
            ("auto", Auto),
            (
                "ttyS0",
                Uart {
                    registers: Io(0x3f8),
                    baud: None,
                },
            ),
            (
                "ttyS1,115200",
                Uart {
                    registers: Io(0x2f8),
                    baud: Some(115_200),
                },
            ),
            (
                "ttyS3,9600",
                Uart {
                    registers: Io(0x2e8),
                    baud: Some(9600),
                },
            ),
            (
                "io:0x2f8",
                Uart {
                    registers: Io(0x2f8),
                    baud: None,
                },
            ),
            (
                "io:760,57600",
                Uart {
                    registers: Io(760),
                    baud: Some(57_600),
                },
            ),
            (
                "mmio:0xfe032000",
                Uart {
                    registers: Mmio {
                        address: 0xfe03_2000,
                        access_bytes: 1,
                    },
                    baud: None,
                },
            ),
            (
                "mmio:0xfe032000,4",
                Uart {
                    registers: Mmio {
                        address: 0xfe03_2000,
                        access_bytes: 4,
                    },
                    baud: None,
                },
            ),
            (
                "mmio:0xfe032000,19200",
                Uart {
                    registers: Mmio {
                        address: 0xfe03_2000,
                        access_bytes: 1,
                    },
                    baud: Some(19_200),
                },
            ),
            (
                "mmio:0x10000000000,2,9600",
                Uart {
                    registers: Mmio {
                        address: 1 << 40,
                        access_bytes: 2,
                    },
                    baud: Some(9600),
                },
            ),
            (
                "pci:00:05.0",
                Pci {
                    bus: 0,
                    device: 5,
                    function: 0,
                    baud: None,
                },
            ),
            (
                "pci:3a:1f.7,38400",
                Pci {
                    bus: 0x3a,
                    device: 31,
                    function: 7,
                    baud: Some(38_400),
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_console(text), Some(want), "{text}");
        }
    }

    #[test]
    fn wrong_forms_are_refused() {
        for bad in [
            "",
            "com2",
            "ttyS4",
            "ttyS01",
            "ttyS1,",
            "ttyS1,fast",
            "ttyS1,230400",
            "ttyS1,9600,8n1",
            "io:",
            "io:0",
            "io:0x10000",
            "io:0xfffa",
            "io:port",
            "mmio:0",
            "mmio:0xfe000000,3",
            "mmio:0xfe000000,4,9600,1",
            "mmio:0x10000000000000",
            "pci:0:5",
            "pci:00:20.0",
            "pci:00:05.8",
            "pci:100:05.0",
            "pci:00:05.0,0",
            "serial:0x3f8",
        ] {
            assert_eq!(parse_console(bad), None, "{bad}");
        }
    }
}
