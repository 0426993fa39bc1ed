//! fio options read with fio 3.33's meaning, checked on the plan the front-end makes (and, where
//! the meaning is in the offsets, on the I/Os the engine issues against the fake disk).

mod common;

use common::{fio_plan_of, md0};
use workload::fio::{Target, parse_job_file};
use workload::{DeviceInfo, JobPlan, WorkloadError, plan_job};

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
