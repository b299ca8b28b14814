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
    /// when [`outcome`](Self::outcome) is [`Outcome::Refused`].
    pub refused_by: Option<&'g str>,
    /// The priority of a request [`Outcome::Shed`].
    pub priority: Option<crate::http::Priority>,
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
    pub(super) fn pass(fields: Fields<'g>) -> Verdict<'g> {
        Verdict {
            status: 0,
            fields,
            body: None,
            outcome: Outcome::Allowed,
            refused_by: None,
            priority: None,
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
