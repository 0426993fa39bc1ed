//! I/O, completion, reply-ring wrap-around, fault handling and interrupts against the fake device.

mod common;

use common::*;
use megasas::fake::{CompletionMode, ErrorRule, FakeConfig, FakeIrq};
use megasas::{BogusReason, Error, Fault, IoErrorKind, IoOp, IoRequest, IoStatus, IrqMode, Model, Segment};

fn rw(op: IoOp, target: u8, lba: u64, blocks: u32, sgl: &[Segment]) -> IoRequest<'_> {
    IoRequest {
        system_pd: false,
        op,
        target,
        lba,
        blocks,
        sgl,
    }
}

#[test]
fn write_then_read_back_with_512_and_4096_byte_blocks() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.disks = vec![disk(0, 64 << 20, 512), disk(1, 8 << 30, 4096)];
    let (dev, ctrl, drives) = ready(cfg);
    for d in &drives {
        let bs = d.block_size as usize;
        let blocks = 3u32;
        let len = bs * blocks as usize;
        // Near the end of the drive, to exercise high LBAs.
        let lba = d.blocks - 5;
        let data = pattern(u64::from(d.target) + 7, len);
        let wbuf = dev.buffer(len);
        wbuf.write(0, &data);
        // Three uneven segments: 700 bytes, 300 bytes and the rest.
        let cut1 = 700usize.min(len - 2);
        let cut2 = cut1 + 300;
        let wsgl = [
            wbuf.segment(0, cut1 as u32),
            wbuf.segment(cut1, (cut2 - cut1) as u32),
            wbuf.segment(cut2, (len - cut2) as u32),
        ];
        ctrl.submit(3, &rw(IoOp::Write, d.target, lba, blocks, &wsgl)).unwrap();
        assert_eq!(reap_n(&ctrl, 1), [(3, IoStatus::Success)]);
        assert_eq!(dev.disk_read(d.target, lba, u64::from(blocks)), data, "device contents");

        let rbuf = dev.buffer(len);
        let rsgl = [rbuf.segment(0, len as u32)];
        ctrl.submit(4, &rw(IoOp::Read, d.target, lba, blocks, &rsgl)).unwrap();
        assert_eq!(reap_n(&ctrl, 1), [(4, IoStatus::Success)]);
        assert_eq!(rbuf.read(0, len), data, "read back");
    }
    assert_clean(&dev);
}

#[test]
fn frames_above_4gib_post_through_iqph_then_iqpl() {
    let mut cfg = FakeConfig::new(Model::Sas1078);
    cfg.phys_base = 0x1_2000_0000;
    let (dev, ctrl, _) = ready(cfg);
    let data = pattern(99, 4096);
    let buf = dev.buffer(4096);
    buf.write(0, &data);
    let sgl = [buf.segment(0, 4096)];
    ctrl.submit(0, &rw(IoOp::Write, 0, 100, 8, &sgl)).unwrap();
    assert_eq!(reap_n(&ctrl, 1)[0].1, IoStatus::Success);
    assert_eq!(dev.disk_read(0, 100, 8), data);
    let s = dev.stats();
    assert_eq!(s.high_posts, s.frames_posted, "every frame lives above 4 GiB");
    assert_clean(&dev);
}

#[test]
fn reply_ring_wraps_many_times_with_out_of_order_completions() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 8;
    cfg.completion = CompletionMode::Deferred;
    let (dev, ctrl, _) = ready(cfg);
    let depth = ctrl.max_inflight();
    assert_eq!(depth, 7);
    let bufs: Vec<_> = (0..depth).map(|_| dev.buffer(512)).collect();
    let mut expected = std::collections::HashMap::new();
    let mut free: Vec<u16> = (0..depth).collect();
    let mut done = 0usize;
    let total = 1000usize;
    let mut issued = 0usize;
    let mut round = 0;
    while done < total {
        while issued < total
            && let Some(tag) = free.pop()
        {
            let lba = (issued % 4096) as u64;
            let data = pattern(issued as u64, 512);
            bufs[usize::from(tag)].write(0, &data);
            let sgl = [bufs[usize::from(tag)].segment(0, 512)];
            ctrl.submit(tag, &rw(IoOp::Write, 0, lba, 1, &sgl)).unwrap();
            expected.insert(lba, data);
            issued += 1;
        }
        // Alternate completion orders so the ring sees both.
        round += 1;
        if round % 2 == 0 {
            dev.complete_pending(3);
        } else {
            dev.complete_pending_newest_first(5);
        }
        let r = ctrl.reap(|tag, st| {
            assert_eq!(st, IoStatus::Success);
            free.push(tag);
        });
        assert_eq!(r.faults, 0, "{:?}", r.first_fault);
        done += r.completed as usize;
    }
    for (lba, data) in &expected {
        assert_eq!(&dev.disk_read(0, *lba, 1), data, "lba {lba}");
    }
    let s = dev.stats();
    assert_eq!(s.busy_replies, 0, "never more than fw_cmds - 1 in flight");
    assert!(s.max_outstanding <= 7);
    // 1000 replies through an 8-entry ring wrapped it 125 times.
    assert!(s.replies >= 1000);
    assert_eq!(ctrl.fault_count(), 0);
    assert_eq!(ctrl.busy_tags(), 0);
    assert_clean(&dev);
}

#[test]
fn busy_reply_is_reported_as_retryable_busy() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas1078));
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    dev.inject_busy(1);
    ctrl.submit(2, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    let got = reap_n(&ctrl, 1);
    match got[0] {
        (2, IoStatus::Failed(e)) => {
            assert_eq!(e.kind, IoErrorKind::Busy);
            assert!(e.is_retryable());
            assert_eq!(e.scsi_status, 0x08);
        }
        other => panic!("expected BUSY, got {other:?}"),
    }
    ctrl.submit(2, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    assert_eq!(reap_n(&ctrl, 1), [(2, IoStatus::Success)]);
}

#[test]
fn error_statuses_carry_decoded_sense_and_hit_only_the_affected_requests() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas2108Gen2));
    dev.inject_error(ErrorRule::medium_error(0, 10));
    dev.inject_error(ErrorRule::host_eio(0, 20));
    let buf = dev.buffer(4 * 512);
    let sgl = [buf.segment(0, 4 * 512)];
    let mut results = Vec::new();
    for (tag, lba) in [(1u16, 0u64), (2, 8), (3, 12), (4, 18), (5, 24)] {
        ctrl.submit(tag, &rw(IoOp::Read, 0, lba, 4, &sgl)).unwrap();
        results.extend(reap_n(&ctrl, 1));
    }
    let kinds: Vec<_> = results
        .iter()
        .map(|(tag, st)| match st {
            IoStatus::Success => (*tag, None),
            IoStatus::Failed(e) => (*tag, Some(e.kind)),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (1, None),
            (2, Some(IoErrorKind::Medium)),
            (3, None),
            (4, Some(IoErrorKind::HostIo)),
            (5, None)
        ]
    );
    let IoStatus::Failed(e) = results[1].1 else {
        unreachable!()
    };
    let sense = e.sense.expect("sense decoded");
    assert_eq!((sense.key, sense.asc, sense.ascq), (3, 0x11, 0));
    let text = e.to_string();
    assert!(text.contains("MEDIUM ERROR") && text.contains("11/00"), "{text}");
    let IoStatus::Failed(e) = results[3].1 else {
        unreachable!()
    };
    assert!(!e.is_retryable(), "a host EIO fails again on retry");
}

/// Submissions do not clear the sense buffer: an error that left sense clears it when it is
/// reaped, so a later error on the same tag that writes no sense decodes none (not the stale
/// MEDIUM ERROR), whether a success came between or not.
#[test]
fn an_error_without_sense_never_decodes_the_sense_an_earlier_one_left() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas2108Gen2));
    // As QEMU: no sense written, the sense length stays the buffer's, so all of it is read.
    dev.set_keep_sense_len(true);
    dev.inject_error(ErrorRule::medium_error(0, 10));
    dev.inject_error(ErrorRule {
        target: 0,
        lba: 20,
        blocks: 1,
        mfi_status: 0x2D,
        scsi_status: 0x02,
        sense: Vec::new(),
        persistent: true,
    });
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    let mut sensed = Vec::new();
    for lba in [10u64, 20, 10, 0, 20, 0, 10] {
        ctrl.submit(2, &rw(IoOp::Read, 0, lba, 1, &sgl)).unwrap();
        let got = reap_n(&ctrl, 1);
        sensed.push(match got[0].1 {
            IoStatus::Success => None,
            IoStatus::Failed(e) => Some(e.sense.map(|s| (s.key, s.asc))),
        });
    }
    let medium = Some(Some((3, 0x11)));
    assert_eq!(sensed, [medium, Some(None), medium, None, Some(None), None, medium]);
    assert_clean(&dev);
}

/// A BUSY answer's re-posts are counted per submission: `resubmit` counts, a new submission on
/// the tag starts from zero again.
#[test]
fn resubmits_count_per_submission() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas1078));
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    dev.inject_busy(2);
    ctrl.submit(3, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    assert_eq!(ctrl.resubmits(3), 0);
    for n in 1..=2 {
        assert!(matches!(reap_n(&ctrl, 1)[0], (3, IoStatus::Failed(e)) if e.kind == IoErrorKind::Busy));
        let guard = ctrl.begin_submit().unwrap();
        ctrl.resubmit(&guard, 3).unwrap();
        drop(guard);
        assert_eq!(ctrl.resubmits(3), n);
    }
    assert_eq!(reap_n(&ctrl, 1), [(3, IoStatus::Success)]);
    assert_eq!(ctrl.resubmits(3), 2, "the count stays until the next submission");
    ctrl.submit(3, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    assert_eq!(ctrl.resubmits(3), 0);
    assert_eq!(reap_n(&ctrl, 1), [(3, IoStatus::Success)]);
    assert_clean(&dev);
}

#[test]
fn flush_is_synchronize_cache_through_pass_through() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas1078));
    ctrl.submit(0, &rw(IoOp::Flush, 0, 0, 0, &[])).unwrap();
    assert_eq!(reap_n(&ctrl, 1), [(0, IoStatus::Success)]);
    assert_eq!(dev.stats().sync_caches, 1);
    assert_clean(&dev);
}

#[test]
fn invalid_requests_never_reach_the_device() {
    let (dev, ctrl, drives) = ready(FakeConfig::new(Model::Sas2108Gen2));
    let end = drives[0].blocks;
    let buf = dev.buffer(1024);
    let one = [buf.segment(0, 512)];
    let two = [buf.segment(0, 512), buf.segment(512, 512)];
    let posted = dev.stats().frames_posted;
    let many: Vec<_> = (0..81).map(|i| buf.segment(i, 1)).collect();
    let empty_segment = [Segment {
        phys: one[0].phys,
        len: 0,
    }];
    let second_without_address = [one[0], Segment { phys: 0, len: 512 }];
    let cases: Vec<(IoRequest<'_>, Error)> = vec![
        (
            rw(IoOp::Read, 0, end, 1, &one),
            Error::BeyondEnd {
                target: 0,
                lba: end,
                blocks: 1,
                capacity: end,
            },
        ),
        (
            rw(IoOp::Read, 0, u64::MAX, 1, &one),
            Error::BeyondEnd {
                target: 0,
                lba: u64::MAX,
                blocks: 1,
                capacity: end,
            },
        ),
        (rw(IoOp::Read, 9, 0, 1, &one), Error::NoSuchDrive { target: 9 }),
        (rw(IoOp::Read, 200, 0, 1, &one), Error::NoSuchDrive { target: 200 }),
        (
            rw(IoOp::Read, 0, 0, 0, &one),
            Error::InvalidRequest {
                reason: "read or write of zero blocks",
            },
        ),
        (
            rw(IoOp::Write, 0, 0, 1, &two),
            Error::SglLengthMismatch {
                sgl_bytes: 1024,
                expected: 512,
            },
        ),
        (
            rw(IoOp::Read, 0, 0, 1, &[]),
            Error::TooManySegments { count: 0, max: 80 },
        ),
        (
            rw(IoOp::Read, 0, 0, 1, &many),
            Error::TooManySegments { count: 81, max: 80 },
        ),
        (
            rw(IoOp::Read, 0, 0, 1, &[Segment { phys: 0, len: 512 }]),
            Error::BadSegment {
                index: 0,
                phys: 0,
                len: 512,
            },
        ),
        (
            rw(IoOp::Read, 0, 0, 1, &empty_segment),
            Error::BadSegment {
                index: 0,
                phys: one[0].phys,
                len: 0,
            },
        ),
        (
            rw(IoOp::Read, 0, 0, 1, &second_without_address),
            Error::BadSegment {
                index: 1,
                phys: 0,
                len: 512,
            },
        ),
        (
            rw(IoOp::Flush, 0, 0, 1, &[]),
            Error::InvalidRequest {
                reason: "a flush carries no LBA, blocks or data segments",
            },
        ),
    ];
    for (req, want) in cases {
        assert_eq!(ctrl.submit(1, &req), Err(want.clone()), "{req:?}");
        assert!(!want.to_string().is_empty());
    }
    let big = [buf.segment(0, 512)];
    let too_big = rw(IoOp::Read, 0, 0, 65536, &big);
    assert!(matches!(ctrl.submit(1, &too_big), Err(Error::TransferTooLarge { .. })));
    assert_eq!(
        ctrl.submit(ctrl.max_inflight(), &rw(IoOp::Read, 0, 0, 1, &one)),
        Err(Error::TagOutOfRange {
            tag: ctrl.max_inflight(),
            tags: ctrl.max_inflight()
        })
    );
    assert_eq!(dev.stats().frames_posted, posted, "nothing was posted");
    // The tag is still free after all the rejections.
    ctrl.submit(1, &rw(IoOp::Read, 0, 0, 1, &one)).unwrap();
    assert_eq!(reap_n(&ctrl, 1), [(1, IoStatus::Success)]);
}

#[test]
fn a_tag_in_flight_cannot_be_submitted_again() {
    let mut cfg = FakeConfig::new(Model::Sas1078);
    cfg.completion = CompletionMode::Deferred;
    let (dev, ctrl, _) = ready(cfg);
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    ctrl.submit(7, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    assert_eq!(
        ctrl.submit(7, &rw(IoOp::Read, 0, 0, 1, &sgl)),
        Err(Error::TagBusy { tag: 7 })
    );
    dev.complete_pending(1);
    assert_eq!(reap_n(&ctrl, 1), [(7, IoStatus::Success)]);
}

#[test]
fn bogus_contexts_are_faults_and_never_complete_anything() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    let (dev, ctrl, _) = ready(cfg);
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    ctrl.submit(1, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    let ctx = dev.pending_contexts()[0];
    let tags = ctrl.max_inflight();

    let mut completions = Vec::new();
    // Out of range.
    dev.inject_context(0x7FFF);
    // An idle tag.
    dev.inject_context(2);
    // The right tag with another generation.
    dev.inject_context(ctx ^ 0x0001_0000);
    // The right context before the device finished the frame.
    dev.inject_context(ctx);
    let r = ctrl.reap(|t, s| completions.push((t, s)));
    assert_eq!((r.completed, r.faults), (0, 4));
    assert!(
        matches!(
            r.first_fault,
            Some(Fault::BogusContext {
                context: 0x7FFF,
                reason: BogusReason::TagOutOfRange { tag: 0x7FFF, tags: t },
                ..
            }) if t == tags
        ),
        "{:?}",
        r.first_fault
    );
    assert!(completions.is_empty());
    assert_eq!(ctrl.fault_count(), 4);

    // The real completion, posted twice: the first is accepted, the duplicate is a fault.
    dev.inject_duplicate_next();
    dev.complete_pending(1);
    let r = ctrl.reap(|t, s| completions.push((t, s)));
    assert_eq!((r.completed, r.faults), (1, 1));
    assert!(matches!(
        r.first_fault,
        Some(Fault::BogusContext {
            reason: BogusReason::NotInFlight { tag: 1 },
            ..
        })
    ));
    assert_eq!(completions, [(1, IoStatus::Success)]);
    assert_eq!(ctrl.busy_tags(), 0);
}

#[test]
fn corrupt_producer_index_is_a_fault_and_the_ring_recovers() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas1078));
    dev.corrupt_producer(5000);
    let r = ctrl.reap(|_, _| panic!("nothing may complete"));
    assert_eq!(
        r.first_fault,
        Some(Fault::ProducerOutOfRange {
            producer: 5000,
            entries: 1000
        })
    );
    let msg = Error::ControllerFault(r.first_fault.unwrap()).to_string();
    assert!(msg.contains("5000") && msg.contains("0..1000"), "{msg}");
    // The device's next completion rewrites the producer; the driver carries on.
    dev.corrupt_producer(0);
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    ctrl.submit(0, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    assert_eq!(reap_n(&ctrl, 1), [(0, IoStatus::Success)]);
}

#[test]
fn intx_is_claimed_acked_and_drained_on_both_models() {
    for model in Model::ALL {
        let (dev, ctrl, _) = ready(FakeConfig::new(model));
        dev.set_irq_mode(FakeIrq::Intx);
        // Nothing pending: a shared interrupt that is not ours.
        assert!(ctrl.handle_interrupt(IrqMode::Intx, |_, _| {}).is_none());
        let buf = dev.buffer(512);
        let sgl = [buf.segment(0, 512)];
        ctrl.submit(0, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
        assert!(dev.intx_asserted());
        let mut got = Vec::new();
        let r = ctrl
            .handle_interrupt(IrqMode::Intx, |t, s| got.push((t, s)))
            .expect("our interrupt");
        assert_eq!(r.completed, 1);
        assert!(!dev.intx_asserted(), "ODCR0 lowered the line");
        assert_eq!(got, [(0, IoStatus::Success)]);
        assert_eq!(dev.stats().intx_raised, 1);
    }
}

#[test]
fn msix_completions_need_no_register_ack() {
    let (dev, ctrl, _) = ready(FakeConfig::new(Model::Sas2108Gen2));
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    for tag in 0..4 {
        ctrl.submit(tag, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    }
    let mut got = 0;
    let r = ctrl.handle_interrupt(IrqMode::Msix, |_, _| got += 1).unwrap();
    assert_eq!((r.completed, got), (4, 4));
    assert_eq!(dev.stats().msi_messages, 4);
}

#[test]
fn admin_commands_while_io_flows_are_not_mistaken_for_io() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    let (dev, ctrl, _) = ready(cfg);
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    ctrl.submit(1, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    // With interrupts on, QEMU posts polled commands to the ring as well.
    let drives = ctrl.discover(0).unwrap();
    assert_eq!(drives.len(), 1);
    let mut got = Vec::new();
    let r = ctrl.reap(|t, s| got.push((t, s)));
    assert_eq!(r.faults, 0, "{:?}", r.first_fault);
    assert!(r.polled_echoes >= 2, "LD list and READ CAPACITY echoes: {r:?}");
    assert_eq!(got, [(1, IoStatus::Success)]);
}

#[test]
fn several_cpus_submit_while_one_context_reaps() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 64;
    cfg.completion = CompletionMode::Deferred;
    let (dev, ctrl, _) = ready(cfg);
    let ctrl = std::sync::Arc::new(ctrl);
    let threads = 4u16;
    let per_thread_tags = ctrl.max_inflight() / threads;
    let ios_per_thread = 300usize;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<(u16, IoStatus)>()).unzip();

    // The "device" thread: QEMU's main loop completing I/O.
    let device = {
        let dev = dev.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if dev.complete_pending(16) == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    // The interrupt context: routes each completion back to its submitting CPU.
    let reaper = {
        let ctrl = ctrl.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut faults = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = ctrl.reap(|tag, st| {
                    let cpu = usize::from(tag / per_thread_tags);
                    senders[cpu].send((tag, st)).unwrap();
                });
                faults += r.faults;
                if r.completed == 0 {
                    std::thread::yield_now();
                }
            }
            faults
        })
    };
    let submitters: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(cpu, rx)| {
            let ctrl = ctrl.clone();
            let dev = dev.clone();
            std::thread::spawn(move || {
                let first = cpu as u16 * per_thread_tags;
                let bufs: Vec<_> = (0..per_thread_tags).map(|_| dev.buffer(512)).collect();
                let mut free: Vec<u16> = (first..first + per_thread_tags).collect();
                let mut lbas = std::collections::HashMap::new();
                let (mut issued, mut done) = (0usize, 0usize);
                while done < ios_per_thread {
                    while issued < ios_per_thread
                        && let Some(tag) = free.pop()
                    {
                        let lba = (cpu * 10_000 + issued) as u64;
                        let b = &bufs[usize::from(tag - first)];
                        b.write(0, &pattern(lba, 512));
                        let sgl = [b.segment(0, 512)];
                        ctrl.submit(tag, &rw(IoOp::Write, 0, lba, 1, &sgl)).unwrap();
                        lbas.insert(tag, lba);
                        issued += 1;
                    }
                    let (tag, st) = rx.recv().unwrap();
                    assert_eq!(st, IoStatus::Success);
                    assert!(lbas.remove(&tag).is_some(), "completion for a tag this CPU owns");
                    free.push(tag);
                    done += 1;
                }
            })
        })
        .collect();
    for s in submitters {
        s.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    device.join().unwrap();
    assert_eq!(reaper.join().unwrap(), 0);
    for cpu in 0..usize::from(threads) {
        for i in 0..ios_per_thread {
            let lba = (cpu * 10_000 + i) as u64;
            assert_eq!(dev.disk_read(0, lba, 1), pattern(lba, 512), "lba {lba}");
        }
    }
    assert_eq!(dev.stats().busy_replies, 0);
    assert_clean(&dev);
}

/// `check_ld_io` (the block binding's one-segment LD path) refuses exactly what
/// `check_request` refuses for the same request as an `IoRequest`, with the same error.
#[test]
fn check_ld_io_agrees_with_check_request_on_every_outcome() {
    use megasas::LdIo;
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.disks = vec![disk(0, 64 << 20, 512), disk(1, 8 << 30, 4096)];
    let (dev, ctrl, drives) = ready(cfg);
    let buf = dev.buffer(1 << 20);
    let max = ctrl.max_transfer_bytes();
    let mut refused = 0;
    for d in &drives {
        let bs = d.block_size;
        // The most whole blocks the controller moves in one request.
        let lim = (max / u64::from(bs)) as u32;
        for (lba, blocks, phys, len) in [
            (0, 1, buf.segment(0, bs).phys, bs),
            (d.blocks - 2, 2, buf.segment(0, 2 * bs).phys, 2 * bs),
            (d.blocks - 1, 2, buf.segment(0, 2 * bs).phys, 2 * bs),
            (u64::MAX, 1, buf.segment(0, bs).phys, bs),
            (0, 0, buf.segment(0, bs).phys, 0),
            (0, 1, 0, bs),
            (0, 1, buf.segment(0, bs).phys, 0),
            (0, 2, buf.segment(0, bs).phys, bs),
            (0, (max / u64::from(bs)) as u32 + 1, buf.segment(0, bs).phys, bs),
            // At the transfer limit and at the drive's end exactly: accepted.
            (0, lim, buf.segment(0, bs).phys, lim * bs),
            (d.blocks - u64::from(lim), lim, buf.segment(0, bs).phys, lim * bs),
        ] {
            for write in [false, true] {
                let segment = Segment { phys, len };
                let io = LdIo {
                    write,
                    target: d.target,
                    lba,
                    blocks,
                    segment,
                };
                let op = if write { IoOp::Write } else { IoOp::Read };
                let expected = ctrl.check_request(&rw(op, d.target, lba, blocks, &[segment]));
                let guard = ctrl.begin_submit().unwrap();
                let got = ctrl.check_ld_io(&guard, io).map(|_| ());
                assert_eq!(got, expected, "{io:?}");
                refused += usize::from(got.is_err());
            }
        }
    }
    // A target without a drive.
    let guard = ctrl.begin_submit().unwrap();
    let io = LdIo {
        write: false,
        target: 9,
        lba: 0,
        blocks: 1,
        segment: buf.segment(0, 512),
    };
    assert_eq!(
        ctrl.check_ld_io(&guard, io).map(|_| ()),
        Err(Error::NoSuchDrive { target: 9 })
    );
    assert_eq!(
        refused,
        2 * 2 * 7,
        "every case but the first two and the last two is refused"
    );
    assert_clean(&dev);
}

/// `submit_ld_io` posts the frame `submit` posts for the same request: data written through one
/// reads back through the other, each completion delivered once on its tag.
#[test]
fn submit_ld_io_moves_the_data_submit_moves() {
    use megasas::LdIo;
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.disks = vec![disk(0, 64 << 20, 512), disk(1, 8 << 30, 4096)];
    let (dev, ctrl, drives) = ready(cfg);
    for d in &drives {
        let len = 2 * d.block_size as usize;
        let lba = d.blocks - 2;
        let data = pattern(u64::from(d.target) + 31, len);
        let wbuf = dev.buffer(len);
        wbuf.write(0, &data);
        let io = LdIo {
            write: true,
            target: d.target,
            lba,
            blocks: 2,
            segment: wbuf.segment(0, len as u32),
        };
        {
            let guard = ctrl.begin_submit().unwrap();
            let checked = ctrl.check_ld_io(&guard, io).unwrap();
            ctrl.submit_ld_io(&guard, 5, checked, 0).unwrap();
        }
        assert_eq!(reap_n(&ctrl, 1), [(5, IoStatus::Success)]);
        assert_eq!(dev.disk_read(d.target, lba, 2), data, "written by submit_ld_io");

        let rbuf = dev.buffer(len);
        ctrl.submit(6, &rw(IoOp::Read, d.target, lba, 2, &[rbuf.segment(0, len as u32)]))
            .unwrap();
        assert_eq!(reap_n(&ctrl, 1), [(6, IoStatus::Success)]);
        assert_eq!(rbuf.read(0, len), data, "read back by submit");

        // And the other way round: written by `submit`, read by `submit_ld_io`.
        let other = pattern(u64::from(d.target) + 77, len);
        wbuf.write(0, &other);
        ctrl.submit(7, &rw(IoOp::Write, d.target, lba, 2, &[wbuf.segment(0, len as u32)]))
            .unwrap();
        assert_eq!(reap_n(&ctrl, 1), [(7, IoStatus::Success)]);
        let rbuf = dev.buffer(len);
        let io = LdIo {
            write: false,
            segment: rbuf.segment(0, len as u32),
            ..io
        };
        {
            let guard = ctrl.begin_submit().unwrap();
            let checked = ctrl.check_ld_io(&guard, io).unwrap();
            ctrl.submit_ld_io(&guard, 8, checked, 0).unwrap();
            // Its tag is taken until the completion is reaped.
            let again = ctrl.check_ld_io(&guard, io).unwrap();
            assert_eq!(ctrl.submit_ld_io(&guard, 8, again, 0), Err(Error::TagBusy { tag: 8 }));
        }
        assert_eq!(reap_n(&ctrl, 1), [(8, IoStatus::Success)]);
        assert_eq!(rbuf.read(0, len), other, "read back by submit_ld_io");
    }
    assert_clean(&dev);
}

/// The echo of a polled admin command can be reaped after the admin tag was claimed again (by
/// the next polled command, while its frame is built, or by an ABORT frame): it names an older
/// generation and is dropped as an echo, not counted as a fault (a 2-CPU QEMU scenario met it at
/// shutdown: the interrupt on cpu1 reaped the cache flush's echo while cpu0 built the shutdown
/// DCMD). The current generation with the polled bit is still refused unless polled or done.
#[test]
fn a_polled_echo_reaped_after_the_admin_tag_was_claimed_again_is_not_a_fault() {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.completion = CompletionMode::Deferred;
    let (dev, ctrl, _) = ready(cfg);
    let buf = dev.buffer(512);
    let sgl = [buf.segment(0, 512)];
    ctrl.submit(1, &rw(IoOp::Read, 0, 0, 1, &sgl)).unwrap();
    // Polled admin commands: their echoes wait in the reply ring.
    ctrl.discover(0).unwrap();
    // The admin tag is claimed again before the reaper runs: an ABORT frame for the read.
    ctrl.abort(1).unwrap();
    let r = ctrl.reap(|_, _| {});
    assert_eq!(r.faults, 0, "{:?}", r.first_fault);
    assert!(r.polled_echoes >= 2, "{r:?}");
}
