//! Alias uses: the copy of an anchored node an alias inserts, each
//! marker's `source` naming the use ([`Via`]) so an error in it can say
//! which alias (and which aliases around that one) brought it there.

use std::collections::HashMap;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::{Node, Span};

/// One use of an alias: the nodes copied through it carry its index + 1
/// as their markers' `source` (0: written where they are).
#[derive(Clone, Debug)]
pub(crate) struct Via {
    /// The alias's name (without `*`).
    pub(crate) name: String,
    /// Where the alias is written.
    pub(crate) line: usize,
    /// Its column.
    pub(crate) column: usize,
    /// The alias use that brought this alias's copy where it is (its
    /// index + 1; 0: none, the alias is written there).
    pub(crate) outer: usize,
}

/// Copies an anchored node for one alias use: each marker's `source`
/// re-based on that use.
pub(crate) struct Copier<'v> {
    vias: &'v mut Vec<Via>,
    /// The alias use (index + 1).
    via: usize,
    /// A source in the anchored node → its source in the copy.
    memo: HashMap<usize, usize>,
}

impl<'v> Copier<'v> {
    /// A copier for the alias use `via` (index + 1 in `vias`).
    pub(crate) fn new(vias: &'v mut Vec<Via>, via: usize) -> Copier<'v> {
        Copier {
            vias,
            via,
            memo: HashMap::new(),
        }
    }

    /// A copy of `node` for this use.
    pub(crate) fn node(&mut self, node: &Node) -> Node {
        match node {
            Node::Scalar(s) => Node::from(self.scalar(s)),
            Node::Sequence(list) => {
                let items = list.iter().map(|n| self.node(n)).collect();
                Node::from(MarkedSequenceNode::new(self.span(list.span()), items))
            }
            Node::Mapping(map) => {
                let mut copy = MarkedMappingNode::new_empty(self.span(map.span()));
                for (k, v) in map.iter() {
                    let (k, v) = (self.scalar(k), self.node(v));
                    copy.insert(k, v);
                }
                Node::from(copy)
            }
        }
    }

    fn scalar(&mut self, s: &MarkedScalarNode) -> MarkedScalarNode {
        let mut copy = s.clone();
        *copy.span_mut() = self.span(s.span());
        copy
    }

    fn span(&mut self, span: &Span) -> Span {
        let mut span = *span;
        if let Some(m) = span.start_mut() {
            m.set_source(self.rebase(m.source()));
        }
        if let Some(m) = span.end_mut() {
            m.set_source(self.rebase(m.source()));
        }
        span
    }

    /// The source in the copy of a node whose source is `source`: written
    /// in the anchored node → this use; brought there by an alias → a
    /// use of that alias brought by this one.
    fn rebase(&mut self, source: usize) -> usize {
        // The chain from `source` outwards to the first already re-based
        // (or to 0: this use).
        let mut chain = Vec::new();
        let mut at = source;
        let mut base = loop {
            if at == 0 {
                break self.via;
            }
            if let Some(done) = self.memo.get(&at) {
                break *done;
            }
            chain.push(at);
            at = self.vias[at - 1].outer;
        };
        for old in chain.into_iter().rev() {
            let mut via = self.vias[old - 1].clone();
            via.outer = base;
            self.vias.push(via);
            base = self.vias.len();
            self.memo.insert(old, base);
        }
        base
    }
}

/// What an error's place owes to aliases: ` (through the alias *a at
/// line 9, column 15, ...)`, or nothing for a place written there.
pub(crate) fn through(vias: &[Via], source: usize) -> String {
    const SHOWN: usize = 4;
    let mut parts = Vec::new();
    let mut at = source;
    while at != 0 && at <= vias.len() {
        let via = &vias[at - 1];
        if parts.len() == SHOWN {
            parts.push("...".to_string());
            break;
        }
        parts.push(format!(
            "*{} at line {}, column {}",
            via.name, via.line, via.column
        ));
        at = via.outer;
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" (through the alias {})", parts.join(", in "))
    }
}
