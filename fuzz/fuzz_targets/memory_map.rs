//! cargo-fuzz target `memory_map`: memory map to usable ranges and the free list. The check is `bootinfo::fuzz::memory_map`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bootinfo::fuzz::memory_map(data));
