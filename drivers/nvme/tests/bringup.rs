//! Bring-up, identify, queue creation and the queue/vector layout against the fake controller.

mod common;

use common::{Rig, controller};
use nvme::blkdev::{Host, HostConfig};
use nvme::fake::{FakeConfig, FakeNamespace, FakeNvme};
use nvme::{Config, Error, IrqMode, NvmeStatus, QueuePlan};
use std::sync::Arc;

#[test]
fn clean_bring_up_identifies_controller_and_namespaces() {
    let mut cfg = FakeConfig::new(4);
    cfg.namespaces.push(FakeNamespace {
        nsid: 2,
        lba_size: 4096,
        blocks: 16384,
    });
    let fake = FakeNvme::new(cfg);
    let ctrl = controller(&fake, Config::default()).unwrap();
    let (cc, csts) = fake.cc_csts();
    assert_eq!(cc, 0x0046_0001, "EN, CSS NVM, MPS 4K, IOSQES 6, IOCQES 4");
    assert_eq!(csts & 3, 1, "ready, no CFS");
    assert_eq!(ctrl.info().model, "QEMU NVMe Ctrl");
    assert_eq!(ctrl.info().serial, "fake0");
    assert_eq!(ctrl.info().mdts, 7);
    assert_eq!(ctrl.max_transfer(), 512 * 1024);
    assert!(ctrl.info().volatile_cache);
    let ns = ctrl.namespaces();
    assert_eq!(ns.len(), 2);
    assert_eq!((ns[0].nsid, ns[0].lba_size, ns[0].blocks), (1, 512, 131072));
    assert_eq!((ns[1].nsid, ns[1].lba_size, ns[1].blocks), (2, 4096, 16384));
    // Set Features granted max_ioqpairs (QEMU grants it whatever was asked), capped by the ask.
    assert_eq!(ctrl.max_io_queues(), 4);
    assert_eq!(fake.stats().enables, 1);
    assert_eq!(fake.stats().disables, 0);
    assert!(fake.memory().violations().is_empty());
}

#[test]
fn takes_over_a_controller_firmware_left_enabled() {
    let mut cfg = FakeConfig::new(2);
    cfg.firmware_enabled = true;
    let fake = FakeNvme::new(cfg);
    assert_eq!(fake.cc_csts(), (0x0046_0001, 1));
    let ctrl = controller(&fake, Config::default()).unwrap();
    let s = fake.stats();
    assert_eq!(s.disables, 1, "the firmware's controller is disabled first");
    assert_eq!(s.enables, 1);
    // Set Features Number of Queues worked: the reset cleared SeaBIOS's I/O queue pair.
    assert_eq!(ctrl.max_io_queues(), 2);
    assert!(s.guest_errors.is_empty(), "{:?}", s.guest_errors);
    // And I/O works on the new queues.
    let rig_plan = QueuePlan::new(2, None, ctrl.max_io_queues(), IrqMode::MsiX { vectors: 3 }).unwrap();
    let platform = Arc::new(common::TestPlatform::default());
    let host = Host::new(
        ctrl,
        rig_plan,
        HostConfig::default(),
        |_, _| -> Arc<dyn blk::Platform> { platform.clone() },
    )
    .unwrap();
    let buf = common::Buf::new(&fake, 4096);
    let seg = [blk::Segment::new(buf.phys, 4096)];
    host.queue(0)
        .unwrap()
        .submit(0, &blk::Bio::read(0, 8, &seg, 7))
        .unwrap();
    for v in fake.take_messages() {
        host.handle_vector(usize::from(v), 0);
    }
    let done = platform.take_done();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, blk::Status::Ok);
}

#[test]
fn ready_that_never_comes_times_out_at_cap_to() {
    let mut cfg = FakeConfig::new(1);
    cfg.ready_stuck = true;
    let fake = FakeNvme::new(cfg);
    let err = controller(&fake, Config::default()).unwrap_err();
    match err {
        Error::ReadyTimeout {
            want: true, waited_ms, ..
        } => assert_eq!(waited_ms, 7500),
        e => panic!("expected a RDY=1 timeout, got {e:?}"),
    }
    let waited = fake.clock_us();
    assert!((7_500_000..7_600_000).contains(&waited), "waited {waited} us");

    // Firmware left it enabled and RDY never drops: the disable times out the same way.
    let mut cfg = FakeConfig::new(1);
    cfg.ready_stuck = true;
    cfg.firmware_enabled = true;
    cfg.timeout_units = 2;
    let fake = FakeNvme::new(cfg);
    let err = controller(&fake, Config::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReadyTimeout {
                want: false,
                waited_ms: 1000,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bad_config_is_refused() {
    let fake = FakeNvme::new(FakeConfig::new(1));
    let bad = Config {
        admin_entries: 1,
        ..Config::default()
    };
    assert!(matches!(
        controller(&fake, bad),
        Err(Error::InvalidConfig {
            field: "admin_entries",
            ..
        })
    ));
    let bad = Config {
        requested_io_queues: 0,
        ..Config::default()
    };
    assert!(matches!(controller(&fake, bad), Err(Error::InvalidConfig { .. })));
}

#[test]
fn queues_and_vectors_for_1_2_4_8_cpus() {
    for ncpus in [1usize, 2, 4, 8] {
        let rig = Rig::new(
            FakeConfig::new(64),
            ncpus,
            IrqMode::MsiX { vectors: 65 },
            HostConfig::default(),
        );
        let cqs = rig.fake.io_cqs();
        assert_eq!(cqs.len(), ncpus);
        for (i, &(qid, iv, ien)) in cqs.iter().enumerate() {
            assert_eq!(usize::from(qid), i + 1);
            assert_eq!(usize::from(iv), i + 1, "CQ {qid} on its own vector");
            assert!(ien);
        }
        assert_eq!(rig.host.plan().cpu_map(), (0..ncpus as u16).collect::<Vec<_>>());
        for q in rig.host.queues() {
            assert_eq!(q.nr_hw_queues(), ncpus);
        }
        rig.assert_no_violations();
    }
}

#[test]
fn fewer_queues_than_cpus() {
    // max_ioqpairs=2 with 4 CPUs.
    let rig = Rig::new(
        FakeConfig::new(2),
        4,
        IrqMode::MsiX { vectors: 3 },
        HostConfig::default(),
    );
    assert_eq!(rig.fake.io_cqs(), vec![(1, 1, true), (2, 2, true)]);
    assert_eq!(rig.host.plan().cpu_map(), &[0, 0, 1, 1]);
    assert_eq!(rig.host.plan().vector_cpu(1), Some(0));
    assert_eq!(rig.host.plan().vector_cpu(2), Some(2));
}

#[test]
fn short_msix_table_intx_and_polled_queues() {
    // max_ioqpairs=8, msix_qsize=4: vectors shared.
    let mut cfg = FakeConfig::new(8);
    cfg.msix_qsize = 4;
    let rig = Rig::new(cfg, 8, IrqMode::MsiX { vectors: 4 }, HostConfig::default());
    let ivs: Vec<u16> = rig.fake.io_cqs().iter().map(|c| c.1).collect();
    assert_eq!(ivs, vec![1, 2, 3, 1, 2, 3, 1, 2]);

    // Asking the device for vectors its table does not have is refused with 0x4108.
    let mut cfg = FakeConfig::new(8);
    cfg.msix_qsize = 4;
    let fake = FakeNvme::new(cfg);
    let ctrl = controller(&fake, Config::default()).unwrap();
    let plan = QueuePlan::new(8, None, ctrl.max_io_queues(), IrqMode::MsiX { vectors: 9 }).unwrap();
    let err = Host::new(ctrl, plan, HostConfig::default(), |_, _| -> Arc<dyn blk::Platform> {
        Arc::new(common::TestPlatform::default())
    })
    .err()
    .expect("IV beyond the table");
    assert_eq!(
        err,
        Error::AdminFailed {
            opcode: 0x05,
            status: NvmeStatus(0x4108)
        }
    );

    // INTx: MSI-X off, every CQ on vector 0 with interrupts on.
    let mut cfg = FakeConfig::new(4);
    cfg.msix_enabled = false;
    let rig = Rig::new(cfg, 4, IrqMode::Intx, HostConfig::default());
    assert!(rig.fake.io_cqs().iter().all(|&(_, iv, ien)| iv == 0 && ien));

    // Polled: IEN=0, IV=0.
    let rig = Rig::new(FakeConfig::new(4), 4, IrqMode::Poll, HostConfig::default());
    assert!(rig.fake.io_cqs().iter().all(|&(_, iv, ien)| iv == 0 && !ien));
}

#[test]
fn queue_depth_is_capped_by_mqes() {
    let mut cfg = FakeConfig::new(2);
    cfg.mqes = 63; // 64 entries
    cfg.namespaces.push(FakeNamespace {
        nsid: 3,
        lba_size: 512,
        blocks: 2048,
    });
    let rig = Rig::new(cfg, 2, IrqMode::MsiX { vectors: 3 }, HostConfig::default());
    let ctrl = rig.host.controller();
    // Two namespaces share each SQ: 2 × depth + 1 <= 64.
    assert_eq!(ctrl.queue_depth(), 31);
    assert_eq!(ctrl.io_queue_entries(), 63);
    assert_eq!(rig.host.queue(1).unwrap().queue_depth(), 31);
}

#[test]
fn cfs_at_enable_and_a_silent_admin_queue_are_errors_not_hangs() {
    let mut cfg = FakeConfig::new(1);
    cfg.cfs_on_enable = true;
    let fake = FakeNvme::new(cfg);
    let err = controller(&fake, Config::default()).unwrap_err();
    assert!(
        matches!(err, Error::ControllerFatal { csts } if csts & 2 != 0),
        "{err:?}"
    );

    let mut cfg = FakeConfig::new(1);
    cfg.admin_silent = true;
    let fake = FakeNvme::new(cfg);
    let err = controller(&fake, Config::default()).unwrap_err();
    assert_eq!(
        err,
        Error::AdminTimeout {
            opcode: 0x06,
            waited_us: 5_000_000
        }
    );
    assert_eq!(fake.clock_us(), 5_000_000, "bounded by admin_timeout_us");
}

#[test]
fn each_namespace_gets_its_own_platform() {
    let mut cfg = FakeConfig::new(2);
    cfg.namespaces.push(FakeNamespace {
        nsid: 2,
        lba_size: 4096,
        blocks: 1024,
    });
    let fake = FakeNvme::new(cfg);
    let ctrl = controller(&fake, Config::default()).unwrap();
    let plan = QueuePlan::new(2, None, ctrl.max_io_queues(), IrqMode::MsiX { vectors: 3 }).unwrap();
    let platforms: Vec<Arc<common::TestPlatform>> = (0..2).map(|_| Arc::default()).collect();
    let mut asked = Vec::new();
    let host = Host::new(ctrl, plan, HostConfig::default(), |i, ns| -> Arc<dyn blk::Platform> {
        asked.push((i, ns.nsid, ns.lba_size));
        platforms[i].clone()
    })
    .unwrap();
    assert_eq!(asked, vec![(0, 1, 512), (1, 2, 4096)]);
    let buf = common::Buf::new(&fake, 4096);
    let seg = [blk::Segment::new(buf.phys, 4096)];
    host.queue(0)
        .unwrap()
        .submit(0, &blk::Bio::read(0, 8, &seg, 10))
        .unwrap();
    host.queue(1)
        .unwrap()
        .submit(1, &blk::Bio::read(0, 8, &seg, 11))
        .unwrap();
    for v in fake.take_messages() {
        host.handle_vector(usize::from(v), host.plan().vector_cpu(usize::from(v)).unwrap());
    }
    let d0: Vec<u64> = platforms[0].take_done().iter().map(|c| c.cookie).collect();
    let d1: Vec<u64> = platforms[1].take_done().iter().map(|c| c.cookie).collect();
    assert_eq!((d0, d1), (vec![10], vec![11]));
}

#[test]
fn each_io_queue_is_allocated_for_the_cpu_that_owns_it() {
    // Four CPUs, two queues: CPUs 0-1 share q1 and 2-3 share q2 (the plan's split), so the
    // rings of q1 are asked for near CPU 0 and those of q2 near CPU 2.
    let rig = Rig::new(
        FakeConfig::new(4),
        4,
        IrqMode::MsiX { vectors: 3 },
        HostConfig::default(),
    );
    let plan = rig.host.plan();
    let memory = rig.fake.memory();
    for hwq in 0..plan.nr_io_queues() {
        let owner = (0..4).find(|&cpu| plan.hwq_of_cpu(cpu) == Some(hwq));
        assert!(owner.is_some(), "queue {hwq} has a CPU");
        let (sq, cq) = rig.host.controller().io_queue_rings(hwq).expect("queue exists");
        assert_eq!(memory.cpu_hint_of(sq), Some(owner), "SQ of queue {hwq}");
        assert_eq!(memory.cpu_hint_of(cq), Some(owner), "CQ of queue {hwq}");
    }
    assert_eq!(rig.host.controller().io_queue_rings(plan.nr_io_queues()), None);
}
