//! The detail mode on a real (fake-backend) run, and what the fio writers make of it: slat + clat
//! add up to lat for every I/O, samples come every 500 ms of simulated time, depths and reaps are
//! counted, and the text report and log lines carry the measured figures. (The document's shape
//! against real fio output and fio's tools is checked in xtask, which has a full JSON parser.)

mod common;

use common::{FakeBackend, FakeDisk, Order};
use workload::detail::DetailOptions;
use workload::report::{
    FioJob, FioJobMeta, FioLogOptions, FioOutputFormat, FioOutputOptions, write_fio_document, write_fio_text,
};
use workload::{CpuResult, DeviceInfo, JobPlan, JobReport, JobShared, WorkloadError, parse_cmdline, plan_job, run_cpu};

fn run_job(plan: &JobPlan, disk: &FakeDisk, shared: &JobShared, latency_ns: u64) -> Vec<CpuResult> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                scope.spawn(move || {
                    let mut backend =
                        FakeBackend::new(disk, plan.iodepth as usize, plan.bs() as usize).with_order(Order::Shuffled);
                    backend.latency_ns = latency_ns;
                    backend.jitter_ns = latency_ns / 2;
                    run_cpu(plan, index, &mut backend, shared).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn device() -> [DeviceInfo; 1] {
    [DeviceInfo {
        name: "nvme0n1".into(),
        sector_size: 512,
        capacity_sectors: 64 * 1024,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }]
}

fn plan(words: &str) -> JobPlan {
    let jobs = parse_cmdline(words).unwrap();
    plan_job(&jobs[0], &device(), &[0, 1]).unwrap()
}

#[test]
fn detail_mode_measures_slat_clat_samples_depths_and_idle_time() {
    let plan = plan("rw=randrw bs=4k iodepth=8 cpus=0-1 runtime=2200ms size=8m");
    let disk = FakeDisk::new(512, 64 * 1024);
    let shared = JobShared::with_detail(&plan, DetailOptions::default());
    // 2 ms per request: few I/Os, long simulated time.
    let results = run_job(&plan, &disk, &shared, 2_000_000);
    for result in &results {
        let detail = result.detail.as_ref().expect("detail mode was on");
        for (stats, direction) in [(&result.read, &detail.read), (&result.write, &detail.write)] {
            // slat + clat = lat for every I/O, so the sums add up exactly.
            assert_eq!(direction.slat.samples(), stats.latency.samples());
            assert_eq!(direction.clat.samples(), stats.latency.samples());
            assert_eq!(direction.slat.sum() + direction.clat.sum(), stats.latency.sum());
            assert!(direction.slat.min() > 0, "the fake clock moves on every read");
            assert!(direction.clat.min() >= 2_000_000, "the device takes at least 2 ms");
            // One sample per 500 ms (taken at the periodic check, so 500-600 ms apart): 3 or 4 in 2.2 s.
            assert!((3..=4).contains(&direction.samples.len()), "{:?}", direction.samples);
            assert!(direction.log.is_empty(), "no log window without log_avg_msec");
        }
        let submits: u64 = detail.depth_at_submit.iter().sum();
        assert_eq!(submits, result.ios(), "every submission is counted once");
        assert!(detail.depth_at_submit[3] > 0, "depth 8 is reached (bucket 8-15)");
        assert_eq!(detail.completions_per_reap.iter().sum::<u64>(), result.ios());
        assert!(detail.idle_ns > 0 && detail.idle_ns < result.runtime_ns);
    }
    let report = JobReport::new(&plan, &results).unwrap();
    let detail = report.detail.as_ref().unwrap();
    assert_eq!(detail.read_clat.samples(), report.read.ios);
    // Job samples are the CPUs' samples summed: about 8 in flight per CPU every 2-3 ms.
    let first = detail.read_samples[0].iops + detail.write_samples[0].iops;
    let total_iops = report.total.iops;
    assert!(first.abs_diff(total_iops) * 4 < total_iops, "{first} vs {total_iops}");
}

#[test]
fn without_detail_mode_nothing_extra_is_measured() {
    let plan = plan("rw=randread bs=4k iodepth=4 cpus=0 size=1m");
    let disk = FakeDisk::new(512, 64 * 1024);
    let shared = JobShared::new(&plan);
    let results = run_job(&plan, &disk, &shared, 20_000);
    assert!(results.iter().all(|r| r.detail.is_none()));
    assert!(JobReport::new(&plan, &results).unwrap().detail.is_none());
}

#[test]
fn log_windows_become_fio_named_log_rows() {
    let plan = plan("rw=randrw bs=4k iodepth=4 cpus=0-1 runtime=1050ms size=8m");
    let disk = FakeDisk::new(512, 64 * 1024);
    let options = FioOutputOptions {
        logs: FioLogOptions {
            bw: Some("run1".into()),
            lat: Some(String::new()),
            iops: None,
            avg_msec: 500,
        },
        ..FioOutputOptions::default()
    };
    options.validate().unwrap();
    let shared = JobShared::with_detail(&plan, options.detail_options());
    let results = run_job(&plan, &disk, &shared, 1_000_000);
    let report = JobReport::new(&plan, &results).unwrap();
    let lines = common::log_lines_of(&options, &report);
    // Two CPUs (threads 1 and 2), two full windows and a partial one, two directions.
    for thread in [1, 2] {
        for kind in ["run1_bw", "job0_slat", "job0_clat", "job0_lat"] {
            let rows: Vec<&str> = lines
                .lines()
                .filter(|l| l.starts_with(&format!("BAREMQ-LOG: {kind}.{thread}.log: ")))
                .collect();
            assert_eq!(rows.len(), 6, "{kind}.{thread}: {lines}");
            for row in rows {
                let fields: Vec<&str> = row.rsplit(": ").next().unwrap().split(", ").collect();
                assert_eq!(fields.len(), 5, "{row}");
                assert!(fields[2] == "0" || fields[2] == "1");
                assert_eq!(&fields[3..], ["0", "0"]);
                let value: u64 = fields[1].parse().unwrap();
                assert!(value > 0, "{row}");
            }
        }
    }
    assert!(!lines.contains("_iops."), "the IOPS log was not asked for");
    let clat_row = lines.lines().find(|l| l.contains("job0_clat.1.log")).unwrap();
    let clat: u64 = clat_row.split(", ").nth(1).unwrap().parse().unwrap();
    assert!((1_000_000..2_000_000).contains(&clat), "{clat_row}");
}

#[test]
fn output_options_are_checked() {
    let refused = |options: FioOutputOptions| match options.validate() {
        Err(WorkloadError::BadOutputOption { key, .. }) => key,
        other => panic!("{other:?}"),
    };
    let per_io_log = FioOutputOptions {
        logs: FioLogOptions {
            bw: Some("x".into()),
            ..FioLogOptions::default()
        },
        ..FioOutputOptions::default()
    };
    assert_eq!(refused(per_io_log), "log_avg_msec");
    let too_many = FioOutputOptions {
        percentile_list: vec![50_000_000; 21],
        ..FioOutputOptions::default()
    };
    assert_eq!(refused(too_many), "percentile_list");
    let zero = FioOutputOptions {
        percentile_list: vec![0],
        ..FioOutputOptions::default()
    };
    assert_eq!(refused(zero), "percentile_list");
    assert!(FioOutputFormat::parse("terse").is_err());
    assert_eq!(FioOutputFormat::parse("json+").unwrap(), FioOutputFormat::JsonPlus);
    let error = FioOutputFormat::parse("terse").unwrap_err().to_string();
    assert!(error.contains("output-format") && error.contains("terse"), "{error}");
}

#[test]
fn text_report_has_fios_sections_with_measured_figures() {
    let plan = plan("rw=randread bs=4k iodepth=4 cpus=0 runtime=1200ms size=1m");
    let disk = FakeDisk::new(512, 64 * 1024);
    let shared = JobShared::with_detail(&plan, DetailOptions::default());
    let results = run_job(&plan, &disk, &shared, 100_000);
    let report = JobReport::new(&plan, &results).unwrap();
    let meta = FioJobMeta::default();
    let options = FioOutputOptions {
        percentile_list: vec![50_000_000, 99_000_000],
        ..FioOutputOptions::default()
    };
    let mut text = String::new();
    write_fio_text(
        &mut text,
        &options,
        &[FioJob {
            report: &report,
            meta: &meta,
        }],
    )
    .unwrap();
    assert!(text.starts_with("job0: (groupid=0, jobs=1): err= 0: pid=0: "), "{text}");
    assert!(text.contains("\n  read: IOPS="), "{text}");
    assert!(!text.contains("\n  write: "), "{text}");
    assert!(text.contains("\n    slat (nsec): min="), "{text}");
    assert!(text.contains("\n    clat (usec): min="), "{text}");
    assert!(
        text.contains("\n    clat percentiles (usec):\n     | 50.00th=["),
        "{text}"
    );
    assert!(text.contains(" 99.00th=["), "{text}");
    assert!(text.contains("\n   bw (  KiB/s): min="), "{text}");
    assert!(text.contains("\n  IO depths    : 1="), "{text}");
    assert!(
        text.contains(&format!("issued rwts: total={},0,0,0", report.read.ios)),
        "{text}"
    );
    assert!(
        text.contains("\nRun status group 0 (all jobs):\n   READ: bw="),
        "{text}"
    );
    assert!(!text.contains("WRITE: bw="), "{text}");
}

/// Runs the one job of a fio job file as the front-end maps it, on CPUs 0 and 1 in detail mode,
/// and returns its report with what fio's output knows of it.
fn fio_report(job_file: &str) -> (JobReport, FioJobMeta) {
    let run = workload::fio::parse_job_file(job_file, &[]).unwrap();
    let spec = run.jobs[0].to_spec(&device(), &[0, 1]).unwrap();
    let plan = plan_job(&spec, &device(), &[0, 1]).unwrap();
    let disk = FakeDisk::new(512, 64 * 1024);
    let shared = JobShared::with_detail(&plan, DetailOptions::default());
    let results = run_job(&plan, &disk, &shared, 50_000);
    let meta = FioJobMeta {
        job_options: run.jobs[0].options.clone(),
        groupid: run.jobs[0].group,
    };
    (JobReport::new(&plan, &results).unwrap(), meta)
}

const TWO_CLONES: &str = "[pair]\nrw=randread\nbs=4k\nsize=1m\niodepth=4\nnumjobs=2\n";

#[test]
fn clones_without_group_reporting_are_one_fio_entry_each() {
    let (report, meta) = fio_report(TWO_CLONES);
    assert_eq!(
        report.read.ios, 512,
        "two clones of 256 reads, merged in baremq's report"
    );
    assert_eq!(report.clones.len(), 2);
    let options = FioOutputOptions::default();
    let jobs = [FioJob {
        report: &report,
        meta: &meta,
    }];
    let mut document = String::new();
    write_fio_document(&mut document, &options, &jobs).unwrap();
    let json = common::parse_json(&document);
    let entries = json.get("jobs").array();
    assert_eq!(entries.len(), 2, "{document}");
    let mut total = 0;
    for ((entry, clone), cpu) in entries.iter().zip(&report.clones).zip(&report.per_cpu) {
        assert_eq!(entry.get("jobname").str(), "pair");
        assert_eq!(entry.get("groupid").u64(), 0);
        assert_eq!(entry.get("job options").get("numjobs").str(), "2");
        let read = entry.get("read");
        // Each clone reads its 1 MiB once: the entry holds that clone's figures only.
        assert_eq!(read.get("total_ios").u64(), 256);
        assert_eq!(read.get("total_ios").u64(), cpu.ios);
        assert_eq!(read.get("io_bytes").u64(), 1 << 20);
        assert_eq!(read.get("clat_ns").get("N").u64(), 256);
        assert_eq!(read.get("runtime").u64(), cpu.runtime_ns / 1_000_000);
        assert_eq!(entry.get("job_runtime").u64(), clone.runtime_ns / 1_000_000);
        assert_eq!(entry.get("baremq").get("job").get("cpus").array().len(), 1);
        total += read.get("total_ios").u64();
    }
    assert_eq!(total, report.read.ios);
    let mut text = String::new();
    write_fio_text(&mut text, &options, &jobs).unwrap();
    assert_eq!(text.matches("pair: (groupid=0, jobs=1): ").count(), 2, "{text}");
    assert_eq!(text.matches("issued rwts: total=256,0,0,0 ").count(), 2, "{text}");
}

#[test]
fn clones_with_group_reporting_are_one_fio_entry() {
    let (report, meta) = fio_report(&TWO_CLONES.replace("[pair]\n", "[pair]\ngroup_reporting\n"));
    assert!(report.clones.is_empty());
    let options = FioOutputOptions::default();
    let jobs = [FioJob {
        report: &report,
        meta: &meta,
    }];
    let mut document = String::new();
    write_fio_document(&mut document, &options, &jobs).unwrap();
    let json = common::parse_json(&document);
    let entries = json.get("jobs").array();
    assert_eq!(entries.len(), 1, "{document}");
    assert_eq!(entries[0].get("read").get("total_ios").u64(), 512);
    assert_eq!(entries[0].get("read").get("io_bytes").u64(), 2 << 20);
    let mut text = String::new();
    write_fio_text(&mut text, &options, &jobs).unwrap();
    assert!(text.starts_with("pair: (groupid=0, jobs=2): "), "{text}");
}
