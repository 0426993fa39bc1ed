//! fio's several files per job (`filename=/dev/a:/dev/b`): planning (regions, refusals), which
//! device each I/O goes to under each `file_service_type`, exact I/O counts, and verify over
//! several devices, with a backend that routes the engine's joined address space to in-memory
//! devices the way the kernel's does.

use std::cell::Cell;
use std::collections::{BTreeSet, VecDeque};

use workload::fio::parse_job_file;
use workload::{
    Completion, CpuResult, DeviceInfo, FileRoute, IoBackend, IoOp, JobPlan, JobShared, SubmitError, VerifyScheme,
    WorkloadError, plan_job, route_file, run_cpu,
};

const SECTOR: u32 = 512;

fn device(name: &str, mib: u64, sector_size: u32) -> DeviceInfo {
    DeviceInfo {
        name: name.into(),
        sector_size,
        capacity_sectors: (mib << 20) / u64::from(sector_size),
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }
}

/// Two 8 MiB devices and a 4 MiB one.
fn devices() -> Vec<DeviceInfo> {
    vec![
        device("nvme0n1", 8, SECTOR),
        device("nvme1n1", 8, SECTOR),
        device("md0", 4, SECTOR),
    ]
}

fn plan_text(text: &str, devices: &[DeviceInfo], online: &[u32]) -> Result<JobPlan, WorkloadError> {
    let run = parse_job_file(text, &[]).unwrap();
    let spec = run.jobs[0].to_spec(devices, online)?;
    plan_job(&spec, devices, online)
}

fn plan_of(text: &str, online: &[u32]) -> JobPlan {
    plan_text(text, &devices(), online).unwrap()
}

/// In-memory devices, shared by the CPUs of a job (run one after the other).
struct Disks {
    sector: u64,
    bytes: Vec<Vec<u8>>,
}

impl Disks {
    fn for_plan(plan: &JobPlan) -> Self {
        Self {
            sector: u64::from(plan.device.sector_size),
            bytes: plan
                .files
                .iter()
                .map(|f| vec![0u8; (f.device.capacity_sectors * u64::from(f.device.sector_size)) as usize])
                .collect(),
        }
    }
}

/// A request as the backend saw it: the file, the operation, the device's sector.
type Request = (usize, IoOp, u64);

/// One CPU's backend: routes each request with the plan's routes, moves the data at once and
/// completes in order; logs `(file, operation, device sector)` per request.
struct Routed<'a> {
    disks: &'a mut Disks,
    routes: Vec<FileRoute>,
    buffers: Vec<Vec<u8>>,
    done: VecDeque<usize>,
    clock: Cell<u64>,
    log: Vec<Request>,
}

impl<'a> Routed<'a> {
    fn new(plan: &JobPlan, cpu_index: usize, disks: &'a mut Disks) -> Self {
        Self {
            disks,
            routes: plan.file_routes(cpu_index),
            buffers: vec![vec![0u8; plan.max_io_bytes() as usize]; plan.iodepth as usize],
            done: VecDeque::new(),
            clock: Cell::new(1_000),
            log: Vec::new(),
        }
    }
}

impl IoBackend for Routed<'_> {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError> {
        let (file, device_lba) = route_file(&self.routes, lba);
        let disk = &mut self.disks.bytes[file];
        let start = (device_lba * self.disks.sector) as usize;
        let len = (u64::from(sectors) * self.disks.sector) as usize;
        assert!(
            start + len <= disk.len(),
            "file {file}: sector {device_lba} is past the device's end"
        );
        match op {
            IoOp::Read => self.buffers[slot][..len].copy_from_slice(&disk[start..start + len]),
            IoOp::Write => disk[start..start + len].copy_from_slice(&self.buffers[slot][..len]),
            IoOp::Trim => disk[start..start + len].fill(0),
            IoOp::Flush => {}
        }
        self.log.push((file, op, device_lba));
        self.done.push_back(slot);
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len()
            && let Some(slot) = self.done.pop_front()
        {
            out[n] = Completion::new(slot, Ok(()));
            n += 1;
        }
        n
    }

    fn now_ns(&self) -> u64 {
        self.clock.set(self.clock.get() + 1_000);
        self.clock.get()
    }
}

/// Runs every CPU of `plan` in turn over `disks`; each CPU's result and request log.
fn run(plan: &JobPlan, disks: &mut Disks) -> Vec<(CpuResult, Vec<Request>)> {
    let shared = JobShared::new(plan);
    (0..plan.cpus.len())
        .map(|index| {
            let mut backend = Routed::new(plan, index, disks);
            let result = run_cpu(plan, index, &mut backend, &shared).expect("CPU run failed");
            (result, backend.log)
        })
        .collect()
}

fn per_file(log: &[Request], files: usize) -> Vec<usize> {
    (0..files).map(|f| log.iter().filter(|io| io.0 == f).count()).collect()
}

const TWO: &str = "[a]\nfilename=/dev/nvme0n1:/dev/nvme1n1\nbs=4k\n";

#[test]
fn roundrobin_alternates_files_and_each_keeps_its_own_position() {
    let plan = plan_of(&format!("{TWO}rw=read\nsize=64k\n"), &[0]);
    assert_eq!(plan.files.len(), 2);
    // size is split: 32 KiB, 8 blocks, per file.
    assert_eq!(plan.files.iter().map(|f| f.blocks).collect::<Vec<_>>(), [8, 8]);
    let mut disks = Disks::for_plan(&plan);
    let ran = run(&plan, &mut disks);
    let (result, log) = &ran[0];
    assert_eq!(
        result.read.ios, 16,
        "fio's size=64k of 4k blocks: 16 I/Os over both files"
    );
    let expected: Vec<Request> = (0..8u64)
        .flat_map(|block| [(0, IoOp::Read, block * 8), (1, IoOp::Read, block * 8)])
        .collect();
    assert_eq!(log, &expected);
}

#[test]
fn roundrobin_n_sequential_and_random_service() {
    let log_of = |service: &str, rw: &str| {
        let plan = plan_of(&format!("{TWO}rw={rw}\nsize=64k\nfile_service_type={service}\n"), &[0]);
        let mut disks = Disks::for_plan(&plan);
        run(&plan, &mut disks).remove(0).1
    };
    let files = |log: &[Request]| log.iter().map(|io| io.0).collect::<Vec<_>>();
    assert_eq!(
        files(&log_of("roundrobin:3", "read")),
        [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1],
        "three I/Os a turn; the last turns are cut short where a file is done"
    );
    assert_eq!(files(&log_of("sequential", "read")), [[0; 8], [1; 8]].concat());
    // random: files drawn per I/O; with fio's random map each file still gets each of its
    // blocks exactly once.
    let random = log_of("random", "randread");
    assert_eq!(per_file(&random, 2), [8, 8]);
    for file in 0..2 {
        let blocks: BTreeSet<u64> = random.iter().filter(|io| io.0 == file).map(|io| io.2 / 8).collect();
        assert_eq!(blocks, (0..8).collect(), "file {file}");
    }
    let order = files(&random);
    assert!(
        order.windows(2).any(|w| w[0] == w[1]) && order[..8] != [0, 1, 0, 1, 0, 1, 0, 1],
        "random service is not round robin: {order:?}"
    );
    // random:4: draws come in runs of four I/Os on one file while the file lasts.
    let runs = files(&log_of("random:4", "randread"));
    assert_eq!(per_file(&log_of("random:4", "randread"), 2), [8, 8]);
    assert!(runs[..4].iter().all(|&f| f == runs[0]), "{runs:?}");
}

#[test]
fn files_of_different_sizes_each_get_one_pass() {
    // No size: each file from offset 0 to its end (8 MiB and 4 MiB); round robin until the
    // smaller one is done, then the rest on the larger.
    let plan = plan_of("[a]\nfilename=/dev/nvme0n1:/dev/md0\nrw=randread\nbs=64k\n", &[0]);
    assert_eq!(plan.files.iter().map(|f| f.blocks).collect::<Vec<_>>(), [128, 64]);
    let mut disks = Disks::for_plan(&plan);
    let (result, log) = run(&plan, &mut disks).remove(0);
    assert_eq!(result.read.ios, 192);
    assert_eq!(per_file(&log, 2), [128, 64]);
    assert!(log[..128].chunks(2).all(|pair| pair[0].0 == 0 && pair[1].0 == 1));
    assert!(log[128..].iter().all(|io| io.0 == 0));
    let distinct: BTreeSet<(usize, u64)> = log.iter().map(|io| (io.0, io.2)).collect();
    assert_eq!(distinct.len(), 192, "each block of each file exactly once");
}

#[test]
fn io_counts_and_loops_are_for_the_whole_job() {
    let count = |extra: &str| {
        let plan = plan_of(&format!("{TWO}rw=randwrite\nsize=64k\n{extra}"), &[0]);
        let mut disks = Disks::for_plan(&plan);
        per_file(&run(&plan, &mut disks).remove(0).1, 2)
    };
    assert_eq!(count(""), [8, 8]);
    assert_eq!(count("loops=3\n"), [24, 24], "every pass covers both files again");
    assert_eq!(
        count("io_size=20k\n"),
        [3, 2],
        "five I/Os, round robin from the first file"
    );
    assert_eq!(count("number_ios=21\n"), [11, 10]);
}

#[test]
fn clones_shift_every_file_by_offset_increment() {
    let plan = plan_of(
        &format!("{TWO}rw=write\nsize=64k\nnumjobs=2\noffset=1m\noffset_increment=2m\n"),
        &[0, 1],
    );
    let mut disks = Disks::for_plan(&plan);
    let ran = run(&plan, &mut disks);
    for (clone, (result, log)) in ran.iter().enumerate() {
        assert_eq!(result.write.ios, 16);
        let first = (1 << 20) / 512 + clone as u64 * (2 << 20) / 512;
        for file in 0..2 {
            let sectors: BTreeSet<u64> = log.iter().filter(|io| io.0 == file).map(|io| io.2).collect();
            assert_eq!(
                sectors,
                (0..8).map(|b| first + b * 8).collect(),
                "clone {clone} file {file}"
            );
        }
    }
}

#[test]
fn verify_covers_every_file_and_catches_a_corrupt_block_on_the_second_device() {
    let text = format!("{TWO}rw=randwrite\nsize=256k\nverify=crc32c\niodepth=4\nnumjobs=2\noffset_increment=1m\n");
    let plan = plan_of(&text, &[0, 1]);
    assert_eq!(plan.verify, VerifyScheme::Tracked);
    let mut disks = Disks::for_plan(&plan);
    let ran = run(&plan, &mut disks);
    for (result, log) in &ran {
        assert_eq!(
            per_file(log, 2),
            [64, 64],
            "32 writes a file, then the pass reads them back"
        );
        assert_eq!(result.verify.checked, 64);
        assert_eq!(result.verify.mismatches, 0);
    }
    // The written data is on both devices, and a later read job with the same list checks it;
    // a byte flipped on the second device is caught there.
    assert!(disks.bytes[1][..4096].iter().any(|&b| b != 0));
    let read = plan_of(
        &format!("{TWO}rw=randread\nsize=256k\nverify=crc32c\nnumjobs=2\noffset_increment=1m\n"),
        &[0, 1],
    );
    let clean = run(&read, &mut disks);
    assert_eq!(clean.iter().map(|r| r.0.verify.checked).sum::<u64>(), 128);
    assert_eq!(clean.iter().map(|r| r.0.verify.mismatches).sum::<u64>(), 0);
    disks.bytes[1][(1 << 20) + 5 * 4096 + 100] ^= 0x5a;
    let dirty = run(&read, &mut disks);
    assert_eq!(
        dirty[1].0.verify.mismatches, 1,
        "clone 1's block 5 of the second device"
    );
    assert_eq!(dirty[0].0.verify.mismatches, 0);
}

#[test]
fn a_sequential_write_verifies_in_one_pass() {
    let plan = plan_of(&format!("{TWO}rw=write\nsize=64k\nverify=crc32c\n"), &[0]);
    assert_eq!(plan.verify, VerifyScheme::SinglePass);
    let mut disks = Disks::for_plan(&plan);
    let (result, log) = run(&plan, &mut disks).remove(0);
    assert_eq!(result.write.ios, 16);
    assert_eq!(result.verify.checked, 16);
    assert_eq!(log.iter().filter(|io| io.1 == IoOp::Read).count(), 16);
}

#[test]
fn refusals_name_the_devices_and_the_reason() {
    let mixed = [device("nvme0n1", 8, 512), device("nvme1n1", 8, 4096)];
    let err = plan_text(&format!("{TWO}rw=read\n"), &mixed, &[0]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "job \"a\": filename list: /dev/nvme0n1 has 512-byte sectors and /dev/nvme1n1 4096-byte ones; one job's \
         files must share a sector size (run one job per device instead)"
    );
    let err = plan_text("[a]\nfilename=/dev/md0:/dev/md0\n", &devices(), &[0]).unwrap_err();
    assert!(err.to_string().contains("/dev/md0 is listed twice"), "{err}");
    for (extra, says) in [
        ("rw=trimwrite\n", "rw=trimwrite over several files"),
        (
            "rw=write\nend_fsync=1\n",
            "end_fsync (or fsync_on_close) over several files",
        ),
        ("bssplit=4k/50:8k/50\n", "variable block sizes"),
    ] {
        let err = plan_text(&format!("{TWO}{extra}"), &devices(), &[0]).unwrap_err();
        assert!(
            matches!(err, WorkloadError::FileList { .. }) && err.to_string().contains(says),
            "{extra}: {err}"
        );
    }
    // A clone past a device's end names that device.
    let err = plan_text(
        &format!("{TWO}size=12m\nnumjobs=2\noffset_increment=4m\n"),
        &devices(),
        &[0, 1],
    )
    .unwrap_err();
    assert!(
        matches!(&err, WorkloadError::JobLargerThanDevice { device, .. } if device == "nvme0n1"),
        "{err:?}"
    );
}

#[test]
fn the_shallowest_device_caps_the_depth() {
    let mut shallow = devices();
    shallow[1].max_iodepth = 8;
    let plan = plan_text(&format!("{TWO}iodepth=32\nioengine=libaio\n"), &shallow, &[0]).unwrap();
    assert_eq!(plan.iodepth, 8);
    assert!(plan.warnings[0].to_string().contains("nvme1n1"), "{}", plan.warnings[0]);
}

#[test]
fn time_based_jobs_keep_serving_every_file() {
    let plan = plan_of(
        &format!("{TWO}rw=randread\nnorandommap\nsize=64k\nruntime=2ms\ntime_based\n"),
        &[0],
    );
    let mut disks = Disks::for_plan(&plan);
    let (result, log) = run(&plan, &mut disks).remove(0);
    assert!(result.read.ios > 32, "{} I/Os", result.read.ios);
    let counts = per_file(&log, 2);
    assert!(counts[0].abs_diff(counts[1]) <= 1, "round robin: {counts:?}");
}

#[test]
fn trims_rates_and_the_verify_backlog_work_per_file() {
    // randtrim: every block of both regions trimmed once; the fake devices read zeros there.
    let plan = plan_of(&format!("{TWO}rw=randtrim\nsize=64k\n"), &[0]);
    let mut disks = Disks::for_plan(&plan);
    for disk in &mut disks.bytes {
        disk.fill(0xa5);
    }
    let (result, log) = run(&plan, &mut disks).remove(0);
    assert_eq!(result.trim.ios, 16);
    assert_eq!(per_file(&log, 2), [8, 8]);
    for disk in &disks.bytes {
        assert!(disk[..32 << 10].iter().all(|&b| b == 0));
        assert_eq!(disk[32 << 10], 0xa5, "nothing past the file's region");
    }
    // rate_iops is the job's pace across its files: 16 I/Os at 1000 per second take 15 ms or
    // more on the backend's clock.
    let plan = plan_of(&format!("{TWO}rw=randread\nsize=64k\nrate_iops=1000\n"), &[0]);
    let mut disks = Disks::for_plan(&plan);
    let (result, log) = run(&plan, &mut disks).remove(0);
    assert_eq!(per_file(&log, 2), [8, 8]);
    assert!(result.runtime_ns >= 15_000_000, "{} ns", result.runtime_ns);
    // verify_backlog reads blocks of both files back during the writes.
    let plan = plan_of(
        &format!("{TWO}rw=randwrite\nsize=64k\nverify=crc32c\nverify_backlog=4\niodepth=2\n"),
        &[0],
    );
    let mut disks = Disks::for_plan(&plan);
    let (result, log) = run(&plan, &mut disks).remove(0);
    assert_eq!(result.write.ios, 16);
    assert_eq!(result.verify.mismatches, 0);
    let backlog_reads: Vec<usize> = log[..log.len() - 16]
        .iter()
        .filter(|io| io.1 == IoOp::Read)
        .map(|io| io.0)
        .collect();
    assert!(
        backlog_reads.contains(&0) && backlog_reads.contains(&1),
        "{backlog_reads:?}"
    );
}
