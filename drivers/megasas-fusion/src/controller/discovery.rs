//! MFI pass-through DCMDs (CTRL_GET_INFO, LD_GET_LIST, PD_LIST_QUERY, cache flush, shutdown)
//! and the polled READ CAPACITY that sizes each drive at bring-up.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{Ordering, fence};

use crate::Mmio64;
use devhal::Delay;
use megasas::dcmd::{self, Capacity, ControllerInfo, LdListEntry};
use megasas::{MfiStatus, Segment};

use devhal::DmaBuf;

use crate::diag::Report;
use crate::error::Error;
use crate::raidmap::{self, RaidMap};

use super::mapsync::MAP_SYNC_SLOT;
use crate::regs::{self, FwState, FwStatus};

use super::{
    Budget, CTRL_INFO_LEN, Completion, Controller, DCMD_CACHE_FLUSH, DCMD_CTRL_GET_INFO, DCMD_DATA_LEN,
    DCMD_LD_GET_LIST, DCMD_SHUTDOWN, DCMD_SMIDS, F_CHAIN_OFFSET, F_FUNCTION, F_SGL, F_SGL_OFFSET0, FRAME_SIZE,
    FUNC_MFI_PASSTHRU, IoOutcome, LogicalDrive, MFI_FRAME_LEN, Mistake, desc, read_reg, sge_bytes, wait,
};

/// LD_GET_LIST buffer: `MR_LD_LIST` with 256 entries (4104 bytes), as Linux and FreeBSD.
pub const LD_LIST_LEN: usize = 8 + 256 * 16;
/// PD_LIST_QUERY and its mailbox byte 0 for the PDs exposed to the host (system PDs).
pub const DCMD_PD_LIST_QUERY: u32 = 0x0201_0100;
const PD_QUERY_EXPOSED_TO_HOST: u8 = 5;
/// MFI frame flags: data in (from the firmware), data out (to it), 64-bit SGEs.
const MFI_DIR_READ: u16 = 0x0010;
pub(super) const MFI_DIR_WRITE: u16 = 0x0008;
const MFI_SGL64: u16 = 0x0002;

const READ_CAPACITY16_LEN: u32 = 32;

impl<M: Mmio64, D: Delay> Controller<M, D> {
    pub(super) fn read_info(&mut self, budget: &mut Budget, report: &mut Report) -> Result<(), Error> {
        let mut mbox = [0u8; 12];
        mbox[0] = 1;
        let len = if self.mistake(Mistake::QemuDcmdSizes) {
            2048
        } else {
            CTRL_INFO_LEN
        };
        let b = self.dcmd_exclusive(budget, DCMD_CTRL_GET_INFO, mbox, len)?;
        self.info = ControllerInfo::parse(&b)?;
        let on_off = u32::from_le_bytes([b[0x620], b[0x621], b[0x622], b[0x623]]);
        self.ocr_disabled = on_off & (1 << 10) != 0;
        // max_lds @0x53F, adapterOperations3.supportMaxExtLDs @0x7E8 bit 5 (Linux, FreeBSD).
        let ops3 = u32::from_le_bytes([b[0x7E8], b[0x7E9], b[0x7EA], b[0x7EB]]);
        self.ext_lds = b[0x53F] > 64 || ops3 & (1 << 5) != 0;
        // adapterOperations3 bit 24: the firmware keeps a JBOD sequence map (Linux's
        // useSeqNumJbodFP).
        let jbod_offered = ops3 & super::jbodmap::CI_OPS3_JBOD_SEQ_MAP != 0;
        self.jbod.offered.store(jbod_offered, Ordering::Relaxed);
        self.jbod.wanted.store(
            jbod_offered && self.config.jbod_map && self.jbod_map_possible(),
            Ordering::Relaxed,
        );
        report.step(
            &self.mmio,
            self.generation,
            budget.used(),
            "CTRL_GET_INFO",
            alloc::format!(
                "{}; OCR {}; JBOD sequence map {}",
                self.info,
                if self.ocr_disabled { "disabled" } else { "enabled" },
                match (jbod_offered, self.config.jbod_map) {
                    (false, _) => "not offered",
                    (true, false) => "offered, not used (megasas.jbod_map=off)",
                    (true, true) => "offered",
                }
            ),
        );
        Ok(())
    }

    pub(super) fn discover(&mut self, budget: &mut Budget, report: &mut Report) -> Result<(), Error> {
        // Linux's MR_LD_LIST (4104 B); mbox b[0] = 1 asks 256-VD firmware for all its LDs.
        let mut mbox = [0u8; 12];
        mbox[0] = u8::from(self.ext_lds);
        let b = self.dcmd_exclusive(budget, DCMD_LD_GET_LIST, mbox, LD_LIST_LEN)?;
        let max_lds = if self.ext_lds { 256 } else { dcmd::MAX_LD };
        let list: Vec<LdListEntry> = dcmd::parse_ld_list_up_to(&b, max_lds)?;
        report.step(
            &self.mmio,
            self.generation,
            budget.used(),
            "LD_GET_LIST",
            alloc::format!("{} logical drives: {list:?}", list.len()),
        );
        let mut drives = Vec::new();
        for e in list.iter().filter(|e| e.state != 0) {
            match self.read_capacity(budget, e.target, false)? {
                Ok(cap) => drives.push(LogicalDrive {
                    target: e.target,
                    blocks: cap.blocks,
                    block_size: cap.block_size,
                    state: e.state,
                    system_pd: false,
                }),
                // No guess from the LD list's size field, whose units no source gives:
                // the drive is left out and the report says why.
                Err(why) => report.step(
                    &self.mmio,
                    self.generation,
                    budget.used(),
                    "READ CAPACITY failed; drive left out",
                    alloc::format!("target {}: {why}", e.target),
                ),
            }
        }
        // System PDs (JBOD): PD_LIST_QUERY with mbox b[0] = 5 (exposed to host), as
        // Linux `megasas_get_pd_list`. Linux gives up on a failure; here it is reported and
        // bring-up goes on with the LDs.
        let mut mbox = [0u8; 12];
        mbox[0] = PD_QUERY_EXPOSED_TO_HOST;
        match self
            .dcmd_exclusive(budget, DCMD_PD_LIST_QUERY, mbox, dcmd::PD_LIST_LEN)
            .and_then(|b| dcmd::parse_pd_list(&b).map_err(Error::from))
        {
            Ok(pds) => {
                report.step(
                    &self.mmio,
                    self.generation,
                    budget.used(),
                    "PD_LIST_QUERY",
                    alloc::format!(
                        "{} system PD(s) (JBOD) of {} PDs present: {pds:?}",
                        pds.len(),
                        self.info.pds_present
                    ),
                );
                for pd in pds {
                    let Ok(target) = u8::try_from(pd.device_id) else {
                        report.step(
                            &self.mmio,
                            self.generation,
                            budget.used(),
                            "system PD left out",
                            alloc::format!("device id {:#x} is not below 256", pd.device_id),
                        );
                        continue;
                    };
                    if pd.scsi_type != 0 {
                        continue;
                    }
                    match self.read_capacity(budget, target, true)? {
                        Ok(cap) => drives.push(LogicalDrive {
                            target,
                            blocks: cap.blocks,
                            block_size: cap.block_size,
                            state: 0,
                            system_pd: true,
                        }),
                        Err(why) => report.step(
                            &self.mmio,
                            self.generation,
                            budget.used(),
                            "READ CAPACITY failed; system PD left out",
                            alloc::format!("device {target}: {why}"),
                        ),
                    }
                }
            }
            Err(e) => report.step(
                &self.mmio,
                self.generation,
                budget.used(),
                "PD_LIST_QUERY failed; no JBOD disks",
                alloc::format!("{e}"),
            ),
        }
        report.step(
            &self.mmio,
            self.generation,
            budget.used(),
            "drives",
            alloc::format!("{drives:?}"),
        );
        self.drives = drives;
        Ok(())
    }

    /// READ CAPACITY(16), then READ CAPACITY(10) if that fails, through the LD non-read/write
    /// path into DCMD slot 0's data buffer. The outer error stops bring-up (firmware gone); the
    /// inner one says why this drive has no usable capacity.
    fn read_capacity(
        &self,
        budget: &mut Budget,
        target: u8,
        system_pd: bool,
    ) -> Result<Result<Capacity, String>, Error> {
        let buf_off = MFI_FRAME_LEN * usize::from(DCMD_SMIDS);
        let cap_buf = self.mem.dcmd.phys() + buf_off as u64;
        let mut failures = String::new();
        for sixteen in [true, false] {
            let mut cdb = [0u8; 16];
            let len = if sixteen {
                cdb[0] = 0x9E;
                cdb[1] = 0x10;
                cdb[10..14].copy_from_slice(&READ_CAPACITY16_LEN.to_be_bytes());
                READ_CAPACITY16_LEN
            } else {
                cdb[0] = 0x25;
                8
            };
            self.mem.dcmd.fill(buf_off, READ_CAPACITY16_LEN as usize, 0);
            let seg = [Segment { phys: cap_buf, len }];
            let c = self.polled_io(budget, target, system_pd, &cdb, false, &seg)?;
            let name = if sixteen {
                "READ CAPACITY(16)"
            } else {
                "READ CAPACITY(10)"
            };
            let mut raw = [0u8; READ_CAPACITY16_LEN as usize];
            self.mem.dcmd.read_bytes(buf_off, &mut raw);
            // A residual (0x2D + GOOD) is fine as long as the fields we read arrived.
            let need = if sixteen { 12 } else { 8 };
            let parsed = match c.outcome {
                IoOutcome::Ok if c.bytes_done >= need => {
                    if sixteen {
                        Capacity::parse(&raw).map_err(|e| alloc::format!("{e}"))
                    } else {
                        capacity_from_rc10(&raw)
                    }
                }
                IoOutcome::Ok => Err(alloc::format!("only {} bytes returned", c.bytes_done)),
                IoOutcome::Failed(err) => Err(alloc::format!("{err}")),
                IoOutcome::Reset => return Err(Error::Resetting),
                IoOutcome::StaleMap => Err(String::from("refused for a stale RAID map")),
            };
            match parsed {
                Ok(cap) => return Ok(Ok(cap)),
                Err(why) => {
                    if !failures.is_empty() {
                        failures.push_str("; ");
                    }
                    failures.push_str(name);
                    failures.push_str(": ");
                    failures.push_str(&why);
                }
            }
        }
        Ok(Err(failures))
    }

    /// Submits with tag 0 on queue 0 and polls queue 0 until it completes (bring-up only).
    fn polled_io(
        &self,
        budget: &mut Budget,
        target: u8,
        system_pd: bool,
        cdb: &[u8; 16],
        write: bool,
        segs: &[Segment],
    ) -> Result<Completion, Error> {
        let len: u32 = segs.iter().map(|s| s.len).sum();
        self.submit_raw(0, 0, target, system_pd, cdb, Some(write), len, segs, 0, true)?;
        let mut waited = 0u64;
        loop {
            let mut done = None;
            self.reap_inner(0, &mut |c| done = Some(c));
            if let Some(c) = done {
                return Ok(c);
            }
            if waited >= self.config.command_timeout_us {
                return Err(Error::DcmdTimeout {
                    opcode: u32::from(cdb[0]),
                });
            }
            if waited.is_multiple_of(10_000) {
                let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
                if FwStatus(sp0).state() == FwState::Fault {
                    return Err(Error::FirmwareFault { sp0 });
                }
            }
            wait(&self.delay, budget, 100, "polled I/O", &self.mmio, self.generation)?;
            waited += 100;
        }
    }

    /// A polled DCMD while nothing else runs (bring-up, reset): polls queue 0 for the late
    /// reply too, so the SMID is free again on return.
    fn dcmd_exclusive(&self, budget: &mut Budget, opcode: u32, mbox: [u8; 12], len: usize) -> Result<Vec<u8>, Error> {
        self.dcmd_inner(Some(budget), opcode, mbox, len, None)
    }

    /// Runs a DCMD while I/O may be running (e.g. cache flush before shutdown). Its SMID is
    /// freed when queue 0's reaper sees its reply.
    pub fn dcmd(&self, opcode: u32, mbox: [u8; 12], len: usize) -> Result<Vec<u8>, Error> {
        let _g = self.gate.try_enter(0).ok_or(Error::Resetting)?;
        self.dcmd_inner(None, opcode, mbox, len, None)
    }

    pub(super) fn dcmd_inner(
        &self,
        mut budget: Option<&mut Budget>,
        opcode: u32,
        mbox: [u8; 12],
        len: usize,
        into: Option<&DmaBuf>,
    ) -> Result<Vec<u8>, Error> {
        // `into`: a buffer of its own (the RAID map) instead of the SMID's 8 KiB data slot, of
        // which the first `len` bytes are the DCMD's (all of it for 0).
        let len = into.map_or(len, |b| if len == 0 { b.len() } else { len.min(b.len()) });
        if into.is_none() && len > DCMD_DATA_LEN {
            return Err(Error::BadConfig {
                what: "DCMD length",
                expected: "at most 8192 bytes",
            });
        }
        let _l = self.dcmd_lock.lock();
        let exclusive = budget.is_some();
        let k = if self.mistake(Mistake::LeakDcmdSmid) {
            0
        } else {
            // The map syncs' slots are their own, even while no sync is pended.
            (0..super::jbodmap::JBOD_SYNC_SLOT.min(MAP_SYNC_SLOT))
                .find(|&k| !self.dcmd_reply_pending[k].load(Ordering::Acquire))
                .ok_or(Error::NoDcmdSlot)?
        };
        let smid = self.limits.io_tags + 1 + k as u16;
        let mfi_off = k * MFI_FRAME_LEN;
        let data_off = usize::from(DCMD_SMIDS) * MFI_FRAME_LEN + k * DCMD_DATA_LEN;
        let d = &self.mem.dcmd;
        d.fill(data_off, DCMD_DATA_LEN, 0);
        let data = into.map_or(d.phys() + data_off as u64, DmaBuf::phys);
        self.write_dcmd_frame(mfi_off, opcode, &mbox, MFI_DIR_READ, data, len);
        if len == 0 && self.mistake(Mistake::NoDataDcmdWithSge) {
            d.write_u8(mfi_off + 0x07, 1);
            d.write_u16(mfi_off + 0x10, MFI_DIR_READ | MFI_SGL64);
            d.write_u64(mfi_off + 0x28, d.phys() + data_off as u64);
        }
        self.write_passthru_frame(smid, mfi_off);
        self.dcmd_reply_pending[k].store(true, Ordering::Release);
        let msix = if self.mistake(Mistake::DcmdOffQueue0) && self.limits.queues > 1 {
            1
        } else {
            0
        };
        fence(Ordering::Release);
        self.post_descriptor(desc(regs::DESC_SCSI_IO, msix, smid));
        let mut waited = 0u64;
        let mut status = 0xFF;
        loop {
            if status == 0xFF {
                status = d.read_u8(mfi_off + 0x02);
            }
            let reply_done = !self.dcmd_reply_pending[k].load(Ordering::Acquire);
            if status != 0xFF && (!exclusive || reply_done || self.mistake(Mistake::LeakDcmdSmid)) {
                break;
            }
            if waited >= self.config.command_timeout_us {
                return Err(Error::DcmdTimeout { opcode });
            }
            if exclusive {
                self.reap_inner(0, &mut |_| {});
            }
            // A firmware that faults never answers: stop waiting (the SMID stays reserved).
            if waited.is_multiple_of(10_000) {
                let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
                if FwStatus(sp0).state() == FwState::Fault {
                    return Err(Error::FirmwareFault { sp0 });
                }
            }
            match budget.as_deref_mut() {
                Some(b) => wait(&self.delay, b, 100, "DCMD", &self.mmio, self.generation)?,
                None => self.delay.delay_us(100),
            }
            waited += 100;
        }
        if self.mistake(Mistake::LeakDcmdSmid) {
            self.dcmd_reply_pending[k].store(false, Ordering::Release);
        }
        if status != 0 {
            return Err(Error::DcmdFailed {
                opcode,
                status: MfiStatus(status),
            });
        }
        let mut out = vec![0u8; len];
        match into {
            Some(buf) => buf.read_bytes(0, &mut out),
            None => d.read_bytes(data_off, &mut out),
        }
        Ok(out)
    }

    /// Reads and checks the RAID map (the DCMD buffer SP2 sized at bring-up) and keeps the
    /// RAID-0 LDs FastPath may serve: in the map, FastPath-ready, listed by LD_GET_LIST with
    /// 512-byte blocks and no more blocks than the map gives the LD. Without a map, with a
    /// refused one or with `fastpath = false`, every LD command takes the LD path; the report
    /// says which and why. A map whose structure was accepted gets a map sync pended.
    /// The pass-through I/O frame of `smid`: a chain element pointing at the MFI frame at
    /// `mfi_off` of the DCMD area.
    pub(super) fn write_passthru_frame(&self, smid: u16, mfi_off: usize) {
        let f = &self.mem.frames;
        let fo = FRAME_SIZE * usize::from(smid);
        f.fill(fo, FRAME_SIZE, 0);
        f.write_u8(fo + F_CHAIN_OFFSET, 8);
        f.write_u8(fo + F_FUNCTION, FUNC_MFI_PASSTHRU);
        f.write_u8(fo + F_SGL_OFFSET0, 0x20);
        f.write_bytes(
            fo + F_SGL,
            &sge_bytes(self.mem.dcmd.phys() + mfi_off as u64, MFI_FRAME_LEN as u32, 0x83),
        );
    }

    /// Posts the pended DCMD of DCMD slot `k`, its MFI frame written at `mfi_off`: its
    /// pass-through frame on the slot's SMID above the I/O tags, the reply marked pending and
    /// `posted` set, then the descriptor.
    pub(super) fn post_pended_dcmd(&self, k: usize, mfi_off: usize, posted: &core::sync::atomic::AtomicBool) {
        let smid = self.limits.io_tags + 1 + k as u16;
        self.write_passthru_frame(smid, mfi_off);
        self.dcmd_reply_pending[k].store(true, Ordering::Release);
        posted.store(true, Ordering::Release);
        // The frames and the flags must be visible to the device before the descriptor.
        fence(Ordering::Release);
        self.post_descriptor(desc(regs::DESC_SCSI_IO, 0, smid));
    }

    /// The MFI DCMD frame at `mfi_off` of the DCMD area, cleared first: `opcode` with `mbox`
    /// and `len` bytes at `data` in direction `dir`. Ventura/Aero get sge64 and SGL64 (Linux
    /// with a 64-bit DMA mask), Thunderbolt/Invader sge32 as Linux and FreeBSD (all DCMD memory
    /// is below 4 GiB). No data (cache flush, shutdown): sge_count 0 and DIR_NONE, as Linux
    /// and FreeBSD; the flags word stays 0.
    pub(super) fn write_dcmd_frame(
        &self,
        mfi_off: usize,
        opcode: u32,
        mbox: &[u8; 12],
        dir: u16,
        data: u64,
        len: usize,
    ) {
        let d = &self.mem.dcmd;
        d.fill(mfi_off, MFI_FRAME_LEN, 0);
        d.write_u8(mfi_off, 0x05);
        d.write_u8(mfi_off + 0x02, 0xFF);
        d.write_u32(mfi_off + 0x14, len as u32);
        d.write_u32(mfi_off + 0x18, opcode);
        d.write_bytes(mfi_off + 0x1C, mbox);
        if len == 0 {
            return;
        }
        d.write_u8(mfi_off + 0x07, 1);
        if self.generation.g35_raid_context() {
            d.write_u16(mfi_off + 0x10, dir | MFI_SGL64);
            d.write_u64(mfi_off + 0x28, data);
            d.write_u32(mfi_off + 0x30, len as u32);
        } else {
            d.write_u16(mfi_off + 0x10, dir);
            d.write_u32(mfi_off + 0x28, data as u32);
            d.write_u32(mfi_off + 0x2C, len as u32);
        }
    }

    pub(super) fn read_raid_map(&mut self, budget: &mut Budget, report: &mut Report) {
        let Some(map) = self.take_raid_map(budget) else {
            return;
        };
        let format = self.map_format().name();
        let (lds, text) = match &map {
            Ok(map) => {
                let lds = self.usable_fastpath_lds(map);
                let text = alloc::format!("{format} map: {}", describe_map(map, &lds));
                (lds, text)
            }
            Err(e) => (
                Vec::new(),
                alloc::format!("{format} map: {e}; every LD on the firmware LD path"),
            ),
        };
        report.step(&self.mmio, self.generation, budget.used(), "RAID map", text);
        // Bring-up owns the controller (`&mut self`): no submitter reads the tables yet.
        self.fastpath.publish(&lds);
        if let Some(text) = self.take_raid_map_jbod_handles(map.as_ref().ok()) {
            report.step(&self.mmio, self.generation, budget.used(), "JBOD by RAID map", text);
        }
        if let Ok(map) = &map {
            self.post_map_sync(map);
        }
    }

    /// After an OCR (the gate closed; the adapter reset cancelled any map sync): reads the map
    /// again, takes it whether or not it changed, and pends a new map sync.
    pub(super) fn recheck_raid_map(&self, budget: &mut Budget, report: &mut Report) {
        let before = self.fastpath.current();
        let Some(map) = self.take_raid_map(budget) else {
            return;
        };
        let text = match &map {
            Ok(map) => {
                let lds = self.usable_fastpath_lds(map);
                // No submitter is inside: the table to fill is free.
                self.fastpath.publish(&lds);
                self.post_map_sync(map);
                match (lds == before, lds.is_empty()) {
                    (true, false) => String::from("unchanged: FastPath on"),
                    (true, true) => String::from("no FastPath-ready LD: every LD on the LD path"),
                    (false, _) => alloc::format!("changed: {}", describe_map(map, &lds)),
                }
            }
            Err(e) => {
                self.fastpath.publish(&[]);
                alloc::format!("{e}: FastPath off")
            }
        };
        report.step(&self.mmio, self.generation, budget.used(), "OCR: RAID map", text);
        if let Some(text) = self.take_raid_map_jbod_handles(map.as_ref().ok()) {
            report.step(
                &self.mmio,
                self.generation,
                budget.used(),
                "OCR: JBOD by RAID map",
                text,
            );
        }
    }

    /// Reads the RAID map into the buffer of the map in use (no map sync is on the device);
    /// None without map buffers.
    fn take_raid_map(&self, budget: &mut Budget) -> Option<Result<RaidMap, Error>> {
        let bufs = self.mem.raid_map.as_ref()?;
        let buf = &bufs[usize::from(self.map_sync.current.load(Ordering::Relaxed))];
        let format = self.map_format();
        Some(
            self.dcmd_inner(
                Some(budget),
                raidmap::DCMD_LD_MAP_GET_INFO,
                [0u8; 12],
                format.bytes(),
                Some(buf),
            )
            .and_then(|b| format.parse(&b)),
        )
    }

    /// The format the firmware answers the map DCMD in, as Linux decides it: dynamic on Ventura
    /// and later (the size SP2 gave the buffers), extended when the controller information
    /// offers 256 LDs (IOC INIT always asks for them), legacy otherwise. Only meaningful with
    /// map buffers.
    pub(super) fn map_format(&self) -> raidmap::MapFormat {
        if self.generation.g35_raid_context() {
            raidmap::MapFormat::Dynamic {
                bytes: self.mem.raid_map.as_ref().map_or(0, |b| b[0].len()),
            }
        } else if self.ext_lds && !self.mistake(Mistake::ExtMapReadAsLegacy) {
            raidmap::MapFormat::Ext
        } else {
            raidmap::MapFormat::Legacy
        }
    }

    pub(super) fn usable_fastpath_lds(&self, map: &RaidMap) -> Vec<raidmap::FastPathLd> {
        map.lds
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
            .filter(|ld| {
                self.drives
                    .iter()
                    .any(|d| !d.system_pd && d.target == ld.target && d.block_size == 512 && d.blocks <= ld.blocks)
            })
            .map(|ld| raidmap::FastPathLd {
                // Linux marks cache-bypass writes in the G35 RAID context only (Ventura on).
                cache_bypass: ld.cache_bypass && self.generation.g35_raid_context(),
                ..ld.clone()
            })
            .collect()
    }

    /// Flushes the controller cache and shuts the firmware down (before power-off).
    pub fn shutdown(&self) -> Result<(), Error> {
        let mut mbox = [0u8; 12];
        mbox[0] = 0x03;
        self.dcmd(DCMD_CACHE_FLUSH, mbox, 0)?;
        self.dcmd(DCMD_SHUTDOWN, [0u8; 12], 0)?;
        Ok(())
    }
}

/// One line per LD of the map: FastPath geometry, or why the LD path.
pub(super) fn describe_map(map: &RaidMap, usable: &[raidmap::FastPathLd]) -> String {
    use core::fmt::Write;
    let mut text = alloc::format!("{} LD(s)", map.lds.len());
    for (target, r) in &map.lds {
        match r {
            Ok(ld) if usable.contains(ld) => {
                let _ = write!(
                    text,
                    "; LD {target}: RAID-{} over {} arms (handles {:x?}), strip {} KiB, sequence {:#x}, FastPath {}{}",
                    u8::from(ld.mirror),
                    ld.arm_handles.len(),
                    ld.arm_handles,
                    (1u32 << ld.strip_shift) / 2,
                    ld.seq,
                    match (ld.read, ld.write) {
                        (true, true) => "reads and writes",
                        (true, false) => "reads",
                        _ => "writes",
                    },
                    if ld.cache_bypass && ld.write {
                        ", writes bypassing the controller cache (SLD)"
                    } else {
                        ""
                    }
                );
            }
            Ok(_) => {
                let _ = write!(
                    text,
                    "; LD {target}: LD path (not an LD of LD_GET_LIST with 512-byte blocks within the map's size)"
                );
            }
            Err(e) => {
                let _ = write!(text, "; LD {target}: LD path ({e})");
            }
        }
    }
    text
}

/// READ CAPACITY(10) data (last LBA and block size, big-endian) as a capacity; a last LBA of
/// 0xFFFFFFFF means the drive needs READ CAPACITY(16).
fn capacity_from_rc10(raw: &[u8]) -> Result<Capacity, String> {
    let last = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    if last == u32::MAX {
        return Err(String::from("last LBA 0xFFFFFFFF (too large for the 10-byte form)"));
    }
    let mut as16 = [0u8; 12];
    as16[0..8].copy_from_slice(&u64::from(last).to_be_bytes());
    as16[8..12].copy_from_slice(&raw[4..8]);
    Capacity::parse(&as16).map_err(|e| alloc::format!("{e}"))
}
