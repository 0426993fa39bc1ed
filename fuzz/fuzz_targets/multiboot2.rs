//! cargo-fuzz target `multiboot2`: Multiboot2 boot information. The check is `bootinfo::fuzz::multiboot2`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bootinfo::fuzz::multiboot2(data));
