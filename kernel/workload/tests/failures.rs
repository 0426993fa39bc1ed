//! Failed and retried requests are reported exactly: which I/Os (op, LBA, length, status,
//! retries), how many, a bounded list so a storm cannot flood the console, and per-I/O log lines
//! that are rate-limited with a count of what was held back.

mod common;

use common::{FakeBackend, FakeDisk, Fault, Json, parse_json};
use workload::{
    CpuResult, DeviceInfo, IoError, IoOp, JSON_PREFIX, JobPlan, JobReport, JobShared, LOG_BURST, MAX_ERROR_RECORDS,
    parse_jobs, plan_job, run_cpu,
};

const SECTOR: u32 = 512;
const DISK_SECTORS: u64 = 16 * 1024;

fn plan_of(words: &str, online: &[u32]) -> JobPlan {
    let device = DeviceInfo {
        name: "md0".into(),
        sector_size: SECTOR,
        capacity_sectors: DISK_SECTORS,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    };
    let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
    plan_job(&jobs[0], &[device], online).unwrap()
}

/// Runs every CPU on its own thread; returns the results and the backends (with their log lines).
fn run(plan: &JobPlan, faults: &[Fault]) -> (Vec<CpuResult>, Vec<FakeBackend>) {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(plan);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let (shared, disk) = (&shared, &disk);
                scope.spawn(move || {
                    let mut backend = FakeBackend::new(disk, plan.iodepth as usize, plan.bs() as usize);
                    backend.faults.extend_from_slice(faults);
                    let result = run_cpu(plan, index, &mut backend, shared).unwrap();
                    (result, backend)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).unzip()
    })
}

fn human(report: &JobReport) -> String {
    let mut text = String::new();
    report.write_human(&mut text).unwrap();
    text
}

fn json(report: &JobReport) -> Json {
    let mut line = String::new();
    report.write_json_line(&mut line).unwrap();
    parse_json(line[JSON_PREFIX.len()..].trim_end())
}

#[test]
fn each_failed_io_is_listed_with_op_lba_length_and_status() {
    // A sequential read of 32 blocks where blocks 4 and 9 fail: exactly those two, in order.
    let plan = plan_of("rw=read bs=4k size=128k iodepth=1 cpus=0", &[0]);
    let faults = [
        Fault::FailOnCompletion {
            lba: 4 * 8,
            op: IoOp::Read,
            error: IoError::Device { status: 0x1 },
        },
        Fault::FailOnSubmit {
            lba: 9 * 8,
            op: IoOp::Read,
            error: IoError::Timeout,
        },
    ];
    let (results, _) = run(&plan, &faults);
    let report = JobReport::new(&plan, &results).unwrap();
    assert_eq!(report.errors, 2);
    assert_eq!(report.error_records_omitted, 0);
    let listed: Vec<_> = report
        .error_records
        .iter()
        .map(|(cpu, r)| (*cpu, r.op, r.lba, r.sectors, r.result, r.retries))
        .collect();
    assert_eq!(
        listed,
        [
            (0, IoOp::Read, 32, 8, Err(IoError::Device { status: 1 }), 0),
            (0, IoOp::Read, 72, 8, Err(IoError::Timeout), 0),
        ]
    );
    let text = human(&report);
    assert!(
        text.contains("errors: 2 (first: cpu0 read at LBA 32: device status 0x1)\n"),
        "{text}"
    );
    assert!(
        text.contains("    failed: cpu0 read LBA 32 +8 sectors: device status 0x1\n"),
        "{text}"
    );
    assert!(
        text.contains("    failed: cpu0 read LBA 72 +8 sectors: timeout\n"),
        "{text}"
    );
    assert!(!text.contains("more not listed"), "{text}");
    assert!(!text.contains("retried:"), "{text}");
    let json = json(&report);
    let records = json.get("error_records").array();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].get("lba").u64(), 32);
    assert_eq!(records[0].get("sectors").u64(), 8);
    assert_eq!(records[0].get("bytes").u64(), 4096);
    assert_eq!(records[0].get("status").str(), "device");
    assert_eq!(records[0].get("error").str(), "device status 0x1");
    assert_eq!(records[0].get("retries").u64(), 0);
    assert_eq!(records[1].get("status").str(), "timeout");
    assert_eq!(json.get("error_records_omitted").u64(), 0);
    assert_eq!(json.get("retried").u64(), 0);
    assert_eq!(json.get("result").str(), "fail");
}

#[test]
fn an_error_storm_is_counted_in_full_but_listed_and_logged_in_bounded_form() {
    // Every read of two CPUs' slices fails: 2 x 128 failures.
    let plan = plan_of("rw=read bs=4k size=1m iodepth=4", &[0, 1]);
    let faults = [Fault::FailRange {
        from: 0,
        to: DISK_SECTORS,
        op: IoOp::Read,
        error: IoError::Device { status: 0x5 },
    }];
    let (results, backends) = run(&plan, &faults);
    let report = JobReport::new(&plan, &results).unwrap();
    assert_eq!(report.errors, 256);
    assert_eq!(report.error_records.len(), MAX_ERROR_RECORDS);
    assert_eq!(report.error_records_omitted, 256 - MAX_ERROR_RECORDS as u64);
    // The kept records are the earliest failures, in time order.
    assert!(report.error_records.windows(2).all(|w| w[0].1.at_ns <= w[1].1.at_ns));
    let text = human(&report);
    assert_eq!(text.matches("    failed: cpu").count(), MAX_ERROR_RECORDS, "{text}");
    assert!(
        text.contains(&format!("    failed: {} more not listed\n", 256 - MAX_ERROR_RECORDS)),
        "{text}"
    );
    let json = json(&report);
    assert_eq!(json.get("error_records").array().len(), MAX_ERROR_RECORDS);
    assert_eq!(json.get("error_records_omitted").u64(), 240);

    // The whole run lasts a few simulated milliseconds: each CPU logs its burst, then one line that
    // counts the rest; nothing is lost from the count.
    for (result, backend) in results.iter().zip(&backends) {
        let lines = &backend.log_lines;
        assert_eq!(lines.len(), LOG_BURST as usize + 1, "{lines:#?}");
        let cpu = result.cpu;
        assert!(
            lines[0].starts_with(&format!("cpu{cpu}: read LBA "))
                && lines[0].ends_with("+8 sectors: device status 0x5"),
            "{}",
            lines[0]
        );
        let suppressed = 128 - u64::from(LOG_BURST);
        assert_eq!(result.log_lines_suppressed, suppressed);
        assert_eq!(
            lines.last().unwrap(),
            &format!("cpu{cpu}: {suppressed} more lines about failed or retried I/Os suppressed")
        );
    }
    assert_eq!(report.log_lines_suppressed, 2 * (128 - u64::from(LOG_BURST)));
    assert!(
        text.contains("  log: 240 lines about failed or retried I/Os suppressed\n"),
        "{text}"
    );
    assert_eq!(json.get("log_lines_suppressed").u64(), 240);
}

#[test]
fn a_storm_longer_than_the_log_interval_logs_one_line_per_second_with_the_held_back_count() {
    // 1 ms per request at iodepth 1 for 3.5 s: 3500 failures, logged as a burst, then one line a
    // second that says how many were held back since the previous one.
    let plan = plan_of("rw=randread bs=4k size=1m iodepth=1 runtime=3500ms cpus=0", &[0]);
    let faults = [Fault::FailRange {
        from: 0,
        to: DISK_SECTORS,
        op: IoOp::Read,
        error: IoError::Aborted,
    }];
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(&plan);
    let mut backend = FakeBackend::new(&disk, 1, 4096);
    backend.latency_ns = 1_000_000;
    backend.faults.extend_from_slice(&faults);
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    let errors = result.errors;
    assert!((3_400..=3_500).contains(&errors), "{errors}");
    let lines = &backend.log_lines;
    let burst = LOG_BURST as usize;
    // Burst, then one line at about 1 s, 2 s and 3 s, then the closing count.
    assert_eq!(lines.len(), burst + 3 + 1, "{lines:#?}");
    let held_back: Vec<u64> = lines[burst..burst + 3]
        .iter()
        .map(|line| {
            let (_, tail) = line.rsplit_once(" (").expect("the count of held-back lines");
            tail.strip_suffix(" similar lines suppressed)")
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    for count in &held_back {
        assert!((980..=1_000).contains(count), "{held_back:?}");
    }
    let closing: u64 = lines[burst + 3]
        .strip_prefix("cpu0: ")
        .and_then(|l| l.strip_suffix(" more lines about failed or retried I/Os suppressed"))
        .unwrap()
        .parse()
        .unwrap();
    // Every failure is either printed or counted exactly once.
    assert_eq!(burst as u64 + 3 + held_back.iter().sum::<u64>() + closing, errors);
    assert_eq!(result.log_lines_suppressed, errors - burst as u64 - 3);
}

#[test]
fn retried_requests_are_counted_and_listed_whatever_their_outcome() {
    let plan = plan_of("rw=write bs=4k size=64k iodepth=2 verify=crc32c cpus=0", &[0]);
    let faults = [
        // Re-issued twice by the driver, then fine: data must verify.
        Fault::Retried {
            lba: 3 * 8,
            retries: 2,
            result: Ok(()),
        },
        // Re-issued once, then failed by a controller reset.
        Fault::Retried {
            lba: 7 * 8,
            retries: 1,
            result: Err(IoError::Reset),
        },
    ];
    let (results, backends) = run(&plan, &faults);
    let report = JobReport::new(&plan, &results).unwrap();
    // Block 3: its write and the verify pass's read were retried and succeeded. Block 7: its write
    // was retried and failed, so the verify pass skips it (its content is not known).
    assert_eq!(report.retried, 3);
    assert_eq!(report.errors, 1);
    assert_eq!(report.verify.unchecked, 0);
    assert_eq!(report.verify.skipped, 1);
    assert_eq!(report.verify.checked, 15);
    assert_eq!(report.verify.mismatches, 0);
    let retried: Vec<_> = report
        .retried_records
        .iter()
        .map(|(_, r)| (r.op, r.lba, r.result, r.retries, r.in_verify_pass))
        .collect();
    assert_eq!(
        retried,
        [
            (IoOp::Write, 24, Ok(()), 2, false),
            (IoOp::Write, 56, Err(IoError::Reset), 1, false),
            (IoOp::Read, 24, Ok(()), 2, true),
        ]
    );
    assert_eq!(report.error_records.len(), 1);
    assert!(
        report
            .error_records
            .iter()
            .all(|(_, r)| r.result == Err(IoError::Reset) && r.lba == 56)
    );
    let text = human(&report);
    assert!(text.contains("  retried: 3 I/Os re-issued by the driver\n"), "{text}");
    assert!(
        text.contains("    retried: cpu0 write LBA 24 +8 sectors: ok after 2 retries\n"),
        "{text}"
    );
    assert!(
        text.contains("    retried: cpu0 write LBA 56 +8 sectors: failed by a controller reset after 1 retry\n"),
        "{text}"
    );
    assert!(
        text.contains("    retried: cpu0 read LBA 24 +8 sectors: ok after 2 retries (verify pass)\n"),
        "{text}"
    );
    assert!(
        text.contains("errors: 1 (first: cpu0 write at LBA 56: failed by a controller reset after 1 retry)"),
        "{text}"
    );
    let json = json(&report);
    assert_eq!(json.get("retried").u64(), 3);
    let records = json.get("retried_records").array();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0].get("status").str(), "ok");
    assert_eq!(records[0].get("error"), &Json::Null);
    assert_eq!(records[0].get("retries").u64(), 2);
    assert_eq!(records[1].get("status").str(), "reset");
    assert_eq!(records[2].get("verify_pass"), &Json::Bool(true));
    assert_eq!(json.get("retried_records_omitted").u64(), 0);
    // Each retried I/O was logged once (well under the burst).
    assert_eq!(backends[0].log_lines.len(), 3, "{:#?}", backends[0].log_lines);
}

#[test]
fn retries_that_succeed_do_not_fail_the_job() {
    let plan = plan_of(
        "rw=randrw bs=4k size=64k iodepth=4 runtime=2ms verify=pattern cpus=0",
        &[0],
    );
    let faults = [Fault::Retried {
        lba: 0,
        retries: 1,
        result: Ok(()),
    }];
    let (results, _) = run(&plan, &faults);
    let report = JobReport::new(&plan, &results).unwrap();
    assert!(report.retried > 0);
    assert_eq!(report.errors, 0);
    assert!(report.passed());
}

#[test]
fn a_time_based_job_whose_every_submission_fails_at_once_still_ends_at_its_runtime() {
    // Each failed submission frees its slot at once; the engine must still come back to its loop to
    // see the deadline (and the stop flag, and the periodic hook) instead of spinning on submits.
    let plan = plan_of("rw=randread bs=4k size=1m iodepth=4 runtime=5ms cpus=0", &[0]);
    let faults = [Fault::RejectRange {
        from: 0,
        to: DISK_SECTORS,
        op: IoOp::Read,
        error: IoError::Rejected { code: 2 },
    }];
    let (results, backends) = run(&plan, &faults);
    let result = &results[0];
    assert!(result.errors > 0);
    assert_eq!(result.errors, result.ios());
    assert!(result.runtime_ns >= 5_000_000, "{}", result.runtime_ns);
    assert!(result.runtime_ns < 6_000_000, "{}", result.runtime_ns);
    assert!(!backends[0].periodic_calls.is_empty());
}
