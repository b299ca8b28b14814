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
    /// The pause before retrying a refusal that gave no advice, in seconds
    /// (default 1), doubled for each earlier refusal of the call and cut to
    /// `maxPause`.
    pub backoff: Option<f64>,
}

/// How long a sending must wait for a pause kept in this process (see
/// `Outbound.hold`).
#[napi(object)]
pub struct Hold {
    /// The wait, in seconds.
    pub wait: f64,
    /// Longer than the sending's timeout: it fails at once.
    pub exceeded: bool,
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
///
/// Each adapter holds one, with the pauses it keeps in this process when
/// its limiter's store could not be told (`paused`, `hold`).
#[napi]
pub struct Outbound {
    inner: ratebound::outbound::Outbound,
    pauses: ratebound::outbound::LocalPauses,
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
            backoff: None,
        });
        let inner = ratebound::outbound::Outbound::from_loose(
            o.retries,
            o.max_pause,
            o.statuses.as_deref(),
            o.any_method,
            o.backoff,
        )
        .or_throw(&env)?;
        Ok(Outbound {
            inner,
            pauses: ratebound::outbound::LocalPauses::new(),
        })
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

    /// The pause before the first retry of a refusal that gave no advice,
    /// in seconds.
    #[napi(getter)]
    pub fn backoff(&self) -> f64 {
        self.inner.backoff().as_secs_f64()
    }

    /// Takes note of a pause of `key` for `seconds` that reached everyone
    /// sharing the limiter (`shared`) or only this process; whether it is
    /// local (then kept: see `hold`).
    #[napi]
    pub fn paused(&self, key: String, seconds: f64, shared: bool) -> bool {
        use ratebound::outbound::Reach;
        let reach = if shared { Reach::Shared } else { Reach::Local };
        let d = std::time::Duration::try_from_secs_f64(seconds).unwrap_or_default();
        self.pauses
            .paused(&key, d, reach, std::time::Instant::now())
    }

    /// How long a sending for `key` must wait for a pause kept in this
    /// process before it asks its limiter for a token (`null`: go), and
    /// whether that is longer than `timeout` seconds.
    #[napi]
    pub fn hold(&self, key: String, timeout: Option<f64>) -> Option<Hold> {
        // Checked by `sending` already: a bad one here is no limit.
        let timeout = timeout.and_then(|t| std::time::Duration::try_from_secs_f64(t).ok());
        match self.pauses.hold(&key, timeout, std::time::Instant::now()) {
            Ok(None) => None,
            Ok(Some(d)) => Some(Hold {
                wait: d.as_secs_f64(),
                exceeded: false,
            }),
            Err(ratebound::Error::DeadlineExceeded { wait, .. }) => Some(Hold {
                wait: wait.as_secs_f64(),
                exceeded: true,
            }),
            Err(_) => None,
        }
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
