//! Physical Region Page lists (NVMe base specification 1.4, section 4.3; 4 KiB memory pages).
//!
//! PRP1 is the first data page and may carry an offset (dword aligned). When the data needs two
//! pages, PRP2 is the second one; when it needs more, PRP2 points to a list of page addresses.
//! A list fills a 4 KiB page (512 entries); when more entries follow, the last slot of a list page
//! points to the next list page instead. The driver keeps one contiguous run of list pages per
//! command slot, so building a list never allocates.

use crate::Error;
use crate::regs::PAGE_SIZE;

const PAGE: u64 = PAGE_SIZE as u64;
/// Entries in one list page.
pub const ENTRIES_PER_PAGE: usize = PAGE_SIZE / 8;

/// A piece of a data buffer: its bus address and length.
pub trait DataSegment {
    /// Bus address of the first byte.
    fn bus_addr(&self) -> u64;
    /// Length in bytes.
    fn bytes(&self) -> u32;
}

impl DataSegment for (u64, u32) {
    fn bus_addr(&self) -> u64 {
        self.0
    }
    fn bytes(&self) -> u32 {
        self.1
    }
}

impl DataSegment for blk::Segment {
    fn bus_addr(&self) -> u64 {
        self.phys
    }
    fn bytes(&self) -> u32 {
        self.len
    }
}

/// The two PRP fields of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prps {
    /// PRP entry 1.
    pub prp1: u64,
    /// PRP entry 2 (0, a data page, or a list pointer).
    pub prp2: u64,
    /// List entries written (0 when no list is used).
    pub list_entries: usize,
}

/// Most data pages a transfer of `max_bytes` can touch (one extra for a start offset).
pub fn max_data_pages(max_bytes: u64) -> u64 {
    max_bytes.div_ceil(PAGE) + 1
}

/// List pages needed for a transfer of up to `max_bytes` bytes at any offset.
pub fn list_pages_needed(max_bytes: u64) -> usize {
    let entries = max_data_pages(max_bytes).saturating_sub(1) as usize;
    if entries <= 1 {
        0
    } else if entries <= ENTRIES_PER_PAGE {
        1
    } else {
        // Every page but the last gives one slot to the chain pointer.
        1 + (entries - ENTRIES_PER_PAGE).div_ceil(ENTRIES_PER_PAGE - 1)
    }
}

/// Checks `segments` (bus address, length) against the PRP rules and the transfer length.
fn validate<S: DataSegment>(segments: &[S], bytes: u64, max_bytes: u64) -> Result<(), Error> {
    if bytes > max_bytes {
        return Err(Error::TransferTooLarge { bytes, max: max_bytes });
    }
    let mut sum = 0u64;
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        let (phys, len) = (seg.bus_addr(), seg.bytes());
        let misaligned = Error::PrpMisaligned { segment: i, phys, len };
        let end = phys.checked_add(u64::from(len)).ok_or(misaligned.clone())?;
        if len == 0 {
            return Err(Error::BadSegments {
                segment_bytes: sum,
                command_bytes: bytes,
            });
        }
        if (i == 0 && phys % 4 != 0) || (i > 0 && phys % PAGE != 0) || (i < last && end % PAGE != 0) {
            return Err(misaligned);
        }
        sum += u64::from(len);
    }
    if sum != bytes {
        return Err(Error::BadSegments {
            segment_bytes: sum,
            command_bytes: bytes,
        });
    }
    Ok(())
}

/// Every data page address of `segments`, in order (the first may carry an offset).
fn data_pages<S: DataSegment>(segments: &[S]) -> impl Iterator<Item = u64> + '_ {
    segments.iter().flat_map(|seg| {
        let phys = seg.bus_addr();
        // `validate` checked that this does not overflow.
        let end = phys + u64::from(seg.bytes());
        let mut next = Some(phys);
        core::iter::from_fn(move || {
            let p = next?;
            // Checked: the last page of the address space has no page after it (a plain add
            // wrapped to page 0 there).
            next = (p & !(PAGE - 1)).checked_add(PAGE).filter(|&following| following < end);
            Some(p)
        })
    })
}

/// The PRPs of a transfer that needs no list (one or two data pages, e.g. every 4 KiB I/O), or
/// `None` when it needs one (then [`build`] it). The same checks as [`build`]; one walk over at
/// most three pages and no list page touched, on every small I/O.
///
/// Inlined, so a single segment's PRPs come back in registers; the general way is a call.
#[inline(always)]
pub fn without_list<S: DataSegment>(segments: &[S], bytes: u64, max_bytes: u64) -> Result<Option<Prps>, Error> {
    // One segment (every I/O from one buffer): `validate`'s checks and the page walk in straight
    // line, no loop or iterator. Whatever fails here goes the general way below,
    // which names the error.
    if let [segment] = segments {
        let (phys, len) = (segment.bus_addr(), u64::from(segment.bytes()));
        // Three tests, not five branches: no wrap; the segment is the whole transfer and
        // dword aligned (one word test); its length 1..=max_bytes (the wrap of 0 fails it).
        if phys.checked_add(len).is_some() && ((len ^ bytes) | (phys % 4)) == 0 && len.wrapping_sub(1) < max_bytes {
            // The pages the segment touches, from its offset in its first page (no overflow:
            // below PAGE plus a length that fits the address space after `phys`, so no saturating
            // adds are needed).
            let reach = phys % PAGE + len;
            return Ok(if reach <= PAGE {
                Some(Prps {
                    prp1: phys,
                    prp2: 0,
                    list_entries: 0,
                })
            } else if reach <= 2 * PAGE {
                Some(Prps {
                    prp1: phys,
                    // The second page starts before the segment's end, so it exists.
                    prp2: (phys & !(PAGE - 1)) + PAGE,
                    list_entries: 0,
                })
            } else {
                None
            });
        }
    }
    without_list_general(segments, bytes, max_bytes)
}

/// [`without_list`] of several segments, or of one its straight line refused.
#[inline(never)]
fn without_list_general<S: DataSegment>(segments: &[S], bytes: u64, max_bytes: u64) -> Result<Option<Prps>, Error> {
    validate(segments, bytes, max_bytes)?;
    let mut pages = data_pages(segments);
    let Some(prp1) = pages.next() else {
        return Ok(Some(Prps {
            prp1: 0,
            prp2: 0,
            list_entries: 0,
        }));
    };
    let prp2 = pages.next().unwrap_or(0);
    if pages.next().is_some() {
        return Ok(None);
    }
    Ok(Some(Prps {
        prp1,
        prp2,
        list_entries: 0,
    }))
}

/// Builds the PRPs for `bytes` bytes in `segments`, writing list entries into `list` (one or
/// more contiguous 4 KiB list pages whose bus address is `list_phys`). Refuses transfers over
/// `max_bytes` and segments PRPs cannot describe, with the offending segment named.
pub fn build<S: DataSegment>(
    segments: &[S],
    bytes: u64,
    max_bytes: u64,
    list: &mut [u64],
    list_phys: u64,
) -> Result<Prps, Error> {
    if let [segment] = segments
        && let Some(prps) = one_segment_list(segment, bytes, max_bytes, list, list_phys)
    {
        return Ok(prps);
    }
    build_by_pages(segments, bytes, max_bytes, list, list_phys)
}

/// [`build`] by walking every page of every segment: several segments, chained list pages, and
/// every refusal.
#[inline(never)]
fn build_by_pages<S: DataSegment>(
    segments: &[S],
    bytes: u64,
    max_bytes: u64,
    list: &mut [u64],
    list_phys: u64,
) -> Result<Prps, Error> {
    validate(segments, bytes, max_bytes)?;
    let mut pages = data_pages(segments);
    let Some(prp1) = pages.next() else {
        return Ok(Prps {
            prp1: 0,
            prp2: 0,
            list_entries: 0,
        });
    };
    let rest = data_pages(segments).count() - 1;
    match rest {
        0 => Ok(Prps {
            prp1,
            prp2: 0,
            list_entries: 0,
        }),
        1 => Ok(Prps {
            prp1,
            prp2: pages.next().unwrap_or(0),
            list_entries: 0,
        }),
        _ => {
            let capacity_pages = list.len() / ENTRIES_PER_PAGE;
            let needed = if rest <= ENTRIES_PER_PAGE {
                1
            } else {
                1 + (rest - ENTRIES_PER_PAGE).div_ceil(ENTRIES_PER_PAGE - 1)
            };
            if needed > capacity_pages {
                let max_entries = capacity_pages * (ENTRIES_PER_PAGE - 1) + 1;
                return Err(Error::TransferTooLarge {
                    bytes,
                    max: (max_entries as u64).saturating_sub(1) * PAGE,
                });
            }
            let mut slot = 0usize;
            let mut remaining = rest;
            for page in pages {
                let in_page = slot % ENTRIES_PER_PAGE;
                if in_page == ENTRIES_PER_PAGE - 1 && remaining > 1 {
                    // Last slot of a list page with more than one entry to go: chain.
                    let next_list = list_phys + ((slot / ENTRIES_PER_PAGE + 1) * PAGE_SIZE) as u64;
                    list[slot] = next_list;
                    slot += 1;
                }
                list[slot] = page;
                slot += 1;
                remaining -= 1;
            }
            Ok(Prps {
                prp1,
                prp2: list_phys,
                list_entries: slot,
            })
        }
    }
}

/// [`build`] for one segment whose list fits one list page (every transfer up to 2 MiB from one
/// buffer): its pages follow each other, so the entries are the page after the first one, and
/// the one after that, written in one pass without walking the pages twice. `None` for
/// anything else, including every refusal, which `build` then names.
#[inline]
fn one_segment_list<S: DataSegment>(
    segment: &S,
    bytes: u64,
    max_bytes: u64,
    list: &mut [u64],
    list_phys: u64,
) -> Option<Prps> {
    let (phys, len) = (segment.bus_addr(), u64::from(segment.bytes()));
    // `without_list`'s checks: no wrap, the whole transfer, dword aligned, 1..=max_bytes.
    if phys.checked_add(len).is_none() || ((len ^ bytes) | (phys % 4)) != 0 || len.wrapping_sub(1) >= max_bytes {
        return None;
    }
    // Pages touched after the first (no overflow: below PAGE plus a length that fits).
    let rest = (phys % PAGE + len).div_ceil(PAGE) - 1;
    if rest < 2 || rest > ENTRIES_PER_PAGE as u64 {
        return None;
    }
    let entries = list.get_mut(..rest as usize)?;
    let first_page = phys & !(PAGE - 1);
    for (k, entry) in (1u64..).zip(entries.iter_mut()) {
        *entry = first_page + k * PAGE;
    }
    Some(Prps {
        prp1: phys,
        prp2: list_phys,
        list_entries: rest as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    const LIST: u64 = 0x9000_0000;

    /// Walks PRPs the way a device does (QEMU's `nvme_map_prp`), returning (page address, bytes) runs.
    fn walk(p: Prps, bytes: u64, list: &[u64]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let first = bytes.min(PAGE - p.prp1 % PAGE);
        out.push((p.prp1, first));
        let mut left = bytes - first;
        if left == 0 {
            return out;
        }
        if left <= PAGE {
            assert_eq!(p.prp2 % PAGE, 0);
            out.push((p.prp2, left));
            return out;
        }
        let mut idx = ((p.prp2 - LIST) / 8) as usize;
        while left > 0 {
            let slot_in_page = idx % ENTRIES_PER_PAGE;
            let e = list[idx];
            if slot_in_page == ENTRIES_PER_PAGE - 1 && left > PAGE {
                idx = ((e - LIST) / 8) as usize;
                continue;
            }
            assert_eq!(e % PAGE, 0, "list entry {idx} not page aligned");
            let n = left.min(PAGE);
            out.push((e, n));
            left -= n;
            idx += 1;
        }
        out
    }

    fn expand(segs: &[(u64, u32)]) -> Vec<u64> {
        segs.iter()
            .flat_map(|&(p, l)| (0..u64::from(l)).map(move |i| p + i))
            .collect()
    }

    #[test]
    fn sizes_from_4k_to_512k_at_offsets_cover_exactly_the_buffer() {
        let max = 512 * 1024;
        let mut list = vec![0u64; ENTRIES_PER_PAGE * list_pages_needed(max)];
        for kib in [4u64, 8, 12, 64, 128, 256, 508, 512] {
            for off in [0u64, 0x200, 0xFF8, 0x4] {
                let bytes = kib * 1024;
                if bytes + off > max + PAGE {
                    continue;
                }
                let seg = [(0x4000_0000 + off, bytes as u32)];
                let p = build(&seg, bytes, max, &mut list, LIST).unwrap();
                let runs = walk(p, bytes, &list);
                let covered: Vec<u64> = runs.iter().flat_map(|&(a, n)| (0..n).map(move |i| a + i)).collect();
                assert_eq!(covered, expand(&seg), "{kib} KiB at +{off:#x}");
                if bytes + off <= PAGE {
                    assert_eq!(p.prp2, 0);
                } else if bytes + off <= 2 * PAGE {
                    assert_eq!(p.list_entries, 0);
                }
            }
        }
    }

    #[test]
    fn scattered_pages_and_chained_lists() {
        // 1200 separate 4 KiB pages: needs chaining over three list pages.
        let segs: Vec<(u64, u32)> = (0..1200u64).map(|i| (0x1_0000_0000 + i * 3 * PAGE, 4096)).collect();
        let bytes = 1200 * PAGE;
        let pages = list_pages_needed(bytes);
        assert_eq!(pages, 3);
        let mut list = vec![0u64; ENTRIES_PER_PAGE * pages];
        let p = build(&segs, bytes, bytes, &mut list, LIST).unwrap();
        assert_eq!(list[511], LIST + PAGE);
        assert_eq!(list[1023], LIST + 2 * PAGE);
        let runs = walk(p, bytes, &list);
        assert_eq!(runs.len(), 1200);
        for (i, &(a, n)) in runs.iter().enumerate() {
            assert_eq!((a, n), (segs[i].0, PAGE));
        }
        // One list page too few is refused, not overrun.
        let mut short = vec![0u64; ENTRIES_PER_PAGE * 2];
        assert!(matches!(
            build(&segs, bytes, bytes, &mut short, LIST),
            Err(Error::TransferTooLarge { .. })
        ));
    }

    #[test]
    fn misaligned_segments_are_refused_with_the_segment_named() {
        let mut list = vec![0u64; ENTRIES_PER_PAGE];
        let max = 512 * 1024;
        // Second segment starts inside a page.
        let e = build(&[(0x10000, 4096), (0x20200, 4096)], 8192, max, &mut list, LIST).unwrap_err();
        assert_eq!(
            e,
            Error::PrpMisaligned {
                segment: 1,
                phys: 0x20200,
                len: 4096
            }
        );
        // First segment ends inside a page but is not last.
        let e = build(&[(0x10000, 512), (0x20000, 4096)], 4608, max, &mut list, LIST).unwrap_err();
        assert!(matches!(e, Error::PrpMisaligned { segment: 0, .. }));
        // PRP1 must be dword aligned.
        let e = build(&[(0x10002, 512)], 512, max, &mut list, LIST).unwrap_err();
        assert!(matches!(e, Error::PrpMisaligned { segment: 0, .. }));
        // Lengths must add up; MDTS is respected; an address that wraps is refused.
        assert!(matches!(
            build(&[(0x10000, 4096)], 8192, max, &mut list, LIST),
            Err(Error::BadSegments { .. })
        ));
        assert_eq!(
            build(&[(0x10000, 516 * 1024)], 516 * 1024, max, &mut list, LIST),
            Err(Error::TransferTooLarge { bytes: 516 * 1024, max })
        );
        assert!(matches!(
            build(&[(u64::MAX - 3, 512)], 512, max, &mut list, LIST),
            Err(Error::PrpMisaligned { .. })
        ));
        // A segment ending mid-page followed by nothing is fine; an empty transfer has no PRPs.
        assert_eq!(build::<(u64, u32)>(&[], 0, max, &mut list, LIST).unwrap().prp1, 0);
    }

    #[test]
    fn one_segment_lists_are_the_page_walks_lists() {
        let max = 4 * 1024 * 1024;
        let pages = list_pages_needed(max);
        for (phys, len) in [
            (0x10_0000u64, 12288u32),
            (0x10_0004, 8192),
            (0x10_0800, 131_072),
            (0x10_0000, 131_072),
            (0x10_0200, 65_024),
            (0x10_0000, 2 * 1024 * 1024),
            (0x10_0004, 2 * 1024 * 1024),
            (0x10_0000, 2 * 1024 * 1024 + 4096),
            (u64::MAX - 65_535, 65_536),
            (0x10_0002, 131_072),
            (0x10_0000, 0),
        ] {
            let segs = [(phys, len)];
            let mut fast = vec![0u64; ENTRIES_PER_PAGE * pages];
            let mut walked = vec![0u64; ENTRIES_PER_PAGE * pages];
            let a = build(&segs, u64::from(len), max, &mut fast, LIST);
            let b = build_by_pages(&segs, u64::from(len), max, &mut walked, LIST);
            assert_eq!(a, b, "{phys:#x}+{len}");
            assert_eq!(fast, walked, "{phys:#x}+{len}: list entries");
        }
        // A list too short for the transfer: refused as the walk refuses it.
        let segs = [(0x10_0000u64, 131_072u32)];
        let mut short = vec![0u64; 16];
        assert_eq!(
            build(&segs, 131_072, max, &mut short, LIST),
            build_by_pages(&segs, 131_072, max, &mut short, LIST)
        );
    }

    #[test]
    fn without_list_agrees_with_build_and_defers_lists_to_it() {
        let max = 512 * 1024;
        let mut list = vec![0u64; ENTRIES_PER_PAGE * list_pages_needed(max)];
        for (phys, len) in [
            (0x10_0000u64, 4096u32),
            (0x10_0200, 512),
            (0x10_0E00, 4096),
            (0x10_0000, 8192),
            (0x10_0004, 8188),
            (0x10_0004, 8192),
            (0x10_0000, 12288),
            (0x10_0000, 65536),
            // Page edges: ending exactly on one, one byte over it, two pages from mid-page.
            (0x10_0800, 2048),
            (0x10_0800, 2052),
            (0x10_0804, 8188),
            (0x10_0804, 8192),
            // The top of the address space: the last pages, with no page after them.
            (u64::MAX - 8191, 4096),
            (u64::MAX - 4095, 4092),
            (u64::MAX - 6143, 4096),
        ] {
            let segs = [(phys, len)];
            let built = build(&segs, u64::from(len), max, &mut list, LIST).unwrap();
            match without_list(&segs, u64::from(len), max).unwrap() {
                Some(p) => {
                    assert_eq!(p, built, "{phys:#x}+{len}");
                    assert_eq!(p.list_entries, 0);
                }
                None => assert!(built.list_entries > 0, "{phys:#x}+{len}: a list was needed"),
            }
        }
        // Two segments that fit two pages; errors as build's.
        let two = [(0x20_0800u64, 2048u32), (0x30_0000, 4096)];
        assert_eq!(
            without_list(&two, 6144, max).unwrap(),
            Some(build(&two, 6144, max, &mut list, LIST).unwrap())
        );
        assert_eq!(
            without_list(&[(0x10_0002u64, 512u32)], 512, max).unwrap_err(),
            build(&[(0x10_0002u64, 512u32)], 512, max, &mut list, LIST).unwrap_err()
        );
        assert!(
            without_list(&[(0x10_0000u64, 4096u32)], 8192, max).is_err(),
            "short segments"
        );
        // A segment that runs past the end of the address space: refused as build refuses it.
        let wraps = [(u64::MAX - 8191, 8192u32)];
        assert_eq!(
            without_list(&wraps, 8192, max).unwrap_err(),
            build(&wraps, 8192, max, &mut list, LIST).unwrap_err()
        );
    }

    #[test]
    fn list_page_counts() {
        assert_eq!(list_pages_needed(4096), 0);
        assert_eq!(list_pages_needed(8192), 1);
        assert_eq!(list_pages_needed(512 * 1024), 1);
        assert_eq!(list_pages_needed(2044 * 1024), 1);
        assert_eq!(list_pages_needed(2048 * 1024), 1);
        assert_eq!(list_pages_needed(2052 * 1024), 2);
    }
}
