//! LD I/O across N reply queues with completions in random order; errors; INTx; combined mode.

mod common;

use common::*;
use megasas_fusion::fake::{Failure, FakeConfig};
use megasas_fusion::{Error, Generation, IoErrorKind, IoOp, IoOutcome, IoRequest, Segment};

fn workload(fc: FakeConfig, g: Generation, vectors: usize, seed: u64) -> Workload {
    let (fake, ctrl, report) = bring_up(fc, config(g, vectors));
    let ctrl = ctrl.unwrap_or_else(|e| panic!("{e}\n{report}"));
    ctrl.enable_interrupts();
    Workload::new(fake, ctrl, seed)
}

fn stress(g: Generation, vectors: usize, total: u64) {
    let mut fc = FakeConfig::new(g);
    fc.raw_cmds = 1024;
    fc.lds = vec![(0, 1024 * 8)];
    let mut w = workload(fc, g, vectors, 0xC0FFEE ^ total);
    w.run(total, 12);
    assert_eq!(w.completed, total, "every request completed once, successfully");
    assert_eq!(w.failed, 0);
    assert_eq!(w.ctrl.stats.bogus_replies.load(std::sync::atomic::Ordering::Relaxed), 0);
    let (accepted, posted, _) = w.fake.counts();
    // The pended map sync (Ventura's empty map) is accepted and held, not answered.
    assert_eq!(accepted, posted + u64::from(w.fake.map_sync_held()));
    assert_clean(&w.fake);
}

#[test]
fn stress_50k_requests_over_8_queues_invader_and_ventura() {
    for g in [Generation::Invader, Generation::Ventura] {
        stress(g, 8, 50_000);
    }
}

/// 1M requests, random sizes and 1-12 segments (chains), over 16 reply queues, completions in
/// random order; about 4 s of CPU at the test profile's opt-level 1.
#[test]
fn stress_1m_requests_over_16_queues() {
    stress(Generation::Aero, 16, 1_000_000);
}

#[test]
fn combined_mode_uses_the_supplementary_host_index_registers() {
    let mut w = workload(FakeConfig::invader(), Generation::Invader, 12, 7);
    assert!(w.ctrl.limits().combined);
    w.run(5_000, 12);
    assert_eq!(w.completed, 5_000);
    assert_clean(&w.fake);
}

#[test]
fn intx_single_queue_works() {
    let mut w = workload(FakeConfig::ventura(), Generation::Ventura, 0, 9);
    assert_eq!(w.ctrl.limits().host_msix_vectors, 0);
    w.run(3_000, 12);
    assert_eq!(w.completed, 3_000);
    assert_clean(&w.fake);
}

#[test]
fn thunderbolt_chains_without_end_of_list() {
    let mut w = workload(FakeConfig::thunderbolt(), Generation::Thunderbolt, 4, 11);
    w.run(3_000, 20);
    assert_eq!(w.completed, 3_000);
    assert_clean(&w.fake);
}

#[test]
fn data_round_trips_through_chained_sgls() {
    let mut w = workload(FakeConfig::aero(), Generation::Aero, 2, 3);
    // 4 blocks in 40 segments: 7 in the frame, 33 in the chain frame.
    w.submit(5, 1, IoOp::Write, 4, 40).unwrap();
    while w.inflight.contains_key(&5) {
        w.service(50);
    }
    let pattern = w.written[&40];
    assert_eq!(w.fake.ld_bytes(LD, 5 * 8 * 512, 2048), vec![pattern; 2048]);
    w.fake.set_ld_bytes(LD, 5 * 8 * 512, &[0xAB; 512]);
    w.written.insert(40, 0xAB);
    w.submit(5, 0, IoOp::Read, 1, 9).unwrap();
    while w.inflight.contains_key(&5) {
        w.service(50);
    }
    assert_eq!(w.completed, 2);
    assert_clean(&w.fake);
}

#[test]
fn firmware_errors_map_to_io_errors_with_sense() {
    let mut w = workload(FakeConfig::invader(), Generation::Invader, 2, 5);
    let cases = [
        (
            Failure {
                status: 0x2D,
                scsi_status: 0x02,
                sense: Some((0x3, 0x11, 0x00)),
            },
            IoErrorKind::Medium,
        ),
        (
            Failure {
                status: 0x2D,
                scsi_status: 0x08,
                sense: None,
            },
            IoErrorKind::Busy,
        ),
        (
            Failure {
                status: 0x2E,
                scsi_status: 0x00,
                sense: None,
            },
            IoErrorKind::Aborted,
        ),
        (
            Failure {
                status: 0x0C,
                scsi_status: 0x00,
                sense: None,
            },
            IoErrorKind::NoDevice,
        ),
        (
            Failure {
                status: 0x33,
                scsi_status: 0x00,
                sense: None,
            },
            IoErrorKind::NoDevice,
        ),
        (
            Failure {
                status: 0x67,
                scsi_status: 0x00,
                sense: None,
            },
            IoErrorKind::Controller,
        ),
    ];
    for (i, (f, kind)) in cases.into_iter().enumerate() {
        w.fake.fail_next_io(f);
        let tag = i as u32;
        let segs = w.segments(tag, 512, 1);
        w.ctrl.submit(tag, 0, &read_block0(&segs), 99).unwrap();
        let mut got = None;
        for _ in 0..100 {
            w.fake.advance(100);
            w.ctrl.reap(0, &mut |c| got = Some(c));
            if got.is_some() {
                break;
            }
        }
        let c = got.expect("completed");
        match c.outcome {
            IoOutcome::Failed(e) => {
                assert_eq!(e.kind, kind, "{f:?}");
                assert_eq!(e.mfi_status.0, f.status);
                if let Some((key, asc, _)) = f.sense {
                    let s = e.sense.expect("sense decoded");
                    assert_eq!((s.key, s.asc), (key, asc));
                }
            }
            other => panic!("{f:?}: {other:?}"),
        }
    }
    assert_clean(&w.fake);
}

#[test]
fn bad_requests_are_refused_before_they_reach_the_controller() {
    let w = workload(FakeConfig::ventura(), Generation::Ventura, 2, 1);
    let seg = [Segment {
        phys: w.buf.phys,
        len: 512,
    }];
    let req = |target, lba, blocks, segments| IoRequest {
        system_pd: false,
        target,
        op: IoOp::Read,
        lba,
        blocks,
        sgl: segments,
    };
    assert!(matches!(
        w.ctrl.submit(0, 0, &req(9, 0, 1, &seg), 0),
        Err(Error::NoSuchDrive { target: 9 })
    ));
    assert!(matches!(
        w.ctrl.submit(0, 0, &req(0, 8191, 2, &seg), 0),
        Err(Error::BeyondEnd { .. })
    ));
    assert!(matches!(
        w.ctrl.submit(0, 0, &req(0, u64::MAX, 1, &seg), 0),
        Err(Error::BeyondEnd { .. })
    ));
    assert!(matches!(
        w.ctrl.submit(0, 0, &req(0, 0, 2, &seg), 0),
        Err(Error::SglLengthMismatch { .. })
    ));
    assert!(matches!(
        w.ctrl.submit(0, 2, &req(0, 0, 1, &seg), 0),
        Err(Error::QueueOutOfRange { queue: 2, queues: 2 })
    ));
    assert!(matches!(
        w.ctrl.submit(251, 0, &req(0, 0, 1, &seg), 0),
        Err(Error::TagOutOfRange { tag: 251, tags: 251 })
    ));
    let zero = [
        Segment {
            phys: w.buf.phys,
            len: 0,
        },
        Segment {
            phys: w.buf.phys,
            len: 512,
        },
    ];
    assert!(matches!(
        w.ctrl.submit(0, 0, &req(0, 0, 1, &zero), 0),
        Err(Error::ZeroLengthSegment { index: 0 })
    ));
    let many: Vec<Segment> = (0..65)
        .map(|i| Segment {
            phys: w.buf.phys + i * 8,
            len: 8,
        })
        .collect();
    let mut r = req(0, 0, 1, &many);
    r.sgl = &many[..];
    assert!(matches!(
        w.ctrl.submit(0, 0, &IoRequest { blocks: 1, ..r }, 0),
        Err(Error::TooManySegments { count: 65, max: 64 }) | Err(Error::SglLengthMismatch { .. })
    ));
    // A tag already on the controller.
    w.ctrl.submit(1, 0, &req(0, 0, 1, &seg), 0).unwrap();
    assert!(matches!(
        w.ctrl.submit(1, 1, &req(0, 0, 1, &seg), 0),
        Err(Error::TagBusy { tag: 1 })
    ));
    assert_eq!(w.fake.violations(), vec![]);
}

#[test]
fn flush_goes_to_firmware_only_when_sp1_says_so() {
    let w = workload(FakeConfig::aero(), Generation::Aero, 1, 1);
    assert!(w.ctrl.flush_goes_to_firmware());
    let req = IoRequest {
        system_pd: false,
        target: 3,
        op: IoOp::Flush,
        lba: 0,
        blocks: 0,
        sgl: &[],
    };
    w.ctrl.submit(0, 0, &req, 1).unwrap();
    let mut got = None;
    for _ in 0..100 {
        w.fake.advance(100);
        w.ctrl.reap(0, &mut |c| got = Some(c));
    }
    assert_eq!(got.map(|c| c.outcome), Some(IoOutcome::Ok));
    assert_clean(&w.fake);
    w.ctrl.shutdown().unwrap();
}

/// A request descriptor is one 8-byte write to 0xC0 (Linux's `writeq`), not a locked low/high
/// pair; only IOC INIT's MFA, posted before the firmware is operational, is a pair. Aero with
/// SP1[24] uses its atomic port instead. The model counts each form it commits.
#[test]
fn a_request_descriptor_is_one_8_byte_write_or_one_atomic_port_write() {
    for g in [Generation::Invader, Generation::Ventura, Generation::Aero] {
        let mut w = workload(FakeConfig::new(g), g, 2, 21);
        let before = w.fake.descriptor_writes();
        assert_eq!(before.pairs, 1, "{g:?}: IOC INIT's MFA descriptor is the only pair");
        let (accepted_before, _, _) = w.fake.counts();
        w.run(500, 4);
        assert_eq!(w.completed, 500);
        let (accepted, _, _) = w.fake.counts();
        let posts = accepted - accepted_before;
        assert!(posts >= 500, "{g:?}: {posts} commands for 500 completions");
        let after = w.fake.descriptor_writes();
        assert_eq!(after.pairs, 1, "{g:?}: no I/O went out as a low/high pair");
        if w.ctrl.uses_atomic_port() {
            assert_eq!(g, Generation::Aero);
            assert_eq!(
                (after.atomic - before.atomic, after.wide - before.wide),
                (posts, 0),
                "{g:?}"
            );
        } else {
            assert_eq!(
                (after.wide - before.wide, after.atomic - before.atomic),
                (posts, 0),
                "{g:?}"
            );
        }
        assert_clean(&w.fake);
    }
}

/// The model refuses an 8-byte write anywhere but the descriptor port, and one that lands on a
/// half-written low/high pair (the two forms mixed without a lock).
#[test]
fn the_model_refuses_8_byte_writes_off_the_descriptor_port_and_mixed_forms() {
    use megasas_fusion::fake::{FakeMmio, Violation};
    use megasas_fusion::{Mmio, Mmio64};
    let w = workload(FakeConfig::invader(), Generation::Invader, 1, 5);
    let mmio = FakeMmio(w.fake.clone());
    mmio.write64(0x6C, 1);
    let v = w.fake.violations();
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].0, Violation::WideWrite);
    mmio.write32(0xC0, 0x0004_0001);
    mmio.write64(0xC0, 0x0004_0001);
    let v = w.fake.violations();
    // (The descriptor then commits; SMID 4 holds no frame, which the model reports as well.)
    assert!(v.len() >= 2, "{v:#?}");
    assert_eq!(v[1].0, Violation::LowTwice, "{v:#?}");
}
