//! A remote policy of the application's own over a store that can fail:
//! while its `fault` names an error, each check ends in it (answered after a
//! turn of the runtime, as a store's I/O would be; the layer maps it by the
//! core's one rule), and so do waits and pauses; otherwise a check is
//! allowed. Shared by store_error.rs and gate_spec.rs.

use std::time::Duration;

use ratebound::any::Key;
use ratebound::pause::Reach;
use ratebound::{BoxFuture, Decision, Error, KeyedAlgorithm, KeyedLimit, LimitCheck};

pub struct Failing {
    pub algorithm: KeyedAlgorithm,
    /// The error the store answers with now (`None`: it is up).
    pub fault: Box<dyn Fn() -> Option<Error> + Send + Sync>,
}

impl Failing {
    /// `Ok(value)` while the store is up, else its error.
    fn or_fault<T: Send + 'static>(&self, value: T) -> BoxFuture<'static, Result<T, Error>> {
        Box::pin(std::future::ready((self.fault)().map_or(Ok(value), Err)))
    }
}

impl KeyedLimit for Failing {
    fn algorithm(&self) -> KeyedAlgorithm {
        self.algorithm
    }

    fn check(&self, _scope: &str, _key: Key<'_>, n: u64) -> LimitCheck {
        let capacity = self.algorithm.capacity();
        let answer = self.or_fault(Decision::from_parts(
            true,
            capacity,
            capacity.saturating_sub(n),
            0,
            0,
        ));
        LimitCheck::pending(async move {
            tokio::task::yield_now().await;
            answer.await
        })
    }

    fn acquire<'a>(
        &'a self,
        _key: Key<'a>,
        _n: u64,
        _timeout: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        self.or_fault(())
    }

    fn pause<'a>(&'a self, _key: Key<'a>, _d: Duration) -> BoxFuture<'a, Result<Reach, Error>> {
        self.or_fault(Reach::Shared)
    }
}
