//! The network room: what a NIC driver implements ([`Nic`]), the table of interfaces
//! ([`Registry`]), the `net.*` address words ([`NetConfig`]), and the TCP/IP stack ([`Stack`]:
//! smoltcp over the contract, with DHCPv4 or static addressing, ICMP echo and TCP).
//!
//! Everything here is `no_std` + `alloc` and runs on the host: the tests wire two fake NICs
//! ([`fake::WirePair`]) back to back and run the stack over them. The kernel owns the one
//! registry, polls the stack from the boot CPU outside measured jobs, and prints what it did.

#![no_std]

extern crate alloc;

mod config;
mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod nic;
mod registry;
mod stack;

pub use config::{ACCEPTED_KEYS, Addressing, InterfaceChoice, NetConfig, StaticAddress};
pub use error::Error;
pub use nic::{ETHERNET_MAX_FRAME, LinkState, MacAddress, Nic, PciLocation};
pub use registry::{BringUp, Interface, Registry};
pub use smoltcp::wire::{Ipv4Address, Ipv4Cidr};
pub use stack::{AddressSource, Configured, PingReply, Stack, StackCounters, TcpHandle, TcpState};
