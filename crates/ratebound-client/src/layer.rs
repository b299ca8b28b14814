//! The tower adapter (feature `tower`): a `Layer` for HTTP clients.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::request::Parts;
use http::uri::Authority;
use http::{Request, Response};
use ratebound::outbound::{Announced, Call, Target};
use tower_layer::Layer;
use tower_service::Service;

use crate::builder::{Exchange, Key, Settings};
use crate::{CallError, Error, OutboundBuilder, grpc};
use ratebound::BoxFuture;

/// A tower [`Layer`] for HTTP clients — hyper-util's `Client`, a tonic
/// `Channel`, any `Service<http::Request<B>, Response = http::Response<_>>`
/// that is `Clone` — doing what
/// [`OutboundMiddleware`](crate::OutboundMiddleware) does: wait for the
/// limiter's token before each sending, pause the limiter as the partner
/// asks, send retries through it; see the crate docs.
///
/// A trailers-only gRPC answer (HTTP 200 with `grpc-status` in the
/// headers) with `RESOURCE_EXHAUSTED` counts as a 429 and with
/// `UNAVAILABLE` as a 503; the `google.rpc.RetryInfo` in its
/// `grpc-status-details-bin` is a pause (capped at `max_pause`; with a
/// `Retry-After` too, the longer one is obeyed). gRPC calls are POSTs:
/// they are retried only with [`OutboundBuilder::any_method`].
///
/// **Retries need the request again**: a request is sent again only when
/// its body can be copied ([`RetryBody`]: `Full`, `Empty`, `String`, ...).
/// One that cannot — a stream, `tonic::body::Body` — still waits for its
/// token and pauses the limiter, and the caller gets the answer (the next
/// call waits out the pause).
///
/// The service is always ready: the wait is in the response future, and
/// a clone of the inner service is made ready after it, so no inner
/// capacity (a tonic `Channel`'s buffer slot) is held while a call waits.
///
/// # Examples
/// ```
/// # #[cfg(feature = "tower")] fn main() -> Result<(), ratebound_client::Error> {
/// use ratebound::{Quota, TokenBucket};
/// use ratebound_client::OutboundLayer;
/// use tower_layer::Layer;
///
/// let limiter = TokenBucket::new(Quota::parse("10/s burst 20")?);
/// let layer = OutboundLayer::builder(limiter).key("partner").build()?;
/// # #[derive(Clone)] struct Client;
/// let service = layer.layer(Client); // hyper-util's Client, a tonic Channel
/// # let _ = service; Ok(()) }
/// # #[cfg(not(feature = "tower"))] fn main() {}
/// ```
#[derive(Clone)]
pub struct OutboundLayer {
    sender: Arc<Sender>,
}

/// What the layer and each of its services share: the settings and the key
/// function, and `send`, one request's sequence through the limiter.
struct Sender {
    settings: Settings,
    key: Key<Parts>,
}

impl OutboundLayer {
    /// A builder around `limiter` (a token bucket: see
    /// [`KeyedLimit`](ratebound::KeyedLimit)); a key function sees the request's head.
    pub fn builder(limiter: impl ratebound::KeyedLimit + 'static) -> OutboundBuilder<Parts> {
        OutboundBuilder::new(limiter)
    }
}

impl OutboundBuilder<Parts> {
    /// The layer.
    ///
    /// # Errors
    /// As [`OutboundMiddleware`](crate::OutboundMiddleware)'s builder:
    /// [`Error::Limit`] with [`ratebound::Error::Unsupported`] for a
    /// window, [`ratebound::Error::InvalidNumber`] for a zero `max_pause`,
    /// a status outside 100–599 or `n = 0`.
    pub fn build(self) -> Result<OutboundLayer, Error> {
        let (settings, key) = self.finish()?;
        Ok(OutboundLayer {
            sender: Arc::new(Sender { settings, key }),
        })
    }
}

impl fmt::Debug for OutboundLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundLayer").finish_non_exhaustive()
    }
}

impl<S> Layer<S> for OutboundLayer {
    type Service = OutboundService<S>;

    fn layer(&self, inner: S) -> OutboundService<S> {
        OutboundService {
            inner,
            sender: self.sender.clone(),
        }
    }
}

/// The service [`OutboundLayer`] wraps around `S`.
#[derive(Clone)]
pub struct OutboundService<S> {
    inner: S,
    sender: Arc<Sender>,
}

impl<S> fmt::Debug for OutboundService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundService").finish_non_exhaustive()
    }
}

/// A request body that can be sent again: what a retry needs.
///
/// Implemented for the bodies that are values (`http_body_util::Full`,
/// `Empty`, `Either` of two such, `String`) and, with the `tonic`
/// feature, for `tonic::body::Body`, which is a stream (only an empty one
/// is copied). Implement it for a body of your own; a streaming body's
/// `try_clone` is `None`.
pub trait RetryBody: Sized {
    /// A copy to send again, or `None` if this body cannot give one.
    fn try_clone(&self) -> Option<Self>;
}

impl<D: Clone> RetryBody for http_body_util::Full<D> {
    fn try_clone(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<D> RetryBody for http_body_util::Empty<D> {
    fn try_clone(&self) -> Option<Self> {
        Some(http_body_util::Empty::new())
    }
}

impl RetryBody for String {
    fn try_clone(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<L: RetryBody, R: RetryBody> RetryBody for http_body_util::Either<L, R> {
    fn try_clone(&self) -> Option<Self> {
        match self {
            http_body_util::Either::Left(l) => l.try_clone().map(http_body_util::Either::Left),
            http_body_util::Either::Right(r) => r.try_clone().map(http_body_util::Either::Right),
        }
    }
}

#[cfg(feature = "tonic")]
impl RetryBody for tonic::body::Body {
    fn try_clone(&self) -> Option<Self> {
        http_body::Body::is_end_stream(self).then(tonic::body::Body::empty)
    }
}

/// The call for a request: its target is its URI's scheme, host and port,
/// else its `Host` header's host and port (a tonic `Channel`'s requests
/// name only a path), else none.
fn call_of(s: &Settings, key: &Key<Parts>, parts: &Parts) -> Result<Call, Error> {
    let scheme = parts.uri.scheme_str().unwrap_or("");
    let header = match parts.uri.authority() {
        Some(_) => None,
        None => parts
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<Authority>().ok()),
    };
    let target = match parts.uri.authority().or(header.as_ref()) {
        Some(a) => Target {
            scheme,
            host: a.host(),
            port: a.port_u16(),
        },
        None => Target {
            scheme,
            host: "",
            port: None,
        },
    };
    s.call(parts.method.as_str(), target, key.of(parts))
}

impl<S, B, ResBody> Service<Request<B>> for OutboundService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: RetryBody + Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = CallError<S::Error>;
    type Future = BoxFuture<'static, Result<Response<ResBody>, CallError<S::Error>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Ready at once: the inner service is made ready after the wait.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let sender = self.sender.clone();
        let inner = self.inner.clone();
        Box::pin(async move { sender.send(inner, request).await })
    }
}

/// One tower call's I/O: the inner service, made ready before each
/// sending.
struct Tower<S, B, ResBody> {
    inner: S,
    types: PhantomData<fn(B) -> ResBody>,
}

impl<S, B, ResBody> Exchange for Tower<S, B, ResBody>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    B: RetryBody,
{
    type Request = (Parts, B);
    type Response = Response<ResBody>;
    type Error = S::Error;

    fn copy(&self, (parts, body): &(Parts, B)) -> Option<(Parts, B)> {
        body.try_clone().map(|b| (parts.clone(), b))
    }

    async fn send(&mut self, (parts, body): (Parts, B)) -> Result<Response<ResBody>, S::Error> {
        std::future::poll_fn(|cx| self.inner.poll_ready(cx)).await?;
        self.inner.call(Request::from_parts(parts, body)).await
    }

    fn answer(&self, response: &Response<ResBody>) -> (u16, Option<Duration>, Option<Announced>) {
        // A gRPC status counts as an HTTP one; the longer of the two
        // pauses asked is obeyed.
        let (status, grpc) = grpc::status_of(response.status().as_u16(), response.headers());
        let (asked, announced) = Settings::read(response.headers());
        (status, asked.max(grpc), announced)
    }
}

impl Sender {
    async fn send<S, B, ResBody>(
        &self,
        inner: S,
        request: Request<B>,
    ) -> Result<Response<ResBody>, CallError<S::Error>>
    where
        S: Service<Request<B>, Response = Response<ResBody>>,
        B: RetryBody,
    {
        let (parts, body) = request.into_parts();
        let call = call_of(&self.settings, &self.key, &parts).map_err(CallError::Limiter)?;
        let tower = Tower {
            inner,
            types: PhantomData,
        };
        self.settings.run(call, (parts, body), tower).await
    }
}
