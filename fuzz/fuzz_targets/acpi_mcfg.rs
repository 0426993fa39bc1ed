//! cargo-fuzz target `acpi_mcfg`: ACPI MCFG windows. The check is `platform::fuzz::acpi_mcfg`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| platform::fuzz::acpi_mcfg(data));
