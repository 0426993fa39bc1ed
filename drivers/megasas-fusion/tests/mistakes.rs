//! Every driver mistake the model knows (`Mistake::ALL`), committed on purpose through the driver's test hook,
//! must be caught by the model as the named violation. The same scenario without a mistake is
//! clean, so each test fails if the model were lax (it would record nothing) or over-eager
//! (the control would record something).

mod common;

use std::sync::Arc;

use common::*;
use megasas_fusion::fake::{FakeConfig, FakeFusion, StartState, Violation};
use megasas_fusion::{Generation, IoOp, IoRequest, Mistake, Segment};

/// Bring-up, I/O (chained, 65-SGE and zero-length requests, random load wrapping the reply
/// queue), replies left unconsumed, an OCR, more I/O, audit.
fn scenario(g: Generation, vectors: usize, tweak: fn(&mut FakeConfig), mistake: Option<Mistake>) -> Arc<FakeFusion> {
    let mut fc = FakeConfig::new(g);
    tweak(&mut fc);
    let mut cfg = config(g, vectors);
    cfg.mistake = mistake;
    let (fake, ctrl, _report) = bring_up(fc, cfg);
    if let Ok(ctrl) = ctrl {
        ctrl.enable_interrupts();
        let mut w = Workload::new(Arc::clone(&fake), ctrl, 0x1234);
        w.lenient = true;
        let _ = w.submit(0, 0, IoOp::Write, 1, 12);
        let _ = w.submit(1, 0, IoOp::Read, 1, 65);
        let _ = w.submit(2, 0, IoOp::Read, 2, 2);
        let zero = [
            Segment {
                phys: w.buf.phys + 3 * BUF as u64,
                len: 0,
            },
            Segment {
                phys: w.buf.phys + 3 * BUF as u64,
                len: 512,
            },
        ];
        let req = IoRequest {
            system_pd: false,
            target: LD,
            op: IoOp::Read,
            lba: 24,
            blocks: 1,
            sgl: &zero,
        };
        let _ = w.ctrl.submit(3, 0, &req, 3);
        for _ in 0..50 {
            w.service(100);
        }
        w.inflight.clear();
        w.run(1500, 12);
        // A JBOD disk's write and read (by the JBOD map where the firmware offers one).
        if let Some(pd) = w.ctrl.drives().iter().find(|d| d.system_pd).map(|d| d.target) {
            for (tag, op) in [(30, IoOp::Write), (31, IoOp::Read)] {
                let segs = w.segments(tag, 512, 1);
                let req = IoRequest {
                    system_pd: true,
                    target: pd,
                    op,
                    lba: 0,
                    blocks: 1,
                    sgl: &segs,
                };
                let _ = w.ctrl.submit(tag, 0, &req, u64::from(tag));
                for _ in 0..20 {
                    w.service(100);
                }
            }
        }
        // A RAID-1 LD's large write (64 KiB inside one strip), once nothing is in flight.
        if w.ctrl.fastpath_lds().iter().any(|ld| ld.mirror) {
            for _ in 0..50 {
                w.service(100);
            }
            w.inflight.clear();
            let _ = w.submit_large_write(16, 128, 128);
            for _ in 0..20 {
                w.service(100);
            }
        }
        // Replies posted but not consumed when the reset starts.
        for t in 10..20 {
            let _ = w.submit(t, 0, IoOp::Read, 1, 1);
        }
        w.fake.advance(5_000);
        let _ = w.reset();
        w.inflight.clear();
        w.run(600, 4);
        for _ in 0..20 {
            w.service(1000);
        }
        // Cache flush and shutdown: the no-data DCMDs.
        let _ = w.ctrl.shutdown();
    }
    fake.audit();
    fake
}

fn none(_: &mut FakeConfig) {}
fn handshake_slow_doorbell(c: &mut FakeConfig) {
    c.start = StartState::WaitHandshake;
    c.doorbell_busy_us = 50_000;
}
fn four_fw_queues(c: &mut FakeConfig) {
    c.fw_queues = 4;
}
fn with_jbod(c: &mut FakeConfig) {
    c.system_pds = vec![(1, 1024)];
}
fn with_ext_lds_raid0(c: &mut FakeConfig) {
    c.lds = Vec::new();
    c.ext_lds = true;
    c.raid0 = Some(megasas_fusion::fake::FakeRaid0::new(LD, &[4, 7], 16));
}
fn with_jbod_map(c: &mut FakeConfig) {
    c.system_pds = vec![(1, 1024)];
    c.jbod_map = true;
}

fn with_cache_bypass_raid0(c: &mut FakeConfig) {
    c.lds = Vec::new();
    let mut r = megasas_fusion::fake::FakeRaid0::new(LD, &[4, 7], 64);
    r.caps |= megasas_fusion::raidmap::CAP_CACHE_BYPASS;
    c.raid0 = Some(r);
}

fn with_raid1_fastpath_writes(c: &mut FakeConfig) {
    c.lds = Vec::new();
    let mut r = megasas_fusion::fake::FakeRaid0::mirror(LD, [4, 7], 64);
    r.caps = megasas_fusion::raidmap::CAPS_FP_READ_WRITE;
    c.raid0 = Some(r);
}

fn check(g: Generation, vectors: usize, tweak: fn(&mut FakeConfig), m: Mistake, want: Violation) {
    let control = scenario(g, vectors, tweak, None);
    assert!(
        control.violations().is_empty() && control.warnings().is_empty() && control.dma_violations().is_empty(),
        "control run of {m:?} not clean: {:#?} {:#?}",
        control.violations(),
        control.warnings()
    );
    let fake = scenario(g, vectors, tweak, Some(m));
    assert!(
        fake.has(want),
        "{m:?} not caught as {want:?}; recorded {:#?}",
        fake.violations()
    );
}

macro_rules! mistakes {
    ($($name:ident: $g:ident, $v:expr, $tweak:expr, $m:ident => $want:ident;)*) => {
        $(
            #[test]
            fn $name() {
                check(Generation::$g, $v, $tweak, Mistake::$m, Violation::$want);
            }
        )*
    };
}

mistakes! {
    post_before_operational: Invader, 1, none, PostBeforeOperational => PostNotOperational;
    ioc_init_via_atomic_port: Aero, 1, none, InitViaAtomicPort => IocInitViaAtomicPort;
    ioc_init_twice: Ventura, 1, none, InitTwice => IocInitTwice;
    init_frame_misaligned: Invader, 1, none, InitFrameMisaligned => InitFrameMisaligned;
    init_status_not_preset: Invader, 1, none, InitStatusNotPreset => InitStatusNotPreset;
    reply_slots_not_all_ones_at_init: Ventura, 1, none, ReplySlotsNotReset => ReplySlotsNotAllOnes;
    smid_zero: Invader, 1, none, SmidZero => BadSmid;
    smid_beyond_pool: Invader, 1, none, SmidBeyondPool => BadSmid;
    // Ventura and later keep the SMIDs above the pool for RAID-1 FastPath peer writes.
    smid_beyond_pool_for_no_peer_write: Aero, 1, none, SmidBeyondPool => PeerSmidMisused;
    repost_outstanding_smid: Invader, 1, none, RepostOutstanding => SmidOutstanding;
    garbage_function: Ventura, 1, none, GarbageFunction => BadFunction;
    high_dword_without_fresh_low: Invader, 1, none, HighWithoutLow => HighWithoutFreshLow;
    low_dword_twice: Ventura, 1, none, LowTwice => LowTwice;
    msix_index_out_of_range: Invader, 1, none, MsixIndexOutOfRange => BadMsixIndex;
    descriptor_type_mismatch: Aero, 1, none, DescriptorMismatch => DescriptorFunctionMismatch;
    fastpath_without_map: Ventura, 1, none, FastPathWithoutMap => FastPathWithoutMap;
    chain_offset_not_0_or_0f: Invader, 1, none, BadChainOffset => BadChainOffset;
    chain_offset_without_chain: Aero, 1, none, ChainOffsetWithoutChain => ChainOffsetWithoutChain;
    chain_length_wrong: Invader, 1, none, ChainLengthWrong => ChainLengthMismatch;
    chain_not_in_slot_7: Ventura, 1, none, ChainNotInSlot7 => ChainNotInSlot7;
    nested_chain: Aero, 1, none, NestedChain => NestedChain;
    missing_end_of_list: Invader, 1, none, MissingEndOfList => MissingEndOfList;
    early_end_of_list: Ventura, 1, none, EarlyEndOfList => EarlyEndOfList;
    num_sge_wrong: Aero, 1, none, NumSgeWrong => NumSgeMismatch;
    num_sge_wrong_legacy_context: Invader, 1, none, NumSgeWrong => NumSgeMismatch;
    sge_lengths_not_data_length: Invader, 1, none, SglSumWrong => SglLengthMismatch;
    more_sges_than_max: Ventura, 1, none, IgnoreMaxSge => TooManySges;
    zero_length_sge: Aero, 1, none, ZeroLengthSge => ZeroLengthSge;
    write_with_read_direction: Invader, 1, none, WrongDirection => DirectionMismatch;
    data_length_not_blocks: Ventura, 1, none, DataLengthWrong => DataLengthMismatch;
    sense_outside_pool: Aero, 1, none, SenseOutsidePool => SenseOutsidePool;
    sense_length_zero: Invader, 1, none, SenseLengthZero => SenseLengthZero;
    host_index_never_written: Ventura, 1, none, NoHostIndexWrite => RepliesNotConsumed;
    producer_catches_consumer: Invader, 1, none, NoHostIndexWrite => QueueFull;
    host_index_wrong_msix_field: Aero, 1, none, HostIndexWrongQueue => HostIndexWrongQueue;
    host_index_wrong_register_in_combined_mode: Invader, 12, none, HostIndexWrongRegister => HostIndexWrongRegister;
    host_index_not_wrapped: Ventura, 1, none, HostIndexNoWrap => HostIndexBeyondDepth;
    host_index_beyond_producer: Invader, 1, none, HostIndexAhead => HostIndexBeyondProducer;
    slots_not_restored_before_wrap: Aero, 1, none, SlotsNotRestored => ReplySlotNotFree;
    leaked_dcmd_smid: Invader, 1, none, LeakDcmdSmid => SmidOutstanding;
    post_before_reinit_after_ocr: Ventura, 1, none, PostDuringReset => PostNotOperational;
    queues_not_reset_after_ocr: Invader, 1, none, QueuesNotResetAfterOcr => ReplySlotsNotAllOnes;
    last_idx_not_zeroed_after_ocr: Aero, 1, none, LastIdxNotZeroed => RepliesNotConsumed;
    address_above_4g_without_64bit: Invader, 1, none, SenseAbove4G => AddressAbove4G;
    all_ones_address: Ventura, 1, none, AllOnesAddress => AllOnesAddress;
    doorbell_in_wrong_state: Aero, 1, none, DoorbellWrongState => DoorbellWrongState;
    doorbell_bit0_ignored: Invader, 1, handshake_slow_doorbell, IgnoreDoorbellBusy => DoorbellWhileBusy;
    atomic_port_without_support: Invader, 1, none, AtomicWithoutSupport => AtomicPortNotAllowed;
    atomic_port_without_sp1_bit24: Ventura, 1, none, AtomicWithoutSupport => AtomicPortNotAllowed;
    dcmd_off_queue_0: Aero, 4, none, DcmdOffQueue0 => DcmdOffQueue0;
    rdpq_without_support: Invader, 1, none, RdpqWithoutSupport => RdpqNotSupported;
    rdpq_ring_crossing_4g: Aero, 4, none, RdpqRingCrosses4G => RdpqWindow;
    rdpq_rings_overlapping: Ventura, 4, none, RdpqRingsOverlap => RdpqBadEntry;
    rdpq_queue_depth_not_multiple_of_16: Aero, 4, none, QueueDepthNotMultipleOf16 => BadQueueDepth;
    queue_depth_not_multiple_of_16: Ventura, 1, none, QueueDepthNotMultipleOf16 => BadQueueDepth;
    more_vectors_than_firmware_queues: Aero, 4, four_fw_queues, TooManyVectors => TooManyMsixVectors;
    coalescing_mask_without_sp1_bit26: Ventura, 1, none, CoalescingWithoutSupport => BadCoalescingMask;
    jbod_map_request_naming_the_device_id: Invader, 1, with_jbod_map, JbodTargetNotOffset => BadJbodMapRequest;
    fastpath_write_without_cache_bypass_marks: Ventura, 1, with_cache_bypass_raid0, CacheBypassFlagsMissing => CacheBypassFlags;
    large_raid1_write_by_fastpath_on_a_bandwidth_limited_link: Ventura, 1, with_raid1_fastpath_writes, LargeRaid1WriteByFastPath => LargeRaid1FastPathWrite;
    bandwidth_limit_mark_on_a_small_raid1_write: Ventura, 1, with_raid1_fastpath_writes, BwLimitMarkOnSmallWrite => LdioBwLimitMisused;
    combined_mode_from_the_host_count: Aero, 12, none, CombinedByHostCount => HostIndexWrongRegister;
    rw_raid_context_on_non_rw_command: Ventura, 1, none, RwContextOnNonRw => NonRwRaidContext;
    rw_raid_context_on_non_rw_legacy: Invader, 1, none, RwContextOnNonRw => NonRwRaidContext;
    qemu_dcmd_buffer_sizes: Invader, 1, none, QemuDcmdSizes => DcmdBufferTooSmall;
    no_data_dcmd_with_an_sge: Aero, 1, none, NoDataDcmdWithSge => NoDataDcmdWithSge;
    system_pd_without_fast_path_flag: Ventura, 1, with_jbod, SystemPdWithoutFastPathFlag => BadSystemPdRequest;
    ext_map_read_at_the_legacy_size: Invader, 1, with_ext_lds_raid0, ExtMapReadAsLegacy => RaidMapBufferSize;
}

#[test]
fn every_mistake_hook_has_a_test() {
    // The exhaustive match makes a new `Mistake` variant a compile error here until it names its
    // test; `Mistake::ALL` is checked against the enum's source so no variant escapes the loop.
    fn test_of(m: Mistake) -> &'static str {
        match m {
            Mistake::PostBeforeOperational => "post_before_operational",
            Mistake::InitViaAtomicPort => "ioc_init_via_atomic_port",
            Mistake::InitTwice => "ioc_init_twice",
            Mistake::InitFrameMisaligned => "init_frame_misaligned",
            Mistake::InitStatusNotPreset => "init_status_not_preset",
            Mistake::ReplySlotsNotReset => "reply_slots_not_all_ones_at_init",
            Mistake::SmidZero => "smid_zero",
            Mistake::SmidBeyondPool => "smid_beyond_pool",
            Mistake::RepostOutstanding => "repost_outstanding_smid",
            Mistake::GarbageFunction => "garbage_function",
            Mistake::HighWithoutLow => "high_dword_without_fresh_low",
            Mistake::LowTwice => "low_dword_twice",
            Mistake::MsixIndexOutOfRange => "msix_index_out_of_range",
            Mistake::DescriptorMismatch => "descriptor_type_mismatch",
            Mistake::FastPathWithoutMap => "fastpath_without_map",
            Mistake::BadChainOffset => "chain_offset_not_0_or_0f",
            Mistake::ChainOffsetWithoutChain => "chain_offset_without_chain",
            Mistake::ChainLengthWrong => "chain_length_wrong",
            Mistake::ChainNotInSlot7 => "chain_not_in_slot_7",
            Mistake::NestedChain => "nested_chain",
            Mistake::MissingEndOfList => "missing_end_of_list",
            Mistake::EarlyEndOfList => "early_end_of_list",
            Mistake::NumSgeWrong => "num_sge_wrong",
            Mistake::SglSumWrong => "sge_lengths_not_data_length",
            Mistake::IgnoreMaxSge => "more_sges_than_max",
            Mistake::ZeroLengthSge => "zero_length_sge",
            Mistake::WrongDirection => "write_with_read_direction",
            Mistake::DataLengthWrong => "data_length_not_blocks",
            Mistake::SenseOutsidePool => "sense_outside_pool",
            Mistake::SenseLengthZero => "sense_length_zero",
            Mistake::NoHostIndexWrite => "host_index_never_written",
            Mistake::HostIndexWrongQueue => "host_index_wrong_msix_field",
            Mistake::HostIndexWrongRegister => "host_index_wrong_register_in_combined_mode",
            Mistake::HostIndexNoWrap => "host_index_not_wrapped",
            Mistake::HostIndexAhead => "host_index_beyond_producer",
            Mistake::SlotsNotRestored => "slots_not_restored_before_wrap",
            Mistake::LeakDcmdSmid => "leaked_dcmd_smid",
            Mistake::PostDuringReset => "post_before_reinit_after_ocr",
            Mistake::QueuesNotResetAfterOcr => "queues_not_reset_after_ocr",
            Mistake::LastIdxNotZeroed => "last_idx_not_zeroed_after_ocr",
            Mistake::SenseAbove4G => "address_above_4g_without_64bit",
            Mistake::AllOnesAddress => "all_ones_address",
            Mistake::DoorbellWrongState => "doorbell_in_wrong_state",
            Mistake::IgnoreDoorbellBusy => "doorbell_bit0_ignored",
            Mistake::AtomicWithoutSupport => "atomic_port_without_support",
            Mistake::DcmdOffQueue0 => "dcmd_off_queue_0",
            Mistake::RdpqWithoutSupport => "rdpq_without_support",
            Mistake::RdpqRingCrosses4G => "rdpq_ring_crossing_4g",
            Mistake::RdpqRingsOverlap => "rdpq_rings_overlapping",
            Mistake::QueueDepthNotMultipleOf16 => "queue_depth_not_multiple_of_16",
            Mistake::TooManyVectors => "more_vectors_than_firmware_queues",
            Mistake::CoalescingWithoutSupport => "coalescing_mask_without_sp1_bit26",
            Mistake::JbodTargetNotOffset => "jbod_map_request_naming_the_device_id",
            Mistake::CacheBypassFlagsMissing => "fastpath_write_without_cache_bypass_marks",
            Mistake::LargeRaid1WriteByFastPath => "large_raid1_write_by_fastpath_on_a_bandwidth_limited_link",
            Mistake::BwLimitMarkOnSmallWrite => "bandwidth_limit_mark_on_a_small_raid1_write",
            Mistake::CombinedByHostCount => "combined_mode_from_the_host_count",
            Mistake::RwContextOnNonRw => "rw_raid_context_on_non_rw_command",
            Mistake::QemuDcmdSizes => "qemu_dcmd_buffer_sizes",
            Mistake::NoDataDcmdWithSge => "no_data_dcmd_with_an_sge",
            Mistake::SystemPdWithoutFastPathFlag => "system_pd_without_fast_path_flag",
            Mistake::ExtMapReadAsLegacy => "ext_map_read_at_the_legacy_size",
        }
    }
    let src = include_str!("mistakes.rs");
    let enum_src = include_str!("../src/controller/mistake.rs");
    let body = enum_src
        .split_once("pub enum Mistake {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(body, _)| body)
        .expect("enum Mistake in controller/mistake.rs");
    let declared = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count();
    assert_eq!(Mistake::ALL.len(), declared, "Mistake::ALL is missing variants");
    for m in Mistake::ALL {
        let test = test_of(m);
        assert!(
            src.contains(&format!("\n    {test}: ")) && src.contains(&format!(", {m:?} =>")),
            "no test for {m:?} (expected `{test}` in the mistakes! table)"
        );
    }
}
