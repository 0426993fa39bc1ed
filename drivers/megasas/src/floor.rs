//! The device floor: what the controller allows with no block layer in the way.
//!
//! [`Host::measure_floor`](crate::Host::measure_floor) keeps `queue_depth` one-block LD READs in
//! flight straight through the controller (frame, doorbell, reply ring), reaping by polling, and
//! times each one. No `blk` queue, no workload engine, no interrupt work of its own: every job's
//! figure can then be read as a fraction of this one. The tags come from the drives' shared
//! `blk::HostTags`, so a floor run and block-layer I/O never share a tag; the completions travel
//! with [`FLOOR_COOKIE`] set and are routed to the floor run by whoever reaps them (the run
//! itself, an interrupt handler, a poll or a tick).

/// Cookie bit that marks a floor command (block-layer cookies use the low 64 - 16 bits for the
/// token and hardware queue and bits 48..63 for the drive index, which never reaches 2^15).
pub const FLOOR_COOKIE: u64 = 1 << 63;

/// Per-tag state of a floor command (`Core::floor_state`).
pub(crate) const FLOOR_IDLE: u8 = 0;
pub(crate) const FLOOR_IN_FLIGHT: u8 = 1;
pub(crate) const FLOOR_DONE_OK: u8 = 2;
pub(crate) const FLOOR_DONE_FAILED: u8 = 3;
/// The run gave up waiting: whoever reaps the completion frees the tag.
pub(crate) const FLOOR_ABANDONED: u8 = 4;

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloorSpec {
    /// Commands kept in flight (capped at the controller's I/O tags).
    pub queue_depth: u16,
    /// Reads to complete in all.
    pub ios: u32,
    /// Give up (and report [`crate::Error::FloorStalled`]) when nothing completes for this long.
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
    /// Commands that were kept in flight.
    pub queue_depth: u16,
    /// Reads completed (successfully or not).
    pub ios: u32,
    /// Reads the device failed.
    pub failed: u32,
    /// From the first doorbell to the last completion, ns.
    pub elapsed_ns: u64,
    /// Median doorbell-to-reaped latency, ns.
    pub p50_ns: u64,
    /// 99th percentile latency, ns.
    pub p99_ns: u64,
}

impl FloorResult {
    /// Completions per second (0 when no time elapsed).
    pub fn iops(&self) -> u64 {
        if self.elapsed_ns == 0 {
            return 0;
        }
        (u128::from(self.ios) * 1_000_000_000 / u128::from(self.elapsed_ns)) as u64
    }
}

/// The `q`-quantile (0.0..=1.0) of sorted latencies (0 for none).
pub(crate) fn quantile(sorted: &[u64], q_permille: u32) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = (sorted.len() - 1) * q_permille as usize / 1000;
    sorted[idx]
}
