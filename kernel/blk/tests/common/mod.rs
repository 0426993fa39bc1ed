//! Host platform for tests: CPUs are threads, IPIs and softirqs are per-CPU flags, time is a
//! real clock plus a manually advanced offset.
#![allow(dead_code)]

use blk::{Completion, Platform, Stage, Status};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

pub struct HostPlatform {
    start: Instant,
    /// Added to the real clock; tests advance it to expire deadlines.
    pub offset_ns: AtomicU64,
    /// Use only the offset (a fully manual clock).
    pub manual_clock: bool,
    /// Per CPU: a completion IPI or softirq is pending.
    pub kick: Vec<AtomicBool>,
    pub ipis_to: Vec<AtomicUsize>,
    pub softirqs_on: Vec<AtomicUsize>,
    /// Per cookie: how many times it ended (cookies must be below `ends.len()`).
    pub ends: Vec<AtomicU32>,
    pub errors: AtomicUsize,
    pub total_ends: AtomicUsize,
    /// Full completion log, when enabled.
    pub log: Option<Mutex<Vec<Completion>>>,
    /// Per CPU: a sleeping-lock wake-up is pending.
    pub wake_pending: Vec<AtomicBool>,
    pub parks: AtomicUsize,
    /// Stage-trace calls: (cpu, request, stage).
    pub stages: Mutex<Vec<(usize, u32, Stage)>>,
}

impl HostPlatform {
    pub fn new(ncpus: usize, max_cookies: usize, keep_log: bool) -> Self {
        Self {
            start: Instant::now(),
            offset_ns: AtomicU64::new(0),
            manual_clock: false,
            kick: (0..ncpus).map(|_| AtomicBool::new(false)).collect(),
            ipis_to: (0..ncpus).map(|_| AtomicUsize::new(0)).collect(),
            softirqs_on: (0..ncpus).map(|_| AtomicUsize::new(0)).collect(),
            ends: (0..max_cookies).map(|_| AtomicU32::new(0)).collect(),
            errors: AtomicUsize::new(0),
            total_ends: AtomicUsize::new(0),
            log: keep_log.then(|| Mutex::new(Vec::new())),
            wake_pending: (0..ncpus).map(|_| AtomicBool::new(false)).collect(),
            parks: AtomicUsize::new(0),
            stages: Mutex::new(Vec::new()),
        }
    }

    pub fn manual(ncpus: usize, max_cookies: usize) -> Self {
        Self {
            manual_clock: true,
            ..Self::new(ncpus, max_cookies, true)
        }
    }

    pub fn advance(&self, ns: u64) {
        self.offset_ns.fetch_add(ns, Ordering::SeqCst);
    }

    pub fn take_kick(&self, cpu: usize) -> bool {
        self.kick[cpu].swap(false, Ordering::AcqRel)
    }

    pub fn log(&self) -> Vec<Completion> {
        self.log.as_ref().expect("log enabled").lock().unwrap().clone()
    }

    pub fn ended(&self) -> usize {
        self.total_ends.load(Ordering::SeqCst)
    }
}

impl Platform for HostPlatform {
    fn now_ns(&self) -> u64 {
        let off = self.offset_ns.load(Ordering::SeqCst);
        if self.manual_clock {
            off
        } else {
            self.start.elapsed().as_nanos() as u64 + off
        }
    }

    fn send_completion_ipi(&self, cpu: usize) {
        self.ipis_to[cpu].fetch_add(1, Ordering::Relaxed);
        self.kick[cpu].store(true, Ordering::Release);
    }

    fn raise_completion_softirq(&self, cpu: usize) {
        self.softirqs_on[cpu].fetch_add(1, Ordering::Relaxed);
        self.kick[cpu].store(true, Ordering::Release);
    }

    /// Parks the thread playing `cpu` until `wake(cpu)` (the pending flag keeps an early
    /// wake-up). A lost wake-up shows up as a hang, which the stress tests' watchdogs report.
    fn wait_for_wake(&self, cpu: usize) {
        self.parks.fetch_add(1, Ordering::Relaxed);
        while !self.wake_pending[cpu].swap(false, Ordering::AcqRel) {
            std::thread::yield_now();
        }
    }

    fn wake(&self, cpu: usize) {
        self.wake_pending[cpu].store(true, Ordering::Release);
    }

    fn stage(&self, cpu: usize, request: u32, stage: Stage) {
        self.stages.lock().unwrap().push((cpu, request, stage));
    }

    fn end_io(&self, c: &Completion) {
        if let Some(slot) = self.ends.get(c.cookie as usize) {
            slot.fetch_add(1, Ordering::AcqRel);
        }
        if c.status != Status::Ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(log) = &self.log {
            log.lock().unwrap().push(*c);
        }
        self.total_ends.fetch_add(1, Ordering::AcqRel);
    }
}
