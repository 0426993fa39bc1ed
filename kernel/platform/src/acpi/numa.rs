//! NUMA topology from the SRAT (and SLIT): nodes, their CPUs and memory, and
//! look-ups "node of a CPU" / "node of a physical address".
//!
//! Node numbers are dense (0, 1, ...), given to the proximity domains that
//! have an enabled CPU or memory entry, in ascending domain order.

use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use super::{Slit, Srat};

/// One node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// Dense node number.
    pub node: u32,
    /// The SRAT proximity domain it stands for.
    pub proximity_domain: u32,
    /// APIC ids of its enabled CPU entries, in table order.
    pub apic_ids: Vec<u32>,
    /// Its enabled memory ranges, in table order (hot-pluggable ones included).
    pub memory: Vec<Range<u64>>,
}

impl NumaNode {
    /// Bytes of memory in its ranges.
    pub fn memory_bytes(&self) -> u64 {
        self.memory
            .iter()
            .map(|r| r.end.saturating_sub(r.start))
            .fold(0, u64::saturating_add)
    }
}

/// The machine's NUMA layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaTopology {
    pub nodes: Vec<NumaNode>,
    slit: Option<Slit>,
}

impl NumaTopology {
    /// Builds the nodes from the SRAT's enabled entries; the SLIT is kept
    /// only when it is consistent (see [`Slit::is_consistent`]).
    pub fn new(srat: &Srat, slit: Option<Slit>) -> NumaTopology {
        let mut domains: Vec<u32> = srat
            .cpus
            .iter()
            .filter(|cpu| cpu.enabled)
            .map(|cpu| cpu.proximity_domain)
            .chain(
                srat.memory
                    .iter()
                    .filter(|m| m.enabled && m.length > 0)
                    .map(|m| m.proximity_domain),
            )
            .collect();
        domains.sort_unstable();
        domains.dedup();
        let mut nodes: Vec<NumaNode> = domains
            .iter()
            .enumerate()
            .map(|(node, &proximity_domain)| NumaNode {
                // At most one node per SRAT entry (a 1 MiB table): it fits.
                node: u32::try_from(node).unwrap_or(u32::MAX),
                proximity_domain,
                apic_ids: Vec::new(),
                memory: Vec::new(),
            })
            .collect();
        let index = |domain: u32| domains.binary_search(&domain).ok();
        // (node, APIC id) pairs already listed: an SRAT of tens of thousands
        // of entries stays n log n, not n^2.
        let mut listed = alloc::collections::BTreeSet::new();
        for cpu in srat.cpus.iter().filter(|cpu| cpu.enabled) {
            if let Some(i) = index(cpu.proximity_domain)
                && listed.insert((i, cpu.apic_id))
            {
                nodes[i].apic_ids.push(cpu.apic_id);
            }
        }
        for range in srat.memory.iter().filter(|m| m.enabled && m.length > 0) {
            if let Some(i) = index(range.proximity_domain) {
                nodes[i].memory.push(range.base..range.end());
            }
        }
        NumaTopology {
            nodes,
            slit: slit.filter(Slit::is_consistent),
        }
    }

    /// The node whose CPU list holds `apic_id`.
    pub fn node_of_apic_id(&self, apic_id: u32) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.apic_ids.contains(&apic_id))
            .map(|n| n.node)
    }

    /// The node of kernel CPU `index`, where `apic_ids_by_index[i]` is CPU i's APIC id.
    pub fn node_of_cpu(&self, index: usize, apic_ids_by_index: &[u32]) -> Option<u32> {
        apic_ids_by_index.get(index).and_then(|&id| self.node_of_apic_id(id))
    }

    /// The node whose memory ranges hold `phys`.
    pub fn node_of_address(&self, phys: u64) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.memory.iter().any(|r| r.contains(&phys)))
            .map(|n| n.node)
    }

    /// The memory ranges of `node` (`None` for a node the SRAT does not list).
    pub fn memory_of(&self, node: u32) -> Option<&[Range<u64>]> {
        self.nodes.iter().find(|n| n.node == node).map(|n| n.memory.as_slice())
    }

    /// Whether all of `[start, start + len)` lies in one memory range of
    /// `node`: the check behind "this buffer is local to its CPU" (a buffer
    /// straddling two nodes, or in memory the SRAT does not list, is not).
    pub fn range_is_on_node(&self, start: u64, len: u64, node: u32) -> bool {
        let Some(end) = start.checked_add(len.max(1)) else {
            return false;
        };
        self.memory_of(node)
            .is_some_and(|ranges| ranges.iter().any(|r| r.start <= start && end <= r.end))
    }

    /// SLIT distance between two nodes (10 = local), when a consistent SLIT lists both.
    pub fn distance(&self, from: u32, to: u32) -> Option<u8> {
        let slit = self.slit.as_ref()?;
        let domain = |node: u32| {
            let node = usize::try_from(node).ok()?;
            self.nodes.get(node).map(|n| n.proximity_domain)
        };
        slit.distance(domain(from)?, domain(to)?)
    }

    /// Distances from `node` to every node in order (10 = local), when a
    /// consistent SLIT lists them all.
    pub fn distances_from(&self, node: u32) -> Option<Vec<u8>> {
        let count = u32::try_from(self.nodes.len()).unwrap_or(u32::MAX);
        (0..count).map(|to| self.distance(node, to)).collect()
    }

    /// Whether a consistent SLIT was given.
    pub fn has_distances(&self) -> bool {
        self.slit.is_some()
    }

    /// One report line for `node`: `node 0: cpus 0-1, memory 0x...-0x... (1024 MiB)`,
    /// CPUs named by kernel index (see [`NumaTopology::node_of_cpu`]).
    pub fn describe<'a>(&'a self, node: &'a NumaNode, apic_ids_by_index: &'a [u32]) -> NodeLine<'a> {
        NodeLine {
            node,
            apic_ids_by_index,
        }
    }
}

/// The kernel's CPU numbering: the boot CPU is 0, the other usable MADT
/// entries follow in table order (as `arch::smp::start_aps` numbers them).
pub fn cpu_index_order(usable_apic_ids: impl IntoIterator<Item = u32>, bsp_apic_id: u32) -> Vec<u32> {
    let mut order = alloc::vec![bsp_apic_id];
    order.extend(usable_apic_ids.into_iter().filter(|&id| id != bsp_apic_id));
    order
}

/// See [`NumaTopology::describe`].
pub struct NodeLine<'a> {
    node: &'a NumaNode,
    apic_ids_by_index: &'a [u32],
}

impl fmt::Display for NodeLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut indexes: Vec<usize> = (0..self.apic_ids_by_index.len())
            .filter(|&i| self.node.apic_ids.contains(&self.apic_ids_by_index[i]))
            .collect();
        indexes.sort_unstable();
        write!(f, "node {}: cpus ", self.node.node)?;
        if indexes.is_empty() {
            write!(f, "none")?;
        }
        write_ranges(f, &indexes)?;
        write!(f, ", memory ")?;
        if self.node.memory.is_empty() {
            write!(f, "none")?;
        }
        for (i, r) in self.node.memory.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{:#x}-{:#x}", r.start, r.end)?;
        }
        write!(f, " ({} MiB)", self.node.memory_bytes() >> 20)
    }
}

/// Writes sorted indexes as `0-3,8,10-11`.
pub fn write_ranges(f: &mut fmt::Formatter<'_>, sorted: &[usize]) -> fmt::Result {
    let mut i = 0;
    let mut first = true;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        let sep = if first { "" } else { "," };
        if start == end {
            write!(f, "{sep}{start}")?;
        } else {
            write!(f, "{sep}{start}-{end}")?;
        }
        first = false;
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[allow(clippy::single_range_in_vec_init)] // node 0 has one memory range
    fn two_nodes() -> NumaTopology {
        let node = |node: u32, memory: Vec<Range<u64>>| NumaNode {
            node,
            proximity_domain: node,
            apic_ids: vec![node],
            memory,
        };
        NumaTopology {
            nodes: vec![
                node(0, vec![0..0x800_0000]),
                node(1, vec![0x800_0000..0x1000_0000, 0x1_0000_0000..0x1_4000_0000]),
            ],
            slit: None,
        }
    }

    #[test]
    fn a_range_is_on_a_node_only_when_wholly_inside_one_of_its_ranges() {
        let numa = two_nodes();
        assert_eq!(numa.memory_of(1).map(<[_]>::len), Some(2));
        assert!(numa.memory_of(2).is_none());
        assert!(numa.range_is_on_node(0x10_0000, 0x1000, 0));
        assert!(
            !numa.range_is_on_node(0x10_0000, 0x1000, 1),
            "node 0 memory is remote to node 1"
        );
        assert!(
            numa.range_is_on_node(0x1_0000_0000, 0x20_0000, 1),
            "the second range counts"
        );
        assert!(
            !numa.range_is_on_node(0x7FF_F000, 0x2000, 0) && !numa.range_is_on_node(0x7FF_F000, 0x2000, 1),
            "a buffer straddling the node boundary is local to neither"
        );
        assert!(
            !numa.range_is_on_node(0x1000_0000, 0x1000, 1),
            "the hole between ranges is no node's"
        );
        assert!(!numa.range_is_on_node(0x10_0000, 0x1000, 7), "unknown node");
        assert!(
            !numa.range_is_on_node(u64::MAX - 0xFFF, 0x2000, 1),
            "overflow is refused"
        );
    }
}
