//! The done board: how a finished request gets home to the CPU that submitted it.
//!
//! A submitter (the kernel's workload engine) keeps a fixed number of outstanding requests per
//! CPU, each in a numbered slot, and gives the slot as the request's cookie. Whoever finishes a
//! request, on whatever CPU, hands the submitting CPU, the cookie and the status to
//! [`DoneBoard::deliver_from`], which stores the status and sets the slot's bit in that CPU's
//! done bitmap (and wakes the submitter if it is another CPU and the board has a waker). The
//! submitting CPU calls [`DoneBoard::take`] (or [`CpuDone::take_split`]), which swaps its bitmap
//! words to zero and reports each set bit with its status. No lock, no allocation after
//! [`DoneBoard::new`]. The board knows nothing of the block layer: the status is any
//! [`Outcome`].
//!
//! Who may call what concurrently: `deliver` from any CPU, including interrupt context, for any
//! submitter; `take(cpu, ..)` only by the one context that owns `cpu`'s slots (it may run
//! concurrently with any number of `deliver`s). A slot must have at most one completion
//! outstanding: the submitter reuses a slot only after `take` reported it. A second `deliver`
//! before that is refused with [`DoneError::SlotBusy`] and counted, but a failure's status
//! has already overwritten the first one's (the caller broke the contract; the error says so).
//!
//! Memory ordering: when the status is not [`Outcome::SUCCESS`], `deliver` stores it (Relaxed)
//! and sets the slot's "not ok" bit (Relaxed RMW); then it sets the done bit with a Release RMW;
//! `take` swaps the word with Acquire, which synchronises with every RMW whose bit it takes, so
//! each taken slot's status and "not ok" bit are visible (loom model
//! `two_cpus_deliver_one_takes`). The "not ok" bits let [`DoneBoard::take_split`] hand a word's
//! successes over as one bit mask, without reading a status per slot.

#![no_std]

extern crate alloc;

mod sync;

use crate::sync::{AtomicU8, AtomicU64, Ordering};
use alloc::boxed::Box;
use core::fmt;
use core::sync::atomic::AtomicU64 as CountU64;

/// A request's final status as the board stores it: one byte, with success stored as none.
pub trait Outcome: Copy + PartialEq + fmt::Debug {
    /// Success: a slot that ends with it has no status stored and is reported in a
    /// [`Taken::Successes`] mask.
    const SUCCESS: Self;
    /// The byte the board stores.
    fn to_code(self) -> u8;
    /// The status a stored byte stands for (only bytes [`Outcome::to_code`] gave are stored).
    fn from_code(code: u8) -> Self;
}

/// What the board refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneError {
    /// A board of no CPUs or slots, or of more than it can index.
    Geometry {
        /// `"ncpus"` or `"slots_per_cpu"`.
        field: &'static str,
        /// The value asked for.
        value: usize,
        /// The most accepted.
        max: usize,
    },
    /// A completion for a CPU or slot the board does not have (a slot of `usize::MAX` stands
    /// for a cookie that is no slot number).
    SlotOutOfRange {
        /// Submitting CPU named by the completion.
        cpu: usize,
        /// Slot named by the completion.
        slot: usize,
        /// CPUs the board has.
        ncpus: usize,
        /// Slots per CPU the board has.
        slots_per_cpu: usize,
    },
    /// A completion for a slot whose previous completion has not been taken yet.
    SlotBusy {
        /// Submitting CPU.
        cpu: usize,
        /// Its slot.
        slot: usize,
    },
}

impl fmt::Display for DoneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Geometry { field, value, max } => {
                write!(f, "done board {field} {value} is out of range (1..={max})")
            }
            Self::SlotOutOfRange {
                cpu,
                slot,
                ncpus,
                slots_per_cpu,
            } if slot == usize::MAX => write!(
                f,
                "completion for cpu {cpu} with a cookie that is no slot (board: {ncpus} CPUs x {slots_per_cpu} slots)"
            ),
            Self::SlotOutOfRange {
                cpu,
                slot,
                ncpus,
                slots_per_cpu,
            } => write!(
                f,
                "completion for cpu {cpu} slot {slot}, outside the board's {ncpus} CPUs x {slots_per_cpu} slots"
            ),
            Self::SlotBusy { cpu, slot } => write!(
                f,
                "second completion for cpu {cpu} slot {slot} before the first was taken"
            ),
        }
    }
}

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
pub enum Taken<S> {
    /// Slots `first + i`, for each bit `i` of `bits`, finished with [`Outcome::SUCCESS`].
    Successes { first: usize, bits: u64 },
    /// Slot `slot` finished with `status`, which is not [`Outcome::SUCCESS`].
    Other { slot: usize, status: S },
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

/// Per-CPU done bitmaps and per-slot statuses of outcome `S`.
pub struct DoneBoard<S> {
    ncpus: usize,
    slots_per_cpu: usize,
    word_stride: usize,
    status_stride: usize,
    words: Box<[DoneWord]>,
    status: Box<[AtomicU8]>,
    /// Refused deliveries; a statistic, so a plain `core` atomic.
    bogus: CountU64,
    /// Wakes a submitting CPU that may be halted waiting for its completions.
    waker: Option<fn(usize)>,
    _outcome: core::marker::PhantomData<S>,
}

impl<S: Outcome> DoneBoard<S> {
    /// A board for `ncpus` CPUs (`1..=`[`MAX_CPUS`]) with `slots_per_cpu` slots each
    /// (`1..=`[`MAX_SLOTS`]), with no waker.
    pub fn new(ncpus: usize, slots_per_cpu: usize) -> Result<Self, DoneError> {
        if ncpus == 0 || ncpus > MAX_CPUS {
            return Err(DoneError::Geometry {
                field: "ncpus",
                value: ncpus,
                max: MAX_CPUS,
            });
        }
        if slots_per_cpu == 0 || slots_per_cpu > MAX_SLOTS {
            return Err(DoneError::Geometry {
                field: "slots_per_cpu",
                value: slots_per_cpu,
                max: MAX_SLOTS,
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
                .map(|_| AtomicU8::new(S::SUCCESS.to_code()))
                .collect(),
            bogus: CountU64::new(0),
            waker: None,
            _outcome: core::marker::PhantomData,
        })
    }

    /// The board with `wake(cpu)` called after a delivery from another CPU than the submitter's
    /// ([`DoneBoard::deliver_from`]): the submitter may be halted waiting for exactly that.
    pub fn with_waker(mut self, wake: fn(usize)) -> Self {
        self.waker = Some(wake);
        self
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
    pub fn deliver(&self, submit_cpu: usize, slot: usize, status: S) -> Result<(), DoneError> {
        if submit_cpu >= self.ncpus || slot >= self.slots_per_cpu {
            return Err(self.refuse_out_of_range(submit_cpu, slot));
        }
        let bit = 1u64 << (slot % 64);
        let word = submit_cpu * self.word_stride + slot / 64;
        if status != S::SUCCESS {
            // Only a slot with its "not ok" bit has its status read (`take_failed`), so a
            // success stores none. Both are published by the Release below.
            self.status[submit_cpu * self.status_stride + slot].store(status.to_code(), Ordering::Relaxed);
            self.words[word].failed.fetch_or(bit, Ordering::Relaxed);
        }
        // Release pairs with the Acquire swap in `take`: the status store and the "not ok" bit
        // above are visible to the CPU that takes this bit.
        let prev = self.words[word].done.fetch_or(bit, Ordering::Release);
        if prev & bit != 0 {
            self.bogus.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            return Err(DoneError::SlotBusy { cpu: submit_cpu, slot });
        }
        Ok(())
    }

    /// [`DoneBoard::deliver`] for a request whose cookie is its slot (the kernel's): a cookie
    /// that is no slot number is refused as out of range.
    #[inline]
    pub fn deliver_cookie(&self, submit_cpu: usize, cookie: u64, status: S) -> Result<(), DoneError> {
        match usize::try_from(cookie) {
            Ok(slot) => self.deliver(submit_cpu, slot, status),
            Err(_) => Err(self.refuse_out_of_range(submit_cpu, usize::MAX)),
        }
    }

    /// A request finished on CPU `by_cpu`: [`DoneBoard::deliver_cookie`], then, when
    /// `submit_cpu` is another CPU, the waker. What the block layer calls for every unsplit
    /// request; a refusal is counted in [`DoneBoard::bogus`] and returned.
    #[inline(always)]
    pub fn deliver_from(&self, by_cpu: usize, submit_cpu: usize, cookie: u64, status: S) -> Result<(), DoneError> {
        let delivered = self.deliver_cookie(submit_cpu, cookie, status);
        if submit_cpu != by_cpu
            && let Some(wake) = self.waker
        {
            wake(submit_cpu);
        }
        delivered
    }

    /// Counts and names a delivery to a CPU or slot the board does not have.
    #[cold]
    fn refuse_out_of_range(&self, cpu: usize, slot: usize) -> DoneError {
        self.bogus.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        DoneError::SlotOutOfRange {
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
    pub fn take(&self, cpu: usize, f: impl FnMut(usize, S)) -> usize {
        self.take_below(cpu, self.slots_per_cpu, f)
    }

    /// [`DoneBoard::take`] for a caller that uses only slots `0..slots` (clamped to the
    /// board's): it looks at those slots' words only. The workload engine's slots are its queue
    /// depth, so a job at QD 64 or less reads one word per reap, not four.
    #[inline]
    pub fn take_below(&self, cpu: usize, slots: usize, mut f: impl FnMut(usize, S)) -> usize {
        self.take_split(cpu, slots, |taken| match taken {
            Taken::Successes { first, bits } => for_each_bit(bits, |i| f(first + i, S::SUCCESS)),
            Taken::Other { slot, status } => f(slot, status),
        })
    }

    /// [`DoneBoard::take_below`] with the successes handed over a word at a time
    /// ([`Taken::Successes`]: no status is read for them), then each slot of the word that
    /// finished otherwise ([`Taken::Other`]). Returns how many were taken.
    #[inline]
    pub fn take_split(&self, cpu: usize, slots: usize, f: impl FnMut(Taken<S>)) -> usize {
        self.cpu_below(cpu, slots).map_or(0, |part| part.take_split(f))
    }

    /// CPU `cpu`'s part of the board, cut to the words of slots `0..slots` (clamped to the
    /// board's): what [`DoneBoard::take_split`] looks up on every call, looked up once, for a
    /// taker that reaps the same slots many times (the workload engine, once per job).
    /// `None` for an out-of-range CPU. Only `cpu`'s owner may take through it.
    pub fn cpu_below(&self, cpu: usize, slots: usize) -> Option<CpuDone<'_, S>> {
        self.cpu_window(cpu, 0, slots.min(self.slots_per_cpu))
    }

    /// CPU `cpu`'s slots `first..first + slots` as a part of their own, for several takers on
    /// one CPU (job contexts that run by turns there): the part hands out its slots counted
    /// from `first`, so each taker numbers its slots from 0. `first` must start a 64-slot word
    /// (a word is taken whole) and the window must lie within the board's slots; `None`
    /// otherwise, or for an out-of-range CPU. Only `cpu`'s owner may take through it.
    pub fn cpu_window(&self, cpu: usize, first: usize, slots: usize) -> Option<CpuDone<'_, S>> {
        if cpu >= self.ncpus || !first.is_multiple_of(64) || first.checked_add(slots)? > self.slots_per_cpu {
            return None;
        }
        let base = cpu * self.word_stride + first / 64;
        Some(CpuDone {
            board: self,
            cpu,
            first_word: first / 64,
            words: &self.words[base..base + slots.div_ceil(64)],
        })
    }

    /// The slots of word `w` (bits `failed`) that finished with another status than `Ok`:
    /// their "not ok" bits cleared, each reported with its status. Inlined into the board's
    /// walk, behind its rare branch: an out-of-line call taking `f` by reference made the
    /// caller keep the closure, and what it captures, in memory on every reap.
    #[inline(always)]
    fn take_failed(
        &self,
        cpu: usize,
        (first_word, w): (usize, usize),
        failed: u64,
        failed_word: &AtomicU64,
        mut f: impl FnMut(Taken<S>),
    ) {
        // Other slots' bits in the word may be set meanwhile; clear only ours.
        failed_word.fetch_and(!failed, Ordering::Relaxed);
        let statuses = &self.status[cpu * self.status_stride..][..self.slots_per_cpu];
        for_each_bit(failed, |i| {
            let slot = w * 64 + i;
            f(Taken::Other {
                slot,
                status: S::from_code(statuses[(first_word + w) * 64 + i].load(Ordering::Relaxed)),
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

/// One CPU's words of a [`DoneBoard`], from [`DoneBoard::cpu_below`] or [`DoneBoard::cpu_window`].
pub struct CpuDone<'b, S> {
    board: &'b DoneBoard<S>,
    cpu: usize,
    /// The CPU's word the part starts at (its slot 0 is the board's slot `first_word * 64`).
    first_word: usize,
    words: &'b [DoneWord],
}

impl<S: Outcome> CpuDone<'_, S> {
    /// Whether the part has completions waiting (a hint: Relaxed loads of its words only).
    pub fn has_pending(&self) -> bool {
        self.words.iter().any(|w| w.done.load(Ordering::Relaxed) != 0)
    }

    /// [`DoneBoard::take_split`] over this part's words. Inlined: a QD1 job pays one per I/O.
    #[inline(always)]
    pub fn take_split(&self, mut f: impl FnMut(Taken<S>)) -> usize {
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
    fn take_word(&self, w: usize, word: &DoneWord, mut f: impl FnMut(Taken<S>)) -> usize {
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
            self.board
                .take_failed(self.cpu, (self.first_word, w), failed, &word.failed, &mut f);
        }
        bits.count_ones() as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
