//! Request descriptions (what a submitter asks for) and the preallocated per-tag request slots.

use crate::sync::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use alloc::boxed::Box;
use alloc::vec;
use core::cell::UnsafeCell;

/// Bytes per sector: the block layer counts in 512-byte sectors, like Linux.
pub const SECTOR_SIZE: u32 = 512;

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read `nr_sectors` from `sector` into the segments.
    Read,
    /// Write the segments to `nr_sectors` from `sector`.
    Write,
    /// Flush the device's volatile cache; carries no data.
    Flush,
    /// Tell the device that `nr_sectors` from `sector` hold no data any more (NVMe Dataset
    /// Management deallocate, ATA TRIM, Linux's `REQ_OP_DISCARD`): a range, no data buffer.
    /// Only for a queue with [`crate::QueueConfig::max_discard_sectors`] above zero.
    Discard,
    /// A driver-defined command (for MegaRAID: a DCMD/admin frame). The block layer does not
    /// bounds-check it; the code is passed to the driver untouched.
    Driver(u32),
}

/// One scatter-gather element of DMA memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Physical (bus) address the device uses.
    pub phys: u64,
    /// Length in bytes.
    pub len: u32,
    virt: *mut u8,
}

// SAFETY: a Segment is a description of memory, not an access to it. The only dereference of
// `virt` happens in code that relies on the contract of `Segment::with_virt`, which the creator
// promised holds for whichever thread performs the I/O.
unsafe impl Send for Segment {}
// SAFETY: as above; shared references to a Segment only read its three plain fields.
unsafe impl Sync for Segment {}

impl Segment {
    /// A segment the device reaches by physical address only (no CPU mapping is given, so a
    /// memory-backed null device will not copy data for it).
    pub const fn new(phys: u64, len: u32) -> Self {
        Self {
            phys,
            len,
            virt: core::ptr::null_mut(),
        }
    }

    /// A segment that also carries its CPU mapping, so that a software device (null, ramdisk)
    /// can copy data.
    ///
    /// # Safety
    /// From submission until the request's completion is reported through
    /// [`crate::Platform::end_io`], `virt..virt + len` must be valid for reads and writes, and
    /// nothing else may access it (the device owns the buffer while the I/O is in flight).
    pub const unsafe fn with_virt(phys: u64, virt: *mut u8, len: u32) -> Self {
        Self { phys, len, virt }
    }

    /// The CPU mapping, if one was given. Dereferencing it is sound only under the contract of
    /// [`Segment::with_virt`].
    pub fn virt(&self) -> Option<*mut u8> {
        (!self.virt.is_null()).then_some(self.virt)
    }

    /// `len` bytes of this segment from `offset` (for splitting a request): the same memory,
    /// CPU mapping included. `offset + len` must not pass the segment's end.
    pub fn slice(&self, offset: u32, len: u32) -> Self {
        debug_assert!(u64::from(offset) + u64::from(len) <= u64::from(self.len));
        Self {
            phys: self.phys + u64::from(offset),
            len,
            // `wrapping_add`: no dereference happens here; the mapping stays valid under the
            // contract of `with_virt` for every byte of the original segment.
            virt: if self.virt.is_null() {
                self.virt
            } else {
                self.virt.wrapping_add(offset as usize)
            },
        }
    }

    pub(crate) const EMPTY: Self = Self::new(0, 0);
}

/// A block I/O as the submitter describes it. The block layer copies it into a preallocated
/// request, so the borrowed segment list need only live for the `submit` call (the memory the
/// segments point to is another matter, see [`Segment::with_virt`]).
#[derive(Debug, Clone, Copy)]
pub struct Bio<'a> {
    /// Operation.
    pub op: Op,
    /// First 512-byte sector.
    pub sector: u64,
    /// Length in 512-byte sectors (0 for a flush).
    pub nr_sectors: u32,
    /// Scatter-gather list; the lengths must add up to `nr_sectors * 512` (may be empty for a
    /// flush or a driver command).
    pub segments: &'a [Segment],
    /// Opaque value handed back in the [`Completion`].
    pub cookie: u64,
    /// Take the tag from the reserved (admin) pool.
    pub reserved_tag: bool,
}

impl<'a> Bio<'a> {
    /// A read of `nr_sectors` at `sector` into `segments`.
    pub fn read(sector: u64, nr_sectors: u32, segments: &'a [Segment], cookie: u64) -> Self {
        Self {
            op: Op::Read,
            sector,
            nr_sectors,
            segments,
            cookie,
            reserved_tag: false,
        }
    }

    /// A write of `segments` to `nr_sectors` at `sector`.
    pub fn write(sector: u64, nr_sectors: u32, segments: &'a [Segment], cookie: u64) -> Self {
        Self {
            op: Op::Write,
            ..Self::read(sector, nr_sectors, segments, cookie)
        }
    }

    /// A discard (trim) of `nr_sectors` at `sector`: no segments.
    pub fn discard(sector: u64, nr_sectors: u32, cookie: u64) -> Self {
        Self {
            op: Op::Discard,
            ..Self::read(sector, nr_sectors, &[], cookie)
        }
    }

    /// A cache flush.
    pub fn flush(cookie: u64) -> Self {
        Self {
            op: Op::Flush,
            ..Self::read(0, 0, &[], cookie)
        }
    }
}

/// Outcome of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// The device reported an I/O error.
    IoError = 1,
    /// The request timed out and the driver gave up on it.
    Timeout = 2,
    /// The device does not support the operation.
    NotSupported = 3,
    /// The driver aborted the request (reset, shutdown).
    Aborted = 4,
}

impl Status {
    /// Decodes the `repr(u8)` value (unknown values read as `Aborted`).
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Ok,
            1 => Self::IoError,
            2 => Self::Timeout,
            3 => Self::NotSupported,
            _ => Self::Aborted,
        }
    }

    /// Whether this is [`Status::Ok`].
    pub fn is_ok(self) -> bool {
        self == Self::Ok
    }
}

/// A done board stores a status as its `repr(u8)` value.
impl done::Outcome for Status {
    const SUCCESS: Self = Self::Ok;

    fn to_code(self) -> u8 {
        self as u8
    }

    fn from_code(code: u8) -> Self {
        Self::from_u8(code)
    }
}

/// What the block layer reports for each finished request through [`crate::Platform::end_io`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The submitter's cookie.
    pub cookie: u64,
    /// Operation.
    pub op: Op,
    /// First sector.
    pub sector: u64,
    /// Length in sectors.
    pub nr_sectors: u32,
    /// Final status.
    pub status: Status,
    /// Hardware queue the request went through.
    pub hwq: u16,
    /// Tag it held.
    pub tag: u32,
    /// CPU that submitted it.
    pub submit_cpu: u16,
    /// CPU on which it completed.
    pub complete_cpu: u16,
}

/// What the driver gets back from [`crate::Rq::issue`] and hands to [`crate::Queue::complete`]:
/// the tag plus the generation of this particular issue of it.
///
/// Every issue of a request slot bumps the slot's 16-bit generation, so a completion that the
/// device reports for an earlier issue of the same tag (a late completion after a timeout, a
/// stale context read from a reply queue) no longer matches and is refused as stale instead of
/// finishing whoever holds the tag now. Tags are below 65536 (queue creation refuses deeper
/// tag sets), so a token fits in 32 bits ([`IssueToken::to_bits`]), which is what a driver
/// typically puts in the device's command context and reads back from its reply.
///
/// Generations wrap after 65536 issues of one slot; a completion stale by exactly a multiple of
/// 65536 issues cannot be told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IssueToken {
    bits: u32,
}

impl IssueToken {
    /// The token of issue `generation` of `tag`. `tag` must be below 65536 (only the low 16 bits
    /// are kept).
    pub const fn new(tag: u32, generation: u16) -> Self {
        Self {
            bits: ((generation as u32) << 16) | (tag & 0xFFFF),
        }
    }
    /// The tag (for MegaRAID, the firmware context).
    pub const fn tag(self) -> u32 {
        self.bits & 0xFFFF
    }
    /// Which issue of the tag this is.
    pub const fn generation(self) -> u16 {
        (self.bits >> 16) as u16
    }
    /// `generation << 16 | tag`: lossless, see [`IssueToken::from_bits`].
    pub const fn to_bits(self) -> u32 {
        self.bits
    }
    /// The token whose [`IssueToken::to_bits`] is `bits` (any value decodes; a bogus one is
    /// refused by [`crate::Queue::complete`]).
    pub const fn from_bits(bits: u32) -> Self {
        Self { bits }
    }
}

/// Request slot states. The state says who owns the slot's data; every transition out of a
/// state is made by its owner, or by a CAS that claims ownership.
///
/// The state shares one atomic word with the slot's generation (`generation << 16 | state`;
/// bits 8..16 carry a claim recorded during a timeout, see `pack_late`),
/// so a CAS that claims an issued request also checks that it is the issue the claimer means:
/// no ABA between "load the generation" and "claim the slot".
pub(crate) mod state {
    /// Tag free; nobody owns the slot.
    pub const FREE: u8 = 0;
    /// Owned by the block layer: being filled, on a software queue or a dispatch list.
    pub const QUEUED: u8 = 1;
    /// Owned by the driver through an `Rq` handle.
    pub const DRIVER: u8 = 2;
    /// Issued to the hardware; the next owner is whoever claims it by CAS (completion or
    /// timeout).
    pub const ISSUED: u8 = 3;
    /// Completion claimed; on a completion list or being finished.
    pub const COMPLETING: u8 = 4;
    /// The timeout handler owns it.
    pub const TIMEOUT: u8 = 5;
    /// A completion or requeue arrived while the timeout handler ran; the handler's context
    /// applies it.
    pub const TIMEOUT_COMPLETED: u8 = 6;

    /// The slot word for `state` at `generation`.
    #[inline]
    pub const fn pack(generation: u16, state: u8) -> u32 {
        ((generation as u32) << 16) | state as u32
    }

    /// `late` in bits 8..16 of a TIMEOUT_COMPLETED word: the status of a completion, or
    /// [`LATE_REQUEUE`], that arrived while the timeout handler ran.
    #[inline]
    pub const fn pack_late(generation: u16, late: u8) -> u32 {
        pack(generation, TIMEOUT_COMPLETED) | (late as u32) << 8
    }

    /// The recorded claim of a TIMEOUT_COMPLETED word.
    #[inline]
    pub const fn late(word: u32) -> u8 {
        (word >> 8) as u8
    }

    /// A `requeue` (not a completion) arrived while the timeout handler ran.
    pub const LATE_REQUEUE: u8 = 0xFF;

    /// The state part of a slot word.
    #[inline]
    pub const fn of(word: u32) -> u8 {
        word as u8
    }

    /// The generation part of a slot word.
    #[inline]
    pub const fn generation(word: u32) -> u16 {
        (word >> 16) as u16
    }

    pub fn name(s: u8) -> &'static str {
        match s {
            FREE => "free",
            QUEUED => "queued",
            DRIVER => "owned by driver",
            ISSUED => "issued",
            COMPLETING => "completing",
            TIMEOUT => "timing out",
            TIMEOUT_COMPLETED => "completed during timeout",
            _ => "invalid",
        }
    }
}

/// The owner-only part of a request slot.
pub(crate) struct SlotData<P> {
    pub op: Op,
    pub sector: u64,
    pub nr_sectors: u32,
    pub cookie: u64,
    pub submit_cpu: u16,
    pub hwq: u16,
    pub tag: u32,
    /// The tag set the slot belongs to (fixed: slot `set * depth + tag`), so that ending a
    /// request needs no lookup of its hardware queue's set.
    pub set: u16,
    /// Segment count: 1 means the one segment is `first_segment`, any other count that the
    /// segments are the first ones of `segments`.
    pub nr_segments: u16,
    /// The segment of a single-segment request, kept in the slot itself: the common I/O
    /// stores and reads it without following the pointer to `segments`.
    pub first_segment: Segment,
    /// `max_segments` segments, for requests of more than one.
    pub segments: Box<[Segment]>,
    /// The split bio this request is a part of ([`crate::split::NO_PARENT`]: none).
    pub parent: u32,
    pub pdu: P,
}

impl<P> SlotData<P> {
    /// Stores a request's segments (at most `max_segments`).
    #[inline(always)]
    pub fn set_segments(&mut self, segments: &[Segment]) {
        self.nr_segments = segments.len() as u16;
        if let [only] = segments {
            self.first_segment = *only;
        } else {
            self.segments[..segments.len()].copy_from_slice(segments);
        }
    }

    /// The request's segments, as [`SlotData::set_segments`] stored them.
    #[inline(always)]
    pub fn segments(&self) -> &[Segment] {
        if self.nr_segments == 1 {
            core::slice::from_ref(&self.first_segment)
        } else {
            &self.segments[..usize::from(self.nr_segments)]
        }
    }
}

/// One preallocated request. Aligned to a cache line: neighbouring requests, which different
/// CPUs own at once, share no line, and the null device's 80 bytes round up to 128, a power of
/// two, so that finding a slot by index is a shift.
#[repr(align(64))]
pub(crate) struct Slot<P> {
    /// `generation << 16 | state` (see [`state`]).
    pub word: AtomicU32,
    pub status: AtomicU8,
    /// Absolute deadline in ns (0: none). Read by the timeout scan without owning the slot.
    pub deadline: AtomicU64,
    data: UnsafeCell<SlotData<P>>,
}

// SAFETY: `data` is only accessed by the slot's current owner as defined by `state` (see
// `state`); ownership moves between threads through atomic transitions with Acquire/Release
// ordering, so the data is never accessed concurrently. `P: Send` because the driver data moves
// between the threads that own the slot in turn.
unsafe impl<P: Send> Sync for Slot<P> {}

impl<P> Slot<P> {
    pub fn new(max_segments: usize, tag: u32, set: u16, pdu: P) -> Self {
        Self {
            word: AtomicU32::new(state::pack(0, state::FREE)),
            status: AtomicU8::new(Status::Ok as u8),
            deadline: AtomicU64::new(0),
            data: UnsafeCell::new(SlotData {
                op: Op::Read,
                sector: 0,
                nr_sectors: 0,
                cookie: 0,
                submit_cpu: 0,
                hwq: set,
                tag,
                set,
                nr_segments: 0,
                first_segment: Segment::EMPTY,
                segments: vec![Segment::EMPTY; max_segments].into_boxed_slice(),
                parent: crate::split::NO_PARENT,
                pdu,
            }),
        }
    }

    /// Shared access to the data.
    ///
    /// # Safety
    /// The caller owns the slot (per `state`) or otherwise knows that no `&mut` to the data
    /// exists for the lifetime of the returned reference.
    #[inline]
    pub unsafe fn data(&self) -> &SlotData<P> {
        // SAFETY: guaranteed by the caller.
        unsafe { &*self.data.get() }
    }

    /// Exclusive access to the data.
    ///
    /// # Safety
    /// The caller owns the slot (per `state`) and holds no other reference to the data.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn data_mut(&self) -> &mut SlotData<P> {
        // SAFETY: guaranteed by the caller.
        unsafe { &mut *self.data.get() }
    }

    /// Moves an owned slot to `new`, keeping its generation. Only the slot's owner calls this:
    /// while a slot is neither ISSUED nor TIMEOUT, nobody else writes its word (claims are CASes
    /// that expect those two states), so the load sees the latest generation.
    #[inline]
    pub fn set_state(&self, new: u8) {
        let w = self.word.load(Ordering::Relaxed);
        self.word
            .store(state::pack(state::generation(w), new), Ordering::Relaxed);
    }

    /// [`Slot::set_state`] of an owned slot known to be in state `from`: the word moves by the
    /// difference, with no mask (a slot word out of TIMEOUT_COMPLETED has no claim bits).
    #[inline]
    pub fn move_state(&self, from: u8, to: u8) {
        let w = self.word.load(Ordering::Relaxed);
        debug_assert_eq!(w & 0xffff, u32::from(from), "slot not in the state it leaves");
        self.word.store(
            w.wrapping_sub(u32::from(from)).wrapping_add(u32::from(to)),
            Ordering::Relaxed,
        );
    }

    pub fn status(&self) -> Status {
        Status::from_u8(self.status.load(Ordering::Relaxed))
    }

    pub fn set_status(&self, s: Status) {
        self.status.store(s as u8, Ordering::Relaxed);
    }
}
