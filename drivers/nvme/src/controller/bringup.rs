//! Bring-up: taking the controller over from whatever state firmware left it in (disable, wait
//! for RDY, program the admin queue, enable), identify, the queue count, and the shutdown
//! notification before power-off.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64};

use spin::Mutex;

use crate::regs::{self, CQE_SIZE, Cap, Csts, PAGE_SIZE, SQE_SIZE};
use crate::{Delay, Dma, Error, Mmio};
use devhal::DmaBuf;

use super::{Admin, Config, Controller, ControllerInfo, Counters, STATE_LIVE};

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Takes the controller over from whatever state firmware left it in (disable, wait RDY=0,
    /// program the admin queue, enable, wait RDY=1), identifies it and its namespaces, and asks
    /// for `config.requested_io_queues` I/O queue pairs. No I/O queue exists yet: build a
    /// [`QueuePlan`](crate::QueuePlan) from [`Controller::max_io_queues`], program MSI-X, then call
    /// [`Controller::create_io_queues`] (done by `blkdev::Host::new`).
    pub fn new(mmio: M, dma: D, delay: T, config: Config) -> Result<Self, Error> {
        if !(2..=4096).contains(&config.admin_entries) {
            return Err(Error::InvalidConfig {
                field: "admin_entries",
                value: config.admin_entries.into(),
                accepted: "2..=4096",
            });
        }
        if config.requested_io_queues == 0 || config.requested_io_queues == u16::MAX {
            return Err(Error::InvalidConfig {
                field: "requested_io_queues",
                value: config.requested_io_queues.into(),
                accepted: "1..=65534",
            });
        }
        if config.floor_slots > 1024 {
            return Err(Error::InvalidConfig {
                field: "floor_slots",
                value: config.floor_slots.into(),
                accepted: "0..=1024",
            });
        }
        if config.doorbell_batch == 0 {
            return Err(Error::InvalidConfig {
                field: "doorbell_batch",
                value: 0,
                accepted: "1 or more commands per doorbell",
            });
        }
        if config.queue_depth == 0 || config.poll_us == 0 {
            return Err(Error::InvalidConfig {
                field: "queue_depth/poll_us",
                value: 0,
                accepted: "non-zero",
            });
        }
        let cap = Cap(read64(&mmio, regs::CAP));
        cap.validate()?;
        let entries = config.admin_entries.min(cap.max_queue_entries());
        let admin = Admin {
            sq: DmaBuf::alloc(&dma, entries as usize * SQE_SIZE, PAGE_SIZE)?,
            cq: DmaBuf::alloc(&dma, entries as usize * CQE_SIZE, PAGE_SIZE)?,
            buf: DmaBuf::alloc(&dma, PAGE_SIZE, PAGE_SIZE)?,
            entries,
            tail: 0,
            head: 0,
            phase: true,
            next_cid: 0,
            stuck: false,
        };
        let mut ctrl = Self {
            mmio,
            dma,
            delay,
            config,
            cap,
            info: ControllerInfo {
                vid: 0,
                serial: Default::default(),
                model: Default::default(),
                firmware: Default::default(),
                mdts: 0,
                nn: 0,
                volatile_cache: false,
                dataset_management: false,
            },
            namespaces: Vec::new(),
            max_io_queues: 0,
            max_transfer: config.max_transfer_bytes,
            admin: Mutex::new(admin),
            io: Vec::new(),
            cids_per_sq: 0,
            floor_slots: 0,
            index_mask: u16::MAX,
            queue_depth: 0,
            state: AtomicU8::new(STATE_LIVE),
            reset_lock: Mutex::new(()),
            counters: Counters::default(),
            log_budget: AtomicU64::new(16),
            queues_created: AtomicBool::new(false),
        };
        {
            let mut a = ctrl.admin.lock();
            // Firmware (SeaBIOS's NVMe boot support) may hand over a running controller with
            // queues of its own: say so, since taking it over is a path of its own.
            let cc = ctrl.mmio.read32(regs::CC);
            if cc != u32::MAX && cc & regs::CC_EN != 0 {
                log::info!("nvme: firmware left the controller enabled (CC={cc:#x}); disabling it before taking over");
            }
            ctrl.disable()?;
            ctrl.enable_admin(&mut a)?;
            ctrl.info = ctrl.identify_controller(&mut a)?;
            if ctrl.info.mdts != 0 {
                let mdts_bytes = (PAGE_SIZE as u64) << ctrl.info.mdts.min(40);
                ctrl.max_transfer = ctrl.max_transfer.min(mdts_bytes);
            }
            ctrl.namespaces = ctrl.identify_namespaces(&mut a)?;
            ctrl.max_io_queues = ctrl.set_number_of_queues(&mut a, config.requested_io_queues)?;
        }
        log::info!(
            "nvme: {} {} fw {} ({:#06x}): {} namespace(s), {} I/O queue pair(s) granted, max transfer {} KiB, MQES {}",
            ctrl.info.model,
            ctrl.info.serial,
            ctrl.info.firmware,
            ctrl.info.vid,
            ctrl.namespaces.len(),
            ctrl.max_io_queues,
            ctrl.max_transfer / 1024,
            cap.max_queue_entries()
        );
        Ok(ctrl)
    }

    pub(super) fn csts(&self) -> Csts {
        Csts(self.mmio.read32(regs::CSTS))
    }

    /// Waits for CSTS.RDY == `want` within CAP.TO.
    fn wait_ready(&self, want: bool) -> Result<(), Error> {
        let limit_us = self.cap.timeout_ms() * 1000;
        let mut waited = 0u64;
        loop {
            let csts = self.csts();
            if csts.gone() {
                return Err(Error::DeviceGone);
            }
            if csts.ready() == want {
                return Ok(());
            }
            if want && csts.fatal() {
                return Err(Error::ControllerFatal { csts: csts.0 });
            }
            if waited >= limit_us {
                return Err(Error::ReadyTimeout {
                    want,
                    waited_ms: waited / 1000,
                    csts: csts.0,
                });
            }
            self.delay.delay_us(self.config.poll_us);
            waited += u64::from(self.config.poll_us);
        }
    }

    /// CC.EN = 0 and wait for RDY = 0 (also clears CFS). If the firmware left EN = 0 with RDY
    /// still 1 (a disable in progress), wait for that too.
    pub(super) fn disable(&self) -> Result<(), Error> {
        let cc = self.mmio.read32(regs::CC);
        if cc == u32::MAX {
            return Err(Error::DeviceGone);
        }
        if cc & regs::CC_EN != 0 {
            // Clear a shutdown request too; EN=0 is never combined with setting SHN (QEMU's
            // reset path then drops SHST).
            self.mmio.write32(regs::CC, cc & !(regs::CC_EN | 3 << 14));
        } else if !self.csts().ready() {
            return Ok(());
        }
        self.wait_ready(false)
    }

    /// Programs AQA/ASQ/ACQ (the admin memory zeroed) and enables the controller.
    pub(super) fn enable_admin(&self, a: &mut Admin) -> Result<(), Error> {
        a.sq.zero();
        a.cq.zero();
        a.tail = 0;
        a.head = 0;
        a.phase = true;
        a.stuck = false;
        self.mmio.write32(regs::AQA, regs::aqa(a.entries, a.entries));
        write64(&self.mmio, regs::ASQ, a.sq.phys());
        write64(&self.mmio, regs::ACQ, a.cq.phys());
        self.mmio.write32(regs::CC, regs::CC_ENABLE);
        self.wait_ready(true)
    }

    /// Normal shutdown (CC.SHN = 01b; never together with EN = 0), waiting up to CAP.TO for
    /// SHST = complete.
    pub fn shutdown(&self) -> Result<(), Error> {
        let cc = self.mmio.read32(regs::CC);
        self.mmio.write32(regs::CC, (cc & !(3 << 14)) | regs::CC_SHN_NORMAL);
        let limit_us = self.cap.timeout_ms() * 1000;
        let mut waited = 0;
        while self.csts().shutdown_status() != 2 {
            if waited >= limit_us {
                return Err(Error::ReadyTimeout {
                    want: false,
                    waited_ms: waited / 1000,
                    csts: self.csts().0,
                });
            }
            self.delay.delay_us(self.config.poll_us);
            waited += u64::from(self.config.poll_us);
        }
        Ok(())
    }
}

fn read64(mmio: &impl Mmio, off: u32) -> u64 {
    u64::from(mmio.read32(off)) | u64::from(mmio.read32(off + 4)) << 32
}

fn write64(mmio: &impl Mmio, off: u32, v: u64) {
    mmio.write32(off, v as u32);
    mmio.write32(off + 4, (v >> 32) as u32);
}
