//! Scenario files: parsing, placeholders and judging a boot.

use super::*;

const SAMPLE: &str = r#"
# comment
[boot-basic]
description = boots
qemu = -smp 2 -m 256M
append = log=info
append = test=timer
output = #PF
timeout = 30
output = baremq
output = SUCCESS
absent = PANIC
image = disk0 64M
requires = tool:qemu-img

[two-boots]
image = d 8G qcow2
append = verify=write
output = wrote
next-boot
expect = failure
output = vector 14
"#;

#[test]
fn parses_keys_and_boots() {
    let s = parse("t.scenarios", SAMPLE).unwrap();
    assert_eq!(s.len(), 2);
    let a = &s[0];
    assert_eq!(a.name, "boot-basic");
    assert_eq!(a.boots.len(), 1);
    assert_eq!(a.boots[0].qemu, ["-smp", "2", "-m", "256M"]);
    assert_eq!(a.boots[0].append, ["log=info", "test=timer"]);
    assert_eq!(a.boots[0].timeout_s, 30);
    assert_eq!(a.boots[0].output, ["#PF", "baremq", "SUCCESS"]);
    assert_eq!(
        a.images[0],
        Image {
            name: "disk0".into(),
            bytes: 64 << 20,
            format: "raw".into()
        }
    );
    assert_eq!(a.requires, [Requirement::Tool("qemu-img".into())]);
    let b = &s[1];
    assert_eq!(b.boots.len(), 2);
    assert_eq!(b.boots[1].expect, Expect::Failure);
    assert_eq!(b.images[0].bytes, 8 << 30);
}

#[test]
fn emulator_selects_the_qemu_binary() {
    let s = parse("f", "[a]\noutput = x\n[b]\nemulator = fusion\noutput = y\n").unwrap();
    assert_eq!(s[0].emulator, Emulator::Stock);
    assert_eq!(s[1].emulator, Emulator::Fusion);
    let e = parse("f", "[a]\nemulator = qemu9\noutput = x\n").unwrap_err();
    assert_eq!(
        (e.line, e.message.as_str()),
        (2, "emulator 'qemu9': use stock or fusion")
    );
}

#[test]
fn the_fusion_scenarios_run_on_the_fusion_emulator() {
    let text = include_str!("../../../tests/fusion.scenarios");
    let all = parse("fusion.scenarios", text).unwrap();
    assert!(all.len() >= 10);
    assert!(
        all.iter().all(|s| s.emulator == Emulator::Fusion),
        "every Fusion scenario needs emulator = fusion"
    );
}

#[test]
fn rejects_bad_input_with_line_numbers() {
    let e = parse("f", "[a]\nbogus = 1\noutput = x\n").unwrap_err();
    assert_eq!((e.line, e.message.as_str()), (2, "unknown key 'bogus'"));
    assert!(
        parse("f", "output = x\n")
            .unwrap_err()
            .message
            .contains("before the first")
    );
    assert!(
        parse("f", "[a]\ntimeout = 0\noutput = x")
            .unwrap_err()
            .message
            .contains("positive")
    );
    assert!(
        parse("f", "[a]\nimage = d 12Q\noutput = x")
            .unwrap_err()
            .message
            .contains("12Q")
    );
    assert!(
        parse("f", "[a]\noutput = x\n[a]\noutput = y")
            .unwrap_err()
            .message
            .contains("twice")
    );
    assert!(
        parse("f", "[a]\nappend = x=1\n")
            .unwrap_err()
            .message
            .contains("checks no output")
    );
}

#[test]
fn attempts_need_a_reason_and_stay_small() {
    let sc = &parse("f", "[a]\nattempts = 2\nattempts_why = QEMU's NBD client\noutput = x\n").unwrap()[0];
    assert_eq!((sc.attempts, sc.attempts_why.as_str()), (2, "QEMU's NBD client"));
    assert_eq!(parse("f", "[a]\noutput = x\n").unwrap()[0].attempts, 1);
    assert!(
        parse("f", "[a]\nattempts = 2\noutput = x\n")
            .unwrap_err()
            .message
            .contains("needs 'attempts_why")
    );
    for bad in ["0", "4", "two"] {
        assert!(
            parse("f", &format!("[a]\nattempts = {bad}\nattempts_why = y\noutput = x\n"))
                .unwrap_err()
                .message
                .contains("1, 2 or 3"),
            "{bad}"
        );
    }
}

/// A job report shaped like the kernel's (the bench tests check the parser against the
/// workload crate's real writer); `ios` and `iops` are parameters to break consistency.
fn report_line(ios: u64, iops: u64, verify: &str, verify_result: &str) -> String {
    let reads = ios / 2;
    format!(
        r#"BAREMQ-JSON: {{"job":{{"name":"j","rw":"randrw","bs":4096,"iodepth":8,"iodepth_requested":8,"cpus":[0,1],"device":"md0","verify":"{verify}","completion":"irq","quiesce":"lockfree"}},"device":{{"name":"md0","max_iodepth":256}},"runtime_ns":2000000000,"ios":{ios},"iops":{iops},"bytes":{},"bw_bytes":{},"errors":0,"lat_ns":{{"samples":{ios},"min":1,"mean":5,"p50":4,"p90":6,"p99":8,"p99_9":9,"p99_99":9,"max":10}},"read":{{"ios":{reads}}},"write":{{"ios":{}}},"verify":{{"result":"{verify_result}","mismatches":0}},"per_cpu":[{{"cpu":0,"ios":{},"iops":1}},{{"cpu":1,"ios":{},"iops":1}}],"counters":[{{"name":"irqs","per_cpu":[1,2]}}],"totals":{{}},"warnings":[],"stopped_early":false,"result":"pass"}}"#,
        ios * 4096,
        iops * 4096,
        ios - reads,
        ios / 2,
        ios - ios / 2
    )
}

#[test]
fn json_reports_must_be_present_complete_and_consistent() {
    assert!(check_json_reports(&report_line(2000, 1000, "crc32c", "pass")).is_ok());
    assert!(
        check_json_reports("BAREMQ: SUCCESS")
            .unwrap_err()
            .contains("no BAREMQ-JSON")
    );
    let e = check_json_reports(&report_line(2000, 1300, "none", "off")).unwrap_err();
    assert!(e.contains("iops 1300 x runtime"), "{e}");
    let e = check_json_reports(&report_line(2000, 1000, "crc32c", "fail")).unwrap_err();
    assert!(e.contains("verify result is fail"), "{e}");
    let e = check_json_reports(&report_line(2000, 1000, "none", "off").replace(r#""cpus":[0,1]"#, r#""cpus":[0]"#))
        .unwrap_err();
    assert!(e.contains("per-CPU rows"), "{e}");
    let e = check_json_reports(&report_line(2000, 1000, "none", "off").replace(r#""iops":1000,"#, "")).unwrap_err();
    assert!(e.contains("not a job report"), "{e}");
    let e =
        check_json_reports(&report_line(2000, 1000, "none", "off").replace(r#""p90":6"#, r#""p90":60"#)).unwrap_err();
    assert!(e.contains("percentiles"), "{e}");
}

#[test]
fn fewer_compares_counter_totals_in_every_report() {
    let s = parse("f", "[a]\nfewer = irqs < completed\noutput = x\n").unwrap();
    let pairs = &s[0].boots[0].fewer;
    assert_eq!(pairs, &[("irqs".to_string(), "completed".to_string())]);
    // `irqs` is per-CPU [1, 2]: total 3.
    let line = |completed: u64| {
        report_line(2000, 1000, "none", "off")
            .replace(r#""totals":{}"#, &format!(r#""totals":{{"completed":{completed}}}"#))
    };
    assert!(check_fewer(&line(4), pairs).is_ok());
    let e = check_fewer(&line(3), pairs).unwrap_err();
    assert!(e.contains("irqs = 3 is not fewer than completed = 3"), "{e}");
    let e = check_fewer(&report_line(2000, 1000, "none", "off"), pairs).unwrap_err();
    assert!(e.contains("no counter completed"), "{e}");
    assert!(
        check_fewer("BAREMQ: SUCCESS", pairs)
            .unwrap_err()
            .contains("no BAREMQ-JSON")
    );
    for bad in ["irqs", "irqs <", "< b", "a b < c", "a > b"] {
        let e = parse("f", &format!("[a]\nfewer = {bad}\noutput = x\n")).unwrap_err();
        assert!(e.message.contains("COUNTER < COUNTER"), "{bad}: {e}");
    }
}

#[test]
fn equal_compares_counter_totals_in_every_report() {
    let s = parse("f", "[a]\nequal = irqs == completed\noutput = x\n").unwrap();
    let pairs = &s[0].boots[0].equal;
    assert_eq!(pairs, &[("irqs".to_string(), "completed".to_string())]);
    // `irqs` is per-CPU [1, 2]: total 3.
    let line = |completed: u64| {
        report_line(2000, 1000, "none", "off")
            .replace(r#""totals":{}"#, &format!(r#""totals":{{"completed":{completed}}}"#))
    };
    let check = |out: &str| check_counters(out, pairs, "equal", |x, y| x == y, "does not equal");
    assert!(check(&line(3)).is_ok());
    let e = check(&line(4)).unwrap_err();
    assert!(e.contains("irqs = 3 does not equal completed = 4"), "{e}");
    assert!(
        check(&report_line(2000, 1000, "none", "off"))
            .unwrap_err()
            .contains("no counter completed")
    );
    for bad in ["irqs", "irqs ==", "== b", "a b == c", "a = b", "a < b"] {
        let e = parse("f", &format!("[a]\nequal = {bad}\noutput = x\n")).unwrap_err();
        assert!(e.message.contains("COUNTER == COUNTER"), "{bad}: {e}");
    }
}

#[test]
fn sizes() {
    assert_eq!(parse_size("4096"), Some(4096));
    assert_eq!(parse_size("64M"), Some(64 << 20));
    assert_eq!(parse_size("8g"), Some(8 << 30));
    assert_eq!(parse_size("x"), None);
    assert_eq!(parse_size("99999999999999999999T"), None);
}

#[test]
fn substitution() {
    let imgs = vec![("d0".to_string(), std::path::PathBuf::from("/tmp/d0.img"))];
    assert_eq!(
        substitute("file={image:d0},if=none", &imgs).unwrap(),
        "file=/tmp/d0.img,if=none"
    );
    assert!(substitute("file={image:zz}", &imgs).unwrap_err().contains("zz"));
}

#[test]
fn raid0_layouts_parse_and_name_raw_images() {
    let s = parse(
        "f",
        "[a]\nimage = d0 64M\nimage = d1 64M\nraid0_layout = d0,d1 strip_kb=64\noutput = x\n",
    )
    .unwrap();
    assert_eq!(
        s[0].raid0_layout,
        Some(Raid0Layout {
            images: vec!["d0".into(), "d1".into()],
            strip_bytes: 65536,
        })
    );
    for bad in [
        "d0",
        "d0 strip_kb=64",
        "d0,d1 strip_kb=48",
        "d0,d1",
        "d0,d1 strip_kb=64 more",
    ] {
        let e = parse(
            "f",
            &format!("[a]\nimage = d0 64M\nimage = d1 64M\nraid0_layout = {bad}\noutput = x\n"),
        );
        assert!(e.is_err(), "{bad}");
    }
    let e = parse(
        "f",
        "[a]\nimage = d0 64M\nraid0_layout = d0,d9 strip_kb=64\noutput = x\n",
    )
    .unwrap_err();
    assert!(e.message.contains("'d9', which is no raw image"), "{e}");
}

#[test]
fn raid1_layouts_parse_two_raw_images() {
    let s = parse(
        "f",
        "[a]\nimage = d0 64M\nimage = d1 64M\nraid1_layout = d0,d1\noutput = x\n",
    )
    .unwrap();
    assert_eq!(s[0].raid1_layout, Some(["d0".to_string(), "d1".to_string()]));
    for bad in ["d0", "d0,d1,d2", "d0,d0", "d0,", "d0,d1 strip_kb=64"] {
        let e = parse(
            "f",
            &format!("[a]\nimage = d0 64M\nimage = d1 64M\nraid1_layout = {bad}\noutput = x\n"),
        );
        assert!(e.is_err(), "{bad}");
    }
    let e = parse("f", "[a]\nimage = d0 64M\nraid1_layout = d0,d9\noutput = x\n").unwrap_err();
    assert!(
        e.message.contains("raid1_layout names 'd9', which is no raw image"),
        "{e}"
    );
}

#[test]
fn slow_disks_parse_check_their_image_and_substitute() {
    let s = parse(
        "f",
        "[a]\nimage = d0 64M\nslow_disk = d0 sector=2048 delay=6500ms op=write count=2\noutput = x\n",
    )
    .unwrap();
    assert_eq!(
        s[0].slow_disks,
        [SlowDisk {
            image: "d0".into(),
            writes: true,
            sector: 2048,
            delay_ns: 6_500_000_000,
            count: 2
        }]
    );
    let one = parse(
        "f",
        "[a]\nimage = d0 64M\nslow_disk = d0 sector=8 delay=1s\noutput = x\n",
    )
    .unwrap();
    assert_eq!((one[0].slow_disks[0].count, one[0].slow_disks[0].writes), (1, false));
    for (bad, why) in [
        ("slow_disk = d0 delay=1s", "sector=N is required"),
        ("slow_disk = d0 sector=8", "delay=DURATION is required"),
        ("slow_disk = d0 sector=x delay=1s", "sector 'x'"),
        ("slow_disk = d0 sector=8 delay=0s", "delay '0s'"),
        ("slow_disk = d0 sector=8 delay=1s count=0", "count '0'"),
        ("slow_disk = d0 sector=8 delay=1s op=trim", "op 'trim'"),
        ("slow_disk = d0 sector=8 delay=1s speed=3", "unknown key 'speed'"),
        ("slow_disk = d0 sector", "not key=value"),
    ] {
        let e = parse("f", &format!("[a]\nimage = d0 64M\n{bad}\noutput = x\n")).unwrap_err();
        assert_eq!(e.line, 3, "{bad}");
        assert!(e.message.contains(why), "{bad}: {}", e.message);
    }
    let e = parse("f", "[a]\nslow_disk = d1 sector=8 delay=1s\noutput = x\n").unwrap_err();
    assert!(e.message.contains("slow_disk 'd1' names no raw image"), "{}", e.message);
    let ports = vec![("d0".to_string(), 4321)];
    assert_eq!(
        substitute_nbd("file={nbd:d0},format=raw", &ports).unwrap(),
        "file=nbd://127.0.0.1:4321/d0,format=raw"
    );
    assert!(substitute_nbd("file={nbd:d9}", &ports).unwrap_err().contains("d9"));
}

fn boot(expect: Expect, output: &[&str]) -> Boot {
    Boot {
        expect,
        output: output.iter().map(|s| s.to_string()).collect(),
        ..Boot::default()
    }
}

#[test]
fn qemu_lines_are_in_order_among_themselves_wherever_the_console_lines_fall() {
    let b = boot(
        Expect::Success,
        &["job start", "qemu: changed", "job end", "qemu: counted"],
    );
    // QEMU's stderr line came through before the console line expected ahead of it.
    let early = "qemu: changed\njob start\njob end\nBAREMQ: SUCCESS\nqemu: counted\n";
    assert!(judge(&b, Some(33), early).is_ok());
    // Within each stream the order still holds.
    let swapped = "job start\nqemu: counted\nqemu: changed\njob end\nBAREMQ: SUCCESS\n";
    assert!(
        judge(&b, Some(33), swapped)
            .unwrap_err()
            .contains("'qemu: counted' appears, but not after")
    );
    let console_swapped = "job end\nqemu: changed\njob start\nqemu: counted\nBAREMQ: SUCCESS\n";
    assert!(
        judge(&b, Some(33), console_swapped)
            .unwrap_err()
            .contains("'job end' appears, but not after")
    );
}

#[test]
fn judging_needs_exit_code_final_line_and_ordered_output() {
    let b = boot(Expect::Success, &["alpha", "beta"]);
    let good = "alpha\nbeta\nBAREMQ: SUCCESS\n";
    assert!(judge(&b, Some(33), good).is_ok());
    assert!(judge(&b, Some(35), good).unwrap_err().contains("exit status 35"));
    assert!(judge(&b, None, good).unwrap_err().contains("killed"));
    assert!(
        judge(&b, Some(33), "alpha\nbeta\n")
            .unwrap_err()
            .contains("BAREMQ: SUCCESS")
    );
    assert!(
        judge(&b, Some(33), "beta\nalpha\nBAREMQ: SUCCESS")
            .unwrap_err()
            .contains("not after")
    );
    assert!(
        judge(&b, Some(33), "alpha\nBAREMQ: SUCCESS")
            .unwrap_err()
            .contains("'beta' is missing")
    );
    let f = boot(Expect::Failure, &["vector 14"]);
    assert!(judge(&f, Some(35), "EXCEPTION: (vector 14)\nBAREMQ: FAILURE: x").is_ok());
    assert!(judge(&f, Some(33), "EXCEPTION: (vector 14)\nBAREMQ: SUCCESS").is_err());
    let mut a = boot(Expect::Success, &["ok"]);
    a.absent.push("PANIC".into());
    assert!(
        judge(&a, Some(33), "ok PANIC\nBAREMQ: SUCCESS")
            .unwrap_err()
            .contains("absent")
    );
}

#[test]
fn hmp_steps_are_text_and_command() {
    let s = parse(
        "f",
        "[m]\nhmp = [job0] => mce 1 1 0xbe00000000800400 5 0x1234000 0\nhmp = done => info cpus\noutput = x\n",
    )
    .unwrap();
    assert_eq!(
        s[0].boots[0].hmp,
        [
            (
                "[job0]".to_string(),
                "mce 1 1 0xbe00000000800400 5 0x1234000 0".to_string()
            ),
            ("done".to_string(), "info cpus".to_string())
        ]
    );
    for bad in ["hmp = mce 1 1", "hmp = => info cpus", "hmp = text =>"] {
        let e = parse("f", &format!("[m]\n{bad}\noutput = x\n")).unwrap_err();
        assert!(e.message.contains("TEXT => COMMAND"), "{bad}: {}", e.message);
    }
}

#[test]
fn shares_hold_jobs_to_the_proportion_of_their_weights() {
    let s = parse("f", "[a]\nshares = light:1,heavy:8 within 15%\noutput = x\n").unwrap();
    let shares = s[0].boots[0].shares.clone().unwrap();
    assert_eq!(shares.jobs, [("light".to_string(), 1), ("heavy".to_string(), 8)]);
    assert_eq!(shares.within_percent, 15);
    let two = |light: u64, heavy: u64| {
        format!(
            "{}\n{}\n",
            report_line(light, light / 2, "none", "off").replace(r#""name":"j""#, r#""name":"light""#),
            report_line(heavy, heavy / 2, "none", "off").replace(r#""name":"j""#, r#""name":"heavy""#)
        )
    };
    assert!(check_shares(&two(1000, 8200), &shares).is_ok());
    let e = check_shares(&two(1000, 4000), &shares).unwrap_err();
    assert!(
        e.contains("job light did 1000 of 5000 I/Os (20.0%), its weight asks 11.1%"),
        "{e}"
    );
    let e = check_shares(&report_line(2000, 1000, "none", "off"), &shares).unwrap_err();
    assert!(e.contains("no report of job light"), "{e}");
    for bad in [
        "a:1,b:2",
        "a:1 within 10%",
        "a:0,b:1 within 10%",
        "a:1,b:2 within 0%",
        "a:1,b within 5%",
    ] {
        let e = parse("f", &format!("[a]\nshares = {bad}\noutput = x\n")).unwrap_err();
        assert!(e.message.contains("shares: use"), "{bad}: {e}");
    }
}
