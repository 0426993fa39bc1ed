//! cargo-fuzz target `acpi_rsdp`: ACPI RSDP (parse, read, BIOS-area scan). The check is `platform::fuzz::acpi_rsdp`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| platform::fuzz::acpi_rsdp(data));
