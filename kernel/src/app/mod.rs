//! The application layer: what the kernel was booted to do.
//!
//! What lives here: workload jobs on the block devices with their reports
//! ([`jobs`]), fio job files and command lines mapped onto them ([`fio`]), the network bring-up and
//! `test=net` ([`net`]), the fio server for desk clients (`fio.server=1`, [`fioserve`]), and the built-in self-tests selected with `test=` ([`selftest`]).
//!
//! What it may use: `crate::dev` and `crate::arch`; nothing below imports it.

pub mod fio;
pub mod fioserve;
pub mod jobs;
pub mod net;
mod safety;
pub mod selftest;
