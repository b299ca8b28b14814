//! `ratebound serve`'s log: one line per event on stderr, as text
//! (`ratebound serve: <message>`, for a person) or as JSON (`{"ts",
//! "level", "target", "msg", ...fields}`, for a log pipeline). The
//! libraries' own `log` records (the Redis driver's fail-policy episodes:
//! Redis unreachable, the breaker opened, Redis back) go to the same place,
//! so that every fail-policy decision is visible.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

/// How the lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `ratebound serve: <message>`.
    Text,
    /// One JSON object per line.
    Json,
}

impl Format {
    /// `text` or `json`.
    pub fn parse(text: &str) -> Option<Format> {
        match text {
            "text" => Some(Format::Text),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

static FORMAT: OnceLock<Format> = OnceLock::new();

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let message = record.args().to_string();
            line(record.level(), record.target(), &message, &[]);
        }
    }

    fn flush(&self) {}
}

/// Sends the libraries' `log` records, and [`line`]'s, to stderr in
/// `format` (the first call decides).
pub fn init(format: Format) {
    let _ = FORMAT.set(format);
    if log::set_logger(&Logger).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// Writes one event: `message` from `target` at `level`, with `fields`
/// (shown after the message in text).
pub fn line(level: log::Level, target: &str, message: &str, fields: &[(&str, Value)]) {
    let text = match FORMAT.get().copied().unwrap_or(Format::Text) {
        Format::Text => {
            let mut out = String::from("ratebound serve: ");
            if target != "ratebound" {
                out.push_str(&format!("{} {target}: ", level.as_str().to_lowercase()));
            }
            out.push_str(message);
            out
        }
        Format::Json => {
            let mut o = Map::new();
            o.insert("ts".into(), rfc3339(SystemTime::now()).into());
            o.insert("level".into(), level.as_str().to_lowercase().into());
            o.insert("target".into(), target.into());
            o.insert("msg".into(), message.into());
            for (k, v) in fields {
                o.insert((*k).into(), v.clone());
            }
            Value::Object(o).to_string()
        }
    };
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

/// `t` as UTC, e.g. `2026-12-06T06:10:00.123Z`.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        d.subsec_millis()
    )
}

/// The calendar date `days` after 1970-01-01 (the proleptic Gregorian
/// calendar, counted in 400-year eras).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_utc_dates() {
        let at = |s: u64| rfc3339(UNIX_EPOCH + Duration::from_millis(s));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        // 2026-12-06 00:00:00 UTC, and a leap day.
        assert_eq!(at(1_796_515_200_000), "2026-12-06T00:00:00.000Z");
        assert_eq!(at(951_782_400_000 + 3_723_456), "2000-02-29T01:02:03.456Z");
        assert_eq!(at(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    #[test]
    fn formats_are_named() {
        assert_eq!(Format::parse("json"), Some(Format::Json));
        assert_eq!(Format::parse("text"), Some(Format::Text));
        assert_eq!(Format::parse("JSON"), None);
    }
}
