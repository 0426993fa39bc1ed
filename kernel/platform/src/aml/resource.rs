//! Resource templates (`_CRS` buffers): the descriptors a host bridge and
//! an interrupt link use. Every descriptor's length is checked against the
//! buffer; an unknown descriptor is skipped by its length.

use alloc::vec::Vec;

use crate::error::{Error, Result, Token};

/// What a window decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Memory,
    Io,
    BusNumbers,
}

/// An address range a host bridge forwards (from Word/DWord/QWord/Extended
/// Address Space descriptors, and I/O and 32-bit memory descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub kind: WindowKind,
    pub start: u64,
    /// Length in bytes (bus numbers for `BusNumbers`); never 0.
    pub len: u64,
    /// Added to a CPU address to get the bus address (`_TRA`).
    pub translation: u64,
    /// Producer (bit 0 of the general flags clear): the bridge decodes it for children.
    pub producer: bool,
}

impl Window {
    /// Last address (or bus) covered.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len.saturating_sub(1))
    }
}

/// An interrupt a descriptor names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupt {
    pub number: u32,
    pub level: bool,
    pub active_low: bool,
    /// From a legacy IRQ descriptor (an ISA IRQ, subject to MADT overrides)
    /// rather than an Extended Interrupt descriptor (a GSI).
    pub isa: bool,
}

/// The descriptors baremq reads from a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub windows: Vec<Window>,
    pub interrupts: Vec<Interrupt>,
}

fn bad(what: &'static str, offset: usize) -> Error {
    Error::Aml {
        at: Token::new("resource template"),
        offset: u32::try_from(offset).unwrap_or(u32::MAX),
        what,
        value: 0,
    }
}

/// Little-endian `n` (at most 8) bytes at `at`; the caller checked that they are in `bytes`.
fn le(bytes: &[u8], at: usize, n: usize) -> u64 {
    let field = at.checked_add(n).and_then(|end| bytes.get(at..end)).unwrap_or_default();
    field
        .iter()
        .take(8)
        .enumerate()
        .fold(0u64, |v, (i, &b)| v | u64::from(b) << (8 * i))
}

/// Parses a resource template.
pub fn parse(bytes: &[u8]) -> Result<Resources> {
    let mut out = Resources::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let tag = bytes[at];
        if tag & 0x80 == 0 {
            let kind = (tag >> 3) & 0x0F;
            let len = usize::from(tag & 7);
            // `at < bytes.len()`, so these sums stay far below usize::MAX.
            let body = at + 1;
            if body + len > bytes.len() {
                return Err(bad("small descriptor runs past the buffer", at));
            }
            match kind {
                // IRQ: mask, optional flags.
                0x04 if len >= 2 => {
                    let mask = u16::from_le_bytes([bytes[body], bytes[body + 1]]);
                    let flags = if len >= 3 { bytes[body + 2] } else { 0x01 };
                    for number in 0..16 {
                        if mask & (1 << number) != 0 {
                            out.interrupts.push(Interrupt {
                                number,
                                level: flags & 1 == 0,
                                active_low: flags & 0x08 != 0,
                                isa: true,
                            });
                        }
                    }
                }
                // I/O port range: information, minimum, maximum, alignment, length.
                0x08 if len >= 7 => {
                    let min = le(bytes, body + 1, 2);
                    let length = u64::from(bytes[body + 6]);
                    if length > 0 {
                        out.windows.push(Window {
                            kind: WindowKind::Io,
                            start: min,
                            len: length,
                            translation: 0,
                            producer: false,
                        });
                    }
                }
                0x0F => return Ok(out),
                _ => {}
            }
            at = body + len;
        } else {
            if at + 3 > bytes.len() {
                return Err(bad("large descriptor header runs past the buffer", at));
            }
            let kind = tag & 0x7F;
            let len = usize::from(u16::from_le_bytes([bytes[at + 1], bytes[at + 2]]));
            let body = at + 3;
            if body + len > bytes.len() {
                return Err(bad("large descriptor runs past the buffer", at));
            }
            let d = &bytes[body..body + len];
            match kind {
                // 32-bit memory range: information, minimum, maximum, alignment, length.
                0x05 if len >= 17 => push_window(&mut out, WindowKind::Memory, le(d, 1, 4), le(d, 13, 4), 0, false),
                // Fixed 32-bit memory: information, base, length.
                0x06 if len >= 9 => push_window(&mut out, WindowKind::Memory, le(d, 1, 4), le(d, 5, 4), 0, false),
                // DWord / Word / QWord address space.
                0x07 | 0x08 | 0x0A => {
                    let size = match kind {
                        0x08 => 2,
                        0x07 => 4,
                        _ => 8,
                    };
                    if len < 3 + 5 * size {
                        return Err(bad("address space descriptor too short", at));
                    }
                    address_space(&mut out, d, size);
                }
                // Extended address space: type, flags, type flags, revision, reserved, then u64s.
                0x0B if len >= 53 => {
                    let (kind, producer) = (d[0], d[1] & 1 == 0);
                    let min = le(d, 13, 8);
                    let translation = le(d, 29, 8);
                    let length = le(d, 37, 8);
                    if let Some(kind) = window_kind(kind) {
                        push_window(&mut out, kind, min, length, translation, producer);
                    }
                }
                // Extended interrupt: flags, count, then 32-bit numbers.
                0x09 if len >= 2 => {
                    let flags = d[0];
                    let count = usize::from(d[1]);
                    if len < 2 + 4 * count {
                        return Err(bad("extended interrupt list runs past its descriptor", at));
                    }
                    for i in 0..count {
                        let number = u32::from_le_bytes([d[2 + 4 * i], d[3 + 4 * i], d[4 + 4 * i], d[5 + 4 * i]]);
                        out.interrupts.push(Interrupt {
                            number,
                            level: flags & 0x02 == 0,
                            active_low: flags & 0x04 != 0,
                            isa: false,
                        });
                    }
                }
                _ => {}
            }
            at = body + len;
        }
    }
    Ok(out)
}

fn window_kind(resource_type: u8) -> Option<WindowKind> {
    match resource_type {
        0 => Some(WindowKind::Memory),
        1 => Some(WindowKind::Io),
        2 => Some(WindowKind::BusNumbers),
        _ => None,
    }
}

fn push_window(out: &mut Resources, kind: WindowKind, start: u64, len: u64, translation: u64, producer: bool) {
    if len > 0 {
        out.windows.push(Window {
            kind,
            start,
            len,
            translation,
            producer,
        });
    }
}

/// Word/DWord/QWord: type, general flags, type flags, then granularity,
/// minimum, maximum, translation, length (each `size` bytes).
fn address_space(out: &mut Resources, d: &[u8], size: usize) {
    let Some(kind) = window_kind(d[0]) else {
        return;
    };
    let producer = d[1] & 1 == 0;
    let field = |i: usize| le(d, 3 + i * size, size);
    let (min, max, translation, length) = (field(1), field(2), field(3), field(4));
    // Some firmware leaves the length 0 and gives only the range; a template
    // whose range is filled in at run time reads min = max = 0: no window. A
    // range over the whole 64-bit space (QWord 0..=u64::MAX, seen on real
    // firmware) has no length that fits in 64 bits: it saturates one byte short.
    let length = if length == 0 && max > min {
        (max - min).saturating_add(1)
    } else {
        length
    };
    push_window(out, kind, min, length, translation, producer);
}
