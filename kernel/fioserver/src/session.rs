//! One client connection's conversation, without the transport: bytes in, bytes out.
//!
//! fio 3.33's client sends PROBE, then (when it has server-side arguments) JOBLINE, then JOB
//! with the job file, then RUN, all without waiting; while jobs run it asks SEND_ETA every
//! second or so and gives up on a reply it has not had for 5 s. The server answers PROBE,
//! answers JOB with START, answers RUN with SERVER_START, and when the run ends sends
//! JOB_OPT and TS per report, GS per group, DU per disk, STOP with the exit value, and QUIT.

use crate::Error;
use crate::frame::{Decoder, encode_command};
use crate::msg::{
    ARCH_X86_64, ClientProbe, JobFile, JobLine, JobOption, LOG_ERR, OS_LINUX, Opcode, ProbeReply, Start, Stop, Text,
};
use crate::stats::{DiskUtil, Eta, GroupRunStats, ThreadStat};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// The exit value STOP carries for a refused job or request (EINVAL): the client then reports
/// `exited with error 22` and exits with failure.
pub const REFUSED_ERROR: u32 = 22;

/// What a box says about itself in its PROBE reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeFacts {
    pub hostname: String,
    pub cpus: u32,
    /// Shown by the client as `fio=`.
    pub version: String,
}

/// The figures the session needs from an accepted job file, for START.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobPlan {
    /// Jobs (fio threads) the file made.
    pub jobs: u32,
    /// TS reports that will follow the run: one per clone, or one per job under
    /// `group_reporting`. At most `jobs`.
    pub stat_outputs: u32,
}

/// One TS report, with the options shown beside it in the client's JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct JobReport {
    pub stat: ThreadStat,
    pub options: Vec<(String, String)>,
}

/// Everything the box reports when a run ends.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResults {
    /// In the order fio prints them; each `stat.groupid` indexes `groups`.
    pub jobs: Vec<JobReport>,
    /// Index = group id.
    pub groups: Vec<GroupRunStats>,
    pub global_options: Vec<(String, String)>,
    pub disks: Vec<DiskUtil>,
    /// The run's exit value (0 for success), as fio's backend exit status.
    pub error: u32,
}

/// A refusal's reason, shown to the person at the client.
pub type Refusal = String;

/// What the box does for the session.
pub trait FioBox {
    /// Facts for the PROBE reply.
    fn probe(&mut self) -> ProbeFacts;
    /// Server-side command-line arguments (JOBLINE): accept, or refuse with a reason.
    fn command_line(&mut self, args: &[String]) -> Result<(), Refusal>;
    /// A job file's text: parse it and get ready, or refuse with a reason. A client given several
    /// job files sends them one after the other before RUN; each adds its jobs to the ones before
    /// (fio's server runs them together, as one file), and the plan returned covers them all.
    fn job_file(&mut self, text: &str) -> Result<JobPlan, Refusal>;
    /// Start the accepted jobs (RUN), or refuse.
    fn run(&mut self) -> Result<(), Refusal>;
    /// Whether a started run has ended and its results can be had.
    fn finished(&mut self) -> bool;
    /// Progress figures from the running counters.
    fn eta(&mut self) -> Eta;
    /// Stop a started run early; it still ends through `finished` and `results`.
    fn stop(&mut self);
    /// The final results of an ended run.
    fn results(&mut self) -> RunResults;
}

/// Where the conversation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No job accepted yet.
    Idle,
    /// One or more job files accepted (START sent for each), waiting for RUN or another file.
    Ready,
    /// Jobs running; results follow when the box says it has finished.
    Running,
    /// QUIT sent or received, or the connection gone: the caller closes it.
    Done,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Ready => "ready",
            State::Running => "running",
            State::Done => "done",
        }
    }
}

/// Bytes to write to the connection, and whether the session has finished (the caller writes
/// `out`, then closes).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub out: Vec<u8>,
    pub done: bool,
}

/// A server session for one connection.
#[derive(Debug)]
pub struct Session {
    decoder: Decoder,
    state: State,
    plan: Option<JobPlan>,
    hostname: String,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    pub fn new() -> Self {
        Self::with_decoder(Decoder::default())
    }

    /// A session whose decoder has its own size limit.
    pub fn with_decoder(decoder: Decoder) -> Self {
        Self {
            decoder,
            state: State::Idle,
            plan: None,
            hostname: String::new(),
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Feeds bytes received from the client. A protocol error (bad CRC, other version,
    /// oversized command, malformed payload) ends the session: the caller closes the
    /// connection, as fio does, since the stream can no longer be trusted.
    pub fn on_bytes(&mut self, mut bytes: &[u8], fiobox: &mut dyn FioBox) -> Result<Step, Error> {
        if self.state == State::Done {
            return Err(Error::SessionOver);
        }
        let mut out = Vec::new();
        while self.state != State::Done {
            let cmd = match self.decoder.next_command(&mut bytes) {
                Ok(Some(cmd)) => cmd,
                Ok(None) => break,
                Err(e) => {
                    self.end_run(fiobox);
                    return Err(e);
                }
            };
            if let Err(e) = self.handle(cmd.opcode, cmd.tag, &cmd.payload, fiobox, &mut out) {
                self.end_run(fiobox);
                return Err(e);
            }
        }
        if self.state == State::Running {
            self.poll_into(fiobox, &mut out)?;
        }
        Ok(Step {
            out,
            done: self.state == State::Done,
        })
    }

    /// Checks a running job for its end and, when it has ended, returns the reports. Call it
    /// whenever the box may have finished (the session has no clock of its own).
    pub fn poll(&mut self, fiobox: &mut dyn FioBox) -> Result<Step, Error> {
        let mut out = Vec::new();
        self.poll_into(fiobox, &mut out)?;
        Ok(Step {
            out,
            done: self.state == State::Done,
        })
    }

    /// The connection is gone: stop anything running. Nothing can be sent any more.
    pub fn on_closed(&mut self, fiobox: &mut dyn FioBox) {
        self.end_run(fiobox);
    }

    fn end_run(&mut self, fiobox: &mut dyn FioBox) {
        if self.state == State::Running {
            fiobox.stop();
        }
        self.state = State::Done;
    }

    fn poll_into(&mut self, fiobox: &mut dyn FioBox, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.state != State::Running || !fiobox.finished() {
            return Ok(());
        }
        let results = fiobox.results();
        self.send_results(&results, out)?;
        encode_command(
            out,
            Opcode::Stop,
            0,
            &Stop {
                error: results.error,
                signal: 0,
            }
            .encode(),
        );
        encode_command(out, Opcode::Quit, 0, &[]);
        self.state = State::Done;
        Ok(())
    }

    fn send_results(&self, r: &RunResults, out: &mut Vec<u8>) -> Result<(), Error> {
        let stat_outputs = self.plan.map_or(0, |p| p.stat_outputs as usize);
        // The client files JOB_OPT by report index without a bounds check, and counts TS
        // reports against START's figure: the box must send what it announced.
        if r.jobs.len() != stat_outputs {
            return Err(Error::LengthOutOfRange {
                what: "run results: job reports",
                len: r.jobs.len(),
                limit: stat_outputs,
            });
        }
        for (name, value) in &r.global_options {
            let opt = JobOption {
                job: None,
                name: name.clone(),
                value: value.clone(),
                truncated: false,
            };
            encode_command(out, Opcode::JobOpt, 0, &opt.encode());
        }
        for (i, job) in r.jobs.iter().enumerate() {
            let group = r.groups.get(job.stat.groupid as usize).ok_or(Error::LengthOutOfRange {
                what: "run results: job groupid",
                len: job.stat.groupid as usize,
                limit: r.groups.len(),
            })?;
            for (name, value) in &job.options {
                let opt = JobOption {
                    job: Some(i as u32),
                    name: name.clone(),
                    value: value.clone(),
                    truncated: false,
                };
                encode_command(out, Opcode::JobOpt, 0, &opt.encode());
            }
            encode_command(out, Opcode::Ts, 0, &job.stat.encode_ts(group)?);
        }
        for (id, group) in r.groups.iter().enumerate() {
            let mut g = group.clone();
            g.groupid = id as u32;
            encode_command(out, Opcode::Gs, 0, &g.encode());
        }
        for disk in &r.disks {
            encode_command(out, Opcode::Du, 0, &disk.encode());
        }
        Ok(())
    }

    /// Tells the client why, then ends the conversation so the client exits with failure:
    /// TEXT, STOP with an error, QUIT.
    fn refuse(&mut self, reason: &str, fiobox: &mut dyn FioBox, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.state == State::Running {
            fiobox.stop();
        }
        let mut text = String::from(reason);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let t = Text {
            level: LOG_ERR,
            log_sec: 0,
            log_usec: 0,
            text,
        };
        encode_command(out, Opcode::Text, 0, &t.encode()?);
        encode_command(
            out,
            Opcode::Stop,
            0,
            &Stop {
                error: REFUSED_ERROR,
                signal: 0,
            }
            .encode(),
        );
        encode_command(out, Opcode::Quit, 0, &[]);
        self.state = State::Done;
        Ok(())
    }

    fn handle(
        &mut self,
        opcode: u16,
        tag: u64,
        payload: &[u8],
        fiobox: &mut dyn FioBox,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let op = Opcode::from_wire(opcode)?;
        match op {
            Opcode::Probe => {
                // The client's flags are read only to check the payload: this server never
                // compresses.
                ClientProbe::decode(payload)?;
                let facts = fiobox.probe();
                self.hostname = facts.hostname.clone();
                let reply = ProbeReply {
                    hostname: facts.hostname,
                    big_endian: false,
                    fio_version: facts.version,
                    os: OS_LINUX,
                    arch: ARCH_X86_64,
                    bpp: 8,
                    cpus: facts.cpus,
                    flags: 0,
                };
                encode_command(out, Opcode::Probe, tag, &reply.encode());
            }
            Opcode::JobLine => {
                let line = JobLine::decode(payload)?;
                if self.state != State::Idle {
                    return self.refuse("fio server: command line after the job was accepted", fiobox, out);
                }
                if let Err(reason) = fiobox.command_line(&line.args) {
                    return self.refuse(&reason, fiobox, out);
                }
            }
            Opcode::Job => {
                let job = JobFile::decode(payload)?;
                if !matches!(self.state, State::Idle | State::Ready) {
                    return self.refuse("fio server: a job file after RUN", fiobox, out);
                }
                let Ok(text) = core::str::from_utf8(&job.text) else {
                    return self.refuse("fio server: the job file is not UTF-8 text", fiobox, out);
                };
                match fiobox.job_file(text) {
                    Ok(plan) if plan.stat_outputs > plan.jobs || plan.jobs == 0 => {
                        return Err(Error::ValueOutOfRange {
                            what: "job plan (stat_outputs > jobs, or no jobs)",
                        });
                    }
                    Ok(plan) => {
                        self.plan = Some(plan);
                        self.state = State::Ready;
                        let start = Start {
                            jobs: plan.jobs,
                            stat_outputs: plan.stat_outputs,
                        };
                        encode_command(out, Opcode::Start, 0, &start.encode());
                    }
                    Err(reason) => return self.refuse(&reason, fiobox, out),
                }
            }
            Opcode::Run => {
                if self.state != State::Ready {
                    return self.refuse("fio server: RUN without an accepted job file", fiobox, out);
                }
                match fiobox.run() {
                    Ok(()) => {
                        self.state = State::Running;
                        encode_command(out, Opcode::ServerStart, 0, &[]);
                    }
                    Err(reason) => return self.refuse(&reason, fiobox, out),
                }
            }
            Opcode::SendEta => {
                // Answered in every state, as fio answers with a zeroed ETA when it runs
                // nothing: an unanswered request times the client out.
                let eta = if self.state == State::Running {
                    fiobox.eta()
                } else {
                    Eta::default()
                };
                encode_command(out, Opcode::Eta, tag, &eta.encode());
            }
            Opcode::Quit => {
                // The client asks the jobs to end (its Ctrl-C); their results still follow.
                if self.state == State::Running {
                    fiobox.stop();
                } else {
                    self.state = State::Done;
                }
            }
            Opcode::Exit => self.end_run(fiobox),
            Opcode::LoadFile => {
                return self.refuse(
                    "fio server: job files on the server's disk (--remote-config) are not supported; send the job file from the client",
                    fiobox,
                    out,
                );
            }
            Opcode::VTrigger => {
                return self.refuse("fio server: verify-state triggers are not supported", fiobox, out);
            }
            Opcode::SendFile => {
                return self.refuse("fio server: file transfer (SENDFILE) is not supported", fiobox, out);
            }
            Opcode::UpdateJob
            | Opcode::AddJob
            | Opcode::Text
            | Opcode::Ts
            | Opcode::Gs
            | Opcode::Eta
            | Opcode::Start
            | Opcode::Stop
            | Opcode::Du
            | Opcode::ServerStart
            | Opcode::IoLog
            | Opcode::JobOpt => {
                let reason = format!(
                    "fio server: request {op:?} is not supported while {}",
                    self.state.name()
                );
                return self.refuse(&reason, fiobox, out);
            }
        }
        Ok(())
    }
}
