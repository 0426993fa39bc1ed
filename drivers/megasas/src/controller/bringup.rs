//! Bring-up: the firmware to READY from whatever state an earlier boot stage left (doorbell
//! resets, the SEQ/DIAG adapter reset on FAULT), the frame pool and reply ring sized from the
//! firmware's limits, INIT, and interrupts on; `shutdown` takes the firmware back to READY.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::Error;
use crate::dcmd::ControllerInfo;
use crate::frame::{self, Header};
use crate::gate::ReapGate;
use crate::model::Model;
use crate::regs::{self, FwState, FwStatus};
use crate::status::MfiStatus;
use crate::tags::{self, TagTable};
use crate::{Delay, Dma, Mmio};
use devhal::DmaBuf;

use super::{
    ADMIN_LEN, ADMIN_TAG, Config, Controller, DriveSlot, RING_CI, RING_ENTRIES, RING_PI, RING_QINFO, RING_SENTINEL,
    SENSE_LEN, SUBMIT_LANES,
};

/// Give up after this many firmware state changes without reaching READY.
const MAX_TRANSITIONS: u32 = 32;
/// Attempts on FAULT: the IDB reset, then the DIAG adapter reset.
const FAULT_ATTEMPTS: u32 = 2;

/// Bring-up helpers that run before the controller struct exists.
pub(super) struct Bringup<'a, M, T> {
    mmio: &'a M,
    delay: &'a T,
    model: Model,
    config: &'a Config,
    /// Virtual time waited so far, against `config.bringup_timeout_us`.
    waited_total: core::cell::Cell<u64>,
}

impl<M: Mmio, T: Delay> Bringup<'_, M, T> {
    fn status(&self) -> FwStatus {
        FwStatus(self.mmio.read32(self.model.status_register()))
    }

    /// One poll interval, charged to the overall bring-up deadline. `Err` when it is spent.
    fn pause(&self, state: FwState) -> Result<(), Error> {
        let total = self.waited_total.get();
        if total >= self.config.bringup_timeout_us {
            return Err(Error::BringupTimeout {
                state,
                waited_us: total,
                limit_us: self.config.bringup_timeout_us,
            });
        }
        self.delay.delay_us(self.config.state_poll_us);
        self.waited_total
            .set(total.saturating_add(u64::from(self.config.state_poll_us.max(1))));
        Ok(())
    }

    /// Polls until the state differs from `from`, up to the state timeout and the overall
    /// bring-up deadline, whichever comes first.
    fn wait_state_change(&self, from: FwState) -> Result<FwStatus, Error> {
        let mut waited = 0u64;
        loop {
            let s = self.status();
            if s.state() != from {
                return Ok(s);
            }
            if waited >= self.config.state_timeout_us {
                return Err(Error::FirmwareTimeout {
                    state: from,
                    waited_us: waited,
                });
            }
            self.pause(from)?;
            waited += u64::from(self.config.state_poll_us.max(1));
        }
    }

    /// Polls a register until `done(value)`, up to the state timeout. Returns whether it got there.
    fn wait_reg(&self, offset: u32, done: impl Fn(u32) -> bool) -> bool {
        let mut waited = 0u64;
        while !done(self.mmio.read32(offset)) {
            if waited >= self.config.state_timeout_us || self.pause(FwState::Fault).is_err() {
                return false;
            }
            waited += u64::from(self.config.state_poll_us.max(1));
        }
        true
    }

    /// The SEQ/DIAG adapter reset (Linux `megasas_adp_reset_gen2`). Returns false when the
    /// controller does not honour the unlock sequence or the reset bit never clears.
    fn adapter_reset(&self) -> bool {
        for v in regs::SEQ_UNLOCK {
            self.mmio.write32(regs::SEQ, v);
        }
        if !self.wait_reg(regs::DIAG, |d| d & regs::DIAG_WRITE_ENABLE != 0) {
            return false;
        }
        let diag = self.mmio.read32(regs::DIAG);
        self.mmio.write32(regs::DIAG, diag | regs::DIAG_RESET_ADAPTER);
        self.wait_reg(regs::DIAG, |d| d & regs::DIAG_RESET_ADAPTER == 0)
    }

    /// Drives the firmware from any state to READY (as Linux's `megasas_transition_to_ready`).
    pub(super) fn to_ready(&self) -> Result<FwStatus, Error> {
        let mut transitions = 0u32;
        let mut fault_attempts = 0u32;
        loop {
            let status = self.status();
            let state = status.state();
            match state {
                FwState::Ready => return Ok(status),
                FwState::Fault => {
                    if fault_attempts >= FAULT_ATTEMPTS {
                        return Err(Error::FirmwareFault { status });
                    }
                    log::warn!(
                        "megasas: firmware in FAULT ({status}), attempting reset {}",
                        fault_attempts + 1
                    );
                    if fault_attempts == 0 {
                        // QEMU recovers from FAULT on the doorbell reset; real hardware needs DIAG.
                        self.mmio.write32(regs::IDB, regs::IDB_RESET_FLAGS);
                    } else if !self.adapter_reset() {
                        return Err(Error::FirmwareFault { status });
                    }
                    fault_attempts += 1;
                    match self.wait_state_change(FwState::Fault) {
                        Ok(_) | Err(Error::FirmwareTimeout { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                FwState::Operational => self.mmio.write32(regs::IDB, regs::IDB_RESET_FLAGS),
                FwState::WaitHandshake => self
                    .mmio
                    .write32(regs::IDB, regs::IDB_CLEAR_HANDSHAKE | regs::IDB_HOTPLUG),
                FwState::BootMsgPending => self.mmio.write32(regs::IDB, regs::IDB_HOTPLUG),
                // Transitional states move on by themselves.
                _ => {}
            }
            transitions += 1;
            if transitions > MAX_TRANSITIONS {
                return Err(Error::FirmwareNoProgress {
                    transitions,
                    last: state,
                });
            }
            self.wait_state_change(state)?;
        }
    }
}

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Brings the controller to OPERATIONAL: firmware to READY (resetting it from whatever state an
    /// earlier boot stage left), frame pool and reply queue allocated, INIT sent, CTRL_GET_INFO read.
    ///
    /// Interrupts stay masked at the controller. The caller then runs [`Self::discover`], programs
    /// MSI-X/MSI/INTx (or disables delivery for polled mode) and calls [`Self::enable_interrupts`]:
    /// QEMU's reply queue advances only while unmasked, polled mode included.
    pub fn new(model: Model, mmio: M, dma: D, delay: T, config: Config) -> Result<Self, Error> {
        let bring = Bringup {
            mmio: &mmio,
            delay: &delay,
            model,
            config: &config,
            waited_total: core::cell::Cell::new(0),
        };
        bring.to_ready()?;
        // Mask while READY: on QEMU this resets once more and clears stale unit attentions.
        mmio.write32(regs::OMSK, 0xFFFF_FFFF);
        let fw_status = bring.to_ready()?;
        let fw_cmds = fw_status.max_cmds();
        if fw_cmds < 2 {
            return Err(Error::FirmwareLimits {
                status: fw_status,
                reason: "max_cmds below 2 leaves no tag",
            });
        }
        if fw_status.max_sge() == 0 {
            return Err(Error::FirmwareLimits {
                status: fw_status,
                reason: "max_sge is 0",
            });
        }
        // In flight plus unconsumed must stay below fw_cmds (QEMU has no ring-full check).
        let ntags = (fw_cmds - 1).min(config.max_tags).clamp(1, tags::MAX_TAGS);
        let window_sge = ((frame::QEMU_SGL_WINDOW - frame::PASS_SGL) / frame::SGE64_LEN) as u16;
        let max_sge = u16::from(fw_status.max_sge())
            .min(config.max_sge)
            .min(frame::QEMU_MAX_SGE as u16)
            .min(window_sge)
            .max(1);
        let frame_stride = (frame::PASS_SGL + usize::from(max_sge) * frame::SGE64_LEN)
            .next_power_of_two()
            .max(256);
        let n = usize::from(ntags);
        let sense_off = n * frame_stride;
        let dummy_off = sense_off + n * SENSE_LEN;
        // QEMU maps 2 KiB from every frame, so the last frame needs that much memory after it.
        let pool_len = (dummy_off + 64).max((n - 1) * frame_stride + frame::QEMU_SGL_WINDOW);
        let pool = DmaBuf::alloc(&dma, pool_len, 4096)?;
        // QEMU wraps its producer at fw_cmds whatever rq_entries says: declare exactly that many.
        let ring_entries = u32::from(fw_cmds);
        let ring = DmaBuf::alloc(&dma, RING_ENTRIES + 4 * ring_entries as usize, 4096)?;
        let admin = DmaBuf::alloc(&dma, ADMIN_LEN, 4096)?;
        for i in 0..ring_entries as usize {
            ring.atomic_u32(RING_ENTRIES + 4 * i)
                .store(RING_SENTINEL, Ordering::Relaxed);
        }
        let mut ctrl = Self {
            mmio,
            delay,
            _dma: dma,
            model,
            config,
            fw_status,
            info: ControllerInfo {
                vendor_id: 0,
                device_id: 0,
                subvendor_id: 0,
                subdevice_id: 0,
                product: alloc::string::String::new(),
                serial: alloc::string::String::new(),
                firmware: alloc::string::String::new(),
                package: alloc::string::String::new(),
                max_cmds: fw_cmds,
                max_sge,
                max_request_sectors: 0,
                lds_present: 0,
                pds_present: 0,
            },
            ntags,
            max_sge,
            pool,
            frame_stride,
            sense_off,
            dummy_off,
            ring,
            ring_entries,
            admin,
            admin_busy: AtomicBool::new(false),
            tags: TagTable::new(ntags),
            ci: AtomicU32::new(0),
            gate: ReapGate::new(),
            post_lock: AtomicBool::new(false),
            operational: AtomicBool::new(false),
            irq_enabled: AtomicBool::new(false),
            drives: core::array::from_fn(|_| DriveSlot {
                block_size: AtomicU32::new(0),
                blocks: AtomicU64::new(0),
            }),
            pds: core::array::from_fn(|_| DriveSlot {
                block_size: AtomicU32::new(0),
                blocks: AtomicU64::new(0),
            }),
            faults: AtomicU64::new(0),
            submit_gate: drvkit::gate::Gate::new(SUBMIT_LANES),
            admin_quarantined: AtomicBool::new(false),
            abort_victim: AtomicU32::new(0),
            reset_requested: AtomicBool::new(false),
            aborts_sent: AtomicU64::new(0),
            aborts_confirmed: AtomicU64::new(0),
            aborts_failed: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            reset_failed_commands: AtomicU64::new(0),
            quarantined: AtomicU64::new(0),
        };
        ctrl.init_queue()?;
        let info = ctrl.ctrl_get_info(ADMIN_TAG)?;
        ctrl.ntags = ctrl.ntags.min(info.max_cmds - 1);
        ctrl.max_sge = ctrl.max_sge.min(info.max_sge);
        log::info!(
            "megasas: {} operational: {}; {} tags, {} SGEs, reply ring {} entries",
            ctrl.model,
            info,
            ctrl.ntags,
            ctrl.max_sge,
            ctrl.ring_entries
        );
        ctrl.info = info;
        ctrl.operational.store(true, Ordering::Release);
        Ok(ctrl)
    }

    pub(super) fn bringup(&self) -> Bringup<'_, M, T> {
        Bringup {
            mmio: &self.mmio,
            delay: &self.delay,
            model: self.model,
            config: &self.config,
            waited_total: core::cell::Cell::new(0),
        }
    }

    /// Sends INIT with the reply queue. The firmware must be READY: QEMU answers INIT while
    /// OPERATIONAL with OK and changes nothing.
    pub(super) fn init_queue(&self) -> Result<(), Error> {
        // QEMU seeds its head and tail from these words: zero them first.
        self.ring.atomic_u32(RING_PI).store(0, Ordering::Relaxed);
        self.ring.atomic_u32(RING_CI).store(0, Ordering::Relaxed);
        self.ci.store(0, Ordering::Relaxed);
        let q = RING_QINFO;
        self.ring.write_u32(q, 0); // flags: 32-bit contexts
        self.ring.write_u32(q + 4, self.ring_entries);
        self.ring.write_u64(q + 8, self.ring.phys_at(RING_ENTRIES));
        self.ring.write_u64(q + 16, self.ring.phys_at(RING_PI));
        self.ring.write_u64(q + 24, self.ring.phys_at(RING_CI));
        let qinfo = self.ring.phys_at(q);
        let done = self.run_polled(0, "INIT", 64, |w, ctx| {
            w.header(&Header {
                cmd: frame::CMD_INIT,
                sense_len: 0,
                target: 0,
                cdb_len: 0,
                sge_count: 0,
                context: ctx,
                flags: frame::FLAG_DONT_POST,
                data_len: frame::QINFO_LEN as u32,
            });
            w.u64_at(0x18, qinfo);
            w.u64_at(0x20, 0);
        })?;
        if done.mfi != MfiStatus::OK {
            return Err(Error::InitFailed { status: done.mfi });
        }
        let state = self.firmware_status().state();
        if state != FwState::Operational {
            return Err(Error::NotOperationalAfterInit { state });
        }
        Ok(())
    }

    /// Masks nothing and unmasks the reply interrupt: clears the doorbell, then writes OMSK.
    /// Program MSI-X/MSI first, or the first completions assert INTx. For polled mode, unmask too
    /// (QEMU's ring only advances unmasked) and keep delivery off at the PCI level instead.
    pub fn enable_interrupts(&self) -> Result<(), Error> {
        // Unmasking before INIT makes QEMU write the producer index to address 0.
        if !self.is_operational() {
            return Err(Error::NotOperational);
        }
        self.mmio.write32(regs::ODCR0, 0xFFFF_FFFF);
        self.mmio.write32(regs::OMSK, self.model.unmask_value());
        self.irq_enabled.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the controller: aborts whatever is outstanding and returns the firmware to READY.
    /// This is the only way to mask at the controller, because on QEMU an all-ones OMSK *is* a soft
    /// reset; while running, mask at the MSI-X vector, IOAPIC or PCI command register.
    /// Quiesce the block layer first: in-flight commands complete with MFI status 0x2E or vanish.
    pub fn shutdown(&self) -> Result<FwStatus, Error> {
        self.operational.store(false, Ordering::Release);
        self.irq_enabled.store(false, Ordering::Release);
        self.mmio.write32(regs::IDB, regs::IDB_RESET_FLAGS);
        let status = self.bringup().to_ready()?;
        self.mmio.write32(regs::OMSK, 0xFFFF_FFFF);
        Ok(status)
    }
}
