//! Traffic to replay: built-in shapes, or a file of `timestamp[,key][,n]`
//! rows (CSV) or JSON lines, e.g. cut from an access log.
//!
//! Every request is kept in memory, 24 bytes each, because the simulation
//! needs them all before it starts: a file need not be in time order (it is
//! sorted), the plot's time axis is the whole span, and every algorithm
//! replays the same requests. So a simulation holds at most [`MAX_EVENTS`]
//! requests (2.4 GB), whether a shape makes them or a file holds them, over
//! at most [`MAX_SPAN`]. A file is read one line at a time and a line holds
//! at most [`MAX_LINE`] bytes: a longer one (or `/dev/zero`) is an error at
//! that line, after at most that much was read into memory.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::Path;

use crate::{CliError, MAX_SPAN, SECOND, Shown};

/// One request: when (ns from the start), whose (an index into
/// [`Traffic::keys`]) and how many tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub t: u64,
    pub key: u32,
    pub n: u64,
}

/// Requests in time order, and the keys they name.
///
/// At most [`MAX_EVENTS`] requests, spanning at most [`MAX_SPAN`].
#[derive(Debug, Default)]
pub struct Traffic {
    pub events: Vec<Event>,
    pub keys: Vec<String>,
    /// The span to report and plot (at least the last request's time).
    pub duration: u64,
    /// What the traffic was, for titles.
    pub name: String,
}

/// Interns key names (each held once).
#[derive(Default)]
struct Keys {
    index: HashMap<String, u32>,
}

impl Keys {
    fn id(&mut self, key: &str) -> Result<u32, CliError> {
        if let Some(&id) = self.index.get(key) {
            return Ok(id);
        }
        let id = u32::try_from(self.index.len())
            .map_err(|_| CliError::new("more than 2^32 distinct keys"))?;
        self.index.insert(key.to_string(), id);
        Ok(id)
    }

    /// The names, indexed by id.
    fn into_names(self) -> Vec<String> {
        let mut names = vec![String::new(); self.index.len()];
        for (name, id) in self.index {
            names[id as usize] = name;
        }
        names
    }
}

/// The request rate of a shape: a number per second, or `N/unit`
/// (`s`, `min`, `h`).
fn rate_per_second(spec: &str, what: &str) -> Result<f64, CliError> {
    let (num, unit) = spec.split_once('/').unwrap_or((spec, "s"));
    let n: f64 = num.trim().parse().map_err(|_| {
        CliError::new(format!(
            "{what}: {} is not a rate (e.g. 100 or 100/s)",
            Shown(spec)
        ))
    })?;
    let per = match unit.trim() {
        "s" | "sec" | "second" => 1.0,
        "m" | "min" | "minute" => 60.0,
        "h" | "hour" => 3600.0,
        other => {
            return Err(CliError::new(format!(
                "{what}: unknown time unit {} (s, min, h)",
                Shown(other)
            )));
        }
    };
    let rate = n / per;
    if !rate.is_finite() || rate <= 0.0 {
        return Err(CliError::new(format!(
            "{what}: the rate must be a positive number, not {}",
            Shown(spec)
        )));
    }
    Ok(rate)
}

/// The most requests one simulation replays, from a shape or a file: 2.4 GB
/// of [`Event`]s (a typo such as `steady:1e12/s` would otherwise fill the
/// memory).
pub const MAX_EVENTS: u64 = 100_000_000;

/// The longest line of a traffic file, in bytes (without its `\n`): 1 MiB.
pub const MAX_LINE: usize = 1 << 20;

/// Refuses a shape that would make more than [`MAX_EVENTS`] requests.
fn bounded(what: &str, expected: f64) -> Result<(), CliError> {
    if expected > MAX_EVENTS as f64 {
        return Err(CliError::new(format!(
            "{what} would make about {expected:.0} requests, more than {MAX_EVENTS}: lower the rate or --duration"
        )));
    }
    Ok(())
}

/// Sorts requests by time, keeping the order of simultaneous ones (the
/// sort's scratch space is skipped when they already are in order, as an
/// access log is).
fn in_time_order(events: &mut [Event]) {
    if !events.is_sorted_by_key(|e| e.t) {
        events.sort_by_key(|e| e.t);
    }
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
                    "--traffic burst: {} is not N@T, e.g. burst:100@5s",
                    Shown(arg)
                ))
            })?;
            let n: u64 = n.trim().parse().map_err(|_| {
                CliError::new(format!(
                    "--traffic burst: {} is not a whole number of requests",
                    Shown(n)
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
            bounded("--traffic boundary", 2.0 * args.limit as f64)?;
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
                "unknown traffic {}: use steady:RATE, burst:N@T, boundary, poisson:RATE, \
                 noisy-neighbour, incident, or a file path",
                Shown(other)
            )));
        }
    }
    in_time_order(&mut events);
    let last = events.last().map_or(0, |e| e.t);
    Ok(Traffic {
        events,
        keys: keys.into_names(),
        duration: duration.max(last + 1),
        name: spec.to_string(),
    })
}

/// `i64::MIN..=i64::MAX` nanoseconds as seconds, for messages.
const RANGE: &str = "seconds within ±9223372036.854775807, RFC 3339 times from \
                     1677-09-21 to 2262-04-11";

/// Reads a timestamp — seconds (`1733047200.25`, `1.5e3`) or an RFC 3339
/// time — as nanoseconds since the Unix epoch (seconds count from 0 as
/// given).
///
/// Plain decimal seconds are read exactly (a tenth fractional digit rounds
/// half away from zero); other numbers through `f64`.
///
/// # Errors
///
/// A time that is neither, not finite, or outside `i64` nanoseconds
/// ([`RANGE`]), naming the text.
fn timestamp(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let out_of_range = || format!("timestamp {} is out of range ({RANGE})", Shown(text));
    if let Some(nanos) = decimal_seconds(text) {
        return nanos.ok_or_else(out_of_range);
    }
    if let Ok(secs) = text.parse::<f64>() {
        if !secs.is_finite() {
            return Err(format!(
                "timestamp {} is not a finite number of seconds",
                Shown(text)
            ));
        }
        // -2^63 is the first nanosecond in range, 2^63 the first past it;
        // both are exact in an f64.
        const END: f64 = 9_223_372_036_854_775_808.0;
        let nanos = (secs * 1e9).round();
        if !(-END..END).contains(&nanos) {
            return Err(out_of_range());
        }
        return Ok(nanos as i64);
    }
    match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(time) => time.timestamp_nanos_opt().ok_or_else(out_of_range),
        Err(e) => Err(format!(
            "timestamp {} is neither seconds nor an RFC 3339 time such as \
             2026-12-01T10:00:00Z ({e})",
            Shown(text)
        )),
    }
}

/// `[+-]digits[.digits]` seconds as whole nanoseconds: `None` if `text` is
/// not of that form, `Some(None)` if it is out of the `i64` range.
fn decimal_seconds(text: &str) -> Option<Option<i64>> {
    let (negative, unsigned) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let decimal = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !decimal(whole) || !decimal(fraction) {
        return None;
    }
    Some(exact_nanos(negative, whole, fraction))
}

/// Whole and fractional decimal digits as signed nanoseconds, if in range.
fn exact_nanos(negative: bool, whole: &str, fraction: &str) -> Option<i64> {
    let digit = |b: u8| u64::from(b - b'0');
    let mut secs = 0u64;
    for b in whole.bytes() {
        secs = secs.checked_mul(10)?.checked_add(digit(b))?;
    }
    let mut frac = fraction.bytes();
    let mut nanos = 0u64;
    for _ in 0..9 {
        nanos = nanos * 10 + frac.next().map_or(0, digit);
    }
    let round_up = frac.next().is_some_and(|b| b >= b'5');
    let magnitude = secs
        .checked_mul(1_000_000_000)?
        .checked_add(nanos + u64::from(round_up))?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// One row: when (ns since the epoch), whose, how many tokens.
struct Row<'a> {
    t: i64,
    key: Option<Cow<'a, str>>,
    n: u64,
}

/// Where a row is wrong: its column (1-based, in bytes) and what is wrong.
type Bad = (usize, String);

/// The `n` field: a whole number of tokens.
fn tokens(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .map_err(|_| format!("n {} is not a whole number", Shown(text)))
}

/// Reads CSV rows, one line each, with `csv-core` (the parser of the `csv`
/// crate): fields may be quoted (`"a,b"`, `"say ""hi"""`) and are trimmed;
/// a quoted field cannot hold a line break.
struct Csv {
    reader: csv_core::Reader,
    /// The unquoted fields of the current row.
    out: Vec<u8>,
}

impl Csv {
    fn new() -> Csv {
        Csv {
            // A line is one row: `\r` is data (the line's last `\r` was
            // stripped with its `\n`).
            reader: csv_core::ReaderBuilder::new()
                .terminator(csv_core::Terminator::Any(b'\n'))
                .build(),
            out: Vec::new(),
        }
    }

    /// `timestamp[,key][,n]` from one line.
    fn row<'a>(&'a mut self, line: &str) -> Result<Row<'a>, Bad> {
        // Each field as (its column, its bytes in `out`).
        let mut fields = [(0usize, 0usize, 0usize); 3];
        let mut count = 0;
        let input = line.as_bytes();
        // Unquoting only removes bytes: the fields fit in the line's length.
        self.out.clear();
        self.out.resize(input.len(), 0);
        self.reader.reset();
        let (mut read, mut written) = (0, 0);
        let (mut field_at, mut field_out) = (0, 0);
        loop {
            // An empty input (the line's end) ends the last field.
            let (result, nin, nout) = self
                .reader
                .read_field(&input[read..], &mut self.out[written..]);
            read += nin;
            written += nout;
            match result {
                csv_core::ReadFieldResult::Field { record_end } => {
                    if count == fields.len() {
                        return Err((
                            field_at + 1,
                            "too many fields (timestamp[,key][,n])".to_string(),
                        ));
                    }
                    fields[count] = (field_at + 1, field_out, written);
                    count += 1;
                    (field_at, field_out) = (read, written);
                    if record_end {
                        break;
                    }
                }
                csv_core::ReadFieldResult::OutputFull => {
                    let grown = self.out.len() * 2 + 1;
                    self.out.resize(grown, 0);
                }
                csv_core::ReadFieldResult::InputEmpty => {}
                csv_core::ReadFieldResult::End => break,
            }
        }
        let out = &self.out;
        let text = |i: usize| -> Result<&'a str, Bad> {
            let (col, from, to) = fields[i];
            std::str::from_utf8(&out[from..to])
                .map(str::trim)
                .map_err(|_| (col, "not UTF-8".to_string()))
        };
        if count == 0 {
            return Err((1, "no timestamp".to_string()));
        }
        let t = timestamp(text(0)?).map_err(|e| (fields[0].0, e))?;
        let key = if count > 1 {
            Some(Cow::Borrowed(text(1)?))
        } else {
            None
        };
        let n = if count > 2 {
            tokens(text(2)?).map_err(|e| (fields[2].0, e))?
        } else {
            1
        };
        Ok(Row { t, key, n })
    }
}

/// `{"t": …, "key": …, "n": …}` from one line.
fn json_row(line: &str) -> Result<Row<'static>, Bad> {
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
        // As written: an integer exactly, a float in its shortest form.
        Some(serde_json::Value::Number(n)) => timestamp(&n.to_string()).map_err(|e| (1, e))?,
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
        Some(serde_json::Value::String(s)) => Some(Cow::Owned(s.clone())),
        Some(other) => Some(Cow::Owned(other.to_string())),
    };
    let n = match obj.get("n") {
        None => 1,
        Some(v) => v.as_u64().ok_or_else(|| {
            (
                1,
                format!(
                    "\"n\" must be a whole number, not {}",
                    Shown(&v.to_string())
                ),
            )
        })?,
    };
    Ok(Row { t, key, n })
}

/// One line of at most `max` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The line is in the buffer, without its `\n`.
    Read,
    /// Longer than `max`: only `max + 1` bytes of it were read.
    TooLong,
    /// No more input.
    End,
}

/// Reads the next line into `buf` (without its `\n`), buffering at most
/// `max + 1` bytes however long the line is.
fn next_line(input: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    buf.clear();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    if input.take(limit).read_until(b'\n', buf)? == 0 {
        return Ok(Line::End);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
    Ok(if buf.len() > max {
        Line::TooLong
    } else {
        Line::Read
    })
}

/// `t` as a `u64` in the same order (`i64::MIN` is 0), so that offsets
/// from the earliest time are plain subtractions.
fn ordered(t: i64) -> u64 {
    (t as u64) ^ (1 << 63)
}

/// Rows from a file; times become offsets from the earliest row. A progress
/// bar appears on stderr once a million rows have been read, if stderr is
/// a terminal.
///
/// # Errors
///
/// The file cannot be read, or is not traffic: a message naming the file
/// and the line (see [`read`]).
pub fn file(path: &Path) -> Result<Traffic, CliError> {
    let f = File::open(path)
        .map_err(|e| CliError::new(format!("cannot read {}: {e}", path.display())))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    read(f, &path.display().to_string(), size, MAX_EVENTS)
}

/// Rows from `source`, named `name` in messages, of `size` bytes (0 if
/// unknown: only the progress bar uses it); at most `max_events` requests.
///
/// # Errors
///
/// A line longer than [`MAX_LINE`], not UTF-8, or not a row (a first line
/// that starts with a letter is a CSV header and skipped); more than
/// `max_events` requests; requests spanning more than [`MAX_SPAN`]; no
/// request; a read error. The message names the line (or lines), and
/// quotes at most about 80 characters of one.
fn read(source: impl Read, name: &str, size: u64, max_events: u64) -> Result<Traffic, CliError> {
    let mut input = BufReader::new(source);
    let mut keys = Keys::default();
    let mut csv = Csv::new();
    // Until every row is read, `t` is the row's time as `ordered` maps it.
    let mut events: Vec<Event> = Vec::new();
    // The earliest and latest times, and their lines.
    let (mut first, mut last) = ((0u64, 0u64), (0u64, 0u64));
    let mut line = Vec::new();
    let mut consumed = 0u64;
    let mut number = 0u64;
    let mut bar: Option<indicatif::ProgressBar> = None;
    let anonymous = "-";
    loop {
        number += 1;
        let at = |what: String| CliError::new(format!("{name}: line {number}{what}"));
        match next_line(&mut input, &mut line, MAX_LINE).map_err(|e| at(format!(": {e}")))? {
            Line::End => break,
            Line::TooLong => return Err(at(" is longer than 1 MiB".to_string())),
            Line::Read => {}
        }
        consumed += line.len() as u64 + 1;
        let text = std::str::from_utf8(&line)
            .map_err(|e| at(format!(", column {}: not UTF-8", e.valid_up_to() + 1)))?;
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.trim().is_empty() || text.starts_with('#') {
            continue;
        }
        let first_byte = text.trim_start().as_bytes().first().copied();
        let parsed = if first_byte == Some(b'{') {
            json_row(text)
        } else {
            csv.row(text)
        };
        let row = match parsed {
            Ok(row) => row,
            // A CSV header line is skipped.
            Err(_) if number == 1 && first_byte.is_some_and(|b| b.is_ascii_alphabetic()) => {
                continue;
            }
            Err((col, msg)) => return Err(at(format!(", column {col}: {msg}"))),
        };
        if events.len() as u64 == max_events {
            return Err(at(format!(
                ": more than {max_events} requests, the most one simulation replays"
            )));
        }
        let t = ordered(row.t);
        if events.is_empty() || t < first.0 {
            first = (t, number);
        }
        if t >= last.0 {
            last = (t, number);
        }
        let key = keys.id(row.key.as_deref().unwrap_or(anonymous))?;
        events.push(Event { t, key, n: row.n });
        if events.len() == 1_000_000 && std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(size);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_message("reading traffic");
            bar = Some(b);
        }
        if let Some(b) = &bar
            && events.len().is_multiple_of(65_536)
        {
            b.set_position(consumed);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if events.is_empty() {
        return Err(CliError::new(format!("{name}: no requests in the file")));
    }
    let span = last.0 - first.0;
    if span > MAX_SPAN {
        return Err(CliError::new(format!(
            "{name}: line {} is {:.0} years after line {}: the requests must span at most \
             about 36 years",
            last.1,
            span as f64 / (365.25 * 86_400.0 * SECOND as f64),
            first.1
        )));
    }
    for e in &mut events {
        e.t -= first.0;
    }
    in_time_order(&mut events);
    events.shrink_to_fit();
    Ok(Traffic {
        events,
        keys: keys.into_names(),
        duration: span + 1,
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that never ends, of one byte repeated, counting what was
    /// read from it.
    struct Endless {
        byte: u8,
        read: u64,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(self.byte);
            self.read += buf.len() as u64;
            Ok(buf.len())
        }
    }

    fn traffic(text: &str) -> Result<Traffic, String> {
        read(text.as_bytes(), "t.csv", 0, MAX_EVENTS).map_err(|e| e.to_string())
    }

    #[test]
    fn rfc3339_times() {
        assert_eq!(timestamp("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(timestamp("1970-01-01T00:00:01.5Z"), Ok(1_500_000_000));
        assert_eq!(
            timestamp("2024-02-29T12:00:00+01:00"),
            Ok(1_709_204_400_000_000_000)
        );
        assert_eq!(
            timestamp("2024-02-29 11:00:00z"),
            Ok(1_709_204_400_000_000_000)
        );
        assert_eq!(
            timestamp("1677-09-21T00:12:43.145224192Z"),
            Ok(i64::MIN),
            "the first nanosecond in range"
        );
        for bad in [
            "2024-13-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2024-02-29T12:00:00",
            "yesterday",
        ] {
            let e = timestamp(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("neither seconds nor an RFC 3339 time"), "{e}");
        }
        for far in ["1677-09-21T00:12:43.145224191Z", "9999-12-31T23:59:59Z"] {
            let e = timestamp(far).unwrap_err();
            assert!(
                e.contains(&format!("timestamp {far:?} is out of range")),
                "{e}"
            );
        }
    }

    #[test]
    fn seconds_are_exact_nanoseconds_in_range() {
        // An f64 holds 1733047200.123456789 s only to about 240 ns.
        assert_eq!(
            timestamp("1733047200.123456789"),
            Ok(1_733_047_200_123_456_789)
        );
        assert_eq!(timestamp("-1.5"), Ok(-1_500_000_000));
        assert_eq!(timestamp("+.25"), Ok(250_000_000));
        assert_eq!(timestamp(" 7 "), Ok(7_000_000_000));
        assert_eq!(timestamp("0.0000000015"), Ok(2), "half a ns rounds up");
        assert_eq!(timestamp("-0.0000000015"), Ok(-2));
        assert_eq!(timestamp("1.5e3"), Ok(1_500_000_000_000));
        assert_eq!(timestamp("9223372036.854775807"), Ok(i64::MAX));
        assert_eq!(timestamp("-9223372036.854775808"), Ok(i64::MIN));
        for far in [
            "9223372036.854775808",
            "-9223372036.854775809",
            "1e300",
            "-1e300",
            "9.3e9",
            "99999999999999999999999999",
        ] {
            let e = timestamp(far).unwrap_err();
            assert!(
                e.contains(&format!("timestamp {far:?} is out of range")),
                "{e}"
            );
        }
        for odd in ["inf", "NaN", "-infinity"] {
            let e = timestamp(odd).unwrap_err();
            assert!(e.contains("not a finite number"), "{e}");
        }
    }

    #[test]
    fn csv_rows_with_quoted_fields() {
        let mut csv = Csv::new();
        let mut row = |line: &str| {
            csv.row(line)
                .map(|r| (r.t, r.key.map(Cow::into_owned), r.n))
        };
        assert_eq!(
            row(" 1.5 , alice , 3 "),
            Ok((1_500_000_000, Some("alice".to_string()), 3))
        );
        assert_eq!(row("0,\"a,b\",2"), Ok((0, Some("a,b".to_string()), 2)));
        assert_eq!(
            row("0,\"say \"\"hi\"\"\""),
            Ok((0, Some("say \"hi\"".to_string()), 1))
        );
        assert_eq!(row("\"1\""), Ok((1_000_000_000, None, 1)));
        assert_eq!(row("0,a\rb"), Ok((0, Some("a\rb".to_string()), 1)));
        // Columns are the field's first byte on the line.
        assert_eq!(row("1,a,x").map_err(|e| e.0), Err(5));
        assert_eq!(row("1,\"a,b\",x").map_err(|e| e.0), Err(9));
        let (col, msg) = row("0,a,1,2").unwrap_err();
        assert_eq!(col, 7);
        assert!(msg.contains("too many fields"), "{msg}");
        let (col, msg) = row("soon,a").unwrap_err();
        assert_eq!(col, 1);
        assert!(msg.contains("\"soon\""), "{msg}");
    }

    #[test]
    fn json_rows() {
        let r = json_row(r#"{"t": "1970-01-01T00:00:02Z", "key": "bob"}"#)
            .map_err(|e| e.1)
            .unwrap();
        assert_eq!(
            (r.t, r.key.as_deref(), r.n),
            (2_000_000_000, Some("bob"), 1)
        );
        let r = json_row(r#"{"t": 1733047200, "key": 7, "n": 2}"#)
            .map_err(|e| e.1)
            .unwrap();
        assert_eq!(
            (r.t, r.key.as_deref(), r.n),
            (1_733_047_200_000_000_000, Some("7"), 2)
        );
        // Milliseconds are not seconds: far out of range.
        let e = json_row(r#"{"t": 1733047200123}"#).err().unwrap().1;
        assert!(e.contains("\"1733047200123\" is out of range"), "{e}");
        // A float is shown as serde_json writes it.
        let e = json_row(r#"{"t": 1e300}"#).err().unwrap().1;
        assert!(e.contains("\"1e+300\" is out of range"), "{e}");
    }

    #[test]
    fn a_line_is_read_up_to_its_bound() {
        let mut buf = Vec::new();
        let mut lines = |text: &[u8], max: usize| {
            let mut input = text;
            let mut out = Vec::new();
            loop {
                let line = next_line(&mut input, &mut buf, max).unwrap();
                out.push((line, String::from_utf8_lossy(&buf).into_owned()));
                if out.last().is_some_and(|l| l.0 != Line::Read) {
                    return out;
                }
            }
        };
        let read = |s: &str| (Line::Read, s.to_string());
        assert_eq!(
            lines(b"abc\n\nabcd", 4),
            [
                read("abc"),
                read(""),
                read("abcd"),
                (Line::End, String::new())
            ]
        );
        assert_eq!(
            lines(b"abcd\nabcde\n", 4),
            [read("abcd"), (Line::TooLong, "abcde".to_string())]
        );
    }

    #[test]
    fn an_endless_line_is_refused_after_at_most_the_bound() {
        let mut zeros = Endless { byte: 0, read: 0 };
        let e = read(&mut zeros, "/dev/zero", 0, MAX_EVENTS).unwrap_err();
        assert_eq!(e.to_string(), "/dev/zero: line 1 is longer than 1 MiB");
        // The line, and what the buffered reader had read ahead.
        assert!(zeros.read <= MAX_LINE as u64 + 8192, "{} bytes", zeros.read);

        let mut rest = Endless {
            byte: b'7',
            read: 0,
        };
        let e = read(b"0,a\n".chain(&mut rest), "log", 0, MAX_EVENTS).unwrap_err();
        assert_eq!(e.to_string(), "log: line 2 is longer than 1 MiB");
    }

    #[test]
    fn files_are_sorted_offset_and_bounded() {
        // Out of order, negative, simultaneous: in time order, file order
        // kept among simultaneous rows, offsets from the earliest.
        let t = traffic("time,key\n2,a\n-1,b\n-1,c\n# note\n\n-1,b\n").unwrap();
        let got: Vec<(u64, &str)> = t
            .events
            .iter()
            .map(|e| (e.t, t.keys[e.key as usize].as_str()))
            .collect();
        assert_eq!(got, [(0, "b"), (0, "c"), (0, "b"), (3_000_000_000, "a")]);
        assert_eq!(t.duration, 3_000_000_001);

        let e = read(&b"0\n1\n2\n3\n"[..], "t.csv", 0, 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv: line 4: more than 3 requests, the most one simulation replays"
        );
        // 2^60 ns apart is the most.
        assert!(traffic("0\n1152921504.606846976\n").is_ok());
        let e = traffic("1152921504.606846977\n0\n").unwrap_err();
        assert_eq!(
            e,
            "t.csv: line 1 is 37 years after line 2: the requests must span at most about 36 years"
        );
    }

    #[test]
    fn lines_must_be_utf8() {
        let e = read(&b"0,a\n1,\xffb\n"[..], "t.csv", 0, MAX_EVENTS).unwrap_err();
        assert_eq!(e.to_string(), "t.csv: line 2, column 3: not UTF-8");
    }

    #[test]
    fn the_boundary_shape_is_bounded() {
        let args = ShapeArgs {
            duration: 60 * SECOND,
            seed: 1,
            limit: MAX_EVENTS / 2 + 1,
            window: 60 * SECOND,
            rate: 1.0,
        };
        let e = shape("boundary", &args).unwrap_err().to_string();
        assert!(
            e.contains("--traffic boundary would make about 100000002 requests"),
            "{e}"
        );
        let fits = ShapeArgs { limit: 3, ..args };
        assert_eq!(shape("boundary", &fits).unwrap().events.len(), 6);
    }
}
