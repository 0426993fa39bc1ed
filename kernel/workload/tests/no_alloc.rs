//! The engine allocates only when a CPU starts and finishes, never per I/O: a run with ten times
//! more I/Os makes exactly as many allocations.
//!
//! This file is its own test binary with a counting global allocator. Allocations are counted per
//! thread, so the test harness's own threads do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use workload::{Completion, DeviceInfo, IoBackend, IoOp, JobShared, SubmitError, parse_jobs, plan_job, run_cpu};

struct CountingAllocator;

thread_local! {
    // Const-initialised with no destructor, so touching it from the allocator never allocates.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_allocation() {
    // `try_with` because the allocator may run while a thread's locals are being torn down.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

fn allocations_so_far() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards every call unchanged to the system allocator, only counting.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout, per the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract, which we pass on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// A backend that completes everything on the next poll, in a fixed ring, allocating nothing.
struct RingBackend {
    buffers: Vec<Vec<u8>>,
    disk: Vec<u8>,
    pending: Vec<(usize, IoOp, usize)>,
    clock: std::cell::Cell<u64>,
}

impl IoBackend for RingBackend {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError> {
        assert!(self.pending.len() < self.pending.capacity());
        let at = lba as usize * 512;
        assert!(at + sectors as usize * 512 <= self.disk.len());
        self.pending.push((slot, op, at));
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        let count = self.pending.len().min(out.len());
        for (index, (slot, op, at)) in self.pending.drain(..count).enumerate() {
            let len = self.buffers[slot].len();
            match op {
                IoOp::Write => self.disk[at..at + len].copy_from_slice(&self.buffers[slot]),
                IoOp::Read => self.buffers[slot].copy_from_slice(&self.disk[at..at + len]),
                IoOp::Flush => {}
                IoOp::Trim => self.disk[at..at + len].fill(0),
            }
            out[index] = Completion::new(slot, Ok(()));
        }
        count
    }

    fn now_ns(&self) -> u64 {
        self.clock.set(self.clock.get() + 250);
        self.clock.get()
    }
}

fn allocations_for(words: &str) -> (u64, u64) {
    let device = DeviceInfo {
        name: "ram".into(),
        sector_size: 512,
        capacity_sectors: 8192,
        max_iodepth: 8,
        max_transfer_bytes: 1 << 16,
    };
    let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
    let plan = plan_job(&jobs[0], &[device], &[0]).unwrap();
    let shared = JobShared::new(&plan);
    let mut backend = RingBackend {
        buffers: (0..8).map(|_| vec![0u8; 4096]).collect(),
        disk: vec![0u8; 8192 * 512],
        pending: Vec::with_capacity(8),
        clock: std::cell::Cell::new(0),
    };
    let before = allocations_so_far();
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    let after = allocations_so_far();
    assert_eq!(result.verify.mismatches, 0);
    (after - before, result.ios() + result.verify.pass_reads)
}

#[test]
fn io_count_does_not_change_allocation_count() {
    for verify in ["none", "crc32c", "pattern"] {
        let short = allocations_for(&format!(
            "rw=randrw bs=4k iodepth=8 size=1m runtime=1ms verify={verify}"
        ));
        let long = allocations_for(&format!(
            "rw=randrw bs=4k iodepth=8 size=1m runtime=10ms verify={verify}"
        ));
        assert!(
            long.1 > 5 * short.1,
            "the long run must do many more I/Os: {short:?} {long:?}"
        );
        assert_eq!(
            short.0, long.0,
            "verify={verify}: allocations depend on I/O count: {short:?} vs {long:?}"
        );
    }
}
