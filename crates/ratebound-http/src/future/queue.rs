//! The response future's wait in the concurrency cap's queue
//! ([`Builder::queue`](crate::Builder::queue)): until a place is granted or
//! the queue's wait has passed (tokio's timer), then the rest of the
//! sequence — the key, the policies, the inner service — or a 503.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response};
use ratebound::gate;
use ratebound::gate::{Admit, Queued};
use tower_service::Service;

use super::{State, asked};
use crate::state::{LayerHooks, LayerState, stopped};

/// A request waiting for a concurrency place, with what it needs to go on.
pub(crate) struct QueueWait<S, R> {
    shared: Arc<LayerState>,
    queued: Queued,
    timeout: Pin<Box<tokio::time::Sleep>>,
    /// The inner service that was polled ready (a clone took its place).
    inner: S,
    parts: Parts,
    body: R,
}

impl<S: Clone, R> QueueWait<S, R> {
    pub(crate) fn new(
        shared: &Arc<LayerState>,
        queued: Queued,
        inner: &mut S,
        parts: Parts,
        body: R,
    ) -> Box<Self> {
        let clone = inner.clone();
        Box::new(QueueWait {
            shared: shared.clone(),
            timeout: Box::pin(tokio::time::sleep(queued.max_wait())),
            queued,
            inner: std::mem::replace(inner, clone),
            parts,
            body,
        })
    }
}

impl<S, R> QueueWait<S, R> {
    /// Ready when a place came or the wait is over.
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.queued.poll_place(cx).is_ready() {
            return Poll::Ready(());
        }
        self.timeout.as_mut().poll(cx)
    }

    /// The rest of the sequence: with the place granted, or shed.
    fn finish<B>(self) -> State<S::Future, S, R>
    where
        S: Service<Request<R>, Response = Response<B>> + Clone,
    {
        let QueueWait {
            shared,
            queued,
            mut inner,
            parts,
            body,
            ..
        } = self;
        let view = gate::Request {
            key: None,
            peer: LayerState::peer(&parts),
            headers: &shared.lines(&parts),
        };
        let admit = shared
            .gate
            .resume(queued, &view, &mut LayerHooks::new(&shared, &parts));
        match admit {
            Admit::Decided(admission) => {
                State::decided(&shared, admission, parts, body, &mut inner)
            }
            Admit::Ask(ask) => asked(&shared, ask, parts, body, &mut inner),
            // Not reached: resume is past `exempt`, and the layer's hooks
            // never stop the sequence.
            Admit::Exempt | Admit::Stopped => State::Ready {
                response: Some(stopped()),
            },
        }
    }
}

use std::future::Future;

/// Polls the queue's wait; once over, the state moves on to where the
/// request goes.
#[inline(never)]
pub(crate) fn poll_queued<S, R, B>(
    mut state: Pin<&mut State<S::Future, S, R>>,
    cx: &mut Context<'_>,
) -> Poll<()>
where
    S: Service<Request<R>, Response = Response<B>> + Clone,
{
    settle!(state, cx, super::StateProj::Queued, poll_wait)
}
