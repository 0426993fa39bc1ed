//! `cargo xtask fio-check`: whether fio job files would run on baremq, decided on the host by the
//! kernel's own fio front-end (`workload::fio`: the same parse, meaning and refusals, the same
//! placement of a wave's jobs on CPUs, the same planning against a device), without booting.
//! It answers "will my job run?" before a box is booted, and lists fio's own examples' verdicts.

use std::path::Path;

use crate::args::Options;
use workload::fio::{FioEnv, parse_job_file_on, wave_specs};
use workload::{DeviceInfo, plan_job};

const USAGE: &str = "usage: cargo xtask fio-check [--cpus N] [--device NAME[:SIZE]]... [--override KEY=VALUE]... \
                     JOB.fio|DIR...";

/// What the checked jobs run on.
struct Machine {
    devices: Vec<DeviceInfo>,
    online: Vec<u32>,
    env: FioEnv,
}

pub fn cmd_fio_check(args: &[String]) -> Result<bool, String> {
    let mut cpus = 2u32;
    let mut devices = Vec::new();
    let mut overrides: Vec<(String, String)> = Vec::new();
    let mut paths = Vec::new();
    let mut options = Options::new(args);
    while let Some(option) = options.next()? {
        match option {
            "--cpus" => {
                cpus = options
                    .value()?
                    .parse()
                    .ok()
                    .filter(|n| (1..=255).contains(n))
                    .ok_or("--cpus takes 1 to 255")?
            }
            "--device" => devices.push(device(options.value()?)?),
            "--override" => {
                let value = options.value()?;
                let (key, value) = value
                    .split_once('=')
                    .ok_or_else(|| format!("--override '{value}': use KEY=VALUE, e.g. filename=/dev/nvme0n1"))?;
                overrides.push((key.to_string(), value.to_string()));
            }
            word if word.starts_with('-') => return Err(format!("fio-check: unknown option '{word}'\n{USAGE}")),
            path => paths.push(path.to_string()),
        }
    }
    if paths.is_empty() {
        return Err(USAGE.into());
    }
    if devices.is_empty() {
        devices.push(device("nvme0n1:64g")?);
    }
    let machine = Machine {
        devices,
        online: (0..cpus).collect(),
        env: FioEnv {
            ncpus: u64::from(cpus),
            mb_memory: 4096,
            pagesize: 4096,
        },
    };
    let overrides: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut files = Vec::new();
    for path in &paths {
        let path = Path::new(path);
        if path.is_dir() {
            let mut inside: Vec<_> = std::fs::read_dir(path)
                .map_err(|e| format!("fio-check: cannot read {}: {e}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "fio"))
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(path.to_path_buf());
        }
    }
    let mut runs = 0;
    for file in &files {
        let text =
            std::fs::read_to_string(file).map_err(|e| format!("fio-check: cannot read {}: {e}", file.display()))?;
        let name = file
            .file_name()
            .map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into());
        match check(&text, &overrides, &machine) {
            Ok(summary) => {
                runs += 1;
                println!("{name}: runs: {summary}");
            }
            Err(reason) => println!("{name}: refused: {reason}"),
        }
    }
    println!(
        "fio-check: {} file(s): {runs} would run, {} refused ({} CPU(s); {})",
        files.len(),
        files.len() - runs,
        cpus,
        machine
            .devices
            .iter()
            .map(|d| format!(
                "/dev/{} {} MiB",
                d.name,
                (d.capacity_sectors * u64::from(d.sector_size)) >> 20
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(runs == files.len())
}

/// The verdict on one job file: how many jobs and waves it plans into, or the first refusal.
fn check(text: &str, overrides: &[(&str, &str)], machine: &Machine) -> Result<String, String> {
    let mut run = parse_job_file_on(text, overrides, Some(&machine.env)).map_err(|e| e.to_string())?;
    // One NUMA node: every CPU on node 0.
    workload::fio::place_on_nodes(&mut run, &machine.online, &|_| Some(0)).map_err(|e| e.to_string())?;
    let waves = run.waves();
    let mut clones = 0;
    for wave in &waves {
        let specs = wave_specs(wave, &machine.devices, &machine.online).map_err(|e| e.to_string())?;
        for spec in &specs {
            let plan = plan_job(spec, &machine.devices, &machine.online).map_err(|e| e.to_string())?;
            clones += plan.cpus.len();
        }
    }
    let warnings: usize = run.jobs.iter().map(|j| j.warnings.len()).sum();
    Ok(format!(
        "{} job(s) in {} wave(s), {clones} clone(s), {warnings} warning(s)",
        run.jobs.len(),
        waves.len()
    ))
}

/// `NAME[:SIZE]`: a device of 512-byte sectors (default 64 GiB), as the kernel would list it.
fn device(text: &str) -> Result<DeviceInfo, String> {
    let (name, size) = text.split_once(':').unwrap_or((text, "64g"));
    let name = name.trim_start_matches("/dev/");
    let bytes = workload::values::parse_size(size)
        .filter(|b| *b >= 1 << 20)
        .ok_or_else(|| format!("--device '{text}': NAME[:SIZE], a size of at least 1m"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!("--device '{text}': a device name such as nvme0n1 or md0"));
    }
    Ok(DeviceInfo {
        name: name.into(),
        sector_size: 512,
        capacity_sectors: bytes / 512,
        max_iodepth: 1024,
        max_transfer_bytes: 1 << 20,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(cpus: u32) -> Machine {
        Machine {
            devices: vec![device("nvme0n1:1g").unwrap()],
            online: (0..cpus).collect(),
            env: FioEnv {
                ncpus: u64::from(cpus),
                mb_memory: 4096,
                pagesize: 4096,
            },
        }
    }

    #[test]
    fn a_job_that_runs_is_summarised_and_a_refused_one_named() {
        let job = "[global]\nioengine=libaio\ndirect=1\n[a]\nfilename=/dev/nvme0n1\nrw=randread\nbs=4k\nnumjobs=2\n[b]\nstonewall\nfilename=/dev/nvme0n1\nrw=write\n";
        assert_eq!(
            check(job, &[], &machine(2)).unwrap(),
            "2 job(s) in 2 wave(s), 3 clone(s), 0 warning(s)"
        );
        // Four clones on two CPUs run two by two, by turns.
        assert_eq!(
            check(&job.replace("numjobs=2", "numjobs=4"), &[], &machine(2)).unwrap(),
            "2 job(s) in 2 wave(s), 5 clone(s), 0 warning(s)"
        );
        let error = check("[n]\nioengine=net\nfilename=localhost,8888,tcp\n", &[], &machine(2)).unwrap_err();
        assert!(error.contains("ioengine"), "{error}");
    }

    #[test]
    fn overrides_point_a_published_job_at_a_device() {
        let job = "[x]\nfilename=/dev/sdb\nrw=read\nsize=64m\n";
        assert!(check(job, &[], &machine(1)).is_err());
        assert!(check(job, &[("filename", "/dev/nvme0n1")], &machine(1)).is_ok());
    }

    #[test]
    fn device_words_are_checked() {
        assert_eq!(device("/dev/md0:2g").unwrap().capacity_sectors, 4 << 20);
        assert!(device("md0:1k").is_err());
        assert!(device("../x").is_err());
    }
}
