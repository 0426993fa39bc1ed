//! The kernel's one table of network interfaces (`net::Registry`): NIC probes add to it, the
//! network bring-up (`app::net`) takes the chosen interface from it.

use alloc::boxed::Box;
use alloc::string::String;

static INTERFACES: spin::Mutex<net::Registry> = spin::Mutex::new(net::Registry::new());

/// Adds a NIC; returns its name (`eth0`, ...).
pub fn register(pci: Option<net::PciLocation>, nic: Box<dyn net::Nic>) -> String {
    INTERFACES.lock().add(pci, nic)
}

/// Runs `f` with the table (the boot CPU's, outside measured jobs: nothing else takes the lock).
pub fn with<R>(f: impl FnOnce(&mut net::Registry) -> R) -> R {
    f(&mut INTERFACES.lock())
}
