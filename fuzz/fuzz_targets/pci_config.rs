//! cargo-fuzz target `pci_config`: PCI enumeration: BARs, capabilities, MSI/MSI-X. The check is `platform::fuzz::pci_config`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| platform::fuzz::pci_config(data));
