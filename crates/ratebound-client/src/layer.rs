//! The tower adapter (feature `tower`): a `Layer` for HTTP clients.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response, Uri};
use tower_layer::Layer;
use tower_service::Service;

use crate::builder::{Key, NO_HOST, Settings};
use crate::limiter::BoxFuture;
use crate::{Builder, Error, OutboundLimiter, grpc};

/// A tower [`Layer`] for HTTP clients — hyper-util's `Client`, a tonic
/// `Channel`, any `Service<http::Request<B>, Response = http::Response<_>>`
/// that is `Clone` — doing what
/// [`RateLimitMiddleware`](crate::RateLimitMiddleware) does: wait for the
/// limiter's token before each sending, pause the limiter as the partner
/// asks, send retries through it; see the crate docs.
///
/// A trailers-only gRPC answer (HTTP 200 with `grpc-status` in the
/// headers) with `RESOURCE_EXHAUSTED` counts as a 429 and with
/// `UNAVAILABLE` as a 503; the `google.rpc.RetryInfo` in its
/// `grpc-status-details-bin` is a pause (capped at `max_pause`; with a
/// `Retry-After` too, the longer one is obeyed). gRPC calls are POSTs:
/// they are retried only with [`Builder::any_method`].
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
/// use ratebound_client::RateLimitLayer;
/// use tower_layer::Layer;
///
/// let limiter = TokenBucket::new(Quota::parse("10/s burst 20")?);
/// let layer = RateLimitLayer::builder(limiter).key("partner").build()?;
/// # #[derive(Clone)] struct Client;
/// let service = layer.layer(Client); // hyper-util's Client, a tonic Channel
/// # let _ = service; Ok(()) }
/// # #[cfg(not(feature = "tower"))] fn main() {}
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    sender: Arc<Sender>,
}

/// What the layer and each of its services share: the settings and the key
/// function, and `send`, one request's sequence through the limiter.
struct Sender {
    settings: Settings,
    key: Key<Parts>,
}

impl RateLimitLayer {
    /// A builder around `limiter` (a token bucket: see
    /// [`OutboundLimiter`]); a key function sees the request's head.
    pub fn builder(limiter: impl OutboundLimiter + 'static) -> Builder<Parts> {
        Builder::new(limiter)
    }
}

impl Builder<Parts> {
    /// The layer.
    ///
    /// # Errors
    /// As [`RateLimitMiddleware`](crate::RateLimitMiddleware)'s builder:
    /// [`Error::Limit`] with [`ratebound::Error::Unsupported`] for a
    /// window, [`ratebound::Error::InvalidNumber`] for a zero `max_pause`,
    /// a status outside 100–599 or `n = 0`.
    pub fn build(self) -> Result<RateLimitLayer, Error> {
        let (settings, key) = self.finish()?;
        Ok(RateLimitLayer {
            sender: Arc::new(Sender { settings, key }),
        })
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            sender: self.sender.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around `S`.
#[derive(Clone)]
pub struct RateLimited<S> {
    inner: S,
    sender: Arc<Sender>,
}

impl<S> fmt::Debug for RateLimited<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimited").finish_non_exhaustive()
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

/// What a [`RateLimited`] call fails with.
#[derive(Debug)]
pub enum CallError<E> {
    /// The limiter's error: a wait beyond the timeout
    /// ([`ratebound::Error::DeadlineExceeded`]; nothing was sent), `n`
    /// above the burst.
    Limiter(Error),
    /// The inner service's error.
    Service(E),
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Limiter(e) => e.fmt(f),
            CallError::Service(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Limiter(e) => std::error::Error::source(e),
            CallError::Service(e) => e.source(),
        }
    }
}

/// The default port of a scheme, left out of keys (as Node's `url.host`).
fn default_port(uri: &Uri) -> Option<u16> {
    match uri.scheme_str() {
        Some("http") => Some(80),
        Some("https") => Some(443),
        _ => None,
    }
}

/// The URI's `host:port` (`host` for no port or the scheme's), else the
/// `Host` header's, else [`NO_HOST`].
fn host(parts: &Parts) -> String {
    if let Some(authority) = parts.uri.authority() {
        return match authority.port_u16() {
            Some(port) if Some(port) != default_port(&parts.uri) => {
                format!("{}:{port}", authority.host())
            }
            _ => authority.host().to_string(),
        };
    }
    parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map_or_else(|| NO_HOST.to_string(), str::to_string)
}

impl<S, B, ResBody> Service<Request<B>> for RateLimited<S>
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

impl Sender {
    async fn send<S, B, ResBody>(
        &self,
        mut inner: S,
        request: Request<B>,
    ) -> Result<Response<ResBody>, CallError<S::Error>>
    where
        S: Service<Request<B>, Response = Response<ResBody>>,
        B: RetryBody,
    {
        let s = &self.settings;
        let (mut parts, mut body) = request.into_parts();
        let key = self.key.of(&parts, host);
        let method = parts.method.clone();
        let mut attempt = 0;
        loop {
            s.acquire(&key, attempt).await.map_err(CallError::Limiter)?;
            let again = if s.may_retry(attempt) {
                body.try_clone().map(|b| (parts.clone(), b))
            } else {
                None
            };
            std::future::poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(CallError::Service)?;
            let response = inner
                .call(Request::from_parts(parts, body))
                .await
                .map_err(CallError::Service)?;
            let (status, asked) = grpc::status_of(response.status().as_u16(), response.headers());
            let decision = s.decide(method.as_str(), status, response.headers(), attempt, asked);
            let retry = s.settle(&key, &decision, attempt, again.is_some()).await;
            match again {
                Some((p, b)) if retry => {
                    drop(response);
                    (parts, body) = (p, b);
                    attempt += 1;
                }
                _ => return Ok(response),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_key_is_the_host_and_a_port_that_is_not_the_default() {
        let parts = |uri: &str, host_header: Option<&str>| {
            let mut request = Request::builder().uri(uri);
            if let Some(h) = host_header {
                request = request.header("host", h);
            }
            request.body(()).expect("request").into_parts().0
        };
        for (uri, header, key) in [
            ("http://partner.example/v1", None, "partner.example"),
            ("http://partner.example:80/v1", None, "partner.example"),
            ("https://partner.example:443/v1", None, "partner.example"),
            (
                "http://partner.example:8080/v1",
                None,
                "partner.example:8080",
            ),
            ("https://[::1]:8443/", None, "[::1]:8443"),
            (
                "/grpc.health.v1.Health/Check",
                Some("partner:50051"),
                "partner:50051",
            ),
            ("/grpc.health.v1.Health/Check", None, NO_HOST),
        ] {
            assert_eq!(host(&parts(uri, header)), key, "{uri}");
        }
    }
}
