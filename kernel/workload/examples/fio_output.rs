//! The fio output of a run, on the host: jobs run with the detail mode on against a simulated
//! device (a fixed latency plus a spread per LBA, on a simulated clock, so the figures do not depend
//! on the machine), then the console lines the kernel prints in fio mode: `BAREMQ-FIO-JSON:` (or
//! the fio text report) and `BAREMQ-LOG:` rows. `xtask/scripts/fio-compat-check.sh` feeds them to
//! fio's own tools.
//!
//! `cargo run -p workload --example fio_output -- [json|json+|normal] [job words...]`

use std::cell::Cell;

use workload::report::{FioJob, FioJobMeta, FioLogOptions, FioOutputFormat, FioOutputOptions};
use workload::{
    Completion, DeviceInfo, IoBackend, IoOp, JobReport, JobShared, SubmitError, parse_jobs, plan_job, run_cpu,
};

const DEFAULT_JOBS: &str = "rw=randread bs=4k cpus=0 runtime=2s \
    job=randread-qd1 iodepth=1 job=randread-qd8 iodepth=8 job=randread-qd32 iodepth=32";

struct SimulatedDevice {
    buffers: Vec<Vec<u8>>,
    clock_ns: Cell<u64>,
    due: Vec<(usize, u64)>,
}

impl IoBackend for SimulatedDevice {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, _op: IoOp, lba: u64, _sectors: u32) -> Result<(), SubmitError> {
        // 60 us plus up to 40 us by LBA: a spread for the percentiles, the same on every run.
        let spread = lba.wrapping_mul(0x9e37_79b9) % 40_000;
        self.due.push((slot, self.clock_ns.get() + 60_000 + spread));
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        let now = self.clock_ns.get();
        let mut count = 0;
        self.due.retain(|&(slot, due)| {
            if due <= now && count < out.len() {
                out[count] = Completion::new(slot, Ok(()));
                count += 1;
                false
            } else {
                true
            }
        });
        count
    }

    fn now_ns(&self) -> u64 {
        // Every clock read costs 200 ns of "CPU time", so slat and busy time are not zero.
        self.clock_ns.set(self.clock_ns.get() + 200);
        self.clock_ns.get()
    }

    fn idle(&mut self, _in_flight: usize) {
        if let Some(next) = self.due.iter().map(|d| d.1).min() {
            self.clock_ns.set(self.clock_ns.get().max(next));
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (format, words) = match args.first().map(String::as_str) {
        Some(name @ ("json" | "json+" | "normal")) => (FioOutputFormat::parse(name).unwrap(), &args[1..]),
        _ => (FioOutputFormat::Json, &args[..]),
    };
    let words: Vec<&str> = if words.is_empty() {
        DEFAULT_JOBS.split_whitespace().collect()
    } else {
        words.iter().map(String::as_str).collect()
    };
    let specs = parse_jobs(words.iter().copied()).unwrap_or_else(|e| panic!("{e}"));
    let device = DeviceInfo {
        name: "nvme0n1".into(),
        sector_size: 512,
        capacity_sectors: 1 << 21,
        max_iodepth: 1024,
        max_transfer_bytes: 1 << 20,
    };
    let mut reports: Vec<JobReport> = Vec::new();
    let mut metas: Vec<FioJobMeta> = Vec::new();
    for spec in &specs {
        let plan = plan_job(spec, std::slice::from_ref(&device), &[0, 1, 2, 3]).unwrap_or_else(|e| panic!("{e}"));
        // Logs named as bench-fio names them, so fio-plot -g finds them.
        let options = FioOutputOptions {
            logs: FioLogOptions {
                bw: Some(String::new()),
                lat: Some(String::new()),
                iops: Some(String::new()),
                avg_msec: 500,
            },
            ..FioOutputOptions::default()
        };
        let shared = JobShared::with_detail(&plan, options.detail_options());
        let results: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let mut device = SimulatedDevice {
                    buffers: (0..plan.iodepth).map(|_| vec![0u8; plan.bs() as usize]).collect(),
                    clock_ns: Cell::new(1_000_000),
                    due: Vec::new(),
                };
                run_cpu(&plan, index, &mut device, &shared).unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        reports.push(JobReport::new(&plan, &results).unwrap());
        metas.push(FioJobMeta::default());
    }
    let jobs: Vec<FioJob<'_>> = reports
        .iter()
        .zip(&metas)
        .map(|(report, meta)| FioJob { report, meta })
        .collect();
    let prefixes: Vec<String> = reports
        .iter()
        .map(|r| alloc_prefix(r.plan.spec.rw.as_str(), r.plan.iodepth, r.plan.cpus.len()))
        .collect();
    let mut out = String::new();
    let options = FioOutputOptions {
        output_format: format,
        ..FioOutputOptions::default()
    };
    match format {
        FioOutputFormat::Normal => workload::report::write_fio_text(&mut out, &options, &jobs).unwrap(),
        _ => workload::report::write_fio_json_line(&mut out, &options, &jobs).unwrap(),
    }
    // One log prefix per job: write each job's rows with its own options.
    for (index, job) in jobs.iter().enumerate() {
        let prefix = Some(prefixes[index].clone());
        let log_options = FioOutputOptions {
            logs: FioLogOptions {
                bw: prefix.clone(),
                lat: prefix.clone(),
                iops: prefix,
                avg_msec: 500,
            },
            ..FioOutputOptions::default()
        };
        workload::report::write_log_lines(&mut out, &log_options, std::slice::from_ref(job)).unwrap();
    }
    print!("{out}");
}

/// bench-fio's log prefix: `<rw>-iodepth-<d>-numjobs-<n>`.
fn alloc_prefix(rw: &str, iodepth: u32, numjobs: usize) -> String {
    format!("{rw}-iodepth-{iodepth}-numjobs-{numjobs}")
}
