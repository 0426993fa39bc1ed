//! `cargo xtask fio-compare JOB.fio [--device nvme|md] [--smp N] [--disk-size SIZE]
//! [--namespaces N] [--override KEY=VALUE]... [--timeout S] [--out DIR]`: the same fio job file run by real fio in
//! the Linux peer guest (`cargo xtask peer`, fio 3.33) and by baremq, each on a fresh zeroed
//! disk behind the same QEMU controller, and the two documents compared.
//!
//! What is compared, per job (fio's `jobname`):
//!
//! * the reporting group (`groupid`: stonewall / new_group);
//! * the number of read and write I/Os (`total_ios`), which must agree for a size-bound job
//!   (no `time_based`); for time-based jobs the counts are shown, not judged;
//! * which jobs ran at the same time: fio's side from the per-I/O log (`write_lat_log` with
//!   `log_avg_msec=0`, `log_unix_epoch=1`: each clone's first and last I/O), baremq's from its
//!   console (`jobs a, b: running at the same time`);
//! * which blocks a pass touched: for every fio clone, I/Os and distinct offsets in its per-I/O
//!   log (fio's random map: equal); on both sides, the 4 KiB blocks of the disk that are not zero
//!   after the run (exact for writes: both write non-zero data over a zeroed disk).
//!
//! `--namespaces N` (NVMe) gives both sides N namespaces of `--disk-size` each and runs every job
//! over all of them (`filename=/dev/nvme0n1:/dev/nvme0n2...`, fio's several files per job); the
//! blocks are counted over all disks, and fio's per-I/O log has no file column, so a clone that
//! touched each block of each file once shows every offset N times.
//!
//! The peer's kernel and initramfs are those of `cargo xtask peer build` (built first when
//! missing, in `$BAREMQ_PEER_DIR`, default `~/.cache/baremq/peer`). This command appends a
//! second cpio archive to that
//! initramfs holding its own `/init` and the job file (Linux unpacks concatenated archives, the
//! later file replacing the earlier). Both documents, the consoles and a Markdown table are
//! written to the output directory. It boots Linux under TCG: minutes, a manual command, not CI.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::{RunDevice, args, fioout, qemu, root};

const USAGE: &str = "usage: cargo xtask fio-compare JOB.fio|-- FIO WORDS... [--device nvme|md] [--smp N] \
                     [--disk-size SIZE] [--namespaces N] [--override KEY=VALUE]... [--timeout S] [--out DIR]";

/// fio command-line words (`--name=a --rw=randread ...`) as the job file they mean: words before
/// the first `--name` are `[global]`, each `--name` starts a section. fio's run options
/// (`--output-format`, `--output`, `--eta*`) are left out: the comparison sets its own.
pub fn words_to_job_file(words: &[String]) -> Result<String, String> {
    let command_line = workload::fio::syntax::command_line(words.iter().map(String::as_str))
        .map_err(|e| format!("the fio words: {e}"))?;
    let mut text = String::from("; fio-compare: the job file of the fio command-line words\n");
    for section in &command_line.sections {
        let _ = writeln!(text, "[{}]", if section.global { "global" } else { &section.name });
        for entry in section.entries.iter().filter(|e| e.key != "name") {
            match &entry.value {
                Some(value) => {
                    let _ = writeln!(text, "{}={value}", entry.key);
                }
                None => {
                    let _ = writeln!(text, "{}", entry.key);
                }
            }
        }
    }
    Ok(text)
}

/// The guest's `/init`: loads the controller's driver, runs fio on the job file with json+ and a
/// per-I/O log, prints the document and a summary of each clone's log between markers.
/// `@MODULES@` and `@DEVS@` (the block devices, blank-separated) are filled in per device.
const GUEST_INIT: &str = r#"#!/bin/sh
# fio-compare guest (written by cargo xtask fio-compare): one fio run of /cmp/job.fio.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
KV=$(uname -r)
for mod in @MODULES@; do
  mp=$(grep "/$mod.ko" /lib/modules/$KV/order.list | head -1)
  [ -n "$mp" ] || continue
  grep -q "^$(basename $mp .ko | tr - _) " /proc/modules && continue
  insmod /lib/modules/$KV/$mp || echo "CMP_ERR insmod $mod"
done
for dev in @DEVS@; do
  i=0; while [ ! -e /sys/block/$dev ] && [ $i -lt 400 ]; do usleep 50000; i=$((i+1)); done
  [ -e /dev/$dev ] || { echo "CMP_ERR no /dev/$dev"; poweroff -f; }
  echo none > /sys/block/$dev/queue/scheduler 2>/dev/null
done
cd /tmp
echo "CMP_FIO_START"
fio --output-format=json+ --output=/tmp/out.json /cmp/job.fio > /tmp/fio.err 2>&1
echo "CMP_FIO_RC $?"
sed 's/^/CMP_STDERR /' /tmp/fio.err
echo "CMP_JSON_BEGIN"; cat /tmp/out.json; echo; echo "CMP_JSON_END"
for f in /tmp/cmp_clat.*.log; do
  [ -e "$f" ] || continue
  awk -F', *' '{ n++; if (n == 1) first = $1; last = $1
      if ($3 == 0) { r++; if (!($5 in rs)) { rs[$5] = 1; rd++ } } else if ($3 == 1) { w++; if (!($5 in ws)) { ws[$5] = 1; wd++ } } }
    END { printf "CMP_LOG %s ios=%d reads=%d writes=%d distinct_reads=%d distinct_writes=%d first_ms=%s last_ms=%s\n", FILENAME, n, r, w, rd, wd, first, last }' "$f"
done
echo "CMP_DONE"
sync
poweroff -f
"#;

/// Kernel modules (insmod order, as the peer's own init loads them) and the Linux block device.
fn guest_device(device: RunDevice) -> (&'static str, &'static str) {
    match device {
        RunDevice::Nvme => (
            "crct10dif_common crc64 crct10dif-pclmul crct10dif_generic crc-t10dif crc64-rocksoft t10-pi nvme-core nvme",
            "nvme0n1",
        ),
        _ => (
            "scsi_common scsi_mod megaraid_sas crct10dif_common crc64 crct10dif-pclmul crct10dif_generic crc-t10dif \
             crc64-rocksoft t10-pi sd_mod",
            "sda",
        ),
    }
}

/// The job file with `settings` forced for every job: each key is removed from every section and
/// set once in a `[global]` section put first (a job's own line would beat a global one in fio).
pub fn force_settings(job_file: &str, settings: &[(String, String)]) -> String {
    let forced = |line: &str| {
        let trimmed = line.trim();
        if trimmed.starts_with('[') || trimmed.starts_with(';') || trimmed.starts_with('#') {
            return false;
        }
        let key = trimmed.split('=').next().unwrap_or("").trim().to_ascii_lowercase();
        settings.iter().any(|(k, _)| *k == key)
    };
    let mut out = String::from("; fio-compare: settings forced for every job\n[global]\n");
    for (key, value) in settings {
        if value.is_empty() {
            let _ = writeln!(out, "{key}");
        } else {
            let _ = writeln!(out, "{key}={value}");
        }
    }
    out.push('\n');
    for line in job_file.lines() {
        if forced(line) {
            let _ = writeln!(out, "; fio-compare removed: {}", line.trim());
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `base` (the peer's initramfs), padded to 4 bytes, followed by an uncompressed archive with
/// `files` (`name`, mode, contents; directories with mode `0o040755` and no contents).
pub fn append_cpio(base: &[u8], files: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut out = base.to_vec();
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    // Inode numbers clear of the base archive's.
    let mut archive = crate::peer::cpio::Archive::with_first_inode(0x4000);
    for (name, mode, data) in files {
        archive.member(name, *mode, data);
    }
    out.extend(archive.finish());
    out
}

/// The text between `begin` and `end` marker lines of a console.
fn between<'a>(console: &'a str, begin: &str, end: &str) -> Option<&'a str> {
    let start = console.find(begin)? + begin.len();
    let stop = console[start..].find(end)? + start;
    Some(console[start..stop].trim())
}

/// `count` fresh zeroed disk images `SIDE-disk.img`, `SIDE-disk2.img`, ...
fn disk_images(out_dir: &Path, side: &str, count: usize, bytes: u64) -> Result<Vec<PathBuf>, String> {
    (1..=count)
        .map(|k| {
            let path = out_dir.join(if k == 1 {
                format!("{side}-disk.img")
            } else {
                format!("{side}-disk{k}.img")
            });
            qemu::create_image(&path, bytes, "raw").map(|_| path)
        })
        .collect()
}

/// QEMU arguments for namespaces 2.. of NVMe controller `nvme0` on `images[1..]`.
fn more_namespaces(images: &[PathBuf]) -> Vec<String> {
    images
        .iter()
        .enumerate()
        .skip(1)
        .flat_map(|(index, image)| {
            [
                "-drive".to_string(),
                format!(
                    "if=none,id=nvm{index},file={},format=raw,cache=writeback",
                    image.display()
                ),
                "-device".to_string(),
                format!("nvme-ns,drive=nvm{index},bus=nvme0,nsid={}", index + 1),
            ]
        })
        .collect()
}

/// Non-zero 4 KiB blocks over all `images`.
fn nonzero_blocks_of(images: &[PathBuf]) -> Result<u64, String> {
    images.iter().map(|image| nonzero_blocks(image)).sum()
}

/// 4 KiB blocks of the image that are not all zero.
fn nonzero_blocks(image: &Path) -> Result<u64, String> {
    let bytes = fs::read(image).map_err(|e| format!("reading {}: {e}", image.display()))?;
    Ok(bytes.chunks(4096).filter(|b| b.iter().any(|&x| x != 0)).count() as u64)
}

/// Compares two images 4 KiB block by block: (identical, differing only in bytes 0..48, other).
fn block_differences(a: &Path, b: &Path) -> Result<(u64, u64, u64), String> {
    let read = |p: &Path| fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let (a, b) = (read(a)?, read(b)?);
    let mut counts = (0, 0, 0);
    for (x, y) in a.chunks(4096).zip(b.chunks(4096)) {
        if x == y {
            counts.0 += 1;
        } else if x.len() > 48 && x[48..] == y[48..] {
            counts.1 += 1;
        } else {
            counts.2 += 1;
        }
    }
    Ok(counts)
}

/// One job's figures in a document, summed over its entries (clones without group_reporting).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct JobCounts {
    group: u64,
    reads: u64,
    writes: u64,
    /// fio's `trim.total_ios` (`rw=trim|randtrim|trimwrite`).
    trims: u64,
    /// baremq only (`baremq.verify.pass_reads`): reads of the verify pass, which fio counts in
    /// `read.total_ios` and baremq's fio document does not.
    verify_pass_reads: u64,
    /// Bytes moved per direction (`io_bytes`), which is what must agree for a job with variable
    /// block sizes (each side draws every I/O's size).
    read_bytes: u64,
    write_bytes: u64,
}

fn per_job(document: &Value) -> BTreeMap<String, JobCounts> {
    let mut jobs: BTreeMap<String, JobCounts> = BTreeMap::new();
    for job in document["jobs"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let name = job["jobname"].as_str().unwrap_or("?").to_string();
        let entry = jobs.entry(name).or_insert(JobCounts {
            group: job["groupid"].as_u64().unwrap_or(0),
            ..JobCounts::default()
        });
        entry.reads += job["read"]["total_ios"].as_u64().unwrap_or(0);
        entry.writes += job["write"]["total_ios"].as_u64().unwrap_or(0);
        entry.trims += job["trim"]["total_ios"].as_u64().unwrap_or(0);
        entry.verify_pass_reads += job["baremq"]["verify"]["pass_reads"].as_u64().unwrap_or(0);
        entry.read_bytes += job["read"]["io_bytes"].as_u64().unwrap_or(0);
        entry.write_bytes += job["write"]["io_bytes"].as_u64().unwrap_or(0);
    }
    jobs
}

/// The names of the time-based jobs of the job file with the overrides (fio's JSON leaves bare
/// flags such as `time_based` out of its option lists, so the file is read with baremq's parser).
fn time_based_jobs(job_text: &str, overrides: &[(String, String)]) -> Vec<String> {
    jobs_where(job_text, overrides, |spec| spec.is_time_based())
}

/// The names of the jobs with variable block sizes (`bssplit`, unequal `bsrange`, `bs=R,W`).
fn variable_size_jobs(job_text: &str, overrides: &[(String, String)]) -> Vec<String> {
    jobs_where(job_text, overrides, |spec| spec.bs_mix.is_some())
}

/// The names of the jobs of the job file with the overrides whose engine spec passes `keep`.
fn jobs_where(job_text: &str, overrides: &[(String, String)], keep: fn(&workload::JobSpec) -> bool) -> Vec<String> {
    let overrides: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let env = workload::fio::FioEnv {
        ncpus: 1,
        mb_memory: 512,
        pagesize: 4096,
    };
    workload::fio::parse_job_file_on(job_text, &overrides, Some(&env))
        .map(|run| {
            run.jobs
                .into_iter()
                .filter(|job| keep(&job.spec))
                .map(|job| job.name)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the job mixes reads and writes (`rw=randrw|rw|readwrite`), in its options or the
/// globals of the fio document.
fn mixed(document: &Value, job: &str) -> bool {
    let rw = |options: &Value| {
        ["rw", "readwrite"]
            .iter()
            .find_map(|k| options.get(*k).and_then(Value::as_str).map(str::to_string))
    };
    let own = document["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["jobname"] == job))
        .and_then(|j| rw(&j["job options"]));
    own.or_else(|| rw(&document["global options"]))
        .is_some_and(|m| matches!(m.as_str(), "randrw" | "rw" | "readwrite"))
}

/// One clone's per-I/O log summary from the peer's console.
#[derive(Debug, Clone, PartialEq)]
pub struct CloneLog {
    /// fio's thread number (the `N` of `cmp_clat.N.log`).
    pub thread: u64,
    pub reads: u64,
    pub writes: u64,
    pub distinct_reads: u64,
    pub distinct_writes: u64,
    pub first_ms: u64,
    pub last_ms: u64,
}

/// The `CMP_LOG` lines of the peer's console, by thread number.
pub fn clone_logs(console: &str) -> Vec<CloneLog> {
    let mut logs: Vec<CloneLog> = console
        .lines()
        .filter_map(|line| {
            let rest = line.trim_end_matches('\r').split_once("CMP_LOG ")?.1;
            let mut words = rest.split_whitespace();
            let file = words.next()?;
            let thread = file.rsplit_once("clat.")?.1.strip_suffix(".log")?.parse().ok()?;
            let field = |key: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse::<u64>().ok())
            };
            Some(CloneLog {
                thread,
                reads: field("reads")?,
                writes: field("writes")?,
                distinct_reads: field("distinct_reads")?,
                distinct_writes: field("distinct_writes")?,
                first_ms: field("first_ms")?,
                last_ms: field("last_ms")?,
            })
        })
        .collect();
    logs.sort_by_key(|l| l.thread);
    logs
}

/// baremq's jobs in order with their clone counts, from its `fio job "NAME": group G, N clone(s)`
/// lines, and the sets of jobs it ran at the same time (`jobs a, b: running at the same time`).
pub fn baremq_jobs(console: &str) -> (Vec<(String, u64)>, Vec<Vec<String>>) {
    let mut jobs = Vec::new();
    let mut together = Vec::new();
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.split_once("fio job \"").map(|(_, r)| r)
            && let Some((name, tail)) = rest.split_once("\": group ")
            && let Some(clones) = tail
                .split(", ")
                .nth(1)
                .and_then(|c| c.split(" clone(s)").next())
                .and_then(|c| c.trim().parse().ok())
        {
            jobs.push((name.to_string(), clones));
        } else if let Some(rest) = line.split_once("jobs ").map(|(_, r)| r)
            && let Some((names, _)) = rest.split_once(": running at the same time")
        {
            together.push(names.split(", ").map(str::to_string).collect());
        }
    }
    (jobs, together)
}

/// The sets of jobs whose clones' I/O spans overlap in time, from the per-I/O logs; `jobs` gives
/// the clone counts in fio's thread order.
pub fn fio_overlaps(jobs: &[(String, u64)], logs: &[CloneLog]) -> Vec<Vec<String>> {
    let mut spans: Vec<(String, u64, u64)> = Vec::new();
    let mut thread = 1;
    for (name, clones) in jobs {
        let mine: Vec<&CloneLog> = logs
            .iter()
            .filter(|l| (thread..thread + clones).contains(&l.thread))
            .collect();
        thread += clones;
        if let (Some(first), Some(last)) = (
            mine.iter().map(|l| l.first_ms).min(),
            mine.iter().map(|l| l.last_ms).max(),
        ) {
            spans.push((name.clone(), first, last));
        }
    }
    // Jobs overlapping in time, grouped transitively in start order.
    spans.sort_by_key(|s| s.1);
    let mut sets: Vec<(Vec<String>, u64)> = Vec::new();
    for (name, first, last) in spans {
        match sets.last_mut() {
            Some((names, end)) if first <= *end => {
                names.push(name);
                *end = (*end).max(last);
            }
            _ => sets.push((vec![name], last)),
        }
    }
    sets.into_iter()
        .filter(|(names, _)| names.len() > 1)
        .map(|(names, _)| names)
        .collect()
}

/// Whether `tool` is on the PATH.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// `document` with the options fio-plot needs (`rw`, `bs`, `iodepth`, `numjobs`) in every job's
/// `job options`: real fio lists options of `[global]` only under `global options`.
fn with_plot_options(document: &Value) -> Value {
    let mut out = document.clone();
    let globals = document["global options"].clone();
    if let Some(jobs) = out["jobs"].as_array_mut() {
        for job in jobs {
            for (key, default) in [("rw", "read"), ("bs", "4k"), ("iodepth", "1"), ("numjobs", "1")] {
                let value = job["job options"]
                    .get(key)
                    .or_else(|| globals.get(key))
                    .cloned()
                    .unwrap_or_else(|| Value::String(default.into()));
                // fio leaves `job options` out of a job that has none of its own.
                if !job["job options"].is_object() {
                    job["job options"] = Value::Object(serde_json::Map::new());
                }
                if let Some(options) = job["job options"].as_object_mut() {
                    options.insert(key.into(), value);
                }
            }
        }
    }
    out
}

/// Reads `document` (saved as `json`) with fio's own tools: `fio_jsonplus_clat2csv` (convert,
/// then `--validate`) and fio-plot's 2D bar chart for the first job. One line per tool.
fn read_with_fio_tools(json: &Path, document: &Value, dir: &Path, side: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let run = |command: &mut std::process::Command| match command.output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).to_string()),
        Ok(out) => Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .lines()
        .last()
        .unwrap_or("failed")
        .to_string()),
        Err(e) => Err(e.to_string()),
    };
    let tool = "fio_jsonplus_clat2csv";
    if on_path(tool) {
        let stub = dir.join(format!("{side}-clat.csv"));
        let converted = run(std::process::Command::new(tool).arg(json).arg(&stub))
            .and_then(|_| run(std::process::Command::new(tool).arg(json).arg(&stub).arg("--validate")));
        lines.push(match converted {
            Ok(out) => format!(
                "{side}: {tool}: {} job(s) converted and validated",
                out.matches("validated").count()
            ),
            Err(e) => format!("{side}: {tool}: FAILED: {e}"),
        });
    } else {
        lines.push(format!("{side}: {tool} not installed (apt-get install fio): not run"));
    }
    if on_path("fio-plot") {
        let plot_dir = dir.join(format!("{side}-plot"));
        let _ = fs::remove_dir_all(&plot_dir);
        let result = fs::create_dir_all(&plot_dir)
            .map_err(|e| e.to_string())
            .and_then(|_| fioout::split_by_job(&with_plot_options(document)))
            .and_then(|files| {
                let (name, _) = files.first().ok_or("no job")?.clone();
                for (file, single) in &files {
                    fs::write(
                        plot_dir.join(file),
                        serde_json::to_string_pretty(single).unwrap_or_default(),
                    )
                    .map_err(|e| e.to_string())?;
                }
                let parts: Vec<&str> = name.trim_end_matches(".json").rsplitn(3, '-').collect();
                let [numjobs, iodepth, rw] = parts[..] else {
                    return Err(format!("cannot read rw-iodepth-numjobs from {name}"));
                };
                if rw.contains("trim") {
                    // fio-plot 1.1 has no trim direction: it stops with `KeyError: 'randtrim'` on
                    // real fio's document as on baremq's (seen with fio-compare).
                    return Ok(format!(
                        "{side}: fio-plot: no chart for rw={rw} (fio-plot has no trim direction): not run"
                    ));
                }
                let png = dir.join(format!("{side}-fio-plot.png"));
                let mut command = std::process::Command::new("fio-plot");
                command.arg("-i").arg(&plot_dir).args([
                    "-T",
                    &format!("{side} {rw}"),
                    "-l",
                    "-r",
                    rw,
                    "-d",
                    iodepth,
                    "-n",
                    numjobs,
                ]);
                if matches!(rw, "randrw" | "rw" | "readwrite") {
                    // fio-plot charts one direction of a mixed job at a time.
                    command.args(["-f", "read"]);
                }
                run(command.arg("-o").arg(&png))?;
                Ok(format!(
                    "{side}: fio-plot: chart of {rw} iodepth {iodepth} numjobs {numjobs} in {}",
                    png.display()
                ))
            });
        lines.push(result.unwrap_or_else(|e| format!("{side}: fio-plot: FAILED: {e}")));
    } else {
        lines.push(format!(
            "{side}: fio-plot not installed (pip install fio-plot): not run"
        ));
    }
    lines
}

pub fn cmd_fio_compare(args: &[String]) -> Result<bool, String> {
    let (args, words) = crate::split_dashdash(args);
    let mut job: Option<PathBuf> = None;
    let mut device = RunDevice::Nvme;
    let mut smp = 2u32;
    let mut disk_bytes = 256u64 << 20;
    let mut overrides: Vec<(String, String)> = Vec::new();
    let mut timeout = 900u64;
    let mut out_dir: Option<PathBuf> = None;
    let mut namespaces = 1usize;
    let mut options = args::Options::new(args);
    while let Some(option) = options.next()? {
        match option {
            "--device" => {
                device = match options.value()? {
                    "nvme" => RunDevice::Nvme,
                    "md" | "megasas" => RunDevice::Megasas,
                    v => return Err(format!("--device '{v}': use nvme or md (megasas-gen2)")),
                }
            }
            "--smp" => {
                let v = options.value()?;
                smp = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or(format!("--smp '{v}': use 1..64"))?;
            }
            "--disk-size" => {
                let v = options.value()?;
                disk_bytes = crate::scenario::parse_size(v)
                    .filter(|b| *b >= 1 << 20)
                    .ok_or(format!("--disk-size '{v}': a size of at least 1M, e.g. 256M"))?;
            }
            "--namespaces" => {
                let v = options.value()?;
                namespaces = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=4).contains(n))
                    .ok_or(format!("--namespaces '{v}': use 1..4"))?;
            }
            "--override" => {
                let v = options.value()?;
                let (key, val) = v.split_once('=').unwrap_or((v, ""));
                if key.is_empty() || key.contains(char::is_whitespace) || val.contains(char::is_whitespace) {
                    return Err(format!(
                        "--override '{v}': use KEY=VALUE (KEY= for a bare flag), no blanks"
                    ));
                }
                overrides.push((key.to_ascii_lowercase(), val.to_string()));
            }
            "--timeout" => {
                let v = options.value()?;
                timeout = v
                    .parse()
                    .ok()
                    .filter(|t| *t > 0)
                    .ok_or(format!("--timeout '{v}': seconds"))?;
            }
            "--out" => out_dir = Some(PathBuf::from(options.value()?)),
            other if !other.starts_with("--") && job.is_none() => job = Some(PathBuf::from(other)),
            other => return Err(format!("fio-compare: unexpected '{other}'\n{USAGE}")),
        }
    }
    if namespaces > 1 && device != RunDevice::Nvme {
        return Err("--namespaces is for --device nvme".into());
    }
    let (job, out_dir) = match (job, words.is_empty()) {
        (Some(job), true) => {
            let stem = job
                .file_stem()
                .map_or("job".into(), |s| s.to_string_lossy().to_string());
            let out_dir = out_dir.unwrap_or_else(|| root().join("target/fio-compare").join(&stem));
            fs::create_dir_all(&out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
            (job, out_dir)
        }
        (None, false) => {
            // The words become a job file, so both sides run the same text.
            let out_dir = out_dir.unwrap_or_else(|| root().join("target/fio-compare/command-line"));
            fs::create_dir_all(&out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
            let job = out_dir.join("command-line.fio");
            fs::write(&job, words_to_job_file(words)?).map_err(|e| format!("writing {}: {e}", job.display()))?;
            (job, out_dir)
        }
        _ => return Err(format!("give a job file or fio words after --, not both\n{USAGE}")),
    };
    let job_text = fs::read_to_string(&job).map_err(|e| format!("reading {}: {e}", job.display()))?;
    // A job baremq refuses fails here, before a minute of Linux under TCG ($mb_memory: about
    // the guest's 512 MiB).
    let override_pairs: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let env = workload::fio::FioEnv {
        ncpus: u64::from(smp),
        mb_memory: 512,
        pagesize: 4096,
    };
    if let Err(e) = workload::fio::parse_job_file_on(&job_text, &override_pairs, Some(&env)) {
        return Err(format!("baremq refuses {}: {e}", job.display()));
    }

    // The peer.
    let built = crate::peer::ensure_built(&crate::peer::default_dir()?)?;
    let (kernel, base_initrd) = (built.kernel_image, built.initrd);
    let (modules, linux_dev) = guest_device(device);
    let baremq_dev = device.block_device();
    // Namespace k of controller 0 is nvme0nK on both sides.
    let names = |first: &str| -> Vec<String> {
        (1..=namespaces)
            .map(|k| {
                if k == 1 {
                    first.to_string()
                } else {
                    format!("nvme0n{k}")
                }
            })
            .collect()
    };
    let filename = |first: &str| {
        names(first)
            .iter()
            .map(|n| format!("/dev/{n}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut forced = vec![("filename".to_string(), filename(linux_dev))];
    forced.extend(overrides.iter().cloned());
    // Per-I/O log of every clone, with offsets and wall-clock times, for the block and
    // concurrency comparisons (fio names them cmp_clat.N.log by thread number).
    for (key, val) in [
        ("write_lat_log", "cmp"),
        ("log_avg_msec", "0"),
        ("log_offset", "1"),
        ("log_unix_epoch", "1"),
    ] {
        forced.push((key.into(), val.into()));
    }
    let peer_job = force_settings(&job_text, &forced);
    fs::write(out_dir.join("peer-job.fio"), &peer_job).map_err(|e| format!("writing peer-job.fio: {e}"))?;
    let init = GUEST_INIT
        .replace("@MODULES@", modules)
        .replace("@DEVS@", &names(linux_dev).join(" "));
    let base = fs::read(&base_initrd).map_err(|e| format!("reading {}: {e}", base_initrd.display()))?;
    let initrd = append_cpio(
        &base,
        &[
            ("init", 0o100_755, init.as_bytes()),
            ("cmp", 0o040_755, &[]),
            ("cmp/job.fio", 0o100_644, peer_job.as_bytes()),
        ],
    );
    let initrd_path = out_dir.join("peer-initrd.cpio");
    fs::write(&initrd_path, initrd).map_err(|e| format!("writing {}: {e}", initrd_path.display()))?;
    let peer_images = disk_images(&out_dir, "peer", namespaces, disk_bytes)?;
    let peer_image = peer_images[0].clone();
    let mut peer_args: Vec<String> = [
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max",
        "-m",
        "1G",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
        "-M",
        "q35",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    peer_args.extend([
        "-smp".into(),
        smp.to_string(),
        "-kernel".into(),
        kernel.display().to_string(),
        "-initrd".into(),
        initrd_path.display().to_string(),
        "-append".into(),
        "console=ttyS0 quiet panic=-1".into(),
    ]);
    peer_args.extend(device.qemu_args(&peer_image, smp));
    peer_args.extend(more_namespaces(&peer_images));
    println!("xtask: peer: qemu-system-x86_64 {}", peer_args.join(" "));
    let peer = qemu::run_with(
        Path::new("qemu-system-x86_64"),
        &peer_args,
        Duration::from_secs(timeout),
        false,
        Some(&out_dir.join("peer-console.log")),
    )?;
    let peer_json = between(&peer.output, "CMP_JSON_BEGIN", "CMP_JSON_END").ok_or(format!(
        "the peer printed no fio document (see {}); its fio said: {}",
        out_dir.join("peer-console.log").display(),
        peer.output
            .lines()
            .filter(|l| l.contains("CMP_STDERR") || l.contains("CMP_ERR"))
            .collect::<Vec<_>>()
            .join(" | ")
    ))?;
    // fio prints notes before the document when --output is a file only sometimes; start at '{'.
    let peer_json = &peer_json[peer_json.find('{').unwrap_or(0)..];
    let peer_doc: Value = serde_json::from_str(peer_json).map_err(|e| format!("the peer's fio document: {e}"))?;
    fs::write(out_dir.join("fio.json"), peer_json).map_err(|e| format!("writing fio.json: {e}"))?;
    let peer_blocks = nonzero_blocks_of(&peer_images)?;
    let logs = clone_logs(&peer.output);

    // baremq.
    crate::setup::ensure_qemu()?;
    let baremq_kernel = crate::build_kernel(false)?;
    let baremq_images = disk_images(&out_dir, "baremq", namespaces, disk_bytes)?;
    let baremq_image = baremq_images[0].clone();
    let mut append = vec![format!("fio.override.filename={}", filename(baremq_dev))];
    append.extend(overrides.iter().map(|(k, v)| format!("fio.override.{k}={v}")));
    append.extend(["--".into(), "--output-format=json+".into()]);
    let mut extra = vec![
        "-M".into(),
        "q35".into(),
        "-smp".into(),
        smp.to_string(),
        "-m".into(),
        "512M".into(),
    ];
    extra.extend(device.qemu_args(&baremq_image, smp));
    extra.extend(more_namespaces(&baremq_images));
    extra.extend(qemu::fio_initrd_args(std::slice::from_ref(&job), false)?);
    let machine = qemu::Machine {
        accel: qemu::Accel::Tcg,
        firmware: qemu::Firmware::Qboot,
        kernel: Some(baremq_kernel),
        cdrom: None,
        append,
        extra,
    };
    let baremq = qemu::run_with(
        Path::new("qemu-system-x86_64"),
        &machine.args(),
        Duration::from_secs(timeout),
        false,
        Some(&out_dir.join("baremq-console.log")),
    )?;
    let extracted = fioout::extract(&baremq.output)?;
    let baremq_doc = extracted.documents.into_iter().next().ok_or(format!(
        "baremq printed no fio document (see {})",
        out_dir.join("baremq-console.log").display()
    ))?;
    fs::write(
        out_dir.join("baremq.json"),
        serde_json::to_string_pretty(&baremq_doc).unwrap_or_default(),
    )
    .map_err(|e| format!("writing baremq.json: {e}"))?;
    let baremq_blocks = nonzero_blocks_of(&baremq_images)?;
    let (bq_jobs, mut bq_together) = baremq_jobs(&baremq.output);
    let mut fio_together = fio_overlaps(&bq_jobs, &logs);
    // Sets, not sequences: the order inside a set and of the sets carries no meaning.
    for sets in [&mut fio_together, &mut bq_together] {
        sets.iter_mut().for_each(|set| set.sort());
        sets.sort();
    }

    // The table.
    let fio_jobs = per_job(&peer_doc);
    let timed = time_based_jobs(&job_text, &overrides);
    let sized = variable_size_jobs(&job_text, &overrides);
    let bq_per_job = per_job(&baremq_doc);
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| job | group fio / baremq | read I/Os fio / baremq | write I/Os fio / baremq | trim I/Os fio / baremq | I/O counts |"
    );
    let _ = writeln!(table, "|---|---|---|---|---|---|");
    let mut all_agree = true;
    let names: Vec<String> = bq_jobs
        .iter()
        .map(|(n, _)| n.clone())
        .chain(fio_jobs.keys().cloned())
        .fold(Vec::new(), |mut v, n| {
            if !v.contains(&n) {
                v.push(n);
            }
            v
        });
    for name in &names {
        let f = fio_jobs.get(name).copied();
        let b = bq_per_job.get(name).copied();
        let show = |x: Option<JobCounts>, k: usize| {
            x.map_or("-".into(), |t| match k {
                0 => t.group.to_string(),
                1 if t.verify_pass_reads > 0 => format!("{}+{} verify", t.reads, t.verify_pass_reads),
                1 => t.reads.to_string(),
                2 => t.writes.to_string(),
                _ => t.trims.to_string(),
            })
        };
        let verdict = match (f, b) {
            _ if timed.contains(name) => "time-based: not compared".to_string(),
            // Each side draws every I/O's size, so the counts differ by chance; the bytes must not.
            (Some(f), Some(b))
                if sized.contains(name) && (f.read_bytes, f.write_bytes) == (b.read_bytes, b.write_bytes) =>
            {
                format!(
                    "bytes agree ({} read, {} written; variable block sizes: I/O counts drawn)",
                    f.read_bytes, f.write_bytes
                )
            }
            (Some(f), Some(b))
                if sized.contains(name)
                    && f.read_bytes + f.write_bytes == b.read_bytes + b.write_bytes
                    && mixed(&peer_doc, name) =>
            {
                format!(
                    "total bytes agree ({}; variable block sizes and rwmixread: counts and split drawn)",
                    f.read_bytes + f.write_bytes
                )
            }
            (Some(f), Some(b)) if sized.contains(name) => {
                all_agree = false;
                format!(
                    "bytes DIFFER: read {} / {}, written {} / {}",
                    f.read_bytes, b.read_bytes, f.write_bytes, b.write_bytes
                )
            }
            (Some(f), Some(b))
                if (f.reads, f.writes, f.trims) == (b.reads + b.verify_pass_reads, b.writes, b.trims) =>
            {
                "agree".into()
            }
            (Some(f), Some(b))
                if f.reads + f.writes == b.reads + b.verify_pass_reads + b.writes
                    && f.trims == b.trims
                    && mixed(&peer_doc, name) =>
            {
                "total agrees (each I/O's direction is drawn: rwmixread)".into()
            }
            (Some(_), Some(_)) => {
                all_agree = false;
                "DIFFER".into()
            }
            _ => {
                all_agree = false;
                "missing on one side".into()
            }
        };
        let _ = writeln!(
            table,
            "| {name} | {} / {} | {} / {} | {} / {} | {} / {} | {verdict} |",
            show(f, 0),
            show(b, 0),
            show(f, 1),
            show(b, 1),
            show(f, 2),
            show(b, 2),
            show(f, 3),
            show(b, 3)
        );
    }
    let sets = |s: &[Vec<String>]| {
        if s.is_empty() {
            "none".to_string()
        } else {
            s.iter()
                .map(|v| format!("{{{}}}", v.join(", ")))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    let _ = writeln!(
        table,
        "\nran at the same time: fio {} / baremq {}{}",
        sets(&fio_together),
        sets(&bq_together),
        if fio_together == bq_together {
            " (agree)"
        } else {
            " (DIFFER)"
        }
    );
    if fio_together != bq_together {
        all_agree = false;
    }
    let _ = writeln!(
        table,
        "\nfio clones (per-I/O log, verify reads included): I/Os and distinct offsets per direction"
    );
    for log in &logs {
        let once = |ios: u64, distinct: u64| match ios {
            0 => String::from("-"),
            _ if ios == distinct * namespaces as u64 && namespaces > 1 => {
                format!("{ios} I/Os on {distinct} offsets, each once per file")
            }
            _ if ios == distinct => format!("{ios} I/Os on {distinct} offsets, each once"),
            _ => format!("{ios} I/Os on {distinct} offsets, with repeats"),
        };
        let _ = writeln!(
            table,
            "  thread {}: reads {}; writes {}",
            log.thread,
            once(log.reads, log.distinct_reads),
            once(log.writes, log.distinct_writes)
        );
    }
    // Which blocks a job writes is only fixed when each clone writes each block once.
    let drawn_with_repeats = logs.iter().any(|l| l.writes != l.distinct_writes * namespaces as u64);
    // A mixed job draws each I/O's direction, so the two sides write different numbers of
    // blocks; each written once, the blocks are the writes times bs / 4 KiB on both sides.
    let fio_writes: u64 = fio_jobs.values().map(|j| j.writes).sum();
    let bq_writes: u64 = bq_per_job.values().map(|j| j.writes).sum();
    let split_drawn_and_proportional = names.iter().any(|n| mixed(&peer_doc, n))
        && fio_writes > 0
        && u128::from(peer_blocks) * u128::from(bq_writes) == u128::from(baremq_blocks) * u128::from(fio_writes);
    let _ = writeln!(
        table,
        "\nnon-zero 4 KiB blocks on the disk after the run: fio {peer_blocks} / baremq {baremq_blocks}{}",
        if !timed.is_empty() {
            " (time-based jobs: not judged)"
        } else if drawn_with_repeats {
            " (writes drawn with repeats, norandommap or a skewed distribution: not judged)"
        } else if peer_blocks == baremq_blocks {
            " (agree)"
        } else if split_drawn_and_proportional {
            " (agree: each side's blocks follow its own number of writes; the read/write split is drawn)"
        } else {
            " (DIFFER)"
        }
    );
    if peer_blocks != baremq_blocks && timed.is_empty() && !drawn_with_repeats && !split_drawn_and_proportional {
        all_agree = false;
    }
    // Jobs whose data is the same on both sides (a verify_pattern) leave the same bytes, apart
    // from each side's verify header at the start of a block (fio's 40 bytes, baremq's 48).
    let (mut same, mut header_only, mut other) = (0, 0, 0);
    for (peer, baremq) in peer_images.iter().zip(&baremq_images) {
        let (s, h, o) = block_differences(peer, baremq)?;
        (same, header_only, other) = (same + s, header_only + h, other + o);
    }
    let _ = writeln!(
        table,
        "disk images, 4 KiB blocks: {same} identical, {header_only} differing only in their first 48 bytes \
         (verify headers), {other} differing beyond (random data differs by design)"
    );
    let _ = writeln!(table, "\nfio's tools on both documents:");
    for line in read_with_fio_tools(&out_dir.join("fio.json"), &peer_doc, &out_dir, "fio")
        .into_iter()
        .chain(read_with_fio_tools(
            &out_dir.join("baremq.json"),
            &baremq_doc,
            &out_dir,
            "baremq",
        ))
    {
        if line.contains("FAILED") {
            all_agree = false;
        }
        let _ = writeln!(table, "  {line}");
    }
    print!("{table}");
    fs::write(out_dir.join("compare.md"), &table).map_err(|e| format!("writing compare.md: {e}"))?;
    println!(
        "xtask: fio-compare: documents fio.json and baremq.json, consoles and compare.md in {}",
        out_dir.display()
    );
    Ok(all_agree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_settings_replace_every_section_s_own_line() {
        let job = "[global]\nfilename=/dev/nvme0n1\nbs=4k\n[a]\nruntime = 60\nrw=randread\n[b]\nfilename=/dev/x\n";
        let forced = force_settings(
            job,
            &[
                ("filename".into(), "/dev/sda".into()),
                ("runtime".into(), "2".into()),
                ("time_based".into(), "".into()),
            ],
        );
        assert!(forced.starts_with("; fio-compare"));
        let lines: Vec<&str> = forced.lines().filter(|l| !l.starts_with(';')).collect();
        assert_eq!(
            &lines[..4],
            ["[global]", "filename=/dev/sda", "runtime=2", "time_based"]
        );
        assert_eq!(
            forced.matches("filename=").count(),
            3,
            "one set, two shown as removed: {forced}"
        );
        assert!(lines.contains(&"bs=4k") && lines.contains(&"rw=randread") && lines.contains(&"[b]"));
        assert!(!lines.iter().any(|l| l.contains("60")));
    }

    #[test]
    fn appended_archive_is_valid_newc_after_the_base() {
        let out = append_cpio(b"abc", &[("init", 0o100_755, b"#!/bin/sh\n"), ("cmp", 0o040_755, b"")]);
        assert_eq!(&out[..4], b"abc\0", "the base padded to 4 bytes");
        let first = &out[4..];
        assert!(first.starts_with(b"070701"));
        let field = |entry: &[u8], n: usize| {
            u32::from_str_radix(std::str::from_utf8(&entry[6 + 8 * n..14 + 8 * n]).unwrap(), 16).unwrap()
        };
        assert_eq!(field(first, 1), 0o100_755, "mode");
        assert_eq!(field(first, 6), 10, "file size");
        assert_eq!(field(first, 11), 5, "name size with its NUL");
        assert_eq!(&first[110..115], b"init\0");
        // Header + name padded to 4, then the data.
        assert_eq!(&first[116..126], b"#!/bin/sh\n");
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
        assert_eq!(out.len() % 4, 0);
    }

    #[test]
    fn peer_logs_and_baremq_lines_give_the_concurrent_sets() {
        let peer = "x CMP_LOG /tmp/cmp_clat.1.log ios=256 reads=256 writes=0 distinct_reads=256 distinct_writes=0 first_ms=1000 last_ms=2000\n\
                    CMP_LOG /tmp/cmp_clat.2.log ios=10 reads=0 writes=10 distinct_reads=0 distinct_writes=9 first_ms=1500 last_ms=2500\r\n\
                    CMP_LOG /tmp/cmp_clat.3.log ios=5 reads=5 writes=0 distinct_reads=5 distinct_writes=0 first_ms=3000 last_ms=3100\n";
        let logs = clone_logs(peer);
        assert_eq!(logs.len(), 3);
        assert_eq!((logs[1].thread, logs[1].writes, logs[1].distinct_writes), (2, 10, 9));
        let console = "fio job \"reader\": group 0, 1 clone(s) on CPUs 0, ioengine=libaio, mapped to: x\n\
                       fio job \"writer\": group 0, 1 clone(s) on CPUs 1, ioengine=libaio, mapped to: y\n\
                       fio job \"after\": group 1, 1 clone(s) on CPUs 0, ioengine=libaio, mapped to: z\n\
                       jobs reader, writer: running at the same time; each report's kernel counters cover all of them\n";
        let (jobs, together) = baremq_jobs(console);
        assert_eq!(jobs, [("reader".into(), 1), ("writer".into(), 1), ("after".into(), 1)]);
        assert_eq!(together, [vec!["reader".to_string(), "writer".to_string()]]);
        assert_eq!(fio_overlaps(&jobs, &logs), together);
        // Clones: two threads of one job are one job.
        let two = [("a".to_string(), 2), ("b".to_string(), 1)];
        assert_eq!(fio_overlaps(&two, &logs), Vec::<Vec<String>>::new());
    }

    #[test]
    fn variable_size_jobs_come_from_the_file() {
        let text = "[a]\nbssplit=4k/50:16k/50\n[b]\nbs=8k\n[c]\nbs=4k,16k\n";
        assert_eq!(variable_size_jobs(text, &[]), ["a", "c"]);
        assert!(variable_size_jobs(text, &[("bs".into(), "4k".into())]).contains(&"a".to_string()));
    }

    #[test]
    fn per_job_counts_each_direction_trims_included_over_clones() {
        let document: Value = serde_json::from_str(
            r#"{"jobs":[
                {"jobname":"tw","groupid":1,"read":{"total_ios":0},"write":{"total_ios":100},"trim":{"total_ios":100}},
                {"jobname":"tw","groupid":1,"read":{"total_ios":0},"write":{"total_ios":28},"trim":{"total_ios":29}},
                {"jobname":"r","groupid":2,"read":{"total_ios":7},"write":{"total_ios":0},"trim":{"total_ios":0}}
            ]}"#,
        )
        .unwrap();
        let jobs = per_job(&document);
        let tw = jobs["tw"];
        assert_eq!((tw.group, tw.reads, tw.writes, tw.trims), (1, 0, 128, 129));
        let r = jobs["r"];
        assert_eq!((r.group, r.reads, r.writes, r.trims), (2, 7, 0, 0));
    }

    #[test]
    fn time_based_jobs_come_from_the_file_and_the_overrides() {
        let text = "[global]\ntime_based\nruntime=60\n[a]\nrw=read\n[b]\nstonewall\nrw=write\ntime_based=0\n";
        assert_eq!(time_based_jobs(text, &[]), ["a"]);
        assert!(time_based_jobs(text, &[("time_based".into(), "0".into())]).is_empty());
        // The document side: fio-plot's options filled in from fio's global options.
        let doc: Value = serde_json::from_str(
            r#"{"global options":{"bs":"128k","iodepth":"32"},"jobs":[{"jobname":"a","job options":{"rw":"read"}}]}"#,
        )
        .unwrap();
        let filled = with_plot_options(&doc);
        let options = &filled["jobs"][0]["job options"];
        assert_eq!(
            (options["rw"].as_str(), options["bs"].as_str()),
            (Some("read"), Some("128k"))
        );
        assert_eq!(
            (options["iodepth"].as_str(), options["numjobs"].as_str()),
            (Some("32"), Some("1"))
        );
        // A job with no options of its own has no `job options` in fio's document.
        let bare: Value =
            serde_json::from_str(r#"{"global options":{"rw":"randread"},"jobs":[{"jobname":"a"}]}"#).unwrap();
        assert_eq!(with_plot_options(&bare)["jobs"][0]["job options"]["rw"], "randread");
    }

    #[test]
    fn fio_words_become_the_job_file_they_mean() {
        let words: Vec<String> = "--ioengine=libaio --direct=1 --output-format=json --name=w --rw=randwrite --bs=4k \
                                  --group_reporting --name=r --rw=read"
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let text = words_to_job_file(&words).unwrap();
        let run = workload::fio::parse_job_file(&text, &[]).unwrap();
        assert_eq!(run.jobs.len(), 2);
        assert_eq!((run.jobs[0].name.as_str(), run.jobs[1].name.as_str()), ("w", "r"));
        assert!(text.contains("[global]\nioengine=libaio\ndirect=1\n"), "{text}");
        assert!(text.contains("[w]\nrw=randwrite\nbs=4k\ngroup_reporting\n"), "{text}");
        assert!(!text.contains("output-format"), "run options are the comparison's own");
    }
}
