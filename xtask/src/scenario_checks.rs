//! Each scenario check the test-honesty audit found unable to fail, run against output written
//! by the kernel's own code (the interrupt table of `platform`, the job report of `workload`)
//! with the forbidden value present: the check, as it now stands in `tests/*.scenarios`, must
//! fail, and must pass on the output it describes. The old forms of the patterns are run too, to
//! show what they let through.

use crate::bench::fake::{SimDevice, job_human_report};
use crate::runner::load_scenarios;
use crate::scenario::{self, Boot, Expect, judge, parse};
use platform::irq::{FnHandler, IrqTable, Registration};

fn scenario_boot(name: &str, boot: usize) -> Boot {
    let all = load_scenarios().expect("the scenario files parse");
    let sc = all
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("scenario {name} exists"));
    sc.boots[boot].clone()
}

/// Only the patterns that look at the interrupt listing (rows ` 0xVV:` and their cells).
fn table_patterns(boot: &Boot) -> Boot {
    let is_table = |p: &String| p.trim_start().starts_with("0x") || p.contains("nvme0#") || p.starts_with("          ");
    Boot {
        expect: Expect::Success,
        output: boot.output.iter().filter(|p| is_table(p)).cloned().collect(),
        absent: boot.absent.iter().filter(|p| is_table(p)).cloned().collect(),
        ..Boot::default()
    }
}

fn ignore(_vector: u8, _cpu: u32) {}
static HANDLER: FnHandler = FnHandler(ignore);
static QUEUE1: Registration = Registration {
    name: "nvme0#1",
    handler: &HANDLER,
};
static QUEUE2: Registration = Registration {
    name: "nvme0#2",
    handler: &HANDLER,
};

/// The kernel's `/proc/interrupts`-like listing for two CPUs, `counts[v][cpu]` interrupts of
/// vector 0x31 + v, followed by the success verdict.
fn two_cpu_listing(counts: [[u32; 2]; 2]) -> String {
    let table: IrqTable<2> = IrqTable::new();
    table.register(0x31, &QUEUE1).unwrap();
    table.register(0x32, &QUEUE2).unwrap();
    for (v, per_cpu) in counts.iter().enumerate() {
        for (cpu, n) in per_cpu.iter().enumerate() {
            for _ in 0..*n {
                table.dispatch(0x31 + v as u8, cpu as u32);
            }
        }
    }
    format!(
        "interrupts per CPU since boot (like /proc/interrupts):\n{}\nBAREMQ: SUCCESS\n",
        table.display(2)
    )
}

/// H2: the diagonal of `nvme-q35-msix-2cpus` ("vector 0x31 fires on cpu0 only, 0x32 on cpu1
/// only"). Trimmed, `          0  nvme0#1` became `0  nvme0#1` and accepted cpu1 = 10.
#[test]
fn diagonal_rows_refuse_a_count_ending_in_zero() {
    let checks = table_patterns(&scenario_boot("nvme-q35-msix-2cpus", 0));
    assert!(checks.output.iter().any(|p| p == "          0  nvme0#1"), "{checks:?}");
    assert!(judge(&checks, Some(33), &two_cpu_listing([[1234, 0], [0, 987]])).is_ok());
    let wrong = two_cpu_listing([[1234, 10], [0, 987]]);
    assert!(judge(&checks, Some(33), &wrong).is_err(), "cpu1 = 10 on 0x31 passed");
    let wrong = two_cpu_listing([[1234, 0], [20, 987]]);
    assert!(judge(&checks, Some(33), &wrong).is_err(), "cpu0 = 20 on 0x32 passed");
    // The old, trimmed reading of the same lines let the first one through.
    let trimmed = Boot {
        output: checks.output.iter().map(|p| p.trim().to_string()).collect(),
        absent: checks.absent.iter().map(|p| p.trim().to_string()).collect(),
        ..checks.clone()
    };
    assert!(judge(&trimmed, Some(33), &two_cpu_listing([[1234, 10], [0, 987]])).is_ok());
}

/// H3: `nvme-q35-msix-2cpus-irq-policy` must see vector 0x32 fire on cpu1. Its old absent lines
/// (`0           0  nvme0#2`, eleven spaces between cells that are ten apart) never matched.
#[test]
fn the_irq_policy_scenario_sees_vector_0x32_fire() {
    let checks = table_patterns(&scenario_boot("nvme-q35-msix-2cpus-irq-policy", 0));
    assert!(judge(&checks, Some(33), &two_cpu_listing([[500, 0], [0, 480]])).is_ok());
    let silent = two_cpu_listing([[500, 0], [0, 0]]);
    assert!(
        judge(&checks, Some(33), &silent).is_err(),
        "0x32 never fired, yet passed"
    );
    let old = Boot {
        absent: vec!["0           0  nvme0#1".into(), "0           0  nvme0#2".into()],
        ..Boot::default()
    };
    let old = Boot {
        output: vec!["BAREMQ: SUCCESS".into()],
        ..old
    };
    assert!(
        judge(&old, Some(33), &silent).is_ok(),
        "the old patterns could not fail"
    );
}

/// H1: `nvme-irq-poll-2cpus` must see an interrupt-then-poll window open. Its counters are job
/// totals (`name=N` on the totals line), never a per-CPU row.
#[test]
fn the_irq_poll_scenario_sees_windows_open() {
    let boot = scenario_boot("nvme-irq-poll-2cpus", 0);
    let checks = Boot {
        expect: Expect::Success,
        output: vec!["result: PASS".into()],
        absent: boot.absent.clone(),
        ..Boot::default()
    };
    let words: Vec<String> = "rw=randread bs=4k iodepth=8 runtime=2ms device=nvme0n1"
        .split(' ')
        .map(String::from)
        .collect();
    let device = SimDevice {
        latency_ns: 20_000,
        fail_every_lba: 0,
    };
    let report = |windows: u64, polled: u64| {
        let text = job_human_report(
            &words,
            &device,
            &[0, 1],
            &[("nvme_poll_windows", windows), ("nvme_window_polled", polled)],
        );
        format!("{text}\nBAREMQ: SUCCESS\n")
    };
    assert!(judge(&checks, Some(33), &report(12, 340)).is_ok());
    assert!(
        judge(&checks, Some(33), &report(0, 0)).is_err(),
        "no window opened, yet passed"
    );
    assert!(
        judge(&checks, Some(33), &report(12, 0)).is_err(),
        "nothing polled, yet passed"
    );
    // Without the counters at all, an absent check of them cannot fail: the harness says so.
    let bare = format!("{}\nBAREMQ: SUCCESS\n", job_human_report(&words, &device, &[0, 1], &[]));
    let e = judge(&checks, Some(33), &bare).unwrap_err();
    assert!(e.contains("can never match"), "{e}");
    // The old per-CPU-row form never matched the totals line.
    let old = Boot {
        absent: vec!["nvme_poll_windows          0".into()],
        ..checks.clone()
    };
    assert!(
        !report(0, 0).contains("nvme_poll_windows          0"),
        "the old pattern could match after all"
    );
    let e = judge(&old, Some(33), &report(0, 0)).unwrap_err();
    assert!(e.contains("can never match"), "{e}");
}

/// H4: a failure scenario whose only `output` was a word of its own command line passed on any
/// failure, a panic included.
#[test]
fn failure_scenarios_do_not_pass_on_the_echo_or_a_panic() {
    for (name, word) in [
        ("megasas-key-neither-driver-knows", "megasas.report_onyl=1"),
        ("nvme-unknown-key", "nvme.queuez=2"),
        ("nvme-bad-value", "nvme.irq=msi"),
    ] {
        let boot = scenario_boot(name, 0);
        let panic = format!(
            "baremq 0.1.0 starting\ncmdline: \"{word}\"\npanicked at kernel/src/main.rs:1:1: boom\nBAREMQ: FAILURE: panic\n"
        );
        assert!(judge(&boot, Some(35), &panic).is_err(), "{name} passed on a panic");
        let old = Boot {
            expect: Expect::Failure,
            output: vec![word.to_string()],
            ..Boot::default()
        };
        let e = judge(&old, Some(35), &panic).unwrap_err();
        assert!(e.contains("only in the command-line echo"), "{name}: {e}");
    }
}

/// The parser keeps pattern values verbatim, refuses invisible trailing whitespace, and empty
/// patterns; quotes keep a terminating space.
#[test]
fn pattern_values_are_verbatim() {
    let s = parse(
        "f",
        "[a]\noutput =           0  nvme0#1\noutput = \"write: ios=1024 \"\nabsent =  0x31:          0\n",
    )
    .unwrap();
    assert_eq!(s[0].boots[0].output, ["          0  nvme0#1", "write: ios=1024 "]);
    assert_eq!(s[0].boots[0].absent, [" 0x31:          0"]);
    let e = parse("f", "[a]\noutput = ios=1024 \n").unwrap_err();
    assert!(e.message.contains("ends in whitespace"), "{e}");
    for empty in ["output =", "output = ", "absent = \"\"", "output = \"  \""] {
        let e = parse("f", &format!("[a]\n{empty}\noutput = x\n")).unwrap_err();
        assert!(e.message.contains("empty"), "{empty}: {e}");
    }
    // A terminating space keeps 1024 from matching 10240.
    let b = &s[0].boots[0];
    let checks = Boot {
        output: vec![b.output[1].clone()],
        ..Boot::default()
    };
    assert!(judge(&checks, Some(33), "  write: ios=1024 iops=5\nBAREMQ: SUCCESS\n").is_ok());
    assert!(judge(&checks, Some(33), "  write: ios=10240 iops=5\nBAREMQ: SUCCESS\n").is_err());
}

/// M5: the verdict must be the kernel's last line; QEMU's own lines may follow it.
#[test]
fn the_verdict_is_the_last_kernel_line() {
    let b = Boot {
        output: vec!["alpha".into()],
        ..Boot::default()
    };
    assert!(judge(&b, Some(33), "alpha\nBAREMQ: SUCCESS\nqemu: terminating\n").is_ok());
    let e = judge(&b, Some(33), "alpha\nBAREMQ: SUCCESS\nlate line\n").unwrap_err();
    assert!(e.contains("not the kernel's last line"), "{e}");
    // The verdict's repeats for a late console may follow it.
    let repeated = "alpha\nBAREMQ: SUCCESS\nBAREMQ-REPEAT #1 (6 s since boot): SUCCESS\n";
    assert!(judge(&b, Some(33), repeated).is_ok());
}

/// The echo is searched only by a pattern that itself checks the banner's echo.
#[test]
fn the_banner_echo_can_still_be_checked() {
    let b = Boot {
        output: vec![format!("{}log=info\"", scenario::CMDLINE_ECHO), "log=info".into()],
        ..Boot::default()
    };
    let text = "cmdline: \"log=info\"\nlog level log=info\nBAREMQ: SUCCESS\n";
    assert!(judge(&b, Some(33), text).is_ok());
    let text = "cmdline: \"log=info\"\nBAREMQ: SUCCESS\n";
    assert!(judge(&b, Some(33), text).is_err());
}

/// Counter-shaped absent patterns whose counter never appears are refused; free text is not.
#[test]
fn dead_absent_patterns_are_refused() {
    let b = |absent: &str| Boot {
        output: vec!["x".into()],
        absent: vec![absent.into()],
        ..Boot::default()
    };
    let text = "x\n  totals: ipis=4 hot_path_locks=7\n    device_irqs          3\nBAREMQ: SUCCESS\n";
    assert!(judge(&b("ipis=0"), Some(33), text).is_ok());
    assert!(judge(&b("device_irqs                0"), Some(33), text).is_ok());
    assert!(judge(&b("controller reset"), Some(33), text).is_ok());
    for dead in ["ipi_count=0", "completion_ipis            0", " 0x44:          0"] {
        let e = judge(&b(dead), Some(33), text).unwrap_err();
        assert!(e.contains("can never match"), "{dead}: {e}");
    }
    // `ipis=` inside `completion_ipis=` is not the counter `ipis`.
    let text = "x\n  totals: completion_ipis=4\nBAREMQ: SUCCESS\n";
    assert!(judge(&b("ipis=0"), Some(33), text).is_err());
}
