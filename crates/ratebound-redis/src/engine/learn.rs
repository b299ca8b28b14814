//! What the outbound adapters learn of a partner's real limit, in Redis,
//! sans-I/O: the learned word ([`Learned`]) lives beside the bucket, in the
//! same key (`lua/gcra.lua`: `"<TAT>:<hi>:<lo>"`, or with the pause's end
//! after the TAT while one is on), and is read
//! by the same script run as every acquisition — the bucket runs at the
//! word's share of the ceiling (the configured quota), scaled as
//! [`Learned::scale`] scales it. Every reply of the token bucket's script
//! carries the word in force ([`Engine::learned`] answers from the last
//! one for the key, without I/O); [`Engine::begin_adapt`] is the
//! compare-and-swap that replaces it for the whole fleet. A check, lease
//! or reservation on a key whose word is known hints it
//! ([`Call::hint`]): the script compares the stored word with the hint
//! instead of reading and scaling it.
//!
//! **Forgetting.** A key holding a learned word lives at least the learned
//! tolerance (`burst' × T'`: the time its bucket takes to fill at the
//! learned rate) after each write. A fleet idle that long finds the key
//! gone: it runs at the ceiling again and learns again from the partner's
//! next refusals (a word never expires while the fleet keeps calling).
//! A damaged key is rebuilt with the fresh word (the ceiling, never above).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ratebound::outbound::Learned;
use ratebound::{Clock, Error};

use crate::call::{Call, CallKind, CallOutcome, HINTED};
use crate::engine::Engine;

/// The most keys whose last word an engine keeps (beyond it, another key's
/// entry is dropped: its next reply brings it back).
pub(crate) const MAX_WORDS: usize = 65_536;

/// The bits of a word's low part (the change instant, ms).
const LO_BITS: u32 = 44;

/// The two numbers a script keeps and replies for `word` (its bits 44 and
/// up, then its bits 0–43): each below 2^53, where a Lua number is exact.
pub(crate) fn parts(word: Learned) -> (u64, u64) {
    let bits = word.to_bits();
    (bits >> LO_BITS, bits & ((1 << LO_BITS) - 1))
}

/// The word of a well-formed reply (its last two numbers).
pub(crate) fn word_of(reply: &[i64]) -> Learned {
    let (hi, lo) = (reply[7] as u64, reply[8] as u64);
    Learned::from_bits((hi << LO_BITS) | lo)
}

/// The word of `call`'s well-formed reply ([`Call::replied`]): the hint's
/// when the script says the key held it ([`HINTED`]).
pub(crate) fn word_of_call(call: &Call, reply: &[i64]) -> Learned {
    match call.hint {
        Some(word) if reply[7] == HINTED => word,
        _ => word_of(reply),
    }
}

/// The longest interval `lua/gcra.lua` scales to, µs: ceil(2^60 / 1000).
const MAX_T: u128 = 1_152_921_504_606_847;
/// The longest tolerance it scales to, µs: floor(2^60 / 1000).
const MAX_TAU: u128 = 1_152_921_504_606_846;

/// `T'` and `tau'` (µs) of the ceiling's `t` and `tau` (µs, `tau` a
/// multiple of `t` below 2^53) under a word whose bits 44 and up are `hi`:
/// `lua/gcra.lua`'s scaling in integers — its doubles are exact there, so
/// these are its numbers bit for bit (`tests/learn_hint.rs` compares the
/// two against a real Redis), which a hinted call hands it instead of
/// having it scale.
pub(crate) fn scaled(hi: u64, t: u128, tau: u128) -> (u128, u128) {
    let cut = u128::from(hi % (1 << 17));
    if cut == 0 {
        return (t, tau);
    }
    let f = 65_536u128.saturating_sub(cut).max(1);
    let b = tau / t;
    let t2 = (t * 65_536).div_ceil(f).min(MAX_T);
    let mut s = b * f / 65_536;
    let mut tau2 = s * t2;
    if tau2 > MAX_TAU || s < 1 {
        if tau2 > MAX_TAU {
            s = MAX_TAU / t2;
        }
        s = s.max(1);
        tau2 = s * t2;
    }
    (t2, tau2)
}

/// The words of the keys an engine last heard of (none while nothing was
/// ever learned: a fleet that learned nothing takes no lock for it).
#[derive(Debug, Default)]
pub(crate) struct Words {
    /// Whether any word was ever kept (read before taking the lock).
    any: AtomicBool,
    map: Mutex<HashMap<Vec<u8>, u64>>,
}

impl Words {
    /// `key`'s reply said `word`.
    pub(crate) fn heard(&self, key: &[u8], word: Learned) {
        let bits = word.to_bits();
        // Ordering: Relaxed — the flag only spares the lock; the map itself
        // is read and written under it.
        if bits == 0 && !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if bits == 0 {
            map.remove(key);
            return;
        }
        self.any.store(true, Ordering::Relaxed);
        if let Some(old) = map.get_mut(key) {
            *old = bits;
            return;
        }
        if map.len() >= MAX_WORDS
            && let Some(other) = map.keys().next().cloned()
        {
            map.remove(&other);
        }
        map.insert(key.to_vec(), bits);
    }

    /// The last word heard for `key` (fresh if none).
    /// `word` heard of on the channel: kept unless the last reply already
    /// told a word changed later (news can arrive after it).
    pub(crate) fn heard_news(&self, key: &[u8], word: Learned) {
        let held = self.of(key);
        if held.is_fresh() || word.changed_ms() > held.changed_ms() {
            self.heard(key, word);
        }
    }

    pub(crate) fn of(&self, key: &[u8]) -> Learned {
        if !self.any.load(Ordering::Relaxed) {
            return Learned::fresh();
        }
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        Learned::from_bits(map.get(key).copied().unwrap_or(0))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Engine {
    /// What the fleet has learned for `key` (within `scope`, as in
    /// [`redis_key`](Self::redis_key)), as the last reply of Redis for
    /// that key said — no I/O: the fresh word (the ceiling) before any
    /// reply, for a window (it learns nothing), and once a key's reply
    /// said it was forgotten. An outbound adapter sends under this word
    /// ([`ratebound::outbound::Call::saw`]) right after its acquisition,
    /// whose reply carried it.
    pub fn learned(&self, scope: Option<&str>, key: &[u8]) -> Learned {
        self.words.of(&self.redis_key(scope, key))
    }

    /// Heard `reply` ([`Call::replied`]) to `call`: its key's word.
    pub(crate) fn heard_word(&self, call: &Call, reply: &[i64]) {
        self.words.heard(&call.key, word_of_call(call, reply));
    }

    /// The hint for a call of `kind` on `key` (its full key) with `args`
    /// as [`call`](Self::call) made them: while the key's last reply told
    /// a learned word, a check, lease or reservation on a token bucket
    /// hands the script the word's scaled `T'` and `tau'` in place of the
    /// ceiling's, then the word as it is stored (`":<hi>:<lo>"`) and the
    /// ceiling's `"<T>:<tau>"`: a key that holds that word is read with one
    /// string comparison, without scaling (the reply then says
    /// [`HINTED`]); any other runs the full path on the ceiling. The word
    /// hinted, if any.
    pub(crate) fn hint(
        &self,
        key: &[u8],
        kind: CallKind,
        args: &mut Vec<String>,
    ) -> Option<Learned> {
        let (t, tau) = self.redis.bucket?;
        if !matches!(
            kind,
            CallKind::Check | CallKind::Lease | CallKind::Reserve { .. }
        ) {
            return None;
        }
        let word = self.words.of(key);
        if word.is_fresh() {
            return None;
        }
        let (hi, lo) = parts(word);
        let (t2, tau2) = scaled(hi, t, tau);
        let ceiling = format!("{}:{}", args[1], args[2]);
        args[1] = t2.to_string();
        args[2] = tau2.to_string();
        args.push(format!(":{hi}:{lo}"));
        args.push(ceiling);
        Some(word)
    }

    /// The call that replaces `key`'s learned word `seen` with `next` for
    /// every instance, if it is still `seen` (a compare-and-swap in the
    /// script, one round trip; the bucket's state is left as it is, and
    /// runs at `next`'s share of the ceiling from then on). Run it like
    /// any call and hand its outcome to
    /// [`finish_adapt`](Self::finish_adapt).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a window (it learns nothing);
    /// [`Error::StoreUnavailable`] while the circuit breaker spares Redis
    /// (nothing is learned; no fail policy answers an adapt).
    ///
    /// # Examples
    /// ```
    /// use ratebound::Quota;
    /// use ratebound::outbound::{FULL, Learned};
    /// use ratebound_redis::{Algorithm, CallOutcome, Config, Engine};
    /// let engine = Engine::new(Config::new(Algorithm::TokenBucket(Quota::parse("30/s")?)))?;
    /// let next = Learned::new(FULL / 2, 1_800_000_000_000).with_cut(true);
    /// let call = engine.begin_adapt(None, b"partner", Learned::fresh(), next)?;
    /// assert_eq!(call.args[4], "adapt");
    /// // Redis' answer: replaced, and the word in force is `next`
    /// // (its two parts: bits 44 and up, bits 0-43).
    /// let (hi, lo) = ((next.to_bits() >> 44) as i64, (next.to_bits() & ((1 << 44) - 1)) as i64);
    /// let reply = [1, 15, 0, 0, 0, 0, 1_800_000_000_000_000, hi, lo];
    /// assert_eq!(engine.finish_adapt(&call, CallOutcome::Reply(&reply)), Ok(true));
    /// assert_eq!(engine.learned(None, b"partner"), next);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn begin_adapt(
        &self,
        scope: Option<&str>,
        key: &[u8],
        seen: Learned,
        next: Learned,
    ) -> Result<Call, Error> {
        self.bucket_only("adapt (learning a partner's limit)")?;
        let now = self.clock.now();
        if !self.breaker.may_call(now) {
            return Err(self.adapt_failed());
        }
        Ok(self.call(
            self.redis_key(scope, key),
            CallKind::Adapt { seen, next },
            0,
        ))
    }

    /// What became of an adapt: `Ok(true)` when the word was replaced,
    /// `Ok(false)` when another instance had changed it first (the word
    /// now in force is [`learned`](Self::learned)'s).
    ///
    /// # Errors
    /// [`Error::StoreUnavailable`] when Redis did not answer (the breaker
    /// hears of it as of any call; the client's own overload does not
    /// count): nothing is learned, and the caller goes on.
    pub fn finish_adapt(&self, call: &Call, outcome: CallOutcome<'_>) -> Result<bool, Error> {
        let now = self.clock.now();
        match outcome {
            CallOutcome::Reply(r) if call.replied(r) => {
                self.answered(now);
                self.heard_word(call, r);
                Ok(r[0] == 1)
            }
            _ if self.overloaded(&outcome, now) => {
                self.breaker.unanswered();
                Err(Error::StoreUnavailable {
                    cause: "the redis client is overloaded: the adapt was not sent in time"
                        .to_string(),
                    retry_after: self.config.timeout,
                })
            }
            _ => {
                self.failed(&outcome, now);
                Err(self.adapt_failed())
            }
        }
    }

    /// [`finish_adapt`](Self::finish_adapt), and the news to publish on
    /// [`pause_channel`](Self::pause_channel) for the other instances
    /// (their waiters, whose reservations read the word before, see a fall
    /// when they wake and wait again at the new rate —
    /// [`ratebound::outbound::Call::reserving`]): `Some` exactly when the
    /// word was replaced. The drivers publish what it says, within the
    /// deadline, and report the `bool`.
    ///
    /// # Errors
    /// As [`finish_adapt`](Self::finish_adapt).
    pub fn finish_adapt_news(
        &self,
        call: &Call,
        outcome: CallOutcome<'_>,
    ) -> Result<(bool, Option<Vec<u8>>), Error> {
        let replaced = self.finish_adapt(call, outcome)?;
        Ok((replaced, replaced.then(|| self.learned_news(call))))
    }

    fn adapt_failed(&self) -> Error {
        Error::StoreUnavailable {
            cause: format!(
                "redis unavailable ({}): nothing learned{}",
                self.last_cause(),
                if self.breaker.is_open() {
                    " (the circuit breaker is open)"
                } else {
                    ""
                }
            ),
            retry_after: Duration::from_nanos(self.breaker.cooldown),
        }
    }
}

/// Learned news: `L:<hi>:<lo>:<key>` (the word's two parts, each within
/// its bounds, and the full Redis key).
pub(crate) fn parse_learned_news(m: &[u8]) -> Option<(Learned, &[u8])> {
    fn decimal(b: &[u8], most: u64) -> Option<u64> {
        if b.is_empty() || b.len() > 14 || !b.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = b.iter().fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
        (v <= most).then_some(v)
    }
    let rest = m.strip_prefix(b"L:")?;
    if rest.len() > 64 + crate::news::NEWS_MAX_KEY {
        return None;
    }
    let mut parts = rest.splitn(3, |b| *b == b':');
    let hi = decimal(parts.next()?, (1 << 18) - 1)?;
    let lo = decimal(parts.next()?, (1 << LO_BITS) - 1)?;
    let key = parts.next()?;
    if key.is_empty() {
        return None;
    }
    Some((Learned::from_bits((hi << LO_BITS) | lo), key))
}

impl Engine {
    /// The news an adapt that replaced the word publishes on the
    /// prefix's channel ([`finish_adapt_news`](Self::finish_adapt_news)):
    /// the instances that listen learn the word at once. Made after
    /// [`finish_adapt`](Self::finish_adapt) answered `Ok(true)` for
    /// `call`: it tells the word that call wrote.
    pub(crate) fn learned_news(&self, call: &Call) -> Vec<u8> {
        let (hi, lo) = parts(self.words.of(&call.key));
        let mut m = format!("L:{hi}:{lo}:").into_bytes();
        m.extend_from_slice(&call.key);
        m
    }

    /// Hears learned news ([`learned_news`](Self::learned_news)) for one of
    /// this prefix's token bucket keys: the word is kept unless a later one
    /// is known. True when the message was learned news of ours.
    pub(crate) fn hear_learned(&self, message: &[u8]) -> Option<bool> {
        let (word, key) = parse_learned_news(message)?;
        if !self.ours(key) {
            return Some(false);
        }
        self.words.heard_news(key, word);
        Some(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acquisition::tests::engine;
    use ratebound::outbound::FULL;

    fn reply_with(word: Learned) -> [i64; 9] {
        let (hi, lo) = parts(word);
        [1, 0, 0, 100_000, 1, 0, 1_000_000, hi as i64, lo as i64]
    }

    #[test]
    fn parts_are_exact_below_2_53_and_come_back() {
        for word in [
            Learned::fresh(),
            Learned::new(FULL, 1),
            Learned::new(0, ratebound::outbound::MAX_INSTANT_MS).with_cut(true),
            Learned::new(FULL / 3, 1_800_000_000_123).with_cut(true),
        ] {
            let (hi, lo) = parts(word);
            assert!(hi < 1 << 18 && lo < 1 << 44, "{word:?}");
            assert_eq!(word_of(&reply_with(word)), word);
        }
    }

    #[test]
    fn each_reply_leaves_its_keys_word() {
        let (e, _) = engine();
        let crate::Begin::Call(call) = e.begin(b"k", 1).unwrap() else {
            panic!("a call")
        };
        assert_eq!(e.learned(None, b"k"), Learned::fresh());
        let word = Learned::new(FULL / 2, 7).with_cut(true);
        e.finish(&call, CallOutcome::Reply(&reply_with(word)));
        assert_eq!(e.learned(None, b"k"), word);
        // Another scope is another key.
        assert_eq!(e.learned(Some("api"), b"k"), Learned::fresh());
        // Forgotten (the key expired): the next reply says fresh.
        e.finish(&call, CallOutcome::Reply(&reply_with(Learned::fresh())));
        assert_eq!(e.learned(None, b"k"), Learned::fresh());
        assert_eq!(e.words.len(), 0);
        // A failure tells nothing of the word.
        e.finish(&call, CallOutcome::Reply(&reply_with(word)));
        e.finish(&call, CallOutcome::Timeout);
        assert_eq!(e.learned(None, b"k"), word);
    }

    #[test]
    fn the_cache_is_bounded() {
        let words = Words::default();
        let word = Learned::new(1, 1);
        for i in 0..MAX_WORDS + 10 {
            words.heard(format!("k{i}").as_bytes(), word);
        }
        assert_eq!(words.len(), MAX_WORDS);
        // The last one heard is there.
        assert_eq!(words.of(format!("k{}", MAX_WORDS + 9).as_bytes()), word);
    }

    #[test]
    fn an_adapt_fails_while_the_breaker_is_open_and_learns_nothing() {
        let (e, _) = engine();
        let next = Learned::new(FULL / 2, 1);
        let call = e.begin_adapt(None, b"k", Learned::fresh(), next).unwrap();
        assert_eq!(call.args[5], format!("0:0:{}:1", parts(next).0));
        assert!(matches!(
            e.finish_adapt(&call, CallOutcome::Failed("connection refused")),
            Err(Error::StoreUnavailable { .. })
        ));
        for _ in 0..5 {
            let _ = e.finish_adapt(&call, CallOutcome::Timeout);
        }
        assert!(e.breaker_open());
        let err = e
            .begin_adapt(None, b"k", Learned::fresh(), next)
            .unwrap_err();
        assert!(
            matches!(&err, Error::StoreUnavailable { cause, .. } if cause.contains("nothing learned")),
            "{err:?}"
        );
        assert_eq!(e.learned(None, b"k"), Learned::fresh());
        // A reply of another shape (a word beyond its bounds) is a failure.
        let mut bad = reply_with(next);
        bad[7] = 1 << 18;
        assert!(e.finish_adapt(&call, CallOutcome::Reply(&bad)).is_err());
    }

    #[test]
    fn a_window_learns_nothing() {
        let c = crate::Config::new(crate::Algorithm::FixedWindow {
            limit: 10,
            window: Duration::from_secs(1),
        });
        let e = Engine::new(c).unwrap();
        assert!(matches!(
            e.begin_adapt(None, b"k", Learned::fresh(), Learned::new(1, 1)),
            Err(Error::Unsupported { .. })
        ));
    }

    /// An adapt that did not replace the word (another instance changed it
    /// first) has nothing to tell; one Redis did not answer is an error.
    #[test]
    fn only_a_replaced_word_is_news() {
        let (a, _) = engine();
        let half = Learned::new(FULL / 2, 2_000).with_cut(true);
        let other = Learned::new(FULL / 3, 2_500).with_cut(true);
        let call = a
            .begin_adapt(None, b"partner", Learned::fresh(), half)
            .unwrap();
        let (hi, lo) = parts(other);
        let reply = [0, 15, 0, 0, 0, 0, 1_000_000, hi as i64, lo as i64];
        assert_eq!(
            a.finish_adapt_news(&call, CallOutcome::Reply(&reply)),
            Ok((false, None))
        );
        assert_eq!(a.learned(None, b"partner"), other);
        let call = a.begin_adapt(None, b"partner", other, half).unwrap();
        assert!(matches!(
            a.finish_adapt_news(&call, CallOutcome::Failed("connection reset")),
            Err(Error::StoreUnavailable { .. })
        ));
    }

    /// An adapt's news reaches another engine's cache; an older word never
    /// replaces a newer one its own replies told; another prefix's key,
    /// a window's engine and malformed news are not heard.
    #[test]
    fn learned_news_is_heard_in_order_and_only_for_our_keys() {
        let (a, _) = engine();
        let (b, _) = engine();
        let half = Learned::new(FULL / 2, 2_000).with_cut(true);
        let call = a
            .begin_adapt(None, b"partner", Learned::fresh(), half)
            .unwrap();
        let (hi, lo) = parts(half);
        let reply = [1, 15, 0, 0, 0, 0, 1_000_000, hi as i64, lo as i64];
        let (replaced, news) = a
            .finish_adapt_news(&call, CallOutcome::Reply(&reply))
            .unwrap();
        assert!(replaced);
        let news = news.expect("news of a replaced word");
        assert!(b.hear(&news));
        assert_eq!(b.learned(None, b"partner"), half);
        // Older news than what is known: kept out.
        let older = Learned::new(FULL / 4, 1_000).with_cut(true);
        let (hi, lo) = parts(older);
        let mut old_news = format!("L:{hi}:{lo}:").into_bytes();
        old_news.extend_from_slice(&call.key);
        assert!(b.hear(&old_news));
        assert_eq!(b.learned(None, b"partner"), half);
        // Another prefix's key, bad numbers, no key: not ours, not news.
        assert!(!b.hear(b"L:1:2:other:tb:partner"));
        for bad in [
            &b"L:999999:1:rb:tb:k"[..],
            b"L:1:x:rb:tb:k",
            b"L:1:2:",
            b"L:1",
        ] {
            assert!(parse_learned_news(bad).is_none(), "{bad:?}");
            assert!(!b.hear(bad));
        }
    }
}
