//! Two limits on one response — a route's own limit under the site-wide
//! middleware, two stacked layers — each set the quota fields: the one
//! rule for what the response carries, for every front door.

/// The list fields of the draft RateLimit header fields
/// (draft-ietf-httpapi-ratelimit-headers): each limit's entries are joined
/// into one list, never overwritten.
pub const LIST_FIELDS: [&str; 2] = ["ratelimit", "ratelimit-policy"];

/// Every field a gate sets on a response, lower case: the ones
/// [`merge_fields`] merges.
pub const GATE_FIELDS: [&str; 6] = [
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "retry-after",
];

const LEGACY: [&str; 3] = [
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// Whether `name` (any case) is a field a gate sets ([`GATE_FIELDS`]):
/// what a front door takes out of a response before it sets the merged
/// fields.
pub fn is_gate_field(name: &[u8]) -> bool {
    GATE_FIELDS
        .iter()
        .any(|f| f.as_bytes().eq_ignore_ascii_case(name))
}

/// The quota fields of a response two limits decided: `first` the fields
/// of the limit that decided first (the site-wide middleware, the outer
/// layer), `second` those of the one that decided next (a route's own
/// limit), each as (name in any case, value) pairs. Fields that are not a
/// gate's ([`GATE_FIELDS`]) are left out. The rule, the same in every
/// front door:
///
/// - `RateLimit` and `RateLimit-Policy` are lists: `first`'s entries, then
///   `second`'s, joined by `", "` (as two header lines of a list field
///   are);
/// - `X-RateLimit-Limit`, `-Remaining` and `-Reset` move together: the
///   three of the limit with fewer remaining (`first`'s on a tie, or
///   whichever limit set them), as one gate takes its tightest policy's;
/// - `Retry-After`: the longer wait.
///
/// The answer is in [`GATE_FIELDS`] order, names in lower case.
///
/// # Examples
/// ```
/// use ratebound::gate::merge_fields;
/// let site = [("RateLimit-Policy", "\"site\";q=100;w=60"), ("RateLimit", "\"site\";r=99;t=1")];
/// let route = [("ratelimit-policy", "\"login\";q=5;w=60"), ("ratelimit", "\"login\";r=4;t=12")];
/// assert_eq!(merge_fields(&site, &route), vec![
///     ("ratelimit", "\"site\";r=99;t=1, \"login\";r=4;t=12".to_string()),
///     ("ratelimit-policy", "\"site\";q=100;w=60, \"login\";q=5;w=60".to_string()),
/// ]);
/// ```
pub fn merge_fields<N: AsRef<[u8]>, V: AsRef<str>>(
    first: &[(N, V)],
    second: &[(N, V)],
) -> Vec<(&'static str, String)> {
    let get = |fields: &[(N, V)], name: &str| {
        fields
            .iter()
            .find(|(n, _)| n.as_ref().eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_ref().trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let mut out = Vec::new();
    for name in LIST_FIELDS {
        let joined = match (get(first, name), get(second, name)) {
            (Some(a), Some(b)) => Some(format!("{a}, {b}")),
            (a, b) => a.or(b),
        };
        if let Some(v) = joined {
            out.push((name, v));
        }
    }
    let remaining =
        |fields: &[(N, V)]| get(fields, LEGACY[1]).map(|r| r.parse::<u64>().unwrap_or(u64::MAX));
    let legacy = match (remaining(first), remaining(second)) {
        (Some(a), Some(b)) if b < a => Some(second),
        (Some(_), _) => Some(first),
        (None, Some(_)) => Some(second),
        (None, None) => None,
    };
    if let Some(fields) = legacy {
        for name in LEGACY {
            if let Some(v) = get(fields, name) {
                out.push((name, v));
            }
        }
    }
    let wait = |fields: &[(N, V)]| get(fields, "retry-after");
    let retry = match (wait(first), wait(second)) {
        (Some(a), Some(b)) => {
            let secs = |v: &str| v.parse::<u64>().unwrap_or(0);
            Some(if secs(&b) > secs(&a) { b } else { a })
        }
        (a, b) => a.or(b),
    };
    if let Some(v) = retry {
        out.push(("retry-after", v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_fields_move_together_with_the_fewest_remaining() {
        let site = [
            ("x-ratelimit-limit", "100"),
            ("x-ratelimit-remaining", "7"),
            ("x-ratelimit-reset", "3"),
        ];
        let route = [
            ("X-RateLimit-Limit", "5"),
            ("X-RateLimit-Remaining", "4"),
            ("X-RateLimit-Reset", "12"),
        ];
        let want = vec![
            ("x-ratelimit-limit", "5".to_string()),
            ("x-ratelimit-remaining", "4".to_string()),
            ("x-ratelimit-reset", "12".to_string()),
        ];
        assert_eq!(merge_fields(&site, &route), want);
        assert_eq!(merge_fields(&route, &site), want);
    }

    #[test]
    fn retry_after_is_the_longer_wait_and_one_side_stays() {
        assert_eq!(
            merge_fields(&[("retry-after", "3")], &[("Retry-After", "12")]),
            vec![("retry-after", "12".to_string())]
        );
        assert_eq!(
            merge_fields(&[("ratelimit", "\"a\";r=1;t=1")], &[("content-type", "x")]),
            vec![("ratelimit", "\"a\";r=1;t=1".to_string())]
        );
        assert!(is_gate_field(b"RateLimit-Policy") && !is_gate_field(b"content-type"));
    }
}
