//! Loading a file's YAML into marked nodes: `yaml-rust2`'s events built
//! into `marked-yaml`'s [`Node`]s, every node with its line and column,
//! with the anchors (`&a`), aliases (`*a`) and merge keys (`<<: *a`,
//! `<<: [*a, *b]`) that the reference server's parser (Go's `yaml.v2`)
//! reads.
//!
//! - An alias is a copy of its anchored node, each part keeping the place
//!   where it is written; the copy's markers carry a `source` that names
//!   the alias use ([`Via`]), so an error in it also says which alias
//!   brought it there.
//! - A merge key's mappings add the keys the mapping does not write
//!   (an earlier mapping of `<<: [*a, *b]` wins over a later one); the
//!   written keys come first in the result. A `rate_limit` (or
//!   `metadata`) both written and merged is combined field by field, the
//!   written fields winning, as yaml.v2 fills the reference's structs. A key written *before* `<<`
//!   that the merge also sets is refused: `yaml.v2` lets the merged value
//!   override it there (it applies `<<` in the order written), the YAML
//!   merge spec keeps the written one, and a silent choice would read the
//!   file differently from one of them.
//! - Aliases may add at most [`MAX_ALIAS_NODES`] nodes to a file (a
//!   "billion laughs" file is refused at the alias that would pass it,
//!   before anything is copied); the text nests at most [`MAX_NESTING`]
//!   deep.
//! - As before: keys written twice in one mapping, tags, and a top level
//!   that is not a mapping are refused; scalars are not coerced (their
//!   `may_coerce` flag says they were written plain).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::{Marker, Node, Span};
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker as YamlMarker, ScanError, TScalarStyle};

use super::alias::{Copier, Via, through};
use super::error::{ConfigError, ConfigErrorKind};
use crate::model::Place;

/// How many nodes the aliases of one file may add (copies of anchored
/// nodes, each scalar, list and mapping counting one, each mapping key
/// one): far beyond a real file's reuse, far below what hurts.
pub const MAX_ALIAS_NODES: usize = 100_000;

/// How deep a file's text may nest (lists and mappings in one another).
/// An alias's copy adds the depth of its anchored node, itself bounded:
/// a chain of aliases each one level deeper than the last copies
/// quadratically many nodes, so [`MAX_ALIAS_NODES`] stops it within a
/// few hundred levels.
pub const MAX_NESTING: usize = 512;

/// The keys whose mappings a merge combines with the mapping kept, field
/// by field (the kept fields winning), rather than leaving out: the
/// reference server decodes `rate_limit` into a Go struct pointer and
/// `metadata` into a Go map, which yaml.v2 fills in place, so a merged
/// block and a block written after `<<` add up there.
const FIELD_BY_FIELD: [&str; 2] = ["rate_limit", "metadata"];

/// A file's root mapping and the alias uses its markers name.
pub(crate) struct Loaded {
    /// The top-level node (a mapping).
    pub(crate) root: Node,
    /// The alias uses, by `source` − 1.
    pub(crate) vias: Vec<Via>,
}

/// Loads `text` (named `file` in errors).
pub(crate) fn load(file: &Path, text: &str) -> Result<Loaded, ConfigError> {
    let mut loader = Loader {
        file,
        text,
        cursor: (0, 0),
        stack: Vec::new(),
        anchors: HashMap::new(),
        copied: 0,
        vias: Vec::new(),
        root: None,
    };
    let mut parser = Parser::new_from_str(text);
    let end = loop {
        let (event, mark) = parser.next_token().map_err(|e| loader.scan_error(&e))?;
        let mark = marker(mark);
        match event {
            Event::DocumentEnd | Event::StreamEnd => break mark,
            Event::Alias(id) => loader.alias(id, mark)?,
            Event::Scalar(value, style, anchor, tag) => {
                if tag.is_some() {
                    return Err(loader.syntax(mark, "YAML tags (!!str ...) are not supported"));
                }
                let mut node = MarkedScalarNode::new(Span::new_start(mark), value);
                // Coercion off: plain (unquoted) or not.
                node.set_coerce(matches!(style, TScalarStyle::Plain));
                let node = Node::from(node);
                if anchor != 0 {
                    loader.anchors.insert(anchor, (node.clone(), 1));
                }
                loader.value(node, 1, mark)?;
            }
            Event::SequenceStart(anchor, tag) => loader.open(false, anchor, tag.is_some(), mark)?,
            Event::MappingStart(anchor, tag) => loader.open(true, anchor, tag.is_some(), mark)?,
            Event::SequenceEnd | Event::MappingEnd => loader.close(mark)?,
            Event::StreamStart | Event::DocumentStart | Event::Nothing => {}
        }
    };
    // No node at all: an empty mapping where the text ends.
    let root = loader.root.take().unwrap_or_else(|| {
        Node::from(MarkedMappingNode::new_empty(Span::new_with_marks(end, end)))
    });
    Ok(Loaded {
        root,
        vias: loader.vias,
    })
}

/// `yaml-rust2`'s marker as `marked-yaml` writes it (1-based column).
fn marker(mark: YamlMarker) -> Marker {
    Marker::new(0, mark.index(), mark.line(), mark.col() + 1)
}

/// A list or mapping being read.
enum Frame {
    Seq {
        start: Marker,
        anchor: usize,
        items: Vec<Node>,
        size: usize,
    },
    Map(Box<MapFrame>),
}

impl Frame {
    fn anchor(&self) -> usize {
        match self {
            Frame::Seq { anchor, .. } => *anchor,
            Frame::Map(m) => m.anchor,
        }
    }
}

/// A mapping being read.
struct MapFrame {
    start: Marker,
    anchor: usize,
    /// The keys written, in order.
    map: MarkedMappingNode,
    /// A key waiting for its value.
    key: Option<MarkedScalarNode>,
    /// The `<<` key, once read.
    merge: Option<MarkedScalarNode>,
    /// `<<` read, its value not yet.
    merge_pending: bool,
    /// How many keys were written before `<<`.
    before_merge: usize,
    /// The mappings `<<` merges, the first winning.
    sources: Vec<MarkedMappingNode>,
    size: usize,
}

struct Loader<'t> {
    file: &'t Path,
    text: &'t str,
    /// (characters, bytes) read by [`Loader::name_at`].
    cursor: (usize, usize),
    stack: Vec<Frame>,
    /// Anchored nodes read whole, by the parser's anchor id, with their
    /// node counts.
    anchors: HashMap<usize, (Node, usize)>,
    /// Nodes the aliases added so far.
    copied: usize,
    vias: Vec<Via>,
    root: Option<Node>,
}

impl Loader<'_> {
    fn error(
        &self,
        kind: ConfigErrorKind,
        mark: Marker,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::new(
            kind,
            Place {
                file: self.file.to_path_buf(),
                line: mark.line(),
                column: mark.column(),
            },
            message,
        )
    }

    fn syntax(&self, mark: Marker, message: impl Into<String>) -> ConfigError {
        self.error(ConfigErrorKind::Syntax, mark, message)
    }

    fn scan_error(&mut self, e: &ScanError) -> ConfigError {
        let mark = marker(*e.marker());
        if e.info().contains("unknown anchor") {
            let name = self.name_at(mark.character());
            return self.syntax(
                mark,
                format!("the alias *{name} names no anchor (&{name} must be written before it)"),
            );
        }
        self.syntax(mark, format!("YAML syntax error: {}", e.info()))
    }

    /// The alias name written at character `index` (its `*`).
    fn name_at(&mut self, index: usize) -> String {
        if index < self.cursor.0 {
            self.cursor = (0, 0);
        }
        let (mut chars, mut bytes) = self.cursor;
        let rest = &self.text[bytes..];
        for c in rest.chars() {
            if chars == index {
                break;
            }
            chars += 1;
            bytes += c.len_utf8();
        }
        self.cursor = (chars, bytes);
        self.text[bytes..]
            .chars()
            .skip(1)
            .take_while(|c| !c.is_whitespace() && !",[]{}".contains(*c))
            .collect()
    }

    /// A list or mapping begins.
    fn open(
        &mut self,
        mapping: bool,
        anchor: usize,
        tagged: bool,
        mark: Marker,
    ) -> Result<(), ConfigError> {
        if tagged {
            return Err(self.syntax(mark, "YAML tags (!!str ...) are not supported"));
        }
        match self.stack.last() {
            None if !mapping => {
                return Err(self.syntax(
                    mark,
                    "the file must be a mapping (domain: ..., descriptors: ...)",
                ));
            }
            Some(Frame::Map(m)) if m.key.is_none() && !m.merge_pending => {
                return Err(self.syntax(mark, "a mapping key must be a plain string"));
            }
            _ => {}
        }
        if self.stack.len() >= MAX_NESTING {
            return Err(self.syntax(
                mark,
                format!("the YAML nests more than {MAX_NESTING} levels deep"),
            ));
        }
        self.stack.push(if mapping {
            Frame::Map(Box::new(MapFrame {
                start: mark,
                anchor,
                map: MarkedMappingNode::new_empty(Span::new_blank()),
                key: None,
                merge: None,
                merge_pending: false,
                before_merge: 0,
                sources: Vec::new(),
                size: 1,
            }))
        } else {
            Frame::Seq {
                start: mark,
                anchor,
                items: Vec::new(),
                size: 1,
            }
        });
        Ok(())
    }

    /// A list or mapping ends at `end`.
    fn close(&mut self, end: Marker) -> Result<(), ConfigError> {
        let Some(frame) = self.stack.pop() else {
            return Err(self.syntax(end, "YAML syntax error: an end without a beginning"));
        };
        let (node, size, anchor, start) = match frame {
            Frame::Seq {
                start,
                anchor,
                items,
                size,
            } => {
                let span = Span::new_with_marks(start, end);
                let node = Node::from(MarkedSequenceNode::new(span, items));
                (node, size, anchor, start)
            }
            Frame::Map(frame) => {
                let (start, anchor, size) = (frame.start, frame.anchor, frame.size);
                let mut map = self.merged(*frame)?;
                *map.span_mut() = Span::new_with_marks(start, end);
                (Node::from(map), size, anchor, start)
            }
        };
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        self.value(node, size, start)
    }

    /// A mapping's written keys, then those its `<<` adds.
    fn merged(&self, frame: MapFrame) -> Result<MarkedMappingNode, ConfigError> {
        let MapFrame {
            mut map,
            merge,
            before_merge,
            sources,
            ..
        } = frame;
        if sources.is_empty() {
            return Ok(map);
        }
        let before: HashSet<String> = map
            .keys()
            .take(before_merge)
            .map(|k| k.as_str().to_string())
            .collect();
        let merge_line = merge
            .as_ref()
            .and_then(|m| m.span().start().map(Marker::line))
            .unwrap_or(0);
        for mut source in sources {
            for (key, value) in std::mem::take(&mut *source) {
                if before.contains(key.as_str()) {
                    let written = map
                        .get_key_value(key.as_str())
                        .map(|(k, _)| *k.span())
                        .unwrap_or(*key.span());
                    let mark = written.start().copied().unwrap_or(Marker::new(0, 0, 0, 0));
                    return Err(self.error(
                        ConfigErrorKind::Conflict,
                        mark,
                        format!(
                            "'{}' is written before the merge key '<<' (line {merge_line}), which sets it too: \
                             the reference server takes the merged value there, YAML's merge rule the written one; \
                             write '<<' first",
                            key.as_str()
                        ),
                    ));
                }
                match (map.get_mut(key.as_str()), value) {
                    (None, value) => {
                        map.insert(key, value);
                    }
                    // Filled field by field, as yaml.v2 fills the Go
                    // struct or map the reference decodes it into.
                    (Some(Node::Mapping(kept)), Node::Mapping(mut merged))
                        if FIELD_BY_FIELD.contains(&key.as_str()) =>
                    {
                        for (field, value) in std::mem::take(&mut *merged) {
                            if !kept.contains_key(field.as_str()) {
                                kept.insert(field, value);
                            }
                        }
                    }
                    // Written after `<<`, or merged from an earlier
                    // mapping: kept.
                    (Some(_), _) => {}
                }
            }
        }
        Ok(map)
    }

    /// `*name` (the parser's anchor `id`) at `mark`.
    fn alias(&mut self, id: usize, mark: Marker) -> Result<(), ConfigError> {
        let name = self.name_at(mark.character());
        let Some((node, size)) = self.anchors.get(&id) else {
            let message = if self.stack.iter().any(|f| f.anchor() == id) {
                format!(
                    "the alias *{name} is inside the node anchored &{name} (it would contain itself)"
                )
            } else {
                format!("the alias *{name} names no anchor (&{name} must be written before it)")
            };
            return Err(self.syntax(mark, message));
        };
        let size = *size;
        if self.copied + size > MAX_ALIAS_NODES {
            return Err(self.syntax(
                mark,
                format!(
                    "the alias *{name} would copy {size} nodes, and the file's aliases may add at most \
                     {MAX_ALIAS_NODES} in all ({} so far): nested aliases expand exponentially",
                    self.copied
                ),
            ));
        }
        self.copied += size;
        self.vias.push(Via {
            name,
            line: mark.line(),
            column: mark.column(),
            outer: 0,
        });
        let via = self.vias.len();
        let copy = Copier::new(&mut self.vias, via).node(node);
        self.value(copy, size, mark)
    }

    /// A node read whole (`size` nodes), at `mark`: the document's root,
    /// a list's item, a mapping's key or value.
    fn value(&mut self, node: Node, size: usize, mark: Marker) -> Result<(), ConfigError> {
        let Some(frame) = self.stack.last_mut() else {
            if !matches!(node, Node::Mapping(_)) {
                return Err(self.syntax(
                    mark,
                    "the file must be a mapping (domain: ..., descriptors: ...)",
                ));
            }
            self.root = Some(node);
            return Ok(());
        };
        let map = match frame {
            Frame::Seq {
                items, size: total, ..
            } => {
                items.push(node);
                *total += size;
                return Ok(());
            }
            Frame::Map(map) => map,
        };
        map.size += size;
        if map.merge_pending {
            map.merge_pending = false;
            let bad = match node {
                Node::Mapping(m) => {
                    map.sources.push(m);
                    None
                }
                Node::Sequence(list) => {
                    let mut bad = None;
                    for item in list.iter() {
                        match item {
                            Node::Mapping(m) => map.sources.push(m.clone()),
                            other => {
                                bad = Some(other.clone());
                                break;
                            }
                        }
                    }
                    bad
                }
                scalar => Some(scalar),
            };
            if let Some(bad) = bad {
                let shown = match &bad {
                    Node::Scalar(s) => format!("'{}'", s.as_str()),
                    Node::Sequence(_) => "a list".to_string(),
                    Node::Mapping(_) => "a mapping".to_string(),
                };
                let at = bad.span().start().copied().unwrap_or(mark);
                let mut e = self.error(
                    ConfigErrorKind::InvalidValue,
                    at,
                    format!(
                        "the merge key '<<' takes a mapping or a list of mappings (<<: *a or <<: [*a, *b]), got {shown}"
                    ),
                );
                e.message.push_str(&through(&self.vias, at.source()));
                return Err(e);
            }
            return Ok(());
        }
        if let Some(key) = map.key.take() {
            map.map.insert(key, node);
            return Ok(());
        }
        // A key.
        let Node::Scalar(key) = node else {
            return Err(self.syntax(mark, "a mapping key must be a plain string"));
        };
        let is_merge = key.may_coerce() && key.as_str() == "<<";
        let first = if is_merge {
            map.merge.as_ref()
        } else {
            map.map.get_key_value(key.as_str()).map(|(k, _)| k)
        };
        if let Some(first) = first {
            let line = first.span().start().map(Marker::line).unwrap_or(0);
            let at = key.span().start().copied().unwrap_or(mark);
            return Err(self.syntax(
                at,
                format!(
                    "field '{}' is written twice in one mapping (first at line {line})",
                    key.as_str()
                ),
            ));
        }
        if is_merge {
            map.merge = Some(key);
            map.merge_pending = true;
            map.before_merge = map.map.len();
        } else {
            map.key = Some(key);
        }
        Ok(())
    }
}
