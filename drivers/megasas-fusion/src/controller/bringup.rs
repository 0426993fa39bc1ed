//! Bring-up: the READY transition from whatever state the firmware is in (handshake doorbells,
//! the diag reset on a resettable FAULT), the limits read from the scratch pads, the memory, IOC
//! INIT, and interrupt masking.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering, fence};

use crate::Mmio64;
use devhal::{Delay, Dma};
use megasas::dcmd::ControllerInfo;
use spin::Mutex;

use drvkit::gate::Gate;

use crate::diag::Report;
use crate::error::{Error, Sp0};
use crate::mem::alloc_low;
use crate::raidmap;
use crate::regs::{self, FwState, FwStatus, Generation, Sp1};

use super::mapsync::{FastPathTables, MapSync};
use super::{
    Budget, Config, Controller, DCMD_DATA_LEN, DCMD_SMIDS, FRAME_SIZE, MAX_FW_CMDS_CAP, MFI_FRAME_LEN, Memory, Mistake,
    ReplyQueue, ReplyRings, SENSE_SIZE, SmidState, Stats, desc, read_reg, wait,
};
use devhal::DmaBuf;

/// Largest SGE count per request the driver uses.
const MAX_SGE_CAP: u16 = 256;
/// Offset of the IOC INIT request inside the init region (after the 256-aligned MFI frame).
const INIT_REQUEST_OFF: usize = 0x100;
/// How long after IOC INIT's cmd_status 0 the driver waits for SP0 to show OPERATIONAL.
const OPERATIONAL_WAIT_US: u64 = 10_000_000;
/// IOC INIT MsgFlags bit 0: ReplyDescriptorPostQueueAddress points to an RDPQ array.
const IOC_INIT_RDPQ: u8 = 0x01;
/// Bytes per RDPQ array entry (u64 ring base, two reserved dwords).
const RDPQ_ENTRY: usize = 16;
/// Entries in the RDPQ array (the firmware's most reply queues).
const RDPQ_ENTRIES: usize = 128;
const FOUR_GIB: u64 = 1 << 32;

/// Limits derived from the scratch pads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// SP0[15:0].
    pub raw_fw_cmds: u16,
    /// SMIDs 1..=max_fw_cmds exist.
    pub max_fw_cmds: u16,
    /// I/O tags (SMIDs 1..=io_tags); the top [`DCMD_SMIDS`] SMIDs carry DCMDs.
    pub io_tags: u16,
    /// Reply descriptors per queue.
    pub reply_depth: u32,
    /// Reply queues the firmware offers.
    pub fw_queues: u16,
    /// Reply queues in use.
    pub queues: u16,
    /// HostMSIxVectors given to IOC INIT.
    pub host_msix_vectors: u8,
    /// Combined (supplementary host index) mode.
    pub combined: bool,
    /// Firmware chain frame size in bytes.
    pub chain_bytes: u32,
    /// SGEs per request.
    pub max_sge: u16,
    /// SP0 bit 26.
    pub msix_capable: bool,
    /// SP1 bit 24 (FW handles SYNCHRONIZE CACHE).
    pub fw_sync_cache: bool,
    /// SP1 bit 23 (RDPQ supported).
    pub rdpq_supported: bool,
    /// RDPQ in use: offered by SP1 bit 23 and not turned off (`megasas.rdpq=off`).
    pub rdpq: bool,
    /// SP1 bit 25 (64-bit control addresses accepted; not used: all control memory is below 4 GiB).
    pub ctrl64: bool,
    /// SP1 bit 26 (the firmware coalesces the interrupts of the queues IOC INIT names).
    pub coalescing: bool,
    /// Reply queues 0..n are high-IOPS queues (balanced mode; 0: latency and IOPS modes).
    pub high_iops_queues: u16,
    /// Reply queues 0..n whose interrupts the firmware coalesces (IOC INIT's `replyqueue_mask`):
    /// the high-IOPS queues in balanced mode, every whole group of 8 in IOPS mode, none in
    /// latency mode.
    pub coalesced_queues: u16,
}

impl Limits {
    /// Derives the limits from SP0/SP1 for `generation` with `vectors` MSI-X vectors granted.
    pub fn from_scratch_pads(
        generation: Generation,
        sp0: u32,
        sp1: u32,
        vectors: usize,
        cap: u16,
        want_rdpq: bool,
    ) -> Result<Self, Error> {
        let raw = (sp0 & 0xFFFF) as u16;
        if raw < DCMD_SMIDS + 3 {
            return Err(Error::Limits {
                what: "SP0 max commands",
                value: u64::from(raw),
                expected: "at least 7",
            });
        }
        let max_fw_cmds = (raw - 1).min(MAX_FW_CMDS_CAP);
        let io_tags = max_fw_cmds - DCMD_SMIDS;
        let reply_depth = 2 * (u32::from(max_fw_cmds) + 1).next_multiple_of(16);
        let sp1 = Sp1(sp1);
        let msix_capable = sp0 & regs::SP0_MSIX_CAPABLE != 0;
        let fw_queues = if msix_capable { sp1.fw_queues(generation) } else { 1 };
        let (queues, host_msix_vectors) = if msix_capable && vectors > 0 {
            let mut q = (vectors.min(usize::from(u16::MAX)) as u16)
                .min(fw_queues)
                .min(generation.max_queues());
            if cap > 0 {
                q = q.min(cap);
            }
            (q, q as u8)
        } else {
            (1, 0)
        };
        // As Linux and FreeBSD: the *firmware's* queue count decides combined mode (more than 8
        // on Invader, 16 on Ventura/Aero); the host count is clamped afterwards.
        let combined = msix_capable && generation.combined_above().is_some_and(|c| fw_queues > c);
        let chain_bytes = sp1.chain_bytes();
        let max_sge = prev_power_of_two(6 + chain_bytes / 16).min(u32::from(MAX_SGE_CAP)) as u16;
        Ok(Self {
            raw_fw_cmds: raw,
            max_fw_cmds,
            io_tags,
            reply_depth,
            fw_queues,
            queues,
            host_msix_vectors,
            combined,
            chain_bytes,
            max_sge,
            msix_capable,
            fw_sync_cache: sp1.bit24(),
            rdpq_supported: sp1.rdpq(),
            rdpq: sp1.rdpq() && want_rdpq,
            ctrl64: sp1.ctrl64(),
            coalescing: sp1.intr_coalescing(),
            high_iops_queues: 0,
            coalesced_queues: 0,
        })
    }
}

fn prev_power_of_two(v: u32) -> u32 {
    if v == 0 { 0 } else { 1 << (31 - v.leading_zeros()) }
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    /// Brings the controller up from whatever state its firmware is in: READY transition,
    /// limits, memory (all below 4 GiB), IOC INIT, CTRL_GET_INFO, LD list, READ CAPACITY of each
    /// LD. Interrupts stay masked; call [`Controller::enable_interrupts`] once handlers are
    /// installed. Every step goes into `report` (and the `log` crate) whether it succeeds or not.
    pub fn bring_up<A: Dma>(mmio: M, dma: &A, delay: D, config: Config, report: &mut Report) -> Result<Self, Error> {
        let mut budget = Budget::new(config.bringup_budget_us);
        report.generation = Some(config.generation);
        let r = Self::bring_up_inner(mmio, dma, delay, config, report, &mut budget);
        if let Err(e) = &r {
            report.fail("bring-up", e);
        }
        r
    }

    fn bring_up_inner<A: Dma>(
        mmio: M,
        dma: &A,
        delay: D,
        config: Config,
        report: &mut Report,
        budget: &mut Budget,
    ) -> Result<Self, Error> {
        let generation = config.generation;
        report.step(&mmio, generation, budget.used(), "registers at power-on", String::new());
        if config.commits(Mistake::DoorbellWrongState) {
            mmio.write32(regs::DOORBELL, regs::DB_RESET_TO_READY);
        }
        Self::to_ready(&mmio, &delay, &config, budget, report, true)?;
        let sp0 = read_reg(&mmio, generation, regs::SP0);
        let sp1 = read_reg(&mmio, generation, regs::SP1);
        let mut limits = Limits::from_scratch_pads(
            generation,
            sp0,
            sp1,
            config.vector_cpus.len(),
            config.max_queues,
            config.rdpq,
        )?;
        if config.commits(Mistake::TooManyVectors) {
            limits.host_msix_vectors = (limits.fw_queues + 1) as u8;
        }
        if config.commits(Mistake::CombinedByHostCount) {
            limits.combined = generation.combined_above().is_some_and(|c| limits.queues > c);
        }
        match ready_layout(&config, &limits) {
            Ok((high_iops_queues, coalesced_queues)) => {
                limits.high_iops_queues = high_iops_queues;
                limits.coalesced_queues = coalesced_queues;
            }
            Err(why) => report.step(&mmio, generation, budget.used(), "queue layout", why),
        }
        report.limits = Some(limits);
        report.step(&mmio, generation, budget.used(), "limits", alloc::format!("{limits:?}"));

        // SP2 bits 24:16 (Ventura, Aero): the dynamic RAID map's size in 64 KiB units. Invader
        // and Fury answer in the legacy 64-LD or the extended 256-LD format, which one the
        // controller information decides later: the buffers hold the larger, as Linux's do.
        let map_bytes = if generation.g35_raid_context() && config.fastpath {
            let units =
                (read_reg(&mmio, generation, regs::SP2) >> raidmap::SP2_MAP_UNITS_SHIFT) & raidmap::SP2_MAP_UNITS_MASK;
            units as usize * raidmap::MAP_UNIT_BYTES
        } else if generation == Generation::Invader && config.fastpath {
            raidmap::EXT_MAP_BYTES
        } else {
            0
        };
        if map_bytes > raidmap::MAX_MAP_BYTES {
            report.step(
                &mmio,
                generation,
                budget.used(),
                "RAID map",
                alloc::format!(
                    "SP2 announces {map_bytes} bytes, more than {}: no FastPath",
                    raidmap::MAX_MAP_BYTES
                ),
            );
        }
        let n = usize::from(limits.max_fw_cmds);
        // RAID-1 FastPath writes need a peer SMID per I/O tag (max_fw_cmds + SMID), each with its
        // frame and sense slot: the firmware finds a frame at base + 256 × SMID. Chain frames
        // are shared: a peer's SGL is its request's.
        // (Ventura and later: Linux has no peer writes before.)
        let peer_smids = generation.g35_raid_context() && map_bytes > 0 && map_bytes <= raidmap::MAX_MAP_BYTES;
        let smid_span = if peer_smids { 2 * n } else { n };
        let chain_stride = (usize::from(limits.max_sge).saturating_sub(7) * 16)
            .next_multiple_of(64)
            .max(64);
        let depth = limits.reply_depth as usize;
        let nq = usize::from(limits.queues);
        let mem = Memory {
            frames: alloc_low(dma, "request frames", FRAME_SIZE * (smid_span + 1), 256)?,
            chains: alloc_low(dma, "chain frames", chain_stride * n, 64)?,
            chain_stride,
            sense: alloc_low(dma, "sense buffers", SENSE_SIZE * smid_span, 64)?,
            replies: alloc_rings(dma, generation, limits.rdpq, depth * 8, nq)?,
            init: alloc_low(dma, "IOC INIT frame", 4096, 256)?,
            dcmd: alloc_low(
                dma,
                "DCMD frames",
                usize::from(DCMD_SMIDS) * (MFI_FRAME_LEN + DCMD_DATA_LEN),
                256,
            )?,
            raid_map: if map_bytes > 0 && map_bytes <= raidmap::MAX_MAP_BYTES {
                // FastPath is optional: no memory for the map means the LD path, not a failed
                // bring-up.
                match alloc_low(dma, "RAID map", map_bytes, 64)
                    .and_then(|a| Ok([a, alloc_low(dma, "RAID map", map_bytes, 64)?]))
                {
                    Ok(bufs) => Some(bufs),
                    Err(e) => {
                        report.step(
                            &mmio,
                            generation,
                            budget.used(),
                            "RAID map",
                            alloc::format!("no buffer for {map_bytes} bytes ({e}): no FastPath"),
                        );
                        None
                    }
                }
            } else {
                None
            },
            // The JBOD map is optional too: no memory for it means system PDs by device id.
            jbod_map: if generation != Generation::Thunderbolt && config.jbod_map {
                alloc_low(dma, "JBOD map", super::jbodmap::JBOD_MAP_BYTES, 64)
                    .and_then(|a| Ok([a, alloc_low(dma, "JBOD map", super::jbodmap::JBOD_MAP_BYTES, 64)?]))
                    .ok()
            } else {
                None
            },
        };
        report.step(
            &mmio,
            generation,
            budget.used(),
            "memory",
            alloc::format!(
                "frames {:#x} chains {:#x} sense {:#x} replies {:#x} ({} {} queues x {} entries) init {:#x}",
                mem.frames.phys(),
                mem.chains.phys(),
                mem.sense.phys(),
                mem.replies.init_address(),
                if limits.rdpq { "RDPQ array," } else { "contiguous," },
                nq,
                depth,
                mem.init.phys()
            ),
        );
        let smids = n + 1;
        let mut ctrl = Self {
            mmio,
            delay,
            generation,
            limits,
            mem,
            queues: (0..nq)
                .map(|_| {
                    Mutex::new(ReplyQueue {
                        last_idx: 0,
                        wrapped: false,
                    })
                })
                .collect(),
            smids: (0..smids).map(|_| SmidState::new()).collect(),
            dcmd_reply_pending: (0..DCMD_SMIDS).map(|_| AtomicBool::new(false)).collect(),
            dcmd_lock: Mutex::new(()),
            gate: Gate::new(nq),
            atomic_port: AtomicBool::new(false),
            interrupts_enabled: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            ocr_disabled: false,
            ext_lds: false,
            info: empty_info(),
            drives: Vec::new(),
            fastpath: FastPathTables::new(nq),
            map_sync: MapSync::new(),
            mirror_load: crate::raidmap::MirrorLoad::default(),
            peer_smids,
            fw_outstanding: core::sync::atomic::AtomicU32::new(0),
            r1_ldio_hint: if config.pcie_bw_limited && peer_smids {
                (0..=u8::MAX)
                    .map(|_| core::sync::atomic::AtomicU32::new(super::R1_LDIO_HINT))
                    .collect()
            } else {
                Vec::new()
            },
            jbod: super::jbodmap::JbodMap::new(),
            ld_frame: super::io::LdFrame::new(generation),
            busy: if limits.high_iops_queues > 0 {
                (0..super::BUSY_DEVICES)
                    .map(|_| core::sync::atomic::AtomicU32::new(0))
                    .collect()
            } else {
                Vec::new()
            },
            config,
            stats: Stats::default(),
        };
        if !ctrl.config.commits(Mistake::ReplySlotsNotReset) {
            ctrl.reset_reply_queues();
        }
        if ctrl.config.commits(Mistake::PostBeforeOperational) {
            ctrl.post_descriptor(desc(regs::DESC_SCSI_IO, 0, 1));
        }
        if let Err(e) = ctrl.ioc_init(budget, report) {
            if let (true, Error::InitFailed { status, .. }) = (limits.rdpq, &e) {
                // As Linux: no other ring mode is tried; the firmware offered RDPQ and refused
                // this array, which is the driver's to fix (`megasas.rdpq=off` avoids it).
                report.step(
                    &ctrl.mmio,
                    generation,
                    budget.used(),
                    "IOC INIT refused with the RDPQ array",
                    alloc::format!(
                        "MFI status {status:#04x} for the {} reply rings' array{}; bring-up stops (megasas.rdpq=off gives the contiguous rings)",
                        limits.queues,
                        if ctrl.config.rdpq_window_fault {
                            " (megasas.rdpq_fault=window moved ring 1 out of its group's 4 GiB window)"
                        } else {
                            ""
                        }
                    ),
                );
            }
            // Linux `megasas_init_adapter_fusion`: a resettable FAULT after a failed IOC INIT
            // gets one diag reset and one more IOC INIT.
            let sp0 = read_reg(&ctrl.mmio, generation, regs::SP0);
            if FwStatus(sp0).state() != FwState::Fault || sp0 & regs::SP0_FAULT_RESETTABLE == 0 {
                return Err(e);
            }
            report.step(
                &ctrl.mmio,
                generation,
                budget.used(),
                "IOC INIT failed with a resettable FAULT; one diag reset and retry",
                alloc::format!("{e}"),
            );
            Self::diag_reset(&ctrl.mmio, &ctrl.delay, &ctrl.config, budget, report)?;
            ctrl.reset_reply_queues();
            ctrl.ioc_init(budget, report)?;
        }
        if ctrl.config.commits(Mistake::InitTwice) {
            ctrl.ioc_init(budget, report)?;
        }
        ctrl.read_info(budget, report)?;
        ctrl.discover(budget, report)?;
        ctrl.read_raid_map(budget, report);
        ctrl.read_jbod_map(budget, report, "JBOD map");
        report.info = Some(ctrl.info.clone());
        report.drives = ctrl.drives.clone();
        report.step(
            &ctrl.mmio,
            generation,
            budget.used(),
            "bring-up complete",
            String::new(),
        );
        Ok(ctrl)
    }

    /// The READY transition (Linux's `megasas_transition_to_ready`). At probe (`probe`), a resettable FAULT is
    /// diag-reset once.
    fn to_ready(
        mmio: &M,
        delay: &D,
        config: &Config,
        budget: &mut Budget,
        report: &mut Report,
        probe: bool,
    ) -> Result<(), Error> {
        let generation = config.generation;
        let mut reset_tried = false;
        loop {
            let sp0 = read_reg(mmio, generation, regs::SP0);
            let state = FwStatus(sp0).state();
            match state {
                FwState::Ready => {
                    report.step(mmio, generation, budget.used(), "firmware READY", String::new());
                    return Ok(());
                }
                FwState::Fault => {
                    report.step(
                        mmio,
                        generation,
                        budget.used(),
                        "firmware in FAULT",
                        alloc::format!("{}", Sp0(sp0)),
                    );
                    if !probe {
                        // After an OCR's diag reset the firmware may pass through FAULT while it
                        // restarts: wait for the state to change (per-state limit), as Linux
                        // `megasas_transition_to_ready(ocr=1)` does.
                    } else {
                        if reset_tried || sp0 & regs::SP0_FAULT_RESETTABLE == 0 {
                            return Err(Error::FirmwareFault { sp0 });
                        }
                        reset_tried = true;
                        Self::diag_reset(mmio, delay, config, budget, report)?;
                        continue;
                    }
                }
                FwState::WaitHandshake => {
                    Self::doorbell(mmio, regs::DB_CLEAR_HANDSHAKE);
                }
                FwState::BootMsgPending => {
                    Self::doorbell(mmio, regs::DB_HOTPLUG);
                }
                FwState::Operational => {
                    mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
                    Self::doorbell(mmio, regs::DB_RESET_TO_READY);
                    Self::wait_doorbell_clear(mmio, delay, config, budget)?;
                }
                FwState::Undefined
                | FwState::BbInit
                | FwState::FwInit
                | FwState::FwInit2
                | FwState::DeviceScan
                | FwState::FlushCache => {}
                FwState::Other(_) => return Err(Error::UnknownState { sp0 }),
            }
            report.step(
                mmio,
                generation,
                budget.used(),
                "waiting for the state to change",
                String::new(),
            );
            // Wait until the whole SP0 word changes, bounded per state and overall.
            let mut waited = 0u64;
            loop {
                let now = read_reg(mmio, generation, regs::SP0);
                if now != sp0 {
                    break;
                }
                if waited >= config.state_timeout_us {
                    return Err(Error::FirmwareStuck { sp0, waited_us: waited });
                }
                wait(delay, budget, 1000, "READY transition", mmio, generation)?;
                waited += 1000;
            }
        }
    }

    fn wait_doorbell_clear(mmio: &M, delay: &D, config: &Config, budget: &mut Budget) -> Result<(), Error> {
        if config.commits(Mistake::IgnoreDoorbellBusy) {
            return Ok(());
        }
        let mut waited = 0u64;
        while read_reg(mmio, config.generation, regs::DOORBELL) & regs::DB_IN_PROGRESS != 0 {
            if waited >= 10_000_000 {
                return Err(Error::DoorbellBusy { waited_us: waited });
            }
            wait(delay, budget, 1000, "doorbell", mmio, config.generation)?;
            waited += 1000;
        }
        Ok(())
    }

    /// Handshake doorbell write. Like Linux and FreeBSD it does not poll bit 0 first; bit
    /// 0 is polled after 0x07 and before IOC INIT.
    fn doorbell(mmio: &M, value: u32) {
        mmio.write32(regs::DOORBELL, value);
    }

    /// Diag reset (the 7-key HOST_DIAG sequence, as Linux and FreeBSD), ending in the READY
    /// transition.
    pub(super) fn diag_reset(
        mmio: &M,
        delay: &D,
        config: &Config,
        budget: &mut Budget,
        report: &mut Report,
    ) -> Result<(), Error> {
        let g = config.generation;
        report.step(mmio, g, budget.used(), "diag reset: unlock", String::new());
        for k in regs::DIAG_UNLOCK_KEYS {
            mmio.write32(regs::WRITE_SEQUENCE, k);
        }
        let mut diag = 0;
        for _ in 0..100 {
            diag = read_reg(mmio, g, regs::HOST_DIAG);
            if diag & regs::DIAG_DRWE != 0 {
                break;
            }
            wait(delay, budget, 100_000, "diag reset: write enable", mmio, g)?;
        }
        if diag & regs::DIAG_DRWE == 0 {
            return Err(Error::ResetFailed {
                attempts: 1,
                sp0: read_reg(mmio, g, regs::SP0),
            });
        }
        mmio.write32(regs::HOST_DIAG, diag | regs::DIAG_RESET_ADAPTER);
        wait(delay, budget, 3_000_000, "diag reset", mmio, g)?;
        let mut cleared = false;
        for _ in 0..1000 {
            if read_reg(mmio, g, regs::HOST_DIAG) & regs::DIAG_RESET_ADAPTER == 0 {
                cleared = true;
                break;
            }
            wait(delay, budget, 100_000, "diag reset: adapter reset bit", mmio, g)?;
        }
        if !cleared {
            return Err(Error::ResetFailed {
                attempts: 1,
                sp0: read_reg(mmio, g, regs::SP0),
            });
        }
        for _ in 0..1000 {
            if FwStatus(read_reg(mmio, g, regs::SP0)).state().nibble() > FwState::FwInit.nibble() {
                break;
            }
            wait(delay, budget, 100_000, "diag reset: firmware start", mmio, g)?;
        }
        report.step(mmio, g, budget.used(), "diag reset: adapter reset done", String::new());
        Self::to_ready(mmio, delay, config, budget, report, false)
    }

    /// Sets every reply slot to all-ones and every consumer index to 0.
    pub(super) fn reset_reply_queues(&self) {
        self.mem.replies.fill_unused();
        if !self.mistake(Mistake::LastIdxNotZeroed) {
            for q in &self.queues {
                q.lock().last_idx = 0;
            }
        }
    }

    pub(super) fn ioc_init(&self, budget: &mut Budget, report: &mut Report) -> Result<(), Error> {
        let g = self.generation;
        let l = &self.limits;
        let init = &self.mem.init;
        init.fill(0, init.len(), 0);
        let mfi = if self.mistake(Mistake::InitFrameMisaligned) {
            0x40
        } else {
            0
        };
        let req = INIT_REQUEST_OFF;
        // MPI2 IOC INIT request (72 bytes).
        init.write_u8(req, 0x04);
        init.write_u8(req + 0x03, 0x02);
        if l.rdpq || self.mistake(Mistake::RdpqWithoutSupport) {
            init.write_u8(req + 0x07, IOC_INIT_RDPQ);
        }
        init.write_u16(req + 0x0C, 0x0200);
        init.write_u16(req + 0x0E, 0x1000);
        init.write_u8(req + 0x16, 12);
        init.write_u8(req + 0x17, l.host_msix_vectors);
        init.write_u16(req + 0x1A, (FRAME_SIZE / 4) as u16);
        let depth = if self.mistake(Mistake::QueueDepthNotMultipleOf16) {
            l.reply_depth - 8
        } else {
            l.reply_depth
        };
        init.write_u16(req + 0x1C, depth as u16);
        let sense_high = if self.mistake(Mistake::SenseAbove4G) {
            1
        } else {
            (self.mem.sense.phys() >> 32) as u32
        };
        init.write_u32(req + 0x20, sense_high);
        init.write_u64(req + 0x28, self.mem.frames.phys());
        init.write_u64(req + 0x30, self.mem.replies.init_address());
        if let Some(array) = &self.mem.replies.rdpq_array {
            self.write_rdpq_array(array);
        }
        // MFI INIT frame wrapping it.
        init.write_u8(mfi, 0x00);
        init.write_u8(
            mfi + 0x02,
            if self.mistake(Mistake::InitStatusNotPreset) {
                0
            } else {
                0xFF
            },
        );
        let mut caps = 0u32;
        if g != Generation::Thunderbolt {
            caps |= 1 << 1; // additional_msix: Invader and later always, as Linux and FreeBSD
        }
        if l.chain_bytes > 1024 {
            caps |= 1 << 8; // ext_io_size
        }
        // max_255lds, as Linux always sets it: a controller whose information offers 256 LDs
        // then answers the map DCMD in the extended format (`Controller::map_format`).
        caps |= 1 << 3;
        init.write_u32(mfi + 0x04, caps);
        init.write_u16(mfi + 0x10, 0x0001);
        // Balanced and IOPS modes: the firmware coalesces the interrupts of the queues named
        // (Linux's replyqueue_mask, one bit per group of 8 queues).
        let coalesced = if self.mistake(Mistake::CoalescingWithoutSupport) {
            8
        } else {
            l.coalesced_queues
        };
        init.write_u16(mfi + 0x12, crate::layout::replyqueue_mask(coalesced));
        init.write_u32(mfi + 0x14, 72);
        init.write_u64(mfi + 0x18, init.phys() + req as u64);
        report.step(
            &self.mmio,
            g,
            budget.used(),
            "IOC INIT: posting",
            alloc::format!(
                "HostMSIxVectors {} depth {} {} capabilities {caps:#x} replyqueue_mask {:#x} frame {:#x}",
                l.host_msix_vectors,
                depth,
                if l.rdpq { "RDPQ" } else { "contiguous rings" },
                crate::layout::replyqueue_mask(coalesced),
                init.phys() + mfi as u64
            ),
        );
        self.mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
        Self::wait_doorbell_clear(&self.mmio, &self.delay, &self.config, budget)?;
        fence(Ordering::Release);
        let addr = init.phys() + mfi as u64;
        let mfa = (addr & !0xFF) | u64::from(regs::DESC_MFA) | (addr & 0xFF);
        if self.mistake(Mistake::InitViaAtomicPort) {
            self.mmio.write32(regs::REQ_DESC_ATOMIC, mfa as u32);
        } else {
            self.mmio.write32(regs::REQ_DESC_LOW, mfa as u32);
            self.mmio.write32(regs::REQ_DESC_HIGH, (mfa >> 32) as u32);
        }
        let mut waited = 0u64;
        loop {
            let st = init.read_u8(mfi + 0x02);
            if st != 0xFF && !(self.mistake(Mistake::InitStatusNotPreset) && waited == 0) {
                if st != 0 {
                    let sp0 = read_reg(&self.mmio, g, regs::SP0);
                    return Err(Error::InitFailed { status: st, sp0 });
                }
                break;
            }
            if waited >= self.config.command_timeout_us {
                return Err(Error::InitTimeout {
                    sp0: read_reg(&self.mmio, g, regs::SP0),
                });
            }
            wait(&self.delay, budget, 100, "IOC INIT", &self.mmio, g)?;
            waited += 100;
            if waited.is_multiple_of(5_000_000) {
                let sp0 = read_reg(&self.mmio, g, regs::SP0);
                if FwStatus(sp0).state() == FwState::Fault {
                    return Err(Error::FirmwareFault { sp0 });
                }
            }
        }
        // cmd_status 0 is IOC INIT's success (Linux and FreeBSD check nothing else). SP0 may
        // still lag behind it: wait a while for OPERATIONAL and report what we saw, but only a
        // FAULT is an error; the watchdog handles a firmware that really never gets there.
        let mut sp0 = read_reg(&self.mmio, g, regs::SP0);
        let mut lag = 0u64;
        while FwStatus(sp0).state() != FwState::Operational && lag < OPERATIONAL_WAIT_US {
            if FwStatus(sp0).state() == FwState::Fault {
                return Err(Error::FirmwareFault { sp0 });
            }
            wait(
                &self.delay,
                budget,
                1000,
                "IOC INIT: waiting for OPERATIONAL",
                &self.mmio,
                g,
            )?;
            lag += 1000;
            sp0 = read_reg(&self.mmio, g, regs::SP0);
        }
        if FwStatus(sp0).state() != FwState::Operational {
            report.step(
                &self.mmio,
                g,
                budget.used(),
                "IOC INIT: done, SP0 not OPERATIONAL yet; going on as Linux does",
                alloc::format!("{} after {lag} us", Sp0(sp0)),
            );
        } else if lag > 0 {
            report.step(
                &self.mmio,
                g,
                budget.used(),
                "IOC INIT: SP0 reached OPERATIONAL after cmd_status",
                alloc::format!("{lag} us later"),
            );
        }
        let sp1 = read_reg(&self.mmio, g, regs::SP1);
        let atomic = (g == Generation::Aero && Sp1(sp1).bit24()) || self.mistake(Mistake::AtomicWithoutSupport);
        self.atomic_port.store(atomic, Ordering::Relaxed);
        report.step(
            &self.mmio,
            g,
            budget.used(),
            "IOC INIT: OPERATIONAL",
            alloc::format!("atomic descriptor port {}", if atomic { "in use" } else { "not used" }),
        );
        Ok(())
    }

    /// Fills the RDPQ array: entry q = ring q's base; the rest, and the reserved dwords, zero.
    fn write_rdpq_array(&self, array: &DmaBuf) {
        array.fill(0, array.len(), 0);
        for q in 0..self.queues.len() {
            let (ring, off) = self.mem.replies.ring(q);
            let mut base = ring.phys() + off as u64;
            if q + 1 == self.queues.len() && self.mistake(Mistake::RdpqRingCrosses4G) {
                base = FOUR_GIB - 8 * u64::from(self.limits.reply_depth / 2);
            }
            if q == 1 && self.mistake(Mistake::RdpqRingsOverlap) {
                base = self.mem.replies.ring(0).0.phys() + 16;
            }
            if q == 1 && self.config.rdpq_window_fault {
                base += FOUR_GIB;
            }
            array.write_u64(q * RDPQ_ENTRY, base);
        }
    }

    /// Unmasks interrupts (after the kernel installed the handlers).
    pub fn enable_interrupts(&self) {
        self.interrupts_enabled.store(true, Ordering::Release);
        self.mmio.write32(regs::INTR_STATUS, 0xFFFF_FFFF);
        let _ = self.mmio.read32(regs::INTR_STATUS);
        self.mmio.write32(regs::INTR_MASK, regs::INTR_ENABLE_MASK);
        let _ = self.mmio.read32(regs::INTR_MASK);
    }

    /// Masks every interrupt source.
    pub fn disable_interrupts(&self) {
        self.interrupts_enabled.store(false, Ordering::Release);
        self.mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
    }
}

/// The reply rings: contiguous (one buffer, queue q at q × ring_bytes) or, with RDPQ, one
/// buffer per queue plus the RDPQ array. Every ring lies below 4 GiB (so all share the one 4 GiB
/// window the firmware requires of each group of 8 or 16 rings) and is checked not to cross it.
fn alloc_rings<A: Dma>(
    dma: &A,
    generation: Generation,
    rdpq: bool,
    ring_bytes: usize,
    queues: usize,
) -> Result<ReplyRings, Error> {
    if !rdpq {
        return Ok(ReplyRings {
            bufs: alloc::vec![alloc_low(dma, "reply queues", ring_bytes * queues, 64)?],
            rdpq_array: None,
            ring_bytes,
        });
    }
    let array = alloc_low(dma, "RDPQ array", RDPQ_ENTRY * RDPQ_ENTRIES, 64)?;
    let bufs = (0..queues)
        .map(|_| alloc_low(dma, "RDPQ reply ring", ring_bytes, 64))
        .collect::<Result<Vec<_>, _>>()?;
    let bases: Vec<u64> = bufs.iter().map(DmaBuf::phys).collect();
    check_rdpq_windows(generation, &bases, ring_bytes)?;
    Ok(ReplyRings {
        bufs,
        rdpq_array: Some(array),
        ring_bytes,
    })
}

/// What the firmware requires of the rings of an RDPQ array: none crosses a 4 GiB boundary, and
/// each group of 8 (Invader) or 16 (Ventura and later, which Linux applies to all) shares one 4
/// GiB window.
fn check_rdpq_windows(generation: Generation, bases: &[u64], ring_bytes: usize) -> Result<(), Error> {
    let group = if generation <= Generation::Invader { 8 } else { 16 };
    for (q, &start) in bases.iter().enumerate() {
        let end = start + ring_bytes as u64 - 1;
        let first = bases[q - q % group];
        if start / FOUR_GIB != end / FOUR_GIB || start / FOUR_GIB != first / FOUR_GIB {
            return Err(Error::RdpqWindow {
                queue: q,
                phys: start,
                len: ring_bytes,
            });
        }
    }
    Ok(())
}

fn empty_info() -> ControllerInfo {
    ControllerInfo {
        vendor_id: 0,
        device_id: 0,
        subvendor_id: 0,
        subdevice_id: 0,
        product: String::new(),
        serial: String::new(),
        firmware: String::new(),
        package: String::new(),
        max_cmds: 0,
        max_sge: 0,
        max_request_sectors: 0,
        lds_present: 0,
        pds_present: 0,
    }
}

/// The queue layout planned before bring-up as the READY firmware allows it: (high-IOPS queues,
/// coalesced queues), or why the controller falls back to latency mode.
fn ready_layout(config: &Config, limits: &Limits) -> Result<(u16, u16), String> {
    if config.high_iops_queues > 0 {
        // Balanced mode: coalescing still offered, and a latency queue beside the high-IOPS ones.
        if limits.msix_capable && limits.coalescing && limits.queues > config.high_iops_queues {
            return Ok((config.high_iops_queues, config.high_iops_queues));
        }
        return Err(alloc::format!(
            "balanced mode was planned, but the READY firmware {} ({} reply queues): latency mode",
            if limits.coalescing {
                "leaves no latency queue"
            } else {
                "offers no interrupt coalescing"
            },
            limits.queues
        ));
    }
    if config.coalesce_every_queue {
        // IOPS mode: every whole group of 8 queues coalesced (Linux: `msix_vectors / 8` groups;
        // fewer than 8 queues coalesce none).
        if limits.msix_capable && limits.coalescing {
            return Ok((0, limits.queues / 8 * 8));
        }
        return Err(String::from(
            "IOPS mode was planned, but the READY firmware offers no interrupt coalescing (or no MSI-X): latency mode",
        ));
    }
    Ok((limits.high_iops_queues, limits.coalesced_queues))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdpq_rings_must_stay_in_their_groups_4g_window() {
        let ring = 8 * 512;
        let low: Vec<u64> = (0..20).map(|q| 0x1000_0000 + q * 0x10000).collect();
        assert_eq!(check_rdpq_windows(Generation::Aero, &low, ring), Ok(()));
        // A ring ending past 4 GiB.
        let mut crossing = low.clone();
        crossing[3] = FOUR_GIB - 0x800;
        assert_eq!(
            check_rdpq_windows(Generation::Aero, &crossing, ring),
            Err(Error::RdpqWindow {
                queue: 3,
                phys: FOUR_GIB - 0x800,
                len: ring
            })
        );
        // Rings 8..15 in another window than rings 0..7: wrong for Aero's one group of 16, right
        // for Invader's two groups of 8.
        let mut split = low.clone();
        for (q, base) in split.iter_mut().enumerate().take(16).skip(8) {
            *base = FOUR_GIB + q as u64 * 0x10000;
        }
        assert!(matches!(
            check_rdpq_windows(Generation::Aero, &split, ring),
            Err(Error::RdpqWindow { queue: 8, .. })
        ));
        assert_eq!(check_rdpq_windows(Generation::Invader, &split, ring), Ok(()));
        // Ring 16 opens the next Aero group: it may lie in another window than rings 0..15.
        let mut next_group = low;
        for (q, base) in next_group.iter_mut().enumerate().skip(16) {
            *base = FOUR_GIB + q as u64 * 0x10000;
        }
        assert_eq!(check_rdpq_windows(Generation::Aero, &next_group, ring), Ok(()));
    }
}
