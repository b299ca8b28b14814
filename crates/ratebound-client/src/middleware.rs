//! The `reqwest-middleware` adapter (feature `reqwest`).

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::builder::{Key, NO_HOST, Settings};
use crate::{Builder, Error, OutboundLimiter};

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
/// use ratebound_client::RateLimitMiddleware;
///
/// let limiter = TokenBucket::new(Quota::parse("10/s burst 20")?);
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RateLimitMiddleware::builder(limiter).key("partner").build()?)
///     .build();
/// # let _ = client; Ok(()) }
/// # #[cfg(not(feature = "reqwest"))] fn main() {}
/// ```
pub struct RateLimitMiddleware {
    settings: Settings,
    key: Key<Request>,
}

impl RateLimitMiddleware {
    /// A builder around `limiter` (a token bucket: see
    /// [`OutboundLimiter`]).
    pub fn builder(limiter: impl OutboundLimiter + 'static) -> Builder<Request> {
        Builder::new(limiter)
    }
}

impl Builder<Request> {
    /// The middleware.
    ///
    /// # Errors
    /// [`Error::Limit`] with [`ratebound::Error::Unsupported`] for a
    /// limiter that is not a token bucket (a window cannot be paused),
    /// [`ratebound::Error::InvalidNumber`] for a zero `max_pause`, a status
    /// outside 100–599 or `n = 0`.
    pub fn build(self) -> Result<RateLimitMiddleware, Error> {
        let (settings, key) = self.finish()?;
        Ok(RateLimitMiddleware { settings, key })
    }
}

impl std::fmt::Debug for RateLimitMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitMiddleware")
            .finish_non_exhaustive()
    }
}

/// `host:port`, or `host` when the URL gives no port or the scheme's
/// default (`reqwest::Url::port` leaves it out), as Node's `url.host`.
fn host(request: &Request) -> String {
    let url = request.url();
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => NO_HOST.to_string(),
    }
}

#[async_trait::async_trait]
impl Middleware for RateLimitMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let s = &self.settings;
        let key = self.key.of(&request, host);
        let method = request.method().clone();
        let mut request = request;
        let mut attempt = 0;
        loop {
            s.acquire(&key, attempt)
                .await
                .map_err(reqwest_middleware::Error::middleware)?;
            let again = if s.may_retry(attempt) {
                request.try_clone()
            } else {
                None
            };
            let response = next.clone().run(request, extensions).await?;
            let decision = s.decide(
                method.as_str(),
                response.status().as_u16(),
                response.headers(),
                attempt,
                None,
            );
            let retry = s.settle(&key, &decision, attempt, again.is_some()).await;
            match again {
                Some(copy) if retry => {
                    // The answer is dropped unread: its connection is not
                    // reused, which is all a refusal costs.
                    drop(response);
                    request = copy;
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
        for (url, key) in [
            ("http://partner.example/v1", "partner.example"),
            ("http://partner.example:80/v1", "partner.example"),
            ("https://partner.example:443/v1", "partner.example"),
            ("http://partner.example:8080/v1", "partner.example:8080"),
            ("https://[::1]:8443/", "[::1]:8443"),
            ("http://127.0.0.1:3000/", "127.0.0.1:3000"),
        ] {
            let request = Request::new(reqwest::Method::GET, url.parse().expect("url"));
            assert_eq!(host(&request), key, "{url}");
        }
    }
}
