//! fio's latency target through the front-end and the engine, against the fake backend, whose
//! device serves one request at a time (each I/O's latency grows with the depth): the clone's
//! search settles at the deepest depth whose I/Os finish within the target, runs a final window
//! there and stops; a target no depth meets fails the job as fio's "max latency exceeded". And
//! fio's minimum rates on the same slow device: a clone below one stops and fails the job.

mod common;

use common::{DISK_SECTORS, FakeBackend, FakeDisk, SECTOR, fio_plan_of};
use workload::fio::parse_job_file;
use workload::{JobPlan, JobReport, JobShared, WorkloadError, run_cpu};

fn run(plan: &JobPlan, service_ns: u64) -> Result<workload::CpuResult, WorkloadError> {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(plan);
    let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
    backend.service_ns = service_ns;
    run_cpu(plan, 0, &mut backend, &shared)
}

#[test]
fn the_options_parse_with_fios_units_and_defaults() {
    let job = |extra: &str| {
        parse_job_file(&format!("[l]\nrw=randread\niodepth=16\n{extra}"), &[])
            .unwrap()
            .jobs[0]
            .spec
            .latency_target
    };
    assert_eq!(job("latency_window=1s\n"), None, "no target: nothing");
    let t = job("latency_target=500\nlatency_window=200ms\n").unwrap();
    assert_eq!(
        (t.target_ns, t.window_ns, t.percentile_millionths, t.keep_searching),
        (500_000, 200_000_000, 100_000_000, false)
    );
    let t = job("latency_target=2ms\nlatency_percentile=99.9\nlatency_run=1\n").unwrap();
    assert_eq!(
        (t.target_ns, t.percentile_millionths, t.keep_searching),
        (2_000_000, 99_900_000, true)
    );
    assert!(parse_job_file("[l]\nlatency_target=1ms\nlatency_percentile=0\n", &[]).is_err());
    assert!(parse_job_file("[l]\nlatency_target=1ms\nlatency_percentile=101\n", &[]).is_err());
}

/// The fake device serves one request every 100 us, so at depth d an I/O takes about d x 100 us:
/// with a 450 us target the search settles at depth 4 and the job stops long before its runtime.
#[test]
fn the_search_settles_at_the_deepest_depth_within_target_and_stops() {
    let plan = fio_plan_of(
        "[l]\nioengine=libaio\nrw=randread\nbs=4k\niodepth=32\ntime_based\nruntime=60s\nlatency_target=450\nlatency_window=100ms\n",
        &[0],
    );
    let result = run(&plan, 100_000).unwrap();
    assert_eq!(result.latency_depth, Some(4), "{:?}", result.latency_depth);
    assert!(result.runtime_ns < 10_000_000_000, "{}", result.runtime_ns);
    let report = JobReport::new(&plan, &[result]).unwrap();
    // The final window's statistics only: at depth 4, every I/O within the target.
    assert!(report.read.ios > 0);
    assert!(
        report.read_latency.max() <= 450_000 + 100_000,
        "{}",
        report.read_latency.max()
    );
    let mut human = String::new();
    report.write_human(&mut human).unwrap();
    assert!(
        human.contains("latency target: 450 us for 100.000000% of I/Os, windows of 100 ms: queue depth 4 (of 32)"),
        "{human}"
    );
}

/// A target below what even one request takes: fio gives up with "max latency exceeded".
#[test]
fn a_target_no_depth_meets_fails_the_job() {
    let plan = fio_plan_of(
        "[l]\nioengine=libaio\nrw=randread\nbs=4k\niodepth=8\ntime_based\nruntime=5s\nlatency_target=50\n",
        &[0],
    );
    match run(&plan, 100_000) {
        Err(WorkloadError::LatencyTargetMissed {
            target_ns, latency_ns, ..
        }) => {
            assert_eq!(target_ns, 50_000);
            assert!(latency_ns > target_ns);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_clone_below_rate_iops_min_stops_and_fails_the_job_as_fio() {
    // A device that serves one 4k read per 10 ms (100 IOPS) against a minimum of 1,000.
    let text = "[slow]\nrw=randread\nbs=4k\niodepth=1\ntime_based\nruntime=10s\nrate_iops_min=1000\nrate_cycle=500\n";
    let plan = fio_plan_of(text, &[0]);
    let min = plan.spec.rate_min.unwrap();
    assert_eq!((min.ios_per_s, min.cycle_ns), ([1000, 1000], 500_000_000));
    let result = run(&plan, 10_000_000).unwrap();
    let miss = result.rate_min_missed.expect("below its minimum");
    assert!(miss.iops && !miss.write && miss.wanted == 1000, "{miss:?}");
    assert!((90..=110).contains(&miss.got), "{miss}");
    // fio's 2 s settle, then one cycle to measure: the clone stopped at about 2.5 s, not 10.
    assert!(
        (2_400_000_000..3_000_000_000).contains(&result.runtime_ns),
        "{}",
        result.runtime_ns
    );
    let report = JobReport::new(&plan, &[result]).unwrap();
    assert!(!report.passed());
    let mut text = String::new();
    report.write_human(&mut text).unwrap();
    assert!(
        text.contains("RATE MIN NOT MET (cpu0): rate_iops_min=1000 not met by reads, got"),
        "{text}"
    );
    // A minimum the device keeps: the job runs its time and passes.
    let easy = fio_plan_of(
        "[ok]\nrw=randread\nbs=4k\niodepth=1\ntime_based\nruntime=4s\nrate_min=100k\n",
        &[0],
    );
    let result = run(&easy, 10_000_000).unwrap();
    assert_eq!(result.rate_min_missed, None);
    assert!(result.runtime_ns >= 4_000_000_000);
}
