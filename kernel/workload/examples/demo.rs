//! The whole flow as the kernel wires it, on the host: parse a command line with several jobs, plan
//! each against the devices, run every CPU on a thread over a RAM disk, print progress from the
//! `periodic` hook of the first CPU, then the report and the JSON line.
//!
//! Run with `cargo run --release -p workload --example demo [-- job words...]`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use workload::{
    Completion, DeviceInfo, IoBackend, IoOp, JobPlan, JobReport, JobShared, ProgressMeter, SubmitError, parse_jobs,
    plan_job, run_cpu,
};

const DEFAULT_JOBS: &str = "device=ram0 bs=4k job=fill rw=write size=32m iodepth=8 verify=crc32c \
    job=mix rw=randrw rwmixread=70 size=32m iodepth=8 runtime=3s verify=crc32c completion=remote \
    job=check rw=randread size=32m iodepth=4 verify=crc32c verify_generation=any";

struct RamBackend<'a> {
    disk: Arc<Mutex<Vec<u8>>>,
    buffers: Vec<Vec<u8>>,
    pending: Vec<(usize, IoOp, usize)>,
    epoch: Instant,
    /// Only the first CPU prints progress.
    progress: Option<(&'a JobShared, ProgressMeter, u64, &'a str)>,
}

impl IoBackend for RamBackend<'_> {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, _sectors: u32) -> Result<(), SubmitError> {
        self.pending.push((slot, op, lba as usize * 512));
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        let count = self.pending.len().min(out.len());
        let mut disk = self.disk.lock().unwrap();
        for (index, (slot, op, at)) in self.pending.drain(..count).enumerate() {
            let buffer = &mut self.buffers[slot];
            let len = buffer.len();
            match op {
                IoOp::Write => disk[at..at + len].copy_from_slice(buffer),
                IoOp::Read => buffer.copy_from_slice(&disk[at..at + len]),
                IoOp::Flush => {}
                IoOp::Trim => disk[at..at + len].fill(0),
            }
            out[index] = Completion::new(slot, Ok(()));
        }
        count
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn periodic(&mut self, now_ns: u64) {
        if let Some((shared, meter, next_line_ns, job)) = &mut self.progress
            && now_ns >= *next_line_ns
        {
            *next_line_ns = now_ns + 1_000_000_000;
            if now_ns > 0 {
                let mut line = String::new();
                meter
                    .write_line(&mut line, job, now_ns, shared.total(), shared.any_verifying())
                    .unwrap();
                print!("{line}");
            }
        }
    }
}

fn run(plan: &JobPlan, disk: &Arc<Mutex<Vec<u8>>>, epoch: Instant) -> JobReport {
    let shared = JobShared::new(plan);
    let start = epoch.elapsed().as_nanos() as u64;
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let shared = &shared;
                scope.spawn(move || {
                    let mut backend = RamBackend {
                        disk: disk.clone(),
                        buffers: (0..plan.iodepth).map(|_| vec![0u8; plan.bs() as usize]).collect(),
                        pending: Vec::with_capacity(plan.iodepth as usize),
                        epoch,
                        progress: (index == 0).then(|| {
                            (
                                shared,
                                ProgressMeter::new(start),
                                start + 1_000_000_000,
                                plan.spec.name.as_str(),
                            )
                        }),
                    };
                    run_cpu(plan, index, &mut backend, shared).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut report = JobReport::new(plan, &results).unwrap();
    // The kernel would add its interrupt, IPI and completion-policy counters here.
    report
        .add_counter("irqs", plan.cpus.iter().map(|_| 0).collect())
        .unwrap();
    report
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words = if args.is_empty() {
        DEFAULT_JOBS.to_string()
    } else {
        args.join(" ")
    };
    let jobs = match parse_jobs(words.split_ascii_whitespace()) {
        Ok(jobs) => jobs,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(2);
        }
    };
    let devices = [DeviceInfo {
        name: "ram0".into(),
        sector_size: 512,
        capacity_sectors: 1 << 17,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }];
    let disk = Arc::new(Mutex::new(vec![0u8; 64 << 20]));
    let epoch = Instant::now();
    let mut all_passed = true;
    for job in &jobs {
        let plan = match plan_job(job, &devices, &[0, 1]) {
            Ok(plan) => plan,
            Err(error) => {
                eprintln!("error: {error}");
                std::process::exit(2);
            }
        };
        for warning in &plan.warnings {
            println!("warning: {warning}");
        }
        let report = run(&plan, &disk, epoch);
        let mut text = String::new();
        report.write_human(&mut text).unwrap();
        report.write_json_line(&mut text).unwrap();
        print!("{text}");
        all_passed &= report.passed();
    }
    std::process::exit(if all_passed { 0 } else { 1 });
}
