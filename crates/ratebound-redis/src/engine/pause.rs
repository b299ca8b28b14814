//! A pause for every instance, sans-I/O: the call that empties a token
//! bucket for a while, moving every slot already reserved past it
//! ([`Engine::begin_pause`]), and its news on a pub/sub channel, which
//! moves the waiters already asleep in every instance ([`Engine::hear`];
//! the news heard is kept in `news.rs`).

use std::time::Duration;

use ratebound::{Clock, Error, Resumed};

use crate::algorithm::Algorithm;
use crate::call::{Call, CallKind, CallOutcome, well_formed};
use crate::engine::Engine;
use crate::news::{NEWS_MAX_KEY, parse_news};
use crate::reserve::micros;

impl Engine {
    /// The call that pauses `key` (within `scope`) for `duration` from
    /// Redis' now, for every instance: the bucket is empty until then, and
    /// every slot already reserved moves past it, in its order (see
    /// `lua/gcra.lua`). A pause that ends no later than one already on
    /// changes nothing, so instances that all obey one partner's
    /// `Retry-After` pause once.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a window (it has no slots to move);
    /// [`Error::InvalidNumber`] for a pause longer than a day
    /// ([`ratebound::any::MAX_PAUSE`]: the key would outlive the service).
    /// A zero pause is a call that changes nothing, as a local pause of 0.
    pub fn begin_pause(
        &self,
        scope: Option<&str>,
        key: &[u8],
        duration: Duration,
    ) -> Result<Call, Error> {
        self.bucket_only("pause")?;
        ratebound::any::check_pause(duration)?;
        let for_us = micros(duration);
        Ok(self.call(self.redis_key(scope, key), CallKind::Pause { for_us }, 1))
    }

    /// What became of a pause: `(start_us, shift)` — the script ran at
    /// `start_us` (Redis' clock) and moved every slot due from then on
    /// `shift` later (zero: a pause already on covered it) — or `None` when
    /// Redis could not be told (a failure like any other for the breaker).
    /// [`pause_news`](Self::pause_news) tells the waiters of every
    /// instance.
    pub fn finish_pause(&self, outcome: CallOutcome<'_>) -> Option<(u64, Duration)> {
        let now = self.clock.now();
        match outcome {
            CallOutcome::Reply(r) if well_formed(r) => {
                self.answered(now);
                // Slots from the script's now on moved: none lies between
                // it and the end of an earlier pause (that pause moved them).
                Some((r[6] as u64, Duration::from_micros(r[2] as u64)))
            }
            // The client's own overload: not told, and not the breaker's
            // business.
            _ if self.overloaded(&outcome, now) => None,
            _ => {
                self.failed(&outcome, now);
                None
            }
        }
    }

    /// The call that lifts the pause on `key` (within `scope`) at Redis'
    /// now, for every instance, if nothing was built on it (the rule of
    /// [`ratebound::pause`], decided in the script in one step, atomic):
    /// when no reservation was made behind the pause or moved by it, the
    /// pause ends now — the bucket is empty now and refills at its rate
    /// from then on. Otherwise it changes nothing: the waiters behind the
    /// pause hold their slots and go at their times (no news is sent; none
    /// is woken early). [`finish_resume`](Self::finish_resume) reads the
    /// reply.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a window.
    pub fn begin_resume(&self, scope: Option<&str>, key: &[u8]) -> Result<Call, Error> {
        self.bucket_only("resume")?;
        Ok(self.call(self.redis_key(scope, key), CallKind::Resume, 1))
    }

    /// What became of a resume: [`Resumed::Lifted`], [`Resumed::NotPaused`]
    /// or [`Resumed::Queued`] (reservations stand behind the pause), or
    /// `None` when Redis could not be told (a failure like any other for
    /// the breaker; the pause stays on, in Redis and in this process's
    /// local share).
    pub fn finish_resume(&self, outcome: CallOutcome<'_>) -> Option<Resumed> {
        let now = self.clock.now();
        match outcome {
            CallOutcome::Reply(r) if well_formed(r) => {
                self.answered(now);
                Some(match (r[0], r[4]) {
                    (0, _) => Resumed::Queued,
                    (_, 0) => Resumed::NotPaused,
                    _ => Resumed::Lifted,
                })
            }
            _ if self.overloaded(&outcome, now) => None,
            _ => {
                self.failed(&outcome, now);
                None
            }
        }
    }

    /// Pauses `key` (within `scope`) for `duration` in this process's
    /// local share — the limit a limiter failing `local` answers with while
    /// Redis cannot — for when Redis could not be told of a pause
    /// ([`finish_pause`](Self::finish_pause) said `None`): an outage does
    /// not cancel a partner's pause for the callers of this process.
    /// Whether there was a local share to pause (`false` for `open` and
    /// `closed`).
    pub fn pause_local(&self, scope: Option<&str>, key: &[u8], duration: Duration) -> bool {
        let Some(local) = &self.local else {
            return false;
        };
        let fp = self.fingerprints.of(1, &self.redis_key(scope, key));
        local.pause_at(&fp, duration, self.clock.now()).is_ok()
    }

    /// The pub/sub channel on which this limiter's instances tell each
    /// other of pauses: the prefix and `pause` (`rb:pause`). Keys are the
    /// prefix and an algorithm's tag (`rb:tb:…`), so no key is named so —
    /// and channels are not keys in Redis anyway.
    pub fn pause_channel(&self) -> Vec<u8> {
        let mut c = self.config.prefix.as_bytes().to_vec();
        c.extend_from_slice(b"pause");
        c
    }

    /// The message to `PUBLISH` on [`pause_channel`](Self::pause_channel)
    /// after `call` (a pause) came to `(start_us, shift)` (what
    /// [`finish_pause`](Self::finish_pause) returned), so that waiters of
    /// every instance move their slots as the script moved them in Redis;
    /// `None` when there is nothing to tell (a zero shift: a pause already
    /// on covered it). This engine's own waiters are told at once (the
    /// message that comes back on the channel is known by its id).
    ///
    /// The message is ASCII then bytes: `<start_us>:<shift_us>:<id>:<key>`
    /// — decimal µs of Redis' clock, the shift in µs, 16 hex digits that
    /// name this pause, then the Redis key (`rb:tb:alice`, raw bytes). A
    /// key longer than 4 KiB gets no message (its waiters hear of no
    /// pause; their next call still finds it).
    pub fn pause_news(&self, call: &Call, start_us: u64, shift: Duration) -> Option<Vec<u8>> {
        let shift_us = micros(shift);
        if !matches!(call.kind, CallKind::Pause { .. }) || shift_us == 0 {
            return None;
        }
        let id = self.news.fresh_id();
        self.news.record(&call.key, start_us, shift_us, id);
        if call.key.len() > NEWS_MAX_KEY {
            return None;
        }
        let mut m = format!("{start_us}:{shift_us}:{id:016x}:").into_bytes();
        m.extend_from_slice(&call.key);
        Some(m)
    }

    /// Takes in a message heard on [`pause_channel`](Self::pause_channel)
    /// (another instance's [`pause_news`](Self::pause_news)); whether it
    /// was news. A message that is malformed, of a key this limiter cannot
    /// hold (another algorithm's, another prefix's), or already heard is
    /// ignored — it is input from the network. The engine keeps the last
    /// 10 000 pieces of news, over all keys (the oldest is dropped first).
    ///
    /// The rule, applied lazily at each [`acquire_step`](Self::acquire_step)
    /// of a wait that holds a reservation: a pause whose script ran at
    /// `start_us` moves the slot `shift` later if
    /// - it was heard after the reservation's call was handed out (news
    ///   heard before is of a pause that ran before the reservation, which
    ///   Redis already counted in its answer), and
    /// - it ran after the reservation: `start_us ≥` the time the
    ///   reservation's script ran (both on Redis' clock; the same µs counts
    ///   as after — a wait too long, never too short), and
    /// - the slot was not yet due when it ran: `start_us ≤` its due time, as
    ///   moved by the pauses that ran before this one (the pauses are
    ///   applied in the order they ran, whatever the order they are heard
    ///   in).
    ///
    /// That is how the script moved the slot in Redis. Shifts only make a
    /// wait longer: a sleeper needs no interruption.
    pub fn hear(&self, message: &[u8]) -> bool {
        // Learned news (an adapt that replaced the word) is heard too.
        if let Some(ours) = self.hear_learned(message) {
            return ours;
        }
        let Some((at_us, shift_us, id, key)) = parse_news(message) else {
            return false;
        };
        self.ours(key) && self.news.record(key, at_us, shift_us, id)
    }

    /// Whether `key` is one of this prefix's token bucket keys (`rb:tb:`
    /// or `rb:tb@`), on an engine of a token bucket.
    pub(crate) fn ours(&self, key: &[u8]) -> bool {
        let Algorithm::TokenBucket(_) = self.config.algorithm else {
            return false;
        };
        key.strip_prefix(self.config.prefix.as_bytes())
            .and_then(|k| k.strip_prefix(b"tb"))
            .is_some_and(|k| k.first().is_some_and(|b| *b == b':' || *b == b'@'))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::acquisition::Step;
    use crate::acquisition::tests::{MS, engine, news, reserved, step};
    use crate::algorithm::Algorithm;
    use crate::call::CallOutcome;
    use crate::config::Config;
    use crate::decision::Source;
    use crate::engine::Engine;
    use crate::news::{NEWS_KEPT, NEWS_MAX_KEY};
    use crate::reserve::ReserveBegin;

    #[test]
    fn an_engine_tells_its_own_waiters_and_knows_its_echo() {
        let (e, clock) = engine();
        let mut a = reserved(&e, "k", 1_000_000, 300_000);
        let call = e.begin_pause(None, b"k", 600 * MS).unwrap();
        let paused = e
            .finish_pause(CallOutcome::Reply(&[
                1, 0, 600_000, 900_000, 0, 0, 1_050_000, 0, 0,
            ]))
            .unwrap();
        assert_eq!(paused, (1_050_000, 600 * MS));
        let m = e.pause_news(&call, paused.0, paused.1).unwrap();
        let text = String::from_utf8(m.clone()).unwrap();
        let parts: Vec<&str> = text.splitn(4, ':').collect();
        assert_eq!(
            (parts[0], parts[1], parts[3]),
            ("1050000", "600000", "rb:tb:k")
        );
        assert_eq!(parts[2].len(), 16);
        // The echo from the channel is known already: applied once.
        assert!(!e.hear(&m));
        clock.advance(300 * MS);
        assert_eq!(step(&e, &mut a), Step::Sleep(600 * MS));
        // Another instance hears it as news; a zero shift is no news.
        let (other, _) = engine();
        assert!(other.hear(&m));
        assert_eq!(e.pause_news(&call, 1_050_000, Duration::ZERO), None);
        assert_eq!(e.pause_channel(), b"rb:pause");
        // Only a pause's outcome is news.
        let reserve = match e.begin_reserve(None, b"k", 1, MS).unwrap() {
            ReserveBegin::Call(c) => c,
            ReserveBegin::Done(r) => panic!("{r:?}"),
        };
        assert_eq!(e.pause_news(&reserve, 1, MS), None);
    }

    #[test]
    fn a_pause_redis_was_not_told_of_holds_the_local_share() {
        use crate::config::OnError;
        use crate::engine::tests::engine as with_policy;
        use ratebound::Clock;
        let (e, clock) = with_policy(OnError::Local(5.0), 0);
        let full = e.redis_key(None, b"k");
        assert!(e.fail(&full, 1, clock.now()).is_allowed());
        assert!(e.pause_local(None, b"k", 2000 * MS));
        let d = e.fail(&full, 1, clock.now());
        assert!(!d.is_allowed());
        assert!(d.retry_after() >= 2000 * MS, "{:?}", d.retry_after());
        // Other keys are not paused; the pause ends.
        assert!(
            e.fail(&e.redis_key(None, b"other"), 1, clock.now())
                .is_allowed()
        );
        // The share refills from the pause's end: a token 1/5 s later.
        clock.advance(2000 * MS);
        assert!(!e.fail(&full, 1, clock.now()).is_allowed());
        clock.advance(200 * MS);
        assert!(e.fail(&full, 1, clock.now()).is_allowed());
        // No local share: nothing to pause.
        let (open, _) = with_policy(OnError::Open, 0);
        assert!(!open.pause_local(None, b"k", 2000 * MS));
    }

    #[test]
    fn malformed_or_foreign_messages_are_ignored() {
        let (e, _) = engine();
        let id = "00000000000000ff";
        for bad in [
            String::new(),
            "garbage".to_string(),
            format!("1:2:{id}:"),
            format!("1:2:{id}"),
            format!("1:0:{id}:rb:tb:k"),
            format!("x:2:{id}:rb:tb:k"),
            format!("-1:2:{id}:rb:tb:k"),
            format!("1:2.5:{id}:rb:tb:k"),
            format!(" 1:2:{id}:rb:tb:k"),
            format!("1:99999999999999999:{id}:rb:tb:k"),
            format!("{}:2:{id}:rb:tb:k", 1u64 << 60),
            "1:2:ff:rb:tb:k".to_string(),
            "1:2:00000000000000FF:rb:tb:k".to_string(),
            "1:2:00000000000000fg:rb:tb:k".to_string(),
            format!("1:2:{id}:other:tb:k"),
            format!("1:2:{id}:rb:fw:k"),
            format!("1:2:{id}:rb:tbk"),
            format!("1:2:{id}:rb:tb:{}", "k".repeat(NEWS_MAX_KEY)),
        ] {
            assert!(!e.hear(bad.as_bytes()), "{bad:?}");
        }
        assert!(!e.hear(&[0xff, b':', 0xfe]));
        assert_eq!(e.news.len(), 0);
        // Keys are bytes, ':' included; scoped keys are the bucket's too.
        assert!(e.hear(format!("1:2:{id}:rb:tb:a:b\u{e9}").as_bytes()));
        assert!(e.hear(format!("1:2:{id}:rb:tb@policy:k").as_bytes()));
        // A window cannot be paused: it hears nothing.
        let w = Engine::new(Config::new(Algorithm::FixedWindow {
            limit: 1,
            window: Duration::from_secs(1),
        }))
        .unwrap();
        assert!(!w.hear(&news(1, 2, 3, "rb:tb:k")));
    }

    #[test]
    fn the_table_keeps_the_last_ten_thousand() {
        let (e, clock) = engine();
        let mut a = reserved(&e, "first", 1_000, 300_000);
        assert!(e.hear(&news(2_000, 100_000, 0, "rb:tb:first")));
        for i in 1..=NEWS_KEPT as u64 {
            assert!(e.hear(&news(2_000, 100_000, i, &format!("rb:tb:{}", i % 7))));
        }
        assert_eq!(e.news.len(), NEWS_KEPT);
        assert_eq!(e.news.lock().by_key.len(), 7, "'first' was dropped");
        // Its waiter missed it (it goes ahead at its old time — its next
        // call would find the pause in Redis).
        clock.advance(300 * MS);
        assert_eq!(step(&e, &mut a), Step::Done(Source::Redis));
    }
}
