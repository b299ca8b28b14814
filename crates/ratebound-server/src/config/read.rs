//! A file's domain and its tree of descriptors.

use std::collections::HashMap;
use std::path::Path;

use marked_yaml::Node;
use marked_yaml::types::{MarkedMappingNode, MarkedSequenceNode};

use super::error::{ConfigError, ConfigErrorKind};
use super::limit::read_block;
use super::load::{Loaded, load};
use super::yaml::Src;
use crate::model::{Descriptor, Domain, Rule, Value};

/// How deep `descriptors` may nest (a bound against a hostile file, far
/// beyond any real tree).
pub const MAX_DEPTH: usize = 64;

/// The fields of a descriptor. `quota_mode` and `metadata` are the
/// reference server's: `metadata` is read and ignored, `quota_mode: true`
/// refused (not honoured here).
const FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "rate_limits",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "quota_mode",
    "metadata",
];

/// Reads one file's text (`file` names it) into its domain.
pub(crate) fn read_domain(file: &Path, text: &str) -> Result<Domain, ConfigError> {
    let root = if text.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "---"
    }) {
        // An empty file: what is missing is the domain.
        None
    } else {
        Some(load(file, text)?)
    };
    let Some(Loaded {
        root: Node::Mapping(map),
        vias,
    }) = root
    else {
        return Err(ConfigError::new(
            ConfigErrorKind::Missing,
            crate::model::Place {
                file: file.to_path_buf(),
                line: 1,
                column: 1,
            },
            "the file has no domain",
        ));
    };
    let src = Src { file, vias: &vias };
    src.known_fields(&map, "the file", &["domain", "descriptors"])?;
    let name = match src.string(&map, "domain")? {
        Some(s) if !s.as_str().is_empty() => s,
        _ => {
            return Err(src.error(
                ConfigErrorKind::Missing,
                &Src::map_span(&map),
                "the file has no domain (domain: <name>)",
            ));
        }
    };
    let descriptors = match src.sequence(&map, "descriptors")? {
        Some(list) => read_list(src, list, 1)?,
        None => Vec::new(),
    };
    Ok(Domain {
        name: name.as_str().to_string(),
        descriptors,
        place: src.place(name.span()),
    })
}

/// A `descriptors` list at `depth` (1: the top).
fn read_list(
    src: Src<'_>,
    list: &MarkedSequenceNode,
    depth: usize,
) -> Result<Vec<Descriptor>, ConfigError> {
    if depth > MAX_DEPTH {
        return Err(src.error(
            ConfigErrorKind::InvalidValue,
            list.span(),
            format!("descriptors nest more than {MAX_DEPTH} levels deep"),
        ));
    }
    let mut read: Vec<Descriptor> = Vec::with_capacity(list.len());
    // (key, value as written) → the line of its first descriptor: a value
    // with '*' is a wildcard, one without exact, so the text tells them
    // apart. A map, not a scan: a level may hold thousands of values.
    let mut seen: HashMap<(String, Option<String>), usize> = HashMap::with_capacity(list.len());
    for node in list.iter() {
        let map = src.entry(node, "descriptors")?;
        let descriptor = read_descriptor(src, map, depth)?;
        let id = (
            descriptor.key.clone(),
            descriptor.value.as_ref().map(value_text),
        );
        if let Some(first_line) = seen.get(&id) {
            let shown = match &id.1 {
                None => format!("key '{}' (no value)", id.0),
                Some(v) => format!("key '{}' value '{v}'", id.0),
            };
            // At the descriptor's first key, as its place (an alias's copy
            // says so).
            return Err(src.error(
                ConfigErrorKind::DuplicateDescriptor,
                &Src::map_span(map),
                format!(
                    "duplicate descriptor {shown}: the same key and value are at line {first_line} of this level"
                ),
            ));
        }
        seen.insert(id, descriptor.place.line);
        read.push(descriptor);
    }
    Ok(read)
}

/// The text of a value as written.
pub(crate) fn value_text(value: &Value) -> String {
    match value {
        Value::Exact(v) => v.clone(),
        Value::Wildcard(parts) => parts.join("*"),
    }
}

fn read_descriptor(
    src: Src<'_>,
    map: &MarkedMappingNode,
    depth: usize,
) -> Result<Descriptor, ConfigError> {
    src.known_fields(map, "a descriptor", FIELDS)?;
    let key = match src.string(map, "key")? {
        Some(k) if !k.as_str().is_empty() => k.as_str().to_string(),
        Some(k) => {
            return Err(src.error(
                ConfigErrorKind::Missing,
                k.span(),
                "descriptor key is empty",
            ));
        }
        None => {
            return Err(src.error(
                ConfigErrorKind::Missing,
                &Src::map_span(map),
                "a descriptor needs a key",
            ));
        }
    };
    // As the reference server: an empty value is no value.
    let value_node = src.string(map, "value")?.filter(|v| !v.as_str().is_empty());
    let value = value_node.map(|v| {
        let text = v.as_str();
        if text.contains('*') {
            Value::Wildcard(text.split('*').map(str::to_string).collect())
        } else {
            Value::Exact(text.to_string())
        }
    });
    let (quota_mode, quota_span) = src.boolean(map, "quota_mode")?;
    if let (true, Some(span)) = (quota_mode, quota_span) {
        return Err(src.error(
            ConfigErrorKind::Unsupported,
            &span,
            "quota_mode: true is not supported by ratebound serve",
        ));
    }
    let (share_threshold, share_span) = src.boolean(map, "share_threshold")?;
    if let (true, Some(span)) = (share_threshold, share_span)
        && !matches!(value, Some(Value::Wildcard(_)))
    {
        let shown = value.as_ref().map(value_text).unwrap_or_default();
        return Err(src.error(
            ConfigErrorKind::Conflict,
            &span,
            format!(
                "share_threshold needs a wildcard value (with '*'), but key '{key}' has value '{shown}'"
            ),
        ));
    }
    let shadow_mode = src.boolean(map, "shadow_mode")?.0;
    let detailed_metric = src.boolean(map, "detailed_metric")?.0;
    let value_to_metric = src.boolean(map, "value_to_metric")?.0;
    let (rule, replaces) = read_rule(src, map)?;
    // The nested ones last: this descriptor's own errors come first.
    let children = match src.sequence(map, "descriptors")? {
        Some(list) => read_list(src, list, depth + 1)?,
        None => Vec::new(),
    };
    Ok(Descriptor {
        key,
        value,
        rule,
        replaces,
        shadow_mode,
        detailed_metric,
        value_to_metric,
        share_threshold,
        children,
        place: src.place(&Src::map_span(map)),
    })
}

/// `rate_limit` or `rate_limits` (not both), and the `replaces` of their
/// blocks.
fn read_rule(
    src: Src<'_>,
    map: &MarkedMappingNode,
) -> Result<(Option<Rule>, Vec<String>), ConfigError> {
    let one = src.mapping(map, "rate_limit")?;
    let several = src.sequence(map, "rate_limits")?;
    match (one, several) {
        (Some(_), Some(list)) => Err(src.error(
            ConfigErrorKind::Conflict,
            list.span(),
            "a descriptor has rate_limit or rate_limits, not both",
        )),
        (None, None) => Ok((None, Vec::new())),
        (Some(block), None) => {
            let block = read_block(src, block)?;
            let rule = match block.limit {
                None => Rule::Unlimited,
                Some(limit) => Rule::Limits(vec![limit]),
            };
            Ok((Some(rule), block.replaces))
        }
        (None, Some(list)) => {
            if list.is_empty() {
                return Err(src.error(
                    ConfigErrorKind::Missing,
                    list.span(),
                    "rate_limits is an empty list",
                ));
            }
            let mut limits = Vec::with_capacity(list.len());
            let mut replaces = Vec::new();
            for node in list.iter() {
                let entry = src.entry(node, "rate_limits")?;
                let block = read_block(src, entry)?;
                let Some(limit) = block.limit else {
                    return Err(src.error(
                        ConfigErrorKind::Conflict,
                        &Src::map_span(entry),
                        "unlimited: true cannot be one of several rate_limits",
                    ));
                };
                limits.push(limit);
                for name in block.replaces {
                    if !replaces.contains(&name) {
                        replaces.push(name);
                    }
                }
            }
            // A limit replacing another of the same descriptor would
            // replace itself.
            for limit in &limits {
                if let Some(name) = limit
                    .name
                    .as_deref()
                    .filter(|n| replaces.iter().any(|r| r == n))
                {
                    return Err(ConfigError::new(
                        ConfigErrorKind::Conflict,
                        limit.place.clone(),
                        format!("a descriptor's rate_limits cannot replace one another ('{name}')"),
                    ));
                }
            }
            Ok((Some(Rule::Limits(limits)), replaces))
        }
    }
}
