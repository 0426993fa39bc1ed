//! The AML interpreter and the host bridge / `_PRT` / `_PXM` discovery on a
//! compiled fixture (`tests/aml/namespace.asl`, built with iasl into
//! `namespace.aml`), and its bounds on hand-made byte code.

use platform::Error;
use platform::aml::{self, FixedRegions, Object, Path, RouteSource, WindowKind};

/// The fixture's AML, without its 36-byte table header.
fn fixture() -> Vec<(u8, Vec<u8>)> {
    let table = include_bytes!("aml/namespace.aml");
    assert_eq!(&table[0..4], b"DSDT");
    vec![(table[8], table[36..].to_vec())]
}

fn path(text: &str) -> Path {
    Path::parse(text).expect("valid path")
}

fn what(error: &Error) -> &'static str {
    match error {
        Error::Aml { what, .. } => what,
        other => panic!("not an AML error: {other}"),
    }
}

#[test]
fn the_fixture_loads_without_problems() {
    let mut regions = FixedRegions::default();
    let interp = aml::load(&mut regions, &fixture());
    assert!(interp.load_problems.is_empty(), "{:?}", interp.load_problems);
    assert!(interp.exists(&path("\\_SB.PCI0.RP01._PRT")));
    assert!(interp.exists(&path("\\PRQA")));
}

#[test]
fn host_bridges_come_with_segment_bus_range_windows_and_proximity() {
    // BUSR (I/O port 0x504) reads 0x80: PCI1's _BBN and _CRS follow it.
    let mut regions = FixedRegions {
        value: 0x80,
        ..FixedRegions::default()
    };
    let mut interp = aml::load(&mut regions, &fixture());
    let found = aml::discover(&mut interp);
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    // PCI2's _STA says absent.
    assert_eq!(found.absent, 1);
    assert_eq!(found.bridges.len(), 2);

    let pci0 = &found.bridges[0];
    assert_eq!(pci0.path, path("\\_SB.PCI0"));
    assert_eq!(pci0.id, "PNP0A08");
    assert_eq!(pci0.uid.as_deref(), Some("0"));
    assert_eq!(
        (pci0.segment, pci0.bbn, pci0.buses, pci0.pxm),
        (0, Some(0), Some((0, 0x3F)), Some(1))
    );
    let windows: Vec<_> = pci0.windows.iter().map(|w| (w.kind, w.start, w.len)).collect();
    assert_eq!(
        windows,
        vec![
            (WindowKind::Io, 0xCF8, 8),
            (WindowKind::Memory, 0xC000_0000, 0x3EC0_0000),
            (WindowKind::Memory, 0x80_0000_0000, 0x10_0000_0000),
        ]
    );

    let pci1 = &found.bridges[1];
    assert_eq!(pci1.id, "PNP0A03");
    assert_eq!(
        (pci1.segment, pci1.bbn, pci1.buses, pci1.pxm),
        (1, Some(0x80), Some((0x80, 0x8F)), None)
    );
    assert_eq!(pci1.root_bus(), 0x80);
}

#[test]
fn prt_in_apic_mode_resolves_gsis_and_links() {
    // PRQA and PRQB (ports 0x500, 0x501) read 11: both links are on IRQ 11.
    let mut regions = FixedRegions {
        value: 11,
        ..FixedRegions::default()
    };
    let mut interp = aml::load(&mut regions, &fixture());
    let found = aml::discover(&mut interp);
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    // \_PIC(1) was called: the root bus's table is PRTA (4 entries), not PRTP (1).
    assert_eq!(found.prts.len(), 2);
    let root = &found.prts[0];
    assert!(root.scope.hops.is_empty());
    assert_eq!(root.unresolved, 0);
    let routes: Vec<_> = root
        .routes
        .iter()
        .map(|r| (r.device, r.pin, r.gsi, r.level, r.active_low, r.isa))
        .collect();
    assert_eq!(
        routes,
        vec![
            (2, 0, 16, true, true, false),
            (2, 1, 17, true, true, false),
            // LNKA: Extended Interrupt descriptor, level, active low.
            (3, 0, 11, true, true, false),
            // LNKB: legacy IRQ descriptor (an ISA IRQ).
            (3, 1, 11, true, true, true),
        ]
    );
    assert_eq!(root.routes[0].source, RouteSource::Gsi);
    assert_eq!(root.routes[2].source, RouteSource::Link(path("\\_SB.LNKA")));

    // RP01 (device 0x1C function 2) builds its table in a While loop.
    let bridge = &found.prts[1];
    assert_eq!(bridge.scope.hops, vec![(0x1C, 2)]);
    let gsis: Vec<_> = bridge.routes.iter().map(|r| (r.pin, r.gsi)).collect();
    assert_eq!(gsis, vec![(0, 40), (1, 41), (2, 42), (3, 43)]);

    // RP01's own _PXM, for the devices below the root port's parent bus.
    assert_eq!(found.proximity.len(), 1);
    assert_eq!((found.proximity[0].function, found.proximity[0].pxm), ((0x1C, 2), 2));
    assert!(found.proximity[0].scope.hops.is_empty());
}

#[test]
fn a_disabled_link_leaves_its_route_unresolved() {
    // Links read IRQ 0: disabled.
    let mut regions = FixedRegions::default();
    let mut interp = aml::load(&mut regions, &fixture());
    let found = aml::discover(&mut interp);
    assert_eq!(found.prts[0].routes.len(), 2);
    assert_eq!(found.prts[0].unresolved, 2);
}

#[test]
fn expressions_evaluate() {
    let mut regions = FixedRegions::default();
    let mut interp = aml::load(&mut regions, &fixture());
    let mut eval = |name: &str| interp.evaluate(&path(name), Vec::new()).expect(name);
    assert_eq!(eval("\\_SB.MTCH"), Object::Integer(2));
    assert_eq!(eval("\\_SB.CCAT"), Object::String("abcd".into()));
    // Windows 2015 yes, Linux no (as Linux answers).
    assert_eq!(eval("\\_SB.OSIW"), Object::Integer(1));
    // 100 / 7: quotient 14, remainder 2.
    assert_eq!(eval("\\_SB.DIVM"), Object::Integer(14 * 256 + 2));
}

#[test]
fn an_endless_loop_is_stopped_by_the_step_budget() {
    let mut regions = FixedRegions::default();
    let mut interp = aml::load(&mut regions, &fixture());
    let error = interp.evaluate(&path("\\_SB.SPIN"), Vec::new()).unwrap_err();
    assert!(what(&error).starts_with("step budget of one evaluation"), "{error}");
    // The interpreter is still usable afterwards.
    assert_eq!(interp.evaluate(&path("\\_SB.MTCH"), Vec::new()), Ok(Object::Integer(2)));
}

#[test]
fn unbounded_recursion_is_stopped_by_the_depth_limit() {
    let mut regions = FixedRegions::default();
    let mut interp = aml::load(&mut regions, &fixture());
    let error = interp
        .evaluate(&path("\\_SB.DEEP"), vec![Object::Integer(0)])
        .unwrap_err();
    assert!(what(&error).starts_with("nesting"), "{error}");
}

#[test]
fn a_bad_opcode_skips_the_rest_of_its_scope_and_later_tables_still_load() {
    // Name (AAAA, One); ExtOp 0xF0 (undefined); Name (BBBB, One)
    let mut first = vec![0x08, b'A', b'A', b'A', b'A', 0x01, 0x5B, 0xF0];
    first.extend_from_slice(&[0x08, b'B', b'B', b'B', b'B', 0x01]);
    // Scope (\_SB) { Name (CCCC, One) } with a scope length that ends inside CCCC's name.
    let second = vec![
        0x10, 0x08, b'\\', b'_', b'S', b'B', b'_', 0x08, b'C', b'C', b'C', b'C', 0x01,
    ];
    let third = vec![0x08, b'D', b'D', b'D', b'D', 0x01];
    let mut regions = FixedRegions::default();
    let interp = aml::load(&mut regions, &[(2, first), (2, second), (2, third)]);
    assert!(interp.exists(&path("\\AAAA")));
    assert!(!interp.exists(&path("\\BBBB")));
    assert!(!interp.exists(&path("\\_SB.CCCC")));
    assert_eq!(interp.load_problems[0].table, 0);
    assert_eq!(what(&interp.load_problems[0].error), "unsupported extended opcode 0x5B");
    // The scope's length (8) ends inside CCCC's name; what follows it is not AML either.
    let second_table: Vec<_> = interp.load_problems[1..]
        .iter()
        .map(|p| (p.table, what(&p.error)))
        .collect();
    assert_eq!(
        second_table,
        vec![
            (1, "byte code ends inside an object"),
            (1, "invalid character in a name segment")
        ]
    );
    assert!(interp.exists(&path("\\DDDD")));
}

#[test]
fn package_lengths_past_their_parent_are_errors_not_reads() {
    // Method with a PkgLength of 0x3F bytes in a 3-byte stream.
    let mut regions = FixedRegions::default();
    let interp = aml::load(&mut regions, &[(2, vec![0x14, 0x3F, b'M'])]);
    assert_eq!(interp.load_problems.len(), 1);
    assert_eq!(
        what(&interp.load_problems[0].error),
        "package length runs past its enclosing object"
    );
}

#[test]
fn resource_templates_are_bounds_checked() {
    // A QWord descriptor claiming 0x2B bytes in a 10-byte buffer.
    let error = aml::resource::parse(&[0x8A, 0x2B, 0x00, 0, 0, 0, 0, 0, 0, 0]).unwrap_err();
    assert_eq!(what(&error), "large descriptor runs past the buffer");
    // Extended interrupt with count 2 but room for one.
    let error = aml::resource::parse(&[0x89, 0x06, 0x00, 0x09, 0x02, 11, 0, 0, 0]).unwrap_err();
    assert_eq!(what(&error), "extended interrupt list runs past its descriptor");
    // An end tag stops the walk.
    assert_eq!(aml::resource::parse(&[0x79, 0x00, 0xFF]).unwrap().windows.len(), 0);
}

#[test]
fn a_qword_window_over_the_whole_64_bit_space_saturates() {
    // QWord memory, producer, min 0, max u64::MAX, translation 0, length 0 (only the range given):
    // the length 2^64 does not fit; real firmware has it (a host bridge's _CRS).
    let mut d = vec![0x8A, 0x2B, 0x00, 0x00, 0x00, 0x00];
    d.extend_from_slice(&0u64.to_le_bytes()); // granularity
    d.extend_from_slice(&0u64.to_le_bytes()); // minimum
    d.extend_from_slice(&u64::MAX.to_le_bytes()); // maximum
    d.extend_from_slice(&0u64.to_le_bytes()); // translation
    d.extend_from_slice(&0u64.to_le_bytes()); // length
    d.extend_from_slice(&[0x79, 0x00]);
    let resources = aml::resource::parse(&d).unwrap();
    assert_eq!(resources.windows.len(), 1);
    let window = &resources.windows[0];
    assert_eq!((window.start, window.len, window.end()), (0, u64::MAX, u64::MAX - 1));
}

#[test]
fn eisa_ids_decode() {
    assert_eq!(aml::eisa_id_text(0x080A_D041), "PNP0A08");
    assert_eq!(aml::eisa_id_text(0x030A_D041), "PNP0A03");
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// Every resource descriptor the parser reads (IRQ, I/O, 32-bit and fixed memory, Word,
        /// DWord, QWord and extended address space, extended interrupt), with each field 0, all
        /// ones or anything, minimum above maximum, and a declared length short of, equal to or
        /// past the buffer: parsing ends without a panic (a debug build checks every
        /// arithmetic step), and every window it keeps ends at or after its start.
        #[test]
        fn resource_descriptors_with_extreme_values(
            descriptors in proptest::collection::vec(descriptor(), 1..6),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let mut bytes: Vec<u8> = descriptors.concat();
            if truncate && !bytes.is_empty() {
                bytes.truncate(cut.index(bytes.len()));
            }
            if let Ok(resources) = aml::resource::parse(&bytes) {
                for window in &resources.windows {
                    prop_assert!(window.len > 0);
                    prop_assert!(window.end() >= window.start);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Arbitrary bytes as a definition block: loading and discovery end
        /// (errors are fine) without a panic.
        #[test]
        fn arbitrary_byte_code(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut regions = FixedRegions::default();
            let mut interp = aml::load(&mut regions, &[(2, bytes)]);
            let _ = aml::discover(&mut interp);
        }

        /// The fixture with bytes overwritten: loading and discovery end without a panic.
        #[test]
        fn corrupted_fixture(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
            let mut blocks = fixture();
            let aml = &mut blocks[0].1;
            for (at, value) in edits {
                let i = at.index(aml.len());
                aml[i] = value;
            }
            let mut regions = FixedRegions { value: 11, ..FixedRegions::default() };
            let mut interp = aml::load(&mut regions, &blocks);
            let _ = aml::discover(&mut interp);
        }
    }
}

/// A value of `bytes` bytes: 0, all ones, or anything.
fn extreme(bytes: usize) -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    let ones = if bytes == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * bytes)) - 1
    };
    prop_oneof![2 => Just(0u64), 2 => Just(ones), 1 => any::<u64>().prop_map(move |v| v & ones)]
}

/// One resource descriptor of a type the parser reads, its fields extreme, and its declared
/// length sometimes not what the type needs.
fn descriptor() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let address = |tag: u8, size: usize| {
        (
            0u8..4,
            any::<u8>(),
            proptest::collection::vec(extreme(size), 5),
            prop::sample::select(vec![0i32, -1, 1, 40]),
        )
            .prop_map(move |(kind, flags, fields, skew)| {
                let mut body = vec![kind, flags, 0];
                for field in fields {
                    body.extend_from_slice(&field.to_le_bytes()[..size]);
                }
                let len = (body.len() as i32 + skew).max(0) as u16;
                let mut d = vec![tag];
                d.extend_from_slice(&len.to_le_bytes());
                d.extend(body);
                d
            })
    };
    prop_oneof![
        // IRQ (small, 2 or 3 bytes).
        (extreme(2), any::<u8>(), 2u8..4).prop_map(|(mask, flags, len)| {
            let mut d = vec![0x20 | len];
            d.extend_from_slice(&mask.to_le_bytes()[..2]);
            if len == 3 {
                d.push(flags);
            }
            d
        }),
        // I/O port (small, 7 bytes).
        (extreme(2), extreme(2), any::<u8>()).prop_map(|(min, max, length)| {
            let mut d = vec![0x47, 0x01];
            d.extend_from_slice(&min.to_le_bytes()[..2]);
            d.extend_from_slice(&max.to_le_bytes()[..2]);
            d.extend_from_slice(&[0x01, length]);
            d
        }),
        // 32-bit memory range (17 bytes) and fixed 32-bit memory (9 bytes).
        (proptest::collection::vec(extreme(4), 4)).prop_map(|f| {
            let mut d = vec![0x85, 17, 0, 0x01];
            for v in f {
                d.extend_from_slice(&v.to_le_bytes()[..4]);
            }
            d
        }),
        (extreme(4), extreme(4)).prop_map(|(base, len)| {
            let mut d = vec![0x86, 9, 0, 0x01];
            d.extend_from_slice(&base.to_le_bytes()[..4]);
            d.extend_from_slice(&len.to_le_bytes()[..4]);
            d
        }),
        address(0x88, 2),
        address(0x87, 4),
        address(0x8A, 8),
        // Extended address space (53 bytes).
        (0u8..4, proptest::collection::vec(extreme(8), 6)).prop_map(|(kind, f)| {
            let mut d = vec![0x8B, 53, 0, kind, 0, 0, 1, 0];
            for v in f {
                d.extend_from_slice(&v.to_le_bytes());
            }
            d
        }),
        // Extended interrupt: a count that fits or runs past.
        (any::<u8>(), 0u8..4, proptest::collection::vec(extreme(4), 0..4)).prop_map(|(flags, count, numbers)| {
            let mut body = vec![flags, count];
            for n in numbers {
                body.extend_from_slice(&n.to_le_bytes()[..4]);
            }
            let mut d = vec![0x89];
            d.extend_from_slice(&(body.len() as u16).to_le_bytes());
            d.extend(body);
            d
        }),
        // End tag.
        Just(vec![0x79, 0x00]),
    ]
}

fn discovered(value: u64) -> aml::Discovery {
    let mut regions = FixedRegions {
        value,
        ..FixedRegions::default()
    };
    let mut interp = aml::load(&mut regions, &fixture());
    aml::discover(&mut interp)
}

#[test]
fn routes_are_found_at_the_nearest_prt_with_the_pin_swizzled_across_bridges_without_one() {
    let found = discovered(11);
    // Below RP01 (00:1c.2), which has its own _PRT: device 0 INTA -> GSI 40.
    let r = found.route_for(0, 0, &[(0x1C, 2), (0, 0)], 1).unwrap();
    assert_eq!((r.route.gsi, r.swizzled), (40, 0));
    assert_eq!(r.table.scope.path, path("\\_SB.PCI0.RP01"));
    // Behind a bridge at 00:02.0 without a _PRT: device 1 INTA swizzles to INTB of slot 2 -> GSI 17.
    let r = found.route_for(0, 0, &[(2, 0), (1, 0)], 1).unwrap();
    assert_eq!((r.route.gsi, r.route.pin, r.swizzled), (17, 1, 1));
    // On the root bus directly.
    assert_eq!(found.route_for(0, 0, &[(3, 0)], 2).unwrap().route.gsi, 11);
    // No entry for slot 5 in the nearest table, no host bridge for segment 7, pin 0 (none).
    assert!(found.route_for(0, 0, &[(5, 0)], 1).is_none());
    assert!(found.route_for(7, 0, &[(2, 0)], 1).is_none());
    assert!(found.route_for(0, 0, &[(2, 0)], 0).is_none());
}

#[test]
fn deferred_discovery_evaluates_each_prt_when_a_route_first_needs_it() {
    let mut regions = FixedRegions {
        value: 11,
        ..FixedRegions::default()
    };
    let mut interp = aml::load(&mut regions, &fixture());
    let mut found = aml::discover_deferred(&mut interp);
    // Host bridges and _PXM up front; both tables located, none evaluated.
    assert_eq!(found.bridges.len(), 2);
    assert_eq!(found.proximity.len(), 1);
    assert!(found.prts.is_empty());
    let pending = |found: &aml::Discovery| found.pending_prts.iter().map(|s| s.path.clone()).collect::<Vec<_>>();
    assert_eq!(pending(&found), vec![path("\\_SB.PCI0"), path("\\_SB.PCI0.RP01")]);
    // A function without an INTx pin, or on no host bridge, evaluates nothing.
    assert!(found.route_on_demand(&mut interp, 0, 0, &[(3, 0)], 0).is_none());
    assert!(found.route_on_demand(&mut interp, 7, 0, &[(3, 0)], 1).is_none());
    assert!(found.prts.is_empty());

    // Below RP01: its own table only.
    let r = found
        .route_on_demand(&mut interp, 0, 0, &[(0x1C, 2), (0, 0)], 1)
        .unwrap();
    assert_eq!((r.route.gsi, r.swizzled), (40, 0));
    assert_eq!(pending(&found), vec![path("\\_SB.PCI0")]);
    // Behind a bridge at 00:02.0 without a table: the root bus's, the pin swizzled.
    let steps = interp.steps_total();
    let r = found.route_on_demand(&mut interp, 0, 0, &[(2, 0), (1, 0)], 1).unwrap();
    assert_eq!((r.route.gsi, r.route.pin, r.swizzled), (17, 1, 1));
    assert!(found.pending_prts.is_empty());
    assert!(interp.steps_total() > steps);
    // Both tables evaluated now: a lookup costs no AML.
    let steps = interp.steps_total();
    assert_eq!(
        found
            .route_on_demand(&mut interp, 0, 0, &[(3, 0)], 2)
            .unwrap()
            .route
            .gsi,
        11
    );
    assert_eq!(interp.steps_total(), steps);
    // The same tables as a discovery that evaluates every one.
    let full = discovered(11);
    assert_eq!(found.prts.len(), full.prts.len());
    assert!(full.prts.iter().all(|table| found.prts.contains(table)));
}

#[test]
fn stores_through_index_change_named_and_local_packages_and_buffers() {
    // Name (PKG_, Package (3) {}); Name (BUF_, Buffer (2) {0x11, 0x22})
    let mut aml = vec![0x08, b'P', b'K', b'G', b'_', 0x12, 0x05, 0x03, 0x00, 0x00, 0x00];
    aml.extend_from_slice(&[0x08, b'B', b'U', b'F', b'_', 0x11, 0x05, 0x0A, 0x02, 0x11, 0x22]);
    // Method (MTHD) { PKG_[1] = 0x2A; BUF_[0] = 0x33; Local0 = Package (2) {}; Local0[1] = 7;
    //                 Return (Local0) }
    aml.extend_from_slice(&[0x14, 0x2A, b'M', b'T', b'H', b'D', 0x00]);
    aml.extend_from_slice(&[0x70, 0x0A, 0x2A, 0x88, b'P', b'K', b'G', b'_', 0x01, 0x00]);
    aml.extend_from_slice(&[0x70, 0x0A, 0x33, 0x88, b'B', b'U', b'F', b'_', 0x00, 0x00]);
    aml.extend_from_slice(&[0x70, 0x12, 0x04, 0x02, 0x00, 0x00, 0x60]);
    aml.extend_from_slice(&[0x70, 0x0A, 0x07, 0x88, 0x60, 0x01, 0x00]);
    aml.extend_from_slice(&[0xA4, 0x60]);
    // Method (ERRS) { PKG_[5] = One }: past the package's end.
    aml.extend_from_slice(&[0x14, 0x10, b'E', b'R', b'R', b'S', 0x00]);
    aml.extend_from_slice(&[0x70, 0x01, 0x88, b'P', b'K', b'G', b'_', 0x0A, 0x05, 0x00]);
    let mut regions = FixedRegions::default();
    let mut interp = aml::load(&mut regions, &[(2, aml)]);
    assert!(interp.load_problems.is_empty(), "{:?}", interp.load_problems);
    let mut eval = |name: &str| interp.evaluate(&path(name), Vec::new());
    assert_eq!(
        eval("\\MTHD"),
        Ok(Object::Package(vec![Object::Integer(0), Object::Integer(7)]))
    );
    let package = Object::Package(vec![Object::Integer(0), Object::Integer(0x2A), Object::Integer(0)]);
    assert_eq!(eval("\\PKG_"), Ok(package.clone()));
    assert_eq!(eval("\\BUF_"), Ok(Object::Buffer(vec![0x33, 0x22])));
    // A store that fails leaves the package as it was.
    let error = eval("\\ERRS").unwrap_err();
    assert_eq!(what(&error), "package index out of range");
    assert_eq!(eval("\\PKG_"), Ok(package));
}

#[test]
fn a_device_takes_the_nearest_pxm_above_it() {
    let found = discovered(0x80);
    assert_eq!(found.proximity_for(0, 0, &[(0x1C, 2), (0, 0)]), Some(2));
    assert_eq!(found.proximity_for(0, 0, &[(3, 0)]), Some(1));
    // PCI1 (segment 1, root bus 0x80) has no _PXM.
    assert_eq!(found.proximity_for(1, 0x80, &[(0, 0)]), None);
}

#[test]
fn bridges_outside_every_mcfg_window_are_reported() {
    let found = discovered(0x80);
    let outside: Vec<_> = found
        .outside_mcfg(&[(0, 0, 0x3F)])
        .iter()
        .map(|b| b.path.clone())
        .collect();
    assert_eq!(outside, vec![path("\\_SB.PCI1")]);
    assert!(found.outside_mcfg(&[(0, 0, 0xFF), (1, 0x80, 0x8F)]).is_empty());
    // A window too small for the bridge's bus range does not cover it.
    assert_eq!(found.outside_mcfg(&[(0, 0, 0x1F), (1, 0x80, 0x8F)]).len(), 1);
}

mod config_space {
    use std::cell::RefCell;

    use platform::aml::config_access;
    use platform::pci::{ConfigRegionAccess, ConfigSpace, PciAddress};

    struct Dwords(RefCell<[u32; 1024]>);

    impl ConfigRegionAccess for Dwords {
        unsafe fn read(&self, _address: PciAddress, offset: u16) -> u32 {
            self.0.borrow()[usize::from(offset / 4)]
        }
        unsafe fn write(&self, _address: PciAddress, offset: u16, value: u32) {
            self.0.borrow_mut()[usize::from(offset / 4)] = value;
        }
    }

    #[test]
    fn byte_word_and_unaligned_accesses_go_through_dwords() {
        let space = Dwords(RefCell::new([0; 1024]));
        space.0.borrow_mut()[0x18] = 0x4433_2211;
        space.0.borrow_mut()[0x19] = 0x8877_6655;
        let config = ConfigSpace::new(&space, PciAddress::new(0, 0, 1, 0));
        assert_eq!(config_access(&config, 0x61, 1, None), Ok(0x22));
        assert_eq!(config_access(&config, 0x62, 2, None), Ok(0x4433));
        // Crossing a dword boundary.
        assert_eq!(config_access(&config, 0x63, 2, None), Ok(0x5544));
        assert_eq!(config_access(&config, 0x60, 8, None), Ok(0x8877_6655_4433_2211));
        config_access(&config, 0x61, 1, Some(0x0B)).unwrap();
        assert_eq!(space.0.borrow()[0x18], 0x4433_0B11);
        config_access(&config, 0x63, 2, Some(0xBEEF)).unwrap();
        assert_eq!(
            (space.0.borrow()[0x18], space.0.borrow()[0x19]),
            (0xEF33_0B11, 0x8877_66BE)
        );
        assert!(config_access(&config, 0xFFF, 2, None).is_err());
        assert!(config_access(&config, 0x60, 3, None).is_err());
    }
}

#[test]
fn a_host_bridge_whose_sta_never_returns_is_reported_and_not_used() {
    // The SSDT the QEMU scenario aml-endless-sta adds (tests/data/ssdt-aml-endless-sta.asl).
    let ssdt = include_bytes!("../../../tests/data/ssdt-aml-endless-sta.bin");
    let mut blocks = fixture();
    blocks.push((ssdt[8], ssdt[36..].to_vec()));
    let mut regions = FixedRegions::default();
    let mut interp = aml::load(&mut regions, &blocks);
    let found = aml::discover(&mut interp);
    assert_eq!(found.failed, 1);
    assert_eq!(found.problems.len(), 1);
    assert_eq!(found.problems[0].path, path("\\_SB.HBX0._STA"));
    assert!(what(&found.problems[0].error).starts_with("step budget of one evaluation"));
    // The fixture's own bridges are still there.
    assert_eq!(found.bridges.len(), 2);
}

#[test]
fn the_depth_limit_is_reached_well_within_half_the_kernel_boot_stack() {
    // The kernel evaluates AML on its 512 KiB boot stack; the deepest nesting the limit allows
    // (a method calling itself) must fit in half of it.
    let worker = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let mut regions = FixedRegions::default();
            let mut interp = aml::load(&mut regions, &fixture());
            let error = interp
                .evaluate(&path("\\_SB.DEEP"), vec![Object::Integer(0)])
                .unwrap_err();
            what(&error)
        })
        .unwrap();
    // Release-like builds reach the depth limit first, debug builds the stack budget.
    let reason = worker.join().unwrap();
    assert!(
        reason == "nesting deeper than the limit" || reason == "nesting uses more stack than the limit",
        "{reason}"
    );
}

/// Records every region access; configuration reads return the bus number
/// for a bridge's secondary bus register (0x19), else `0x1234_8086`.
#[derive(Default)]
struct Recording {
    accesses: Vec<(aml::RegionSpace, u64, u8)>,
}

impl aml::RegionHandler for Recording {
    fn read(&mut self, space: aml::RegionSpace, address: u64, width: u8) -> platform::Result<u64> {
        self.accesses.push((space, address, width));
        Ok(match (space, address) {
            // RP01 (00:1c.2) has secondary bus 0x05.
            (aml::RegionSpace::PciConfig(at), 0x19) if at.bus() == 0 && at.device() == 0x1C => 0x05,
            _ => 0x1234_8086,
        })
    }
    fn write(&mut self, space: aml::RegionSpace, address: u64, width: u8, _value: u64) -> platform::Result<()> {
        self.accesses.push((space, address, width));
        Ok(())
    }
}

#[test]
fn a_pci_config_region_behind_a_bridge_reaches_the_bridge_secondary_bus() {
    let mut regions = Recording::default();
    let mut interp = aml::load(&mut regions, &fixture());
    let value = interp.evaluate(&path("\\_SB.PCI0.RP01.DEV0.VEND"), Vec::new()).unwrap();
    assert_eq!(value, Object::Integer(0x1234_8086));
    drop(interp);
    let config: Vec<_> = regions
        .accesses
        .iter()
        .filter_map(|&(space, address, width)| match space {
            aml::RegionSpace::PciConfig(at) => Some(((at.bus(), at.device(), at.function()), address, width)),
            _ => None,
        })
        .collect();
    // RP01's secondary bus register, then the field on 05:03.1 (DEV0's _ADR 0x00030001).
    assert_eq!(config, vec![((0, 0x1C, 2), 0x19, 1), ((5, 3, 1), 0, 4)]);
}
