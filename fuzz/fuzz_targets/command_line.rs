//! cargo-fuzz target `command_line`: kernel command line. The check is `bootinfo::fuzz::command_line`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bootinfo::fuzz::command_line(data));
