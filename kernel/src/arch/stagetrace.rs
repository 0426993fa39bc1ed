//! Stage tracing (`trace=N`): TSC timestamps of every stage of 1 in N requests, in per-CPU rings.
//!
//! The block layer reports each stage of each request (`blk::Platform::stage`, only while a
//! queue's tracing is on) with the request's slot index. At `Submit` the submitting CPU decides
//! whether to sample the request (every N-th of its own submissions) and stores a trace id for
//! that slot index (0: not sampled); later stages look the id up and record an event on the CPU
//! they run on. `end_io` hands the id to the submitter's done slot, and the submitter records
//! `Reap` when it takes the completion.
//!
//! Cost and bounds: the rings are allocated once (on first use), each CPU writes only its own
//! ring (a `fetch_add` on its head, then two relaxed stores), nothing is locked, and a full ring
//! drops events (counted) rather than overwrite. Unsampled requests cost one table load per
//! stage. The rings are read only after the job, when every CPU has finished.
//!
//! Limits: a request's slot index may be reused by a new request before a late stage of the old
//! one is recorded (the `Doorbell` after a device that completed inside `queue_rq`); that stage
//! is then attributed to the new request if it was sampled. Indices at or above [`MAX_REQUESTS`]
//! are never sampled.

use crate::arch::percpu::{self, MAX_CPUS};
use crate::arch::time;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Events one CPU's ring holds per job.
pub const RING_EVENTS: usize = 16384;
/// A CPU stops sampling new requests when its ring is this full, so that the requests it did
/// sample keep room for their later stages.
const SAMPLE_LIMIT: usize = RING_EVENTS - RING_EVENTS / 8;
/// Request slot indices that can be sampled.
pub const MAX_REQUESTS: usize = 1 << 16;
/// Submitter slots per CPU (the completion sink's).
const SLOTS_PER_CPU: usize = 256;
/// The `Reap` stage's number (`blk::Stage::Reap`).
const REAP: u8 = 7;
const SUBMIT: u8 = 0;
const END_IO: u8 = 6;

struct Ring {
    head: AtomicUsize,
    /// Two words per event: the time in ns, then `id << 8 | stage`.
    words: Box<[AtomicU64]>,
}

struct Tables {
    rings: Box<[Ring]>,
    /// Trace id per request slot index (0: not sampled).
    ids: Box<[AtomicU32]>,
    /// Trace id per (submitting CPU, done slot), from `end_io` to `Reap`.
    reap_ids: Box<[AtomicU32]>,
    /// Per CPU: the id of the request whose `EndIo` it just recorded (for `end_io`).
    last_end: Box<[AtomicU32]>,
    /// Per CPU: its submissions since tracing started (the sampling counter).
    submits: Box<[AtomicU32]>,
    dropped: AtomicU64,
}

static TABLES: spin::Once<Tables> = spin::Once::new();
/// 1 in this many submissions is sampled; 0 is off.
static EVERY: AtomicU32 = AtomicU32::new(0);

/// The tables, allocated on first use for CPUs `0..ncpus` (the online CPUs; that count does
/// not change after boot).
fn tables(ncpus: usize) -> &'static Tables {
    TABLES.call_once(|| {
        let zeros32 = |n: usize| (0..n).map(|_| AtomicU32::new(0)).collect::<Box<[_]>>();
        Tables {
            rings: (0..ncpus.clamp(1, MAX_CPUS))
                .map(|_| Ring {
                    head: AtomicUsize::new(0),
                    words: (0..RING_EVENTS * 2).map(|_| AtomicU64::new(0)).collect(),
                })
                .collect(),
            ids: zeros32(MAX_REQUESTS),
            reap_ids: zeros32(MAX_CPUS * SLOTS_PER_CPU),
            last_end: zeros32(MAX_CPUS),
            submits: zeros32(MAX_CPUS),
            dropped: AtomicU64::new(0),
        }
    })
}

/// Starts tracing 1 in `every` requests on CPUs `0..ncpus` with empty rings (`every` 0:
/// stops). Called between jobs, while no request is in flight.
pub fn start(every: u32, ncpus: usize) {
    let t = tables(ncpus);
    for r in t.rings.iter() {
        r.head.store(0, Ordering::Relaxed);
    }
    for a in t
        .ids
        .iter()
        .chain(t.reap_ids.iter())
        .chain(t.last_end.iter())
        .chain(t.submits.iter())
    {
        a.store(0, Ordering::Relaxed);
    }
    t.dropped.store(0, Ordering::Relaxed);
    EVERY.store(every, Ordering::Relaxed);
}

/// Stops recording (the rings keep what they hold until the next [`start`]).
pub fn stop() {
    EVERY.store(0, Ordering::Relaxed);
}

fn record(t: &Tables, cpu: usize, id: u32, stage: u8) {
    let Some(ring) = t.rings.get(cpu) else {
        t.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let at = ring.head.fetch_add(1, Ordering::Relaxed);
    if at >= RING_EVENTS {
        t.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    ring.words[2 * at].store(time::now_ns(), Ordering::Relaxed);
    ring.words[2 * at + 1].store(u64::from(id) << 8 | u64::from(stage), Ordering::Relaxed);
}

/// `blk::Platform::stage`: request `request` reached `stage` on this CPU.
pub fn stage(request: u32, stage: u8) {
    let every = EVERY.load(Ordering::Relaxed);
    if every == 0 {
        return;
    }
    let Some(t) = TABLES.get() else { return };
    let cpu = percpu::index();
    let Some(slot) = t.ids.get(request as usize) else {
        return;
    };
    let id = if stage == SUBMIT {
        let Some(count) = t.submits.get(cpu) else { return };
        let n = count.fetch_add(1, Ordering::Relaxed);
        let room = t
            .rings
            .get(cpu)
            .is_some_and(|r| r.head.load(Ordering::Relaxed) < SAMPLE_LIMIT);
        let id = if n % every == 0 && room {
            // Unique per job: the CPU in the top byte, its sample count below (wraps after
            // 16 M samples of one CPU, far beyond what a ring holds).
            ((cpu as u32 & 0xFF) << 24) | ((n / every + 1) & 0x00FF_FFFF)
        } else {
            0
        };
        slot.store(id, Ordering::Relaxed);
        id
    } else {
        slot.load(Ordering::Relaxed)
    };
    if id == 0 {
        return;
    }
    if stage == END_IO
        && let Some(last) = t.last_end.get(cpu)
    {
        last.store(id, Ordering::Relaxed);
    }
    record(t, cpu, id, stage);
}

/// Called from `end_io` right after the `EndIo` stage on this CPU: the request for
/// (`submit_cpu`, `slot`) is done; remember its id for the submitter's `Reap`.
pub fn ended(submit_cpu: usize, slot: usize) {
    if EVERY.load(Ordering::Relaxed) == 0 {
        return;
    }
    let Some(t) = TABLES.get() else { return };
    let Some(last) = t.last_end.get(percpu::index()) else {
        return;
    };
    let id = last.swap(0, Ordering::Relaxed);
    if id != 0 && submit_cpu < MAX_CPUS && slot < SLOTS_PER_CPU {
        t.reap_ids[submit_cpu * SLOTS_PER_CPU + slot].store(id, Ordering::Relaxed);
    }
}

/// The submitter (this CPU, `cpu`) took the completion of its slot `slot`.
pub fn reaped(cpu: usize, slot: usize) {
    if EVERY.load(Ordering::Relaxed) == 0 || cpu >= MAX_CPUS || slot >= SLOTS_PER_CPU {
        return;
    }
    let Some(t) = TABLES.get() else { return };
    let id = t.reap_ids[cpu * SLOTS_PER_CPU + slot].swap(0, Ordering::Relaxed);
    if id != 0 {
        record(t, cpu, id, REAP);
    }
}

/// Measures what recording one event costs on this CPU (ns, averaged over a few hundred),
/// for the report. Call between jobs, before [`start`] (it uses this CPU's ring).
pub fn cost_per_event_ns(ncpus: usize) -> u64 {
    const N: u64 = 512;
    let t = tables(ncpus);
    if percpu::index() >= t.rings.len() {
        return 0;
    }
    let cpu = percpu::index();
    let begin = time::now_ns();
    for i in 0..N {
        record(t, cpu, 1, (i % 8) as u8);
    }
    let ns = time::now_ns().saturating_sub(begin) / N;
    t.rings[cpu].head.store(0, Ordering::Relaxed);
    t.dropped.store(0, Ordering::Relaxed);
    ns
}

/// Every recorded event of CPUs `0..ncpus` as (cpu, ns, id, stage), and the events dropped.
/// Call after [`stop`], when no CPU records any more.
pub fn collect(ncpus: usize) -> (Vec<(u32, u64, u32, u8)>, u64) {
    let Some(t) = TABLES.get() else { return (Vec::new(), 0) };
    let mut out = Vec::new();
    for (cpu, ring) in t.rings.iter().enumerate().take(ncpus.min(MAX_CPUS)) {
        let n = ring.head.load(Ordering::Relaxed).min(RING_EVENTS);
        for i in 0..n {
            let ns = ring.words[2 * i].load(Ordering::Relaxed);
            let tagged = ring.words[2 * i + 1].load(Ordering::Relaxed);
            out.push((cpu as u32, ns, (tagged >> 8) as u32, (tagged & 0xFF) as u8));
        }
    }
    (out, t.dropped.load(Ordering::Relaxed))
}
