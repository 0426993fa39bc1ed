//! fio options read with fio 3.33's meaning, checked on the plan the front-end makes (and, where
//! the meaning is in the offsets, on the I/Os the engine issues against the fake disk).

mod common;

use common::{DISK_SECTORS, FakeBackend, FakeDisk, SECTOR, fio_plan_of, md0};
use workload::fio::{Target, parse_job_file};
use workload::{CpuResult, DeviceInfo, JobPlan, JobShared, WorkloadError, plan_job, run_cpu};

#[test]
fn inline_comments_are_cut_as_fio_cuts_them() {
    // The shape of fio's examples: a comment after a value, with a tab or a blank before it, or
    // none at all.
    let text = "[global]\nioengine=libaio ; the engine\nrw=randread\t# random reads\n\
                [four]\nnumjobs=4\t; 4 simultaneous threads\nbs=8k#no blank\nsize=1m ; 1 MiB\niodepth=4;x\n";
    let run = parse_job_file(text, &[]).unwrap();
    let job = &run.jobs[0];
    assert_eq!(job.name, "four");
    assert_eq!(job.numjobs, 4);
    assert_eq!(job.ioengine, "libaio");
    assert_eq!(job.spec.bs, 8192);
    assert_eq!(job.spec.iodepth, 4);
    let plan = fio_plan_of(text, &[0, 1, 2, 3]);
    assert_eq!(plan.cpus.len(), 4, "four clones");
    for slice in &plan.cpus {
        assert_eq!(slice.blocks, 128, "1 MiB of 8 KiB blocks each");
    }
}

fn device(name: &str, mib: u64) -> DeviceInfo {
    DeviceInfo {
        name: name.into(),
        capacity_sectors: mib << 11,
        ..md0()
    }
}

/// The plan of a one-job file on `devices` with one online CPU per clone.
fn plan_on(text: &str, devices: &[DeviceInfo]) -> Result<JobPlan, WorkloadError> {
    let run = parse_job_file(text, &[])?;
    let online: Vec<u32> = (0..run.jobs[0].numjobs).collect();
    let spec = run.jobs[0].to_spec(devices, &online)?;
    plan_job(&spec, devices, &online)
}

#[test]
fn a_size_past_the_end_is_cut_at_the_end_as_fio_stops_there() {
    // fio 3.33 on a 4 MiB block device: size=8m reads 1024 4k blocks (the whole device);
    // offset=3m size=2m reads 256 (the 1 MiB to the end).
    let disk = [device("nvme0n1", 4)];
    let whole = "[r]\nfilename=/dev/nvme0n1\nrw=read\nbs=4k\nsize=8m\n";
    let plan = plan_on(whole, &disk).unwrap();
    assert_eq!((plan.region_offset, plan.region_bytes), (0, 4 << 20));
    assert_eq!(plan.cpus[0].blocks, 1024);
    let spec = parse_job_file(whole, &[]).unwrap().jobs[0]
        .to_spec(&disk, &[0])
        .unwrap();
    assert_eq!(spec.size, Some(4 << 20));
    assert_eq!(
        spec.placement_notes,
        [
            "size=8388608 from offset 0 runs past the end of nvme0n1 (4194304 bytes): the region is the 4194304 bytes \
          to the end, as fio stops a file's I/O there"
        ]
    );
    let tail = plan_on(
        "[r]\nfilename=/dev/nvme0n1\nrw=read\nbs=4k\noffset=3m\nsize=2m\n",
        &disk,
    )
    .unwrap();
    assert_eq!((tail.region_offset, tail.region_bytes), (3 << 20, 1 << 20));
    assert_eq!(tail.cpus[0].blocks, 256);
    // A region that fits is left alone and says nothing.
    let fits = parse_job_file("[r]\nrw=read\nsize=1m\n", &[]).unwrap().jobs[0]
        .to_spec(&disk, &[0])
        .unwrap();
    assert_eq!(fits.size, Some(1 << 20));
    assert!(fits.placement_notes.is_empty());
    // An offset at or past the end is refused, as fio refuses it ("you need to specify valid offset=").
    for text in [
        "[r]\nrw=read\noffset=4m\nsize=1m\n",
        "[r]\nrw=read\noffset=5m\n",
        "[r]\nrw=read\noffset=5m\nsize=2m\n",
    ] {
        assert!(
            matches!(plan_on(text, &disk), Err(WorkloadError::JobLargerThanDevice { .. })),
            "{text}"
        );
    }
    // With a file list each file's share is cut at its own device's end.
    let two = [device("nvme0n1", 4), device("nvme0n2", 16)];
    let spec = parse_job_file("[r]\nfilename=/dev/nvme0n1:/dev/nvme0n2\nrw=read\nsize=16m\n", &[])
        .unwrap()
        .jobs[0]
        .to_spec(&two, &[0])
        .unwrap();
    let sizes: Vec<u64> = spec.files.iter().map(|f| f.size).collect();
    assert_eq!(sizes, [4 << 20, 8 << 20]);
    assert_eq!(spec.placement_notes.len(), 1, "{:?}", spec.placement_notes);
}

#[test]
fn directory_is_ignored_for_devices_and_refused_for_files() {
    let run = parse_job_file("[r]\ndirectory=/mnt/fio\nfilename=/dev/md0\nrw=read\n", &[]).unwrap();
    assert_eq!(run.jobs[0].target, Target::Device("md0".into()));
    assert!(
        run.jobs[0].warnings.contains(
            &"directory=/mnt/fio: ignored, the job's files are devices (/dev/NAME), which no directory holds".into()
        ),
        "{:?}",
        run.jobs[0].warnings
    );
    for text in [
        "[r]\ndirectory=/mnt/fio\nrw=read\n",
        "[r]\ndirectory=/mnt\nfilename=data.bin\nrw=read\n",
    ] {
        assert!(
            matches!(parse_job_file(text, &[]), Err(WorkloadError::FioUnsupported { option, .. }) if option == "directory"),
            "{text}"
        );
    }
}

#[test]
fn filename_format_names_devices_as_fio_names_files() {
    // fio's keywords, matched without regard to case; $filenum counts nrfiles from 0.
    let run = parse_job_file(
        "[nvme]\nfilename_format=/dev/$JobName$filenumn1\nnrfiles=2\nrw=randread\nsize=2m\n",
        &[],
    )
    .unwrap();
    let job = &run.jobs[0];
    assert_eq!(job.target, Target::Devices(vec!["nvme0n1".into(), "nvme1n1".into()]));
    assert!(
        job.warnings
            .iter()
            .any(|w| w.contains("the job's files are /dev/nvme0n1, /dev/nvme1n1"))
    );
    // size is split between the files as with a filename list.
    let devices = [device("nvme0n1", 8), device("nvme1n1", 8)];
    let spec = job.to_spec(&devices, &[0]).unwrap();
    let sizes: Vec<u64> = spec.files.iter().map(|f| f.size).collect();
    assert_eq!(sizes, [1 << 20, 1 << 20]);
    // One file: one device; $jobnum is 0 for the only clone.
    let one = parse_job_file("[md]\nfilename_format=/dev/$jobname$jobnum\nrw=read\n", &[]).unwrap();
    assert_eq!(one.jobs[0].target, Target::Device("md0".into()));
    // filename wins over filename_format, as in fio.
    let both = parse_job_file("[x]\nfilename=/dev/md0\nfilename_format=/dev/other\nrw=read\n", &[]).unwrap();
    assert_eq!(both.jobs[0].target, Target::Device("md0".into()));
    // Clones on devices of their own, names that are not devices, and nrfiles without a format
    // are refused by name.
    for (text, option) in [
        (
            "[c]\nfilename_format=/dev/nvme$jobnumn1\nnumjobs=2\nrw=read\n",
            "filename_format=/dev/nvme$jobnumn1",
        ),
        (
            "[c]\nfilename_format=$jobname.$jobnum.$filenum\nrw=read\n",
            "filename_format=$jobname.$jobnum.$filenum",
        ),
        ("[c]\nnrfiles=4\nrw=read\n", "nrfiles"),
    ] {
        match parse_job_file(text, &[]) {
            Err(WorkloadError::FioUnsupported { option: got, .. }) => assert_eq!(got, option, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    // Two clones on the same devices are fine.
    let same = parse_job_file("[c]\nfilename_format=/dev/md$filenum\nnumjobs=2\nrw=read\n", &[]).unwrap();
    assert_eq!(same.jobs[0].target, Target::Device("md0".into()));
}

/// Runs every clone of `plan` on its own fake backend over `disk`, one after the other (clone 0
/// first), sharing one [`JobShared`], so what a clone's end does to the next is exact.
fn run_in_turn(plan: &JobPlan, disk: &FakeDisk) -> (Vec<CpuResult>, Vec<FakeBackend>) {
    let shared = JobShared::new(plan);
    (0..plan.cpus.len())
        .map(|index| {
            let mut backend = FakeBackend::new(disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
            let result = run_cpu(plan, index, &mut backend, &shared).unwrap();
            (result, backend)
        })
        .unzip()
}

#[test]
fn thread_and_io_submit_mode_change_nothing() {
    let job = &parse_job_file("[t]\nthread\nio_submit_mode=inline\nrw=read\n", &[])
        .unwrap()
        .jobs[0];
    assert!(
        job.warnings
            .iter()
            .any(|w| w.starts_with("thread: accepted: baremq's clones already are threads")),
        "{:?}",
        job.warnings
    );
    assert!(!job.warnings.iter().any(|w| w.contains("io_submit_mode")));
    assert!(
        parse_job_file("[t]\nthread=0\n", &[]).unwrap().jobs[0]
            .warnings
            .iter()
            .all(|w| !w.starts_with("thread"))
    );
    // fio's own rate examples offload; here the clone submits on its own CPU, with a warning.
    let offload = &parse_job_file("[t]\nio_submit_mode=offload\n", &[]).unwrap().jobs[0];
    assert!(
        offload
            .warnings
            .iter()
            .any(|w| w.starts_with("io_submit_mode=offload: accepted")),
        "{:?}",
        offload.warnings
    );
    assert!(matches!(
        parse_job_file("[t]\nio_submit_mode=later\n", &[]),
        Err(WorkloadError::FioBadValue { option, .. }) if option == "io_submit_mode"
    ));
}

#[test]
fn exitall_stops_what_exit_what_names() {
    let names = |text: &str| -> (Vec<String>, usize) {
        let run = parse_job_file(text, &[]).unwrap();
        assert!(
            run.jobs.iter().all(|j| j.spec.exitall),
            "exitall is one switch for the run"
        );
        (run.jobs.iter().map(|j| j.name.clone()).collect(), run.notes.len())
    };
    // all: the first job's end stops every later job before it starts.
    let all = "[global]\nexitall\nexit_what=all\nrw=read\nsize=1m\n[a]\n[b]\nstonewall\n[c]\nstonewall\n";
    assert_eq!(names(all), (vec!["a".to_string()], 2));
    let run = parse_job_file(all, &[]).unwrap();
    assert_eq!(
        run.notes[0],
        "job \"b\" does not run: with exitall, job \"a\" stops every job when it ends (exit_what=all), and \"b\" had \
         not started (as fio)"
    );
    // stonewall: only running jobs (the job's own clones); later jobs run.
    let stonewall = all.replace("exit_what=all", "exit_what=stonewall");
    assert_eq!(names(&stonewall), (vec!["a".into(), "b".into(), "c".into()], 0));
    // group (fio's default): a job waiting for it in its group does not start; the next group does.
    let group = "[a]\nexitall\nrw=read\n[b]\nwait_for=a\n[c]\nstonewall\n";
    assert_eq!(names(group), (vec!["a".into(), "c".into()], 1));
    // Set by any job, it reaches the jobs beside others too: a and b stop each other (one group).
    let run = parse_job_file("[a]\n[b]\n[c]\nstonewall\nexitall\n", &[]).unwrap();
    assert_eq!(run.jobs[0].spec.exitall_stops, [1]);
    assert_eq!(run.jobs[1].spec.exitall_stops, [0]);
    assert!(matches!(
        parse_job_file("[a]\nexit_what=some\n", &[]),
        Err(WorkloadError::FioBadValue { option, .. }) if option == "exit_what"
    ));
}

#[test]
fn exitall_the_first_clone_to_end_stops_the_others() {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let text = "[c]\nexitall\nrw=read\nbs=4k\nsize=256k\nnumjobs=2\n";
    let (results, _) = run_in_turn(&fio_plan_of(text, &[0, 1]), &disk);
    assert_eq!(results[0].ios(), 64, "the first clone does all of its I/Os");
    assert!(!results[0].stopped_early);
    assert_eq!(results[1].ios(), 0, "the first clone's end stopped the second");
    assert!(results[1].stopped_early);
    // Without exitall each clone does its own.
    let (results, _) = run_in_turn(&fio_plan_of(&text.replace("exitall\n", ""), &[0, 1]), &disk);
    assert_eq!((results[0].ios(), results[1].ios()), (64, 64));
}

#[test]
fn exitall_the_end_of_a_job_stops_the_jobs_of_its_wave_it_names() {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    // quick (exit_what=stonewall) and slow run at the same time: quick's end stops slow, which
    // would otherwise read its 256 KiB ten times over.
    let text = "[global]\nexitall\nbs=4k\nsize=256k\n[quick]\nexit_what=stonewall\nrw=read\n\
                [slow]\nnew_group\nrw=read\nloops=10\n";
    let run = parse_job_file(text, &[]).unwrap();
    let specs = workload::fio::wave_specs(&run.jobs, &[common::md0()], &[0, 1]).unwrap();
    let plans: Vec<JobPlan> = specs
        .iter()
        .map(|s| plan_job(s, &[common::md0()], &[0, 1]).unwrap())
        .collect();
    let refs: Vec<&JobPlan> = plans.iter().collect();
    let wave = workload::WaveExit::for_wave(&refs);
    assert!(wave.is_some());
    let shareds: Vec<JobShared> = plans
        .iter()
        .enumerate()
        .map(|(index, plan)| JobShared::new(plan).with_wave_exit(wave.clone(), index))
        .collect();
    let run_job = |index: usize| {
        let plan = &plans[index];
        let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
        run_cpu(plan, 0, &mut backend, &shareds[index]).unwrap()
    };
    let quick = run_job(0);
    assert_eq!(quick.ios(), 64);
    let slow = run_job(1);
    assert!(slow.stopped_early, "quick's end stopped slow");
    assert!(slow.ios() < 640, "{}", slow.ios());
    // slow's own end (exit_what=group, a group of its own) stops nothing beside it.
    assert!(plans[1].spec.exitall_stops.is_empty());
}

#[test]
fn blockalign_aligns_random_offsets_and_draws_with_repeats() {
    let text = "[a]\nrw=randread\nbs=4k\nblockalign=16k\nsize=1m\niodepth=4\nioengine=libaio\n";
    let job = &parse_job_file(text, &[]).unwrap().jobs[0];
    assert!(!job.spec.random_map, "blockalign turns the random map off, as in fio");
    assert_eq!(job.spec.align_blocks, 4);
    assert!(
        job.warnings
            .iter()
            .any(|w| w.starts_with("blockalign=16384: random offsets are multiples of 16384"))
    );
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let (results, backends) = run_in_turn(&fio_plan_of(text, &[0]), &disk);
    assert_eq!(results[0].ios(), 256);
    let lbas: Vec<u64> = backends[0].submit_log.iter().map(|(_, lba)| *lba).collect();
    assert!(
        lbas.iter().all(|lba| lba % 32 == 0 && *lba < 2048),
        "16 KiB = 32 sectors, inside 1 MiB: {lbas:?}"
    );
    let distinct: std::collections::BTreeSet<u64> = lbas.iter().copied().collect();
    assert!(
        distinct.len() > 40 && distinct.len() <= 64,
        "64 aligned offsets drawn with repeats: {}",
        distinct.len()
    );
    // Equal to the block size it is fio's default; a sequential job ignores it (a warning says so);
    // smaller than the block, or not a multiple, is refused.
    assert_eq!(
        parse_job_file("[a]\nrw=randread\nba=4k\n", &[]).unwrap().jobs[0]
            .spec
            .align_blocks,
        1
    );
    let sequential = &parse_job_file("[a]\nrw=read\nba=16k\n", &[]).unwrap().jobs[0];
    assert_eq!(sequential.spec.align_blocks, 1);
    assert!(
        sequential
            .warnings
            .iter()
            .any(|w| w.contains("aligns random offsets only"))
    );
    for bad in ["512", "6k", "16k,8k"] {
        let text = format!("[a]\nrw=randread\nbs=4k\nblockalign={bad}\n");
        assert!(
            matches!(parse_job_file(&text, &[]), Err(WorkloadError::FioUnsupported { option, .. }) if option == "blockalign"),
            "{bad}"
        );
    }
}

#[test]
fn buffer_pattern_is_the_data_of_writes_without_verify() {
    let text = "[w]\nrw=write\nbs=4k\nsize=64k\nbuffer_pattern=0xdeadbeef\n";
    let job = &parse_job_file(text, &[]).unwrap().jobs[0];
    assert_eq!(job.spec.buffer_pattern, [0xde, 0xad, 0xbe, 0xef]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let (results, _) = run_in_turn(&fio_plan_of(text, &[0]), &disk);
    assert_eq!(results[0].ios(), 16);
    for block in 0..16u64 {
        let data = disk.read_block(block * 8, 4096);
        assert!(data.chunks(4).all(|c| c == [0xde, 0xad, 0xbe, 0xef]), "block {block}");
    }
    assert_eq!(
        disk.read_block(16 * 8, 4096),
        vec![0u8; 4096],
        "nothing past the region"
    );
    // A mixed job keeps the pattern in a slot that last held a read.
    let mixed = "[m]\nrw=randrw\nbs=4k\nsize=256k\niodepth=4\nioengine=libaio\nbuffer_pattern=\"ab\"\nnorandommap\n";
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    run_in_turn(&fio_plan_of(mixed, &[0]), &disk);
    let written: Vec<u64> = (0..64u64)
        .filter(|b| disk.read_block(b * 8, 4096) != vec![0u8; 4096])
        .collect();
    assert!(!written.is_empty());
    for block in written {
        assert!(
            disk.read_block(block * 8, 4096).chunks(2).all(|c| c == b"ab"),
            "block {block}"
        );
    }
    // With verify the block format is baremq's: refused by name.
    assert!(matches!(
        parse_job_file("[w]\nrw=write\nverify=crc32c\nbuffer_pattern=0xff\n", &[]),
        Err(WorkloadError::FioUnsupported { option, .. }) if option == "buffer_pattern"
    ));
}

#[test]
fn verify_interval_stamps_and_checks_each_unit_of_a_block() {
    // fio's verify_interval=512 with bs=8k: a header every 512 bytes, each with its own first
    // sector, each unit checked on its own.
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let write = "[v]\nrw=write\nbs=8k\nsize=64k\nverify=crc32c\nverify_interval=512\n";
    let plan = fio_plan_of(write, &[0]);
    assert_eq!(plan.spec.verify_interval, 512);
    let (results, _) = run_in_turn(&plan, &disk);
    let verify = &results[0].verify;
    assert_eq!(
        (verify.checked, verify.mismatches),
        (8 * 16, 0),
        "16 units in each of 8 blocks"
    );
    let magic = b"BAREMQv1";
    for sector in 0..128u64 {
        let unit = disk.read_block(sector, 512);
        assert_eq!(&unit[..8], magic, "sector {sector}");
        assert_eq!(u64::from_le_bytes(unit[8..16].try_into().unwrap()), sector);
        assert_eq!(u32::from_le_bytes(unit[28..32].try_into().unwrap()), 512);
    }
    // A corrupt byte in the third unit of the second block: that unit (sector 18) alone fails.
    disk.corrupt_byte(18, 100);
    let read = "[v]\nrw=read\nbs=8k\nsize=64k\nverify=crc32c\nverify_interval=512\n";
    let (results, _) = run_in_turn(&fio_plan_of(read, &[0]), &disk);
    let verify = &results[0].verify;
    // The job stops at its first bad block (fio's default), whose other 15 units were checked:
    // the first block's 16 units and 15 of the second's.
    assert_eq!((verify.checked, verify.mismatches), (16 + 15, 1));
    let (_, mismatch) = verify.first_mismatch.as_ref().unwrap();
    assert_eq!(mismatch.lba, 18);
}

#[test]
fn fill_device_writes_to_the_end_of_the_device() {
    let disk = [device("nvme0n1", 4)];
    let text = "[fill]\nfilename=/dev/nvme0n1\nrw=write\nbs=64k\nsize=64k\noffset=1m\nfill_device=1\n";
    let plan = plan_on(text, &disk).unwrap();
    assert_eq!((plan.region_offset, plan.region_bytes), (1 << 20, 3 << 20));
    let job = &parse_job_file(text, &[]).unwrap().jobs[0];
    assert!(
        job.warnings.iter().any(|w| w
            .starts_with("fill_device=1: the job runs from its offset to the end of its device (its size is ignored)")),
        "{:?}",
        job.warnings
    );
    let plan = plan_on("[fill]\nfilename=/dev/nvme0n1\nrw=write\nbs=64k\nfill_fs=1\n", &disk).unwrap();
    assert_eq!(plan.region_bytes, 4 << 20);
}

#[test]
fn dedupe_and_compress_percentages_shape_what_the_writes_carry() {
    // dedupe_percentage=50: about half of 1,024 writes repeat the last unique content.
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let plan = fio_plan_of("[d]\nrw=write\nbs=4k\nsize=4m\ndedupe_percentage=50\n", &[0]);
    assert!(plan.spec.write_content.is_some());
    run_in_turn(&plan, &disk);
    let blocks: std::collections::BTreeSet<Vec<u8>> = (0..1024u64).map(|b| disk.read_block(b * 8, 4096)).collect();
    assert!(
        (440..590).contains(&blocks.len()),
        "{} distinct blocks of 1024",
        blocks.len()
    );
    // buffer_compress_percentage=75: each 512-byte chunk is a quarter random, then zeros.
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    run_in_turn(
        &fio_plan_of("[c]\nrw=write\nbs=4k\nsize=64k\nbuffer_compress_percentage=75\n", &[0]),
        &disk,
    );
    for block in 0..16u64 {
        for chunk in disk.read_block(block * 8, 4096).chunks(512) {
            assert!(chunk[..128].iter().any(|b| *b != 0) && chunk[128..].iter().all(|b| *b == 0));
        }
    }
    // With verify the block format is baremq's: refused by name.
    assert!(matches!(
        parse_job_file("[d]\nrw=write\nverify=crc32c\ndedupe_percentage=10\n", &[]),
        Err(WorkloadError::FioUnsupported { option, .. }) if option == "dedupe_percentage"
    ));
    assert!(matches!(
        parse_job_file("[d]\nrw=write\ndedupe_mode=sometimes\n", &[]),
        Err(WorkloadError::FioBadValue { option, .. }) if option == "dedupe_mode"
    ));
}

#[test]
fn do_verify_0_stamps_the_writes_and_reads_nothing_back() {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let write = "[v]\nrw=write\nbs=4k\nsize=64k\nverify=crc32c\ndo_verify=0\n";
    let plan = fio_plan_of(write, &[0]);
    assert!(plan.spec.skip_verify_pass);
    let (results, backends) = run_in_turn(&plan, &disk);
    assert_eq!(results[0].verify.pass_reads, 0);
    assert_eq!(backends[0].submit_log.len(), 16, "16 writes and no read");
    let report = workload::JobReport::new(&plan, &results).unwrap();
    assert_eq!(report.verify.result, workload::VerifyResult::Written);
    assert!(report.passed());
    assert_eq!(
        &disk.read_block(8, 8)[..],
        b"BAREMQv1",
        "the blocks carry their headers"
    );
    // A later read job with verify checks them all.
    let read = "[v]\nrw=read\nbs=4k\nsize=64k\nverify=crc32c\n";
    let (results, _) = run_in_turn(&fio_plan_of(read, &[0]), &disk);
    assert_eq!((results[0].verify.checked, results[0].verify.mismatches), (16, 0));
    // With do_verify=0 a read job checks nothing, as fio.
    let unchecked = "[v]\nrw=read\nbs=4k\nsize=64k\nverify=crc32c\ndo_verify=0\n";
    let (results, _) = run_in_turn(&fio_plan_of(unchecked, &[0]), &disk);
    assert_eq!(results[0].verify.checked, 0);
}

#[test]
fn verify_interval_must_divide_the_block_into_sectors() {
    assert!(parse_job_file("[v]\nrw=write\nbs=8k\nverify=crc32c\nverify_interval=8k\n", &[]).is_ok());
    let disk = [device("nvme0n1", 4)];
    for (interval, why) in [
        ("768", "not a divisor of bs"),
        ("256", "below a sector"),
        ("16k", "above bs"),
    ] {
        let text = format!("[v]\nfilename=/dev/nvme0n1\nrw=write\nbs=8k\nverify=crc32c\nverify_interval={interval}\n");
        assert!(
            matches!(plan_on(&text, &disk), Err(WorkloadError::FioUnsupported { option, .. }) if option == "verify_interval"),
            "{interval}: {why}"
        );
    }
    // fio's headerless verify=pattern has nothing to stamp per unit.
    let text =
        "[v]\nfilename=/dev/nvme0n1\nrw=write\nbs=8k\nverify=pattern\nverify_pattern=0xaa\nverify_interval=512\n";
    assert!(matches!(
        plan_on(text, &disk),
        Err(WorkloadError::FioUnsupported { option, .. }) if option == "verify_interval"
    ));
}

#[test]
fn blockalign_with_bssplit_and_zones_as_jesd219_asks() {
    // The shape of fio's examples/jesd219.fio: sizes from 512 bytes to 64 KiB, offsets on 4 KiB
    // boundaries, 50% of the accesses in the first 5% of the region.
    let text = "[j]\nrw=randrw\nrwmixread=40\nnorandommap\nio_size=16m\nsize=4m\n\
                bssplit=512/4:1024/1:1536/1:2048/1:2560/1:3072/1:3584/1:4k/67:8k/10:16k/7:32k/3:64k/3\n\
                blockalign=4k\nrandom_distribution=zoned:50/5:30/15:20/80\n";
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let plan = fio_plan_of(text, &[0]);
    let (_, backends) = run_in_turn(&plan, &disk);
    let log = &backends[0].submit_log;
    assert!(log.len() > 1000, "{} I/Os", log.len());
    assert!(
        log.iter().all(|(_, lba)| lba % 8 == 0),
        "every offset on a 4 KiB boundary"
    );
    let sizes: std::collections::BTreeSet<u32> = backends[0].submit_sectors.iter().copied().collect();
    assert!(sizes.contains(&1) && sizes.contains(&8) && sizes.len() > 5, "{sizes:?}");
    // The first 5% (204.8 KiB of 4 MiB) takes about half of the accesses.
    let hot = log
        .iter()
        .filter(|(_, lba)| lba * u64::from(SECTOR) < 4 * 1024 * 1024 / 20)
        .count();
    let share = hot as f64 / log.len() as f64;
    assert!((0.42..0.58).contains(&share), "{share}");
}

/// The offsets (KiB from the device's start) of a one-clone job's I/Os, in order.
fn offsets_kib(text: &str) -> Vec<u64> {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let (_, backends) = run_in_turn(&fio_plan_of(text, &[0]), &disk);
    backends[0]
        .submit_log
        .iter()
        .map(|(_, lba)| lba * u64::from(SECTOR) / 1024)
        .collect()
}

#[test]
fn sequential_offset_modifiers_give_fio_offsets() {
    // Each list is what fio 3.33 issued for the same job on a 4 MiB block device (bs=4k,
    // size=64k, its write_iolog), offsets in KiB.
    let cases: [(&str, &str, &[u64]); 14] = [
        ("read:4k", "offset=4k\nsize=60k", &[4, 12, 20, 28, 36, 44, 52, 60]),
        (
            "read:-12k",
            "size=60k",
            &[0, 48, 40, 32, 24, 16, 8, 0, 48, 40, 32, 24, 16, 8, 0],
        ),
        (
            "read:-8k",
            "",
            &[0, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0],
        ),
        (
            "read:-8k",
            "offset=16k",
            &[56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 72, 68, 64, 60, 56],
        ),
        (
            "write:-8k",
            "",
            &[0, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0],
        ),
        (
            "write:-8k",
            "offset=16k",
            &[56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 72, 68, 64, 60, 56],
        ),
        ("read:4k", "", &[0, 8, 16, 24, 32, 40, 48, 56]),
        ("read:4k", "offset=16k", &[16, 24, 32, 40, 48, 56, 64, 72]),
        ("read:8k", "", &[0, 12, 24, 36, 48, 60]),
        ("read:8k", "offset=16k", &[16, 28, 40, 52, 64, 76]),
        ("read:-4k", "", &[0; 16]),
        ("read:-4k", "offset=16k", &[60; 16]),
        ("write:+4k", "", &[0, 8, 16, 24, 32, 40, 48, 56]),
        (
            "read:0",
            "",
            &[0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60],
        ),
    ];
    for (rw, extra, fio) in cases {
        // A later size= in `extra` wins, as in fio.
        let text = format!("[s]\nrw={rw}\nbs=4k\nsize=64k\n{extra}\n");
        assert_eq!(offsets_kib(&text), fio, "{rw} {extra}");
    }
    let job = &parse_job_file("[s]\nrw=read:-8k\nbs=4k\n", &[]).unwrap().jobs[0];
    assert_eq!(job.spec.offset_add_blocks, -2);
}

#[test]
fn a_sequential_mix_with_an_offset_modifier_walks_each_direction_on_its_own() {
    // rw=rw:4k with bs=4k over 64 KiB: fio keeps a position per direction, so reads and writes
    // each walk 0, 8k, 16k ... from the region's start; the first walk to pass the end ends the
    // job.
    for seed in 1..20u64 {
        let plan = fio_plan_of(&format!("[m]\nrw=rw:4k\nbs=4k\nsize=64k\nrandseed={seed}\n"), &[0]);
        let mut generator = workload::generator::IoGenerator::new(&plan, 0);
        let mut walks: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
        while let Some((op, block)) = generator.next_io() {
            walks[usize::from(op == workload::IoOp::Write)].push(block);
        }
        for walk in &walks {
            let expected: Vec<u64> = (0..walk.len() as u64).map(|i| i * 2).collect();
            assert_eq!(walk, &expected, "seed {seed}");
        }
        assert_eq!(
            walks[0].len().max(walks[1].len()),
            8,
            "seed {seed}: a walk reached the end"
        );
    }
}

#[test]
fn verified_writes_with_an_offset_modifier_check_every_block_they_wrote() {
    // Holes, a backwards walk that writes its first block twice, two passes, a sequential mix:
    // each tracked block by block, the verify pass reading back exactly the blocks written.
    for (rw, extra, written) in [
        ("write:4k", "", 8u64),
        ("write:-8k", "", 15),
        ("write:4k", "loops=2\n", 8),
        ("rw:4k", "", 0),
    ] {
        let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
        let text = format!("[v]\nrw={rw}\nbs=4k\nsize=64k\nverify=crc32c\n{extra}");
        let plan = fio_plan_of(&text, &[0]);
        assert_eq!(plan.verify, workload::VerifyScheme::Tracked, "{text}");
        let (results, _) = run_in_turn(&plan, &disk);
        let result = &results[0];
        assert_eq!(result.verify.mismatches, 0, "{text}");
        assert!(result.verify.checked > 0, "{text}");
        if written > 0 {
            // The distinct blocks written, each read back once by the verify pass.
            assert_eq!(result.verify.pass_reads, written, "{text}");
        }
        // Every block the job wrote holds its stamp; the holes stayed zero.
        let nonzero = (0..16u64)
            .filter(|b| disk.read_block(b * 8, 4096).iter().any(|&x| x != 0))
            .count() as u64;
        if written > 0 {
            assert_eq!(nonzero, written, "{text}");
        }
    }
}

#[test]
fn loops_start_a_modified_walk_over_at_its_end() {
    // fio runs the job `loops` times: rw=read:4k over 64 KiB is 8 reads a pass, 0, 8k ... 56k.
    let pass: Vec<u64> = (0..8).map(|i| i * 2).collect();
    for loops in [1u64, 2, 3] {
        let plan = fio_plan_of(&format!("[l]\nrw=read:4k\nbs=4k\nsize=64k\nloops={loops}\n"), &[0]);
        let mut generator = workload::generator::IoGenerator::new(&plan, 0);
        let blocks: Vec<u64> = core::iter::from_fn(|| generator.next_io().map(|(_, b)| b)).collect();
        assert_eq!(blocks, pass.repeat(loops as usize), "loops={loops}");
    }
    // A sequential mix starts both walks over together.
    let plan = fio_plan_of("[m]\nrw=rw:4k\nbs=4k\nsize=64k\nloops=2\n", &[0]);
    let mut generator = workload::generator::IoGenerator::new(&plan, 0);
    let ios: Vec<(workload::IoOp, u64)> = core::iter::from_fn(|| generator.next_io()).collect();
    // Each direction walks 0, 2, 4 ... 14; the I/O after a walk's last block starts pass two,
    // where both walks begin at 0 again; the end of a walk in pass two ends the job.
    let (mut next, mut pass) = ([0u64; 2], 1);
    for (i, (op, block)) in ios.iter().enumerate() {
        let d = usize::from(*op == workload::IoOp::Write);
        if next[d] == 16 {
            assert_eq!(pass, 1, "I/O {i}: a third pass in {ios:?}");
            (next, pass) = ([0, 0], 2);
        }
        assert_eq!(*block, next[d], "I/O {i} of {ios:?}");
        next[d] += 2;
    }
    assert_eq!(pass, 2, "{ios:?}");
    assert!(next.contains(&16), "the job ends at a walk's end: {ios:?}");
}

#[test]
fn time_based_sequential_modifiers_start_over_at_the_end() {
    // fio's time-based job starts the walk again where a size-bound one ends.
    let plan = fio_plan_of("[t]\nrw=read:8k\nbs=4k\nsize=64k\ntime_based\nruntime=1s\n", &[0]);
    let mut generator = workload::generator::IoGenerator::new(&plan, 0);
    let blocks: Vec<u64> = (0..14).map(|_| generator.next_io().unwrap().1).collect();
    assert_eq!(blocks, [0, 3, 6, 9, 12, 15, 0, 3, 6, 9, 12, 15, 0, 3]);
}

#[test]
fn random_runs_are_sequential_between_draws_and_end_at_the_region_end() {
    // rw=randread:4: a random offset, then three sequential ones from it (fio 3.33: 0 4 8 12,
    // 44 48 52 56, 52 56 60, then the region's end ends the job).
    let text = "[r]\nrw=randread:4\nbs=4k\nsize=64k\n";
    let job = &parse_job_file(text, &[]).unwrap().jobs[0];
    assert_eq!(job.spec.random_run, 4);
    for seed in 1..40u64 {
        let offsets = offsets_kib(&format!("{text}randseed={seed}\n"));
        assert!(!offsets.is_empty() && offsets.len() <= 16, "{offsets:?}");
        for (index, pair) in offsets.windows(2).enumerate() {
            if (index + 1) % 4 != 0 {
                assert_eq!(pair[1], pair[0] + 4, "seed {seed}: {offsets:?}");
            }
        }
        if offsets.len() < 16 {
            // Only a run that reaches the region's end ends the job early.
            assert_eq!(*offsets.last().unwrap(), 60, "seed {seed}: {offsets:?}");
            assert_ne!(offsets.len() % 4, 0, "seed {seed}: {offsets:?}");
        }
    }
    // Every I/O random: fio's randread, each block once.
    let mut once = offsets_kib("[r]\nrw=randread:1\nbs=4k\nsize=64k\n");
    once.sort_unstable();
    assert_eq!(once, (0..16).map(|b| b * 4).collect::<Vec<u64>>());
}

#[test]
fn offset_modifiers_baremq_cannot_carry_out_are_refused() {
    for (text, option) in [
        ("[a]\nrw=write:11k\nbs=4k\nnumber_ios=4\n", "number_ios"),
        ("[a]\nrw=trim:4k\n", "rw=trim:4096"),
        ("[a]\nrw=randrw:4\n", "rw=randrw:4"),
        ("[a]\nrw=read:4k\nbsrange=4k-16k\n", "rw=read:4096"),
        ("[a]\nrw=randwrite:4\nverify=crc32c\n", "rw=randwrite:4"),
        ("[a]\nrw=randread:4\nloops=2\n", "rw=randread:4"),
        ("[a]\nrw=randread:4\nrandom_distribution=zipf:1.2\n", "rw=randread:4"),
    ] {
        match parse_job_file(text, &[]) {
            Err(WorkloadError::FioUnsupported { option: got, .. }) => assert_eq!(got, option, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    for bad in ["rw=randread:0", "rw=randread:x", "rw=read:4q"] {
        assert!(
            matches!(
                parse_job_file(&format!("[a]\n{bad}\n"), &[]),
                Err(WorkloadError::FioBadValue { .. })
            ),
            "{bad}"
        );
    }
    // A later rw= without a modifier clears it, as fio's does.
    assert_eq!(
        parse_job_file("[a]\nrw=read:8k\nrw=read\n", &[]).unwrap().jobs[0]
            .spec
            .offset_add_blocks,
        0
    );
}

#[test]
fn strided_zones_give_fio_offsets() {
    // What fio 3.33 issued for the same jobs (bs=4k, write_iolog), offsets in KiB.
    let zone = |starts: std::ops::Range<u64>, stride: u64, first: u64| -> Vec<u64> {
        starts
            .flat_map(|z| (0..4).map(move |i| first + z * stride + i * 4))
            .collect()
    };
    let cases: [(&str, Vec<u64>); 4] = [
        (
            "zonesize=16k\nzonerange=32k\nzoneskip=32k\nsize=256k",
            zone(0..16, 64, 0),
        ),
        ("zonesize=16k\nzoneskip=16k\nsize=128k", zone(0..8, 32, 0)),
        (
            "zonesize=16k\nzonerange=32k\nzoneskip=32k\nsize=256k\noffset=8k",
            zone(0..16, 64, 8),
        ),
        (
            "zonesize=32k\nzonerange=16k\nzoneskip=16k\nsize=128k",
            [
                0, 4, 8, 12, 0, 4, 8, 12, 32, 36, 40, 44, 32, 36, 40, 44, 64, 68, 72, 76, 64, 68, 72, 76, 96, 100, 104,
                108, 96, 100, 104, 108,
            ]
            .to_vec(),
        ),
    ];
    for (zones, fio) in cases {
        let text = format!("[z]\nrw=read\nbs=4k\nzonemode=strided\n{zones}\n");
        assert_eq!(offsets_kib(&text), fio, "{zones}");
    }
    // Random: each zone's I/Os land in its range, each block of it once (fio resets its map per
    // zone): fio gave 0 20 24 12 | 76 88 80 72 | ...
    let random = offsets_kib(
        "[z]\nrw=randread\nbs=4k\nzonemode=strided\nzonesize=16k\nzonerange=32k\nzoneskip=32k\nsize=256k\n",
    );
    assert_eq!(random.len(), 64);
    for (z, chunk) in random.chunks(4).enumerate() {
        let start = z as u64 * 64;
        assert!(
            chunk.iter().all(|o| (start..start + 32).contains(o) && o % 4 == 0),
            "zone {z}: {chunk:?}"
        );
        let distinct: std::collections::BTreeSet<_> = chunk.iter().collect();
        assert_eq!(distinct.len(), 4, "zone {z}: {chunk:?}");
    }
    // Past the device's end the zones start over at the first (8 MiB disk: 128 zones of 64 KiB).
    let wrapped =
        offsets_kib("[z]\nrw=read\nbs=4k\nzonemode=strided\nzonesize=16k\nzonerange=32k\nzoneskip=32k\nsize=8m\n");
    assert_eq!(wrapped.len(), 2048);
    assert_eq!(&wrapped[508..516], &[8128, 8132, 8136, 8140, 0, 4, 8, 12]);
    let job = &parse_job_file("[z]\nrw=read\nzonemode=strided\nzonesize=16k\nsize=1m\n", &[])
        .unwrap()
        .jobs[0];
    assert_eq!(job.spec.size, None, "the zones stride over the device from offset on");
    assert_eq!(job.ios_per_pass, Some(256), "size is the bytes moved");
}

#[test]
fn zone_options_baremq_cannot_carry_out_are_refused() {
    for (text, option) in [
        ("[z]\nzonemode=zbd\n", "zonemode"),
        ("[z]\nzonemode=strided\n", "zonemode"),
        ("[z]\nrw=rw\nzonemode=strided\nzonesize=16k\n", "zonemode"),
        (
            "[z]\nrw=write\nverify=crc32c\nzonemode=strided\nzonesize=16k\n",
            "zonemode",
        ),
        ("[z]\nrw=read\nzonemode=strided\nzonesize=16k\nsize=10%\n", "zonemode"),
    ] {
        match parse_job_file(text, &[]) {
            Err(WorkloadError::FioUnsupported { option: got, .. }) => assert_eq!(got, option, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    for text in [
        "[z]\nzonemode=strided\nzonesize=6k\n",
        "[z]\nzonemode=other\n",
        "[z]\nzonemode=strided\nzonesize=16k\nzoneskip=2z\n",
    ] {
        assert!(
            matches!(parse_job_file(text, &[]), Err(WorkloadError::FioBadValue { .. })),
            "{text}"
        );
    }
    // Without zonemode=strided, fio ignores the sizes (a warning says so).
    let job = &parse_job_file("[z]\nzonesize=16k\n", &[]).unwrap().jobs[0];
    assert!(
        job.warnings
            .iter()
            .any(|w| w.starts_with("zonesize, zonerange, zoneskip: ignored"))
    );
    assert!(job.spec.strided_zones.is_none());
}

/// (offset KiB, length KiB) of a one-clone job's I/Os, in order.
fn ios_kib(text: &str) -> Vec<(u64, u64)> {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let (_, backends) = run_in_turn(&fio_plan_of(text, &[0]), &disk);
    let kib = |sectors: u64| sectors * u64::from(SECTOR) / 1024;
    backends[0]
        .submit_log
        .iter()
        .zip(&backends[0].submit_sectors)
        .map(|((_, lba), sectors)| (kib(*lba), kib(u64::from(*sectors))))
        .collect()
}

#[test]
fn steps_that_are_not_whole_blocks_give_fio_offsets() {
    // What fio 3.33 issued (write_iolog), every I/O bs long: (offset, length) in KiB.
    let four = |offsets: &[u64]| offsets.iter().map(|o| (*o, 4)).collect::<Vec<_>>();
    let cases: [(&str, Vec<(u64, u64)>); 6] = [
        ("rw=write:11k\nsize=64k", four(&[0, 15, 30, 45, 60])),
        ("rw=write:11k\nsize=64k\noffset=16k", four(&[16, 31, 46, 61, 76])),
        // The last I/O starts inside the region and runs past its end: fio issues it whole.
        ("rw=write:11k\nsize=76k", four(&[0, 15, 30, 45, 60, 75])),
        (
            "rw=read:-6k\nsize=64k",
            four(&[0, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30]),
        ),
        (
            "rw=read:-6k\nsize=64k\noffset=16k",
            four(&[58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28]),
        ),
        (
            "rw=read:2k\nsize=64k",
            four(&[0, 6, 12, 18, 24, 30, 36, 42, 48, 54, 60]),
        ),
    ];
    for (job, fio) in cases {
        assert_eq!(ios_kib(&format!("[s]\nbs=4k\n{job}\n")), fio, "{job}");
    }
    assert_eq!(
        ios_kib("[s]\nbs=2k\nrw=read:1k\nsize=16k\n"),
        [(0, 2), (3, 2), (6, 2), (9, 2), (12, 2), (15, 2)]
    );
    let job = &parse_job_file("[s]\nrw=write:11k\nbs=4k\n", &[]).unwrap().jobs[0];
    assert_eq!(
        (job.spec.bs, job.spec.offset_add_blocks),
        (1024, 11),
        "units of 1k, each I/O 4 of them"
    );
    // A step and bs whose common size is not whole sectors is refused.
    assert!(matches!(
        parse_job_file("[s]\nrw=write:4100\nbs=4k\n", &[]),
        Err(WorkloadError::FioUnsupported { option, .. }) if option == "rw=write:4100"
    ));
}

/// fio 3.33's io_uring_cmd examples: `cmd_type=nvme` and io_uring's submission knobs are
/// accepted with warnings, `hipri` points at the kernel's polled queues, and the NVMe generic
/// character device `/dev/ngXnY` names the namespace baremq calls `nvmeXnY`.
#[test]
fn io_uring_cmd_options_and_generic_nvme_names() {
    let text = "[global]\nfilename=/dev/ng0n1\nioengine=io_uring_cmd\ncmd_type=nvme\nsize=1m\nbs=4k\n\
                [w]\nrw=write\nsqthread_poll=1\nsqthread_poll_cpu=0\nnonvectored=1\nregisterfiles=1\nhipri\n";
    let job = &parse_job_file(text, &[]).unwrap().jobs[0];
    for key in [
        "cmd_type=nvme",
        "sqthread_poll:",
        "registerfiles:",
        "nonvectored:",
        "hipri:",
    ] {
        assert!(
            job.warnings.iter().any(|w| w.starts_with(key)),
            "{key}: {:?}",
            job.warnings
        );
    }
    let nvme = workload::DeviceInfo {
        name: "nvme0n1".into(),
        sector_size: 512,
        capacity_sectors: 1 << 21,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    };
    let spec = job.to_spec(&[nvme], &[0]).unwrap();
    assert_eq!(spec.device.as_deref(), Some("nvme0n1"));
    assert!(parse_job_file("[a]\ncmd_type=scsi\n", &[]).is_err());
}

/// fio 3.33's examples/numa.fio and its NUMA options: `numa_cpu_nodes` becomes the listed nodes'
/// CPUs (within `cpus_allowed`), once the box's map resolves it; a job whose nodes were never
/// resolved is refused rather than run anywhere; `numa_mem_policy` names the buffers' node.
#[test]
fn numa_options_place_clones_and_buffers_on_nodes() {
    let text = "[a]\nioengine=libaio\nrw=randread\nnumjobs=2\nnuma_cpu_nodes=1\nnuma_mem_policy=bind:0\n\
                [b]\nstonewall\nrw=randread\nnuma_cpu_nodes=0-1\ncpus_allowed=0,3\nnuma_mem_policy=local\n";
    let mut run = parse_job_file(text, &[]).unwrap();
    assert_eq!(run.jobs[0].spec.buffer_node, Some(0));
    assert_eq!(run.jobs[1].spec.buffer_node, None);
    let nvme = workload::DeviceInfo {
        name: "nvme0n1".into(),
        sector_size: 512,
        capacity_sectors: 1 << 21,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    };
    let online = [0, 1, 2, 3];
    // Not resolved: refused by name when placed.
    let error = run.jobs[0]
        .to_spec(std::slice::from_ref(&nvme), &online)
        .unwrap_err()
        .to_string();
    assert!(error.contains("numa_cpu_nodes=1"), "{error}");
    // Two nodes: CPUs 0-1 on node 0, 2-3 on node 1.
    workload::fio::place_on_nodes(&mut run, &online, &|cpu| Some(cpu / 2)).unwrap();
    let a = run.jobs[0].to_spec(std::slice::from_ref(&nvme), &online).unwrap();
    assert_eq!(a.cpus.to_string(), "2-3");
    assert_eq!(run.jobs[1].cpus_allowed.unwrap().to_string(), "0,3");
    // A node with no online CPU, and fio's forms that do not fit one node per clone.
    let mut far = parse_job_file("[c]\nnuma_cpu_nodes=5\n", &[]).unwrap();
    let error = workload::fio::place_on_nodes(&mut far, &online, &|cpu| Some(cpu / 2)).unwrap_err();
    assert!(error.to_string().contains("numa_cpu_nodes=5"), "{error}");
    for bad in [
        "numa_mem_policy=interleave:x",
        "numa_mem_policy=bind:0-1",
        "numa_mem_policy=often",
    ] {
        assert!(parse_job_file(&format!("[d]\n{bad}\n"), &[]).is_err(), "{bad}");
    }
    // interleave: each I/O buffer from the next listed node (fio interleaves pages).
    let spread = parse_job_file("[e]\nnuma_mem_policy=interleave:0-1,3\n", &[]).unwrap();
    assert_eq!(spread.jobs[0].spec.buffer_interleave, [0, 1, 3]);
    assert_eq!(spread.jobs[0].spec.buffer_node, None);
}

#[test]
fn continue_on_error_goes_on_after_the_classes_it_names_only() {
    use common::Fault;
    use workload::{IoError, IoOp};
    let run = |options: &str| {
        let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
        let plan = fio_plan_of(&format!("[w]\nrw=write\nbs=4k\nsize=256k\n{options}"), &[0]);
        let shared = JobShared::new(&plan);
        let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
        // The first 8 blocks' writes fail.
        backend.faults.push(Fault::FailRange {
            from: 0,
            to: 8 * u64::from(4096 / SECTOR),
            op: IoOp::Write,
            error: IoError::Device { status: 0x2d },
        });
        (plan.clone(), run_cpu(&plan, 0, &mut backend, &shared).unwrap())
    };
    // write (and io, all): the job goes on over the failed writes to its end.
    for going_on in [
        "continue_on_error=write\n",
        "continue_on_error=io\n",
        "continue_on_error=all\n",
    ] {
        let (plan, result) = run(going_on);
        assert_eq!(result.ios(), 64, "{going_on}");
        assert_eq!(result.write.errors, 8, "{going_on}");
        assert!(!result.stopped_early, "{going_on}");
        assert!(!plan.spec.stops_on(workload::ErrorClass::Write), "{going_on}");
    }
    // read, verify, none: a failed write stops the job, as fio's classes say.
    for stopping in ["continue_on_error=read\n", "continue_on_error=verify\n", ""] {
        let (plan, result) = run(stopping);
        assert!(result.stopped_early, "{stopping}");
        assert!(result.ios() < 64, "{stopping}");
        assert!(plan.spec.stops_on(workload::ErrorClass::Write), "{stopping}");
    }
    // verify_fatal keeps mismatches fatal under continue_on_error=all.
    let plan = fio_plan_of(
        "[v]\nrw=write\nverify=crc32c\ncontinue_on_error=all\nverify_fatal=1\nsize=64k\n",
        &[0],
    );
    assert!(plan.spec.stops_on(workload::ErrorClass::Verify));
    assert!(!plan.spec.stops_on(workload::ErrorClass::Read));
    assert!(matches!(
        parse_job_file("[a]\ncontinue_on_error=sometimes\n", &[]),
        Err(WorkloadError::FioBadValue { option, .. }) if option == "continue_on_error"
    ));
}
