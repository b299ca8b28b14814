//! `Quota::parse` over arbitrary text.

use ratebound::{MAX_SPAN_NANOS, Quota};

/// Parses `data` (when it is UTF-8) as a quota. A quota that parses has a
/// period of at least 1 ns and a burst of at least 1 within
/// [`MAX_SPAN_NANOS`], and its `Display` form parses back to it.
pub fn quota_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let q = match Quota::parse(text) {
        Ok(q) => q,
        Err(e) => {
            // A typed error whose message is not empty.
            assert!(!e.to_string().is_empty(), "{text:?}: an empty message");
            return;
        }
    };
    assert!(q.emission_interval_nanos() >= 1, "{text:?}: {q:?}");
    assert!(q.burst() >= 1, "{text:?}: {q:?}");
    assert!(
        u128::from(q.emission_interval_nanos()) * u128::from(q.burst())
            <= u128::from(MAX_SPAN_NANOS),
        "{text:?}: {q:?} spans more than MAX_SPAN_NANOS"
    );
    let shown = q.to_string();
    match Quota::parse(&shown) {
        Ok(back) => assert_eq!(back, q, "{text:?} shown as {shown:?}"),
        Err(e) => panic!("{text:?} parsed to {q:?}, shown as {shown:?}, which fails: {e}"),
    }
}
