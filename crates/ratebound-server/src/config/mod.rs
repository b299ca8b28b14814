//! Reading a configuration: the reference server's YAML (envoyproxy/ratelimit's,
//! read unchanged) with ratebound's extensions, into a [`Config`].
//!
//! A file holds one domain:
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: remote_address
//!     rate_limit:            # the reference server's fields
//!       unit: second
//!       requests_per_unit: 10
//!   - key: api_key
//!     rate_limits:           # ratebound's: several limits, all-or-nothing
//!       - requests_per_unit: 20
//!         window: 2s         # a duration instead of a unit
//!         algorithm: token_bucket
//!         burst: 40
//!       - requests_per_unit: 10000
//!         unit: day
//! ```
//!
//! What is checked, each refused with a [`ConfigError`] naming the file,
//! the line, the column and the bad value (the first error of a file):
//! YAML syntax (tags and a key written twice in one mapping are refused
//! too; anchors, aliases and merge keys are read as the reference server
//! reads them, bounded: see [`MAX_ALIAS_NODES`]); unknown fields, per level (the reference
//! refuses a key it knows nowhere; a misplaced one it ignores, this reader
//! refuses it: `rate_limt` or a `unit` beside `key` is a mistake, not a
//! choice); `requests_per_unit` a whole number from 0 to 2^32 − 1 (absent:
//! 0, as the reference); the unit, case-insensitive, one of the reference's
//! seven (second, minute, hour, day, week, month, year); `algorithm`,
//! `burst` (token bucket only), `window` (not with `unit`); `unlimited: true`
//! alone (no unit, requests, window, algorithm or burst); `rate_limit` or
//! `rate_limits`, not both; `share_threshold` only on a wildcard value;
//! `replaces` entries named, never the block's own name; two descriptors of
//! one level with the same key and value; a missing `domain` or `key`; two
//! files with one domain; `quota_mode: true` (not honoured here; `false`
//! and `metadata` are accepted, `metadata` ignored); a limit the core
//! cannot represent (asked of its constructors).

use std::path::{Path, PathBuf};

use crate::model::{Config, Descriptor, Domain, Place, Rule};

mod alias;
mod error;
mod limit;
mod load;
mod read;
mod yaml;

pub use error::{ConfigError, ConfigErrorKind};
pub use limit::{parse_window, token_bucket_quota};
pub use load::{MAX_ALIAS_NODES, MAX_NESTING};
pub use read::MAX_DEPTH;
pub(crate) use read::value_text;

impl Config {
    /// Reads `path`: a YAML file, or a directory of them (every `*.yaml`
    /// and `*.yml` file in it, not in its subdirectories, sorted by name;
    /// names beginning with `.` are skipped: editors' and Kubernetes'
    /// hidden entries), one domain per file.
    ///
    /// # Errors
    /// [`ConfigError`]: a file or directory that cannot be read, a
    /// directory without a YAML file, the first error of a file, two files
    /// with one domain.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let (files, _) = config_files(path)?;
        let mut config = Config::default();
        for file in &files {
            let text = std::fs::read_to_string(file).map_err(|e| io_error(file, &e))?;
            config.add(Config::parse_domain(&text, file)?)?;
        }
        Ok(config)
    }

    /// Reads one file's `text` (`file` names it in errors and places).
    ///
    /// # Errors
    /// [`ConfigError`]: the text's first error.
    pub fn parse(text: &str, file: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        config.add(Config::parse_domain(text, file.as_ref())?)?;
        Ok(config)
    }

    fn parse_domain(text: &str, file: &Path) -> Result<Domain, ConfigError> {
        read::read_domain(file, text)
    }

    /// Adds `domain`, refusing a second domain of one name.
    fn add(&mut self, domain: Domain) -> Result<(), ConfigError> {
        if let Some(first) = self.domains.get(&domain.name) {
            return Err(ConfigError::new(
                ConfigErrorKind::DuplicateDomain,
                domain.place.clone(),
                format!(
                    "domain '{}' is also in {} (one domain per file)",
                    domain.name,
                    first.place.file.display()
                ),
            ));
        }
        self.domains.insert(domain.name.clone(), domain);
        Ok(())
    }
}

fn io_error(path: &Path, error: &std::io::Error) -> ConfigError {
    ConfigError::new(
        ConfigErrorKind::Io,
        Place {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
        },
        format!("cannot read: {error}"),
    )
}

/// The files [`Config::load`] reads for `path` (`path` itself, or the
/// YAML files of the directory `path`, sorted), and the entries of the
/// directory it passes over (other files, hidden ones, subdirectories),
/// sorted: the reference server loads every file of its runtime
/// directory's tree, so a file left out here is worth a word.
///
/// # Errors
/// [`ConfigError`] of kind [`Io`](ConfigErrorKind::Io) for a path that
/// cannot be read, [`Missing`](ConfigErrorKind::Missing) for a directory
/// without a YAML file.
pub fn config_files(path: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), ConfigError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    if !meta.is_dir() {
        return Ok((vec![path.to_path_buf()], Vec::new()));
    }
    let (mut files, mut skipped) = (Vec::new(), Vec::new());
    for entry in std::fs::read_dir(path).map_err(|e| io_error(path, &e))? {
        let entry = entry.map_err(|e| io_error(path, &e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        // Follows symbolic links (a Kubernetes ConfigMap's files are links).
        if yaml && !name.starts_with('.') && entry.path().is_file() {
            files.push(entry.path());
        } else {
            skipped.push(entry.path());
        }
    }
    if files.is_empty() {
        return Err(ConfigError::new(
            ConfigErrorKind::Missing,
            Place {
                file: path.to_path_buf(),
                line: 0,
                column: 0,
            },
            "the directory has no *.yaml or *.yml file",
        ));
    }
    files.sort();
    skipped.sort();
    Ok((files, skipped))
}

/// What a configuration holds, for `ratebound serve --check` to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The files read.
    pub files: Vec<PathBuf>,
    /// What a directory holds besides them (see [`config_files`]).
    pub skipped: Vec<PathBuf>,
    /// The domains, by name.
    pub domains: Vec<String>,
    /// Descriptors in all (placeholders included).
    pub descriptors: usize,
    /// Descriptors with a rule (`rate_limit` or `rate_limits`).
    pub rules: usize,
    /// Limits in all (a `rate_limits` list counts each).
    pub limits: usize,
    /// Unlimited rules.
    pub unlimited: usize,
}

impl Summary {
    /// Counts `config` (its files left empty).
    pub fn of(config: &Config) -> Summary {
        fn walk(list: &[Descriptor], s: &mut Summary) {
            for d in list {
                s.descriptors += 1;
                match &d.rule {
                    Some(Rule::Unlimited) => {
                        s.rules += 1;
                        s.unlimited += 1;
                    }
                    Some(Rule::Limits(l)) => {
                        s.rules += 1;
                        s.limits += l.len();
                    }
                    None => {}
                }
                walk(&d.children, s);
            }
        }
        let mut s = Summary {
            domains: config.domains.keys().cloned().collect(),
            ..Summary::default()
        };
        for domain in config.domains.values() {
            walk(&domain.descriptors, &mut s);
        }
        s
    }
}

impl std::fmt::Display for Summary {
    /// `2 domains (a, b): 5 descriptors, 4 rules (1 unlimited), 4 limits`
    /// (the files are for the caller to list).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        write!(
            f,
            "{} ({}): {}, {} ({} unlimited), {}",
            plural(self.domains.len(), "domain", "domains"),
            self.domains.join(", "),
            plural(self.descriptors, "descriptor", "descriptors"),
            plural(self.rules, "rule", "rules"),
            self.unlimited,
            plural(self.limits, "limit", "limits"),
        )
    }
}

/// Reads `path` as [`Config::load`] does and counts what it holds: what
/// `ratebound serve --check PATH` prints.
///
/// # Errors
/// [`Config::load`]'s.
pub fn check(path: impl AsRef<Path>) -> Result<Summary, ConfigError> {
    let path = path.as_ref();
    let config = Config::load(path)?;
    let (files, skipped) = config_files(path)?;
    Ok(Summary {
        files,
        skipped,
        ..Summary::of(&config)
    })
}
