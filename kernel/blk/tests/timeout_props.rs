//! Property test of the timeout protocol against a model, with timeouts on: random sequences of
//! submissions, device completions (current, repeated and stale tokens), driver requeues, and
//! ticks with each timeout verdict. A completion or requeue is accepted exactly when its token
//! is the current issue of an in-flight request; otherwise it is refused as stale (another
//! generation) or not in flight (same generation, already over). Every request ends exactly
//! once, with the status the model predicts.

mod common;

use blk::{
    Bio, BlkError, CompletionPolicy, Driver, HwCtx, IssueToken, Platform, Queue, QueueConfig, QueueRqError, Rq, Status,
    TimedOutRq, TimeoutAction,
};
use common::HostPlatform;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const DEPTH: u32 = 4;
const TIMEOUT_NS: u64 = 1_000;

#[derive(Default)]
struct ScriptDriver {
    /// (cookie, token) per issue, in order.
    issued: Mutex<Vec<(u64, IssueToken)>>,
    verdict: Mutex<Option<TimeoutAction>>,
}

impl Driver for ScriptDriver {
    type Pdu = ();
    fn queue_rq<'a>(&self, _hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        let cookie = rq.cookie();
        let token = rq.issue();
        self.issued.lock().unwrap().push((cookie, token));
        Ok(())
    }
    fn timeout(&self, _rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        self.verdict
            .lock()
            .unwrap()
            .expect("a verdict is scripted for every tick")
    }
}

#[derive(Clone, Debug)]
enum Op {
    Submit,
    /// Complete the k-th token ever issued (mod count) with this status.
    Complete(usize, bool),
    /// Requeue the k-th token ever issued.
    Requeue(usize),
    /// Advance the clock by this many ns, then tick with this verdict.
    Tick(u64, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Submit),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(k, ok)| Op::Complete(k, ok)),
        1 => any::<usize>().prop_map(Op::Requeue),
        2 => (0u64..2_500, 0u8..4).prop_map(|(ns, v)| Op::Tick(ns, v)),
    ]
}

/// What the model knows about a tag.
#[derive(Clone, Copy, Debug)]
struct TagModel {
    /// The request holding it and its current issue, while issued.
    in_flight: Option<(u64, IssueToken)>,
    /// The slot's generation as the block layer holds it.
    generation: u16,
    /// When the current issue times out (issue time + timeout).
    deadline: u64,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn timeout_protocol_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut cfg = QueueConfig::new(1, 1, DEPTH, 1 << 20);
        cfg.timeout_ns = TIMEOUT_NS;
        cfg.completion = CompletionPolicy::Irq;
        let p = Arc::new(HostPlatform::manual(1, 1024));
        let q = Queue::new(cfg, ScriptDriver::default(), p.clone()).unwrap();
        let mut tags: BTreeMap<u32, TagModel> = BTreeMap::new();
        let mut seen = 0usize;
        let mut all_tokens: Vec<IssueToken> = Vec::new();
        let mut expected_end: BTreeMap<u64, Status> = BTreeMap::new();
        let mut next_cookie = 0u64;
        let mut stale = 0u64;

        // Learns the issues the driver made since the last call.
        let sync = |tags: &mut BTreeMap<u32, TagModel>, seen: &mut usize, all: &mut Vec<IssueToken>, now: u64| {
            let issued = q.driver().issued.lock().unwrap().clone();
            for &(cookie, token) in &issued[*seen..] {
                let m = tags.entry(token.tag()).or_insert(TagModel { in_flight: None, generation: 0, deadline: 0 });
                assert!(m.in_flight.is_none(), "tag {} issued twice", token.tag());
                assert_eq!(token.generation(), m.generation.wrapping_add(1), "one bump per issue");
                *m = TagModel { in_flight: Some((cookie, token)), generation: token.generation(), deadline: now + TIMEOUT_NS };
                all.push(token);
            }
            *seen = issued.len();
        };

        for op in ops {
            match op {
                Op::Submit => {
                    let busy = tags.values().filter(|m| m.in_flight.is_some()).count() as u32;
                    let r = q.submit(0, &Bio::read(next_cookie * 8, 8, &[], next_cookie));
                    if busy < DEPTH {
                        prop_assert!(r.is_ok(), "{:?}", r);
                        next_cookie += 1;
                    } else {
                        prop_assert!(matches!(r, Err(BlkError::TagsExhausted { .. })), "{:?}", r);
                    }
                }
                Op::Complete(..) | Op::Requeue(_) if all_tokens.is_empty() => {}
                Op::Complete(k, ok) => {
                    let token = all_tokens[k % all_tokens.len()];
                    let status = if ok { Status::Ok } else { Status::IoError };
                    let m = tags[&token.tag()];
                    let r = q.complete(0, 0, token, status);
                    if m.in_flight.map(|(_, t)| t) == Some(token) {
                        prop_assert_eq!(r, Ok(()));
                        let (cookie, _) = m.in_flight.unwrap();
                        expected_end.insert(cookie, status);
                        tags.get_mut(&token.tag()).unwrap().in_flight = None;
                    } else if token.generation() != m.generation {
                        prop_assert!(matches!(r, Err(BlkError::StaleCompletion { .. })), "{:?}", r);
                        stale += 1;
                    } else {
                        prop_assert!(matches!(r, Err(BlkError::NotInFlight { .. })), "{:?}", r);
                    }
                }
                Op::Requeue(k) => {
                    let token = all_tokens[k % all_tokens.len()];
                    let m = tags[&token.tag()];
                    let r = q.requeue(0, 0, token);
                    if m.in_flight.map(|(_, t)| t) == Some(token) {
                        prop_assert_eq!(r, Ok(()));
                        // Retired, then issued again at once (nothing else is queued).
                        let t = tags.get_mut(&token.tag()).unwrap();
                        t.in_flight = None;
                        t.generation = t.generation.wrapping_add(1);
                    } else if token.generation() != m.generation {
                        prop_assert!(matches!(r, Err(BlkError::StaleCompletion { .. })), "{:?}", r);
                        stale += 1;
                    } else {
                        prop_assert!(matches!(r, Err(BlkError::NotInFlight { .. })), "{:?}", r);
                    }
                }
                Op::Tick(advance, v) => {
                    let verdict = match v {
                        0 => TimeoutAction::ResetTimer,
                        1 => TimeoutAction::ResetTimerAfter(300),
                        2 => TimeoutAction::Done(Status::Timeout),
                        _ => TimeoutAction::Requeue,
                    };
                    *q.driver().verdict.lock().unwrap() = Some(verdict);
                    p.advance(advance);
                    let now = p.now_ns();
                    let mut expired = 0;
                    for m in tags.values_mut() {
                        let Some((cookie, _)) = m.in_flight else { continue };
                        if now < m.deadline {
                            continue;
                        }
                        expired += 1;
                        match verdict {
                            TimeoutAction::ResetTimer => m.deadline = now + TIMEOUT_NS,
                            TimeoutAction::ResetTimerAfter(ns) => m.deadline = now + ns,
                            TimeoutAction::Done(s) => {
                                expected_end.insert(cookie, s);
                                m.in_flight = None;
                                m.generation = m.generation.wrapping_add(1);
                            }
                            TimeoutAction::Requeue => {
                                m.in_flight = None;
                                m.generation = m.generation.wrapping_add(1);
                            }
                        }
                    }
                    prop_assert_eq!(q.tick(0).unwrap(), expired);
                }
            }
            sync(&mut tags, &mut seen, &mut all_tokens, p.now_ns());
            // Ends so far match the model exactly.
            let log = p.log();
            let ended: BTreeMap<u64, Status> = log.iter().map(|c| (c.cookie, c.status)).collect();
            prop_assert_eq!(ended.len(), log.len(), "a request ended twice");
            prop_assert_eq!(&ended, &expected_end);
        }
        prop_assert_eq!(q.counters().stale_completions, stale);
        prop_assert_eq!(q.in_flight() as u64, next_cookie - expected_end.len() as u64);
    }
}
