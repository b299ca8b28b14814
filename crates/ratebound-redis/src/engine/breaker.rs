//! The circuit breaker that spares a dead Redis ([`Breaker`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A circuit breaker: after `threshold` consecutive failures it opens for
/// `cooldown`, answering with the fail policy and sending nothing; then one
/// probe at a time is let through, and a success closes it.
///
/// A probe that settles neither way does not hold the half-open breaker
/// for good: one refused as busy (it never left the client, or it timed
/// out while Redis answered others) lets the next call probe at once
/// ([`unanswered`](Self::unanswered)); one never finished (its caller gave
/// up) holds the probe place for one `cooldown` at most. (A flag held
/// until the probe's success or failure stayed set when the probe came
/// back busy after a `CLIENT PAUSE`, and the breaker stayed open for good:
/// the fail policy answered every call from then on.)
#[derive(Debug)]
pub(crate) struct Breaker {
    failures: AtomicU32,
    /// Clock time until which the breaker is open; 0 when closed.
    open_until: AtomicU64,
    /// Clock time until which the half-open breaker's probe holds it (no
    /// other probe before); 0 when no probe is out.
    probe_until: AtomicU64,
    threshold: u32,
    pub(crate) cooldown: u64,
}

impl Breaker {
    /// A closed breaker that opens after `threshold` consecutive failures,
    /// for `cooldown` (clock time).
    pub(crate) fn new(threshold: u32, cooldown: u64) -> Breaker {
        Breaker {
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probe_until: AtomicU64::new(0),
            threshold,
            cooldown,
        }
    }

    pub(crate) fn may_call(&self, now: u64) -> bool {
        // Ordering: Relaxed throughout — the breaker is advice about a
        // remote server, not a guard of memory; a stale view costs at most
        // one extra call or one extra fail-policy answer.
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        if now < until {
            return false;
        }
        // Half open: one probe at a time, for one cool-down at most.
        let probe = self.probe_until.load(Ordering::Relaxed);
        if now < probe {
            return false;
        }
        self.probe_until
            .compare_exchange(
                probe,
                now.saturating_add(self.cooldown).max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// A call answered; whether this closed an open breaker (the end of
    /// an episode: exactly one caller sees `true` for it).
    pub(crate) fn success(&self) -> bool {
        self.failures.store(0, Ordering::Relaxed);
        // Fast path: closed already (the common case writes nothing else).
        if self.open_until.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let was = self.open_until.swap(0, Ordering::Relaxed);
        self.probe_until.store(0, Ordering::Relaxed);
        was != 0
    }

    /// A call failed; whether this opened a closed breaker (the start of
    /// an episode: a failed probe re-opens it without a new one).
    pub(crate) fn failure(&self, now: u64) -> bool {
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let mut opened = false;
        if failures >= self.threshold {
            let was = self
                .open_until
                .swap(now.saturating_add(self.cooldown).max(1), Ordering::Relaxed);
            opened = was == 0;
        }
        self.probe_until.store(0, Ordering::Relaxed);
        opened
    }

    /// A call came back with no word on Redis (refused as busy: this
    /// client's own overload): if it was the half-open breaker's probe,
    /// the next call probes. Before, such a probe left the breaker
    /// probing for good — the fail policy answered every call until the
    /// process restarted.
    pub(crate) fn unanswered(&self) {
        self.probe_until.store(0, Ordering::Relaxed);
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Relaxed) != 0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::call::{Begin, CallOutcome};
    use crate::config::OnError;
    use crate::decision::Source;
    use crate::engine::tests::{call, engine};
    use crate::reserve::{ReserveBegin, Reserved};

    #[test]
    fn the_breaker_opens_after_failures_and_probes_after_its_cooldown() {
        let (e, clock) = engine(OnError::Closed, 0);
        let c = call(&e, "k", 1);
        let d = e.finish(&c, CallOutcome::Timeout);
        assert_eq!(d.source(), Source::FailClosed);
        assert_eq!(d.retry_after(), Duration::from_millis(100));
        assert!(!e.breaker_open());
        e.finish(&call(&e, "k", 1), CallOutcome::Failed("connection refused"));
        assert!(e.breaker_open());
        // Open: answered without a call.
        assert!(
            matches!(e.begin(b"k", 1).unwrap(), Begin::Done(d) if d.source() == Source::FailClosed)
        );
        clock.advance(Duration::from_millis(100));
        // One probe at a time.
        let probe = call(&e, "k", 1);
        assert!(matches!(e.begin(b"k", 1).unwrap(), Begin::Done(_)));
        e.finish(
            &probe,
            CallOutcome::Reply(&[1, 19, 0, 100_000, 1, 0, 7, 0, 0]),
        );
        assert!(!e.breaker_open());
        call(&e, "k", 1);
        // A reply of the wrong shape is a failure too (0.1.0's five fields, six,
        // a negative field).
        for reply in [
            &[1, 2, 3][..],
            &[1, 19, 0, 100_000, 1],
            &[0, -3, 1, 1, 0, 0],
        ] {
            let (e, _) = engine(OnError::Closed, 0);
            let d = e.finish(&call(&e, "k", 1), CallOutcome::Reply(reply));
            assert_eq!(d.source(), Source::FailClosed, "{reply:?}");
        }
        // So is a reply that is no list of integers (what Python's and
        // Node's drivers report as Malformed alike, issue 25): the fail
        // policy answers and the breaker counts it, as a timeout.
        let (e, _) = engine(OnError::Closed, 0);
        for _ in 0..2 {
            let d = e.finish(&call(&e, "k", 1), CallOutcome::Malformed);
            assert_eq!(d.source(), Source::FailClosed);
        }
        assert!(e.breaker_open());
        let mut ints = Vec::new();
        for bad in [
            &[1.0, 0.5][..],
            &[f64::INFINITY],
            &[18_014_398_509_481_984.0],
        ] {
            assert!(
                matches!(
                    CallOutcome::of_numbers(bad, &mut ints),
                    CallOutcome::Malformed
                ),
                "{bad:?}"
            );
        }
    }

    /// A probe that settles neither way does not hold the breaker open for
    /// good (it did: the fail policy answered every call until the process
    /// restarted). One refused as busy (unsent, or late while Redis
    /// answered others — what a `CLIENT PAUSE` left behind on a loaded
    /// client) lets the next call probe at once, a check's or a
    /// reservation's; one never finished (its caller gave up) holds the
    /// probe place for one cool-down, the fail policy answering meanwhile.
    #[test]
    fn a_probe_that_settles_neither_way_does_not_hold_the_breaker_open() {
        let (e, clock) = engine(OnError::Open, 0);
        for _ in 0..2 {
            e.finish(&call(&e, "k", 1), CallOutcome::Timeout);
        }
        assert!(e.breaker_open());
        clock.advance(Duration::from_millis(100));
        let probe = call(&e, "k", 1);
        let d = e.finish(&probe, CallOutcome::Unsent);
        assert_eq!(d.source(), Source::Busy);
        assert!(e.breaker_open(), "busy is no answer from Redis");
        // The next call probes; this one is never finished.
        let lost = call(&e, "k", 1);
        drop(lost);
        clock.advance(Duration::from_millis(99));
        assert!(
            matches!(e.begin(b"k", 1).unwrap(), Begin::Done(d) if d.source() == Source::FailOpen),
            "the lost probe holds the breaker for one cool-down"
        );
        clock.advance(Duration::from_millis(1));
        let probe = call(&e, "k", 1);
        let d = e.finish(
            &probe,
            CallOutcome::Reply(&[1, 19, 0, 100_000, 1, 0, 7, 0, 0]),
        );
        assert_eq!(d.source(), Source::Redis);
        assert!(!e.breaker_open());
        // A reservation's probe refused as busy: the next call probes.
        let (e, clock) = engine(OnError::Closed, 0);
        for _ in 0..2 {
            e.finish(&call(&e, "k", 1), CallOutcome::Timeout);
        }
        clock.advance(Duration::from_millis(100));
        let Ok(ReserveBegin::Call(probe)) = e.begin_reserve(None, b"k", 1, Duration::from_secs(1))
        else {
            panic!("the probe");
        };
        assert!(matches!(
            e.finish_reserve(&probe, CallOutcome::Unsent),
            Reserved::Retry { .. }
        ));
        assert!(
            matches!(e.begin(b"k", 1), Ok(Begin::Call(_))),
            "the next call probes"
        );
    }
}
