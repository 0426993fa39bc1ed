//! Driver matching by vendor/device/class.

use super::enumerate::PciFunction;

/// One match rule; `None` fields match anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceMatch {
    /// Vendor id.
    pub vendor: Option<u16>,
    /// Device id.
    pub device: Option<u16>,
    /// Base class.
    pub class: Option<u8>,
    /// Subclass.
    pub subclass: Option<u8>,
    /// Programming interface.
    pub prog_if: Option<u8>,
}

impl DeviceMatch {
    /// Matches one vendor:device pair.
    pub const fn id(vendor: u16, device: u16) -> DeviceMatch {
        DeviceMatch {
            vendor: Some(vendor),
            device: Some(device),
            class: None,
            subclass: None,
            prog_if: None,
        }
    }

    /// Matches a class/subclass (e.g. 0x01/0x04 for RAID controllers).
    pub const fn class(class: u8, subclass: u8) -> DeviceMatch {
        DeviceMatch {
            vendor: None,
            device: None,
            class: Some(class),
            subclass: Some(subclass),
            prog_if: None,
        }
    }

    /// Also requires the programming interface.
    pub const fn with_prog_if(mut self, prog_if: u8) -> DeviceMatch {
        self.prog_if = Some(prog_if);
        self
    }

    /// Whether `function` satisfies every field that is set. A refused
    /// function (see [`super::ResourcePlan::mark_refused`]) matches nothing,
    /// so no driver registry built on this can probe it.
    pub fn matches(&self, function: &PciFunction) -> bool {
        if function.refused.is_some() {
            return false;
        }
        fn field<T: PartialEq>(wanted: Option<T>, actual: T) -> bool {
            wanted.is_none_or(|wanted| wanted == actual)
        }
        field(self.vendor, function.vendor_id)
            && field(self.device, function.device_id)
            && field(self.class, function.class)
            && field(self.subclass, function.subclass)
            && field(self.prog_if, function.prog_if)
    }
}

/// A driver's registration: its name and match table.
#[derive(Debug, Clone, Copy)]
pub struct PciDriver {
    /// Name shown when it claims a function.
    pub name: &'static str,
    /// Rules; any one matching is enough.
    pub matches: &'static [DeviceMatch],
}

/// The first driver (registration order) with a rule matching `function`;
/// none for a refused function (see [`DeviceMatch::matches`]).
pub fn match_driver<'d>(drivers: &'d [PciDriver], function: &PciFunction) -> Option<&'d PciDriver> {
    drivers
        .iter()
        .find(|driver| driver.matches.iter().any(|rule| rule.matches(function)))
}
