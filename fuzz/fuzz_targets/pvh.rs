//! cargo-fuzz target `pvh`: PVH start_info. The check is `bootinfo::fuzz::pvh`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bootinfo::fuzz::pvh(data));
