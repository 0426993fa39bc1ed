//! Per-tag command state and the MFI context encoding.
//!
//! Each tag owns one frame and one sense buffer. Its state word says who owns the frame:
//!
//! ```text
//!   IDLE --claim--> BUILDING --post--> POSTED --reap--> IDLE     (interrupt-driven I/O)
//!                            --post--> POLLED --poll--> IDLE     (bring-up and admin commands)
//! ```
//!
//! The word also carries a 16-bit generation, bumped at every claim and echoed in the context, so a
//! stale or duplicated completion of an earlier use of the tag is recognised. Distinct tags share no
//! mutable state; the only shared action on the submit path is the doorbell write.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::Error;
use crate::error::BogusReason;

pub(crate) const IDLE: u32 = 0;
pub(crate) const BUILDING: u32 = 1;
pub(crate) const POSTED: u32 = 2;
pub(crate) const POLLED: u32 = 3;
const STATE_MASK: u32 = 0x3;

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

/// The state words of all tags.
pub(crate) struct TagTable {
    words: Box<[AtomicU32]>,
}

impl TagTable {
    pub(crate) fn new(tags: u16) -> Self {
        Self {
            words: (0..tags)
                .map(|_| AtomicU32::new(IDLE))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        }
    }

    fn slot(&self, tag: u16) -> &AtomicU32 {
        &self.words[usize::from(tag)]
    }

    /// IDLE -> BUILDING with a new generation, which is returned.
    pub(crate) fn claim(&self, tag: u16) -> Result<u16, Error> {
        let slot = self.slot(tag);
        let cur = slot.load(Ordering::Relaxed);
        if cur & STATE_MASK != IDLE {
            return Err(Error::TagBusy { tag });
        }
        let generation = ((cur >> 16) as u16).wrapping_add(1);
        // Acquire pairs with the Release of `finish`/`complete`: the previous user's reads of this
        // frame (status, sense) happen before we overwrite it.
        slot.compare_exchange(cur, word(BUILDING, generation), Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| Error::TagBusy { tag })?;
        Ok(generation)
    }

    /// BUILDING -> POSTED or POLLED. Release pairs with the reaper's Acquire load in `complete`, so
    /// the reaper that sees POSTED also sees the frame this CPU built.
    pub(crate) fn publish(&self, tag: u16, state: u32, generation: u16) {
        self.slot(tag).store(word(state, generation), Ordering::Release);
    }

    /// Any state -> IDLE, keeping the generation (end of a polled command, or a failed build).
    /// Release pairs with the Acquire of the next `claim`.
    pub(crate) fn finish(&self, tag: u16, generation: u16) {
        self.slot(tag).store(word(IDLE, generation), Ordering::Release);
    }

    /// Checks a reply-queue context against the tag's state without changing it.
    pub(crate) fn check(&self, tag: u16, generation: u16) -> Result<(), BogusReason> {
        // Acquire pairs with `publish`.
        let cur = self.slot(tag).load(Ordering::Acquire);
        if cur & STATE_MASK != POSTED {
            return Err(BogusReason::NotInFlight { tag });
        }
        let expected = (cur >> 16) as u16;
        if expected != generation {
            return Err(BogusReason::StaleGeneration {
                tag,
                expected,
                found: generation,
            });
        }
        Ok(())
    }

    /// POSTED -> IDLE for the given generation: the completion is accepted.
    pub(crate) fn complete(&self, tag: u16, generation: u16) -> Result<(), BogusReason> {
        // AcqRel: Release hands the frame back to the next `claim`; Acquire keeps the frame reads
        // above it from sinking below the hand-back.
        self.slot(tag)
            .compare_exchange(
                word(POSTED, generation),
                word(IDLE, generation),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .map(|_| ())
            .map_err(|_| BogusReason::NotInFlight { tag })
    }

    /// Number of tags not IDLE (diagnostics; not a snapshot).
    pub(crate) fn busy(&self) -> usize {
        self.words
            .iter()
            .filter(|w| w.load(Ordering::Relaxed) & STATE_MASK != IDLE)
            .count()
    }
}

#[cfg(test)]
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
        t.publish(2, POSTED, g1);
        assert_eq!(t.check(2, g1), Ok(()));
        assert_eq!(
            t.check(2, g1.wrapping_add(1)),
            Err(BogusReason::StaleGeneration {
                tag: 2,
                expected: g1,
                found: g1.wrapping_add(1)
            })
        );
        assert_eq!(t.complete(2, g1), Ok(()));
        // A duplicate of the same completion no longer matches anything in flight.
        assert_eq!(t.check(2, g1), Err(BogusReason::NotInFlight { tag: 2 }));
        assert_eq!(t.complete(2, g1), Err(BogusReason::NotInFlight { tag: 2 }));
        let g2 = t.claim(2).unwrap();
        assert_ne!(g1, g2);
        assert_eq!(t.busy(), 1);
    }
}
