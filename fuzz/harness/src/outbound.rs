//! The outbound reader of `Retry-After`, `RateLimit` and the `X-RateLimit-*`
//! fields (what a client obeys), over arbitrary header lines.

use std::time::Duration;

use ratebound::outbound::{
    Outbound, http_date, parse_ratelimit_field, parse_retry_after, pause_asked,
};

use crate::Input;

/// No reading asks for more than 10¹² s (12 digits, or a date that far).
const LONGEST: Duration = Duration::from_secs(1_000_000_000_000);

/// Header lines from the input (names from the fields read, in any case,
/// and one other), read at a time from the input; the pause asked is at
/// most [`LONGEST`], and an `Outbound`'s advice never pauses past its cap.
pub fn outbound(data: &[u8]) {
    let mut input = Input::new(data);
    let names = [
        "retry-after",
        "Retry-After",
        "ratelimit",
        "RateLimit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-remaining",
        "X-RateLimit-Reset",
        "x-other",
    ];
    let now = match input.byte() % 4 {
        0 => 1_733_047_200.0,
        1 => f64::from(input.u32()),
        2 => f64::from_bits(input.u64()),
        _ => 0.0,
    };
    let mut lines: Vec<(&str, &str)> = Vec::new();
    for _ in 0..input.below(6) {
        let name = input.pick(&names);
        lines.push((name, input.text(64)));
    }
    if !input.is_empty() {
        // The rest as one more value, for long ones.
        let rest = input.rest();
        let text = std::str::from_utf8(rest).unwrap_or("");
        lines.push((names[usize::from(rest[0]) % names.len()], text));
    }
    for (_, v) in &lines {
        for d in [parse_retry_after(v, now), parse_ratelimit_field(v)]
            .into_iter()
            .flatten()
        {
            assert!(d <= LONGEST, "{v:?} asks {d:?}");
        }
        if let Some(t) = http_date(v) {
            // Years 0-9999 at most.
            assert!(t <= 253_402_300_800, "{v:?} is at {t}");
        }
    }
    if let Some(d) = pause_asked(lines.iter().copied(), now) {
        assert!(d <= LONGEST, "{lines:?} asks {d:?}");
    }
    let cap = Duration::from_secs(60);
    let o = Outbound::new().with_max_pause(cap).expect("a cap of 60 s");
    let advice = o.advise("GET", 429, lines.iter().copied(), 0, now);
    if let Some(p) = advice.pause {
        assert!(p <= cap && !p.is_zero(), "{lines:?}: {advice:?}");
    }
}
