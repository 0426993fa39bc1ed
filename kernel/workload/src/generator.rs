//! The per-CPU I/O generator: which operation goes to which block next.

use crate::engine::IoOp;
use crate::job::RwMode;
use crate::plan::JobPlan;
use crate::randmap::RandomMap;
use crate::rng::{Rng, mix64};

/// Deterministic stream of `(operation, block index within the CPU's slice)`.
///
/// The stream depends only on the job (seed, `rw`, `rwmixread`, region, CPU count, time or size bound)
/// and the CPU's index in the plan, never on timing. Sequential jobs walk the slice from its start
/// and wrap; random jobs draw uniformly from the slice, or, with `random_map` (fio's default), walk
/// a seeded permutation of it so each block comes once per pass. Size-bound jobs end after one I/O
/// per block of the slice (or `ios_per_cpu` I/Os); time-based jobs never end on their own.
#[derive(Debug, Clone)]
pub struct IoGenerator {
    rng: Rng,
    rw: RwMode,
    /// The operation of every I/O, except for `randrw` (`None`: drawn per I/O). Decided once,
    /// so the hot path does not branch through a jump table on `rw`.
    fixed_op: Option<IoOp>,
    rwmixread: u64,
    /// fio's random map (`JobSpec::random_map`): each block once per pass.
    map: Option<RandomMap>,
    /// `JobSpec::zones` as (cumulative access percent, first block, blocks), in order.
    zones: alloc::vec::Vec<(u64, u64, u64)>,
    /// `JobSpec::skew`'s table over the slice (built here, once per job and CPU).
    skew: Option<alloc::boxed::Box<crate::skew::SkewedDraw>>,
    /// How [`IoGenerator::draw`] picks a block, decided once from the fields above, so a draw
    /// makes one test instead of a chain of them.
    pick: BlockPick,
    blocks: u64,
    /// `JobSpec::align_blocks`, and how many aligned offsets the slice has (at least 1).
    stride: u64,
    aligned: u64,
    /// `rw=read:±N` ([`BlockPick::SequentialAdd`]).
    seq_add: Option<SeqAdd>,
    /// `zonemode=strided` ([`BlockPick::Strided`]).
    strided: Option<alloc::boxed::Box<Strided>>,
    /// `rw=randread:N` ([`BlockPick::RandomRuns`]): I/Os per run, sequential ones left in this
    /// run, and the block of the I/O before.
    run_len: u64,
    run_left: u64,
    last_block: u64,
    /// Whether the job runs for its runtime (a modified pass then starts over at its end).
    time_based: bool,
    cursor: u64,
    /// `rw=readwrite` ([`BlockPick::SequentialMixed`]): the write direction's own cursor (reads
    /// keep `cursor`), as fio keeps a position per direction.
    write_cursor: u64,
    /// `rw=readwrite:±N` ([`BlockPick::SequentialMixedAdd`]): the writes' own walk (reads keep
    /// `seq_add`).
    seq_add_write: Option<SeqAdd>,
    /// Passes of an offset-modifier walk still to start after this one (fio's `loops`).
    passes_left: u64,
    /// I/Os left of a size-bound job; with variable sizes, blocks (units) left. [`UNBOUNDED`]
    /// for a job with no set number (time-based, or a file of a list): it counts down too, but
    /// no job lives to draw 2^64 I/Os, and a plain count is one test per draw fewer than an
    /// `Option`.
    remaining: u64,
    /// Variable block sizes only ([`IoGenerator::next_sized_io`]).
    sized: Option<alloc::boxed::Box<SizedDraw>>,
    /// `trimwrite`: the block just trimmed, to be written next (fio trims a block, then writes
    /// the same block).
    write_after_trim: Option<u64>,
    /// Whether this is a `trimwrite` job.
    trim_then_write: bool,
    /// The operation of every I/O of a uniform draw in one direction and no `trimwrite` (the
    /// benchmark shape): [`IoGenerator::next_io`] then tests this alone, not the `trimwrite` flag,
    /// the pick's jump table and the direction. `None` for every other stream.
    uniform_op: Option<IoOp>,
}

/// How a fixed-size draw picks its block, in the order [`IoGenerator::draw`] asks: the random map,
/// else the skew, else the zones (random jobs), else uniform (random jobs), else the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockPick {
    Map,
    Skew,
    Zoned,
    Uniform,
    /// fio's `blockalign` above the block size: a uniform draw of one of `aligned` offsets,
    /// `stride` blocks apart.
    Aligned,
    /// fio's `rw=randread:N`: a draw (random map or uniform) every `random_run` I/Os, the ones
    /// between them sequential from it.
    RandomRuns,
    /// fio's `rw=read:±N`: [`SeqAdd`].
    SequentialAdd,
    /// fio's `zonemode=strided`: [`Strided`].
    Strided,
    Sequential,
    /// fio's `rw=readwrite`: the direction first, then the next block of that direction's own
    /// walk (fio's `last_pos[ddir]`): reads and writes each go through the region from its start.
    SequentialMixed,
    /// fio's `rw=readwrite:±N`: the direction first, then the next block of that direction's own
    /// [`SeqAdd`] walk.
    SequentialMixedAdd,
}

/// fio's sequential offsets with an offset modifier (`get_next_seq_offset` with `ddir_seq_add`),
/// in blocks of the job: each I/O starts at the end of the one before plus `add`. As in fio 3.33,
/// a region not at the device's start begins a backwards walk from block `size` (counted from
/// the device's start), a step past either end wraps (forwards: to block `first` counted from
/// the region's start; backwards: to `add` before the region's end), and an offset at or past the
/// region's end ends the pass (a time-based job starts over).
#[derive(Debug, Clone, Copy)]
struct SeqAdd {
    /// fio's `last_pos`: the block after the last I/O, from the device's start.
    last: u64,
    /// The region's first block and length, and the device's length (rounded up), in blocks.
    first: u64,
    size: u64,
    device: u64,
    add: i64,
    /// Blocks of each I/O (1; with a step that is not whole blocks, bs in units of the job).
    len: u64,
    /// The device's whole blocks: an I/O that would end past them ends the pass (fio's check
    /// of offset + length against the file's size).
    device_whole: u64,
}

/// fio's strided zones (`setup_strided_zone_mode`) over a slice, in blocks: after `size` blocks
/// of I/O in a zone the next starts `range + skip` blocks further (back at the first when that
/// is past the slice); inside a zone the I/O goes to its first `range` blocks, sequentially
/// from its start or at random (a random map per `range` blocks of I/O, as fio resets its map),
/// starting over at the range's end.
#[derive(Debug, Clone)]
struct Strided {
    zones: crate::job::StridedZones,
    /// The zone's first block in the slice, the blocks of I/O done in it, the next sequential
    /// block in it.
    start: u64,
    done: u64,
    cursor: u64,
    map: Option<RandomMap>,
    seed: u64,
    random: bool,
    random_map: bool,
}

impl Strided {
    /// The next block in a slice of `blocks`, or `None` when a zone runs past its end (fio's
    /// offset past the file's end ends the job).
    fn next(&mut self, blocks: u64, rng: &mut Rng) -> Option<u64> {
        let zones = self.zones;
        if self.done >= zones.size {
            self.done = 0;
            self.start += zones.range + zones.skip;
            if self.start >= blocks {
                self.start = 0;
            }
            self.cursor = 0;
        }
        if self.cursor >= zones.range {
            self.cursor = 0;
        }
        if self.done.is_multiple_of(zones.range) {
            // fio resets the file (its position and random map) each range of I/O.
            self.cursor = 0;
            if self.random && self.random_map {
                self.map = Some(RandomMap::new(zones.range, self.seed ^ mix64(self.start ^ self.done)));
            }
        }
        let within = if !self.random {
            let block = self.cursor;
            self.cursor += 1;
            block
        } else if let Some(map) = &mut self.map {
            map.next_index()
        } else {
            rng.below(zones.range)
        };
        self.done += 1;
        let block = self.start + within;
        (block < blocks).then_some(block)
    }
}

impl SeqAdd {
    /// The next offset in the region (blocks from its start), or `None` at the end of a pass.
    fn next(&mut self, time_based: bool) -> Option<u64> {
        if time_based && self.last >= self.size + self.first {
            self.last = self.first;
        }
        if self.last >= self.device {
            return None;
        }
        if self.last == self.first && self.first != 0 && self.add < 0 {
            self.last = self.size;
        }
        // fio computes in u64; a negative position wraps to a huge one, which the tests below
        // treat as past the end.
        let mut pos = i128::from(self.last) - i128::from(self.first);
        if pos != 0 {
            pos += i128::from(self.add);
            if pos < 0 || pos >= i128::from(self.device) {
                pos = if self.add > 0 {
                    i128::from(self.first)
                } else {
                    i128::from(self.size) + i128::from(self.add)
                };
            }
        }
        if pos < 0
            || pos >= i128::from(self.size)
            || pos + i128::from(self.first) >= i128::from(self.device)
            || pos + i128::from(self.first) + i128::from(self.len) > i128::from(self.device_whole)
        {
            return None;
        }
        // 0 <= pos < size, which is a u64.
        let pos = pos as u64;
        self.last = self.first + pos + self.len;
        Some(pos)
    }
}

/// The state of a job with variable block sizes (`JobSpec::bs_mix`).
#[derive(Debug, Clone)]
struct SizedDraw {
    mix: crate::job::BlockSizeMix,
    /// With the random map (empty without): one bit per block, set once an I/O of this pass
    /// covered it. As fio's axmap: a draw that lands on a covered block takes the next free one
    /// after it (wrapping), and an I/O is cut short at the next covered block, so a pass covers
    /// every block exactly once whatever the sizes.
    covered: alloc::vec::Vec<u64>,
    /// Blocks covered this pass (a new pass starts when all are).
    covered_count: u64,
}

impl SizedDraw {
    fn is_covered(&self, block: u64) -> bool {
        self.covered[(block / 64) as usize] & (1 << (block % 64)) != 0
    }

    /// The first free block after `block`, wrapping (fio's `axmap_next_free`); the map must not
    /// be full.
    fn next_free_after(&self, block: u64, blocks: u64) -> u64 {
        let words = self.covered.len() as u64;
        let start = if block + 1 == blocks { 0 } else { block + 1 };
        // Word by word from start's word, around to it again: the first word holds free bits
        // before `start` too, so it is masked to `start` on the first visit and whole at the end.
        for step in 0..=words {
            let word = (start / 64 + step) % words;
            let mut free = !self.covered[word as usize];
            if step == 0 {
                free &= u64::MAX << (start % 64);
            }
            if word == words - 1 && !blocks.is_multiple_of(64) {
                // Bits past the last block are not blocks.
                free &= (1 << (blocks % 64)) - 1;
            }
            if free != 0 {
                return word * 64 + u64::from(free.trailing_zeros());
            }
        }
        // Unreachable with a map that is not full; the start keeps the I/O in range.
        start
    }
}

/// `block` moved down to fio's `blockalign` (a multiple of `stride` blocks); as it is without one.
#[inline]
fn aligned_down(block: u64, stride: u64) -> u64 {
    if stride > 1 { block - block % stride } else { block }
}

/// A block of `random_distribution=zoned`: a zone drawn by its share (`zones` holds cumulative
/// percent, first block, length), then a block in it.
#[inline]
fn zoned_block(zones: &[(u64, u64, u64)], rng: &mut Rng) -> u64 {
    let draw = rng.below(100);
    let &(_, first, len) = zones
        .iter()
        .find(|(cumulative, _, _)| draw < *cumulative)
        .unwrap_or(&zones[zones.len() - 1]);
    first + rng.below(len)
}

/// `IoGenerator::remaining` of a stream with no set number of I/Os.
const UNBOUNDED: u64 = u64::MAX;

impl IoGenerator {
    /// The generator of CPU `cpu_index` (an index into `plan.cpus`, which the caller has checked).
    pub fn new(plan: &JobPlan, cpu_index: usize) -> Self {
        let blocks = plan.cpus[cpu_index].blocks;
        let per_cpu_seed = plan.spec.seed ^ mix64(cpu_index as u64 + 1);
        let remaining = if plan.spec.is_time_based() {
            UNBOUNDED
        } else {
            plan.spec.ios_per_cpu.unwrap_or(blocks)
        };
        let mut generator = Self::over(plan, blocks, per_cpu_seed, remaining);
        if plan.spec.offset_add_blocks != 0 && !plan.spec.rw.is_random() {
            let bs = u64::from(plan.spec.bs);
            let first = plan.region_offset / bs + plan.cpus[cpu_index].first_block;
            let capacity = plan.device.capacity_sectors * u64::from(plan.device.sector_size);
            let device = capacity.div_ceil(bs);
            generator.seq_add = Some(SeqAdd {
                last: first,
                first,
                size: blocks,
                device,
                add: plan.spec.offset_add_blocks,
                len: plan.spec.bs_mix.as_ref().map_or(1, |mix| u64::from(mix.max_units())),
                device_whole: capacity / bs,
            });
            generator.pick = BlockPick::SequentialAdd;
            if plan.spec.rw == RwMode::ReadWrite {
                // fio keeps a position per direction: writes walk the same way on their own.
                generator.seq_add_write = generator.seq_add;
                generator.pick = BlockPick::SequentialMixedAdd;
            }
            generator.settle_uniform_op();
        }
        generator
    }

    /// The stream of file `file` (an index into `plan.files`) of a job over a `filename` list on
    /// CPU `cpu_index`: over that file's blocks, with a seed of its own, and no end (the
    /// [`FileSetGenerator`](crate::fileset::FileSetGenerator) counts the job's I/Os and each
    /// file's pass). Blocks are counted from the file's start.
    pub fn for_file(plan: &JobPlan, cpu_index: usize, file: usize) -> Self {
        let per_file_seed = plan.spec.seed ^ mix64(cpu_index as u64 + 1) ^ mix64(!(file as u64));
        Self::over(plan, plan.files[file].blocks, per_file_seed, UNBOUNDED)
    }

    fn over(plan: &JobPlan, blocks: u64, per_cpu_seed: u64, remaining: u64) -> Self {
        let mut generator = Self {
            rng: Rng::new(per_cpu_seed),
            rw: plan.spec.rw,
            fixed_op: match plan.spec.rw {
                RwMode::Read | RwMode::RandRead => Some(IoOp::Read),
                RwMode::Write | RwMode::RandWrite => Some(IoOp::Write),
                RwMode::Trim | RwMode::RandTrim | RwMode::TrimWrite | RwMode::RandTrimWrite => Some(IoOp::Trim),
                RwMode::RandRw | RwMode::ReadWrite => None,
            },
            rwmixread: u64::from(plan.spec.rwmixread),
            map: (plan.spec.random_map
                && plan.spec.rw.is_random()
                && plan.spec.zones.is_empty()
                && plan.spec.skew.is_none())
            .then(|| RandomMap::new(blocks, per_cpu_seed ^ 0x6d6170)),
            zones: zone_table(&plan.spec.zones, blocks, u64::from(plan.spec.bs)),
            skew: plan.spec.skew.filter(|_| plan.spec.rw.is_random()).map(|skew| {
                alloc::boxed::Box::new(crate::skew::SkewedDraw::new(skew, blocks, per_cpu_seed ^ 0x736b6577))
            }),
            blocks,
            stride: plan.spec.align_blocks.max(1),
            // fio's last block for blockalign: region / blockalign offsets.
            aligned: (blocks / plan.spec.align_blocks.max(1)).max(1),
            seq_add: None,
            seq_add_write: None,
            passes_left: plan.spec.modifier_passes.saturating_sub(1),
            strided: plan.spec.strided_zones.map(|zones| {
                alloc::boxed::Box::new(Strided {
                    zones,
                    start: 0,
                    done: 0,
                    cursor: 0,
                    map: None,
                    seed: per_cpu_seed ^ 0x7a6f6e65,
                    random: plan.spec.rw.is_random(),
                    random_map: plan.spec.random_map,
                })
            }),
            run_len: u64::from(plan.spec.random_run.max(1)),
            run_left: 0,
            last_block: 0,
            time_based: plan.spec.is_time_based(),
            cursor: 0,
            write_cursor: 0,
            remaining,
            sized: plan.spec.bs_mix.clone().map(|mix| {
                let mapped = plan.spec.random_map
                    && plan.spec.rw.is_random()
                    && plan.spec.zones.is_empty()
                    && plan.spec.skew.is_none();
                alloc::boxed::Box::new(SizedDraw {
                    mix,
                    covered: alloc::vec![0; if mapped { blocks.div_ceil(64) as usize } else { 0 }],
                    covered_count: 0,
                })
            }),
            write_after_trim: None,
            trim_then_write: matches!(plan.spec.rw, RwMode::TrimWrite | RwMode::RandTrimWrite),
            pick: BlockPick::Sequential,
            uniform_op: None,
        };
        generator.pick = if generator.strided.is_some() {
            BlockPick::Strided
        } else if generator.run_len > 1 && generator.rw.is_random() {
            BlockPick::RandomRuns
        } else if generator.map.is_some() {
            BlockPick::Map
        } else if generator.skew.is_some() {
            BlockPick::Skew
        } else if !generator.zones.is_empty() && generator.rw.is_random() {
            BlockPick::Zoned
        } else if generator.rw.is_random() && generator.stride > 1 {
            BlockPick::Aligned
        } else if generator.rw.is_random() {
            BlockPick::Uniform
        } else if generator.rw == RwMode::ReadWrite {
            BlockPick::SequentialMixed
        } else {
            BlockPick::Sequential
        };
        generator.settle_uniform_op();
        generator
    }

    /// Sets [`IoGenerator::uniform_op`] from the pick, the direction and `trimwrite`; called
    /// whenever the pick is decided.
    fn settle_uniform_op(&mut self) {
        self.uniform_op = self
            .fixed_op
            .filter(|_| self.pick == BlockPick::Uniform && !self.trim_then_write);
    }

    /// The next I/O of a job with variable block sizes: `(operation, first block, blocks)`, or
    /// `None` once a size-bound job has moved its bytes. The size is drawn for the operation's
    /// direction, then cut at the end of the slice, at the first block this pass already covered
    /// (random map) and at what a size-bound job has left, so the blocks moved add up exactly.
    pub fn next_sized_io(&mut self) -> Option<(IoOp, u64, u32)> {
        if self.remaining == 0 {
            return None;
        }
        let op = match self.fixed_op {
            Some(op) => op,
            None => self.mixed_op(),
        };
        let sized = self.sized.as_mut()?;
        let direction = usize::from(op != IoOp::Read);
        let percent_draw = self.rng.below(100);
        let wanted = u64::from(sized.mix.draw_units(direction, percent_draw, self.rng.next_u64()));
        let mapped = !sized.covered.is_empty();
        let block = if let Some(seq) = &mut self.seq_add {
            // fio's offset modifier with a step that is not whole blocks: the walk in units,
            // started over at its end by a time-based job or by `loops`.
            let time_based = self.time_based;
            let passes_left = &mut self.passes_left;
            match seq.next(time_based).or_else(|| {
                if !time_based {
                    *passes_left = passes_left.checked_sub(1)?;
                }
                seq.last = seq.first;
                seq.next(time_based)
            }) {
                Some(block) => block,
                None => {
                    self.remaining = 0;
                    return None;
                }
            }
        } else if mapped {
            if sized.covered_count == self.blocks {
                // Every block covered: the next pass starts.
                sized.covered.fill(0);
                sized.covered_count = 0;
            }
            // fio's draw with its map: uniform, and a covered block gives way to the next free.
            let drawn = self.rng.below(self.blocks);
            if sized.is_covered(drawn) {
                sized.next_free_after(drawn, self.blocks)
            } else {
                drawn
            }
        } else if let Some(skew) = &self.skew {
            skew.next_block(&mut self.rng)
        } else if !self.zones.is_empty() && self.rw.is_random() {
            aligned_down(zoned_block(&self.zones, &mut self.rng), self.stride)
        } else if self.rw.is_random() && self.stride > 1 {
            self.rng.below(self.aligned) * self.stride
        } else if self.rw.is_random() {
            self.rng.below(self.blocks)
        } else if op == IoOp::Write && self.pick == BlockPick::SequentialMixed {
            self.write_cursor
        } else {
            self.cursor
        };
        // fio's offset modifier may start an I/O near the region's end that runs past it (fio
        // issues it whole); every other I/O is cut at the end of the slice.
        let mut run = if self.seq_add.is_some() {
            wanted
        } else {
            wanted.min(self.blocks - block)
        };
        if mapped {
            run = (1..run).find(|&i| sized.is_covered(block + i)).unwrap_or(run);
        }
        run = run.min(self.remaining);
        self.remaining -= run;
        if mapped {
            for b in block..block + run {
                sized.covered[(b / 64) as usize] |= 1 << (b % 64);
            }
            sized.covered_count += run;
        }
        if !self.rw.is_random() {
            let next = if block + run == self.blocks { 0 } else { block + run };
            if op == IoOp::Write && self.pick == BlockPick::SequentialMixed {
                self.write_cursor = next;
            } else {
                self.cursor = next;
            }
        }
        // At most the largest size in units, which fits in u32.
        Some((op, block, run as u32))
    }

    /// The next I/O, or `None` once a size-bound job has issued all of its I/Os (for `trimwrite`,
    /// a block's trim and write count as one).
    #[inline(always)]
    pub fn next_io(&mut self) -> Option<(IoOp, u64)> {
        // The benchmark shape: what `draw` does for it, with one test before it.
        if let Some(op) = self.uniform_op {
            if self.remaining == 0 {
                return None;
            }
            self.remaining -= 1;
            return Some((op, self.rng.below(self.blocks)));
        }
        // One test of a flag on the read/write path; `trimwrite` goes aside.
        if self.trim_then_write {
            return self.next_trim_write();
        }
        self.draw()
    }

    /// `trimwrite`: a block's trim, then its write.
    #[inline(never)]
    fn next_trim_write(&mut self) -> Option<(IoOp, u64)> {
        if let Some(block) = self.write_after_trim.take() {
            return Some((IoOp::Write, block));
        }
        let (op, block) = self.draw()?;
        self.write_after_trim = Some(block);
        Some((op, block))
    }

    /// A mixed job's next direction: a read with probability `rwmixread` percent.
    #[inline(always)]
    fn mixed_op(&mut self) -> IoOp {
        if self.rng.below(100) < self.rwmixread {
            IoOp::Read
        } else {
            IoOp::Write
        }
    }

    /// `rw=readwrite`: the direction (`rwmixread`), then the next block of its own walk.
    #[inline(never)]
    fn next_sequential_mixed(&mut self) -> (IoOp, u64) {
        let op = self.mixed_op();
        let cursor = if op == IoOp::Read {
            &mut self.cursor
        } else {
            &mut self.write_cursor
        };
        let block = *cursor;
        *cursor = if block + 1 == self.blocks { 0 } else { block + 1 };
        (op, block)
    }

    /// `rw=readwrite:±N`: the direction (`rwmixread`), then the next block of its own walk; `None`
    /// where that walk's pass ends (a time-based job starts it over).
    #[inline(never)]
    fn next_mixed_add(&mut self) -> Option<(IoOp, u64)> {
        let op = self.mixed_op();
        let time_based = self.time_based;
        let (reads, writes) = (self.seq_add.as_mut()?, self.seq_add_write.as_mut()?);
        let seq = if op == IoOp::Read { &mut *reads } else { &mut *writes };
        if let Some(block) = seq.next(time_based) {
            return Some((op, block));
        }
        if time_based {
            seq.last = seq.first;
        } else {
            // `loops`: the next pass of the job, both walks from the start again (fio's loop).
            if self.passes_left == 0 {
                return None;
            }
            self.passes_left -= 1;
            reads.last = reads.first;
            writes.last = writes.first;
        }
        let seq = if op == IoOp::Read { reads } else { writes };
        Some((op, seq.next(time_based)?))
    }

    /// The next block of a job with fio's offset modifier (`rw=read:±N`, `rw=randread:N`), or
    /// `None` where fio's pass ends (a time-based job starts over instead).
    #[inline(never)]
    fn next_modified(&mut self) -> Option<u64> {
        let time_based = self.time_based;
        if let Some(strided) = &mut self.strided {
            return strided.next(self.blocks, &mut self.rng);
        }
        if let Some(seq) = &mut self.seq_add {
            return seq.next(time_based).or_else(|| {
                // A time-based job starts the walk over; `loops` start it over as often.
                if !time_based {
                    if self.passes_left == 0 {
                        return None;
                    }
                    self.passes_left -= 1;
                }
                seq.last = seq.first;
                seq.next(time_based)
            });
        }
        let block = if self.run_left == 0 {
            self.run_left = self.run_len - 1;
            match &mut self.map {
                Some(map) => map.next_index(),
                None => self.rng.below(self.blocks),
            }
        } else {
            // fio continues from the end of the I/O before; the end of the region ends the pass.
            self.run_left -= 1;
            let next = self.last_block + 1;
            if next < self.blocks {
                next
            } else if time_based {
                0
            } else {
                return None;
            }
        };
        self.last_block = block;
        Some(block)
    }

    /// The next operation and block of the stream (for `trimwrite`, its trims).
    #[inline(always)]
    fn draw(&mut self) -> Option<(IoOp, u64)> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let block = match (self.pick, &mut self.map, &self.skew) {
            (BlockPick::Uniform, _, _) => self.rng.below(self.blocks),
            (BlockPick::Aligned, _, _) => self.rng.below(self.aligned) * self.stride,
            (BlockPick::RandomRuns | BlockPick::SequentialAdd | BlockPick::Strided, _, _) => match self.next_modified()
            {
                Some(block) => block,
                None => {
                    // The end of the pass, as fio's: a size-bound job is over.
                    self.remaining = 0;
                    return None;
                }
            },
            (BlockPick::Map, Some(map), _) => map.next_index(),
            (BlockPick::Skew, _, Some(skew)) => skew.next_block(&mut self.rng),
            (BlockPick::Zoned, _, _) => aligned_down(zoned_block(&self.zones, &mut self.rng), self.stride),
            (BlockPick::SequentialMixed, _, _) => return Some(self.next_sequential_mixed()),
            (BlockPick::SequentialMixedAdd, _, _) => {
                let next = self.next_mixed_add();
                if next.is_none() {
                    // The end of a direction's pass ends a size-bound job, as fio's.
                    self.remaining = 0;
                }
                return next;
            }
            // `pick` is Map or Skew only with its table (`over`); Sequential otherwise.
            _ => {
                let block = self.cursor;
                self.cursor = if block + 1 == self.blocks { 0 } else { block + 1 };
                block
            }
        };
        let op = match self.fixed_op {
            Some(op) => op,
            None => self.mixed_op(),
        };
        Some((op, block))
    }
}

/// The zones over `blocks` blocks of `bs` bytes, as (cumulative access percent, first block,
/// blocks); zones with no block or no access are left out, and a zone running past the end is
/// cut there (the planner's callers check the sums).
fn zone_table(zones: &[crate::job::AccessZone], blocks: u64, bs: u64) -> alloc::vec::Vec<(u64, u64, u64)> {
    let mut table = alloc::vec::Vec::new();
    let (mut cumulative, mut first) = (0u64, 0u64);
    for zone in zones {
        let len = match zone.length {
            crate::job::ZoneLength::Percent(p) => blocks * u64::from(p) / 100,
            crate::job::ZoneLength::Bytes(b) => b / bs,
        }
        .min(blocks - first.min(blocks));
        cumulative += u64::from(zone.access_percent);
        if len > 0 && zone.access_percent > 0 {
            table.push((cumulative, first, len));
        }
        first += len;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::parse_jobs;
    use crate::plan::{DeviceInfo, plan_job};
    use alloc::vec::Vec;

    fn plan(words: &str) -> JobPlan {
        let device = DeviceInfo {
            name: "d".into(),
            sector_size: 512,
            capacity_sectors: 1 << 20,
            max_iodepth: 64,
            max_transfer_bytes: 1 << 20,
        };
        let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
        plan_job(&jobs[0], &[device], &[0, 1]).unwrap()
    }

    #[test]
    fn sequential_size_bound_visits_each_block_once() {
        let p = plan("rw=write bs=4k size=40k");
        let mut g = IoGenerator::new(&p, 1);
        let ios: Vec<_> = core::iter::from_fn(|| g.next_io()).collect();
        assert_eq!(ios, (0..5).map(|b| (IoOp::Write, b)).collect::<Vec<_>>());
    }

    #[test]
    fn time_based_sequential_wraps() {
        let p = plan("rw=read bs=4k size=24k runtime=1s");
        let mut g = IoGenerator::new(&p, 0);
        let blocks: Vec<_> = (0..7).map(|_| g.next_io().unwrap().1).collect();
        assert_eq!(blocks, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn random_mix_is_deterministic_in_range_and_near_the_ratio() {
        let p = plan("rw=randrw rwmixread=70 bs=4k size=4m runtime=1s");
        let mut a = IoGenerator::new(&p, 0);
        let mut b = IoGenerator::new(&p, 0);
        let mut other_cpu = IoGenerator::new(&p, 1);
        let mut reads = 0;
        let mut same_as_other = 0;
        for _ in 0..10_000 {
            let io = a.next_io().unwrap();
            assert_eq!(Some(io), b.next_io());
            assert!(io.1 < 512);
            reads += u32::from(io.0 == IoOp::Read);
            same_as_other += u32::from(Some(io) == other_cpu.next_io());
        }
        assert!(
            (6_700..7_300).contains(&reads),
            "{reads} reads out of 10000 at rwmixread=70"
        );
        assert!(same_as_other < 100, "CPUs must get independent streams");
    }

    #[test]
    fn zones_take_their_share_of_the_accesses() {
        let mut p = plan("rw=randread bs=4k size=4m runtime=1s");
        p.spec.zones = alloc::vec![
            crate::job::AccessZone {
                access_percent: 60,
                length: crate::job::ZoneLength::Percent(10),
            },
            crate::job::AccessZone {
                access_percent: 40,
                length: crate::job::ZoneLength::Percent(90),
            },
        ];
        let mut g = IoGenerator::new(&p, 0);
        // 4 MiB over 2 CPUs: 512 blocks per slice; the first zone is blocks 0..51.
        let hot = (0..10_000).filter(|_| g.next_io().unwrap().1 < 51).count();
        assert!((5_700..6_300).contains(&hot), "{hot} of 10000 in the 60% zone");
    }

    #[test]
    fn skewed_jobs_repeat_hot_blocks_inside_the_slice() {
        let mut p = plan("rw=randread bs=4k size=4m");
        p.spec.skew = Some(crate::skew::Skew::Zipf { theta_milli: 1200 });
        let mut g = IoGenerator::new(&p, 1);
        let mut again = IoGenerator::new(&p, 1);
        let mut counts = alloc::vec![0u32; 512];
        // Size-bound: still one I/O per block of the slice, but with repeats (no random map).
        for _ in 0..512 {
            let io = g.next_io().unwrap();
            assert_eq!(Some(io), again.next_io());
            counts[io.1 as usize] += 1;
        }
        assert_eq!(g.next_io(), None);
        let hottest = counts.iter().max().copied().unwrap_or(0);
        // zipf 1.2 over 512 ranks: the hottest takes about 1/zeta(1.2, 512) ~ 25% of the draws.
        assert!(hottest > 60, "hottest block drawn {hottest} times of 512");
    }

    #[test]
    fn random_size_bound_issues_one_io_per_block() {
        let p = plan("rw=randread bs=4k size=64k");
        let mut g = IoGenerator::new(&p, 0);
        assert_eq!(core::iter::from_fn(|| g.next_io()).count(), 8);
    }

    #[test]
    fn the_uniform_shortcut_draws_what_the_full_draw_draws() {
        for (words, shortcut) in [
            ("rw=randread bs=4k size=4m", true),
            ("rw=randwrite bs=4k size=4m runtime=1s", true),
            ("rw=randtrim bs=4k size=4m", true),
            ("rw=randrw bs=4k size=4m", false),
            ("rw=randtrimwrite bs=4k size=4m", false),
            ("rw=read bs=4k size=4m", false),
        ] {
            let p = plan(words);
            let mut fast = IoGenerator::new(&p, 0);
            assert_eq!(fast.uniform_op.is_some(), shortcut, "{words}");
            let mut full = fast.clone();
            full.uniform_op = None;
            for _ in 0..2_000 {
                assert_eq!(fast.next_io(), full.next_io(), "{words}");
            }
        }
    }

    #[test]
    fn the_next_free_block_wraps_and_skips_bits_past_the_end() {
        let mix = crate::job::BlockSizeMix {
            directions: [alloc::vec::Vec::new(), alloc::vec::Vec::new()],
        };
        // 70 blocks: two words, the second with 6 real blocks.
        let mut draw = SizedDraw {
            mix,
            covered: alloc::vec![u64::MAX, 0b11_1111],
            covered_count: 70,
        };
        draw.covered[0] &= !(1 << 5);
        assert_eq!(draw.next_free_after(5, 70), 5, "around the whole map back to itself");
        assert_eq!(draw.next_free_after(69, 70), 5, "wraps at the end");
        assert_eq!(draw.next_free_after(3, 70), 5);
        draw.covered[1] &= !(1 << 2);
        assert_eq!(draw.next_free_after(10, 70), 66);
        assert_eq!(draw.next_free_after(66, 70), 5);
    }
}
