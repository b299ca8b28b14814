//! Reservations and reservation calls in flight: what gives their tokens
//! back when the caller goes away (an acquisition's wait gives back through
//! `ratebound::wait::drive_calls`' `abandon`).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::RedisLimiter;
use crate::plan::Answer;
use crate::{Call, Source};

/// A reservation's call in flight on its own task (see
/// [`RedisLimiter::run_owned`]): dropped before its answer was taken, it
/// hands the answer, when it comes, to [`Engine::orphaned`] and sends the
/// give-back that returns.
pub(super) struct Flight<C: ConnectionLike + Clone + Send + Sync + 'static> {
    pub(super) handle: Option<tokio::task::JoinHandle<Answer>>,
    pub(super) call: Arc<Call>,
    pub(super) limiter: RedisLimiter<C>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Drop for Flight<C> {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        let (limiter, call) = (self.limiter.clone(), self.call.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Ok(answer) = handle.await
                    && let Some(back) = limiter.engine.orphaned(&call, answer.outcome())
                {
                    let _ = limiter.run(&Arc::new(back)).await;
                }
            });
        }
    }
}

pub(super) fn give_back_later<C: ConnectionLike + Clone + Send + Sync + 'static>(
    limiter: RedisLimiter<C>,
    call: Call,
) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = limiter.run(&Arc::new(call)).await;
        });
    }
}

/// Tokens reserved in Redis by [`RedisLimiter::reserve_n`]: usable after
/// [`delay`](Self::delay); given back when cancelled or dropped unless
/// [`wait`](Self::wait) or [`consume`](Self::consume) kept them.
#[must_use = "a reservation dropped at once gives its tokens back"]
pub struct RedisReservation<C: ConnectionLike + Clone + Send + Sync + 'static> {
    /// The limiter and the call that gives them back, while they can
    /// still be given back.
    pub(super) held: Option<(RedisLimiter<C>, Call)>,
    pub(super) due: tokio::time::Instant,
    pub(super) delay: Duration,
    pub(super) source: Source,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisReservation<C> {
    /// How long after the reservation the tokens were due.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Which path answered.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Sleeps until the tokens are due; they are the caller's.
    pub async fn wait(mut self) {
        tokio::time::sleep_until(self.due).await;
        self.held = None;
    }

    /// Keeps the tokens without waiting (the caller sleeps itself).
    pub fn consume(mut self) {
        self.held = None;
    }

    /// Gives the tokens back now; whether Redis took them back — only
    /// if no reservation was made after this one since, nor a pause (see
    /// [`Engine::give_back`](crate::Engine::give_back)).
    pub async fn cancel(mut self) -> bool {
        match self.held.take() {
            Some((limiter, back)) => {
                let answer = limiter.run(&Arc::new(back)).await;
                crate::given_back(answer.outcome())
            }
            None => false,
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Drop for RedisReservation<C> {
    fn drop(&mut self) {
        if let Some((limiter, back)) = self.held.take() {
            give_back_later(limiter, back);
        }
    }
}

impl<C> std::fmt::Debug for RedisReservation<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisReservation")
            .field("delay", &self.delay)
            .field("source", &self.source)
            .field("held", &self.held.is_some())
            .finish()
    }
}
