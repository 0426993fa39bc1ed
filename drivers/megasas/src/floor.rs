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

pub use devhal::floor::{FloorResult, FloorSpec};
