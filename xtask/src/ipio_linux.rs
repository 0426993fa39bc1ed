//! `cargo xtask ipio --linux`: Linux's side of the per-I/O count. The peer guest of
//! `cargo xtask peer` (Linux 6.1 and fio with io_uring) runs the same 4k random-read job on the
//! same emulated device under the same TCG plugin (`mmio=on`), twice with runtimes that differ;
//! the marginal instructions and MMIO accesses per I/O are printed beside baremq's. fio cannot
//! bound its peer jobs by I/O count, so these runs are timed (2 s and 6 s) and, unlike baremq's,
//! move slightly with the host's load.

use std::path::Path;

/// The peer's fio runtimes (seconds) whose difference is measured.
const LINUX_RUNTIMES_S: [u32; 2] = [2, 6];

/// Totals of one plugin run: instructions, MMIO reads, MMIO writes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    pub insns: u64,
    pub mmio_reads: u64,
    pub mmio_writes: u64,
}

/// Sums the plugin's block file (`start insns runs mem ...`) and `.mmio` file (`start r w`).
pub fn totals(blocks: &str, mmio: &str) -> Result<Totals, String> {
    let mut t = Totals::default();
    let field = |f: Option<&str>, line: &str| -> Result<u64, String> {
        f.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("plugin output: bad line '{line}'"))
    };
    for line in blocks.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.split_whitespace().skip(1);
        let insns = field(f.next(), line)?;
        let runs = field(f.next(), line)?;
        t.insns += insns * runs;
    }
    for line in mmio.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.split_whitespace().skip(1);
        t.mmio_reads += field(f.next(), line)?;
        t.mmio_writes += field(f.next(), line)?;
    }
    Ok(t)
}

/// I/Os fio reported in the peer's JSON blocks (`PEER_JSON_BEGIN tag` ... `PEER_JSON_END`): the
/// sum of `read.total_ios` and `write.total_ios` over every job.
pub fn peer_ios(log: &str) -> Result<u64, String> {
    let mut total = 0u64;
    let mut blocks = 0;
    let mut rest = log;
    while let Some(start) = rest.find("PEER_JSON_BEGIN") {
        let after = &rest[start..];
        let end = after
            .find("PEER_JSON_END")
            .ok_or("peer log: PEER_JSON_BEGIN without PEER_JSON_END")?;
        let block = &after[..end];
        let json_start = block.find('{').ok_or("peer log: a JSON block without '{'")?;
        let v: serde_json::Value =
            serde_json::from_str(&block[json_start..]).map_err(|e| format!("peer log: fio JSON: {e}"))?;
        let jobs = v["jobs"].as_array().ok_or("peer log: fio JSON without jobs")?;
        for j in jobs {
            for dir in ["read", "write"] {
                total += j[dir]["total_ios"].as_u64().unwrap_or(0);
            }
        }
        blocks += 1;
        rest = &after[end..];
    }
    if blocks == 0 {
        return Err("peer log: no fio JSON (PEER_JSON_BEGIN) in it".into());
    }
    Ok(total)
}

/// The peer scenario and fio job of a device and queue depth.
pub fn peer_scenario(device: &str, qd: u32) -> Result<(&'static str, &'static str), String> {
    let scenario = match device {
        "null0" => "nullblk",
        "md0" => "megasas-nullco",
        "nvme0n1" => "nvme-nullco",
        other => return Err(format!("--linux: no Linux peer scenario for {other}")),
    };
    let job = match qd {
        1 => "rr4k_qd1",
        32 => "rr4k_qd32",
        other => return Err(format!("--linux: the peer runs QD1 and QD32 jobs, not QD{other}")),
    };
    Ok((scenario, job))
}

/// Runs the peer twice under the plugin; returns per-I/O (instructions, MMIO reads, writes).
pub fn measure(plugin: &Path, dir: &Path, device: &str, qd: u32) -> Result<[f64; 3], String> {
    let (scenario, job) = peer_scenario(device, qd)?;
    let scenario = crate::peer::run::Scenario::parse(scenario)?;
    let built = crate::peer::ensure_built(&crate::peer::default_dir()?)?;
    let mut runs = Vec::new();
    for runtime in LINUX_RUNTIMES_S {
        let out = dir.join(format!("linux-{device}-qd{qd}-{runtime}s.txt"));
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(out.with_extension("txt.mmio"));
        println!(
            "xtask: ipio: Linux {} {job}, {runtime} s under the TCG plugin",
            scenario.name()
        );
        let mut options = crate::peer::run::RunOptions::new(scenario, 1, &format!("ipio{runtime}"));
        options.qemu_extra = vec![
            "-plugin".into(),
            format!("{},arg=out={},arg=mmio=on", plugin.display(), out.display()),
        ];
        options.jobs = Some(vec![job.to_string()]);
        options.nbmodes = Some(vec!["irq0".to_string()]);
        options.runtime_s = runtime;
        options.ramp_s = 0;
        options.json = true;
        options.timeout_s = 1200;
        let outcome = crate::peer::run::run(&built, &options)?;
        outcome
            .verdict()
            .map_err(|e| format!("the Linux peer's {} run failed: {e}", outcome.tag))?;
        let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()));
        let ios = peer_ios(&read(&outcome.log)?)?;
        let t = totals(&read(&out)?, &read(&out.with_extension("txt.mmio")).unwrap_or_default())?;
        runs.push((t, ios));
    }
    marginal(runs[0], runs[1])
}

/// (long - short) / (their I/O difference), per counter.
pub fn marginal(short: (Totals, u64), long: (Totals, u64)) -> Result<[f64; 3], String> {
    if long.1 <= short.1 {
        return Err(format!(
            "the longer Linux run did no more I/O ({} vs {}): nothing to divide",
            long.1, short.1
        ));
    }
    let ios = (long.1 - short.1) as f64;
    let d = |a: u64, b: u64| (a as f64 - b as f64) / ios;
    Ok([
        d(long.0.insns, short.0.insns),
        d(long.0.mmio_reads, short.0.mmio_reads),
        d(long.0.mmio_writes, short.0.mmio_writes),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_totals_multiply_runs_and_sum_mmio() {
        let t = totals("1000 10 5 20 0 ret\n2000 4 100 100 3 jmp\n", "2000 7 9\n3000 1 0\n").unwrap();
        assert_eq!(
            t,
            Totals {
                insns: 450,
                mmio_reads: 8,
                mmio_writes: 9
            }
        );
        assert!(totals("1000 x 1\n", "").is_err());
        assert!(totals("", "1000 1\n").is_err());
    }

    #[test]
    fn peer_ios_sum_every_job_and_direction() {
        let log = "boot noise\nPEER_JSON_BEGIN rr4k_qd32\nfio: x\n{\"jobs\":[{\"read\":{\"total_ios\":100},\
                   \"write\":{\"total_ios\":5}}]}\nPEER_JSON_END\nmore\nPEER_JSON_BEGIN b\n{\"jobs\":[{\"read\":\
                   {\"total_ios\":7},\"write\":{\"total_ios\":0}}]}\nPEER_JSON_END\n";
        assert_eq!(peer_ios(log).unwrap(), 112);
        assert!(peer_ios("no json here").unwrap_err().contains("no fio JSON"));
        assert!(peer_ios("PEER_JSON_BEGIN x\n{\"jobs\":[]}").is_err(), "unterminated");
        assert!(peer_ios("PEER_JSON_BEGIN x\n{not json}\nPEER_JSON_END").is_err());
    }

    #[test]
    fn scenarios_and_jobs_are_named_or_refused() {
        assert_eq!(peer_scenario("md0", 32).unwrap(), ("megasas-nullco", "rr4k_qd32"));
        assert_eq!(peer_scenario("null0", 1).unwrap(), ("nullblk", "rr4k_qd1"));
        assert!(peer_scenario("mf0", 32).unwrap_err().contains("mf0"));
        assert!(peer_scenario("md0", 8).unwrap_err().contains("QD8"));
    }

    #[test]
    fn the_linux_marginal_divides_by_the_io_difference() {
        let t = |insns, w| Totals {
            insns,
            mmio_reads: 0,
            mmio_writes: w,
        };
        let m = marginal((t(1_000_000, 10), 100), (t(1_800_000, 410), 500)).unwrap();
        assert_eq!(m, [2000.0, 0.0, 1.0]);
        assert!(marginal((t(1, 1), 100), (t(2, 2), 100)).is_err());
    }
}
