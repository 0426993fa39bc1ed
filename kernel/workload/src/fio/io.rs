//! What each I/O is: `rw` and its mix, block sizes (`bs`, `bsrange`, `bssplit`), the amount
//! and place (`size`, `offset`, `io_size`, `number_ios`, `loops`), the queue depth and engine,
//! and the flushes (`fsync`, `end_fsync`).

use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;

use super::values::{self, SIZE_FORM, SizeOrPercent};
use super::{Builder, Setting, unsupported};
use crate::error::WorkloadError;
use crate::job::{BlockSizeMix, MAX_BS, MAX_IODEPTH, RwMode, SizeChoice};

/// fio engines that do one I/O at a time: fio caps their queue depth at 1.
pub const SYNC_ENGINES: [&str; 6] = ["sync", "psync", "vsync", "pvsync", "pvsync2", "mmap"];
/// fio engines whose `iodepth` baremq honours.
pub const ASYNC_ENGINES: [&str; 10] = [
    "libaio",
    "io_uring",
    "io_uring_cmd",
    "posixaio",
    "windowsaio",
    "solarisaio",
    "spdk",
    "spdk_bdev",
    "xnvme",
    "null",
];

/// fio's default block size.
pub(super) const DEFAULT_FIO_BS: u64 = 4096;

/// A block size from `parsed`, or the value error of `s`.
fn check_bs(parsed: Option<u64>, s: &Setting<'_>) -> Result<u64, WorkloadError> {
    parsed
        .filter(|bs| (1..=MAX_BS).contains(bs))
        .ok_or_else(|| s.bad(&format!("{SIZE_FORM}, from 1 to {MAX_BS}")))
}

/// One direction of fio's `bssplit`: `SIZE/PERCENT` entries joined by `:`. As fio does, a
/// missing or zero percentage shares what the given ones leave (integer division), a percentage
/// over 100 counts as 100, and the entries end up sorted by ascending share (fio's lookup order).
fn parse_bssplit(text: &str, s: &Setting<'_>) -> Result<Vec<(u64, u32)>, WorkloadError> {
    const FORM: &str = "SIZE/PERCENT entries joined by ':' (e.g. 4k/10:64k/50:32k/40), per direction read,write";
    let mut entries: Vec<(u64, Option<u32>)> = Vec::new();
    for entry in text.split(':').map(str::trim) {
        if entry.is_empty() {
            // fio stops at an empty entry.
            break;
        }
        let (size, percent) = match entry.split_once('/') {
            Some((size, percent)) => {
                let percent: u32 = percent.trim().parse().map_err(|_| s.bad(FORM))?;
                (size, (percent != 0).then_some(percent.min(100)))
            }
            None => (entry, None),
        };
        entries.push((check_bs(values::size(size.trim()), s)?, percent));
    }
    if entries.is_empty() {
        return Err(s.bad(FORM));
    }
    let given: u32 = entries.iter().filter_map(|e| e.1).sum();
    let missing = entries.iter().filter(|e| e.1.is_none()).count() as u32;
    if given > 100 {
        return Err(s.bad("percentages that add up to at most 100"));
    }
    let share = (100 - given).checked_div(missing).unwrap_or(0);
    let mut split: Vec<(u64, u32)> = entries.into_iter().map(|(bs, p)| (bs, p.unwrap_or(share))).collect();
    split.sort_by_key(|e| e.1);
    Ok(split)
}

impl Builder {
    /// The options of what each I/O is; `Ok(false)`: not one of them.
    pub(super) fn apply_io(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let job = s.job;
        let key = s.key;
        match key {
            "ioengine" => {
                let engine = s.need()?.to_string();
                if !SYNC_ENGINES.contains(&engine.as_str()) && !ASYNC_ENGINES.contains(&engine.as_str()) {
                    return Err(unsupported(
                        job,
                        &format!("ioengine={engine}"),
                        "baremq runs block I/O on its own drivers; it maps fio's block engines (libaio, io_uring, \
                         posixaio, spdk, xnvme, null, sync, psync, pvsync, pvsync2, vsync, mmap)",
                    ));
                }
                self.ioengine = Some(engine);
            }
            "direct" => self.direct = s.flag()?,
            "buffered" => self.direct = !s.flag()?,
            "rw" | "readwrite" => {
                let v = s.need()?;
                // fio's offset modifier: `rw=NAME:N`.
                let (v, modifier) = match v.split_once(':') {
                    Some((name, modifier)) => (name, Some(modifier.trim())),
                    None => (v, None),
                };
                // fio spells ReadWrite `rw` or `readwrite`; the rest as baremq's native rw=.
                let name = if v == "readwrite" { "rw" } else { v };
                self.spec.rw = RwMode::from_name(name).ok_or_else(|| {
                    s.bad("read, write, randread, randwrite, randrw, rw, readwrite, trim, randtrim, trimwrite or randtrimwrite")
                })?;
                // fio reads the modifier by the rw it follows: a count for random forms, a signed
                // size for sequential ones; a later rw= without one clears it.
                self.offset_modifier = None;
                self.spec.random_run = 1;
                self.spec.offset_add_blocks = 0;
                if let Some(modifier) = modifier {
                    let bad = || {
                        s.bad("rw=NAME:N, N a count of I/Os for random forms (randread:8) or a size, maybe negative, for sequential ones (read:-8k, write:4k)")
                    };
                    self.offset_modifier = Some(if self.spec.rw.is_random() {
                        let count = values::integer(modifier)
                            .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
                            .ok_or_else(bad)?;
                        OffsetModifier::RandomRun(count as u32)
                    } else {
                        let (negative, size) = match modifier.strip_prefix('-') {
                            Some(rest) => (true, rest),
                            None => (false, modifier.strip_prefix('+').unwrap_or(modifier)),
                        };
                        let bytes = values::size(size).filter(|b| *b <= i64::MAX as u64).ok_or_else(bad)? as i64;
                        OffsetModifier::Add(if negative { -bytes } else { bytes })
                    });
                }
            }
            "rwmixread" | "rwmixwrite" => {
                let percent = values::integer(s.need()?)
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| s.bad("a percentage from 0 to 100"))?;
                // fio: when both are given, the later one wins.
                self.spec.rwmixread = if key == "rwmixread" { percent } else { 100 - percent } as u8;
            }
            "bs" | "blocksize" => {
                // fio: one size for every direction, or read,write[,trim] with an empty part
                // meaning fio's default and a missing write part the read one. No baremq job
                // trims, so a trim size is checked and has nothing to apply to.
                let mut parts = s.need()?.split(',').map(str::trim);
                let mut direction = |fallback: Option<u64>| match parts.next() {
                    None => fallback.map(Ok),
                    Some("") => Some(Ok(DEFAULT_FIO_BS)),
                    Some(part) => Some(check_bs(values::size(part), s)),
                };
                let read = direction(Some(DEFAULT_FIO_BS)).unwrap_or(Ok(DEFAULT_FIO_BS))?;
                let write = direction(Some(read)).unwrap_or(Ok(read))?;
                if let Some(trim) = direction(None) {
                    trim?;
                }
                self.bs_sizes = [read, write];
            }
            "bsrange" | "blocksize_range" => {
                // fio: MIN-MAX for every direction, or a read,write list of them.
                let v = s.need()?;
                let range = |part: &str| -> Result<(u64, u64), WorkloadError> {
                    let (low, high) = part.split_once('-').ok_or_else(|| s.bad("MIN-MAX, e.g. 4k-64k"))?;
                    let low = check_bs(values::size(low.trim()), s)?;
                    let high = check_bs(values::size(high.trim()), s)?;
                    // fio swaps reversed ends.
                    Ok((low.min(high), low.max(high)))
                };
                let mut parts = v.split(',').map(str::trim);
                let read = range(parts.next().unwrap_or(""))?;
                let write = match parts.next() {
                    None | Some("") => read,
                    Some(part) => range(part)?,
                };
                if let Some(trim) = parts.next().filter(|p| !p.is_empty()) {
                    range(trim)?;
                }
                self.bs_range = Some([read, write]);
            }
            "bssplit" => {
                // fio: SIZE/PERCENT:SIZE/PERCENT..., or read,write[,trim] lists of them.
                let v = s.need()?;
                let mut parts = v.split(',').map(str::trim);
                let read = parse_bssplit(parts.next().unwrap_or(""), s)?;
                let write = match parts.next() {
                    None => read.clone(),
                    Some(part) => parse_bssplit(part, s)?,
                };
                if let Some(trim) = parts.next() {
                    parse_bssplit(trim, s)?;
                }
                self.bs_split = Some([read, write]);
            }
            "blockalign" | "ba" => {
                // fio's read,write[,trim] form: baremq takes one alignment for every direction.
                let v = s.need()?;
                let mut sizes = v.split(',').map(str::trim).filter(|p| !p.is_empty()).map(values::size);
                let first = sizes.next().flatten().ok_or_else(|| s.bad(SIZE_FORM))?;
                if sizes.any(|other| other != Some(first)) {
                    return Err(unsupported(
                        s.job,
                        "blockalign",
                        "one alignment for every direction (read,write lists of different sizes are not implemented)",
                    ));
                }
                self.blockalign = Some(first);
            }
            "dedupe_percentage" | "buffer_compress_percentage" | "dedupe_working_set_percentage" => {
                let percent = values::integer(s.need()?)
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| s.bad("a percentage from 0 to 100"))? as u8;
                match key {
                    "dedupe_percentage" => self.dedupe_percent = percent,
                    "buffer_compress_percentage" => self.compress_percent = percent,
                    _ => self.dedupe_working_set_percent = percent,
                }
            }
            "dedupe_mode" => {
                self.dedupe_working_set = match s.need()? {
                    "repeat" => false,
                    "working_set" => true,
                    _ => return Err(s.bad("repeat or working_set")),
                }
            }
            "dedupe_global" => self.dedupe_global = s.flag()?,
            "buffer_compress_chunk" => {
                self.compress_chunk = u32::try_from(s.size()?)
                    .ok()
                    .filter(|c| *c >= 8)
                    .ok_or_else(|| s.bad("a size of at least 8 bytes"))?
            }
            "buffer_pattern" => {
                self.buffer_pattern = Some(
                    super::pattern::parse(s.need()?)
                        .map_err(|why| s.bad(&format!("{} ({why})", super::pattern::PATTERN_FORM)))?,
                )
            }
            "iodepth" => {
                self.spec.iodepth = values::integer(s.need()?)
                    .filter(|d| (1..=MAX_IODEPTH).contains(d))
                    .ok_or_else(|| s.bad(&format!("an integer from 1 to {MAX_IODEPTH}")))?
                    as u32;
                self.iodepth_given = true;
            }
            "size" | "filesize" => {
                let v = values::size_or_percent(s.need()?).ok_or_else(|| s.bad("a size or N% of the device"))?;
                if v == SizeOrPercent::Bytes(0) {
                    return Err(s.bad("a size above zero"));
                }
                self.size = Some(v);
                self.size_per_file = key == "filesize";
            }
            "fill_device" | "fill_fs" => self.fill_device = s.flag()?,
            "offset" => self.offset = Some(values::size_or_percent(s.need()?).ok_or_else(|| s.bad("a size or N%"))?),
            "io_size" | "io_limit" => self.io_size = Some(s.size()?).filter(|bytes| *bytes > 0),
            "number_ios" => self.number_ios = Some(values::integer(s.need()?).ok_or_else(|| s.bad("an integer"))?),
            "loops" => {
                self.loops = values::integer(s.need()?)
                    .filter(|l| *l >= 1)
                    .ok_or_else(|| s.bad("an integer of at least 1"))?
            }
            "fsync" | "fdatasync" => {
                // On a raw device both flush the device's volatile cache.
                self.spec.flush_every_writes = values::integer(s.need()?)
                    .filter(|n| *n <= u64::from(u32::MAX))
                    .ok_or_else(|| s.bad("a number of writes between flushes (0: never)"))?
                    as u32;
            }
            "end_fsync" => self.end_fsync = s.flag()?,
            "fsync_on_close" => self.fsync_on_close = s.flag()?,
            "sync" | "write_barrier" => {
                let on = match key {
                    "write_barrier" => values::integer(s.need()?).ok_or_else(|| s.bad("an integer (0: never)"))? != 0,
                    _ => !matches!(s.text(), "0" | "none" | "false" | "no" | "off"),
                };
                if on {
                    return Err(unsupported(
                        job,
                        key,
                        "synchronous (FUA) or barrier writes are not issued by the engine (only 0 / off is accepted)",
                    ));
                }
            }
            // fio's zones: `zonemode` and its sizes (`fio/zones.rs`).
            _ => return self.apply_zones(s),
        }
        Ok(true)
    }
}

impl Builder {
    /// Settles `bs`, `bsrange` and `bssplit` (fio's precedence: bssplit, then bsrange, then bs)
    /// into the spec: one size, or [`BlockSizeMix`] in units of the smallest size.
    pub(super) fn settle_block_sizes(&mut self, job: &str) -> Result<(), WorkloadError> {
        let directions: [Vec<(u64, u64, u32)>; 2] = if let Some(split) = &self.bs_split {
            split
                .clone()
                .map(|d| d.into_iter().map(|(bytes, percent)| (bytes, bytes, percent)).collect())
        } else if let Some(range) = self.bs_range {
            range.map(|(low, high)| alloc::vec![(low, high, 100)])
        } else {
            self.bs_sizes.map(|bs| alloc::vec![(bs, bs, 100)])
        };
        let unit = directions.iter().flatten().map(|c| c.0).min().unwrap_or(DEFAULT_FIO_BS);
        self.spec.bs = unit as u32; // at most MAX_BS (check_bs), which fits in u32
        let fixed = directions.iter().flatten().all(|c| (c.0, c.1) == (unit, unit));
        if fixed {
            self.spec.bs_mix = None;
            return Ok(());
        }
        let option = if self.bs_split.is_some() {
            "bssplit"
        } else if self.bs_range.is_some() {
            "bsrange"
        } else {
            "bs"
        };
        let mut mix = BlockSizeMix {
            directions: [Vec::new(), Vec::new()],
        };
        for (direction, choices) in directions.iter().enumerate() {
            for &(low, high, percent) in choices {
                // Offsets are multiples of the unit, so every size must be one too. A range draws
                // multiples of its minimum (fio's draw aligned to the minimum size): that is the
                // unit's multiples only when the minimum is the unit.
                if !low.is_multiple_of(unit) || (low != high && low != unit) {
                    return Err(unsupported(
                        job,
                        option,
                        format!(
                            "every block size must be a whole multiple of the job's smallest ({unit} bytes) and every range must start at it; {low} does not fit (offsets are aligned to the smallest size)"
                        ),
                    ));
                }
                // Both at most MAX_BS (check_bs), which fits in u32.
                mix.directions[direction].push(SizeChoice {
                    min_units: (low / unit) as u32,
                    max_units: (high / unit) as u32,
                    percent,
                });
            }
        }
        self.spec.bs_mix = Some(mix);
        Ok(())
    }
}

/// fio's offset modifier (`rw=NAME:N`), as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OffsetModifier {
    /// A random form's `:N`: a random offset every N I/Os.
    RandomRun(u32),
    /// A sequential form's `:SIZE`: bytes added to each next offset (negative: backwards).
    Add(i64),
}

impl Builder {
    /// Settles fio's offset modifier on the job once its block size is known. A sequential
    /// step that is not whole blocks (`write:11k` with `bs=4k`) makes the job's unit the largest
    /// size both are multiples of (1k), each I/O `bs` of them, as a job of variable block sizes
    /// counts units. It needs one block size, one direction that reads or writes, one device and
    /// one pass, and no verify of its writes (their offsets may repeat; a read job may check
    /// what the disk holds).
    pub(super) fn settle_offset_modifier(&mut self, job: &str, bs: u64) -> Result<(), WorkloadError> {
        let Some(modifier) = self.offset_modifier else {
            return Ok(());
        };
        let option = match modifier {
            OffsetModifier::RandomRun(n) => format!("rw={}:{n}", self.spec.rw.as_str()),
            OffsetModifier::Add(bytes) => format!("rw={}:{bytes}", self.spec.rw.as_str()),
        };
        let refuse = |why: &str| Err(unsupported(job, &option, why.to_string()));
        if !matches!(
            self.spec.rw,
            RwMode::Read | RwMode::Write | RwMode::ReadWrite | RwMode::RandRead | RwMode::RandWrite
        ) {
            return refuse(
                "the offset modifier is carried out for read, write, rw/readwrite, randread and randwrite (random runs \
                 per direction in randrw are not implemented; trims take none)",
            );
        }
        if self.spec.bs_mix.is_some() {
            return refuse("the offset modifier with variable block sizes is not implemented");
        }
        if matches!(self.target, super::Target::Devices(_)) {
            return refuse("the offset modifier with a filename list is not implemented");
        }
        if self.loops > 1 && matches!(modifier, OffsetModifier::RandomRun(_)) {
            return refuse("random runs with loops are not implemented (fio restarts each pass)");
        }
        // fio runs the job `loops` times, each pass walking from the start again.
        self.spec.modifier_passes = self.loops;
        if self.spec.rw.writes()
            && (self.verify.is_enabled() || !self.spec.verify_pattern.is_empty())
            && self.spec.rw.is_random()
        {
            return refuse("random runs of verified writes are not implemented");
        }
        match modifier {
            OffsetModifier::RandomRun(n) => {
                if !self.spec.zones.is_empty() || self.spec.skew.is_some() || self.spec.align_blocks > 1 {
                    return refuse(
                        "the offset modifier with a random_distribution other than random or blockalign is not \
                         implemented",
                    );
                }
                self.spec.random_run = n;
            }
            OffsetModifier::Add(bytes) => {
                let mut unit = bs;
                if bytes.unsigned_abs() % bs != 0 {
                    unit = gcd(bs, bytes.unsigned_abs());
                    if !unit.is_multiple_of(SECTOR_MULTIPLE) {
                        return refuse(&format!(
                            "offsets here are whole sectors: the step and bs ({bs} bytes) must both be multiples of \
                             {SECTOR_MULTIPLE} bytes"
                        ));
                    }
                    // The job counts units of `unit` bytes, each I/O bs / unit of them; below
                    // MAX_BS, so both fit in u32.
                    let units = (bs / unit) as u32;
                    let one = alloc::vec![SizeChoice {
                        min_units: units,
                        max_units: units,
                        percent: 100,
                    }];
                    self.spec.bs = unit as u32;
                    self.spec.bs_mix = Some(BlockSizeMix {
                        directions: [one.clone(), one],
                    });
                }
                // |bytes| / unit fits: bytes is an i64.
                self.spec.offset_add_blocks = bytes / unit as i64;
            }
        }
        Ok(())
    }
}

/// The smallest sector size a device has: offsets of a step that is not whole blocks are
/// multiples of the step and bs's common size, which must be whole sectors.
const SECTOR_MULTIPLE: u64 = 512;

/// The greatest common divisor.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
