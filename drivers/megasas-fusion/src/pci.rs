//! Every Fusion PCI id Linux's `megaraid_sas` and FreeBSD's `mrsas` list, with the ones they
//! refuse.

use crate::regs::Generation;

/// LSI / Broadcom PCI vendor id.
pub const VENDOR_LSI: u16 = 0x1000;

/// What the driver does with a PCI function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PciMatch {
    /// A Fusion controller of this generation; `name` is its lspci name.
    Supported {
        /// Generation.
        generation: Generation,
        /// Marketing / lspci name.
        name: &'static str,
    },
    /// A Fusion id that Linux and FreeBSD refuse to attach; `reason` says why (print it).
    Refused {
        /// Generation the id belongs to.
        generation: Generation,
        /// The refusal message.
        reason: &'static str,
    },
    /// Not a Fusion controller.
    NotFusion,
}

const REFUSED_AERO: &str = "unsupported MegaRAID SAS39xx/38xx variant (invalid or tampered secure part); Linux and FreeBSD refuse to attach it";

/// The table: (device id, generation, lspci name, refusal).
pub const FUSION_IDS: &[(u16, Generation, &str, Option<&str>)] = &[
    (0x005B, Generation::Thunderbolt, "SAS2208 [Thunderbolt]", None),
    (0x002F, Generation::Thunderbolt, "SAS2208 IOV (SR-IOV VF)", None),
    (0x005D, Generation::Invader, "SAS3108 [Invader]", None),
    (0x005F, Generation::Invader, "SAS3008 [Fury]", None),
    (0x00CE, Generation::Invader, "SAS3316 [Intruder]", None),
    (0x00CF, Generation::Invader, "SAS3324 [Intruder]", None),
    (0x0052, Generation::Invader, "SAS3216 [Cutlass]", None),
    (0x0053, Generation::Invader, "SAS3224 [Cutlass]", None),
    (0x0014, Generation::Ventura, "SAS3516 [Ventura]", None),
    (0x0015, Generation::Ventura, "SAS3416 [Crusader]", None),
    (0x0016, Generation::Ventura, "SAS3508 [Harpoon]", None),
    (0x0017, Generation::Ventura, "SAS3408 [Tomcat]", None),
    (0x001B, Generation::Ventura, "SAS3504 [Ventura 4-port]", None),
    (0x001C, Generation::Ventura, "SAS3404 [Crusader 4-port]", None),
    (0x10E1, Generation::Aero, "SAS39xx (configurable secure)", None),
    (0x10E2, Generation::Aero, "SAS39xx (hard secure)", None),
    (0x10E5, Generation::Aero, "SAS38xx (configurable secure)", None),
    (0x10E6, Generation::Aero, "SAS38xx (hard secure)", None),
    (0x10E0, Generation::Aero, "SAS39xx (invalid)", Some(REFUSED_AERO)),
    (0x10E3, Generation::Aero, "SAS39xx (tampered)", Some(REFUSED_AERO)),
    (0x10E4, Generation::Aero, "SAS38xx (invalid)", Some(REFUSED_AERO)),
    (0x10E7, Generation::Aero, "SAS38xx (tampered)", Some(REFUSED_AERO)),
];

/// Classifies a PCI function by vendor and device id. Pure; the kernel's probe calls it.
pub fn match_pci(vendor: u16, device: u16) -> PciMatch {
    if vendor != VENDOR_LSI {
        return PciMatch::NotFusion;
    }
    match FUSION_IDS.iter().find(|e| e.0 == device) {
        Some(&(_, generation, name, None)) => PciMatch::Supported { generation, name },
        Some(&(_, generation, _, Some(reason))) => PciMatch::Refused { generation, reason },
        None => PciMatch::NotFusion,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_id_is_classified_and_refusals_carry_a_message() {
        assert_eq!(FUSION_IDS.len(), 22);
        let supported = FUSION_IDS.iter().filter(|e| e.3.is_none()).count();
        assert_eq!(supported, 18);
        assert!(matches!(
            match_pci(0x1000, 0x10E2),
            PciMatch::Supported {
                generation: Generation::Aero,
                ..
            }
        ));
        assert!(matches!(
            match_pci(0x1000, 0x005D),
            PciMatch::Supported {
                generation: Generation::Invader,
                ..
            }
        ));
        assert!(matches!(
            match_pci(0x1000, 0x0016),
            PciMatch::Supported {
                generation: Generation::Ventura,
                ..
            }
        ));
        for refused in [0x10E0, 0x10E3, 0x10E4, 0x10E7] {
            match match_pci(0x1000, refused) {
                PciMatch::Refused { reason, .. } => assert!(reason.contains("refuse")),
                other => panic!("{refused:#x}: {other:?}"),
            }
        }
        // MFI parts (QEMU's megasas, megasas-gen2) and other vendors are not Fusion.
        assert_eq!(match_pci(0x1000, 0x0060), PciMatch::NotFusion);
        assert_eq!(match_pci(0x1000, 0x0079), PciMatch::NotFusion);
        assert_eq!(match_pci(0x8086, 0x005D), PciMatch::NotFusion);
        // No id twice.
        for (i, a) in FUSION_IDS.iter().enumerate() {
            assert!(FUSION_IDS[i + 1..].iter().all(|b| b.0 != a.0), "{:#x} twice", a.0);
        }
    }
}
