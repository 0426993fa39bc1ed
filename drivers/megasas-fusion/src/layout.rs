//! The reply-queue layout: latency mode, or balanced mode with high-IOPS queues.
//!
//! Linux's `megaraid_sas` (`megasas_init_fw`) puts a controller in **balanced** mode when its
//! firmware offers interrupt coalescing (SP1 bit 26), the host has at least 8 CPUs and the
//! firmware offers all 128 reply queues; on Aero also only when the PCIe link runs at 16 GT/s or
//! more. Reply queues 0-7 are then **high-IOPS** queues, whose interrupts the firmware coalesces
//! (IOC INIT's `replyqueue_mask` names them, one bit per group of 8), and one **latency** queue
//! per CPU follows them. An I/O goes to its CPU's latency queue while its device has few
//! requests outstanding; once the device has more than 8 per data arm outstanding, I/Os go to the
//! high-IOPS queues in batches of 16 (`megasas_get_msix_index`), where one coalesced interrupt
//! completes many. Otherwise the controller is in **latency** mode: one queue per CPU, each
//! interrupt at once. Linux's third layout, **IOPS** (`MR_IOPS_PERF_MODE`), keeps latency mode's
//! queues but has the firmware coalesce the interrupts of every whole group of 8 of them
//! (`replyqueue_mask` = one bit per whole group of the vectors); Linux's rule never picks it, only
//! its `perf_mode` option does, here `megasas.perf_mode=iops`.
//!
//! This module is the decision alone (host-tested); the kernel calls [`plan`] before it asks
//! for MSI-X vectors, and bring-up checks the plan again against SP1 once the firmware is READY.

use crate::regs::{FwState, FwStatus, Generation, SP0_MSIX_CAPABLE, Sp1};

/// High-IOPS reply queues in balanced mode (Linux's `MR_HIGH_IOPS_QUEUE_COUNT`).
pub const HIGH_IOPS_QUEUES: u16 = 8;
/// A device goes to the high-IOPS queues with more than this many requests outstanding per data
/// arm (Linux's `MR_DEVICE_HIGH_IOPS_DEPTH`).
pub const HIGH_IOPS_DEPTH_PER_ARM: u32 = 8;
/// Consecutive high-IOPS I/Os sent to one high-IOPS queue before the next
/// (Linux's `MR_HIGH_IOPS_BATCH_COUNT`).
pub const HIGH_IOPS_BATCH: u64 = 16;
/// Fewest online CPUs for balanced mode by default.
pub const BALANCED_MIN_CPUS: usize = 8;
/// The firmware reply-queue count balanced mode needs by default (all of them).
pub const BALANCED_FW_QUEUES: u16 = 128;
/// PCIe current link speed code for 16 GT/s (LNKSTA bits 3:0); an Aero below it stays in
/// latency mode.
pub const LINK_16GT: u8 = 4;

/// The two layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfMode {
    /// High-IOPS queues with coalesced interrupts, then one latency queue per CPU.
    Balanced,
    /// One reply queue per CPU, the interrupts of every whole group of 8 queues coalesced.
    Iops,
    /// One reply queue per CPU, every interrupt at once.
    Latency,
}

/// What the kernel asks for and what bring-up uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePlan {
    /// The layout.
    pub mode: PerfMode,
    /// Reply queues 0..`high_iops_queues` are high-IOPS queues (0 in latency mode).
    pub high_iops_queues: u16,
    /// MSI-X vectors to ask for (one per reply queue): the high-IOPS queues' first, then one
    /// per CPU.
    pub vectors: usize,
    /// Why this mode, for the console.
    pub reason: &'static str,
}

/// What [`plan`] decides from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanInput {
    /// The controller's generation.
    pub generation: Generation,
    /// SP0 read before bring-up.
    pub sp0: u32,
    /// SP1 read before bring-up.
    pub sp1: u32,
    /// Online CPUs.
    pub cpus: usize,
    /// MSI-X table entries (0: no MSI-X).
    pub msix_table: usize,
    /// The PCIe link's current speed code (LNKSTA bits 3:0); None where the function has no
    /// link registers (Linux then reads 0).
    pub link_speed: Option<u8>,
    /// `megasas.perf_mode`, if given.
    pub requested: Option<PerfMode>,
    /// `megasas.queues` (0: no cap), a cap on every reply queue, high-IOPS ones included.
    pub max_queues: u16,
}

/// Decides the layout as Linux 6.1 does, with `requested` (`megasas.perf_mode`) overriding the
/// default on every generation (Linux honours its `perf_mode` option on Aero only). Balanced mode
/// always needs the firmware's coalescing (SP1 bit 26) and room for the high-IOPS queues and at
/// least one latency queue (firmware queues, MSI-X table and `megasas.queues`). SP0 and SP1 are
/// trusted only from a settled READY or OPERATIONAL firmware: a firmware still booting gets
/// latency mode.
pub fn plan(input: &PlanInput) -> QueuePlan {
    let latency = |reason| QueuePlan {
        mode: PerfMode::Latency,
        high_iops_queues: 0,
        vectors: input.msix_table.min(input.cpus),
        reason,
    };
    let settled = matches!(FwStatus(input.sp0).state(), FwState::Ready | FwState::Operational);
    if !settled {
        return latency("firmware not READY before bring-up: its scratch pads are not read");
    }
    if input.sp0 & SP0_MSIX_CAPABLE == 0 || input.msix_table == 0 {
        return latency("no MSI-X");
    }
    let sp1 = Sp1(input.sp1);
    let fw_queues = sp1.fw_queues(input.generation).min(input.generation.max_queues());
    let coalescing = sp1.intr_coalescing();
    let by_default = if !coalescing {
        Err("the firmware offers no interrupt coalescing (SP1 bit 26)")
    } else if input.cpus < BALANCED_MIN_CPUS {
        Err("fewer than 8 CPUs")
    } else if fw_queues != BALANCED_FW_QUEUES {
        Err("the firmware offers fewer than 128 reply queues")
    } else if input.generation == Generation::Aero && input.link_speed.unwrap_or(0) < LINK_16GT {
        Err("an Aero on a PCIe link below 16 GT/s")
    } else {
        Ok("interrupt coalescing, 8 or more CPUs and 128 firmware queues")
    };
    let chosen = match (input.requested, by_default) {
        (Some(PerfMode::Latency), _) => return latency("megasas.perf_mode=latency"),
        (Some(PerfMode::Iops), _) if !coalescing => {
            return latency("megasas.perf_mode=iops, but the firmware offers no interrupt coalescing");
        }
        (Some(PerfMode::Iops), _) => {
            return QueuePlan {
                mode: PerfMode::Iops,
                ..latency("megasas.perf_mode=iops")
            };
        }
        (Some(PerfMode::Balanced), _) if !coalescing => {
            return latency("megasas.perf_mode=balanced, but the firmware offers no interrupt coalescing");
        }
        (Some(PerfMode::Balanced), _) => "megasas.perf_mode=balanced",
        (None, Ok(why)) => why,
        (None, Err(why)) => return latency(why),
    };
    let mut room = fw_queues.min(u16::try_from(input.msix_table).unwrap_or(u16::MAX));
    if input.max_queues > 0 {
        room = room.min(input.max_queues);
    }
    if room <= HIGH_IOPS_QUEUES {
        return latency(
            "no room for 8 high-IOPS queues and a latency queue (firmware queues, MSI-X table or megasas.queues)",
        );
    }
    let latency_queues = input.cpus.max(1).min(usize::from(room - HIGH_IOPS_QUEUES));
    QueuePlan {
        mode: PerfMode::Balanced,
        high_iops_queues: HIGH_IOPS_QUEUES,
        vectors: usize::from(HIGH_IOPS_QUEUES) + latency_queues,
        reason: chosen,
    }
}

/// Whether Linux treats the controller's PCIe link as the bottleneck for RAID-1 writes
/// (`fusion->pcie_bw_limitation`, `megasas_init_fw`): every Ventura (a PCIe 3 part), and an Aero
/// whose link runs below 16 GT/s (no link registers counts as slower, as Linux reads 0). Such a
/// controller gets RAID-1 writes over 32 KiB on the LD path, marked for the firmware, and the
/// next few small ones after them too ([`crate::Config::pcie_bw_limited`]).
pub fn pcie_bw_limited(generation: Generation, link_speed: Option<u8>) -> bool {
    match generation {
        Generation::Ventura => true,
        Generation::Aero => link_speed.unwrap_or(0) < LINK_16GT,
        Generation::Thunderbolt | Generation::Invader => false,
    }
}

/// IOC INIT's `replyqueue_mask` for `coalesced` queues from queue 0 on: one bit per whole group
/// of 8 (a partial group stays uncoalesced, as Linux's mask of `msix_vectors / 8` groups).
pub const fn replyqueue_mask(coalesced: u16) -> u16 {
    let groups = coalesced / 8;
    if groups >= 16 { u16::MAX } else { (1u16 << groups) - 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// READY, MSI-X, 256 commands.
    const SP0: u32 = 0xB400_0100;
    /// 128 queues, interrupt coalescing.
    const SP1_128_COALESCING: u32 = (127 << 14) | (1 << 26);

    fn input(generation: Generation, sp1: u32, cpus: usize) -> PlanInput {
        PlanInput {
            generation,
            sp0: SP0,
            sp1,
            cpus,
            msix_table: 128,
            link_speed: Some(LINK_16GT),
            requested: None,
            max_queues: 0,
        }
    }

    #[test]
    fn balanced_needs_coalescing_eight_cpus_and_all_128_queues() {
        let p = plan(&input(Generation::Ventura, SP1_128_COALESCING, 8));
        assert_eq!((p.mode, p.high_iops_queues, p.vectors), (PerfMode::Balanced, 8, 16));
        let p = plan(&input(Generation::Invader, SP1_128_COALESCING, 64));
        assert_eq!((p.mode, p.vectors), (PerfMode::Balanced, 72));
        // 128 queues cap the latency queues at 120 on a big box (Linux's 120 hw queues).
        let p = plan(&input(Generation::Aero, SP1_128_COALESCING, 192));
        assert_eq!((p.mode, p.vectors), (PerfMode::Balanced, 128));
        for (sp1, cpus, why) in [
            (127 << 14, 8, "no interrupt coalescing"),
            (SP1_128_COALESCING, 7, "fewer than 8 CPUs"),
            ((126 << 14) | (1 << 26), 8, "fewer than 128"),
        ] {
            let p = plan(&input(Generation::Ventura, sp1, cpus));
            assert_eq!((p.mode, p.high_iops_queues, p.vectors), (PerfMode::Latency, 0, cpus));
            assert!(p.reason.contains(why), "{}", p.reason);
        }
    }

    #[test]
    fn an_aero_below_16_gts_or_without_link_registers_stays_in_latency_mode() {
        for link in [None, Some(3)] {
            let p = plan(&PlanInput {
                link_speed: link,
                ..input(Generation::Aero, SP1_128_COALESCING, 8)
            });
            assert_eq!(p.mode, PerfMode::Latency, "{link:?}");
        }
        // Only Aero looks at the link.
        let p = plan(&PlanInput {
            link_speed: None,
            ..input(Generation::Ventura, SP1_128_COALESCING, 8)
        });
        assert_eq!(p.mode, PerfMode::Balanced);
    }

    #[test]
    fn the_override_chooses_either_mode_but_balanced_only_with_coalescing_and_room() {
        let forced = |sp1, cpus, requested, max_queues| {
            plan(&PlanInput {
                requested: Some(requested),
                max_queues,
                link_speed: None,
                ..input(Generation::Aero, sp1, cpus)
            })
        };
        let p = forced(SP1_128_COALESCING, 2, PerfMode::Balanced, 0);
        assert_eq!((p.mode, p.vectors), (PerfMode::Balanced, 10));
        let p = forced(SP1_128_COALESCING, 16, PerfMode::Latency, 0);
        assert_eq!((p.mode, p.vectors), (PerfMode::Latency, 16));
        let p = forced(127 << 14, 16, PerfMode::Balanced, 0);
        assert_eq!(p.mode, PerfMode::Latency);
        let p = forced(SP1_128_COALESCING, 16, PerfMode::Balanced, 8);
        assert_eq!(p.mode, PerfMode::Latency, "megasas.queues=8 leaves no latency queue");
        let p = forced(SP1_128_COALESCING, 16, PerfMode::Balanced, 12);
        assert_eq!((p.mode, p.vectors), (PerfMode::Balanced, 12));
        // 16 firmware queues: room for 8 latency queues.
        let p = forced((15 << 14) | (1 << 26), 16, PerfMode::Balanced, 0);
        assert_eq!((p.mode, p.vectors), (PerfMode::Balanced, 16));
    }

    #[test]
    fn scratch_pads_of_a_firmware_still_booting_or_without_msix_give_latency_mode() {
        let booting = PlanInput {
            sp0: 0x4400_0100,
            ..input(Generation::Ventura, SP1_128_COALESCING, 8)
        };
        assert_eq!(plan(&booting).mode, PerfMode::Latency);
        let no_msix = PlanInput {
            msix_table: 0,
            ..input(Generation::Ventura, SP1_128_COALESCING, 8)
        };
        assert_eq!((plan(&no_msix).mode, plan(&no_msix).vectors), (PerfMode::Latency, 0));
    }

    #[test]
    fn the_mask_has_a_bit_per_group_of_eight() {
        assert_eq!(replyqueue_mask(0), 0);
        assert_eq!(replyqueue_mask(8), 1);
        assert_eq!(replyqueue_mask(16), 3);
        assert_eq!(replyqueue_mask(128), 0xFFFF);
        // Whole groups only: 3 or 7 queues coalesce none, 17 the first two groups.
        assert_eq!(replyqueue_mask(3), 0);
        assert_eq!(replyqueue_mask(7), 0);
        assert_eq!(replyqueue_mask(17), 3);
    }

    #[test]
    fn the_pcie_bandwidth_limit_is_every_ventura_and_an_aero_below_16_gts() {
        assert!(pcie_bw_limited(Generation::Ventura, Some(LINK_16GT)));
        assert!(pcie_bw_limited(Generation::Ventura, None));
        assert!(pcie_bw_limited(Generation::Aero, Some(3)));
        assert!(pcie_bw_limited(Generation::Aero, None));
        assert!(!pcie_bw_limited(Generation::Aero, Some(LINK_16GT)));
        assert!(!pcie_bw_limited(Generation::Invader, Some(1)));
        assert!(!pcie_bw_limited(Generation::Thunderbolt, None));
    }

    #[test]
    fn iops_mode_is_chosen_only_by_the_override_and_keeps_one_queue_per_cpu() {
        for cpus in [2, 8, 20] {
            // Linux's rule picks balanced or latency, never IOPS.
            let p = plan(&input(Generation::Aero, SP1_128_COALESCING, cpus));
            assert_ne!(p.mode, PerfMode::Iops);
            let p = plan(&PlanInput {
                requested: Some(PerfMode::Iops),
                ..input(Generation::Ventura, SP1_128_COALESCING, cpus)
            });
            assert_eq!((p.mode, p.high_iops_queues, p.vectors), (PerfMode::Iops, 0, cpus));
            assert_eq!(p.reason, "megasas.perf_mode=iops");
        }
        // Without the firmware's coalescing there is nothing to coalesce: latency.
        let p = plan(&PlanInput {
            requested: Some(PerfMode::Iops),
            ..input(Generation::Aero, 127 << 14, 8)
        });
        assert_eq!((p.mode, p.vectors), (PerfMode::Latency, 8));
        assert!(p.reason.contains("no interrupt coalescing"), "{}", p.reason);
    }
}
