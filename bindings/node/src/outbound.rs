//! `Outbound`: the core's outbound decision (`ratebound::outbound`) for the
//! fetch and axios adapters — what to do after a partner's response. The
//! binding converts values; the core decides.

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::OrThrow;

/// The options of an `Outbound` policy.
#[napi(object)]
pub struct OutboundOptions {
    /// The most retries (default 2).
    pub retries: Option<f64>,
    /// The longest pause obeyed, in seconds (default 300).
    pub max_pause: Option<f64>,
    /// The statuses retried (default `[429, 503]`).
    pub statuses: Option<Vec<f64>>,
    /// Retry POST and PATCH too (default false: idempotent methods only).
    pub any_method: Option<bool>,
}

/// What to do after a response.
#[napi(object)]
pub struct Advice {
    /// Pause the limiter this many seconds, for everyone sharing it (`null`:
    /// no pause asked).
    pub pause: Option<f64>,
    /// The pause was cut to `maxPause`.
    pub capped: bool,
    /// Send the request again, through the limiter's `acquire`.
    pub retry: bool,
    /// A retryable status the request may not be retried on: the caller
    /// gets this response.
    pub gave_up: bool,
}

/// What each sending of an adapter waits for (see `Outbound.sending`).
#[napi(object)]
pub struct Sending {
    /// The tokens each sending takes.
    pub n: f64,
    /// The longest wait for them, in seconds (`null`: as long as it takes).
    pub timeout: Option<f64>,
}

/// The outbound policy: which answers to retry and how long a pause may be.
#[napi]
pub struct Outbound {
    inner: ratebound::outbound::Outbound,
}

#[napi]
impl Outbound {
    /// A policy; each option left out is the core's default and the core
    /// checks them all (`Outbound::from_loose`): bad ones throw
    /// `RangeError` (`ERR_RATEBOUND_INVALID_NUMBER`).
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<OutboundOptions>) -> Result<Outbound> {
        let o = options.unwrap_or(OutboundOptions {
            retries: None,
            max_pause: None,
            statuses: None,
            any_method: None,
        });
        let inner = ratebound::outbound::Outbound::from_loose(
            o.retries,
            o.max_pause,
            o.statuses.as_deref(),
            o.any_method,
        )
        .or_throw(&env)?;
        Ok(Outbound { inner })
    }

    /// Each sending's `n` and `timeout` as the core reads them
    /// (`Sending::from_loose`): `n` tokens (default 1, at least 1), a wait
    /// of at most `timeout` seconds (default: as long as it takes).
    ///
    /// @throws {RangeError} `ERR_RATEBOUND_INVALID_NUMBER` naming `n` or
    /// `timeout`.
    #[napi]
    pub fn sending(env: Env, n: Option<f64>, timeout: Option<f64>) -> Result<Sending> {
        let s = ratebound::outbound::Sending::from_loose(n, timeout).or_throw(&env)?;
        Ok(Sending {
            n: s.n() as f64,
            timeout: s.timeout().map(|t| t.as_secs_f64()),
        })
    }

    /// The most retries.
    #[napi(getter)]
    pub fn retries(&self) -> u32 {
        self.inner.retries()
    }

    /// The longest pause obeyed, in seconds.
    #[napi(getter)]
    pub fn max_pause(&self) -> f64 {
        self.inner.max_pause().as_secs_f64()
    }

    /// What to do after the response to attempt `attempt` (0: the first) of
    /// `method`, with `status` and `headers` (`[name, value]` pairs),
    /// received at `nowUnix` (seconds since the Unix epoch).
    #[napi]
    pub fn advise(
        &self,
        method: String,
        status: u32,
        headers: Vec<Vec<String>>,
        attempt: u32,
        now_unix: f64,
    ) -> Advice {
        let status = u16::try_from(status).unwrap_or(0);
        let pairs = headers.iter().filter_map(|h| match h.as_slice() {
            [n, v] => Some((n.as_str(), v.as_str())),
            _ => None,
        });
        let a = self.inner.advise(&method, status, pairs, attempt, now_unix);
        Advice {
            pause: a.pause.map(|d| d.as_secs_f64()),
            capped: a.capped,
            retry: a.retry,
            gave_up: a.gave_up,
        }
    }
}
