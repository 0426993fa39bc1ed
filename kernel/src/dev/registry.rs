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
    crate::dev::virtio_net::DRIVER,
    crate::dev::e1000::DRIVER,
];

/// Command-line key prefixes owned by drivers (for
/// `bootinfo::cmdline::parse_with_drivers`); no heap: the command line is
/// read before memory is set up.
/// `net` is the network room's (`app::net`), not a driver's: its words pass every driver by.
pub fn key_prefixes() -> heapless::Vec<&'static str, 16> {
    PCI_DRIVERS.iter().map(|d| d.name).chain(["net"]).take(16).collect()
}

/// Hands each driver its command-line words.
pub fn configure(driver_words: &[&str]) -> Result<(), Error> {
    for driver in PCI_DRIVERS {
        let words: Vec<&str> = driver_words
            .iter()
            .copied()
            .filter(|w| key_owner(w) == Some(driver.name) || shared_with(driver.name, w))
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

/// Whether `word` is a key of another driver that `driver` takes as well (`megasas.timeout_ms`:
/// both MegaRAID drivers).
fn shared_with(driver: &str, word: &str) -> bool {
    driver == crate::dev::fusion::DRIVER.name
        && word
            .split_once('.')
            .is_some_and(|(prefix, _)| crate::dev::fusion::shares_key(prefix, word))
}

fn driver_for(function: &PciFunction) -> Option<&'static PciDriver> {
    PCI_DRIVERS
        .iter()
        .find(|d| d.matches.iter().any(|m| m.matches(function)))
}

/// `probe.fail=BB:DD.F`: the function whose probe fails on purpose (a test of the policy below).
static FORCED_FAILURE: spin::Once<Option<(u8, u8, u8)>> = spin::Once::new();

/// Records `probe.fail=` (at boot, before [`probe_all`]).
pub fn set_forced_failure(bdf: Option<(u8, u8, u8)>) {
    FORCED_FAILURE.call_once(|| bdf);
}

fn forced_failure(function: &PciFunction) -> bool {
    let a = function.address;
    FORCED_FAILURE
        .get()
        .copied()
        .flatten()
        .is_some_and(|bdf| bdf == (a.bus(), a.device(), a.function()))
}

/// What [`probe_all`] did for one driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverOutcome {
    pub driver: &'static str,
    /// Functions brought up.
    pub claimed: usize,
    /// Functions whose probe failed (reported and skipped).
    pub failed: usize,
}

/// Probes every PCI function a driver matches. A controller that fails is
/// reported on its own line and skipped; the others run (one odd drive must
/// not stop the benchmark of the rest). A job whose own device is missing
/// still fails: its device name is unknown then.
pub fn probe_all() -> Vec<DriverOutcome> {
    let mut outcomes: Vec<DriverOutcome> = PCI_DRIVERS
        .iter()
        .map(|d| DriverOutcome {
            driver: d.name,
            claimed: 0,
            failed: 0,
        })
        .collect();
    let Some(p) = pci::get() else { return outcomes };
    for f in &p.functions {
        let Some(driver) = driver_for(f) else { continue };
        let result = if forced_failure(f) {
            Err(Error::Device(alloc::format!(
                "probe.fail={:02x}:{:02x}.{} asks this probe to fail",
                f.address.bus(),
                f.address.device(),
                f.address.function()
            )))
        } else {
            (driver.probe)(f)
        };
        let Some(outcome) = outcomes.iter_mut().find(|o| o.driver == driver.name) else {
            continue;
        };
        match result {
            Ok(()) => outcome.claimed += 1,
            Err(e) => {
                outcome.failed += 1;
                crate::arch::console::kprintln!(
                    "{}: controller at {} failed and is skipped (the others run): {e}",
                    driver.name,
                    f.address
                );
            }
        }
    }
    outcomes
}
