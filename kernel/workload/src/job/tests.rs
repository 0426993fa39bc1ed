//! The native job words: parsing, defaults and refusals.

use super::*;
use alloc::vec;

fn parse(text: &str) -> Result<Vec<JobSpec>, WorkloadError> {
    parse_jobs(text.split_ascii_whitespace())
}

#[test]
fn trace_takes_one_in_n_or_off_and_prints_back() {
    assert_eq!(parse("trace=64").unwrap()[0].trace_every, 64);
    assert_eq!(parse("trace=off").unwrap()[0].trace_every, 0);
    assert_eq!(parse("rw=read").unwrap()[0].trace_every, 0, "off by default");
    let job = &parse("trace=1").unwrap()[0];
    assert!(job.to_string().ends_with(" trace=1"), "{job}");
    assert!(!parse("rw=read").unwrap()[0].to_string().contains("trace"));
}

#[test]
fn every_quiesce_policy_parses_and_prints_back() {
    for (word, policy) in [
        ("lockfree", QuiescePolicy::LockFree),
        ("locked", QuiescePolicy::Locked),
        ("sleeping", QuiescePolicy::Sleeping),
    ] {
        let jobs = parse(&alloc::format!("quiesce={word}")).unwrap();
        assert_eq!(jobs[0].quiesce, Some(policy));
        assert_eq!(policy.as_str(), word);
        assert!(jobs[0].to_string().contains(&alloc::format!("quiesce={word}")));
    }
}

#[test]
fn brief_example_parses_into_one_job() {
    let jobs = parse(
        "rw=randrw rwmixread=70 bs=4k iodepth=8 cpus=0-3 runtime=5s size=64m offset=0 device=md0 \
         verify=crc32c completion=remote quiesce=lockfree",
    )
    .unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.name, "job0");
    assert_eq!(job.rw, RwMode::RandRw);
    assert_eq!(job.rwmixread, 70);
    assert_eq!(job.bs, 4096);
    assert_eq!(job.iodepth, 8);
    assert_eq!(job.cpus, CpuSelection::List(CpuSet::from_cpus(&[0, 1, 2, 3])));
    assert_eq!(job.runtime_ns, Some(5_000_000_000));
    assert_eq!(job.size, Some(64 << 20));
    assert_eq!(job.offset, 0);
    assert_eq!(job.device.as_deref(), Some("md0"));
    assert_eq!(job.verify, VerifyMode::Crc32c);
    assert_eq!(job.completion, Some(CompletionPolicy::Remote));
    assert_eq!(job.quiesce, Some(QuiescePolicy::LockFree));
}

#[test]
fn globals_apply_to_every_job_and_jobs_override_them() {
    let jobs = parse("bs=8k device=null0 job=a rw=write job=b rw=randread bs=512 iodepth=4").unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(
        (jobs[0].name.as_str(), jobs[0].rw, jobs[0].bs),
        ("a", RwMode::Write, 8192)
    );
    assert_eq!(
        (jobs[1].name.as_str(), jobs[1].rw, jobs[1].bs),
        ("b", RwMode::RandRead, 512)
    );
    assert_eq!(jobs[0].iodepth, 1, "iodepth of job b must not leak into job a");
    assert_eq!(jobs[1].iodepth, 4);
    assert!(jobs.iter().all(|j| j.device.as_deref() == Some("null0")));
}

#[test]
fn empty_input_means_no_job() {
    assert_eq!(parse("").unwrap(), vec![]);
    assert_eq!(parse_cmdline("console=ttyS0 --").unwrap(), vec![]);
}

#[test]
fn cmdline_takes_words_after_double_dash_only() {
    let jobs = parse_cmdline("console=ttyS0 loglevel=3 -- rw=write bs=1k").unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].bs, 1024);
    // Without `--`, every word is a job word, so kernel options are rejected by name.
    let err = parse_cmdline("console=ttyS0 rw=write").unwrap_err();
    assert_eq!(err, WorkloadError::UnknownKey { key: "console".into() });
}

#[test]
fn display_round_trips_through_the_parser() {
    let jobs = parse(
        "job=x rw=randrw rwmixwrite=25 bs=16k iodepth=32 cpus=1,3 runtime=1500ms size=1g offset=1m \
         device=md0 verify=pattern completion=poll quiesce=locked seed=0x1234 stop_on_error=yes io_timeout=2s \
         job=y rw=read verify=crc32c verify_generation=any",
    )
    .unwrap();
    for job in &jobs {
        let text = job.to_string();
        let again = parse(&text).unwrap();
        assert_eq!(&again[0], job, "round trip of {text}");
    }
    assert_eq!(jobs[0].rwmixread, 75);
    assert_eq!(jobs[1].verify_generation, ExpectedGeneration::Any);
}

#[test]
fn unknown_key_lists_accepted_keys() {
    let err = parse("rw=read blocksize=4k").unwrap_err();
    assert_eq!(
        err,
        WorkloadError::UnknownKey {
            key: "blocksize".into()
        }
    );
    let text = err.to_string();
    assert!(text.contains("\"blocksize\""), "{text}");
    for key in ACCEPTED_KEYS {
        assert!(text.contains(key), "{text} should list {key}");
    }
}

#[test]
fn malformed_values_name_key_value_and_form() {
    let cases = [
        ("bs=4q", "bs"),
        ("bs=0", "bs"),
        ("bs=32m", "bs"),
        ("iodepth=0", "iodepth"),
        ("iodepth=70000", "iodepth"),
        ("rw=readwrite", "rw"),
        ("rwmixread=101", "rwmixread"),
        ("runtime=5h", "runtime"),
        ("runtime=0", "runtime"),
        ("size=0", "size"),
        ("offset=1x", "offset"),
        ("cpus=3-1", "cpus"),
        ("verify=md5", "verify"),
        ("completion=softirq", "completion"),
        ("quiesce=rcu", "quiesce"),
        ("trace=often", "trace"),
        ("trace=-1", "trace"),
        ("trace=2000000", "trace"),
        ("seed=abc", "seed"),
        ("stop_on_error=maybe", "stop_on_error"),
        ("job=bad/name", "job"),
        ("verify_generation=0", "verify_generation"),
    ];
    for (word, key) in cases {
        let err = parse(word).unwrap_err();
        match &err {
            WorkloadError::MalformedValue {
                key: k,
                value,
                expected,
            } => {
                assert_eq!(*k, key, "{word}");
                assert_eq!(value, word.split_once('=').unwrap().1);
                assert!(!expected.is_empty());
                let text = err.to_string();
                assert!(text.contains(key) && text.contains(value.as_str()), "{text}");
            }
            other => panic!("{word}: expected MalformedValue, got {other:?}"),
        }
    }
}

#[test]
fn structural_errors() {
    assert_eq!(
        parse("rw").unwrap_err(),
        WorkloadError::MalformedWord { word: "rw".into() }
    );
    assert_eq!(parse("bs=").unwrap_err(), WorkloadError::MissingValue { key: "bs" });
    assert_eq!(parse("job=").unwrap_err(), WorkloadError::MissingValue { key: "job" });
    assert_eq!(
        parse("job=a bs=4k bs=8k").unwrap_err(),
        WorkloadError::DuplicateKey {
            key: "bs",
            section: "a".into()
        }
    );
    assert_eq!(
        parse("bs=4k bs=8k").unwrap_err(),
        WorkloadError::DuplicateKey {
            key: "bs",
            section: "global".into()
        }
    );
    // A job may override a global once.
    assert_eq!(parse("bs=4k job=a bs=8k").unwrap()[0].bs, 8192);
    assert_eq!(
        parse("job=a job=a").unwrap_err(),
        WorkloadError::DuplicateJobName { name: "a".into() }
    );
}

#[test]
fn conflicting_keys_are_rejected() {
    let conflict = |text: &str| match parse(text).unwrap_err() {
        WorkloadError::ConflictingKeys { first, second, .. } => (first, second),
        other => panic!("{text}: expected ConflictingKeys, got {other:?}"),
    };
    assert_eq!(
        conflict("rw=randrw rwmixread=70 rwmixwrite=30"),
        ("rwmixread", "rwmixwrite")
    );
    assert_eq!(conflict("rw=randread rwmixread=70"), ("rwmixread", "rw"));
    assert_eq!(conflict("rwmixwrite=10"), ("rwmixwrite", "rw"));
    assert_eq!(conflict("rw=read verify_generation=2"), ("verify_generation", "verify"));
    assert_eq!(
        conflict("rw=write verify=crc32c verify_generation=2"),
        ("verify_generation", "rw")
    );
    // A global mix key conflicts in a job that is not randrw.
    assert_eq!(
        conflict("rwmixread=70 job=a rw=randrw job=b rw=read"),
        ("rwmixread", "rw")
    );
    assert!(parse("rw=read verify=pattern verify_generation=3").is_ok());
}
