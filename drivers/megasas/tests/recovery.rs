//! The timeout ladder at the controller level: MFI ABORT (confirmed, ignored, refused, raced by
//! the completion), then controller reset failing every command in flight exactly once, with the
//! fake recording any device write into a buffer whose request already ended.

mod common;

use std::collections::HashMap;

use common::*;
use megasas::fake::{CompletionMode, FakeBuffer, FakeConfig, FakeDevice};
use megasas::{CommandState, Done, Error, IoErrorKind, IoOp, IoRequest, IoStatus, Model};

fn deferred() -> FakeConfig {
    let mut cfg = FakeConfig::new(Model::Sas2108Gen2);
    cfg.max_cmds = 16;
    cfg.completion = CompletionMode::Deferred;
    cfg
}

/// Submits a one-block read on `tag` into `buf`, with `cookie`.
fn read(ctrl: &Ctrl, tag: u16, lba: u64, buf: &FakeBuffer, cookie: u64) {
    let sgl = [buf.segment(0, 512)];
    let req = IoRequest {
        system_pd: false,
        op: IoOp::Read,
        target: 0,
        lba,
        blocks: 1,
        sgl: &sgl,
    };
    let guard = ctrl.begin_submit().unwrap();
    ctrl.submit_cookie(&guard, tag, &req, cookie).unwrap();
}

/// Reaps everything now; each completion retires its buffer in the fake (the request ended).
fn reap_retiring(ctrl: &Ctrl, dev: &FakeDevice, bufs: &HashMap<u64, FakeBuffer>) -> Vec<Done> {
    let mut got = Vec::new();
    ctrl.reap_with(|d| {
        let b = &bufs[&d.cookie];
        dev.retire(b.phys(), b.len());
        got.push(d);
    });
    got
}

#[test]
fn held_request_is_aborted_and_the_abort_confirmed() {
    let (dev, ctrl, _) = ready(deferred());
    let bufs: HashMap<u64, FakeBuffer> = (0..2).map(|c| (c, dev.buffer(512))).collect();
    dev.hold_next(1);
    read(&ctrl, 3, 10, &bufs[&0], 0);
    read(&ctrl, 4, 11, &bufs[&1], 1);
    assert_eq!(dev.held(), 1);
    dev.complete_pending(usize::MAX);
    let done = reap_retiring(&ctrl, &dev, &bufs);
    assert_eq!(done.len(), 1, "only the request not held completes");
    assert_eq!((done[0].tag, done[0].cookie, done[0].aborted), (4, 1, false));
    assert_eq!(ctrl.command_state(3), CommandState::Posted);

    ctrl.abort(3).unwrap();
    // QEMU answers at once, but the tag stays the device's until the reply is reaped.
    assert_eq!(ctrl.command_state(3), CommandState::Aborting);
    let done = reap_retiring(&ctrl, &dev, &bufs);
    assert_eq!(ctrl.command_state(3), CommandState::Free);
    assert_eq!(done.len(), 1);
    let d = done[0];
    assert_eq!((d.tag, d.cookie, d.aborted), (3, 0, true));
    assert!(
        matches!(d.status, IoStatus::Failed(e) if e.kind == IoErrorKind::Aborted),
        "{:?}",
        d.status
    );
    let c = ctrl.recovery_counters();
    assert_eq!(
        (c.aborts_sent, c.aborts_confirmed, c.aborts_failed, c.resets),
        (1, 1, 0, 0)
    );
    assert_eq!(dev.stats().aborts_done, 1);
    assert!(!ctrl.reset_requested());
    // The admin tag is free again and the tag is reusable.
    read(&ctrl, 3, 12, &bufs[&0], 0);
    dev.revive(bufs[&0].phys(), 512);
    dev.complete_pending(usize::MAX);
    assert_eq!(reap_retiring(&ctrl, &dev, &bufs).len(), 1);
    assert!(
        dev.stats().writes_after_end.is_empty(),
        "{:?}",
        dev.stats().writes_after_end
    );
    assert_clean(&dev);
}

#[test]
fn ignored_abort_leads_to_a_reset_that_fails_every_command_in_flight_once() {
    let (dev, ctrl, _) = ready(deferred());
    let n = 6u64;
    let bufs: HashMap<u64, FakeBuffer> = (0..n).map(|c| (c, dev.buffer(512))).collect();
    dev.hold_next(1);
    for c in 0..n {
        read(&ctrl, 1 + c as u16, c, &bufs[&c], c);
    }
    dev.set_ignore_aborts(true);
    ctrl.abort(1).unwrap();
    assert_eq!(ctrl.command_state(1), CommandState::Aborting);
    assert_eq!(ctrl.abort(2), Err(Error::AbortUnavailable), "one abort at a time");
    assert!(reap_retiring(&ctrl, &dev, &bufs).is_empty());
    // Nothing came back: the ladder's next step is a controller reset.
    let mut failed = Vec::new();
    let count = ctrl
        .reset(|d| {
            let b = &bufs[&d.cookie];
            dev.retire(b.phys(), b.len());
            failed.push(d);
        })
        .unwrap();
    assert_eq!(count as usize, failed.len());
    let mut cookies: Vec<u64> = failed.iter().map(|d| d.cookie).collect();
    cookies.sort_unstable();
    assert_eq!(
        cookies,
        (0..n).collect::<Vec<_>>(),
        "each in-flight command failed exactly once"
    );
    for d in &failed {
        assert!(matches!(d.status, IoStatus::Failed(e) if e.kind == IoErrorKind::Aborted));
        assert_eq!(d.aborted, d.tag == 1);
    }
    assert_eq!(ctrl.busy_tags(), 0, "every tag reclaimed");
    let c = ctrl.recovery_counters();
    assert_eq!((c.resets, c.reset_failed_commands), (1, n));
    // The device completes nothing late, and nothing lands in a retired buffer.
    dev.complete_pending(usize::MAX);
    assert!(reap_retiring(&ctrl, &dev, &bufs).is_empty());
    assert!(
        dev.stats().writes_after_end.is_empty(),
        "{:?}",
        dev.stats().writes_after_end
    );
    // The controller works again with a fresh reply queue.
    dev.set_ignore_aborts(false);
    dev.revive(bufs[&0].phys(), 512);
    read(&ctrl, 1, 0, &bufs[&0], 0);
    dev.complete_pending(usize::MAX);
    let done = reap_retiring(&ctrl, &dev, &bufs);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, IoStatus::Success);
    assert_eq!(dev.stats().inits, 2);
    assert_clean(&dev);
}

#[test]
fn refused_abort_requests_a_reset() {
    let (dev, ctrl, _) = ready(deferred());
    let buf = dev.buffer(512);
    dev.hold_next(1);
    read(&ctrl, 2, 0, &buf, 9);
    dev.set_refuse_aborts(Some(0x05));
    ctrl.abort(2).unwrap();
    let mut got = Vec::new();
    ctrl.reap_with(|d| got.push(d));
    assert!(got.is_empty(), "a refused abort completes nothing");
    assert!(ctrl.reset_requested());
    assert_eq!(ctrl.command_state(2), CommandState::Aborting);
    assert_eq!(ctrl.recovery_counters().aborts_failed, 1);
    ctrl.reset(|d| got.push(d)).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].cookie, got[0].aborted), (9, true));
    assert!(!ctrl.reset_requested());
    assert_clean(&dev);
}

#[test]
fn a_command_that_completes_while_its_abort_is_pending_keeps_its_real_status() {
    let (dev, ctrl, _) = ready(deferred());
    let buf = dev.buffer(512);
    read(&ctrl, 5, 0, &buf, 1);
    dev.set_ignore_aborts(true);
    ctrl.abort(5).unwrap();
    dev.complete_pending(usize::MAX);
    let mut got = Vec::new();
    ctrl.reap_with(|d| got.push(d));
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].status, got[0].aborted), (IoStatus::Success, true));
    assert_eq!(ctrl.command_state(5), CommandState::Free);
    // The abort frame itself is still unanswered and keeps the admin tag.
    assert_eq!(ctrl.command_state(megasas::ADMIN_TAG), CommandState::Admin);
    assert_clean(&dev);
}

#[test]
fn abort_of_a_command_not_in_flight_is_refused() {
    let (dev, ctrl, _) = ready(deferred());
    assert_eq!(ctrl.abort(3), Err(Error::NotAbortable { tag: 3 }));
    assert_eq!(ctrl.abort(megasas::ADMIN_TAG), Err(Error::NotAbortable { tag: 0 }));
    let buf = dev.buffer(512);
    read(&ctrl, 3, 0, &buf, 1);
    dev.complete_pending(usize::MAX);
    assert_eq!(reap_n(&ctrl, 1).len(), 1);
    assert_eq!(ctrl.abort(3), Err(Error::NotAbortable { tag: 3 }));
    assert_eq!(dev.stats().aborts, 0, "no ABORT frame reached the device");
}

#[test]
fn submissions_during_a_reset_are_told_to_requeue() {
    let (dev, ctrl, _) = ready(deferred());
    // A submitter inside its critical section defers the reset instead of racing it.
    let guard = ctrl.begin_submit().unwrap();
    assert_eq!(ctrl.reset(|_| {}), Err(Error::ResetDeferred));
    drop(guard);
    assert_eq!(ctrl.reset(|_| {}), Ok(0));
    assert!(ctrl.begin_submit().is_ok());
    assert_clean(&dev);
}
