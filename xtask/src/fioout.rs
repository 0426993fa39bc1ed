//! `cargo xtask fio-out CONSOLE_LOG DIR [--output NAME] [--split]`: turns a captured console into
//! the files fio would have written. The `BAREMQ-FIO-JSON:` line becomes the JSON document
//! (`DIR/NAME`, default `fio.json`), and every `BAREMQ-LOG: <file>: <row>` line is appended to
//! `DIR/<file>` (fio's log names, e.g. `job_bw.1.log`). `--split` also writes one document per job,
//! named as bench-fio names them (`<rw>-<iodepth>-<numjobs>.json`), because fio-plot sums every job
//! of a file into one point.
//!
//! `save_run_outputs` is what `cargo xtask run ... --output-format=json --output=FILE` uses after
//! the boot: the document to FILE and the logs next to it, as fio writes them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The document line's prefix (the kernel's `workload::FIO_JSON_PREFIX`).
pub const FIO_JSON_PREFIX: &str = workload::FIO_JSON_PREFIX;
/// A log row's prefix (the kernel's `workload::LOG_PREFIX`).
pub const LOG_PREFIX: &str = workload::LOG_PREFIX;

/// What a console holds.
#[derive(Debug, Default, PartialEq)]
pub struct Extracted {
    /// Every fio document, in console order, parsed.
    pub documents: Vec<Value>,
    /// Log rows by file name, each file's rows in console order.
    pub logs: BTreeMap<String, Vec<String>>,
}

/// The plain file name a log line names: fio allows a path in `write_*_log=`, but the files go to
/// one directory here, so only the last component counts.
fn log_file_name(name: &str, line_number: usize) -> Result<String, String> {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.is_empty() || last == "." || last == ".." || last.contains('\\') || last.chars().any(char::is_control) {
        return Err(format!(
            "console line {line_number}: log file name {name:?} is not a usable file name"
        ));
    }
    Ok(last.to_string())
}

/// Picks the document and log lines out of `console` (serial line endings allowed).
pub fn extract(console: &str) -> Result<Extracted, String> {
    let mut extracted = Extracted::default();
    for (index, line) in console.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if let Some(json) = line.strip_prefix(FIO_JSON_PREFIX) {
            let document: Value = serde_json::from_str(json)
                .map_err(|e| format!("console line {}: the fio document is not valid JSON: {e}", index + 1))?;
            if !document.get("jobs").is_some_and(Value::is_array) {
                return Err(format!(
                    "console line {}: the fio document has no jobs array",
                    index + 1
                ));
            }
            extracted.documents.push(document);
        } else if let Some(rest) = line.strip_prefix(LOG_PREFIX) {
            let (name, row) = rest
                .split_once(": ")
                .ok_or_else(|| format!("console line {}: log line without `<file>: <row>`: {line:?}", index + 1))?;
            let name = log_file_name(name, index + 1)?;
            extracted.logs.entry(name).or_default().push(row.to_string());
        }
    }
    Ok(extracted)
}

/// The one document of a run; several runs in one console need `--split` or separate logs.
fn single_document(extracted: &Extracted) -> Result<&Value, String> {
    match extracted.documents.as_slice() {
        [document] => Ok(document),
        [] => Err(format!(
            "no {}line in the console: was the run started with --output-format=json or json+?",
            FIO_JSON_PREFIX
        )),
        several => Err(format!(
            "{} fio documents in the console (one per run); give one run's console",
            several.len()
        )),
    }
}

/// One document per job, with the run's top-level keys, named `<rw>-<iodepth>-<numjobs>.json`
/// from the job's options (bench-fio's names; a later job with the same name gets `-2`, `-3`).
pub fn split_by_job(document: &Value) -> Result<Vec<(String, Value)>, String> {
    let jobs = document
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or("the fio document has no jobs array")?;
    let mut files: Vec<(String, Value)> = Vec::new();
    for job in jobs {
        let option = |key: &str| -> Result<String, String> {
            job.get("job options")
                .and_then(|o| o.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("job {} has no `{key}` in its job options", job["jobname"]))
        };
        let base = format!("{}-{}-{}", option("rw")?, option("iodepth")?, option("numjobs")?);
        let mut name = format!("{base}.json");
        let mut counter = 2;
        while files.iter().any(|(existing, _)| *existing == name) {
            name = format!("{base}-{counter}.json");
            counter += 1;
        }
        let mut single = document.clone();
        single["jobs"] = Value::Array(vec![job.clone()]);
        files.push((name, single));
    }
    Ok(files)
}

fn write_file(path: &Path, text: &str, written: &mut Vec<PathBuf>) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    written.push(path.to_path_buf());
    Ok(())
}

fn write_logs(extracted: &Extracted, dir: &Path, written: &mut Vec<PathBuf>) -> Result<(), String> {
    for (name, rows) in &extracted.logs {
        let mut text = rows.join("\n");
        text.push('\n');
        write_file(&dir.join(name), &text, written)?;
    }
    Ok(())
}

/// What `cargo xtask run --output-format=json --output=FILE` does with the console: the document
/// to `output` (pretty-printed, as fio prints it) and each log into `output`'s directory. Returns
/// the files written.
pub fn save_run_outputs(console: &str, output: &Path) -> Result<Vec<PathBuf>, String> {
    let extracted = extract(console)?;
    let document = single_document(&extracted)?;
    let mut written = Vec::new();
    let text = serde_json::to_string_pretty(document).map_err(|e| e.to_string())?;
    write_file(output, &(text + "\n"), &mut written)?;
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    write_logs(&extracted, dir, &mut written)?;
    Ok(written)
}

/// `cargo xtask fio-out CONSOLE_LOG DIR [--output NAME] [--split]`.
pub fn cmd_fio_out(args: &[String]) -> Result<bool, String> {
    let mut positional = Vec::new();
    let mut output = "fio.json".to_string();
    let mut split = false;
    let mut options = crate::args::Options::new(args);
    while let Some(option) = options.next()? {
        match option {
            "--output" => output = options.value()?.to_string(),
            "--split" => split = true,
            other if other.starts_with("--") => return Err(format!("fio-out: unknown option {other}")),
            other => positional.push(other.to_string()),
        }
    }
    let [console_path, dir] = positional.as_slice() else {
        return Err("usage: cargo xtask fio-out CONSOLE_LOG DIR [--output NAME] [--split]".into());
    };
    let console =
        fs::read_to_string(console_path).map_err(|e| format!("cannot read console log {console_path}: {e}"))?;
    let dir = Path::new(dir);
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = save_run_outputs(&console, &dir.join(&output))?;
    if split {
        let extracted = extract(&console)?;
        for (name, document) in split_by_job(single_document(&extracted)?)? {
            let text = serde_json::to_string_pretty(&document).map_err(|e| e.to_string())?;
            write_file(&dir.join(name), &(text + "\n"), &mut written)?;
        }
    }
    for path in &written {
        println!("wrote {}", path.display());
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use workload::detail::DetailOptions;
    use workload::report::{
        FioJob, FioJobMeta, FioLogOptions, FioOutputFormat, FioOutputOptions, write_fio_json_line, write_log_lines,
    };
    use workload::{
        Completion, DeviceInfo, IoBackend, IoOp, JobReport, JobShared, SubmitError, parse_cmdline, plan_job, run_cpu,
    };

    /// An in-memory device with a simulated clock: every request takes `latency_ns` (plus a
    /// little per slot, so latencies spread), data is not kept.
    struct ClockBackend {
        buffers: Vec<Vec<u8>>,
        clock_ns: std::cell::Cell<u64>,
        due: Vec<(usize, u64)>,
        latency_ns: u64,
    }

    impl IoBackend for ClockBackend {
        fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
            &mut self.buffers[slot]
        }
        fn submit(&mut self, slot: usize, _op: IoOp, lba: u64, _sectors: u32) -> Result<(), SubmitError> {
            let spread = (lba * 7919) % 50_000;
            self.due.push((slot, self.clock_ns.get() + self.latency_ns + spread));
            Ok(())
        }
        fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
            let now = self.clock_ns.get();
            let mut n = 0;
            self.due.retain(|&(slot, due)| {
                if due <= now && n < out.len() {
                    out[n] = Completion::new(slot, Ok(()));
                    n += 1;
                    false
                } else {
                    true
                }
            });
            n
        }
        fn now_ns(&self) -> u64 {
            self.clock_ns.set(self.clock_ns.get() + 150);
            self.clock_ns.get()
        }
        fn idle(&mut self, _in_flight: usize) {
            if let Some(next) = self.due.iter().map(|d| d.1).min() {
                self.clock_ns.set(self.clock_ns.get().max(next));
            }
        }
    }

    /// Runs `words` (one job) on two simulated CPUs with the detail mode on and returns its report.
    fn run(words: &str, options: &FioOutputOptions) -> JobReport {
        let spec = parse_cmdline(words).unwrap().remove(0);
        let device = DeviceInfo {
            name: "nvme0n1".into(),
            sector_size: 512,
            capacity_sectors: 1 << 20,
            max_iodepth: 64,
            max_transfer_bytes: 1 << 20,
        };
        let plan = plan_job(&spec, &[device], &[0, 1]).unwrap();
        let shared = JobShared::with_detail(&plan, options.detail_options());
        let results: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let mut backend = ClockBackend {
                    buffers: (0..plan.iodepth).map(|_| vec![0u8; plan.bs() as usize]).collect(),
                    clock_ns: std::cell::Cell::new(1_000_000),
                    due: Vec::new(),
                    latency_ns: 80_000,
                };
                run_cpu(&plan, index, &mut backend, &shared).unwrap()
            })
            .collect();
        JobReport::new(&plan, &results).unwrap()
    }

    fn options(format: FioOutputFormat) -> FioOutputOptions {
        FioOutputOptions {
            output_format: format,
            timestamp_ms: 1_764_589_414_123,
            global_options: vec![("ioengine".into(), "libaio".into())],
            logs: FioLogOptions {
                bw: Some("bench".into()),
                lat: None,
                iops: Some("bench".into()),
                avg_msec: 500,
            },
            ..FioOutputOptions::default()
        }
    }

    /// A console as the kernel prints it: other lines around, serial line endings.
    fn console(format: FioOutputFormat) -> String {
        let options = options(format);
        let randread = run(
            "job=randread-qd32 rw=randread bs=4k iodepth=32 cpus=0-1 runtime=1200ms",
            &options,
        );
        let mixed = run(
            "job=mixed rw=randrw rwmixread=70 bs=4k iodepth=8 cpus=0-1 runtime=1200ms",
            &options,
        );
        let meta = [
            FioJobMeta::default(),
            FioJobMeta {
                job_options: vec![
                    ("rw".into(), "randrw".into()),
                    ("rwmixread".into(), "70".into()),
                    ("iodepth".into(), "8".into()),
                    ("numjobs".into(), "2".into()),
                ],
                groupid: 1,
            },
        ];
        let jobs = [
            FioJob {
                report: &randread,
                meta: &meta[0],
            },
            FioJob {
                report: &mixed,
                meta: &meta[1],
            },
        ];
        let mut text = String::from("cmdline: \"-- rw=randread\"\r\njob randread-qd32: PASSED\r\n");
        write_fio_json_line(&mut text, &options, &jobs).unwrap();
        write_log_lines(&mut text, &options, &jobs).unwrap();
        text.push_str("interrupts per CPU since boot\n");
        text.replace('\n', "\r\n")
    }

    fn document(format: FioOutputFormat) -> Value {
        let mut extracted = extract(&console(format)).unwrap();
        assert_eq!(extracted.documents.len(), 1);
        extracted.documents.remove(0)
    }

    #[derive(Debug, PartialEq, Clone, Copy)]
    enum Kind {
        Int,
        Float,
        Str,
        Object,
        Array,
        Other,
    }

    fn kind(value: &Value) -> Kind {
        match value {
            Value::Number(n) if n.is_u64() || n.is_i64() => Kind::Int,
            Value::Number(_) => Kind::Float,
            Value::String(_) => Kind::Str,
            Value::Object(_) => Kind::Object,
            Value::Array(_) => Kind::Array,
            _ => Kind::Other,
        }
    }

    /// Every key path below `value` with its kind (array elements under `[]`).
    fn paths(value: &Value, prefix: &str, out: &mut Vec<(String, Kind)>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let path = format!("{prefix}/{key}");
                    out.push((path.clone(), kind(child)));
                    paths(child, &path, out);
                }
            }
            Value::Array(items) => {
                if let Some(first) = items.first() {
                    paths(first, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }

    /// Key by key against real fio 3.33 output (`testdata/fio-3.33-sample.json`: randread QD32 and
    /// a mixed job on ioengine=null): every path fio writes is there with fio's type, apart from
    /// the job options (those are the job's own words) and the optional keys fio writes only with
    /// a disk (`disk_util`).
    #[test]
    fn document_has_every_key_of_real_fio_output_with_fios_types() {
        let fio: Value = serde_json::from_str(include_str!("../testdata/fio-3.33-sample.json")).unwrap();
        let ours = document(FioOutputFormat::Json);
        let (mut expected, mut found) = (Vec::new(), Vec::new());
        paths(&fio, "", &mut expected);
        paths(&ours, "", &mut found);
        let found: BTreeMap<String, Kind> = found.into_iter().collect();
        let mut checked = 0;
        for (path, fio_kind) in &expected {
            if path.starts_with("/jobs[]/job options/") || path.starts_with("/global options/") {
                continue;
            }
            let our_kind = found.get(path).unwrap_or_else(|| panic!("{path} is missing"));
            assert_eq!(*our_kind, *fio_kind, "{path} has the wrong type");
            checked += 1;
        }
        assert!(checked > 200, "only {checked} paths compared");
        // baremq's own report rides along under a key of its own.
        assert_eq!(ours["jobs"][0]["baremq"]["job"]["name"], "randread-qd32");
        assert_eq!(ours["fio version"], format!("baremq-{}", env!("CARGO_PKG_VERSION")));
        assert_eq!(ours["time"], "Mon Dec  1 11:43:34 2025");
        assert_eq!(ours["timestamp"], 1_764_589_414);
    }

    /// The paths fio-plot, PerfKitBenchmarker, lkp-tests and kubestr read hold the measured figures.
    #[test]
    fn consumers_fields_hold_consistent_measured_values() {
        let ours = document(FioOutputFormat::Json);
        let job = &ours["jobs"][0];
        for key in ["rw", "bs", "iodepth", "numjobs"] {
            assert!(job["job options"][key].is_string(), "job options.{key}");
        }
        assert_eq!(job["job options"]["iodepth"], "32");
        assert_eq!(job["job options"]["numjobs"], "2");
        assert_eq!(ours["jobs"][1]["groupid"], 1);
        let read = &job["read"];
        let f = |v: &Value| v.as_f64().unwrap();
        let ios = read["total_ios"].as_u64().unwrap();
        let runtime_ms = read["runtime"].as_u64().unwrap();
        assert!(
            ios > 1000 && (1200..1300).contains(&runtime_ms),
            "{ios} in {runtime_ms} ms"
        );
        let iops = f(&read["iops"]);
        assert!((iops - ios as f64 * 1000.0 / runtime_ms as f64).abs() / iops < 0.01);
        assert_eq!(read["bw"].as_u64().unwrap(), read["bw_bytes"].as_u64().unwrap() / 1024);
        assert_eq!(read["io_kbytes"].as_u64().unwrap(), ios * 4);
        for name in ["slat_ns", "clat_ns", "lat_ns"] {
            assert_eq!(read[name]["N"].as_u64().unwrap(), ios, "{name}");
        }
        // Each I/O's lat is its slat plus its clat.
        let means = ["slat_ns", "clat_ns", "lat_ns"].map(|k| f(&read[k]["mean"]));
        assert!((means[0] + means[1] - means[2]).abs() < 0.01, "{means:?}");
        assert!(means[1] >= 80_000.0 && f(&read["lat_ns"]["stddev"]) > 0.0);
        // 32 in flight per CPU and two CPUs: about 2 x 32 / 105 us per second.
        let percentiles = read["clat_ns"]["percentile"].as_object().unwrap();
        assert_eq!(percentiles.len(), 17);
        let mut by_percent: Vec<(f64, u64)> = percentiles
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap()))
            .collect();
        by_percent.sort_by(|a, b| a.0.total_cmp(&b.0));
        let values: Vec<u64> = by_percent.iter().map(|p| p.1).collect();
        assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");
        assert!(values[0] >= 80_000 && values[16] <= 140_000, "{values:?}");
        // Two 500 ms samples in 1.2 s, summed over the two CPUs.
        assert_eq!(read["iops_samples"], 2);
        assert_eq!(read["bw_samples"], 2);
        let iops_mean = f(&read["iops_mean"]);
        assert!((iops_mean - iops).abs() / iops < 0.1, "{iops_mean} vs {iops}");
        assert!(f(&read["iops_stddev"]) >= 0.0 && f(&read["bw_agg"]) > 90.0);
        // Distributions are percentages that add up to 100, except that fio shows a non-zero
        // bucket below 0.1% as 0.1% (stat_calc_dist), as the ramp to depth 32 does here.
        for key in ["iodepth_level", "iodepth_submit", "iodepth_complete"] {
            let sum: f64 = job[key].as_object().unwrap().values().map(f).sum();
            assert!(sum > 99.99 && sum < 100.0 + 0.1 * 7.0, "{key}: {sum}");
        }
        assert!(f(&job["iodepth_level"]["32"]) > 90.0, "{}", job["iodepth_level"]);
        // clat is 80-130 us: everything in latency_us' 100 and 250 classes.
        let us = &job["latency_us"];
        assert!((f(&us["100"]) + f(&us["250"]) - 100.0).abs() < 0.01, "{us}");
        assert_eq!(f(&job["latency_ms"]["2"]), 0.0);
        let sys = f(&job["sys_cpu"]);
        assert!(sys > 0.0 && sys < 100.0, "{sys}");
        assert_eq!(f(&job["usr_cpu"]), 0.0);
        // A read-only job has empty write and trim directions, with fio's keys.
        assert_eq!(job["write"]["total_ios"], 0);
        assert_eq!(job["trim"]["io_bytes"], 0);
        assert!(job["write"]["clat_ns"].get("percentile").is_none());
        // The mixed job has both directions.
        let mixed = &ours["jobs"][1];
        let (r, w) = (&mixed["read"]["total_ios"], &mixed["write"]["total_ios"]);
        assert!(r.as_u64().unwrap() > 2 * w.as_u64().unwrap() && w.as_u64().unwrap() > 0);
    }

    /// The 13 paths fio-plot needs for every chart type (measured by deleting
    /// fields from real fio output until fio-plot failed), for both directions, plus what PKB,
    /// lkp and kubestr read (§5.1), each with fio's JSON type.
    #[test]
    fn consumers_minimum_paths_are_present_with_their_types() {
        let ours = document(FioOutputFormat::Json);
        assert_eq!(kind(&ours["fio version"]), Kind::Str);
        assert_eq!(kind(&ours["global options"]), Kind::Object);
        let jobs = ours["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2);
        for job in jobs {
            let expect = |path: &[&str], want: Kind| {
                let mut value = job;
                for key in path {
                    value = value.get(*key).unwrap_or_else(|| panic!("{path:?} missing"));
                }
                assert_eq!(kind(value), want, "{path:?}");
            };
            expect(&["jobname"], Kind::Str);
            expect(&["groupid"], Kind::Int);
            expect(&["error"], Kind::Int);
            for key in ["rw", "bs", "iodepth", "numjobs"] {
                expect(&["job options", key], Kind::Str);
            }
            expect(&["usr_cpu"], Kind::Float);
            expect(&["sys_cpu"], Kind::Float);
            for key in ["latency_ns", "latency_us", "latency_ms"] {
                expect(&[key], Kind::Object);
            }
            for dir in ["read", "write", "trim"] {
                for key in [
                    "io_bytes",
                    "io_kbytes",
                    "bw_bytes",
                    "bw",
                    "runtime",
                    "total_ios",
                    "bw_min",
                    "bw_max",
                ] {
                    expect(&[dir, key], Kind::Int);
                }
                for key in ["iops", "iops_stddev", "iops_mean", "bw_agg", "bw_mean", "bw_dev"] {
                    expect(&[dir, key], Kind::Float);
                }
                for key in ["iops_min", "iops_max"] {
                    expect(&[dir, key], Kind::Int);
                }
                for lat in ["slat_ns", "clat_ns", "lat_ns"] {
                    expect(&[dir, lat, "mean"], Kind::Float);
                    expect(&[dir, lat, "stddev"], Kind::Float);
                    expect(&[dir, lat, "min"], Kind::Int);
                    expect(&[dir, lat, "max"], Kind::Int);
                    expect(&[dir, lat, "N"], Kind::Int);
                }
            }
            // lkp reads these three percentiles of clat.
            for key in ["90.000000", "95.000000", "99.000000"] {
                expect(&["read", "clat_ns", "percentile", key], Kind::Int);
            }
        }
    }

    /// Job options are written as given; the four fio-plot needs are added from the resolved job
    /// only where neither the job nor `[global]` set them.
    #[test]
    fn job_options_keep_the_words_and_fill_in_what_fio_plot_needs() {
        let ours = document(FioOutputFormat::Json);
        let written = ours["jobs"][1]["job options"].as_object().unwrap();
        let keys: Vec<&str> = written.keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 5, "{keys:?}");
        assert_eq!(
            (written["rwmixread"].as_str(), written["bs"].as_str()),
            (Some("70"), Some("4096"))
        );
        let mut options = options(FioOutputFormat::Json);
        options.global_options.push(("bs".into(), "4k".into()));
        let report = run("job=one rw=read bs=4k iodepth=2 cpus=0 runtime=100ms", &options);
        let meta = FioJobMeta {
            job_options: vec![("rw".into(), "read".into())],
            groupid: 0,
        };
        let mut text = String::new();
        write_fio_json_line(
            &mut text,
            &options,
            &[FioJob {
                report: &report,
                meta: &meta,
            }],
        )
        .unwrap();
        let doc: Value = serde_json::from_str(text.strip_prefix(FIO_JSON_PREFIX).unwrap()).unwrap();
        let job_options = doc["jobs"][0]["job options"].as_object().unwrap();
        assert!(job_options.get("bs").is_none(), "bs is in [global]: {job_options:?}");
        assert_eq!(doc["global options"]["bs"], "4k");
        assert_eq!(
            (job_options["iodepth"].as_str(), job_options["numjobs"].as_str()),
            (Some("2"), Some("1"))
        );
    }

    #[test]
    fn percentile_keys_are_in_fios_order_and_format() {
        let console = console(FioOutputFormat::Json);
        let line = console.lines().find(|l| l.starts_with(FIO_JSON_PREFIX)).unwrap();
        let clat = &line[line.find("\"clat_ns\"").unwrap()..];
        let keys = [
            "\"1.000000\":",
            "\"5.000000\":",
            "\"10.000000\":",
            "\"99.500000\":",
            "\"99.990000\":",
        ];
        let positions: Vec<usize> = keys.iter().map(|k| clat.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        // A user's percentile_list is sorted and printed the same way.
        let mut options = options(FioOutputFormat::Json);
        options.percentile_list = vec![99_999_000, 50_000_000, 12_345_678];
        let report = run("job=one rw=read bs=4k iodepth=1 cpus=0 runtime=100ms", &options);
        let meta = FioJobMeta::default();
        let mut text = String::new();
        write_fio_json_line(
            &mut text,
            &options,
            &[FioJob {
                report: &report,
                meta: &meta,
            }],
        )
        .unwrap();
        let doc: Value = serde_json::from_str(text.strip_prefix(FIO_JSON_PREFIX).unwrap()).unwrap();
        let keys: Vec<&String> = doc["jobs"][0]["read"]["clat_ns"]["percentile"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["12.345678", "50.000000", "99.999000"]);
        let raw = &text[text.find("\"percentile\"").unwrap()..];
        assert!(raw.find("12.345678").unwrap() < raw.find("50.000000").unwrap());
    }

    #[test]
    fn json_plus_bins_are_fios_buckets_and_add_up() {
        let ours = document(FioOutputFormat::JsonPlus);
        for job in ours["jobs"].as_array().unwrap() {
            for dir in ["read", "write"] {
                let clat = &job[dir]["clat_ns"];
                let n = clat["N"].as_u64().unwrap();
                if n == 0 {
                    assert!(clat.get("bins").is_none());
                    continue;
                }
                let bins = clat["bins"].as_object().unwrap();
                let total: u64 = bins.values().map(|v| v.as_u64().unwrap()).sum();
                assert_eq!(total, n);
                for key in bins.keys() {
                    let value: u64 = key.parse().unwrap();
                    let index = workload::hist::bucket_of(value);
                    assert_eq!(
                        workload::hist::bucket_value(index),
                        value,
                        "bin key {key} is a bucket value"
                    );
                }
            }
        }
        assert!(
            document(FioOutputFormat::Json)["jobs"][0]["read"]["clat_ns"]
                .get("bins")
                .is_none()
        );
    }

    #[test]
    fn console_is_split_into_the_document_and_fio_named_logs() {
        let extracted = extract(&console(FioOutputFormat::Json)).unwrap();
        let names: Vec<&String> = extracted.logs.keys().collect();
        // Two jobs of two CPUs each: threads 1-4.
        assert_eq!(
            names,
            [
                "bench_bw.1.log",
                "bench_bw.2.log",
                "bench_bw.3.log",
                "bench_bw.4.log",
                "bench_iops.1.log",
                "bench_iops.2.log",
                "bench_iops.3.log",
                "bench_iops.4.log"
            ]
        );
        // A read-only job: reads only, two full windows and the partial one, time increasing.
        let rows = &extracted.logs["bench_iops.1.log"];
        assert_eq!(rows.len(), 3, "{rows:?}");
        let times: Vec<u64> = rows
            .iter()
            .map(|r| r.split(", ").next().unwrap().parse().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]) && times[0] >= 500, "{times:?}");
        assert!(rows.iter().all(|r| r.split(", ").nth(2) == Some("0")));
        // The mixed job writes rows for both directions.
        assert!(
            extracted.logs["bench_bw.3.log"]
                .iter()
                .any(|r| r.split(", ").nth(2) == Some("1"))
        );

        let dir = std::env::temp_dir().join(format!("baremq-fio-out-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let written = save_run_outputs(&console(FioOutputFormat::Json), &dir.join("out.json")).unwrap();
        assert_eq!(written.len(), 9);
        let saved: Value = serde_json::from_str(&fs::read_to_string(dir.join("out.json")).unwrap()).unwrap();
        assert_eq!(saved["jobs"].as_array().unwrap().len(), 2);
        let log = fs::read_to_string(dir.join("bench_bw.1.log")).unwrap();
        assert_eq!(log.lines().count(), 3);
        assert!(!log.contains('\r'));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn split_names_files_as_bench_fio_does() {
        let files = split_by_job(&document(FioOutputFormat::Json)).unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["randread-32-2.json", "randrw-8-2.json"]);
        assert_eq!(files[1].1["jobs"].as_array().unwrap().len(), 1);
        assert_eq!(files[1].1["fio version"], files[0].1["fio version"]);
    }

    #[test]
    fn bad_consoles_are_refused_with_the_reason() {
        let error = extract("BAREMQ-FIO-JSON: {\"jobs\": [\n").unwrap_err();
        assert!(error.contains("line 1") && error.contains("not valid JSON"), "{error}");
        let error = extract("BAREMQ-FIO-JSON: {\"fio version\": \"x\"}\n").unwrap_err();
        assert!(error.contains("no jobs array"), "{error}");
        let error = extract("x\nBAREMQ-LOG: ..: 1, 2, 0, 0, 0\n").unwrap_err();
        assert!(error.contains("line 2") && error.contains("\"..\""), "{error}");
        let error = extract("BAREMQ-LOG: no separator\n").unwrap_err();
        assert!(error.contains("<file>: <row>"), "{error}");
        // A path in the prefix keeps only the file name.
        let extracted = extract("BAREMQ-LOG: /tmp/run/x_bw.1.log: 500, 1, 0, 0, 0\n").unwrap();
        assert_eq!(extracted.logs["x_bw.1.log"], ["500, 1, 0, 0, 0"]);
        let error = save_run_outputs("no document here\n", Path::new("/nonexistent/x.json")).unwrap_err();
        assert!(error.contains("--output-format=json"), "{error}");
        let two = format!("{0}{{\"jobs\":[]}}\n{0}{{\"jobs\":[]}}\n", FIO_JSON_PREFIX);
        let error = save_run_outputs(&two, Path::new("/nonexistent/x.json")).unwrap_err();
        assert!(error.contains("2 fio documents"), "{error}");
    }

    #[test]
    fn detail_options_follow_the_log_options() {
        let with_logs = options(FioOutputFormat::Json);
        assert_eq!(with_logs.detail_options().log_window_ns, 500_000_000);
        let without = FioOutputOptions::default();
        assert_eq!(without.detail_options(), DetailOptions::default());
    }

    /// fio's own `fio_jsonplus_clat2csv` (Debian's `fio` package; `.ci/run` installs it) reads a
    /// kernel-made json+ document: it writes one CSV per job from the histogram bins and its
    /// `--validate` rebuilds the bins from the CSV and finds them equal to the document's.
    #[test]
    fn fio_jsonplus_clat2csv_reads_and_validates_a_kernel_document() {
        let tool = "fio_jsonplus_clat2csv";
        let found = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()));
        assert!(
            found,
            "{tool} is not installed: `apt-get install fio` (.ci/run does) — this check runs fio's own reader"
        );
        let dir = std::env::temp_dir().join(format!("baremq-clat2csv-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let ours = document(FioOutputFormat::JsonPlus);
        let source = dir.join("baremq.json");
        fs::write(&source, serde_json::to_string_pretty(&ours).unwrap()).unwrap();
        // First the conversion, then the check of the CSV files it wrote.
        let run = |validate: bool| {
            let mut command = std::process::Command::new(tool);
            command.arg(&source).arg(dir.join("clat.csv"));
            if validate {
                command.arg("--validate");
            }
            let out = command.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(
                out.status.success(),
                "{tool}{}: {stdout}{}",
                if validate { " --validate" } else { "" },
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
        };
        run(false);
        let stdout = run(true);
        let jobs = ours["jobs"].as_array().unwrap().len();
        for job in 0..jobs {
            assert!(stdout.contains(&format!("clat_job{job}.csv validated")), "{stdout}");
            // The CSV's read clat counts add up to the document's read clat samples.
            let csv = fs::read_to_string(dir.join(format!("clat_job{job}.csv"))).unwrap();
            let mut lines = csv.lines();
            let header: Vec<&str> = lines.next().unwrap().split(',').map(str::trim).collect();
            let column = header.iter().position(|c| *c == "read_clat_ns_count").unwrap();
            let total: u64 = lines
                .filter_map(|l| l.split(',').nth(column))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum();
            assert_eq!(
                total,
                ours["jobs"][job]["read"]["clat_ns"]["N"].as_u64().unwrap(),
                "job {job}"
            );
            assert!(total > 0 || job > 0);
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
