//! The table of PCI drivers: match rules, the driver's command-line keys
//! (every `NAME.key=value` word goes to driver NAME, parsed once at boot by
//! its `configure`, so an unknown `nvme.*` key is that driver's error; MFI and
//! Fusion share `megasas.*`, split in one place, [`key_owner`]), and its
//! probe function. Adding a driver is one line in [`PCI_DRIVERS`]
//! and one probe file in `dev/`.

use crate::dev::driver::PciDriver;
use crate::dev::pci;
use crate::error::Error;
use alloc::vec::Vec;
use platform::pci::PciFunction;

/// Every PCI driver, in probe-priority order (the first match wins).
pub const PCI_DRIVERS: &[PciDriver] = &[
    crate::dev::megasas::DRIVER,
    crate::dev::fusion::DRIVER,
    crate::dev::nvme::DRIVER,
];

/// Command-line key prefixes owned by drivers (for
/// `bootinfo::cmdline::parse_with_drivers`); no heap: the command line is
/// read before memory is set up.
pub fn key_prefixes() -> heapless::Vec<&'static str, 16> {
    PCI_DRIVERS.iter().map(|d| d.name).take(16).collect()
}

/// Hands each driver its command-line words.
pub fn configure(driver_words: &[&str]) -> Result<(), Error> {
    for driver in PCI_DRIVERS {
        let words: Vec<&str> = driver_words
            .iter()
            .copied()
            .filter(|w| key_owner(w) == Some(driver.name))
            .collect();
        (driver.configure)(&words)?;
    }
    Ok(())
}

/// The driver a command-line word belongs to: the one named by its prefix, except that MFI
/// (`megasas`) and Fusion (`megasas-fusion`) share the `megasas.` prefix: a `megasas.*` key goes
/// to Fusion if it is one of Fusion's keys, else to MFI, whose parser refuses a key neither knows.
fn key_owner(word: &str) -> Option<&'static str> {
    let (prefix, _) = word.split_once('.')?;
    if crate::dev::fusion::owns_key(prefix, word) {
        return Some(crate::dev::fusion::DRIVER.name);
    }
    PCI_DRIVERS.iter().find(|d| d.name == prefix).map(|d| d.name)
}

fn driver_for(function: &PciFunction) -> Option<&'static PciDriver> {
    PCI_DRIVERS
        .iter()
        .find(|d| d.matches.iter().any(|m| m.matches(function)))
}

/// Probes every PCI function a driver matches. A device that fails is
/// reported and makes the boot fail: a missing disk must never look like
/// success. Returns (driver name, functions claimed) per driver.
pub fn probe_all() -> Result<Vec<(&'static str, usize)>, Error> {
    let mut claimed: Vec<(&'static str, usize)> = PCI_DRIVERS.iter().map(|d| (d.name, 0)).collect();
    let Some(p) = pci::get() else { return Ok(claimed) };
    for f in &p.functions {
        let Some(driver) = driver_for(f) else { continue };
        (driver.probe)(f)?;
        if let Some(c) = claimed.iter_mut().find(|(n, _)| *n == driver.name) {
            c.1 += 1;
        }
    }
    Ok(claimed)
}
