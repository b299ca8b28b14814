//! What `new Gate(options, hooks)` is given, read for the core's one parser
//! (`GateSpec`): the option objects napi-rs describes (`GateOptions`,
//! `PolicyOptions`, `RemotePolicy`, `RemoteDecision`), each JavaScript value
//! made a loose value by name, and the hook functions.

use std::ptr;

use napi::JsValue;
use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratebound::Error as CoreError;
use ratebound::any;
use ratebound::gate::{
    GateOptions as CoreOptions, GateSpec, Loose, PolicySpec, RemoteAnswer, RemoteKind,
};
use ratebound::http::Priority;

use crate::error::{OrThrow, invalid_type, throw, throw_as};
use crate::fast::{HOOK_NAMES, PRIORITY_HOOK};
use crate::limiters::ManualClock;

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
    /// Load shedding: at most this many requests in flight, or `'auto'`:
    /// a limit learned from the latency of the requests let in (it starts
    /// at 20, stays within 2–1000, falls when latency rises above the
    /// baseline); beyond it `admit` sheds (503, `Retry-After: 1`) before
    /// any token is spent. Default: no cap.
    #[napi(ts_type = "number | 'auto'")]
    pub concurrency_limit: Option<String>,
    /// The adaptive limit before anything is measured (default 20; implies
    /// `'auto'`).
    pub concurrency_initial: Option<f64>,
    /// The adaptive limit never goes below this (default 2; implies
    /// `'auto'`).
    pub concurrency_min: Option<f64>,
    /// Nor above this (default 1000; implies `'auto'`).
    pub concurrency_max: Option<f64>,
    /// How much slower than the baseline the requests' mean latency may be
    /// before the adaptive limit is cut (default 1.5, at least 1; implies
    /// `'auto'`).
    pub concurrency_tolerance: Option<f64>,
    /// The share of the concurrency limit background requests may fill,
    /// 0–1 (default 0.5): they are shed first. Needs `concurrencyLimit`.
    pub background_fraction: Option<f64>,
    /// The `Retry-After` in whole seconds, 1–3600 (default 1), of the 503
    /// answering a request whose remote policy's check threw an error its
    /// fail policy does not cover (outcome `'store_error'`).
    pub store_error_retry_after: Option<f64>,
    /// A `ManualClock` to decide with (default: the monotonic clock).
    pub clock: Option<&'static ManualClock>,
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
pub(super) fn shown(value: Unknown<'_>) -> Result<String> {
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
pub(super) fn set_by_name(
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
pub(super) fn entries<'a>(object: &Object<'a>) -> Result<Vec<(String, Unknown<'a>)>> {
    let mut out = Vec::new();
    for name in Object::keys(object)? {
        let value: Unknown<'a> = object.get_named_property_unchecked(&name)?;
        out.push((name, value));
    }
    Ok(out)
}

/// `value` as an object (not an array), or `None`.
pub(super) fn object_of(value: Unknown<'_>) -> Result<Option<Object<'_>>> {
    if value.get_type()? != ValueType::Object || value.is_array()? {
        return Ok(None);
    }
    Ok(Some(Object::from_unknown(value)?))
}

/// One policy of `policies`, field by field through the core's parser.
pub(super) fn policy_spec(env: &Env, at: usize, value: Unknown<'_>) -> Result<PolicySpec> {
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
pub(super) fn spec_of(
    env: &Env,
    options: Unknown<'_>,
    gives_key: bool,
) -> Result<(GateSpec, AnyClockOption)> {
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
pub(super) fn remote_policy(
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
            (RemoteKind::Redis, engine.engine.config().algorithm)
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

/// The hooks of `new Gate(options, hooks)`: each a function or absent —
/// in [`HOOK_NAMES`] order — and the priority when it is given as a
/// constant (`priority: 'background'`), read by the core's
/// `Priority::parse`.
pub(super) fn hooks_of(
    env: &Env,
    hooks: Option<Unknown<'_>>,
) -> Result<([sys::napi_value; 5], Option<Priority>)> {
    let mut out = [ptr::null_mut(); 5];
    let mut constant = None;
    let Some(hooks) = hooks else {
        return Ok((out, constant));
    };
    if matches!(hooks.get_type()?, ValueType::Undefined | ValueType::Null) {
        return Ok((out, constant));
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
                    "unknown gate hook {name:?}: the hooks are exempt, critical, priority, key and report"
                ),
            ));
        };
        match value.get_type()? {
            ValueType::Undefined | ValueType::Null => {}
            ValueType::Function => out[i] = value.raw(),
            ValueType::String if i == PRIORITY_HOOK => {
                let text = String::from_unknown(value)?;
                constant = Some(Priority::parse(&text).or_throw(env)?);
            }
            _ if i == PRIORITY_HOOK => {
                return Err(throw(
                    env,
                    &CoreError::InvalidOption {
                        name: "priority",
                        value: shown(value)?,
                        reason: "is \"critical\", \"normal\", \"background\" or a function of the request returning one",
                    },
                ));
            }
            _ => {
                return Err(invalid_type(
                    env,
                    &format!("the {name} hook must be a function of the request"),
                ));
            }
        }
    }
    Ok((out, constant))
}
