//! What a [`Gate`] answers: the `Verdict` (status, fields, body), its
//! `Outcome` for metrics, and a decision made elsewhere (`RemoteAnswer`).

#[cfg(doc)] // the docs' links
use super::{Gate, MissingKey};
#[cfg(doc)]
use crate::Error;

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
    /// when [`outcome`](Self::outcome) is [`Outcome::Refused`]; the remote
    /// policy that failed, when it is [`Outcome::StoreError`].
    pub refused_by: Option<&'g str>,
    /// The priority of a request [`Outcome::Shed`].
    pub priority: Option<crate::http::Priority>,
    /// A remote policy's store began or ended an episode of failures with
    /// this request: what the front door logs, once per episode (see
    /// [`StoreNotice`]).
    pub notice: Option<StoreNotice<'g>>,
}

/// A change in a remote policy's health, told once per episode in the
/// [`Verdict`] of the request that saw it: the first check that failed
/// after answers ([`Began`](Self::Began)), and the first answer after
/// failures ([`Ended`](Self::Ended)). A front door logs it — a warning
/// with the failure's cause for `Began` — so an outage is one line, not
/// one per request. A request whose remote policy failed tells only a
/// `Began` (another policy's recovery waits for a request without
/// failures), so the cause a front door appends is always this notice's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreNotice<'g> {
    /// The policy named failed, after answering (or for the first time):
    /// requests get 503 until it answers again.
    Began {
        /// The remote policy's name.
        policy: &'g str,
        /// The `Retry-After` the 503s carry, in seconds.
        retry_after: u64,
    },
    /// The policy named answers again, after `failures` failed checks.
    Ended {
        /// The remote policy's name.
        policy: &'g str,
        /// How many of its checks failed in the episode.
        failures: u64,
    },
}

impl StoreNotice<'_> {
    /// Whether it began an episode (a warning) rather than ended one.
    pub fn began(&self) -> bool {
        matches!(self, StoreNotice::Began { .. })
    }
}

/// The log line, the same in every front door (which appends the
/// failure's cause to a `Began`).
///
/// # Examples
/// ```
/// use ratebound::gate::StoreNotice;
/// let began = StoreNotice::Began { policy: "global", retry_after: 1 };
/// assert_eq!(began.to_string(), "ratebound: the store of remote policy \"global\" failed; \
///     its requests are answered 503 with Retry-After: 1 until it answers again");
/// let ended = StoreNotice::Ended { policy: "global", failures: 12 };
/// assert_eq!(ended.to_string(), "ratebound: the store of remote policy \"global\" answers again, \
///     after 12 failed checks");
/// ```
impl std::fmt::Display for StoreNotice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreNotice::Began {
                policy,
                retry_after,
            } => write!(
                f,
                "ratebound: the store of remote policy {policy:?} failed; its requests are \
                 answered 503 with Retry-After: {retry_after} until it answers again"
            ),
            StoreNotice::Ended { policy, failures } => write!(
                f,
                "ratebound: the store of remote policy {policy:?} answers again, after \
                 {failures} failed check{}",
                if *failures == 1 { "" } else { "s" }
            ),
        }
    }
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
    /// A remote policy's check failed in a way its fail policy does not
    /// cover (see [`RemoteAnswer::Failed`]): 503 with `Retry-After`.
    StoreError,
}

impl Outcome {
    /// `"allowed"`, `"refused"`, `"shed"`, `"rejected"` or
    /// `"store_error"`: the same words in every front door.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Refused => "refused",
            Outcome::Shed => "shed",
            Outcome::Rejected => "rejected",
            Outcome::StoreError => "store_error",
        }
    }
}

impl<'g> Verdict<'g> {
    pub(super) fn pass(fields: Fields<'g>) -> Verdict<'g> {
        Verdict {
            status: 0,
            fields,
            body: None,
            outcome: Outcome::Allowed,
            refused_by: None,
            priority: None,
            notice: None,
        }
    }

    /// A new key refused because a policy's table is full (its cap on
    /// keys, with overflow "reject"): 503, `Retry-After: 1` — the server's
    /// trouble, not the client's over-use.
    pub(super) fn too_many_keys() -> Verdict<'g> {
        Verdict::plain(
            503,
            "too many clients are being tracked; try again shortly\n",
            Some(1),
        )
    }

    pub(super) fn plain(status: u16, text: &str, retry_after: Option<u64>) -> Verdict<'g> {
        Verdict {
            status,
            fields: Fields {
                retry_after,
                ..Fields::default()
            },
            body: Some(("text/plain; charset=utf-8", text.to_string())),
            outcome: Outcome::Rejected,
            refused_by: None,
            priority: None,
            notice: None,
        }
    }

    /// A request whose remote policy `policy` failed: 503 with
    /// `Retry-After: retry_after` — the server's trouble, not the
    /// client's over-use, and never 500.
    pub(super) fn store_error(policy: &'g str, retry_after: u64) -> Verdict<'g> {
        Verdict {
            outcome: Outcome::StoreError,
            refused_by: Some(policy),
            ..Verdict::plain(
                503,
                "rate limit unavailable; try again shortly\n",
                Some(retry_after),
            )
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
/// shared by the host's processes, your own) answered, for
/// [`Gate::decide_with`] and [`Gate::finish`]. One rule in every front
/// door ([`from_result`](Self::from_result), [`from_error`](Self::from_error)):
///
/// - trouble in the store that the policy's fail policy covers (a Redis
///   limiter's `fail_open`, `fail_closed`, `local` for a store that is
///   down or slow) is a [`Decision`](crate::Decision) like any other;
/// - a full table ([`Error::TooManyKeys`]) answers as the gate's own full
///   table: 503, `Retry-After: 1`, outcome `rejected` — the table decided
///   to keep no new key, nothing failed;
/// - any other error that escapes a check (an exception from the user's
///   client, an event-loop error, a configuration error found at the first
///   call) is [`Failed`](Self::Failed): 503 with the gate's
///   `store_error_retry_after` (default 1 s), outcome `store_error`, one
///   log line per episode ([`StoreNotice`]) — never 500.
///
/// Either non-answer outranks every decision of the request (a request
/// one policy cannot decide is not served), and no local policy is charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAnswer {
    /// The policy decided.
    Decided(crate::Decision),
    /// The policy's table holds as many keys as it may and refused a new
    /// one ([`Error::TooManyKeys`]): the gate answers as for its own full
    /// table (503, `Retry-After: 1`), never 500.
    Full,
    /// The policy's check failed and its fail policy did not answer for
    /// it: 503 with `Retry-After` (see the type's rule), never 500.
    Failed,
}

impl RemoteAnswer {
    /// A remote policy's check that ended in an error, by the error's
    /// stable code ([`Error::code`]; Python's `code` attribute, Node's
    /// `code` less its `ERR_RATEBOUND_` prefix and lower-cased), or `None`
    /// for an error that is not ratebound's: `"too_many_keys"` is
    /// [`Full`](Self::Full), anything else [`Failed`](Self::Failed).
    ///
    /// # Examples
    /// ```
    /// use ratebound::gate::RemoteAnswer;
    /// assert_eq!(RemoteAnswer::from_error(Some("too_many_keys")), RemoteAnswer::Full);
    /// assert_eq!(RemoteAnswer::from_error(None), RemoteAnswer::Failed);
    /// ```
    pub fn from_error(code: Option<&str>) -> RemoteAnswer {
        match code {
            Some("too_many_keys") => RemoteAnswer::Full,
            _ => RemoteAnswer::Failed,
        }
    }

    /// A remote policy's check as the gate takes it: its decision, or its
    /// error as [`from_error`](Self::from_error) maps it.
    ///
    /// # Examples
    /// ```
    /// use ratebound::gate::RemoteAnswer;
    /// use ratebound::{Decision, Error};
    /// let d = Decision::from_parts(true, 5, 4, 0, 0);
    /// assert_eq!(RemoteAnswer::from_result(Ok(d)), RemoteAnswer::Decided(d));
    /// let full = Error::TooManyKeys { max_keys: 10 };
    /// assert_eq!(RemoteAnswer::from_result(Err(&full)), RemoteAnswer::Full);
    /// assert_eq!(RemoteAnswer::from_result(Err(&Error::NoLimiters)), RemoteAnswer::Failed);
    /// ```
    pub fn from_result(result: Result<crate::Decision, &crate::Error>) -> RemoteAnswer {
        match result {
            Ok(d) => RemoteAnswer::Decided(d),
            Err(e) => RemoteAnswer::from_error(Some(e.code())),
        }
    }
}

impl From<crate::Decision> for RemoteAnswer {
    fn from(d: crate::Decision) -> RemoteAnswer {
        RemoteAnswer::Decided(d)
    }
}
