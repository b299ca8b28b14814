//! Traffic to replay: built-in shapes, or a file of `timestamp[,key][,n]`
//! rows (CSV) or JSON lines, e.g. cut from an access log.
//!
//! Every request is kept in memory, 24 bytes each, because the simulation
//! needs them all before it starts: a file need not be in time order (it is
//! sorted), the plot's time axis is the whole span, and every algorithm
//! replays the same requests. So a simulation holds at most [`MAX_EVENTS`]
//! requests (2.4 GB), whether a shape makes them or a file holds them, over
//! at most [`MAX_SPAN`](crate::MAX_SPAN). A file is read one line at a time and a line holds
//! at most [`MAX_LINE`] bytes: a longer one (or `/dev/zero`) is an error at
//! that line, after at most that much was read into memory.

use std::collections::HashMap;

use crate::{CliError, Shown};

mod file;
mod shapes;
#[cfg(test)]
mod tests;

pub use file::{file, read};
pub use shapes::{ShapeArgs, SplitMix, shape};

/// One request: when (ns from the start), whose (an index into
/// [`Traffic::keys`]) and how many tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// When, in ns from the earliest request.
    pub t: u64,
    /// Whose: an index into [`Traffic::keys`].
    pub key: u32,
    /// How many tokens (the row's `n`, 1 when it has none).
    pub n: u64,
}

/// Requests in time order, and the keys they name.
///
/// At most [`MAX_EVENTS`] requests, spanning at most [`MAX_SPAN`](crate::MAX_SPAN).
#[derive(Debug, Default)]
pub struct Traffic {
    /// The requests, in time order (simultaneous ones in the order read).
    pub events: Vec<Event>,
    /// The key names, indexed by [`Event::key`] (`-` for rows without one).
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
    let n = crate::number(num, spec, what, "a rate (e.g. 100 or 100/s)")?;
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
