//! `Gate`: an HTTP middleware's whole request sequence, for the Express and
//! Fastify middleware in `middleware.js` (and any other framework). Built
//! by the core's one parser (`GateSpec`) from its options by name; its
//! sequence (the core's `Gate::admit`, run by the raw `gateAdmit` of
//! [`crate::fast`] and `admit()` in `ratebound.js`) calls the hooks given
//! here with the framework's request; a request waiting for its remote
//! policies is an [`Ask`].

use std::ptr;
use std::sync::Arc;

use napi::JsValue;
use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any::{
    self, GateOptions as CoreOptions, GateSpec, Loose, PolicySpec, RemoteAnswer, RemoteKind,
};

use crate::error::{OrThrow, invalid_type, throw, throw_as};
use crate::fast::{self, HOOK_NAMES, HookRefs};
use crate::limiters::{ManualClock, clock_of};

/// One policy of a `Gate`: a token bucket (`rate`, `burst`) or a window
/// (`algorithm`, `limit`, `window`) per key. Its fields are read by name
/// by the core (`PolicySpec`): a field it does not know is an error.
#[napi(object, object_to_js = false)]
#[allow(dead_code)] // The declaration of what the core reads by name.
pub struct PolicyOptions {
    /// The name in the `RateLimit-Policy` field (default `"default"`).
    pub name: Option<String>,
    /// `'token_bucket'` (default), `'fixed_window'` or `'sliding_window'`.
    pub algorithm: Option<String>,
    /// Tokens per second per key, or a quota string (token bucket).
    #[napi(ts_type = "number | string")]
    pub rate: Option<String>,
    /// The most tokens one key holds (token bucket).
    pub burst: Option<f64>,
    /// Requests per window per key (windows).
    pub limit: Option<f64>,
    /// The window in seconds (windows).
    pub window: Option<f64>,
}

/// A policy decided elsewhere: in Redis (its limiter's engine) or in
/// shared memory (a `SharedKeyedLimiter`); one of the two.
#[napi(object, object_to_js = false)]
#[allow(dead_code)] // The declaration of what `new Gate()` reads.
pub struct RemotePolicy {
    /// The name in the `RateLimit-Policy` field (default: `'global'` for
    /// Redis, `'host'` for shared memory — the core's).
    pub name: Option<String>,
    /// The `rb.redis` limiter's `engine`.
    pub engine: Option<&'static crate::redis::RedisEngine>,
    /// A limit shared by the host's processes.
    pub shared: Option<&'static crate::shared::SharedKeyedLimiter>,
}

/// A decision made elsewhere (an `rb.redis` limiter's, a
/// `SharedKeyedLimiter`'s), as `finish` takes it.
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
    /// The decision as the core takes it: whole counts, durations in
    /// seconds, each checked by the core's number rules.
    ///
    /// # Errors
    /// [`CoreError::InvalidNumber`] naming a count that is not a whole
    /// number ≥ 0, or a duration that is NaN, infinite or negative.
    pub fn answer(&self) -> std::result::Result<RemoteAnswer, CoreError> {
        let nanos = |name, s| any::seconds(name, s).map(|d| d.as_nanos() as u64);
        Ok(ratebound::Decision::from_parts(
            self.allowed,
            any::whole("remote limit", self.limit, 0)?,
            any::whole("remote remaining", self.remaining, 0)?,
            nanos("remote retryAfter", self.retry_after)?,
            nanos("remote resetAfter", self.reset_after)?,
        )
        .into())
    }
}

/// Options of `new Gate(...)`, read by name by the core's one parser
/// (`GateSpec`, the same for the Python and Node middleware): every
/// default and every rule between options is the core's. A name it does
/// not know is an error; `null` and `undefined` leave the default. The
/// policies are the one policy of the top-level fields (`rate`, `burst`,
/// ...) or `policies`, never both.
#[napi(object, object_to_js = false)]
#[allow(dead_code)] // The declaration of what the core reads by name.
pub struct GateOptions {
    /// The policies, all applied to every request (all or nothing). May be
    /// empty when `concurrencyLimit` or `remote` is set.
    pub policies: Option<Vec<PolicyOptions>>,
    /// The one policy's name (default `"default"`), instead of `policies`.
    pub name: Option<String>,
    /// The one policy's algorithm (default `'token_bucket'`).
    pub algorithm: Option<String>,
    /// The one policy's rate: tokens per second per key, or a quota string.
    #[napi(ts_type = "number | string")]
    pub rate: Option<String>,
    /// The one policy's burst (token bucket).
    pub burst: Option<f64>,
    /// The one policy's limit per window (windows).
    pub limit: Option<f64>,
    /// The one policy's window in seconds (windows).
    pub window: Option<f64>,
    /// The key: `'ip'` (any case; the client IP, the default), a header
    /// name, or `{ header }`. A key function is the `key` hook.
    #[napi(ts_type = "string | { header: string }")]
    pub key: Option<String>,
    /// Key requests by this header (any case), e.g. `'x-api-key'`. A
    /// request has a key only when it has exactly one line of it, not empty
    /// after trimming and without a comma; otherwise it has none (see
    /// `missingKey`). Default: key by client IP.
    pub key_header: Option<String>,
    /// The key is the application's: `decide`'s `key` argument (a string,
    /// whole number (at most 2^53) or `Uint8Array`; `null`, `undefined` or empty for none).
    /// A `key` hook gives it too. Without either (or `keyHeader`) requests
    /// are keyed by client IP.
    pub given_key: Option<bool>,
    /// Policies decided elsewhere — global limits in Redis (`rb.redis`
    /// limiters' engines), limits shared by the host's processes: the gate
    /// advertises them in `RateLimit-Policy` and decides with their answers
    /// (`admit` returns an `Ask`, `finish` takes the answers).
    pub remote: Option<Vec<RemotePolicy>>,
    /// Whose forwarding header to believe: CIDR networks (`['10.0.0.0/8']`
    /// or one string) or a number of proxy hops in front of the app.
    /// Default: nobody's (the peer is the client).
    #[napi(ts_type = "string | string[] | number")]
    pub trusted_proxies: Option<String>,
    /// The forwarding header the trusted proxies set: `'x-forwarded-for'`
    /// (the default), `'forwarded'` (RFC 7239) or a single-address header
    /// such as `'cf-connecting-ip'` or `'x-real-ip'`. Only this header is
    /// read; it requires `trustedProxies`.
    pub client_ip_header: Option<String>,
    /// IPv6 keys are cut to this prefix length (default 64).
    pub ipv6_prefix: Option<f64>,
    /// A request without a valid key: `'ip'` (key it by client IP, the
    /// default), `'shared'` (one bucket for all keyless requests) or a
    /// status 400-599 to refuse it with (e.g. 401).
    #[napi(ts_type = "'ip' | 'shared' | number")]
    pub missing_key: Option<String>,
    /// Quota header fields: `'draft'` (IETF `RateLimit-Policy` and
    /// `RateLimit`, the default), `'legacy'` (`X-RateLimit-*`) or `'off'`.
    #[napi(ts_type = "'draft' | 'legacy' | 'off'")]
    pub headers: Option<String>,
    /// The refusal body: `'text'` (default) or `'problem+json'` (RFC 9457).
    #[napi(ts_type = "'text' | 'problem+json'")]
    pub body: Option<String>,
    /// The most keys per policy (default 1 000 000).
    pub max_keys: Option<f64>,
    /// At the cap: `'evict'` (default) or `'reject'` (a new key gets 503).
    #[napi(ts_type = "'evict' | 'reject'")]
    pub overflow: Option<String>,
    /// Load shedding: at most this many requests in flight; beyond it
    /// `admit` sheds (503, `Retry-After: 1`) before any token is spent.
    /// Default: no cap.
    pub concurrency_limit: Option<f64>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
}

/// A `Gate`'s answer (`decide`).
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
    match loose(*value)? {
        Given::Absent => Ok(()),
        Given::Value(v) => v.with(|l| options.set(name, l)).or_throw(env),
        Given::Other(what) => Err(throw(
            env,
            &CoreError::InvalidOption {
                name,
                value: what,
                reason: "must be a string, a number or a list of strings",
            },
        )),
    }
}

/// A loose value, owned.
enum Owned {
    Text(String),
    Number(f64),
    List(Vec<String>),
}

impl Owned {
    fn with<R>(&self, f: impl FnOnce(Loose<'_>) -> R) -> R {
        match self {
            Owned::Text(t) => f(Loose::Text(t)),
            Owned::Number(n) => f(Loose::Number(*n)),
            Owned::List(l) => {
                let list: Vec<&str> = l.iter().map(String::as_str).collect();
                f(Loose::List(&list))
            }
        }
    }
}

/// What a JavaScript option value is to the core's loose parser.
enum Given {
    /// `null` or `undefined`: not given.
    Absent,
    /// A string, a number or an array of strings.
    Value(Owned),
    /// Anything else, as an error message shows it.
    Other(String),
}

fn loose(value: Unknown<'_>) -> Result<Given> {
    Ok(match value.get_type()? {
        ValueType::Undefined | ValueType::Null => Given::Absent,
        ValueType::String => Given::Value(Owned::Text(String::from_unknown(value)?)),
        ValueType::Number => Given::Value(Owned::Number(f64::from_unknown(value)?)),
        ValueType::Object if value.is_array()? => {
            let mut list = Vec::new();
            for item in Vec::<Unknown<'_>>::from_unknown(value)? {
                if item.get_type()? != ValueType::String {
                    return Ok(Given::Other(format!("a list holding {}", shown(item)?)));
                }
                list.push(String::from_unknown(item)?);
            }
            Given::Value(Owned::List(list))
        }
        _ => Given::Other(shown(value)?),
    })
}

/// A value for an error message: its string form, or its type.
fn shown(value: Unknown<'_>) -> Result<String> {
    Ok(match value.get_type()? {
        ValueType::Boolean => bool::from_unknown(value)?.to_string(),
        ValueType::Number => f64::from_unknown(value)?.to_string(),
        ValueType::String => String::from_unknown(value)?,
        ValueType::Undefined => "undefined".into(),
        ValueType::Null => "null".into(),
        ValueType::Object if value.is_array()? => "an array".into(),
        ValueType::Object => "an object".into(),
        ValueType::Function => "a function".into(),
        ValueType::Symbol => "a symbol".into(),
        _ => "a value".into(),
    })
}

/// Sets `name` through `set` from a JavaScript value. A value the core's
/// loose parser cannot take (a boolean, an object, a function): the core's
/// error for a name it does not know (`probe` asks it), else an error
/// naming the option.
fn set_by_name(
    env: &Env,
    name: &str,
    value: Unknown<'_>,
    set: impl FnOnce(Loose<'_>) -> std::result::Result<(), CoreError>,
    probe: impl FnOnce() -> std::result::Result<(), CoreError>,
) -> Result<()> {
    match loose(value)? {
        Given::Absent => Ok(()),
        Given::Value(v) => v.with(set).or_throw(env),
        Given::Other(what) => {
            // The core's error for a name it does not know.
            if let Err(
                e @ CoreError::InvalidOption {
                    name: "option" | "policy field",
                    ..
                },
            ) = probe()
            {
                return Err(throw(env, &e));
            }
            Err(throw_as(
                env,
                crate::error::Kind::Type,
                "ERR_RATEBOUND_INVALID_OPTION",
                &format!(
                    "invalid {name} {what:?}: must be a string, a number or a list of strings"
                ),
            ))
        }
    }
}

/// The option values of `object` by name (its enumerable string keys).
fn entries<'a>(object: &Object<'a>) -> Result<Vec<(String, Unknown<'a>)>> {
    let mut out = Vec::new();
    for name in Object::keys(object)? {
        let value: Unknown<'a> = object.get_named_property_unchecked(&name)?;
        out.push((name, value));
    }
    Ok(out)
}

/// `value` as an object (not an array), or `None`.
fn object_of(value: Unknown<'_>) -> Result<Option<Object<'_>>> {
    if value.get_type()? != ValueType::Object || value.is_array()? {
        return Ok(None);
    }
    Ok(Some(Object::from_unknown(value)?))
}

/// One policy of `policies`, field by field through the core's parser.
fn policy_spec(env: &Env, at: usize, value: Unknown<'_>) -> Result<PolicySpec> {
    let Some(fields) = object_of(value)? else {
        return Err(invalid_type(
            env,
            &format!("policies[{at}] must be an object of policy fields (rate, burst, ...)"),
        ));
    };
    let mut policy = PolicySpec::default();
    for (field, value) in entries(&fields)? {
        set_by_name(
            env,
            &field,
            value,
            |v| policy.set(&field, v),
            || PolicySpec::default().set(&field, Loose::Text("")),
        )?;
    }
    Ok(policy)
}

/// The core's parser given every option of `options` by name; `gives_key`:
/// a key hook was given. The clock, if one is given.
fn spec_of(env: &Env, options: Unknown<'_>, gives_key: bool) -> Result<(GateSpec, AnyClockOption)> {
    let Some(options) = object_of(options)? else {
        return Err(invalid_type(
            env,
            "the gate's options are an object of options by name",
        ));
    };
    let mut spec = GateSpec::default();
    let mut clock = None;
    let mut given = gives_key;
    for (name, value) in entries(&options)? {
        if matches!(value.get_type()?, ValueType::Undefined | ValueType::Null) {
            continue;
        }
        match name.as_str() {
            "policies" => {
                if !value.is_array()? {
                    return Err(invalid_type(env, "policies must be an array of policies"));
                }
                spec.use_policy_list();
                for (at, p) in Vec::<Unknown<'_>>::from_unknown(value)?
                    .into_iter()
                    .enumerate()
                {
                    spec.add_policy(policy_spec(env, at, p)?).or_throw(env)?;
                }
            }
            "remote" => {
                if !value.is_array()? {
                    return Err(invalid_type(
                        env,
                        "remote must be an array of remote policies",
                    ));
                }
                for r in Vec::<Unknown<'_>>::from_unknown(value)? {
                    let (name, kind, algorithm) = remote_policy(env, r)?;
                    spec.add_remote(name.as_deref(), kind, algorithm);
                }
            }
            "clock" => {
                let c = ClassInstance::<ManualClock>::from_unknown(value)
                    .map_err(|_| invalid_type(env, "clock must be a ManualClock"))?;
                clock = Some(c.inner.clone());
            }
            "givenKey" => {
                if value.get_type()? != ValueType::Boolean {
                    return Err(invalid_type(env, "givenKey must be a boolean"));
                }
                given |= bool::from_unknown(value)?;
            }
            // `{ header }`: a key header, as `keyHeader` (given once).
            "key" if object_of(value)?.is_some() => {
                let header = object_of(value)?
                    .and_then(|o| o.get_named_property_unchecked::<Unknown<'_>>("header").ok())
                    .filter(|h| h.get_type().ok() == Some(ValueType::String));
                let Some(header) = header else {
                    return Err(throw(
                        env,
                        &CoreError::InvalidOption {
                            name: "key",
                            value: "an object".to_string(),
                            reason: "is \"ip\", a header name, { header: name }, or a function of the request",
                        },
                    ));
                };
                let header = String::from_unknown(header)?;
                spec.set("keyHeader", Loose::Text(&header)).or_throw(env)?;
            }
            _ => set_by_name(
                env,
                &name,
                value,
                |v| spec.set(&name, v),
                || GateSpec::default().set(&name, Loose::Text("x")),
            )?,
        }
    }
    if given {
        spec.give_key();
    }
    Ok((spec, clock))
}

type AnyClockOption = Option<ratebound::ManualClock>;

/// One policy of `remote` (see [`RemotePolicy`]): its name if given, its
/// kind and its algorithm.
fn remote_policy(
    env: &Env,
    value: Unknown<'_>,
) -> Result<(Option<String>, RemoteKind, ratebound::KeyedAlgorithm)> {
    let wrong = || {
        invalid_type(
            env,
            "a remote policy is { name?, engine } (an rb.redis limiter's engine) or { name?, shared } (a SharedKeyedLimiter)",
        )
    };
    let Some(policy) = object_of(value)? else {
        return Err(wrong());
    };
    let field = |name: &str| -> Result<Option<Unknown<'_>>> {
        let v: Unknown<'_> = policy.get_named_property_unchecked(name)?;
        Ok(match v.get_type()? {
            ValueType::Undefined | ValueType::Null => None,
            _ => Some(v),
        })
    };
    let name = match field("name")? {
        None => None,
        Some(n) if n.get_type()? == ValueType::String => Some(String::from_unknown(n)?),
        Some(_) => return Err(invalid_type(env, "a remote policy's name must be a string")),
    };
    let (kind, algorithm) = match (field("engine")?, field("shared")?) {
        (Some(engine), None) => {
            let engine = ClassInstance::<crate::redis::RedisEngine>::from_unknown(engine)
                .map_err(|_| wrong())?;
            (RemoteKind::Redis, engine.engine.config().algorithm.keyed())
        }
        (None, Some(shared)) => {
            let shared = ClassInstance::<crate::shared::SharedKeyedLimiter>::from_unknown(shared)
                .map_err(|_| wrong())?;
            (RemoteKind::Host, shared.algorithm())
        }
        _ => return Err(wrong()),
    };
    Ok((name, kind, algorithm))
}

/// The hooks of `new Gate(options, hooks)`: each a function or absent.
fn hooks_of(env: &Env, hooks: Option<Unknown<'_>>) -> Result<[sys::napi_value; 4]> {
    let mut out = [ptr::null_mut(); 4];
    let Some(hooks) = hooks else {
        return Ok(out);
    };
    if matches!(hooks.get_type()?, ValueType::Undefined | ValueType::Null) {
        return Ok(out);
    }
    let Some(hooks) = object_of(hooks)? else {
        return Err(invalid_type(
            env,
            "the gate's hooks are an object of functions",
        ));
    };
    for (name, value) in entries(&hooks)? {
        let Some(i) = HOOK_NAMES.iter().position(|h| *h == name) else {
            return Err(throw_as(
                env,
                crate::error::Kind::Type,
                "ERR_RATEBOUND_INVALID_OPTION",
                &format!(
                    "unknown gate hook {name:?}: the hooks are exempt, critical, key and report"
                ),
            ));
        };
        match value.get_type()? {
            ValueType::Undefined | ValueType::Null => {}
            ValueType::Function => out[i] = value.raw(),
            _ => {
                return Err(invalid_type(
                    env,
                    &format!("the {name} hook must be a function of the request"),
                ));
            }
        }
    }
    Ok(out)
}

/// An HTTP middleware's whole request sequence, made by the core
/// (`ratebound::any::Gate`): exempt → a place among the requests in flight
/// (`concurrencyLimit`; shed with 503 at a full cap unless critical) → the
/// key (the `keyHeader`, the `key` hook, or the client IP under the
/// trusted-proxy rules, IPv6 grouped by prefix) → every policy
/// all-or-nothing (remote ones first, through an `Ask`) → `report` — and
/// the answer: status, `Retry-After` in whole seconds rounded up, the quota
/// fields and the body. `express()` and `fastify()` only move these values
/// in and out.
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
    /// A gate from its options, read by name by the core (see
    /// `GateOptions`), and the `hooks` its sequence calls with the
    /// framework's request (see `GateHooks`).
    #[napi(constructor, ts_args_type = "options: GateOptions, hooks?: GateHooks")]
    pub fn new(
        env: Env,
        this: This<Object>,
        options: Unknown<'_>,
        hooks: Option<Unknown<'_>>,
    ) -> Result<Gate> {
        let functions = hooks_of(&env, hooks)?;
        let (spec, clock) = spec_of(&env, options, !functions[2].is_null())?;
        let clock = clock_of(clock.map(|inner| ManualClock { inner }).as_ref());
        let inner = Arc::new(spec.build(clock).or_throw(&env)?);
        // SAFETY: live handles of this call: the hooks are functions (just
        // checked); the gate's object holds them (`hold`) for as long as it
        // lives, so the weak references stay good while its slot does.
        #[allow(unsafe_code)]
        let refs = unsafe {
            hold(&env, &this, &functions)?;
            HookRefs::new(env.raw(), functions)
        };
        Ok(Gate {
            handle: fast::register_gate(inner.clone(), refs),
            inner,
        })
    }

    /// Checks `options` as the constructor reads them, without making a
    /// gate (no policy needed): the defaults of a Fastify route's limits.
    #[napi(skip_typescript)]
    pub fn check(env: Env, options: Unknown<'_>) -> Result<()> {
        spec_of(&env, options, false).map(drop)
    }

    /// The decision for one request, without the sequence's hooks or
    /// concurrency place (`admit` runs the whole sequence): `key` (with
    /// `givenKey`: a string, whole number (at most 2^53) or `Uint8Array`;
    /// `null`/`undefined`/`''` for none; ignored otherwise), the peer
    /// address (the socket's, or the framework's `req.ip`), and the
    /// request's raw header lines (`req.rawHeaders`: a flat array
    /// `[name, value, ...]` in the order received). The gate reads only the
    /// `keyHeader` lines and, with `trustedProxies`, the `clientIpHeader`
    /// lines.
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

    /// Load shedding by hand: a place among the requests in flight (always
    /// `true` without a `concurrencyLimit`); pair a `true` with one
    /// `leave()`. `admit` takes its requests' places itself.
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

    /// The policies' names, local then remote (for `onDecision`).
    #[napi(getter)]
    pub fn policy_names(&self) -> Vec<String> {
        self.inner.policy_names().map(str::to_string).collect()
    }

    /// The remote policies' names, in the order `finish` takes their
    /// answers.
    #[napi(getter)]
    pub fn remote_names(&self) -> Vec<String> {
        self.inner.remote_names().map(str::to_string).collect()
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

/// Keeps the hook functions alive with the gate's object: an array of
/// them under a symbol of its own (not enumerable, not writable).
///
/// # Safety
/// Live handles of the current call.
#[allow(unsafe_code)]
unsafe fn hold(env: &Env, this: &This<Object>, functions: &[sys::napi_value; 4]) -> Result<()> {
    let env = env.raw();
    // SAFETY: the caller's contract; every out pointer is valid.
    unsafe {
        let mut array = ptr::null_mut();
        sys::napi_create_array_with_length(env, functions.len(), &mut array);
        for (i, f) in functions.iter().enumerate() {
            if !f.is_null() {
                sys::napi_set_element(env, array, i as u32, *f);
            }
        }
        let mut symbol = ptr::null_mut();
        let mut description = ptr::null_mut();
        let text = "ratebound.hooks";
        sys::napi_create_string_utf8(
            env,
            text.as_ptr().cast(),
            text.len() as isize,
            &mut description,
        );
        sys::napi_create_symbol(env, description, &mut symbol);
        let property = sys::napi_property_descriptor {
            utf8name: ptr::null(),
            name: symbol,
            method: None,
            getter: None,
            setter: None,
            value: array,
            attributes: sys::PropertyAttributes::default,
            data: ptr::null_mut(),
        };
        let status = sys::napi_define_properties(env, this.raw(), 1, &property);
        if status != sys::Status::napi_ok {
            return Err(napi::Error::new(
                Status::GenericFailure,
                "cannot hold the gate's hooks",
            ));
        }
    }
    Ok(())
}

/// A request waiting for its gate's remote policies (Redis limiters,
/// shared-memory tables), from `admit`: each checks `identity` (`key:…`,
/// `ip:…` or `anonymous`, the same in every instance) in its own scope,
/// then `gate.finish(ask, answers, request)` decides. It holds the
/// request's concurrency place: `close()` it when the answers never come
/// (it is given back when collected, too).
#[napi]
pub struct Ask {
    pub(crate) inner: Option<any::Ask>,
    identity: Vec<u8>,
    pub(crate) gate: Arc<any::Gate>,
}

impl Ask {
    /// `ask`, of `gate`.
    pub(crate) fn new(ask: any::Ask, gate: Arc<any::Gate>) -> Ask {
        Ask {
            identity: ask.identity().to_vec(),
            inner: Some(ask),
            gate,
        }
    }
}

#[napi]
impl Ask {
    /// What each remote policy checks: `key:<the key>`, `ip:<address>` or
    /// `anonymous`.
    #[napi(getter)]
    pub fn identity(&self) -> Buffer {
        self.identity.clone().into()
    }

    /// Whether it was finished or closed.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_none()
    }

    /// Gives the request's place back without deciding (idempotent).
    #[napi]
    pub fn close(&mut self) {
        self.inner = None;
    }
}
