//! The admin queue: one polled command at a time, its completion checked, and the admin commands
//! bring-up and a reset send (Identify Controller and namespaces, Set Features Number of Queues).

use alloc::vec::Vec;
use core::sync::atomic::{Ordering, fence};

use crate::cmd::{Cqe, Sqe, cns};
use crate::regs::{self, CQE_SIZE, PAGE_SIZE, SQE_SIZE};
use crate::status::NvmeStatus;
use crate::{Delay, Dma, Error, Mmio};
use devhal::DmaBuf;

use super::{Admin, BogusCqe, Controller, ControllerInfo, NamespaceInfo};

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Posts one admin command and polls for its completion. Returns DW0.
    pub(super) fn admin_cmd(&self, a: &mut Admin, mut sqe: Sqe) -> Result<u32, Error> {
        if a.stuck {
            return Err(Error::NotOperational);
        }
        let cid = a.next_cid;
        a.next_cid = a.next_cid.wrapping_add(1);
        sqe.set_cid(cid);
        let opcode = sqe.opcode();
        write_sqe(&a.sq, a.tail, &sqe);
        a.tail = (a.tail + 1) % a.entries;
        // Release: the entry is in memory before the doorbell store makes the device read it.
        fence(Ordering::Release);
        self.mmio.write32(regs::DOORBELL_BASE, a.tail);
        let limit = self.config.admin_timeout_us;
        let mut waited = 0u64;
        loop {
            if let Some(cqe) = read_cqe(&a.cq, a.head, a.phase) {
                a.head += 1;
                if a.head == a.entries {
                    a.head = 0;
                    a.phase = !a.phase;
                }
                self.mmio.write32(self.cap.doorbell(0, true).unwrap_or(0x1004), a.head);
                if cqe.sq_id != 0 || cqe.cid != cid || u32::from(cqe.sq_head) >= a.entries {
                    self.count_bogus(0, BogusCqe::NotOutstanding { sq: 0, cid: cqe.cid });
                    continue;
                }
                let status = NvmeStatus(cqe.status);
                if !status.is_success() {
                    return Err(Error::AdminFailed { opcode, status });
                }
                return Ok(cqe.result);
            }
            if waited >= limit {
                a.stuck = true;
                let csts = self.csts();
                if csts.gone() {
                    return Err(Error::DeviceGone);
                }
                if csts.fatal() {
                    return Err(Error::ControllerFatal { csts: csts.0 });
                }
                return Err(Error::AdminTimeout {
                    opcode,
                    waited_us: waited,
                });
            }
            self.delay.delay_us(self.config.poll_us);
            waited += u64::from(self.config.poll_us);
        }
    }

    pub(super) fn identify_controller(&self, a: &mut Admin) -> Result<ControllerInfo, Error> {
        a.buf.zero();
        let phys = a.buf.phys();
        self.admin_cmd(a, Sqe::identify(0, cns::CONTROLLER, 0, phys))?;
        let text = |from: usize, to: usize| -> alloc::string::String {
            let bytes: Vec<u8> = (from..to).map(|i| a.buf.read_u8(i)).collect();
            alloc::string::String::from_utf8_lossy(&bytes).trim().into()
        };
        let info = ControllerInfo {
            vid: a.buf.read_u32(0) as u16,
            serial: text(4, 24),
            model: text(24, 64),
            firmware: text(64, 72),
            mdts: a.buf.read_u8(77),
            nn: a.buf.read_u32(516),
            volatile_cache: a.buf.read_u8(525) & 1 != 0,
            // ONCS, bytes 520..522.
            dataset_management: a.buf.read_u16(520) & (1 << 2) != 0,
        };
        // Entry sizes: the driver uses 64/16 bytes; the controller must allow them.
        let sqes = a.buf.read_u8(512);
        let cqes = a.buf.read_u8(513);
        if (sqes & 0xF) > 6 || (sqes >> 4) < 6 || (cqes & 0xF) > 4 || (cqes >> 4) < 4 {
            return Err(Error::BadIdentify {
                field: "SQES/CQES",
                value: u64::from(sqes) << 8 | u64::from(cqes),
            });
        }
        Ok(info)
    }

    pub(super) fn identify_namespaces(&self, a: &mut Admin) -> Result<Vec<NamespaceInfo>, Error> {
        a.buf.zero();
        let phys = a.buf.phys();
        self.admin_cmd(a, Sqe::identify(0, cns::ACTIVE_NS_LIST, 0, phys))?;
        let mut ids = Vec::new();
        for i in 0..PAGE_SIZE / 4 {
            let id = a.buf.read_u32(i * 4);
            if id == 0 {
                break;
            }
            // The list is increasing; anything else is a device bug, not to be trusted.
            if ids.last().is_some_and(|&last| id <= last) || id == u32::MAX {
                return Err(Error::BadIdentify {
                    field: "active namespace list",
                    value: id.into(),
                });
            }
            ids.push(id);
        }
        let mut out = Vec::new();
        for nsid in ids {
            a.buf.zero();
            self.admin_cmd(a, Sqe::identify(0, cns::NAMESPACE, nsid, phys))?;
            let nsze = a.buf.read_u64(0);
            if nsze == 0 {
                continue;
            }
            let nlbaf = a.buf.read_u8(25);
            let flbas = a.buf.read_u8(26) & 0xF;
            if flbas > nlbaf {
                return Err(Error::BadIdentify {
                    field: "FLBAS",
                    value: flbas.into(),
                });
            }
            let lbaf = a.buf.read_u32(128 + 4 * usize::from(flbas));
            let ms = lbaf & 0xFFFF;
            let lbads = (lbaf >> 16) & 0xFF;
            if ms != 0 {
                log::warn!("nvme: namespace {nsid} uses {ms} bytes of metadata per block; not supported, skipped");
                continue;
            }
            if !(9..=16).contains(&lbads) {
                return Err(Error::BadIdentify {
                    field: "LBADS",
                    value: lbads.into(),
                });
            }
            let lba_size = 1u32 << lbads;
            // The block layer counts 512-byte sectors in a u64: refuse sizes that overflow it.
            if nsze.checked_mul(u64::from(lba_size)).is_none() {
                return Err(Error::BadIdentify {
                    field: "NSZE",
                    value: nsze,
                });
            }
            let max_transfer = self.max_transfer.min(u64::from(lba_size) << 16);
            out.push(NamespaceInfo {
                nsid,
                lba_size,
                blocks: nsze,
                max_transfer,
            });
        }
        if out.is_empty() {
            return Err(Error::NoNamespaces);
        }
        Ok(out)
    }

    /// Set Features Number of Queues; returns `min(NSQA, NCQA) + 1` capped by `want`.
    pub(super) fn set_number_of_queues(&self, a: &mut Admin, want: u16) -> Result<u16, Error> {
        let dw0 = self.admin_cmd(a, Sqe::set_number_of_queues(0, want, want))?;
        let nsqa = (dw0 & 0xFFFF) as u16;
        let ncqa = (dw0 >> 16) as u16;
        Ok(want.min(nsqa.saturating_add(1)).min(ncqa.saturating_add(1)))
    }
}

#[inline]
fn write_sqe(mem: &DmaBuf, slot: u32, sqe: &Sqe) {
    // One bounds check and 8 stores, not 16 checked word writes.
    mem.write_u32s(slot as usize * SQE_SIZE, &sqe.0);
}

/// The CQE at `head` if its phase tag says the controller wrote it on this pass.
#[inline]
fn read_cqe(mem: &DmaBuf, head: u32, phase: bool) -> Option<Cqe> {
    // One bounds check for the entry's four words.
    let entry = mem.word_run::<4>(head as usize * CQE_SIZE);
    let dw3 = entry.read(3);
    if (dw3 & (1 << 16) != 0) != phase {
        return None;
    }
    // Acquire: the rest of the entry is read only after its phase tag was seen.
    fence(Ordering::Acquire);
    Some(Cqe::from_dwords([entry.read(0), entry.read(1), entry.read(2), dw3]))
}
