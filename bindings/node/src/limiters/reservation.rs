//! `Reservation`: tokens taken ahead of time by `reserve`.

use std::cell::Cell;
use std::sync::Arc;

use napi_derive::napi;
use ratebound::any::AnyLimiter;
use ratebound::{Limiter, Permit};

/// Tokens taken ahead of time by `reserve`: act after `delay` seconds, or
/// `cancel()` to give them back (if no later taker has built on them).
#[napi]
pub struct Reservation {
    pub(crate) limiter: Holder,
    pub(crate) permit: Cell<Option<Permit>>,
    pub(crate) wait: u64,
}

/// Whose tokens a [`Reservation`] holds.
pub(crate) enum Holder {
    /// A local limiter's.
    Local(Arc<AnyLimiter>),
    /// A shared-memory bucket's.
    Shared(Arc<ratebound_shm::SharedLimiter>),
}

#[napi]
impl Reservation {
    /// Seconds to wait before acting (exact to the nanosecond).
    #[napi(getter)]
    pub fn delay(&self) -> f64 {
        self.wait as f64 / 1e9
    }

    /// Nanoseconds to wait before acting.
    #[napi(getter)]
    pub fn delay_nanos(&self) -> f64 {
        self.wait as f64
    }

    /// Gives the tokens back; a second call does nothing.
    #[napi]
    pub fn cancel(&self) {
        if let Some(permit) = self.permit.take() {
            match &self.limiter {
                Holder::Local(l) => l.release(permit),
                // Issued by this handle: never foreign.
                Holder::Shared(l) => {
                    let _ = l.release(permit);
                }
            }
        }
    }
}
