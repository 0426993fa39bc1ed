//! cargo-fuzz target `multiboot1`: Multiboot1 boot information. The check is `bootinfo::fuzz::multiboot1`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bootinfo::fuzz::multiboot1(data));
