//! The RAID map (MR_DCMD_LD_MAP_GET_INFO) in its three formats, and FastPath routing with it:
//! the dynamic map Ventura and Aero firmware announce through SP2 bits 24:16, the legacy 64-LD
//! map of Invader and Fury, and the extended 256-LD map those give a driver that asked for 256
//! LDs in IOC INIT when the controller information offers them ([`MapFormat`]). Each parses into
//! the same [`RaidMap`]; routing is RAID-0 reads and writes,
//! RAID-1 reads balanced over the two arms ([`MirrorLoad`]) and RAID-1 writes (the data arm's
//! route; the driver sends the same write to the mirror as its peer).
//!
//! The map comes from the device, so every field is checked before use: offsets and sizes
//! inside the buffer, element counts within the format's limits, each LD's geometry (span
//! depth, strip size, arm count, the data-arm map a permutation of the arms, arrays, PD ids and
//! device handles that exist and differ). A map whose structure is wrong is refused as a whole;
//! an LD whose entries are wrong, or that is not a FastPath-capable RAID-0 LD or optimal
//! two-disk RAID-1 LD, is left to the firmware LD path. A refused value means the LD path,
//! never a computed wrong block.
//!
//! A RAID-1 FastPath write is two requests, one per arm, that the driver pairs and completes
//! together (Linux's peer commands on Ventura and later); the map's FastPath-write capability
//! allows it, as it allows RAID-0 writes.
//!
//! Layout (Linux's `MR_FW_RAID_MAP_DYNAMIC`, `megaraid_sas_fusion.h`): a header (total size,
//! descriptor table offset, size and count, LD/array/span counts), a table of 16-byte
//! descriptors {type, offset from the data area, bytes, elements}, and the data: device-handle
//! info (8 B per PD), target-id → LD index (u16 per target), arrays (32 PD ids each) and LD span
//! maps (0x9E0 B each: `MR_LD_RAID`, the data-arm map, 8 span blocks).
//!
//! The legacy map (Linux's `MR_FW_RAID_MAP_ALL`) has fixed offsets: total size (u32, which must
//! be the header's 0x28A8 bytes plus one span map per LD), the LD count (u32 at 0x18, at most
//! 64), a byte target → LD table of 128 entries at 0x20 (0xFF: none), 128 arrays at 0xA8, 256
//! device handles at 0x20A8 and the span maps from 0x28A8. The extended map
//! (`MR_FW_RAID_MAP_EXT`, 665,896 bytes) leaves its size to the driver: the LD count (u16 at
//! 0x20, at most 256), 256 device handles at 0x28, a 256-byte target → LD table at 0x828, 256
//! arrays at 0x928 and 256 span maps at 0x4928. Device handles, arrays and span maps have the
//! dynamic map's layout, and are checked the same way.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::Error;

/// SP2 bits 24:16: the dynamic map's size in 64 KiB units (0: no dynamic map).
pub const SP2_MAP_UNITS_SHIFT: u32 = 16;
/// SP2 map-size field mask (after the shift).
pub const SP2_MAP_UNITS_MASK: u32 = 0x1FF;
/// Bytes per map-size unit.
pub const MAP_UNIT_BYTES: usize = 64 * 1024;
/// The largest map buffer the driver allocates (a firmware asking for more gets no FastPath).
pub const MAX_MAP_BYTES: usize = 4 << 20;
/// The map DCMD.
pub const DCMD_LD_MAP_GET_INFO: u32 = 0x0300_E101;
/// The legacy 64-LD map's DCMD size: its header and 64 span maps.
pub const LEGACY_MAP_BYTES: usize = LEGACY_SPANS + LEGACY_MAX_LDS * LD_SPAN_MAP_BYTES;
/// The extended 256-LD map's DCMD size.
pub const EXT_MAP_BYTES: usize = EXT_SPANS + EXT_MAX_LDS * LD_SPAN_MAP_BYTES;

/// Legacy map: the LD count, the byte target → LD table (64 LDs and 64 views), the arrays, the
/// device handles, and the span maps right after them (the end of the header).
const LEGACY_LD_COUNT: usize = 0x18;
const LEGACY_TARGETS: usize = 0x20;
const LEGACY_TARGET_ENTRIES: usize = 128;
const LEGACY_ARRAYS: usize = 0xA8;
const LEGACY_MAX_ARRAYS: usize = 128;
const LEGACY_HANDLES: usize = 0x20A8;
const LEGACY_SPANS: usize = 0x28A8;
const LEGACY_MAX_LDS: usize = 64;
/// Extended map: the LD count (u16), device handles, byte target → LD table, arrays, span maps.
const EXT_LD_COUNT: usize = 0x20;
const EXT_HANDLES: usize = 0x28;
const EXT_TARGETS: usize = 0x828;
const EXT_ARRAYS: usize = 0x928;
const EXT_SPANS: usize = 0x4928;
const EXT_MAX_LDS: usize = 256;
/// Span blocks per LD span map.
const MAX_SPANS: usize = 8;
/// Device handles in the fixed formats.
const FIXED_HANDLES: usize = 256;
/// A byte target → LD entry naming no LD.
const NO_LD_BYTE: u8 = 0xFF;

/// The format the firmware answers the map DCMD in, as Linux chooses it: dynamic when SP2
/// gives its size (Ventura and later), extended when the controller information offers 256
/// LDs (the driver always asks for them in IOC INIT), legacy otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapFormat {
    /// `MR_FW_RAID_MAP_DYNAMIC`, of the size SP2 announces.
    Dynamic {
        /// The DCMD's size.
        bytes: usize,
    },
    /// `MR_FW_RAID_MAP_ALL`: 64 LDs.
    Legacy,
    /// `MR_FW_RAID_MAP_EXT`: 256 LDs.
    Ext,
}

impl MapFormat {
    /// The map DCMD's data size in this format.
    pub const fn bytes(self) -> usize {
        match self {
            Self::Dynamic { bytes } => bytes,
            Self::Legacy => LEGACY_MAP_BYTES,
            Self::Ext => EXT_MAP_BYTES,
        }
    }

    /// Parses and checks a map of this format (see [`parse_dynamic`]).
    pub fn parse(self, buf: &[u8]) -> Result<RaidMap, Error> {
        match self {
            Self::Dynamic { .. } => parse_dynamic(buf),
            Self::Legacy => parse_legacy(buf),
            Self::Ext => parse_ext(buf),
        }
    }

    /// The report's name of the format.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Dynamic { .. } => "dynamic",
            Self::Legacy => "legacy 64-LD",
            Self::Ext => "extended 256-LD",
        }
    }
}

const HEADER_BYTES: usize = 0x38;
const DESC_BYTES: usize = 16;
const DEV_HANDLE_BYTES: usize = 8;
const ARRAY_BYTES: usize = 64;
const LD_SPAN_MAP_BYTES: usize = 0x9E0;
/// Format limits (Linux's `MR_DRV_RAID_MAP`: 512 PDs, LDs and arrays; 32 arms per row).
const MAX_DYN_ENTRIES: usize = 512;
const MAX_ARMS: usize = 32;
const NO_HANDLE: u16 = 0xFFFF;
const NO_LD: u16 = 0xFFFF;
/// Strip sizes accepted: 2^3 .. 2^15 blocks (4 KiB .. 16 MiB of 512-byte blocks).
const STRIP_SHIFTS: core::ops::RangeInclusive<u8> = 3..=15;

/// `MR_LD_RAID` capability bits.
const CAP_FP_CAPABLE: u32 = 1 << 0;
const CAP_FP_WRITE: u32 = 1 << 20;
const CAP_FP_READ: u32 = 1 << 21;
/// `MR_LD_RAID` capability `fp_cache_bypass_capable`: FastPath writes of this RAID-0/1 LD may
/// bypass the controller's cache, and a driver marks them so (Linux: SLD routing flag and
/// raid_flags sub-type CACHE_BYPASS in the G35 RAID context).
const CAP_FP_CACHE_BYPASS: u32 = 1 << 29;
/// `MR_LD_RAID.ldState` of an LD with every arm in service.
const LD_STATE_OPTIMAL: u8 = 3;

/// A RAID-0 or RAID-1 LD the driver may reach by FastPath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FastPathLd {
    /// LD target id.
    pub target: u8,
    /// The map's configuration sequence number for the LD (sent in the RAID context).
    pub seq: u16,
    /// log2 of the strip size in blocks.
    pub strip_shift: u8,
    /// RAID-1: two arms holding the same blocks (a read from either, a write to both); RAID-0
    /// otherwise.
    pub mirror: bool,
    /// Device handle of each data arm, in the order strips go round (data-arm map applied);
    /// RAID-1: the data arm, then its mirror.
    pub arm_handles: Vec<u16>,
    /// The PD id of each entry of `arm_handles` (RAID-1 keeps its read load per PD id).
    pub arm_pds: Vec<u16>,
    /// The physical arm number of each data arm (for the RAID context's span/arm byte).
    pub phys_arms: Vec<u8>,
    /// First block of the LD's data on every arm.
    pub start_block: u64,
    /// Blocks of the LD's data on each arm (rows × strip).
    pub arm_blocks: u64,
    /// The LD's size in blocks, from the map.
    pub blocks: u64,
    /// Reads may go FastPath.
    pub read: bool,
    /// Writes may go FastPath.
    pub write: bool,
    /// FastPath writes bypass the controller's cache (the map's `fp_cache_bypass_capable`).
    pub cache_bypass: bool,
}

/// Where a FastPath request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastPathRoute {
    /// Device handle of the arm's disk.
    pub handle: u16,
    /// Block on that disk.
    pub pd_lba: u64,
    /// The map's sequence number for the LD.
    pub seq: u16,
    /// Span (bits 7:5, always 0 here) and physical arm (bits 4:0).
    pub span_arm: u8,
}

impl FastPathLd {
    /// The arms a row's data spans (the map's row data size): every arm of RAID-0, one of a
    /// RAID-1 mirror.
    pub fn data_arms(&self) -> u32 {
        if self.mirror { 1 } else { self.arm_handles.len() as u32 }
    }

    /// The disk and block of `blocks` blocks at LD block `lba` when they lie inside one strip
    /// and the map allows FastPath for this direction; None sends the request on the LD path.
    /// RAID-1: the data arm's route ([`FastPathLd::mirror_route`] gives the other arm's: a read
    /// may go there instead, a write goes to both).
    #[inline(always)]
    pub fn route(&self, lba: u64, blocks: u32, write: bool) -> Option<FastPathRoute> {
        let handles = self.arm_handles.len() as u64;
        // Strips go round the data arms: all of them on RAID-0, the first on RAID-1.
        let arms = if self.mirror { 1 } else { handles };
        // The fields are public: a geometry `parse_dynamic` would refuse routes nothing.
        if blocks == 0
            || (write && !self.write)
            || (!write && !self.read)
            || handles == 0
            || (self.mirror && handles != 2)
            || self.phys_arms.len() as u64 != handles
            || !STRIP_SHIFTS.contains(&self.strip_shift)
        {
            return None;
        }
        let last = lba.checked_add(u64::from(blocks) - 1)?;
        if last >= self.blocks || lba >> self.strip_shift != last >> self.strip_shift {
            return None;
        }
        let strip = lba >> self.strip_shift;
        let arm = (strip % arms) as usize;
        let row = strip / arms;
        let in_strip = lba & ((1u64 << self.strip_shift) - 1);
        let on_arm = (row << self.strip_shift) + in_strip;
        if on_arm + u64::from(blocks) > self.arm_blocks {
            return None;
        }
        Some(FastPathRoute {
            handle: self.arm_handles[arm],
            pd_lba: self.start_block.checked_add(on_arm)?,
            seq: self.seq,
            span_arm: self.phys_arms[arm],
        })
    }

    /// A RAID-1 `route` sent to arm `arm` (0: the data arm, 1: its mirror) instead: the same
    /// block, the other disk. None for an arm the LD does not have.
    pub fn mirror_route(&self, route: FastPathRoute, arm: usize) -> Option<FastPathRoute> {
        if !self.mirror {
            return None;
        }
        Some(FastPathRoute {
            handle: *self.arm_handles.get(arm)?,
            span_arm: *self.phys_arms.get(arm)?,
            ..route
        })
    }
}

/// One PD's share of RAID-1 FastPath reads.
#[derive(Default)]
struct PdLoad {
    /// FastPath reads sent to it and not completed.
    pending: AtomicU32,
    /// The disk block after its last FastPath read (where a sequential reader goes next).
    next_block: AtomicU64,
}

/// RAID-1 read balancing (Linux's `megasas_get_best_arm_pd` does the like): each read goes to
/// the arm with fewer FastPath reads outstanding, and between equally loaded arms to the one
/// whose last read ended nearest the block (a sequential reader stays on one disk). Kept per PD
/// id, which the map checks below [`MAX_DYN_ENTRIES`], so a map read again under outstanding
/// reads still finds their counters. Atomics only: submitters on every CPU share it without a
/// lock, and a race between two submitters costs at worst one less even choice.
pub struct MirrorLoad {
    pds: Vec<PdLoad>,
}

impl Default for MirrorLoad {
    fn default() -> Self {
        Self {
            pds: (0..MAX_DYN_ENTRIES).map(|_| PdLoad::default()).collect(),
        }
    }
}

impl MirrorLoad {
    /// Chooses the arm (0 or 1) of RAID-1 LD `ld` for a FastPath read of `blocks` blocks at
    /// disk block `pd_lba` and counts it outstanding there: the arm, and the PD id to hand to
    /// [`MirrorLoad::done`] when it completes. None: not a mirror whose PD ids this table keeps
    /// (the caller then reads the data arm without balancing).
    pub fn pick(&self, ld: &FastPathLd, pd_lba: u64, blocks: u32) -> Option<(usize, u16)> {
        let (true, &[pd0, pd1]) = (ld.mirror, ld.arm_pds.as_slice()) else {
            return None;
        };
        let a = self.pds.get(usize::from(pd0))?;
        let b = self.pds.get(usize::from(pd1))?;
        let (p0, p1) = (a.pending.load(Ordering::Relaxed), b.pending.load(Ordering::Relaxed));
        let arm = if p0 != p1 {
            usize::from(p1 < p0)
        } else {
            let d0 = a.next_block.load(Ordering::Relaxed).abs_diff(pd_lba);
            let d1 = b.next_block.load(Ordering::Relaxed).abs_diff(pd_lba);
            usize::from(d1 < d0)
        };
        let (pd, load) = if arm == 0 { (pd0, a) } else { (pd1, b) };
        load.pending.fetch_add(1, Ordering::Relaxed);
        load.next_block
            .store(pd_lba.saturating_add(u64::from(blocks)), Ordering::Relaxed);
        Some((arm, pd))
    }

    /// A read [`MirrorLoad::pick`] counted on PD `pd` completed (or was handed back).
    pub fn done(&self, pd: u16) {
        if let Some(load) = self.pds.get(usize::from(pd)) {
            // Never below zero, whatever the caller passes.
            let _ = load
                .pending
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// FastPath reads outstanding on PD `pd`.
    pub fn pending(&self, pd: u16) -> u32 {
        self.pds
            .get(usize::from(pd))
            .map_or(0, |l| l.pending.load(Ordering::Relaxed))
    }
}

/// What the map says, as far as the driver uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidMap {
    /// LDs in the map, each FastPath-ready or with the reason it is not.
    pub lds: Vec<(u16, Result<FastPathLd, Error>)>,
    /// Target id and configuration sequence number of every LD in the map (FastPath-ready or
    /// not): what the map sync hands back to the firmware (Linux's `MR_LD_TARGET_SYNC`).
    pub seq_nums: Vec<(u8, u16)>,
    /// The current device handle of each PD id in the device-handle table (0xFFFF: none).
    /// Linux sends a JBOD disk's requests by it when the firmware keeps no JBOD sequence map.
    pub pd_handles: Vec<u16>,
}

impl RaidMap {
    /// The FastPath-ready LD at `target`, if any.
    pub fn fastpath(&self, target: u8) -> Option<&FastPathLd> {
        self.lds
            .iter()
            .find_map(|(t, r)| r.as_ref().ok().filter(|_| *t == u16::from(target)))
    }

    /// The current device handle of PD `pd`, if the map gives it one.
    pub fn pd_handle(&self, pd: u8) -> Option<u16> {
        self.pd_handles
            .get(usize::from(pd))
            .copied()
            .filter(|h| *h != NO_HANDLE)
    }
}

fn refuse(what: &'static str, value: u64) -> Error {
    Error::RaidMap { what, value }
}

fn u16_at(b: &[u8], off: usize) -> Result<u16, Error> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(refuse("field outside the map", off as u64))
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, Error> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(refuse("field outside the map", off as u64))
}

fn u64_at(b: &[u8], off: usize) -> Result<u64, Error> {
    let lo = u32_at(b, off)?;
    let hi = u32_at(b, off + 4)?;
    Ok(u64::from(lo) | (u64::from(hi) << 32))
}

/// One descriptor's data: where it lies in the buffer and how many elements it holds.
#[derive(Clone, Copy, Default)]
struct Section {
    start: usize,
    elements: usize,
    present: bool,
}

/// Parses and checks a dynamic RAID map of `buf.len()` bytes (the DCMD buffer).
pub fn parse_dynamic(buf: &[u8]) -> Result<RaidMap, Error> {
    let total = u32_at(buf, 0x00)? as usize;
    if total < HEADER_BYTES || total > buf.len() {
        return Err(refuse("map size outside the buffer", total as u64));
    }
    let map = &buf[..total];
    let table = u32_at(map, 0x04)? as usize;
    let table_bytes = u32_at(map, 0x08)? as usize;
    let count = u32_at(map, 0x0C)? as usize;
    if count == 0 || count > 16 || table_bytes != count * DESC_BYTES {
        return Err(refuse("descriptor table size or count", table_bytes as u64));
    }
    if table < HEADER_BYTES || table.checked_add(table_bytes).is_none_or(|e| e > total) {
        return Err(refuse("descriptor table outside the map", table as u64));
    }
    let data = table + table_bytes;
    let mut sections = [Section::default(); 4];
    for i in 0..count {
        let d = table + i * DESC_BYTES;
        let kind = u32_at(map, d)? as usize;
        let offset = u32_at(map, d + 4)? as usize;
        let bytes = u32_at(map, d + 8)? as usize;
        let elements = u32_at(map, d + 12)? as usize;
        let element_bytes = match kind {
            0 => DEV_HANDLE_BYTES,
            1 => 2,
            2 => ARRAY_BYTES,
            3 => LD_SPAN_MAP_BYTES,
            // A descriptor type this driver does not know: skipped, as Linux does.
            _ => continue,
        };
        if sections[kind].present {
            return Err(refuse("descriptor type given twice", kind as u64));
        }
        if elements > MAX_DYN_ENTRIES || elements * element_bytes > bytes {
            return Err(refuse("descriptor element count", elements as u64));
        }
        let start = data
            .checked_add(offset)
            .filter(|s| s.checked_add(bytes).is_some_and(|e| e <= total))
            .ok_or(refuse("descriptor data outside the map", offset as u64))?;
        sections[kind] = Section {
            start,
            elements,
            present: true,
        };
    }
    let [handles, targets, arrays, spans] = sections;
    if !(handles.present && targets.present && arrays.present && spans.present) {
        return Err(refuse("a descriptor (handles, targets, arrays, spans) is missing", 0));
    }
    let ld_count = usize::from(u16_at(map, 0x2C)?);
    if ld_count > spans.elements {
        return Err(refuse("LD count beyond the span maps", ld_count as u64));
    }
    let tables = Tables {
        targets: targets.start,
        target_entries: targets.elements,
        wide_targets: true,
        handles,
        arrays,
        spans: spans.start,
        ld_count,
    };
    assemble(map, &tables)
}

/// Where a map's tables lie, whatever its format.
struct Tables {
    /// The target → LD table: its start and entries, u16 (dynamic) or u8 (legacy, extended).
    targets: usize,
    target_entries: usize,
    wide_targets: bool,
    handles: Section,
    arrays: Section,
    /// The first LD span map; `ld_count` of them follow.
    spans: usize,
    ld_count: usize,
}

/// The LDs, sequence numbers and device handles of a map whose structure was checked: every
/// target the table maps to an LD, that LD's span map checked on its own.
fn assemble(map: &[u8], t: &Tables) -> Result<RaidMap, Error> {
    let mut lds = Vec::new();
    let mut seq_nums = Vec::new();
    for target in 0..t.target_entries {
        let ld = if t.wide_targets {
            u16_at(map, t.targets + 2 * target)?
        } else {
            match *map
                .get(t.targets + target)
                .ok_or(refuse("field outside the map", (t.targets + target) as u64))?
            {
                NO_LD_BYTE => NO_LD,
                ld => u16::from(ld),
            }
        };
        if ld == NO_LD {
            continue;
        }
        if let Ok(tg) = u8::try_from(target)
            && usize::from(ld) < t.ld_count
        {
            let seq = u16_at(map, t.spans + usize::from(ld) * LD_SPAN_MAP_BYTES + 0x1E)?;
            seq_nums.push((tg, seq));
        }
        let checked = if usize::from(ld) >= t.ld_count {
            Err(refuse("LD index beyond the LD count", u64::from(ld)))
        } else {
            check_ld(
                map,
                target,
                t.spans + usize::from(ld) * LD_SPAN_MAP_BYTES,
                t.handles,
                t.arrays,
            )
        };
        lds.push((target as u16, checked));
    }
    let pd_handles = (0..t.handles.elements)
        .map(|pd| u16_at(map, t.handles.start + pd * DEV_HANDLE_BYTES))
        .collect::<Result<Vec<u16>, Error>>()?;
    Ok(RaidMap {
        lds,
        seq_nums,
        pd_handles,
    })
}

/// Parses and checks a legacy 64-LD map (Invader, Fury) of `buf.len()` bytes. The total size
/// must be the header and one span map per LD, as Linux's `MR_ValidateMapInfo` requires.
pub fn parse_legacy(buf: &[u8]) -> Result<RaidMap, Error> {
    let total = u32_at(buf, 0x00)? as usize;
    let ld_count = u32_at(buf, LEGACY_LD_COUNT)? as usize;
    if ld_count > LEGACY_MAX_LDS {
        return Err(refuse("LD count above the legacy map's 64", ld_count as u64));
    }
    if total != LEGACY_SPANS + ld_count * LD_SPAN_MAP_BYTES {
        return Err(refuse(
            "map size other than the header and its LDs' span maps",
            total as u64,
        ));
    }
    if total > buf.len() {
        return Err(refuse("map size outside the buffer", total as u64));
    }
    let tables = Tables {
        targets: LEGACY_TARGETS,
        target_entries: LEGACY_TARGET_ENTRIES,
        wide_targets: false,
        handles: fixed_section(LEGACY_HANDLES, FIXED_HANDLES),
        arrays: fixed_section(LEGACY_ARRAYS, LEGACY_MAX_ARRAYS),
        spans: LEGACY_SPANS,
        ld_count,
    };
    assemble(&buf[..total], &tables)
}

/// Parses and checks an extended 256-LD map (Invader, Fury with 256 LDs): the buffer must hold
/// the whole format (its size field is reserved; the driver knows the size).
pub fn parse_ext(buf: &[u8]) -> Result<RaidMap, Error> {
    if buf.len() < EXT_MAP_BYTES {
        return Err(refuse("buffer shorter than the extended map", buf.len() as u64));
    }
    let map = &buf[..EXT_MAP_BYTES];
    let ld_count = usize::from(u16_at(map, EXT_LD_COUNT)?);
    if ld_count > EXT_MAX_LDS {
        return Err(refuse("LD count above the extended map's 256", ld_count as u64));
    }
    // The array and span counts are not used (each LD names its array, checked against the
    // format's 256), but a count the format cannot hold means a broken map.
    let arrays = usize::from(u16_at(map, EXT_LD_COUNT + 2)?);
    if arrays > EXT_MAX_LDS {
        return Err(refuse("array count above the extended map's 256", arrays as u64));
    }
    let spans = usize::from(u16_at(map, EXT_LD_COUNT + 4)?);
    if spans > EXT_MAX_LDS * MAX_SPANS {
        return Err(refuse(
            "span count above the extended map's 256 LDs of 8 spans",
            spans as u64,
        ));
    }
    let tables = Tables {
        targets: EXT_TARGETS,
        target_entries: EXT_MAX_LDS,
        wide_targets: false,
        handles: fixed_section(EXT_HANDLES, FIXED_HANDLES),
        arrays: fixed_section(EXT_ARRAYS, EXT_MAX_LDS),
        spans: EXT_SPANS,
        ld_count,
    };
    assemble(map, &tables)
}

fn fixed_section(start: usize, elements: usize) -> Section {
    Section {
        start,
        elements,
        present: true,
    }
}

/// One LD's span map at `at`: a FastPath-capable RAID-0 LD, or an optimal two-disk RAID-1 LD
/// with FastPath reads, with sound geometry; or why not.
fn check_ld(map: &[u8], target: usize, at: usize, handles: Section, arrays: Section) -> Result<FastPathLd, Error> {
    let target = u8::try_from(target).map_err(|_| refuse("LD target id above 255", target as u64))?;
    let caps = u32_at(map, at)?;
    let blocks = u64_at(map, at + 0x08)?;
    let span_depth = map[at + 0x10];
    let level = map[at + 0x11];
    let strip_shift = map[at + 0x12];
    let row_size = map[at + 0x13];
    let row_data = map[at + 0x14];
    let map_target = u16_at(map, at + 0x18)?;
    let ld_state = map[at + 0x1A];
    let mod_factor = map[at + 0x1C];
    let seq = u16_at(map, at + 0x1E)?;
    let block_len = u32_at(map, at + 0x30)?;
    if map_target != u16::from(target) {
        return Err(refuse("span map names another target", u64::from(map_target)));
    }
    let mirror = match level {
        0 => false,
        1 => true,
        _ => {
            return Err(refuse(
                "RAID level other than 0 or 1 (FastPath is used for RAID-0 and RAID-1 reads only)",
                u64::from(level),
            ));
        }
    };
    if mirror && caps & CAP_FP_READ == 0 {
        return Err(refuse(
            "RAID-1 LD without FastPath reads (RAID-1 writes take the LD path)",
            u64::from(caps),
        ));
    }
    if mirror && ld_state != LD_STATE_OPTIMAL {
        return Err(refuse(
            "RAID-1 LD not optimal (an arm may be missing or stale)",
            u64::from(ld_state),
        ));
    }
    if caps & CAP_FP_CAPABLE == 0 || caps & (CAP_FP_READ | CAP_FP_WRITE) == 0 {
        return Err(refuse("LD not FastPath-capable", u64::from(caps)));
    }
    if span_depth != 1 {
        return Err(refuse("span depth other than 1", u64::from(span_depth)));
    }
    if !STRIP_SHIFTS.contains(&strip_shift) {
        return Err(refuse("strip size out of range (log2 blocks)", u64::from(strip_shift)));
    }
    let arms = usize::from(row_size);
    // RAID-1: two arms per row, one of them data (the other its mirror), strips round one arm.
    let data_arms = if mirror { 1 } else { row_size };
    if arms == 0 || arms > MAX_ARMS || (mirror && arms != 2) || row_data != data_arms || mod_factor != data_arms {
        return Err(refuse(
            "arm counts (row size, data arms, mod factor)",
            u64::from(row_size),
        ));
    }
    if block_len != 0 && block_len != 512 {
        return Err(refuse("logical block length other than 512", u64::from(block_len)));
    }
    // The data-arm map must be a permutation of the arms: two strips of a row on one disk
    // would overlap there. RAID-1: its one entry names the data arm, the other arm mirrors it.
    let mut seen = 0u32;
    let mut phys_arms = Vec::with_capacity(arms);
    for i in 0..usize::from(data_arms) {
        let a = map[at + 0x80 + i];
        if usize::from(a) >= arms || seen & (1 << a) != 0 {
            return Err(refuse("data-arm map is not a permutation of the arms", u64::from(a)));
        }
        seen |= 1 << a;
        phys_arms.push(a);
    }
    if mirror {
        phys_arms.push(1 - phys_arms[0]);
    }
    let span = at + 0xA0;
    let rows = u64_at(map, span)?;
    let start_block = u64_at(map, span + 0x08)?;
    let array = usize::from(u16_at(map, span + 0x18)?);
    if map[span + 0x1A] != row_size || map[span + 0x1B] != row_data {
        return Err(refuse(
            "span row sizes differ from the LD's",
            u64::from(map[span + 0x1A]),
        ));
    }
    let arm_blocks = rows
        .checked_shl(u32::from(strip_shift))
        .filter(|b| b >> strip_shift == rows)
        .ok_or(refuse("rows overflow", rows))?;
    if start_block.checked_add(arm_blocks).is_none() {
        return Err(refuse("span start block overflows", start_block));
    }
    if blocks == 0
        || arm_blocks
            .checked_mul(u64::from(data_arms))
            .is_none_or(|cap| blocks > cap)
    {
        return Err(refuse("LD size beyond its arms", blocks));
    }
    if array >= arrays.elements {
        return Err(refuse("array reference beyond the arrays", array as u64));
    }
    let mut arm_handles = Vec::with_capacity(arms);
    let mut arm_pds = Vec::with_capacity(arms);
    for &phys in &phys_arms {
        let pd = u16_at(map, arrays.start + array * ARRAY_BYTES + 2 * usize::from(phys))?;
        if usize::from(pd) >= handles.elements {
            return Err(refuse("PD id beyond the device handles", u64::from(pd)));
        }
        let handle = u16_at(map, handles.start + usize::from(pd) * DEV_HANDLE_BYTES)?;
        if handle == NO_HANDLE {
            return Err(refuse("arm without a device handle", u64::from(pd)));
        }
        if arm_handles.contains(&handle) {
            return Err(refuse("two arms share a device handle", u64::from(handle)));
        }
        arm_handles.push(handle);
        arm_pds.push(pd);
    }
    Ok(FastPathLd {
        target,
        seq,
        strip_shift,
        mirror,
        arm_handles,
        arm_pds,
        phys_arms,
        start_block,
        arm_blocks,
        blocks,
        read: caps & CAP_FP_READ != 0,
        write: caps & CAP_FP_WRITE != 0,
        // Linux marks the writes of RAID-0 and RAID-1 LDs only: the only levels kept here.
        cache_bypass: caps & CAP_FP_CACHE_BYPASS != 0,
    })
}

/// Builds a dynamic map (the firmware model's, and the tests'): LD 0 at `target`, RAID-0 over
/// PDs `pds` with their handles `0x100 + pd`, `rows` strips of 2^`strip_shift` blocks per arm.
#[cfg(any(test, feature = "fake"))]
pub fn build_dynamic(target: u8, pds: &[u16], strip_shift: u8, rows: u64, seq: u16, caps: u32) -> Vec<u8> {
    const TABLE: usize = 0x58;
    const DATA: usize = TABLE + 4 * DESC_BYTES;
    let handles_off = 0;
    let targets_off = handles_off + 256 * DEV_HANDLE_BYTES;
    let arrays_off = targets_off + 256 * 2;
    let spans_off = arrays_off + ARRAY_BYTES;
    let total = DATA + spans_off + LD_SPAN_MAP_BYTES;
    let mut m = alloc::vec![0u8; total];
    let put16 = |m: &mut [u8], o: usize, v: u16| m[o..o + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |m: &mut [u8], o: usize, v: u32| m[o..o + 4].copy_from_slice(&v.to_le_bytes());
    let put64 = |m: &mut [u8], o: usize, v: u64| m[o..o + 8].copy_from_slice(&v.to_le_bytes());
    put32(&mut m, 0x00, total as u32);
    put32(&mut m, 0x04, TABLE as u32);
    put32(&mut m, 0x08, (4 * DESC_BYTES) as u32);
    put32(&mut m, 0x0C, 4);
    put16(&mut m, 0x2C, 1);
    put16(&mut m, 0x2E, 1);
    put16(&mut m, 0x30, 1);
    for (i, (off, bytes, n)) in [
        (handles_off, 256 * DEV_HANDLE_BYTES, 256),
        (targets_off, 512, 256),
        (arrays_off, ARRAY_BYTES, 1),
        (spans_off, LD_SPAN_MAP_BYTES, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let d = TABLE + i * DESC_BYTES;
        put32(&mut m, d, i as u32);
        put32(&mut m, d + 4, off as u32);
        put32(&mut m, d + 8, bytes as u32);
        put32(&mut m, d + 12, n);
    }
    for pd in 0..256 {
        put16(&mut m, DATA + handles_off + pd * DEV_HANDLE_BYTES, NO_HANDLE);
        put16(&mut m, DATA + targets_off + pd * 2, NO_LD);
    }
    for arm in 0..MAX_ARMS {
        put16(&mut m, DATA + arrays_off + arm * 2, 0xFFFF);
    }
    for (arm, &pd) in pds.iter().enumerate() {
        put16(
            &mut m,
            DATA + handles_off + usize::from(pd) * DEV_HANDLE_BYTES,
            0x100 + pd,
        );
        m[DATA + handles_off + usize::from(pd) * DEV_HANDLE_BYTES + 2] = 1;
        put16(&mut m, DATA + arrays_off + arm * 2, pd);
    }
    put16(&mut m, DATA + targets_off + usize::from(target) * 2, 0);
    let ld = DATA + spans_off;
    let arms = pds.len() as u8;
    put32(&mut m, ld, caps);
    put64(&mut m, ld + 0x08, (rows << strip_shift) * u64::from(arms));
    m[ld + 0x10] = 1;
    m[ld + 0x12] = strip_shift;
    m[ld + 0x13] = arms;
    m[ld + 0x14] = arms;
    put16(&mut m, ld + 0x18, u16::from(target));
    m[ld + 0x1A] = 3;
    m[ld + 0x1C] = arms;
    put16(&mut m, ld + 0x1E, seq);
    put32(&mut m, ld + 0x30, 512);
    for a in 0..arms {
        m[ld + 0x80 + usize::from(a)] = a;
    }
    let span = ld + 0xA0;
    put64(&mut m, span, rows);
    put64(&mut m, span + 0x10, rows << strip_shift);
    m[span + 0x1A] = arms;
    m[span + 0x1B] = arms;
    put32(&mut m, span + 0x20, 1);
    put64(&mut m, span + 0x30, rows - 1);
    put32(&mut m, span + 0x40, 1);
    m
}

/// [`build_dynamic`]'s map with LD 0 made RAID-1 over the two PDs `pds` (a mirror: the LD's
/// blocks are one arm's, data arm 0), as the emulation describes `raid=raid1`.
#[cfg(any(test, feature = "fake"))]
pub fn build_dynamic_raid1(target: u8, pds: [u16; 2], strip_shift: u8, rows: u64, seq: u16, caps: u32) -> Vec<u8> {
    let mut m = build_dynamic(target, &pds, strip_shift, rows, seq, caps);
    let ld = layout::LD;
    m[ld + 0x08..ld + 0x10].copy_from_slice(&(rows << strip_shift).to_le_bytes());
    m[ld + 0x11] = 1;
    m[ld + 0x14] = 1;
    m[ld + 0x1C] = 1;
    m[ld + 0x80..ld + 0x82].fill(0);
    m[ld + 0xA0 + 0x1B] = 1;
    m
}

/// A valid dynamic map without LDs (a firmware with no RAID configuration).
#[cfg(any(test, feature = "fake"))]
pub fn build_dynamic_empty() -> Vec<u8> {
    let mut m = build_dynamic(0, &[0], 3, 1, 0, 0);
    m[0x2C..0x32].fill(0);
    m[layout::TARGETS..layout::TARGETS + 2].copy_from_slice(&NO_LD.to_le_bytes());
    m[layout::HANDLES..layout::HANDLES + 2].copy_from_slice(&NO_HANDLE.to_le_bytes());
    for desc in [2, 3] {
        let d = layout::TABLE + desc * DESC_BYTES + 12;
        m[d..d + 4].fill(0);
    }
    m
}

/// The map a [`build_dynamic`]-family builder made, in the legacy (`ext` false) or extended
/// format: the same device handles, array 0, LD 0's span map and target → LD entries, at the
/// format's fixed offsets (the firmware model's maps on Invader and Fury, and the tests').
#[cfg(any(test, feature = "fake"))]
pub fn fixed_from_dynamic(dynamic: &[u8], ext: bool) -> Vec<u8> {
    const DATA: usize = layout::TABLE + 4 * DESC_BYTES;
    let lds = usize::from(u16::from_le_bytes([dynamic[0x2C], dynamic[0x2D]]));
    let f = if ext { fixed_layout::EXT } else { fixed_layout::LEGACY };
    let bytes = if ext { EXT_MAP_BYTES } else { LEGACY_MAP_BYTES };
    let mut m = alloc::vec![0u8; bytes];
    if ext {
        m[0x18] = 10;
        for count in [EXT_LD_COUNT, EXT_LD_COUNT + 2, EXT_LD_COUNT + 4] {
            m[count..count + 2].copy_from_slice(&(lds as u16).to_le_bytes());
        }
        m[EXT_TARGETS..EXT_TARGETS + EXT_MAX_LDS].fill(NO_LD_BYTE);
        m[EXT_ARRAYS..EXT_SPANS].fill(0xFF);
    } else {
        let total = (LEGACY_SPANS + lds * LD_SPAN_MAP_BYTES) as u32;
        m[0..4].copy_from_slice(&total.to_le_bytes());
        m[LEGACY_LD_COUNT..LEGACY_LD_COUNT + 4].copy_from_slice(&(lds as u32).to_le_bytes());
        m[0xA0] = 10;
        m[LEGACY_TARGETS..LEGACY_TARGETS + LEGACY_TARGET_ENTRIES].fill(NO_LD_BYTE);
        m[LEGACY_ARRAYS..LEGACY_HANDLES].fill(0xFF);
    }
    let handles = DATA;
    m[f.handles..f.handles + FIXED_HANDLES * DEV_HANDLE_BYTES]
        .copy_from_slice(&dynamic[handles..handles + FIXED_HANDLES * DEV_HANDLE_BYTES]);
    for target in 0..256 {
        let at = layout::TARGETS + 2 * target;
        let ld = u16::from_le_bytes([dynamic[at], dynamic[at + 1]]);
        if ld != NO_LD && target < f.target_entries {
            m[f.targets + target] = ld as u8;
        }
    }
    if lds > 0 {
        m[f.array..f.array + ARRAY_BYTES].copy_from_slice(&dynamic[layout::ARRAY..layout::ARRAY + ARRAY_BYTES]);
        m[f.ld..f.ld + LD_SPAN_MAP_BYTES].copy_from_slice(&dynamic[layout::LD..layout::LD + LD_SPAN_MAP_BYTES]);
    }
    m
}

/// [`build_dynamic`]'s RAID-0 LD in the legacy 64-LD format.
#[cfg(any(test, feature = "fake"))]
pub fn build_legacy(target: u8, pds: &[u16], strip_shift: u8, rows: u64, seq: u16, caps: u32) -> Vec<u8> {
    fixed_from_dynamic(&build_dynamic(target, pds, strip_shift, rows, seq, caps), false)
}

/// [`build_dynamic`]'s RAID-0 LD in the extended 256-LD format.
#[cfg(any(test, feature = "fake"))]
pub fn build_ext(target: u8, pds: &[u16], strip_shift: u8, rows: u64, seq: u16, caps: u32) -> Vec<u8> {
    fixed_from_dynamic(&build_dynamic(target, pds, strip_shift, rows, seq, caps), true)
}

/// Offsets into a legacy or extended map, for tests that damage one field.
#[cfg(any(test, feature = "fake"))]
pub mod fixed_layout {
    /// One fixed format's offsets.
    #[derive(Clone, Copy, Debug)]
    pub struct Fixed {
        /// The target → LD table (one byte per target).
        pub targets: usize,
        /// Its entries.
        pub target_entries: usize,
        /// Array 0.
        pub array: usize,
        /// The device-handle table.
        pub handles: usize,
        /// LD 0's span map.
        pub ld: usize,
    }
    /// The legacy 64-LD map.
    pub const LEGACY: Fixed = Fixed {
        targets: super::LEGACY_TARGETS,
        target_entries: super::LEGACY_TARGET_ENTRIES,
        array: super::LEGACY_ARRAYS,
        handles: super::LEGACY_HANDLES,
        ld: super::LEGACY_SPANS,
    };
    /// The extended 256-LD map.
    pub const EXT: Fixed = Fixed {
        targets: super::EXT_TARGETS,
        target_entries: super::EXT_MAX_LDS,
        array: super::EXT_ARRAYS,
        handles: super::EXT_HANDLES,
        ld: super::EXT_SPANS,
    };
}

/// Offsets into a map [`build_dynamic`] made, for tests that damage one field.
#[cfg(any(test, feature = "fake"))]
pub mod layout {
    /// The LD span map of LD 0.
    pub const LD: usize = 0x98 + 256 * 8 + 512 + 64;
    /// The array of LD 0.
    pub const ARRAY: usize = 0x98 + 256 * 8 + 512;
    /// The device-handle table.
    pub const HANDLES: usize = 0x98;
    /// The target → LD table.
    pub const TARGETS: usize = 0x98 + 256 * 8;
    /// The descriptor table.
    pub const TABLE: usize = 0x58;
}

/// The capability word of a FastPath-capable RAID-0 LD (read and write).
#[cfg(any(test, feature = "fake"))]
pub const CAPS_FP_READ_WRITE: u32 = CAP_FP_CAPABLE | CAP_FP_READ | CAP_FP_WRITE;

/// The capability bit that asks for FastPath writes to bypass the controller's cache.
#[cfg(any(test, feature = "fake"))]
pub const CAP_CACHE_BYPASS: u32 = CAP_FP_CACHE_BYPASS;

/// The capability word of an LD with FastPath reads only (a RAID-1 LD as the emulation gives it).
#[cfg(any(test, feature = "fake"))]
pub const CAPS_FP_READ: u32 = CAP_FP_CAPABLE | CAP_FP_READ;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn good() -> Vec<u8> {
        build_dynamic(0, &[4, 7], 7, 1024, 0x0101, CAPS_FP_READ_WRITE)
    }

    #[test]
    fn a_two_arm_raid0_map_routes_inside_one_strip_only() {
        let map = parse_dynamic(&good()).unwrap();
        let ld = map.fastpath(0).expect("LD 0 is FastPath-ready").clone();
        assert_eq!(ld.arm_handles, [0x104, 0x107]);
        assert_eq!(
            (ld.strip_shift, ld.arm_blocks, ld.blocks, ld.seq),
            (7, 1024 << 7, 2 * (1024 << 7), 0x0101)
        );
        // Strip 0 on arm 0, strip 1 on arm 1 at the same disk block, strip 2 on arm 0's row 1.
        let r = ld.route(5, 8, false).unwrap();
        assert_eq!((r.handle, r.pd_lba, r.seq, r.span_arm), (0x104, 5, 0x0101, 0));
        let r = ld.route(128 + 3, 8, true).unwrap();
        assert_eq!((r.handle, r.pd_lba, r.span_arm), (0x107, 3, 1));
        let r = ld.route(256 + 120, 8, false).unwrap();
        assert_eq!((r.handle, r.pd_lba), (0x104, 128 + 120));
        // Across a strip boundary, empty, or past the end: the LD path.
        assert_eq!(ld.route(124, 8, false), None);
        assert_eq!(ld.route(0, 0, false), None);
        assert_eq!(ld.route(ld.blocks - 4, 8, false), None);
        assert!(ld.route(ld.blocks - 8, 8, false).is_some());
        assert_eq!(map.fastpath(1), None);
        let mut odd = ld.clone();
        odd.arm_handles.clear();
        assert_eq!(odd.route(0, 8, false), None, "no arms: no route, no division by zero");
        let mut odd = ld;
        odd.strip_shift = 64;
        assert_eq!(odd.route(0, 8, false), None, "a shift the parser refuses: no route");
    }

    #[test]
    fn the_map_gives_a_handle_to_each_pd_it_lists_and_none_to_others() {
        let mut m = good();
        // A JBOD disk (PD 3) beside the LD's members: its entry in the device-handle table.
        let jbod = layout::HANDLES + 3 * 8;
        m[jbod..jbod + 2].copy_from_slice(&0x0103u16.to_le_bytes());
        let map = parse_dynamic(&m).unwrap();
        assert_eq!(map.pd_handle(3), Some(0x103));
        assert_eq!((map.pd_handle(4), map.pd_handle(7)), (Some(0x104), Some(0x107)));
        assert_eq!(map.pd_handle(5), None, "0xFFFF: no handle");
        assert_eq!(map.pd_handles.len(), 256);
        // A map that lists fewer PDs than a device id gives that id no handle.
        let short = RaidMap {
            lds: Vec::new(),
            seq_nums: Vec::new(),
            pd_handles: vec![0x100],
        };
        assert_eq!((short.pd_handle(0), short.pd_handle(1)), (Some(0x100), None));
    }

    #[test]
    fn capability_bits_choose_the_directions() {
        let m = build_dynamic(0, &[0, 1], 7, 16, 1, CAP_FP_CAPABLE | CAP_FP_READ);
        let ld = parse_dynamic(&m).unwrap().fastpath(0).unwrap().clone();
        assert!(ld.route(0, 8, false).is_some());
        assert_eq!(ld.route(0, 8, true), None);
    }

    #[test]
    fn the_cache_bypass_capability_is_read_for_raid0_and_raid1() {
        let m = build_dynamic(0, &[0, 1], 7, 16, 1, CAPS_FP_READ_WRITE | CAP_FP_CACHE_BYPASS);
        assert!(parse_dynamic(&m).unwrap().fastpath(0).unwrap().cache_bypass);
        let m = build_dynamic_raid1(0, [0, 1], 7, 16, 1, CAPS_FP_READ_WRITE | CAP_FP_CACHE_BYPASS);
        assert!(parse_dynamic(&m).unwrap().fastpath(0).unwrap().cache_bypass);
        let m = build_dynamic(0, &[0, 1], 7, 16, 1, CAPS_FP_READ_WRITE);
        assert!(!parse_dynamic(&m).unwrap().fastpath(0).unwrap().cache_bypass);
    }

    fn ld_refused(m: &[u8]) -> Error {
        let map = parse_dynamic(m).unwrap();
        assert_eq!(map.fastpath(0), None);
        map.lds[0].1.clone().unwrap_err()
    }

    #[test]
    fn out_of_range_ld_fields_leave_the_ld_to_the_firmware_path() {
        use layout::*;
        let cases: [(&str, usize, &[u8]); 12] = [
            ("RAID level", LD + 0x11, &[5]),
            ("span depth", LD + 0x10, &[2]),
            ("strip shift too large", LD + 0x12, &[16]),
            ("strip shift too small", LD + 0x12, &[2]),
            ("no arms", LD + 0x13, &[0]),
            ("row data size", LD + 0x14, &[1]),
            ("mod factor", LD + 0x1C, &[3]),
            ("data arm beyond the arms", LD + 0x81, &[2]),
            ("data arm twice", LD + 0x81, &[0]),
            ("array reference", LD + 0xA0 + 0x18, &[1, 0]),
            ("PD beyond the handles", ARRAY, &[0x00, 0x02]),
            ("not FastPath-capable", LD, &[0, 0, 0, 0]),
        ];
        for (what, off, bytes) in cases {
            let mut m = good();
            m[off..off + bytes.len()].copy_from_slice(bytes);
            let e = ld_refused(&m);
            assert!(matches!(e, Error::RaidMap { .. }), "{what}: {e:?}");
        }
        // An arm whose PD has no handle, two arms with one handle, a target mismatch.
        let mut m = good();
        m[HANDLES + 7 * 8..HANDLES + 7 * 8 + 2].copy_from_slice(&0xFFFFu16.to_le_bytes());
        ld_refused(&m);
        let mut m = good();
        m[HANDLES + 7 * 8..HANDLES + 7 * 8 + 2].copy_from_slice(&0x104u16.to_le_bytes());
        ld_refused(&m);
        let mut m = good();
        m[LD + 0x18] = 9;
        ld_refused(&m);
        // Rows whose blocks overflow, an LD larger than its arms.
        let mut m = good();
        m[LD + 0xA0..LD + 0xA8].copy_from_slice(&u64::MAX.to_le_bytes());
        ld_refused(&m);
        let mut m = good();
        m[LD + 0x08..LD + 0x10].copy_from_slice(&(u64::from(u32::MAX)).to_le_bytes());
        ld_refused(&m);
    }

    fn mirror() -> Vec<u8> {
        build_dynamic_raid1(0, [4, 7], 7, 1024, 0x0101, CAPS_FP_READ)
    }

    #[test]
    fn a_raid1_map_routes_reads_to_either_arm_and_writes_only_with_the_write_capability() {
        let map = parse_dynamic(&mirror()).unwrap();
        let ld = map.fastpath(0).expect("the mirror is FastPath-ready").clone();
        assert!(ld.mirror);
        assert_eq!(
            (ld.arm_handles.as_slice(), ld.arm_pds.as_slice()),
            (&[0x104, 0x107][..], &[4, 7][..])
        );
        assert_eq!(
            (ld.blocks, ld.arm_blocks, ld.read, ld.write),
            (1024 << 7, 1024 << 7, true, false)
        );
        // Each LD block is the same block of both disks; strips do not go round the arms.
        let r = ld.route(128 + 3, 8, false).unwrap();
        assert_eq!((r.handle, r.pd_lba, r.span_arm, r.seq), (0x104, 131, 0, 0x0101));
        let other = ld.mirror_route(r, 1).unwrap();
        assert_eq!(
            (other.handle, other.pd_lba, other.span_arm, other.seq),
            (0x107, 131, 1, 0x0101)
        );
        assert_eq!(ld.mirror_route(r, 2), None);
        assert_eq!(
            ld.route(128 + 3, 8, true),
            None,
            "without the FastPath-write capability RAID-1 writes take the LD path"
        );
        assert_eq!(ld.route(124, 8, false), None, "across a strip: the LD path");
        assert_eq!(ld.route(ld.blocks - 4, 8, false), None, "past the end");
        // With it, a write inside one strip routes to the data arm (the peer goes to the mirror).
        let m = build_dynamic_raid1(0, [4, 7], 7, 16, 1, CAPS_FP_READ_WRITE);
        let rw = parse_dynamic(&m).unwrap().fastpath(0).unwrap().clone();
        assert!(rw.write);
        let w = rw.route(128 + 3, 8, true).unwrap();
        assert_eq!((w.handle, w.pd_lba, w.span_arm), (0x104, 131, 0));
        let peer = rw.mirror_route(w, 1).unwrap();
        assert_eq!((peer.handle, peer.pd_lba, peer.span_arm), (0x107, 131, 1));
        assert_eq!(rw.route(124, 8, true), None, "a write across a strip: the LD path");
        // The data arm is the map's: data arm 1 puts PD 7 first.
        let mut m = mirror();
        m[layout::LD + 0x80] = 1;
        let swapped = parse_dynamic(&m).unwrap().fastpath(0).unwrap().clone();
        assert_eq!(
            (swapped.arm_handles, swapped.phys_arms),
            (vec![0x107, 0x104], vec![1, 0])
        );
        // A RAID-0 LD has no mirror route.
        let raid0 = parse_dynamic(&good()).unwrap().fastpath(0).unwrap().clone();
        assert_eq!(raid0.mirror_route(raid0.route(0, 8, false).unwrap(), 1), None);
    }

    #[test]
    fn mirror_reads_balance_over_both_arms_by_outstanding_reads_then_distance() {
        let ld = parse_dynamic(&mirror()).unwrap().fastpath(0).unwrap().clone();
        let load = MirrorLoad::default();
        // Eight reads none of which completes: the less loaded arm, and between equally loaded
        // ones the arm whose last read ended nearest (read 2 follows read 1 on arm 1).
        let arms: Vec<usize> = (0..8).map(|i| load.pick(&ld, i * 4096, 8).unwrap().0).collect();
        assert_eq!(arms, [0, 1, 1, 0, 0, 1, 1, 0]);
        assert_eq!((load.pending(4), load.pending(7)), (4, 4));
        // Arm 1 last read up to 6 * 4096 + 8: it takes the read there; the next read at the
        // same place goes to arm 0, now the less loaded, however near arm 1 is.
        assert_eq!(load.pick(&ld, 6 * 4096 + 8, 8), Some((1, 7)));
        assert_eq!(load.pick(&ld, 6 * 4096 + 16, 8), Some((0, 4)));
        // Completions lower the count: the less loaded arm takes the next reads.
        for _ in 0..3 {
            load.done(4);
        }
        assert_eq!((load.pending(4), load.pending(7)), (2, 5));
        assert_eq!(load.pick(&ld, 100 * 4096, 8), Some((0, 4)));
        // A sequential reader on idle arms stays on one disk.
        let idle = MirrorLoad::default();
        let mut seq = Vec::new();
        for i in 0..6 {
            let (arm, pd) = idle.pick(&ld, 1000 + i * 8, 8).unwrap();
            seq.push(arm);
            idle.done(pd);
        }
        assert_eq!(seq, [0; 6]);
        // Done for a PD with nothing outstanding, or none the table keeps: no change, no panic.
        idle.done(4);
        idle.done(u16::MAX);
        assert_eq!(idle.pending(4), 0);
        // Not a mirror, or PD ids outside the table: no choice (the data arm, unbalanced).
        let raid0 = parse_dynamic(&good()).unwrap().fastpath(0).unwrap().clone();
        assert_eq!(load.pick(&raid0, 0, 8), None);
        let mut odd = ld;
        odd.arm_pds = vec![4, 600];
        assert_eq!(load.pick(&odd, 0, 8), None);
    }

    #[test]
    fn a_raid1_ld_with_wrong_entries_is_left_to_the_firmware_path() {
        use layout::*;
        let cases: [(&str, usize, &[u8]); 9] = [
            ("not optimal (degraded)", LD + 0x1A, &[2]),
            ("three arms", LD + 0x13, &[3]),
            ("two data arms", LD + 0x14, &[2]),
            ("mod factor", LD + 0x1C, &[2]),
            ("data arm beyond the two", LD + 0x80, &[2]),
            ("span row data size", LD + 0xA0 + 0x1B, &[2]),
            ("larger than one arm", LD + 0x08, &(1025u64 << 7).to_le_bytes()),
            ("no FastPath reads", LD, &(CAP_FP_CAPABLE | CAP_FP_WRITE).to_le_bytes()),
            ("span depth", LD + 0x10, &[2]),
        ];
        for (what, off, bytes) in cases {
            let mut m = mirror();
            m[off..off + bytes.len()].copy_from_slice(bytes);
            let e = ld_refused(&m);
            assert!(matches!(e, Error::RaidMap { .. }), "{what}: {e:?}");
        }
        // The mirror's PD without a handle, or both arms on one disk.
        let mut m = mirror();
        m[HANDLES + 7 * 8..HANDLES + 7 * 8 + 2].copy_from_slice(&0xFFFFu16.to_le_bytes());
        ld_refused(&m);
        let mut m = mirror();
        m[ARRAY + 2..ARRAY + 4].copy_from_slice(&4u16.to_le_bytes());
        ld_refused(&m);
    }

    /// The legacy and extended forms of a dynamic map, with their format and offsets.
    fn fixed_forms(dynamic: &[u8]) -> [(MapFormat, fixed_layout::Fixed, Vec<u8>); 2] {
        [
            (
                MapFormat::Legacy,
                fixed_layout::LEGACY,
                fixed_from_dynamic(dynamic, false),
            ),
            (MapFormat::Ext, fixed_layout::EXT, fixed_from_dynamic(dynamic, true)),
        ]
    }

    #[test]
    fn the_fixed_formats_parse_to_the_dynamic_maps_ld_handles_and_sequence_numbers() {
        assert_eq!((LEGACY_MAP_BYTES, EXT_MAP_BYTES), (172_200, 665_896));
        assert_eq!(
            build_legacy(0, &[4, 7], 7, 1024, 0x0101, CAPS_FP_READ_WRITE).len(),
            172_200
        );
        assert_eq!(
            build_ext(0, &[4, 7], 7, 1024, 0x0101, CAPS_FP_READ_WRITE).len(),
            665_896
        );
        for dynamic in [
            good(),
            mirror(),
            build_dynamic(9, &[0, 1, 2], 4, 100, 0x0202, CAPS_FP_READ),
        ] {
            let want = parse_dynamic(&dynamic).unwrap();
            assert!(!want.lds.is_empty() && want.lds[0].1.is_ok(), "{want:?}");
            for (format, _, m) in fixed_forms(&dynamic) {
                assert_eq!(m.len(), format.bytes());
                let got = format.parse(&m).unwrap();
                assert_eq!(got, want, "{format:?}");
            }
        }
        // A legacy map routes as the dynamic one: LD 0 at target 0, strip 1 on arm 1.
        let ld = parse_legacy(&build_legacy(0, &[4, 7], 7, 1024, 0x0101, CAPS_FP_READ_WRITE))
            .unwrap()
            .fastpath(0)
            .unwrap()
            .clone();
        let r = ld.route(128 + 3, 8, true).unwrap();
        assert_eq!((r.handle, r.pd_lba, r.span_arm, r.seq), (0x107, 3, 1, 0x0101));
        // The dynamic format names its size; a Dynamic format parses it.
        assert_eq!(
            MapFormat::Dynamic { bytes: 65536 }.parse(&good()).unwrap(),
            parse_dynamic(&good()).unwrap()
        );
    }

    #[test]
    fn empty_fixed_maps_have_no_lds_and_a_legacy_map_with_one_ld_is_shorter() {
        for (format, _, m) in fixed_forms(&build_dynamic_empty()) {
            let map = format.parse(&m).unwrap();
            assert!(map.lds.is_empty() && map.seq_nums.is_empty(), "{format:?}: {map:?}");
            assert_eq!(map.pd_handles.len(), 256);
        }
        let m = build_legacy(0, &[0, 1], 7, 16, 1, CAPS_FP_READ_WRITE);
        assert_eq!(u32::from_le_bytes(m[0..4].try_into().unwrap()), 0x28A8 + 0x9E0);
        // The buffer may be longer than the map (Linux's is always 172,200 bytes).
        assert!(parse_legacy(&m[..0x28A8 + 0x9E0]).is_ok());
    }

    #[test]
    fn out_of_range_ld_fields_of_fixed_maps_leave_the_ld_to_the_firmware_path() {
        let cases: [(&str, usize, &[u8]); 10] = [
            ("RAID level", 0x11, &[5]),
            ("span depth", 0x10, &[2]),
            ("strip shift too large", 0x12, &[16]),
            ("no arms", 0x13, &[0]),
            ("row data size", 0x14, &[1]),
            ("mod factor", 0x1C, &[3]),
            ("data arm twice", 0x81, &[0]),
            ("array reference beyond the format's arrays", 0xA0 + 0x18, &[0, 1]),
            ("target mismatch", 0x18, &[9]),
            ("not FastPath-capable", 0, &[0, 0, 0, 0]),
        ];
        for (what, off, bytes) in cases {
            for (format, f, mut m) in fixed_forms(&good()) {
                m[f.ld + off..f.ld + off + bytes.len()].copy_from_slice(bytes);
                let map = format.parse(&m).unwrap();
                assert_eq!(map.fastpath(0), None, "{format:?} {what}");
                assert!(matches!(map.lds[0].1, Err(Error::RaidMap { .. })), "{format:?} {what}");
                assert_eq!(map.seq_nums, [(0, 0x0101)], "{format:?} {what}: still synced");
            }
        }
        for (format, f, m) in fixed_forms(&good()) {
            // An arm's PD without a handle, or beyond the handle table.
            let mut bad = m.clone();
            bad[f.handles + 7 * 8..f.handles + 7 * 8 + 2].copy_from_slice(&0xFFFFu16.to_le_bytes());
            assert_eq!(format.parse(&bad).unwrap().fastpath(0), None, "{format:?}");
            let mut bad = m.clone();
            bad[f.array..f.array + 2].copy_from_slice(&256u16.to_le_bytes());
            assert_eq!(format.parse(&bad).unwrap().fastpath(0), None, "{format:?}");
            // A target naming an LD beyond the LD count: that target on the LD path, no sync entry.
            let mut bad = m.clone();
            bad[f.targets + 5] = 1;
            let map = format.parse(&bad).unwrap();
            assert!(map.fastpath(0).is_some());
            assert!(
                matches!(map.lds[1], (5, Err(Error::RaidMap { .. }))),
                "{format:?}: {map:?}"
            );
            assert_eq!(map.seq_nums, [(0, 0x0101)]);
        }
        // Legacy entries past the 128 of its table are not read: the byte there is an array's.
        let mut m = build_legacy(0, &[4, 7], 7, 1024, 0x0101, CAPS_FP_READ_WRITE);
        m[LEGACY_TARGETS + LEGACY_TARGET_ENTRIES] = 0;
        assert_eq!(parse_legacy(&m).unwrap().lds.len(), 1);
    }

    #[test]
    fn fixed_maps_with_a_broken_structure_are_refused_whole() {
        let legacy = build_legacy(0, &[4, 7], 7, 1024, 0x0101, CAPS_FP_READ_WRITE);
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut m = legacy.clone();
        m[0..4].copy_from_slice(&0x28A8u32.to_le_bytes());
        cases.push(("legacy size without the LD's span map", m));
        let mut m = legacy.clone();
        m[0..4].copy_from_slice(&0u32.to_le_bytes());
        cases.push(("legacy size zero", m));
        let mut m = legacy.clone();
        m[LEGACY_LD_COUNT..LEGACY_LD_COUNT + 4].copy_from_slice(&65u32.to_le_bytes());
        m[0..4].copy_from_slice(&((0x28A8 + 65 * 0x9E0) as u32).to_le_bytes());
        cases.push(("legacy LD count above 64", m));
        cases.push(("legacy map cut short", legacy[..0x28A8 + 0x9E0 - 1].to_vec()));
        cases.push(("legacy header cut short", legacy[..0x10].to_vec()));
        for (what, m) in cases {
            assert!(matches!(parse_legacy(&m), Err(Error::RaidMap { .. })), "{what}");
        }
        let ext = build_ext(0, &[4, 7], 7, 1024, 0x0101, CAPS_FP_READ_WRITE);
        let mut m = ext.clone();
        m[EXT_LD_COUNT..EXT_LD_COUNT + 2].copy_from_slice(&257u16.to_le_bytes());
        assert!(
            matches!(parse_ext(&m), Err(Error::RaidMap { .. })),
            "ext LD count above 256"
        );
        for (what, at, n, refused) in [
            ("array count above 256", EXT_LD_COUNT + 2, 257u16, true),
            ("span count above 2048", EXT_LD_COUNT + 4, 2049, true),
            ("2048 spans fit the format", EXT_LD_COUNT + 4, 2048, false),
        ] {
            let mut m = ext.clone();
            m[at..at + 2].copy_from_slice(&n.to_le_bytes());
            assert_eq!(matches!(parse_ext(&m), Err(Error::RaidMap { .. })), refused, "{what}");
        }
        assert!(
            matches!(parse_ext(&ext[..EXT_MAP_BYTES - 1]), Err(Error::RaidMap { .. })),
            "ext cut short"
        );
        // A legacy map is no extended map, nor the other way round.
        assert!(parse_ext(&legacy).is_err());
        assert!(parse_legacy(&ext).is_err());
    }

    #[test]
    fn a_map_with_a_broken_structure_is_refused_whole() {
        use layout::*;
        let total = good().len();
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut m = good();
        m[0..4].copy_from_slice(&((total + 1) as u32).to_le_bytes());
        cases.push(("size beyond the buffer", m));
        let mut m = good();
        m[4..8].copy_from_slice(&(total as u32).to_le_bytes());
        cases.push(("table outside", m));
        let mut m = good();
        m[0x0C..0x10].copy_from_slice(&17u32.to_le_bytes());
        cases.push(("table count", m));
        let mut m = good();
        m[TABLE + 16 + 4..TABLE + 16 + 8].copy_from_slice(&(total as u32).to_le_bytes());
        cases.push(("target table outside", m));
        let mut m = good();
        m[TABLE + 3 * 16 + 12..TABLE + 3 * 16 + 16].copy_from_slice(&600u32.to_le_bytes());
        cases.push(("too many span maps", m));
        let mut m = good();
        m[TABLE + 2 * 16..TABLE + 2 * 16 + 4].copy_from_slice(&0u32.to_le_bytes());
        cases.push(("a type twice", m));
        let mut m = good();
        m[TABLE + 3 * 16..TABLE + 3 * 16 + 4].copy_from_slice(&9u32.to_le_bytes());
        cases.push(("spans missing", m));
        let mut m = good();
        m[0x2C..0x2E].copy_from_slice(&2u16.to_le_bytes());
        cases.push(("LD count beyond the span maps", m));
        for (what, m) in cases {
            assert!(
                matches!(parse_dynamic(&m), Err(Error::RaidMap { .. })),
                "{what}: {:?}",
                parse_dynamic(&m)
            );
        }
        assert!(parse_dynamic(&[0u8; 8]).is_err(), "a map shorter than its header");
        let empty = parse_dynamic(&build_dynamic_empty()).unwrap();
        assert!(empty.lds.is_empty(), "{empty:?}");
    }
}
