//! cargo-fuzz target `job_words`: workload job words: parse, print, plan, generate. The check is `job_words` in
//! `kernel/workload/tests/fuzz.rs`, included here, the same function the
//! fixed-count pass in `cargo test` runs.
#![no_main]

#[path = "../../kernel/workload/tests/fuzz.rs"]
#[allow(dead_code)]
mod workload_fuzz;

libfuzzer_sys::fuzz_target!(|data: &[u8]| workload_fuzz::job_words(data));
