//! Large bios split into device-sized requests (Linux's `max_hw_sectors` / `max_segments` split,
//! `bio_split` and `bio_chain`).
//!
//! A read or write larger than the device's transfer limit, or with more segments than a request
//! holds, or a discard longer than the device's discard limit, is cut into parts ([`split_bio`]); each part is an ordinary request with its own tag. A
//! [`SplitTable`] entry (the parent) counts the parts still out and keeps the first error: each
//! part's end reports to it, and only the end of the last part reaches the platform's `end_io`, once,
//! with the bio's cookie, sector, length and the first error (or success).
//!
//! The count is one atomic: the submitter sets it to the number of parts before it publishes any,
//! every part's end decrements it (AcqRel, so the last decrement sees every earlier part's error,
//! which was stored before its own decrement), and exactly one decrement takes it from 1 to 0.
//! Loom model: `tests/loom.rs`, `split_parent_ends_once_with_the_first_error` (it fails when the
//! decrement is made `Relaxed`: the last part may then end the bio as `Ok` despite an error).

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::request::{Op, SECTOR_SIZE, Segment, Status};
use crate::sync::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use crate::tags::TagBitmap;

/// A request that is not part of a split bio.
pub const NO_PARENT: u32 = u32::MAX;

/// One split bio in flight.
#[derive(Debug)]
struct Parent {
    /// Parts not yet ended.
    remaining: AtomicU32,
    /// The first error of a part (`Status::Ok` while none failed).
    status: AtomicU8,
    cookie: AtomicU64,
    sector: AtomicU64,
    nr_sectors: AtomicU32,
    /// The bio's operation, as [`op_code`] encodes it (only reads, writes and discards split).
    op: AtomicU8,
}

/// The [`Parent::op`] byte of a splittable operation.
fn op_code(op: Op) -> u8 {
    match op {
        Op::Write => 1,
        Op::Discard => 2,
        _ => 0,
    }
}

/// The operation whose [`op_code`] is `code`.
fn op_of(code: u8) -> Op {
    match code {
        1 => Op::Write,
        2 => Op::Discard,
        _ => Op::Read,
    }
}

/// What the end of a split bio reports: the bio's own values and its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitDone {
    /// The bio's cookie.
    pub cookie: u64,
    /// Its first sector.
    pub sector: u64,
    /// Its length in sectors.
    pub nr_sectors: u32,
    /// Its operation (a read, write or discard).
    pub op: Op,
    /// The first error of any part, or `Ok`.
    pub status: Status,
}

/// The split bios in flight, preallocated: at most one per two requests, since every split bio has
/// at least two parts.
pub struct SplitTable {
    parents: Box<[Parent]>,
    ids: TagBitmap,
}

impl core::fmt::Debug for SplitTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SplitTable")
            .field("capacity", &self.parents.len())
            .finish_non_exhaustive()
    }
}

impl SplitTable {
    /// Room for `capacity` split bios at once, searched from `ncpus` per-CPU hints.
    pub fn new(capacity: u32, ncpus: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            parents: (0..capacity)
                .map(|_| Parent {
                    remaining: AtomicU32::new(0),
                    status: AtomicU8::new(Status::Ok as u8),
                    cookie: AtomicU64::new(0),
                    sector: AtomicU64::new(0),
                    nr_sectors: AtomicU32::new(0),
                    op: AtomicU8::new(0),
                })
                .collect(),
            ids: TagBitmap::new(0, capacity, ncpus),
        }
    }

    /// Takes an entry for a bio of `parts` parts (at least 2). The entry must be filled before any
    /// part is published, which the caller's publication of the parts (Release) orders.
    pub fn begin(&self, cpu: usize, parts: u32, cookie: u64, sector: u64, nr_sectors: u32, op: Op) -> Option<u32> {
        let id = self.ids.alloc(cpu)?;
        let parent = &self.parents[id as usize];
        parent.status.store(Status::Ok as u8, Ordering::Relaxed);
        parent.cookie.store(cookie, Ordering::Relaxed);
        parent.sector.store(sector, Ordering::Relaxed);
        parent.nr_sectors.store(nr_sectors, Ordering::Relaxed);
        parent.op.store(op_code(op), Ordering::Relaxed);
        parent.remaining.store(parts, Ordering::Relaxed);
        Some(id)
    }

    /// Gives back an entry no part of which was published (the parts' tags could not be had).
    pub fn cancel(&self, cpu: usize, id: u32) {
        self.ids.free(cpu, id);
    }

    /// Records the end of one part of `id` with `status`. Returns the bio's outcome when this was
    /// the last part; the caller reports it and then calls [`SplitTable::release`].
    pub fn part_done(&self, id: u32, status: Status) -> Option<SplitDone> {
        let parent = &self.parents[id as usize];
        if !status.is_ok() {
            // The first error wins; later ones find it set and leave it.
            let _ =
                parent
                    .status
                    .compare_exchange(Status::Ok as u8, status as u8, Ordering::Relaxed, Ordering::Relaxed);
        }
        // AcqRel: our error (above) is released with our decrement, and the last decrement
        // acquires every earlier one's.
        if parent.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return None;
        }
        Some(SplitDone {
            cookie: parent.cookie.load(Ordering::Relaxed),
            sector: parent.sector.load(Ordering::Relaxed),
            nr_sectors: parent.nr_sectors.load(Ordering::Relaxed),
            op: op_of(parent.op.load(Ordering::Relaxed)),
            status: Status::from_u8(parent.status.load(Ordering::Relaxed)),
        })
    }

    /// Frees the entry of a bio whose last part ended.
    pub fn release(&self, cpu: usize, id: u32) {
        let freed = self.ids.free(cpu, id);
        debug_assert!(freed, "split entry {id} released twice");
    }
}

/// One part of a split bio: its sectors and its slice of the bio's segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// First sector.
    pub sector: u64,
    /// Length in sectors.
    pub nr_sectors: u32,
    /// Its segments (empty when the bio had none).
    pub segments: Vec<Segment>,
}

/// Whether a read or write of `nr_sectors` in `segments` must be split for a device that takes
/// `max_sectors` per request and `max_segments` segments.
#[inline(always)]
pub fn needs_split(nr_sectors: u32, segments: usize, max_sectors: u32, max_segments: usize) -> bool {
    nr_sectors > max_sectors || segments > max_segments
}

/// Calls `part` with each part of a bio at `sector` of `nr_sectors` over `segments`, cut so that
/// a part has at most `max_sectors` sectors and `max_segments` segments, and every part but the
/// last is a whole number of `block_sectors` (the device's logical block). A segment may be cut
/// between two parts. `part` gets the part's sector, length and segments. Returns the number of
/// parts, or `None` when the limits cannot hold one block from where a part starts (segments
/// smaller than a block and too few allowed per request); `part` may have been called for the
/// parts before.
///
/// `max_sectors` must be a multiple of `block_sectors`, and the segments must add up to the bio
/// (both checked by the queue before it splits).
pub fn split_bio(
    sector: u64,
    nr_sectors: u32,
    segments: &[Segment],
    max_sectors: u32,
    max_segments: usize,
    block_sectors: u32,
    mut part: impl FnMut(u64, u32, &[Segment]),
) -> Option<u32> {
    let block_bytes = u64::from(block_sectors) * u64::from(SECTOR_SIZE);
    let max_bytes = u64::from(max_sectors) * u64::from(SECTOR_SIZE);
    let mut parts = 0;
    let mut next_sector = sector;
    let mut sectors_left = nr_sectors;
    if segments.is_empty() {
        while sectors_left > 0 {
            let len = sectors_left.min(max_sectors);
            part(next_sector, len, &[]);
            next_sector += u64::from(len);
            sectors_left -= len;
            parts += 1;
        }
        return Some(parts);
    }
    let mut current: Vec<Segment> = Vec::with_capacity(max_segments.min(segments.len()));
    // Where we are in the bio's segment list: index and byte offset inside that segment.
    let (mut index, mut offset) = (0usize, 0u32);
    while sectors_left > 0 {
        current.clear();
        let mut bytes = 0u64;
        let (mut cut_index, mut cut_offset) = (index, offset);
        while cut_index < segments.len() && current.len() < max_segments && bytes < max_bytes {
            let segment = &segments[cut_index];
            let available = u64::from(segment.len - cut_offset);
            let take = available.min(max_bytes - bytes);
            current.push(segment.slice(cut_offset, take as u32));
            bytes += take;
            if take == available {
                cut_index += 1;
                cut_offset = 0;
            } else {
                cut_offset += take as u32;
            }
        }
        let whole_bio_left = bytes == u64::from(sectors_left) * u64::from(SECTOR_SIZE);
        if !whole_bio_left {
            // Cut back to a whole number of blocks: the rest goes to the next part.
            let excess = bytes % block_bytes;
            let mut to_drop = excess;
            while to_drop > 0 {
                let last = current.last_mut().expect("a part with excess has segments");
                let drop_here = to_drop.min(u64::from(last.len));
                last.len -= drop_here as u32;
                to_drop -= drop_here;
                if last.len == 0 {
                    current.pop();
                }
                // Step the cursor back by what was dropped.
                let mut back = drop_here;
                while back > 0 {
                    if cut_offset == 0 {
                        cut_index -= 1;
                        cut_offset = segments[cut_index].len;
                    }
                    let step = back.min(u64::from(cut_offset));
                    cut_offset -= step as u32;
                    back -= step;
                }
            }
            bytes -= excess;
        }
        let len = (bytes / u64::from(SECTOR_SIZE)) as u32;
        if len == 0 {
            return None;
        }
        part(next_sector, len, &current);
        next_sector += u64::from(len);
        sectors_left -= len;
        index = cut_index;
        offset = cut_offset;
        parts += 1;
    }
    Some(parts)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::vec;

    fn parts_of(
        sector: u64,
        nr: u32,
        segments: &[Segment],
        max_sectors: u32,
        max_segments: usize,
        block: u32,
    ) -> Vec<Part> {
        let mut parts = Vec::new();
        let count = split_bio(
            sector,
            nr,
            segments,
            max_sectors,
            max_segments,
            block,
            |sector, nr_sectors, segs| {
                parts.push(Part {
                    sector,
                    nr_sectors,
                    segments: segs.to_vec(),
                })
            },
        )
        .expect("the limits hold a block");
        assert_eq!(count as usize, parts.len());
        parts
    }

    /// The parts tile the bio and its bytes, in order, within the limits.
    fn check_tiling(
        sector: u64,
        nr: u32,
        segments: &[Segment],
        parts: &[Part],
        max_sectors: u32,
        max_segments: usize,
        block: u32,
    ) {
        let mut next = sector;
        let flat = |segs: &[Segment]| -> Vec<(u64, u32)> {
            // Merge adjacent pieces so that where a segment was cut does not matter.
            let mut out: Vec<(u64, u32)> = Vec::new();
            for s in segs {
                match out.last_mut() {
                    Some(last) if last.0 + u64::from(last.1) == s.phys => last.1 += s.len,
                    _ => out.push((s.phys, s.len)),
                }
            }
            out
        };
        let mut all = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            assert_eq!(part.sector, next);
            assert!(part.nr_sectors > 0 && part.nr_sectors <= max_sectors);
            assert!(part.segments.len() <= max_segments);
            if i + 1 < parts.len() {
                assert_eq!(part.nr_sectors % block, 0, "part {i} is not whole blocks");
            }
            if !segments.is_empty() {
                let bytes: u64 = part.segments.iter().map(|s| u64::from(s.len)).sum();
                assert_eq!(bytes, u64::from(part.nr_sectors) * 512);
            }
            all.extend(part.segments.iter().copied());
            next += u64::from(part.nr_sectors);
        }
        assert_eq!(next, sector + u64::from(nr));
        assert_eq!(flat(&all), flat(segments));
    }

    #[test]
    fn one_large_segment_is_cut_at_the_transfer_limit() {
        // 1 MiB in one contiguous buffer, a device taking 128 KiB: 8 parts of 256 sectors.
        let segments = [Segment::new(0x10_0000, 1 << 20)];
        let parts = parts_of(2048, 2048, &segments, 256, 32, 1);
        assert_eq!(parts.len(), 8);
        for (i, part) in parts.iter().enumerate() {
            assert_eq!(part.sector, 2048 + 256 * i as u64);
            assert_eq!(
                part.segments,
                vec![Segment::new(0x10_0000 + (i as u64) * 131_072, 131_072)]
            );
        }
        check_tiling(2048, 2048, &segments, &parts, 256, 32, 1);
    }

    #[test]
    fn a_remainder_becomes_a_short_last_part() {
        let segments = [Segment::new(0, 5 * 4096)];
        let parts = parts_of(0, 40, &segments, 16, 4, 8);
        assert_eq!(parts.iter().map(|p| p.nr_sectors).collect::<Vec<_>>(), [16, 16, 8]);
        check_tiling(0, 40, &segments, &parts, 16, 4, 8);
    }

    #[test]
    fn too_many_segments_are_cut_on_block_boundaries() {
        // Eight 1536-byte pieces (3 sectors each), 4 KiB blocks, at most 4 segments per request:
        // 4 segments hold 6144 bytes, cut back to 4096 (the third cut after 1024 bytes), and the
        // rest of the third starts the next part.
        let segments: Vec<Segment> = (0..8).map(|i| Segment::new(0x1000 * i, 1536)).collect();
        let parts = parts_of(64, 24, &segments, 1024, 4, 8);
        check_tiling(64, 24, &segments, &parts, 1024, 4, 8);
        assert_eq!(parts.iter().map(|p| p.nr_sectors).collect::<Vec<_>>(), [8, 8, 8]);
        assert_eq!(parts[0].segments.len(), 3);
        assert_eq!(parts[0].segments[2], Segment::new(0x2000, 1024));
        assert_eq!(parts[1].segments[0], Segment::new(0x2000 + 1024, 512));
    }

    #[test]
    fn limits_that_cannot_hold_a_block_are_reported_not_looped_on() {
        // From the middle of a segment, 3 small pieces hold less than a 4 KiB block.
        let segments: Vec<Segment> = (0..8).map(|i| Segment::new(0x1000 * i, 1536)).collect();
        assert_eq!(split_bio(64, 24, &segments, 1024, 3, 8, |_, _, _| {}), None);
    }

    #[test]
    fn segmentless_bios_are_cut_by_sectors() {
        let parts = parts_of(10, 1000, &[], 256, 1, 1);
        assert_eq!(
            parts.iter().map(|p| p.nr_sectors).collect::<Vec<_>>(),
            [256, 256, 256, 232]
        );
    }

    /// Property: random segment lists and limits always tile the bio within the limits.
    #[test]
    fn random_bios_tile_within_the_limits() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for _ in 0..2000 {
            let block = [1u32, 8][next(2) as usize];
            let block_bytes = block * 512;
            let blocks = 1 + next(64) as u32;
            let total = blocks * block_bytes;
            // Random segment lengths in whole sectors adding up to the total.
            let mut segments = Vec::new();
            let mut left = total;
            let mut phys = 0x10_0000u64;
            while left > 0 {
                let len = (512 * (1 + next(16) as u32)).min(left);
                segments.push(Segment::new(phys, len));
                phys += u64::from(len) + 4096;
                left -= len;
            }
            let max_sectors = block * (1 + next(8) as u32);
            // A request must hold at least one block: with sector-sized segments, `block` of them.
            let max_segments = block as usize + next(6) as usize;
            let nr = total / 512;
            let parts = parts_of(4096, nr, &segments, max_sectors, max_segments, block);
            check_tiling(4096, nr, &segments, &parts, max_sectors, max_segments, block);
        }
    }

    #[test]
    fn the_last_part_ends_the_bio_once_with_the_first_error() {
        let table = SplitTable::new(4, 1);
        let id = table.begin(0, 3, 77, 1000, 24, Op::Write).unwrap();
        assert_eq!(table.part_done(id, Status::Ok), None);
        assert_eq!(table.part_done(id, Status::Timeout), None);
        let done = table.part_done(id, Status::IoError).unwrap();
        assert_eq!(
            done,
            SplitDone {
                cookie: 77,
                sector: 1000,
                nr_sectors: 24,
                op: Op::Write,
                status: Status::Timeout
            }
        );
        table.release(0, id);
        // The entry is reusable, and starts clean.
        let again = table.begin(0, 2, 5, 0, 16, Op::Discard).unwrap();
        assert_eq!(table.part_done(again, Status::Ok), None);
        let done = table.part_done(again, Status::Ok).unwrap();
        assert_eq!((done.status, done.op), (Status::Ok, Op::Discard));
    }

    #[test]
    fn the_table_runs_out_and_cancel_gives_entries_back() {
        let table = SplitTable::new(2, 1);
        let a = table.begin(0, 2, 0, 0, 2, Op::Read).unwrap();
        let b = table.begin(0, 2, 0, 0, 2, Op::Read).unwrap();
        assert!(table.begin(0, 2, 0, 0, 2, Op::Read).is_none());
        table.cancel(0, a);
        assert!(table.begin(0, 2, 0, 0, 2, Op::Read).is_some());
        let _ = b;
    }
}
