//! CPU-count decisions that do not touch hardware, host-tested:
//!
//! * how many of the CPUs the MADT lists are started ([`cpus_to_start`]:
//!   `cpus.max=` and the kernel's capacity);
//! * the boot report's CPU table, collapsed into runs so that a 256-CPU box
//!   prints a few lines ([`collapse`]);
//! * which CPUs a device interrupt can reach: without interrupt remapping an
//!   MSI, MSI-X or I/O APIC destination is 8 bits, so only APIC ids up to 255
//!   ([`interrupt_reachable`], [`reachable_cpu_for`]);
//! * the interrupt command register's encoding in both APIC modes
//!   ([`icr_x2apic`], [`icr_xapic`]);
//! * the watchdog's verdict: a CPU that stalled while others progressed is a
//!   hang, a stall that the detecting CPU saw on its own clock too is global
//!   ([`watchdog_verdict`]);
//! * the local APIC mode once the DMAR has been read: its x2APIC opt-out flag
//!   is honoured when it can be ([`apic_mode_after_dmar`]).

use alloc::vec::Vec;

/// The highest APIC id an 8-bit (xAPIC-format) interrupt destination can name.
pub const MAX_INTERRUPT_DESTINATION: u32 = 255;

/// How many CPUs to start, the boot CPU included: every listed one, but no
/// more than `max` (`cpus.max=`) and the kernel's `capacity`. At least one
/// (the boot CPU runs whatever the cap says).
pub fn cpus_to_start(listed: usize, max: Option<usize>, capacity: usize) -> usize {
    listed.min(max.unwrap_or(usize::MAX)).min(capacity).max(1)
}

/// The outcome of one listed CPU's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuState {
    /// Running its idle loop.
    Online,
    /// Sent INIT/SIPI but never came online: a fault of the box.
    Failed,
    /// Deliberately not started (`cpus.max=` or the kernel's capacity).
    NotStarted,
}

impl CpuState {
    /// The word in the CPU table.
    pub fn name(self) -> &'static str {
        match self {
            CpuState::Online => "online",
            CpuState::Failed => "FAILED",
            CpuState::NotStarted => "not started",
        }
    }
}

/// One row of the CPU table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuRow {
    pub index: usize,
    pub apic_id: u32,
    pub state: CpuState,
}

/// Consecutive rows collapsed: CPU indices `first..=last`, APIC ids
/// `first_apic_id..` rising by one per CPU, all in `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuRun {
    pub first: usize,
    pub last: usize,
    pub first_apic_id: u32,
    pub last_apic_id: u32,
    pub state: CpuState,
}

/// Collapses the CPU table into runs of rows whose index and APIC id both
/// rise by one and whose state is the same (a failed CPU stays its own line
/// unless its neighbours failed too).
pub fn collapse(rows: &[CpuRow]) -> Vec<CpuRun> {
    let mut runs: Vec<CpuRun> = Vec::new();
    for row in rows {
        if let Some(run) = runs.last_mut() {
            let continues = run.state == row.state
                && run.last.checked_add(1) == Some(row.index)
                && run.last_apic_id.checked_add(1) == Some(row.apic_id);
            if continues {
                run.last = row.index;
                run.last_apic_id = row.apic_id;
                continue;
            }
        }
        runs.push(CpuRun {
            first: row.index,
            last: row.index,
            first_apic_id: row.apic_id,
            last_apic_id: row.apic_id,
            state: row.state,
        });
    }
    runs
}

/// Whether a device interrupt can be aimed at this APIC id without
/// interrupt remapping.
pub fn interrupt_reachable(apic_id: u32) -> bool {
    apic_id <= MAX_INTERRUPT_DESTINATION
}

/// The CPU a device interrupt meant for `wanted` is aimed at.
///
/// `apic_ids[c]` is CPU c's APIC id; `candidates` are the CPUs that would
/// serve the interrupt equally well (those that submit to the vector's
/// queue), in order of preference, `wanted` first. The first reachable one
/// wins; when none is reachable, a reachable CPU chosen by `spread` (e.g.
/// the vector's index) among all reachable CPUs, so that the vectors of CPUs
/// with high APIC ids are spread over the reachable ones. Their completions
/// then reach the submitting CPU through the block layer's per-CPU
/// completion lists. `None` when no CPU at all is reachable.
pub fn reachable_cpu_for(wanted: usize, candidates: &[usize], apic_ids: &[u32], spread: usize) -> Option<usize> {
    let reachable = |cpu: &usize| apic_ids.get(*cpu).is_some_and(|&id| interrupt_reachable(id));
    if reachable(&wanted) {
        return Some(wanted);
    }
    if let Some(&cpu) = candidates.iter().find(|c| reachable(c)) {
        return Some(cpu);
    }
    let all: Vec<usize> = (0..apic_ids.len()).filter(reachable).collect();
    (!all.is_empty()).then(|| all[spread % all.len()])
}

/// The 64-bit x2APIC ICR value (MSR 0x830): the destination's full 32-bit
/// APIC id in the high half, the command (vector, delivery mode, level,
/// shorthand) in the low half.
pub fn icr_x2apic(apic_id: u32, command: u32) -> u64 {
    (u64::from(apic_id) << 32) | u64::from(command)
}

/// The xAPIC ICR as (high register, low register): the 8-bit destination in
/// bits 31:24 of the high register. `None` for an APIC id above 255, which
/// xAPIC mode cannot address.
pub fn icr_xapic(apic_id: u32, command: u32) -> Option<(u32, u32)> {
    interrupt_reachable(apic_id).then_some((apic_id << 24, command))
}

/// The local APIC mode chosen after the DMAR was read, with why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApicModeChoice {
    /// Use (or keep) x2APIC mode.
    X2apic(&'static str),
    /// Use (or go back to) xAPIC mode.
    Xapic(&'static str),
}

impl ApicModeChoice {
    /// Whether the choice is x2APIC mode.
    pub fn is_x2apic(self) -> bool {
        matches!(self, Self::X2apic(_))
    }

    /// Why this mode was chosen, for the boot report.
    pub fn reason(self) -> &'static str {
        match self {
            Self::X2apic(reason) | Self::Xapic(reason) => reason,
        }
    }
}

/// Honours the DMAR's x2APIC opt-out flag where it can be honoured: firmware
/// sets it when its own code (SMM handlers, interrupt remapping set up for
/// xAPIC) expects the OS to stay in xAPIC mode. It cannot be honoured when
/// the CPU has no xAPIC path back (firmware already switched it to x2APIC:
/// leaving x2APIC needs a full APIC disable firmware did not plan for) or
/// when a CPU's APIC id above 255 can only be addressed in x2APIC mode.
pub fn apic_mode_after_dmar(
    cpu_has_x2apic: bool,
    firmware_left_x2apic: bool,
    dmar_x2apic_opt_out: bool,
    highest_apic_id: u32,
) -> ApicModeChoice {
    if !cpu_has_x2apic {
        return ApicModeChoice::Xapic("the CPU has no x2APIC");
    }
    if !dmar_x2apic_opt_out {
        return ApicModeChoice::X2apic("the CPU has x2APIC and the DMAR does not opt out");
    }
    if firmware_left_x2apic {
        return ApicModeChoice::X2apic("the DMAR opts out of x2APIC, but firmware left the CPU in x2APIC mode");
    }
    if highest_apic_id > MAX_INTERRUPT_DESTINATION {
        return ApicModeChoice::X2apic(
            "the DMAR opts out of x2APIC, but a CPU has an APIC id above 255 that only x2APIC can reach",
        );
    }
    ApicModeChoice::Xapic("the DMAR opts out of x2APIC and firmware left the APIC in xAPIC mode")
}

/// What the watchdog concludes on one CPU's tick about another CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogVerdict {
    /// Nothing to report.
    Fine,
    /// The detecting CPU's own tick came `ms` late too: every CPU stood
    /// still (the host blocked all vCPUs, an SMI, a paused VM). Not a hang.
    GlobalStall { ms: u64 },
    /// The other CPU handled no tick for `ms` while this one progressed.
    Hang { ms: u64 },
}

/// The watchdog's decision, on a CPU that handles its tick at `now_ns`:
///
/// * `own_previous_tick_ns`: when this CPU handled its previous tick. A gap
///   above `threshold_ns` means this CPU stood still as long: a global stall.
/// * `other_last_tick_ns`: the other CPU's heartbeat.
/// * `last_global_stall_ns`: when a global stall was last reported (0: never);
///   a CPU's silence counts from then at the earliest, so CPUs that resume a
///   little later than the detector are not blamed for the stall itself.
///
/// A threshold of 0 (watchdog off) is always [`WatchdogVerdict::Fine`].
pub fn watchdog_verdict(
    now_ns: u64,
    own_previous_tick_ns: u64,
    other_last_tick_ns: u64,
    last_global_stall_ns: u64,
    threshold_ns: u64,
) -> WatchdogVerdict {
    if threshold_ns == 0 {
        return WatchdogVerdict::Fine;
    }
    let own_gap = now_ns.saturating_sub(own_previous_tick_ns);
    if own_gap > threshold_ns {
        return WatchdogVerdict::GlobalStall {
            ms: own_gap / 1_000_000,
        };
    }
    let silent = now_ns.saturating_sub(other_last_tick_ns.max(last_global_stall_ns));
    if silent > threshold_ns {
        WatchdogVerdict::Hang { ms: silent / 1_000_000 }
    } else {
        WatchdogVerdict::Fine
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn start_count_honours_cap_and_capacity() {
        assert_eq!(cpus_to_start(255, None, 1024), 255);
        assert_eq!(cpus_to_start(255, Some(64), 1024), 64);
        assert_eq!(cpus_to_start(2048, None, 1024), 1024);
        assert_eq!(cpus_to_start(4, Some(16), 1024), 4);
        assert_eq!(cpus_to_start(0, None, 1024), 1);
    }

    fn row(index: usize, apic_id: u32, state: CpuState) -> CpuRow {
        CpuRow { index, apic_id, state }
    }

    #[test]
    fn collapse_joins_consecutive_rows_and_splits_on_gaps_and_states() {
        let mut rows: Vec<CpuRow> = (0..200).map(|i| row(i, i as u32, CpuState::Online)).collect();
        rows[100].state = CpuState::Failed;
        // Sparse APIC ids (a second socket starting at 256).
        rows.extend((200..210).map(|i| row(i, 256 + (i as u32 - 200) * 2, CpuState::Online)));
        rows.extend((210..255).map(|i| row(i, 300 + i as u32, CpuState::NotStarted)));
        let runs = collapse(&rows);
        assert_eq!(runs.len(), 3 + 10 + 1);
        assert_eq!(
            runs[0],
            CpuRun {
                first: 0,
                last: 99,
                first_apic_id: 0,
                last_apic_id: 99,
                state: CpuState::Online
            }
        );
        assert_eq!(
            (runs[1].first, runs[1].last, runs[1].state),
            (100, 100, CpuState::Failed)
        );
        assert_eq!((runs[2].first, runs[2].last, runs[2].last_apic_id), (101, 199, 199));
        // Ids that step by two never join.
        assert!(runs[3..13].iter().all(|r| r.first == r.last));
        let last = runs.last().unwrap();
        assert_eq!((last.first, last.last, last.state), (210, 254, CpuState::NotStarted));
        assert_eq!((last.first_apic_id, last.last_apic_id), (510, 554));
        assert!(collapse(&[]).is_empty());
    }

    #[test]
    fn device_interrupts_go_only_to_reachable_cpus() {
        // CPUs 0-3 on socket 0 (ids 0-3), CPUs 4-7 on socket 1 (ids 256-259).
        let ids = [0, 1, 2, 3, 256, 257, 258, 259];
        assert_eq!(reachable_cpu_for(2, &[2], &ids, 0), Some(2));
        // Wanted CPU unreachable, another CPU of the same queue is.
        assert_eq!(reachable_cpu_for(4, &[4, 5, 1], &ids, 0), Some(1));
        // No CPU of the queue is reachable: spread over CPUs 0-3.
        let picks: Vec<usize> = (0..8)
            .map(|v| reachable_cpu_for(4 + v % 4, &[4 + v % 4], &ids, v).unwrap())
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        assert!(picks.iter().all(|&c| interrupt_reachable(ids[c])));
        // Nothing reachable at all (every id above 255).
        assert_eq!(reachable_cpu_for(0, &[0, 1], &[300, 301], 0), None);
        // A CPU index outside the table is never chosen.
        assert_eq!(reachable_cpu_for(9, &[9], &ids, 1), Some(1));
        assert!(interrupt_reachable(255) && !interrupt_reachable(256));
    }

    #[test]
    fn icr_encodings() {
        // Fixed delivery of vector 0xF0 to APIC id 0x1_0203: the id fills the high 32 bits.
        assert_eq!(icr_x2apic(0x1_0203, 0xF0), 0x0001_0203_0000_00F0);
        assert_eq!(icr_x2apic(256, 0x4000 | 0x22), (256u64 << 32) | 0x4022);
        assert_eq!(icr_xapic(0xAB, 0xF0), Some((0xAB00_0000, 0xF0)));
        assert_eq!(icr_xapic(255, 0x400), Some((0xFF00_0000, 0x400)));
        assert_eq!(icr_xapic(256, 0xF0), None);
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn watchdog_tells_a_hang_from_a_global_stall() {
        let threshold = 5000 * MS;
        let now = 100_000 * MS;
        // This CPU ticked 10 ms ago; the other has been silent 6 s: a hang.
        assert_eq!(
            watchdog_verdict(now, now - 10 * MS, now - 6000 * MS, 0, threshold),
            WatchdogVerdict::Hang { ms: 6000 }
        );
        // This CPU's own previous tick is 9974 ms old too: every CPU stood still.
        assert_eq!(
            watchdog_verdict(now, now - 9974 * MS, now - 9980 * MS, 0, threshold),
            WatchdogVerdict::GlobalStall { ms: 9974 }
        );
        // Right after a global stall was reported, a CPU still catching up is not blamed.
        assert_eq!(
            watchdog_verdict(now, now - 10 * MS, now - 9990 * MS, now - 20 * MS, threshold),
            WatchdogVerdict::Fine
        );
        // ... but one that stays silent for the threshold after it is.
        assert_eq!(
            watchdog_verdict(now, now - 10 * MS, now - 20_000 * MS, now - 5001 * MS, threshold),
            WatchdogVerdict::Hang { ms: 5001 }
        );
        // At the threshold exactly: fine; watchdog off: always fine.
        assert_eq!(
            watchdog_verdict(now, now - 10 * MS, now - 5000 * MS, 0, threshold),
            WatchdogVerdict::Fine
        );
        assert_eq!(watchdog_verdict(now, 0, 0, 0, 0), WatchdogVerdict::Fine);
        // A heartbeat in the future (stored after `now` was read) is not a stall.
        assert_eq!(
            watchdog_verdict(now, now, now + MS, 0, threshold),
            WatchdogVerdict::Fine
        );
    }

    #[test]
    fn dmar_opt_out_keeps_xapic_only_when_it_can() {
        let choice = apic_mode_after_dmar(true, false, true, 3);
        assert!(!choice.is_x2apic());
        assert!(choice.reason().contains("opts out"));
        // No opt-out: x2APIC whenever the CPU has it.
        assert!(apic_mode_after_dmar(true, false, false, 3).is_x2apic());
        // Firmware already in x2APIC mode: stay there.
        let choice = apic_mode_after_dmar(true, true, true, 3);
        assert!(choice.is_x2apic());
        assert!(choice.reason().contains("firmware left the CPU in x2APIC"));
        // An APIC id of 256 is reachable only in x2APIC mode; 255 still is in xAPIC.
        assert!(apic_mode_after_dmar(true, false, true, 256).is_x2apic());
        assert!(!apic_mode_after_dmar(true, false, true, 255).is_x2apic());
        // No x2APIC in the CPU: xAPIC whatever the DMAR says.
        assert!(!apic_mode_after_dmar(false, false, false, 3).is_x2apic());
        assert!(!apic_mode_after_dmar(false, false, true, 300).is_x2apic());
    }
}
