//! A PNG chart read back for the tests: decoded by the `png` crate (not by
//! the renderer that wrote it), as 8-bit RGBA pixels.

use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;

/// A decoded image: `rgba` holds 4 bytes per pixel, row by row.
pub struct Image {
    pub width: u32,
    pub height: u32,
    rgba: Vec<u8>,
}

/// Decodes the PNG file at `path`; panics (failing the test) if it is not
/// one, or not 8-bit RGBA.
pub fn decode(path: &Path) -> Image {
    let file = std::fs::File::open(path).expect("the PNG was written");
    let decoder = png::Decoder::new(std::io::BufReader::new(file));
    let mut reader = decoder.read_info().expect("a PNG header");
    assert_eq!(
        reader.output_color_type(),
        (png::ColorType::Rgba, png::BitDepth::Eight),
        "8-bit RGBA"
    );
    let mut rgba = vec![0; reader.output_buffer_size().expect("a sane size")];
    let info = reader
        .next_frame(&mut rgba)
        .expect("the PNG's pixels decode");
    rgba.truncate(info.buffer_size());
    assert_eq!(rgba.len(), info.width as usize * info.height as usize * 4);
    Image {
        width: info.width,
        height: info.height,
        rgba,
    }
}

impl Image {
    fn pixels(&self) -> impl Iterator<Item = &[u8]> {
        self.rgba.chunks_exact(4)
    }

    /// How many different colours the image has.
    pub fn colours(&self) -> usize {
        self.pixels().collect::<HashSet<_>>().len()
    }

    /// The share of pixels that are opaque white (the background).
    pub fn white_share(&self) -> f64 {
        let white = self.pixels().filter(|p| *p == [255, 255, 255, 255]).count();
        white as f64 / (self.width as f64 * self.height as f64)
    }

    /// Opaque pixels that are mostly `channel` (0 red, 1 green, 2 blue):
    /// that channel above 150, the two others at least 60 below it.
    pub fn count_tinted(&self, channel: usize) -> usize {
        self.pixels()
            .filter(|p| {
                p[3] > 200
                    && p[channel] > 150
                    && (0..3).all(|c| c == channel || u16::from(p[c]) + 60 <= u16::from(p[channel]))
            })
            .count()
    }

    /// Asserts a chart is drawn, not blank: a white background (40 % to
    /// 99 % of the pixels) with more than 50 colours (anti-aliased edges),
    /// and more than 200 pixels tinted by each of `series` (channel, name).
    pub fn assert_drawn(&self, series: &[(usize, &str)]) {
        let colours = self.colours();
        assert!(colours > 50, "{colours} colours");
        let white = self.white_share();
        assert!((0.4..0.99).contains(&white), "white share {white}");
        for &(channel, name) in series {
            let n = self.count_tinted(channel);
            assert!(n > 200, "{n} {name} pixels");
        }
    }

    /// Dark opaque pixels (text ink: each channel below 100) in `rows`.
    pub fn dark_in_rows(&self, rows: Range<u32>) -> usize {
        let row_bytes = self.width as usize * 4;
        let start = rows.start as usize * row_bytes;
        let end = (rows.end.min(self.height) as usize) * row_bytes;
        self.rgba[start..end]
            .chunks_exact(4)
            .filter(|p| p[3] > 200 && p[..3].iter().all(|&c| c < 100))
            .count()
    }
}
