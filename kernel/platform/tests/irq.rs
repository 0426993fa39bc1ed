//! Vector allocation, dispatch, counters, affinity and interrupt-mode planning.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use common::*;
use platform::acpi::{IrqRoute, Madt, Sdt, SliceMemory};
use platform::irq::*;
use platform::pci::{ScanMode, enumerate};
use platform::{AFFINITY_FORMS, Error, TableSignature};

// ---- vector allocator ------------------------------------------------------------------------

#[test]
fn vectors_are_allocated_lowest_first_and_exhaust_with_an_error() {
    let allocator = VectorAllocator::new();
    allocator.reserve(0x30).unwrap();
    assert_eq!(allocator.reserve(0x30), Err(Error::VectorInUse { vector: 0x30 }));
    assert_eq!(allocator.allocate(), Ok(0x31));
    assert_eq!(
        allocator.reserve(0xF0),
        Err(Error::VectorNotAllocatable {
            vector: 0xF0,
            first: 0x30,
            last: 0xEF
        })
    );
    let mut taken = 2;
    while allocator.allocate().is_ok() {
        taken += 1;
    }
    assert_eq!(taken, usize::from(LAST_DEVICE_VECTOR - FIRST_DEVICE_VECTOR) + 1);
    assert_eq!(allocator.allocate(), Err(Error::VectorsExhausted { requested: 1 }));
    assert_eq!(allocator.free_count(), 0);
    allocator.free(0x77).unwrap();
    assert_eq!(allocator.free(0x77), Err(Error::VectorNotAllocated { vector: 0x77 }));
    assert_eq!(allocator.allocate(), Ok(0x77));
}

#[test]
fn blocks_for_multi_message_msi_are_aligned() {
    let allocator = VectorAllocator::with_range(0x31, 0x4F);
    assert_eq!(allocator.allocate(), Ok(0x31));
    assert_eq!(allocator.allocate_block(4), Ok(0x34));
    assert_eq!(allocator.allocate_block(8), Ok(0x38));
    assert_eq!(allocator.allocate_block(16), Ok(0x40));
    assert_eq!(
        allocator.allocate_block(16),
        Err(Error::VectorsExhausted { requested: 16 })
    );
    assert_eq!(allocator.allocate_block(2), Ok(0x32));
    assert_eq!(
        allocator.allocate_block(3),
        Err(Error::VectorsExhausted { requested: 3 })
    );
    assert_eq!(
        allocator.allocate_block(64),
        Err(Error::VectorsExhausted { requested: 64 })
    );
    assert_eq!(
        allocator.allocate(),
        Err(Error::VectorsExhausted { requested: 1 }),
        "0x31..=0x4f all taken"
    );
    allocator.free(0x36).unwrap();
    assert_eq!(allocator.allocate(), Ok(0x36));
}

#[test]
fn concurrent_allocation_never_hands_out_a_vector_twice() {
    let allocator = Arc::new(VectorAllocator::new());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let allocator = Arc::clone(&allocator);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                while let Ok(vector) = allocator.allocate() {
                    mine.push(vector);
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<u8> = threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect();
    all.sort_unstable();
    let expected: Vec<u8> = (FIRST_DEVICE_VECTOR..=LAST_DEVICE_VECTOR).collect();
    assert_eq!(all, expected);
}

#[test]
fn vector_spaces_hand_out_unused_numbers_first_then_reuse_per_cpu() {
    let spaces: Box<VectorSpaces<64>> = Box::new(VectorSpaces::new());
    // While numbers last, every CPU gets a number no other CPU uses.
    assert_eq!(spaces.allocate(0), Ok(0x30));
    assert_eq!(spaces.allocate(1), Ok(0x31));
    assert_eq!(spaces.allocate_block(2, 4), Ok(0x34));
    assert_eq!(spaces.allocate(0), Ok(0x32));
    assert_eq!(spaces.users(0x31), 1);
    // Three NVMe controllers, 65 vectors each (admin + one per CPU) on 64 CPUs: 195 vectors,
    // more than one space's 192, all granted once numbers are reused across CPUs.
    let spaces: Box<VectorSpaces<64>> = Box::new(VectorSpaces::new());
    let mut granted = Vec::new();
    for _controller in 0..3 {
        granted.push((0, spaces.allocate(0).unwrap()));
        for cpu in 0..64 {
            granted.push((cpu, spaces.allocate(cpu).unwrap()));
        }
    }
    assert_eq!(granted.len(), 195);
    let mut sorted = granted.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 195, "no (cpu, vector) pair handed out twice");
    // The first 192 are distinct numbers; the last three reuse numbers on other CPUs.
    let mut numbers: Vec<u8> = granted[..192].iter().map(|&(_, v)| v).collect();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), 192);
    assert!(
        granted[192..]
            .iter()
            .all(|&(cpu, v)| spaces.users(v) >= 2 && spaces.is_allocated(cpu, v))
    );
    // A full CPU space is an error on that CPU only.
    let spaces: Box<VectorSpaces<2>> = Box::new(VectorSpaces::new());
    while spaces.allocate(1).is_ok() {}
    assert_eq!(spaces.allocate(1), Err(Error::VectorsExhausted { requested: 1 }));
    assert_eq!(spaces.allocate(0), Ok(0x30));
    assert_eq!(spaces.allocate(2), Err(Error::CpuOutOfRange { cpu: 2, limit: 2 }));
    // Freeing returns the number to its CPU and drops its user count.
    spaces.free(1, 0x40).unwrap();
    assert_eq!(spaces.free(1, 0x40), Err(Error::VectorNotAllocated { vector: 0x40 }));
    assert_eq!(spaces.users(0x40), 0);
    assert!(!spaces.is_allocated(1, 0x40) && spaces.is_allocated(1, 0x41));
    assert_eq!(
        spaces.allocate(0),
        Ok(0x40),
        "unused everywhere again: handed out first"
    );
    // Taking a given number (a vector that moves to another CPU keeps it when it is free there).
    assert!(spaces.take_exact(1, 0x40, 1));
    assert!(!spaces.take_exact(1, 0x40, 1));
    assert_eq!(spaces.users(0x40), 2);
    assert!(!spaces.take_exact(0, 0x42, 4), "a block must be aligned to its size");
    assert!(!spaces.take_exact(0, 0xF0, 1), "outside the device range");
    assert!(spaces.take_exact(0, 0x44, 4));
}

// ---- dispatch table --------------------------------------------------------------------------

static CALLS: AtomicU64 = AtomicU64::new(0);
static LAST_CALL: AtomicU64 = AtomicU64::new(0);

/// A handler object with its own state (the typed replacement of a context word).
struct Recorder {
    id: u64,
}

impl InterruptHandler for Recorder {
    fn handle(&self, vector: u8, cpu: u32) {
        CALLS.fetch_add(1, Ordering::SeqCst);
        LAST_CALL.store(
            self.id << 16 | u64::from(vector) << 8 | u64::from(cpu),
            Ordering::SeqCst,
        );
    }
}

static EDU_HANDLER: Recorder = Recorder { id: 0x77 };
static QUEUE0_HANDLER: Recorder = Recorder { id: 0x10 };
static EDU: Registration = Registration {
    name: "edu",
    handler: &EDU_HANDLER,
};
static QUEUE0: Registration = Registration {
    name: "megasas-q0",
    handler: &QUEUE0_HANDLER,
};

#[test]
fn dispatch_calls_the_handler_and_counts_per_cpu() {
    let table: Box<IrqTable<4>> = Box::new(IrqTable::new());
    table.register(0x40, &EDU).unwrap();
    assert_eq!(
        table.register(0x40, &QUEUE0),
        Err(Error::HandlerPresent { vector: 0x40 })
    );
    assert_eq!(
        table.register(0x0E, &QUEUE0),
        Err(Error::ExceptionVector { vector: 0x0E })
    );
    let calls = CALLS.load(Ordering::SeqCst);
    assert_eq!(table.dispatch(0x40, 2), Dispatch::Handled);
    assert_eq!(CALLS.load(Ordering::SeqCst), calls + 1);
    assert_eq!(LAST_CALL.load(Ordering::SeqCst), 0x77 << 16 | 0x40 << 8 | 2);
    table.dispatch(0x40, 2);
    table.dispatch(0x40, 0);
    assert_eq!(table.dispatch(0x41, 1), Dispatch::Unhandled);
    assert_eq!(
        (table.count(0x40, 0), table.count(0x40, 1), table.count(0x40, 2)),
        (1, 0, 2)
    );
    assert_eq!(table.total(0x40), 3);
    assert_eq!(table.count(0x41, 1), 1);
    // A CPU index beyond capacity has no handlers, is not counted, and does not panic.
    assert_eq!(table.dispatch(0x40, 99), Dispatch::Unhandled);
    assert_eq!(table.total(0x40), 3);
    assert!(std::ptr::eq(table.unregister(0x40).unwrap(), &EDU));
    assert_eq!(table.unregister(0x40).unwrap_err(), Error::NoHandler { vector: 0x40 });
    assert_eq!(table.dispatch(0x40, 0), Dispatch::Unhandled);
}

#[test]
fn proc_interrupts_listing_shows_registered_or_counted_vectors_only() {
    let table: Box<IrqTable<4>> = Box::new(IrqTable::new());
    table.register(0x40, &EDU).unwrap();
    table.register(0x41, &QUEUE0).unwrap();
    for _ in 0..5 {
        table.dispatch(0x40, 1);
    }
    table.dispatch(0x90, 0);
    let text = table.display(2).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["CPU0", "CPU1"]);
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["0x40:", "0", "5", "edu"]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["0x41:", "0", "0", "megasas-q0"]
    );
    assert_eq!(
        lines[3].split_whitespace().collect::<Vec<_>>(),
        ["0x90:", "1", "0", "(no", "handler)"]
    );
    assert_eq!(
        table
            .display(99)
            .to_string()
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .count(),
        4,
        "clamped to capacity"
    );
}

static CPU2_HANDLER: Recorder = Recorder { id: 0x22 };
static CPU3_HANDLER: Recorder = Recorder { id: 0x33 };
static ON_CPU2: Registration = Registration {
    name: "nvme0#2",
    handler: &CPU2_HANDLER,
};
static ON_CPU3: Registration = Registration {
    name: "nvme1#3",
    handler: &CPU3_HANDLER,
};

#[test]
fn vector_numbers_are_per_cpu() {
    let table: Box<IrqTable<4>> = Box::new(IrqTable::new());
    // The same vector number on two CPUs belongs to two devices.
    table.register_on(2, 0x31, &ON_CPU2).unwrap();
    table.register_on(3, 0x31, &ON_CPU3).unwrap();
    assert_eq!(
        table.register_on(3, 0x31, &ON_CPU2),
        Err(Error::HandlerPresent { vector: 0x31 })
    );
    assert_eq!(
        table.register_on(4, 0x31, &ON_CPU2),
        Err(Error::CpuOutOfRange { cpu: 4, limit: 4 })
    );
    // A kernel-wide registration needs the vector free on every CPU, and changes nothing when not.
    assert_eq!(table.register(0x31, &EDU), Err(Error::HandlerPresent { vector: 0x31 }));
    assert!(table.registration_on(0, 0x31).is_none());
    table.dispatch(0x31, 2);
    assert_eq!(LAST_CALL.load(Ordering::SeqCst), 0x22 << 16 | 0x31 << 8 | 2);
    table.dispatch(0x31, 3);
    assert_eq!(LAST_CALL.load(Ordering::SeqCst), 0x33 << 16 | 0x31 << 8 | 3);
    assert_eq!(table.dispatch(0x31, 1), Dispatch::Unhandled);
    // The listing shows one row per device on the shared number.
    let text = table.display(4).to_string();
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows,
        [
            vec!["0x31:", "0", "0", "1", "0", "nvme0#2"],
            vec!["0x31:", "0", "0", "0", "1", "nvme1#3"],
            vec!["0x31:", "0", "1", "0", "0", "(no", "handler)"],
        ],
        "{text}"
    );
    assert!(std::ptr::eq(table.unregister_on(2, 0x31).unwrap(), &ON_CPU2));
    assert!(std::ptr::eq(table.registration_on(3, 0x31).unwrap(), &ON_CPU3));
    assert_eq!(table.dispatch(0x31, 2), Dispatch::Unhandled);
}

#[test]
fn listing_of_many_cpus_is_one_line_per_vector_with_cpu_ranges() {
    let table: Box<IrqTable<64>> = Box::new(IrqTable::new());
    table.register(0x20, &EDU).unwrap();
    table.register_on(40, 0x31, &ON_CPU2).unwrap();
    for cpu in (0..40).chain(41..48) {
        table.dispatch(0x20, cpu);
    }
    table.dispatch(0x31, 40);
    table.dispatch(0x31, 40);
    let text = table.display(48).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["0x20:", "47", "on", "47", "CPU(s)", "(cpu0-39,41-47)", "edu"]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["0x31:", "2", "on", "1", "CPU(s)", "(cpu40)", "nvme0#2"]
    );
    // Up to MAX_LISTING_COLUMNS CPUs it stays one column per CPU.
    assert_eq!(
        table
            .display(MAX_LISTING_COLUMNS)
            .to_string()
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .count(),
        MAX_LISTING_COLUMNS
    );
}

static SEEN_CONTEXT_MISMATCH: AtomicUsize = AtomicUsize::new(0);
static HANDLED: AtomicUsize = AtomicUsize::new(0);

struct Pairing {
    vector: u8,
}

impl InterruptHandler for Pairing {
    fn handle(&self, vector: u8, _cpu: u32) {
        // Each registration's handler object knows the vector it was registered for.
        if self.vector != vector {
            SEEN_CONTEXT_MISMATCH.fetch_add(1, Ordering::SeqCst);
        }
        HANDLED.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn concurrent_dispatch_during_registration_sees_whole_registrations() {
    let table: Arc<IrqTable<4>> = Arc::new(IrqTable::new());
    let registrations: Vec<&'static Registration> = (0x30..0x70u8)
        .map(|vector| {
            let handler: &'static Pairing = Box::leak(Box::new(Pairing { vector }));
            &*Box::leak(Box::new(Registration {
                name: "pairing",
                handler,
            }))
        })
        .collect();
    let dispatchers: Vec<_> = (0..3u32)
        .map(|cpu| {
            let table = Arc::clone(&table);
            std::thread::spawn(move || {
                for round in 0..200 {
                    for vector in 0x30..0x70u8 {
                        let _ = table.dispatch(vector, cpu);
                    }
                    if round % 50 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for _ in 0..20 {
        for (position, registration) in registrations.iter().enumerate() {
            let vector = 0x30 + position as u8;
            let _ = table.unregister(vector);
            table.register(vector, registration).unwrap();
        }
    }
    for dispatcher in dispatchers {
        dispatcher.join().unwrap();
    }
    assert_eq!(SEEN_CONTEXT_MISMATCH.load(Ordering::SeqCst), 0);
    let counted: u64 = (0x30..0x70u8).map(|vector| table.total(vector)).sum();
    assert_eq!(counted, 3 * 200 * 64, "every dispatch was counted");
    assert!(HANDLED.load(Ordering::SeqCst) > 0);
}

// ---- affinity --------------------------------------------------------------------------------

#[test]
fn affinity_forms_parse() {
    assert_eq!(AffinityPolicy::parse("spread"), Ok(AffinityPolicy::Spread));
    assert_eq!(AffinityPolicy::parse("cpu:3"), Ok(AffinityPolicy::SingleCpu(3)));
    let explicit = AffinityPolicy::parse("0:1,1:3,7:0").unwrap();
    assert_eq!(explicit.to_string(), "0:1,1:3,7:0");
    assert_eq!(explicit.cpu_for(0, 4), Ok(1));
    assert_eq!(explicit.cpu_for(1, 4), Ok(3));
    assert_eq!(explicit.cpu_for(2, 4), Ok(2), "unlisted indices are spread");
    assert_eq!(explicit.cpu_for(7, 4), Ok(0));
    assert_eq!(AffinityPolicy::default(), AffinityPolicy::Spread);
}

#[test]
fn spread_maps_vector_i_to_cpu_i_mod_n() {
    let targets: Vec<u32> = (0..10)
        .map(|index| AffinityPolicy::Spread.cpu_for(index, 3).unwrap())
        .collect();
    assert_eq!(targets, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
    assert_eq!(AffinityPolicy::SingleCpu(2).cpu_for(9, 3), Ok(2));
    assert_eq!(
        AffinityPolicy::Spread.cpu_for(0, 0),
        Err(Error::CpuOutOfRange { cpu: 0, limit: 0 })
    );
}

#[test]
fn affinity_rejects_cpus_beyond_the_online_count_when_applied() {
    let policy = AffinityPolicy::parse("0:1,1:8").unwrap();
    assert_eq!(policy.validate(8), Err(Error::CpuOutOfRange { cpu: 8, limit: 8 }));
    assert_eq!(policy.validate(9), Ok(()));
    assert_eq!(policy.cpu_for(0, 4), Err(Error::CpuOutOfRange { cpu: 8, limit: 4 }));
    assert_eq!(
        AffinityPolicy::SingleCpu(4).validate(4),
        Err(Error::CpuOutOfRange { cpu: 4, limit: 4 })
    );
}

#[test]
fn malformed_affinity_values_name_the_bad_token_and_the_accepted_forms() {
    let cases: &[(&str, &str, &str)] = &[
        ("", "", "empty value"),
        ("Spread", "Spread", "unknown form"),
        ("all", "all", "unknown form"),
        ("cpu:", "cpu:", "CPU number must be decimal"),
        ("cpu:x", "cpu:x", "CPU number must be decimal"),
        ("cpu:-1", "cpu:-1", "CPU number must be decimal"),
        ("cpu:+1", "cpu:+1", "CPU number must be decimal"),
        ("cpu:99999999999", "cpu:99999999999", "number too large"),
        ("0:1,x:2", "x:2", "vector index must be decimal"),
        ("0:1,1:y", "1:y", "CPU number must be decimal"),
        ("0:1,0:2", "0:2", "vector index given twice"),
        ("0:1,", "0:1,", "empty item (stray comma)"),
        ("0:1,,1:2", "0:1,,1:2", "empty item (stray comma)"),
        ("0:1,2", "2", "expected vector-index:cpu"),
        (
            "2048:0",
            "2048:0",
            "vector index must be below 2048 (the MSI-X maximum)",
        ),
        ("0:1:2", "0:1:2", "CPU number must be decimal"),
    ];
    for &(value, token, reason) in cases {
        let error = AffinityPolicy::parse(value).unwrap_err();
        assert_eq!(
            error,
            Error::AffinityParse {
                token: platform::Token::new(token),
                reason
            },
            "value {value:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("\"{token}\"")) && message.contains(reason),
            "{message}"
        );
        assert!(message.contains(AFFINITY_FORMS), "{message}");
    }
    let long = "0:1,".repeat(100) + "0:1";
    assert!(AffinityPolicy::parse(&long).is_err());
    let many: Vec<String> = (0..65).map(|index| format!("{index}:0")).collect();
    assert_eq!(
        AffinityPolicy::parse(&many.join(",")),
        Err(Error::AffinityCapacity { capacity: 64 })
    );
    let token = platform::Token::new(&"9".repeat(40));
    assert!(token.as_str().ends_with("...") && token.as_str().len() <= 32);
}

#[test]
fn affinity_from_the_command_line() {
    assert_eq!(AffinityPolicy::from_cmdline("/kernel console=ttyS0 smp=4"), Ok(None));
    assert_eq!(
        AffinityPolicy::from_cmdline("/kernel irq.affinity=cpu:1 quiet"),
        Ok(Some(AffinityPolicy::SingleCpu(1)))
    );
    let error = AffinityPolicy::from_cmdline("irq.affinity=0:q").unwrap_err();
    assert!(
        error.to_string().starts_with("irq.affinity: bad token \"0:q\""),
        "{error}"
    );
    assert!(matches!(
        AffinityPolicy::from_cmdline("irq.affinity=spread irq.affinity=cpu:0"),
        Err(Error::AffinityParse {
            reason: "irq.affinity given twice",
            ..
        })
    ));
    assert!(matches!(
        AffinityPolicy::from_cmdline("irq.affinity="),
        Err(Error::AffinityParse {
            reason: "empty value",
            ..
        })
    ));
}

// ---- interrupt mode --------------------------------------------------------------------------

fn qemu_madt_parsed() -> Madt {
    let bytes = qemu_madt(4);
    let memory = SliceMemory::new(0, &bytes);
    Madt::parse(&memory, &Sdt::load(&memory, 0, Some(TableSignature::MADT), 36).unwrap()).unwrap()
}

fn device(msix: Option<u16>, msi: Option<u16>, pin: u8, line: u8) -> platform::pci::PciFunction {
    let mut fake = FakeFunction::endpoint(0x1234, 0x5678, 0x01, 0x04)
        .interrupt(pin, line)
        .bar_mem32(0, 0xFE00_0000, 0x4000, false);
    let mut next = 0;
    if let Some(vectors) = msi {
        let mmc = vectors.trailing_zeros() as u16;
        fake = fake.capability(0x60, 0x05, 0, mmc << 1, &[(0, 0), (0, 0)]);
        next = 0x60;
    }
    if let Some(size) = msix {
        fake = fake.capability(0x50, 0x11, next, size - 1, &[(0x2000, 0), (0x3000, 0)]);
        next = 0x50;
    }
    if next != 0 {
        fake = fake.cap_pointer(next);
    }
    let config = FakeConfig::new();
    config.add(0, 4, 0, fake);
    enumerate(&config, 0, 0..=0, ScanMode::FollowBridges).unwrap().remove(0)
}

#[test]
fn msix_is_preferred_then_msi_then_intx() {
    let madt = qemu_madt_parsed();
    let full = device(Some(15), Some(8), 1, 11);
    assert_eq!(
        choose_interrupt_mode(&full, 4, None, Some(&madt)),
        Ok(InterruptPlan::MsiX {
            vectors: 4,
            table_size: 15
        })
    );
    assert_eq!(
        choose_interrupt_mode(&full, 64, None, Some(&madt)),
        Ok(InterruptPlan::MsiX {
            vectors: 15,
            table_size: 15
        })
    );
    assert_eq!(choose_interrupt_mode(&full, 0, None, Some(&madt)).unwrap().vectors(), 1);
    let msi_only = device(None, Some(8), 1, 11);
    assert_eq!(
        choose_interrupt_mode(&msi_only, 6, None, Some(&madt)),
        Ok(InterruptPlan::Msi { vectors: 4 })
    );
    assert_eq!(
        choose_interrupt_mode(&msi_only, 64, None, Some(&madt)),
        Ok(InterruptPlan::Msi { vectors: 8 })
    );
    let intx_only = device(None, None, 1, 11);
    let plan = choose_interrupt_mode(&intx_only, 4, None, Some(&madt)).unwrap();
    assert_eq!(
        plan,
        InterruptPlan::Intx {
            pin: 1,
            line: 11,
            route: IrqRoute {
                gsi: 11,
                active_low: false,
                level: true
            }
        }
    );
    assert_eq!(plan.to_string(), "INTx pin A line 11 -> GSI 11 level active-high");
    let no_madt = choose_interrupt_mode(&intx_only, 1, None, None).unwrap();
    assert_eq!(
        no_madt,
        InterruptPlan::Intx {
            pin: 1,
            line: 11,
            route: IrqRoute {
                gsi: 11,
                active_low: true,
                level: true
            }
        }
    );
    let nothing = device(None, None, 0, 0);
    assert_eq!(
        choose_interrupt_mode(&nothing, 1, None, Some(&madt)),
        Err(Error::NoInterruptSource {
            address: nothing.address
        })
    );
}

#[test]
fn forced_modes_and_unusable_lines() {
    let madt = qemu_madt_parsed();
    let full = device(Some(15), Some(8), 1, 10);
    assert_eq!(
        choose_interrupt_mode(&full, 2, Some(InterruptMode::Msi), Some(&madt)),
        Ok(InterruptPlan::Msi { vectors: 2 })
    );
    assert_eq!(
        choose_interrupt_mode(&full, 2, Some(InterruptMode::Intx), Some(&madt))
            .unwrap()
            .mode(),
        InterruptMode::Intx
    );
    let msi_only = device(None, Some(1), 0, 0);
    assert_eq!(
        choose_interrupt_mode(&msi_only, 1, Some(InterruptMode::MsiX), Some(&madt)),
        Err(Error::ModeUnavailable {
            address: msi_only.address,
            mode: "MSI-X"
        })
    );
    assert_eq!(
        choose_interrupt_mode(&msi_only, 1, Some(InterruptMode::Intx), Some(&madt)),
        Err(Error::ModeUnavailable {
            address: msi_only.address,
            mode: "INTx"
        })
    );
    let unrouted = device(None, None, 1, 0xFF);
    assert_eq!(
        choose_interrupt_mode(&unrouted, 1, None, Some(&madt)),
        Err(Error::IntxLine {
            address: unrouted.address,
            line: 0xFF
        })
    );
    assert_eq!(
        InterruptPlan::MsiX {
            vectors: 4,
            table_size: 15
        }
        .to_string(),
        "MSI-X, 4 vector(s) of 15 table entries"
    );
}

#[test]
fn io_apic_redirection_entries() {
    let route = IrqRoute {
        gsi: 11,
        active_low: false,
        level: true,
    };
    let entry = IoApicRedirection::new(&route, 0x41, 3, false).unwrap();
    assert_eq!(entry.encode(), 0x0300_0000_0000_8041);
    assert_eq!(IoApicRedirection::decode(entry.encode()), entry);
    let masked_low = IoApicRedirection::new(
        &IrqRoute {
            gsi: 2,
            active_low: true,
            level: false,
        },
        0x30,
        0,
        true,
    )
    .unwrap();
    assert_eq!(masked_low.encode(), 0x0000_0000_0001_2030);
    assert_eq!(
        IoApicRedirection::new(&route, 0x10, 0, false),
        Err(Error::ExceptionVector { vector: 0x10 })
    );
    assert_eq!(
        IoApicRedirection::new(&route, 0x40, 256, false),
        Err(Error::ApicIdNeedsRemapping { apic_id: 256 })
    );
    assert_eq!(ioapic_redirection_registers(0), Some((0x10, 0x11)));
    assert_eq!(ioapic_redirection_registers(23), Some((0x3E, 0x3F)));
    assert_eq!(ioapic_redirection_registers(119), Some((0xFE, 0xFF)));
    assert_eq!(ioapic_redirection_registers(120), None);
}

#[test]
fn chipset_routers_map_slots_and_pins_to_pirqs() {
    use platform::irq::PciIrqRouter;
    assert_eq!(PciIrqRouter::from_id(0x8086, 0x7000), Some(PciIrqRouter::Piix3));
    assert_eq!(PciIrqRouter::from_id(0x8086, 0x2918), Some(PciIrqRouter::Ich9));
    assert_eq!(PciIrqRouter::from_id(0x8086, 0x1237), None);
    // PIIX3: slot 2 INTA -> PIRQ B (QEMU's pc: slot 2 device on line 11 via PIRQB), rotating per pin.
    let piix = PciIrqRouter::Piix3;
    assert_eq!(piix.pirq(2, 1), Some(1));
    assert_eq!(piix.pirq(2, 4), Some(0));
    assert_eq!(piix.pirq(3, 1), Some(2));
    assert_eq!(piix.pirq(1, 1), Some(0));
    assert_eq!(
        piix.direct_route(1),
        None,
        "PIIX3 routes only through the ISA IRQ registers"
    );
    // ICH9: (slot + pin - 1) % 4 + 4, GSI 16 + PIRQ, level active-low.
    let ich9 = PciIrqRouter::Ich9;
    assert_eq!(ich9.pirq(1, 1), Some(5));
    assert_eq!(
        ich9.direct_route(5).map(|r| (r.gsi, r.level, r.active_low)),
        Some((21, true, true))
    );
    assert_eq!(ich9.pirq(0, 4), Some(7));
    assert_eq!(ich9.pirq(4, 1), Some(4));
    assert_eq!(
        ich9.pirq(25, 1),
        None,
        "chipset slots are wired by registers baremq does not read"
    );
    // Invalid pins never index anything.
    for router in [piix, ich9] {
        assert_eq!(router.pirq(2, 0), None);
        assert_eq!(router.pirq(2, 5), None);
        assert_eq!(router.pirq(32, 1), None);
    }
    assert_eq!(ich9.direct_route(8), None);
}

#[test]
fn a_queue_vector_lands_on_a_cpu_that_submits_to_its_queue() {
    // 4 CPUs over 2 queues: cpu0-1 -> queue 0, cpu2-3 -> queue 1.
    let map = [0u16, 0, 1, 1];
    let spread = AffinityPolicy::Spread;
    // Spread would put vector 1 on cpu1 (queue 0): it moves to cpu2, the first CPU of queue 1.
    assert_eq!(spread.cpu_for_queue_vector(0, &map, 2, None), Ok(0));
    assert_eq!(spread.cpu_for_queue_vector(1, &map, 2, None), Ok(2));
    // A policy CPU that does submit to the queue is kept.
    let explicit = AffinityPolicy::parse("0:1,1:3").unwrap();
    assert_eq!(explicit.cpu_for_queue_vector(0, &map, 2, None), Ok(1));
    assert_eq!(explicit.cpu_for_queue_vector(1, &map, 2, None), Ok(3));
    // A driver's preferred CPU: kept when it serves the queue, else corrected.
    assert_eq!(spread.cpu_for_queue_vector(0, &map, 2, Some(1)), Ok(1));
    assert_eq!(spread.cpu_for_queue_vector(0, &map, 2, Some(3)), Ok(0));
    assert_eq!(
        spread.cpu_for_queue_vector(0, &map, 2, Some(4)),
        Err(Error::CpuOutOfRange { cpu: 4, limit: 4 })
    );
    // Vectors beyond the queues (every MSI-X entry of a one-queue device) follow the policy.
    let one_queue = [0u16, 0, 0, 0];
    let cpus: Vec<u32> = (0..15u16)
        .map(|i| spread.cpu_for_queue_vector(i, &one_queue, 1, None).unwrap())
        .collect();
    assert_eq!(cpus, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2]);
    // More queues than CPUs: queue 3 serves no CPU, its vector follows the policy.
    let few = [0u16, 1];
    assert_eq!(spread.cpu_for_queue_vector(3, &few, 4, None), Ok(1));
    // Every vector that serves a served queue lands on a CPU of that queue, for every policy.
    for policy in [spread.clone(), AffinityPolicy::SingleCpu(3), explicit] {
        for index in 0..2u16 {
            let cpu = policy.cpu_for_queue_vector(index, &map, 2, None).unwrap();
            assert_eq!(map[cpu as usize], index, "{policy} vector {index}");
        }
    }
}
