//! A burst of `submit_deferred` reaches the controller with one SQ tail doorbell, at `commit`:
//! before it the fake has fetched nothing, after it every command, and all complete
//! with one message for the pass. (`Config::doorbell_batch` at the burst's size or more: with a
//! smaller batch the burst rings every batch, tests/doorbell_batch.rs.)

mod common;

use blk::{Bio, Segment, Status};
use common::{Buf, Rig};
use nvme::blkdev::HostConfig;
use nvme::fake::{FakeCompletion, FakeConfig};
use nvme::{Config, IrqMode};

#[test]
fn a_burst_is_fetched_at_commit_and_completes_whole() {
    let mut cfg = FakeConfig::new(1);
    cfg.completion = FakeCompletion::Deferred;
    let whole_burst = Config {
        doorbell_batch: 32,
        ..Config::default()
    };
    let rig = Rig::with_config(cfg, 1, IrqMode::MsiX { vectors: 2 }, HostConfig::default(), whole_burst);
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    rig.fake.take_messages(); // the admin queue's, from bring-up
    let q = rig.host.queue(0).unwrap();
    for i in 0..8u64 {
        q.submit_deferred(0, &Bio::read(8 * i, 8, &seg, i)).unwrap();
    }
    assert_eq!(
        rig.fake.pending(),
        0,
        "no doorbell yet: the controller has seen nothing"
    );
    q.commit(0);
    assert_eq!(rig.fake.pending(), 8, "one doorbell: the whole burst");
    assert_eq!(q.counters().commits, 1);
    rig.fake.complete_pending(8, |_| 0);
    assert_eq!(rig.fake.take_messages(), vec![1], "one message for the pass");
    assert_eq!(rig.host.handle_vector(1, 0), 8);
    let done = rig.platform.take_done();
    assert_eq!(done.len(), 8);
    assert!(done.iter().all(|c| c.status == Status::Ok));
    // A plain submit still rings at once.
    q.submit(0, &Bio::read(0, 8, &seg, 99)).unwrap();
    assert_eq!(rig.fake.pending(), 1);
    rig.assert_no_violations();
}
