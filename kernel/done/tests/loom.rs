//! loom model of the done board. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p done --release --target-dir target/loom --test loom`.
#![cfg(loom)]

use done::{DoneBoard, Outcome};
use loom::thread;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Timeout,
}

impl Outcome for Status {
    const SUCCESS: Self = Self::Ok;
    fn to_code(self) -> u8 {
        self as u8
    }
    fn from_code(code: u8) -> Self {
        if code == 0 { Self::Ok } else { Self::Timeout }
    }
}

/// Two CPUs deliver completions for CPU 0's two slots, one a success and one not, while CPU 0
/// takes concurrently. Every completion is reported exactly once, with the status it was
/// delivered with (the Release `fetch_or` / Acquire `swap` pairing makes the status and the
/// "not ok" bit visible with the done bit; a success is reported without its status).
#[test]
fn two_cpus_deliver_one_takes() {
    loom::model(|| {
        let board = Arc::new(DoneBoard::<Status>::new(2, 2).unwrap());
        let deliverer = |slot: u64, status: Status| {
            let board = board.clone();
            thread::spawn(move || board.deliver_from(1, 0, slot, status).unwrap())
        };
        let d0 = deliverer(0, Status::Ok);
        let d1 = deliverer(1, Status::Timeout);
        let mut seen = Vec::new();
        board.take(0, |slot, st| seen.push((slot, st)));
        d0.join().unwrap();
        d1.join().unwrap();
        board.take(0, |slot, st| seen.push((slot, st)));
        seen.sort_by_key(|&(slot, _)| slot);
        assert_eq!(seen, [(0, Status::Ok), (1, Status::Timeout)]);
        assert_eq!(board.bogus(), 0);
        assert!(!board.has_pending(0));
    });
}
