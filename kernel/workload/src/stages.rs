//! Where the time goes, per stage: the summary and the trace line of sampled request timelines.
//!
//! The kernel records, for 1 in N requests (job key `trace=N`), a timestamp each time the request
//! reaches a stage (the block layer's `blk::Stage`, numbered as [`STAGE_NAMES`]), on the CPU where
//! it happened. This module turns those events into a per-stage latency breakdown (the time from
//! the request's previous event to reaching each stage: p50 and p99 over the sampled requests) for
//! the job report and JSON, and writes them as one `BAREMQ-TRACE:` line that `cargo xtask lab
//! --trace` turns into a Chrome / Perfetto trace.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use crate::json::JsonWriter;

/// Stage names by number (`blk::Stage as u8`).
pub const STAGE_NAMES: [&str; 8] = [
    "submit",
    "dispatch",
    "doorbell",
    "device_complete",
    "list_push",
    "softirq",
    "end_io",
    "reap",
];

/// Prefix of the trace line.
pub const TRACE_PREFIX: &str = "BAREMQ-TRACE: ";

/// The stage that starts a timeline.
const SUBMIT: u8 = 0;

/// One recorded stage of one sampled request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageEvent {
    /// CPU it happened on.
    pub cpu: u32,
    /// Time (ns since boot, from the TSC).
    pub ns: u64,
    /// The request's trace id (unique within the job).
    pub request: u32,
    /// Stage number (index into [`STAGE_NAMES`]).
    pub stage: u8,
}

/// Latency to reach one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageLatency {
    /// Stage name.
    pub stage: &'static str,
    /// Requests that reached it after an earlier event.
    pub samples: u64,
    /// Median time from the previous event, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
}

/// The per-stage breakdown of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSummary {
    /// One request in this many was traced.
    pub sample_every: u32,
    /// Traced requests with a complete start (their submit was recorded).
    pub requests: u64,
    /// Events used.
    pub events: u64,
    /// Events the per-CPU rings had no room for (the breakdown leaves those requests partial).
    pub dropped: u64,
    /// Events left out: unknown stage, or a request whose submit was not recorded.
    pub discarded: u64,
    /// What recording one event cost, ns, as the kernel measured it before the job (0: not
    /// measured). The overhead on a sampled request is about this times its events; an
    /// unsampled request pays one table load per stage.
    pub event_cost_ns: u64,
    /// Per stage, in [`STAGE_NAMES`] order, stages nobody reached left out.
    pub stages: Vec<StageLatency>,
}

/// Nearest-rank percentile of sorted `values` (`pct` in 1..=100); 0 when empty.
fn percentile(sorted: &[u64], pct: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() as u64 * pct).div_ceil(100).max(1) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Builds the breakdown: per request, events in time order; each event after the first adds the
/// time since the previous one to its stage. Requests whose submit was not recorded are left
/// out (they were sampled before the job's trace began).
pub fn summarise(events: &[StageEvent], sample_every: u32, dropped: u64) -> StageSummary {
    let mut sorted: Vec<StageEvent> = events
        .iter()
        .copied()
        .filter(|e| usize::from(e.stage) < STAGE_NAMES.len())
        .collect();
    let mut discarded = (events.len() - sorted.len()) as u64;
    sorted.sort_unstable_by_key(|e| (e.request, e.ns, e.stage));
    let mut deltas: Vec<Vec<u64>> = (0..STAGE_NAMES.len()).map(|_| Vec::new()).collect();
    let mut requests = 0;
    let mut used = 0;
    for timeline in sorted.chunk_by(|a, b| a.request == b.request) {
        if !timeline.iter().any(|e| e.stage == SUBMIT) {
            discarded += timeline.len() as u64;
            continue;
        }
        requests += 1;
        used += timeline.len() as u64;
        for pair in timeline.windows(2) {
            deltas[usize::from(pair[1].stage)].push(pair[1].ns - pair[0].ns);
        }
    }
    let stages = deltas
        .iter_mut()
        .enumerate()
        .filter(|(_, d)| !d.is_empty())
        .map(|(i, d)| {
            d.sort_unstable();
            StageLatency {
                stage: STAGE_NAMES[i],
                samples: d.len() as u64,
                p50_ns: percentile(d, 50),
                p99_ns: percentile(d, 99),
            }
        })
        .collect();
    StageSummary {
        sample_every,
        requests,
        events: used,
        dropped,
        discarded,
        event_cost_ns: 0,
        stages,
    }
}

impl StageSummary {
    /// The human report's lines.
    pub fn write_human(&self, out: &mut dyn Write) -> fmt::Result {
        writeln!(
            out,
            "  stages: 1 in {} requests traced: {} requests, {} events, {} dropped (ring full), {} discarded; \
             {} ns per recorded event",
            self.sample_every, self.requests, self.events, self.dropped, self.discarded, self.event_cost_ns
        )?;
        writeln!(out, "    time to reach each stage from the previous one (ns):")?;
        for s in &self.stages {
            writeln!(
                out,
                "    {:<16} samples={:<7} p50={:<9} p99={}",
                s.stage, s.samples, s.p50_ns, s.p99_ns
            )?;
        }
        Ok(())
    }

    /// Writes the `stages` object of the JSON line.
    pub(crate) fn write_json(&self, w: &mut JsonWriter<'_, dyn Write + '_>) -> fmt::Result {
        w.begin_object()?;
        w.field_u64("sample_every", u64::from(self.sample_every))?;
        w.field_u64("requests", self.requests)?;
        w.field_u64("events", self.events)?;
        w.field_u64("dropped", self.dropped)?;
        w.field_u64("discarded", self.discarded)?;
        w.field_u64("event_cost_ns", self.event_cost_ns)?;
        w.key("latency")?;
        w.begin_array()?;
        for s in &self.stages {
            w.begin_object()?;
            w.field_str("stage", s.stage)?;
            w.field_u64("samples", s.samples)?;
            w.field_u64("p50_ns", s.p50_ns)?;
            w.field_u64("p99_ns", s.p99_ns)?;
            w.end_object()?;
        }
        w.end_array()?;
        w.end_object()
    }
}

/// Writes one `BAREMQ-TRACE:` line (ending in a newline): the job's name, the sampling, the stage
/// names, and every event as `[cpu, ns, request, stage]`.
pub fn write_trace_line(out: &mut dyn Write, job: &str, sample_every: u32, events: &[StageEvent]) -> fmt::Result {
    out.write_str(TRACE_PREFIX)?;
    let mut w = JsonWriter::new(out);
    w.begin_object()?;
    w.field_str("job", job)?;
    w.field_u64("sample_every", u64::from(sample_every))?;
    w.key("stages")?;
    w.begin_array()?;
    for name in STAGE_NAMES {
        w.string(name)?;
    }
    w.end_array()?;
    w.key("events")?;
    w.begin_array()?;
    for e in events {
        w.begin_array()?;
        w.u64(u64::from(e.cpu))?;
        w.u64(e.ns)?;
        w.u64(u64::from(e.request))?;
        w.u64(u64::from(e.stage))?;
        w.end_array()?;
    }
    w.end_array()?;
    w.end_object()?;
    out.write_char('\n')
}

/// The events of the `max_requests` requests that were submitted first (whole timelines), in
/// their original order: what a trace line exports when the rings hold more than a console line
/// should carry.
pub fn first_requests(events: &[StageEvent], max_requests: usize) -> Vec<StageEvent> {
    let mut starts: Vec<(u64, u32)> = events
        .iter()
        .filter(|e| e.stage == SUBMIT)
        .map(|e| (e.ns, e.request))
        .collect();
    starts.sort_unstable();
    let mut keep: Vec<u32> = starts.iter().take(max_requests).map(|&(_, r)| r).collect();
    keep.sort_unstable();
    events
        .iter()
        .copied()
        .filter(|e| keep.binary_search(&e.request).is_ok())
        .collect()
}

/// The trace line as a `String` (for callers without a writer at hand).
pub fn trace_line(job: &str, sample_every: u32, events: &[StageEvent]) -> String {
    let mut s = String::new();
    let _ = write_trace_line(&mut s, job, sample_every, events);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn ev(cpu: u32, ns: u64, request: u32, stage: u8) -> StageEvent {
        StageEvent {
            cpu,
            ns,
            request,
            stage,
        }
    }

    #[test]
    fn each_stage_gets_the_time_since_the_previous_event_of_its_request() {
        // Two requests, events interleaved and out of order, as per-CPU rings deliver them.
        let events = vec![
            ev(1, 1_300, 2, 3),  // request 2: device complete on cpu1
            ev(0, 1_000, 1, 0),  // request 1: submit
            ev(0, 1_100, 1, 1),  // dispatch (+100)
            ev(0, 1_000, 2, 0),  // request 2: submit
            ev(0, 1_400, 1, 2),  // doorbell (+300)
            ev(0, 1_050, 2, 1),  // dispatch (+50)
            ev(1, 2_400, 1, 3),  // device complete (+1000)
            ev(0, 1_150, 2, 2),  // doorbell (+100), then device complete (+150)
            ev(9, 5_000, 3, 3),  // request 3: no submit recorded: left out
            ev(0, 5_000, 4, 42), // unknown stage: left out
        ];
        let s = summarise(&events, 64, 5);
        assert_eq!(
            (s.sample_every, s.requests, s.events, s.dropped, s.discarded),
            (64, 2, 8, 5, 2)
        );
        let get = |name: &str| s.stages.iter().find(|l| l.stage == name).unwrap().clone();
        assert!(
            s.stages.iter().all(|l| l.stage != "submit"),
            "nothing precedes a submit"
        );
        let d = get("dispatch");
        assert_eq!((d.samples, d.p50_ns, d.p99_ns), (2, 50, 100));
        let db = get("doorbell");
        assert_eq!((db.samples, db.p50_ns, db.p99_ns), (2, 100, 300));
        let dc = get("device_complete");
        assert_eq!((dc.samples, dc.p50_ns, dc.p99_ns), (2, 150, 1000));
        assert_eq!(s.stages.len(), 3, "stages nobody reached are left out");
    }

    #[test]
    fn first_requests_keeps_whole_timelines_of_the_earliest_submissions() {
        let events = vec![
            ev(0, 300, 3, 0),
            ev(0, 100, 1, 0),
            ev(1, 400, 1, 3),
            ev(0, 200, 2, 0),
            ev(1, 500, 3, 3),
            ev(1, 600, 2, 3),
            ev(1, 50, 9, 3), // no submit: never kept
        ];
        let kept = first_requests(&events, 2);
        assert_eq!(
            kept,
            vec![ev(0, 100, 1, 0), ev(1, 400, 1, 3), ev(0, 200, 2, 0), ev(1, 600, 2, 3)]
        );
        assert_eq!(first_requests(&events, 10).len(), 6);
        assert!(first_requests(&events, 0).is_empty());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(
            (percentile(&v, 50), percentile(&v, 99), percentile(&v, 100)),
            (50, 99, 100)
        );
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn report_and_trace_lines_carry_every_figure() {
        let events = vec![ev(0, 10, 1, 0), ev(1, 25, 1, 3)];
        let s = summarise(&events, 8, 0);
        let mut human = String::new();
        s.write_human(&mut human).unwrap();
        assert!(
            human.contains("1 in 8 requests traced: 1 requests, 2 events"),
            "{human}"
        );
        assert!(human.contains("device_complete  samples=1       p50=15"), "{human}");
        let line = trace_line("j1", 8, &events);
        assert_eq!(
            line,
            "BAREMQ-TRACE: {\"job\":\"j1\",\"sample_every\":8,\"stages\":[\"submit\",\"dispatch\",\"doorbell\",\
             \"device_complete\",\"list_push\",\"softirq\",\"end_io\",\"reap\"],\"events\":[[0,10,1,0],[1,25,1,3]]}\n"
        );
    }
}
