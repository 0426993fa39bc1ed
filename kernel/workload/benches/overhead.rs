//! Host measurements of the engine's own costs (no device): CRC32C throughput (table vs the SSE4.2
//! instruction), stamping and checking a block, recording a latency, and the engine loop per I/O
//! against an in-memory backend that completes every request on the next poll (zero latency).
//!
//! Run with `cargo bench -p workload` (prints figures; nothing passes or fails). Each figure is the
//! best of a few rounds, which filters out interference from other processes on a shared machine.

use std::hint::black_box;
use std::time::Instant;

use workload::crc32c::{Crc32cImpl, available, crc32c_with, selected};
use workload::verify::{BlockStamp, check_block, fill_block};
use workload::{
    Completion, DeviceInfo, ExpectedGeneration, IoBackend, IoOp, JobShared, LatencyHistogram, SubmitError, VerifyMode,
    parse_jobs, plan_job, run_cpu,
};

const ROUNDS: usize = 5;

/// Best-of-[`ROUNDS`] time per iteration, in ns.
fn ns_per_iteration(iterations: u64, mut body: impl FnMut(u64)) -> f64 {
    (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for i in 0..iterations {
                body(i);
            }
            start.elapsed().as_nanos() as f64 / iterations as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Completes every request on the next poll. Moves data to and from a RAM disk only when `copy` is
/// set (verify jobs need it; for `verify=none` the copy would only measure memcpy).
struct RamBackend {
    buffers: Vec<Vec<u8>>,
    disk: Vec<u8>,
    pending: Vec<(usize, IoOp, usize)>,
    copy: bool,
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
            if self.copy {
                let buffer = &mut self.buffers[slot];
                let len = buffer.len();
                match op {
                    IoOp::Write => self.disk[at..at + len].copy_from_slice(buffer),
                    IoOp::Read => buffer.copy_from_slice(&self.disk[at..at + len]),
                    IoOp::Flush => {}
                    IoOp::Trim => self.disk[at..at + len].fill(0),
                }
            }
            out[index] = Completion::new(slot, Ok(()));
        }
        count
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

fn crc_figures() {
    println!("CRC32C (selected on this CPU: {})", selected().as_str());
    for len in [512usize, 4096, 65536] {
        let block: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
        let iterations = (64 << 20) as u64 / len as u64;
        let mut line = format!("  {len:>6} B:");
        for implementation in [Crc32cImpl::Table, Crc32cImpl::Sse42] {
            if !available(implementation) {
                line += &format!("  {}: not on this CPU", implementation.as_str());
                continue;
            }
            let ns = ns_per_iteration(iterations, |_| {
                black_box(crc32c_with(implementation, black_box(&block)));
            });
            line += &format!(
                "  {} {:>6.0} MB/s ({ns:.0} ns)",
                implementation.as_str(),
                len as f64 / ns * 1000.0
            );
        }
        println!("{line}");
    }
}

fn block_figures() {
    for mode in [VerifyMode::Crc32c, VerifyMode::Pattern] {
        let mut buffer = vec![0u8; 4096];
        let fill = ns_per_iteration(100_000, |i| {
            let stamp = BlockStamp {
                lba: i,
                seed: 1,
                generation: 1,
            };
            fill_block(mode, &stamp, black_box(&mut buffer));
        });
        let stamp = BlockStamp {
            lba: 8,
            seed: 1,
            generation: 1,
        };
        fill_block(mode, &stamp, &mut buffer);
        let check = ns_per_iteration(100_000, |_| {
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
    let mut disk = vec![0u8; 1 << 20];
    let buffer = vec![1u8; 4096];
    let copy = ns_per_iteration(1_000_000, |i| {
        let at = (i as usize * 4096) % disk.len();
        disk[at..at + 4096].copy_from_slice(black_box(&buffer));
        black_box(&mut disk);
    });
    println!("memcpy of 4 KiB (the RAM backend's cost per verified I/O): {copy:.0} ns");
    let mut histogram = LatencyHistogram::new();
    let ns = ns_per_iteration(10_000_000, |i| histogram.record(black_box(i * 7919 % 1_000_000)));
    println!("histogram record: {ns:.1} ns");
}

fn engine_figures(filters: &[String]) {
    let device = DeviceInfo {
        name: "null0".into(),
        sector_size: 512,
        capacity_sectors: 1 << 17,
        max_iodepth: 256,
        max_transfer_bytes: 1 << 20,
    };
    // A 1 MiB region keeps the RAM disk in cache, so the figures are the engine's, not DRAM's.
    println!("engine loop against a zero-latency RAM backend, one CPU, 4 KiB, iodepth 32, 1 MiB region:");
    for words in [
        "rw=randread verify=none",
        "rw=randread verify=none +detail",
        "rw=randrw verify=none",
        "rw=randrw verify=none +detail",
        "rw=randread verify=crc32c verify_generation=any",
        "rw=randrw verify=crc32c",
        "rw=randread verify=pattern verify_generation=any",
        "rw=randrw verify=pattern",
    ]
    .into_iter()
    .filter(|words| filters.iter().all(|f| words.contains(f.as_str())))
    {
        // `+detail`: the detail mode fio's output needs (a second clock read per I/O, slat/clat).
        let detail = words.ends_with(" +detail");
        let job_words = words.trim_end_matches(" +detail");
        let jobs =
            parse_jobs(format!("bs=4k iodepth=32 size=1m runtime=300ms {job_words}").split_ascii_whitespace()).unwrap();
        let plan = plan_job(&jobs[0], std::slice::from_ref(&device), &[0]).unwrap();
        let verifies = plan.spec.verify.is_enabled();
        let mut best = f64::INFINITY;
        let mut ios = 0;
        for _ in 0..3 {
            let shared = if detail {
                JobShared::with_detail(&plan, workload::DetailOptions::default())
            } else {
                JobShared::new(&plan)
            };
            let mut backend = RamBackend {
                buffers: (0..plan.iodepth).map(|_| vec![0u8; 4096]).collect(),
                disk: vec![0u8; 1 << 20],
                pending: Vec::with_capacity(plan.iodepth as usize),
                copy: verifies,
                epoch: Instant::now(),
            };
            if verifies && plan.spec.rw == workload::RwMode::RandRead {
                // A read-only verify job needs a stamped disk: stamp it as generation 1.
                for (block, chunk) in backend.disk.chunks_exact_mut(4096).enumerate() {
                    let stamp = BlockStamp {
                        lba: block as u64 * 8,
                        seed: plan.spec.seed,
                        generation: 1,
                    };
                    fill_block(plan.spec.verify, &stamp, chunk);
                }
            }
            let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
            assert_eq!(result.verify.mismatches, 0);
            assert_eq!(result.errors, 0);
            ios = result.ios();
            best = best.min(result.runtime_ns as f64 / result.ios() as f64);
        }
        println!(
            "  {words:<48} {best:>5.0} ns per I/O ({ios} I/Os{})",
            if verifies { ", includes the 4 KiB memcpy" } else { "" }
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too, so keep that quick.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    // Other words select engine jobs (e.g. `cargo bench -p workload -- randread crc32c`, for perf).
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if filters.is_empty() {
        crc_figures();
        block_figures();
    }
    engine_figures(&filters);
}
