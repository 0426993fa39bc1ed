//! `fio.server=1`: the box is a `fio --server` that the stock fio 3.33 client of a desk drives over
//! TCP (`fio --client=BOX,8765 job.fio`).
//!
//! The protocol is `fioserver`'s [`Session`]; this module is its transport and its box: the
//! network room's stack, and the same fio front-end, refusals and job runner as a `--fio` boot
//! module (`workload::fio`, [`super::jobs::run_specs_watched`]). Results go back as fio's TS/GS/DU
//! (`fleet::results`); the box's console shows its own reports as for a boot job.
//!
//! **Who polls the network.** One CPU polls the stack and nothing else, the boot CPU or the one
//! `net.cpu=` names: jobs are placed on the other CPUs (a job that names the polling CPU is
//! refused by the placement), so a measured CPU never runs network code, and the NIC (polled,
//! its interrupts off) raises no interrupt on any CPU. Between clients it polls every 200 us;
//! while jobs run it halts between polls until its next interrupt (the 100 Hz tick at the
//! latest), so it takes no host time from a virtual box's disk, and the client's ETA requests
//! (every second; fio gives up after 5 s) are answered during jobs of any length. The server
//! needs two CPUs.
//!
//! **One client at a time.** The first connection is served; a second one gets the probe answer
//! and then fio's refusal (`busy: serving CLIENT`), which the client prints before exiting with
//! error 22. A client that disconnects while its jobs run stops them (the engine drains and
//! skips the verify pass); the next client is then served, without a reboot.
//!
//! **Safety.** fio's protocol has no authentication: a client outside `fio.server.allow`
//! (default: the box's own subnet) is reset at connect. A job that writes, trims or
//! write-verifies a device not in `fio.server.writable` is refused with the device's name, and
//! `destroy=1` is refused over the network, so the partition and file-system guard cannot be
//! lifted by a client.

use crate::arch::console::kprintln;
use crate::arch::{exit, idle, percpu, smp, time};
use crate::dev::block;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use fioserver::{
    FioBox, JobPlan, LOG_ERR, Opcode, ProbeFacts, REFUSED_ERROR, Refusal, RunResults, Session, Stop, Text,
    encode_command,
};
use fleet::results::{EtaMeter, LiveJob, run_results};
use fleet::{Cidr, ServerConfig};
use net::{Nic, Stack, TcpHandle, TcpState};
use workload::fio::FioRun;
use workload::report::FioJobMeta;
use workload::{DeviceInfo, JobReport, JobShared, JobSpec};

/// Pause between polls of the stack on the polling CPU while no job runs.
const POLL_PAUSE_US: u64 = 200;
/// How long a closing connection may take to send its last bytes before it is reset.
const CLOSE_WAIT_MS: u64 = 10_000;
/// Bytes read from a connection per poll.
const READ_CHUNK: usize = 16 * 1024;

static CONFIG: spin::Once<ServerConfig> = spin::Once::new();

/// Parses the `fio.server*` words among `words` (once, at boot).
pub fn configure(words: &[&str]) -> Result<(), String> {
    let config = ServerConfig::parse(words.iter().copied()).map_err(|e| format!("command line: {e}"))?;
    CONFIG.call_once(|| config);
    Ok(())
}

/// Whether the box was booted with `fio.server=1`.
pub fn enabled() -> bool {
    CONFIG.get().is_some_and(|c| c.enabled)
}

fn now_ms() -> u64 {
    time::now_ns() / 1_000_000
}

/// The job-file side of the box: parsing, refusals, and the run's state.
struct KernelBox {
    overrides: Vec<(String, String)>,
    env: workload::fio::FioEnv,
    infos: Vec<DeviceInfo>,
    /// The CPUs jobs may use: every online CPU but the polling one.
    job_cpus: Vec<u32>,
    /// Primary names of the devices clients may write to.
    writable: Vec<String>,
    hostname: String,
    /// The job files accepted so far, one after the other: a client given several sends each
    /// before RUN, and fio's server runs them as one file (a `[global]` holds on into the next
    /// file, and no stonewall separates them).
    job_text: String,
    /// The accepted job files, and their engine jobs wave by wave.
    accepted: Option<(FioRun, Vec<Vec<JobSpec>>)>,
    run_requested: bool,
    /// While jobs run: each running job's live figures (refreshed before the session is fed).
    live: Vec<LiveJob>,
    eta: EtaMeter,
    stop_requested: bool,
    results: Option<RunResults>,
}

impl KernelBox {
    fn reset(&mut self) {
        self.job_text.clear();
        self.accepted = None;
        self.run_requested = false;
        self.live.clear();
        self.stop_requested = false;
        self.results = None;
    }

    /// The devices a spec reads or writes, by primary name.
    fn spec_devices(&self, spec: &JobSpec) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        let mut add = |name: &str| -> Result<(), String> {
            let d = block::find(name).ok_or_else(|| {
                format!(
                    "job {}: no device named {name:?} (available: {})",
                    spec.name,
                    block::names_and_aliases()
                )
            })?;
            let primary = d.facts().name.clone();
            if !names.contains(&primary) {
                names.push(primary);
            }
            Ok(())
        };
        match &spec.device {
            Some(name) => add(name)?,
            // The planner's choice when a job names none: the first device.
            None => add(&self.infos[0].name)?,
        }
        for file in &spec.files {
            add(&file.device)?;
        }
        Ok(names)
    }

    /// The network's rules on top of the boot path's: no `destroy=1`, writes only to the
    /// writable devices, no logs (they would stay on the box).
    fn check_spec(&self, spec: &JobSpec) -> Result<(), String> {
        if spec.destroy {
            return Err(format!(
                "job {}: destroy=1 is not accepted from a fio client: the partition and file-system guard \
                 stays on for fio.server jobs (run such a job from the box's own command line)",
                spec.name
            ));
        }
        if spec.rw.writes() || spec.rw.trims() {
            for device in self.spec_devices(spec)? {
                if self.writable.contains(&device)
                    && let Some(dev) = block::find(&device)
                    && let Err(e) = super::safety::check_before_writes(&spec.name, dev, false)
                {
                    // The run checks again before its first write; this one answers before START.
                    return Err(format!(
                        "{e} (from a fio client destroy=1 is not accepted: clear the disk on the box first)"
                    ));
                }
                if !self.writable.contains(&device) {
                    return Err(format!(
                        "job {}: rw={} writes to {device}, which is not in fio.server.writable ({}): \
                         boot the box with fio.server.writable={device} to allow it",
                        spec.name,
                        spec.rw.as_str(),
                        if self.writable.is_empty() {
                            String::from("no device is writable")
                        } else {
                            self.writable.join(",")
                        }
                    ));
                }
            }
        } else {
            self.spec_devices(spec)?;
        }
        Ok(())
    }

    fn prepare(&self, text: &str) -> Result<(FioRun, Vec<Vec<JobSpec>>), String> {
        let overrides: Vec<(&str, &str)> = self.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let run =
            workload::fio::parse_job_file_on(text, &overrides, Some(&self.env)).map_err(|e| format!("fio: {e}"))?;
        if run.jobs.is_empty() {
            return Err("fio: the job file has no job".into());
        }
        for job in &run.jobs {
            let logs = &job.report.logs;
            if logs.bw_log.is_some() || logs.lat_log.is_some() || logs.iops_log.is_some() || logs.hist_log.is_some() {
                return Err(format!(
                    "fio job {:?}: write_*_log is not supported by baremq's fio server (the logs would stay on \
                     the box); run the job without them",
                    job.name
                ));
            }
        }
        let mut waves = Vec::new();
        for wave in run.waves() {
            let specs =
                workload::fio::wave_specs(wave, &self.infos, &self.job_cpus).map_err(|e| format!("fio: {e}"))?;
            for spec in &specs {
                self.check_spec(spec)?;
            }
            waves.push(specs);
        }
        Ok((run, waves))
    }
}

impl FioBox for KernelBox {
    fn probe(&mut self) -> ProbeFacts {
        ProbeFacts {
            hostname: self.hostname.clone(),
            cpus: smp::online() as u32,
            version: format!("baremq-{}", env!("CARGO_PKG_VERSION")),
        }
    }

    fn command_line(&mut self, args: &[String]) -> Result<(), Refusal> {
        kprintln!("fio.server: client's arguments: {}", args.join(" "));
        Ok(())
    }

    fn job_file(&mut self, text: &str) -> Result<JobPlan, Refusal> {
        let mut all = self.job_text.clone();
        if !all.is_empty() && !all.ends_with('\n') {
            all.push('\n');
        }
        all.push_str(text);
        match self.prepare(&all) {
            Ok((run, waves)) => {
                let jobs = run.jobs.len() as u32;
                kprintln!(
                    "fio.server: job file accepted: {jobs} job(s) in {} wave(s){}",
                    waves.len(),
                    if self.job_text.is_empty() {
                        ""
                    } else {
                        " with the job files before it"
                    }
                );
                let plan = fleet::results::start_plan(&run);
                self.job_text = all;
                self.accepted = Some((run, waves));
                Ok(plan)
            }
            Err(reason) => {
                kprintln!("fio.server: job file refused: {reason}");
                Err(reason)
            }
        }
    }

    fn run(&mut self) -> Result<(), Refusal> {
        if self.accepted.is_none() {
            return Err("fio server: RUN without an accepted job file".into());
        }
        self.run_requested = true;
        Ok(())
    }

    fn finished(&mut self) -> bool {
        self.results.is_some()
    }

    fn eta(&mut self) -> fioserver::stats::Eta {
        self.eta.eta(time::now_ns(), &self.live)
    }

    fn stop(&mut self) {
        self.stop_requested = true;
    }

    fn results(&mut self) -> RunResults {
        self.results.take().unwrap_or(RunResults {
            jobs: Vec::new(),
            groups: Vec::new(),
            global_options: Vec::new(),
            disks: Vec::new(),
            error: 1,
        })
    }
}

/// The box a second client talks to while one is served: it answers the probe and refuses.
struct BusyBox {
    hostname: String,
    serving: String,
}

impl FioBox for BusyBox {
    fn probe(&mut self) -> ProbeFacts {
        ProbeFacts {
            hostname: self.hostname.clone(),
            cpus: smp::online() as u32,
            version: format!("baremq-{}", env!("CARGO_PKG_VERSION")),
        }
    }

    fn command_line(&mut self, _args: &[String]) -> Result<(), Refusal> {
        Ok(())
    }

    fn job_file(&mut self, _text: &str) -> Result<JobPlan, Refusal> {
        Err(format!(
            "fio server busy: serving {} now (one client at a time); try again when its jobs end",
            self.serving
        ))
    }

    fn run(&mut self) -> Result<(), Refusal> {
        Err("fio server busy".into())
    }

    fn finished(&mut self) -> bool {
        false
    }

    fn eta(&mut self) -> fioserver::stats::Eta {
        fioserver::stats::Eta::default()
    }

    fn stop(&mut self) {}

    fn results(&mut self) -> RunResults {
        RunResults {
            jobs: Vec::new(),
            groups: Vec::new(),
            global_options: Vec::new(),
            disks: Vec::new(),
            error: REFUSED_ERROR,
        }
    }
}

/// One TCP connection and its session.
struct Conn {
    handle: TcpHandle,
    peer: String,
    session: Session,
    /// Bytes the session produced that the socket has not taken yet.
    out: Vec<u8>,
    /// The session is over: send what is left, then close.
    ending: bool,
    /// When the close began (ms), once it has.
    closed_at: Option<u64>,
}

impl Conn {
    fn new(handle: TcpHandle, peer: String) -> Self {
        Self {
            handle,
            peer,
            session: Session::new(),
            out: Vec::new(),
            ending: false,
            closed_at: None,
        }
    }
}

/// What one pass over a connection found.
enum Seen {
    Open,
    /// The peer went away (reset, or closed its side) before the session ended.
    Gone,
    /// Closed and released.
    Released,
}

struct Server<'a> {
    stack: &'a mut Stack,
    nic: &'a mut dyn Nic,
    port: u16,
    own: Cidr,
    config: ServerConfig,
    hostname: String,
    listener: TcpHandle,
    /// The client being served.
    main: Option<Conn>,
    /// Other clients, being refused (busy), and connections closing.
    others: Vec<Conn>,
}

impl Server<'_> {
    fn poll(&mut self) -> Result<(), String> {
        self.stack
            .poll(self.nic, now_ms())
            .map_err(|e| format!("fio.server: network: {e}"))?;
        Ok(())
    }

    /// A connection on the listener becomes a client (or is refused); a fresh listener follows.
    fn accept(&mut self) -> Result<(), String> {
        match self.stack.tcp_state(self.listener) {
            TcpState::Listen => return Ok(()),
            TcpState::SynReceived => return Ok(()),
            TcpState::Established | TcpState::CloseWait => {}
            _ => {
                // The handshake failed: listen again.
                self.stack.tcp_release(self.listener);
                self.listener = self
                    .stack
                    .tcp_listen(self.port)
                    .map_err(|e| format!("fio.server: {e}"))?;
                return Ok(());
            }
        }
        let handle = self.listener;
        self.listener = self
            .stack
            .tcp_listen(self.port)
            .map_err(|e| format!("fio.server: {e}"))?;
        let Some((addr, port)) = self.stack.tcp_remote(handle) else {
            self.stack.tcp_abort(handle);
            self.stack.tcp_release(handle);
            return Ok(());
        };
        let peer = format!("{addr}:{port}");
        if !self.config.allows(self.own, addr.octets()) {
            kprintln!(
                "fio.server: client {peer} refused (reset): not in fio.server.allow ({})",
                self.config.describe_allow(self.own)
            );
            self.stack.tcp_abort(handle);
            let mut conn = Conn::new(handle, peer);
            conn.ending = true;
            conn.closed_at = Some(now_ms());
            self.others.push(conn);
            return Ok(());
        }
        if let Some(main) = &self.main {
            kprintln!(
                "fio.server: client {peer} connected while {} is served: refused (busy)",
                main.peer
            );
            self.others.push(Conn::new(handle, peer));
        } else {
            kprintln!("fio.server: client {peer} connected");
            self.main = Some(Conn::new(handle, peer));
        }
        Ok(())
    }

    /// Reads, feeds the session, writes, and closes `conn` as its session says.
    fn service(stack: &mut Stack, conn: &mut Conn, fiobox: &mut dyn FioBox) -> Seen {
        let state = stack.tcp_state(conn.handle);
        if let Some(since) = conn.closed_at {
            let done = matches!(state, TcpState::Closed | TcpState::TimeWait);
            if done || now_ms().saturating_sub(since) > CLOSE_WAIT_MS {
                if !done {
                    stack.tcp_abort(conn.handle);
                }
                stack.tcp_release(conn.handle);
                return Seen::Released;
            }
            return Seen::Open;
        }
        if !conn.ending {
            let mut buf = alloc::vec![0u8; READ_CHUNK];
            loop {
                // A receive error leaves the socket closed, which the state check below sees.
                let n = stack.tcp_recv(conn.handle, &mut buf).unwrap_or_default();
                if n == 0 {
                    break;
                }
                match conn.session.on_bytes(&buf[..n], fiobox) {
                    Ok(step) => {
                        conn.out.extend_from_slice(&step.out);
                        if step.done {
                            conn.ending = true;
                            break;
                        }
                    }
                    Err(e) => {
                        kprintln!("fio.server: client {}: protocol error: {e}; closing", conn.peer);
                        conn.out.clear();
                        conn.ending = true;
                        break;
                    }
                }
            }
            if !conn.ending {
                match conn.session.poll(fiobox) {
                    Ok(step) => {
                        conn.out.extend_from_slice(&step.out);
                        conn.ending |= step.done;
                    }
                    Err(e) => {
                        kprintln!(
                            "fio.server: client {}: cannot send the results: {e}; closing",
                            conn.peer
                        );
                        conn.out.clear();
                        conn.ending = true;
                    }
                }
            }
        }
        if !conn.out.is_empty()
            && matches!(state, TcpState::Established | TcpState::CloseWait)
            && let Ok(n) = stack.tcp_send(conn.handle, &conn.out)
        {
            conn.out.drain(..n);
        }
        let peer_gone = !matches!(state, TcpState::Established | TcpState::SynReceived);
        if peer_gone && !conn.ending {
            // The client closed its side or reset: nobody reads what the session would say.
            conn.session.on_closed(fiobox);
            conn.ending = true;
            conn.out.clear();
            stack.tcp_abort(conn.handle);
            conn.closed_at = Some(now_ms());
            return Seen::Gone;
        }
        if conn.ending && (conn.out.is_empty() || peer_gone) {
            stack.tcp_close(conn.handle);
            conn.closed_at = Some(now_ms());
        }
        Seen::Open
    }

    /// Everything but the main client's session: accept, refuse the busy ones, finish closes.
    fn service_others(&mut self) -> Result<(), String> {
        self.accept()?;
        let serving = self
            .main
            .as_ref()
            .map_or_else(|| String::from("another client"), |c| c.peer.clone());
        let mut busy = BusyBox {
            hostname: self.hostname.clone(),
            serving,
        };
        let stack = &mut *self.stack;
        self.others
            .retain_mut(|conn| !matches!(Self::service(stack, conn, &mut busy), Seen::Released));
        Ok(())
    }

    /// One pass: the network, the main client with `fiobox`, the others. Returns whether the main
    /// client went away before its session ended.
    fn step(&mut self, fiobox: &mut KernelBox) -> Result<bool, String> {
        self.poll()?;
        self.service_others()?;
        let mut gone = false;
        if let Some(main) = &mut self.main {
            match Self::service(self.stack, main, fiobox) {
                Seen::Open => {}
                Seen::Gone => {
                    kprintln!("fio.server: client {} went away", main.peer);
                    gone = true;
                }
                Seen::Released => {
                    kprintln!("fio.server: client {} done", main.peer);
                    self.main = None;
                }
            }
        }
        self.poll()?;
        Ok(gone)
    }

    /// Sends fio's refusal (text, STOP with an error, QUIT) to the main client for a run that
    /// failed after it started, and ends its session.
    fn refuse_running(&mut self, reason: &str) {
        let Some(main) = &mut self.main else { return };
        let mut out = Vec::new();
        let text = Text {
            level: LOG_ERR,
            log_sec: 0,
            log_usec: 0,
            text: format!("{reason}\n"),
        };
        if let Ok(bytes) = text.encode() {
            encode_command(&mut out, Opcode::Text, 0, &bytes);
        }
        encode_command(
            &mut out,
            Opcode::Stop,
            0,
            &Stop {
                error: REFUSED_ERROR,
                signal: 0,
            }
            .encode(),
        );
        encode_command(&mut out, Opcode::Quit, 0, &[]);
        main.out.extend_from_slice(&out);
        main.ending = true;
    }

    /// Runs the accepted job file, wave by wave, polling the network between the job CPUs'
    /// progress; the results go to the session when they are all in.
    fn run_jobs(&mut self, fiobox: &mut KernelBox) {
        let Some((run, waves)) = fiobox.accepted.take() else {
            return;
        };
        fiobox.eta = EtaMeter::new(time::now_ns());
        let output = workload::FioOutputOptions {
            output_format: workload::FioOutputFormat::Json,
            global_options: run.options.global_options.clone(),
            percentile_list: run
                .jobs
                .first()
                .map(|j| j.report.percentile_list.iter().map(|p| p.millionths).collect())
                .unwrap_or_default(),
            ..workload::FioOutputOptions::default()
        };
        let detail = Some(output.detail_options());
        let infos = fiobox.infos.clone();
        let job_cpus = fiobox.job_cpus.clone();
        let mut reports: Vec<(JobReport, FioJobMeta)> = Vec::new();
        let mut all_passed = true;
        let mut failure = None;
        let mut fio_jobs = run.jobs.iter();
        for specs in &waves {
            let wave_jobs: Vec<&workload::fio::FioJob> = fio_jobs.by_ref().take(specs.len()).collect();
            if fiobox.stop_requested {
                break;
            }
            for (job, spec) in wave_jobs.iter().zip(specs) {
                kprintln!("fio.server: job {:?}: group {}, mapped to: {spec}", job.name, job.group);
            }
            let mut watch = |shareds: &[&JobShared]| {
                fiobox.live = shareds
                    .iter()
                    .zip(specs)
                    .map(|(shared, spec)| {
                        let totals = shared.total();
                        LiveJob {
                            running: !shared.all_finished(),
                            writes_only: spec.rw.writes() && !spec.rw.reads(),
                            bytes: totals.bytes,
                            ios: totals.ios,
                            runtime_ns: spec.runtime_ns,
                        }
                    })
                    .collect();
                if let Err(e) = self.step(fiobox) {
                    kprintln!("{e}");
                    fiobox.stop_requested = true;
                }
                if fiobox.stop_requested {
                    for shared in shareds {
                        shared.request_stop();
                    }
                }
                // Sleeps until the next interrupt (its tick, at the latest 10 ms on): a polling
                // CPU that spun would take the host time a virtual box's disk needs.
                idle::wait_until(|| false);
            };
            match super::jobs::run_specs_watched(specs, &infos, &job_cpus, detail, Some(&mut watch)) {
                Ok(results) => {
                    for (job, (passed, report)) in wave_jobs.iter().zip(results) {
                        all_passed &= passed;
                        reports.push((
                            report,
                            FioJobMeta {
                                job_options: job.options.clone(),
                                groupid: job.group,
                            },
                        ));
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        fiobox.live.clear();
        if !reports.is_empty() {
            // The box's own fio document, as for a boot job: what the client's figures must equal.
            let jobs: Vec<workload::FioJob<'_>> = reports
                .iter()
                .map(|(report, meta)| workload::FioJob { report, meta })
                .collect();
            let mut text = String::new();
            if workload::report::write_fio_json_line(&mut text, &output, &jobs).is_ok() {
                crate::arch::console::print(format_args!("{text}"));
            }
        }
        if let Some(e) = failure {
            kprintln!("fio.server: run failed: {e}");
            self.refuse_running(&format!("fio server: the run failed: {e}"));
            fiobox.results = None;
            return;
        }
        if fiobox.stop_requested {
            kprintln!("fio.server: run stopped early ({} job(s) reported)", reports.len());
        }
        if reports.len() != run.jobs.len() {
            // Stopped before every wave ran: fio's client expects a report per announced job.
            self.refuse_running("fio server: the run was stopped before every job ran");
            return;
        }
        super::jobs::print_interrupts();
        kprintln!(
            "fio.server: run ended: {}",
            if all_passed { "every job passed" } else { "a job failed" }
        );
        fiobox.results = Some(run_results(
            &reports,
            &output.global_options,
            &output.percentile_list,
            all_passed,
        ));
    }
}

/// What the serving CPU needs, settled on the boot CPU.
struct Setup {
    overrides: Vec<(String, String)>,
    ram_bytes: u64,
    /// The CPU that polls the network and runs no job.
    net_cpu: u32,
    /// Every other online CPU.
    job_cpus: Vec<u32>,
    /// Primary names of the devices clients may write to.
    writable: Vec<String>,
}

/// The setup handed to `net.cpu`'s CPU when it is not the boot CPU.
static HANDED_OVER: spin::Once<Setup> = spin::Once::new();

/// Runs the boot's fio jobs (`files`, `words`; none is usual) on the CPUs client jobs get, then
/// serves fio clients until the box is switched off, from the boot CPU or from the CPU
/// `net.cpu=` names (the boot CPU then runs jobs like the others). `overrides`: the kernel's
/// `fio.override.KEY=VALUE` words, applied to boot jobs and every client job alike.
pub fn serve(files: &[super::fio::JobFile], words: &[&str], overrides: &[(&str, &str)], ram_bytes: u64) -> ! {
    let config = CONFIG.get().cloned().unwrap_or_default();
    let boot_cpu = percpu::index() as u32;
    let online = super::jobs::online_cpus();
    let net_cpu = super::net::polling_cpu().unwrap_or(boot_cpu);
    if !online.contains(&net_cpu) {
        exit::failure(format_args!(
            "command line: net.cpu={net_cpu}: no such CPU is online (CPUs 0-{})",
            online.len().saturating_sub(1)
        ));
    }
    let job_cpus: Vec<u32> = online.into_iter().filter(|c| *c != net_cpu).collect();
    if job_cpus.is_empty() {
        exit::failure(format_args!(
            "fio.server: needs at least 2 CPUs: cpu{net_cpu} polls the network and jobs run on the others"
        ));
    }
    let mut writable = Vec::new();
    for name in &config.writable {
        match block::find(name) {
            Some(d) => writable.push(d.facts().name.clone()),
            None => exit::failure(format_args!(
                "fio.server.writable: no device named {name:?} (available: {})",
                block::names_and_aliases()
            )),
        }
    }
    if !files.is_empty() || !words.is_empty() {
        // Boot jobs on the CPUs a client's job gets: the same job sent by a client afterwards
        // runs where this one ran, so the two can be compared in one boot.
        kprintln!("fio.server: boot job(s) first, then serving");
        match super::fio::run(files, words, overrides, ram_bytes, &job_cpus) {
            Ok(true) => {
                time::boot_mark("boot jobs");
                kprintln!("fio.server: boot job(s) passed");
            }
            Ok(false) => exit::failure(format_args!("fio.server: a boot job failed (see its report)")),
            Err(e) => exit::failure(format_args!("{e}")),
        }
    }
    let setup = Setup {
        overrides: overrides.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ram_bytes,
        net_cpu,
        job_cpus,
        writable,
    };
    if net_cpu != boot_cpu {
        kprintln!("fio.server: net.cpu={net_cpu}: cpu{boot_cpu} hands the network over and runs jobs");
        HANDED_OVER.call_once(|| setup);
        if smp::run_on(net_cpu as usize, serve_handed_over, 0).is_none() {
            exit::failure(format_args!("fio.server: cpu{net_cpu} did not take the network (busy)"));
        }
        smp::become_worker();
    }
    serve_here(&setup)
}

/// `net.cpu`'s CPU, from its mailbox: serves with the boot CPU's setup.
fn serve_handed_over(_: usize) {
    match HANDED_OVER.get() {
        Some(setup) => serve_here(setup),
        None => exit::failure(format_args!(
            "fio.server: the network was handed over without its setup"
        )),
    }
}

/// Serves on the calling CPU, which must be `setup.net_cpu`.
fn serve_here(setup: &Setup) -> ! {
    let me = setup.net_cpu;
    let job_cpus = setup.job_cpus.clone();
    let writable = setup.writable.clone();
    let ram_bytes = setup.ram_bytes;
    super::jobs::prepare();
    let infos = match super::jobs::devices() {
        Ok(infos) => infos,
        Err(e) => exit::failure(format_args!("fio.server: {e}")),
    };
    let env = workload::fio::FioEnv {
        ncpus: job_cpus.len() as u64,
        mb_memory: ram_bytes >> 20,
        pagesize: 4096,
    };
    let config = CONFIG.get().cloned().unwrap_or_default();
    let mut serve_on = |stack: &mut Stack, nic: &mut dyn Nic| -> Result<(), String> {
        let configured = stack
            .configured()
            .ok_or_else(|| String::from("fio.server: the interface has no address"))?;
        // The time to an address (a DHCP lease) is part of the time to the first job.
        time::boot_mark("network");
        kprintln!("boot phases (ms): {}", time::BootPhases);
        let address = configured.cidr.address();
        let own = Cidr {
            addr: address.octets(),
            prefix: configured.cidr.prefix_len(),
        };
        let mac = nic.mac().0;
        let hostname = format!("baremq-{:02x}{:02x}{:02x}", mac[3], mac[4], mac[5]);
        let listener = stack.tcp_listen(config.port).map_err(|e| format!("fio.server: {e}"))?;
        let cpus: Vec<String> = job_cpus.iter().map(ToString::to_string).collect();
        kprintln!(
            "fio.server: {hostname} listening on {address}:{} (fio --client={address},{} JOB.fio); clients from {}; \
             writable: {}; cpu{me} polls the network, jobs run on cpus {}",
            config.port,
            config.port,
            config.describe_allow(own),
            if writable.is_empty() {
                String::from("none")
            } else {
                writable.join(",")
            },
            cpus.join(",")
        );
        let mut fiobox = KernelBox {
            overrides: setup.overrides.clone(),
            env,
            infos: infos.clone(),
            job_cpus: job_cpus.clone(),
            writable: writable.clone(),
            hostname: hostname.clone(),
            job_text: String::new(),
            accepted: None,
            run_requested: false,
            live: Vec::new(),
            eta: EtaMeter::new(0),
            stop_requested: false,
            results: None,
        };
        let mut server = Server {
            stack,
            nic,
            port: config.port,
            own,
            config: config.clone(),
            hostname,
            listener,
            main: None,
            others: Vec::new(),
        };
        loop {
            server.step(&mut fiobox)?;
            if server.main.is_none() {
                // Between clients (never during a run: runs return before this loop goes on).
                fiobox.reset();
            }
            if fiobox.run_requested {
                fiobox.run_requested = false;
                server.run_jobs(&mut fiobox);
            }
            time::delay_us(POLL_PAUSE_US);
        }
    };
    match crate::app::net::serve_on_interface(&mut serve_on) {
        Ok(()) => exit::failure(format_args!("fio.server: the server loop ended")),
        Err(e) => exit::failure(format_args!("fio.server: {e}")),
    }
}
