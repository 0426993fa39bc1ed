//! cargo-fuzz target `pci_assign`: PCI resource assignment behind bridges. The check is `platform::fuzz::pci_assign`,
//! the same function the fixed-count pass in `cargo test` runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| platform::fuzz::pci_assign(data));
