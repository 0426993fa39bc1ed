//! Deterministic fuzz of the reply path against a hostile device: the fake writes random,
//! duplicated, stale and invented contexts and producer indices while real I/O flows. The driver
//! must never panic, never complete a command twice, never complete one that is not posted (or
//! whose frame the device has not finished), and must count every violation.

mod common;

use std::collections::HashMap;

use common::*;
use megasas::fake::{CompletionMode, FakeConfig};
use megasas::{IoOp, IoRequest, IoStatus, Model};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const ROUNDS: usize = 4000;

fn fuzz(seed: u64) {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 32;
    cfg.completion = CompletionMode::Deferred;
    let (dev, ctrl, _) = ready(cfg);
    let ntags = ctrl.max_inflight();
    let entries = ctrl.reply_ring_entries();
    let mut rng = Rng(seed | 1);
    let bufs: Vec<_> = (0..ntags).map(|_| dev.buffer(512)).collect();
    // tag -> cookie of the command the driver posted on it.
    let mut in_flight: HashMap<u16, u64> = HashMap::new();
    let mut completed: HashMap<u64, u32> = HashMap::new();
    let mut next_cookie = 1u64;
    let mut faults_seen = 0u64;
    let mut invented = 0u64;
    let record = |in_flight: &mut HashMap<u16, u64>, completed: &mut HashMap<u64, u32>, d: megasas::Done| {
        let cookie = in_flight
            .remove(&d.tag)
            .unwrap_or_else(|| panic!("completion of tag {} which has no command posted", d.tag));
        assert_eq!(cookie, d.cookie, "completion credited to the wrong command");
        *completed.entry(cookie).or_default() += 1;
        d.status
    };
    let mut reap = |ctrl: &Ctrl, in_flight: &mut HashMap<u16, u64>, completed: &mut HashMap<u64, u32>| {
        let r = ctrl.reap_with(|d| {
            let status = record(in_flight, completed, d);
            assert_eq!(status, IoStatus::Success, "the device never fails an I/O here");
        });
        faults_seen += u64::from(r.faults);
    };
    for _ in 0..ROUNDS {
        match rng.below(10) {
            0..=2 => {
                // Submit on a free tag (not the admin tag).
                let tag = 1 + rng.below(u64::from(ntags - 1)) as u16;
                if in_flight.contains_key(&tag) {
                    continue;
                }
                let sgl = [bufs[usize::from(tag)].segment(0, 512)];
                let req = IoRequest {
                    system_pd: false,
                    op: if rng.below(2) == 0 { IoOp::Read } else { IoOp::Write },
                    target: 0,
                    lba: rng.below(1000),
                    blocks: 1,
                    sgl: &sgl,
                };
                let guard = ctrl.begin_submit().unwrap();
                ctrl.submit_cookie(&guard, tag, &req, next_cookie).unwrap();
                in_flight.insert(tag, next_cookie);
                next_cookie += 1;
            }
            3 | 4 => {
                let pending = dev.pending();
                if pending > 0 {
                    dev.complete_at(rng.below(pending as u64) as usize);
                }
            }
            5 => {
                // An invented context: anything at all.
                dev.inject_context(rng.next() as u32);
                invented += 1;
            }
            6 => {
                // A context of a command in flight whose frame the device has not finished
                // (status still pending): must not complete it.
                let ctxs = dev.pending_contexts();
                if !ctxs.is_empty() {
                    dev.inject_context(ctxs[rng.below(ctxs.len() as u64) as usize]);
                    invented += 1;
                }
            }
            7 => dev.inject_duplicate_next(),
            8 => {
                // A producer index anywhere, in or out of the ring.
                let v = if rng.below(2) == 0 {
                    rng.below(u64::from(entries)) as u32
                } else {
                    rng.next() as u32
                };
                dev.corrupt_producer(v);
            }
            _ => reap(&ctrl, &mut in_flight, &mut completed),
        }
    }
    // Let the device finish honestly, then collect everything.
    for _ in 0..100 {
        dev.complete_pending(usize::MAX);
        reap(&ctrl, &mut in_flight, &mut completed);
        if in_flight.is_empty() {
            break;
        }
    }
    // A lying producer index can make the driver skip real replies: those commands are lost to
    // the reply path, and only the timeout ladder's controller reset ends them (failed, once).
    let lost = in_flight.len();
    if lost > 0 {
        let mut failed = 0;
        ctrl.reset(|d| {
            assert_ne!(record(&mut in_flight, &mut completed, d), IoStatus::Success);
            failed += 1;
        })
        .unwrap();
        assert_eq!(failed, lost);
    }
    assert!(in_flight.is_empty(), "commands never completed: {in_flight:?}");
    assert_eq!(completed.len() as u64, next_cookie - 1, "every command completed");
    assert!(completed.values().all(|&n| n == 1), "a command completed twice");
    assert_eq!(faults_seen, ctrl.fault_count(), "every violation is counted");
    assert!(faults_seen >= invented / 2, "faults {faults_seen}, invented {invented}");
    assert!(faults_seen > 0);
    assert_clean(&dev);
}

#[test]
fn hostile_reply_path_seed_1() {
    fuzz(0x1234_5678_9ABC_DEF1);
}

#[test]
fn hostile_reply_path_seed_2() {
    fuzz(0xDEAD_BEEF_0BAD_F00D);
}

#[test]
fn hostile_reply_path_seed_3() {
    fuzz(42);
}
