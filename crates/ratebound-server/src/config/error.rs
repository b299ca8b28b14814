//! [`ConfigError`]: what is wrong with a configuration, and where.

use std::fmt;

use crate::model::Place;

/// The kind of a [`ConfigError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file or directory could not be read.
    Io,
    /// The text is not YAML (or uses YAML the loader does not take: tags,
    /// a key written twice in one mapping, an alias to no anchor or to its
    /// own, aliases adding more than
    /// [`MAX_ALIAS_NODES`](super::MAX_ALIAS_NODES) nodes, nesting deeper
    /// than [`MAX_NESTING`](super::MAX_NESTING)).
    Syntax,
    /// A field this format does not have (a misspelt `rate_limt`).
    UnknownField,
    /// A required field is missing (`domain`, `key`, `unit` or `window`).
    Missing,
    /// A value of the wrong kind or out of range (a negative
    /// `requests_per_unit`, an unknown unit or algorithm).
    InvalidValue,
    /// Two fields that cannot go together (`unit` and `window`,
    /// `unlimited: true` and a unit, `burst` on a fixed window...).
    Conflict,
    /// Two descriptors with the same key and value at one level.
    DuplicateDescriptor,
    /// Two files with one domain.
    DuplicateDomain,
    /// A limit ratebound's core cannot represent (its error is quoted).
    Unrepresentable,
    /// A field of the reference server that this server does not honour
    /// (`quota_mode: true`).
    Unsupported,
}

/// A configuration refused: the place of the bad value and a message
/// naming it.
///
/// Displayed as `path:line:column: message`, e.g.
/// `limits.yaml:7:26: requests_per_unit must be a whole number from 0 to 4294967295, got -5`
/// (`path: message` when there is no line: a file that cannot be read).
/// A file is checked up to its first error: that one is reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// What is wrong.
    pub kind: ConfigErrorKind,
    /// Where: the file, and the line and column of the bad value (of the
    /// mapping that lacks a field, for a missing one).
    pub place: Place,
    /// The message, naming the bad value.
    pub message: String,
}

impl ConfigError {
    /// An error of `kind` at `place`.
    pub fn new(kind: ConfigErrorKind, place: Place, message: impl Into<String>) -> ConfigError {
        ConfigError {
            kind,
            place,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.place.file.display();
        if self.place.line == 0 {
            write!(f, "{file}: {}", self.message)
        } else {
            write!(
                f,
                "{file}:{}:{}: {}",
                self.place.line, self.place.column, self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}
