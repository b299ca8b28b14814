//! The layer and its service: one request through the core's
//! [`Gate::admit`] — exempt, concurrency place, critical, shed, key, decide,
//! report, with the remote policies asked first when there are any — and
//! the place held until the body ends.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use ratebound::gate;
use ratebound::gate::{Admission, Admit, Gate};
use tower_layer::Layer;
use tower_service::Service;

use crate::future::{ResponseBody, ResponseFuture, asked};
use crate::state::{LayerHooks, LayerState, stopped};

/// The tower layer; see the crate docs.
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(crate) shared: Arc<LayerState>,
}

impl RateLimitLayer {
    /// The gate making the decisions (for its key count, `cleanup`, ...).
    pub fn gate(&self) -> &Gate {
        &self.shared.gate
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service the layer wraps around `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<LayerState>,
}

/// `S: Clone` for the remote policies: the inner service is then called
/// after their checks, from the response future, so the one that was
/// polled ready moves into it and a clone takes its place (the standard
/// tower pattern; axum's `Router`, tonic's services and `service_fn` are
/// `Clone`). Without remote policies to wait for, `self.inner` is called
/// at once and never cloned.
impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &*self.shared;
        let (parts, body) = request.into_parts();
        let view = gate::Request {
            key: None,
            peer: LayerState::peer(&parts),
            headers: &shared.lines(&parts),
        };
        let mut hooks = LayerHooks::new(shared, &parts);
        #[cfg(feature = "queue")]
        let admit = if shared.queued {
            match shared.gate.admit_or_queue(&view, &mut hooks) {
                gate::Queueing::Admit(admit) => admit,
                gate::Queueing::Queued(queued) => {
                    return ResponseFuture::queued(crate::future::Queueing::new(
                        &self.shared,
                        queued,
                        &mut self.inner,
                        parts,
                        body,
                    ));
                }
            }
        } else {
            shared.gate.admit(&view, &mut hooks)
        };
        #[cfg(not(feature = "queue"))]
        let admit = shared.gate.admit(&view, &mut hooks);
        let ask = match admit {
            Admit::Exempt => {
                let future = self.inner.call(Request::from_parts(parts, body));
                return ResponseFuture::inner(future, None, [None, None, None]);
            }
            // As `State::decided`, written out here: the hot path.
            Admit::Decided(Admission { verdict, place }) => {
                if !verdict.is_pass() {
                    return ResponseFuture::ready(shared.refusal(verdict, &parts));
                }
                // Worked out now, so the response future needs nothing shared.
                let quota = shared.quota_fields(verdict.fields);
                let future = self.inner.call(Request::from_parts(parts, body));
                return ResponseFuture::inner(future, place, quota);
            }
            Admit::Ask(ask) => ask,
            // Not reached: LayerHooks::with_key never stops the sequence.
            Admit::Stopped => return ResponseFuture::ready(stopped()),
        };
        ResponseFuture::new(asked(&self.shared, ask, parts, body, &mut self.inner))
    }
}
