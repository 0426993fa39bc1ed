//! What baremq's drivers share above the machine traits of `devhal`:
//!
//! * [`gate`]: the reset gate: submitters and reapers inside, or a controller reset alone, with
//!   a count per lane (a reply queue or a CPU) instead of one line every CPU writes;
//! * [`window`] and [`adaptive`]: the interrupt-then-poll window (mask the vector after a
//!   productive interrupt, let the submitters poll, unmask when idle or over budget) and its
//!   settings and counters;
//! * [`drive_queue`]: one `blk::Queue` per drive, the cookie that carries a request's identity
//!   through the controller, and the reap's completion batch;
//! * [`floor`]: the device floor, a driver's own loop of reads with no block layer, which a
//!   job's figures are compared with.
//!
//! A driver crate depends on `devhal` (the machine), `blk` (the block layer) and this crate;
//! the kernel implements `devhal`'s traits once and knows each driver by one probe file.

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod adaptive;
pub mod drive_queue;
pub mod floor;
pub mod gate;
mod sync;
pub mod window;
