//! Host measurements of the engine's own costs (no device): CRC32C throughput, stamping and checking
//! a block, recording a latency, and the engine loop per I/O against a RAM disk that completes
//! everything at once (so each I/O also pays a 4 KiB memcpy).
//!
//! Run with `cargo run --release -p workload --example overhead`.

use std::hint::black_box;
use std::time::Instant;

use workload::crc32c::crc32c;
use workload::verify::{BlockStamp, check_block, fill_block};
use workload::{
    Completion, DeviceInfo, ExpectedGeneration, IoBackend, IoOp, JobShared, LatencyHistogram, SubmitError, VerifyMode,
    parse_jobs, plan_job, run_cpu,
};

fn time_per_iteration(iterations: u64, mut body: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..iterations {
        body(i);
    }
    start.elapsed().as_nanos() as f64 / iterations as f64
}

/// Completes every request on the next poll, moving data to and from a RAM disk.
struct RamBackend {
    buffers: Vec<Vec<u8>>,
    disk: Vec<u8>,
    pending: Vec<(usize, IoOp, usize)>,
    epoch: Instant,
}

impl IoBackend for RamBackend {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, _sectors: u32) -> Result<(), SubmitError> {
        self.pending.push((slot, op, lba as usize * 512));
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        let count = self.pending.len().min(out.len());
        for (index, (slot, op, at)) in self.pending.drain(..count).enumerate() {
            let buffer = &mut self.buffers[slot];
            let len = buffer.len();
            match op {
                IoOp::Write => self.disk[at..at + len].copy_from_slice(buffer),
                IoOp::Read => buffer.copy_from_slice(&self.disk[at..at + len]),
            }
            out[index] = Completion::new(slot, Ok(()));
        }
        count
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

fn main() {
    let block = vec![0xa5u8; 4096];
    let ns = time_per_iteration(100_000, |_| {
        black_box(crc32c(black_box(&block)));
    });
    println!(
        "crc32c (table, slicing by 8): {:.0} ns per 4 KiB = {:.0} MB/s",
        ns,
        4096.0 / ns * 1000.0
    );

    for mode in [VerifyMode::Crc32c, VerifyMode::Pattern] {
        let mut buffer = vec![0u8; 4096];
        let fill = time_per_iteration(100_000, |i| {
            fill_block(
                mode,
                &BlockStamp {
                    lba: i,
                    seed: 1,
                    generation: 1,
                },
                black_box(&mut buffer),
            );
        });
        fill_block(
            mode,
            &BlockStamp {
                lba: 8,
                seed: 1,
                generation: 1,
            },
            &mut buffer,
        );
        let check = time_per_iteration(100_000, |_| {
            black_box(check_block(
                mode,
                8,
                1,
                ExpectedGeneration::Exact(1),
                black_box(&buffer),
            ))
            .unwrap();
        });
        println!(
            "verify={}: stamp {fill:.0} ns, check {check:.0} ns per 4 KiB block",
            mode.as_str()
        );
    }

    let mut histogram = LatencyHistogram::new();
    let ns = time_per_iteration(10_000_000, |i| histogram.record(black_box(i * 7919 % 1_000_000)));
    println!("histogram record: {ns:.1} ns");

    let device = DeviceInfo {
        name: "null0".into(),
        sector_size: 512,
        capacity_sectors: 1 << 17,
        max_iodepth: 256,
        max_transfer_bytes: 1 << 20,
    };
    for words in [
        "rw=randread bs=4k iodepth=32 runtime=1s verify=none",
        "rw=randrw bs=4k iodepth=32 runtime=1s verify=none",
        "rw=randrw bs=4k iodepth=32 size=64m runtime=1s verify=crc32c",
        "rw=randrw bs=4k iodepth=32 size=64m runtime=1s verify=pattern",
    ] {
        let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
        let plan = plan_job(&jobs[0], std::slice::from_ref(&device), &[0]).unwrap();
        let shared = JobShared::new(&plan);
        let mut backend = RamBackend {
            buffers: (0..plan.iodepth).map(|_| vec![0u8; 4096]).collect(),
            disk: vec![0u8; 64 << 20],
            pending: Vec::with_capacity(plan.iodepth as usize),
            epoch: Instant::now(),
        };
        let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
        assert_eq!(result.verify.mismatches, 0);
        let per_io = result.runtime_ns as f64 / result.ios() as f64;
        println!(
            "engine, {words}: {} I/Os in {} ms = {per_io:.0} ns per I/O",
            result.ios(),
            result.runtime_ns / 1_000_000
        );
    }
}
