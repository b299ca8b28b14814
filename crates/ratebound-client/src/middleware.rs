//! The `reqwest-middleware` adapter (feature `reqwest`).

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use std::time::Duration;

use ratebound::outbound::{Announced, Target};

use crate::builder::{Exchange, Key, Settings};
use crate::error::CallError;
use crate::{Error, OutboundBuilder};

/// A [`reqwest_middleware::Middleware`] that sends each request only once
/// its limiter gives it a token, pauses the limiter when the partner asks
/// (for every instance sharing it, through a Redis limiter) and sends
/// retries through the limiter again; see the crate docs.
///
/// Per sending: wait for `n` tokens for the request's key (beyond the
/// `timeout`: the limiter's error, as
/// `reqwest_middleware::Error::Middleware` — [`Error::from_reqwest`] finds
/// it — and nothing is sent); send; the core's
/// [`advise`](ratebound::outbound::Outbound::advise) on the answer; pause
/// the limiter if it says so; send again if it says so and the request can
/// be copied (`reqwest::Request::try_clone`: not a streaming body),
/// otherwise return the answer. When retries are spent the caller gets the
/// last answer. A transport error (no connection) is returned as it is,
/// not retried.
///
/// # Examples
/// ```
/// # #[cfg(feature = "reqwest")] fn main() -> Result<(), ratebound_client::Error> {
/// use ratebound::{Quota, TokenBucket};
/// use ratebound_client::OutboundMiddleware;
///
/// let limiter = TokenBucket::new(Quota::parse("10/s burst 20")?);
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(OutboundMiddleware::builder(limiter).key("partner").build()?)
///     .build();
/// # let _ = client; Ok(()) }
/// # #[cfg(not(feature = "reqwest"))] fn main() {}
/// ```
pub struct OutboundMiddleware {
    settings: Settings,
    key: Key<Request>,
}

impl OutboundMiddleware {
    /// A builder around `limiter` (a token bucket: see
    /// [`KeyedLimit`](ratebound::KeyedLimit)).
    pub fn builder(limiter: impl ratebound::KeyedLimit + 'static) -> OutboundBuilder<Request> {
        OutboundBuilder::new(limiter)
    }
}

impl OutboundBuilder<Request> {
    /// The middleware.
    ///
    /// # Errors
    /// [`Error::Limit`] with [`ratebound::Error::Unsupported`] for a
    /// limiter that is not a token bucket (a window cannot be paused),
    /// [`ratebound::Error::InvalidNumber`] for a zero `max_pause`, a status
    /// outside 100–599 or `n = 0`.
    pub fn build(self) -> Result<OutboundMiddleware, Error> {
        let (settings, key) = self.finish()?;
        Ok(OutboundMiddleware { settings, key })
    }
}

impl std::fmt::Debug for OutboundMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundMiddleware").finish_non_exhaustive()
    }
}

/// One reqwest call's I/O: the rest of the middleware chain.
struct Reqwest<'a> {
    next: Next<'a>,
    extensions: &'a mut Extensions,
}

impl Exchange for Reqwest<'_> {
    type Request = Request;
    type Response = Response;
    type Error = reqwest_middleware::Error;

    fn copy(&self, request: &Request) -> Option<Request> {
        request.try_clone()
    }

    async fn send(&mut self, request: Request) -> reqwest_middleware::Result<Response> {
        self.next.clone().run(request, self.extensions).await
    }

    fn answer(&self, response: &Response) -> (u16, Option<Duration>, Option<Announced>) {
        let (asked, announced) = Settings::read(response.headers());
        (response.status().as_u16(), asked, announced)
    }
}

#[async_trait::async_trait]
impl Middleware for OutboundMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let url = request.url();
        // `Url::port` leaves out the scheme's default; the core's rule
        // drops it either way.
        let target = Target {
            scheme: url.scheme(),
            host: url.host_str().unwrap_or(""),
            port: url.port(),
        };
        let call = self
            .settings
            .call(request.method().as_str(), target, self.key.of(&request))
            .map_err(reqwest_middleware::Error::middleware)?;
        let exchange = Reqwest { next, extensions };
        match self.settings.run(call, request, exchange).await {
            Ok(response) => Ok(response),
            Err(CallError::Limiter(e)) => Err(reqwest_middleware::Error::middleware(e)),
            Err(CallError::Service(e)) => Err(e),
        }
    }
}
