//! An SVG chart read back for the tests: parsed as XML (roxmltree), its
//! texts, lines and size.

// Each test file reads the fields it checks.
#![allow(dead_code)]

use std::path::Path;

pub struct Svg {
    /// The file's length in bytes.
    pub len: usize,
    /// Every text node, trimmed.
    pub texts: Vec<String>,
    /// How many `polyline`s are drawn.
    pub polylines: usize,
    /// The root's `width` and `height` attributes, parsed.
    pub size: Option<(u32, u32)>,
}

/// Reads the SVG file at `path`; panics (failing the test) if it is not
/// XML with an `svg` root.
pub fn read(path: &Path) -> Svg {
    let text = std::fs::read_to_string(path).expect("the SVG was written");
    let doc = roxmltree::Document::parse(&text).expect("the SVG parses as XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let dim = |name| -> Option<u32> { root.attribute(name)?.parse().ok() };
    Svg {
        len: text.len(),
        texts: doc
            .descendants()
            .filter_map(|n| n.text())
            .map(|t| t.trim().to_string())
            .collect(),
        polylines: doc
            .descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .count(),
        size: dim("width").zip(dim("height")),
    }
}

impl Svg {
    /// Asserts a panel titled by each of `names` (a text starting with it).
    pub fn assert_panels(&self, names: &[&str]) {
        for name in names {
            assert!(
                self.texts.iter().any(|t| t.starts_with(name)),
                "no panel for {name}"
            );
        }
    }

    /// Whether a text contains `part`.
    pub fn says(&self, part: &str) -> bool {
        self.texts.iter().any(|t| t.contains(part))
    }
}
