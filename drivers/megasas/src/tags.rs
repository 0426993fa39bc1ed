//! Per-tag command state and the MFI context encoding.
//!
//! Each tag owns one frame and one sense buffer. Its state word says who owns the frame:
//!
//! ```text
//!   FREE --claim--> PREPARED --publish--> POSTED --reap--> FREE           (interrupt-driven I/O)
//!                                          POSTED --abort--> ABORTING --reap/abort done--> FREE
//!                   PREPARED --publish--> POLLED --poll--> FREE          (bring-up and admin)
//!                                          POLLED --poll timed out--> QUARANTINED --reset--> FREE
//!                   PREPARED --publish--> ABORT_FRAME --reap--> FREE     (an MFI ABORT in flight)
//!   any state --controller reset (device gave up every frame)--> FREE
//! ```
//!
//! Only a POSTED or ABORTING tag accepts a reply: a reply for a tag still PREPARED (frame being
//! built, not yet handed to the device) is bogus and dropped, which is what makes it impossible to
//! credit a completion to a request whose frame is not posted yet. The word also carries a 16-bit
//! generation, bumped at every claim and echoed in the context, so a stale or duplicated
//! completion of an earlier use of the tag is recognised. Distinct tags share no mutable state.
//! The loom model at the bottom checks submit/post against a concurrent reaper.

use alloc::boxed::Box;
use alloc::vec::Vec;

#[cfg(not(all(loom, test)))]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(all(loom, test))]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::Error;
use crate::error::BogusReason;

pub(crate) const FREE: u32 = 0;
pub(crate) const PREPARED: u32 = 1;
pub(crate) const POSTED: u32 = 2;
pub(crate) const POLLED: u32 = 3;
pub(crate) const ABORTING: u32 = 4;
pub(crate) const QUARANTINED: u32 = 5;
pub(crate) const ABORT_FRAME: u32 = 6;
const STATE_MASK: u32 = 0x7;

/// Bits of the context that hold the tag (tags are below 0x8000).
pub(crate) const CTX_TAG_MASK: u32 = 0x7FFF;
/// Context bit marking a polled command: its reply-queue echo is ignored.
pub(crate) const CTX_POLLED: u32 = 0x8000;
/// Largest number of tags the context encoding allows.
pub(crate) const MAX_TAGS: u16 = 0x7FFF;

/// Builds the 32-bit MFI context for `tag` in generation `generation`.
pub(crate) const fn encode_context(tag: u16, generation: u16, polled: bool) -> u32 {
    (tag as u32) | if polled { CTX_POLLED } else { 0 } | ((generation as u32) << 16)
}

/// Splits a context into (tag, polled, generation).
pub(crate) const fn decode_context(ctx: u32) -> (u32, bool, u16) {
    (ctx & CTX_TAG_MASK, ctx & CTX_POLLED != 0, (ctx >> 16) as u16)
}

const fn word(state: u32, generation: u16) -> u32 {
    state | ((generation as u32) << 16)
}

/// A reply accepted for a tag: what the tag was doing when it completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Accepted {
    /// An ordinary command completed.
    Posted,
    /// A command with an abort pending completed (normally or as aborted).
    Aborting,
}

/// One tag's record: its state word, the owner's cookie and the length of its last I/O frame,
/// side by side so the submit and reap paths index (and bounds-check) one table once per
/// command, not three tables with three checks on each side.
pub(crate) struct TagEntry {
    word: AtomicU32,
    /// Bytes of the tag's last I/O frame (low 16 bits), for a resubmission of the same frame,
    /// and how often it was posted again (high 16 bits): the submission's one store of the
    /// length also starts the count at zero.
    frame_len: AtomicU32,
    /// Caller-chosen value per command (the block layer's issue token), written before the
    /// command is published and read by the reaper after it validated the context.
    cookie: AtomicU64,
}

impl TagEntry {
    fn new() -> Self {
        Self {
            word: AtomicU32::new(FREE),
            frame_len: AtomicU32::new(0),
            cookie: AtomicU64::new(0),
        }
    }

    /// FREE -> PREPARED with a new generation, which is returned (`tag` names it in the error).
    #[inline]
    pub(crate) fn claim(&self, tag: u16) -> Result<u16, Error> {
        let cur = self.word.load(Ordering::Relaxed);
        if cur & STATE_MASK != FREE {
            return Err(Error::TagBusy { tag });
        }
        let generation = ((cur >> 16) as u16).wrapping_add(1);
        // Acquire pairs with the Release of `finish`/`complete`: the previous user's reads of this
        // frame (status, sense) happen before we overwrite it.
        self.word
            .compare_exchange(cur, word(PREPARED, generation), Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| Error::TagBusy { tag })?;
        Ok(generation)
    }

    /// Stores the owner's cookie of a PREPARED tag (before `publish`, which releases it).
    #[inline]
    pub(crate) fn set_cookie(&self, cookie: u64) {
        self.cookie.store(cookie, Ordering::Relaxed);
    }

    /// The cookie of a tag whose context the caller validated with `check_loaded` after `load`
    /// (Acquire there pairs with the Release in `publish`, which follows the cookie store).
    #[inline]
    pub(crate) fn cookie(&self) -> u64 {
        self.cookie.load(Ordering::Relaxed)
    }

    /// Records the length of the I/O frame a PREPARED tag carries (before `publish`), with no
    /// re-post yet. A frame is at most a few KiB, so the length fits 16 bits.
    #[inline]
    pub(crate) fn set_frame_len(&self, bytes: u16) {
        self.frame_len.store(u32::from(bytes), Ordering::Relaxed);
    }

    /// The length of the tag's last I/O frame (0: it never carried one). Read by the tag's owner.
    pub(crate) fn frame_len(&self) -> u32 {
        self.frame_len.load(Ordering::Relaxed) & 0xFFFF
    }

    /// How often the tag's current I/O frame was posted again. Read by the tag's owner.
    pub(crate) fn reposts(&self) -> u16 {
        (self.frame_len.load(Ordering::Relaxed) >> 16) as u16
    }

    /// Counts one more re-post of the tag's current I/O frame (saturating). By the tag's owner.
    pub(crate) fn note_repost(&self) {
        let cur = self.frame_len.load(Ordering::Relaxed);
        if cur >> 16 != 0xFFFF {
            self.frame_len.store(cur + 0x1_0000, Ordering::Relaxed);
        }
    }

    /// PREPARED -> POSTED, POLLED or ABORT_FRAME. Release pairs with the reaper's Acquire load in
    /// `load`, so the reaper that sees POSTED also sees the frame and cookie this CPU wrote.
    #[inline]
    pub(crate) fn publish(&self, state: u32, generation: u16) {
        self.word.store(word(state, generation), Ordering::Release);
    }

    /// The state and generation of the tag now (Acquire pairs with `publish`).
    #[inline]
    pub(crate) fn load(&self) -> (u32, u16) {
        let cur = self.word.load(Ordering::Acquire);
        (cur & STATE_MASK, (cur >> 16) as u16)
    }

    /// POSTED or ABORTING -> FREE for the given generation: the completion is accepted.
    #[inline]
    pub(crate) fn complete(&self, tag: u16, generation: u16) -> Result<Accepted, BogusReason> {
        for (from, accepted) in [(POSTED, Accepted::Posted), (ABORTING, Accepted::Aborting)] {
            // AcqRel: Release hands the frame back to the next `claim`; Acquire keeps the frame
            // reads above it from sinking below the hand-back.
            if self
                .word
                .compare_exchange(
                    word(from, generation),
                    word(FREE, generation),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Ok(accepted);
            }
        }
        Err(BogusReason::NotInFlight { tag })
    }
}

/// The records of all tags ([`TagEntry`]).
pub(crate) struct TagTable {
    entries: Box<[TagEntry]>,
}

impl TagTable {
    pub(crate) fn new(tags: u16) -> Self {
        Self {
            entries: (0..tags)
                .map(|_| TagEntry::new())
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        }
    }

    /// The record of `tag`, `None` when out of range: the one bounds check of a hot path.
    #[inline]
    pub(crate) fn entry(&self, tag: u16) -> Option<&TagEntry> {
        self.entries.get(usize::from(tag))
    }

    fn slot(&self, tag: u16) -> &AtomicU32 {
        &self.entries[usize::from(tag)].word
    }

    /// FREE -> PREPARED with a new generation, which is returned.
    pub(crate) fn claim(&self, tag: u16) -> Result<u16, Error> {
        self.entries[usize::from(tag)].claim(tag)
    }

    /// Stores the owner's cookie of a PREPARED tag (before `publish`, which releases it).
    #[cfg(all(test, loom))]
    pub(crate) fn set_cookie(&self, tag: u16, cookie: u64) {
        self.entries[usize::from(tag)].set_cookie(cookie);
    }

    /// The cookie of a tag whose context the caller validated with `check` (Acquire there pairs
    /// with the Release in `publish`, which follows the cookie store).
    pub(crate) fn cookie(&self, tag: u16) -> u64 {
        self.entries[usize::from(tag)].cookie()
    }

    /// PREPARED -> POSTED, POLLED or ABORT_FRAME. Release pairs with the reaper's Acquire load in
    /// `check`, so the reaper that sees POSTED also sees the frame and cookie this CPU wrote.
    pub(crate) fn publish(&self, tag: u16, state: u32, generation: u16) {
        self.entries[usize::from(tag)].publish(state, generation);
    }

    /// Any state -> FREE, keeping the generation (end of a polled command, a failed build, or a
    /// controller reset). Release pairs with the Acquire of the next `claim`.
    pub(crate) fn finish(&self, tag: u16, generation: u16) {
        self.slot(tag).store(word(FREE, generation), Ordering::Release);
    }

    /// POLLED -> QUARANTINED: a polled command timed out and the device still owns its frame and
    /// buffer; only a controller reset frees the tag.
    pub(crate) fn quarantine(&self, tag: u16, generation: u16) {
        self.slot(tag).store(word(QUARANTINED, generation), Ordering::Release);
    }

    /// The state and generation of a tag now.
    pub(crate) fn load(&self, tag: u16) -> (u32, u16) {
        self.entries[usize::from(tag)].load()
    }

    /// Checks a reply-queue context against the tag's state without changing it: the tag must be
    /// POSTED or ABORTING (a command the device owns) in the same generation.
    /// (The reaper reads the word once for its own test first and calls [`Self::check_loaded`];
    /// this is the tests' and the loom model's one-call form.)
    #[cfg(test)]
    pub(crate) fn check(&self, tag: u16, generation: u16) -> Result<Accepted, BogusReason> {
        // Acquire pairs with `publish`.
        let (state, expected) = self.load(tag);
        Self::check_loaded(tag, (state, expected), generation)
    }

    /// [`Self::check`] of a state and generation the caller has just read with [`Self::load`]
    /// (Acquire there pairs with `publish`), so a reaper that looks at the state first reads the
    /// tag's word once.
    #[inline]
    pub(crate) fn check_loaded(
        tag: u16,
        (state, expected): (u32, u16),
        generation: u16,
    ) -> Result<Accepted, BogusReason> {
        let accepted = match state {
            POSTED => Accepted::Posted,
            ABORTING => Accepted::Aborting,
            _ => return Err(BogusReason::NotInFlight { tag }),
        };
        if expected != generation {
            return Err(BogusReason::StaleGeneration {
                tag,
                expected,
                found: generation,
            });
        }
        Ok(accepted)
    }

    /// POSTED or ABORTING -> FREE for the given generation: the completion is accepted.
    pub(crate) fn complete(&self, tag: u16, generation: u16) -> Result<Accepted, BogusReason> {
        self.entries[usize::from(tag)].complete(tag, generation)
    }

    /// POSTED -> ABORTING for the given generation (an ABORT frame is about to be sent for it).
    pub(crate) fn start_abort(&self, tag: u16, generation: u16) -> bool {
        self.slot(tag)
            .compare_exchange(
                word(POSTED, generation),
                word(ABORTING, generation),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Number of tags not FREE (diagnostics; not a snapshot).
    pub(crate) fn busy(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.word.load(Ordering::Relaxed) & STATE_MASK != FREE)
            .count()
    }

    /// Number of tags.
    pub(crate) fn len(&self) -> u16 {
        self.entries.len() as u16
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn context_round_trips_tag_generation_and_polled_bit() {
        for (tag, generation, polled) in [(0u16, 0u16, false), (2046, 0xFFFF, true), (1234, 7, false)] {
            let ctx = encode_context(tag, generation, polled);
            assert_eq!(decode_context(ctx), (u32::from(tag), polled, generation));
        }
    }

    #[test]
    fn claim_rejects_busy_tag_and_generation_advances() {
        let t = TagTable::new(4);
        let g1 = t.claim(2).unwrap();
        assert_eq!(t.claim(2), Err(Error::TagBusy { tag: 2 }));
        // PREPARED: the frame is not posted yet, so no reply may match it.
        assert_eq!(t.check(2, g1), Err(BogusReason::NotInFlight { tag: 2 }));
        t.publish(2, POSTED, g1);
        assert_eq!(t.check(2, g1), Ok(Accepted::Posted));
        assert_eq!(
            t.check(2, g1.wrapping_add(1)),
            Err(BogusReason::StaleGeneration {
                tag: 2,
                expected: g1,
                found: g1.wrapping_add(1)
            })
        );
        assert_eq!(t.complete(2, g1), Ok(Accepted::Posted));
        // A duplicate of the same completion no longer matches anything in flight.
        assert_eq!(t.check(2, g1), Err(BogusReason::NotInFlight { tag: 2 }));
        assert_eq!(t.complete(2, g1), Err(BogusReason::NotInFlight { tag: 2 }));
        let g2 = t.claim(2).unwrap();
        assert_ne!(g1, g2);
        assert_eq!(t.busy(), 1);
    }

    #[test]
    fn abort_states() {
        let t = TagTable::new(2);
        let g = t.claim(1).unwrap();
        assert!(!t.start_abort(1, g), "a PREPARED tag cannot be aborted");
        t.publish(1, POSTED, g);
        assert!(t.start_abort(1, g));
        assert!(!t.start_abort(1, g), "only one abort at a time");
        assert_eq!(t.check(1, g), Ok(Accepted::Aborting));
        assert_eq!(t.complete(1, g), Ok(Accepted::Aborting));
        assert_eq!(t.complete(1, g), Err(BogusReason::NotInFlight { tag: 1 }));
        let g = t.claim(1).unwrap();
        t.publish(1, POLLED, g);
        t.quarantine(1, g);
        assert_eq!(
            t.claim(1),
            Err(Error::TagBusy { tag: 1 }),
            "a quarantined tag stays reserved"
        );
        assert_eq!(t.load(1), (QUARANTINED, g));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// A submitter claims a tag, stores its cookie, publishes POSTED and rings the "doorbell"; the
    /// device echoes the context into a reply word; a hostile device also posts the context early
    /// (while the tag may still be PREPARED). A reaper consumes both reply words. Whatever the
    /// interleaving: at most one completion is accepted, it carries the submitter's cookie, and a
    /// reply accepted before the frame was posted never happens.
    #[test]
    fn reply_never_matches_an_unposted_frame() {
        loom::model(|| {
            let tags = Arc::new(TagTable::new(1));
            // Reply words: 0 = empty, else context + 1.
            let early = Arc::new(AtomicU32::new(0));
            let normal = Arc::new(AtomicU32::new(0));
            let posted = Arc::new(AtomicU32::new(0));
            // The first generation is known: claim bumps 0 -> 1.
            let ctx = encode_context(0, 1, false);
            let submit = {
                let (tags, normal, posted) = (tags.clone(), normal.clone(), posted.clone());
                loom::thread::spawn(move || {
                    let g = tags.claim(0).unwrap();
                    assert_eq!(g, 1);
                    tags.set_cookie(0, 0xC0FFEE);
                    tags.publish(0, POSTED, g);
                    posted.store(1, Ordering::Release);
                    // The device completes the posted frame.
                    normal.store(ctx + 1, Ordering::Release);
                })
            };
            let hostile = {
                let early = early.clone();
                loom::thread::spawn(move || early.store(ctx + 1, Ordering::Release))
            };
            let mut accepted = 0;
            for word in [&early, &normal, &early, &normal] {
                let v = word.swap(0, Ordering::Acquire);
                if v == 0 {
                    continue;
                }
                let (tag, _, generation) = decode_context(v - 1);
                if tags.check(tag as u16, generation).is_ok() {
                    // The tag is POSTED, so the submitter published it: the post flag and the
                    // cookie it wrote before publishing are visible.
                    assert_eq!(tags.cookie(0), 0xC0FFEE);
                    if tags.complete(tag as u16, generation).is_ok() {
                        accepted += 1;
                    }
                }
            }
            submit.join().unwrap();
            hostile.join().unwrap();
            assert!(accepted <= 1, "a command completed twice");
        });
    }

    /// A timeout starts an abort while the reaper completes the same command: exactly one of them
    /// wins, and the command is completed exactly once.
    #[test]
    fn abort_races_completion() {
        loom::model(|| {
            let tags = Arc::new(TagTable::new(1));
            let g = tags.claim(0).unwrap();
            tags.publish(0, POSTED, g);
            let reaper = {
                let tags = tags.clone();
                loom::thread::spawn(move || tags.complete(0, g).is_ok())
            };
            let aborted = tags.start_abort(0, g);
            // The abort's own completion path (abort confirmed) or the original reply.
            let completed_by_reaper = reaper.join().unwrap();
            let completed_after_abort = aborted && tags.complete(0, g).is_ok();
            assert!(
                completed_by_reaper ^ completed_after_abort,
                "completed {} times",
                u8::from(completed_by_reaper) + u8::from(completed_after_abort)
            );
            assert_eq!(tags.load(0).0, FREE);
        });
    }
}
