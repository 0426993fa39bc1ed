//! The kernel's one table of network interfaces (`net::Registry`): NIC probes add to it, the
//! network bring-up (`app::net`) takes the chosen interface from it.

use alloc::boxed::Box;
use alloc::string::String;

static INTERFACES: spin::Mutex<net::Registry> = spin::Mutex::new(net::Registry::new());

/// Adds a NIC; returns its name (`eth0`, ...).
pub fn register(pci: Option<net::PciLocation>, nic: Box<dyn net::Nic>) -> String {
    INTERFACES.lock().add(pci, nic)
}

/// Adds the NIC of the PCI function at `at`; returns its name.
pub fn register_pci(at: platform::pci::PciAddress, nic: Box<dyn net::Nic>) -> String {
    register(Some(location(at)), nic)
}

/// Adds the NIC of the PCI function at `at`, found with address `mac` and not brought up:
/// `bring_up` runs the first time the network uses it. Returns its name.
pub fn register_pci_pending(at: platform::pci::PciAddress, mac: net::MacAddress, bring_up: net::BringUp) -> String {
    INTERFACES.lock().add_pending(Some(location(at)), mac, bring_up)
}

fn location(at: platform::pci::PciAddress) -> net::PciLocation {
    let loc = super::pci::location(at);
    net::PciLocation {
        segment: loc.segment,
        bus: loc.bus,
        device: loc.device,
        function: loc.function,
    }
}

/// A NIC driver's `configure`: it has no words of its own (the network room's are `net.*`).
pub fn no_words(driver: &str, words: &[&str]) -> Result<(), crate::error::Error> {
    match words.first() {
        Some(w) => Err(crate::error::Error::Config(alloc::format!(
            "{w}: {driver} has no options (network words are net.*)"
        ))),
        None => Ok(()),
    }
}

/// Runs `f` with the table (the boot CPU's, outside measured jobs: nothing else takes the lock).
pub fn with<R>(f: impl FnOnce(&mut net::Registry) -> R) -> R {
    f(&mut INTERFACES.lock())
}
