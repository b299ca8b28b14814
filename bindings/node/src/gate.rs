//! `Gate`: an HTTP middleware's whole decision, for the Express and Fastify
//! middleware in `ratebound.js` (and any other framework).

use std::sync::Arc;

use napi::JsValue;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any::{self, GateOptions as CoreOptions, KeySource, Loose, RemoteAnswer};

use crate::error::{OrThrow, throw};
use crate::fast;
use crate::limiters::{ManualClock, clock_of, loose_number, loose_rate, rate_of};

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

/// A policy decided elsewhere: in Redis (its limiter's engine) or in
/// shared memory (a `SharedKeyedLimiter`); one of the two.
#[napi(object, object_to_js = false)]
pub struct RemotePolicy {
    /// The name in the `RateLimit-Policy` field.
    pub name: String,
    /// The `rb.redis` limiter's `engine`.
    pub engine: Option<&'static crate::redis::RedisEngine>,
    /// A limit shared by the host's processes.
    pub shared: Option<&'static crate::shared::SharedKeyedLimiter>,
}

/// A decision made elsewhere (an `rb.redis` limiter's), as `decideWith`
/// takes it.
#[napi(object, object_to_js = false)]
pub struct RemoteDecision {
    /// Whether it admitted.
    pub allowed: bool,
    /// The burst, or the window's limit.
    pub limit: f64,
    /// Whole tokens left.
    pub remaining: f64,
    /// Seconds until it could admit.
    pub retry_after: f64,
    /// Seconds until the key's state is fresh again.
    pub reset_after: f64,
}

impl RemoteDecision {
    fn core(&self) -> ratebound::Decision {
        let count = |v: f64| {
            if v.is_finite() && v > 0.0 {
                v.round() as u64
            } else {
                0
            }
        };
        let nanos = |s: f64| {
            if s.is_finite() && s > 0.0 {
                (s * 1e9).round() as u64
            } else {
                0
            }
        };
        ratebound::Decision::from_parts(
            self.allowed,
            count(self.limit),
            count(self.remaining),
            nanos(self.retry_after),
            nanos(self.reset_after),
        )
    }
}

/// Options of `new Gate(...)`. Every option but `policies` is optional and
/// its default is the core's (`GateOptions::default`, the same for the
/// Rust, Python and Node middleware); each is parsed by the core
/// (`GateOptions::set`).
#[napi(object, object_to_js = false)]
pub struct GateOptions<'a> {
    /// The policies, all applied to every request (all or nothing). May be
    /// empty when `concurrencyLimit` is set (load shedding only).
    pub policies: Vec<PolicyOptions<'a>>,
    /// Key requests by this header (any case), e.g. `'x-api-key'`. A
    /// request has a key only when it has exactly one line of it, not empty
    /// after trimming and without a comma; otherwise it has none (see
    /// `missingKey`). Default: key by client IP.
    #[napi(ts_type = "string")]
    pub key_header: Option<Unknown<'a>>,
    /// The key is the application's: the `key` argument of `decide` (a
    /// string, safe integer or `Uint8Array`; `null`, `undefined` or empty
    /// for none). Without it (or `keyHeader`) requests are keyed by client
    /// IP and `key` is ignored.
    pub given_key: Option<bool>,
    /// Global limits kept in Redis (`rb.redis` limiters' engines), by name:
    /// the gate advertises them in `RateLimit-Policy` and merges their
    /// decisions (`decideWith`); the middleware checks them for the
    /// request's `identity`.
    pub remote: Option<Vec<RemotePolicy>>,
    /// Whose forwarding header to believe: CIDR networks (`['10.0.0.0/8']`
    /// or one string) or a number of proxy hops in front of the app.
    /// Default: nobody's (the peer is the client).
    #[napi(ts_type = "string | string[] | number")]
    pub trusted_proxies: Option<Unknown<'a>>,
    /// The forwarding header the trusted proxies set: `'x-forwarded-for'`
    /// (the default), `'forwarded'` (RFC 7239) or a single-address header
    /// such as `'cf-connecting-ip'` or `'x-real-ip'`. Only this header is
    /// read; it requires `trustedProxies`.
    #[napi(ts_type = "string")]
    pub client_ip_header: Option<Unknown<'a>>,
    /// IPv6 keys are cut to this prefix length (default 64).
    #[napi(ts_type = "number")]
    pub ipv6_prefix: Option<Unknown<'a>>,
    /// A request without a valid key: `'ip'` (key it by client IP, the
    /// default), `'shared'` (one bucket for all keyless requests) or a
    /// status 400-599 to refuse it with (e.g. 401).
    #[napi(ts_type = "'ip' | 'shared' | number")]
    pub missing_key: Option<Unknown<'a>>,
    /// Quota header fields: `'draft'` (IETF `RateLimit-Policy` and
    /// `RateLimit`, the default), `'legacy'` (`X-RateLimit-*`) or `'off'`.
    #[napi(ts_type = "'draft' | 'legacy' | 'off'")]
    pub headers: Option<Unknown<'a>>,
    /// The refusal body: `'text'` (default) or `'problem+json'` (RFC 9457).
    #[napi(ts_type = "'text' | 'problem+json'")]
    pub body: Option<Unknown<'a>>,
    /// The most keys per policy (default 1 000 000).
    #[napi(ts_type = "number")]
    pub max_keys: Option<Unknown<'a>>,
    /// At the cap: `'evict'` (default) or `'reject'` (a new key gets 503).
    #[napi(ts_type = "'evict' | 'reject'")]
    pub overflow: Option<Unknown<'a>>,
    /// Load shedding: at most this many requests in flight; beyond it
    /// `tryEnter()` is false and the middleware answers `shed()` (503,
    /// `Retry-After: 1`) at once. Default: no cap.
    #[napi(ts_type = "number")]
    pub concurrency_limit: Option<Unknown<'a>>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
}

/// A `Gate`'s answer.
#[napi(object)]
pub struct Verdict {
    /// 0 to let the request through; otherwise the status to answer with
    /// (429, 503, 500, or the `missingKey` status).
    pub status: u32,
    /// Header fields to set, flat: `[name, value, name, value, ...]`, names
    /// in lower case (on a pass, for the response of the route).
    pub headers: Vec<String>,
    /// A refusal's content type.
    pub content_type: Option<String>,
    /// A refusal's body.
    pub body: Option<String>,
    /// `'allowed'`, `'refused'`, `'shed'` or `'rejected'` (no valid key, a
    /// full key table), for metrics.
    pub outcome: String,
    /// The policy that refused (the first in order), if one did.
    pub refused_by: Option<String>,
}

/// The core's verdict as a JS object.
fn verdict(v: &any::Verdict<'_>) -> Verdict {
    let mut headers = Vec::new();
    for (name, value) in v.headers() {
        headers.push(name.to_string());
        headers.push(value);
    }
    let (content_type, body) = match &v.body {
        Some((t, b)) => (Some(t.to_string()), Some(b.clone())),
        None => (None, None),
    };
    Verdict {
        status: u32::from(v.status),
        headers,
        content_type,
        body,
        outcome: v.outcome.as_str().to_string(),
        refused_by: v.refused_by.map(str::to_string),
    }
}

/// Sets the option `name` from a JavaScript value: a string, a number or an
/// array of strings, as the core's `GateOptions::set` takes them;
/// `null`/`undefined` leave the default.
pub fn set_option(
    env: &Env,
    options: &mut CoreOptions,
    name: &'static str,
    value: &Option<Unknown<'_>>,
) -> Result<()> {
    let Some(value) = value else {
        return Ok(());
    };
    let wrong = |shown: String, reason| {
        throw(
            env,
            &CoreError::InvalidOption {
                name,
                value: shown,
                reason,
            },
        )
    };
    match value.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(()),
        ValueType::String => {
            let text = String::from_unknown(*value)?;
            options.set(name, Loose::Text(&text)).or_throw(env)
        }
        ValueType::Number => {
            let number = f64::from_unknown(*value)?;
            options.set(name, Loose::Number(number)).or_throw(env)
        }
        ValueType::Object if value.is_array()? => {
            let mut list = Vec::new();
            for item in Vec::<Unknown<'_>>::from_unknown(*value)? {
                if item.get_type()? != ValueType::String {
                    return Err(wrong(shown(item)?, "must be a list of strings"));
                }
                list.push(String::from_unknown(item)?);
            }
            let list: Vec<&str> = list.iter().map(String::as_str).collect();
            options.set(name, Loose::List(&list)).or_throw(env)
        }
        _ => Err(wrong(
            shown(*value)?,
            "must be a string, a number or a list of strings",
        )),
    }
}

/// A value for an error message: its string form, or its type.
fn shown(value: Unknown<'_>) -> Result<String> {
    Ok(match value.get_type()? {
        ValueType::Boolean => bool::from_unknown(value)?.to_string(),
        ValueType::Number => f64::from_unknown(value)?.to_string(),
        ValueType::Undefined => "undefined".into(),
        ValueType::Null => "null".into(),
        ValueType::Object if value.is_array()? => "an array".into(),
        ValueType::Object => "an object".into(),
        ValueType::Function => "a function".into(),
        ValueType::Symbol => "a symbol".into(),
        _ => "a value".into(),
    })
}

/// An HTTP middleware's whole decision, made by the core
/// (`ratebound::any::Gate`): the key (the `keyHeader`, the application's
/// key, or the client IP under the trusted-proxy rules, IPv6 grouped by
/// prefix), every policy all-or-nothing, and the answer — status,
/// `Retry-After` in whole seconds rounded up, the quota fields and the
/// body. `express()` and `fastify()` only move these values in and out.
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
            let algorithm =
                any::keyed_algorithm(name, rate, burst, limit, window).or_throw(&env)?;
            policies.push((
                p.name.clone().unwrap_or_else(|| "default".into()),
                algorithm,
            ));
        }
        let mut o = CoreOptions::default();
        let loose = [
            ("keyHeader", &options.key_header),
            ("trustedProxies", &options.trusted_proxies),
            ("clientIpHeader", &options.client_ip_header),
            ("ipv6Prefix", &options.ipv6_prefix),
            ("missingKey", &options.missing_key),
            ("headers", &options.headers),
            ("body", &options.body),
            ("maxKeys", &options.max_keys),
            ("overflow", &options.overflow),
            ("concurrencyLimit", &options.concurrency_limit),
        ];
        for (name, value) in loose {
            set_option(&env, &mut o, name, value)?;
        }
        if options.given_key == Some(true) {
            if let KeySource::Header(header) = &o.key {
                return Err(throw(
                    &env,
                    &CoreError::InvalidOption {
                        name: "givenKey",
                        value: header.clone(),
                        reason: "cannot be combined with keyHeader",
                    },
                ));
            }
            o.key = KeySource::Given;
        }
        for remote in options.remote.iter().flatten() {
            let algorithm = match (remote.engine, remote.shared) {
                (Some(engine), None) => engine.engine.config().algorithm.keyed(),
                (None, Some(shared)) => shared.algorithm(),
                _ => {
                    return Err(crate::error::invalid_type(
                        &env,
                        "a remote policy is an rb.redis limiter's engine or a SharedKeyedLimiter",
                    ));
                }
            };
            o.remote.push((remote.name.clone(), algorithm));
        }
        let inner = Arc::new(any::Gate::new(policies, o, clock_of(options.clock)).or_throw(&env)?);
        Ok(Gate {
            handle: fast::register_gate(inner.clone()),
            inner,
        })
    }

    /// The decision for one request: `key` (with `givenKey`: a string, safe
    /// integer or `Uint8Array`; `null`/`undefined`/`''` for none; ignored
    /// otherwise), the peer address (the socket's, or the framework's
    /// `req.ip`), and the request's raw header lines (`req.rawHeaders`: a
    /// flat array `[name, value, ...]` in the order received). The gate
    /// reads only the `keyHeader` lines and, with `trustedProxies`, the
    /// `clientIpHeader` lines.
    #[napi(
        ts_args_type = "key?: string | number | Uint8Array | null, peer?: string | null, rawHeaders?: string[] | null"
    )]
    pub fn decide(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        peer: Option<String>,
        raw_headers: Option<Unknown<'_>>,
    ) -> Result<Verdict> {
        let peer = peer.and_then(|p| p.parse().ok());
        let key = key.map_or(std::ptr::null_mut(), |k| k.raw());
        let lines = raw_headers.map_or(std::ptr::null_mut(), |h| h.raw());
        // SAFETY: the env and the arguments of the current call.
        #[allow(unsafe_code)]
        let v = unsafe { fast::decide(env.raw(), &self.inner, key, peer, lines, verdict) };
        v.map_err(|e| fast::decide_error(&env, e))
    }

    /// The request's key as text every instance derives alike (for the
    /// `remote` policies in Redis): a `Buffer` (`key:…`, `ip:…` or
    /// `anonymous`), or the status a keyless request is refused with.
    #[napi(
        ts_args_type = "key?: string | number | Uint8Array | null, peer?: string | null, rawHeaders?: string[] | null",
        ts_return_type = "Buffer | number"
    )]
    pub fn identity(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        peer: Option<String>,
        raw_headers: Option<Unknown<'_>>,
    ) -> Result<Either<Buffer, u32>> {
        let peer = peer.and_then(|p| p.parse().ok());
        let key = key.map_or(std::ptr::null_mut(), |k| k.raw());
        let lines = raw_headers.map_or(std::ptr::null_mut(), |h| h.raw());
        let inner = &self.inner;
        // SAFETY: the env and the arguments of the current call.
        #[allow(unsafe_code)]
        let id = unsafe {
            fast::with_request(env.raw(), inner, key, peer, lines, |r| inner.identity(r))
        };
        match id.map_err(|e| fast::decide_error(&env, e))? {
            Ok(bytes) => Ok(Either::A(bytes.into())),
            Err(status) => Ok(Either::B(u32::from(status))),
        }
    }

    /// `decide` with the `remote` policies' decisions for the request's
    /// `identity`, in order (none when `identity` gave a status); `null`
    /// for a policy whose table is full (it threw
    /// `ERR_RATEBOUND_TOO_MANY_KEYS`): the gate answers as for its own.
    #[napi(
        ts_args_type = "key: string | number | Uint8Array | null | undefined, peer: string | null | undefined, rawHeaders: string[] | null | undefined, remote: Array<RemoteDecision | null>"
    )]
    pub fn decide_with(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        peer: Option<String>,
        raw_headers: Option<Unknown<'_>>,
        remote: Vec<Option<RemoteDecision>>,
    ) -> Result<Verdict> {
        let peer = peer.and_then(|p| p.parse().ok());
        let key = key.map_or(std::ptr::null_mut(), |k| k.raw());
        let lines = raw_headers.map_or(std::ptr::null_mut(), |h| h.raw());
        let decisions: Vec<RemoteAnswer> = remote
            .iter()
            .map(|d| d.as_ref().map_or(RemoteAnswer::Full, |d| d.core().into()))
            .collect();
        let inner = &self.inner;
        // SAFETY: the env and the arguments of the current call.
        #[allow(unsafe_code)]
        let v = unsafe {
            fast::with_request(env.raw(), inner, key, peer, lines, |r| {
                verdict(&inner.decide_with(r, &decisions))
            })
        };
        v.map_err(|e| fast::decide_error(&env, e))
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
        verdict(&self.inner.shed())
    }

    /// The policies' names, local then remote (for `onDecision`).
    #[napi(getter)]
    pub fn policy_names(&self) -> Vec<String> {
        self.inner.policy_names().map(str::to_string).collect()
    }

    /// The header fields the gate reads (the key header; the forwarding
    /// header when proxies are trusted), lower case. A middleware may hand
    /// over only these lines.
    #[napi(getter)]
    pub fn header_names(&self) -> Vec<String> {
        self.inner.header_names().map(str::to_string).collect()
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
