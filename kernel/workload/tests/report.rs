//! The human report and the JSON line of a real (fake-backend) run: fields present and consistent.

mod common;

use common::{FakeBackend, FakeDisk, Json, Order, parse_json};
use workload::{
    CpuResult, DeviceInfo, JSON_PREFIX, JobPlan, JobReport, JobShared, ProgressMeter, parse_cmdline, plan_job, run_cpu,
};

fn run_job(plan: &JobPlan, disk: &FakeDisk) -> (Vec<CpuResult>, JobShared) {
    let shared = JobShared::new(plan);
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let shared = &shared;
                scope.spawn(move || {
                    let mut backend =
                        FakeBackend::new(disk, plan.iodepth as usize, plan.bs() as usize).with_order(Order::Shuffled);
                    backend.jitter_ns = 30_000;
                    run_cpu(plan, index, &mut backend, shared).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (results, shared)
}

fn devices() -> [DeviceInfo; 2] {
    [
        DeviceInfo {
            name: "md0".into(),
            sector_size: 512,
            capacity_sectors: 32 * 1024,
            max_iodepth: 16,
            max_transfer_bytes: 1 << 20,
        },
        DeviceInfo {
            name: "null0".into(),
            sector_size: 512,
            capacity_sectors: 1 << 21,
            max_iodepth: 256,
            max_transfer_bytes: 1 << 20,
        },
    ]
}

#[test]
fn json_line_has_every_field_and_they_agree() {
    let jobs = parse_cmdline(
        "console=ttyS0 -- device=md0 job=mix rw=randrw rwmixread=70 bs=4k iodepth=24 cpus=0-2 runtime=20ms \
         size=4m verify=crc32c completion=remote quiesce=lockfree",
    )
    .unwrap();
    let plan = plan_job(&jobs[0], &devices(), &[0, 1, 2, 3]).unwrap();
    let disk = FakeDisk::new(512, 32 * 1024);
    let (results, _) = run_job(&plan, &disk);
    let mut report = JobReport::new(&plan, &results).unwrap();
    report.add_counter("irqs", vec![10, 20, 30]).unwrap();
    report.add_counter("ipis", vec![0, 5, 6]).unwrap();
    assert!(report.add_counter("short", vec![1]).is_err());
    report.add_total("completions_remote", 1234);
    report.add_total("hot_path_locks", 0);

    let mut line = String::new();
    report.write_json_line(&mut line).unwrap();
    assert!(line.starts_with(JSON_PREFIX) && line.ends_with('\n'));
    assert_eq!(line.matches('\n').count(), 1, "exactly one line");
    let json = parse_json(line[JSON_PREFIX.len()..].trim_end());

    let job = json.get("job");
    assert_eq!(job.get("name").str(), "mix");
    assert_eq!(job.get("rw").str(), "randrw");
    assert_eq!(job.get("rwmixread").u64(), 70);
    assert_eq!(job.get("bs").u64(), 4096);
    assert_eq!(job.get("iodepth").u64(), 16, "capped to the device limit");
    assert_eq!(job.get("iodepth_requested").u64(), 24);
    assert_eq!(
        job.get("cpus").array().iter().map(Json::u64).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(job.get("runtime_ns").u64(), 20_000_000);
    assert_eq!(job.get("size").u64(), 4 << 20);
    assert_eq!(job.get("offset").u64(), 0);
    assert_eq!(job.get("device").str(), "md0");
    assert_eq!(job.get("verify").str(), "crc32c");
    assert_eq!(job.get("completion").str(), "remote");
    assert_eq!(job.get("quiesce").str(), "lockfree");
    assert_eq!(json.get("device").get("capacity_bytes").u64(), 16 << 20);

    let ios = json.get("ios").u64();
    let iops = json.get("iops").u64();
    let runtime_ns = json.get("runtime_ns").u64();
    assert!(runtime_ns >= 20_000_000);
    assert!(ios > 100, "{ios}");
    // completed I/Os = IOPS x runtime within rounding (IOPS is rounded to an integer).
    let predicted = u128::from(iops) * u128::from(runtime_ns) / 1_000_000_000;
    let slack = u128::from(runtime_ns).div_ceil(1_000_000_000);
    assert!(predicted.abs_diff(u128::from(ios)) <= slack, "{predicted} vs {ios}");
    assert_eq!(json.get("bytes").u64(), ios * 4096);
    assert!(json.get("bw_bytes").u64().abs_diff(iops * 4096) <= 4096);
    let read = json.get("read");
    let write = json.get("write");
    assert_eq!(read.get("ios").u64() + write.get("ios").u64(), ios);
    assert!(read.get("ios").u64() > write.get("ios").u64(), "70% reads");

    let lat = json.get("lat_ns");
    let order = ["min", "p50", "p90", "p99", "p99_9", "p99_99", "max"];
    let values: Vec<u64> = order.iter().map(|k| lat.get(k).u64()).collect();
    assert!(
        values.windows(2).all(|w| w[0] <= w[1]),
        "percentiles must be ordered: {values:?}"
    );
    assert!(lat.get("mean").u64() >= values[0] && lat.get("mean").u64() <= values[6]);
    assert_eq!(lat.get("samples").u64(), ios);
    assert!(values[0] >= 20_000, "the fake device takes at least 20 us");

    assert_eq!(json.get("errors").u64(), 0);
    assert_eq!(
        json.get("verify").get("crc32c_impl").str(),
        workload::crc32c::selected().as_str()
    );
    // A clean run: empty failure and retry lists, and the counts agree with the merged results.
    assert!(json.get("error_records").array().is_empty());
    assert_eq!(json.get("error_records_omitted").u64(), 0);
    assert_eq!(json.get("retried").u64(), 0);
    assert!(json.get("retried_records").array().is_empty());
    assert_eq!(json.get("retried_records_omitted").u64(), 0);
    assert_eq!(json.get("log_lines_suppressed").u64(), 0);
    assert_eq!(
        json.get("deferred_ios").u64(),
        results.iter().map(|r| r.deferred_ios).sum::<u64>()
    );
    assert_eq!(json.get("totals").get("completions_remote").u64(), 1234);
    assert_eq!(json.get("totals").get("hot_path_locks").u64(), 0);
    let mut human = String::new();
    report.write_human(&mut human).unwrap();
    assert!(
        human.contains("totals: completions_remote=1234 hot_path_locks=0"),
        "{human}"
    );
    let verify = json.get("verify");
    assert_eq!(verify.get("result").str(), "pass");
    assert_eq!(verify.get("mismatches").u64(), 0);
    assert_eq!(verify.get("first_mismatch"), &Json::Null);
    assert!(verify.get("checked").u64() > 0);
    assert!(verify.get("pass_reads").u64() > 0);

    let per_cpu = json.get("per_cpu").array();
    assert_eq!(per_cpu.len(), 3);
    assert_eq!(per_cpu.iter().map(|c| c.get("ios").u64()).sum::<u64>(), ios);
    for cpu in per_cpu {
        for key in ["cpu", "iops", "bytes", "errors", "mismatches", "runtime_ns"] {
            assert!(cpu.has(key), "per_cpu entry lacks {key}");
        }
    }
    let counters = json.get("counters").array();
    assert_eq!(counters[0].get("name").str(), "irqs");
    assert_eq!(
        counters[1]
            .get("per_cpu")
            .array()
            .iter()
            .map(Json::u64)
            .collect::<Vec<_>>(),
        [0, 5, 6]
    );
    assert_eq!(json.get("warnings").array().len(), 1);
    assert!(json.get("warnings").array()[0].str().contains("capped to 16"));
    assert_eq!(json.get("result").str(), "pass");

    let mut text = String::new();
    report.write_human(&mut text).unwrap();
    for needle in [
        "mix: rw=randrw rwmixread=70 bs=4096 iodepth=16 (asked 24) cpus=0-2 device=md0",
        "completion=remote quiesce=lockfree",
        "  read : ios=",
        "  write: ios=",
        "  total: ios=",
        "lat (us): min=",
        " p99.99=",
        "    irqs                      10          20          30",
        "    ipis                       0           5           6",
        "  verify: crc32c pass:",
        "  errors: 0",
        "  result: PASS",
    ] {
        assert!(text.contains(needle), "report lacks {needle:?}:\n{text}");
    }
}

#[test]
fn json_escapes_names_and_reports_failures() {
    // Job names cannot hold quotes, but device names can hold any printable character.
    let mut devs = devices();
    devs[1].name = "n\"ull\\0".into();
    let jobs = parse_cmdline("device=n\"ull\\0 rw=read bs=4k size=64k verify=pattern cpus=0").unwrap();
    let plan = plan_job(&jobs[0], &devs, &[0]).unwrap();
    let disk = FakeDisk::new(512, 1 << 21);
    let (results, _) = run_job(&plan, &disk);
    let report = JobReport::new(&plan, &results).unwrap();
    let mut line = String::new();
    report.write_json_line(&mut line).unwrap();
    let json = parse_json(line[JSON_PREFIX.len()..].trim_end());
    assert_eq!(json.get("job").get("device").str(), "n\"ull\\0");
    // The disk is blank: every read fails verification on the magic.
    let verify = json.get("verify");
    assert_eq!(verify.get("result").str(), "fail");
    assert_eq!(verify.get("mismatches").u64(), 16);
    let first = verify.get("first_mismatch");
    assert_eq!(first.get("field").str(), "magic");
    assert_eq!(first.get("lba").u64(), 0);
    assert_eq!(first.get("found").u64(), 0);
    assert!(
        first
            .get("message")
            .str()
            .starts_with("verify mismatch at LBA 0: magic")
    );
    assert_eq!(json.get("job").get("verify_generation").u64(), 1);
    assert_eq!(json.get("result").str(), "fail");
}

#[test]
fn progress_lines_follow_the_live_counters() {
    let jobs = parse_cmdline("device=null0 rw=randread bs=4k size=1m iodepth=4").unwrap();
    let plan = plan_job(&jobs[0], &devices(), &[0, 1]).unwrap();
    let disk = FakeDisk::new(512, 1 << 21);
    let (results, shared) = run_job(&plan, &disk);
    assert!(shared.all_finished());
    let total = shared.total();
    assert_eq!(total.ios, results.iter().map(CpuResult::ios).sum::<u64>());
    assert_eq!(total.bytes, 1 << 20);
    let mut meter = ProgressMeter::new(0);
    let mut line = String::new();
    meter
        .write_line(&mut line, "job0", 2_000_000_000, total, shared.any_verifying())
        .unwrap();
    assert_eq!(line, "[job0] 2.000s: 128 IOPS, 0.5 MB/s, 256 ios, 0 errors\n");
}

#[test]
fn mismatched_results_are_rejected() {
    let jobs = parse_cmdline("device=null0 rw=read bs=4k size=64k iodepth=1").unwrap();
    let plan = plan_job(&jobs[0], &devices(), &[0, 1]).unwrap();
    let disk = FakeDisk::new(512, 1 << 21);
    let (results, _) = run_job(&plan, &disk);
    assert!(JobReport::new(&plan, &results[..1]).is_err());
    let twice = vec![results[0].clone(), results[0].clone()];
    assert!(JobReport::new(&plan, &twice).is_err());
    // Any order is fine.
    let reversed: Vec<_> = results.iter().rev().cloned().collect();
    assert_eq!(
        JobReport::new(&plan, &reversed).unwrap(),
        JobReport::new(&plan, &results).unwrap()
    );
}

#[test]
fn many_cpus_make_one_summary_line_per_row() {
    let online: Vec<u32> = (0..20).collect();
    let jobs = parse_cmdline("device=null0 rw=randread bs=4k iodepth=2 cpus=0-19 runtime=5ms").unwrap();
    let plan = plan_job(&jobs[0], &devices(), &online).unwrap();
    let disk = FakeDisk::new(512, 1 << 21);
    let (mut results, _) = run_job(&plan, &disk);
    // Two CPUs that did nothing (the report must name them as one list).
    for idle in [4, 5] {
        let read = &mut results[idle].read;
        (read.ios, read.bytes, read.errors) = (0, 0, 0);
        read.latency = workload::LatencyHistogram::new();
    }
    let mut report = JobReport::new(&plan, &results).unwrap();
    let irqs: Vec<u64> = (0..20).map(|cpu| if cpu == 7 { 99 } else { 10 + cpu }).collect();
    report.add_counter("device_irqs", irqs).unwrap();
    let mut human = String::new();
    report.write_human(&mut human).unwrap();
    assert!(
        human.contains("per cpu (20 CPUs; min, mean and max of each row"),
        "{human}"
    );
    let line = human
        .lines()
        .find(|l| l.trim_start().starts_with("device_irqs"))
        .unwrap();
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        [
            "device_irqs",
            "min",
            "10",
            "(cpu0)",
            "mean",
            "23",
            "max",
            "99",
            "(cpu7)"
        ]
    );
    assert!(human.contains("no I/O on cpus 4-5"), "{human}");
    assert!(!human.contains("cpu19       "), "no column per CPU: {human}");
    // Up to 16 CPUs the table keeps a column per CPU.
    let jobs = parse_cmdline("device=null0 rw=randread bs=4k iodepth=2 cpus=0-15 runtime=5ms").unwrap();
    let plan = plan_job(&jobs[0], &devices(), &online).unwrap();
    let (results, _) = run_job(&plan, &disk);
    let mut human = String::new();
    JobReport::new(&plan, &results)
        .unwrap()
        .write_human(&mut human)
        .unwrap();
    let header = human.lines().find(|l| l.trim_start().starts_with("per cpu")).unwrap();
    assert_eq!(header.split_whitespace().count(), 2 + 16, "{header}");
}
