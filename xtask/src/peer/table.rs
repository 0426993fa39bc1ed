//! `cargo xtask peer table`: Markdown tables of the saved runs (`results/*.results`): one row
//! per scenario and job, one column per (vCPUs, tag), for IOPS, bandwidth and total latency,
//! and the boot timing of every run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use super::run::PeerResult;

/// A run's name `SCENARIO-ACCEL-smpN-rTAG[-...]` as (scenario, accel, vCPUs, tag).
fn split_tag(name: &str) -> Option<(String, String, u32, String)> {
    let at = name.rfind("-smp")?;
    let (head, tail) = (&name[..at], &name[at + 4..]);
    let (scenario, accel) = head.rsplit_once('-')?;
    let (smp, tag) = tail.split_once("-r")?;
    Some((
        scenario.to_string(),
        accel.to_string(),
        smp.parse().ok()?,
        tag.to_string(),
    ))
}

/// `rr4k_qd32x4` and `rr4k_qd32x2_hipri` are one job on different vCPU counts.
fn job_key(job: &str) -> String {
    match job.find("_qd32x") {
        Some(i) => {
            let rest = &job[i + 6..];
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            format!("{}_qd32xN{}", &job[..i], &rest[digits..])
        }
        None => job.to_string(),
    }
}

/// The run's `uptime=` of a `PEER_T_*` line.
fn uptime(line: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("uptime="))
        .map(str::to_string)
}

/// A table row: scenario, accelerator, job.
type Row = (String, String, String);
/// A table column: vCPUs, tag.
type Column = (u32, String);

#[derive(Default)]
struct Runs {
    /// (scenario, accel, job) -> (smp, tag) -> the result.
    rows: BTreeMap<Row, BTreeMap<Column, PeerResult>>,
    /// The boot timing of every run, by name.
    boots: BTreeMap<String, BTreeMap<String, String>>,
}

fn read_runs(files: &[(String, String)]) -> Runs {
    let mut runs = Runs::default();
    for (name, text) in files {
        let Some((scenario, accel, smp, tag)) = split_tag(name) else {
            continue;
        };
        let mut boot = BTreeMap::new();
        for line in text.lines() {
            if let Some(r) = PeerResult::parse(line) {
                runs.rows
                    .entry((scenario.clone(), accel.clone(), job_key(r.job())))
                    .or_default()
                    .insert((smp, tag.clone()), r);
            } else if let Some(rest) = line.strip_prefix("HOSTTIME ") {
                for (k, v) in rest.split_whitespace().filter_map(|w| w.split_once('=')) {
                    boot.insert(k.to_string(), v.to_string());
                }
            } else if let Some(mark) = ["PEER_T_INIT", "PEER_T_DISK_READY", "PEER_T_FIO_START"]
                .iter()
                .find(|m| line.starts_with(*m))
                && let Some(u) = uptime(line)
            {
                boot.entry(mark.to_string()).or_insert(u);
            }
        }
        runs.boots.insert(name.clone(), boot);
    }
    runs
}

fn render(runs: &Runs) -> String {
    let mut out = String::new();
    let columns: BTreeSet<Column> = runs.rows.values().flat_map(|v| v.keys().cloned()).collect();
    let header: Vec<String> = columns.iter().map(|(s, t)| format!("smp{s} r{t}")).collect();
    for (key, title) in [
        ("iops", "IOPS"),
        ("bw_MBps", "Bandwidth, MB/s (10^6 B/s)"),
        ("lat_p50_us", "Total latency p50 (fio lat = slat + clat), us"),
        ("lat_p99_us", "Total latency p99, us"),
    ] {
        let _ = writeln!(out, "\n**{title}**\n");
        let _ = writeln!(out, "| scenario | job | {} |", header.join(" | "));
        let _ = writeln!(out, "|---|---|{}", "---:|".repeat(columns.len()));
        for ((scenario, accel, job), cells) in &runs.rows {
            let values: Vec<&str> = columns
                .iter()
                .map(|c| cells.get(c).and_then(|r| r.values.get(key)).map_or("-", String::as_str))
                .collect();
            let _ = writeln!(out, "| {scenario} ({accel}) | {job} | {} |", values.join(" | "));
        }
    }
    let _ = writeln!(
        out,
        "\n**Boot timing** (host ms from starting QEMU; guest seconds of /proc/uptime)\n"
    );
    let _ = writeln!(
        out,
        "| run | host: first console ms | host: /init ms | host: first fio ms | guest: /init s | guest: disk ready s | \
         guest: first fio s | host: total ms |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, b) in &runs.boots {
        let get = |k: &str| b.get(k).map_or("-", String::as_str);
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            get("first_console_ms"),
            get("init_ms"),
            get("fio_start_ms"),
            get("PEER_T_INIT"),
            get("PEER_T_DISK_READY"),
            get("PEER_T_FIO_START"),
            get("total_ms")
        );
    }
    out
}

/// The tables of every `*.results` file in `dir`.
pub fn tables(dir: &Path) -> Result<String, String> {
    let entries = fs::read_dir(dir).map_err(|e| {
        format!(
            "peer table: no results in {} ({e}); run `cargo xtask peer run ...` first",
            dir.display()
        )
    })?;
    let mut files: Vec<(String, String)> = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "results")
            && let (Some(stem), Ok(text)) = (path.file_stem(), fs::read_to_string(&path))
        {
            files.push((stem.to_string_lossy().into_owned(), text));
        }
    }
    if files.is_empty() {
        return Err(format!("peer table: no *.results in {}", dir.display()));
    }
    files.sort();
    Ok(render(&read_runs(&files)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_split_into_their_parts() {
        assert_eq!(
            split_tag("megasas-nullco-tcg-smp2-r1"),
            Some(("megasas-nullco".into(), "tcg".into(), 2, "1".into()))
        );
        assert_eq!(
            split_tag("megasas-shm-kvm-smp1-rsbs-writeback-threads"),
            Some(("megasas-shm".into(), "kvm".into(), 1, "sbs-writeback-threads".into()))
        );
        assert_eq!(split_tag("notes"), None);
        assert_eq!(job_key("rr4k_qd32x4"), "rr4k_qd32xN");
        assert_eq!(job_key("irq0/rr4k_qd32x2_hipri"), "irq0/rr4k_qd32xN_hipri");
        assert_eq!(job_key("rr4k_qd1"), "rr4k_qd1");
    }

    #[test]
    fn results_of_several_runs_pivot_into_columns() {
        let one = "PEER_T_INIT uptime=1.20 kernel=6.1 ncpu=1\nPEER_T_FIO_START uptime=2.00\n\
                   RESULT nullblk-tcg-smp1-r1/irq0/rr4k_qd32x1 iops=1000 bw_MBps=4.1 lat_p50_us=30.0 lat_p99_us=60.0\n\
                   HOSTTIME nullblk-tcg-smp1-r1 first_console_ms=300 init_ms=2500 fio_start_ms=3100 total_ms=9000\n";
        let two = "RESULT nullblk-tcg-smp2-r1/irq0/rr4k_qd32x2 iops=1900 bw_MBps=7.8 lat_p50_us=31.0 lat_p99_us=70.0\n";
        let runs = read_runs(&[
            ("nullblk-tcg-smp1-r1".into(), one.into()),
            ("nullblk-tcg-smp2-r1".into(), two.into()),
        ]);
        let text = render(&runs);
        assert!(text.contains("| scenario | job | smp1 r1 | smp2 r1 |"), "{text}");
        assert!(
            text.contains("| nullblk (tcg) | irq0/rr4k_qd32xN | 1000 | 1900 |"),
            "{text}"
        );
        assert!(
            text.contains("| nullblk (tcg) | irq0/rr4k_qd32xN | 4.1 | 7.8 |"),
            "{text}"
        );
        assert!(
            text.contains("| nullblk-tcg-smp1-r1 | 300 | 2500 | 3100 | 1.20 | - | 2.00 | 9000 |"),
            "{text}"
        );
        assert!(
            text.contains("| nullblk-tcg-smp2-r1 | - | - | - | - | - | - | - |"),
            "{text}"
        );
    }
}
