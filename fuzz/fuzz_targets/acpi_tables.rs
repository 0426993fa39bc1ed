//! cargo-fuzz target `acpi_tables`: ACPI RSDT/XSDT walk with MADT and MCFG. The check is `platform::fuzz::acpi_tables`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| platform::fuzz::acpi_tables(data));
