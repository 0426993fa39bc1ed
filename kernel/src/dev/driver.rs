//! What a PCI driver gives the kernel: its name (also the prefix of its
//! command-line keys), match rules, an options parser and a probe function.
//! The table of them is `dev::registry`.

use crate::error::Error;
use platform::pci::{DeviceMatch, PciFunction};

/// One PCI driver.
pub struct PciDriver {
    /// The driver's name, which is also the prefix of its command-line keys.
    pub name: &'static str,
    /// Functions it drives (vendor/device or class rules).
    pub matches: &'static [DeviceMatch],
    /// Parses the driver's command-line words (`name.key=value`, all of
    /// them, possibly none) once at boot, before any probe.
    pub configure: fn(words: &[&str]) -> Result<(), Error>,
    /// Brings up one matching function and registers its block devices.
    pub probe: fn(function: &'static PciFunction) -> Result<(), Error>,
}
