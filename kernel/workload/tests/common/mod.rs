//! Test support: an in-memory disk, a fake backend with a simulated clock, configurable completion
//! order and delay, and injected errors and corruptions; plus a small JSON parser for report checks.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use workload::fio::parse_job_file;
use workload::rng::Rng;
use workload::{
    Completion, DeviceInfo, IoBackend, IoError, IoOp, JobPlan, Reaped, SubmitError, plan_job, split_successes,
};

/// The sector size of the test disk most engine tests run on.
pub const SECTOR: u32 = 512;
/// The test disk's capacity: 8 MiB.
pub const DISK_SECTORS: u64 = 16 * 1024;

/// The 8 MiB test disk as the planner sees it, named `name`.
pub fn test_device(name: &str) -> DeviceInfo {
    DeviceInfo {
        name: name.into(),
        sector_size: SECTOR,
        capacity_sectors: DISK_SECTORS,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }
}

/// The test disk as `md0`.
pub fn md0() -> DeviceInfo {
    test_device("md0")
}

/// Plans the first job of a fio job file on [`md0`] for the `online` CPUs.
pub fn fio_plan_of(text: &str, online: &[u32]) -> JobPlan {
    let run = parse_job_file(text, &[]).unwrap();
    let spec = run.jobs[0].to_spec(&[md0()], online).unwrap();
    plan_job(&spec, &[md0()], online).unwrap()
}

/// A disk image shared by the backends of several CPUs.
#[derive(Clone)]
pub struct FakeDisk {
    pub sector_size: u32,
    pub bytes: Arc<Mutex<Vec<u8>>>,
}

impl FakeDisk {
    pub fn new(sector_size: u32, sectors: u64) -> Self {
        Self {
            sector_size,
            bytes: Arc::new(Mutex::new(vec![0u8; (sectors * u64::from(sector_size)) as usize])),
        }
    }

    pub fn read_block(&self, lba: u64, len: usize) -> Vec<u8> {
        let at = (lba * u64::from(self.sector_size)) as usize;
        self.bytes.lock().unwrap()[at..at + len].to_vec()
    }

    pub fn corrupt_byte(&self, lba: u64, byte_offset: usize) {
        let at = (lba * u64::from(self.sector_size)) as usize + byte_offset;
        self.bytes.lock().unwrap()[at] ^= 0x5a;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Completions in submission order.
    Fifo,
    /// Newest first.
    Lifo,
    /// Any order (seeded).
    Shuffled,
}

/// A fault to inject on I/Os to one LBA.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Complete every matching I/O with this error (data not moved).
    FailOnCompletion { lba: u64, op: IoOp, error: IoError },
    /// Complete every I/O of `op` to an LBA in `from..to` with this error (data not moved).
    FailRange {
        from: u64,
        to: u64,
        op: IoOp,
        error: IoError,
    },
    /// Refuse every submission of `op` to an LBA in `from..to` with this error.
    RejectRange {
        from: u64,
        to: u64,
        op: IoOp,
        error: IoError,
    },
    /// Refuse every matching submission with this error.
    FailOnSubmit { lba: u64, op: IoOp, error: IoError },
    /// After the first write to `lba` lands, flip a byte on the disk.
    CorruptAfterWrite { lba: u64, byte_offset: usize },
    /// Drop the data of the second and later writes to `lba` (the write "succeeds").
    LoseLaterWrites { lba: u64 },
    /// Reads of `lba` return the block at `from_lba` instead.
    MisdirectRead { lba: u64, from_lba: u64 },
    /// The first I/O to `lba` takes `hold_ns` to complete (a slow or held request); the others
    /// complete at the normal latency.
    Hold { lba: u64, hold_ns: u64 },
    /// Every I/O to `lba` completes with `result` after the driver re-issued it `retries` times.
    Retried {
        lba: u64,
        retries: u32,
        result: Result<(), IoError>,
    },
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    slot: usize,
    op: IoOp,
    lba: u64,
    sectors: u32,
    due_ns: u64,
    result: Result<(), IoError>,
    retries: u32,
    /// The clock when it was submitted.
    submitted_ns: u64,
}

/// A backend for one CPU.
pub struct FakeBackend {
    pub disk: FakeDisk,
    buffers: Vec<Vec<u8>>,
    clock_ns: std::cell::Cell<u64>,
    /// Time from submit until a request may complete.
    pub latency_ns: u64,
    /// Extra random delay up to this much.
    pub jitter_ns: u64,
    /// A device that serves one request at a time, each taking this long after the one before
    /// (0: every request its own `latency_ns`): a request's latency grows with the queue depth.
    pub service_ns: u64,
    /// With `service_ns`: when the last accepted request finishes.
    busy_until_ns: u64,
    /// Time each `now_ns` call advances the clock (so time moves even when nothing happens).
    pub tick_ns: u64,
    pub order: Order,
    /// At most this many completions per poll.
    pub max_batch: usize,
    /// `poll_reaped` reports first-attempt successes of slots below 64 as mask bits, as the
    /// kernel's backend does (otherwise everything is listed, the trait's default).
    pub mask_successes: bool,
    /// Successes `poll_reaped` reported as mask bits.
    pub masked: u64,
    /// With `mask_successes`: `poll_reaped` hands out at most this many successes and holds
    /// the rest back for the next poll, on every poll: a stricter form of the kernel's refill
    /// point, which splits only the first reap of a run of completions (0: all of them).
    pub refill_after: usize,
    /// Successes held back for the next `poll_reaped` (`refill_after`).
    held_back: u64,
    /// Submissions made while successes were held back: the engine refilled before it had
    /// seen the whole reap.
    pub submits_while_held: u64,
    /// Every Nth submission is refused with Busy (0 = never).
    pub busy_every: u64,
    pub faults: Vec<Fault>,
    /// Never complete anything (to test the stall timeout).
    pub hang: bool,
    /// Report a completion for a slot that is not in flight, once, on the Nth poll.
    pub bogus_slot_on_poll: Option<(u64, usize)>,
    in_flight: Vec<InFlight>,
    rng: Rng,
    writes_seen: BTreeMap<u64, u64>,
    pub submits: u64,
    pub busy_returned: u64,
    pub completions: u64,
    pub polls: u64,
    pub max_in_flight: usize,
    /// Clock values at which `periodic` was called.
    pub periodic_calls: Vec<u64>,
    /// Panic if two accepted requests to the same LBA are in flight at once (for verify jobs).
    pub forbid_same_lba_in_flight: bool,
    /// Every accepted submission, in order: (op, lba).
    pub submit_log: Vec<(IoOp, u64)>,
    /// The sectors of each `submit_log` entry, in the same order.
    pub submit_sectors: Vec<u32>,
    /// Every completion, in order: (clock at completion, lba).
    pub completion_log: Vec<(u64, u64)>,
    /// Every successful completion, in order: (op, clock at completion - clock at submission).
    pub latency_log: Vec<(IoOp, u64)>,
    /// The held request of a `Fault::Hold`, once submitted: (submitted at, due at).
    pub held: Option<(u64, u64)>,
    /// Lines the engine logged through `IoBackend::log_line`.
    pub log_lines: Vec<String>,
}

impl FakeBackend {
    pub fn new(disk: &FakeDisk, slots: usize, slot_len: usize) -> Self {
        Self {
            disk: disk.clone(),
            buffers: (0..slots).map(|_| vec![0u8; slot_len]).collect(),
            clock_ns: std::cell::Cell::new(1_000_000),
            latency_ns: 20_000,
            jitter_ns: 0,
            service_ns: 0,
            busy_until_ns: 0,
            tick_ns: 100,
            order: Order::Fifo,
            max_batch: usize::MAX,
            mask_successes: false,
            masked: 0,
            refill_after: 0,
            held_back: 0,
            submits_while_held: 0,
            busy_every: 0,
            faults: Vec::new(),
            hang: false,
            bogus_slot_on_poll: None,
            in_flight: Vec::with_capacity(slots),
            rng: Rng::new(0xfa4e),
            writes_seen: BTreeMap::new(),
            submits: 0,
            busy_returned: 0,
            completions: 0,
            polls: 0,
            max_in_flight: 0,
            periodic_calls: Vec::new(),
            forbid_same_lba_in_flight: false,
            submit_log: Vec::new(),
            submit_sectors: Vec::new(),
            completion_log: Vec::new(),
            latency_log: Vec::new(),
            held: None,
            log_lines: Vec::new(),
        }
    }

    pub fn with_order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    fn byte_range(&self, lba: u64, sectors: u32) -> std::ops::Range<usize> {
        let start = (lba * u64::from(self.disk.sector_size)) as usize;
        start..start + (sectors * self.disk.sector_size) as usize
    }

    fn move_data(&mut self, io: &InFlight) {
        let range = self.byte_range(io.lba, io.sectors);
        let len = range.len();
        match io.op {
            IoOp::Write => {
                let count = self.writes_seen.entry(io.lba).or_insert(0);
                *count += 1;
                let nth_write = *count;
                let lost = self
                    .faults
                    .iter()
                    .any(|f| matches!(f, Fault::LoseLaterWrites { lba } if *lba == io.lba) && nth_write > 1);
                if !lost {
                    let mut disk = self.disk.bytes.lock().unwrap();
                    disk[range.clone()].copy_from_slice(&self.buffers[io.slot][..len]);
                }
                for fault in &self.faults {
                    if let Fault::CorruptAfterWrite { lba, byte_offset } = fault
                        && *lba == io.lba
                        && nth_write == 1
                    {
                        self.disk.bytes.lock().unwrap()[range.start + byte_offset] ^= 0x5a;
                    }
                }
            }
            IoOp::Read => {
                let source = self
                    .faults
                    .iter()
                    .find_map(|f| match f {
                        Fault::MisdirectRead { lba, from_lba } if *lba == io.lba => Some(*from_lba),
                        _ => None,
                    })
                    .map_or(range, |from| self.byte_range(from, io.sectors));
                let disk = self.disk.bytes.lock().unwrap();
                self.buffers[io.slot][..len].copy_from_slice(&disk[source]);
            }
            // The fake disk has no volatile cache.
            IoOp::Flush => {}
            // A trimmed block reads back as zeros (as NVMe's deallocate with DLFEAT says).
            IoOp::Trim => self.disk.bytes.lock().unwrap()[range].fill(0),
        }
    }

    fn advance(&self, ns: u64) {
        self.clock_ns.set(self.clock_ns.get() + ns);
    }
}

impl IoBackend for FakeBackend {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError> {
        assert!(
            self.in_flight.iter().all(|io| io.slot != slot),
            "slot {slot} submitted twice"
        );
        assert!(
            slot >= 64 || self.held_back & 1 << slot == 0,
            "slot {slot} submitted while its completion is held back"
        );
        if self.held_back != 0 {
            self.submits_while_held += 1;
        }
        let end = self.byte_range(lba, sectors).end;
        assert!(
            end <= self.disk.bytes.lock().unwrap().len(),
            "I/O past the end of the disk: lba {lba}"
        );
        self.submits += 1;
        if self.busy_every != 0 && self.submits.is_multiple_of(self.busy_every) {
            self.busy_returned += 1;
            return Err(SubmitError::Busy);
        }
        for fault in &self.faults {
            if let Fault::FailOnSubmit { lba: l, op: o, error } = fault
                && *l == lba
                && *o == op
            {
                return Err(SubmitError::Failed(*error));
            }
            if let Fault::RejectRange { from, to, op: o, error } = fault
                && (*from..*to).contains(&lba)
                && *o == op
            {
                return Err(SubmitError::Failed(*error));
            }
        }
        if self.forbid_same_lba_in_flight {
            assert!(
                self.in_flight.iter().all(|io| io.lba != lba),
                "LBA {lba} submitted while an I/O to it is in flight"
            );
        }
        let mut result = self
            .faults
            .iter()
            .find_map(|f| match f {
                Fault::FailOnCompletion { lba: l, op: o, error } if *l == lba && *o == op => Some(Err(*error)),
                Fault::FailRange { from, to, op: o, error } if (*from..*to).contains(&lba) && *o == op => {
                    Some(Err(*error))
                }
                _ => None,
            })
            .unwrap_or(Ok(()));
        let mut retries = 0;
        for fault in &self.faults {
            if let Fault::Retried {
                lba: l,
                retries: r,
                result: outcome,
            } = fault
                && *l == lba
            {
                retries = *r;
                result = *outcome;
            }
        }
        let jitter = if self.jitter_ns == 0 {
            0
        } else {
            self.rng.below(self.jitter_ns)
        };
        let now = self.clock_ns.get();
        let mut due_ns = now + self.latency_ns + jitter;
        if self.service_ns > 0 {
            due_ns = self.busy_until_ns.max(now) + self.service_ns;
            self.busy_until_ns = due_ns;
        }
        let hold = self.faults.iter().find_map(|f| match f {
            Fault::Hold { lba: l, hold_ns } if *l == lba => Some(*hold_ns),
            _ => None,
        });
        if let Some(hold_ns) = hold
            && self.held.is_none()
        {
            due_ns = now + hold_ns;
            self.held = Some((now, due_ns));
        }
        self.submit_log.push((op, lba));
        self.submit_sectors.push(sectors);
        self.in_flight.push(InFlight {
            slot,
            op,
            lba,
            sectors,
            due_ns,
            result,
            retries,
            submitted_ns: now,
        });
        self.max_in_flight = self.max_in_flight.max(self.in_flight.len());
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        self.polls += 1;
        if let Some((on_poll, slot)) = self.bogus_slot_on_poll
            && self.polls == on_poll
            && !out.is_empty()
        {
            out[0] = Completion::new(slot, Ok(()));
            return 1;
        }
        if self.hang {
            return 0;
        }
        let now = self.clock_ns.get();
        let mut written = 0;
        while written < out.len().min(self.max_batch) {
            let is_ready = |io: &InFlight| io.due_ns <= now;
            let ready = self.in_flight.iter().filter(|io| is_ready(io)).count();
            if ready == 0 {
                break;
            }
            let nth_ready = match self.order {
                Order::Fifo => 0,
                Order::Lifo => ready - 1,
                Order::Shuffled => self.rng.below(ready as u64) as usize,
            };
            let pick = (0..self.in_flight.len())
                .filter(|&i| is_ready(&self.in_flight[i]))
                .nth(nth_ready)
                .unwrap();
            let io = self.in_flight.remove(pick);
            if io.result.is_ok() {
                self.move_data(&io);
            }
            out[written] = Completion::new(io.slot, io.result).with_retries(io.retries);
            self.completion_log.push((now, io.lba));
            if io.result.is_ok() {
                self.latency_log.push((io.op, now - io.submitted_ns));
            }
            written += 1;
            self.completions += 1;
        }
        written
    }

    fn poll_reaped(&mut self, out: &mut [Completion]) -> Reaped {
        let written = self.poll_completions(out);
        if !self.mask_successes {
            return Reaped {
                succeeded: 0,
                listed: written,
            };
        }
        // The successes (in any order) leave the list for the mask; the rest keep their order.
        let mut reaped = Reaped::default();
        for index in 0..written {
            let completion = out[index];
            if completion.result.is_ok() && completion.retries == 0 && completion.slot < 64 {
                assert_eq!(reaped.succeeded & 1 << completion.slot, 0, "one bit per slot");
                reaped.succeeded |= 1 << completion.slot;
                self.masked += 1;
            } else {
                out[reaped.listed] = completion;
                reaped.listed += 1;
            }
        }
        if self.refill_after != 0 {
            let (now, rest) = split_successes(reaped.succeeded | self.held_back, self.refill_after);
            self.held_back = rest;
            reaped.succeeded = now;
        }
        reaped
    }

    fn now_ns(&self) -> u64 {
        self.advance(self.tick_ns);
        self.clock_ns.get()
    }

    fn periodic(&mut self, now_ns: u64) {
        self.periodic_calls.push(now_ns);
    }

    fn log_line(&mut self, line: std::fmt::Arguments<'_>) {
        self.log_lines.push(line.to_string());
    }

    fn idle(&mut self, in_flight: usize) {
        // The engine's count is what it submitted and has not been told about: what this
        // fake holds (a poll just found none of it ready).
        assert_eq!(in_flight, self.in_flight.len(), "the engine's in-flight count is off");
        // Jump to the next due completion, as a CPU waiting for an interrupt would.
        let next = self.in_flight.iter().map(|io| io.due_ns).min();
        match next {
            Some(due) if due > self.clock_ns.get() => self.clock_ns.set(due),
            _ => self.advance(1_000),
        }
    }
}

// ---- A minimal JSON parser, enough to check the report line. ----

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(u64),
    /// A number with a sign or a fraction (fio's doubles).
    Float(f64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn get(&self, key: &str) -> &Json {
        match self {
            Json::Object(fields) => {
                &fields
                    .iter()
                    .find(|(k, _)| k == key)
                    .unwrap_or_else(|| panic!("missing key {key}"))
                    .1
            }
            other => panic!("not an object when looking up {key}: {other:?}"),
        }
    }

    pub fn has(&self, key: &str) -> bool {
        matches!(self, Json::Object(fields) if fields.iter().any(|(k, _)| k == key))
    }

    pub fn u64(&self) -> u64 {
        match self {
            Json::Number(n) => *n,
            other => panic!("not a number: {other:?}"),
        }
    }

    pub fn str(&self) -> &str {
        match self {
            Json::String(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    pub fn array(&self) -> &[Json] {
        match self {
            Json::Array(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }
}

pub fn parse_json(text: &str) -> Json {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        at: 0,
    };
    let value = parser.value();
    parser.skip_ws();
    assert_eq!(parser.at, text.len(), "trailing characters after JSON value");
    value
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.at < self.bytes.len() && self.bytes[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) {
        self.skip_ws();
        assert_eq!(
            self.bytes.get(self.at),
            Some(&byte),
            "expected {:?} at {}",
            byte as char,
            self.at
        );
        self.at += 1;
    }

    fn peek(&mut self) -> u8 {
        self.skip_ws();
        self.bytes[self.at]
    }

    fn value(&mut self) -> Json {
        match self.peek() {
            b'{' => {
                self.eat(b'{');
                let mut fields = Vec::new();
                if self.peek() == b'}' {
                    self.eat(b'}');
                    return Json::Object(fields);
                }
                loop {
                    let key = self.string();
                    self.eat(b':');
                    let value = self.value();
                    assert!(fields.iter().all(|(k, _)| k != &key), "duplicate key {key}");
                    fields.push((key, value));
                    if self.peek() == b',' {
                        self.eat(b',');
                    } else {
                        self.eat(b'}');
                        return Json::Object(fields);
                    }
                }
            }
            b'[' => {
                self.eat(b'[');
                let mut items = Vec::new();
                if self.peek() == b']' {
                    self.eat(b']');
                    return Json::Array(items);
                }
                loop {
                    items.push(self.value());
                    if self.peek() == b',' {
                        self.eat(b',');
                    } else {
                        self.eat(b']');
                        return Json::Array(items);
                    }
                }
            }
            b'"' => Json::String(self.string()),
            b't' => self.word("true", Json::Bool(true)),
            b'f' => self.word("false", Json::Bool(false)),
            b'n' => self.word("null", Json::Null),
            b'0'..=b'9' | b'-' => {
                let start = self.at;
                self.at += 1;
                while self.at < self.bytes.len()
                    && (self.bytes[self.at].is_ascii_digit() || self.bytes[self.at] == b'.')
                {
                    self.at += 1;
                }
                let text = std::str::from_utf8(&self.bytes[start..self.at]).unwrap();
                match text.parse() {
                    Ok(integer) => Json::Number(integer),
                    Err(_) => Json::Float(text.parse().expect("a decimal number")),
                }
            }
            other => panic!("unexpected {:?} at {}", other as char, self.at),
        }
    }

    fn word(&mut self, word: &str, value: Json) -> Json {
        assert!(self.bytes[self.at..].starts_with(word.as_bytes()));
        self.at += word.len();
        value
    }

    fn string(&mut self) -> String {
        self.eat(b'"');
        let mut out = Vec::new();
        loop {
            let byte = self.bytes[self.at];
            self.at += 1;
            match byte {
                b'"' => return String::from_utf8(out).unwrap(),
                b'\\' => {
                    let escape = self.bytes[self.at];
                    self.at += 1;
                    match escape {
                        b'"' | b'\\' | b'/' => out.push(escape),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let hex = std::str::from_utf8(&self.bytes[self.at..self.at + 4]).unwrap();
                            self.at += 4;
                            let ch = char::from_u32(u32::from_str_radix(hex, 16).unwrap()).unwrap();
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        other => panic!("bad escape \\{}", other as char),
                    }
                }
                control if control < 0x20 => panic!("raw control character in string"),
                _ => out.push(byte),
            }
        }
    }
}

/// fio's log lines (`write_log_lines`) for one job's report.
pub fn log_lines_of(options: &workload::report::FioOutputOptions, report: &workload::JobReport) -> String {
    let meta = workload::report::FioJobMeta::default();
    let mut lines = String::new();
    workload::report::write_log_lines(&mut lines, options, &[workload::report::FioJob { report, meta: &meta }])
        .unwrap();
    lines
}
