//! cargo-fuzz target `acpi_madt`: ACPI MADT entries. The check is `platform::fuzz::acpi_madt`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| platform::fuzz::acpi_madt(data));
