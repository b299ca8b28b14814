//! The library half of the `ratebound` command: what a test or a fuzzer
//! outside the binary calls — the traffic-file reader
//! ([`traffic::read`]), the duration parser, and the error every command
//! reports. The command itself (`src/main.rs`) is the rest.
//!
//! Bad input is a [`CliError`] (one line, shown on stderr with exit code
//! 2), never a panic.

pub mod traffic;

/// A second in nanoseconds.
pub const SECOND: u64 = 1_000_000_000;

/// The longest span the simulator takes, in ns: 2^60, about 36 years (a
/// `--duration`, or the time a traffic file covers). Every sum of times
/// fits in a `u64` with room to spare.
pub const MAX_SPAN: u64 = 1 << 60;

/// Shows text from the user in an error message: quoted and escaped as
/// `{:?}` does, cut to about 80 characters (with its length in bytes) when
/// it is longer, so that a bad 10 MB line is not echoed whole.
pub struct Shown<'a>(pub &'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MOST: usize = 80;
        let (mut shown, mut end) = (0, 0);
        for (i, c) in self.0.char_indices() {
            shown += c.escape_debug().len();
            if shown > MOST {
                let head = &self.0[..end];
                return write!(f, "{head:?}... ({} bytes)", self.0.len());
            }
            end = i + c.len_utf8();
        }
        write!(f, "{:?}", self.0)
    }
}

/// An error for the user: printed as one line, exit code 2.
#[derive(Debug)]
pub struct CliError(String);

impl CliError {
    /// An error with this message.
    pub fn new(msg: impl Into<String>) -> CliError {
        CliError(msg.into())
    }
}

impl From<ratebound::Error> for CliError {
    fn from(e: ratebound::Error) -> CliError {
        CliError(e.to_string())
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `num` (a part of the argument `text`) read as a number, else the error
/// `{what}: TEXT is not {kind}`.
pub(crate) fn number(num: &str, text: &str, what: &str, kind: &str) -> Result<f64, CliError> {
    num.trim()
        .parse()
        .map_err(|_| CliError::new(format!("{what}: {} is not {kind}", Shown(text))))
}

/// `text` split at its first `sep`, else the error `{what}: TEXT is not
/// {form}` (`form` names the two parts and gives an example).
///
/// # Errors
/// When `text` has no `sep`.
pub fn split_pair<'a>(
    text: &'a str,
    sep: char,
    what: &str,
    form: &str,
) -> Result<(&'a str, &'a str), CliError> {
    text.split_once(sep)
        .ok_or_else(|| CliError::new(format!("{what}: {} is not {form}", Shown(text))))
}

/// A span: `60s`, `1.5s`, `500ms`, `2min`, `1h`, or a number of seconds.
pub fn parse_duration(text: &str, what: &str) -> Result<u64, CliError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value = number(num, text, what, "a duration (e.g. 60s, 500ms)")?;
    let scale = match unit.trim() {
        "" | "s" | "sec" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86_400e9,
        other => {
            return Err(CliError::new(format!(
                "{what}: unknown unit {} in {} (ns, us, ms, s, min, h, d)",
                Shown(other),
                Shown(text)
            )));
        }
    };
    let nanos = value * scale;
    if !nanos.is_finite() || nanos <= 0.0 || nanos > MAX_SPAN as f64 {
        return Err(CliError::new(format!(
            "{what}: {} must be more than 0 and at most about 36 years",
            Shown(text)
        )));
    }
    Ok(nanos.round() as u64)
}
