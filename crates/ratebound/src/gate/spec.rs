//! The one parser of a middleware's configuration as the dynamic front
//! doors pass it — every option and policy field by name, loosely typed —
//! with every default and every rule between options: `PolicySpec` (one
//! policy) and `GateSpec` (the whole gate).

use crate::any::{AnyClock, Rate, keyed_algorithm};
use crate::{Error, KeyedAlgorithm};

use super::{Gate, GateOptions, KeySource, Loose};

/// The name of a middleware's policy when none is given.
pub const DEFAULT_POLICY_NAME: &str = "default";

/// The fields of a policy, in Python's spelling (JavaScript's is the same).
pub const POLICY_FIELDS: [&str; 6] = ["name", "algorithm", "rate", "burst", "limit", "window"];

/// One policy of a middleware, field by field, as a dynamic language
/// passes it; [`build`](Self::build) applies the defaults (the name
/// `"default"`, the token bucket) and checks it.
///
/// # Examples
/// ```
/// use ratebound::gate::{Loose, PolicySpec};
/// let mut p = PolicySpec::default();
/// p.set("rate", Loose::Text("10/s"))?;
/// p.set("burst", Loose::Number(20.0))?;
/// let (name, algorithm) = p.build()?;
/// assert_eq!((name.as_str(), algorithm.name()), ("default", "token_bucket"));
/// assert_eq!(p.set("brust", Loose::Number(1.0)).unwrap_err().to_string(),
///            "invalid policy field \"brust\": is not a policy field (name, algorithm, rate, burst, limit, window)");
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicySpec {
    name: Option<String>,
    algorithm: Option<String>,
    rate: Option<RateSpec>,
    burst: Option<f64>,
    limit: Option<f64>,
    window: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
enum RateSpec {
    PerSecond(f64),
    Text(String),
}

impl PolicySpec {
    /// Sets the field `field` ([`POLICY_FIELDS`]) from a loose value.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an unknown field or a value of the
    /// wrong kind (numbers are checked by [`build`](Self::build)).
    pub fn set(&mut self, field: &str, value: Loose<'_>) -> Result<(), Error> {
        let Some(&name) = POLICY_FIELDS.iter().find(|f| **f == field) else {
            return Err(Error::InvalidOption {
                name: "policy field",
                value: field.to_string(),
                reason: "is not a policy field (name, algorithm, rate, burst, limit, window)",
            });
        };
        let wrong = |reason| Error::InvalidOption {
            name,
            value: super::options::loose_text(value),
            reason,
        };
        match (name, value) {
            ("name", Loose::Text(t)) => self.name = Some(t.to_string()),
            ("algorithm", Loose::Text(t)) => self.algorithm = Some(t.to_string()),
            ("rate", Loose::Text(t)) => self.rate = Some(RateSpec::Text(t.to_string())),
            ("rate", Loose::Number(n)) => self.rate = Some(RateSpec::PerSecond(n)),
            ("burst", Loose::Number(n)) => self.burst = Some(n),
            ("limit", Loose::Number(n)) => self.limit = Some(n),
            ("window", Loose::Number(n)) => self.window = Some(n),
            ("name" | "algorithm", _) => return Err(wrong("must be a string")),
            ("rate", _) => {
                return Err(wrong(
                    "must be tokens per second or a quota string such as \"10/s\"",
                ));
            }
            _ => return Err(wrong("must be a number")),
        }
        Ok(())
    }

    /// Whether any field was set.
    pub fn is_empty(&self) -> bool {
        *self == PolicySpec::default()
    }

    /// The policy's name (default [`DEFAULT_POLICY_NAME`]) and algorithm
    /// (default the token bucket; see [`keyed_algorithm`]).
    ///
    /// # Errors
    /// [`keyed_algorithm`]'s: a missing or bad number, an unknown algorithm.
    pub fn build(&self) -> Result<(String, KeyedAlgorithm), Error> {
        let rate = self.rate.as_ref().map(|r| match r {
            RateSpec::PerSecond(n) => Rate::PerSecond(*n),
            RateSpec::Text(t) => Rate::Text(t),
        });
        let algorithm = keyed_algorithm(
            self.algorithm.as_deref(),
            rate,
            self.burst,
            self.limit,
            self.window,
        )?;
        let name = self.name.as_deref().unwrap_or(DEFAULT_POLICY_NAME);
        Ok((name.to_string(), algorithm))
    }
}

/// Where a remote policy's decisions are made, for its default name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteKind {
    /// A global limit in Redis: `"global"` unless named.
    Redis,
    /// A limit shared by the host's processes (shared memory): `"host"`
    /// unless named.
    Host,
}

impl RemoteKind {
    /// The name a remote policy of this kind has when none is given.
    pub fn default_name(self) -> &'static str {
        match self {
            RemoteKind::Redis => "global",
            RemoteKind::Host => "host",
        }
    }
}

/// A whole middleware configuration as a dynamic front door passes it:
/// options by name ([`GateOptions::set`]), the one policy given by the
/// top-level policy fields *or* a list of policies (never both), policies
/// decided elsewhere, and whether the application gives each request's key
/// (never together with a key header). Every rule and default is here, so
/// Python and Node accept and refuse the same configurations.
///
/// # Examples
/// ```
/// use ratebound::any::AnyClock;
/// use ratebound::gate::{GateSpec, Loose, PolicySpec};
/// let mut spec = GateSpec::default();
/// spec.set("rate", Loose::Text("5/s"))?;
/// spec.set("keyHeader", Loose::Text("x-api-key"))?;
/// let gate = spec.clone().build(AnyClock::default())?;
/// assert_eq!(gate.policy_field(), "\"default\";q=5;w=1");
/// // Both forms of policy at once is a mistake, named:
/// spec.add_policy(PolicySpec::default())?;
/// assert!(spec.build(AnyClock::default()).unwrap_err().to_string().contains("rate"));
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct GateSpec {
    options: GateOptions,
    single: PolicySpec,
    list: Option<Vec<PolicySpec>>,
    given_key: bool,
    /// How many times the key's source was given (`key`, `key_header`, a
    /// key function): more than once is a mistake.
    key_sources: u8,
}

impl GateSpec {
    /// Sets a gate option ([`GateOptions::set`]) or, for a policy field
    /// ([`POLICY_FIELDS`]), the one policy's field.
    ///
    /// # Errors
    /// As [`GateOptions::set`] and [`PolicySpec::set`].
    ///
    /// `key` is `"ip"` (any case: the client address, the default) or a
    /// header name, as `key_header`.
    pub fn set(&mut self, name: &str, value: Loose<'_>) -> Result<(), Error> {
        if POLICY_FIELDS.contains(&name) {
            return self.single.set(name, value);
        }
        match (name, value) {
            ("key", Loose::Text(t)) if t.eq_ignore_ascii_case("ip") => {
                self.options.key = KeySource::ClientIp;
            }
            ("key", Loose::Text(t)) => self.options.key = KeySource::header(t)?,
            ("key", other) => {
                return Err(Error::InvalidOption {
                    name: "key",
                    value: super::options::loose_text(other),
                    reason: "is \"ip\", a header name, or a function of the request",
                });
            }
            _ => {
                self.options.set(name, value)?;
                if !matches!(name, "key_header" | "keyHeader") {
                    return Ok(());
                }
            }
        }
        self.key_sources += 1;
        Ok(())
    }

    /// Adds a policy of the list form (`policies=`).
    ///
    /// # Errors
    /// None today; the policy is checked by [`build`](Self::build).
    pub fn add_policy(&mut self, policy: PolicySpec) -> Result<(), Error> {
        self.list.get_or_insert_with(Vec::new).push(policy);
        Ok(())
    }

    /// Marks the list form as given, even if it stays empty (only remote
    /// policies, say).
    pub fn use_policy_list(&mut self) {
        self.list.get_or_insert_with(Vec::new);
    }

    /// Adds a policy decided elsewhere, named `name` or its kind's
    /// [default name](RemoteKind::default_name).
    pub fn add_remote(&mut self, name: Option<&str>, kind: RemoteKind, algorithm: KeyedAlgorithm) {
        let name = name.unwrap_or(kind.default_name()).to_string();
        self.use_policy_list();
        self.options.remote.push((name, algorithm));
    }

    /// The application gives each request's key ([`KeySource::Given`]).
    pub fn give_key(&mut self) {
        self.given_key = true;
        self.key_sources += 1;
    }

    /// The gate, after the rules between options: one form of policy, a
    /// key from a header or from the application but not both.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a broken rule; the policies' and
    /// [`Gate::new`]'s errors.
    pub fn build(self, clock: AnyClock) -> Result<Gate, Error> {
        let GateSpec {
            mut options,
            single,
            list,
            given_key,
            key_sources,
        } = self;
        if key_sources > 1 {
            return Err(Error::InvalidOption {
                name: "key",
                value: "given more than once".to_string(),
                reason: "give the key once: key (\"ip\", a header name or a function of the request) or key_header",
            });
        }
        if given_key {
            options.key = KeySource::Given;
        }
        let policies = match list {
            None if single.is_empty()
                && (options.concurrency_limit.is_some()
                    || options.adaptive_concurrency.is_some()) =>
            {
                Vec::new()
            }
            None if single.is_empty() => {
                return Err(Error::InvalidOption {
                    name: "rate",
                    value: "nothing".to_string(),
                    reason: "give rate (one policy) or policies (a list of policies)",
                });
            }
            None => vec![single.build()?],
            Some(list) => {
                if !single.is_empty() {
                    return Err(Error::InvalidOption {
                        name: "policies",
                        value: "policies and a top-level rate".to_string(),
                        reason: "give either rate (one policy) or policies (a list), not both; each policy of the list has its own burst",
                    });
                }
                list.iter()
                    .map(PolicySpec::build)
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        Gate::new(policies, options, clock)
    }
}

/// The options that belong to the whole application, never to one
/// route's own limit: shedding (a concurrency cap counts the
/// application's requests in flight, and `critical`/`priority` only mean
/// something under it). Snake case; [`route_option`] reads either
/// spelling.
pub const APP_OPTIONS: [&str; 8] = [
    "concurrency_limit",
    "concurrency_initial",
    "concurrency_min",
    "concurrency_max",
    "concurrency_tolerance",
    "background_fraction",
    "critical",
    "priority",
];

/// `name` in snake case (`keyHeader` → `key_header`).
fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a route's own limit (a FastAPI/Flask/Django `limit`, a Fastify
/// route's `config.rateLimit`) takes the option `name` (either spelling):
/// every option and hook of the middleware — policies, remote ones too,
/// the key, the proxy rules, the fields, the body, the key table, the
/// hooks — except the application's ([`APP_OPTIONS`]: shedding is
/// app-wide).
///
/// # Errors
/// [`Error::InvalidOption`] naming an application option.
///
/// # Examples
/// ```
/// use ratebound::gate::route_option;
/// assert!(route_option("trustedProxies").is_ok());
/// assert_eq!(route_option("concurrency_limit").unwrap_err().to_string(),
///     "invalid route option \"concurrency_limit\": is the whole application's (shedding counts its requests in flight): give it to the middleware, not a route's limit");
/// ```
pub fn route_option(name: &str) -> Result<(), Error> {
    if APP_OPTIONS.contains(&snake(name).as_str()) {
        return Err(Error::InvalidOption {
            name: "route option",
            value: name.to_string(),
            reason: "is the whole application's (shedding counts its requests in flight): give it to the middleware, not a route's limit",
        });
    }
    Ok(())
}

/// Whether a route's own limit inherits the site-wide option `name`
/// (either spelling) from the options it is declared under (a Fastify
/// plugin's), given the names of the options the route gives itself
/// (`own`). The rule, one for every front door that has such defaults:
///
/// - an option the route gives is its own;
/// - the policy — its fields ([`POLICY_FIELDS`]) and `policies` — comes
///   whole from one side: a route that gives any of it inherits none (the
///   site's `burst` under the route's `rate` would change its limit behind
///   its back);
/// - the key (`key`, `key_header`) likewise;
/// - `label` (the site's name for its own limit) and the application's
///   options ([`APP_OPTIONS`]) are never inherited;
/// - every other option is.
///
/// # Examples
/// ```
/// use ratebound::gate::route_inherits;
/// let own = ["rate", "keyHeader"];
/// assert!(route_inherits("trustedProxies", &own));
/// assert!(!route_inherits("burst", &own));
/// assert!(!route_inherits("policies", &own));
/// assert!(!route_inherits("key", &own));
/// assert!(!route_inherits("label", &own));
/// assert!(!route_inherits("concurrencyLimit", &[""; 0]));
/// assert!(route_inherits("burst", &["headers"]));
/// ```
pub fn route_inherits<S: AsRef<str>>(name: &str, own: &[S]) -> bool {
    let name = snake(name);
    let own: Vec<String> = own.iter().map(|o| snake(o.as_ref())).collect();
    let gives = |n: &str| own.iter().any(|o| o == n);
    let policy = |n: &str| n == "policies" || POLICY_FIELDS.contains(&n);
    let key = |n: &str| n == "key" || n == "key_header";
    if gives(&name) || name == "label" || APP_OPTIONS.contains(&name.as_str()) {
        return false;
    }
    if policy(&name) {
        return !own.iter().any(|o| policy(o));
    }
    if key(&name) {
        return !own.iter().any(|o| key(o));
    }
    true
}
