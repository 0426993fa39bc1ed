//! The session against a scripted client: each request's answer, refusals and their end
//! sequence, ETA tags, a run that ends later, and the end of the conversation.

use fioserver::stats::{Eta, GroupRunStats, ThreadStat};
use fioserver::{
    ClientProbe, Command, Decoder, Error, FioBox, JobFile, JobLine, JobPlan, JobReport, Opcode, ProbeFacts, ProbeReply,
    REFUSED_ERROR, Refusal, RunResults, Session, Start, State, Stop, Text, encode_command,
};

#[derive(Default)]
struct ScriptedBox {
    refuse_job: Option<String>,
    refuse_run: Option<String>,
    finished: bool,
    stopped: u32,
    ran: u32,
    eta_calls: u32,
}

impl FioBox for ScriptedBox {
    fn probe(&mut self) -> ProbeFacts {
        ProbeFacts {
            hostname: "box".into(),
            cpus: 4,
            version: "fio-3.33".into(),
        }
    }
    fn command_line(&mut self, args: &[String]) -> Result<(), Refusal> {
        if args.iter().any(|a| a == "--bad") {
            Err("bad argument".into())
        } else {
            Ok(())
        }
    }
    fn job_file(&mut self, _text: &str) -> Result<JobPlan, Refusal> {
        match &self.refuse_job {
            Some(r) => Err(r.clone()),
            None => Ok(JobPlan {
                jobs: 1,
                stat_outputs: 1,
            }),
        }
    }
    fn run(&mut self) -> Result<(), Refusal> {
        self.ran += 1;
        match &self.refuse_run {
            Some(r) => Err(r.clone()),
            None => Ok(()),
        }
    }
    fn finished(&mut self) -> bool {
        self.finished
    }
    fn eta(&mut self) -> Eta {
        self.eta_calls += 1;
        Eta {
            nr_running: 1,
            nr_threads: 1,
            run_str: "R".into(),
            ..Eta::default()
        }
    }
    fn stop(&mut self) {
        self.stopped += 1;
    }
    fn results(&mut self) -> RunResults {
        RunResults {
            jobs: vec![JobReport {
                stat: ThreadStat {
                    name: "j".into(),
                    ..ThreadStat::default()
                },
                options: vec![("bs".into(), "4k".into())],
            }],
            groups: vec![GroupRunStats::default()],
            global_options: vec![],
            disks: vec![],
            error: 0,
        }
    }
}

fn cmd(op: Opcode, tag: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command(&mut out, op, tag, payload);
    out
}

fn probe() -> Vec<u8> {
    cmd(
        Opcode::Probe,
        0xABCD,
        &ClientProbe {
            flags: 1,
            server: "127.0.0.1".into(),
        }
        .encode(),
    )
}

fn job(text: &str) -> Vec<u8> {
    // As the fio client sends it: the text, then slack.
    let mut payload = JobFile {
        client_type: 1,
        text: text.as_bytes().to_vec(),
    }
    .encode()
    .unwrap();
    payload[0..4].copy_from_slice(&((text.len() + 100) as u32).to_le_bytes());
    payload.extend_from_slice(&[0; 100]);
    cmd(Opcode::Job, 0, &payload)
}

fn decode(bytes: &[u8]) -> Vec<Command> {
    let mut d = Decoder::new(1 << 20);
    let mut input = bytes;
    let mut out = Vec::new();
    while let Some(c) = d.next_command(&mut input).unwrap() {
        out.push(c);
    }
    assert!(d.is_idle());
    out
}

fn ops(cmds: &[Command]) -> Vec<Opcode> {
    cmds.iter().map(|c| Opcode::from_wire(c.opcode).unwrap()).collect()
}

#[test]
fn full_conversation_in_one_burst() {
    let mut b = ScriptedBox {
        finished: true,
        ..Default::default()
    };
    let mut s = Session::new();
    let mut bytes = probe();
    bytes.extend(cmd(
        Opcode::JobLine,
        0,
        &JobLine {
            client_type: 1,
            args: vec!["fio".into()],
        }
        .encode()
        .unwrap(),
    ));
    bytes.extend(job("[j]\nrw=read\n"));
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    let step = s.on_bytes(&bytes, &mut b).unwrap();
    assert!(step.done);
    assert_eq!(s.state(), State::Done);
    let cmds = decode(&step.out);
    assert_eq!(
        ops(&cmds),
        [
            Opcode::Probe,
            Opcode::Start,
            Opcode::ServerStart,
            Opcode::JobOpt,
            Opcode::Ts,
            Opcode::Gs,
            Opcode::Stop,
            Opcode::Quit
        ]
    );
    // The PROBE reply echoes the request's tag.
    assert_eq!(cmds[0].tag, 0xABCD);
    let reply = ProbeReply::decode(&cmds[0].payload).unwrap();
    assert_eq!((reply.hostname.as_str(), reply.cpus, reply.flags), ("box", 4, 0));
    assert_eq!(
        Start::decode(&cmds[1].payload).unwrap(),
        Start {
            jobs: 1,
            stat_outputs: 1
        }
    );
    assert_eq!(Stop::decode(&cmds[6].payload).unwrap(), Stop { error: 0, signal: 0 });
    assert_eq!(b.ran, 1);
    // Nothing more is taken.
    assert_eq!(s.on_bytes(&probe(), &mut b), Err(Error::SessionOver));
}

#[test]
fn refused_job_sends_text_stop_with_error_and_quit() {
    let mut b = ScriptedBox {
        refuse_job: Some("no such engine".into()),
        ..Default::default()
    };
    let mut s = Session::new();
    let mut bytes = job("[j]\n");
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    let step = s.on_bytes(&bytes, &mut b).unwrap();
    assert!(step.done);
    let cmds = decode(&step.out);
    assert_eq!(ops(&cmds), [Opcode::Text, Opcode::Stop, Opcode::Quit]);
    let text = Text::decode(&cmds[0].payload).unwrap();
    assert_eq!(text.text, "no such engine\n");
    assert_eq!(Stop::decode(&cmds[1].payload).unwrap().error, REFUSED_ERROR);
    assert_eq!(b.ran, 0, "RUN after a refusal is not read");
}

#[test]
fn refused_command_line_and_run() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let line = JobLine {
        client_type: 1,
        args: vec!["fio".into(), "--bad".into()],
    };
    let step = s
        .on_bytes(&cmd(Opcode::JobLine, 0, &line.encode().unwrap()), &mut b)
        .unwrap();
    assert_eq!(ops(&decode(&step.out)), [Opcode::Text, Opcode::Stop, Opcode::Quit]);

    let mut b = ScriptedBox {
        refuse_run: Some("disk gone".into()),
        ..Default::default()
    };
    let mut s = Session::new();
    let mut bytes = job("[j]\n");
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    let cmds = decode(&s.on_bytes(&bytes, &mut b).unwrap().out);
    assert_eq!(ops(&cmds), [Opcode::Start, Opcode::Text, Opcode::Stop, Opcode::Quit]);
    assert_eq!(Text::decode(&cmds[1].payload).unwrap().text, "disk gone\n");
}

#[test]
fn run_without_a_job_is_refused() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let cmds = decode(&s.on_bytes(&cmd(Opcode::Run, 0, &[]), &mut b).unwrap().out);
    assert_eq!(ops(&cmds), [Opcode::Text, Opcode::Stop, Opcode::Quit]);
    assert_eq!(b.ran, 0);
}

#[test]
fn unsupported_requests_are_refused_by_name() {
    for (op, words) in [
        (Opcode::LoadFile, "--remote-config"),
        (Opcode::VTrigger, "verify-state"),
        (Opcode::SendFile, "SENDFILE"),
        (Opcode::UpdateJob, "UpdateJob"),
    ] {
        let mut b = ScriptedBox::default();
        let mut s = Session::new();
        let step = s.on_bytes(&cmd(op, 0, &[0; 16]), &mut b).unwrap();
        assert!(step.done);
        let cmds = decode(&step.out);
        assert_eq!(ops(&cmds), [Opcode::Text, Opcode::Stop, Opcode::Quit]);
        let text = Text::decode(&cmds[0].payload).unwrap().text;
        assert!(text.contains(words), "{op:?}: {text}");
    }
}

#[test]
fn eta_answers_with_the_request_tag_while_running_and_results_follow_on_poll() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let mut bytes = job("[j]\n");
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    let step = s.on_bytes(&bytes, &mut b).unwrap();
    assert!(!step.done);
    assert_eq!(s.state(), State::Running);
    assert_eq!(ops(&decode(&step.out)), [Opcode::Start, Opcode::ServerStart]);

    let step = s.on_bytes(&cmd(Opcode::SendEta, 0x5151, &[]), &mut b).unwrap();
    let cmds = decode(&step.out);
    assert_eq!(ops(&cmds), [Opcode::Eta]);
    assert_eq!(cmds[0].tag, 0x5151);
    assert_eq!(Eta::decode(&cmds[0].payload).unwrap().run_str, "R");
    assert_eq!(b.eta_calls, 1);

    // Not finished yet: nothing.
    assert_eq!(s.poll(&mut b).unwrap().out, Vec::<u8>::new());
    b.finished = true;
    let step = s.poll(&mut b).unwrap();
    assert!(step.done);
    assert_eq!(
        ops(&decode(&step.out)),
        [Opcode::JobOpt, Opcode::Ts, Opcode::Gs, Opcode::Stop, Opcode::Quit]
    );
}

#[test]
fn eta_before_a_run_is_zero_not_silence() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let cmds = decode(&s.on_bytes(&cmd(Opcode::SendEta, 7, &[]), &mut b).unwrap().out);
    assert_eq!(cmds[0].tag, 7);
    assert_eq!(Eta::decode(&cmds[0].payload).unwrap(), Eta::default());
    assert_eq!(b.eta_calls, 0);
}

#[test]
fn client_quit_stops_a_run_whose_results_still_follow() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let mut bytes = job("[j]\n");
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    bytes.extend(cmd(Opcode::Quit, 0, &[]));
    let step = s.on_bytes(&bytes, &mut b).unwrap();
    assert!(!step.done);
    assert_eq!(b.stopped, 1);
    b.finished = true;
    assert!(s.poll(&mut b).unwrap().done);
}

#[test]
fn quit_when_idle_ends_the_session() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let step = s.on_bytes(&cmd(Opcode::Quit, 0, &[]), &mut b).unwrap();
    assert!(step.done);
    assert!(step.out.is_empty());
}

#[test]
fn closed_connection_stops_the_run() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let mut bytes = job("[j]\n");
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    s.on_bytes(&bytes, &mut b).unwrap();
    s.on_closed(&mut b);
    assert_eq!(b.stopped, 1);
    assert_eq!(s.state(), State::Done);
}

#[test]
fn protocol_errors_end_the_session_and_stop_the_run() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let mut bytes = job("[j]\n");
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    s.on_bytes(&bytes, &mut b).unwrap();
    let mut bad = cmd(Opcode::SendEta, 1, &[]);
    bad[0] = 96; // another version; header CRC fixed below
    let crc = fioserver::crc16(&bad[..20]);
    bad[20..22].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        s.on_bytes(&bad, &mut b),
        Err(Error::VersionMismatch { sent: 96, expected: 97 })
    );
    assert_eq!(b.stopped, 1);
    assert_eq!(s.state(), State::Done);
}

#[test]
fn truncated_probe_is_a_named_error() {
    let mut b = ScriptedBox::default();
    let mut s = Session::new();
    let r = s.on_bytes(&cmd(Opcode::Probe, 0, &[0; 10]), &mut b);
    assert_eq!(
        r,
        Err(Error::Truncated {
            what: "PROBE",
            need: 136,
            have: 10
        })
    );
}

#[test]
fn results_must_match_what_start_announced() {
    struct TwoReports(ScriptedBox);
    impl FioBox for TwoReports {
        fn probe(&mut self) -> ProbeFacts {
            self.0.probe()
        }
        fn command_line(&mut self, a: &[String]) -> Result<(), Refusal> {
            self.0.command_line(a)
        }
        fn job_file(&mut self, t: &str) -> Result<JobPlan, Refusal> {
            self.0.job_file(t)
        }
        fn run(&mut self) -> Result<(), Refusal> {
            self.0.run()
        }
        fn finished(&mut self) -> bool {
            true
        }
        fn eta(&mut self) -> Eta {
            self.0.eta()
        }
        fn stop(&mut self) {
            self.0.stop()
        }
        fn results(&mut self) -> RunResults {
            let mut r = self.0.results();
            r.jobs.push(r.jobs[0].clone());
            r
        }
    }
    let mut b = TwoReports(ScriptedBox::default());
    let mut s = Session::new();
    let mut bytes = job("[j]\n");
    bytes.extend(cmd(Opcode::Run, 0, &[]));
    assert!(matches!(
        s.on_bytes(&bytes, &mut b),
        Err(Error::LengthOutOfRange {
            what: "run results: job reports",
            len: 2,
            limit: 1
        })
    ));
}

#[test]
fn several_job_files_add_up_before_run_and_none_is_taken_after_it() {
    // A client given two job files sends both before RUN; each START carries the totals so far.
    struct Counting(ScriptedBox, u32);
    impl FioBox for Counting {
        fn probe(&mut self) -> ProbeFacts {
            self.0.probe()
        }
        fn command_line(&mut self, a: &[String]) -> Result<(), Refusal> {
            self.0.command_line(a)
        }
        fn job_file(&mut self, _: &str) -> Result<JobPlan, Refusal> {
            self.1 += 1;
            Ok(JobPlan {
                jobs: 2 * self.1,
                stat_outputs: self.1,
            })
        }
        fn run(&mut self) -> Result<(), Refusal> {
            self.0.run()
        }
        fn finished(&mut self) -> bool {
            false
        }
        fn eta(&mut self) -> Eta {
            self.0.eta()
        }
        fn stop(&mut self) {
            self.0.stop()
        }
        fn results(&mut self) -> RunResults {
            self.0.results()
        }
    }
    let mut b = Counting(ScriptedBox::default(), 0);
    let mut s = Session::new();
    let mut bytes = job("[a]\n");
    bytes.extend(job("[b]\n"));
    let step = s.on_bytes(&bytes, &mut b).unwrap();
    assert!(!step.done);
    let cmds = decode(&step.out);
    assert_eq!(ops(&cmds), [Opcode::Start, Opcode::Start]);
    let starts: Vec<Start> = cmds.iter().map(|c| Start::decode(&c.payload).unwrap()).collect();
    assert_eq!((starts[0].jobs, starts[0].stat_outputs), (2, 1));
    assert_eq!((starts[1].jobs, starts[1].stat_outputs), (4, 2));
    assert_eq!(s.state(), State::Ready);

    let mut bytes = cmd(Opcode::Run, 0, &[]);
    bytes.extend(job("[c]\n"));
    let step = s.on_bytes(&bytes, &mut b).unwrap();
    assert!(step.done);
    let cmds = decode(&step.out);
    assert_eq!(
        ops(&cmds),
        [Opcode::ServerStart, Opcode::Text, Opcode::Stop, Opcode::Quit]
    );
    assert!(
        Text::decode(&cmds[1].payload)
            .unwrap()
            .text
            .contains("a job file after RUN")
    );
    assert_eq!(b.1, 2, "the file sent after RUN never reached the box");
}
