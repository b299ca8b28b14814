//! `Gate`: an HTTP middleware's whole decision, for the Express and Fastify
//! middleware in `ratebound.js` (and any other framework).

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::{JsValue, sys};
use napi_derive::napi;
use ratebound::any::{self, GateOptions as CoreOptions, MissingKey, QuotaHeaders, RefusalBody};
use ratebound::http::{Cidr, TrustedProxies};

use crate::error::{OrThrow, invalid_type};
use crate::fast::{self, key_error, with_key};
use crate::limiters::{
    ManualClock, clock_of, loose_number, loose_rate, rate_of, undefined_not_none,
};

/// One policy of a `Gate`: a token bucket (`rate`, `burst`) or a window
/// (`algorithm`, `limit`, `window`) per key.
#[napi(object, object_to_js = false)]
pub struct PolicyOptions<'a> {
    /// The name in the `RateLimit-Policy` field (default `"default"`).
    pub name: Option<String>,
    /// `'token_bucket'` (default), `'fixed_window'` or `'sliding_window'`.
    pub algorithm: Option<String>,
    /// Tokens per second per key, or a quota string (token bucket).
    #[napi(ts_type = "number | string")]
    pub rate: Option<Unknown<'a>>,
    /// The most tokens one key holds (token bucket).
    #[napi(ts_type = "number")]
    pub burst: Option<Unknown<'a>>,
    /// Requests per window per key (windows).
    #[napi(ts_type = "number")]
    pub limit: Option<Unknown<'a>>,
    /// The window in seconds (windows).
    #[napi(ts_type = "number")]
    pub window: Option<Unknown<'a>>,
}

/// Options of `new Gate(...)`.
#[napi(object, object_to_js = false)]
pub struct GateOptions<'a> {
    /// The policies, all applied to every request (all or nothing).
    pub policies: Vec<PolicyOptions<'a>>,
    /// Whose forwarding headers to believe: a list of CIDR networks
    /// (`['10.0.0.0/8']`) or a number of proxy hops. Default: none.
    pub trusted_proxies: Option<Either<Vec<String>, f64>>,
    /// IPv6 keys are cut to this prefix length (default 64).
    pub ipv6_prefix: Option<f64>,
    /// A request without a key: `'ip'` (key it by client IP, the default),
    /// `'shared'` (one bucket for all keyless requests) or a status to refuse
    /// it with (e.g. 401).
    pub missing_key: Option<Either<String, f64>>,
    /// Quota header fields: `'draft'` (IETF `RateLimit-Policy` and
    /// `RateLimit`, the default), `'legacy'` (`X-RateLimit-*`) or `'off'`.
    pub headers: Option<String>,
    /// The refusal body: `'text'` (default) or `'problem+json'` (RFC 9457).
    pub body: Option<String>,
    /// The most keys per policy (default 1 000 000).
    pub max_keys: Option<f64>,
    /// At the cap: `'evict'` (default) or `'reject'` (a new key gets 503).
    pub overflow: Option<String>,
    /// Load shedding: at most this many requests in flight; beyond it
    /// `tryEnter()` is false and the middleware answers `shed()` (503,
    /// `Retry-After: 1`) at once. Default: no cap.
    pub concurrency_limit: Option<f64>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
}

/// A `Gate`'s answer.
#[napi(object)]
pub struct Verdict {
    /// 0 to let the request through; otherwise the status to answer with
    /// (429, 503, or the `missingKey` status).
    pub status: u32,
    /// Header fields to set, flat: `[name, value, name, value, ...]`, names
    /// in lower case (on a pass, for the response of the route).
    pub headers: Vec<String>,
    /// A refusal's content type.
    pub content_type: Option<String>,
    /// A refusal's body.
    pub body: Option<String>,
}

/// The core's verdict as a JS object.
fn verdict(v: any::Verdict) -> Verdict {
    let mut headers = Vec::with_capacity(v.headers.len() * 2);
    for (name, value) in v.headers {
        headers.push(name.to_string());
        headers.push(value);
    }
    let (content_type, body) = match v.body {
        Some((t, b)) => (Some(t.to_string()), Some(b)),
        None => (None, None),
    };
    Verdict {
        status: u32::from(v.status),
        headers,
        content_type,
        body,
    }
}

/// An HTTP middleware's whole decision, made by the core: the key (the
/// application's key, else the client IP under the trusted-proxy rules,
/// IPv6 grouped by prefix), every policy all-or-nothing, and the answer —
/// status, `Retry-After` in whole seconds rounded up, the quota fields and
/// the body. `express()` and `fastify()` only move these values in and out.
#[napi]
pub struct Gate {
    inner: Arc<any::Gate>,
    handle: u32,
}

impl Drop for Gate {
    fn drop(&mut self) {
        fast::unregister_gate(self.handle);
    }
}

#[napi]
impl Gate {
    /// A gate applying every policy to each request.
    #[napi(constructor)]
    pub fn new(env: Env, options: GateOptions<'_>) -> Result<Gate> {
        let mut policies = Vec::new();
        for p in &options.policies {
            let rate_option = loose_rate(&env, &p.rate)?;
            let rate = match &rate_option {
                Some(_) => Some(rate_of(&rate_option).or_throw(&env)?),
                None => None,
            };
            let name = p.algorithm.as_deref().unwrap_or("token_bucket");
            let burst = loose_number(&env, &p.burst, "burst")?;
            let limit = loose_number(&env, &p.limit, "limit")?;
            let window = loose_number(&env, &p.window, "window")?;
            let algorithm = any::keyed_algorithm(name, rate, burst, limit, window)
                .map_err(undefined_not_none)
                .or_throw(&env)?;
            policies.push((
                p.name.clone().unwrap_or_else(|| "default".into()),
                algorithm,
            ));
        }
        let mut o = CoreOptions::default();
        match &options.trusted_proxies {
            None => {}
            Some(Either::A(cidrs)) => {
                let cidrs = cidrs
                    .iter()
                    .map(|c| Cidr::parse(c))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .or_throw(&env)?;
                o.trusted = TrustedProxies::Cidrs(cidrs);
            }
            Some(Either::B(hops)) => {
                o.trusted = TrustedProxies::Hops(
                    any::whole("trustedProxies", *hops, 0).or_throw(&env)? as usize,
                );
            }
        }
        if let Some(bits) = options.ipv6_prefix {
            let bits = any::whole("ipv6Prefix", bits, 0).or_throw(&env)?;
            o.ipv6_prefix = u8::try_from(bits.min(128)).unwrap_or(128);
        }
        o.missing = match &options.missing_key {
            None => MissingKey::FallBackToIp,
            Some(Either::A(s)) if s == "ip" => MissingKey::FallBackToIp,
            Some(Either::A(s)) if s == "shared" => MissingKey::SharedAnonymous,
            Some(Either::B(status))
                if (100.0..=599.0).contains(status) && status.fract() == 0.0 =>
            {
                MissingKey::Reject(*status as u16)
            }
            Some(_) => {
                return Err(invalid_type(
                    &env,
                    "missingKey is 'ip', 'shared' or an HTTP status (100-599)",
                ));
            }
        };
        o.headers =
            QuotaHeaders::parse(options.headers.as_deref().unwrap_or("draft")).or_throw(&env)?;
        o.body = match options.body.as_deref() {
            None | Some("text") => RefusalBody::Text,
            Some("problem+json") | Some("problem_json") => RefusalBody::ProblemJson,
            Some(_) => return Err(invalid_type(&env, "body is 'text' or 'problem+json'")),
        };
        let overflow =
            any::overflow(options.overflow.as_deref().unwrap_or("evict")).or_throw(&env)?;
        let max = match options.max_keys {
            Some(m) => any::whole("maxKeys", m, 1).or_throw(&env)? as usize,
            None => o.max_keys.map_or(1_000_000, |(m, _)| m),
        };
        o.max_keys = Some((max, overflow));
        o.concurrency_limit = match options.concurrency_limit {
            Some(c) => Some(any::whole("concurrencyLimit", c, 1).or_throw(&env)? as usize),
            None => None,
        };
        let inner = Arc::new(any::Gate::new(policies, o, clock_of(options.clock)).or_throw(&env)?);
        Ok(Gate {
            handle: fast::register_gate(inner.clone()),
            inner,
        })
    }

    /// The decision for one request: `key` (a string, safe integer or
    /// `Uint8Array`; `null`/`undefined`/`''` for none), the peer address, and
    /// the `X-Forwarded-For` and `Forwarded` fields (read only from trusted
    /// proxies).
    #[napi(
        ts_args_type = "key?: string | number | Uint8Array | null, peer?: string | null, xForwardedFor?: string | null, forwarded?: string | null"
    )]
    pub fn decide(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        peer: Option<String>,
        x_forwarded_for: Option<String>,
        forwarded: Option<String>,
    ) -> Result<Verdict> {
        let peer = peer.and_then(|p| p.parse().ok());
        let decide = |key: Option<any::Key<'_>>| {
            self.inner.decide(&any::Request {
                key,
                peer,
                x_forwarded_for: x_forwarded_for.as_deref(),
                forwarded: forwarded.as_deref(),
            })
        };
        let key =
            key.filter(|k| !matches!(k.get_type(), Ok(ValueType::Undefined) | Ok(ValueType::Null)));
        let v = match key {
            None => decide(None),
            Some(k) => {
                let raw_env: sys::napi_env = env.raw();
                // SAFETY: the env and the argument of the current call.
                #[allow(unsafe_code)]
                let r = unsafe {
                    with_key(raw_env, k.raw(), |k| match k {
                        any::Key::Text("") | any::Key::Bytes([]) => decide(None),
                        k => decide(Some(k)),
                    })
                };
                r.map_err(|e| key_error(&env, e))?
            }
        };
        Ok(verdict(v))
    }

    /// Load shedding: a place among the requests in flight (always `true`
    /// without a `concurrencyLimit`); pair a `true` with one `leave()` when
    /// the response is done.
    #[napi]
    pub fn try_enter(&self) -> bool {
        self.inner.try_enter()
    }

    /// Gives back a place from `tryEnter()`.
    #[napi]
    pub fn leave(&self) {
        self.inner.leave();
    }

    /// Whether a `concurrencyLimit` is set.
    #[napi(getter)]
    pub fn capped(&self) -> bool {
        self.inner.is_capped()
    }

    /// The answer to a shed request: 503, `Retry-After: 1`, a short text.
    #[napi]
    pub fn shed(&self) -> Verdict {
        verdict(self.inner.shed())
    }

    /// The `RateLimit-Policy` field value.
    #[napi(getter)]
    pub fn policy(&self) -> String {
        self.inner.policy_field().to_string()
    }

    /// The slot of the fast entry point (internal).
    #[napi(getter, skip_typescript)]
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Keys tracked by the first policy.
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        self.inner.len() as f64
    }

    /// Drops state that is fresh again from every policy; how many entries
    /// went.
    #[napi]
    pub fn cleanup(&self) -> f64 {
        self.inner.cleanup() as f64
    }
}
