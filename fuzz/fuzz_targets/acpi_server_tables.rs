//! cargo-fuzz target `acpi_server_tables`: ACPI SRAT, SLIT, HPET, FADT, DMAR and IVRS (the first
//! byte picks the table). The check is `platform::fuzz::acpi_server_tables`, the same function the
//! fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| platform::fuzz::acpi_server_tables(data));
