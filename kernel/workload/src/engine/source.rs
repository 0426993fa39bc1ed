//! Where a phase's I/Os come from: the main phase's generator, a verify pass's walk or
//! replay, and the I/Os deferred while their block is in flight.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;

use super::verify::{TRACK_BUSY, TRACK_GENERATION, TRACK_UNKNOWN};
use super::{CpuRun, IoBackend, IoOp};
use crate::fileset::FileSetGenerator;
use crate::generator::IoGenerator;
use crate::plan::JobPlan;

/// The main phase's stream of I/Os for CPU `cpu_index`: the same every time for one plan (its
/// draws are seeded), which lets the verify pass of a single write pass draw it again.
pub(super) fn main_source(plan: &JobPlan, cpu_index: usize) -> Source {
    if !plan.files.is_empty() {
        Source::Files(Box::new(FileSetGenerator::new(plan, cpu_index)))
    } else if plan.spec.bs_mix.is_some() {
        Source::Sized(IoGenerator::new(plan, cpu_index))
    } else {
        Source::Main(IoGenerator::new(plan, cpu_index))
    }
}

pub(super) enum Source {
    Main(IoGenerator),
    /// The main phase of a job with variable block sizes (`JobSpec::bs_mix`): a variant of its
    /// own, so that fixed-size jobs pay nothing per I/O for the size draw.
    Sized(IoGenerator),
    /// The main phase of a job over a `filename` list (`JobPlan::files`): the file service
    /// picks each I/O's file; a variant of its own, so one-device jobs pay nothing for it.
    Files(Box<FileSetGenerator>),
    /// No I/O (a phase that only issues a due flush).
    Nothing,
    /// The verify pass of a tracked job walks the slice in order (the tracker says which blocks
    /// hold a known generation).
    VerifyPass {
        next_block: u64,
    },
    /// The verify pass of a single write pass: the main phase's stream drawn again from its
    /// start, for exactly as many I/Os as the main phase issued, each read back block by block.
    /// A runtime cap, `io_size` or a stop can end the main phase anywhere in its stream, so the
    /// pass reads what was written and nothing past it.
    Replay(Box<Replay>),
}

/// [`Source::Replay`]'s state.
pub(super) struct Replay {
    /// The main phase's stream, drawn again.
    pub(super) stream: Source,
    /// Writes of the main phase not yet drawn again.
    pub(super) writes_left: u64,
    /// The blocks of the write drawn last not yet read: `next_block..end_block`.
    pub(super) next_block: u64,
    pub(super) end_block: u64,
}

/// I/Os waiting for their block, which was in flight when they came up. Preallocated; never grows.
pub(super) struct Deferred {
    queue: VecDeque<(IoOp, u64)>,
    capacity: usize,
    /// One bit per block of the slice: some queued I/O is for this block.
    queued: Vec<u64>,
    /// A block with queued I/Os completed since the last scan found nothing ready.
    maybe_ready: bool,
}

impl Deferred {
    pub(super) fn new(capacity: usize, blocks: usize) -> Self {
        Self {
            queue: VecDeque::with_capacity(capacity),
            capacity,
            queued: if capacity == 0 {
                Vec::new()
            } else {
                vec![0; blocks.div_ceil(64)]
            },
            maybe_ready: false,
        }
    }

    pub(super) fn clear(&mut self) {
        for &(_, block) in &self.queue {
            self.queued[(block / 64) as usize] = 0;
        }
        self.queue.clear();
        self.maybe_ready = false;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether nothing more may be queued (never true while empty, so jobs that do not track blocks
    /// and have no queue are never held up).
    pub(super) fn is_full(&self) -> bool {
        !self.queue.is_empty() && self.queue.len() >= self.capacity
    }

    /// Queues `io`; the caller has checked that the queue is not full.
    pub(super) fn push(&mut self, io: (IoOp, u64)) {
        debug_assert!(self.queue.len() < self.capacity);
        self.queued[(io.1 / 64) as usize] |= 1 << (io.1 % 64);
        self.queue.push_back(io);
    }

    /// Called when `block` stops being in flight.
    pub(super) fn block_freed(&mut self, block: u64) {
        if let Some(word) = self.queued.get((block / 64) as usize)
            && word & (1 << (block % 64)) != 0
        {
            self.maybe_ready = true;
        }
    }

    /// The oldest queued I/O whose block is not in flight, if a block with queued I/Os completed
    /// since the last look. Keeps the order of I/Os to the same block.
    #[inline]
    pub(super) fn take_ready(&mut self, tracker: &[u32]) -> Option<(IoOp, u64)> {
        if self.maybe_ready { self.scan(tracker) } else { None }
    }

    #[cold]
    fn scan(&mut self, tracker: &[u32]) -> Option<(IoOp, u64)> {
        let Some(index) = self
            .queue
            .iter()
            .position(|&(_, block)| tracker[block as usize] & TRACK_BUSY == 0)
        else {
            self.maybe_ready = false;
            return None;
        };
        let io = self.queue.remove(index)?;
        if !self.queue.iter().any(|&(_, block)| block == io.1) {
            self.queued[(io.1 / 64) as usize] &= !(1 << (io.1 % 64));
        }
        Some(io)
    }
}

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
    /// The next I/O of `source`, or `None` when it is exhausted.
    pub(super) fn next_from(&mut self, source: &mut Source) -> Option<(IoOp, u64)> {
        match source {
            Source::Main(generator) => {
                // verify_backlog: blocks written lately are read back first (a plain job has
                // no verify, so no backlog).
                if !PLAIN && let Some(block) = self.backlog_pending.pop() {
                    return Some((IoOp::Read, block));
                }
                generator.next_io()
            }
            Source::Sized(generator) => {
                let (op, block, units) = generator.next_sized_io()?;
                // At most the largest size, which fits in u32.
                self.io_sectors = self.plan.sectors_per_block * units;
                self.io_bytes = self.bs as u32 * units;
                Some((op, block))
            }
            Source::Files(files) => {
                if let Some(block) = self.backlog_pending.pop() {
                    return Some((IoOp::Read, block));
                }
                files.next_io()
            }
            Source::Nothing => None,
            Source::VerifyPass { next_block } => {
                while *next_block < self.slice.blocks {
                    let block = *next_block;
                    *next_block += 1;
                    if !self.tracked() {
                        return Some((IoOp::Read, block));
                    }
                    // Block indices are below the slice length, which is the tracker length.
                    let word = self.tracker[block as usize];
                    if word & TRACK_UNKNOWN != 0 {
                        // Its last write failed: nothing to expect, so do not read it.
                        self.result.verify.skipped += 1;
                    } else if word & TRACK_GENERATION != 0 {
                        return Some((IoOp::Read, block));
                    }
                }
                None
            }
            Source::Replay(replay) => loop {
                if replay.next_block < replay.end_block {
                    let block = replay.next_block;
                    replay.next_block += 1;
                    if !self.failed_writes_overflow && self.failed_writes.binary_search(&block).is_ok() {
                        // Its write failed: it may hold the old or the new data, so it is not read.
                        self.result.verify.skipped += 1;
                        continue;
                    }
                    return Some((IoOp::Read, block));
                }
                if replay.writes_left == 0 {
                    return None;
                }
                replay.writes_left -= 1;
                let (block, units) = match &mut replay.stream {
                    Source::Main(generator) => generator.next_io().map(|(_, block)| (block, 1))?,
                    Source::Sized(generator) => generator.next_sized_io().map(|(_, block, units)| (block, units))?,
                    Source::Files(files) => files.next_io().map(|(_, block)| (block, 1))?,
                    // The pass replays a main phase's stream only.
                    Source::Nothing | Source::VerifyPass { .. } | Source::Replay(_) => return None,
                };
                replay.next_block = block;
                replay.end_block = block + u64::from(units);
            },
        }
    }
}
