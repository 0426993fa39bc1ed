//! The RAID map kept current: the pended map sync and the FastPath tables it switches.
//!
//! After bring-up with a structurally valid map, the driver keeps one map sync on the firmware
//! (MR_DCMD_LD_MAP_GET_INFO with the pend flag in mailbox byte 1 and the map's LD count in
//! byte 0, as Linux's `megasas_sync_map_info`): its own DCMD slot ([`MAP_SYNC_SLOT`], never an
//! I/O tag), the {target, 0, sequence number} of every LD of the map in use written into the
//! *other* map buffer. The firmware holds it until the configuration changes, then writes the
//! new map into that buffer and completes it. The reply path only notes the completion and
//! turns FastPath off, so every LD request takes the LD path meanwhile; the host's tick
//! ([`Controller::service_map_sync`]) takes the new map out of the buffer, checks it as fully
//! as the first, switches FastPath to it and pends the next sync with the new sequence
//! numbers. A sync that fails, or a map whose structure is refused, leaves FastPath off and is
//! not pended again (the firmware would answer at once, in a loop) until the next OCR. An OCR
//! cancels the sync: the adapter reset makes the firmware forget it, and only then are its
//! slot and buffer the driver's again; the OCR reads the map afresh and pends a new one.
//!
//! The FastPath tables: every reply queue (lane) has two, so a submitter's lookup touches only
//! its own lane's lock word (no cache line every CPU writes). `active` names the table in use
//! (0: FastPath off). A writer fills the table not in use in every lane, then publishes it with
//! a Release store of `active`; a submitter's Acquire load of `active` pairs with it, so the
//! table it then reads is the filled one. `#![forbid(unsafe_code)]` leaves no lock-free way to
//! lend a table out, so the submitter takes its lane's read guard (`try_read`, never a wait):
//! it fails only for a submitter that loaded `active` two switches ago, whose table is being
//! rewritten, and that request takes the LD path. Writers are serialised: bring-up owns the
//! controller, an OCR holds the gate closed, and the tick holds the map-sync lock inside the
//! gate.

use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use crate::Mmio64;
use devhal::Delay;
use spin::{Mutex, RwLock};

use crate::raidmap::{self, FastPathLd, RaidMap};

use super::discovery::describe_map;
use super::{Controller, DCMD_SMIDS, MFI_FRAME_LEN};

/// The DCMD slot the map sync keeps for itself (the last one): other DCMDs never take it.
pub(super) const MAP_SYNC_SLOT: usize = DCMD_SMIDS as usize - 1;
/// Mailbox byte 1 of a map sync: the firmware keeps the command until the map changes.
const PEND_FLAG: u8 = 1;
/// Bytes per entry of the sync list (`MR_LD_TARGET_SYNC`: target, reserved, u16 sequence).
const SYNC_ENTRY_BYTES: usize = 4;
/// Tries of a table's write lock before a publish gives up (a submitter holds a read guard
/// for the few instructions of one route).
const PUBLISH_TRIES: usize = 1 << 16;

/// One lane's two tables, on a cache line of their own.
#[repr(align(64))]
struct Lane([RwLock<Vec<FastPathLd>>; 2]);

/// The FastPath LDs of the map in use, as the submitters read them.
pub(super) struct FastPathTables {
    /// 0: FastPath off; 1 or 2: every lane's table 0 or 1 is in use.
    active: AtomicU8,
    /// The table the last publish filled (1 or 2; 0 before the first); the next fills the other.
    filled: AtomicU8,
    lanes: Vec<Lane>,
}

impl FastPathTables {
    pub(super) fn new(lanes: usize) -> Self {
        Self {
            active: AtomicU8::new(0),
            filled: AtomicU8::new(0),
            lanes: (0..lanes.max(1))
                .map(|_| Lane([RwLock::new(Vec::new()), RwLock::new(Vec::new())]))
                .collect(),
        }
    }

    /// Whether FastPath is on: the one relaxed load every LD read or write pays.
    #[inline(always)]
    pub(super) fn on(&self) -> bool {
        self.active.load(Ordering::Relaxed) != 0
    }

    /// FastPath off: every LD request takes the LD path. Publishes no data (Relaxed): a
    /// submitter that still sees a table routes by it and the firmware refuses a stale one.
    pub(super) fn off(&self) {
        self.active.store(0, Ordering::Relaxed);
    }

    /// Runs `f` on the table in use, seen from lane `lane`; None (the LD path) when FastPath is
    /// off or the table is being rewritten under a submitter two switches late.
    #[inline(always)]
    pub(super) fn with<R>(&self, lane: usize, f: impl FnOnce(&[FastPathLd]) -> Option<R>) -> Option<R> {
        f(&self.read(lane)?)
    }

    /// The table in use, seen from lane `lane`, held while the guard lives; None as for
    /// [`FastPathTables::with`]. The submission path reads it without a closure, so that its
    /// route is inlined.
    #[inline(always)]
    pub(super) fn read(&self, lane: usize) -> Option<spin::RwLockReadGuard<'_, Vec<FastPathLd>>> {
        // Acquire pairs with `publish`'s Release store: the table it names is filled.
        let table = usize::from(self.active.load(Ordering::Acquire)).checked_sub(1)?;
        let lane = match self.lanes.get(lane) {
            Some(l) => l,
            None => self.lanes.first()?,
        };
        lane.0.get(table)?.try_read()
    }

    /// Makes `lds` the FastPath LDs (none: FastPath off). False, with FastPath left off, when a
    /// submitter two switches late still reads the table to be filled.
    pub(super) fn publish(&self, lds: &[FastPathLd]) -> bool {
        self.off();
        if lds.is_empty() {
            return true;
        }
        let next = if self.filled.load(Ordering::Relaxed) == 1 { 2 } else { 1 };
        for lane in &self.lanes {
            let table = &lane.0[usize::from(next) - 1];
            let Some(mut w) = (0..PUBLISH_TRIES).find_map(|_| {
                let w = table.try_write();
                if w.is_none() {
                    core::hint::spin_loop();
                }
                w
            }) else {
                return false;
            };
            w.clear();
            w.extend_from_slice(lds);
        }
        self.filled.store(next, Ordering::Relaxed);
        // Release: the tables filled above before the index that names them (see `with`).
        self.active.store(next, Ordering::Release);
        true
    }

    /// A copy of the table in use (empty: FastPath off).
    pub(super) fn current(&self) -> Vec<FastPathLd> {
        self.with(0, |t| Some(t.to_vec())).unwrap_or_default()
    }
}

/// The map sync's state.
pub(super) struct MapSync {
    /// Which map buffer holds the map in use (0 or 1); the sync uses the other.
    pub(super) current: AtomicU8,
    /// A sync was posted and not yet serviced: its slot and buffer are the device's until its
    /// reply arrived or a confirmed adapter reset cancelled it.
    pub(super) posted: AtomicBool,
    /// Serialises servicing (the tick) against itself.
    lock: Mutex<()>,
    /// Maps taken from completed syncs.
    pub(super) changes: AtomicU64,
    /// Syncs that completed with an error status or a refused map.
    pub(super) failures: AtomicU64,
    /// `Stats::fastpath_ios` when the last map from a sync was taken.
    fastpath_ios_at_change: AtomicU64,
}

impl MapSync {
    pub(super) fn new() -> Self {
        Self {
            current: AtomicU8::new(0),
            posted: AtomicBool::new(false),
            lock: Mutex::new(()),
            changes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            fastpath_ios_at_change: AtomicU64::new(0),
        }
    }
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    /// Whether a map sync is on the firmware, waiting for a configuration change.
    pub fn map_sync_pending(&self) -> bool {
        self.map_sync.posted.load(Ordering::Acquire) && self.dcmd_reply_pending[MAP_SYNC_SLOT].load(Ordering::Acquire)
    }

    /// RAID maps taken from completed map syncs, and syncs that failed (error status or a
    /// refused map).
    pub fn map_sync_counts(&self) -> (u64, u64) {
        (
            self.map_sync.changes.load(Ordering::Relaxed),
            self.map_sync.failures.load(Ordering::Relaxed),
        )
    }

    /// FastPath requests sent since the last map from a map sync was taken (all of them if
    /// none was).
    pub fn fastpath_ios_since_map_change(&self) -> u64 {
        let now = self.stats.fastpath_ios.load(Ordering::Relaxed);
        now.saturating_sub(self.map_sync.fastpath_ios_at_change.load(Ordering::Relaxed))
    }

    /// Reply path: the map sync's reply arrived (the map changed, or the sync failed). FastPath
    /// is off until [`Self::service_map_sync`] has checked the new map.
    pub(super) fn map_sync_replied(&self) {
        self.fastpath.off();
        self.raid_map_jbod_handles_off();
    }

    /// Pends a map sync naming the LDs of `map` (the map in use), with the other map buffer.
    /// The caller owns the controller's DCMD state: bring-up, an OCR (gate closed) or the
    /// service with the map-sync lock.
    pub(super) fn post_map_sync(&self, map: &RaidMap) {
        let Some(bufs) = self.mem.raid_map.as_ref() else {
            return;
        };
        let buf = &bufs[usize::from(1 - self.map_sync.current.load(Ordering::Relaxed))];
        // The sync's buffer is the map's size in the format in use (Linux's current_map_sz):
        // the firmware writes the new map there.
        let bytes = self.map_format().bytes().min(buf.len());
        let lds = map
            .seq_nums
            .len()
            .min(bytes / SYNC_ENTRY_BYTES)
            .min(usize::from(u8::MAX));
        buf.fill(0, bytes, 0);
        for (i, &(target, seq)) in map.seq_nums.iter().take(lds).enumerate() {
            buf.write_u8(i * SYNC_ENTRY_BYTES, target);
            buf.write_u16(i * SYNC_ENTRY_BYTES + 2, seq);
        }
        let k = MAP_SYNC_SLOT;
        let mfi_off = k * MFI_FRAME_LEN;
        let mut mbox = [0u8; 12];
        mbox[0] = lds as u8;
        mbox[1] = PEND_FLAG;
        // Data out: the driver's LD list.
        let dir = super::discovery::MFI_DIR_WRITE;
        self.write_dcmd_frame(mfi_off, raidmap::DCMD_LD_MAP_GET_INFO, &mbox, dir, buf.phys(), bytes);
        self.post_pended_dcmd(k, mfi_off, &self.map_sync.posted);
    }

    /// Takes the map of a completed map sync (call from a periodic context, as the host's tick
    /// does; does nothing while the sync waits or a reset runs): checks it, switches FastPath to
    /// it and pends the next sync. Returns whether a completed sync was handled.
    pub fn service_map_sync(&self) -> bool {
        if !self.map_sync.posted.load(Ordering::Acquire)
            || self.dcmd_reply_pending[MAP_SYNC_SLOT].load(Ordering::Acquire)
        {
            return false;
        }
        let Some(_inside) = self.gate.try_enter(0) else {
            return false;
        };
        let Some(_l) = self.map_sync.lock.try_lock() else {
            return false;
        };
        // Again under the lock: another servicer, or a reset, may have taken it meanwhile.
        if !self.map_sync.posted.load(Ordering::Acquire)
            || self.dcmd_reply_pending[MAP_SYNC_SLOT].load(Ordering::Acquire)
        {
            return false;
        }
        self.map_sync.posted.store(false, Ordering::Release);
        let Some(bufs) = self.mem.raid_map.as_ref() else {
            return false;
        };
        self.fastpath.off();
        let status = self.mem.dcmd.read_u8(MAP_SYNC_SLOT * MFI_FRAME_LEN + 0x02);
        if status != 0 {
            self.take_raid_map_jbod_handles(None);
            self.map_sync.failures.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "megasas-fusion: RAID map sync failed (MFI status {status:#04x}): FastPath off, every LD on the LD path until the next controller reset"
            );
            return true;
        }
        let next = 1 - self.map_sync.current.load(Ordering::Relaxed);
        let buf = &bufs[usize::from(next)];
        let format = self.map_format();
        let mut raw = vec![0u8; format.bytes().min(buf.len())];
        buf.read_bytes(0, &mut raw);
        match format.parse(&raw) {
            Ok(map) => {
                let lds = self.usable_fastpath_lds(&map);
                let on = self.fastpath.publish(&lds);
                if let Some(text) = self.take_raid_map_jbod_handles(Some(&map)) {
                    log::info!("megasas-fusion: JBOD disks with the new RAID map: {text}");
                }
                self.map_sync.current.store(next, Ordering::Relaxed);
                self.map_sync.changes.fetch_add(1, Ordering::Relaxed);
                let sent = self.stats.fastpath_ios.load(Ordering::Relaxed);
                self.map_sync.fastpath_ios_at_change.store(sent, Ordering::Relaxed);
                log::info!(
                    "megasas-fusion: RAID map changed (map sync): {}; FastPath {}",
                    describe_map(&map, &lds),
                    match (lds.is_empty(), on) {
                        (true, _) => "off (no FastPath-ready RAID-0 LD)",
                        (false, true) => "on the new map",
                        (false, false) => "off (a submitter still held the old table)",
                    }
                );
                self.post_map_sync(&map);
            }
            Err(e) => {
                self.map_sync.failures.fetch_add(1, Ordering::Relaxed);
                self.take_raid_map_jbod_handles(None);
                log::warn!(
                    "megasas-fusion: RAID map from the map sync refused: {e}; FastPath off, every LD on the LD path until the next controller reset"
                );
            }
        }
        true
    }

    /// A confirmed adapter reset (or bus mastering off) forgot the sync: its slot and buffer
    /// are the driver's again.
    pub(super) fn map_sync_cancelled(&self) {
        self.map_sync.posted.store(false, Ordering::Release);
    }

    /// A FastPath request refused for a stale sequence number `seq` of LD `target`: FastPath
    /// goes off only if the table in use still gives that number (a newer map may be in use
    /// already, published after the request was routed).
    pub(super) fn stale_map_refused(&self, target: u8, seq: u16) {
        let newer = self
            .fastpath
            .with(0, |t| t.iter().find(|ld| ld.target == target).map(|ld| ld.seq != seq))
            .unwrap_or(false);
        if !newer {
            self.fastpath.off();
        }
    }
}
