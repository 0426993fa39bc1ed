//! The board's behaviour, with a status type of the tests' own (the board is generic).

use super::*;
extern crate std;
use std::sync::Mutex;
use std::vec::Vec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    IoError,
    Timeout,
    Aborted,
}

impl Outcome for Status {
    const SUCCESS: Self = Self::Ok;
    fn to_code(self) -> u8 {
        self as u8
    }
    fn from_code(code: u8) -> Self {
        [Self::Ok, Self::IoError, Self::Timeout, Self::Aborted][usize::from(code)]
    }
}

fn board(ncpus: usize, slots: usize) -> DoneBoard<Status> {
    DoneBoard::new(ncpus, slots).unwrap()
}

#[test]
fn delivers_to_the_submitting_cpu_with_status() {
    let b = board(3, 130);
    b.deliver(1, 0, Status::Ok).unwrap();
    b.deliver(1, 129, Status::IoError).unwrap();
    b.deliver(2, 64, Status::Timeout).unwrap();
    assert!(!b.has_pending(0));
    let mut got = Vec::new();
    assert_eq!(b.take(1, |s, st| got.push((s, st))), 2);
    assert_eq!(got, [(0, Status::Ok), (129, Status::IoError)]);
    assert_eq!(b.take(1, |_, _| panic!("taken twice")), 0);
    got.clear();
    assert_eq!(b.take(2, |s, st| got.push((s, st))), 1);
    assert_eq!(got, [(64, Status::Timeout)]);
    assert_eq!(b.bogus(), 0);
}

/// A CPU's part, cut once, takes what `take_split` would, from its own CPU's words of its
/// slots only, as often as asked; there is none for a CPU the board does not have.
#[test]
fn a_cpus_part_takes_its_own_words_only_every_time() {
    let b = board(2, 200);
    assert!(b.cpu_below(2, 64).is_none());
    let part = b.cpu_below(1, 70).unwrap();
    for round in 0..3 {
        // Slot 130 is past the part's two words; cpu0's slot 5 is another CPU's.
        b.deliver(1, 3, Status::Ok).unwrap();
        b.deliver(1, 64, Status::Ok).unwrap();
        b.deliver(1, 69, Status::IoError).unwrap();
        b.deliver(1, 130, Status::Ok).unwrap();
        b.deliver(0, 5, Status::Ok).unwrap();
        let mut got = Vec::new();
        assert_eq!(part.take_split(|t| got.push(t)), 3, "round {round}");
        assert_eq!(
            got,
            [
                Taken::Successes { first: 0, bits: 1 << 3 },
                Taken::Successes { first: 64, bits: 1 },
                Taken::Other {
                    slot: 69,
                    status: Status::IoError
                },
            ]
        );
        assert_eq!(part.take_split(|_| panic!("taken twice")), 0);
        // What the part did not look at is still there.
        assert_eq!(b.take_below(1, 200, |s, _| assert_eq!(s, 130)), 1);
        assert_eq!(b.take_below(0, 64, |s, _| assert_eq!(s, 5)), 1);
    }
}

#[test]
fn windows_on_one_cpu_take_their_own_slots_numbered_from_their_start() {
    let b = board(2, 256);
    assert!(b.cpu_window(1, 32, 8).is_none(), "a window starts a word");
    assert!(b.cpu_window(1, 192, 65).is_none(), "a window ends within the board");
    assert!(b.cpu_window(2, 0, 8).is_none(), "a window is on a CPU of the board");
    let first = b.cpu_window(1, 0, 32).unwrap();
    let second = b.cpu_window(1, 64, 100).unwrap();
    b.deliver(1, 200, Status::Ok).unwrap();
    assert!(
        !first.has_pending() && !second.has_pending(),
        "slot 200 is in neither window"
    );
    assert!(b.has_pending(1));
    assert_eq!(b.take_stray(1, 164), 1);
    b.deliver(1, 3, Status::Ok).unwrap();
    b.deliver(1, 64, Status::Ok).unwrap();
    b.deliver(1, 64 + 70, Status::Ok).unwrap();
    b.deliver(1, 64 + 71, Status::IoError).unwrap();
    b.deliver(0, 64, Status::Ok).unwrap();
    assert!(first.has_pending() && second.has_pending());
    let mut got = Vec::new();
    assert_eq!(second.take_split(|t| got.push(t)), 3);
    assert_eq!(
        got,
        [
            Taken::Successes { first: 0, bits: 1 },
            Taken::Successes {
                first: 64,
                bits: 1 << 6
            },
            Taken::Other {
                slot: 71,
                status: Status::IoError
            },
        ]
    );
    got.clear();
    assert_eq!(first.take_split(|t| got.push(t)), 1);
    assert_eq!(got, [Taken::Successes { first: 0, bits: 1 << 3 }]);
    // The other CPU's slot 64 is its own.
    assert_eq!(b.take(0, |s, _| assert_eq!(s, 64)), 1);
}

#[test]
fn take_below_looks_at_its_slots_only_and_take_stray_clears_the_rest_as_bogus() {
    let b = board(1, 256);
    for slot in [0, 31, 32, 63, 64, 200] {
        b.deliver(0, slot, Status::Ok).unwrap();
    }
    let mut got = Vec::new();
    // Slots 0..32 live in word 0, which is taken whole: 32 and 63 come out too (the
    // engine refuses them as out of range); word 1 (64) and word 3 (200) are not looked at.
    assert_eq!(b.take_below(0, 32, |s, _| got.push(s)), 4);
    assert_eq!(got, [0, 31, 32, 63]);
    got.clear();
    assert_eq!(b.take_below(0, 64, |s, _| got.push(s)), 0);
    assert_eq!(b.bogus(), 0);
    // Slots 64 and 200 are above a 64-slot job: cleared and counted; slots below stay.
    b.deliver(0, 5, Status::IoError).unwrap();
    assert_eq!(b.take_stray(0, 64), 2);
    assert_eq!(b.bogus(), 2);
    let mut left = Vec::new();
    assert_eq!(b.take(0, |s, st| left.push((s, st))), 1);
    assert_eq!(left, [(5, Status::IoError)]);
    assert_eq!(b.take_stray(0, 0), 0);
    assert_eq!(b.take_stray(7, 0), 0, "an out-of-range CPU has nothing");
}

#[test]
fn take_split_hands_a_words_successes_over_as_bits_and_names_the_rest() {
    let b = board(2, 130);
    for (slot, status) in [
        (0, Status::Ok),
        (3, Status::IoError),
        (5, Status::Ok),
        (64, Status::Timeout),
        (70, Status::Ok),
        (129, Status::Aborted),
    ] {
        b.deliver(1, slot, status).unwrap();
    }
    let mut got = Vec::new();
    assert_eq!(b.take_split(1, 130, |t| got.push(t)), 6);
    assert_eq!(
        got,
        [
            Taken::Successes {
                first: 0,
                bits: 0b100001
            },
            Taken::Other {
                slot: 3,
                status: Status::IoError
            },
            Taken::Successes {
                first: 64,
                bits: 1 << 6
            },
            Taken::Other {
                slot: 64,
                status: Status::Timeout
            },
            Taken::Other {
                slot: 129,
                status: Status::Aborted
            },
        ]
    );
    // A slot that failed once and then succeeds is a success: its "not ok" bit was cleared
    // when it was taken; so is a stray one's.
    b.deliver(1, 3, Status::Ok).unwrap();
    b.deliver(1, 100, Status::IoError).unwrap();
    assert_eq!(b.take_stray(1, 64), 1);
    b.deliver(1, 100, Status::Ok).unwrap();
    got.clear();
    assert_eq!(b.take_split(1, 130, |t| got.push(t)), 2);
    assert_eq!(
        got,
        [
            Taken::Successes { first: 0, bits: 1 << 3 },
            Taken::Successes {
                first: 64,
                bits: 1 << 36
            },
        ]
    );
    assert_eq!(b.take_split(7, 130, |_| panic!("no such CPU")), 0);
}

#[test]
fn refuses_out_of_range_and_double_delivery() {
    let b = board(2, 8);
    assert_eq!(
        b.deliver(2, 0, Status::Ok).unwrap_err(),
        DoneError::SlotOutOfRange {
            cpu: 2,
            slot: 0,
            ncpus: 2,
            slots_per_cpu: 8
        }
    );
    assert!(matches!(
        b.deliver(0, 8, Status::Ok),
        Err(DoneError::SlotOutOfRange { slot: 8, .. })
    ));
    b.deliver(0, 3, Status::Ok).unwrap();
    assert_eq!(
        b.deliver(0, 3, Status::Ok).unwrap_err(),
        DoneError::SlotBusy { cpu: 0, slot: 3 }
    );
    assert_eq!(b.bogus(), 3);
    assert_eq!(b.take(0, |_, _| {}), 1);
    assert_eq!(b.take(7, |_, _| {}), 0);
    // Taken: the slot may complete again.
    b.deliver(0, 3, Status::Aborted).unwrap();
    let mut st = None;
    b.take(0, |_, s| st = Some(s));
    assert_eq!(st, Some(Status::Aborted));
}

#[test]
fn a_cookie_is_delivered_as_its_slot_and_refused_past_the_slots() {
    let b = board(2, 8);
    b.deliver_cookie(1, 5, Status::IoError).unwrap();
    assert!(matches!(
        b.deliver_cookie(1, 8, Status::Ok),
        Err(DoneError::SlotOutOfRange { cpu: 1, slot: 8, .. })
    ));
    assert_eq!(b.bogus(), 1);
    let mut got = Vec::new();
    b.take(1, |slot, status| got.push((slot, status)));
    assert_eq!(got, [(5, Status::IoError)]);
}

#[test]
fn rejects_bad_geometry() {
    let new = DoneBoard::<Status>::new;
    assert!(matches!(new(0, 8), Err(DoneError::Geometry { field: "ncpus", .. })));
    assert!(matches!(
        new(1, 0),
        Err(DoneError::Geometry {
            field: "slots_per_cpu",
            ..
        })
    ));
    assert!(new(1, MAX_SLOTS + 1).is_err());
    assert!(new(MAX_CPUS + 1, 1).is_err());
    assert!(new(1, MAX_SLOTS).is_ok());
}

static WOKEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn record_wake(cpu: usize) {
    WOKEN.lock().unwrap().push(cpu);
}

/// A delivery from the submitter's own CPU wakes nobody; one from another CPU wakes the
/// submitter, refused or not (it may be halted waiting for its slots either way).
#[test]
fn deliver_from_another_cpu_wakes_the_submitter() {
    let b = board(2, 8).with_waker(record_wake);
    b.deliver_from(1, 1, 3, Status::Ok).unwrap();
    assert!(WOKEN.lock().unwrap().is_empty());
    b.deliver_from(0, 1, 4, Status::IoError).unwrap();
    assert_eq!(*WOKEN.lock().unwrap(), [1]);
    assert_eq!(
        b.deliver_from(0, 1, 4, Status::Ok),
        Err(DoneError::SlotBusy { cpu: 1, slot: 4 })
    );
    assert_eq!(*WOKEN.lock().unwrap(), [1, 1]);
    let mut got = Vec::new();
    b.take(1, |slot, status| got.push((slot, status)));
    assert_eq!(got, [(3, Status::Ok), (4, Status::IoError)]);
    // Without a waker nothing is called.
    let quiet = board(2, 8);
    quiet.deliver_from(0, 1, 0, Status::Ok).unwrap();
    assert_eq!(WOKEN.lock().unwrap().len(), 2);
}

#[test]
fn refusals_name_what_was_refused() {
    let b = board(2, 8);
    let e = b.deliver_cookie(1, u64::MAX, Status::Ok).unwrap_err();
    assert!(std::format!("{e}").contains("no slot"), "{e}");
    let e = b.deliver(1, 9, Status::Ok).unwrap_err();
    assert!(std::format!("{e}").contains("slot 9"), "{e}");
}
