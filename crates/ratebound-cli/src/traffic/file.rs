//! A traffic file: CSV rows or JSON lines of `timestamp[,key][,n]`, read
//! one bounded line at a time; timestamps as seconds or RFC 3339 times.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::Path;

use crate::{CliError, MAX_SPAN, SECOND, Shown};

use super::{Event, Keys, MAX_EVENTS, MAX_LINE, Traffic, in_time_order};

/// `i64::MIN..=i64::MAX` nanoseconds as seconds, for messages.
pub(super) const RANGE: &str = "seconds within ±9223372036.854775807, RFC 3339 times from \
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
pub(super) fn timestamp(text: &str) -> Result<i64, String> {
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
pub(super) fn decimal_seconds(text: &str) -> Option<Option<i64>> {
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
pub(super) fn exact_nanos(negative: bool, whole: &str, fraction: &str) -> Option<i64> {
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
pub(super) struct Row<'a> {
    pub(super) t: i64,
    pub(super) key: Option<Cow<'a, str>>,
    pub(super) n: u64,
}

/// Where a row is wrong: its column (1-based, in bytes) and what is wrong.
type Bad = (usize, String);

/// The `n` field: a whole number of tokens.
pub(super) fn tokens(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .map_err(|_| format!("n {} is not a whole number", Shown(text)))
}

/// Reads CSV rows, one line each, with `csv-core` (the parser of the `csv`
/// crate): fields may be quoted (`"a,b"`, `"say ""hi"""`) and are trimmed;
/// a quoted field cannot hold a line break.
pub(super) struct Csv {
    reader: csv_core::Reader,
    /// The unquoted fields of the current row.
    out: Vec<u8>,
}

impl Csv {
    pub(super) fn new() -> Csv {
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
    pub(super) fn row<'a>(&'a mut self, line: &str) -> Result<Row<'a>, Bad> {
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
pub(super) fn json_row(line: &str) -> Result<Row<'static>, Bad> {
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
pub(super) enum Line {
    /// The line is in the buffer, without its `\n`.
    Read,
    /// Longer than `max`: only `max + 1` bytes of it were read.
    TooLong,
    /// No more input.
    End,
}

/// Reads the next line into `buf` (without its `\n`), buffering at most
/// `max + 1` bytes however long the line is.
pub(super) fn next_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
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
pub(super) fn ordered(t: i64) -> u64 {
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
pub fn read(
    source: impl Read,
    name: &str,
    size: u64,
    max_events: u64,
) -> Result<Traffic, CliError> {
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
