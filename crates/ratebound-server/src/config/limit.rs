//! One `rate_limit` block: the reference server's fields (`unit`,
//! `requests_per_unit`, `unlimited`, `name`, `replaces`) and ratebound's
//! (`algorithm`, `burst`, `window`), checked against the core.

use std::time::Duration;

use marked_yaml::types::MarkedMappingNode;
use ratebound::{KeyedAlgorithm, Quota, SlidingLog, WordRule};

use super::error::{ConfigError, ConfigErrorKind};
use super::yaml::Src;
use crate::model::{Algorithm, Limit, Unit, Window};

/// The fields of a `rate_limit` block.
const FIELDS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "window",
];

/// The units, in the order of the reference's enum (read case-insensitively,
/// as it reads them).
const UNITS: [Unit; 7] = [
    Unit::Second,
    Unit::Minute,
    Unit::Hour,
    Unit::Day,
    Unit::Week,
    Unit::Month,
    Unit::Year,
];

const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::TokenBucket,
    Algorithm::SlidingLog,
];

/// A block read: a limit or `unlimited: true`, with its `replaces`.
pub(crate) struct Block {
    /// `None`: `unlimited: true`.
    pub(crate) limit: Option<Limit>,
    /// The `replaces` names.
    pub(crate) replaces: Vec<String>,
}

/// Reads one `rate_limit` block (or an entry of `rate_limits`).
pub(crate) fn read_block(src: Src<'_>, map: &MarkedMappingNode) -> Result<Block, ConfigError> {
    src.known_fields(map, "rate_limit", FIELDS)?;
    let name = src.string(map, "name")?.map(|s| s.as_str().to_string());
    let replaces = read_replaces(src, map, name.as_deref())?;
    let (unlimited, _) = src.boolean(map, "unlimited")?;
    if unlimited {
        for field in ["unit", "requests_per_unit", "window", "algorithm", "burst"] {
            if let Some((key, _)) = map.get_key_value(field) {
                return Err(src.error(
                    ConfigErrorKind::Conflict,
                    key.span(),
                    format!("{field} cannot go with unlimited: true"),
                ));
            }
        }
        return Ok(Block {
            limit: None,
            replaces,
        });
    }
    let window = read_window(src, map)?;
    let requests_per_unit = src
        .whole(map, "requests_per_unit", 0, u64::from(u32::MAX))?
        .map(|(n, _)| n)
        // As the reference server: a block without requests_per_unit
        // allows none.
        .unwrap_or(0);
    let algorithm = match src.string(map, "algorithm")? {
        None => Algorithm::default(),
        Some(s) => ALGORITHMS
            .into_iter()
            .find(|a| a.name() == s.as_str())
            .ok_or_else(|| {
                src.error(
                    ConfigErrorKind::InvalidValue,
                    s.span(),
                    format!(
                        "unknown algorithm '{}' (expected fixed_window, sliding_window, token_bucket or sliding_log)",
                        s.as_str()
                    ),
                )
            })?,
    };
    let burst = src.whole(map, "burst", 1, u64::MAX)?;
    if let Some((_, span)) = &burst {
        if algorithm != Algorithm::TokenBucket {
            return Err(src.error(
                ConfigErrorKind::Conflict,
                span,
                format!(
                    "burst is for algorithm: token_bucket only, this rate_limit's algorithm is {}",
                    algorithm.name()
                ),
            ));
        }
        if requests_per_unit == 0 {
            return Err(src.error(
                ConfigErrorKind::Conflict,
                span,
                "burst cannot go with requests_per_unit: 0 (every request is refused)",
            ));
        }
    }
    let limit = Limit {
        name,
        algorithm,
        requests_per_unit,
        window,
        burst: burst.map(|(b, _)| b),
        place: src.place(&Src::map_span(map)),
    };
    if let Err(reason) = representable(&limit) {
        return Err(src.error(
            ConfigErrorKind::Unrepresentable,
            &Src::map_span(map),
            format!(
                "{} requests per {} with {} cannot be represented: {reason}",
                limit.requests_per_unit,
                show_duration(limit.window.length),
                limit.algorithm.name()
            ),
        ));
    }
    Ok(Block {
        limit: Some(limit),
        replaces,
    })
}

/// `replaces: [{name: ...}]`: each a name, none the block's own.
fn read_replaces(
    src: Src<'_>,
    map: &MarkedMappingNode,
    own: Option<&str>,
) -> Result<Vec<String>, ConfigError> {
    let Some(list) = src.sequence(map, "replaces")? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for node in list.iter() {
        let entry = src.entry(node, "replaces")?;
        src.known_fields(entry, "a replaces entry", &["name"])?;
        let name = src.string(entry, "name")?.map(|s| (s.as_str(), *s.span()));
        match name {
            Some((n, _)) if !n.is_empty() && Some(n) != own => names.push(n.to_string()),
            Some((n, span)) if !n.is_empty() => {
                return Err(src.error(
                    ConfigErrorKind::Conflict,
                    &span,
                    format!("a rate_limit cannot replace itself ('{n}' is its own name)"),
                ));
            }
            _ => {
                return Err(src.error(
                    ConfigErrorKind::Missing,
                    &Src::map_span(entry),
                    "a replaces entry needs a name",
                ));
            }
        }
    }
    Ok(names)
}

/// `unit:` or `window:`, exactly one.
fn read_window(src: Src<'_>, map: &MarkedMappingNode) -> Result<Window, ConfigError> {
    let unit = src.string(map, "unit")?;
    let window = src.string(map, "window")?;
    match (unit, window) {
        (Some(_), Some(w)) => Err(src.error(
            ConfigErrorKind::Conflict,
            w.span(),
            "a rate_limit has unit or window, not both",
        )),
        (None, None) => Err(src.error(
            ConfigErrorKind::Missing,
            &Src::map_span(map),
            "a rate_limit needs a unit (second, minute, hour, day, week, month or year) or a window (e.g. 30s)",
        )),
        (Some(u), None) => {
            let upper = u.as_str().to_ascii_uppercase();
            UNITS
                .into_iter()
                .find(|unit| unit.name().to_ascii_uppercase() == upper)
                .map(|unit| Window {
                    unit,
                    length: unit.length(),
                })
                .ok_or_else(|| {
                    src.error(
                        ConfigErrorKind::InvalidValue,
                        u.span(),
                        format!(
                            "unknown unit '{}' (expected second, minute, hour, day, week, month or year)",
                            u.as_str()
                        ),
                    )
                })
        }
        (None, Some(w)) => parse_window(w.as_str()).map_err(|reason| {
            src.error(
                ConfigErrorKind::InvalidValue,
                w.span(),
                format!("window {reason}, got '{}'", w.as_str()),
            )
        }),
    }
}

/// A `window:` duration: a whole number and one of `ms`, `s`, `m`, `h`,
/// `d`. Its [`Window::unit`] is the largest unit that divides it, at least
/// [`Unit::Second`]: `1500ms` reports `SECOND` (its `requests_per_unit`
/// counting per window of 1.5 s), `90s` `SECOND`, `2m` `MINUTE`, `7d`
/// `WEEK`.
///
/// # Errors
/// The reason, for a text that is not such a duration (or is zero or
/// longer than a year's 2^60 ns bound).
pub fn parse_window(text: &str) -> Result<Window, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let millis_per: u64 = match suffix.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("must be a whole number and a unit: 500ms, 30s, 5m, 1h or 1d".into()),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| "must be a whole number and a unit: 500ms, 30s, 5m, 1h or 1d".to_string())?;
    if n == 0 {
        return Err("must be longer than zero".into());
    }
    let millis = n
        .checked_mul(millis_per)
        .filter(|&ms| u128::from(ms) * 1_000_000 <= u128::from(ratebound::MAX_SPAN_NANOS))
        .ok_or_else(|| {
            "is longer than the 2^60 ns (about 36 years) a limit can span".to_string()
        })?;
    let length = Duration::from_millis(millis);
    let unit = UNITS
        .into_iter()
        .rev()
        .find(|u| millis.is_multiple_of(u.length().as_secs() * 1_000))
        .unwrap_or(Unit::Second);
    Ok(Window { unit, length })
}

/// Asks the core whether it can build `limit` (the keyed limiters' rules,
/// whose state words are the tightest; the sliding log's own bounds).
/// `requests_per_unit: 0` needs no state: nothing is asked.
fn representable(limit: &Limit) -> Result<(), ratebound::Error> {
    let n = limit.requests_per_unit;
    let window = limit.window.length;
    if n == 0 {
        return Ok(());
    }
    match limit.algorithm {
        Algorithm::FixedWindow => {
            WordRule::new(KeyedAlgorithm::FixedWindow { limit: n, window }).map(drop)
        }
        Algorithm::SlidingWindow => {
            WordRule::new(KeyedAlgorithm::SlidingWindow { limit: n, window }).map(drop)
        }
        Algorithm::TokenBucket => {
            let quota = token_bucket_quota(n, window, limit.burst)?;
            WordRule::new(KeyedAlgorithm::TokenBucket(quota)).map(drop)
        }
        Algorithm::SlidingLog => SlidingLog::new(n, window).map(drop),
    }
}

/// The token bucket of `n` per `window`, `burst` at once (default `n`):
/// one token every `window / n` (rounded up to the nanosecond by the core).
///
/// # Errors
/// The core's, for a rate or a burst it cannot hold.
pub fn token_bucket_quota(
    n: u64,
    window: Duration,
    burst: Option<u64>,
) -> Result<Quota, ratebound::Error> {
    Quota::parse(&format!("{n}/{}ns", window.as_nanos()))?.with_burst(burst.unwrap_or(n))
}

/// `1500ms`, `30s`, `5m`... for messages.
fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (size, name) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{name}", ms / size);
        }
    }
    format!("{ms}ms")
}
