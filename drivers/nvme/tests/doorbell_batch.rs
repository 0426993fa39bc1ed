//! `Config::doorbell_batch` (`nvme.doorbell_batch=N`): within a burst the SQ tail
//! doorbell is rung after at most N commands and after the burst's last one, so a burst of K
//! commands rings ceil(K / N) times, each write makes the device fetch at most N new commands,
//! and nothing is left unrung.

mod common;

use blk::{Bio, Segment, Status};
use common::{Buf, Rig};
use nvme::blkdev::HostConfig;
use nvme::fake::{FakeCompletion, FakeConfig};
use nvme::{Config, IrqMode};

fn rig(batch: u32) -> Rig {
    let mut fcfg = FakeConfig::new(1);
    fcfg.completion = FakeCompletion::Deferred;
    let cfg = Config {
        doorbell_batch: batch,
        ..Config::default()
    };
    Rig::with_config(fcfg, 1, IrqMode::MsiX { vectors: 2 }, HostConfig::default(), cfg)
}

/// Completes everything the fake holds and checks that every request came back well.
fn finish(rig: &Rig, k: usize) {
    rig.fake.complete_pending(k, |_| 0);
    assert_eq!(rig.deliver_interrupts(), k);
    let done = rig.platform.take_done();
    assert_eq!(done.len(), k);
    assert!(done.iter().all(|c| c.status == Status::Ok));
    rig.assert_no_violations();
}

#[test]
fn a_batched_burst_rings_once_per_n_commands_and_at_its_last() {
    for batch in [1u32, 2, 3, 4, 8, 16, 32] {
        for k in 1..=32usize {
            let rig = rig(batch);
            let buf = Buf::new(&rig.fake, 4096 * k);
            let segs: Vec<[Segment; 1]> = (0..k)
                .map(|i| [Segment::new(buf.phys + 4096 * i as u64, 4096)])
                .collect();
            let bios: Vec<Bio<'_>> = segs
                .iter()
                .enumerate()
                .map(|(i, s)| Bio::read(8 * i as u64, 8, s, i as u64))
                .collect();
            let before = rig.fake.stats();
            let q = rig.host.queue(0).unwrap();
            let outcome = q.submit_batch(0, &bios);
            assert_eq!((outcome.accepted, outcome.error), (k, None));
            let after = rig.fake.stats();
            let rings = (after.io_sq_doorbells - before.io_sq_doorbells) as usize;
            assert_eq!(rings, k.div_ceil(batch as usize), "batch {batch}, burst {k}");
            let fetches = &after.io_sq_fetches[before.io_sq_fetches.len()..];
            assert!(
                fetches.iter().all(|&f| f >= 1 && f <= batch),
                "batch {batch}, burst {k}: fetches {fetches:?}"
            );
            // The last command rang: the device has the whole burst without any commit.
            assert_eq!(rig.fake.pending(), k, "batch {batch}, burst {k}");
            assert_eq!(q.counters().commits, 0, "batch {batch}, burst {k}: no commit needed");
            finish(&rig, k);
        }
    }
}

#[test]
fn deferred_submissions_ring_every_n_and_commit_rings_the_rest() {
    for batch in [1u32, 4, 8, 32] {
        for k in [1usize, 3, 4, 7, 8, 9, 31, 32] {
            let rig = rig(batch);
            let buf = Buf::new(&rig.fake, 4096);
            let seg = [Segment::new(buf.phys, 4096)];
            let q = rig.host.queue(0).unwrap();
            for i in 0..k as u64 {
                q.submit_deferred(0, &Bio::read(8 * i, 8, &seg, i)).unwrap();
            }
            let full = k / batch as usize * batch as usize;
            assert_eq!(
                rig.fake.pending(),
                full,
                "batch {batch}, {k} deferred: only whole batches rung before commit"
            );
            assert_eq!(rig.fake.stats().io_sq_doorbells as usize, k / batch as usize);
            q.commit(0);
            assert_eq!(rig.fake.pending(), k, "batch {batch}, {k}: commit rang the rest");
            assert_eq!(
                rig.fake.stats().io_sq_doorbells as usize,
                k.div_ceil(batch as usize),
                "batch {batch}, {k}: the commit rang only if something was unrung"
            );
            // A second commit finds nothing to ring.
            q.commit(0);
            assert_eq!(rig.fake.stats().io_sq_doorbells as usize, k.div_ceil(batch as usize));
            finish(&rig, k);
        }
    }
}

#[test]
fn a_batch_counts_commands_not_tail_positions() {
    // Start the burst at an odd tail: 3 commands first (rung by their `last`), then a burst of
    // 16 with a batch of 8 rings after the 8th and 16th commands of the burst (tails 11 and
    // 19), not at multiples of 8 of the tail.
    let rig = rig(8);
    let buf = Buf::new(&rig.fake, 4096);
    let seg = [Segment::new(buf.phys, 4096)];
    let q = rig.host.queue(0).unwrap();
    let first: Vec<Bio<'_>> = (0..3u64).map(|i| Bio::read(8 * i, 8, &seg, i)).collect();
    assert_eq!(q.submit_batch(0, &first).accepted, 3);
    assert_eq!(rig.fake.stats().io_sq_fetches, vec![3]);
    let burst: Vec<Bio<'_>> = (0..16u64).map(|i| Bio::read(8 * i, 8, &seg, 10 + i)).collect();
    assert_eq!(q.submit_batch(0, &burst).accepted, 16);
    assert_eq!(rig.fake.stats().io_sq_fetches, vec![3, 8, 8]);
    finish(&rig, 19);
}

#[test]
fn a_zero_batch_is_refused() {
    let fake = nvme::fake::FakeNvme::new(FakeConfig::new(1));
    let cfg = Config {
        doorbell_batch: 0,
        ..Config::default()
    };
    let Err(e) = common::controller(&fake, cfg) else {
        panic!("a zero doorbell batch was accepted");
    };
    assert!(e.to_string().contains("doorbell_batch"), "{e}");
}
