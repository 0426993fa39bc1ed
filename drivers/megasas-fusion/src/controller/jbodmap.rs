//! The JBOD sequence map: system PDs (JBOD disks) addressed by device handle and sequence
//! number, as Linux's `megasas_setup_jbod_map`, `megasas_sync_pd_seq_num` and
//! `megasas_build_syspd_fusion` do.
//!
//! When CTRL_GET_INFO offers it (adapterOperations3 bit 24, `useSeqNumJbodFP`) bring-up reads
//! SYSTEM_PD_MAP_GET_INFO ({u32 size, u32 count} and one 8-byte {u16 seqNum, u16 devHandle, u8
//! capability, u8 reserved, u16 pd_target_id} per device id, 256 of them) and checks it: the
//! count at most 256, and for every system PD found an entry with a device handle. A system PD's
//! read or write then names that handle (frame and descriptor), the device id + 255 in the RAID
//! context's target field and the entry's sequence number, with the type/nseg and
//! sequence-number flags of an LD read or write; without a map entry it takes the system-PD path
//! by device id (DevHandle 0xFFFF). A second request of the same DCMD with the pend flag (mbox
//! byte 0) stays on the firmware on its own DCMD slot ([`JBOD_SYNC_SLOT`]) until the
//! configuration changes; the firmware then writes the new map into that request's buffer. As
//! for the RAID map sync, the reply only turns the map off (system PDs take the path by device
//! id meanwhile), and the host's tick ([`Controller::service_jbod_sync`]) checks the new map,
//! switches to it and pends the next sync. A request refused for a stale sequence number
//! (status 0x67) turns the map off unless a newer one is in use and is issued again. An OCR
//! cancels the sync, reads the map afresh and pends a new one.
//!
//! Without the offer, a valid RAID map's device-handle table (any format) stands in, as in Linux
//! (`fast_path_io` without `support_seqnum_jbod_fp`): a system PD the map gives a handle takes
//! its requests by that handle with the device id itself as target and no sequence number. The
//! entries follow the RAID map: taken with it at bring-up, after an OCR and from each map sync,
//! off from a sync's reply until the new map is checked.
//!
//! Each device id's {handle, sequence number} is one atomic word, so a submitter reads a
//! consistent pair with one relaxed load; `on` (Acquire/Release) says whether the words are the
//! map in use.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use crate::Mmio64;
use devhal::{Delay, DmaBuf};
use spin::Mutex;

use crate::diag::Report;
use crate::error::Error;
use crate::raidmap::RaidMap;
use crate::regs::Generation;

use super::{Budget, Controller, DCMD_SMIDS, MFI_FRAME_LEN};

/// SYSTEM_PD_MAP_GET_INFO.
pub const DCMD_SYSTEM_PD_MAP_GET_INFO: u32 = 0x0200_E102;
/// The DCMD slot the pended JBOD map sync keeps for itself (the map sync has the last one).
pub(super) const JBOD_SYNC_SLOT: usize = DCMD_SMIDS as usize - 2;
/// Device ids in the map (Linux's MAX_PHYSICAL_DEVICES).
const JBOD_MAP_DEVICES: usize = 256;
/// Bytes of the map: the header and 8 bytes per device id.
pub(super) const JBOD_MAP_BYTES: usize = 8 + JBOD_MAP_DEVICES * 8;
/// CTRL_GET_INFO adapterOperations3 (0x7E8) bit 24: the firmware keeps a JBOD sequence map.
pub(super) const CI_OPS3_JBOD_SEQ_MAP: u32 = 1 << 24;
/// A request by the map names the device id + 255 in the RAID context (Linux without
/// `support_morethan256jbod`).
pub(super) const JBOD_TARGET_OFFSET: u16 = 255;
/// Mailbox byte 0 of a pended sync.
const PEND_FLAG: u8 = 1;
/// Bit 32 of an entry word: the entry holds a handle and sequence number.
const ENTRY_VALID: u64 = 1 << 32;

/// A system PD's place in the map in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JbodRoute {
    /// Device id (the drive's target).
    pub device: u8,
    /// Its device handle.
    pub handle: u16,
    /// Its sequence number.
    pub seq: u16,
}

/// The JBOD map's state.
pub(super) struct JbodMap {
    /// Per device id: `ENTRY_VALID | handle << 16 | seq`, or 0.
    entries: Vec<AtomicU64>,
    /// The entries are the map in use (false: every system PD by device id).
    on: AtomicBool,
    /// The firmware offers the map (CTRL_GET_INFO) and `Config::jbod_map` allows it.
    pub(super) wanted: AtomicBool,
    /// The firmware offers the map (whether or not it is used): no RAID-map handles then.
    pub(super) offered: AtomicBool,
    /// The entries come from the RAID map's device handles, not from a JBOD map.
    by_raid_map: AtomicBool,
    /// Which buffer holds the map in use; the sync uses the other.
    current: AtomicU8,
    /// A sync was posted and not yet serviced.
    posted: AtomicBool,
    lock: Mutex<()>,
    /// Maps taken from completed syncs, syncs that failed or brought a refused map, and
    /// requests refused for a stale sequence number.
    pub(super) changes: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) stale: AtomicU64,
    /// Requests sent by the map.
    pub(super) ios: AtomicU64,
    /// Requests sent by the RAID map's handle.
    pub(super) raid_map_ios: AtomicU64,
}

impl JbodMap {
    pub(super) fn new() -> Self {
        Self {
            entries: (0..JBOD_MAP_DEVICES).map(|_| AtomicU64::new(0)).collect(),
            on: AtomicBool::new(false),
            wanted: AtomicBool::new(false),
            offered: AtomicBool::new(false),
            by_raid_map: AtomicBool::new(false),
            current: AtomicU8::new(0),
            posted: AtomicBool::new(false),
            lock: Mutex::new(()),
            changes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            ios: AtomicU64::new(0),
            raid_map_ios: AtomicU64::new(0),
        }
    }

    /// The route of system PD `device`, when the map is in use and has it: one Acquire load of
    /// `on` and one relaxed load of the entry.
    #[inline]
    pub(super) fn route(&self, device: u8) -> Option<JbodRoute> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        let w = self.entries.get(usize::from(device))?.load(Ordering::Relaxed);
        (w & ENTRY_VALID != 0).then_some(JbodRoute {
            device,
            handle: (w >> 16) as u16,
            seq: w as u16,
        })
    }

    /// Whether the routes in use are the RAID map's handles (read after `route`'s Acquire).
    #[inline]
    pub(super) fn by_raid_map(&self) -> bool {
        self.by_raid_map.load(Ordering::Relaxed)
    }
}

/// Parses a JBOD map: the routes of `devices` (system PDs found at bring-up), or why the map is
/// refused. A device without an entry (handle 0xFFFF or 0) stays off the map.
pub(super) fn parse_jbod_map(raw: &[u8], devices: &[u8]) -> Result<Vec<JbodRoute>, Error> {
    let refused = |what: &'static str, value: u64| Error::Limits {
        what,
        value,
        expected: "a JBOD map of at most 256 entries in 2056 bytes",
    };
    if raw.len() < JBOD_MAP_BYTES {
        return Err(refused("JBOD map bytes", raw.len() as u64));
    }
    let count = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
    if count as usize > JBOD_MAP_DEVICES {
        return Err(refused("JBOD map count", u64::from(count)));
    }
    Ok(devices
        .iter()
        .filter(|&&d| u32::from(d) < count)
        .filter_map(|&device| {
            let e = 8 + 8 * usize::from(device);
            let seq = u16::from_le_bytes([raw[e], raw[e + 1]]);
            let handle = u16::from_le_bytes([raw[e + 2], raw[e + 3]]);
            (handle != 0xFFFF && handle != 0).then_some(JbodRoute { device, handle, seq })
        })
        .collect())
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    /// The system PDs addressed by the JBOD map in use, or by the RAID map's handles (see
    /// [`Self::jbod_by_raid_map`]; empty: none, or the map is off).
    pub fn jbod_map_routes(&self) -> Vec<JbodRoute> {
        self.drives
            .iter()
            .filter(|d| d.system_pd)
            .filter_map(|d| self.jbod.route(d.target))
            .collect()
    }

    /// (maps taken from completed syncs, syncs that failed or brought a refused map, requests
    /// refused for a stale sequence number, requests sent by the map).
    pub fn jbod_map_counts(&self) -> (u64, u64, u64, u64) {
        let j = &self.jbod;
        (
            j.changes.load(Ordering::Relaxed),
            j.failures.load(Ordering::Relaxed),
            j.stale.load(Ordering::Relaxed),
            j.ios.load(Ordering::Relaxed),
        )
    }

    /// Whether [`Self::jbod_map_routes`] are the RAID map's device handles (no JBOD map
    /// offered), each with sequence number 0.
    pub fn jbod_by_raid_map(&self) -> bool {
        self.jbod.by_raid_map()
    }

    /// System-PD requests sent by the RAID map's device handle.
    pub fn jbod_raid_map_ios(&self) -> u64 {
        self.jbod.raid_map_ios.load(Ordering::Relaxed)
    }

    /// Whether a JBOD map sync is on the firmware, waiting for a configuration change.
    pub fn jbod_sync_pending(&self) -> bool {
        self.jbod.posted.load(Ordering::Acquire) && self.dcmd_reply_pending[JBOD_SYNC_SLOT].load(Ordering::Acquire)
    }

    fn system_pd_ids(&self) -> Vec<u8> {
        self.drives.iter().filter(|d| d.system_pd).map(|d| d.target).collect()
    }

    /// Stores `routes` as the map in use (every other entry cleared) and turns it on. The caller
    /// owns the map: bring-up, an OCR (gate closed) or the service with the lock.
    fn publish_jbod(&self, routes: &[JbodRoute]) {
        self.publish_jbod_routes(routes, false);
    }

    /// [`Self::publish_jbod`], the routes from a JBOD map or (`by_raid_map`) the RAID map.
    fn publish_jbod_routes(&self, routes: &[JbodRoute], by_raid_map: bool) {
        self.jbod.on.store(false, Ordering::Relaxed);
        self.jbod.by_raid_map.store(by_raid_map, Ordering::Relaxed);
        for e in &self.jbod.entries {
            e.store(0, Ordering::Relaxed);
        }
        for r in routes {
            self.jbod.entries[usize::from(r.device)].store(
                ENTRY_VALID | u64::from(r.handle) << 16 | u64::from(r.seq),
                Ordering::Relaxed,
            );
        }
        // Release: the entries above before `on`, which `route` loads with Acquire.
        self.jbod.on.store(!routes.is_empty(), Ordering::Release);
    }

    /// Bring-up and OCR: reads the map into the buffer in use, takes it and pends a sync. Does
    /// nothing unless the firmware offers the map. `step` names the report step.
    pub(super) fn read_jbod_map(&self, budget: &mut Budget, report: &mut Report, step: &'static str) {
        let Some(bufs) = self.mem.jbod_map.as_ref() else {
            return;
        };
        if !self.jbod.wanted.load(Ordering::Relaxed) {
            return;
        }
        let devices = self.system_pd_ids();
        let buf = &bufs[usize::from(self.jbod.current.load(Ordering::Relaxed))];
        let text = match self
            .dcmd_inner(Some(budget), DCMD_SYSTEM_PD_MAP_GET_INFO, [0u8; 12], 0, Some(buf))
            .and_then(|raw| parse_jbod_map(&raw, &devices))
        {
            Ok(routes) => {
                self.publish_jbod(&routes);
                self.post_jbod_sync();
                describe_jbod(&routes, devices.len())
            }
            Err(e) => {
                self.publish_jbod(&[]);
                alloc::format!("{e}: every system PD by device id")
            }
        };
        report.step(&self.mmio, self.generation, budget.used(), step, text);
    }

    /// Takes the system PDs' handles from `map`, the RAID map now in use (None: no valid map,
    /// every system PD by device id), when the firmware offers no JBOD map. The caller owns the
    /// RAID map: bring-up, an OCR (gate closed) or the map sync's service. Returns the report's
    /// words, or None when the JBOD map decides instead.
    pub(super) fn take_raid_map_jbod_handles(&self, map: Option<&RaidMap>) -> Option<alloc::string::String> {
        if self.jbod.offered.load(Ordering::Relaxed) || !self.jbod_map_possible() {
            return None;
        }
        let devices = self.system_pd_ids();
        if devices.is_empty() {
            return None;
        }
        let routes: Vec<JbodRoute> = map
            .map(|m| {
                devices
                    .iter()
                    .filter_map(|&device| m.pd_handle(device).map(|handle| JbodRoute { device, handle, seq: 0 }))
                    .collect()
            })
            .unwrap_or_default();
        self.publish_jbod_routes(&routes, !routes.is_empty());
        let list: Vec<alloc::string::String> = routes
            .iter()
            .map(|r| alloc::format!("PD {} handle {:#x}", r.device, r.handle))
            .collect();
        Some(alloc::format!(
            "{} of {} system PD(s) by the RAID map's device handle: [{}]",
            routes.len(),
            devices.len(),
            list.join(", ")
        ))
    }

    /// The RAID map in use is about to change (a map sync replied): system PDs on RAID-map
    /// handles go by device id until the new map is checked.
    pub(super) fn raid_map_jbod_handles_off(&self) {
        if self.jbod.by_raid_map() {
            self.jbod.on.store(false, Ordering::Relaxed);
        }
    }

    /// Pends a JBOD map sync with the buffer not in use. The caller owns the DCMD state.
    fn post_jbod_sync(&self) {
        let Some(bufs) = self.mem.jbod_map.as_ref() else {
            return;
        };
        let buf: &DmaBuf = &bufs[usize::from(1 - self.jbod.current.load(Ordering::Relaxed))];
        buf.fill(0, buf.len(), 0);
        let k = JBOD_SYNC_SLOT;
        let mfi_off = k * MFI_FRAME_LEN;
        let mut mbox = [0u8; 12];
        mbox[0] = PEND_FLAG;
        // Data out, as Linux's pended sync.
        let dir = super::discovery::MFI_DIR_WRITE;
        self.write_dcmd_frame(
            mfi_off,
            DCMD_SYSTEM_PD_MAP_GET_INFO,
            &mbox,
            dir,
            buf.phys(),
            JBOD_MAP_BYTES,
        );
        self.post_pended_dcmd(k, mfi_off, &self.jbod.posted);
    }

    /// Reply path: the JBOD sync's reply arrived. System PDs go by device id until
    /// [`Self::service_jbod_sync`] has taken the new map.
    pub(super) fn jbod_sync_replied(&self) {
        self.jbod.on.store(false, Ordering::Relaxed);
    }

    /// A confirmed adapter reset forgot the sync.
    pub(super) fn jbod_sync_cancelled(&self) {
        self.jbod.posted.store(false, Ordering::Release);
    }

    /// Takes the map of a completed JBOD sync (the host's tick): checks it, switches to it and
    /// pends the next sync. Returns whether a completed sync was handled.
    pub fn service_jbod_sync(&self) -> bool {
        let idle =
            |j: &JbodMap, pending: &AtomicBool| !j.posted.load(Ordering::Acquire) || pending.load(Ordering::Acquire);
        let pending = &self.dcmd_reply_pending[JBOD_SYNC_SLOT];
        if idle(&self.jbod, pending) {
            return false;
        }
        let Some(_inside) = self.gate.try_enter(0) else {
            return false;
        };
        let Some(_l) = self.jbod.lock.try_lock() else {
            return false;
        };
        if idle(&self.jbod, pending) {
            return false;
        }
        self.jbod.posted.store(false, Ordering::Release);
        let Some(bufs) = self.mem.jbod_map.as_ref() else {
            return false;
        };
        let status = self.mem.dcmd.read_u8(JBOD_SYNC_SLOT * MFI_FRAME_LEN + 0x02);
        if status != 0 {
            self.jbod.failures.fetch_add(1, Ordering::Relaxed);
            self.publish_jbod(&[]);
            log::warn!(
                "megasas-fusion: JBOD map sync failed (MFI status {status:#04x}): every system PD by device id until the next controller reset"
            );
            return true;
        }
        let next = 1 - self.jbod.current.load(Ordering::Relaxed);
        let buf = &bufs[usize::from(next)];
        let mut raw = alloc::vec![0u8; buf.len()];
        buf.read_bytes(0, &mut raw);
        let devices = self.system_pd_ids();
        match parse_jbod_map(&raw, &devices) {
            Ok(routes) => {
                self.publish_jbod(&routes);
                self.jbod.current.store(next, Ordering::Relaxed);
                self.jbod.changes.fetch_add(1, Ordering::Relaxed);
                log::info!(
                    "megasas-fusion: JBOD map changed (map sync): {}",
                    describe_jbod(&routes, devices.len())
                );
                self.post_jbod_sync();
            }
            Err(e) => {
                self.jbod.failures.fetch_add(1, Ordering::Relaxed);
                self.publish_jbod(&[]);
                log::warn!(
                    "megasas-fusion: JBOD map from the map sync refused: {e}; every system PD by device id until the next controller reset"
                );
            }
        }
        true
    }

    /// A request by the map refused for a stale sequence number `seq` of device `device`: the
    /// map goes off unless the one in use already gives another number.
    pub(super) fn jbod_stale_refused(&self, device: u8, seq: u16) {
        self.jbod.stale.fetch_add(1, Ordering::Relaxed);
        let newer = self.jbod.route(device).is_some_and(|r| r.seq != seq);
        if !newer {
            self.jbod.on.store(false, Ordering::Relaxed);
        }
    }

    /// Whether this controller may use a JBOD map at all (the FastPath IoFlag exists from
    /// Invader on).
    pub(super) fn jbod_map_possible(&self) -> bool {
        self.generation != Generation::Thunderbolt
    }
}

/// The report's and the log's words for a map.
fn describe_jbod(routes: &[JbodRoute], system_pds: usize) -> alloc::string::String {
    let list: Vec<alloc::string::String> = routes
        .iter()
        .map(|r| alloc::format!("PD {} handle {:#x} sequence {:#x}", r.device, r.handle, r.seq))
        .collect();
    alloc::format!(
        "{} of {system_pds} system PD(s) by device handle and sequence number: [{}]",
        routes.len(),
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(count: u32, entries: &[(u8, u16, u16)]) -> Vec<u8> {
        let mut raw = alloc::vec![0u8; JBOD_MAP_BYTES];
        raw[0..4].copy_from_slice(&(JBOD_MAP_BYTES as u32).to_le_bytes());
        raw[4..8].copy_from_slice(&count.to_le_bytes());
        for id in 0..JBOD_MAP_DEVICES {
            raw[8 + 8 * id + 2..8 + 8 * id + 4].copy_from_slice(&0xFFFFu16.to_le_bytes());
        }
        for &(id, handle, seq) in entries {
            let e = 8 + 8 * usize::from(id);
            raw[e..e + 2].copy_from_slice(&seq.to_le_bytes());
            raw[e + 2..e + 4].copy_from_slice(&handle.to_le_bytes());
        }
        raw
    }

    #[test]
    fn the_map_gives_each_system_pd_with_an_entry_its_handle_and_sequence() {
        let raw = map(256, &[(3, 0x103, 0x201), (9, 0x109, 0x305)]);
        assert_eq!(
            parse_jbod_map(&raw, &[3, 9, 12]).unwrap(),
            [
                JbodRoute {
                    device: 3,
                    handle: 0x103,
                    seq: 0x201
                },
                JbodRoute {
                    device: 9,
                    handle: 0x109,
                    seq: 0x305
                }
            ],
            "device 12 has no entry (handle 0xFFFF): by device id"
        );
        // A device beyond the firmware's count is not in the map.
        assert!(parse_jbod_map(&map(4, &[(9, 0x109, 1)]), &[9]).unwrap().is_empty());
        // A zero handle is no handle.
        assert!(parse_jbod_map(&map(256, &[(1, 0, 1)]), &[1]).unwrap().is_empty());
    }

    #[test]
    fn a_map_too_short_or_counting_more_than_256_is_refused() {
        assert!(parse_jbod_map(&map(257, &[]), &[]).is_err());
        assert!(parse_jbod_map(&map(1, &[])[..100], &[]).is_err());
    }
}
