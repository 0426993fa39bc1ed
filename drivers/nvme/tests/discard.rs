//! Discard (fio's trim) as NVMe Dataset Management with the Deallocate attribute, through a real
//! `blk::Queue` against the fake controller: the command's encoding, the range it carries, the
//! blocks reading back as zeros, and a controller without Dataset Management in ONCS.

mod common;

use blk::{Bio, BlkError, Segment, Status};
use common::{Buf, Rig, pattern, two_namespaces};
use nvme::IrqMode;
use nvme::blkdev::HostConfig;
use nvme::cmd::{DSM_ATTRIBUTE_DEALLOCATE, Sqe, dsm_range, io};
use nvme::fake::FakeConfig;

fn rig(dataset_management: bool) -> Rig {
    let mut cfg = FakeConfig::new(1);
    cfg.dataset_management = dataset_management;
    cfg.namespaces = two_namespaces();
    Rig::new(cfg, 1, IrqMode::MsiX { vectors: 2 }, HostConfig::default())
}

fn run_one(rig: &Rig, ns: usize, bio: &Bio<'_>) -> Status {
    rig.host.queue(ns).unwrap().submit(0, bio).expect("submit");
    rig.deliver_interrupts();
    let done = rig.platform.take_done();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((done[0].cookie, done[0].op), (bio.cookie, bio.op));
    done[0].status
}

#[test]
fn deallocate_encodes_opcode_9_one_range_and_the_ad_attribute() {
    let sqe = Sqe::deallocate(7, 2, 0x1234_5000);
    assert_eq!(sqe.opcode(), io::DATASET_MANAGEMENT);
    assert_eq!(sqe.opcode(), 0x09);
    assert_eq!((sqe.cid(), sqe.nsid(), sqe.prp1(), sqe.prp2()), (7, 2, 0x1234_5000, 0));
    assert_eq!(sqe.cdw(10) & 0xFF, 0, "NR is 0-based: one range");
    assert_eq!(sqe.cdw(11), DSM_ATTRIBUTE_DEALLOCATE);
    assert_eq!(DSM_ATTRIBUTE_DEALLOCATE, 1 << 2);
    // The range as bytes: attributes 0, length (blocks) at 4..8, starting LBA at 8..16.
    let words = dsm_range(0x0102_0304_0506, 0x0A0B);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    assert_eq!(&bytes[0..4], &[0, 0, 0, 0]);
    assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 0x0A0B);
    assert_eq!(u64::from_le_bytes(bytes[8..16].try_into().unwrap()), 0x0102_0304_0506);
}

#[test]
fn a_discard_deallocates_its_range_which_then_reads_back_as_zeros() {
    let rig = rig(true);
    for (ns, lba) in [(0usize, 512u64), (1, 4096)] {
        let q = rig.host.queue(ns).unwrap();
        assert!(q.max_discard_sectors() > 0, "ONCS has DSM: the queue takes discards");
        let len = 64 * 1024;
        let wbuf = Buf::new(&rig.fake, len);
        pattern(&mut wbuf.bytes()[..len], ns as u64 + 1);
        let seg = [Segment::new(wbuf.phys, len as u32)];
        assert_eq!(run_one(&rig, ns, &Bio::write(0, 128, &seg, 1)), Status::Ok);
        // Discard 16 KiB from byte 16 KiB.
        let before = rig.fake.stats().deallocated.len();
        assert_eq!(run_one(&rig, ns, &Bio::discard(32, 32, 2)), Status::Ok);
        let ranges = rig.fake.stats().deallocated[before..].to_vec();
        assert_eq!(ranges, [(ns as u32 + 1, 16 * 1024 / lba, 16 * 1024 / lba)]);
        let rbuf = Buf::new(&rig.fake, len);
        rbuf.bytes()[..len].fill(0xEE);
        let seg = [Segment::new(rbuf.phys, len as u32)];
        assert_eq!(run_one(&rig, ns, &Bio::read(0, 128, &seg, 3)), Status::Ok);
        let back = &rbuf.bytes()[..len];
        let wrote = &wbuf.bytes()[..len];
        assert_eq!(back[..16 * 1024], wrote[..16 * 1024]);
        assert!(
            back[16 * 1024..32 * 1024].iter().all(|&b| b == 0),
            "discarded blocks read zeros"
        );
        assert_eq!(back[32 * 1024..], wrote[32 * 1024..]);
    }
    rig.assert_no_violations();
}

#[test]
fn without_dataset_management_in_oncs_the_queue_refuses_discards() {
    let rig = rig(false);
    let before = rig.fake.stats().io_commands;
    for ns in [0usize, 1] {
        let q = rig.host.queue(ns).unwrap();
        assert_eq!(q.max_discard_sectors(), 0);
        assert_eq!(
            q.submit(0, &Bio::discard(0, 8, 1)).unwrap_err(),
            BlkError::DiscardNotSupported
        );
    }
    assert_eq!(rig.fake.stats().io_commands, before, "nothing reached the device");
    assert!(rig.fake.stats().deallocated.is_empty());
}
