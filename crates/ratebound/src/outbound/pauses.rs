//! Pauses an adapter keeps in this process when its limiter's store could
//! not be told of them (see the module's notes, "An outage does not cancel
//! a pause").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::Error;
use crate::pause::Reach;

/// The most keys [`LocalPauses`] holds; beyond, the pause ending first is
/// forgotten.
pub const LOCAL_PAUSES_MAX_KEYS: usize = 10_000;

/// The pauses an adapter keeps in this process because its limiter's
/// store could not be told of them (Redis down): an outage does not cancel
/// a partner's pause. Each sending asks [`hold`](Self::hold) before it
/// waits for its token, so the retry of the refused call, and every other
/// call of the adapter for that key, goes out no sooner than the partner
/// asked — whatever the limiter's fail policy lets through.
///
/// Sans-I/O: the caller passes the time — a reading of its monotonic
/// clock (`now`, time since any fixed origin: one clock for one table) —
/// and does the sleeping.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use ratebound::outbound::{LocalPauses, Reach};
/// let pauses = LocalPauses::new();
/// let now = Duration::from_secs(100);
/// // Redis was told: nothing for this process to keep.
/// assert!(!pauses.paused("partner", Duration::from_secs(2), Reach::Shared, now));
/// assert_eq!(pauses.hold("partner", None, now)?, None);
/// // Redis could not be told: this process waits 2 s.
/// assert!(pauses.paused("partner", Duration::from_secs(2), Reach::Local, now));
/// let later = now + Duration::from_millis(500);
/// assert_eq!(pauses.hold("partner", None, later)?, Some(Duration::from_millis(1500)));
/// // A wait beyond the sending's timeout fails at once.
/// assert!(pauses.hold("partner", Some(Duration::from_secs(1)), later).is_err());
/// assert_eq!(pauses.hold("partner", None, now + Duration::from_secs(2))?, None);
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct LocalPauses {
    // A lock, not atomics: pauses are rare (a partner's refusal during an
    // outage) and a read of an empty table is one uncontended lock.
    until: Mutex<HashMap<String, Duration>>,
}

impl LocalPauses {
    /// An empty table.
    pub fn new() -> LocalPauses {
        LocalPauses::default()
    }

    /// Takes note of a pause of `key` for `pause` from `now` that took
    /// hold as `reach` says: one that reached only this process
    /// ([`Reach::Local`]) is kept (a pause ending no later than one already
    /// kept changes nothing). Whether the pause is local — what the
    /// adapter's `paused` event says.
    pub fn paused(&self, key: &str, pause: Duration, reach: Reach, now: Duration) -> bool {
        if reach == Reach::Shared || pause.is_zero() {
            return reach == Reach::Local;
        }
        let Some(end) = now.checked_add(pause) else {
            return true;
        };
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.retain(|_, e| *e > now);
        if until.len() >= LOCAL_PAUSES_MAX_KEYS && !until.contains_key(key) {
            let first = until
                .iter()
                .min_by_key(|(_, e)| **e)
                .map(|(k, _)| k.clone());
            if let Some(first) = first {
                until.remove(&first);
            }
        }
        let e = until.entry(key.to_string()).or_insert(end);
        *e = (*e).max(end);
        true
    }

    /// How long a sending for `key` must wait at `now` before it asks its
    /// limiter for a token (`None`: no pause kept).
    ///
    /// # Errors
    /// [`Error::DeadlineExceeded`] when that is longer than `timeout` (the
    /// sending's longest wait): it fails at once, as a limiter's wait
    /// would.
    pub fn hold(
        &self,
        key: &str,
        timeout: Option<Duration>,
        now: Duration,
    ) -> Result<Option<Duration>, Error> {
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if until.is_empty() {
            return Ok(None);
        }
        let wait = match until.get(key) {
            Some(end) if *end > now => *end - now,
            _ => return Ok(None),
        };
        match timeout {
            Some(max_wait) if wait > max_wait => Err(Error::DeadlineExceeded { wait, max_wait }),
            _ => Ok(Some(wait)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_forgets_the_pause_ending_first_and_later_pauses_extend() {
        let p = LocalPauses::new();
        let now = Duration::from_secs(1);
        let s = Duration::from_secs;
        for i in 0..LOCAL_PAUSES_MAX_KEYS {
            p.paused(&format!("k{i}"), s(10 + i as u64), Reach::Local, now);
        }
        assert!(p.paused("new", s(5), Reach::Local, now));
        // k0 ended first: forgotten; the others and the new one are kept.
        assert_eq!(p.hold("k0", None, now).unwrap(), None);
        assert_eq!(p.hold("k1", None, now).unwrap(), Some(s(11)));
        assert_eq!(p.hold("new", None, now).unwrap(), Some(s(5)));
        // A shorter pause changes nothing; a longer one extends.
        p.paused("new", s(1), Reach::Local, now);
        assert_eq!(p.hold("new", None, now).unwrap(), Some(s(5)));
        p.paused("new", s(7), Reach::Local, now);
        assert_eq!(p.hold("new", None, now).unwrap(), Some(s(7)));
        // Expired pauses are dropped when the next one is noted.
        let later = now + s(20_000);
        p.paused("x", s(1), Reach::Local, later);
        assert_eq!(p.until.lock().unwrap().len(), 1);
    }
}
