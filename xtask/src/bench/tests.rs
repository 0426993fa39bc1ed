//! Tests of the whole host side against console text written by the workload crate's own report
//! code (see `fake.rs`). No test needs QEMU.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::fake::{SimDevice, boot_console, job_json_line};
use super::matrix::{self, BootPlan, Completion, DeviceKind, Quiesce};
use super::results::{self, BootResult, Record, RunInfo};
use super::{Options, plots, summary};

const FAST: SimDevice = SimDevice {
    latency_ns: 20_000,
    fail_every_lba: 0,
};

fn run_info() -> RunInfo {
    RunInfo {
        matrix: "quick".into(),
        accel: "tcg".into(),
        runtime_ms: 5,
    }
}

/// The quick matrix's boots with a 5 ms runtime (simulated time).
fn quick_boots() -> Vec<BootPlan> {
    matrix::find("quick").unwrap().boots(5).unwrap()
}

fn collect(boot: &BootPlan, console: &str) -> BootResult {
    results::collect_boot(&run_info(), boot, 0, "target/bench/logs/x.log", console, Ok(()))
}

fn quick_records() -> Vec<Record> {
    quick_boots()
        .iter()
        .flat_map(|boot| {
            let result = collect(boot, &boot_console(boot, &FAST));
            assert!(result.ok(), "{:?}", result.boot_problems);
            result.records
        })
        .collect()
}

/// A fresh, empty folder under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "xtask-bench-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn real_json_lines_parse_and_match_their_points() {
    let records = quick_records();
    assert_eq!(records.len(), matrix::find("quick").unwrap().points().len());
    for r in &records {
        let rep = &r.report;
        assert_eq!(rep.job.name, r.point.job_name());
        assert_eq!(rep.device.name, r.point.device.device_name());
        assert_eq!(rep.job.bs, u64::from(r.point.bs));
        assert_eq!(rep.job.cpus.len() as u32, r.point.cpus);
        assert!(rep.ios > 0 && rep.iops > 0, "{}", rep.job.name);
        assert_eq!(rep.bytes, rep.ios * u64::from(r.point.bs));
        // The simulated device takes at least 20 us; percentiles are ordered.
        let l = &rep.lat_ns;
        assert!(l.min >= 20_000, "{l:?}");
        assert!(l.p50 <= l.p99 && l.p99 <= l.p99_9 && l.p99_9 <= l.max, "{l:?}");
        assert_eq!(rep.per_cpu.iter().map(|c| c.ios).sum::<u64>(), rep.ios);
        assert_eq!(
            rep.counter_total("irqs"),
            Some(rep.per_cpu.iter().map(|c| c.ios / 2).sum())
        );
        assert_eq!(rep.counter_total("ipis"), Some(3 * u64::from(r.point.cpus)));
        assert_eq!(rep.totals["submitted"], rep.ios);
        let locks = if r.point.quiesce == Quiesce::Locked { rep.ios } else { 0 };
        assert_eq!(rep.counter_total("hot_path_locks"), Some(locks));
        assert_eq!(rep.verify.result, "off");
        // The raw object is kept whole, including fields the typed report does not read.
        assert_eq!(r.raw["lat_ns"]["p99_99"].as_u64(), Some(l.p99_99));
        assert!(r.raw["job"]["seed"].is_u64());
    }
    // md0 allows 16 per CPU: the qd 32 job ran capped, and the record still matches the point asked.
    let capped = records
        .iter()
        .find(|r| r.point.device == DeviceKind::MegasasGen2 && r.point.iodepth == 32)
        .unwrap();
    assert_eq!(
        (capped.report.job.iodepth, capped.report.job.iodepth_requested),
        (16, 32)
    );
    assert!(
        capped.report.warnings[0].contains("capped"),
        "{:?}",
        capped.report.warnings
    );
    assert!(capped.ok());
}

#[test]
fn job_errors_fail_the_job_and_are_named() {
    let boot = &quick_boots()[0];
    let failing = SimDevice {
        latency_ns: 20_000,
        fail_every_lba: 8 * 64,
    };
    let result = collect(boot, &boot_console(boot, &failing));
    assert!(result.boot_problems.is_empty(), "{:?}", result.boot_problems);
    assert!(!result.ok());
    for r in &result.records {
        assert!(r.report.errors > 0);
        assert!(
            r.problems
                .iter()
                .any(|p| p == &format!("{} I/O errors", r.report.errors)),
            "{:?}",
            r.problems
        );
        assert!(r.problems.iter().any(|p| p == "kernel verdict 'fail'"));
    }
}

#[test]
fn missing_broken_unexpected_and_duplicate_lines_are_boot_problems() {
    let boot = &quick_boots()[0];
    let full = boot_console(boot, &FAST);
    let json_lines: Vec<&str> = full.lines().filter(|l| l.starts_with(results::JSON_PREFIX)).collect();
    assert_eq!(json_lines.len(), boot.jobs.len());

    // Drop the second job's line.
    let missing: String = full
        .lines()
        .filter(|l| *l != json_lines[1])
        .map(|l| format!("{l}\n"))
        .collect();
    let result = collect(boot, &missing);
    assert_eq!(result.records.len(), boot.jobs.len() - 1);
    assert_eq!(
        result.boot_problems,
        [format!(
            "no BAREMQ-JSON line for job '{}' ({})",
            boot.jobs[1].name, boot.jobs[1].point
        )]
    );

    // A truncated line (a console cut mid-write) and a duplicate.
    let cut = &json_lines[0][..json_lines[0].len() / 2];
    let broken = format!("{full}{cut}\n{}\n", json_lines[2]);
    let result = collect(boot, &broken);
    assert_eq!(result.records.len(), boot.jobs.len());
    assert_eq!(result.boot_problems.len(), 2, "{:?}", result.boot_problems);
    assert!(result.boot_problems[0].contains("bad BAREMQ-JSON line: not JSON"));
    assert!(result.boot_problems[1].contains(&format!("job '{}' was reported twice", boot.jobs[2].name)));

    // A line for a job nobody asked for: run a job of the other boot.
    let mut words = boot.job_words();
    let at = words
        .iter()
        .position(|w| *w == format!("job={}", boot.jobs[0].name))
        .unwrap();
    words[at] = "job=stray".into();
    let stray = job_json_line(&words, 0, &FAST, &[0, 1]);
    let result = collect(boot, &format!("{stray}{full}"));
    assert_eq!(
        result.boot_problems,
        ["the kernel reported job 'stray', which was not asked for"]
    );

    // Valid JSON that is not a job report.
    let result = collect(boot, &format!("BAREMQ-JSON: {{\"hello\": 1}}\n{full}"));
    assert!(
        result.boot_problems[0].contains("not a job report"),
        "{:?}",
        result.boot_problems
    );
}

#[test]
fn a_failed_boot_keeps_its_records_but_fails() {
    let boot = &quick_boots()[0];
    let console = boot_console(boot, &FAST).replace("BAREMQ: SUCCESS", "");
    let verdict = crate::scenario::judge(&crate::scenario::Boot::default(), None, &console);
    let result = results::collect_boot(&run_info(), boot, 0, "l", &console, verdict);
    assert_eq!(result.records.len(), boot.jobs.len());
    assert!(!result.ok());
    assert!(
        result.boot_problems[0].starts_with("boot failed: QEMU exit status none"),
        "{:?}",
        result.boot_problems
    );
}

#[test]
fn a_kernel_that_ran_other_parameters_is_caught() {
    let boot = &quick_boots()[0];
    let first = &boot.jobs[0];
    // The job that differs from the first only in its CPUs.
    let other = boot
        .jobs
        .iter()
        .position(|j| j.point.cpus == 2 && j.point.iodepth == first.point.iodepth)
        .unwrap();
    // Ask for the first job but let the "kernel" run the other's parameters under its name.
    let mut words = boot.job_words();
    let name_word = |name: &str| format!("job={name}");
    let at_first = words.iter().position(|w| *w == name_word(&first.name)).unwrap();
    let at_other = words
        .iter()
        .position(|w| *w == name_word(&boot.jobs[other].name))
        .unwrap();
    words[at_first] = "job=renamed".into();
    words[at_other] = name_word(&first.name);
    let line = job_json_line(&words, other, &FAST, &[0, 1]);
    let result = collect(boot, &line);
    let r = &result.records[0];
    assert_eq!(r.point, first.point);
    assert_eq!(r.problems, ["cpus: asked [0], kernel ran [0, 1]"]);
    assert!(!result.ok());
}

#[test]
fn results_json_round_trips() {
    let records = quick_records();
    let text = results::to_json(&records).unwrap();
    let back = results::from_json(&text).unwrap();
    assert_eq!(back, records);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let first = &value.as_array().unwrap()[0];
    assert_eq!(first["point"]["device"], "null");
    assert_eq!(first["point"]["completion"], "irq");
    assert_eq!(first["machine_cpus"], 2);
    assert_eq!(first["ok"], true);
    assert!(
        results::from_json("{}")
            .unwrap_err()
            .contains("not a bench result array")
    );
}

#[test]
fn csv_has_one_row_per_job_with_the_reported_figures() {
    let mut records = quick_records();
    records[0].problems.push("odd, \"quoted\" problem".into());
    let csv = results::to_csv(&records);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), records.len() + 1);
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(&header[..results::CSV_COLUMNS.len()], results::CSV_COLUMNS);
    assert_eq!(
        &header[results::CSV_COLUMNS.len()..],
        [
            "floor_qd1_iops",
            "floor_qd1_p50_ns",
            "floor_qd32_iops",
            "floor_qd32_p50_ns",
            "hot_path_locks",
            "ipis",
            "irqs",
            "submitted"
        ]
    );
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    assert!(lines[1].contains(",\"odd, \"\"quoted\"\" problem\","), "{}", lines[1]);
    for (line, r) in lines[2..].iter().zip(&records[1..]) {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), header.len(), "{line}");
        assert_eq!(fields[col("iops")], r.report.iops.to_string());
        assert_eq!(fields[col("device")], r.report.device.name);
        assert_eq!(fields[col("iodepth")], r.point.iodepth.to_string());
        assert_eq!(fields[col("iodepth_run")], r.report.job.iodepth.to_string());
        let p99: f64 = fields[col("lat_p99_us")].parse().unwrap();
        assert!((p99 * 1000.0 - r.report.lat_ns.p99 as f64).abs() < 0.5, "{p99}");
        let mb: f64 = fields[col("bw_mb_s")].parse().unwrap();
        assert!((mb * 1e6 - r.report.bw_bytes as f64).abs() <= 5_000.0, "{mb}");
        assert_eq!(fields[col("irqs")], r.report.counter_total("irqs").unwrap().to_string());
        assert_eq!(fields[col("submitted")], r.report.ios.to_string());
        // The floor figures of the controllers' jobs; none for the null device, nor for the
        // Fusion drive, whose driver measures no floor.
        let floor = r
            .report
            .totals
            .get("floor_qd1_iops")
            .map_or(String::new(), u64::to_string);
        assert_eq!(fields[col("floor_qd1_iops")], floor);
        assert_eq!(
            floor.is_empty(),
            matches!(r.point.device, DeviceKind::Null | DeviceKind::Fusion),
            "{line}"
        );
        assert_eq!(fields[col("ok")], "true");
    }
    assert_eq!(results::micros(1_234_567), "1234.567");
    assert_eq!(results::megabytes(123_456_789), "123.46");
}

#[test]
fn plots_are_svg_files_with_the_expected_series() {
    let records = quick_records();
    let dir = temp_dir("plots");
    let base = matrix::find("quick").unwrap().base;
    let files = plots::write_all(&records, &base, &dir).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "iops_vs_iodepth.svg",
            "latency_percentiles.svg",
            "cpu_scaling.svg",
            "completion_policy.svg"
        ]
    );
    let texts = |name: &str| {
        let svg = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{name}"
        );
        assert_eq!(svg.matches("<svg").count(), 1, "{name}");
        svg_texts(&svg)
    };
    let has_all = |name: &str, wanted: &[&str]| {
        let found = texts(name);
        for w in wanted {
            assert!(found.iter().any(|t| t == w), "{name} lacks text {w:?}: {found:?}");
        }
    };
    has_all(
        "iops_vs_iodepth.svg",
        &[
            "null0, 1 CPU",
            "null0, 2 CPUs",
            "md0 (gen2), 1 CPU",
            "md0 (gen2), 2 CPUs",
            "1",
            "8",
            "32",
            "iodepth per CPU (asked)",
        ],
    );
    has_all(
        "latency_percentiles.svg",
        &["null0, qd 8", "md0 (gen2), qd 32", "p50", "p99.9", "p99.99"],
    );
    has_all(
        "completion_policy.svg",
        &[
            "null0, quiesce=lockfree",
            "md0 (gen2), quiesce=locked",
            "irq",
            "remote",
            "poll",
        ],
    );
    has_all("cpu_scaling.svg", &["null0, qd 1", "md0 (gen2), qd 32", "1", "2"]);
    for name in &names {
        let svg = std::fs::read_to_string(dir.join(name)).unwrap();
        // One polyline per series, plus the legend's sample lines.
        assert!(svg.matches("<polyline").count() >= 4, "{name} draws its lines");
    }

    // The chart data themselves: one line per (device, CPUs), values from the reports.
    let charts = plots::charts(&records, &base);
    let iops_chart = &charts[0];
    assert_eq!(iops_chart.categories, ["1", "8", "32"]);
    assert_eq!(
        iops_chart.series.len(),
        8,
        "null0, md0, nvme0n1 and mf0 on 1 and 2 CPUs"
    );
    assert_eq!(iops_chart.series[7].name, "mf0 (Invader), 2 CPUs");
    let null_2cpu = records
        .iter()
        .find(|r| {
            r.point.device == DeviceKind::Null
                && r.point.cpus == 2
                && r.point.iodepth == 32
                && r.point.completion == Completion::Irq
                && r.point.quiesce == Quiesce::LockFree
        })
        .unwrap();
    assert_eq!(iops_chart.series[1].name, "null0, 2 CPUs");
    assert_eq!(iops_chart.series[1].points[2], (2, null_2cpu.report.iops as f64));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The text content of every `<text>` element.
fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        let open_end = start + rest[start..].find('>').unwrap() + 1;
        let close = open_end + rest[open_end..].find("</text>").unwrap();
        out.push(rest[open_end..close].trim().to_string());
        rest = &rest[close..];
    }
    out
}

#[test]
fn a_run_without_clean_data_still_draws_every_plot() {
    let dir = temp_dir("empty");
    let files = plots::write_all(&[], &matrix::find("quick").unwrap().base, &dir).unwrap();
    assert_eq!(files.len(), 4);
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    assert!(svg.contains("no clean measurement"), "{svg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ratios_compare_jobs_that_differ_in_one_parameter() {
    let mut records = quick_records();
    let find = |records: &[Record], device, completion, quiesce, cpus, qd| {
        records
            .iter()
            .position(|r| {
                r.point.device == device
                    && r.point.completion == completion
                    && r.point.quiesce == quiesce
                    && r.point.cpus == cpus
                    && r.point.iodepth == qd
            })
            .unwrap()
    };
    let lf = find(&records, DeviceKind::Null, Completion::Remote, Quiesce::LockFree, 2, 8);
    let lk = find(&records, DeviceKind::Null, Completion::Remote, Quiesce::Locked, 2, 8);
    records[lf].report.iops = 300;
    records[lk].report.iops = 200;
    records[lf].report.lat_ns.p99 = 1_000;
    records[lk].report.lat_ns.p99 = 4_000;
    let comparisons = summary::comparisons(&records);
    let titles: Vec<&str> = comparisons.iter().map(|c| c.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "lock-free vs locked quiesce",
            "remote vs irq completion",
            "local vs irq completion",
            "poll vs irq completion",
            "adaptive vs irq completion",
            "adaptive vs poll completion",
            "2 CPUs vs 1 CPU",
            "md0 (gen2) vs null0",
            "nvme0n1 vs null0",
            "mf0 (Invader) vs null0"
        ]
    );
    // 4 policies x 4 devices have both quiesce policies.
    assert_eq!(comparisons[0].pairs.len(), 16);
    let pair = comparisons[0]
        .pairs
        .iter()
        .find(|p| p.context == "null0 randread 4k qd8 2cpu remote")
        .unwrap();
    assert_eq!(pair.iops, (300, 200));
    assert!((pair.iops_ratio() - 1.5).abs() < 1e-12);
    assert!((pair.p99_ratio() - 0.25).abs() < 1e-12);
    // remote vs irq: one pair per device and quiesce policy.
    assert_eq!(comparisons[1].pairs.len(), 8);
    // poll vs irq: those, plus md0 at qd 1 and 32 on 1 CPU.
    assert_eq!(comparisons[3].pairs.len(), 10);
    // md0's adaptive mode beside irq and beside poll, at qd 1 and 32.
    for c in &comparisons[4..6] {
        let contexts: Vec<&str> = c.pairs.iter().map(|p| p.context.as_str()).collect();
        assert_eq!(
            contexts,
            [
                "md0 (gen2) randread 4k qd1 1cpu lockfree",
                "md0 (gen2) randread 4k qd32 1cpu lockfree"
            ],
            "{}",
            c.title
        );
    }
    // 2 vs 1 CPU: three queue depths per device.
    assert_eq!(comparisons[6].pairs.len(), 12);
    assert_eq!(
        comparisons[7].pairs.len(),
        13,
        "every point of the quick matrix but md0's adaptive and 1-CPU poll ones has both devices"
    );
    assert_eq!(comparisons[8].pairs.len(), 13, "and every such point has nvme0n1 too");
    assert_eq!(comparisons[9].pairs.len(), 13, "and mf0 (Fusion)");
    assert!(
        comparisons[9]
            .pairs
            .iter()
            .any(|p| p.context == "randread 4k qd8 2cpu remote locked")
    );

    // A failed job drops out of every comparison.
    records[lk].problems.push("3 I/O errors".into());
    assert_eq!(summary::comparisons(&records)[0].pairs.len(), 15);

    let text = summary::render(&records);
    assert!(text.contains("lock-free vs locked quiesce"));
    assert!(text.contains("geometric mean over 15 pairs"));
    assert!(text.contains("FAILED: 3 I/O errors"));
    for column in ["irqs/io", "ipis/io", "locks/io"] {
        assert!(text.contains(column), "summary lacks {column}:\n{text}");
    }
    assert!(text.contains(" 32>16 "), "capped queue depth shown");
    let csv = summary::ratios_csv(&records);
    // The failed job was in five pairs: quiesce, remote vs irq, and beside md0, nvme0n1 and mf0.
    let before: usize = comparisons.iter().map(|c| c.pairs.len()).sum();
    assert_eq!(csv.lines().count(), 1 + before - 5);
    assert!(csv.contains("lock-free vs locked quiesce,md0 (gen2) randread 4k qd8 2cpu irq,"));
}

#[test]
fn geometric_mean_of_ratios() {
    let c = summary::Comparison {
        title: "t".into(),
        pairs: vec![
            summary::Pair {
                context: "a".into(),
                iops: (200, 100),
                p99_ns: (1, 4),
            },
            summary::Pair {
                context: "b".into(),
                iops: (100, 200),
                p99_ns: (1, 1),
            },
            summary::Pair {
                context: "c".into(),
                iops: (100, 0),
                p99_ns: (1, 1),
            },
        ],
    };
    let (iops, p99) = c.geomean().unwrap();
    assert!((iops - 1.0).abs() < 1e-12, "{iops}: the NaN pair is left out");
    assert!((p99 - 0.25f64.powf(1.0 / 3.0)).abs() < 1e-12, "{p99}");
}

#[test]
fn options_parse_and_reject_with_specific_messages() {
    let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let o = Options::parse(&args("--matrix full --runtime 500ms --kvm --debug --list")).unwrap();
    assert_eq!(o.matrix, "full");
    assert_eq!(o.runtime_ms, Some(500));
    assert!(o.list && o.debug && o.accel == crate::qemu::Accel::Kvm);
    let d = Options::parse(&[]).unwrap();
    assert_eq!(d.matrix, "quick");
    assert_eq!(d.runtime_ms, None);
    // The work-per-I/O step is opt-in: the default quick bench stays fast.
    assert!(!d.ipio);
    assert!(Options::parse(&args("--ipio")).unwrap().ipio);
    assert!(
        Options::parse(&args("--matrix"))
            .unwrap_err()
            .contains("--matrix needs a value")
    );
    assert!(
        Options::parse(&args("--bogus"))
            .unwrap_err()
            .contains("unknown option '--bogus'")
    );
    assert!(Options::parse(&args("--runtime 0s")).unwrap_err().contains("'0s'"));
}

#[test]
fn list_shows_every_matrix_and_the_boots() {
    let quick = matrix::find("quick").unwrap();
    let text = super::list_text(quick, &quick.boots(2000).unwrap());
    for m in matrix::MATRICES {
        assert!(text.contains(m.name));
    }
    assert!(
        text.contains("matrix 'quick': 56 jobs x 2s = 112 s of measurement, plus boot time, in 5 boots"),
        "{text}"
    );
    assert!(text.contains("kernel: null.size=1g device=null0 runtime=2000ms job=rr4k-qd1-c1-irq-lf"));
    assert!(text.contains("kernel: nvme.floor=2000 device=nvme0n1 runtime=2000ms job=rr4k-qd1-c1-irq-lf"));
    assert!(text.contains("boot  4: fusion -smp 2"), "{text}");
    assert!(text.contains("kernel: device=mf0 runtime=2000ms job=rr4k-qd1-c1-irq-lf"));
    assert!(text.contains(
        "kernel: megasas.floor=2000 megasas.irq_poll=on device=md0 runtime=2000ms job=rr4k-qd1-c1-adaptive-lf rw=randread bs=4k iodepth=1 cpus=0 completion=irq"
    ));
}

#[test]
fn repeated_runs_are_summarised_by_medians() {
    let first = quick_records();
    let mut all = first.clone();
    for (pass, factor) in [(1, 2), (2, 4)] {
        all.extend(first.iter().map(|r| {
            let mut r = r.clone();
            r.repeat = pass;
            r.report.iops *= factor;
            r.report.lat_ns.p99 *= factor;
            r
        }));
    }
    let summaries = summary::medians(&all);
    assert_eq!(summaries.len(), first.len());
    for (s, r) in summaries.iter().zip(&first) {
        assert_eq!(s.record.point, r.point);
        assert_eq!(s.runs, 3);
        assert_eq!(s.record.repeat, 1, "the median run represents the point");
        assert_eq!(s.record.report.iops, 2 * r.report.iops);
        assert_eq!(s.record.report.lat_ns.p99, 2 * r.report.lat_ns.p99);
        assert_eq!(s.iops_range, (r.report.iops, 4 * r.report.iops));
        assert!((s.spread() - 1.5).abs() < 1e-9);
    }
    // A failed run drops out; two runs left: the median is their mean.
    all[0].problems.push("3 I/O errors".into());
    let s = &summary::medians(&all)[0];
    assert_eq!(s.record.point, first[0].point, "matrix order holds when a run fails");
    assert_eq!(s.runs, 2);
    assert_eq!(s.record.report.iops, 3 * first[0].report.iops);
    let text = summary::render(&all);
    assert!(text.contains("runs spread"), "{text}");
    assert!(text.contains("    3   150%"), "{text}");
    assert!(text.contains("failed runs (left out of the table, the ratios and the plots):"));
    assert!(text.contains(&format!("  pass 0 {} (", first[0].report.job.name)));
    // Ratios use the medians: every pass scaled alike, so the ratios are those of one pass.
    let one = summary::comparisons(&first);
    let medians: Vec<Record> = summary::medians(&all[1..]).into_iter().map(|p| p.record).collect();
    let many = summary::comparisons(&medians);
    assert_eq!(one[0].pairs.len(), many[0].pairs.len());
    for (a, b) in one[0].pairs.iter().zip(&many[0].pairs) {
        assert!((a.iops_ratio() - b.iops_ratio()).abs() < 1e-9, "{a:?} {b:?}");
    }
    // The pass is kept in results.json and the CSV.
    let back = results::from_json(&results::to_json(&all).unwrap()).unwrap();
    assert_eq!(back[first.len()].repeat, 1);
    assert!(
        results::to_csv(&all)
            .lines()
            .nth(1 + 2 * first.len())
            .unwrap()
            .starts_with("quick,tcg,2,")
    );
}

#[test]
fn repeat_option_and_log_names() {
    let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(Options::parse(&args("--repeat 3")).unwrap().repeat, 3);
    assert_eq!(Options::parse(&[]).unwrap().repeat, 1);
    for bad in ["0", "21", "x"] {
        let err = Options::parse(&args(&format!("--repeat {bad}"))).unwrap_err();
        assert!(
            err.contains(&format!("--repeat '{bad}': use a count from 1 to 20")),
            "{err}"
        );
    }
    let boots = quick_boots();
    assert_eq!(boots[1].log_name(2), "r2-boot-01-megasas-gen2.log");
}

#[test]
fn values_far_apart_get_a_log_axis() {
    let dir = temp_dir("log");
    let chart = |values: [f64; 2]| plots::Chart {
        file: "c.svg",
        title: "t".into(),
        x_label: "x".into(),
        y_label: "IOPS".into(),
        categories: vec!["a".into(), "b".into()],
        series: vec![
            plots::Series {
                name: "fast".into(),
                points: vec![(0, values[0]), (1, values[0])],
            },
            plots::Series {
                name: "slow".into(),
                points: vec![(0, values[1]), (1, values[1])],
            },
        ],
        log_y: false,
    };
    let path = dir.join("c.svg");
    plots::draw(&chart([1e6, 1e4]), &path).unwrap();
    let texts = svg_texts(&std::fs::read_to_string(&path).unwrap());
    assert!(texts.iter().any(|t| t == "IOPS (log scale)"), "{texts:?}");
    assert!(
        texts.iter().any(|t| t == "1M") && texts.iter().any(|t| t == "10k"),
        "{texts:?}"
    );
    plots::draw(&chart([1e6, 5e5]), &path).unwrap();
    let texts = svg_texts(&std::fs::read_to_string(&path).unwrap());
    assert!(texts.iter().any(|t| t == "IOPS"), "{texts:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn results_are_shown_as_a_fraction_of_the_device_floor() {
    let mut records = quick_records();
    // The (simulated) kernel measured the floor before every job on a controller (md0 and
    // nvme0n1 boots carry `megasas.floor=` / `nvme.floor=`), none on the null device nor on
    // the Fusion drive (its driver has no floor option).
    for r in &records {
        let fraction = summary::floor_fraction(r);
        assert_eq!(
            fraction.is_some(),
            !matches!(r.point.device, DeviceKind::Null | DeviceKind::Fusion),
            "{}",
            r.point
        );
        if let Some(f) = fraction {
            let key = if r.point.iodepth == 1 {
                "floor_qd1_iops"
            } else {
                "floor_qd32_iops"
            };
            let want = r.report.iops as f64 / r.report.totals[key] as f64;
            assert!((f - want).abs() < 1e-12 && f > 0.0 && f <= 1.0, "{}: {f}", r.point);
        }
    }
    let text = summary::render(&records);
    let heading = text.lines().next().unwrap();
    assert!(heading.ends_with("of floor"), "{heading}");
    for line in text.lines().skip(1).take_while(|l| !l.is_empty()) {
        let last = line.split_whitespace().last().unwrap();
        if line.starts_with("null0") || line.starts_with("mf0") {
            assert_eq!(last, "-", "{line}");
        } else {
            assert!(last.parse::<f64>().is_ok_and(|f| f > 0.0), "{line}");
        }
    }
    assert!(text.lines().any(|l| l.starts_with("nvme0n1")), "{text}");
    // Without any floor, no column.
    for r in &mut records {
        r.report.totals.retain(|k, _| !k.starts_with("floor_"));
    }
    assert!(records.iter().all(|r| summary::floor_fraction(r).is_none()));
    assert!(!summary::render(&records).contains("of floor"), "no floor, no column");
    let qd1 = records.iter().position(|r| r.report.job.iodepth == 1).unwrap();
    let qd32 = records.iter().position(|r| r.report.job.iodepth > 1).unwrap();
    for (i, key) in [(qd1, "floor_qd1_iops"), (qd32, "floor_qd32_iops")] {
        let floor = records[i].report.iops * 2;
        records[i].report.totals.insert(key.into(), floor);
        // The other depth's floor must not be used.
        let other = if key == "floor_qd1_iops" {
            "floor_qd32_iops"
        } else {
            "floor_qd1_iops"
        };
        records[i].report.totals.insert(other.into(), 1);
    }
    for i in [qd1, qd32] {
        let f = summary::floor_fraction(&records[i]).unwrap();
        assert!((f - 0.5).abs() < 0.01, "{f}");
    }
    records[qd1].report.totals.insert("floor_qd1_iops".into(), 0);
    assert_eq!(summary::floor_fraction(&records[qd1]), None, "a zero floor is no floor");
    let text = summary::render(&records);
    assert!(text.contains("of floor") && text.contains(" 0.50"), "{text}");
}

#[test]
fn adaptive_results_are_labelled_apart_from_irq_and_poll() {
    let records = quick_records();
    let md_qd1: Vec<&Record> = records
        .iter()
        .filter(|r| r.point.device == DeviceKind::MegasasGen2 && r.point.iodepth == 1 && r.point.cpus == 1)
        .collect();
    let labels: Vec<&str> = md_qd1.iter().map(|r| r.point.completion.as_str()).collect();
    assert_eq!(labels, ["irq", "poll", "adaptive"]);
    // The kernel ran the adaptive job as completion=irq: that is no mismatch.
    assert!(md_qd1.iter().all(|r| r.ok()), "{:?}", md_qd1[2].problems);
    assert_eq!(md_qd1[2].report.job.completion, "irq");
    assert_eq!(md_qd1[2].report.job.name, "rr4k-qd1-c1-adaptive-lf");
    // Table rows: one per completion, the label in the completion column.
    let text = summary::render(&records);
    // Columns: "md0" "(gen2)" rw bs qd cpus compl ...
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() > 6 && w[0] == "md0" && w[4] == "1" && w[5] == "1")
        .collect();
    let compl: Vec<&str> = rows.iter().map(|r| r[6]).collect();
    assert_eq!(compl, ["irq", "poll", "adaptive"], "{text}");
    // Medians keep the adaptive point apart from the irq one.
    assert_eq!(summary::medians(&records).len(), records.len());
    // The CSV names it too.
    assert!(results::to_csv(&records).contains(",adaptive,"));
}
