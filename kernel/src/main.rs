#![no_std]
#![no_main]
use boot as _;
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }
