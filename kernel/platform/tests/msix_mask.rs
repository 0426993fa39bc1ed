//! Masking an MSI-X vector reads its vector-control word once, then only writes (so
//! no MMIO read on an I/O path; an interrupt-then-poll window masks and unmasks per burst).

use platform::Result;
use platform::mmio::{Mmio32, check_access};
use platform::pci::MsixTable;
use std::cell::{Cell, RefCell};

/// A register file that counts reads and logs writes.
struct CountingMmio {
    words: RefCell<Vec<u32>>,
    reads: Cell<usize>,
    writes: RefCell<Vec<(usize, u32)>>,
}

impl Mmio32 for CountingMmio {
    fn region_len(&self) -> usize {
        self.words.borrow().len() * 4
    }
    fn read32(&self, offset: usize) -> Result<u32> {
        check_access(offset, 4, self.region_len())?;
        self.reads.set(self.reads.get() + 1);
        Ok(self.words.borrow()[offset / 4])
    }
    fn write32(&self, offset: usize, value: u32) -> Result<()> {
        check_access(offset, 4, self.region_len())?;
        self.writes.borrow_mut().push((offset, value));
        self.words.borrow_mut()[offset / 4] = value;
        Ok(())
    }
}

#[test]
fn mask_and_unmask_read_the_control_word_once_and_keep_its_other_bits() {
    let mmio = CountingMmio {
        words: RefCell::new(vec![0; 0x100]),
        reads: Cell::new(0),
        writes: RefCell::new(Vec::new()),
    };
    // Entry 1's vector control (offset 16 + 12) with reserved bits set and the mask bit set.
    mmio.words.borrow_mut()[(16 + 12) / 4] = 0xABC0_0001;
    let table = MsixTable::new(&mmio, 0, 4).unwrap();
    table.unmask(1).unwrap();
    assert_eq!(mmio.reads.get(), 1, "the first change reads the word");
    for _ in 0..100 {
        table.mask(1).unwrap();
        table.unmask(1).unwrap();
    }
    assert_eq!(mmio.reads.get(), 1, "later changes only write");
    let writes = mmio.writes.borrow();
    assert_eq!(writes.len(), 201);
    assert!(writes.iter().all(|&(offset, _)| offset == 16 + 12));
    assert_eq!(writes[0].1, 0xABC0_0000, "unmasked, reserved bits kept");
    assert_eq!(writes[1].1, 0xABC0_0001, "masked, reserved bits kept");
    assert_eq!(mmio.words.borrow()[(16 + 12) / 4], 0xABC0_0000);
    // Another entry has its own word.
    drop(writes);
    table.mask(2).unwrap();
    assert_eq!(mmio.reads.get(), 2);
    assert_eq!(mmio.words.borrow()[(32 + 12) / 4], 1);
    assert!(table.mask(4).is_err(), "past the table");
}
