//! The box side of a fleet driven from a desk by the stock `fio --client`: what the kernel's fio
//! server needs that does not touch hardware, so it is tested on the host.
//!
//! - [`config`]: the `fio.server*` command-line words (on/off, port, the allow-list of client
//!   networks, the devices a client may write to).
//! - [`results`]: a run's engine reports as fio's results (`TS` per job, `GS` per group, `DU` per
//!   device), and the live counters as fio's `ETA`.
//!
//! fio's protocol has no authentication: the allow-list and the writable list are the only
//! guards, and neither replaces a network of the fleet's own.

#![no_std]

extern crate alloc;

pub mod config;
mod error;
pub mod results;

pub use config::{Cidr, ServerConfig};
pub use error::Error;
