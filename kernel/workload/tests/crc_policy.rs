//! The switch that keeps CRC32C on the table (for machines whose hypervisor cannot run the SSE4.2
//! instruction). In its own test binary because it changes process-wide state.

use workload::crc32c::{
    Crc32c, Crc32cImpl, allow_hardware, available, crc32c, crc32c_with, hardware_allowed, selected,
};

#[test]
fn the_table_can_be_forced_and_both_settings_agree() {
    let data: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    // Hosted targets allow the instruction by default.
    assert!(hardware_allowed());
    let expected_default = if available(Crc32cImpl::Sse42) {
        Crc32cImpl::Sse42
    } else {
        Crc32cImpl::Table
    };
    assert_eq!(selected(), expected_default);
    let with_default = crc32c(&data);

    allow_hardware(false);
    assert!(!hardware_allowed());
    assert_eq!(selected(), Crc32cImpl::Table);
    // Even an explicit request for the instruction stays on the table while it is not allowed.
    assert_eq!(crc32c_with(Crc32cImpl::Sse42, &data), with_default);
    let mut incremental = Crc32c::new();
    incremental.update(&data[..777]);
    incremental.update(&data[777..]);
    assert_eq!(incremental.finish(), with_default);

    allow_hardware(true);
    assert_eq!(selected(), expected_default);
    assert_eq!(crc32c(&data), with_default);
}
