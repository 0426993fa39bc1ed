//! Two fake NICs wired back to back (host tests): what one transmits, the other receives, in
//! order, through bounded queues that drop when full, as a real wire would.

use crate::Error;
use crate::nic::{ETHERNET_MAX_FRAME, LinkState, MacAddress, Nic};
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Frames a queue holds before the wire drops.
const WIRE_DEPTH: usize = 64;

struct Wire {
    frames: spin::Mutex<VecDeque<Vec<u8>>>,
    dropped: AtomicUsize,
}

/// One end of the wire.
pub struct WireNic {
    mac: MacAddress,
    inbound: Arc<Wire>,
    outbound: Arc<Wire>,
    /// Frames sent through this end.
    pub sent: usize,
    /// Frames received through this end.
    pub received: usize,
}

/// The two ends.
pub struct WirePair;

impl WirePair {
    #[allow(clippy::new_ret_no_self)]
    pub fn new(a: MacAddress, b: MacAddress) -> (WireNic, WireNic) {
        let wire = || {
            Arc::new(Wire {
                frames: spin::Mutex::new(VecDeque::new()),
                dropped: AtomicUsize::new(0),
            })
        };
        let (ab, ba) = (wire(), wire());
        (
            WireNic {
                mac: a,
                inbound: ba.clone(),
                outbound: ab.clone(),
                sent: 0,
                received: 0,
            },
            WireNic {
                mac: b,
                inbound: ab,
                outbound: ba,
                sent: 0,
                received: 0,
            },
        )
    }
}

impl WireNic {
    /// Frames dropped on the way to the other end because its queue was full.
    pub fn dropped_outbound(&self) -> usize {
        self.outbound.dropped.load(Ordering::Relaxed)
    }
}

impl Nic for WireNic {
    fn mac(&self) -> MacAddress {
        self.mac
    }

    fn link(&self) -> LinkState {
        LinkState::Up
    }

    fn max_frame(&self) -> usize {
        ETHERNET_MAX_FRAME
    }

    fn poll(&mut self) -> Result<usize, Error> {
        Ok(0)
    }

    fn receive(&mut self, frame: &mut dyn FnMut(&[u8])) -> Result<bool, Error> {
        let Some(f) = self.inbound.frames.lock().pop_front() else {
            return Ok(false);
        };
        self.received += 1;
        frame(&f);
        Ok(true)
    }

    fn can_transmit(&self) -> bool {
        true
    }

    fn transmit(&mut self, frame: &[u8]) -> Result<(), Error> {
        if frame.len() > ETHERNET_MAX_FRAME {
            return Err(Error::FrameTooLong {
                len: frame.len(),
                max: ETHERNET_MAX_FRAME,
            });
        }
        self.sent += 1;
        let mut q = self.outbound.frames.lock();
        if q.len() >= WIRE_DEPTH {
            self.outbound.dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            q.push_back(frame.to_vec());
        }
        Ok(())
    }
}
