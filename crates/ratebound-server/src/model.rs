//! The rules a configuration holds, once read and checked: domains, their
//! trees of descriptors, and each descriptor's limits.
//!
//! The shape is the reference server's (envoyproxy/ratelimit's YAML:
//! `domain`, nested `descriptors` with `key`, `value`, `rate_limit`,
//! `shadow_mode`, `replaces`, `detailed_metric`, `value_to_metric`,
//! `share_threshold`) with ratebound's extensions in the same block:
//! `algorithm`, `burst`, `window` (a duration instead of `unit`) and
//! `rate_limits` (several limits on one descriptor, all-or-nothing).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Where a value was written: the file, its line and column (from 1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// The file read (empty for a text given in memory).
    pub file: PathBuf,
    /// The line, from 1 (0: unknown).
    pub line: usize,
    /// The column, from 1 (0: unknown).
    pub column: usize,
}

/// The reference server's units, and the length of a window of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3 600 s.
    Hour,
    /// 86 400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The length of one unit.
    pub fn length(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        })
    }

    /// The name in the configuration (`"second"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}

/// How a limit decides. The reference server has only the fixed window,
/// the default (an existing file means what it meant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// `requests_per_unit` per window, windows aligned to multiples of
    /// their length since the Unix epoch (as the reference server's).
    #[default]
    FixedWindow,
    /// The sliding window counter: the last window's count weighted by how
    /// much of it the sliding window still covers.
    SlidingWindow,
    /// A token bucket (GCRA): `requests_per_unit` per window on average,
    /// `burst` at once.
    TokenBucket,
    /// The exact sliding log.
    SlidingLog,
}

impl Algorithm {
    /// The name in the configuration (`"fixed_window"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::SlidingLog => "sliding_log",
        }
    }
}

/// A window's length: one of the reference server's units, or a duration
/// (`window: 30s`, ratebound's extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// The unit written (`unit:`), or the unit the answers name for a
    /// `window:` (the largest unit that divides it; `Second` at least).
    pub unit: Unit,
    /// The window's length (at least 1 ms).
    pub length: Duration,
}

/// One limit: a `rate_limit` block, or one entry of `rate_limits`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// `name`: what `replaces` names, and what the answers call the limit.
    pub name: Option<String>,
    /// `algorithm` (default `fixed_window`).
    pub algorithm: Algorithm,
    /// `requests_per_unit`: per window (0: every request is over the limit,
    /// as the reference server's "black list" entries).
    pub requests_per_unit: u64,
    /// `unit` or `window`.
    pub window: Window,
    /// `burst` (a token bucket's; `None`: `requests_per_unit`).
    pub burst: Option<u64>,
    /// Where the block begins.
    pub place: Place,
}

/// What a descriptor's rule says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `unlimited: true`: always OK, remaining `u32::MAX`, nothing counted.
    Unlimited,
    /// One limit (`rate_limit`) or several (`rate_limits`), all of which
    /// must admit a request (nothing is charged to any when one refuses).
    Limits(Vec<Limit>),
}

/// A descriptor's `value`: exact, or a pattern with `*` (each matching zero
/// or more characters, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An exact value.
    Exact(String),
    /// A pattern: the text between its `*`s (the first and last may be
    /// empty: `value*` is `["value", ""]`).
    Wildcard(Vec<String>),
}

/// One entry of a `descriptors` list, with what is nested below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// `key`.
    pub key: String,
    /// `value` (`None`: any value, each its own limit).
    pub value: Option<Value>,
    /// `rate_limit` / `rate_limits` (`None`: a placeholder for nested
    /// descriptors, or a descriptor let through).
    pub rule: Option<Rule>,
    /// `replaces`: the names of the limits this one's replaces when both
    /// match one request.
    pub replaces: Vec<String>,
    /// `shadow_mode`: decided and counted, always answered OK.
    pub shadow_mode: bool,
    /// `detailed_metric`.
    pub detailed_metric: bool,
    /// `value_to_metric`.
    pub value_to_metric: bool,
    /// `share_threshold` (a wildcard value only): every value matching it
    /// shares one limit.
    pub share_threshold: bool,
    /// `descriptors`.
    pub children: Vec<Descriptor>,
    /// Where the entry begins.
    pub place: Place,
}

/// One domain: a file's rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// `domain`.
    pub name: String,
    /// `descriptors`.
    pub descriptors: Vec<Descriptor>,
    /// Where the domain was read.
    pub place: Place,
}

/// Every domain the server knows, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The domains.
    pub domains: BTreeMap<String, Domain>,
}
