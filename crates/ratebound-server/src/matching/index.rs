//! [`Rules`]: a configuration with an index of every level, so that a
//! request's walk costs a hash lookup per entry (plus its key's wildcards,
//! in order), not a scan of every descriptor of a level: a level may hold
//! thousands of values (an address list).

use std::collections::HashMap;

use super::{How, Match, is_wildcard_of, walk};
use crate::model::{Config, Descriptor};

/// The descriptors of one level with one key.
#[derive(Debug, Default)]
struct KeyIndex {
    /// Exact value → position (the first, as the scan finds it).
    exact: HashMap<String, usize>,
    /// Positions of the wildcard values, in the file's order.
    wildcards: Vec<usize>,
    /// The position of the value-less descriptor.
    key_only: Option<usize>,
}

/// One level: its keys, and the index below each position.
#[derive(Debug, Default)]
struct LevelIndex {
    keys: HashMap<String, KeyIndex>,
    /// `children[p]`: the level below position `p` (`None`: none).
    children: Vec<Option<LevelIndex>>,
}

impl LevelIndex {
    fn new(level: &[Descriptor]) -> LevelIndex {
        let mut index = LevelIndex::default();
        for (p, d) in level.iter().enumerate() {
            let k = index.keys.entry(d.key.clone()).or_default();
            match &d.value {
                Some(crate::model::Value::Exact(v)) => {
                    k.exact.entry(v.clone()).or_insert(p);
                }
                Some(crate::model::Value::Wildcard(_)) => k.wildcards.push(p),
                None => {
                    k.key_only.get_or_insert(p);
                }
            }
            index
                .children
                .push((!d.children.is_empty()).then(|| LevelIndex::new(&d.children)));
        }
        index
    }

    fn step(&self, level: &[Descriptor], key: &str, value: &str) -> Option<(usize, How)> {
        let k = self.keys.get(key)?;
        if let Some(&p) = k.exact.get(value) {
            return Some((p, How::Exact));
        }
        if let Some(&p) = k
            .wildcards
            .iter()
            .find(|&&p| level.get(p).is_some_and(|d| is_wildcard_of(d, value)))
        {
            return Some((p, How::Wildcard));
        }
        k.key_only.map(|p| (p, How::KeyOnly))
    }
}

/// A [`Config`] with an index of each domain's levels: the answers of
/// [`find`](super::find), each level in a hash lookup.
#[derive(Debug)]
pub struct Rules {
    config: Config,
    index: HashMap<String, LevelIndex>,
}

impl Rules {
    /// Indexes `config`.
    pub fn new(config: Config) -> Rules {
        let index = config
            .domains
            .iter()
            .map(|(name, d)| (name.clone(), LevelIndex::new(&d.descriptors)))
            .collect();
        Rules { config, index }
    }

    /// The configuration indexed.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The rule `entries` fall under in `domain`, as [`find`](super::find)
    /// finds it; `None` for an unknown domain too.
    pub fn find(&self, domain: &str, entries: &[(String, String)]) -> Option<Match<'_>> {
        let tree = self.config.domains.get(domain)?;
        let mut at = Some(self.index.get(domain)?);
        walk(tree, entries, |level, key, value| {
            let here = at?;
            let (p, how) = here.step(level, key, value)?;
            at = here.children.get(p).and_then(Option::as_ref);
            Some((p, how))
        })
    }
}

impl From<Config> for Rules {
    fn from(config: Config) -> Rules {
        Rules::new(config)
    }
}
