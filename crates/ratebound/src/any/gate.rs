//! The whole decision of an HTTP rate-limiting middleware, once, for every
//! front door: the tower layer, the Python ASGI/WSGI middleware and the
//! Express/Fastify middleware only convert a request in and a [`Verdict`]
//! out. `spec/gate.json` holds the vectors each of them replays.
//!
//! Re-exported from [`crate::any`].

use std::net::IpAddr;
use std::time::Duration;

use crate::any::{AnyClock, Fingerprinter, Key};
use crate::fingerprint::Fingerprint;
use crate::http::{
    ConcurrencyCap, Forwarding, Headers, Policy, TrustedProxies, client_ip, field_name, ip_key,
    ratelimit_bytes, ratelimit_policy, retry_after_secs,
};
use crate::{Clock, Decision, Error, KeyedAlgorithm, KeyedLimiter, Overflow};

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
    /// Policies decided outside the gate — global limits in Redis — by
    /// name and shape (for the `RateLimit-Policy` field); their decisions
    /// come to [`Gate::decide_with`].
    pub remote: Vec<(String, KeyedAlgorithm)>,
}

/// The default cap on keys per policy.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            key: KeySource::ClientIp,
            trusted: TrustedProxies::None,
            forwarding: None,
            ipv6_prefix: 64,
            missing: MissingKey::FallBackToIp,
            headers: QuotaHeaders::Draft,
            body: RefusalBody::Text,
            max_keys: (DEFAULT_MAX_KEYS, Overflow::EvictLeastRecent),
            concurrency_limit: None,
            remote: Vec::new(),
        }
    }
}

/// The options [`GateOptions::set`] knows, in Python's and JavaScript's
/// spelling.
const OPTIONS: [(&str, &str); 10] = [
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
];

fn loose_text(value: Loose<'_>) -> String {
    match value {
        Loose::Text(t) => t.to_string(),
        Loose::Number(n) => n.to_string(),
        Loose::List(l) => format!("{l:?}"),
    }
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
    /// | `concurrency_limit` | a whole number ≥ 1 |
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an unknown option or a value of the
    /// wrong kind; the parsers' own errors ([`Error::Parse`],
    /// [`Error::InvalidNumber`]) naming the bad value.
    ///
    /// # Examples
    /// ```
    /// use ratebound::any::{GateOptions, Loose};
    /// let mut o = GateOptions::default();
    /// o.set("trusted_proxies", Loose::List(&["10.0.0.0/8"]))?;
    /// o.set("clientIpHeader", Loose::Text("CF-Connecting-IP"))?;
    /// assert_eq!(o.set("missing_key", Loose::Number(200.0)).unwrap_err().to_string(),
    ///            "invalid missing_key status 200: must be an HTTP error status, 400-599");
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn set(&mut self, name: &str, value: Loose<'_>) -> Result<(), Error> {
        let Some(&(snake, camel)) = OPTIONS.iter().find(|(s, c)| *s == name || *c == name) else {
            return Err(Error::InvalidOption {
                name: "option",
                value: name.to_string(),
                reason: "is not a middleware option",
            });
        };
        let spelt = if name == snake { snake } else { camel };
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
                self.ipv6_prefix = crate::any::whole(spelt, n, 0)?.min(128) as u8;
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
            ("missing_key", _) => return Err(wrong("must be \"ip\", \"shared\" or a status")),
            ("ipv6_prefix" | "max_keys" | "concurrency_limit", Loose::Text(_) | Loose::List(_)) => {
                return Err(wrong("must be a number"));
            }
            _ => return Err(wrong("must be a string")),
        }
        Ok(())
    }

    /// Checks that the options make sense together.
    fn check(&self) -> Result<(), Error> {
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

/// What a request carries that a [`Gate`] may key on.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a, H: ?Sized> {
    /// The application's key with [`KeySource::Given`] (ignored otherwise).
    pub key: Option<Key<'a>>,
    /// The peer's address, if known.
    pub peer: Option<IpAddr>,
    /// The request's header lines.
    pub headers: &'a H,
}

/// Where the text of a request's key goes while the gate resolves it: the
/// hot path writes nowhere (`()`), [`Gate::identity`] into a buffer.
trait Sink {
    fn key(&mut self, bytes: &[u8]);
    fn ip(&mut self, ip: IpAddr);
    fn anonymous(&mut self);
    fn clear(&mut self);
}

impl Sink for () {
    #[inline(always)]
    fn key(&mut self, _: &[u8]) {}
    #[inline(always)]
    fn ip(&mut self, _: IpAddr) {}
    #[inline(always)]
    fn anonymous(&mut self) {}
    #[inline(always)]
    fn clear(&mut self) {}
}

impl Sink for Vec<u8> {
    fn key(&mut self, bytes: &[u8]) {
        self.clear();
        self.extend_from_slice(b"key:");
        self.extend_from_slice(bytes);
    }
    fn ip(&mut self, ip: IpAddr) {
        self.clear();
        self.extend_from_slice(format!("ip:{ip}").as_bytes());
    }
    fn anonymous(&mut self) {
        self.clear();
        self.extend_from_slice(b"anonymous");
    }
    fn clear(&mut self) {
        Vec::clear(self);
    }
}

/// Every policy's decision by index: on the stack for up to four policies.
#[derive(Clone, Debug, Default)]
pub struct Decisions {
    inline: [Option<Decision>; 4],
    spill: Vec<Option<Decision>>,
}

impl Decisions {
    #[inline]
    fn set(&mut self, i: usize, decision: Decision) {
        match self.inline.get_mut(i) {
            Some(slot) => *slot = Some(decision),
            None => {
                let j = i - self.inline.len();
                if self.spill.len() <= j {
                    self.spill.resize(j + 1, None);
                }
                self.spill[j] = Some(decision);
            }
        }
    }

    /// The decisions, in policy order.
    pub fn iter(&self) -> impl Iterator<Item = Decision> + '_ {
        self.inline
            .iter()
            .chain(self.spill.iter())
            .map_while(|d| *d)
    }
}

/// One header field value of a [`Verdict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    /// Text.
    Text(&'a str),
    /// A whole number.
    Number(u64),
}

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Text(t) => f.write_str(t),
            Field::Number(n) => write!(f, "{n}"),
        }
    }
}

/// The header fields of a [`Verdict`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields<'g> {
    /// `RateLimit-Policy` (the gate's [`policy_field`](Gate::policy_field)).
    pub policy: Option<&'g str>,
    /// `RateLimit` (ASCII).
    pub ratelimit: Option<Vec<u8>>,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset`.
    pub legacy: Option<[u64; 3]>,
    /// `Retry-After`, whole seconds.
    pub retry_after: Option<u64>,
}

impl Fields<'_> {
    /// Every field as (lower-case name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, Field<'_>)> {
        let draft = self
            .policy
            .map(|p| ("ratelimit-policy", Field::Text(p)))
            .into_iter()
            .chain(self.ratelimit.as_deref().map(|r| {
                // Built from quoted printable ASCII and digits.
                (
                    "ratelimit",
                    Field::Text(std::str::from_utf8(r).unwrap_or("")),
                )
            }));
        let legacy = self
            .legacy
            .into_iter()
            .flat_map(|[limit, remaining, reset]| {
                [
                    ("x-ratelimit-limit", Field::Number(limit)),
                    ("x-ratelimit-remaining", Field::Number(remaining)),
                    ("x-ratelimit-reset", Field::Number(reset)),
                ]
            });
        let retry = self.retry_after.map(|s| ("retry-after", Field::Number(s)));
        draft.chain(legacy).chain(retry)
    }
}

/// A [`Gate`]'s answer: let the request through (status 0) with the quota
/// fields on the application's response, or answer it with a status, the
/// fields and a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict<'g> {
    /// 0 to let the request through; otherwise the status to answer with
    /// (429, 503, 500, or the [`MissingKey::Reject`] status).
    pub status: u16,
    /// The header fields to set.
    pub fields: Fields<'g>,
    /// A refusal's content type and body.
    pub body: Option<(&'static str, String)>,
    /// What happened, for metrics.
    pub outcome: Outcome,
    /// The policy that refused (the first, in order, local then remote),
    /// when [`outcome`](Self::outcome) is [`Outcome::Refused`].
    pub refused_by: Option<&'g str>,
}

/// What a [`Verdict`] did, as a metrics hook counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Let through.
    Allowed,
    /// Refused by a policy (429).
    Refused,
    /// Shed by the concurrency cap (503).
    Shed,
    /// Refused before any policy: no valid key, a full key table, a
    /// misconfiguration.
    Rejected,
}

impl Outcome {
    /// `"allowed"`, `"refused"`, `"shed"` or `"rejected"`: the same words in
    /// every front door.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Refused => "refused",
            Outcome::Shed => "shed",
            Outcome::Rejected => "rejected",
        }
    }
}

impl<'g> Verdict<'g> {
    fn pass(fields: Fields<'g>) -> Verdict<'g> {
        Verdict {
            status: 0,
            fields,
            body: None,
            outcome: Outcome::Allowed,
            refused_by: None,
        }
    }

    /// A new key refused because a policy's table is full (its cap on
    /// keys, with overflow "reject"): 503, `Retry-After: 1` — the server's
    /// trouble, not the client's over-use.
    fn too_many_keys() -> Verdict<'g> {
        Verdict::plain(
            503,
            "too many clients are being tracked; try again shortly\n",
            Some(1),
        )
    }

    fn plain(status: u16, text: &str, retry_after: Option<u64>) -> Verdict<'g> {
        Verdict {
            status,
            fields: Fields {
                retry_after,
                ..Fields::default()
            },
            body: Some(("text/plain; charset=utf-8", text.to_string())),
            outcome: Outcome::Rejected,
            refused_by: None,
        }
    }

    /// Whether the request goes on to the application.
    pub fn is_pass(&self) -> bool {
        self.status == 0
    }

    /// The fields as (lower-case name, text) pairs.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        self.fields
            .iter()
            .map(|(n, v)| (n, v.to_string()))
            .collect()
    }
}

/// What a remote policy (a limit kept outside the gate: Redis, a table
/// shared by the host's processes) answered, for [`Gate::decide_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAnswer {
    /// The policy decided.
    Decided(crate::Decision),
    /// The policy's table holds as many keys as it may and refused a new
    /// one ([`Error::TooManyKeys`]): the gate answers as for its own full
    /// table (503, `Retry-After: 1`), never 500.
    Full,
}

impl From<crate::Decision> for RemoteAnswer {
    fn from(d: crate::Decision) -> RemoteAnswer {
        RemoteAnswer::Decided(d)
    }
}

/// An HTTP middleware's decision, whole: the key (see [`KeySource`]; an IP
/// under the trusted-proxy rules, grouped by IPv6 prefix), every policy
/// all-or-nothing, and the answer — status, `Retry-After` in whole seconds
/// rounded up (at least 1), the quota fields and the body. The front doors
/// only move these values in and out of their frameworks.
///
/// # Examples
/// ```
/// use ratebound::any::{AnyClock, Gate, GateOptions, KeySource, Request};
/// use ratebound::{KeyedAlgorithm, ManualClock, Quota};
///
/// let options = GateOptions { key: KeySource::header("X-API-Key")?, ..GateOptions::default() };
/// let policy = ("default".to_string(), KeyedAlgorithm::TokenBucket(Quota::parse("1/s burst 1")?));
/// let gate = Gate::new(vec![policy], options, AnyClock::Manual(ManualClock::new()))?;
/// let lines = [("x-api-key", "alice")];
/// let request = Request { key: None, peer: None, headers: &lines[..] };
/// assert!(gate.decide(&request).is_pass());
/// let refused = gate.decide(&request);
/// assert_eq!(refused.status, 429);
/// assert_eq!(refused.fields.retry_after, Some(1));
/// # Ok::<(), ratebound::Error>(())
/// ```
pub struct Gate {
    policies: Vec<Policy>,
    /// Policies decided elsewhere (see [`Gate::decide_with`]).
    remote: Vec<Policy>,
    limiters: Vec<KeyedLimiter<Fingerprint, AnyClock>>,
    fingerprints: Fingerprinter,
    policy_field: String,
    forwarding: Forwarding,
    options: GateOptions,
    clock: AnyClock,
    cap: Option<ConcurrencyCap>,
}

const KEY_REQUIRED: &str = "a key is required for this endpoint\n";

impl Gate {
    /// A gate applying every `(name, algorithm)` policy to each key.
    ///
    /// # Errors
    /// [`Error::NoLimiters`] for no policy and no concurrency limit;
    /// [`Policy::for_keyed`]'s errors (a bad name); the keyed limiters'
    /// errors; [`Error::InvalidLimit`] for a concurrency limit of 0;
    /// [`Error::InvalidOption`] for a `client_ip_header` without trusted
    /// proxies, or two policies of one name.
    pub fn new(
        policies: Vec<(String, KeyedAlgorithm)>,
        options: GateOptions,
        clock: AnyClock,
    ) -> Result<Gate, Error> {
        if policies.is_empty() && options.remote.is_empty() && options.concurrency_limit.is_none() {
            return Err(Error::NoLimiters);
        }
        options.check()?;
        let mut names = Vec::new();
        let mut limiters = Vec::new();
        for (name, algorithm) in policies {
            names.push(Policy::for_keyed(&name, algorithm)?);
            let (max, overflow) = options.max_keys;
            limiters.push(
                KeyedLimiter::new(algorithm)?
                    .with_clock(clock.clone())
                    .with_max_keys(max, overflow)?,
            );
        }
        let cap = options
            .concurrency_limit
            .map(ConcurrencyCap::new)
            .transpose()?;
        let remote = options
            .remote
            .iter()
            .map(|(name, algorithm)| Policy::for_keyed(name, *algorithm))
            .collect::<Result<Vec<_>, _>>()?;
        let all: Vec<Policy> = names.iter().chain(remote.iter()).cloned().collect();
        // A name is a policy's identity: its RateLimit entry and, for a
        // Redis policy, its keys (`Engine::begin_in`). Two alike would share.
        for (i, p) in all.iter().enumerate() {
            if all[..i].iter().any(|q| q.name() == p.name()) {
                return Err(Error::InvalidOption {
                    name: "policies",
                    value: p.name().to_string(),
                    reason: "two policies have this name; give each its own (it names the policy's RateLimit entry and its Redis keys)",
                });
            }
        }
        Ok(Gate {
            cap,
            policy_field: ratelimit_policy(&all),
            remote,
            policies: names,
            limiters,
            fingerprints: Fingerprinter::new(),
            forwarding: options.forwarding.clone().unwrap_or_default(),
            options,
            clock,
        })
    }

    /// The options, as checked.
    pub fn options(&self) -> &GateOptions {
        &self.options
    }

    /// The header names the gate reads (the key header, the forwarding
    /// header when proxies are trusted), lower case: a front door that
    /// cannot hand over every line may hand over these.
    pub fn header_names(&self) -> impl Iterator<Item = &str> {
        let key = match &self.options.key {
            KeySource::Header(name) => Some(name.as_str()),
            _ => None,
        };
        let forwarding =
            (self.options.trusted != TrustedProxies::None).then(|| self.forwarding.header());
        key.into_iter().chain(forwarding)
    }

    /// Load shedding, before [`decide`](Self::decide): a place among the
    /// requests in flight if the concurrency cap has one (always, without a
    /// cap). `true` must be paired with one [`leave`](Self::leave) when the
    /// response is done; on `false`, answer [`shed`](Self::shed) at once —
    /// unless the request is critical, which goes on without a place (so
    /// the number in flight can exceed the cap by the critical requests).
    #[inline]
    pub fn try_enter(&self) -> bool {
        self.cap.as_ref().is_none_or(ConcurrencyCap::try_enter)
    }

    /// Gives back a place from [`try_enter`](Self::try_enter).
    #[inline]
    pub fn leave(&self) {
        if let Some(cap) = &self.cap {
            cap.leave();
        }
    }

    /// Whether a concurrency cap is set.
    pub fn is_capped(&self) -> bool {
        self.cap.is_some()
    }

    /// The answer to a shed request: 503, `Retry-After: 1`, a short text.
    pub fn shed(&self) -> Verdict<'static> {
        Verdict {
            outcome: Outcome::Shed,
            ..Verdict::plain(503, "server busy; try again shortly\n", Some(1))
        }
    }

    /// The policies' names, local then remote (for a metrics hook).
    pub fn policy_names(&self) -> impl Iterator<Item = &str> {
        self.policies
            .iter()
            .chain(self.remote.iter())
            .map(Policy::name)
    }

    /// The `RateLimit-Policy` field value.
    pub fn policy_field(&self) -> &str {
        &self.policy_field
    }

    /// The clock reading decisions are made with.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Keys tracked by the first policy.
    pub fn len(&self) -> usize {
        self.limiters.first().map_or(0, KeyedLimiter::len)
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops fresh state from every policy; how many entries went.
    pub fn cleanup(&self) -> usize {
        self.limiters.iter().map(KeyedLimiter::cleanup).sum()
    }

    fn ip<H: Headers + ?Sized, S: Sink>(
        &self,
        request: &Request<'_, H>,
        sink: &mut S,
    ) -> Option<Fingerprint> {
        let peer = request.peer?;
        let ip = client_ip(
            peer,
            request.headers,
            &self.forwarding,
            &self.options.trusted,
        );
        let ip = ip_key(ip, self.options.ipv6_prefix);
        sink.ip(ip);
        Some(self.fingerprints.ip(ip))
    }

    /// The key header's fingerprint, when the request has exactly one line
    /// of it holding a usable key (see [`KeySource::Header`]).
    #[inline]
    fn header_key<H: Headers + ?Sized, S: Sink>(
        &self,
        headers: &H,
        name: &str,
        sink: &mut S,
    ) -> Option<Fingerprint> {
        let mut lines = 0u32;
        let mut found = None;
        headers.for_each_line(name, |value| {
            lines += 1;
            if lines == 1 {
                let value = value.trim_ascii();
                if !value.is_empty() && !value.contains(&b',') {
                    sink.key(value);
                    // As `Key::Bytes(value)`.
                    found = Some(self.fingerprints.of(1, value));
                }
            }
        });
        if lines == 1 {
            found
        } else {
            sink.clear();
            None
        }
    }

    /// The request's key under every rule (key source, missing key), its
    /// text written to `sink` as well.
    #[inline]
    fn resolve<H: Headers + ?Sized, S: Sink>(
        &self,
        request: &Request<'_, H>,
        sink: &mut S,
    ) -> Result<Fingerprint, u16> {
        let found = match &self.options.key {
            KeySource::ClientIp => self.ip(request, sink),
            KeySource::Header(name) => self.header_key(request.headers, name, sink),
            KeySource::Given => match request.key {
                None | Some(Key::Text("")) | Some(Key::Bytes([])) => None,
                Some(key) => {
                    match key {
                        Key::Text(t) => sink.key(t.as_bytes()),
                        Key::Bytes(b) => sink.key(b),
                        Key::Int(i) => sink.key(i.to_string().as_bytes()),
                    }
                    Some(self.fingerprints.key(key))
                }
            },
        };
        if let Some(key) = found {
            return Ok(key);
        }
        let anonymous = |sink: &mut S| {
            sink.anonymous();
            self.fingerprints.of(4, b"")
        };
        match self.options.missing {
            MissingKey::FallBackToIp => match self.ip(request, sink) {
                Some(ip) => Ok(ip),
                None => Ok(anonymous(sink)),
            },
            MissingKey::SharedAnonymous => Ok(anonymous(sink)),
            MissingKey::Reject(status) => Err(status),
        }
    }

    #[inline]
    fn key<H: Headers + ?Sized>(&self, request: &Request<'_, H>) -> Result<Fingerprint, u16> {
        self.resolve(request, &mut ())
    }

    /// The request's key as text that every instance derives alike — for a
    /// limit kept outside this process, such as a global limit in Redis:
    /// `key:<the key>` (a key header's trimmed value, or the application's
    /// key), `ip:<address>` (IPv6 cut to its prefix) or `anonymous`, by the
    /// same rules [`decide`](Self::decide) keys on. `Err(status)` when a
    /// keyless request is refused ([`MissingKey::Reject`]).
    ///
    /// # Errors
    /// The [`MissingKey::Reject`] status.
    ///
    /// # Examples
    /// ```
    /// use ratebound::any::{AnyClock, Gate, GateOptions, Request};
    /// use ratebound::{KeyedAlgorithm, Quota};
    /// let policy = ("p".to_string(), KeyedAlgorithm::TokenBucket(Quota::parse("1/s")?));
    /// let gate = Gate::new(vec![policy], GateOptions::default(), AnyClock::default())?;
    /// let lines: [(&str, &str); 0] = [];
    /// let r = Request { key: None, peer: Some("2001:db8::7".parse().unwrap()), headers: &lines[..] };
    /// assert_eq!(gate.identity(&r), Ok(b"ip:2001:db8::".to_vec()));
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn identity<H: Headers + ?Sized>(&self, request: &Request<'_, H>) -> Result<Vec<u8>, u16> {
        let mut text = Vec::new();
        self.resolve(request, &mut text)?;
        Ok(text)
    }

    /// The decision for `request`, now.
    #[inline]
    pub fn decide<H: Headers + ?Sized>(&self, request: &Request<'_, H>) -> Verdict<'_> {
        self.decide_at(request, self.clock.now())
    }

    /// The decision for `request` at `now`.
    #[inline]
    pub fn decide_at<H: Headers + ?Sized>(
        &self,
        request: &Request<'_, H>,
        now: u64,
    ) -> Verdict<'_> {
        if self.limiters.is_empty() {
            return Verdict::pass(Fields::default());
        }
        let key = match self.key(request) {
            Ok(key) => key,
            Err(status) => return Verdict::plain(status, KEY_REQUIRED, None),
        };
        let mut decisions = Decisions::default();
        let admitted = KeyedLimiter::check_all_with(&self.limiters, &key, 1, now, |i, d| {
            decisions.set(i, d);
        });
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(Error::TooManyKeys { .. }) => return Verdict::too_many_keys(),
            Err(_) => return Verdict::plain(500, "rate limiter misconfigured\n", None),
        };
        let fields = self.quota_fields(&decisions);
        if admitted {
            return Verdict::pass(fields);
        }
        // Allowed decisions wait 0: the largest wait is the refusals' longest.
        let wait = decisions
            .iter()
            .map(|d| d.retry_after())
            .max()
            .unwrap_or(Duration::ZERO);
        let by = decisions
            .iter()
            .position(|d| !d.is_allowed())
            .and_then(|i| self.policies.get(i))
            .map(Policy::name);
        self.refusal(fields, wait, by)
    }

    /// A 429 carrying `fields`, for a wait of `wait`.
    fn refusal<'g>(
        &'g self,
        mut fields: Fields<'g>,
        wait: Duration,
        refused_by: Option<&'g str>,
    ) -> Verdict<'g> {
        let secs = retry_after_secs(wait).max(1);
        fields.retry_after = Some(secs);
        let body = match self.options.body {
            RefusalBody::Text => (
                "text/plain; charset=utf-8",
                format!("rate limit exceeded; retry in {secs} s\n"),
            ),
            RefusalBody::ProblemJson => (
                "application/problem+json",
                format!(
                    "{{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
                     \"detail\":\"rate limit exceeded; retry in {secs} s\",\"retry_after\":{secs}}}"
                ),
            ),
        };
        Verdict {
            status: 429,
            fields,
            body: Some(body),
            outcome: Outcome::Refused,
            refused_by,
        }
    }

    /// The decision for `request` now, with the decisions of the remote
    /// policies (limits kept elsewhere, e.g. global limits in Redis, checked
    /// by the front door for [`identity`](Self::identity)), one per
    /// [`GateOptions::remote`] policy, in order.
    /// Each answer is a [`Decision`] or a
    /// [`RemoteAnswer`] (a policy whose table is full answers as the gate's
    /// own full table does: 503).
    pub fn decide_with<H: Headers + ?Sized, R: Copy + Into<RemoteAnswer>>(
        &self,
        request: &Request<'_, H>,
        remote: &[R],
    ) -> Verdict<'_> {
        self.decide_with_at(request, remote, self.clock.now())
    }

    /// [`decide_with`](Self::decide_with) at `now`. A remote refusal is a
    /// 429 at once (the local policies are not charged; the `RateLimit`
    /// field lists the remote policies); otherwise the local policies decide
    /// and the remote ones join the quota fields. A request a local policy
    /// refuses after a remote one admitted it stays counted remotely — the
    /// remote store can only be told once.
    pub fn decide_with_at<H: Headers + ?Sized, R: Copy + Into<RemoteAnswer>>(
        &self,
        request: &Request<'_, H>,
        remote: &[R],
        now: u64,
    ) -> Verdict<'_> {
        // A keyless request the options refuse is refused before anything
        // else (a front door whose `identity` was refused passes `&[]`).
        if let Err(status) = self.key(request) {
            return Verdict::plain(status, KEY_REQUIRED, None);
        }
        if remote.len() != self.remote.len() {
            return Verdict::plain(500, "rate limiter misconfigured\n", None);
        }
        let mut decided = Vec::with_capacity(remote.len());
        for r in remote {
            match (*r).into() {
                RemoteAnswer::Decided(d) => decided.push(d),
                RemoteAnswer::Full => return Verdict::too_many_keys(),
            }
        }
        let remote = &decided[..];
        let remote_pairs = || self.remote.iter().zip(remote.iter().copied());
        if remote.iter().any(|d| !d.is_allowed()) {
            let mut fields = Fields::default();
            self.add_quota_fields(&mut fields, remote_pairs());
            let wait = remote
                .iter()
                .map(|d| d.retry_after())
                .max()
                .unwrap_or(Duration::ZERO);
            let by = remote
                .iter()
                .position(|d| !d.is_allowed())
                .and_then(|i| self.remote.get(i))
                .map(Policy::name);
            return self.refusal(fields, wait, by);
        }
        let mut verdict = self.decide_at(request, now);
        if verdict.status == 0 || verdict.status == 429 {
            self.add_quota_fields(&mut verdict.fields, remote_pairs());
        }
        verdict
    }

    /// Adds the remote policies' entries to `fields`: appended to
    /// `RateLimit`, or taking the legacy fields when tighter.
    fn add_quota_fields<'a>(
        &'a self,
        fields: &mut Fields<'a>,
        entries: impl Iterator<Item = (&'a Policy, crate::Decision)> + Clone,
    ) {
        if entries.clone().next().is_none() {
            return;
        }
        match self.options.headers {
            QuotaHeaders::Off => {}
            QuotaHeaders::Draft => {
                fields.policy = Some(&self.policy_field);
                let more = ratelimit_bytes(entries);
                match &mut fields.ratelimit {
                    Some(value) if !value.is_empty() => {
                        value.extend_from_slice(b", ");
                        value.extend_from_slice(&more);
                    }
                    _ => fields.ratelimit = Some(more),
                }
            }
            QuotaHeaders::Legacy => {
                if let Some(d) = entries
                    .map(|(_, d)| d)
                    .min_by_key(crate::Decision::remaining)
                    && fields
                        .legacy
                        .is_none_or(|[_, remaining, _]| d.remaining() < remaining)
                {
                    fields.legacy =
                        Some([d.limit(), d.remaining(), retry_after_secs(d.reset_after())]);
                }
            }
        }
    }

    /// The quota fields for `decisions`.
    fn quota_fields(&self, decisions: &Decisions) -> Fields<'_> {
        let mut v = Fields::default();
        match self.options.headers {
            QuotaHeaders::Off => {}
            QuotaHeaders::Draft => {
                v.policy = Some(&self.policy_field);
                v.ratelimit = Some(ratelimit_bytes(self.policies.iter().zip(decisions.iter())));
            }
            QuotaHeaders::Legacy => {
                v.legacy = decisions
                    .iter()
                    .min_by_key(Decision::remaining)
                    .map(|d| [d.limit(), d.remaining(), retry_after_secs(d.reset_after())]);
            }
        }
        v
    }
}
