//! What a [`Gate`] is told: its options, each with its default and its
//! rule, read from loosely typed values (`Loose`) as the bindings pass them.

use crate::http::{AdaptiveConcurrency, Forwarding, TrustedProxies, field_name};
use crate::{Error, KeyedAlgorithm, Overflow};

#[cfg(doc)] // the docs' links
use super::{Gate, Request};

/// Which quota header fields a [`Gate`] sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QuotaHeaders {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
    #[default]
    Draft,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` of
    /// the tightest policy.
    Legacy,
    /// None (a refusal still carries `Retry-After`).
    Off,
}

impl QuotaHeaders {
    /// By name: `"draft"`, `"legacy"` or `"off"`.
    ///
    /// # Errors
    /// [`Error::Parse`] for any other name.
    pub fn parse(name: &str) -> Result<QuotaHeaders, Error> {
        match name {
            "draft" => Ok(QuotaHeaders::Draft),
            "legacy" => Ok(QuotaHeaders::Legacy),
            "off" => Ok(QuotaHeaders::Off),
            other => Err(Error::Parse {
                input: other.to_string(),
                reason: "headers is \"draft\", \"legacy\" or \"off\"",
            }),
        }
    }
}

/// What a [`Gate`] does with a request that has no valid key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Key it by its client IP (the default: one bucket shared by every
    /// keyless client would let one of them lock all the others out).
    #[default]
    FallBackToIp,
    /// Share one bucket among all keyless requests.
    SharedAnonymous,
    /// Refuse it with this status, 400–599 (e.g. 401 or 400).
    Reject(u16),
}

impl MissingKey {
    /// Refusing keyless requests with `status`.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] unless `status` is a whole number in
    /// 400..=599 (a refusal is a client or server error).
    pub fn reject(status: f64) -> Result<MissingKey, Error> {
        let code = crate::any::whole("missing_key status", status, 0)?;
        if !(400..=599).contains(&code) {
            return Err(Error::InvalidNumber {
                name: "missing_key status",
                value: code.to_string(),
                reason: "must be an HTTP error status, 400-599",
            });
        }
        Ok(MissingKey::Reject(code as u16))
    }

    /// By name: `"ip"`, `"shared"`, or a status such as `"401"`.
    ///
    /// # Errors
    /// [`Error::Parse`] for another name; as [`MissingKey::reject`] for a
    /// status out of range.
    pub fn parse(name: &str) -> Result<MissingKey, Error> {
        match name {
            "ip" => Ok(MissingKey::FallBackToIp),
            "shared" => Ok(MissingKey::SharedAnonymous),
            other => match other.parse::<u16>() {
                Ok(status) => MissingKey::reject(f64::from(status)),
                Err(_) => Err(Error::Parse {
                    input: other.to_string(),
                    reason: "missing_key is \"ip\", \"shared\" or an HTTP status (400-599)",
                }),
            },
        }
    }
}

/// The body of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RefusalBody {
    /// `text/plain`, one line.
    #[default]
    Text,
    /// `application/problem+json` (RFC 9457).
    ProblemJson,
}

impl RefusalBody {
    /// By name: `"text"` or `"problem+json"` (`"problem_json"`).
    ///
    /// # Errors
    /// [`Error::Parse`] for any other name.
    pub fn parse(name: &str) -> Result<RefusalBody, Error> {
        match name {
            "text" => Ok(RefusalBody::Text),
            "problem+json" | "problem_json" => Ok(RefusalBody::ProblemJson),
            other => Err(Error::Parse {
                input: other.to_string(),
                reason: "body is \"text\" or \"problem+json\"",
            }),
        }
    }
}

/// Where a [`Gate`] finds a request's key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KeySource {
    /// The client IP (the peer, or what trusted proxies report), IPv6
    /// grouped by prefix. The default.
    #[default]
    ClientIp,
    /// A request header (lower case), e.g. `x-api-key`. The key is its value
    /// when the request has exactly one line of it, not empty (after
    /// trimming spaces and tabs) and without a comma; otherwise the request
    /// has no valid key. Repeated lines are what a client adds to smuggle a
    /// key past a proxy that appends its own, and a comma is how servers
    /// (WSGI, Node's `req.headers`) merge repeated lines, so neither is
    /// guessed at.
    Header(String),
    /// The application's own key, passed in [`Request::key`] (a closure's
    /// result); an empty one is no key.
    Given,
}

impl KeySource {
    /// Keys from the header `name` (any case).
    ///
    /// # Errors
    /// [`Error::Parse`] for a name that is not an HTTP field name.
    pub fn header(name: &str) -> Result<KeySource, Error> {
        field_name(name).map(KeySource::Header)
    }
}

/// A loosely typed option value, as a dynamic language passes it (see
/// [`GateOptions::set`]).
#[derive(Clone, Copy, Debug)]
pub enum Loose<'a> {
    /// A string.
    Text(&'a str),
    /// A number.
    Number(f64),
    /// A list of strings.
    List(&'a [&'a str]),
    /// A boolean (`True`/`False`, `true`/`false`).
    Bool(bool),
}

/// How a [`Gate`] finds keys and answers; [`Default`] holds every default,
/// for every front door.
#[derive(Clone, Debug)]
pub struct GateOptions {
    /// Where the key comes from (default: the client IP).
    pub key: KeySource,
    /// Whose forwarding headers to believe (default: nobody's).
    pub trusted: TrustedProxies,
    /// Which forwarding header carries the client address (`None`: the
    /// default, `X-Forwarded-For`, when proxies are trusted).
    pub forwarding: Option<Forwarding>,
    /// IPv6 keys are cut to this prefix (default 64).
    pub ipv6_prefix: u8,
    /// What a request without a valid key gets (default: keyed by IP).
    pub missing: MissingKey,
    /// Which quota fields to set (default: the IETF draft's).
    pub headers: QuotaHeaders,
    /// The refusal body (default: text).
    pub body: RefusalBody,
    /// The cap on keys per policy, and what happens at it (default
    /// 1 000 000, evicting the least recent). Always capped: a middleware
    /// faces clients that can invent keys.
    pub max_keys: (usize, Overflow),
    /// The cap on requests in flight (`None`: no cap); see
    /// [`Gate::try_enter`].
    pub concurrency_limit: Option<usize>,
    /// A cap on requests in flight learned from their latency instead of a
    /// fixed number (`concurrency_limit="auto"`); not with
    /// `concurrency_limit`.
    pub adaptive_concurrency: Option<AdaptiveConcurrency>,
    /// The share of the cap background requests may fill (default ½).
    pub background_fraction: f64,
    /// A short queue in front of the cap (`None`, the default: shed at
    /// once): a normal request that finds the cap full may wait this long
    /// for a place (see [`ConcurrencyCap::with_queue`](crate::http::ConcurrencyCap::with_queue)).
    /// Only where the front door can wait ([`Gate::admit_or_queue`]).
    pub concurrency_queue: Option<std::time::Duration>,
    /// Policies decided outside the gate — global limits in Redis — by
    /// name and shape (for the `RateLimit-Policy` field); their decisions
    /// come to [`Gate::decide_with`].
    pub remote: Vec<(String, KeyedAlgorithm)>,
    /// The `Retry-After` (whole seconds, 1–3600; default
    /// [`DEFAULT_STORE_ERROR_RETRY_AFTER`]) of the 503 answering a request
    /// whose remote policy failed ([`RemoteAnswer::Failed`](super::RemoteAnswer::Failed)).
    pub store_error_retry_after: u64,
}

/// The default `Retry-After` of a request whose remote policy failed:
/// 1 s, as for a shed request or a full key table — a store that fails
/// fails fast, so a client coming back soon costs little, and one that
/// recovers serves it at once.
pub const DEFAULT_STORE_ERROR_RETRY_AFTER: u64 = 1;

/// The longest `store_error_retry_after`: an hour.
const MAX_STORE_ERROR_RETRY_AFTER: u64 = 3600;

/// The default cap on keys of every in-process table: a middleware's
/// policies, the route decorators, a Redis limiter's fail-local share (a
/// shared-memory table, allocated whole, has its own, smaller one).
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            key: KeySource::ClientIp,
            trusted: TrustedProxies::None,
            forwarding: None,
            ipv6_prefix: crate::any::DEFAULT_IPV6_PREFIX,
            missing: MissingKey::FallBackToIp,
            headers: QuotaHeaders::Draft,
            body: RefusalBody::Text,
            max_keys: (DEFAULT_MAX_KEYS, Overflow::EvictLeastRecent),
            concurrency_limit: None,
            adaptive_concurrency: None,
            background_fraction: crate::http::DEFAULT_BACKGROUND_FRACTION,
            concurrency_queue: None,
            remote: Vec::new(),
            store_error_retry_after: DEFAULT_STORE_ERROR_RETRY_AFTER,
        }
    }
}

/// The options [`GateOptions::set`] knows, in Python's and JavaScript's
/// spelling.
const OPTIONS: [(&str, &str); 16] = [
    ("key_header", "keyHeader"),
    ("trusted_proxies", "trustedProxies"),
    ("client_ip_header", "clientIpHeader"),
    ("ipv6_prefix", "ipv6Prefix"),
    ("missing_key", "missingKey"),
    ("headers", "headers"),
    ("body", "body"),
    ("max_keys", "maxKeys"),
    ("overflow", "overflow"),
    ("concurrency_limit", "concurrencyLimit"),
    ("concurrency_initial", "concurrencyInitial"),
    ("concurrency_min", "concurrencyMin"),
    ("concurrency_max", "concurrencyMax"),
    ("concurrency_tolerance", "concurrencyTolerance"),
    ("background_fraction", "backgroundFraction"),
    ("store_error_retry_after", "storeErrorRetryAfter"),
];

/// The option `name` among `options` (each in Python's and JavaScript's
/// spelling, `(snake_case, camelCase)`): its `snake_case` name, and its
/// name as spelt (for errors naming it).
///
/// # Errors
/// [`Error::InvalidOption`] naming `name` when it is none of them; `reason`
/// says whose options they are (`"is not a middleware option"`).
///
/// # Examples
/// ```
/// let options = [("max_keys", "maxKeys")];
/// let found = ratebound::gate::option_name(&options, "maxKeys", "is not an option");
/// assert_eq!(found?, ("max_keys", "maxKeys"));
/// let err = ratebound::gate::option_name(&options, "max", "is not an option").unwrap_err();
/// assert_eq!(err.to_string(), "invalid option \"max\": is not an option");
/// # Ok::<(), ratebound::Error>(())
/// ```
pub fn option_name(
    options: &[(&'static str, &'static str)],
    name: &str,
    reason: &'static str,
) -> Result<(&'static str, &'static str), Error> {
    match options.iter().find(|(s, c)| *s == name || *c == name) {
        Some(&(snake, camel)) => Ok((snake, if name == snake { snake } else { camel })),
        None => Err(Error::InvalidOption {
            name: "option",
            value: name.to_string(),
            reason,
        }),
    }
}

pub(super) fn loose_text(value: Loose<'_>) -> String {
    match value {
        Loose::Text(t) => t.to_string(),
        Loose::Number(n) => n.to_string(),
        Loose::List(l) => format!("{l:?}"),
        Loose::Bool(b) => b.to_string(),
    }
}

/// A `store_error_retry_after` in whole seconds, checked.
///
/// # Errors
/// [`Error::InvalidNumber`] naming a value that is not a whole number in
/// 1..=3600.
pub fn store_error_retry_after(secs: f64) -> Result<u64, Error> {
    let secs = crate::any::whole("store_error_retry_after", secs, 1)?;
    if secs > MAX_STORE_ERROR_RETRY_AFTER {
        return Err(Error::InvalidNumber {
            name: "store_error_retry_after",
            value: secs.to_string(),
            reason: "must be at most 3600 seconds (an hour)",
        });
    }
    Ok(secs)
}

impl GateOptions {
    /// Sets the option `name` (`snake_case` or `camelCase`) from a loosely
    /// typed value — the one parser of the Python and Node middleware
    /// options:
    ///
    /// | option | value |
    /// |---|---|
    /// | `key_header` | a header name |
    /// | `trusted_proxies` | CIDR networks (a list or one string), or a number of hops |
    /// | `client_ip_header` | `"x-forwarded-for"`, `"forwarded"` or a single-address header such as `"cf-connecting-ip"` |
    /// | `ipv6_prefix` | 0–128 (more counts as 128) |
    /// | `missing_key` | `"ip"`, `"shared"` or a status 400–599 |
    /// | `headers` | `"draft"`, `"legacy"`, `"off"` |
    /// | `body` | `"text"`, `"problem+json"` |
    /// | `max_keys` | a whole number ≥ 1 |
    /// | `overflow` | `"evict"`, `"reject"` |
    /// | `concurrency_limit` | a whole number ≥ 1, or `"auto"`: learned from latency |
    /// | `concurrency_initial`, `concurrency_min`, `concurrency_max` | whole numbers ≥ 1 (imply `"auto"`) |
    /// | `concurrency_tolerance` | a number ≥ 1 (implies `"auto"`) |
    /// | `background_fraction` | 0–1 |
    /// | `store_error_retry_after` | whole seconds, 1–3600: the `Retry-After` of a request whose remote policy failed |
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an unknown option or a value of the
    /// wrong kind; the parsers' own errors ([`Error::Parse`],
    /// [`Error::InvalidNumber`]) naming the bad value.
    ///
    /// # Examples
    /// ```
    /// use ratebound::gate::{GateOptions, Loose};
    /// let mut o = GateOptions::default();
    /// o.set("trusted_proxies", Loose::List(&["10.0.0.0/8"]))?;
    /// o.set("clientIpHeader", Loose::Text("CF-Connecting-IP"))?;
    /// assert_eq!(o.set("missing_key", Loose::Number(200.0)).unwrap_err().to_string(),
    ///            "invalid missing_key status 200: must be an HTTP error status, 400-599");
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn set(&mut self, name: &str, value: Loose<'_>) -> Result<(), Error> {
        let (snake, spelt) = option_name(&OPTIONS, name, "is not a middleware option")?;
        let wrong = |reason| Error::InvalidOption {
            name: spelt,
            value: loose_text(value),
            reason,
        };
        match (snake, value) {
            ("key_header", Loose::Text(t)) => self.key = KeySource::header(t)?,
            ("trusted_proxies", Loose::Number(n)) => {
                self.trusted = TrustedProxies::Hops(crate::any::whole(spelt, n, 0)? as usize);
            }
            ("trusted_proxies", Loose::Text(t)) => {
                self.trusted = TrustedProxies::Cidrs(vec![crate::http::Cidr::parse(t)?]);
            }
            ("trusted_proxies", Loose::List(list)) => {
                let cidrs = list
                    .iter()
                    .map(|c| crate::http::Cidr::parse(c))
                    .collect::<Result<Vec<_>, _>>()?;
                self.trusted = TrustedProxies::Cidrs(cidrs);
            }
            ("client_ip_header", Loose::Text(t)) => self.forwarding = Some(Forwarding::parse(t)?),
            ("ipv6_prefix", Loose::Number(n)) => {
                self.ipv6_prefix = crate::any::ipv6_prefix(spelt, n)?;
            }
            ("missing_key", Loose::Text(t)) => self.missing = MissingKey::parse(t)?,
            ("missing_key", Loose::Number(n)) => self.missing = MissingKey::reject(n)?,
            ("headers", Loose::Text(t)) => self.headers = QuotaHeaders::parse(t)?,
            ("body", Loose::Text(t)) => self.body = RefusalBody::parse(t)?,
            ("max_keys", Loose::Number(n)) => {
                let max = crate::any::whole(spelt, n, 1)?;
                self.max_keys.0 = usize::try_from(max).unwrap_or(usize::MAX);
            }
            ("overflow", Loose::Text(t)) => self.max_keys.1 = crate::any::overflow(t)?,
            ("concurrency_limit", Loose::Number(n)) => {
                let limit = crate::any::whole(spelt, n, 1)?;
                self.concurrency_limit = Some(usize::try_from(limit).unwrap_or(usize::MAX));
            }
            ("concurrency_limit", Loose::Text("auto")) => {
                self.adaptive_concurrency
                    .get_or_insert_with(Default::default);
            }
            ("concurrency_limit", _) => return Err(wrong("must be a whole number or \"auto\"")),
            ("concurrency_initial" | "concurrency_min" | "concurrency_max", Loose::Number(n)) => {
                let n = usize::try_from(crate::any::whole(spelt, n, 1)?).unwrap_or(usize::MAX);
                let tuning = self
                    .adaptive_concurrency
                    .get_or_insert_with(Default::default);
                match snake {
                    "concurrency_initial" => tuning.initial_limit = n,
                    "concurrency_min" => tuning.min_limit = n,
                    _ => tuning.max_limit = n,
                }
            }
            ("concurrency_tolerance", Loose::Number(n)) => {
                if !(n.is_finite() && n >= 1.0) {
                    return Err(Error::InvalidNumber {
                        name: spelt,
                        value: crate::error::show(n),
                        reason: "must be a finite number of at least 1",
                    });
                }
                let tuning = self
                    .adaptive_concurrency
                    .get_or_insert_with(Default::default);
                tuning.tolerance = n;
            }
            ("background_fraction", Loose::Number(n)) => {
                crate::http::concurrency_share_check(n)?;
                self.background_fraction = n;
            }
            ("store_error_retry_after", Loose::Number(n)) => {
                self.store_error_retry_after = store_error_retry_after(n)?;
            }
            ("missing_key", _) => return Err(wrong("must be \"ip\", \"shared\" or a status")),
            (
                "ipv6_prefix"
                | "max_keys"
                | "concurrency_initial"
                | "concurrency_min"
                | "concurrency_max"
                | "concurrency_tolerance"
                | "background_fraction"
                | "store_error_retry_after",
                Loose::Text(_) | Loose::List(_) | Loose::Bool(_),
            ) => {
                return Err(wrong("must be a number"));
            }
            _ => return Err(wrong("must be a string")),
        }
        Ok(())
    }

    /// Checks that the options make sense together.
    pub(super) fn check(&self) -> Result<(), Error> {
        store_error_retry_after(self.store_error_retry_after as f64)?;
        if let (Some(limit), Some(_)) = (self.concurrency_limit, &self.adaptive_concurrency) {
            return Err(Error::InvalidOption {
                name: "concurrency_limit",
                value: limit.to_string(),
                reason: "is a fixed number, and the adaptive limit (\"auto\", or its tuning) is set too: choose one",
            });
        }
        if let Some(tuning) = &self.adaptive_concurrency {
            tuning.check()?;
        }
        crate::http::concurrency_share_check(self.background_fraction)?;
        if let Some(wait) = self.concurrency_queue
            && self.concurrency_limit.is_none()
            && self.adaptive_concurrency.is_none()
        {
            return Err(Error::InvalidOption {
                name: "concurrency_queue",
                value: format!("{wait:?}"),
                reason: "queues for a concurrency limit: set concurrency_limit (a number or \"auto\") as well",
            });
        }
        if self.background_fraction != crate::http::DEFAULT_BACKGROUND_FRACTION
            && self.concurrency_limit.is_none()
            && self.adaptive_concurrency.is_none()
        {
            return Err(Error::InvalidOption {
                name: "background_fraction",
                value: crate::error::show(self.background_fraction),
                reason: "shares a concurrency limit: set concurrency_limit (a number or \"auto\") as well",
            });
        }
        if let Some(f) = &self.forwarding
            && self.trusted == TrustedProxies::None
        {
            return Err(Error::InvalidOption {
                name: "client_ip_header",
                value: f.header().to_string(),
                reason: "is read only from trusted proxies: set trusted_proxies as well",
            });
        }
        Ok(())
    }
}
