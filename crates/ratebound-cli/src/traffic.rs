//! Traffic to replay: built-in shapes, or a file of `timestamp[,key][,n]`
//! rows (CSV) or JSON lines, e.g. cut from an access log.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::Path;

use crate::{CliError, SECOND};

/// One request: when (ns from the start), whose (an index into
/// [`Traffic::keys`]) and how many tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub t: u64,
    pub key: u32,
    pub n: u64,
}

/// Requests in time order, and the keys they name.
#[derive(Debug, Default)]
pub struct Traffic {
    pub events: Vec<Event>,
    pub keys: Vec<String>,
    /// The span to report and plot (at least the last request's time).
    pub duration: u64,
    /// What the traffic was, for titles.
    pub name: String,
}

/// Interns key names.
#[derive(Default)]
struct Keys {
    index: HashMap<String, u32>,
    names: Vec<String>,
}

impl Keys {
    fn id(&mut self, key: &str) -> Result<u32, CliError> {
        if let Some(&id) = self.index.get(key) {
            return Ok(id);
        }
        let id = u32::try_from(self.names.len())
            .map_err(|_| CliError::new("more than 2^32 distinct keys"))?;
        self.index.insert(key.to_string(), id);
        self.names.push(key.to_string());
        Ok(id)
    }
}

/// The request rate of a shape: a number per second, or `N/unit`
/// (`s`, `min`, `h`).
fn rate_per_second(spec: &str, what: &str) -> Result<f64, CliError> {
    let (num, unit) = spec.split_once('/').unwrap_or((spec, "s"));
    let n: f64 = num.trim().parse().map_err(|_| {
        CliError::new(format!(
            "{what}: {spec:?} is not a rate (e.g. 100 or 100/s)"
        ))
    })?;
    let per = match unit.trim() {
        "s" | "sec" | "second" => 1.0,
        "m" | "min" | "minute" => 60.0,
        "h" | "hour" => 3600.0,
        other => {
            return Err(CliError::new(format!(
                "{what}: unknown time unit {other:?} (s, min, h)"
            )));
        }
    };
    let rate = n / per;
    if !rate.is_finite() || rate <= 0.0 {
        return Err(CliError::new(format!(
            "{what}: the rate must be a positive number, not {spec:?}"
        )));
    }
    Ok(rate)
}

/// The most requests a built-in shape may make (a typo such as
/// `steady:1e12/s` would otherwise fill the memory).
const MAX_EVENTS: f64 = 100_000_000.0;

/// Refuses a shape that would make more than [`MAX_EVENTS`] requests.
fn bounded(what: &str, expected: f64) -> Result<(), CliError> {
    if expected > MAX_EVENTS {
        return Err(CliError::new(format!(
            "{what} would make about {expected:.0} requests, more than {MAX_EVENTS:.0}: lower the rate or --duration"
        )));
    }
    Ok(())
}

/// `count` requests evenly spread over `[start, start + span)` for `key`.
fn steady(events: &mut Vec<Event>, key: u32, start: u64, span: u64, rate: f64) {
    let gap = (SECOND as f64 / rate).max(1.0);
    let mut t = start as f64;
    while t < (start + span) as f64 {
        events.push(Event {
            t: t as u64,
            key,
            n: 1,
        });
        t += gap;
    }
}

/// A small deterministic generator (splitmix64): the same seed replays the
/// same traffic on every machine.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// What the built-in shapes are given besides their own arguments.
pub struct ShapeArgs {
    pub duration: u64,
    pub seed: u64,
    /// The window limit and length, for `boundary`.
    pub limit: u64,
    pub window: u64,
    /// The per-key rate of the limit (requests per second), for
    /// `noisy-neighbour`.
    pub rate: f64,
}

/// A built-in shape: `steady:RATE`, `burst:N@T`, `boundary`,
/// `poisson:RATE`, `noisy-neighbour` or `incident`.
pub fn shape(spec: &str, args: &ShapeArgs) -> Result<Traffic, CliError> {
    let mut keys = Keys::default();
    let mut events = Vec::new();
    let (name, arg) = spec.split_once(':').unwrap_or((spec, ""));
    let needs_arg = |what: &str| {
        if arg.is_empty() {
            Err(CliError::new(format!(
                "--traffic {name} needs an argument: {what}"
            )))
        } else {
            Ok(())
        }
    };
    let mut duration = args.duration;
    match name {
        "steady" => {
            needs_arg("steady:RATE, e.g. steady:20/s")?;
            let rate = rate_per_second(arg, "--traffic steady")?;
            bounded("--traffic steady", rate * args.duration as f64 / 1e9)?;
            steady(&mut events, keys.id("-")?, 0, args.duration, rate);
        }
        "burst" => {
            needs_arg("burst:N@T, e.g. burst:100@5s")?;
            let (n, at) = arg.split_once('@').ok_or_else(|| {
                CliError::new(format!(
                    "--traffic burst:{arg}: expected N@T, e.g. burst:100@5s"
                ))
            })?;
            let n: u64 = n.trim().parse().map_err(|_| {
                CliError::new(format!(
                    "--traffic burst: {n:?} is not a whole number of requests"
                ))
            })?;
            bounded("--traffic burst", n as f64)?;
            let at = crate::parse_duration(at, "--traffic burst time")?;
            let key = keys.id("-")?;
            events.extend((0..n).map(|_| Event { t: at, key, n: 1 }));
            duration = duration.max(at + SECOND);
        }
        "boundary" => {
            // The limit just before a window boundary and again just after.
            let key = keys.id("-")?;
            let tenth = SECOND / 10;
            let before = args.window.saturating_sub(tenth);
            for at in [before, args.window + tenth] {
                events.extend((0..args.limit).map(|_| Event { t: at, key, n: 1 }));
            }
            duration = 2 * args.window;
        }
        "poisson" => {
            needs_arg("poisson:RATE, e.g. poisson:50/s")?;
            let rate = rate_per_second(arg, "--traffic poisson")?;
            bounded("--traffic poisson", rate * args.duration as f64 / 1e9)?;
            let key = keys.id("-")?;
            let mut rng = SplitMix::new(args.seed);
            let mut t = 0.0;
            loop {
                t += -rng.unit().ln() / rate * SECOND as f64;
                if t >= args.duration as f64 {
                    break;
                }
                events.push(Event {
                    t: t as u64,
                    key,
                    n: 1,
                });
            }
        }
        "noisy-neighbour" | "noisy-neighbor" => {
            // One key sends five times the limit; nine others half of it.
            bounded(
                "--traffic noisy-neighbour",
                9.5 * args.rate * args.duration as f64 / 1e9,
            )?;
            let noisy = keys.id("noisy")?;
            steady(&mut events, noisy, 0, args.duration, 5.0 * args.rate);
            for i in 1..=9 {
                let k = keys.id(&format!("quiet-{i}"))?;
                // Offset each quiet key a little so they do not all arrive at once.
                steady(
                    &mut events,
                    k,
                    i * 1_000_000,
                    args.duration,
                    0.5 * args.rate,
                );
            }
        }
        "incident" => {
            // 50 instances, each behind its own local limiter, share 1000
            // requests per second round-robin.
            bounded("--traffic incident", 1000.0 * args.duration as f64 / 1e9)?;
            let pods: Vec<u32> = (0..50)
                .map(|i| keys.id(&format!("pod-{i:02}")))
                .collect::<Result<_, _>>()?;
            let gap = SECOND / 1000;
            let mut t = 0;
            let mut i = 0;
            while t < args.duration {
                events.push(Event {
                    t,
                    key: pods[i % pods.len()],
                    n: 1,
                });
                t += gap;
                i += 1;
            }
        }
        other => {
            return Err(CliError::new(format!(
                "unknown traffic {other:?}: use steady:RATE, burst:N@T, boundary, poisson:RATE, \
                 noisy-neighbour, incident, or a file path"
            )));
        }
    }
    events.sort_by_key(|e| e.t);
    let last = events.last().map_or(0, |e| e.t);
    Ok(Traffic {
        events,
        keys: keys.names,
        duration: duration.max(last + 1),
        name: spec.to_string(),
    })
}

/// A timestamp: seconds (a number) or RFC 3339, as nanoseconds since the
/// Unix epoch (seconds count from 0 as given).
fn timestamp(text: &str) -> Result<i128, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        if !secs.is_finite() {
            return Err(format!("{text:?} is not a finite number of seconds"));
        }
        return Ok((secs * 1e9).round() as i128);
    }
    rfc3339(text)
}

fn digits(s: &str, what: &str) -> Result<i64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad {what} {s:?}"));
    }
    s.parse().map_err(|_| format!("bad {what} {s:?}"))
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn rfc3339(text: &str) -> Result<i128, String> {
    let bad = || format!("{text:?} is neither seconds nor an RFC 3339 time");
    if text.len() < 20 || !text.is_ascii() {
        return Err(bad());
    }
    let (date, rest) = text.split_at(10);
    let sep = rest.as_bytes()[0];
    if sep != b'T' && sep != b't' && sep != b' ' {
        return Err(bad());
    }
    let rest = &rest[1..];
    let d: Vec<&str> = date.split('-').collect();
    if d.len() != 3 {
        return Err(bad());
    }
    let (year, month, day) = (
        digits(d[0], "year")?,
        digits(d[1], "month")?,
        digits(d[2], "day")?,
    );
    let (clock, zone) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => rest.split_at(i),
        None => return Err(format!("{text:?}: missing time zone (Z or ±HH:MM)")),
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let h: Vec<&str> = hms.split(':').collect();
    if h.len() != 3 {
        return Err(bad());
    }
    let (hour, minute, second) = (
        digits(h[0], "hour")?,
        digits(h[1], "minute")?,
        digits(h[2], "second")?,
    );
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(format!("{text:?}: a field is out of range"));
    }
    let mut nanos: i128 = 0;
    if !frac.is_empty() {
        digits(frac, "fraction")?;
        let padded = format!("{frac:0<9}");
        nanos = padded[..9].parse::<i128>().map_err(|_| bad())?;
    }
    let offset = match zone {
        "Z" | "z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let (oh, om) = z[1..].split_once(':').ok_or_else(bad)?;
            sign * (digits(oh, "offset hour")? * 3600 + digits(om, "offset minute")? * 60)
        }
    };
    // Days from the civil date (proleptic Gregorian), after H. Hinnant.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Ok(i128::from(secs) * 1_000_000_000 + nanos)
}

/// One row's fields: timestamp, optional key, optional n.
struct Row {
    t: i128,
    key: Option<String>,
    n: u64,
}

fn csv_row(line: &str) -> Result<Row, (usize, String)> {
    let fields: Vec<&str> = line.split(',').collect();
    if fields.len() > 3 {
        let col = fields[..3].iter().map(|f| f.len() + 1).sum::<usize>() + 1;
        return Err((col, "too many fields (timestamp[,key][,n])".to_string()));
    }
    let t = timestamp(fields[0]).map_err(|e| (1, e))?;
    let key = fields.get(1).map(|k| k.trim().to_string());
    let n = match fields.get(2) {
        None => 1,
        Some(f) => {
            let col = fields[0].len() + fields[1].len() + 3;
            f.trim()
                .parse::<u64>()
                .map_err(|_| (col, format!("n {:?} is not a whole number", f.trim())))?
        }
    };
    Ok(Row { t, key, n })
}

fn json_row(line: &str) -> Result<Row, (usize, String)> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| (e.column().max(1), format!("bad JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| (1, "each JSON line must be an object".to_string()))?;
    let t = match obj
        .get("t")
        .or_else(|| obj.get("timestamp"))
        .or_else(|| obj.get("time"))
    {
        Some(serde_json::Value::Number(n)) => {
            let secs = n.as_f64().unwrap_or(f64::NAN);
            timestamp(&secs.to_string()).map_err(|e| (1, e))?
        }
        Some(serde_json::Value::String(s)) => timestamp(s).map_err(|e| (1, e))?,
        _ => {
            return Err((
                1,
                "missing \"t\" (seconds or an RFC 3339 string)".to_string(),
            ));
        }
    };
    let key = match obj.get("key") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    };
    let n = match obj.get("n") {
        None => 1,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| (1, format!("\"n\" must be a whole number, not {v}")))?,
    };
    Ok(Row { t, key, n })
}

/// Rows from a file; times become offsets from the earliest row. A progress
/// bar appears on stderr once a million rows have been read, if stderr is
/// a terminal.
pub fn file(path: &Path) -> Result<Traffic, CliError> {
    let f = File::open(path)
        .map_err(|e| CliError::new(format!("cannot read {}: {e}", path.display())))?;
    let total = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = BufReader::new(f);
    let mut keys = Keys::default();
    let mut rows: Vec<(i128, u32, u64)> = Vec::new();
    let mut line = String::new();
    let mut read = 0u64;
    let mut number = 0usize;
    let mut bar: Option<indicatif::ProgressBar> = None;
    let anonymous = "-";
    loop {
        line.clear();
        let got = reader
            .read_line(&mut line)
            .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
        if got == 0 {
            break;
        }
        read += got as u64;
        number += 1;
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() || text.starts_with('#') {
            continue;
        }
        let first = text.trim_start().as_bytes().first().copied();
        let parsed = if first == Some(b'{') {
            json_row(text)
        } else {
            csv_row(text)
        };
        let row = match parsed {
            Ok(row) => row,
            // A CSV header line is skipped.
            Err(_)
                if rows.is_empty()
                    && number == 1
                    && first.is_some_and(|b| b.is_ascii_alphabetic()) =>
            {
                continue;
            }
            Err((col, msg)) => {
                return Err(CliError::new(format!(
                    "{}: line {number}, column {col}: {msg}",
                    path.display()
                )));
            }
        };
        let key = keys.id(row.key.as_deref().unwrap_or(anonymous))?;
        rows.push((row.t, key, row.n));
        if rows.len() == 1_000_000 && std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_message("reading traffic");
            bar = Some(b);
        }
        if let Some(b) = &bar
            && rows.len().is_multiple_of(65_536)
        {
            b.set_position(read);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if rows.is_empty() {
        return Err(CliError::new(format!(
            "{}: no requests in the file",
            path.display()
        )));
    }
    rows.sort_by_key(|r| r.0);
    let start = rows[0].0;
    let events: Vec<Event> = rows
        .into_iter()
        .map(|(t, key, n)| Event {
            t: u64::try_from(t - start).unwrap_or(u64::MAX),
            key,
            n,
        })
        .collect();
    let last = events.last().map_or(0, |e| e.t);
    Ok(Traffic {
        events,
        keys: keys.names,
        duration: last + 1,
        name: path.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(rfc3339("1970-01-01T00:00:01.5Z"), Ok(1_500_000_000));
        assert_eq!(
            rfc3339("2024-02-29T12:00:00+01:00"),
            Ok(1_709_204_400_000_000_000)
        );
        assert!(rfc3339("2024-13-01T00:00:00Z").is_err());
        assert!(rfc3339("yesterday").is_err());
    }

    #[test]
    fn csv_and_json_rows() {
        let r = csv_row("1.5,alice,3").map_err(|e| e.1).unwrap();
        assert_eq!(
            (r.t, r.key.as_deref(), r.n),
            (1_500_000_000, Some("alice"), 3)
        );
        assert_eq!(csv_row("1,a,x").err().map(|e| e.0), Some(5));
        let r = json_row(r#"{"t": "1970-01-01T00:00:02Z", "key": "bob"}"#)
            .map_err(|e| e.1)
            .unwrap();
        assert_eq!(
            (r.t, r.key.as_deref(), r.n),
            (2_000_000_000, Some("bob"), 1)
        );
    }
}
