//! `Outbound`: the core's outbound decision (`ratebound::outbound`) for the
//! fetch and axios adapters — what to do after a partner's response. The
//! binding converts values; the core decides.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::any::{seconds, whole};

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

/// The outbound policy: which answers to retry and how long a pause may be.
#[napi]
pub struct Outbound {
    inner: ratebound::outbound::Outbound,
}

#[napi]
impl Outbound {
    /// A policy; bad options throw `RangeError` (`ERR_RATEBOUND_INVALID_NUMBER`).
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<OutboundOptions>) -> Result<Outbound> {
        let o = options.unwrap_or(OutboundOptions {
            retries: None,
            max_pause: None,
            statuses: None,
            any_method: None,
        });
        let retries = match o.retries {
            Some(r) => u32::try_from(whole("retries", r, 0).or_throw(&env)?).unwrap_or(u32::MAX),
            None => 2,
        };
        let max_pause = seconds("maxPause", o.max_pause.unwrap_or(300.0)).or_throw(&env)?;
        let mut inner = ratebound::outbound::Outbound::new()
            .with_retries(retries)
            .with_any_method(o.any_method.unwrap_or(false))
            .with_max_pause(max_pause)
            .or_throw(&env)?;
        if let Some(statuses) = o.statuses {
            let mut list = Vec::with_capacity(statuses.len());
            for s in statuses {
                let s = whole("status", s, 0).or_throw(&env)?;
                list.push(u16::try_from(s).unwrap_or(u16::MAX));
            }
            inner = inner.with_statuses(&list).or_throw(&env)?;
        }
        Ok(Outbound { inner })
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
