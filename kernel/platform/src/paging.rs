//! The plan of the kernel's identity map, host-tested: how far it can
//! reach, which part of a RAM range it maps, and which pages (1 GiB where the
//! CPU has them and a whole aligned GiB is covered, else 2 MiB) cover a range.
//! The kernel (`arch::paging`) writes the entries.
//!
//! Four-level paging reaches 256 TiB; the CPU's physical address width
//! (CPUID 0x8000_0008) may be less. Firmware puts 64-bit BARs at 1 TiB
//! (EPYC) or 32 TiB (Xeon), and two-socket boxes have RAM above 512 GiB, so
//! one PML4 slot (512 GiB) is not enough.

/// A 2 MiB page.
pub const PAGE_2M: u64 = 2 << 20;
/// A 1 GiB page.
pub const PAGE_1G: u64 = 1 << 30;
/// What four-level paging reaches: 256 TiB.
pub const FOUR_LEVEL_LIMIT: u64 = 1 << 48;

/// The end of what the identity map can cover on a CPU with
/// `physical_address_bits` (absent or implausible: 36, the architectural
/// minimum), capped by four-level paging.
pub fn mappable_limit(physical_address_bits: Option<u8>) -> u64 {
    let bits = physical_address_bits.filter(|b| (32..=52).contains(b)).unwrap_or(36);
    (1u64 << bits).min(FOUR_LEVEL_LIMIT)
}

/// The whole 2 MiB pages of RAM range `[start, end)` below `limit`: a range
/// that crosses the limit is clipped there, not dropped. `None` when no whole
/// page is left.
pub fn clip_ram(start: u64, end: u64, limit: u64) -> Option<(u64, u64)> {
    let s = start.checked_next_multiple_of(PAGE_2M)?;
    let e = end.min(limit) & !(PAGE_2M - 1);
    (s < e).then_some((s, e))
}

/// One page of a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Its first address (aligned to its size).
    pub addr: u64,
    /// A 1 GiB page (else 2 MiB).
    pub gib: bool,
}

impl Page {
    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        if self.gib { PAGE_1G } else { PAGE_2M }
    }
}

/// The pages that cover `[start, end)` (rounded out to 2 MiB): 1 GiB pages
/// for every aligned GiB wholly inside the range when `use_1g`, 2 MiB pages
/// for the rest.
pub fn pages(start: u64, end: u64, use_1g: bool) -> impl Iterator<Item = Page> {
    let mut addr = start & !(PAGE_2M - 1);
    let end = end.checked_next_multiple_of(PAGE_2M).unwrap_or(!(PAGE_2M - 1));
    core::iter::from_fn(move || {
        if addr >= end {
            return None;
        }
        let gib = use_1g && addr.is_multiple_of(PAGE_1G) && end - addr >= PAGE_1G;
        let page = Page { addr, gib };
        addr += page.size();
        Some(page)
    })
}

/// The table indices of `addr`: (PML4, PDPT, page directory).
pub fn indices(addr: u64) -> (usize, usize, usize) {
    (
        ((addr >> 39) & 511) as usize,
        ((addr >> 30) & 511) as usize,
        ((addr >> 21) & 511) as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;

    #[test]
    fn limit_follows_the_cpu_up_to_four_level_paging() {
        assert_eq!(mappable_limit(Some(42)), 4 * TIB);
        assert_eq!(mappable_limit(Some(46)), 64 * TIB);
        assert_eq!(mappable_limit(Some(52)), 256 * TIB);
        assert_eq!(mappable_limit(None), 64 * GIB);
        assert_eq!(mappable_limit(Some(0)), 64 * GIB);
        // Well above the old single-slot limit of 512 GiB on any current server.
        assert!(mappable_limit(Some(40)) > 512 * GIB);
    }

    #[test]
    fn ram_is_clipped_at_the_limit_not_dropped() {
        let limit = mappable_limit(Some(40)); // 1 TiB
        // 770 GiB of RAM (a two-socket server such as a Dell PowerEdge R7625) fits whole.
        assert_eq!(clip_ram(4 * GIB, 770 * GIB, limit), Some((4 * GIB, 770 * GIB)));
        // A range across the limit keeps its part below it.
        assert_eq!(clip_ram(1000 * GIB, 1100 * GIB, limit), Some((1000 * GIB, TIB)));
        assert_eq!(clip_ram(TIB, 2 * TIB, limit), None);
        // Partial 2 MiB pages at the edges are left out.
        assert_eq!(
            clip_ram(4 * GIB + 4096, 6 * GIB - 4096, limit),
            Some((4 * GIB + PAGE_2M, 6 * GIB - PAGE_2M))
        );
        assert_eq!(clip_ram(4 * GIB + 4096, 4 * GIB + 8192, limit), None);
        assert_eq!(clip_ram(u64::MAX - 4096, u64::MAX, u64::MAX), None);
    }

    #[test]
    fn pages_use_1g_only_for_whole_aligned_gibs() {
        let start = 4 * GIB + PAGE_2M;
        let end = 10 * GIB + 3 * PAGE_2M;
        let list: Vec<Page> = pages(start, end, true).collect();
        let (big, small): (Vec<&Page>, Vec<&Page>) = list.iter().partition(|p| p.gib);
        assert_eq!(big.iter().map(|p| p.addr / GIB).collect::<Vec<_>>(), [5, 6, 7, 8, 9]);
        assert_eq!(small.len(), 511 + 3);
        // Contiguous, no gap, no overlap, exactly the range.
        assert_eq!(list[0].addr, start);
        assert!(list.windows(2).all(|w| w[0].addr + w[0].size() == w[1].addr));
        let last = list.last().unwrap();
        assert_eq!(last.addr + last.size(), end);
        // Without 1 GiB pages: all 2 MiB.
        assert_eq!(pages(start, end, false).count() as u64, (end - start) / PAGE_2M);
        assert!(pages(start, end, false).all(|p| !p.gib));
        // A small BAR: rounded out to whole 2 MiB pages.
        let bar: Vec<Page> = pages(TIB + 0x1000, TIB + 0x5000, true).collect();
        assert_eq!(bar, [Page { addr: TIB, gib: false }]);
        assert_eq!(pages(GIB, GIB, true).count(), 0);
    }

    #[test]
    fn indices_reach_every_pml4_slot() {
        assert_eq!(indices(0), (0, 0, 0));
        assert_eq!(indices(4 * GIB + PAGE_2M), (0, 4, 1));
        assert_eq!(indices(512 * GIB), (1, 0, 0));
        assert_eq!(indices(TIB), (2, 0, 0));
        assert_eq!(indices(32 * TIB + 3 * GIB), (64, 3, 0));
        assert_eq!(indices(FOUR_LEVEL_LIMIT - PAGE_2M), (511, 511, 511));
    }
}
