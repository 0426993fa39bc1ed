//! The FAULT watchdog and online controller reset (OCR): every request still held is handed
//! back exactly once, and a controller that cannot be reset is stopped and kept out of service.

use alloc::string::String;
use core::sync::atomic::Ordering;

use crate::slot::SmidSlot;

use crate::Mmio64;
use devhal::Delay;

use crate::diag::Report;
use crate::error::{Error, Sp0};
use crate::regs::{self, FwState, FwStatus};

use super::{
    Budget, CTRL_INFO_LEN, Completion, Controller, DCMD_CTRL_GET_INFO, DCMD_SMIDS, IoOutcome, MAX_FW_CMDS_CAP, Mistake,
    desc, read_reg,
};

/// Health seen by the watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// OPERATIONAL.
    Ok,
    /// Needs a reset (FAULT or not OPERATIONAL); SP0 given.
    NeedsReset(u32),
    /// Given up.
    Dead,
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    /// Watchdog check of SP0 (call about once a second and on timeouts).
    pub fn health(&self) -> Health {
        if self.is_dead() {
            return Health::Dead;
        }
        let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
        // Only FAULT warrants a reset (Linux `megasas_fault_detect_work`, FreeBSD's OCR thread);
        // any other value may be a transient read and is left to the next tick.
        match FwStatus(sp0).state() {
            FwState::Fault => Health::NeedsReset(sp0),
            _ => Health::Ok,
        }
    }

    /// Online controller reset (as Linux's `megasas_reset_fusion`). Drains replies that already arrived, resets
    /// the adapter, re-initialises every reply queue, repeats IOC INIT on the same memory and
    /// CTRL_GET_INFO. Every request still on the controller is handed to `sink` exactly once:
    /// completed normally if its reply had arrived, else as [`IoOutcome::Reset`] after the
    /// adapter reset, when the firmware has provably forgotten it. If the adapter cannot be
    /// reset, it is stopped (STOP_ADAPTER) and marked dead, and its requests stay the device's:
    /// the caller turns bus mastering off and only then calls [`Controller::abandon_in_flight`].
    pub fn reset(&self, sink: &mut dyn FnMut(Completion), report: &mut Report) -> Result<(), Error> {
        let _w = self.gate.close();
        let g = self.generation;
        let mut budget = Budget::new(self.config.bringup_budget_us);
        let was_enabled = self.interrupts_enabled.load(Ordering::Acquire);
        self.mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
        report.step(&self.mmio, g, 0, "OCR: start", String::new());
        // 1. Replies already posted belong to their requests.
        if !self.mistake(Mistake::QueuesNotResetAfterOcr) {
            for q in 0..self.limits.queues {
                self.reap_inner(q, sink);
            }
        }
        let sp0 = read_reg(&self.mmio, g, regs::SP0);
        let fault = FwStatus(sp0).state() == FwState::Fault;
        if self.ocr_disabled || (fault && sp0 & regs::SP0_FAULT_RESETTABLE == 0) {
            // Stop the adapter. A stopped adapter should do no more DMA, but only
            // the bus-master bit proves it: the requests stay held until the caller turned it
            // off (`abandon_in_flight`).
            self.mmio.write32(regs::DOORBELL, regs::DB_STOP_ADAPTER);
            self.dead.store(true, Ordering::Release);
            report.step(
                &self.mmio,
                g,
                0,
                "OCR: not possible, adapter stopped",
                alloc::format!("{}", Sp0(sp0)),
            );
            return Err(Error::ResetNotPossible { sp0 });
        }
        let mut last = Error::ResetFailed { attempts: 0, sp0 };
        for attempt in 1..=3u32 {
            match Self::diag_reset(&self.mmio, &self.delay, &self.config, &mut budget, report) {
                Ok(()) => {}
                Err(e) => {
                    last = e;
                    continue;
                }
            }
            // The adapter was reset: it has forgotten every SMID and address.
            self.return_in_flight(sink);
            if self.mistake(Mistake::PostDuringReset) {
                self.post_descriptor(desc(regs::DESC_SCSI_IO, 0, 1));
            }
            if !self.mistake(Mistake::QueuesNotResetAfterOcr) {
                self.reset_reply_queues();
            }
            let raw = (read_reg(&self.mmio, g, regs::SP0) & 0xFFFF) as u16;
            if raw.saturating_sub(1).min(MAX_FW_CMDS_CAP) < self.limits.max_fw_cmds {
                last = Error::Limits {
                    what: "SP0 max commands after reset",
                    value: u64::from(raw),
                    expected: "no fewer than at bring-up",
                };
                continue;
            }
            if let Err(e) = self.ioc_init(&mut budget, report) {
                last = e;
                continue;
            }
            let mut mbox = [0u8; 12];
            mbox[0] = 1;
            if let Err(e) = self.dcmd_inner(Some(&mut budget), DCMD_CTRL_GET_INFO, mbox, CTRL_INFO_LEN, None) {
                last = e;
                continue;
            }
            self.recheck_raid_map(&mut budget, report);
            self.read_jbod_map(&mut budget, report, "OCR: JBOD map");
            if was_enabled {
                self.enable_interrupts();
            }
            self.stats.resets.fetch_add(1, Ordering::Relaxed);
            report.step(
                &self.mmio,
                g,
                budget.used(),
                "OCR: done",
                alloc::format!("attempt {attempt}"),
            );
            return Ok(());
        }
        let sp0 = read_reg(&self.mmio, g, regs::SP0);
        report.step(&self.mmio, g, budget.used(), "OCR: failed", alloc::format!("{last}"));
        self.mmio.write32(regs::DOORBELL, regs::DB_STOP_ADAPTER);
        self.dead.store(true, Ordering::Release);
        // Whatever is still held (nothing if an attempt got as far as the adapter reset) stays
        // the device's until bus mastering is off (`abandon_in_flight`).
        Err(Error::ResetFailed { attempts: 3, sp0 })
    }

    /// For a controller out of service (its reset was not possible or failed), **after the
    /// caller turned the function's bus mastering off**: hands every request still held to
    /// `sink` exactly once, as [`IoOutcome::Reset`]. Until then they belong to the device.
    /// Returns how many; a controller that is not dead hands back nothing.
    pub fn abandon_in_flight(&self, sink: &mut dyn FnMut(Completion)) -> u32 {
        if !self.is_dead() {
            return 0;
        }
        let _w = self.gate.close();
        let mut n = 0u32;
        self.return_in_flight(&mut |c| {
            n += 1;
            sink(c);
        });
        n
    }

    fn return_in_flight(&self, sink: &mut dyn FnMut(Completion)) {
        for k in 0..usize::from(DCMD_SMIDS) {
            self.dcmd_reply_pending[k].store(false, Ordering::Release);
        }
        self.map_sync_cancelled();
        self.jbod_sync_cancelled();
        for smid in 1..=usize::from(self.limits.io_tags) {
            let state = &self.smids[smid];
            let slot = &state.slot;
            let Some(word) = slot.in_flight() else {
                continue;
            };
            self.mirror_read_done(state);
            self.busy_done(state);
            // A RAID-1 write pair: the adapter reset (or the bus-master-off the caller vouched
            // for) dropped both halves, so the request is handed back once, here.
            state.pair.store(0, Ordering::Relaxed);
            self.off_firmware(state);
            if slot.finish(word) {
                self.stats.reset_returned.fetch_add(1, Ordering::Relaxed);
                sink(Completion {
                    tag: (smid - 1) as u32,
                    generation: SmidSlot::generation(word),
                    cookie: state.cookie.load(Ordering::Relaxed),
                    target: state.target.load(Ordering::Relaxed),
                    outcome: IoOutcome::Reset,
                    bytes_done: 0,
                });
            }
        }
    }
}
