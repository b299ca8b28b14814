//! The response future and body that hold a request's concurrency place
//! until the response body is done (or dropped).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, StatusCode};
use ratebound::gate::{Admission, Ask, Place};
use tower_service::Service;

/// The poll of a state that waits: `$variant`'s `waiting`, polled by its
/// `$poll`; once over (or gone), the state moves on to where the request
/// goes.
macro_rules! settle {
    ($state:ident, $cx:ident, $variant:path, $poll:ident) => {{
        let $variant { waiting } = $state.as_mut().project() else {
            return Poll::Ready(());
        };
        if let Some(w) = waiting.as_mut() {
            std::task::ready!(w.$poll($cx));
        }
        let next = match waiting.take() {
            Some(w) => w.finish(),
            None => State::Ready { response: None },
        };
        $state.set(next);
        Poll::Ready(())
    }};
}

#[cfg(feature = "queue")]
mod queue;

use ratebound::LimitCheck;

use crate::remote::{answers, check, poll};
use crate::state::{LayerHooks, LayerState, QuotaFields, insert_taken};

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`] around the inner service `S`
    /// (whose future is `F`) and its request body `R`: a refusal made at
    /// once, the inner service's response with the quota fields added (the
    /// concurrency place passes to its body, or is given back if the future
    /// is dropped or fails), or — with remote policies ([`Builder::remote`](crate::Builder::remote))
    /// that must be waited for — their checks, awaited together, then one of
    /// those. Not boxed (its remote wait is).
    pub struct ResponseFuture<F, S, R> {
        #[pin]
        state: State<F, S, R>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    pub(crate) enum State<F, S, R> {
        Ready { response: Option<Response<Bytes>> },
        Inner {
            #[pin]
            future: F,
            place: Option<Place>,
            quota: QuotaFields,
        },
        Remote { waiting: Option<Box<Waiting<S, R>>> },
        Queued { waiting: Option<Box<Queueing<S, R>>> },
    }
}

#[cfg(feature = "queue")]
pub(crate) use queue::QueueWait as Queueing;
/// Never built without the feature.
#[cfg(not(feature = "queue"))]
pub(crate) enum Queueing<S, R> {
    #[allow(dead_code)]
    Never(std::convert::Infallible, std::marker::PhantomData<(S, R)>),
}

impl<F, S, R> State<F, S, R> {
    /// Where a decided request goes: the refusal, or the inner service
    /// called with the quota fields worked out now (so that the response
    /// future needs nothing shared). The layer's own call writes the same
    /// steps out in place, where the compiler keeps the request's parts
    /// from being copied.
    pub(crate) fn decided<ResBody>(
        shared: &LayerState,
        admission: Admission<'_>,
        parts: Parts,
        body: R,
        inner: &mut S,
    ) -> Self
    where
        S: Service<Request<R>, Response = Response<ResBody>, Future = F>,
    {
        let Admission { verdict, place } = admission;
        if !verdict.is_pass() {
            return State::Ready {
                response: Some(shared.refusal(verdict, &parts)),
            };
        }
        let quota = shared.quota_fields(verdict.fields);
        let future = inner.call(Request::from_parts(parts, body));
        State::Inner {
            future,
            place,
            quota,
        }
    }
}

impl<F, S, R> ResponseFuture<F, S, R> {
    pub(crate) fn new(state: State<F, S, R>) -> Self {
        ResponseFuture { state }
    }

    pub(crate) fn ready(response: Response<Bytes>) -> Self {
        ResponseFuture::new(State::Ready {
            response: Some(response),
        })
    }

    pub(crate) fn inner(future: F, place: Option<Place>, quota: QuotaFields) -> Self {
        ResponseFuture::new(State::Inner {
            future,
            place,
            quota,
        })
    }

    #[cfg(feature = "queue")]
    pub(crate) fn queued(waiting: Box<Queueing<S, R>>) -> Self {
        ResponseFuture::new(State::Queued {
            waiting: Some(waiting),
        })
    }
}

/// An empty 500, for a future polled again after it completed.
fn spent() -> Response<Bytes> {
    let mut r = Response::new(Bytes::new());
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

impl<F, S, R, B, E> Future for ResponseFuture<F, S, R>
where
    F: Future<Output = Result<Response<B>, E>>,
    S: Service<Request<R>, Response = Response<B>, Error = E, Future = F> + Clone,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.as_mut().project().state;
        // The queue's and the remote policies' waits first, wholly out of
        // line: the local path pays two comparisons for them.
        #[cfg(feature = "queue")]
        if let StateProj::Queued { .. } = state.as_mut().project() {
            std::task::ready!(queue::poll_queued(state.as_mut(), cx));
        }
        if let StateProj::Remote { .. } = state.as_mut().project() {
            std::task::ready!(poll_remote(state.as_mut(), cx));
        }
        match state.project() {
            // Polled again after completion: an empty 500 rather than a panic.
            StateProj::Ready { response } => {
                let response = response.take().unwrap_or_else(spent);
                Poll::Ready(Ok(response.map(ResponseBody::refusal)))
            }
            StateProj::Inner {
                future,
                place,
                quota,
            } => {
                let result = std::task::ready!(future.poll(cx));
                // The place goes with the body: a request is in flight until
                // its response has been sent (an error gives it back now).
                let mut place = place.take();
                if let Some(place) = place.as_mut() {
                    // The head is ready: an adaptive limit times the
                    // request now, not when a streamed body ends.
                    place.responded();
                }
                Poll::Ready(result.map(|mut response| {
                    insert_taken(response.headers_mut(), quota);
                    response.map(|body| ResponseBody::inner(body, place))
                }))
            }
            StateProj::Remote { .. } | StateProj::Queued { .. } => {
                Poll::Ready(Ok(spent().map(ResponseBody::refusal)))
            }
        }
    }
}

/// The remote checks, polled together; once all have answered, the state
/// moves on to where the request goes (a refusal, or the inner service's
/// future).
#[inline(never)]
fn poll_remote<S, R, B>(
    mut state: Pin<&mut State<S::Future, S, R>>,
    cx: &mut Context<'_>,
) -> Poll<()>
where
    S: Service<Request<R>, Response = Response<B>>,
{
    settle!(state, cx, StateProj::Remote, poll_checks)
}

pin_project_lite::pin_project! {
    /// The body of a [`RateLimit`] response: the inner service's body, or
    /// the layer's own refusal (empty for a gRPC refusal, which is all
    /// headers). Works with any inner body whose data is [`Bytes`] — axum's,
    /// hyper's, tonic's. Under a [concurrency
    /// limit](Builder::concurrency_limit) it holds the request's place until
    /// its last frame has been read, or it is dropped: a streaming response
    /// is in flight until it ends.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B, place: Option<Place> },
        Refusal { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B, place: Option<Place>) -> Self {
        ResponseBody {
            kind: Kind::Inner { body, place },
        }
    }

    pub(crate) fn refusal(data: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Refusal {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body, place } => {
                let frame = std::task::ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The end, or an error: the response is over.
                    drop(place.take());
                }
                Poll::Ready(frame)
            }
            KindProj::Refusal { data } => {
                Poll::Ready(data.take().map(|d| Ok(http_body::Frame::data(d))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Refusal { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Refusal { data } => {
                http_body::SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// Where a request goes once its remote policies must be asked: their
/// checks, and the decision at once when all answered without I/O (shared
/// memory), or the wait for them.
pub(crate) fn asked<S, R, B>(
    shared: &Arc<LayerState>,
    ask: Ask,
    parts: Parts,
    body: R,
    inner: &mut S,
) -> State<S::Future, S, R>
where
    S: Service<Request<R>, Response = Response<B>> + Clone,
{
    let checks: Vec<_> = shared
        .remote
        .iter()
        .map(|(name, policy)| check(policy.as_ref(), name, ask.identity()))
        .collect();
    if let Some(answers) = answers(&checks) {
        // Every policy answered at once (shared memory): no wait, and
        // the inner service that was polled ready is called now.
        let admission = shared
            .gate
            .finish(ask, &answers, &mut LayerHooks::new(shared, &parts));
        return State::decided(shared, admission, parts, body, inner);
    }
    let clone = inner.clone();
    let inner = std::mem::replace(inner, clone);
    State::Remote {
        waiting: Some(Box::new(Waiting {
            shared: shared.clone(),
            ask,
            checks,
            inner,
            parts,
            body,
        })),
    }
}

/// A request whose remote policies are being asked: everything it needs
/// to go on once they have answered (boxed in the response future, so the
/// local path's future stays small).
pub(crate) struct Waiting<S, R> {
    pub(crate) shared: Arc<LayerState>,
    pub(crate) ask: Ask,
    pub(crate) checks: Vec<LimitCheck>,
    /// The inner service that was polled ready (a clone took its place).
    pub(crate) inner: S,
    pub(crate) parts: Parts,
    pub(crate) body: R,
}

impl<S, R> Waiting<S, R> {
    /// Polls every pending check (all at once: they run concurrently);
    /// ready when all have answered.
    pub(crate) fn poll_checks(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut pending = false;
        for check in &mut self.checks {
            pending |= poll(check, cx);
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// The rest of the sequence once every check has answered: the gate
    /// decides, and the request is refused or goes to the inner service.
    pub(crate) fn finish<ResBody>(self) -> State<S::Future, S, R>
    where
        S: Service<Request<R>, Response = http::Response<ResBody>>,
    {
        let Waiting {
            shared,
            ask,
            checks,
            mut inner,
            parts,
            body,
        } = self;
        // Every check has answered (`poll_checks` was ready).
        let answers = answers(&checks).unwrap_or_default();
        let admission = shared
            .gate
            .finish(ask, &answers, &mut LayerHooks::new(&shared, &parts));
        State::decided(&shared, admission, parts, body, &mut inner)
    }
}
