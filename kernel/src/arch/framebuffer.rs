//! A copy of the console on the framebuffer the loader set up (UEFI GOP or a
//! VBE mode), for people who watch the BMC's iKVM instead of serial-over-LAN.
//!
//! Pixels of 24 or 32 bits are written byte by byte in the order of the
//! colour fields' positions. Text is drawn with the 8x8 glyphs of the `font8x8` crate (doubled on
//! screens 1600 pixels wide or more), light grey on black. The screen is a
//! ring of lines: after the last line, output continues at the top and each
//! new line is cleared first, so nothing is ever read back from the
//! (uncached) framebuffer. Only printable ASCII is drawn; other bytes show as `?`.

use alloc::string::String;
use bootinfo::parse::Framebuffer;

const GLYPH: u32 = 8;
const GREY: u32 = 0xC0;

struct Screen {
    base: *mut u8,
    pitch: u32,
    bytes_per_pixel: u32,
    scale: u32,
    columns: u32,
    rows: u32,
    column: u32,
    row: u32,
    foreground: u32,
}

// SAFETY: the pointer is an identity-mapped uncached framebuffer, reached
// only under the SCREEN lock.
unsafe impl Send for Screen {}

static SCREEN: spin::Mutex<Option<Screen>> = spin::Mutex::new(None);

impl Screen {
    fn pixel(&self, x: u32, y: u32, colour: u32) {
        let offset = u64::from(y) * u64::from(self.pitch) + u64::from(x * self.bytes_per_pixel);
        for (i, byte) in colour
            .to_le_bytes()
            .iter()
            .take(self.bytes_per_pixel as usize)
            .enumerate()
        {
            // SAFETY: x < columns * 8 * scale <= width and y < rows * 8 * scale <= height,
            // so the pixel's bytes are inside the pitch * height bytes mapped in `init`.
            unsafe { core::ptr::write_volatile(self.base.add(offset as usize + i), *byte) };
        }
    }

    fn cell(&self, column: u32, row: u32, glyph: [u8; 8]) {
        let (x0, y0) = (column * GLYPH * self.scale, row * GLYPH * self.scale);
        for (y, bits) in glyph.iter().enumerate() {
            for x in 0..GLYPH {
                let colour = if bits >> x & 1 == 1 { self.foreground } else { 0 };
                for dy in 0..self.scale {
                    for dx in 0..self.scale {
                        self.pixel(x0 + x * self.scale + dx, y0 + y as u32 * self.scale + dy, colour);
                    }
                }
            }
        }
    }

    fn clear_row(&self, row: u32) {
        for column in 0..self.columns {
            self.cell(column, row, [0; 8]);
        }
    }

    fn new_line(&mut self) {
        self.column = 0;
        self.row = (self.row + 1) % self.rows;
        self.clear_row(self.row);
    }

    fn put(&mut self, byte: u8) {
        match byte {
            b'\n' => self.new_line(),
            b'\r' => self.column = 0,
            b'\t' => {
                for _ in 0..(8 - self.column % 8) {
                    self.put(b' ');
                }
            }
            _ => {
                let printable = if (0x20..0x7F).contains(&byte) { byte } else { b'?' };
                self.cell(
                    self.column,
                    self.row,
                    font8x8::legacy::BASIC_LEGACY[usize::from(printable)],
                );
                self.column += 1;
                if self.column == self.columns {
                    self.new_line();
                }
            }
        }
    }
}

/// Maps the framebuffer, clears it and starts copying the console to it.
/// Returns the line for the boot report.
pub fn init(fb: &Framebuffer) -> Result<String, String> {
    fb.drawable().map_err(|why| {
        alloc::format!(
            "{}x{} type {} at {} bits per pixel at {:#x}: {why}",
            fb.width,
            fb.height,
            fb.kind,
            fb.bits_per_pixel,
            fb.address
        )
    })?;
    let bytes = u64::from(fb.pitch) * u64::from(fb.height);
    let base = crate::arch::memory::map_mmio(fb.address, bytes)
        .map_err(|e| alloc::format!("framebuffer at {:#x}: {e}", fb.address))?;
    let scale = if fb.width >= 1600 { 2 } else { 1 };
    let (columns, rows) = (fb.width / (GLYPH * scale), fb.height / (GLYPH * scale));
    if columns == 0 || rows == 0 {
        return Err(alloc::format!("a {}x{} framebuffer holds no text", fb.width, fb.height));
    }
    let foreground = GREY << fb.red_shift | GREY << fb.green_shift | GREY << fb.blue_shift;
    let screen = Screen {
        base,
        pitch: fb.pitch,
        bytes_per_pixel: u32::from(fb.bits_per_pixel / 8),
        scale,
        columns,
        rows,
        column: 0,
        row: 0,
        foreground,
    };
    for row in 0..rows {
        screen.clear_row(row);
    }
    *SCREEN.lock() = Some(screen);
    Ok(alloc::format!(
        "framebuffer: {}x{}x{} at {:#x}: console copied to it ({columns}x{rows} characters)",
        fb.width,
        fb.height,
        fb.bits_per_pixel,
        fb.address
    ))
}

/// Draws `text` (called by the console with its own lock held). A CPU that
/// finds the screen busy (a report from an interrupted writer) skips it: the
/// serial console still carries every line.
pub fn put_str(text: &str) {
    if let Some(mut screen) = SCREEN.try_lock()
        && let Some(screen) = screen.as_mut()
    {
        for byte in text.bytes() {
            screen.put(byte);
        }
    }
}
