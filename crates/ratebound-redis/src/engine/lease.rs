//! Token leasing: the tokens leased for one key ([`Lease`]), and the
//! engine's view of all of them ([`Engine::drain`], [`Engine::leased`]).
//! A lease is spent in [`Engine::begin_in`] and taken in
//! [`Engine::finish`].

use ratebound::Clock;

use crate::algorithm::Algorithm;
use crate::call::{Call, CallKind};
use crate::engine::Engine;

/// Tokens leased for one key.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Lease {
    pub(crate) tokens: u64,
    pub(crate) expires: u64,
    /// The spare tokens of the last lease call: the top of its slot.
    top: u64,
    /// The TAT that call left (µs of Redis' clock): what a return of a
    /// token bucket's lease compares with (see [`Engine::give_back`]).
    end_us: u64,
}

impl Lease {
    /// The last lease call left the bucket at `end_us` with `spare` tokens
    /// on top of what it used.
    pub(crate) fn top(&mut self, spare: u64, end_us: u64) {
        self.top = spare;
        self.end_us = end_us;
    }
}

impl Engine {
    /// The calls that give the unspent leased tokens back (on shutdown);
    /// the leases are forgotten. Run each like any call; their outcome
    /// needs no [`finish`](Self::finish).
    ///
    /// A window's count takes them all back while its window lasts. A token
    /// bucket takes back only what nobody has built on, as a reservation's
    /// give-back ([`give_back`](Self::give_back)): the unspent tokens at
    /// the top of the last lease call's slot, if the bucket is still where
    /// that call left it (no other instance took tokens since).
    pub fn drain(&self) -> Vec<Call> {
        let now = self.clock.now();
        let bucket = matches!(self.config.algorithm, Algorithm::TokenBucket(_));
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases
            .drain()
            .filter(|(_, l)| l.tokens > 0 && l.expires > now)
            .filter_map(|(key, l)| {
                if !bucket {
                    return Some(self.call(key, CallKind::Return, l.tokens));
                }
                let back = l.tokens.min(l.top);
                let mut call = self.call(key, CallKind::Return, back);
                call.args[5] = l.end_us.to_string();
                (back > 0).then_some(call)
            })
            .collect()
    }

    /// Leased tokens held now, over all keys.
    pub fn leased(&self) -> u64 {
        let now = self.clock.now();
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases
            .values()
            .filter(|l| l.expires > now)
            .map(|l| l.tokens)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::call::{Begin, CallKind, CallOutcome};
    use crate::config::OnError;
    use crate::decision::Source;
    use crate::engine::tests::{call, engine};

    #[test]
    fn leases_are_spent_locally_and_given_back() {
        let (e, clock) = engine(OnError::Open, 5);
        let c = call(&e, "k", 1);
        assert_eq!(c.args[4..], ["lease", "5"]);
        let d = e.finish(&c, CallOutcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7, 0, 0]));
        assert_eq!((d.source(), d.remaining()), (Source::Redis, 4));
        for left in [3, 2] {
            match e.begin(b"k", 1).unwrap() {
                Begin::Done(d) => assert_eq!((d.source(), d.remaining()), (Source::Lease, left)),
                Begin::Call(_) => panic!("the lease has tokens"),
            }
        }
        assert_eq!(e.leased(), 2);
        // More than the lease holds: a call.
        assert!(matches!(e.begin(b"k", 3).unwrap(), Begin::Call(_)));
        let returns = e.drain();
        assert_eq!(returns.len(), 1);
        assert_eq!(returns[0].kind, CallKind::Return);
        // The 2 left, from the top of the slot the lease call left at
        // 7 + 500 000 µs: given back only if the bucket is still there.
        assert_eq!(returns[0].args[3..6], ["2", "return", "500007"]);
        assert_eq!(e.leased(), 0);
        // Leases lapse.
        e.finish(
            &call(&e, "j", 1),
            CallOutcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7, 0, 0]),
        );
        clock.advance(Duration::from_secs(1));
        assert!(matches!(e.begin(b"j", 1).unwrap(), Begin::Call(_)));
        assert!(e.drain().is_empty());
    }

    #[test]
    fn a_bucket_takes_back_only_the_top_of_the_last_lease() {
        let (e, _) = engine(OnError::Open, 5);
        // Leased 5 (1 used, 4 spare), the bucket left at 500 007 µs.
        e.finish(
            &call(&e, "k", 1),
            CallOutcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7, 0, 0]),
        );
        assert!(matches!(e.begin(b"k", 1).unwrap(), Begin::Done(_)));
        // 3 left; 4 asked: a second lease of 5 (1 spare) on top, left at
        // 900 010 µs.
        let Begin::Call(c) = e.begin(b"k", 4).unwrap() else {
            panic!("the lease holds 3")
        };
        e.finish(&c, CallOutcome::Reply(&[1, 10, 0, 900_000, 5, 0, 10, 0, 0]));
        assert_eq!(e.leased(), 4);
        // Only the last call's spare lies on top of its slot; the 3 older
        // ones sit under it and stay taken.
        let returns = e.drain();
        assert_eq!(returns[0].args[3..6], ["1", "return", "900010"]);
    }
}
