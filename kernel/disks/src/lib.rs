//! What the kernel knows about a disk beyond the block layer, host-tested:
//!
//! - [`names`]: stable aliases (PCI address, NVMe serial) beside the enumeration-order name, so a
//!   job can name the same disk from boot to boot;
//! - [`signature`]: partition tables and file systems found in a disk's first bytes, which make a
//!   write job refuse the disk unless it says `destroy=1`.

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod names;
pub mod signature;
