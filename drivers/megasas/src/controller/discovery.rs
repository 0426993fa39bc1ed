//! Polled admin commands on a caller-given tag: the DCMDs (CTRL_GET_INFO, LD_GET_LIST,
//! PD_LIST_QUERY, LD_GET_INFO, cache flush and shutdown), READ CAPACITY(16) through LD or PD
//! pass-through, and discovery, which publishes each drive's capacity for the I/O path.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::Error;
use crate::dcmd::{self, Capacity, ControllerInfo, LdInfo, LdListEntry};
use crate::frame::{self, FrameWriter, Header, Segment};
use crate::status::{IoErrorKind, MfiStatus};
use crate::tags;
use crate::{Delay, Dma, Mmio};

use super::{ADMIN_LEN, Controller, LogicalDrive, MAX_PD_TARGETS, Polled, SENSE_LEN};

/// PD_LIST_QUERY buffer: the admin buffer (QEMU fills as many 24-byte entries as fit, ≥ 32 B).
const PD_LIST_LEN: usize = ADMIN_LEN;

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Builds, posts and polls one command on `tag`.
    pub(super) fn run_polled(
        &self,
        tag: u16,
        what: &'static str,
        frame_bytes: usize,
        build: impl FnOnce(&FrameWriter<'_>, u32),
    ) -> Result<Polled, Error> {
        self.check_tag(tag)?;
        if self.tags.load(tag).0 == tags::QUARANTINED {
            return Err(Error::AdminQuarantined);
        }
        let generation = self.tags.claim(tag)?;
        let ctx = tags::encode_context(tag, generation, true);
        let w = self.frame(tag);
        build(&w, ctx);
        self.tags.publish(tag, tags::POLLED, generation);
        self.post(tag, frame_bytes);
        let status = self.pool.atomic_u8(w.base + frame::OFF_CMD_STATUS);
        let mut waited = 0u64;
        // Acquire pairs with the device's store of the status byte, written after sense and data.
        let mfi = loop {
            let s = status.load(Ordering::Acquire);
            if s != MfiStatus::PENDING.0 {
                break MfiStatus(s);
            }
            if waited >= self.config.command_timeout_us {
                // The device still owns the frame (and whatever buffer it points at): the tag is
                // quarantined until a controller reset makes the device give everything up.
                self.tags.quarantine(tag, generation);
                self.quarantined.fetch_add(1, Ordering::Relaxed);
                log::error!(
                    "megasas: {what} on tag {tag} timed out after {waited} us; tag quarantined until a controller reset"
                );
                return Err(Error::CommandTimeout {
                    what,
                    tag,
                    waited_us: waited,
                });
            }
            self.delay.delay_us(self.config.command_poll_us);
            waited += u64::from(self.config.command_poll_us.max(1));
        };
        let polled = self.read_completion(tag, mfi);
        self.tags.finish(tag, generation);
        Ok(polled)
    }

    fn take_admin(&self) -> Result<AdminGuard<'_>, Error> {
        // Acquire pairs with the Release in `reset`, which lifts the quarantine.
        if self.admin_quarantined.load(Ordering::Acquire) {
            return Err(Error::AdminQuarantined);
        }
        AdminGuard::take(&self.admin_busy)
    }

    /// A polled command that timed out leaves the admin buffer to the device: the guard is not
    /// released (the buffer stays taken) until a controller reset.
    fn keep_admin_on_timeout(&self, guard: AdminGuard<'_>, r: Result<Polled, Error>) -> Result<Polled, Error> {
        if let Err(Error::CommandTimeout { .. }) = r {
            self.admin_quarantined.store(true, Ordering::Release);
            core::mem::forget(guard);
        }
        r
    }

    /// Runs a DCMD into the admin buffer and returns the first `len` bytes of its reply.
    fn dcmd(&self, tag: u16, what: &'static str, opcode: u32, mbox0: u8, len: usize) -> Result<Vec<u8>, Error> {
        let guard = self.take_admin()?;
        // QEMU answers some queries OK without writing anything: start from zeroes.
        self.admin.fill(0, len, 0);
        let sge = Segment {
            phys: self.admin.phys_at(0),
            len: len as u32,
        };
        self.run_dcmd(guard, tag, what, opcode, mbox0, Some(sge))?;
        let mut out = vec![0u8; len];
        self.admin.read_bytes(0, &mut out);
        Ok(out)
    }

    /// Runs a DCMD that moves no data (no SGL, direction none).
    fn dcmd_no_data(&self, tag: u16, what: &'static str, opcode: u32, mbox0: u8) -> Result<(), Error> {
        let guard = self.take_admin()?;
        self.run_dcmd(guard, tag, what, opcode, mbox0, None)
    }

    /// Builds and runs one polled DCMD frame, reading into `data` when given.
    fn run_dcmd(
        &self,
        guard: AdminGuard<'_>,
        tag: u16,
        what: &'static str,
        opcode: u32,
        mbox0: u8,
        data: Option<Segment>,
    ) -> Result<(), Error> {
        let frame_bytes = if data.is_some() {
            frame::IO_SGL + frame::SGE64_LEN
        } else {
            frame::IO_SGL
        };
        let done = self.run_polled(tag, what, frame_bytes, |w, ctx| {
            w.header(&Header {
                cmd: frame::CMD_DCMD,
                sense_len: 0,
                target: 0,
                cdb_len: 0,
                sge_count: u8::from(data.is_some()),
                context: ctx,
                flags: if data.is_some() {
                    frame::FLAG_SGL64 | frame::FLAG_DIR_READ | frame::FLAG_DONT_POST
                } else {
                    frame::FLAG_DONT_POST
                },
                data_len: data.map_or(0, |d| d.len),
            });
            w.u32_at(0x18, opcode);
            let mut mbox = [0u8; 12];
            mbox[0] = mbox0;
            w.bytes_at(0x1C, &mbox);
            if let Some(sge) = data {
                w.sgl64(frame::IO_SGL, &[sge]);
            }
        });
        let done = self.keep_admin_on_timeout(guard, done)?;
        match done.error() {
            Some(error) => Err(Error::CommandFailed { what, error }),
            None => Ok(()),
        }
    }

    /// Before power-off: flushes the controller's and the disks' write caches
    /// (CTRL_CACHE_FLUSH) and shuts the firmware down (CTRL_SHUTDOWN), both polled on the admin
    /// tag `tag`. Quiesce the block layer first: the controller takes no I/O afterwards (it is
    /// no longer operational). Unlike [`Controller::shutdown`] nothing is aborted or reset.
    pub fn flush_and_shut_down(&self, tag: u16) -> Result<(), Error> {
        self.dcmd_no_data(
            tag,
            "CTRL_CACHE_FLUSH",
            frame::DCMD_CTRL_CACHE_FLUSH,
            frame::FLUSH_CTRL_AND_DISK_CACHES,
        )?;
        self.dcmd_no_data(tag, "CTRL_SHUTDOWN", frame::DCMD_CTRL_SHUTDOWN, 0)?;
        // Release pairs with the Acquire loads that gate submission.
        self.operational.store(false, Ordering::Release);
        Ok(())
    }

    pub(super) fn ctrl_get_info(&self, tag: u16) -> Result<ControllerInfo, Error> {
        let b = self.dcmd(tag, "CTRL_GET_INFO", frame::DCMD_CTRL_GET_INFO, 0, dcmd::CTRL_INFO_LEN)?;
        ControllerInfo::parse(&b)
    }

    /// LD_GET_LIST, sorted by target id. (LD_LIST_QUERY is not used: QEMU fills it with LUNs
    /// instead of target ids.)
    pub fn ld_list(&self, tag: u16) -> Result<Vec<LdListEntry>, Error> {
        let b = self.dcmd(tag, "LD_GET_LIST", frame::DCMD_LD_GET_LIST, 0, dcmd::LD_LIST_LEN)?;
        dcmd::parse_ld_list(&b)
    }

    /// The system PDs (JBOD disks) the firmware exposes to the host: PD_LIST_QUERY with mbox
    /// b[0] = 5 (EXPOSED_TO_HOST), as Linux sends it. Disks (SCSI type 0) at LUN 0 only, by SCSI
    /// id (QEMU's device id is `scsi_id << 8 | lun`). Firmware in RAID mode answers OK with an
    /// empty list (QEMU writes nothing: the buffer is zeroed first), so no LD is listed twice.
    pub fn system_pd_disks(&self, tag: u16) -> Result<Vec<u8>, Error> {
        let b = self.dcmd(
            tag,
            "PD_LIST_QUERY",
            frame::DCMD_PD_LIST_QUERY,
            frame::PD_QUERY_EXPOSED_TO_HOST,
            PD_LIST_LEN,
        )?;
        let mut out = Vec::new();
        for pd in dcmd::parse_pd_list(&b)? {
            let (target, lun) = ((pd.device_id >> 8) as u8, pd.device_id & 0xFF);
            if pd.scsi_type != 0 || lun != 0 || usize::from(target) >= MAX_PD_TARGETS {
                log::info!(
                    "megasas: PD device id {:#06x} (type {}) not used: only disks at LUN 0",
                    pd.device_id,
                    pd.scsi_type
                );
                continue;
            }
            out.push(target);
        }
        Ok(out)
    }

    /// LD_GET_INFO for one target.
    pub fn ld_info(&self, tag: u16, target: u8) -> Result<LdInfo, Error> {
        if usize::from(target) >= dcmd::MAX_LD {
            return Err(Error::NoSuchDrive { target });
        }
        let b = self.dcmd(tag, "LD_GET_INFO", frame::DCMD_LD_GET_INFO, target, dcmd::LD_INFO_LEN)?;
        LdInfo::parse(&b)
    }

    /// READ CAPACITY(16) through LD SCSI pass-through (works for 512- and 4096-byte blocks on
    /// QEMU), retrying UNIT ATTENTION.
    pub fn read_capacity(&self, tag: u16, target: u8) -> Result<Capacity, Error> {
        if usize::from(target) >= dcmd::MAX_LD {
            return Err(Error::NoSuchDrive { target });
        }
        self.read_capacity_via(tag, target, frame::CMD_LD_SCSI_IO)
    }

    /// READ CAPACITY(16) of a system PD (SCSI id `target`, LUN 0) through PD SCSI pass-through.
    pub fn pd_read_capacity(&self, tag: u16, target: u8) -> Result<Capacity, Error> {
        self.read_capacity_via(tag, target, frame::CMD_PD_SCSI_IO)
    }

    fn read_capacity_via(&self, tag: u16, target: u8, cmd: u8) -> Result<Capacity, Error> {
        let mut attempt = 0u8;
        loop {
            let guard = self.take_admin()?;
            self.admin.fill(0, dcmd::READ_CAPACITY16_LEN, 0);
            let sge = Segment {
                phys: self.admin.phys_at(0),
                len: dcmd::READ_CAPACITY16_LEN as u32,
            };
            let sense = self.sense_phys(tag);
            let done = self.run_polled(
                tag,
                "READ CAPACITY(16)",
                frame::PASS_SGL + frame::SGE64_LEN,
                |w, ctx| {
                    w.header(&Header {
                        cmd,
                        sense_len: SENSE_LEN as u8,
                        target,
                        cdb_len: 16,
                        sge_count: 1,
                        context: ctx,
                        flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | frame::FLAG_DIR_READ | frame::FLAG_DONT_POST,
                        data_len: dcmd::READ_CAPACITY16_LEN as u32,
                    });
                    w.u64_at(0x18, sense);
                    w.bytes_at(0x20, &frame::cdb_read_capacity16());
                    w.sgl64(frame::PASS_SGL, &[sge]);
                },
            );
            let done = self.keep_admin_on_timeout(guard, done)?;
            match done.error() {
                None => {
                    let mut b = [0u8; dcmd::READ_CAPACITY16_LEN];
                    self.admin.read_bytes(0, &mut b);
                    return Capacity::parse(&b);
                }
                Some(e) if e.kind == IoErrorKind::UnitAttention && attempt < self.config.unit_attention_retries => {
                    log::info!("megasas: target {target}: {e}; retrying");
                    attempt += 1;
                }
                Some(error) => {
                    return Err(Error::CommandFailed {
                        what: "READ CAPACITY(16)",
                        error,
                    });
                }
            }
        }
    }

    /// Discovers the logical drives (LD_GET_LIST, then READ CAPACITY(16) per drive), publishes
    /// their capacities for the I/O path's range checks, and logs the device table. Uses `tag` for
    /// its polled commands. Run it while no I/O is in flight to the drives whose size may change.
    pub fn discover(&self, tag: u16) -> Result<Vec<LogicalDrive>, Error> {
        let list = self.ld_list(tag)?;
        let mut present = [false; dcmd::MAX_LD];
        let mut out = Vec::with_capacity(list.len());
        for e in list {
            let cap = self.read_capacity(tag, e.target)?;
            let drive = LogicalDrive {
                target: e.target,
                blocks: cap.blocks,
                block_size: cap.block_size,
                list_sectors: e.size_sectors,
                state: e.state,
                system_pd: false,
            };
            if u128::from(drive.capacity_bytes()) != u128::from(e.size_sectors) * 512 {
                log::warn!(
                    "megasas: target {}: READ CAPACITY says {} bytes, LD list says {} sectors",
                    e.target,
                    drive.capacity_bytes(),
                    e.size_sectors
                );
            }
            let slot = &self.drives[usize::from(e.target)];
            slot.blocks.store(cap.blocks, Ordering::Relaxed);
            // Release publishes `blocks` to the Acquire load of `block_size` in `submit`.
            slot.block_size.store(cap.block_size, Ordering::Release);
            present[usize::from(e.target)] = true;
            out.push(drive);
        }
        for (slot, _) in self.drives.iter().zip(present).filter(|(_, p)| !p) {
            slot.block_size.store(0, Ordering::Release);
        }
        let mut pd_present = [false; MAX_PD_TARGETS];
        // A firmware that refuses the PD query still serves its LDs (Linux goes on too).
        let pds = self.system_pd_disks(tag).unwrap_or_else(|e| {
            log::warn!("megasas: PD_LIST_QUERY failed: {e}; no JBOD disks");
            Vec::new()
        });
        for pd in pds {
            let cap = match self.pd_read_capacity(tag, pd) {
                Ok(c) => c,
                Err(e) => {
                    log::warn!("megasas: JBOD disk target {pd}: {e}; left out");
                    continue;
                }
            };
            let slot = &self.pds[usize::from(pd)];
            slot.blocks.store(cap.blocks, Ordering::Relaxed);
            slot.block_size.store(cap.block_size, Ordering::Release);
            pd_present[usize::from(pd)] = true;
            out.push(LogicalDrive {
                target: pd,
                blocks: cap.blocks,
                block_size: cap.block_size,
                list_sectors: 0,
                state: 0,
                system_pd: true,
            });
        }
        for (slot, _) in self.pds.iter().zip(pd_present).filter(|(_, p)| !p) {
            slot.block_size.store(0, Ordering::Release);
        }
        log::info!(
            "{}",
            DriveTable {
                info: &self.info,
                drives: &out
            }
        );
        Ok(out)
    }
}

/// Try-lock of the single admin buffer.
struct AdminGuard<'a>(&'a AtomicBool);

impl<'a> AdminGuard<'a> {
    fn take(flag: &'a AtomicBool) -> Result<Self, Error> {
        // Acquire pairs with the Release in `drop`: the previous user's buffer reads are done.
        if flag.swap(true, Ordering::Acquire) {
            return Err(Error::AdminBusy);
        }
        Ok(Self(flag))
    }
}

impl Drop for AdminGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Printable device table: controller line plus one row per logical drive.
pub struct DriveTable<'a> {
    /// Controller information.
    pub info: &'a ControllerInfo,
    /// Drives to list.
    pub drives: &'a [LogicalDrive],
}

impl fmt::Display for DriveTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "megasas: {} (fw {})", self.info.product, self.info.firmware)?;
        writeln!(f, "  target  block      blocks          bytes   MiB  state")?;
        for d in self.drives {
            writeln!(
                f,
                "  {:>6}  {:>5}  {:>10}  {:>13}  {:>5}  {}",
                d.target,
                d.block_size,
                d.blocks,
                d.capacity_bytes(),
                d.capacity_bytes() >> 20,
                if d.system_pd {
                    "JBOD disk (system PD)"
                } else if d.state == 3 {
                    "optimal"
                } else {
                    "not optimal"
                }
            )?;
        }
        Ok(())
    }
}
