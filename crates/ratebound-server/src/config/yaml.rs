//! Reading YAML nodes with their places (the text loaded by [`super::load`]),
//! each value checked for its kind, named with its line and column (and,
//! for a value an alias copied, the alias).

use std::path::Path;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::{Node, Span};

use super::alias::{Via, through};
use super::error::{ConfigError, ConfigErrorKind};
use crate::model::Place;

/// The file being read: turns spans into [`Place`]s.
#[derive(Clone, Copy)]
pub(crate) struct Src<'a> {
    pub(crate) file: &'a Path,
    /// The alias uses the nodes' markers name (see [`super::load`]).
    pub(crate) vias: &'a [Via],
}

impl Src<'_> {
    /// The place where `span` begins.
    pub(crate) fn place(&self, span: &Span) -> Place {
        let (line, column) = span
            .start()
            .map(|m| (m.line(), m.column()))
            .unwrap_or((0, 0));
        Place {
            file: self.file.to_path_buf(),
            line,
            column,
        }
    }

    /// Where a mapping begins: its first key (the loader marks a block
    /// mapping at its first `:`).
    pub(crate) fn map_span(map: &MarkedMappingNode) -> Span {
        map.keys().next().map(|k| *k.span()).unwrap_or(*map.span())
    }

    /// An error of `kind` where `span` begins (a value an alias copied:
    /// where it is written in the anchored node, the message naming the
    /// alias).
    pub(crate) fn error(
        &self,
        kind: ConfigErrorKind,
        span: &Span,
        message: impl Into<String>,
    ) -> ConfigError {
        let mut message = message.into();
        if let Some(m) = span.start() {
            message.push_str(&through(self.vias, m.source()));
        }
        ConfigError::new(kind, self.place(span), message)
    }

    /// Refuses a key of `map` not in `known`, naming it and what `what`
    /// takes.
    pub(crate) fn known_fields(
        &self,
        map: &MarkedMappingNode,
        what: &str,
        known: &[&str],
    ) -> Result<(), ConfigError> {
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                return Err(self.error(
                    ConfigErrorKind::UnknownField,
                    key.span(),
                    format!(
                        "unknown field '{}' in {what} (expected one of: {})",
                        key.as_str(),
                        known.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The field `name` of `map` as a string scalar (`None`: absent or
    /// null).
    pub(crate) fn string<'n>(
        &self,
        map: &'n MarkedMappingNode,
        name: &str,
    ) -> Result<Option<&'n MarkedScalarNode>, ConfigError> {
        match map.get_node(name) {
            None => Ok(None),
            Some(Node::Scalar(s)) if is_null(s) => Ok(None),
            Some(Node::Scalar(s)) => Ok(Some(s)),
            Some(other) => Err(self.error(
                ConfigErrorKind::InvalidValue,
                other.span(),
                format!("{name} must be a string, got {}", kind_of(other)),
            )),
        }
    }

    /// The field `name` of `map` as a boolean (`false` when absent or
    /// null). YAML 1.1's words are taken, as the reference server's
    /// parser takes them: `true`/`false`, `yes`/`no`, `on`/`off`, `y`/`n`.
    pub(crate) fn boolean(
        &self,
        map: &MarkedMappingNode,
        name: &str,
    ) -> Result<(bool, Option<Span>), ConfigError> {
        let Some(node) = map.get_node(name) else {
            return Ok((false, None));
        };
        let bad = |shown: String| {
            self.error(
                ConfigErrorKind::InvalidValue,
                node.span(),
                format!("{name} must be true or false, got {shown}"),
            )
        };
        match node {
            Node::Scalar(s) if is_null(s) => Ok((false, Some(*s.span()))),
            Node::Scalar(s) if s.may_coerce() => match s.as_str() {
                "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "y" | "Y" | "on" | "On"
                | "ON" => Ok((true, Some(*s.span()))),
                "false" | "False" | "FALSE" | "no" | "No" | "NO" | "n" | "N" | "off" | "Off"
                | "OFF" => Ok((false, Some(*s.span()))),
                other => Err(bad(format!("'{other}'"))),
            },
            Node::Scalar(s) => Err(bad(format!("the string \"{}\"", s.as_str()))),
            other => Err(bad(kind_of(other).to_string())),
        }
    }

    /// The field `name` of `map` as a whole number from `min` to `max`
    /// (`None`: absent or null). Decimal, YAML 1.1's `0x`/`0o`/`0b` and
    /// leading-0 octal forms and `_` separators are read as the reference
    /// server's parser reads them.
    pub(crate) fn whole(
        &self,
        map: &MarkedMappingNode,
        name: &str,
        min: u64,
        max: u64,
    ) -> Result<Option<(u64, Span)>, ConfigError> {
        let Some(node) = map.get_node(name) else {
            return Ok(None);
        };
        let bad = |shown: &str| {
            self.error(
                ConfigErrorKind::InvalidValue,
                node.span(),
                format!("{name} must be a whole number from {min} to {max}, got {shown}"),
            )
        };
        match node {
            Node::Scalar(s) if is_null(s) => Ok(None),
            Node::Scalar(s) => match parse_whole(s.as_str()) {
                Some(n) if (min..=max).contains(&n) => Ok(Some((n, *s.span()))),
                _ => Err(bad(s.as_str())),
            },
            other => Err(bad(kind_of(other))),
        }
    }

    /// The field `name` of `map` as a sequence (`None`: absent or null).
    pub(crate) fn sequence<'n>(
        &self,
        map: &'n MarkedMappingNode,
        name: &str,
    ) -> Result<Option<&'n MarkedSequenceNode>, ConfigError> {
        match map.get_node(name) {
            None => Ok(None),
            Some(Node::Scalar(s)) if is_null(s) => Ok(None),
            Some(Node::Sequence(s)) => Ok(Some(s)),
            Some(other) => Err(self.error(
                ConfigErrorKind::InvalidValue,
                other.span(),
                format!("{name} must be a list, got {}", kind_of(other)),
            )),
        }
    }

    /// The field `name` of `map` as a mapping (`None`: absent or null).
    pub(crate) fn mapping<'n>(
        &self,
        map: &'n MarkedMappingNode,
        name: &str,
    ) -> Result<Option<&'n MarkedMappingNode>, ConfigError> {
        match map.get_node(name) {
            None => Ok(None),
            Some(Node::Scalar(s)) if is_null(s) => Ok(None),
            Some(Node::Mapping(m)) => Ok(Some(m)),
            Some(other) => Err(self.error(
                ConfigErrorKind::InvalidValue,
                other.span(),
                format!("{name} must be a mapping, got {}", kind_of(other)),
            )),
        }
    }

    /// `node`, an entry of the list `list`, as a mapping.
    pub(crate) fn entry<'n>(
        &self,
        node: &'n Node,
        list: &str,
    ) -> Result<&'n MarkedMappingNode, ConfigError> {
        node.as_mapping().ok_or_else(|| {
            self.error(
                ConfigErrorKind::InvalidValue,
                node.span(),
                format!(
                    "each entry of {list} must be a mapping, got {}",
                    kind_of(node)
                ),
            )
        })
    }
}

/// A plain `~`, `null` or nothing.
pub(crate) fn is_null(s: &MarkedScalarNode) -> bool {
    s.may_coerce() && matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL")
}

/// What a node is, for messages (a scalar shows itself).
fn kind_of(node: &Node) -> &str {
    match node {
        Node::Scalar(s) => s.as_str(),
        Node::Mapping(_) => "a mapping",
        Node::Sequence(_) => "a list",
    }
}

/// A YAML 1.1 integer without sign (`+` allowed), or `None`.
fn parse_whole(text: &str) -> Option<u64> {
    let t: String = text
        .trim_start_matches('+')
        .chars()
        .filter(|&c| c != '_')
        .collect();
    if t.is_empty() || text.starts_with("+-") {
        return None;
    }
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x") {
        (h, 16)
    } else if let Some(o) = t.strip_prefix("0o") {
        (o, 8)
    } else if let Some(b) = t.strip_prefix("0b") {
        (b, 2)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t.as_str(), 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_whole;

    #[test]
    fn whole_numbers_read_as_yaml_1_1() {
        assert_eq!(parse_whole("10"), Some(10));
        assert_eq!(parse_whole("1_000"), Some(1000));
        assert_eq!(parse_whole("+7"), Some(7));
        assert_eq!(parse_whole("0x1F"), Some(31));
        assert_eq!(parse_whole("010"), Some(8));
        assert_eq!(parse_whole("0"), Some(0));
        for bad in ["-5", "1.5", "ten", "", "0x", "1e3", "+-1", "09"] {
            assert_eq!(parse_whole(bad), None, "{bad}");
        }
    }
}
