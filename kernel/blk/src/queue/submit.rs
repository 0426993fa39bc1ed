//! Submission: checking a bio, taking a tag, splitting, waiting for a tag, and putting the
//! request on its CPU's software queue or straight on the hardware queue.

use super::*;

/// A tag of `tags`' reserved pool, for CPU `cpu`: admin commands, off the I/O path.
#[cold]
#[inline(never)]
fn alloc_reserved(tags: &crate::tags::TagSet, cpu: usize) -> Option<u32> {
    tags.alloc(cpu, true)
}

/// Why [`Queue::take_chunk`] stopped.
enum ChunkEnd {
    /// The chunk is full; bios are left.
    Full,
    /// Every bio was taken.
    Out,
    /// The next bio must be split.
    NeedsSplit,
    /// The next bio was not taken.
    Failed(BlkError),
}

impl<D: Driver> Queue<D> {
    /// Checks a bio before it takes a tag, and says whether it must be split (`Ok(true)`).
    /// Inlined: it runs once per I/O. The common I/O, a read or write of one segment
    /// within the transfer limit, passes with one branch; anything else, and every failure,
    /// goes through the full checks, which name what is wrong.
    #[inline(always)]
    pub(super) fn check_bio(&self, bio: &Bio<'_>) -> Result<bool, BlkError> {
        if let [only] = bio.segments
            && matches!(bio.op, Op::Read | Op::Write)
            && self.plain_io_ok(bio.sector, bio.nr_sectors, only.len)
        {
            return Ok(false);
        }
        self.check_bio_in_full(bio)
    }

    /// What [`Queue::validate_range`] checks, for a read or write of one segment of
    /// `segment_len` bytes, plus "no split needed", as one boolean: not empty, aligned to the
    /// block size, inside the device, the segment as long as the range, and no longer than the
    /// transfer limit (one segment is within any segment limit, which is at least 1). The
    /// conditions are combined with `&`, not `&&`, so that they cost no branch each.
    #[inline(always)]
    pub(super) fn plain_io_ok(&self, sector: u64, nr_sectors: u32, segment_len: u32) -> bool {
        let n = u64::from(nr_sectors);
        // `validate` made the block size a power of two.
        let misaligned = (sector | n) & u64::from(self.block_sectors - 1);
        // No overflow: past the end, the room is 0 and `n` is not.
        let room = self.capacity_sectors.saturating_sub(sector);
        // `1 <= nr_sectors <= max_hw_sectors` as one compare: 0 wraps to the largest u32.
        (nr_sectors.wrapping_sub(1) < self.max_hw_sectors)
            & (misaligned == 0)
            & (n <= room)
            & (u64::from(segment_len) == n * u64::from(SECTOR_SIZE))
    }

    /// [`Queue::check_bio`]'s full checks, with the error that names the first failure, and
    /// the split decision.
    #[inline(never)]
    pub(super) fn check_bio_in_full(&self, bio: &Bio<'_>) -> Result<bool, BlkError> {
        self.validate_bio_in_full(bio)?;
        Ok(match bio.op {
            Op::Read | Op::Write => needs_split(
                bio.nr_sectors,
                bio.segments.len(),
                self.max_hw_sectors,
                self.max_segments,
            ),
            Op::Discard => bio.nr_sectors > self.max_discard_sectors,
            Op::Flush | Op::Driver(_) => false,
        })
    }

    /// Every check of a bio, with the error that names the first failure.
    pub(super) fn validate_bio_in_full(&self, bio: &Bio<'_>) -> Result<(), BlkError> {
        // Reads and writes with more segments are split; other requests cannot be.
        if bio.segments.len() > self.max_segments && !matches!(bio.op, Op::Read | Op::Write) {
            return Err(BlkError::TooManySegments {
                count: bio.segments.len(),
                max: self.max_segments,
            });
        }
        let segment_bytes: u64 = match bio.segments {
            // The common single-segment I/O: no loop.
            [only] => u64::from(only.len),
            all => all.iter().map(|s| u64::from(s.len)).sum(),
        };
        match bio.op {
            Op::Read | Op::Write => self.validate_range(bio, segment_bytes)?,
            Op::Discard => self.validate_discard(bio)?,
            Op::Flush => {
                if bio.nr_sectors != 0 {
                    return Err(BlkError::FlushWithData {
                        nr_sectors: bio.nr_sectors,
                    });
                }
                if segment_bytes != 0 {
                    return Err(BlkError::SegmentLengthMismatch {
                        segment_bytes,
                        io_bytes: 0,
                    });
                }
            }
            Op::Driver(_) => {}
        }
        Ok(())
    }

    /// The range checks of a read, write or discard: not empty, inside the device, aligned to its
    /// block size, and (with data) the segments as long as the range.
    #[inline(always)]
    pub(super) fn validate_range(&self, bio: &Bio<'_>, segment_bytes: u64) -> Result<(), BlkError> {
        if bio.nr_sectors == 0 {
            return Err(BlkError::EmptyIo);
        }
        let end = bio.sector.checked_add(u64::from(bio.nr_sectors));
        if end.is_none_or(|end| end > self.capacity_sectors) {
            return Err(BlkError::BeyondEnd {
                sector: bio.sector,
                nr_sectors: bio.nr_sectors,
                capacity: self.capacity_sectors,
            });
        }
        let bs = self.block_sectors;
        // `validate` made the block size a power of two: a mask, not two divisions.
        let mask = bs - 1;
        if bio.sector & u64::from(mask) != 0 || bio.nr_sectors & mask != 0 {
            return Err(BlkError::Misaligned {
                sector: bio.sector,
                nr_sectors: bio.nr_sectors,
                block_sectors: bs,
            });
        }
        let io_bytes = u64::from(bio.nr_sectors) * u64::from(SECTOR_SIZE);
        if !bio.segments.is_empty() && segment_bytes != io_bytes {
            return Err(BlkError::SegmentLengthMismatch {
                segment_bytes,
                io_bytes,
            });
        }
        Ok(())
    }

    /// A discard: a device that supports it, no data, and a valid range. Off the read/write path.
    #[cold]
    pub(super) fn validate_discard(&self, bio: &Bio<'_>) -> Result<(), BlkError> {
        if self.max_discard_sectors == 0 {
            return Err(BlkError::DiscardNotSupported);
        }
        if !bio.segments.is_empty() {
            return Err(BlkError::DiscardWithData {
                segments: bio.segments.len(),
            });
        }
        self.validate_range(bio, 0)
    }

    /// Submits `bio` from CPU `cpu`: validates it, takes a tag, queues it on the CPU's software
    /// queue and runs the CPU's hardware queue. Never waits: with no free tag it fails with
    /// [`BlkError::TagsExhausted`] (see [`Queue::submit_wait`]).
    #[inline(always)]
    pub fn submit(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        self.submit_with(cpu, bio, false)
    }

    /// [`Queue::submit`] for a burst (Linux's plug): when the request goes straight to the
    /// driver, a driver that batches its doorbell ([`Driver::DEFERS_DOORBELL`], NVMe) may leave
    /// it unrung; [`Queue::commit`] rings it. One doorbell write per burst instead of one per
    /// request. The caller must call [`Queue::commit`] on the same CPU before it
    /// waits for any of the burst's completions; until then the device may not have seen them.
    #[inline(always)]
    pub fn submit_deferred(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        self.submit_with(cpu, bio, D::DEFERS_DOORBELL)
    }

    /// Rings the doorbell that CPU `cpu`'s [`Queue::submit_deferred`] calls left unrung, if any.
    #[inline]
    pub fn commit(&self, cpu: usize) {
        if !D::DEFERS_DOORBELL || cpu >= self.ncpus {
            return;
        }
        let pending = self.deferred_commit[cpu].load(Ordering::Relaxed);
        if pending != 0 {
            self.deferred_commit[cpu].store(0, Ordering::Relaxed);
            self.commit_hwq(cpu, pending as usize - 1);
        }
    }

    pub(super) fn commit_hwq(&self, cpu: usize, hwq: usize) {
        bump(&self.counters.cpu(cpu).commits);
        let ctx = HwCtx {
            queue: self,
            hwq: hwq as u16,
            cpu: cpu as u16,
        };
        self.driver.commit_rqs(&ctx);
    }

    /// Notes that CPU `cpu` left hardware queue `hwq`'s doorbell for [`Queue::commit`]. A CPU's
    /// submissions all go to its own hardware queue; should another one be pending (a changed
    /// map), it is rung now.
    #[inline(always)]
    pub(super) fn defer_commit(&self, cpu: usize, hwq: usize) {
        let mark = &self.deferred_commit[cpu];
        let before = mark.load(Ordering::Relaxed);
        if before as usize == hwq + 1 {
            // Every request of a burst after the first: already noted.
            return;
        }
        if before != 0 {
            self.commit_hwq(cpu, before as usize - 1);
        }
        mark.store(hwq as u32 + 1, Ordering::Relaxed);
    }

    #[inline(always)]
    pub(super) fn submit_with(&self, cpu: usize, bio: &Bio<'_>, defer: bool) -> Result<Submitted, BlkError> {
        let at = self.submit_context(cpu)?;
        if at.trace {
            return self.submit_traced(cpu, bio, defer);
        }
        // Tracing off is a constant in this copy, as in `submit_batch`.
        self.submit_in(&RunContext { trace: false, ..at }, bio, defer)
    }

    /// [`Queue::submit_with`] with stage tracing on, out of the untraced path. It looks the
    /// context up again: handed over, the context would be built in memory on the untraced
    /// path too.
    #[inline(never)]
    #[cold]
    fn submit_traced(&self, cpu: usize, bio: &Bio<'_>, defer: bool) -> Result<Submitted, BlkError> {
        let at = self.submit_context(cpu)?;
        self.submit_in(&at, bio, defer)
    }

    /// [`Queue::submit_with`] past its look-ups.
    #[inline(always)]
    fn submit_in(&self, at: &RunContext<'_>, bio: &Bio<'_>, defer: bool) -> Result<Submitted, BlkError> {
        let (cpu, at) = (at.cpu, *at);
        match self.take_request(&at, bio)? {
            Taken::NeedsSplit => self.submit_split(cpu, bio),
            Taken::Request { hwq, tag, index } => {
                self.queue_or_issue(&at, core::slice::from_ref(&index), defer);
                Ok(Submitted { hwq, tag })
            }
        }
    }

    /// Submits `bios` in order from CPU `cpu` as one burst (Linux's plug flushed through
    /// `queue_rqs`): the requests are prepared one by one, then handed to the hardware queue
    /// together, with one run-token round trip and one doorbell for up to
    /// [`SUBMIT_BATCH_CHUNK`] of them instead of one each. Never waits.
    ///
    /// It stops at the first bio it cannot take (no free tag, an invalid bio, a frozen queue):
    /// [`BatchOutcome::accepted`] bios before it were submitted (and will complete as usual),
    /// [`BatchOutcome::error`] says why that one was not, and the bios after it were not
    /// looked at. A bio longer than the device's limits is split, as by [`Queue::submit`].
    pub fn submit_batch(&self, cpu: usize, bios: &[Bio<'_>]) -> BatchOutcome {
        // Every request of a CPU goes to that CPU's hardware queue.
        let at = match self.submit_context(cpu) {
            Ok(at) => at,
            Err(error) => {
                return BatchOutcome {
                    accepted: 0,
                    error: Some(error),
                };
            }
        };
        if at.trace {
            return self.submit_batch_traced(cpu, bios);
        }
        // Tracing off is a constant in this copy: no stage test per request.
        self.submit_batch_in(&RunContext { trace: false, ..at }, bios)
    }

    /// [`Queue::submit_batch`] with stage tracing on, out of the untraced path. It looks the
    /// context up again (see `submit_traced`).
    #[inline(never)]
    #[cold]
    fn submit_batch_traced(&self, cpu: usize, bios: &[Bio<'_>]) -> BatchOutcome {
        match self.submit_context(cpu) {
            Ok(at) => self.submit_batch_in(&at, bios),
            Err(error) => BatchOutcome {
                accepted: 0,
                error: Some(error),
            },
        }
    }

    /// [`Queue::submit_batch`] past its look-ups. The bios enter the queue's usage count
    /// together, with one increment and one look at the frozen flag; what a batch that stops
    /// early did not take leaves again at once. A frozen queue refuses them one by one
    /// ([`Queue::submit_batch_each`]), so that each bio fails as it would alone.
    ///
    /// The requests are taken a chunk at a time by [`Queue::take_chunk`], out of line: its
    /// loop keeps what it needs in registers, which it could not beside the dispatch and
    /// completion paths inlined here.
    #[inline(always)]
    fn submit_batch_in(&self, at: &RunContext<'_>, bios: &[Bio<'_>]) -> BatchOutcome {
        let cpu = at.cpu;
        let at = *at;
        let usage = &at.counters.usage;
        if !self.usage.try_enter_n(usage, bios.len()) {
            return self.submit_batch_each(&at, bios);
        }
        let mut chunk = [0u32; SUBMIT_BATCH_CHUNK];
        let mut done = 0;
        loop {
            let rest = &bios[done..];
            let (taken, end) = if at.trace {
                self.take_chunk::<true>(&at, rest, &mut chunk)
            } else {
                self.take_chunk::<false>(&at, rest, &mut chunk)
            };
            self.queue_or_issue(&at, &chunk[..taken.min(SUBMIT_BATCH_CHUNK)], false);
            done += taken;
            let outcome = match end {
                ChunkEnd::Full => continue,
                ChunkEnd::Out => break,
                ChunkEnd::NeedsSplit => {
                    // The parts enter the queue on their own.
                    self.usage.exit(usage);
                    self.submit_split(cpu, &bios[done])
                }
                ChunkEnd::Failed(error) => {
                    self.usage.exit(usage);
                    Err(error)
                }
            };
            if let Err(error) = outcome {
                // The entries of the bios after it.
                self.usage.exit_n(usage, bios.len() - done - 1);
                return BatchOutcome {
                    accepted: done,
                    error: Some(error),
                };
            }
            done += 1;
        }
        BatchOutcome {
            accepted: bios.len(),
            error: None,
        }
    }

    /// Takes the requests of `bios`, which have entered the queue, in order into `chunk` (one
    /// index each), until the chunk is full, the bios run out, or one is not taken; returns how
    /// many were taken and why it stopped. `TRACED`: the stage trace is on (the untraced copy
    /// tests nothing for it).
    #[inline(never)]
    fn take_chunk<const TRACED: bool>(
        &self,
        at: &RunContext<'_>,
        bios: &[Bio<'_>],
        chunk: &mut [u32; SUBMIT_BATCH_CHUNK],
    ) -> (usize, ChunkEnd) {
        let at = RunContext {
            trace: TRACED && at.trace,
            ..*at
        };
        for (position, bio) in bios.iter().enumerate() {
            if position >= SUBMIT_BATCH_CHUNK {
                return (position, ChunkEnd::Full);
            }
            // This bio's entry and those of the bios after it.
            match self.take_entered::<true>(&at, bio, bios.len() - position) {
                Ok(Taken::Request { index, .. }) => chunk[position] = index,
                Ok(Taken::NeedsSplit) => return (position, ChunkEnd::NeedsSplit),
                Err(error) => return (position, ChunkEnd::Failed(error)),
            }
        }
        (bios.len(), ChunkEnd::Out)
    }

    /// [`Queue::submit_batch_in`] with each bio entering the queue on its own: for a queue
    /// that was frozen when the batch came.
    #[cold]
    #[inline(never)]
    fn submit_batch_each(&self, at: &RunContext<'_>, bios: &[Bio<'_>]) -> BatchOutcome {
        let cpu = at.cpu;
        for (position, bio) in bios.iter().enumerate() {
            let outcome = match self.take_request(at, bio) {
                Ok(Taken::Request { index, .. }) => {
                    self.queue_or_issue(at, core::slice::from_ref(&index), false);
                    continue;
                }
                Ok(Taken::NeedsSplit) => self.submit_split(cpu, bio),
                Err(error) => Err(error),
            };
            if let Err(error) = outcome {
                return BatchOutcome {
                    accepted: position,
                    error: Some(error),
                };
            }
        }
        BatchOutcome {
            accepted: bios.len(),
            error: None,
        }
    }

    /// What every submission from CPU `cpu` needs, looked up once per call (once per batch
    /// for [`Queue::submit_batch`]). The CPU map has one entry per CPU, so looking `cpu` up
    /// in it is the CPU check ([`BlkError::CpuOutOfRange`]).
    #[inline(always)]
    pub(super) fn submit_context(&self, cpu: usize) -> Result<RunContext<'_>, BlkError> {
        // The CPU's counters block holds its route: one bounds check is the CPU check and the
        // map lookup.
        let Some(counters) = self.counters.cpu_checked(cpu) else {
            return Err(BlkError::CpuOutOfRange { cpu, ncpus: self.ncpus });
        };
        let Route { hwq, set, slot_base } = counters.route;
        let (hwq, set) = (usize::from(hwq), usize::from(set));
        debug_assert!(hwq < self.hwqs.len() && set < self.tag_sets.len());
        // SAFETY: a route is set once, in `Queue::new`, from the validated CPU map: its hardware
        // queue is one of `hwqs` and its set one of `tag_sets` (both fixed at creation).
        let (host, hq) = unsafe { (self.tag_sets.get_unchecked(set), self.hwqs.get_unchecked(hwq)) };
        Ok(RunContext {
            cpu,
            hwq,
            set,
            host,
            counters,
            hq,
            trace: self.stage_trace.load(core::sync::atomic::Ordering::Relaxed),
            slot_base,
        })
    }

    /// What a submission or a dispatch pass by CPU `cpu` on hardware queue `hwq` needs. Both
    /// are checked.
    #[inline(always)]
    pub(super) fn run_context(&self, cpu: usize, hwq: usize) -> RunContext<'_> {
        let set = self.set_of(hwq);
        RunContext {
            cpu,
            hwq,
            set,
            host: &self.tag_sets[set],
            counters: self.counters.cpu(cpu),
            hq: &self.hwqs[hwq],
            trace: self.stage_trace.load(core::sync::atomic::Ordering::Relaxed),
            slot_base: set as u32 * self.depth,
        }
    }

    /// Validates `bio`, takes its tag and fills its slot (state QUEUED), ready for
    /// [`Queue::queue_or_issue`]; or says that it must be split first.
    #[inline(always)]
    pub(super) fn take_request(&self, at: &RunContext<'_>, bio: &Bio<'_>) -> Result<Taken, BlkError> {
        self.take_entered::<false>(at, bio, 1)
    }

    /// [`Queue::take_request`] of a bio whose queue entry its caller may have made already:
    /// without `ENTERED`, the entry is made here (and undone here on failure); with it, the
    /// caller entered this bio and `entered - 1` after it ([`Queue::submit_batch`]), and undoes
    /// what is left of them itself when this one is not taken.
    #[inline(always)]
    fn take_entered<const ENTERED: bool>(
        &self,
        at: &RunContext<'_>,
        bio: &Bio<'_>,
        entered: usize,
    ) -> Result<Taken, BlkError> {
        let RunContext {
            cpu,
            hwq,
            host,
            counters,
            slot_base,
            ..
        } = *at;
        match self.check_bio(bio) {
            Ok(false) => {}
            Ok(true) => return Ok(Taken::NeedsSplit),
            Err(e) => {
                bump(&counters.rejected);
                return Err(e);
            }
        }
        if !ENTERED && !self.usage.try_enter(&counters.usage) {
            bump(&counters.rejected);
            return Err(BlkError::Frozen);
        }
        let tags = host.tags();
        // With tags shared across queues, a normal tag is left to a starving queue once we
        // hold our share (`usage` counts our requests: not this one, nor the rest of a batch
        // entered with it).
        let normal = !bio.reserved_tag
            && (!self.host_shared
                || !host.over_fair_share(
                    // Summed over the CPUs only when another queue waits for tags.
                    || {
                        self.usage
                            .in_flight(self.counters.usage_counts())
                            .saturating_sub(entered)
                    },
                    self.tag_waiters.load(core::sync::atomic::Ordering::Relaxed) != 0,
                ));
        // The hint's tag, the common case, goes straight on as a tag, not as an `Option` to
        // test again after the search's. A reserved (admin) tag is taken out of line.
        let tag = if normal && let Some(tag) = tags.alloc_at_hint(&counters.tag_hint) {
            tag
        } else {
            let tag = if bio.reserved_tag {
                alloc_reserved(tags, cpu)
            } else if normal {
                tags.alloc_past_hint(&counters.tag_hint)
            } else {
                None
            };
            let Some(tag) = tag else {
                if !ENTERED {
                    self.usage.exit(&counters.usage);
                }
                return Err(BlkError::TagsExhausted {
                    hwq,
                    pool: tags.pool_size(bio.reserved_tag),
                    reserved: bio.reserved_tag,
                });
            };
            tag
        };
        let index = slot_base + tag;
        // SAFETY: the set's tags are below the depth (its pools end there), and the set's
        // slots are `slot_base..slot_base + depth`.
        let slot = unsafe { self.held_slot(index) };
        {
            // SAFETY: `alloc` gave us the tag, so the slot is FREE and ours alone until we
            // publish it by pushing it onto the software queue (Release).
            let d = unsafe { slot.data_mut() };
            d.op = bio.op;
            d.sector = bio.sector;
            d.nr_sectors = bio.nr_sectors;
            d.cookie = bio.cookie;
            d.submit_cpu = cpu as u16;
            d.hwq = hwq as u16;
            // `parent` is NO_PARENT in every free slot: a split part's end puts it back.
            debug_assert_eq!(d.parent, NO_PARENT);
            // The common single-segment I/O: one store into the slot, not a call to `memcpy`.
            d.set_segments(bio.segments);
        }
        // No deadline is reset here: it is read only while the request is ISSUED, and `issue`
        // stores it before that. Nor the status: every path that ends a request stores it
        // before it is read (`Rq::status` means something only in `Driver::complete`).
        slot.move_state(state::FREE, state::QUEUED);
        bump(&counters.submitted);
        self.stage_if(at.trace, cpu, index, crate::driver::Stage::Submit);
        Ok(Taken::Request { hwq, tag, index })
    }

    /// Submits a read or write that exceeds the transfer or segment limit, or a discard longer
    /// than the discard limit, as several requests
    /// ([`crate::split`]). It takes every part's tag first, so it either queues all parts or none
    /// (`TagsExhausted`, to be retried like any submission); the bio ends once, when its last part
    /// has ended, with the first error.
    #[cold]
    pub(super) fn submit_split(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        let Route { hwq, set, .. } = self.counters.route(cpu);
        let (hwq, set) = (usize::from(hwq), usize::from(set));
        let tags = self.tag_sets[set].tags();
        // A discard has no segments: only its own length limit cuts it.
        let max_sectors = if bio.op == Op::Discard {
            self.max_discard_sectors
        } else {
            self.max_hw_sectors
        };
        let Some(count) = split_bio(
            bio.sector,
            bio.nr_sectors,
            bio.segments,
            max_sectors,
            self.max_segments,
            self.block_sectors,
            |_, _, _| {},
        ) else {
            // Segments too small for the device's limit to hold a whole block.
            bump(&self.counters.cpu(cpu).rejected);
            return Err(BlkError::TooManySegments {
                count: bio.segments.len(),
                max: self.max_segments,
            });
        };
        let exhausted = || BlkError::TagsExhausted {
            hwq,
            pool: tags.pool_size(false),
            reserved: false,
        };
        if count > tags.pool_size(false) {
            bump(&self.counters.cpu(cpu).rejected);
            return Err(BlkError::TooManySegments {
                count: count as usize,
                max: tags.pool_size(false) as usize,
            });
        }
        let Some(parent) = self
            .splits
            .begin(cpu, count, bio.cookie, bio.sector, bio.nr_sectors, bio.op)
        else {
            return Err(exhausted());
        };
        // All tags first: a bio half submitted could neither be retried nor ended.
        let mut taken: Vec<u32> = Vec::with_capacity(count as usize);
        while taken.len() < count as usize {
            let tag = if self.usage.try_enter(&self.counters.cpu(cpu).usage) {
                let tag = tags.alloc(cpu, false);
                if tag.is_none() {
                    self.usage.exit(&self.counters.cpu(cpu).usage);
                }
                tag.ok_or_else(exhausted)
            } else {
                Err(BlkError::Frozen)
            };
            match tag {
                Ok(tag) => taken.push(tag),
                Err(error) => {
                    for &tag in &taken {
                        self.tag_sets[set].free(cpu, tag, self.sharer_of(set));
                        self.usage.exit(&self.counters.cpu(cpu).usage);
                    }
                    self.splits.cancel(cpu, parent);
                    if error == BlkError::Frozen {
                        bump(&self.counters.cpu(cpu).rejected);
                    }
                    return Err(error);
                }
            }
        }
        let mut next = 0;
        let at = self.run_context(cpu, hwq);
        split_bio(
            bio.sector,
            bio.nr_sectors,
            bio.segments,
            max_sectors,
            self.max_segments,
            self.block_sectors,
            |sector, nr_sectors, segments| {
                let index = set as u32 * self.depth + taken[next];
                next += 1;
                let slot = self.slot(index);
                {
                    // SAFETY: `alloc` gave us the tag, so the slot is FREE and ours alone until
                    // `queue_or_issue` publishes it (Release).
                    let d = unsafe { slot.data_mut() };
                    d.op = bio.op;
                    d.sector = sector;
                    d.nr_sectors = nr_sectors;
                    d.cookie = bio.cookie;
                    d.submit_cpu = cpu as u16;
                    d.hwq = hwq as u16;
                    d.parent = parent;
                    d.set_segments(segments);
                }
                // No deadline reset, as in `take_request`.
                slot.set_status(Status::Ok);
                slot.set_state(state::QUEUED);
                bump(&at.counters.submitted);
                self.stage_if(at.trace, cpu, index, crate::driver::Stage::Submit);
                self.queue_or_issue(&at, core::slice::from_ref(&index), false);
            },
        );
        bump(&self.counters.cpu(cpu).split_bios);
        Ok(Submitted { hwq, tag: taken[0] })
    }

    /// Like [`Queue::submit`], but when no tag is free it keeps helping the queue make progress
    /// (runs this CPU's completions, polls under `Poll`, reruns queues holding turned-away
    /// requests) and retries, for at most `timeout_ns`.
    ///
    /// With `host_tags`, a waiting queue is registered with the shared set, so that queues
    /// holding their fair share leave freed tags to it (no starvation by a busy sharer).
    pub fn submit_wait(&self, cpu: usize, bio: &Bio<'_>, timeout_ns: u64) -> Result<Submitted, BlkError> {
        let mut started: Option<u64> = None;
        let result = loop {
            match self.submit(cpu, bio) {
                Err(BlkError::TagsExhausted { .. }) => {
                    let now = self.platform.now_ns();
                    match started {
                        None => {
                            bump(&self.counters.cpu(cpu).tag_waits);
                            started = Some(now);
                            self.waiter_enter(cpu, bio);
                        }
                        Some(t0) if now.saturating_sub(t0) > timeout_ns => {
                            break Err(BlkError::WaitTimeout {
                                what: "a free tag",
                                in_flight: self.in_flight(),
                            });
                        }
                        Some(_) => {}
                    }
                    self.make_progress(cpu);
                    spin_loop();
                }
                other => break other,
            }
        };
        if started.is_some() {
            self.waiter_exit(cpu, bio);
        }
        result
    }

    pub(super) fn waiter_enter(&self, cpu: usize, bio: &Bio<'_>) {
        let set = &self.tag_sets[usize::from(self.counters.route(cpu).set)];
        if self.host_shared
            && !bio.reserved_tag
            && self.tag_waiters.fetch_add(1, core::sync::atomic::Ordering::Relaxed) == 0
        {
            set.waiter_enter();
        }
    }

    pub(super) fn waiter_exit(&self, cpu: usize, bio: &Bio<'_>) {
        let set = &self.tag_sets[usize::from(self.counters.route(cpu).set)];
        if self.host_shared
            && !bio.reserved_tag
            && self.tag_waiters.fetch_sub(1, core::sync::atomic::Ordering::Relaxed) == 1
        {
            set.waiter_exit();
        }
    }

    /// Hands new requests (`indices`, in order; one, or a burst of [`Queue::submit_batch`]) to
    /// hardware queue `hwq`. When nothing of this CPU's is waiting and no CPU is dispatching,
    /// it takes the run token and dispatches them directly (Linux's
    /// `blk_mq_try_issue_directly`), skipping the software-queue handoff (a push, a pending
    /// bit, and the dispatcher's two swaps). Otherwise it queues them and runs the queue.
    ///
    /// Order: this CPU's older requests are either on its software queue (then we take the
    /// slow path), or were taken by a dispatcher that has since released the token (they are
    /// dispatched or on the FIFO, ahead of us), since we got the token.
    ///
    /// `defer`: the direct dispatch may leave the doorbell to [`Queue::commit`]
    /// ([`Queue::submit_deferred`]); the queued path always rings it.
    #[inline(always)]
    pub(super) fn queue_or_issue(&self, at: &RunContext<'_>, indices: &[u32], defer: bool) {
        if indices.is_empty() {
            return;
        }
        let (cpu, hwq, hq) = (at.cpu, at.hwq, at.hq);
        debug_assert!(cpu < self.sw_queues.len());
        // SAFETY: only submissions come here, with the context of `submit_context` (which
        // checked `cpu` against the CPU count, the software queues' count) or, for a split's
        // parts, of `run_context` for a CPU that `submit_split` looked up in the CPU blocks
        // (checked).
        let sw = unsafe { self.sw_queues.get_unchecked(cpu) };
        if sw.is_empty()
            && !hq.dispatch_nonempty.load(Ordering::Relaxed)
            // Acquire pairs with the Release that freed the token (as in `dispatch`).
            && hq
                .run_state
                .compare_exchange(0, RUNNING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            if self.run_with_token(at, indices, defer) {
                // Quiesced: they wait on the FIFO. Re-check like an insert does, so that an
                // unquiesce racing with us is not missed.
                self.run_hw_queue(cpu, hwq);
            }
            return;
        }
        for &index in indices {
            self.insert(cpu, hwq, index);
        }
        self.run_hw_queue(cpu, hwq);
    }

    pub(super) fn insert(&self, cpu: usize, hwq: usize, index: u32) {
        if self.sw_queues[cpu].push(index, &self.links) {
            // The software queue went from empty to non-empty: mark it pending. Release pairs
            // with the Acquire swap in `dispatch_once`. (The list push comes first: a
            // dispatcher clears the bit before taking the list, so no push is lost.)
            self.hwqs[hwq].pending[cpu / 64].fetch_or(1 << (cpu % 64), Ordering::Release);
        }
    }

    /// Runs this CPU's completions, polls (under `Poll`) and reruns queues that hold
    /// turned-away requests: what a CPU that waits for the queue should do meanwhile.
    pub fn make_progress(&self, cpu: usize) {
        if cpu >= self.ncpus {
            return;
        }
        self.run_completions(cpu);
        let poll = self.completion_policy() == CompletionPolicy::Poll;
        for hwq in 0..self.hwqs.len() {
            if poll {
                let _ = self.poll(cpu, hwq);
            }
            if self.hwqs[hwq].dispatch_nonempty.load(Ordering::Relaxed) {
                self.run_hw_queue(cpu, hwq);
            }
        }
    }
}
