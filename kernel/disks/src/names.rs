//! Stable device names: beside the enumeration-order name (`nvme0n1`,
//! `md0`), which changes when a controller is added or fails, each block
//! device gets aliases that stay the same from boot to boot: its PCI address
//! and, for NVMe, the controller's serial. A job may name a device by any of
//! them.
//!
//! | device | aliases |
//! |---|---|
//! | NVMe namespace | `nvme-pci-SSSS:BB:DD.F-nsN`, `nvme-SERIAL-nsN` |
//! | MegaRAID logical drive | `pci-SSSS:BB:DD.F-ldT` (T: the LD's target id) |
//!
//! A name is at most [`MAX_NAME_LEN`] printable ASCII characters (what a job's
//! `device=` accepts); an alias that would be longer is not made.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Longest device name a job can give (`device=`).
pub const MAX_NAME_LEN: usize = 32;

/// A PCI function's address as `SSSS:BB:DD.F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciLocation {
    pub segment: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl core::fmt::Display for PciLocation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.segment, self.bus, self.device, self.function
        )
    }
}

/// `serial` as a name part: surrounding spaces dropped, anything but ASCII
/// letters, digits, `.`, `_` and `-` turned into `_`. `None` when nothing is left
/// (QEMU and some drives report an empty or all-space serial).
pub fn serial_part(serial: &str) -> Option<String> {
    let trimmed = serial.trim_matches(|c: char| c == ' ' || c == '\0');
    if trimmed.is_empty() {
        return None;
    }
    Some(
        trimmed
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
    )
}

fn keep(name: String) -> Option<String> {
    (name.len() <= MAX_NAME_LEN).then_some(name)
}

/// Aliases of NVMe namespace `nsid` of the controller at `at` with serial `serial`.
pub fn nvme_aliases(at: PciLocation, serial: &str, nsid: u32) -> Vec<String> {
    let mut aliases = Vec::new();
    aliases.extend(keep(format!("nvme-pci-{at}-ns{nsid}")));
    if let Some(serial) = serial_part(serial) {
        aliases.extend(keep(format!("nvme-{serial}-ns{nsid}")));
    }
    aliases
}

/// Aliases of the MegaRAID logical drive with target id `target` on the controller at `at`.
pub fn raid_aliases(at: PciLocation, target: u8) -> Vec<String> {
    Vec::from_iter(keep(format!("pci-{at}-ld{target}")))
}

/// Drops every alias that more than one device claims, or that is another
/// device's primary name, so that a name never picks a device by chance (two
/// drives with the same serial). `devices` holds (primary name, aliases);
/// returns the aliases removed, each once.
pub fn remove_ambiguous(devices: &mut [(String, Vec<String>)]) -> Vec<String> {
    let mut removed: Vec<String> = Vec::new();
    for index in 0..devices.len() {
        for alias in &devices[index].1 {
            let claimed_elsewhere = devices
                .iter()
                .enumerate()
                .any(|(other, (name, aliases))| other != index && (name == alias || aliases.contains(alias)));
            if claimed_elsewhere && !removed.contains(alias) {
                removed.push(alias.clone());
            }
        }
    }
    for (_, aliases) in devices.iter_mut() {
        aliases.retain(|alias| !removed.contains(alias));
    }
    removed
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    const AT: PciLocation = PciLocation {
        segment: 0,
        bus: 0x41,
        device: 0,
        function: 0,
    };

    #[test]
    fn nvme_namespaces_are_named_by_address_and_serial() {
        assert_eq!(
            nvme_aliases(AT, "S4EWNX0R123456  ", 1),
            ["nvme-pci-0000:41:00.0-ns1", "nvme-S4EWNX0R123456-ns1"]
        );
        let other = PciLocation {
            segment: 0x12,
            bus: 0xc1,
            device: 0x1f,
            function: 7,
        };
        assert_eq!(nvme_aliases(other, "", 2), ["nvme-pci-0012:c1:1f.7-ns2"]);
        assert_eq!(nvme_aliases(AT, "   ", 1), ["nvme-pci-0000:41:00.0-ns1"]);
    }

    #[test]
    fn serials_become_printable_name_parts() {
        assert_eq!(serial_part("  AB 12/x\u{e9} "), Some("AB_12_x_".to_string()));
        assert_eq!(serial_part("deadbeef\0\0"), Some("deadbeef".to_string()));
        assert_eq!(serial_part(""), None);
    }

    #[test]
    fn names_too_long_for_a_job_are_not_made() {
        // 20-character serial (the NVMe maximum): "nvme-" + 20 + "-ns1" = 29.
        assert_eq!(nvme_aliases(AT, "ABCDEFGHIJKLMNOPQRST", 1).len(), 2);
        assert_eq!(
            nvme_aliases(AT, "ABCDEFGHIJKLMNOPQRST", 1_000_000),
            ["nvme-pci-0000:41:00.0-ns1000000"]
        );
        assert!(
            nvme_aliases(AT, "ABCDEFGHIJKLMNOPQRST", 1_000_000)
                .iter()
                .all(|a| a.len() <= MAX_NAME_LEN)
        );
    }

    #[test]
    fn raid_drives_are_named_by_address_and_target() {
        assert_eq!(raid_aliases(AT, 0), ["pci-0000:41:00.0-ld0"]);
        assert_eq!(raid_aliases(AT, 255), ["pci-0000:41:00.0-ld255"]);
    }

    #[test]
    fn aliases_claimed_twice_are_dropped_everywhere() {
        let a = nvme_aliases(AT, "same", 1);
        let b = nvme_aliases(PciLocation { bus: 0x42, ..AT }, "same", 1);
        let mut devices = vec![
            ("nvme0n1".to_string(), a),
            ("nvme1n1".to_string(), b),
            (
                "md0".to_string(),
                vec!["nvme0n1".to_string(), "pci-0000:43:00.0-ld0".to_string()],
            ),
        ];
        let removed = remove_ambiguous(&mut devices);
        assert_eq!(removed, ["nvme-same-ns1", "nvme0n1"]);
        assert_eq!(devices[0].1, ["nvme-pci-0000:41:00.0-ns1"]);
        assert_eq!(devices[1].1, ["nvme-pci-0000:42:00.0-ns1"]);
        assert_eq!(devices[2].1, ["pci-0000:43:00.0-ld0"]);
    }
}
