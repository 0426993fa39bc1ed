//! fio jobs: job files that arrive as boot modules, and fio command-line words after the
//! kernel command line's `--`, run through the workload crate's fio front-end
//! (`workload::fio`) and then, job by job, through the same runner as native jobs
//! ([`super::jobs::run_specs`]). The jobs of a wave (fio's jobs with no `stonewall` between
//! them) run at the same time, each on CPUs of its own (`workload::fio::wave_specs`).
//!
//! Which boot modules are job files: a module whose string has a word `fio` or a word ending in
//! `.fio` (ASCII case-insensitive), or a module with no string at all (QEMU's PVH `-initrd`
//! passes none) whose first line that is neither blank nor a `;`/`#` comment starts with `[`.
//! QEMU's Multiboot `-initrd "FILE fio"` gives `FILE fio` as the string (xtask adds the `fio`);
//! with GRUB, `module2 /boot/job.fio fio` gives `fio` (the words after the path). Other modules
//! are named on the console and left alone; `fio.modules=off` ignores them all. Files run in the loader's order, each a separate set of jobs (fio's rule for several
//! job files: a stonewall between them); command-line words run after the files.

use crate::arch::console::kprintln;
use crate::arch::{memory, time};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use bootinfo::{BootInfo, PhysMemory};
use workload::fio::{FioRun, OutputFormat};

/// A fio job file read from a boot module.
pub struct JobFile {
    /// `module N "string"`, for messages.
    pub label: String,
    /// The file's text.
    pub text: String,
}

/// The boot modules that are fio job files, read into the heap. Other modules, and every
/// module when `enabled` is false, are listed and left alone; a job file that is not UTF-8 text
/// or cannot be read stops the boot.
pub fn job_files(boot: &BootInfo, enabled: bool) -> Vec<JobFile> {
    let mut files = Vec::new();
    for (index, module) in boot.modules.iter().enumerate() {
        let label = format!("module {} {:?}", index + 1, module.string.as_str());
        let mut bytes = alloc::vec![0u8; module.len() as usize];
        if let Err(e) = memory::IdentityMap.read(module.start, &mut bytes) {
            crate::arch::exit::failure(format_args!("fio: boot {label}: {e}"));
        }
        if !enabled || !workload::fio::is_job_file_module(&module.string, &bytes) {
            kprintln!(
                "fio: boot {label} ({} bytes) not run: {}",
                module.len(),
                if enabled {
                    "its string has no word fio or *.fio (and it has a string, or no [section] first)"
                } else {
                    "fio.modules=off"
                }
            );
            continue;
        }
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => crate::arch::exit::failure(format_args!(
                "fio: boot {label}: not a text job file (byte {} is not UTF-8)",
                e.utf8_error().valid_up_to()
            )),
        };
        kprintln!("fio: boot {label}: job file, {} bytes", text.len());
        files.push(JobFile { label, text });
    }
    files
}

/// Parses and runs the fio job files, then the fio command-line `words`, with the kernel's
/// `fio.override.KEY=VALUE` words applied to every job, on `cpus` (the first clones take the
/// first of them; `$ncpus` is their count). Err on a job that is refused or cannot run;
/// Ok(false) when a job failed.
pub fn run(
    files: &[JobFile],
    words: &[&str],
    overrides: &[(&str, &str)],
    ram_bytes: u64,
    cpus: &[u32],
) -> Result<bool, String> {
    super::jobs::prepare();
    // What fio's $ncpus, $mb_memory and $pagesize name.
    let env = workload::fio::FioEnv {
        ncpus: cpus.len() as u64,
        mb_memory: ram_bytes >> 20,
        pagesize: 4096,
    };
    let mut runs: Vec<(String, FioRun)> = Vec::new();
    // Parse everything first, so a refused option in a later file stops the boot before any
    // I/O is done.
    for file in files {
        let run = workload::fio::parse_job_file_on(&file.text, overrides, Some(&env))
            .map_err(|e| format!("fio: {}: {e}", file.label))?;
        runs.push((file.label.clone(), run));
    }
    if !words.is_empty() {
        // As with fio, command-line run options (`--output-format=json --output=FILE`) apply to
        // the job files too; words with no job (no `--name=`) are only such options.
        let defines_a_job = words.iter().any(|w| w.trim_start_matches('-').starts_with("name="));
        let invocation = if defines_a_job {
            let run = workload::fio::parse_command_line_on(words.iter().copied(), overrides, Some(&env))
                .map_err(|e| format!("fio: command line: {e}"))?;
            let options = run.options.clone();
            runs.push(("command line".into(), run));
            options
        } else {
            let bare: Vec<&str> = words.iter().map(|w| w.trim_start_matches('-')).collect();
            let (options, rest) =
                workload::fio::split_run_words(&bare).map_err(|e| format!("fio: command line: {e}"))?;
            if let Some(word) = rest.first() {
                return Err(format!(
                    "fio: command line: {word:?} without a job: with job files, fio words after -- may only \
                     be --output-format= and --output= (a job starts with --name=)"
                ));
            }
            options
        };
        for (_, run) in runs.iter_mut() {
            let file_options = &mut run.options;
            if file_options.output_format == OutputFormat::Normal && file_options.output.is_none() {
                file_options.output_format = invocation.output_format;
                file_options.normal_too = invocation.normal_too;
                file_options.output = invocation.output.clone();
            }
        }
    }
    for (key, value) in overrides {
        kprintln!("fio: fio.override: {key}={value} applies to every job");
    }
    let infos = super::jobs::devices()?;
    let online = cpus.to_vec();
    for (label, run) in runs.iter_mut() {
        workload::fio::place_on_nodes(run, &online, &super::jobs::node_of_cpu)
            .map_err(|e| format!("fio: {label}: {e}"))?;
    }
    let mut all_passed = true;
    for (label, run) in &runs {
        let options = &run.options;
        kprintln!(
            "fio: {label}: {} job(s); output-format={}{}{}",
            run.jobs.len(),
            match options.output_format {
                OutputFormat::Normal => "normal",
                OutputFormat::Json => "json",
                OutputFormat::JsonPlus => "json+",
            },
            if options.normal_too { ",normal" } else { "" },
            options
                .output
                .as_deref()
                .map(|o| format!(" output={o}"))
                .unwrap_or_default(),
        );
        for note in &run.notes {
            kprintln!("fio: {label}: {note}");
        }
        let output = output_options(run).map_err(|e| format!("fio: {label}: {e}"))?;
        // fio's document, text and logs need the detail measurements (slat/clat, depths, busy
        // time, 500 ms samples), which cost a clock read per I/O: only when they are printed.
        let detail = output.as_ref().map(workload::FioOutputOptions::detail_options);
        let mut reports = Vec::new();
        let mut metas = Vec::new();
        for wave in run.waves() {
            let mut specs =
                workload::fio::wave_specs(wave, &infos, &online).map_err(|e| format!("fio: {label}: {e}"))?;
            for (job, spec) in wave.iter().zip(specs.iter_mut()) {
                describe(job, spec, output.is_some());
            }
            let results = super::jobs::run_specs(&specs, &infos, &online, detail)?;
            for (job, (passed, report)) in wave.iter().zip(results) {
                all_passed &= passed;
                if output.is_some() {
                    metas.push(workload::FioJobMeta {
                        job_options: job.options.clone(),
                        groupid: job.group,
                    });
                    reports.push(report);
                }
            }
        }
        if let Some(options) = &output {
            super::jobs::print_fio_output(options, &reports, &metas);
        }
    }
    super::jobs::print_interrupts();
    Ok(all_passed)
}

/// Prints what a fio job became: its warnings, its seed when fio's `randrepeat=0` asks for one
/// from the clock (set in `spec`), and the engine job it maps to. `fio_output`: fio's output
/// (document, text or logs) is written for the run.
fn describe(job: &workload::fio::FioJob, spec: &mut workload::JobSpec, fio_output: bool) {
    for warning in &job.warnings {
        kprintln!("fio job {:?}: warning: {warning}", job.name);
    }
    if spec.report_each_clone && !fio_output {
        // fio's output lists each clone; baremq's own report, which stands for fio's text here,
        // cannot.
        kprintln!(
            "fio job {:?}: warning: numjobs={} without group_reporting: fio reports each clone, baremq's \
             report merges them (its per-CPU lines are the clones; --output-format=json lists each)",
            job.name,
            job.numjobs
        );
    }
    for note in &spec.placement_notes {
        kprintln!("fio job {:?}: warning: {note}", job.name);
    }
    if job.seed_from_clock {
        spec.seed = time::rdtsc();
        kprintln!(
            "fio job {:?}: randrepeat=0: seed {:#x} from the clock",
            job.name,
            spec.seed
        );
    }
    kprintln!(
        "fio job {:?}: group {}, {} clone(s) on CPUs {}, ioengine={}, mapped to: {}{}",
        job.name,
        job.group,
        job.numjobs,
        spec.cpus,
        job.ioengine,
        spec,
        fio_only(spec),
    );
}

/// The engine fields only fio jobs set (the native words printed before cannot say them).
fn fio_only(spec: &workload::JobSpec) -> String {
    let mut out = String::new();
    if spec.runtime_is_cap && spec.runtime_ns.is_some() {
        out.push_str(" (runtime caps the job: not time_based)");
    }
    if spec.ramp_ns > 0 {
        out.push_str(&format!(", ramp_time {} ms not measured", spec.ramp_ns / 1_000_000));
    }
    if spec.rw.is_random() {
        if let Some(skew) = spec.skew {
            out.push_str(&format!(", {skew} offsets (with repeats, no random map)"));
        } else {
            out.push_str(if !spec.zones.is_empty() {
                ", zoned offsets"
            } else if spec.random_map {
                ", random map (each block once per pass)"
            } else {
                ", norandommap"
            });
        }
    }
    if let Some(mix) = &spec.bs_mix {
        // bs above is the unit; the sizes per direction, in fio's bssplit form (bytes).
        let mut sizes = String::new();
        let _ = mix.write_in(&mut sizes, u64::from(spec.bs));
        out.push_str(&format!(
            ", block sizes {sizes} (read,write; a size per I/O, bs their unit)"
        ));
    }
    if let Some(ios) = spec.ios_per_cpu {
        if spec.bs_mix.is_some() {
            // With variable sizes a size-bound job counts bytes, in blocks of the unit.
            out.push_str(&format!(", {} bytes per clone", ios.saturating_mul(u64::from(spec.bs))));
        } else {
            out.push_str(&format!(", {ios} I/Os per clone"));
        }
    }
    if spec.io_interval_ns != [0, 0] {
        let [read, write] = spec.io_interval_ns;
        out.push_str(&format!(
            ", one I/O per {read} ns (reads) / {write} ns (writes) at most"
        ));
        if spec.rate_poisson {
            out.push_str(" on average, Poisson arrivals (exponential gaps)");
        }
    }
    if spec.think_ns > 0 {
        out.push_str(&format!(
            ", think {} us every {} I/Os",
            spec.think_ns / 1_000,
            spec.think_blocks
        ));
    }
    if spec.start_delay_ns > 0 {
        out.push_str(&format!(", start delay {} ms", spec.start_delay_ns / 1_000_000));
    }
    if spec.flush_every_writes > 0 {
        out.push_str(&format!(", flush every {} writes", spec.flush_every_writes));
    }
    if spec.end_flush {
        out.push_str(", flush at the end");
    }
    if !spec.files.is_empty() {
        // A filename list: the device= above is the first file's; every file's region (clone 0).
        let files: Vec<String> = spec
            .files
            .iter()
            .map(|f| format!("{} {}+{}", f.device, f.offset, f.size))
            .collect();
        out.push_str(&format!(
            ", files {} (one job over them, file_service_type={})",
            files.join(" : "),
            spec.file_service
        ));
    }
    if spec.align_blocks > 1 {
        out.push_str(&format!(
            ", random offsets every {} bytes (blockalign)",
            spec.align_blocks.saturating_mul(u64::from(spec.bs))
        ));
    }
    if !spec.buffer_pattern.is_empty() {
        out.push_str(&format!(
            ", writes carry buffer_pattern of {} bytes repeated from each I/O's first byte",
            spec.buffer_pattern.len()
        ));
    }
    if spec.offset_add_blocks != 0 {
        out.push_str(&format!(
            ", each offset the end of the I/O before {} {} bytes (rw offset modifier)",
            if spec.offset_add_blocks < 0 { "less" } else { "plus" },
            spec.offset_add_blocks.unsigned_abs().saturating_mul(u64::from(spec.bs))
        ));
    }
    if spec.random_run > 1 {
        out.push_str(&format!(
            ", a random offset every {} I/Os, sequential between (rw offset modifier)",
            spec.random_run
        ));
    }
    if let Some(zones) = spec.strided_zones {
        let bs = u64::from(spec.bs);
        out.push_str(&format!(
            ", strided zones: {} bytes of I/O in the first {} bytes of each zone, then {} bytes skipped",
            zones.size * bs,
            zones.range * bs,
            zones.skip * bs
        ));
    }
    if spec.exitall {
        out.push_str(", exitall (the first clone to end stops the others)");
    }
    if !spec.verify_pattern.is_empty() {
        out.push_str(&format!(
            ", verify_pattern of {} bytes repeated from each block's first byte{}",
            spec.verify_pattern.len(),
            if spec.verify == workload::VerifyMode::FioPatternHeader {
                " under baremq's 48-byte header"
            } else {
                ""
            }
        ));
    }
    out
}

/// What fio's output side prints for a parsed run, or `None` when fio's output is only the normal
/// text (baremq's own report stands for it): the document with `--output-format=json|json+`,
/// the `BAREMQ-LOG:` rows with `write_bw_log`/`write_lat_log`/`write_iops_log`. fio takes
/// `percentile_list` and the logs per job; baremq prints one document per job file or command
/// line, so they come from its first job. Options the output side cannot honour are refused.
fn output_options(run: &FioRun) -> Result<Option<workload::FioOutputOptions>, String> {
    let mut options = workload::FioOutputOptions {
        output_format: match run.options.output_format {
            OutputFormat::Normal => workload::FioOutputFormat::Normal,
            OutputFormat::Json => workload::FioOutputFormat::Json,
            OutputFormat::JsonPlus => workload::FioOutputFormat::JsonPlus,
        },
        output: run.options.output.clone(),
        global_options: run.options.global_options.clone(),
        ..workload::FioOutputOptions::default()
    };
    if let Some(job) = run.jobs.first() {
        let logs = &job.report.logs;
        if logs.hist_log.is_some() {
            return Err("write_hist_log is not supported by baremq (bw, lat and iops logs are)".into());
        }
        options.percentile_list = job.report.percentile_list.iter().map(|p| p.millionths).collect();
        options.logs = workload::FioLogOptions {
            bw: logs.bw_log.clone(),
            lat: logs.lat_log.clone(),
            iops: logs.iops_log.clone(),
            avg_msec: logs.log_avg_msec,
        };
    }
    if options.output_format == workload::FioOutputFormat::Normal && !options.logs.any() {
        return Ok(None);
    }
    options.validate().map_err(|e| format!("{e}"))?;
    Ok(Some(options))
}
