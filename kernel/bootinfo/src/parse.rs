//! Boot-information parsers for the three entry protocols baremq supports.
//!
//! Every structure is read through [`PhysMemory`] with explicit lengths, every
//! loop is bounded by a declared size, and declared sizes are sanity-checked
//! before use, so a corrupt loader structure yields an [`Error`].

use crate::error::{Error, bounded};
use crate::memmap::{MemoryKind, MemoryRegion};
use heapless::{String, Vec};

/// Magic in EAX after a Multiboot1 loader.
pub const MULTIBOOT1_MAGIC: u32 = 0x2BAD_B002;
/// Magic in EAX after a Multiboot2 loader.
pub const MULTIBOOT2_MAGIC: u32 = 0x36D7_6289;
/// Magic the PVH entry stub puts in EAX (also the `hvm_start_info` magic).
pub const PVH_MAGIC: u32 = 0x336E_C578;

/// Memory-map entries kept; firmware maps are far smaller in practice.
pub const MAX_REGIONS: usize = 256;
/// Longest command line kept.
pub const MAX_CMDLINE: usize = 2048;
/// Boot modules kept (job files; see [`BootModule`]).
pub const MAX_MODULES: usize = 16;
/// Longest module string kept.
pub const MAX_MODULE_STRING: usize = 256;
/// Largest boot module accepted: modules are text job files, so anything larger is a mistake.
pub const MAX_MODULE_BYTES: u64 = 16 << 20;
/// Upper bound on any single boot structure (tag list, memory map) we walk.
const MAX_STRUCTURE_BYTES: u64 = 1 << 20;

/// Read access to physical memory holding the boot information.
pub trait PhysMemory {
    /// Fills `out` from physical address `addr`, or fails without reading.
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Error>;

    /// Reads a little-endian u32.
    fn read_u32(&self, addr: u64) -> Result<u32, Error> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a little-endian u64.
    fn read_u64(&self, addr: u64) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// `base + offset` for loader-supplied addresses: a sum past 2^64 is
/// unreadable memory, never a wrapped address.
fn at(base: u64, offset: u64) -> Result<u64, Error> {
    base.checked_add(offset).ok_or(Error::UnreadableMemory {
        addr: base,
        len: usize::try_from(offset).unwrap_or(usize::MAX),
    })
}

/// Which loader protocol started the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Multiboot1,
    Multiboot2,
    Pvh,
}

impl Protocol {
    /// Short human name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Multiboot1 => "multiboot1",
            Protocol::Multiboot2 => "multiboot2",
            Protocol::Pvh => "pvh",
        }
    }
}

/// The ACPI root pointer as the loader handed it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RsdpSource {
    /// Physical address of an RSDP in memory (PVH `rsdp_paddr`).
    Address(u64),
    /// A copy of the RSDP bytes (Multiboot2 tags 14 and 15).
    Copy(Vec<u8, 64>),
    /// Physical address of the 64-bit EFI system table (Multiboot2 tag 12),
    /// whose configuration table names the RSDP: used only when the loader
    /// gave no ACPI tag.
    EfiSystemTable(u64),
}

/// A file the loader placed in memory next to the kernel (Multiboot1 `module`, QEMU `-initrd`;
/// Multiboot2 `module2`; PVH's module list). Its bytes stay where the loader put them: the
/// kernel must keep `[start, end)` out of its allocator ([`BootInfo::module_ranges`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootModule {
    /// First byte (physical).
    pub start: u64,
    /// One past the last byte (physical).
    pub end: u64,
    /// The module's string: GRUB passes the words after the path (`module2 /boot/a.fio fio`
    /// gives `fio`), QEMU's `-initrd` the whole entry including the file name.
    pub string: String<MAX_MODULE_STRING>,
}

impl BootModule {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the module is empty.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// Everything baremq takes from the loader, copied out of loader memory so
/// that memory can be reused.
#[derive(Debug, Clone)]
pub struct BootInfo {
    pub protocol: Protocol,
    /// The framebuffer the loader set up (Multiboot2 only), for a console copy.
    pub framebuffer: Option<Framebuffer>,
    /// Kernel parameters only: a leading image path is removed (see [`strip_image_path`]).
    pub cmdline: String<MAX_CMDLINE>,
    pub loader_name: String<64>,
    pub memory: Vec<MemoryRegion, MAX_REGIONS>,
    pub rsdp: Option<RsdpSource>,
    /// Boot modules in the loader's order.
    pub modules: Vec<BootModule, MAX_MODULES>,
}

impl BootInfo {
    fn new(protocol: Protocol) -> Self {
        BootInfo {
            protocol,
            framebuffer: None,
            cmdline: String::new(),
            loader_name: String::new(),
            memory: Vec::new(),
            rsdp: None,
            modules: Vec::new(),
        }
    }

    /// The physical ranges the modules occupy, page-rounded, to reserve before the allocator
    /// starts.
    pub fn module_ranges(&self) -> impl Iterator<Item = crate::memmap::Range> + '_ {
        self.modules
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| crate::memmap::Range {
                start: m.start & !0xfff,
                end: m.end.saturating_add(0xfff) & !0xfff,
            })
    }

    fn push_module(&mut self, start: u64, end: u64, string: String<MAX_MODULE_STRING>) -> Result<(), Error> {
        if end < start {
            return Err(Error::BadStructure {
                what: "boot module",
                detail: "ends before it starts",
                value: start,
            });
        }
        if end - start > MAX_MODULE_BYTES {
            return Err(Error::BadStructure {
                what: "boot module",
                detail: "larger than 16 MiB (modules are job files)",
                value: end - start,
            });
        }
        self.modules
            .push(BootModule { start, end, string })
            .map_err(|_| Error::TooMany {
                what: "boot modules",
                capacity: MAX_MODULES,
            })
    }
    fn push_region(&mut self, start: u64, len: u64, kind: MemoryKind) -> Result<(), Error> {
        if len == 0 {
            return Ok(());
        }
        self.memory
            .push(MemoryRegion { start, len, kind })
            .map_err(|_| Error::TooMany {
                what: "memory-map entries",
                capacity: MAX_REGIONS,
            })
    }
}

/// Parses the boot information for the protocol identified by `magic`.
pub fn parse_boot_info(mem: &impl PhysMemory, magic: u32, info: u64) -> Result<BootInfo, Error> {
    let bi = match magic {
        MULTIBOOT1_MAGIC => parse_multiboot1(mem, info)?,
        MULTIBOOT2_MAGIC => parse_multiboot2(mem, info)?,
        PVH_MAGIC => parse_pvh(mem, info)?,
        other => return Err(Error::UnknownBootMagic(other)),
    };
    if bi.memory.is_empty() {
        return Err(Error::NoMemoryMap);
    }
    Ok(bi)
}

/// Reads a NUL-terminated string of at most `max` bytes; invalid UTF-8 is replaced by '?'.
fn read_cstr<const N: usize>(mem: &impl PhysMemory, addr: u64, max: usize) -> Result<String<N>, Error> {
    let mut out = String::new();
    let mut chunk = [0u8; 64];
    let mut off = 0usize;
    let limit = max.min(N);
    while off < limit {
        let n = chunk.len().min(limit - off);
        // Read byte-wise at the very end of readable memory is not needed: the
        // loader's strings live in RAM; a failing chunk read falls back to bytes.
        if mem.read(at(addr, off as u64)?, &mut chunk[..n]).is_err() {
            mem.read(at(addr, off as u64)?, &mut chunk[..1])?;
            if chunk[0] == 0 {
                return Ok(out);
            }
            let _ = out.push(if chunk[0].is_ascii() { chunk[0] as char } else { '?' });
            off += 1;
            continue;
        }
        for &b in &chunk[..n] {
            if b == 0 {
                return Ok(out);
            }
            if out.push(if b.is_ascii() { b as char } else { '?' }).is_err() {
                return Err(Error::BadStructure {
                    what: "command line",
                    detail: "longer than supported",
                    value: N as u64,
                });
            }
        }
        off += n;
    }
    if limit < max {
        return Err(Error::BadStructure {
            what: "command line",
            detail: "longer than supported",
            value: N as u64,
        });
    }
    Ok(out)
}

/// Reads a NUL-terminated string of at most `max` bytes, keeping the first
/// [`MAX_MODULE_STRING`] bytes of a longer one (a module's string is a label, not data).
fn read_cstr_truncated(mem: &impl PhysMemory, addr: u64, max: usize) -> Result<String<MAX_MODULE_STRING>, Error> {
    let mut out = String::new();
    let mut byte = [0u8; 1];
    for off in 0..max.min(MAX_MODULE_STRING) {
        mem.read(at(addr, off as u64)?, &mut byte)?;
        if byte[0] == 0 {
            break;
        }
        let _ = out.push(if byte[0].is_ascii() { byte[0] as char } else { '?' });
    }
    Ok(out)
}

/// A module string at `addr` (0: none).
fn module_string(mem: &impl PhysMemory, addr: u64) -> Result<String<MAX_MODULE_STRING>, Error> {
    if addr == 0 {
        return Ok(String::new());
    }
    read_cstr_truncated(mem, addr, MAX_MODULE_STRING)
}

/// Loaders put the kernel image path first (`/boot/kernel key=value ...`).
/// A first word that has no `=` is that path and is dropped.
pub fn strip_image_path(cmdline: &str) -> &str {
    let trimmed = cmdline.trim_start();
    match trimmed.split_once(char::is_whitespace) {
        Some((first, rest)) if !first.contains('=') => rest.trim_start(),
        None if !trimmed.contains('=') => "",
        _ => trimmed,
    }
}

fn set_cmdline(bi: &mut BootInfo, raw: &str) {
    bi.cmdline = bounded::<MAX_CMDLINE>(strip_image_path(raw));
}

// ---------------------------------------------------------------------------
// Multiboot1

const MB1_FLAG_MEMORY: u32 = 1 << 0;
const MB1_FLAG_CMDLINE: u32 = 1 << 2;
const MB1_FLAG_MODULES: u32 = 1 << 3;
const MB1_FLAG_MMAP: u32 = 1 << 6;
const MB1_FLAG_LOADER_NAME: u32 = 1 << 9;

fn parse_multiboot1(mem: &impl PhysMemory, info: u64) -> Result<BootInfo, Error> {
    let mut bi = BootInfo::new(Protocol::Multiboot1);
    let flags = mem.read_u32(info)?;
    if flags & MB1_FLAG_CMDLINE != 0 {
        let addr = mem.read_u32(at(info, 16)?)? as u64;
        let raw: String<MAX_CMDLINE> = read_cstr(mem, addr, MAX_CMDLINE)?;
        set_cmdline(&mut bi, &raw);
    }
    if flags & MB1_FLAG_LOADER_NAME != 0 {
        let addr = mem.read_u32(at(info, 64)?)? as u64;
        bi.loader_name = read_cstr(mem, addr, 63).unwrap_or_default();
    }
    if flags & MB1_FLAG_MODULES != 0 {
        let count = mem.read_u32(at(info, 20)?)? as u64;
        let list = mem.read_u32(at(info, 24)?)? as u64;
        if count as usize > MAX_MODULES {
            return Err(Error::TooMany {
                what: "boot modules",
                capacity: MAX_MODULES,
            });
        }
        // Each entry: u32 mod_start, u32 mod_end, u32 string, u32 reserved.
        for i in 0..count {
            let entry = at(list, i * 16)?;
            let start = mem.read_u32(entry)? as u64;
            let end = mem.read_u32(at(entry, 4)?)? as u64;
            let string = module_string(mem, mem.read_u32(at(entry, 8)?)? as u64)?;
            bi.push_module(start, end, string)?;
        }
    }
    if flags & MB1_FLAG_MMAP != 0 {
        let len = mem.read_u32(at(info, 44)?)? as u64;
        let base = mem.read_u32(at(info, 48)?)? as u64;
        if len > MAX_STRUCTURE_BYTES {
            return Err(Error::BadStructure {
                what: "multiboot1 memory map",
                detail: "length too large",
                value: len,
            });
        }
        let mut off = 0u64;
        // Each entry: u32 size (excluding itself), u64 base, u64 length, u32 type.
        while off + 4 <= len {
            let size = mem.read_u32(at(base, off)?)? as u64;
            if size < 20 {
                return Err(Error::BadStructure {
                    what: "multiboot1 memory-map entry",
                    detail: "size below 20",
                    value: size,
                });
            }
            if off + 4 + size > len {
                return Err(Error::BadStructure {
                    what: "multiboot1 memory-map entry",
                    detail: "runs past the map",
                    value: size,
                });
            }
            let start = mem.read_u64(at(base, off + 4)?)?;
            let length = mem.read_u64(at(base, off + 12)?)?;
            let kind = MemoryKind::from_e820(mem.read_u32(at(base, off + 20)?)?);
            bi.push_region(start, length, kind)?;
            off += 4 + size;
        }
    } else if flags & MB1_FLAG_MEMORY != 0 {
        // Only the legacy sizes: conventional memory and memory above 1 MiB, in KiB.
        let lower = mem.read_u32(at(info, 4)?)? as u64 * 1024;
        let upper = mem.read_u32(at(info, 8)?)? as u64 * 1024;
        bi.push_region(0, lower, MemoryKind::Usable)?;
        bi.push_region(0x10_0000, upper, MemoryKind::Usable)?;
    }
    Ok(bi)
}

// ---------------------------------------------------------------------------
// Multiboot2

const MB2_TAG_END: u32 = 0;
const MB2_TAG_CMDLINE: u32 = 1;
const MB2_TAG_LOADER_NAME: u32 = 2;
const MB2_TAG_MODULE: u32 = 3;
const MB2_TAG_MMAP: u32 = 6;
const MB2_TAG_EFI64_SYSTEM_TABLE: u32 = 12;
const MB2_TAG_ACPI_OLD: u32 = 14;
const MB2_TAG_ACPI_NEW: u32 = 15;
const MB2_TAG_FRAMEBUFFER: u32 = 8;

/// The framebuffer a Multiboot2 loader describes (tag 8): the UEFI GOP
/// buffer, or a VBE mode GRUB set. [`Framebuffer::drawable`] says whether a
/// console can draw on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framebuffer {
    pub address: u64,
    /// Bytes from one row to the next.
    pub pitch: u32,
    pub width: u32,
    pub height: u32,
    pub bits_per_pixel: u8,
    /// 0 indexed colour, 1 direct RGB, 2 EGA text.
    pub kind: u8,
    /// Bit positions of the red, green and blue fields in a pixel (direct RGB).
    pub red_shift: u8,
    pub green_shift: u8,
    pub blue_shift: u8,
    /// Field widths in bits (direct RGB).
    pub channel_bits: [u8; 3],
}

impl Framebuffer {
    /// `Ok` for 24- or 32-bit direct colour with byte-aligned 8-bit channels
    /// and consistent sizes; otherwise why not.
    pub fn drawable(&self) -> Result<(), &'static str> {
        const DIRECT_RGB: u8 = 1;
        let shifts = [self.red_shift, self.green_shift, self.blue_shift];
        if self.kind != DIRECT_RGB {
            return Err("not direct colour (indexed or text mode)");
        }
        if self.bits_per_pixel != 24 && self.bits_per_pixel != 32 {
            return Err("not 24 or 32 bits per pixel");
        }
        if self.channel_bits != [8; 3]
            || shifts
                .iter()
                .any(|s| *s >= u32::from(self.bits_per_pixel) as u8 || s % 8 != 0)
        {
            return Err("colour channels are not bytes");
        }
        let row_bytes = u64::from(self.width) * u64::from(self.bits_per_pixel / 8);
        if self.width == 0 || self.height == 0 || u64::from(self.pitch) < row_bytes {
            return Err("inconsistent width, height and pitch");
        }
        let end = self.address.checked_add(u64::from(self.pitch) * u64::from(self.height));
        if self.address == 0 || end.is_none_or(|end| end > 1 << 52) {
            return Err("address out of range");
        }
        Ok(())
    }
}

/// Reads a framebuffer tag; `None` when it is too short to hold the colour
/// fields (a loader bug, no reason to stop the boot).
fn parse_framebuffer(mem: &impl PhysMemory, tag: u64, size: u64) -> Result<Option<Framebuffer>, Error> {
    // Common part (32 bytes) plus the six RGB position/size bytes.
    if size < 38 {
        return Ok(None);
    }
    let mut bytes = [0u8; 38];
    mem.read(tag, &mut bytes)?;
    let u32_at = |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let mut address = [0u8; 8];
    address.copy_from_slice(&bytes[8..16]);
    Ok(Some(Framebuffer {
        address: u64::from_le_bytes(address),
        pitch: u32_at(16),
        width: u32_at(20),
        height: u32_at(24),
        bits_per_pixel: bytes[28],
        kind: bytes[29],
        red_shift: bytes[32],
        green_shift: bytes[34],
        blue_shift: bytes[36],
        channel_bits: [bytes[33], bytes[35], bytes[37]],
    }))
}

fn parse_multiboot2(mem: &impl PhysMemory, info: u64) -> Result<BootInfo, Error> {
    let mut bi = BootInfo::new(Protocol::Multiboot2);
    let total = mem.read_u32(info)? as u64;
    if !(16..=MAX_STRUCTURE_BYTES).contains(&total) {
        return Err(Error::BadStructure {
            what: "multiboot2 information",
            detail: "impossible total size",
            value: total,
        });
    }
    let mut off = 8u64;
    let mut saw_end = false;
    while off + 8 <= total {
        let tag = at(info, off)?;
        let kind = mem.read_u32(tag)?;
        let size = mem.read_u32(at(tag, 4)?)? as u64;
        if size < 8 || off + size > total {
            return Err(Error::BadStructure {
                what: "multiboot2 tag",
                detail: "size out of range",
                value: size,
            });
        }
        match kind {
            MB2_TAG_END => {
                saw_end = true;
                break;
            }
            MB2_TAG_CMDLINE => {
                let raw: String<MAX_CMDLINE> = read_cstr(mem, at(tag, 8)?, (size - 8) as usize)?;
                set_cmdline(&mut bi, &raw);
            }
            MB2_TAG_MODULE => {
                if size < 16 {
                    return Err(Error::BadStructure {
                        what: "multiboot2 module tag",
                        detail: "too short",
                        value: size,
                    });
                }
                let start = mem.read_u32(at(tag, 8)?)? as u64;
                let end = mem.read_u32(at(tag, 12)?)? as u64;
                let string = read_cstr_truncated(mem, at(tag, 16)?, (size - 16) as usize)?;
                bi.push_module(start, end, string)?;
            }
            MB2_TAG_LOADER_NAME => {
                bi.loader_name = read_cstr(mem, at(tag, 8)?, ((size - 8) as usize).min(63)).unwrap_or_default();
            }
            MB2_TAG_MMAP => {
                if size < 16 {
                    return Err(Error::BadStructure {
                        what: "multiboot2 memory-map tag",
                        detail: "too short",
                        value: size,
                    });
                }
                let entry_size = mem.read_u32(at(tag, 8)?)? as u64;
                if entry_size < 24 {
                    return Err(Error::BadStructure {
                        what: "multiboot2 memory-map entry",
                        detail: "size below 24",
                        value: entry_size,
                    });
                }
                let mut e = 16u64;
                while e + entry_size <= size {
                    let start = mem.read_u64(at(tag, e)?)?;
                    let len = mem.read_u64(at(tag, e + 8)?)?;
                    let ty = mem.read_u32(at(tag, e + 16)?)?;
                    bi.push_region(start, len, MemoryKind::from_e820(ty))?;
                    e += entry_size;
                }
            }
            MB2_TAG_EFI64_SYSTEM_TABLE if size >= 16 && bi.rsdp.is_none() => {
                bi.rsdp = Some(RsdpSource::EfiSystemTable(mem.read_u64(at(tag, 8)?)?));
            }
            MB2_TAG_ACPI_OLD | MB2_TAG_ACPI_NEW => {
                // Prefer the ACPI 2.0+ copy (XSDT) when both tags are present;
                // any ACPI tag beats the EFI system table.
                let keep_existing = kind == MB2_TAG_ACPI_OLD && matches!(bi.rsdp, Some(RsdpSource::Copy(_)));
                if !keep_existing {
                    let n = ((size - 8) as usize).min(64);
                    let mut bytes = [0u8; 64];
                    mem.read(at(tag, 8)?, &mut bytes[..n])?;
                    let copy = Vec::from_slice(&bytes[..n]).map_err(|_| Error::TooMany {
                        what: "RSDP bytes",
                        capacity: 64,
                    })?;
                    bi.rsdp = Some(RsdpSource::Copy(copy));
                }
            }
            MB2_TAG_FRAMEBUFFER => bi.framebuffer = parse_framebuffer(mem, tag, size)?,
            _ => {}
        }
        off += size.next_multiple_of(8);
    }
    if !saw_end {
        return Err(Error::BadStructure {
            what: "multiboot2 information",
            detail: "no end tag within total size",
            value: total,
        });
    }
    Ok(bi)
}

// ---------------------------------------------------------------------------
// PVH (hvm_start_info)

fn parse_pvh(mem: &impl PhysMemory, info: u64) -> Result<BootInfo, Error> {
    let mut bi = BootInfo::new(Protocol::Pvh);
    let magic = mem.read_u32(info)?;
    if magic != PVH_MAGIC {
        return Err(Error::BadStructure {
            what: "PVH start_info",
            detail: "bad magic",
            value: magic as u64,
        });
    }
    let version = mem.read_u32(at(info, 4)?)?;
    let cmdline = mem.read_u64(at(info, 24)?)?;
    if cmdline != 0 {
        let raw: String<MAX_CMDLINE> = read_cstr(mem, cmdline, MAX_CMDLINE)?;
        set_cmdline(&mut bi, &raw);
    }
    let rsdp = mem.read_u64(at(info, 32)?)?;
    if rsdp != 0 {
        bi.rsdp = Some(RsdpSource::Address(rsdp));
    }
    if version >= 1 {
        let map = mem.read_u64(at(info, 40)?)?;
        let entries = mem.read_u32(at(info, 48)?)? as u64;
        if entries as usize > MAX_REGIONS {
            return Err(Error::TooMany {
                what: "memory-map entries",
                capacity: MAX_REGIONS,
            });
        }
        for i in 0..entries {
            // `i < 256`, so `i * 24` cannot overflow; the sum with the
            // loader's pointer can.
            let e = at(map, i * 24)?;
            let start = mem.read_u64(e)?;
            let len = mem.read_u64(at(e, 8)?)?;
            let ty = mem.read_u32(at(e, 16)?)?;
            bi.push_region(start, len, MemoryKind::from_e820(ty))?;
        }
    }
    let nr_modules = mem.read_u32(at(info, 12)?)? as u64;
    if nr_modules > 0 {
        if nr_modules as usize > MAX_MODULES {
            return Err(Error::TooMany {
                what: "boot modules",
                capacity: MAX_MODULES,
            });
        }
        let list = mem.read_u64(at(info, 16)?)?;
        // Each hvm_modlist_entry: u64 paddr, u64 size, u64 cmdline_paddr, u64 reserved.
        for i in 0..nr_modules {
            let entry = at(list, i * 32)?;
            let start = mem.read_u64(entry)?;
            let len = mem.read_u64(at(entry, 8)?)?;
            let end = start.checked_add(len).ok_or(Error::BadStructure {
                what: "PVH module",
                detail: "ends past 2^64",
                value: start,
            })?;
            let cmdline = mem.read_u64(at(entry, 16)?)?;
            let string = if cmdline == 0 {
                String::new()
            } else {
                module_string(mem, cmdline)?
            };
            bi.push_module(start, end, string)?;
        }
    }
    bi.loader_name = bounded("PVH");
    Ok(bi)
}

#[cfg(test)]
mod tests;
