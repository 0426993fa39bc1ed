//! Property tests: the CPU to hardware-queue map, the tag allocator against a model, and the
//! completion list against a model.

use blk::list::{Links, TagStack};
use blk::tags::{TagBitmap, TagSet};
use blk::{BlkError, map_queues, validate_map};
use proptest::prelude::*;
use std::collections::{BTreeSet, VecDeque};

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every CPU gets an existing queue; with at least as many CPUs as queues every queue is
    /// used, groups are contiguous and their sizes differ by at most one; with fewer CPUs each
    /// CPU gets its own queue.
    #[test]
    fn default_map_spreads_evenly(ncpus in 1usize..300, nq in 1usize..80) {
        let map = map_queues(ncpus, nq);
        prop_assert_eq!(map.len(), ncpus);
        prop_assert!(validate_map(&map, ncpus, nq).is_ok());
        let mut count = vec![0usize; nq];
        for &q in &map {
            count[usize::from(q)] += 1;
        }
        if ncpus >= nq {
            let (lo, hi) = (ncpus / nq, ncpus.div_ceil(nq));
            for (q, &n) in count.iter().enumerate() {
                prop_assert!(n >= lo && n <= hi, "queue {} serves {} cpus, want {}..={}", q, n, lo, hi);
            }
            prop_assert!(map.windows(2).all(|w| w[0] <= w[1]), "groups not contiguous: {:?}", map);
        } else {
            for (cpu, &q) in map.iter().enumerate() {
                prop_assert_eq!(usize::from(q), cpu);
            }
        }
    }

    /// A map entry naming a queue that does not exist is reported with the CPU and queue.
    #[test]
    fn bad_map_entry_is_reported(ncpus in 1usize..64, nq in 1usize..16, at in 0usize..64, extra in 0u16..100) {
        let mut map = map_queues(ncpus, nq);
        let cpu = at % ncpus;
        map[cpu] = nq as u16 + extra;
        prop_assert_eq!(
            validate_map(&map, ncpus, nq),
            Err(BlkError::BadCpuMap { cpu, hwq: nq + usize::from(extra), nr_hw_queues: nq })
        );
    }

    /// Sequential model check of the bitmap allocator: it hands out a tag iff one is free,
    /// never one that is held, always inside the pool, and rejects double frees.
    #[test]
    fn bitmap_matches_a_set_model(
        base in 0u32..100,
        nbits in 1u32..200,
        ops in prop::collection::vec((any::<bool>(), 0usize..8, any::<u16>()), 1..400),
    ) {
        let bitmap = TagBitmap::new(base, nbits, 8);
        let mut held = BTreeSet::new();
        for (alloc, cpu, pick) in ops {
            if alloc {
                match bitmap.alloc(cpu) {
                    Some(t) => {
                        prop_assert!(t >= base && t < base + nbits, "tag {} outside pool", t);
                        prop_assert!(held.insert(t), "tag {} handed out twice", t);
                    }
                    None => prop_assert_eq!(held.len() as u32, nbits, "refused while tags were free"),
                }
            } else if !held.is_empty() {
                let t = *held.iter().nth(usize::from(pick) % held.len()).unwrap();
                held.remove(&t);
                prop_assert!(bitmap.free(cpu, t));
                prop_assert!(!bitmap.free(cpu, t), "double free of {} accepted", t);
            }
            prop_assert_eq!(bitmap.in_use(), held.len() as u32);
        }
    }

    /// Reserved and normal pools of a tag set never mix, and each pool hands out a tag exactly
    /// when it has one free (a model of each pool, with frees mixed in).
    #[test]
    fn tag_set_pools_are_disjoint(
        depth in 1u32..128,
        reserved_frac in 0u32..100,
        ops in prop::collection::vec((0u8..3, any::<u16>()), 0..300),
    ) {
        let reserved = (depth - 1) * reserved_frac / 100;
        let set = TagSet::new(depth, reserved, 2);
        let mut held: [BTreeSet<u32>; 2] = [BTreeSet::new(), BTreeSet::new()];
        let capacity = [depth - reserved, reserved];
        for (i, (op, pick)) in ops.into_iter().enumerate() {
            let want_reserved = op == 1;
            let pool = usize::from(want_reserved);
            if op < 2 {
                match set.alloc(i % 2, want_reserved) {
                    Some(t) => {
                        prop_assert_eq!(t < reserved, want_reserved, "tag {} from the wrong pool", t);
                        prop_assert!(t < depth);
                        prop_assert!(held[pool].insert(t), "tag {} handed out twice", t);
                    }
                    None => prop_assert_eq!(
                        held[pool].len() as u32, capacity[pool], "pool refused while it had free tags"
                    ),
                }
            } else {
                let all: Vec<u32> = held.iter().flatten().copied().collect();
                if !all.is_empty() {
                    let t = all[usize::from(pick) % all.len()];
                    held[usize::from(t < reserved)].remove(&t);
                    prop_assert!(set.free(i % 2, t));
                }
            }
            prop_assert_eq!(set.in_use(), (held[0].len() + held[1].len()) as u32);
        }
    }

    /// Sequential model of the MPSC stack: pushes come back oldest first, each exactly once,
    /// and "was empty" is reported exactly on the first push after a take.
    #[test]
    fn tag_stack_is_fifo_per_take(ops in prop::collection::vec(prop::option::of(0u32..32), 1..200)) {
        let links = Links::new(32);
        let stack = TagStack::new();
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut on_list = BTreeSet::new();
        for op in ops {
            match op {
                Some(idx) if !on_list.contains(&idx) => {
                    let was_empty = stack.push(idx, &links);
                    prop_assert_eq!(was_empty, model.is_empty());
                    model.push_back(idx);
                    on_list.insert(idx);
                }
                Some(_) => {} // an index may be on one list only once
                None => {
                    let got: Vec<u32> = stack.take_all(&links).collect();
                    let want: Vec<u32> = model.drain(..).collect();
                    prop_assert_eq!(got, want);
                    on_list.clear();
                    prop_assert!(stack.is_empty());
                }
            }
        }
    }
}
