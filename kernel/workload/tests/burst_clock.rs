//! The engine reads the clock once per submission burst, not once per submission: every I/O of a
//! burst starts at the burst's reading (docs/bench.md, *Latency with one clock read per burst*).
//!
//! The backend's clock advances one tick per read and nothing else, and every submission completes
//! on the next poll. One round is then: the burst's reading, the submissions, the reap's reading. So
//! every latency is exactly one tick; with one reading per submission the first I/O of a burst of
//! eight would read eight ticks.

use std::cell::Cell;

use workload::{Completion, DeviceInfo, IoBackend, IoOp, JobShared, SubmitError, parse_jobs, plan_job, run_cpu};

const TICK_NS: u64 = 1_000;

struct TickingBackend {
    buffers: Vec<Vec<u8>>,
    pending: Vec<usize>,
    clock: Cell<u64>,
    reads: Cell<u64>,
    submissions: u64,
}

impl IoBackend for TickingBackend {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, _op: IoOp, _lba: u64, _sectors: u32) -> Result<(), SubmitError> {
        self.pending.push(slot);
        self.submissions += 1;
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        let count = self.pending.len().min(out.len());
        for (index, slot) in self.pending.drain(..count).enumerate() {
            out[index] = Completion::new(slot, Ok(()));
        }
        count
    }

    fn now_ns(&self) -> u64 {
        self.reads.set(self.reads.get() + 1);
        self.clock.set(self.clock.get() + TICK_NS);
        self.clock.get()
    }
}

#[test]
fn a_burst_shares_one_clock_read_and_latency_stays_one_tick() {
    let device = DeviceInfo {
        name: "ticking".into(),
        sector_size: 512,
        capacity_sectors: 8192,
        max_iodepth: 8,
        max_transfer_bytes: 1 << 16,
    };
    let jobs = parse_jobs("rw=randread bs=4k iodepth=8 size=1m".split_ascii_whitespace()).unwrap();
    let plan = plan_job(&jobs[0], &[device], &[0]).unwrap();
    let shared = JobShared::new(&plan);
    let mut backend = TickingBackend {
        buffers: (0..8).map(|_| vec![0u8; 4096]).collect(),
        pending: Vec::with_capacity(8),
        clock: Cell::new(0),
        reads: Cell::new(0),
        submissions: 0,
    };
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    let ios = result.read.ios;
    assert_eq!(ios, 256, "1 MiB of 4 KiB reads");
    assert_eq!(backend.submissions, ios);
    let latency = &result.read.latency;
    assert_eq!(latency.samples(), ios);
    assert_eq!(
        (latency.min(), latency.max()),
        (TICK_NS, TICK_NS),
        "every I/O of a burst starts at the burst's clock read"
    );
    // 32 bursts of 8: per burst one read to start it and one to stamp its reap, far fewer than one
    // per I/O (the rest is the job's start and end).
    assert!(
        backend.reads.get() < ios,
        "{} clock reads for {ios} I/Os",
        backend.reads.get()
    );
}
