//! The real fio client (`fio --client`, fio 3.33 as Debian 12 ships it) against a `Session`
//! served over a loopback TCP socket by a fake box with fixed results. Skipped, with a
//! printed SKIPPED line, only when no `fio` is installed.

use fioserver::stats::{CLAT, DirStats, DiskUtil, Eta, GroupRunStats, IoStat, PLAT_NR, ThreadStat, plat_index};
use fioserver::{FioBox, JobPlan, JobReport, ProbeFacts, Refusal, RunResults, Session};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const HOSTNAME: &str = "fakebox-7";
const REFUSAL: &str = "fakebox refuses: ioengine=libaio is not available here";

/// What the fake box saw, for the test to check afterwards.
#[derive(Default, Debug)]
struct Seen {
    job_text: String,
    command_line: Vec<String>,
    runs: u32,
    etas: u32,
}

struct FakeBox {
    seen: Arc<Mutex<Seen>>,
    /// Refuse any job file that contains this.
    refuse_marker: &'static str,
    /// How long a run lasts once started.
    run_for: Duration,
    started: Option<Instant>,
}

fn read_job(name: &str, groupid: u32, read_ios: u64, write_ios: u64) -> JobReport {
    let mut stat = ThreadStat {
        name: name.to_string(),
        groupid,
        ..ThreadStat::default()
    };
    let mut read = DirStats {
        io_bytes: read_ios * 4096,
        runtime_ms: 2000,
        total_ios: read_ios,
        clat: IoStat {
            min: 50,
            max: 300,
            samples: read_ios,
            mean: 100.0,
            s: 0.0,
        },
        ..DirStats::default()
    };
    // Every completion in the bucket of 100 ns: every percentile reads 100.
    let mut hist = vec![0u64; PLAT_NR];
    hist[plat_index(100)] = read_ios;
    read.plat[CLAT] = hist;
    stat.dirs[0] = read;
    if write_ios > 0 {
        stat.dirs[1] = DirStats {
            io_bytes: write_ios * 8192,
            runtime_ms: 1000,
            total_ios: write_ios,
            ..DirStats::default()
        };
    }
    stat.percentile_list = vec![50.0, 99.0];
    stat.total_submit = read_ios + write_ios;
    stat.total_complete = read_ios + write_ios;
    // Every I/O issued at depth 4 (map bucket 2) and completed in batches of 5-8 (bucket 2).
    stat.io_u_map[2] = read_ios + write_ios;
    stat.io_u_complete[2] = read_ios + write_ios;
    JobReport {
        stat,
        options: vec![("rw".to_string(), "randrw".to_string())],
    }
}

impl FioBox for FakeBox {
    fn probe(&mut self) -> ProbeFacts {
        ProbeFacts {
            hostname: HOSTNAME.to_string(),
            cpus: 12,
            version: "fio-3.33".to_string(),
        }
    }

    fn command_line(&mut self, args: &[String]) -> Result<(), Refusal> {
        self.seen.lock().unwrap().command_line = args.to_vec();
        Ok(())
    }

    fn job_file(&mut self, text: &str) -> Result<JobPlan, Refusal> {
        self.seen.lock().unwrap().job_text = text.to_string();
        if text.contains(self.refuse_marker) {
            return Err(REFUSAL.to_string());
        }
        Ok(JobPlan {
            jobs: 2,
            stat_outputs: 2,
        })
    }

    fn run(&mut self) -> Result<(), Refusal> {
        self.seen.lock().unwrap().runs += 1;
        self.started = Some(Instant::now());
        Ok(())
    }

    fn finished(&mut self) -> bool {
        self.started.is_some_and(|t| t.elapsed() >= self.run_for)
    }

    fn eta(&mut self) -> Eta {
        self.seen.lock().unwrap().etas += 1;
        let elapsed = self.started.map_or(0, |t| t.elapsed().as_secs());
        Eta {
            nr_running: 2,
            nr_threads: 2,
            elapsed_sec: elapsed,
            eta_sec: self.run_for.as_secs().saturating_sub(elapsed),
            rate: [3_072_000, 0, 0],
            iops: [750, 0, 0],
            run_str: "RR".to_string(),
            ..Eta::default()
        }
    }

    fn stop(&mut self) {}

    fn results(&mut self) -> RunResults {
        let group = GroupRunStats {
            max_run_ms: [2000, 1000, 0],
            min_run_ms: [2000, 1000, 0],
            max_bw: [2_048_000, 4_096_000, 0],
            min_bw: [1_024_000, 4_096_000, 0],
            io_bytes: [(1000 + 500) * 4096, 250 * 8192, 0],
            agg_bw: [3_072_000, 2_048_000, 0],
            ..GroupRunStats::default()
        };
        RunResults {
            jobs: vec![read_job("alpha", 0, 1000, 250), read_job("beta", 0, 500, 0)],
            groups: vec![group],
            global_options: vec![("ioengine".to_string(), "baremq".to_string())],
            disks: vec![DiskUtil {
                name: "nvme0n1".to_string(),
                ios: [1500, 250],
                sectors: [12000, 4000],
                ticks: [30, 40],
                io_ticks: 2000,
                time_in_queue: 70,
                msec: 2000,
                ..DiskUtil::default()
            }],
            error: 0,
        }
    }
}

/// Serves one connection with a fresh session; returns what the box saw.
fn serve_one(listener: TcpListener, refuse_marker: &'static str, run_for: Duration) -> thread::JoinHandle<Seen> {
    thread::spawn(move || {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut fake = FakeBox {
            seen: seen.clone(),
            refuse_marker,
            run_for,
            started: None,
        };
        let (mut stream, _) = listener.accept().expect("accept");
        // Wake up now and then to see whether the run has ended.
        stream.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut session = Session::new();
        let mut buf = [0u8; 777]; // an odd size, so commands arrive cut anywhere
        loop {
            assert!(Instant::now() < deadline, "the conversation did not end");
            let step = match stream.read(&mut buf) {
                Ok(0) => {
                    session.on_closed(&mut fake);
                    break;
                }
                Ok(n) => session.on_bytes(&buf[..n], &mut fake),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => session.poll(&mut fake),
                Err(e) => panic!("read: {e}"),
            };
            let step = step.expect("the real client speaks the protocol");
            stream.write_all(&step.out).unwrap();
            if step.done {
                break;
            }
        }
        drop(stream);
        drop(fake);
        Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
    })
}

fn fio_installed() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn job_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fioserver-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the real client against a fresh session; returns its output and what the box saw.
fn run_client(job: &PathBuf, format: &str, refuse_marker: &'static str, run_for: Duration) -> (Output, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = serve_one(listener, refuse_marker, run_for);
    let mut child = Command::new("timeout")
        .arg("60")
        .arg("fio")
        .arg(format!("--client=127.0.0.1,{port}"))
        .arg(format!("--output-format={format}"))
        .arg(job)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start fio");
    let out = {
        let mut stdout = String::new();
        let mut stderr = String::new();
        child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        let status = child.wait().unwrap();
        Output {
            status,
            stdout: stdout.into_bytes(),
            stderr: stderr.into_bytes(),
        }
    };
    let seen = server.join().expect("server thread");
    (out, seen)
}

const GOOD_JOB: &str = "[global]\nioengine=baremq\nsize=1m\n\n[alpha]\nrw=randrw\n\n[beta]\nrw=randread\n";

#[test]
fn real_fio_client_reports_the_fake_boxs_numbers_in_json() {
    if !fio_installed() {
        println!("SKIPPED: fio is not installed");
        return;
    }
    let job = job_file("good.fio", GOOD_JOB);
    let (out, seen) = run_client(&job, "json", "libaio", Duration::ZERO);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "fio failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert_eq!(seen.job_text, GOOD_JOB, "the job file reached the box intact");
    assert_eq!(seen.runs, 1);

    let start = stdout
        .find("\n{")
        .map(|i| i + 1)
        .or_else(|| stdout.starts_with('{').then_some(0));
    let json: serde_json::Value = serde_json::from_str(&stdout[start.expect("JSON in fio's output")..])
        .unwrap_or_else(|e| panic!("fio's JSON: {e}\n{stdout}"));
    assert_eq!(json["fio version"], "fio-3.33");
    assert_eq!(json["global options"]["ioengine"], "baremq");
    let stats = json["client_stats"].as_array().expect("client_stats");
    // Two jobs, and fio's own "All clients" sum, which it prints when START announces more
    // than one report.
    assert_eq!(stats.len(), 3, "{stdout}");
    let alpha = &stats[0];
    assert_eq!(alpha["jobname"], "alpha");
    assert_eq!(alpha["hostname"], "127.0.0.1");
    assert_eq!(alpha["job options"]["rw"], "randrw");
    assert_eq!(alpha["read"]["total_ios"], 1000);
    assert_eq!(alpha["read"]["io_bytes"], 1000 * 4096);
    assert_eq!(alpha["read"]["runtime"], 2000);
    // bw_bytes = 1000 * io_bytes / runtime; bw in KiB/s.
    assert_eq!(alpha["read"]["bw_bytes"], 1000u64 * 1000 * 4096 / 2000);
    assert_eq!(alpha["read"]["bw"], 1000u64 * 1000 * 4096 / 2000 / 1024);
    assert_eq!(alpha["read"]["iops"], 500.0);
    assert_eq!(alpha["read"]["clat_ns"]["min"], 50);
    assert_eq!(alpha["read"]["clat_ns"]["max"], 300);
    assert_eq!(alpha["read"]["clat_ns"]["mean"], 100.0);
    assert_eq!(alpha["read"]["clat_ns"]["percentile"]["50.000000"], 100);
    assert_eq!(alpha["read"]["clat_ns"]["percentile"]["99.000000"], 100);
    assert_eq!(alpha["write"]["total_ios"], 250);
    assert_eq!(alpha["write"]["io_bytes"], 250 * 8192);
    assert_eq!(alpha["iodepth_level"]["4"], 100.0);
    assert_eq!(alpha["iodepth_complete"]["8"], 100.0);
    let beta = &stats[1];
    assert_eq!(beta["jobname"], "beta");
    assert_eq!(beta["read"]["total_ios"], 500);
    assert_eq!(beta["write"]["total_ios"], 0);
    assert_eq!(stats[2]["jobname"], "All clients");
    assert_eq!(stats[2]["read"]["total_ios"], 1500);
    let disks = json["disk_util"].as_array().expect("disk_util");
    assert_eq!(disks.len(), 1);
    assert_eq!(disks[0]["name"], "nvme0n1");
    assert_eq!(disks[0]["read_ios"], 1500);
    assert_eq!(disks[0]["write_ios"], 250);
}

#[test]
fn real_fio_client_prints_probe_and_group_stats_in_normal_output() {
    if !fio_installed() {
        println!("SKIPPED: fio is not installed");
        return;
    }
    let job = job_file("good-normal.fio", GOOD_JOB);
    let (out, _) = run_client(&job, "normal", "libaio", Duration::ZERO);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fio failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The PROBE reply, as the client prints it.
    assert!(
        stdout.contains("hostname=fakebox-7, be=0, 64-bit, os=Linux, arch=x86-64, fio=fio-3.33, flags=0"),
        "{stdout}"
    );
    // TS, as the client prints it.
    assert!(stdout.contains("alpha: (groupid=0, jobs=1): err= 0"), "{stdout}");
    assert!(
        stdout.contains("read: IOPS=500, BW=2000KiB/s (2048kB/s)(4000KiB/2000msec)"),
        "{stdout}"
    );
    assert!(stdout.contains("|  50th=[  100],  99th=[  100]"), "{stdout}");
    assert!(stdout.contains("issued rwts: total=1000,250,0,0"), "{stdout}");
    // GS: the group's read line, from the group's byte and bandwidth totals.
    assert!(stdout.contains("Run status group 0 (all jobs):"), "{stdout}");
    assert!(
        stdout.contains("READ: bw=3000KiB/s (3072kB/s), 1000KiB/s-2000KiB/s (1024kB/s-2048kB/s), io=6000KiB (6144kB), run=2000-2000msec"),
        "{stdout}"
    );
    assert!(stdout.contains("WRITE: bw=2000KiB/s (2048kB/s)"), "{stdout}");
    // DU.
    assert!(
        stdout.contains("nvme0n1: ios=1500/250, merge=0/0, ticks=30/40, in_queue=70, util=100.00%"),
        "{stdout}"
    );
}

#[test]
fn real_fio_client_exits_with_failure_on_a_refused_job() {
    if !fio_installed() {
        println!("SKIPPED: fio is not installed");
        return;
    }
    let job = job_file("refused.fio", "[bad]\nioengine=libaio\nrw=read\n");
    let (out, seen) = run_client(&job, "json", "libaio", Duration::ZERO);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a refused job must fail the client\n{stdout}\n{stderr}"
    );
    assert_eq!(seen.runs, 0, "a refused job never runs");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains(&format!("<{HOSTNAME}> {REFUSAL}")),
        "the refusal reaches the client:\n{all}"
    );
    assert!(all.contains("exited with error 22"), "{all}");
}

#[test]
fn real_fio_client_gets_etas_during_a_run_that_lasts() {
    if !fio_installed() {
        println!("SKIPPED: fio is not installed");
        return;
    }
    let job = job_file("slow.fio", GOOD_JOB);
    let (out, seen) = run_client(&job, "json", "libaio", Duration::from_millis(3500));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fio failed: {stdout}\n{stderr}");
    // The client asks about once a second; each answer matched its request's tag, or the
    // client would have said "unable to find matching tag" or timed out.
    assert!(seen.etas >= 2, "ETA requests answered: {}", seen.etas);
    let all = format!("{stdout}{stderr}");
    assert!(!all.contains("tag") && !all.contains("timeout"), "{all}");
    assert!(stdout.contains("\"jobname\" : \"alpha\""), "{stdout}");
}
