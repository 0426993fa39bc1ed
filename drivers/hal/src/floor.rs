//! The device floor's request and result, shared by the drivers that measure one
//! (`megasas::Host::measure_floor`, `nvme::blkdev::Host::measure_floor`): reads posted straight
//! to the controller with no block layer, whose figures the kernel prints beside each job.

use alloc::vec::Vec;

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloorSpec {
    /// Reads kept in flight (each driver caps it at what it can keep: I/O tags, floor slots,
    /// `ios`).
    pub queue_depth: u16,
    /// Reads to complete in all.
    pub ios: u32,
    /// Give up (with the driver's "floor stalled" error) when nothing completes for this long.
    pub stall_timeout_ns: u64,
}

impl FloorSpec {
    /// `ios` reads at `queue_depth`, giving up after 1 s without a completion.
    pub const fn new(queue_depth: u16, ios: u32) -> Self {
        Self {
            queue_depth,
            ios,
            stall_timeout_ns: 1_000_000_000,
        }
    }
}

/// One floor measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloorResult {
    /// Reads that were kept in flight.
    pub queue_depth: u16,
    /// Reads completed (successfully or not).
    pub ios: u32,
    /// Reads the device failed.
    pub failed: u32,
    /// From the first doorbell to the last completion seen, ns.
    pub elapsed_ns: u64,
    /// Median doorbell-to-reaped latency, ns.
    pub p50_ns: u64,
    /// 99th percentile latency, ns.
    pub p99_ns: u64,
}

impl FloorResult {
    /// The result of a run that kept `queue_depth` reads in flight and saw the per-read
    /// `latencies` (ns, any order; sorted here), `failed` of them failed, in `elapsed_ns`.
    pub fn from_latencies(queue_depth: u16, mut latencies: Vec<u64>, failed: u32, elapsed_ns: u64) -> Self {
        latencies.sort_unstable();
        Self {
            queue_depth,
            ios: latencies.len().min(u32::MAX as usize) as u32,
            failed,
            elapsed_ns,
            p50_ns: quantile(&latencies, 500),
            p99_ns: quantile(&latencies, 990),
        }
    }

    /// Completions per second (0 when no time elapsed).
    pub fn iops(&self) -> u64 {
        if self.elapsed_ns == 0 {
            return 0;
        }
        (u128::from(self.ios) * 1_000_000_000 / u128::from(self.elapsed_ns)) as u64
    }
}

/// The `q_permille`/1000 quantile of sorted latencies (0 for none).
fn quantile(sorted: &[u64], q_permille: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() - 1) * q_permille / 1000]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_sorts_latencies_and_counts_every_read() {
        let r = FloorResult::from_latencies(4, alloc::vec![40, 10, 30, 20, 1000], 1, 5_000);
        assert_eq!((r.queue_depth, r.ios, r.failed), (4, 5, 1));
        assert_eq!((r.p50_ns, r.p99_ns), (30, 40));
        assert_eq!(r.iops(), 1_000_000);
        let none = FloorResult::from_latencies(1, Vec::new(), 0, 0);
        assert_eq!((none.ios, none.p50_ns, none.p99_ns, none.iops()), (0, 0, 0, 0));
    }
}
