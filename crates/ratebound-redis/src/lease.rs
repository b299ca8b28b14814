//! Token leasing: the tokens leased for one key ([`Lease`]), and the
//! engine's view of all of them ([`Engine::drain`], [`Engine::leased`]).
//! A lease is spent in [`Engine::begin_in`] and taken in
//! [`Engine::finish`].

use ratebound::Clock;

use crate::call::{Call, CallKind};
use crate::engine::Engine;

/// Tokens leased for one key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lease {
    pub(crate) tokens: u64,
    pub(crate) expires: u64,
}

impl Engine {
    /// The calls that give every unspent leased token back (on shutdown);
    /// the leases are forgotten. Run each like any call; their outcome
    /// needs no [`finish`](Self::finish).
    pub fn drain(&self) -> Vec<Call> {
        let now = self.clock.now();
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases
            .drain()
            .filter(|(_, l)| l.tokens > 0 && l.expires > now)
            .map(|(key, l)| self.call(key, CallKind::Return, l.tokens))
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
        let d = e.finish(&c, CallOutcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7]));
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
        assert_eq!(returns[0].args[3..5], ["2", "return"]);
        assert_eq!(e.leased(), 0);
        // Leases lapse.
        e.finish(
            &call(&e, "j", 1),
            CallOutcome::Reply(&[1, 15, 0, 500_000, 5, 0, 7]),
        );
        clock.advance(Duration::from_secs(1));
        assert!(matches!(e.begin(b"j", 1).unwrap(), Begin::Call(_)));
        assert!(e.drain().is_empty());
    }
}
