//! Behaviour of the queue, one mechanism at a time, single-threaded and deterministic.

mod common;

use blk::{
    Bio, BlkError, CompletionPolicy, Driver, HwCtx, IssueToken, Op, Queue, QueueConfig, QueueRqError, QuiesceCheck, Rq,
    Segment, Status, TimedOutRq, TimeoutAction,
};
use common::HostPlatform;
use nullblk::{NullConfig, NullDriver, NullMode};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const CAP: u64 = 1 << 20;

fn null_queue(
    ncpus: usize,
    nr_hw: usize,
    depth: u32,
    mode: NullMode,
    policy: CompletionPolicy,
) -> (Queue<NullDriver>, Arc<HostPlatform>) {
    let null = NullConfig::new(CAP, mode);
    let mut cfg = null.queue_config(ncpus, nr_hw, depth);
    cfg.completion = policy;
    let platform = Arc::new(HostPlatform::new(ncpus, 1024, true));
    let q = Queue::new(cfg, NullDriver::new(null, nr_hw, depth, false), platform.clone()).unwrap();
    (q, platform)
}

fn read(cookie: u64) -> Bio<'static> {
    Bio::read(cookie * 8, 8, &[], cookie)
}

// ------------------------------------------------------------------ a recording driver

/// What the recording driver does with the next request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plan {
    Issue,
    Busy,
    Fail,
    /// Ends the request inside `queue_rq` (`Rq::end`, null_blk irqmode=0).
    End,
    /// Completes it inside `queue_rq` through the completion policy (`Rq::complete`).
    Complete,
}

#[derive(Default)]
struct RecDriver {
    /// (cookie, last) per successful queue_rq.
    queued: Mutex<Vec<(u64, bool)>>,
    commits: AtomicUsize,
    plan: Mutex<VecDeque<Plan>>,
    /// Issue tokens, in order.
    issued: Mutex<Vec<IssueToken>>,
    timeouts: Mutex<Vec<u64>>,
    timeout_plan: Mutex<VecDeque<TimeoutAction>>,
    /// Complete this tag from inside the timeout handler (a completion racing the handler).
    complete_during_timeout: Mutex<Option<Status>>,
    /// Requeue it from inside the timeout handler (a reset path racing the handler).
    requeue_during_timeout: AtomicUsize,
    completes: AtomicUsize,
}

impl Driver for RecDriver {
    type Pdu = u32;

    fn init_request(&self, _set: usize, tag: u32, pdu: &mut u32) -> Result<(), BlkError> {
        *pdu = tag * 1000;
        Ok(())
    }

    fn queue_rq<'a>(&self, _hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, last: bool) -> Result<(), QueueRqError<'a, Self>> {
        // Initialised per tag; the timeout handler counts its calls in the low digits.
        assert_eq!(*rq.pdu() / 1000, rq.tag(), "driver data initialised per tag");
        match self.plan.lock().unwrap().pop_front().unwrap_or(Plan::Issue) {
            Plan::Busy => return Err(QueueRqError::Busy(rq)),
            Plan::Fail => return Err(QueueRqError::Io(rq, Status::NotSupported)),
            Plan::End => {
                rq.end(Status::Ok);
                return Ok(());
            }
            Plan::Complete => {
                rq.complete(Status::Ok);
                return Ok(());
            }
            Plan::Issue => {}
        }
        self.queued.lock().unwrap().push((rq.cookie(), last));
        self.issued.lock().unwrap().push(rq.issue());
        Ok(())
    }

    fn commit_rqs(&self, _hw: &HwCtx<'_, Self>) {
        self.commits.fetch_add(1, Ordering::SeqCst);
    }

    const HAS_COMPLETE: bool = true;

    fn complete(&self, rq: Rq<'_, Self>) {
        self.completes.fetch_add(1, Ordering::SeqCst);
        let s = rq.status();
        rq.end(s);
    }

    fn timeout(&self, rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        self.timeouts.lock().unwrap().push(rq.cookie());
        *rq.pdu_mut() += 1;
        if let Some(status) = self.complete_during_timeout.lock().unwrap().take() {
            // The device completes the request while the handler runs.
            let hwq = rq.hwq();
            let token = rq.token();
            rq.queue()
                .complete(0, hwq, token, status)
                .expect("completion during timeout is accepted");
        }
        if self.requeue_during_timeout.swap(0, Ordering::SeqCst) != 0 {
            let (hwq, token) = (rq.hwq(), rq.token());
            rq.queue()
                .requeue(0, hwq, token)
                .expect("requeue during timeout is recorded");
        }
        self.timeout_plan
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(TimeoutAction::ResetTimer)
    }
}

fn rec_queue(ncpus: usize, depth: u32, policy: CompletionPolicy) -> (Queue<RecDriver>, Arc<HostPlatform>) {
    let mut cfg = QueueConfig::new(ncpus, 1, depth, CAP);
    cfg.completion = policy;
    cfg.timeout_ns = 1_000;
    let platform = Arc::new(HostPlatform::manual(ncpus, 1024));
    let q = Queue::new(cfg, RecDriver::default(), platform.clone()).unwrap();
    (q, platform)
}

// ------------------------------------------------------------------ configuration and bios

#[test]
fn config_errors_name_the_field_and_what_is_accepted() {
    let platform = Arc::new(HostPlatform::new(1, 1, false));
    let mk = |f: &dyn Fn(&mut QueueConfig)| {
        let mut c = QueueConfig::new(2, 1, 8, CAP);
        f(&mut c);
        Queue::new(c, RecDriver::default(), platform.clone()).map(|_| ())
    };
    let e = mk(&|c| c.ncpus = 0).unwrap_err();
    assert!(e.to_string().contains("ncpus = 0"), "{e}");
    let e = mk(&|c| c.queue_depth = 0).unwrap_err();
    assert!(e.to_string().contains("queue_depth = 0"), "{e}");
    let e = mk(&|c| c.reserved_tags = 8).unwrap_err();
    assert!(e.to_string().contains("reserved_tags = 8"), "{e}");
    let e = mk(&|c| c.logical_block_size = 1000).unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    let e = mk(&|c| c.cpu_map = Some(vec![0, 3])).unwrap_err();
    assert_eq!(
        e,
        BlkError::BadCpuMap {
            cpu: 1,
            hwq: 3,
            nr_hw_queues: 1
        }
    );
    assert!(e.to_string().contains("cpu 1 to hw queue 3"), "{e}");
    assert!(mk(&|c| c.cpu_map = Some(vec![0])).is_err(), "map shorter than ncpus");
    assert!(mk(&|_| {}).is_ok());
}

#[test]
fn io_beyond_the_end_is_rejected_before_the_driver() {
    let (q, _p) = rec_queue(1, 4, CompletionPolicy::Irq);
    let e = q.submit(0, &Bio::read(CAP - 4, 8, &[], 1)).unwrap_err();
    assert_eq!(
        e,
        BlkError::BeyondEnd {
            sector: CAP - 4,
            nr_sectors: 8,
            capacity: CAP
        }
    );
    assert!(e.to_string().contains(&CAP.to_string()), "{e}");
    // u64 overflow of sector + length is "beyond the end" too, not a wrap-around.
    assert!(matches!(
        q.submit(0, &Bio::write(u64::MAX, 1, &[], 1)),
        Err(BlkError::BeyondEnd { .. })
    ));
    // The last sector itself is fine.
    q.submit(0, &Bio::read(CAP - 1, 1, &[], 2)).unwrap();
    let c = q.counters();
    assert_eq!(c.rejected, 2);
    assert_eq!(c.dispatched, 1, "rejected I/O must never reach the driver");
    assert_eq!(q.driver().queued.lock().unwrap().len(), 1);
}

#[test]
fn malformed_bios_get_specific_errors() {
    let mut cfg = QueueConfig::new(1, 1, 4, CAP);
    cfg.logical_block_size = 4096;
    cfg.max_segments = 2;
    let q = Queue::new(cfg, RecDriver::default(), Arc::new(HostPlatform::new(1, 1, false))).unwrap();
    let seg = |len| Segment::new(0x1000, len);
    assert_eq!(
        q.submit(0, &Bio::read(4, 8, &[], 0)).unwrap_err(),
        BlkError::Misaligned {
            sector: 4,
            nr_sectors: 8,
            block_sectors: 8
        }
    );
    assert_eq!(q.submit(0, &Bio::read(0, 0, &[], 0)).unwrap_err(), BlkError::EmptyIo);
    // A driver command cannot be split (reads and writes are: tests/split.rs).
    let three = [seg(4096), seg(4096), seg(4096)];
    let mut command = Bio::read(0, 0, &three, 0);
    command.op = Op::Driver(1);
    assert_eq!(
        q.submit(0, &command).unwrap_err(),
        BlkError::TooManySegments { count: 3, max: 2 }
    );
    assert_eq!(
        q.submit(0, &Bio::read(0, 8, &[seg(512)], 0)).unwrap_err(),
        BlkError::SegmentLengthMismatch {
            segment_bytes: 512,
            io_bytes: 4096
        }
    );
    let mut flush = Bio::flush(0);
    flush.nr_sectors = 8;
    assert_eq!(
        q.submit(0, &flush).unwrap_err(),
        BlkError::FlushWithData { nr_sectors: 8 }
    );
    assert_eq!(
        q.submit(5, &Bio::flush(0)).unwrap_err(),
        BlkError::CpuOutOfRange { cpu: 5, ncpus: 1 }
    );
    // Driver commands skip range checks; segments are copied into the request.
    let mut admin = Bio::read(u64::MAX, 0, &[], 9);
    admin.op = Op::Driver(0x42);
    q.submit(0, &admin).unwrap();
    q.submit(0, &Bio::read(8, 16, &[seg(4096), seg(4096)], 10)).unwrap();
    // The bad CPU index is not counted: there is no CPU block to count it in.
    assert_eq!(q.counters().rejected, 5);
}

// ------------------------------------------------------------------ completion policies

#[test]
fn irq_policy_completes_in_the_interrupt_context_exactly_once() {
    let (q, p) = null_queue(2, 1, 8, NullMode::Deferred, CompletionPolicy::Irq);
    let s = q.submit(0, &read(1)).unwrap();
    assert_eq!(p.ended(), 0, "deferred: nothing ends before the interrupt");
    assert_eq!(q.driver().fire_interrupt(&q, 1, s.hwq), 1);
    let log = p.log();
    assert_eq!(log.len(), 1);
    assert_eq!((log[0].cookie, log[0].submit_cpu, log[0].complete_cpu), (1, 0, 1));
    assert_eq!(log[0].status, Status::Ok);
    // The device reports the same issue again (the slot's first issue: generation 1):
    // rejected, nothing ends twice.
    let e = q.complete(1, s.hwq, IssueToken::new(s.tag, 1), Status::Ok).unwrap_err();
    assert!(matches!(e, BlkError::NotInFlight { state: "free", .. }), "{e}");
    assert_eq!(
        q.complete(1, 0, IssueToken::new(99, 1), Status::Ok).unwrap_err(),
        BlkError::TagOutOfRange { tag: 99, depth: 8 }
    );
    assert_eq!(
        q.complete(1, 3, IssueToken::new(0, 1), Status::Ok).unwrap_err(),
        BlkError::HwQueueOutOfRange {
            hwq: 3,
            nr_hw_queues: 1
        }
    );
    let c = q.counters();
    assert_eq!((c.submitted, c.completed, c.completions_irq), (1, 1, 1));
    assert_eq!(c.spurious_completions, 2);
    assert_eq!(p.ended(), 1);
    assert_eq!(q.tags_in_use(), 0);
}

#[test]
fn local_policy_defers_to_the_interrupted_cpu_with_one_softirq_per_batch() {
    let (q, p) = null_queue(2, 1, 8, NullMode::Deferred, CompletionPolicy::Local);
    for c in 1..=3 {
        q.submit(0, &read(c)).unwrap();
    }
    assert_eq!(q.driver().fire_interrupt(&q, 1, 0), 3);
    assert_eq!(p.ended(), 0, "deferred to the softirq");
    assert_eq!(p.softirqs_on[1].load(Ordering::SeqCst), 1, "one softirq for the batch");
    assert!(p.take_kick(1));
    assert_eq!(q.run_completions(1), 3);
    let cookies: Vec<u64> = p.log().iter().map(|c| c.cookie).collect();
    assert_eq!(cookies, [1, 2, 3], "completion list must be FIFO");
    assert!(p.log().iter().all(|c| c.complete_cpu == 1));
    let c = q.counters();
    assert_eq!((c.completions_local, c.softirqs, c.ipis), (3, 1, 0));
}

#[test]
fn stage_trace_reports_each_stage_once_per_request_only_while_on() {
    use blk::Stage;
    let (q, p) = null_queue(2, 1, 8, NullMode::Deferred, CompletionPolicy::Remote);
    q.submit(0, &read(1)).unwrap();
    q.driver().fire_interrupt(&q, 1, 0);
    q.run_completions(0);
    assert!(p.stages.lock().unwrap().is_empty(), "tracing is off by default");
    q.set_stage_trace(true);
    q.submit(0, &read(2)).unwrap();
    assert_eq!(q.driver().fire_interrupt(&q, 1, 0), 1);
    assert_eq!(q.run_completions(0), 1);
    let seen = p.stages.lock().unwrap().clone();
    let stages: Vec<(usize, Stage)> = seen.iter().map(|&(cpu, _, s)| (cpu, s)).collect();
    assert_eq!(
        stages,
        [
            (0, Stage::Submit),
            (0, Stage::Dispatch),
            (0, Stage::Doorbell),
            (1, Stage::DeviceComplete),
            (1, Stage::ListPush),
            (0, Stage::Softirq),
            (0, Stage::EndIo),
        ],
        "remote completion: the interrupt on cpu1, the rest on the submitter"
    );
    assert!(
        seen.iter().all(|&(_, r, _)| r == seen[0].1),
        "one request id throughout"
    );
    q.set_stage_trace(false);
    q.submit(0, &read(3)).unwrap();
    q.driver().fire_interrupt(&q, 1, 0);
    q.run_completions(0);
    assert_eq!(p.stages.lock().unwrap().len(), 7, "nothing once switched off");
    for s in Stage::ALL {
        assert_eq!(Stage::from_u8(s as u8), Some(s));
    }
    assert_eq!(Stage::from_u8(8), None);
}

#[test]
fn a_traced_batch_reports_every_requests_stages_and_an_untraced_one_none() {
    use blk::Stage;
    let (q, p) = null_queue(1, 1, 8, NullMode::Deferred, CompletionPolicy::Irq);
    assert_eq!(q.submit_batch(0, &[read(1), read(2)]).accepted, 2);
    assert!(p.stages.lock().unwrap().is_empty(), "tracing is off by default");
    q.set_stage_trace(true);
    assert_eq!(q.submit_batch(0, &[read(3), read(4)]).accepted, 2);
    let stages: Vec<Stage> = p.stages.lock().unwrap().iter().map(|&(_, _, s)| s).collect();
    assert_eq!(
        stages,
        [
            Stage::Submit,
            Stage::Submit,
            Stage::Dispatch,
            Stage::Doorbell,
            Stage::Dispatch,
            Stage::Doorbell,
        ],
        "both taken, then both dispatched"
    );
    q.set_stage_trace(false);
    assert_eq!(q.submit_batch(0, &[read(5)]).accepted, 1);
    assert_eq!(p.stages.lock().unwrap().len(), 6, "nothing once switched off");
    assert_eq!(q.driver().fire_interrupt(&q, 0, 0), 5);
}

#[test]
fn remote_policy_sends_one_ipi_per_batch_to_the_submitting_cpu() {
    let (q, p) = null_queue(3, 1, 8, NullMode::Deferred, CompletionPolicy::Remote);
    for c in 1..=3 {
        q.submit(0, &read(c)).unwrap();
    }
    q.submit(2, &read(4)).unwrap();
    // The interrupt lands on CPU 2: three requests go home to CPU 0, one is local.
    assert_eq!(q.driver().fire_interrupt(&q, 2, 0), 4);
    assert_eq!(p.ended(), 1, "CPU 2's own request completes in place");
    assert_eq!(p.ipis_to[0].load(Ordering::SeqCst), 1, "one IPI for three completions");
    assert_eq!(p.ipis_to[2].load(Ordering::SeqCst), 0);
    assert_eq!(q.run_completions(0), 3);
    let log = p.log();
    assert!(log.iter().all(|c| c.complete_cpu == c.submit_cpu), "{log:?}");
    let c = q.counters();
    assert_eq!((c.completions_remote, c.completions_irq, c.ipis), (3, 1, 1));
    // A later batch raises a new IPI: the list was emptied.
    q.submit(0, &read(5)).unwrap();
    q.driver().fire_interrupt(&q, 1, 0);
    assert_eq!(p.ipis_to[0].load(Ordering::SeqCst), 2);
}

#[test]
fn poll_policy_completes_in_the_poller() {
    let (q, p) = null_queue(2, 2, 4, NullMode::Deferred, CompletionPolicy::Poll);
    q.submit(0, &read(1)).unwrap();
    q.submit(1, &read(2)).unwrap();
    assert_eq!(q.poll(0, 0).unwrap(), 1);
    assert_eq!(q.poll(0, 1).unwrap(), 1);
    assert_eq!(q.poll(0, 1).unwrap(), 0);
    assert_eq!(p.ended(), 2);
    assert_eq!(q.counters().completions_poll, 2);
    assert!(q.poll(0, 2).is_err());
}

#[test]
fn the_devices_status_reaches_the_end_on_every_completion_route() {
    // The status travels with the completion when it finishes at once and through the slot
    // when it waits on a completion list; with and without a driver `complete`.
    for policy in [
        CompletionPolicy::Irq,
        CompletionPolicy::Poll,
        CompletionPolicy::Local,
        CompletionPolicy::Remote,
    ] {
        let (q, p) = rec_queue(2, 8, policy);
        let statuses = [Status::IoError, Status::Ok, Status::Timeout, Status::NotSupported];
        for (cookie, _) in statuses.iter().enumerate() {
            q.submit(0, &read(cookie as u64)).unwrap();
        }
        let tokens = q.driver().issued.lock().unwrap().clone();
        for (token, status) in tokens.iter().zip(statuses) {
            q.complete(1, 0, *token, status).unwrap();
        }
        q.run_completions(0);
        q.run_completions(1);
        let got: Vec<(u64, Status)> = p.log().iter().map(|c| (c.cookie, c.status)).collect();
        let want: Vec<(u64, Status)> = statuses.iter().enumerate().map(|(c, s)| (c as u64, *s)).collect();
        assert_eq!(got, want, "{policy:?}");
        assert_eq!(q.driver().completes.load(Ordering::SeqCst), 4, "{policy:?}");
        assert_eq!(q.counters().completed_with_error, 3, "{policy:?}");

        // A driver without `complete` (the block layer ends the request itself): every
        // request fails.
        let mut null = NullConfig::new(CAP, NullMode::Deferred);
        null.error_one_in = 1;
        let mut cfg = null.queue_config(2, 1, 8);
        cfg.completion = policy;
        let p = Arc::new(HostPlatform::new(2, 1024, true));
        let q = Queue::new(cfg, NullDriver::new(null, 1, 8, false), p.clone()).unwrap();
        q.submit(0, &read(7)).unwrap();
        q.submit(0, &read(8)).unwrap();
        assert_eq!(q.driver().fire_interrupt(&q, 1, 0), 2);
        q.run_completions(0);
        q.run_completions(1);
        assert_eq!(p.ended(), 2, "{policy:?}");
        assert!(p.log().iter().all(|c| c.status == Status::IoError), "{policy:?}");
    }
}

#[test]
fn policy_switch_at_run_time_applies_to_later_completions() {
    let (q, p) = null_queue(2, 1, 8, NullMode::Immediate, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    assert_eq!(p.ended(), 1, "immediate + irq: done within submit");
    q.set_completion_policy(CompletionPolicy::Local);
    q.submit(0, &read(2)).unwrap();
    assert_eq!(p.ended(), 1);
    assert_eq!(q.run_completions(0), 1);
    let c = q.counters();
    assert_eq!((c.completions_irq, c.completions_local), (1, 1));
}

#[test]
fn a_completion_batch_ends_each_request_and_refuses_like_complete() {
    let (q, p) = rec_queue(2, 8, CompletionPolicy::Irq);
    for c in 0..3 {
        q.submit(0, &read(c)).unwrap();
    }
    let tokens = q.driver().issued.lock().unwrap().clone();
    assert!(matches!(
        q.completion_batch(2, 0),
        Err(BlkError::CpuOutOfRange { cpu: 2, ncpus: 2 })
    ));
    assert!(matches!(
        q.completion_batch(1, 1),
        Err(BlkError::HwQueueOutOfRange {
            hwq: 1,
            nr_hw_queues: 1
        })
    ));
    {
        let mut batch = q.completion_batch(1, 0).unwrap();
        batch.complete(tokens[0], Status::Ok).unwrap();
        batch.complete(tokens[1], Status::IoError).unwrap();
        assert!(matches!(
            batch.complete(tokens[0], Status::Ok),
            Err(BlkError::NotInFlight { state: "free", .. })
        ));
        assert_eq!(
            batch.complete(IssueToken::new(99, 1), Status::Ok),
            Err(BlkError::TagOutOfRange { tag: 99, depth: 8 })
        );
        let stale = IssueToken::new(tokens[2].tag(), tokens[2].generation().wrapping_add(1));
        assert!(matches!(
            batch.complete(stale, Status::Ok),
            Err(BlkError::StaleCompletion { .. })
        ));
    }
    let got: Vec<(u64, Status, u16)> = p.log().iter().map(|c| (c.cookie, c.status, c.complete_cpu)).collect();
    assert_eq!(got, [(0, Status::Ok, 1), (1, Status::IoError, 1)]);
    let c = q.counters();
    assert_eq!((c.completed, c.completions_irq, c.completed_with_error), (2, 2, 1));
    assert_eq!((c.spurious_completions, c.stale_completions), (2, 1));
    assert_eq!(q.driver().completes.load(Ordering::SeqCst), 2);
    assert_eq!(q.tags_in_use(), 1);
}

#[test]
fn a_request_turned_away_goes_again_when_the_completion_batch_ends() {
    for check in QuiesceCheck::ALL {
        let (q, _p) = rec_queue(1, 8, CompletionPolicy::Irq);
        q.set_quiesce_check(check);
        q.submit(0, &read(1)).unwrap();
        // The driver turns the second request away: it waits for a completion to free room.
        q.driver().plan.lock().unwrap().push_back(Plan::Busy);
        q.submit(0, &read(2)).unwrap();
        let token = q.driver().issued.lock().unwrap()[0];
        assert_eq!(q.driver().queued.lock().unwrap().len(), 1);
        {
            let mut batch = q.completion_batch(0, 0).unwrap();
            batch.complete(token, Status::Ok).unwrap();
            let queued = q.driver().queued.lock().unwrap().len();
            if check == QuiesceCheck::LockFree {
                assert_eq!(queued, 1, "the rerun waits for the end of the batch");
            } else {
                assert_eq!(queued, 2, "{check:?}: each completion keeps its own rerun");
            }
        }
        let queued: Vec<u64> = q.driver().queued.lock().unwrap().iter().map(|(c, _)| *c).collect();
        assert_eq!(queued, [1, 2], "{check:?}: the turned-away request went again");
        // A batch that accepted nothing owes no check, and one whose every token was refused
        // changes nothing.
        let mut idle = q.completion_batch(0, 0).unwrap();
        assert!(idle.complete(token, Status::Ok).is_err());
        drop(idle);
        assert_eq!(q.driver().queued.lock().unwrap().len(), 2);
    }
}

// ------------------------------------------------------------------ dispatch details

#[test]
fn batches_carry_the_last_hint_and_busy_commits_what_was_queued() {
    let (q, _p) = rec_queue(1, 8, CompletionPolicy::Irq);
    q.quiesce();
    for c in 1..=3 {
        q.submit(0, &read(c)).unwrap();
    }
    assert!(
        q.driver().queued.lock().unwrap().is_empty(),
        "quiesced: nothing dispatched"
    );
    assert_eq!(q.counters().dispatched, 0);
    q.unquiesce(0).unwrap();
    assert_eq!(
        *q.driver().queued.lock().unwrap(),
        [(1, false), (2, false), (3, true)],
        "one batch, FIFO, last only on the final request"
    );
    assert_eq!(q.driver().commits.load(Ordering::SeqCst), 0, "batch ended normally");

    // Second batch: the second request is turned away.
    q.quiesce();
    for c in 4..=6 {
        q.submit(0, &read(c)).unwrap();
    }
    q.driver().plan.lock().unwrap().extend([Plan::Issue, Plan::Busy]);
    q.unquiesce(0).unwrap();
    let queued = q.driver().queued.lock().unwrap().clone();
    assert_eq!(&queued[3..4], [(4, false)]);
    assert_eq!(q.driver().commits.load(Ordering::SeqCst), 1, "doorbell for request 4");
    assert_eq!(q.counters().requeued, 1);
    // A completion frees resources: the turned-away requests go out, in order.
    let first = q.driver().issued.lock().unwrap()[0];
    q.complete(0, 0, first, Status::Ok).unwrap();
    let queued = q.driver().queued.lock().unwrap().clone();
    assert_eq!(&queued[4..], [(5, false), (6, true)]);
}

#[test]
fn a_request_turned_away_after_an_end_in_the_same_pass_goes_again_at_once() {
    // An end on the dispatching CPU skips the rerun check of its own queue: the
    // restart protocol must still send the request turned away after it, with no completion
    // or tick to follow.
    for end in [Plan::End, Plan::Complete] {
        let (q, p) = rec_queue(1, 8, CompletionPolicy::Irq);
        q.quiesce();
        q.submit(0, &read(1)).unwrap();
        q.submit(0, &read(2)).unwrap();
        q.driver().plan.lock().unwrap().extend([end, Plan::Busy, Plan::Issue]);
        q.unquiesce(0).unwrap();
        assert_eq!(*q.driver().queued.lock().unwrap(), [(2, true)], "{end:?}");
        let log = p.log();
        assert_eq!((log.len(), log[0].cookie, log[0].status), (1, 1, Status::Ok), "{end:?}");
        let c = q.counters();
        assert_eq!((c.completed, c.requeued, c.hot_path_locks), (1, 1, 0), "{end:?}");
        assert_eq!(c.completions_inline, u64::from(end == Plan::End), "{end:?}");
    }
}

#[test]
fn busy_with_nothing_in_flight_is_retried_by_the_tick() {
    let (q, _p) = rec_queue(1, 8, CompletionPolicy::Irq);
    q.driver().plan.lock().unwrap().push_back(Plan::Busy);
    q.submit(0, &read(1)).unwrap();
    assert!(q.driver().queued.lock().unwrap().is_empty());
    q.tick(0).unwrap();
    assert_eq!(*q.driver().queued.lock().unwrap(), [(1, true)]);
}

#[test]
fn driver_errors_end_the_request_with_the_drivers_status() {
    let (q, p) = rec_queue(1, 8, CompletionPolicy::Irq);
    q.driver().plan.lock().unwrap().push_back(Plan::Fail);
    q.submit(0, &read(1)).unwrap();
    assert_eq!(p.log()[0].status, Status::NotSupported);
    assert_eq!(q.counters().completed_with_error, 1);
    assert_eq!(q.tags_in_use(), 0);
}

#[test]
fn software_queues_keep_per_cpu_order() {
    let (q, _p) = rec_queue(3, 16, CompletionPolicy::Irq);
    q.quiesce();
    for c in 0..9 {
        q.submit((c % 3) as usize, &read(c)).unwrap();
    }
    q.unquiesce(0).unwrap();
    let queued: Vec<u64> = q.driver().queued.lock().unwrap().iter().map(|x| x.0).collect();
    assert_eq!(queued.len(), 9);
    for cpu in 0..3u64 {
        let mine: Vec<u64> = queued.iter().copied().filter(|c| c % 3 == cpu).collect();
        assert_eq!(mine, [cpu, cpu + 3, cpu + 6], "cpu {cpu} order");
    }
}

// ------------------------------------------------------------------ quiesce and freeze

#[test]
fn quiesce_nests_and_unquiesce_underflow_is_an_error() {
    let (q, p) = null_queue(1, 1, 8, NullMode::Inline, CompletionPolicy::Irq);
    q.quiesce();
    q.quiesce();
    q.submit(0, &read(1)).unwrap();
    q.unquiesce(0).unwrap();
    assert!(q.is_quiesced());
    assert_eq!(p.ended(), 0);
    q.unquiesce(0).unwrap();
    assert!(!q.is_quiesced());
    assert_eq!(p.ended(), 1);
    assert_eq!(q.unquiesce(0).unwrap_err(), BlkError::NotQuiesced);
}

#[test]
fn freeze_refuses_new_requests_and_waits_for_in_flight_ones() {
    let (q, p) = null_queue(2, 1, 8, NullMode::Deferred, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    q.freeze_start();
    assert_eq!(q.submit(0, &read(2)).unwrap_err(), BlkError::Frozen);
    let e = q.freeze_wait(1, 1_000_000).unwrap_err();
    assert_eq!(
        e,
        BlkError::WaitTimeout {
            what: "in-flight requests to drain (freeze)",
            in_flight: 1
        }
    );
    q.driver().fire_interrupt(&q, 1, 0);
    q.freeze_wait(1, 1_000_000).unwrap();
    // Nested freeze: one unfreeze is not enough.
    q.freeze(1, 0).unwrap();
    q.unfreeze().unwrap();
    assert!(q.is_frozen());
    q.unfreeze().unwrap();
    assert!(!q.is_frozen());
    assert_eq!(q.unfreeze().unwrap_err(), BlkError::NotFrozen);
    q.submit(0, &read(3)).unwrap();
    assert_eq!(q.counters().rejected, 1);
    assert_eq!(p.ended(), 1);
}

#[test]
fn freeze_wait_drives_local_completions_of_its_own_cpu() {
    let (q, p) = null_queue(1, 1, 8, NullMode::Immediate, CompletionPolicy::Local);
    q.submit(0, &read(1)).unwrap();
    assert_eq!(p.ended(), 0);
    q.freeze(0, 1_000_000_000).unwrap();
    assert_eq!(p.ended(), 1);
}

// ------------------------------------------------------------------ tags

#[test]
fn tags_run_out_then_submit_wait_makes_progress() {
    let (q, p) = null_queue(1, 1, 2, NullMode::Deferred, CompletionPolicy::Poll);
    q.submit(0, &read(1)).unwrap();
    q.submit(0, &read(2)).unwrap();
    let e = q.submit(0, &read(3)).unwrap_err();
    assert_eq!(
        e,
        BlkError::TagsExhausted {
            hwq: 0,
            pool: 2,
            reserved: false
        }
    );
    q.submit_wait(0, &read(3), 1_000_000_000).unwrap();
    assert!(p.ended() >= 2, "waiting polled the queue");
    assert_eq!(q.counters().tag_waits, 1);
}

#[test]
fn submit_wait_gives_up_after_its_timeout() {
    let (q, _p) = null_queue(1, 1, 1, NullMode::Deferred, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    let e = q.submit_wait(0, &read(2), 1_000_000).unwrap_err();
    assert_eq!(
        e,
        BlkError::WaitTimeout {
            what: "a free tag",
            in_flight: 1
        }
    );
}

#[test]
fn reserved_tags_serve_admin_commands_only() {
    let null = NullConfig::new(CAP, NullMode::Deferred);
    let mut cfg = null.queue_config(1, 1, 4);
    cfg.reserved_tags = 1;
    let q = Queue::new(
        cfg,
        NullDriver::new(null, 1, 4, false),
        Arc::new(HostPlatform::new(1, 64, false)),
    )
    .unwrap();
    let mut admin = Bio::flush(0);
    admin.reserved_tag = true;
    assert_eq!(q.submit(0, &admin).unwrap().tag, 0);
    assert!(matches!(
        q.submit(0, &admin),
        Err(BlkError::TagsExhausted {
            reserved: true,
            pool: 1,
            ..
        })
    ));
    let normal: Vec<u32> = (0..3).map(|c| q.submit(0, &read(c)).unwrap().tag).collect();
    assert!(normal.iter().all(|&t| (1..4).contains(&t)), "{normal:?}");
    assert!(q.submit(0, &read(9)).is_err());
}

#[test]
fn shared_tags_span_hardware_queues() {
    let null = NullConfig::new(CAP, NullMode::Deferred);
    let mut cfg = null.queue_config(4, 2, 4);
    cfg.shared_tags = true;
    let p = Arc::new(HostPlatform::new(4, 64, true));
    let q = Queue::new(cfg, NullDriver::new(null, 2, 4, true), p.clone()).unwrap();
    assert_eq!((q.cpu_to_hwq(0).unwrap(), q.cpu_to_hwq(3).unwrap()), (0, 1));
    let mut tags: Vec<u32> = (0..4).map(|c| q.submit(c, &read(c as u64)).unwrap().tag).collect();
    tags.sort_unstable();
    assert_eq!(tags, [0, 1, 2, 3], "one pool across both hw queues");
    assert!(matches!(q.submit(1, &read(9)), Err(BlkError::TagsExhausted { .. })));
    assert_eq!(
        q.driver().fire_interrupt(&q, 0, 0) + q.driver().fire_interrupt(&q, 0, 1),
        4
    );
    let hwqs: Vec<u16> = p.log().iter().map(|c| c.hwq).collect();
    assert_eq!(hwqs.iter().filter(|&&h| h == 1).count(), 2, "{hwqs:?}");
}

// ------------------------------------------------------------------ timeouts

#[test]
fn a_request_never_times_out_before_its_timeout() {
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    p.advance(5_000);
    q.submit(0, &read(1)).unwrap();
    p.advance(999);
    assert_eq!(q.tick(0).unwrap(), 0, "999 ns after the issue");
    p.advance(1);
    assert_eq!(q.tick(0).unwrap(), 1);
}

#[test]
fn timeouts_reset_or_finish_as_the_driver_says() {
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    q.submit(0, &read(7)).unwrap();
    assert_eq!(q.tick(0).unwrap(), 0, "deadline not reached");
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    assert_eq!(*q.driver().timeouts.lock().unwrap(), [7]);
    assert_eq!(p.ended(), 0, "ResetTimer keeps it in flight");
    assert_eq!(q.tick(0).unwrap(), 0, "timer was reset");
    q.driver()
        .timeout_plan
        .lock()
        .unwrap()
        .push_back(TimeoutAction::Done(Status::Timeout));
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    assert_eq!(p.log()[0].status, Status::Timeout);
    let c = q.counters();
    assert_eq!((c.timeouts, c.timeout_resets, c.completed), (2, 1, 1));
    // The device completing the timed-out issue afterwards is stale: refused and counted.
    let token = q.driver().issued.lock().unwrap()[0];
    let e = q.complete(0, 0, token, Status::Ok).unwrap_err();
    assert!(
        matches!(
            e,
            BlkError::StaleCompletion {
                generation: 1,
                current: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(q.counters().stale_completions, 1);
    assert_eq!(p.ended(), 1);
}

#[test]
fn completion_during_the_timeout_handler_is_applied_afterwards() {
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    q.submit(0, &read(3)).unwrap();
    *q.driver().complete_during_timeout.lock().unwrap() = Some(Status::IoError);
    p.advance(2_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    let log = p.log();
    assert_eq!(log.len(), 1, "finished once, after the handler");
    assert_eq!(log[0].status, Status::IoError, "the device's status is kept");
    assert_eq!(q.driver().completes.load(Ordering::SeqCst), 1);
    assert_eq!(q.tags_in_use(), 0);
}

// ------------------------------------------------------------------ ownership

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "dropped without issue/end/complete")]
fn dropping_a_request_handle_is_caught_in_debug_builds() {
    struct Leaky;
    impl Driver for Leaky {
        type Pdu = ();
        fn queue_rq<'a>(
            &self,
            _hw: &HwCtx<'a, Self>,
            rq: Rq<'a, Self>,
            _last: bool,
        ) -> Result<(), QueueRqError<'a, Self>> {
            drop(rq);
            Ok(())
        }
    }
    let q = Queue::new(
        QueueConfig::new(1, 1, 2, CAP),
        Leaky,
        Arc::new(HostPlatform::new(1, 8, false)),
    )
    .unwrap();
    let _ = q.submit(0, &read(1));
}

// ------------------------------------------------------------------ locked vs lock-free

#[test]
fn only_the_locked_variant_takes_locks_on_the_hot_path() {
    for check in QuiesceCheck::ALL {
        let (q, p) = null_queue(2, 1, 8, NullMode::Immediate, CompletionPolicy::Irq);
        q.set_quiesce_check(check);
        for c in 0..50 {
            q.submit((c % 2) as usize, &read(c)).unwrap();
        }
        assert_eq!(p.ended(), 50);
        let c = q.counters();
        match check {
            QuiesceCheck::LockFree => assert_eq!(c.hot_path_locks, 0),
            // Every completion reruns the (empty) queue and takes the lock to re-check; one
            // thread never contends.
            QuiesceCheck::Locked | QuiesceCheck::Sleeping => {
                assert!(c.hot_path_locks >= 50, "{c:?}");
                assert_eq!((c.lock_contended, c.lock_sleeps, c.lock_wakeups), (0, 0, 0));
            }
        }
    }
}

// ------------------------------------------------------------------ null device data

#[test]
fn memory_backed_null_device_returns_written_data() {
    let mut null = NullConfig::new(64, NullMode::Inline);
    null.memory_backed = true;
    let q = Queue::new(
        null.queue_config(1, 1, 4),
        NullDriver::new(null, 1, 4, false),
        Arc::new(HostPlatform::new(1, 8, true)),
    )
    .unwrap();
    let mut out: Vec<u8> = (0..1024).map(|i| (i * 7 % 251) as u8).collect();
    let mut back = vec![0u8; 1024];
    // The buffers outlive the I/O, which is inline and so finishes inside `submit`, and
    // nothing else touches them meanwhile.
    // SAFETY: as just said.
    let w0 = unsafe { Segment::with_virt(0, out.as_mut_ptr(), 1024) };
    let w = [w0];
    let back_ptr = back.as_mut_ptr();
    // SAFETY: as above.
    let r0 = unsafe { Segment::with_virt(0, back_ptr, 512) };
    // SAFETY: as above; `back` is 1024 bytes, so `back_ptr + 512` stays inside it.
    let r1 = unsafe { Segment::with_virt(0, back_ptr.add(512), 512) };
    let r = [r0, r1];
    q.submit(0, &Bio::write(10, 2, &w, 1)).unwrap();
    q.submit(0, &Bio::read(10, 2, &r, 2)).unwrap();
    assert_eq!(back, out);
    q.submit(0, &Bio::read(12, 1, &r[..1], 3)).unwrap();
    assert!(back[..512].iter().all(|&b| b == 0), "unwritten sectors read as zero");
    // A discard of the second written sector: it reads back as zeros, the first keeps its data.
    q.submit(0, &Bio::discard(11, 1, 4)).unwrap();
    back.fill(0xAA);
    q.submit(0, &Bio::read(10, 2, &r, 5)).unwrap();
    assert_eq!(back[..512], out[..512]);
    assert!(back[512..].iter().all(|&b| b == 0), "a discarded sector reads as zero");
}

// ------------------------------------------------------------------ tag generations

#[test]
fn issue_tokens_round_trip_through_32_bits() {
    let t = IssueToken::new(65535, 0xBEEF);
    assert_eq!((t.tag(), t.generation()), (65535, 0xBEEF));
    assert_eq!(t.to_bits(), 0xBEEF_FFFF);
    assert_eq!(IssueToken::from_bits(t.to_bits()), t);
}

#[test]
fn depth_beyond_16_bit_tags_is_refused() {
    let p = Arc::new(HostPlatform::new(1, 1, false));
    let e = Queue::new(QueueConfig::new(1, 1, 65537, CAP), RecDriver::default(), p.clone())
        .err()
        .expect("depth 65537 must be refused");
    assert_eq!(
        e,
        BlkError::InvalidConfig {
            field: "queue_depth",
            value: 65537,
            accepted: "1..=65536"
        }
    );
    assert!(Queue::new(QueueConfig::new(1, 1, 65536, CAP), RecDriver::default(), p).is_ok());
}

#[test]
fn a_stale_completion_never_reaches_the_tags_next_owner() {
    // Depth 1: the second request necessarily reuses the first one's tag.
    let (q, p) = rec_queue(1, 1, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    let first = q.driver().issued.lock().unwrap()[0];
    q.driver()
        .timeout_plan
        .lock()
        .unwrap()
        .push_back(TimeoutAction::Done(Status::Timeout));
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    q.submit(0, &read(2)).unwrap();
    let second = q.driver().issued.lock().unwrap()[1];
    assert_eq!(second.tag(), first.tag(), "depth 1: same tag");
    assert_ne!(second.generation(), first.generation());
    // The device finally completes the first issue: dropped, and request 2 stays in flight.
    let e = q.complete(0, 0, first, Status::Ok).unwrap_err();
    assert_eq!(
        e,
        BlkError::StaleCompletion {
            tag: first.tag(),
            generation: first.generation(),
            current: second.generation()
        }
    );
    assert!(e.to_string().contains("stale completion"), "{e}");
    assert_eq!(p.ended(), 1, "request 2 must not end on request 1's completion");
    assert_eq!(q.in_flight(), 1);
    // The current issue completes normally, once.
    q.complete(0, 0, second, Status::Ok).unwrap();
    assert!(matches!(
        q.complete(0, 0, second, Status::Ok),
        Err(BlkError::NotInFlight { .. })
    ));
    let log = p.log();
    assert_eq!(
        log.iter().map(|c| (c.cookie, c.status)).collect::<Vec<_>>(),
        [(1, Status::Timeout), (2, Status::Ok)]
    );
    let c = q.counters();
    assert_eq!((c.stale_completions, c.spurious_completions), (1, 1));
}

#[test]
fn a_completion_for_a_tag_never_issued_is_refused() {
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    q.driver().plan.lock().unwrap().push_back(Plan::Busy);
    q.submit(0, &read(1)).unwrap();
    // Turned away, so queued but not issued: generation 0, state "queued".
    let tag = 0;
    let e = q.complete(0, 0, IssueToken::new(tag, 0), Status::Ok).unwrap_err();
    assert!(matches!(e, BlkError::NotInFlight { state: "queued", .. }), "{e}");
    let e = q.complete(0, 0, IssueToken::new(tag, 7), Status::Ok).unwrap_err();
    assert!(
        matches!(
            e,
            BlkError::StaleCompletion {
                generation: 7,
                current: 0,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(p.ended(), 0);
}

// ------------------------------------------------------------------ the timeout protocol

#[test]
fn reset_timer_after_sets_the_next_deadline() {
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    q.driver()
        .timeout_plan
        .lock()
        .unwrap()
        .extend([TimeoutAction::ResetTimerAfter(100), TimeoutAction::ResetTimerAfter(0)]);
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    p.advance(99);
    assert_eq!(q.tick(0).unwrap(), 0, "not yet: 100 ns were given");
    p.advance(1);
    assert_eq!(q.tick(0).unwrap(), 1);
    // After(0): the very next tick.
    assert_eq!(q.tick(0).unwrap(), 1);
    assert_eq!(q.counters().timeout_resets, 3);
    assert_eq!(p.ended(), 0, "still owned by the device");
}

#[test]
fn a_ladder_finishes_a_timed_out_request_later_with_its_token() {
    // Timeout 1: the driver sends an abort and gives it time. The abort is confirmed later
    // (outside the handler): the driver completes the token with Aborted.
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    let token = q.driver().issued.lock().unwrap()[0];
    q.driver()
        .timeout_plan
        .lock()
        .unwrap()
        .push_back(TimeoutAction::ResetTimerAfter(500));
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    let mut listed = Vec::new();
    q.for_each_issued(|hwq, t| listed.push((hwq, t)));
    assert_eq!(listed, [(0, token)], "still in flight, same issue");
    q.complete(0, 0, token, Status::Aborted).unwrap();
    assert_eq!(p.log()[0].status, Status::Aborted);
    // The device's own completion, if it ever comes, is refused: one outcome per issue.
    assert!(matches!(
        q.complete(0, 0, token, Status::Ok),
        Err(BlkError::NotInFlight { .. })
    ));
    assert_eq!(p.ended(), 1);
    q.for_each_issued(|_, t| panic!("{t:?} listed after it ended"));
}

#[test]
fn requeue_issues_again_with_a_new_generation() {
    let (q, p) = rec_queue(2, 4, CompletionPolicy::Irq);
    q.submit(1, &read(5)).unwrap();
    let first = q.driver().issued.lock().unwrap()[0];
    // A controller reset: the driver takes every issued request back.
    let mut issued = Vec::new();
    q.for_each_issued(|hwq, t| issued.push((hwq, t)));
    for (hwq, t) in issued {
        q.requeue(0, hwq, t).unwrap();
    }
    let again = q.driver().issued.lock().unwrap()[1];
    assert_eq!(again.tag(), first.tag());
    assert_ne!(again.generation(), first.generation());
    assert_eq!(q.driver().queued.lock().unwrap().len(), 2, "dispatched twice");
    // The first issue is over: completing or requeueing it again is stale.
    assert!(matches!(
        q.complete(0, 0, first, Status::Ok),
        Err(BlkError::StaleCompletion { .. })
    ));
    assert!(matches!(q.requeue(0, 0, first), Err(BlkError::StaleCompletion { .. })));
    q.complete(0, 0, again, Status::Ok).unwrap();
    let log = p.log();
    assert_eq!(log.len(), 1);
    assert_eq!((log[0].cookie, log[0].status, log[0].submit_cpu), (5, Status::Ok, 1));
    let c = q.counters();
    assert_eq!(
        (c.requeued, c.dispatched, c.completed, c.stale_completions),
        (1, 2, 1, 2)
    );
}

#[test]
fn requeue_verdict_reissues_but_a_completion_during_the_handler_wins() {
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    q.driver()
        .timeout_plan
        .lock()
        .unwrap()
        .push_back(TimeoutAction::Requeue);
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    assert_eq!(q.driver().issued.lock().unwrap().len(), 2, "issued again");
    assert_eq!(p.ended(), 0);
    assert_eq!(q.counters().requeued, 1);

    // Now it completes while the handler decides to requeue it: the completion wins and the
    // request is not issued a third time.
    *q.driver().complete_during_timeout.lock().unwrap() = Some(Status::IoError);
    q.driver()
        .timeout_plan
        .lock()
        .unwrap()
        .push_back(TimeoutAction::Requeue);
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    assert_eq!(p.ended(), 1);
    assert_eq!(p.log()[0].status, Status::IoError, "the device's status");
    assert_eq!(q.driver().issued.lock().unwrap().len(), 2, "not issued again");
    assert_eq!(q.counters().requeued, 1);
}

#[test]
fn a_requeue_during_the_handler_is_applied_after_a_reset_timer() {
    let (q, p) = rec_queue(1, 4, CompletionPolicy::Irq);
    q.submit(0, &read(1)).unwrap();
    q.driver().requeue_during_timeout.store(1, Ordering::SeqCst);
    p.advance(1_000);
    assert_eq!(q.tick(0).unwrap(), 1);
    let issued = q.driver().issued.lock().unwrap().clone();
    assert_eq!(issued.len(), 2, "requeued after the handler returned");
    assert_ne!(issued[0].generation(), issued[1].generation());
    q.complete(0, 0, issued[1], Status::Ok).unwrap();
    assert_eq!(p.ended(), 1);
}

// ------------------------------------------------------------------ the sleeping lock

#[test]
fn sleeping_lock_parks_until_the_unlock_wakes_it() {
    use blk::sleeplock::SleepLock;
    let p = Arc::new(HostPlatform::new(3, 1, false));
    let lock = Arc::new(SleepLock::new(3));
    assert!(lock.lock_spinning(), "free lock taken at once");
    let waiter = {
        let (p, lock) = (p.clone(), lock.clone());
        std::thread::spawn(move || {
            let a = lock.lock_sleeping(2, &*p, 1_000);
            assert!(lock.is_locked());
            lock.unlock(2, &*p);
            a
        })
    };
    let t0 = std::time::Instant::now();
    while p.parks.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed().as_secs() < 20, "the waiter never parked");
        std::thread::yield_now();
    }
    assert_eq!(lock.unlock(0, &*p), Some(2), "the unlock wakes the parked CPU");
    let a = waiter.join().unwrap();
    assert!(!a.uncontended);
    assert!(a.sleeps >= 1);
    assert!(!lock.is_locked());
    assert_eq!(lock.unlock(0, &*p), None, "no waiter left to wake");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

    /// `check_bio`'s one-branch check of a one-segment read or write accepts exactly the
    /// bios the full checks accept, and a refused one gets the full checks' specific error
    /// (first failure in their order: empty, beyond the end, misaligned, length mismatch). A
    /// valid one longer than the transfer limit, which the one-branch check leaves to the full
    /// checks, is split and ends once.
    #[test]
    fn a_one_segment_io_is_accepted_exactly_when_it_is_valid(
        write in proptest::prelude::any::<bool>(),
        block_4k in proptest::prelude::any::<bool>(),
        sector_pick in 0usize..8,
        random_sector in 0u64..CAP + 64,
        nr_sectors in proptest::sample::select(vec![0u32, 1, 7, 8, 9, 16, 64, u32::MAX]),
        len_delta in proptest::sample::select(vec![0i64, 0, 0, 512, -512, 1, -4096]),
        max_hw_sectors in proptest::sample::select(vec![8u32, 16, u32::MAX]),
    ) {
        let sector = [0, 8, 9, CAP - 8, CAP - 1, CAP, u64::MAX - 3, random_sector][sector_pick];
        let mut null = NullConfig::new(CAP, NullMode::Immediate);
        null.logical_block_size = if block_4k { 4096 } else { 512 };
        let mut cfg = null.queue_config(1, 1, 8);
        cfg.max_hw_sectors = max_hw_sectors;
        let platform = Arc::new(HostPlatform::new(1, 1024, true));
        let q = Queue::new(cfg, NullDriver::new(null, 1, 8, false), platform.clone()).unwrap();
        let io_bytes = u64::from(nr_sectors) * 512;
        let len = (io_bytes as i64 + len_delta).clamp(0, i64::from(u32::MAX)) as u32;
        let segment = [Segment::new(0x10_0000, len)];
        let bio = if write {
            Bio::write(sector, nr_sectors, &segment, 1)
        } else {
            Bio::read(sector, nr_sectors, &segment, 1)
        };
        let block_sectors: u32 = if block_4k { 8 } else { 1 };
        let expected = if nr_sectors == 0 {
            Err(BlkError::EmptyIo)
        } else if sector.checked_add(u64::from(nr_sectors)).is_none_or(|end| end > CAP) {
            Err(BlkError::BeyondEnd { sector, nr_sectors, capacity: CAP })
        } else if !sector.is_multiple_of(u64::from(block_sectors)) || !nr_sectors.is_multiple_of(block_sectors) {
            Err(BlkError::Misaligned { sector, nr_sectors, block_sectors })
        } else if u64::from(len) != io_bytes {
            Err(BlkError::SegmentLengthMismatch { segment_bytes: u64::from(len), io_bytes })
        } else {
            Ok(())
        };
        let got = q.submit(0, &bio).map(|_| ());
        proptest::prop_assert_eq!(&got, &expected);
        proptest::prop_assert_eq!(platform.ended(), usize::from(expected.is_ok()));
        // The requests that went to the driver: one per transfer limit's worth.
        let parts = if expected.is_ok() { nr_sectors.div_ceil(max_hw_sectors) } else { 0 };
        proptest::prop_assert_eq!(q.counters().dispatched, u64::from(parts));
    }
}
