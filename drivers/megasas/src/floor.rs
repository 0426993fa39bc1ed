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

/// Per-tag state of a floor command (`Core::floor_state`): devhal's floor slot states.
pub(crate) use drvkit::floor::slot::{
    ABANDONED as FLOOR_ABANDONED, DONE_FAILED as FLOOR_DONE_FAILED, DONE_OK as FLOOR_DONE_OK, IDLE as FLOOR_IDLE,
    IN_FLIGHT as FLOOR_IN_FLIGHT,
};

pub use drvkit::floor::{FloorResult, FloorSpec};
