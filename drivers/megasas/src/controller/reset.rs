//! Recovery: MFI ABORT of a timed-out command, controller reset (online recovery), and the
//! sweep that fails every command in flight exactly once.

use core::sync::atomic::Ordering;

use crate::Error;
use crate::frame::{self, Header};
use crate::regs;
use crate::status::{IoError, IoErrorKind, IoStatus, MfiStatus};
use crate::tags;
use crate::{Delay, Dma, Mmio};

use super::{ADMIN_TAG, CommandState, Controller, Done, RING_ENTRIES, RING_SENTINEL, Reaped, RecoveryCounters};

/// Polls a controller reset waits for submitters to leave their critical section.
const RESET_SUBMITTER_POLLS: u32 = 1000;

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Sends an MFI ABORT for the command on `victim` (which must be POSTED), using the admin
    /// tag's frame. The command goes POSTED -> ABORTING; its completion (normal, or 0x2E when
    /// aborted) is reported by the reaper with [`Done::aborted`] set. If the ABORT is refused
    /// while the command is still in flight, [`Self::reset_requested`] becomes true.
    /// Only one abort is in flight at a time ([`Error::AbortUnavailable`] otherwise).
    pub fn abort(&self, victim: u16) -> Result<(), Error> {
        self.check_tag(victim)?;
        if victim == ADMIN_TAG {
            return Err(Error::NotAbortable { tag: victim });
        }
        let _guard = self.begin_submit()?;
        let (state, vgen) = self.tags.load(victim);
        if state != tags::POSTED {
            return Err(Error::NotAbortable { tag: victim });
        }
        let generation = match self.tags.claim(ADMIN_TAG) {
            Ok(g) => g,
            Err(_) if self.tags.load(ADMIN_TAG).0 == tags::QUARANTINED => return Err(Error::AdminQuarantined),
            Err(_) => return Err(Error::AbortUnavailable),
        };
        if !self.tags.start_abort(victim, vgen) {
            // It completed between the load and here.
            self.tags.finish(ADMIN_TAG, generation);
            return Err(Error::NotAbortable { tag: victim });
        }
        // Published to the reaper by the Release in `publish` below.
        self.abort_victim
            .store(u32::from(victim) | (u32::from(vgen) << 16), Ordering::Relaxed);
        let w = self.frame(ADMIN_TAG);
        w.header(&Header {
            cmd: frame::CMD_ABORT,
            sense_len: 0,
            target: 0,
            cdb_len: 0,
            sge_count: 0,
            context: tags::encode_context(ADMIN_TAG, generation, false),
            flags: 0,
            data_len: 0,
        });
        w.u64_at(0x18, u64::from(tags::encode_context(victim, vgen, false)));
        w.u64_at(0x20, self.pool.phys_at(usize::from(victim) * self.frame_stride));
        self.tags.publish(ADMIN_TAG, tags::ABORT_FRAME, generation);
        self.post(ADMIN_TAG, 64);
        self.aborts_sent.fetch_add(1, Ordering::Relaxed);
        log::warn!("megasas: tag {victim} timed out; ABORT sent");
        Ok(())
    }

    /// What a tag is doing now (for the timeout handler; racy by nature).
    pub fn command_state(&self, tag: u16) -> CommandState {
        if tag >= self.ntags {
            return CommandState::Free;
        }
        match self.tags.load(tag).0 {
            tags::FREE => CommandState::Free,
            tags::PREPARED => CommandState::Prepared,
            tags::POSTED => CommandState::Posted,
            tags::ABORTING => CommandState::Aborting,
            tags::QUARANTINED => CommandState::Quarantined,
            _ => CommandState::Admin,
        }
    }

    /// Whether an abort was refused (or the caller asked) and the controller should be reset.
    pub fn reset_requested(&self) -> bool {
        self.reset_requested.load(Ordering::Acquire)
    }

    /// Asks for a controller reset at the next [`Self::reset`] opportunity.
    pub fn request_reset(&self) {
        self.reset_requested.store(true, Ordering::Release);
    }

    /// Counters of the abort/reset paths.
    pub fn recovery_counters(&self) -> RecoveryCounters {
        RecoveryCounters {
            aborts_sent: self.aborts_sent.load(Ordering::Relaxed),
            aborts_confirmed: self.aborts_confirmed.load(Ordering::Relaxed),
            aborts_failed: self.aborts_failed.load(Ordering::Relaxed),
            resets: self.resets.load(Ordering::Relaxed),
            reset_failed_commands: self.reset_failed_commands.load(Ordering::Relaxed),
            quarantined: self.quarantined.load(Ordering::Relaxed),
        }
    }

    /// Controller reset (online recovery): stops submissions (they get [`Error::Resetting`]),
    /// takes the reply queue, reports completions already in the ring, then resets the firmware
    /// (IDB ABORT|READY, which makes the device give up every frame), re-sends INIT with a fresh
    /// reply queue and re-enables interrupts. Every command that was in flight is then reported
    /// through `complete` as failed (kind `Aborted`): **failed, never re-issued** (the block layer's
    /// owner decides about retries). Quarantined admin tags and buffers are freed.
    ///
    /// Must not run concurrently with itself or with admin commands. If the firmware does not come
    /// back, the error is returned, the controller is marked not operational and the commands in
    /// flight stay owned by the device (the caller must stop bus mastering before giving their
    /// buffers back).
    pub fn reset(&self, mut complete: impl FnMut(Done)) -> Result<u32, Error> {
        // Closing the gate pairs with `begin_submit` (Dekker's pattern, `drvkit::gate`): either the
        // reset sees a submitter's count or the submitter sees the gate closed. Given up (and the
        // gate opened again) after `RESET_SUBMITTER_POLLS` waits.
        let mut polls = 0;
        let Some(closed) = self.submit_gate.close_within(|| self.reset_wait(&mut polls)) else {
            return Err(Error::ResetDeferred);
        };
        let mut polls = 0;
        while !self.gate.try_lock() {
            if !self.reset_wait(&mut polls) {
                // Dropping `closed` opens the submission gate again.
                return Err(Error::ResetDeferred);
            }
        }
        let result = self.reset_locked(&mut complete);
        self.gate.unlock();
        drop(closed);
        if let Err(e) = &result {
            log::error!("megasas: controller reset failed: {e}; controller is out of service");
        }
        result
    }

    /// One wait of a reset for submitters or the reaper to leave: 1 µs, or `false` once
    /// `RESET_SUBMITTER_POLLS` of them were spent (`polls` counts them).
    fn reset_wait(&self, polls: &mut u32) -> bool {
        if *polls >= RESET_SUBMITTER_POLLS {
            return false;
        }
        self.delay.delay_us(1);
        *polls += 1;
        true
    }

    /// Fails every command in flight without touching the device: only for a controller that
    /// could not be reset, **after the caller stopped the device's bus mastering**, so the
    /// buffers really are no longer the device's. Returns how many commands were failed.
    pub fn abandon_in_flight(&self, mut complete: impl FnMut(Done)) -> u32 {
        self.operational.store(false, Ordering::Release);
        self.sweep(&mut complete)
    }

    /// Frees every tag; reports the commands that were in flight as failed (kind `Aborted`).
    fn sweep(&self, complete: &mut impl FnMut(Done)) -> u32 {
        let mut failed = 0u32;
        for tag in 0..self.tags.len() {
            let (state, generation) = self.tags.load(tag);
            match state {
                tags::FREE => {}
                tags::POSTED | tags::ABORTING => {
                    let cookie = self.tags.cookie(tag);
                    self.clear_sense(tag);
                    self.tags.finish(tag, generation);
                    failed += 1;
                    complete(Done {
                        tag,
                        cookie,
                        status: IoStatus::Failed(IoError {
                            kind: IoErrorKind::Aborted,
                            mfi_status: MfiStatus::SCSI_IO_FAILED,
                            scsi_status: 0,
                            sense: None,
                        }),
                        aborted: state == tags::ABORTING,
                    });
                }
                _ => {
                    // Whatever the device did with the command, its sense buffer starts clean.
                    self.clear_sense(tag);
                    self.tags.finish(tag, generation);
                }
            }
        }
        failed
    }

    fn reset_locked(&self, complete: &mut impl FnMut(Done)) -> Result<u32, Error> {
        let irq_was_enabled = self.irq_enabled.load(Ordering::Acquire);
        // Completions that already arrived keep their real status.
        let mut out = Reaped::default();
        self.drain(&mut out, complete, &core::cell::Cell::new(u32::MAX));
        self.operational.store(false, Ordering::Release);
        self.irq_enabled.store(false, Ordering::Release);
        log::warn!("megasas: resetting the controller");
        let bring = self.bringup();
        // From OPERATIONAL this writes IDB ABORT|READY: QEMU cancels every frame (0x2E into the
        // old ring) and drops the reply queue.
        bring.to_ready()?;
        self.mmio.write32(regs::OMSK, 0xFFFF_FFFF);
        bring.to_ready()?;
        // The device has given up every frame: fail what was in flight, free the rest.
        let failed = self.sweep(complete);
        // Release pairs with the Acquire in `take_admin`.
        self.admin_busy.store(false, Ordering::Release);
        self.admin_quarantined.store(false, Ordering::Release);
        self.reset_requested.store(false, Ordering::Release);
        for i in 0..self.ring_entries as usize {
            self.ring
                .atomic_u32(RING_ENTRIES + 4 * i)
                .store(RING_SENTINEL, Ordering::Relaxed);
        }
        self.init_queue()?;
        self.operational.store(true, Ordering::Release);
        if irq_was_enabled {
            self.enable_interrupts()?;
        }
        self.resets.fetch_add(1, Ordering::Relaxed);
        self.reset_failed_commands
            .fetch_add(u64::from(failed), Ordering::Relaxed);
        log::warn!("megasas: controller reset done; {failed} commands in flight failed");
        Ok(failed)
    }

    /// The reply of an ABORT frame. On QEMU the aborted command's own reply (0x2E) comes first,
    /// so the victim is normally already complete; if it is still in flight, an OK from the
    /// device means it gave the command up (the victim is completed as aborted here), anything
    /// else means the abort failed and the controller must be reset.
    pub(super) fn abort_replied(&self, tag: u16, generation: u16, mfi: MfiStatus, out: &mut Reaped) -> Option<Done> {
        let victim = self.abort_victim.load(Ordering::Relaxed);
        let (vtag, vgen) = ((victim & 0xFFFF) as u16, (victim >> 16) as u16);
        let mut done = None;
        if self.tags.load(vtag) == (tags::ABORTING, vgen) {
            if mfi == MfiStatus::OK {
                let cookie = self.tags.cookie(vtag);
                // The device gave the victim up without a reply of its own, perhaps with sense.
                self.clear_sense(vtag);
                if self.tags.complete(vtag, vgen).is_ok() {
                    self.aborts_confirmed.fetch_add(1, Ordering::Relaxed);
                    out.completed += 1;
                    done = Some(Done {
                        tag: vtag,
                        cookie,
                        status: IoStatus::Failed(IoError {
                            kind: IoErrorKind::Aborted,
                            mfi_status: MfiStatus::SCSI_IO_FAILED,
                            scsi_status: 0,
                            sense: None,
                        }),
                        aborted: true,
                    });
                }
            } else {
                log::error!("megasas: ABORT of tag {vtag} refused with {mfi}; the controller will be reset");
                self.aborts_failed.fetch_add(1, Ordering::Relaxed);
                self.reset_requested.store(true, Ordering::Release);
            }
        }
        self.tags.finish(tag, generation);
        done
    }
}
