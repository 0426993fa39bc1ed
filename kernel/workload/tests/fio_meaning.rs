//! fio options read with fio 3.33's meaning, checked on the plan the front-end makes (and, where
//! the meaning is in the offsets, on the I/Os the engine issues against the fake disk).

mod common;

use common::fio_plan_of;
use workload::fio::parse_job_file;

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
