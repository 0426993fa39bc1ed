//! fio's trim forms through the engine against the fake backend (whose trim zeroes the block, as
//! NVMe's deallocate reads back): `randtrim` trims every block once per pass in random order,
//! `trimwrite` trims each block and then writes the same block, the trims are counted in their own
//! direction, and fio's JSON `trim` section and text `trim:` lines carry them. Verify and pacing
//! with trims are refused by name.

mod common;

use common::{DISK_SECTORS, FakeBackend, FakeDisk, SECTOR, test_device};
use workload::detail::DetailOptions;
use workload::fio::parse_job_file;
use workload::report::{FioJob, FioJobMeta, FioOutputOptions, write_fio_document, write_fio_text};
use workload::{CpuResult, DeviceInfo, IoOp, JobPlan, JobReport, JobShared, WorkloadError, plan_job, run_cpu};

fn device() -> DeviceInfo {
    test_device("nvme0n1")
}

fn try_plan(text: &str) -> Result<JobPlan, WorkloadError> {
    let run = parse_job_file(text, &[])?;
    let spec = run.jobs[0].to_spec(&[device()], &[0])?;
    plan_job(&spec, &[device()], &[0])
}

/// Runs `plan` on one CPU over `disk`, in detail mode.
fn run(plan: &JobPlan, disk: &FakeDisk) -> (CpuResult, FakeBackend) {
    let shared = JobShared::with_detail(plan, DetailOptions::default());
    let mut backend = FakeBackend::new(disk, plan.iodepth as usize, plan.bs() as usize);
    backend.latency_ns = 20_000;
    let result = run_cpu(plan, 0, &mut backend, &shared).unwrap();
    (result, backend)
}

/// A disk whose first 1 MiB is 0xA5.
fn filled_disk() -> FakeDisk {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    disk.bytes.lock().unwrap()[..1 << 20].fill(0xA5);
    disk
}

#[test]
fn randtrim_trims_every_block_of_the_region_once_in_random_order() {
    let plan = try_plan("[t]\nrw=randtrim\nbs=4k\nsize=256k\niodepth=8\n").unwrap();
    let disk = filled_disk();
    let (result, backend) = run(&plan, &disk);
    assert_eq!(
        (result.trim.ios, result.trim.bytes, result.trim.errors),
        (64, 256 << 10, 0)
    );
    assert_eq!((result.read.ios, result.write.ios), (0, 0));
    assert!(backend.submit_log.iter().all(|(op, _)| *op == IoOp::Trim));
    let lbas: Vec<u64> = backend.submit_log.iter().map(|(_, lba)| *lba).collect();
    let mut sorted = lbas.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..64).map(|b| b * 8).collect::<Vec<_>>(), "each block once");
    assert_ne!(lbas, sorted, "random order, not sequential");
    // The fake device zeroes trimmed blocks: the region reads zeros, the rest keeps its data.
    let bytes = disk.bytes.lock().unwrap();
    assert!(bytes[..256 << 10].iter().all(|&b| b == 0));
    assert!(bytes[256 << 10..1 << 20].iter().all(|&b| b == 0xA5));
}

#[test]
fn trimwrite_trims_each_block_then_writes_the_same_block_in_order() {
    let plan = try_plan("[tw]\nrw=trimwrite\nbs=4k\nsize=64k\niodepth=1\n").unwrap();
    let disk = filled_disk();
    let (result, backend) = run(&plan, &disk);
    assert_eq!((result.trim.ios, result.write.ios, result.read.ios), (16, 16, 0));
    let expected: Vec<(IoOp, u64)> = (0..16u64)
        .flat_map(|block| [(IoOp::Trim, block * 8), (IoOp::Write, block * 8)])
        .collect();
    assert_eq!(backend.submit_log, expected);
    // The writes came after the trims: the blocks hold the written data, not zeros.
    let bytes = disk.bytes.lock().unwrap();
    for block in 0..16 {
        let data = &bytes[block * 4096..(block + 1) * 4096];
        assert!(
            data.iter().any(|&b| b != 0 && b != 0xA5),
            "block {block} holds written data"
        );
    }
}

#[test]
fn trims_fill_fios_json_trim_section_and_text_lines() {
    let plan = try_plan("[t]\nrw=randtrim\nbs=4k\nsize=256k\niodepth=4\n").unwrap();
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let (result, _) = run(&plan, &disk);
    let report = JobReport::new(&plan, &[result]).unwrap();
    assert_eq!((report.trim.ios, report.total.ios), (64, 64));
    assert_eq!(report.trim_latency.samples(), 64);
    let detail = report.detail.as_ref().unwrap();
    assert_eq!(detail.trim_clat.samples(), 64);
    assert_eq!(detail.trim_slat.samples(), 64);
    let meta = FioJobMeta::default();
    let jobs = [FioJob {
        report: &report,
        meta: &meta,
    }];
    let options = FioOutputOptions::default();
    let mut document = String::new();
    write_fio_document(&mut document, &options, &jobs).unwrap();
    let trim = &document[document.find("\"trim\":{").expect("a trim section")..];
    assert!(
        trim.starts_with("\"trim\":{\"io_bytes\":262144,\"io_kbytes\":256,"),
        "{trim}"
    );
    assert!(trim.contains("\"total_ios\":64,"), "{trim}");
    let write = &document[document.find("\"write\":{").unwrap()..];
    assert!(write.starts_with("\"write\":{\"io_bytes\":0,"), "{write}");
    let mut text = String::new();
    write_fio_text(&mut text, &options, &jobs).unwrap();
    assert!(text.contains("\n  trim: IOPS="), "{text}");
    assert!(!text.contains("\n  read: "), "{text}");
    assert!(text.contains("issued rwts: total=0,0,64,0"), "{text}");
    assert!(text.contains("\n   TRIM: bw="), "{text}");
    // baremq's own JSON line has the trims too.
    let mut own = String::new();
    report.write_json_object(&mut own).unwrap();
    assert!(
        own.contains("\"trim\":{\"ios\":64,\"bytes\":262144,\"errors\":0,"),
        "{own}"
    );
}

#[test]
fn verify_and_pacing_with_trims_are_refused_by_name() {
    for (text, first) in [
        ("[t]\nrw=trimwrite\nbs=4k\nsize=64k\nverify=crc32c\n", "verify"),
        ("[t]\nrw=randtrim\nbs=4k\nsize=64k\nrate_iops=100\n", "rate"),
    ] {
        match try_plan(text) {
            Err(WorkloadError::ConflictingKeys { first: f, second, .. }) => {
                assert_eq!((f, second), (first, "rw"), "{text:?}")
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    // A read-only run refuses trims as it refuses writes.
    let run = workload::fio::parse_command_line(["--readonly", "--name=t", "--rw=trim"], &[]);
    assert!(
        matches!(&run, Err(WorkloadError::FioUnsupported { option, reason, .. }) if option == "readonly" && reason.contains("trims")),
        "{run:?}"
    );
}

#[test]
fn every_trim_spelling_parses() {
    for (rw, trims, writes) in [
        ("trim", true, false),
        ("randtrim", true, false),
        ("trimwrite", true, true),
        ("randtrimwrite", true, true),
    ] {
        for key in ["rw", "readwrite"] {
            let plan = try_plan(&format!("[t]\n{key}={rw}\nbs=4k\nsize=64k\n")).unwrap();
            assert_eq!(plan.spec.rw.as_str(), rw);
            assert_eq!((plan.spec.rw.trims(), plan.spec.rw.writes()), (trims, writes), "{rw}");
            assert!(!plan.spec.rw.reads());
        }
    }
}

#[test]
fn trimwrite_log_rows_carry_fios_trim_direction() {
    use workload::report::FioLogOptions;
    let plan = try_plan("[tw]\nrw=trimwrite\nbs=4k\niodepth=4\nsize=1m\ntime_based\nruntime=1100ms\n").unwrap();
    let options = FioOutputOptions {
        logs: FioLogOptions {
            bw: Some("tw".into()),
            lat: None,
            iops: None,
            avg_msec: 500,
        },
        ..FioOutputOptions::default()
    };
    options.validate().unwrap();
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::with_detail(&plan, options.detail_options());
    let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.bs() as usize);
    backend.latency_ns = 1_000_000;
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    assert!(result.trim.ios > 0 && result.write.ios.abs_diff(result.trim.ios) <= 4);
    let report = JobReport::new(&plan, &[result]).unwrap();
    let lines = common::log_lines_of(&options, &report);
    // Per direction two full windows and a partial one: fio's ddir 1 for writes, 2 for trims,
    // none for reads.
    let ddirs: Vec<&str> = lines.lines().map(|l| l.split(", ").nth(2).unwrap()).collect();
    assert_eq!(ddirs.iter().filter(|d| **d == "1").count(), 3, "{lines}");
    assert_eq!(ddirs.iter().filter(|d| **d == "2").count(), 3, "{lines}");
    assert!(!ddirs.contains(&"0"), "{lines}");
}
