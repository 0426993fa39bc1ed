//! The state word of one SMID: in flight or idle, and a generation bumped by each claim.
//!
//! A submitter claims an idle slot before it writes the frame and posts the descriptor, so a
//! reply can only ever match a posted command. A reaper (or a reset's sweep) ends the command it
//! saw with a compare-exchange on the exact word it loaded: if two reapers see the same SMID (a
//! duplicated reply on two queues) exactly one wins, and a reply for an idle SMID is refused.

use crate::sync::{AtomicU64, Ordering};

/// Bit 63: a command is on the controller. Bits 31:0: generation.
const IN_FLIGHT: u64 = 1 << 63;

#[derive(Debug)]
pub(crate) struct SmidSlot {
    word: AtomicU64,
}

impl SmidSlot {
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
        }
    }

    /// Claims an idle slot; returns the new generation, or None when a command is in flight.
    pub(crate) fn claim(&self) -> Option<u32> {
        // Acquire pairs with the Release of `finish`: the previous owner's use of the SMID's
        // frame and sense slot happens before ours.
        let old = self.word.load(Ordering::Acquire);
        if old & IN_FLIGHT != 0 {
            return None;
        }
        let generation = (old as u32).wrapping_add(1);
        self.word
            .compare_exchange(
                old,
                IN_FLIGHT | u64::from(generation),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok()
            .map(|_| generation)
    }

    /// Marks the slot in flight whatever its state (only the `RepostOutstanding` test hook).
    pub(crate) fn force_claim(&self) -> u32 {
        let generation = (self.word.load(Ordering::Acquire) as u32).wrapping_add(1);
        self.word.store(IN_FLIGHT | u64::from(generation), Ordering::Release);
        generation
    }

    /// The word if a command is in flight (to be passed to [`SmidSlot::finish`]).
    pub(crate) fn in_flight(&self) -> Option<u64> {
        // Acquire pairs with the AcqRel claim: the submitter's cookie and target are visible.
        let w = self.word.load(Ordering::Acquire);
        (w & IN_FLIGHT != 0).then_some(w)
    }

    /// Ends the command seen as `word`. True for exactly one caller per claim.
    pub(crate) fn finish(&self, word: u64) -> bool {
        // Release pairs with the Acquire of the next `claim`: our reads of the frame and sense
        // happen before the next owner rewrites them.
        self.word
            .compare_exchange(word, word & !IN_FLIGHT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Generation part of a word.
    pub(crate) fn generation(word: u64) -> u32 {
        word as u32
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A duplicated reply reaped on two queues at once: exactly one reaper ends the command.
    #[test]
    fn two_reapers_one_winner() {
        loom::model(|| {
            let s = Arc::new(SmidSlot::new());
            assert_eq!(s.claim(), Some(1));
            let w = s.in_flight().unwrap();
            let s2 = s.clone();
            let t = thread::spawn(move || s2.in_flight().is_some_and(|w| s2.finish(w)));
            let mine = s.finish(w);
            let theirs = t.join().unwrap();
            assert!(mine ^ theirs, "exactly one reaper wins");
            assert!(s.in_flight().is_none());
        });
    }

    /// A reaper ends a command while a submitter tries to reuse the tag: the claim succeeds only
    /// after the end, and then with the next generation; never two owners.
    #[test]
    fn reuse_waits_for_the_end() {
        loom::model(|| {
            let s = Arc::new(SmidSlot::new());
            assert_eq!(s.claim(), Some(1));
            let s2 = s.clone();
            let reaper = thread::spawn(move || {
                let w = s2.in_flight().unwrap();
                assert!(s2.finish(w));
            });
            let claimed = s.claim();
            reaper.join().unwrap();
            match claimed {
                Some(g) => {
                    assert_eq!(g, 2);
                    assert_eq!(s.in_flight().map(SmidSlot::generation), Some(2));
                }
                None => assert!(s.in_flight().is_none()),
            }
        });
    }

    /// A stale end (the word of generation 1) cannot end generation 2's command.
    #[test]
    fn stale_word_cannot_end_a_new_command() {
        loom::model(|| {
            let s = Arc::new(SmidSlot::new());
            s.claim().unwrap();
            let old = s.in_flight().unwrap();
            assert!(s.finish(old));
            let s2 = s.clone();
            let t = thread::spawn(move || s2.claim());
            let late = s.finish(old);
            let g = t.join().unwrap();
            assert!(!late, "the old word never matches again");
            assert_eq!(g, Some(2));
        });
    }
}
