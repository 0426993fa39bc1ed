//! The done board: how a finished request gets home to the CPU that submitted it.
//!
//! A submitter (the kernel's workload engine) keeps a fixed number of outstanding requests per
//! CPU, each in a numbered slot. When the block layer finishes a request it calls
//! [`crate::Platform::end_io`] on whatever CPU it finished on; the platform passes the
//! completion's [`crate::Completion::submit_cpu`] (taken from the request slot, so the cookie
//! need not carry a CPU) and the submitter's slot to [`DoneBoard::deliver`], which stores the
//! status and sets the slot's bit in that CPU's done bitmap. The submitting CPU calls
//! [`DoneBoard::take`], which swaps its bitmap words to zero and reports each set bit with its
//! status. No lock, no allocation after [`DoneBoard::new`].
//!
//! Who may call what concurrently: `deliver` from any CPU, including interrupt context, for any
//! submitter; `take(cpu, ..)` only by the one context that owns `cpu`'s slots (it may run
//! concurrently with any number of `deliver`s). A slot must have at most one completion
//! outstanding: the submitter reuses a slot only after `take` reported it. A second `deliver`
//! before that is refused with [`BlkError::DoneSlotBusy`] and counted, but a failure's status
//! has already overwritten the first one's (the caller broke the contract; the error says so).
//!
//! Memory ordering: when the status is not [`Status::Ok`], `deliver` stores it (Relaxed) and sets
//! the slot's "not ok" bit (Relaxed RMW); then it sets the done bit with a Release RMW;
//! `take` swaps the word with Acquire, which synchronises with every RMW whose bit it takes, so
//! each taken slot's status and "not ok" bit are visible (loom model
//! `done_board_two_cpus_deliver_one_takes`). The "not ok" bits let [`DoneBoard::take_split`] hand
//! a word's successes over as one bit mask, without reading a status per slot.

use crate::error::BlkError;
use crate::request::Status;
use crate::sync::{AtomicU8, AtomicU64, Ordering};
use alloc::boxed::Box;
use core::sync::atomic::AtomicU64 as CountU64;

/// Most slots one CPU may have on a board.
pub const MAX_SLOTS: usize = 1 << 16;

/// Most CPUs a board may have (the block layer's CPU indices are 16-bit).
pub const MAX_CPUS: usize = 1 << 16;

/// Each CPU's bitmap and statuses start on their own 128-byte block, so that CPUs taking their
/// own completions do not share lines. (Not under loom: padding would only add atomics to the
/// model.)
#[cfg(not(loom))]
const WORD_STRIDE_ALIGN: usize = 128 / core::mem::size_of::<DoneWord>();
#[cfg(not(loom))]
const STATUS_STRIDE_ALIGN: usize = 128;
#[cfg(loom)]
const WORD_STRIDE_ALIGN: usize = 1;
#[cfg(loom)]
const STATUS_STRIDE_ALIGN: usize = 1;

/// Calls `f(i)` for each bit `i` set in `bits`, lowest first (a [`Taken::Successes`] word).
#[inline(always)]
pub fn for_each_bit(mut bits: u64, mut f: impl FnMut(usize)) {
    while bits != 0 {
        f(bits.trailing_zeros() as usize);
        bits &= bits - 1;
    }
}

/// What [`DoneBoard::take_split`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Slots `first + i`, for each bit `i` of `bits`, finished with [`Status::Ok`].
    Successes { first: usize, bits: u64 },
    /// Slot `slot` finished with `status`, which is not [`Status::Ok`].
    Other { slot: usize, status: Status },
}

/// 64 slots' done bits and, beside them, their "not ok" bits: one slice, so a reap walks one
/// pointer and one length, not two slices zipped.
struct DoneWord {
    done: AtomicU64,
    /// The slot's delivered status is not `Ok`. Set before the done bit, cleared by the taker.
    failed: AtomicU64,
}

impl DoneWord {
    fn new() -> Self {
        Self {
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }
}

/// Per-CPU done bitmaps and per-slot statuses.
pub struct DoneBoard {
    ncpus: usize,
    slots_per_cpu: usize,
    word_stride: usize,
    status_stride: usize,
    words: Box<[DoneWord]>,
    status: Box<[AtomicU8]>,
    /// Refused deliveries; a statistic, so a plain `core` atomic.
    bogus: CountU64,
}

impl DoneBoard {
    /// A board for `ncpus` CPUs (`1..=65536`) with `slots_per_cpu` slots each
    /// (`1..=`[`MAX_SLOTS`]).
    pub fn new(ncpus: usize, slots_per_cpu: usize) -> Result<Self, BlkError> {
        if ncpus == 0 || ncpus > MAX_CPUS {
            return Err(BlkError::InvalidConfig {
                field: "done board ncpus",
                value: ncpus as u64,
                accepted: "1..=65536",
            });
        }
        if slots_per_cpu == 0 || slots_per_cpu > MAX_SLOTS {
            return Err(BlkError::InvalidConfig {
                field: "done board slots_per_cpu",
                value: slots_per_cpu as u64,
                accepted: "1..=65536",
            });
        }
        let word_stride = slots_per_cpu.div_ceil(64).next_multiple_of(WORD_STRIDE_ALIGN);
        let status_stride = slots_per_cpu.next_multiple_of(STATUS_STRIDE_ALIGN);
        Ok(Self {
            ncpus,
            slots_per_cpu,
            word_stride,
            status_stride,
            words: (0..ncpus * word_stride).map(|_| DoneWord::new()).collect(),
            status: (0..ncpus * status_stride)
                .map(|_| AtomicU8::new(Status::Ok as u8))
                .collect(),
            bogus: CountU64::new(0),
        })
    }

    /// Number of CPUs.
    pub fn ncpus(&self) -> usize {
        self.ncpus
    }

    /// Slots per CPU.
    pub fn slots_per_cpu(&self) -> usize {
        self.slots_per_cpu
    }

    /// Records that `submit_cpu`'s request in `slot` finished with `status`. Callable from any
    /// CPU and from interrupt context; never blocks. An out-of-range CPU or slot, or a slot that
    /// already holds an untaken completion, is counted in [`DoneBoard::bogus`] and refused.
    #[inline(always)]
    pub fn deliver(&self, submit_cpu: usize, slot: usize, status: Status) -> Result<(), BlkError> {
        if submit_cpu >= self.ncpus || slot >= self.slots_per_cpu {
            return Err(self.refuse_out_of_range(submit_cpu, slot));
        }
        let bit = 1u64 << (slot % 64);
        let word = submit_cpu * self.word_stride + slot / 64;
        if status != Status::Ok {
            // Only a slot with its "not ok" bit has its status read (`take_failed`), so a
            // success stores none. Both are published by the Release below.
            self.status[submit_cpu * self.status_stride + slot].store(status as u8, Ordering::Relaxed);
            self.words[word].failed.fetch_or(bit, Ordering::Relaxed);
        }
        // Release pairs with the Acquire swap in `take`: the status store and the "not ok" bit
        // above are visible to the CPU that takes this bit.
        let prev = self.words[word].done.fetch_or(bit, Ordering::Release);
        if prev & bit != 0 {
            self.bogus.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            return Err(BlkError::DoneSlotBusy { cpu: submit_cpu, slot });
        }
        Ok(())
    }

    /// [`DoneBoard::deliver`] for a request whose cookie is its slot (the kernel's): a cookie
    /// that is no slot number is refused as out of range.
    #[inline]
    pub fn deliver_cookie(&self, submit_cpu: usize, cookie: u64, status: Status) -> Result<(), BlkError> {
        match usize::try_from(cookie) {
            Ok(slot) => self.deliver(submit_cpu, slot, status),
            Err(_) => Err(self.refuse_out_of_range(submit_cpu, usize::MAX)),
        }
    }

    /// Counts and names a delivery to a CPU or slot the board does not have.
    #[cold]
    fn refuse_out_of_range(&self, cpu: usize, slot: usize) -> BlkError {
        self.bogus.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        BlkError::DoneSlotOutOfRange {
            cpu,
            slot,
            ncpus: self.ncpus,
            slots_per_cpu: self.slots_per_cpu,
        }
    }

    /// Reports every finished slot of CPU `cpu` to `f(slot, status)` and clears them; returns
    /// how many. Within each 64-slot word, the successes come first, lowest slot first, then the
    /// other completions, lowest slot first. Only `cpu`'s owner calls this. An
    /// out-of-range `cpu` has nothing to take.
    pub fn take(&self, cpu: usize, f: impl FnMut(usize, Status)) -> usize {
        self.take_below(cpu, self.slots_per_cpu, f)
    }

    /// [`DoneBoard::take`] for a caller that uses only slots `0..slots` (clamped to the
    /// board's): it looks at those slots' words only. The workload engine's slots are its queue
    /// depth, so a job at QD 64 or less reads one word per reap, not four.
    #[inline]
    pub fn take_below(&self, cpu: usize, slots: usize, mut f: impl FnMut(usize, Status)) -> usize {
        self.take_split(cpu, slots, |taken| match taken {
            Taken::Successes { first, bits } => for_each_bit(bits, |i| f(first + i, Status::Ok)),
            Taken::Other { slot, status } => f(slot, status),
        })
    }

    /// [`DoneBoard::take_below`] with the successes handed over a word at a time
    /// ([`Taken::Successes`]: no status is read for them), then each slot of the word that
    /// finished otherwise ([`Taken::Other`]). Returns how many were taken.
    #[inline]
    pub fn take_split(&self, cpu: usize, slots: usize, f: impl FnMut(Taken)) -> usize {
        self.cpu_below(cpu, slots).map_or(0, |part| part.take_split(f))
    }

    /// CPU `cpu`'s part of the board, cut to the words of slots `0..slots` (clamped to the
    /// board's): what [`DoneBoard::take_split`] looks up on every call, looked up once, for a
    /// taker that reaps the same slots many times (the workload engine, once per job; issue
    /// 22). `None` for an out-of-range CPU. Only `cpu`'s owner may take through it.
    pub fn cpu_below(&self, cpu: usize, slots: usize) -> Option<CpuDone<'_>> {
        if cpu >= self.ncpus {
            return None;
        }
        let base = cpu * self.word_stride;
        let words = slots.min(self.slots_per_cpu).div_ceil(64);
        Some(CpuDone {
            board: self,
            cpu,
            words: &self.words[base..base + words],
        })
    }

    /// The slots of word `w` (bits `failed`) that finished with another status than `Ok`:
    /// their "not ok" bits cleared, each reported with its status. Inlined into the board's
    /// walk, behind its rare branch: an out-of-line call taking `f` by reference made the
    /// caller keep the closure, and what it captures, in memory on every reap.
    #[inline(always)]
    fn take_failed(&self, cpu: usize, w: usize, failed: u64, failed_word: &AtomicU64, mut f: impl FnMut(Taken)) {
        // Other slots' bits in the word may be set meanwhile; clear only ours.
        failed_word.fetch_and(!failed, Ordering::Relaxed);
        let statuses = &self.status[cpu * self.status_stride..][..self.slots_per_cpu];
        for_each_bit(failed, |i| {
            let slot = w * 64 + i;
            f(Taken::Other {
                slot,
                status: Status::from_u8(statuses[slot].load(Ordering::Relaxed)),
            });
        });
    }

    /// Clears CPU `cpu`'s completions at slots `from..` and counts them in
    /// [`DoneBoard::bogus`]; returns how many. For the end of a job whose reaps looked only at
    /// its own slots `0..from` ([`DoneBoard::take_below`]): a completion above them came from
    /// no request of the job, and is not left for the next one.
    pub fn take_stray(&self, cpu: usize, from: usize) -> usize {
        let Some(part) = self.cpu_below(cpu, self.slots_per_cpu) else {
            return 0;
        };
        let mut n = 0;
        for (w, DoneWord { done, failed }) in part.words.iter().enumerate() {
            let first = w * 64;
            if first + 64 <= from {
                continue;
            }
            // Bits of slots below `from` stay; `from - first` is below 64 here.
            let keep = if from > first { (1u64 << (from - first)) - 1 } else { 0 };
            // Acquire pairs with the Release `fetch_or` in `deliver`.
            let taken = done.fetch_and(keep, Ordering::Acquire) & !keep;
            failed.fetch_and(!taken, Ordering::Relaxed);
            n += taken.count_ones() as usize;
        }
        self.bogus.fetch_add(n as u64, core::sync::atomic::Ordering::Relaxed);
        n
    }

    /// Whether CPU `cpu` has completions waiting (a hint: Relaxed loads).
    pub fn has_pending(&self, cpu: usize) -> bool {
        self.cpu_below(cpu, self.slots_per_cpu)
            .is_some_and(|part| part.words.iter().any(|w| w.done.load(Ordering::Relaxed) != 0))
    }

    /// Deliveries refused (out of range, or a second completion for an untaken slot).
    pub fn bogus(&self) -> u64 {
        self.bogus.load(core::sync::atomic::Ordering::Relaxed)
    }
}

/// One CPU's words of a [`DoneBoard`], from [`DoneBoard::cpu_below`].
pub struct CpuDone<'b> {
    board: &'b DoneBoard,
    cpu: usize,
    words: &'b [DoneWord],
}

impl CpuDone<'_> {
    /// [`DoneBoard::take_split`] over this part's words. Inlined: a QD1 job pays one per I/O.
    #[inline(always)]
    pub fn take_split(&self, mut f: impl FnMut(Taken)) -> usize {
        // A part of one word (a job of up to 64 slots, every QD1 job): no loop, and its
        // successes are known to start at slot 0.
        if let [only] = self.words {
            return self.take_word(0, only, &mut f);
        }
        let mut n = 0;
        for (w, word) in self.words.iter().enumerate() {
            n += self.take_word(w, word, &mut f);
        }
        n
    }

    /// Takes word `w`'s completions; returns how many.
    #[inline(always)]
    fn take_word(&self, w: usize, word: &DoneWord, mut f: impl FnMut(Taken)) -> usize {
        // A plain load first: most words are empty, and a swap would take the line
        // exclusively for nothing.
        if word.done.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // Acquire pairs with the Release `fetch_or` in `deliver`.
        let bits = word.done.swap(0, Ordering::Acquire);
        // Only this CPU clears "not ok" bits, and a taken slot's was set before its done
        // bit: a plain load sees every one that matters.
        let failed = word.failed.load(Ordering::Relaxed) & bits;
        if bits & !failed != 0 {
            f(Taken::Successes {
                first: w * 64,
                bits: bits & !failed,
            });
        }
        if failed != 0 {
            self.board.take_failed(self.cpu, w, failed, &word.failed, &mut f);
        }
        bits.count_ones() as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    #[test]
    fn delivers_to_the_submitting_cpu_with_status() {
        let b = DoneBoard::new(3, 130).unwrap();
        b.deliver(1, 0, Status::Ok).unwrap();
        b.deliver(1, 129, Status::IoError).unwrap();
        b.deliver(2, 64, Status::Timeout).unwrap();
        assert!(!b.has_pending(0));
        let mut got = Vec::new();
        assert_eq!(b.take(1, |s, st| got.push((s, st))), 2);
        assert_eq!(got, [(0, Status::Ok), (129, Status::IoError)]);
        assert_eq!(b.take(1, |_, _| panic!("taken twice")), 0);
        got.clear();
        assert_eq!(b.take(2, |s, st| got.push((s, st))), 1);
        assert_eq!(got, [(64, Status::Timeout)]);
        assert_eq!(b.bogus(), 0);
    }

    /// A CPU's part, cut once, takes what `take_split` would, from its own CPU's words of its
    /// slots only, as often as asked; there is none for a CPU the board does not have.
    #[test]
    fn a_cpus_part_takes_its_own_words_only_every_time() {
        let b = DoneBoard::new(2, 200).unwrap();
        assert!(b.cpu_below(2, 64).is_none());
        let part = b.cpu_below(1, 70).unwrap();
        for round in 0..3 {
            // Slot 130 is past the part's two words; cpu0's slot 5 is another CPU's.
            b.deliver(1, 3, Status::Ok).unwrap();
            b.deliver(1, 64, Status::Ok).unwrap();
            b.deliver(1, 69, Status::IoError).unwrap();
            b.deliver(1, 130, Status::Ok).unwrap();
            b.deliver(0, 5, Status::Ok).unwrap();
            let mut got = Vec::new();
            assert_eq!(part.take_split(|t| got.push(t)), 3, "round {round}");
            assert_eq!(
                got,
                [
                    Taken::Successes { first: 0, bits: 1 << 3 },
                    Taken::Successes { first: 64, bits: 1 },
                    Taken::Other {
                        slot: 69,
                        status: Status::IoError
                    },
                ]
            );
            assert_eq!(part.take_split(|_| panic!("taken twice")), 0);
            // What the part did not look at is still there.
            assert_eq!(b.take_below(1, 200, |s, _| assert_eq!(s, 130)), 1);
            assert_eq!(b.take_below(0, 64, |s, _| assert_eq!(s, 5)), 1);
        }
    }

    #[test]
    fn take_below_looks_at_its_slots_only_and_take_stray_clears_the_rest_as_bogus() {
        let b = DoneBoard::new(1, 256).unwrap();
        for slot in [0, 31, 32, 63, 64, 200] {
            b.deliver(0, slot, Status::Ok).unwrap();
        }
        let mut got = Vec::new();
        // Slots 0..32 live in word 0, which is taken whole: 32 and 63 come out too (the
        // engine refuses them as out of range); word 1 (64) and word 3 (200) are not looked at.
        assert_eq!(b.take_below(0, 32, |s, _| got.push(s)), 4);
        assert_eq!(got, [0, 31, 32, 63]);
        got.clear();
        assert_eq!(b.take_below(0, 64, |s, _| got.push(s)), 0);
        assert_eq!(b.bogus(), 0);
        // Slots 64 and 200 are above a 64-slot job: cleared and counted; slots below stay.
        b.deliver(0, 5, Status::IoError).unwrap();
        assert_eq!(b.take_stray(0, 64), 2);
        assert_eq!(b.bogus(), 2);
        let mut left = Vec::new();
        assert_eq!(b.take(0, |s, st| left.push((s, st))), 1);
        assert_eq!(left, [(5, Status::IoError)]);
        assert_eq!(b.take_stray(0, 0), 0);
        assert_eq!(b.take_stray(7, 0), 0, "an out-of-range CPU has nothing");
    }

    #[test]
    fn take_split_hands_a_words_successes_over_as_bits_and_names_the_rest() {
        let b = DoneBoard::new(2, 130).unwrap();
        for (slot, status) in [
            (0, Status::Ok),
            (3, Status::IoError),
            (5, Status::Ok),
            (64, Status::Timeout),
            (70, Status::Ok),
            (129, Status::Aborted),
        ] {
            b.deliver(1, slot, status).unwrap();
        }
        let mut got = Vec::new();
        assert_eq!(b.take_split(1, 130, |t| got.push(t)), 6);
        assert_eq!(
            got,
            [
                Taken::Successes {
                    first: 0,
                    bits: 0b100001
                },
                Taken::Other {
                    slot: 3,
                    status: Status::IoError
                },
                Taken::Successes {
                    first: 64,
                    bits: 1 << 6
                },
                Taken::Other {
                    slot: 64,
                    status: Status::Timeout
                },
                Taken::Other {
                    slot: 129,
                    status: Status::Aborted
                },
            ]
        );
        // A slot that failed once and then succeeds is a success: its "not ok" bit was cleared
        // when it was taken; so is a stray one's.
        b.deliver(1, 3, Status::Ok).unwrap();
        b.deliver(1, 100, Status::IoError).unwrap();
        assert_eq!(b.take_stray(1, 64), 1);
        b.deliver(1, 100, Status::Ok).unwrap();
        got.clear();
        assert_eq!(b.take_split(1, 130, |t| got.push(t)), 2);
        assert_eq!(
            got,
            [
                Taken::Successes { first: 0, bits: 1 << 3 },
                Taken::Successes {
                    first: 64,
                    bits: 1 << 36
                },
            ]
        );
        assert_eq!(b.take_split(7, 130, |_| panic!("no such CPU")), 0);
    }

    #[test]
    fn refuses_out_of_range_and_double_delivery() {
        let b = DoneBoard::new(2, 8).unwrap();
        assert_eq!(
            b.deliver(2, 0, Status::Ok).unwrap_err(),
            BlkError::DoneSlotOutOfRange {
                cpu: 2,
                slot: 0,
                ncpus: 2,
                slots_per_cpu: 8
            }
        );
        assert!(matches!(
            b.deliver(0, 8, Status::Ok),
            Err(BlkError::DoneSlotOutOfRange { slot: 8, .. })
        ));
        b.deliver(0, 3, Status::Ok).unwrap();
        assert_eq!(
            b.deliver(0, 3, Status::Ok).unwrap_err(),
            BlkError::DoneSlotBusy { cpu: 0, slot: 3 }
        );
        assert_eq!(b.bogus(), 3);
        assert_eq!(b.take(0, |_, _| {}), 1);
        assert_eq!(b.take(7, |_, _| {}), 0);
        // Taken: the slot may complete again.
        b.deliver(0, 3, Status::Aborted).unwrap();
        let mut st = None;
        b.take(0, |_, s| st = Some(s));
        assert_eq!(st, Some(Status::Aborted));
    }

    #[test]
    fn a_cookie_is_delivered_as_its_slot_and_refused_past_the_slots() {
        let b = DoneBoard::new(2, 8).unwrap();
        b.deliver_cookie(1, 5, Status::IoError).unwrap();
        assert!(matches!(
            b.deliver_cookie(1, 8, Status::Ok),
            Err(BlkError::DoneSlotOutOfRange { cpu: 1, slot: 8, .. })
        ));
        assert_eq!(b.bogus(), 1);
        let mut got = Vec::new();
        b.take(1, |slot, status| got.push((slot, status)));
        assert_eq!(got, [(5, Status::IoError)]);
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(DoneBoard::new(0, 8).is_err());
        assert!(DoneBoard::new(1, 0).is_err());
        assert!(DoneBoard::new(1, MAX_SLOTS + 1).is_err());
        assert!(DoneBoard::new(1, MAX_SLOTS).is_ok());
    }
}
