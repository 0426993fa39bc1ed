//! The `destroy=` job key (write safety): default off, per job, refused values named.

use workload::{JobSpec, parse_jobs};

#[test]
fn destroy_is_off_by_default_and_set_per_job_or_globally() {
    let jobs = parse_jobs("rw=write device=nvme0n1 job=a job=b destroy=1".split_whitespace()).unwrap();
    assert!(!jobs[0].destroy);
    assert!(jobs[1].destroy);
    let jobs = parse_jobs("destroy=yes rw=randrw job=a job=b destroy=0".split_whitespace()).unwrap();
    assert!(jobs[0].destroy);
    assert!(!jobs[1].destroy);
    assert!(!JobSpec::with_defaults("x").destroy);
}

#[test]
fn destroy_survives_the_display_round_trip() {
    let jobs = parse_jobs("rw=write destroy=1".split_whitespace()).unwrap();
    let text = jobs[0].to_string();
    assert!(text.ends_with(" destroy=1"), "{text}");
    assert_eq!(parse_jobs(text.split_whitespace()).unwrap(), jobs);
    let plain = parse_jobs("rw=write".split_whitespace()).unwrap();
    assert!(!plain[0].to_string().contains("destroy"));
}

#[test]
fn a_bad_destroy_value_is_named() {
    let error = parse_jobs("rw=write destroy=please".split_whitespace())
        .unwrap_err()
        .to_string();
    assert!(error.contains("destroy"), "{error}");
    assert!(error.contains("please"), "{error}");
}
