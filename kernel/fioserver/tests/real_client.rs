//! The real fio client (`fio --client`, fio 3.33 as Debian 12 ships it) against a `Session`
//! served over a loopback TCP socket by a fake box with fixed results. Skipped, with a
//! printed SKIPPED line, only when no `fio` is installed.

use fioserver::stats::{CLAT, DirStats, DiskUtil, Eta, GroupRunStats, IoStat, LAT, PLAT_NR, ThreadStat, plat_index};
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

/// Distinctive values in every other field of alpha's report that the client shows, so that a
/// field at the wrong offset shows up as a wrong number.
fn with_every_field(mut job: JobReport) -> JobReport {
    let t = &mut job.stat;
    t.description = "every field set".to_string();
    t.pid = 4242;
    let read = &mut t.dirs[0];
    read.short_ios = 2;
    read.drop_ios = 1;
    // stddev = sqrt(s / (samples - 1)).
    read.clat.s = 999.0 * 16.0;
    read.slat = IoStat {
        min: 5,
        max: 15,
        samples: 1000,
        mean: 10.0,
        s: 999.0 * 4.0,
    };
    read.lat = IoStat {
        min: 60,
        max: 320,
        samples: 1000,
        mean: 110.0,
        s: 999.0 * 9.0,
    };
    read.bw = IoStat {
        min: 1900,
        max: 2100,
        samples: 20,
        mean: 2000.0,
        s: 19.0 * 100.0,
    };
    read.iops = IoStat {
        min: 450,
        max: 550,
        samples: 20,
        mean: 500.0,
        s: 19.0 * 25.0,
    };
    let mut lat_hist = vec![0u64; PLAT_NR];
    lat_hist[plat_index(110)] = 1000;
    read.plat[LAT] = lat_hist;
    t.lat_percentiles = true;
    t.dirs[2] = DirStats {
        io_bytes: 40960,
        runtime_ms: 100,
        total_ios: 10,
        ..DirStats::default()
    };
    t.sync_total_ios = 9;
    t.sync = IoStat {
        min: 1000,
        max: 3000,
        samples: 9,
        mean: 2000.0,
        s: 0.0,
    };
    let mut sync_hist = vec![0u64; PLAT_NR];
    sync_hist[plat_index(2000)] = 9;
    t.sync_plat = sync_hist;
    t.total_run_time_ms = 2000;
    t.usr_time = 500;
    t.sys_time = 250;
    t.ctx = 1234;
    t.majf = 3;
    t.minf = 456;
    // 1260 I/Os in all (1000 read, 250 write, 10 trim).
    t.io_u_map = [0, 0, 1260, 0, 0, 0, 0];
    t.io_u_submit = [0, 0, 0, 0, 0, 0, 0];
    t.io_u_submit[1] = t.total_submit;
    t.io_u_lat_n[5] = 630;
    t.io_u_lat_u[9] = 315;
    t.io_u_lat_m[11] = 126;
    t.continue_on_error = 1;
    t.total_err_count = 7;
    t.first_error = 5;
    t.latency_depth = 4;
    t.latency_target = 500_000;
    t.latency_percentile = 99.5;
    t.latency_window = 1_000_000;
    t.cachehit = 3;
    t.cachemiss = 1;
    job
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
            rate: [3000, 0, 0],
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
            jobs: vec![
                with_every_field(read_job("alpha", 0, 1000, 250)),
                read_job("beta", 0, 500, 0),
            ],
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
fn run_client(
    job: &PathBuf,
    format: &str,
    refuse_marker: &'static str,
    run_for: Duration,
    extra_args: &[&str],
) -> (Output, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = serve_one(listener, refuse_marker, run_for);
    let mut child = Command::new("timeout")
        .arg("60")
        .arg("fio")
        .args(extra_args)
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
    let (out, seen) = run_client(&job, "json", "libaio", Duration::ZERO, &[]);
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
    assert_eq!(alpha["iodepth_submit"]["4"], 100.0);
    let read = &alpha["read"];
    assert_eq!(read["short_ios"], 2);
    assert_eq!(read["drop_ios"], 1);
    assert_eq!(read["clat_ns"]["stddev"], 4.0);
    assert_eq!(read["clat_ns"]["N"], 1000);
    assert_eq!(read["slat_ns"]["min"], 5);
    assert_eq!(read["slat_ns"]["max"], 15);
    assert_eq!(read["slat_ns"]["mean"], 10.0);
    assert_eq!(read["slat_ns"]["stddev"], 2.0);
    assert_eq!(read["lat_ns"]["min"], 60);
    assert_eq!(read["lat_ns"]["max"], 320);
    assert_eq!(read["lat_ns"]["mean"], 110.0);
    assert_eq!(read["lat_ns"]["stddev"], 3.0);
    assert_eq!(read["lat_ns"]["percentile"]["50.000000"], 110);
    assert_eq!(read["bw_min"], 1900);
    assert_eq!(read["bw_max"], 2100);
    assert_eq!(read["bw_mean"], 2000.0);
    assert_eq!(read["bw_dev"], 10.0);
    assert_eq!(read["bw_samples"], 20);
    // The job's mean against the group's aggregate (3072000 B/s = 3000 KiB/s).
    let bw_agg = read["bw_agg"].as_f64().unwrap();
    assert!((bw_agg - 2000.0 * 100.0 / 3000.0).abs() < 1e-3, "{bw_agg}");
    assert_eq!(read["iops_min"], 450);
    assert_eq!(read["iops_max"], 550);
    assert_eq!(read["iops_mean"], 500.0);
    assert_eq!(read["iops_stddev"], 5.0);
    assert_eq!(read["iops_samples"], 20);
    assert_eq!(read["cachehit"], 75.0);
    assert_eq!(alpha["trim"]["total_ios"], 10);
    assert_eq!(alpha["trim"]["io_bytes"], 40960);
    assert_eq!(alpha["sync"]["total_ios"], 9);
    assert_eq!(alpha["sync"]["lat_ns"]["min"], 1000);
    assert_eq!(alpha["sync"]["lat_ns"]["max"], 3000);
    assert_eq!(alpha["sync"]["lat_ns"]["mean"], 2000.0);
    assert_eq!(alpha["sync"]["lat_ns"]["percentile"]["50.000000"], 2008);
    assert_eq!(alpha["job_runtime"], 2000);
    assert_eq!(alpha["usr_cpu"], 25.0);
    assert_eq!(alpha["sys_cpu"], 12.5);
    assert_eq!(alpha["ctx"], 1234);
    assert_eq!(alpha["majf"], 3);
    assert_eq!(alpha["minf"], 456);
    assert_eq!(alpha["latency_ns"]["100"], 50.0);
    assert_eq!(alpha["latency_us"]["1000"], 25.0);
    assert_eq!(alpha["latency_ms"][">=2000"], 10.0);
    assert_eq!(alpha["total_err"], 7);
    assert_eq!(alpha["first_error"], 5);
    assert_eq!(alpha["latency_depth"], 4);
    assert_eq!(alpha["latency_target"], 500_000);
    assert_eq!(alpha["latency_percentile"], 99.5);
    assert_eq!(alpha["latency_window"], 1_000_000);
    assert_eq!(alpha["desc"], "every field set");
    assert_eq!(alpha["error"], 0);
    assert_eq!(alpha["groupid"], 0);
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
    let (out, _) = run_client(&job, "normal", "libaio", Duration::ZERO, &[]);
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
    for line in [
        "alpha: (groupid=0, jobs=1): err= 0: pid=4242:",
        "Description  : [every field set]",
        "read: IOPS=500, BW=2000KiB/s (2048kB/s)(4000KiB/2000msec); Cachehit=75.00%",
        "slat (nsec): min=5, max=15, avg=10.00, stdev= 2.00",
        "clat (nsec): min=50, max=300, avg=100.00, stdev= 4.00",
        "lat (nsec): min=60, max=320, avg=110.00, stdev= 3.00",
        "bw (  KiB/s): min= 1900, max= 2100, per=66.67%, avg=2000.00, stdev=10.00, samples=20",
        "iops        : min=  450, max=  550, avg=500.00, stdev= 5.00, samples=20",
        "trim: IOPS=100, BW=400KiB/s (410kB/s)(40.0KiB/100msec)",
        "sync (nsec): min=1000, max=3000, avg=2000.00, stdev= 0.00",
        // 2000 ns falls in the bucket 2000..2015; fio reports its middle.
        "|  50th=[ 2008],  99th=[ 2008]",
        "cpu          : usr=25.00%, sys=12.50%, ctx=1234, majf=3, minf=456",
        "issued rwts: total=1000,250,10,9 short=2,0,0,0 dropped=1,0,0,0",
        "errors    : total=7, first_error=5/<Input/output error>",
        "latency   : target=500000, window=1000000, percentile=99.50%, depth=4",
        "issued rwts: total=500,0,0,0 short=0,0,0,0 dropped=0,0,0,0",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
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
    let (out, seen) = run_client(&job, "json", "libaio", Duration::ZERO, &[]);
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
    let (out, seen) = run_client(
        &job,
        "normal",
        "libaio",
        Duration::from_millis(3500),
        &["--eta=always", "--eta-newline=1"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fio failed: {stdout}\n{stderr}");
    // The client asks about once a second; each answer matched its request's tag, or the
    // client would have said "unable to find matching tag" or timed out.
    assert!(seen.etas >= 2, "ETA requests answered: {}", seen.etas);
    let all = format!("{stdout}{stderr}");
    assert!(!all.contains("tag") && !all.contains("timeout"), "{all}");
    // The ETA line: running jobs, open files, run string, read rate (KiB/s; the client shows
    // its sum of all servers' ETAs without their units), read IOPS, time left.
    assert!(stdout.contains("Jobs: 2 (f=0): [RR]["), "{stdout}");
    assert!(stdout.contains("[r=3000k][r=750 IOPS][eta 00m:0"), "{stdout}");
    assert!(stdout.contains("alpha: (groupid=0, jobs=1)"), "{stdout}");
}
