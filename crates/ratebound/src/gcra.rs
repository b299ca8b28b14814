//! GCRA, the token bucket as pure integer math on nanoseconds: no atomics,
//! no clock. The state is the theoretical arrival time (TAT).
//!
//! With emission interval `T` and tolerance `τ = b·T`:
//! - tokens at `now` = `(now + τ − max(TAT, now)) / T`, capped at `b`;
//! - admitting `n`: `TAT' = max(TAT, now) + n·T`, allowed iff `TAT' − now ≤ τ`;
//! - a denial leaves TAT alone; `retry_after = TAT' − τ − now`.
//!
//! Bounds that keep every sum below 2^62 (the TAT field of the state word):
//! `now ≤ 2^61 − 1`, `τ ≤ 2^60`, and a stored TAT never exceeds [`MAX_TAT`].

use crate::Decision;

/// The largest TAT the state word can hold.
pub(crate) const MAX_TAT: u64 = (1 << 62) - 1;

/// A quota as the math needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    /// `T`, ns per token, ≥ 1.
    pub(crate) period: u64,
    /// `b`, ≥ 1, with `b·T ≤ 2^60`.
    pub(crate) burst: u64,
}

impl Params {
    #[inline]
    pub(crate) fn tau(self) -> u64 {
        self.period * self.burst
    }

    /// Whole tokens available at `now` for state `tat`.
    #[inline]
    pub(crate) fn available(self, tat: u64, now: u64) -> u64 {
        ((now + self.tau()).saturating_sub(tat.max(now)) / self.period).min(self.burst)
    }

    fn denial(self, base: u64, now: u64, next: u64) -> Decision {
        let tau = self.tau();
        Decision {
            allowed: false,
            limit: self.burst,
            remaining: self.available(base, now),
            // A denial means next − now > τ, so this is at least 1 ns.
            retry_after: next - tau - now,
            reset_after: base.saturating_sub(now),
        }
    }

    /// Decides on `n ≤ b` tokens at `now`: `Ok((decision, new_tat))` when
    /// admitted, `Err(denial)` when not (the state must stay as it is).
    #[inline]
    pub(crate) fn check(self, tat: u64, now: u64, n: u64) -> Result<(Decision, u64), Decision> {
        let tau = self.tau();
        let base = tat.max(now);
        if n == 0 {
            // A query: admitted, consumes nothing, writes nothing.
            let decision = Decision {
                allowed: true,
                limit: self.burst,
                remaining: self.available(tat, now),
                retry_after: 0,
                reset_after: base - now,
            };
            return Ok((decision, tat));
        }
        let next = base + n * self.period;
        if next - now <= tau {
            let decision = Decision {
                allowed: true,
                limit: self.burst,
                remaining: (now + tau - next) / self.period,
                retry_after: 0,
                reset_after: next - now,
            };
            Ok((decision, next))
        } else {
            Err(self.denial(base, now, next))
        }
    }

    /// Reserves `n ≤ b` tokens at `now`, possibly in the future:
    /// `Ok((wait, new_tat))`, or `Err(wait)` when the wait would exceed
    /// `max_wait` (or push TAT past [`MAX_TAT`]).
    #[inline]
    pub(crate) fn reserve(
        self,
        tat: u64,
        now: u64,
        n: u64,
        max_wait: u64,
    ) -> Result<(u64, u64), u64> {
        let base = tat.max(now);
        let next = base + n * self.period;
        let wait = (next - now).saturating_sub(self.tau());
        if wait > max_wait || next > MAX_TAT {
            Err(wait)
        } else {
            Ok((wait, next))
        }
    }

    /// The state after cancelling a reservation of `n` tokens that left TAT
    /// at `reserved_tat`: tokens come back except those that later takers
    /// (who moved TAT beyond `reserved_tat`) depend on.
    #[inline]
    pub(crate) fn cancel(self, tat: u64, reserved_tat: u64, n: u64) -> u64 {
        give_back(tat, reserved_tat, n, self.period)
    }

    /// The state under quota `to` that has the same number of tokens at
    /// `now` as `tat` has under `self`, capped at the new burst. Queued
    /// reservations (TAT beyond `now + τ`) keep their token debt.
    pub(crate) fn convert(self, tat: u64, now: u64, to: Params) -> u64 {
        let used = tat.max(now) - now;
        let scale = |span: u64, round_up: bool| -> u128 {
            let num = u128::from(span) * u128::from(to.period);
            let den = u128::from(self.period);
            if round_up {
                num.div_ceil(den)
            } else {
                num / den
            }
        };
        let (old_tau, new_tau) = (self.tau(), to.tau());
        let converted = if used <= old_tau {
            // Credit in time units, rescaled, rounded down (never more tokens).
            let credit = scale(old_tau - used, false).min(u128::from(new_tau));
            u128::from(now + new_tau) - credit
        } else {
            u128::from(now + new_tau) + scale(used - old_tau, true)
        };
        u64::try_from(converted).unwrap_or(MAX_TAT).min(MAX_TAT)
    }
}

/// A schedule `tat` after giving back `n` slots of `period` that a taker had
/// reserved up to `reserved`: everything past `reserved` belongs to later
/// takers and stays.
#[inline]
pub(crate) fn give_back(tat: u64, reserved: u64, n: u64, period: u64) -> u64 {
    let later = tat.saturating_sub(reserved);
    tat - (n * period).saturating_sub(later).min(tat)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn design_scenario_one_by_hand() {
        let p = Params {
            period: S / 2,
            burst: 3,
        };
        let mut tat = 0;
        for remaining in [2, 1, 0] {
            let (d, next) = p.check(tat, 0, 1).unwrap();
            assert_eq!(d.remaining, remaining);
            tat = next;
        }
        let denied = p.check(tat, 0, 1).unwrap_err();
        assert_eq!((denied.retry_after, denied.reset_after), (S / 2, 3 * S / 2));
        assert_eq!(p.check(tat, S / 4, 1).unwrap_err().retry_after, S / 4);
        assert!(p.check(tat, S / 2, 1).is_ok());
    }

    #[test]
    fn a_backwards_reading_never_adds_tokens() {
        let p = Params {
            period: 10,
            burst: 5,
        };
        let (_, tat) = p.check(0, 1_000, 3).unwrap();
        assert!(p.available(tat, 900) <= p.available(tat, 1_000));
        assert!(p.check(tat, 0, 5).is_err());
        assert_eq!(p.check(tat, 0, 0).unwrap().1, tat);
    }

    #[test]
    fn convert_keeps_whole_tokens_and_caps_at_the_new_burst() {
        let old = Params {
            period: 300,
            burst: 10,
        };
        let tat = 1_000 + 4 * 300 + 17; // 5 tokens and a bit at now = 1000
        assert_eq!(old.available(tat, 1_000), 5);
        for (period, burst, want) in [(7, 10, 5), (1_000, 8, 5), (300, 3, 3), (1, 100, 5)] {
            let to = Params { period, burst };
            assert_eq!(to.available(old.convert(tat, 1_000, to), 1_000), want);
        }
    }

    #[test]
    fn cancel_returns_only_what_later_takers_do_not_need() {
        let p = Params {
            period: 10,
            burst: 4,
        };
        let (_, reserved) = p.reserve(0, 0, 3, u64::MAX).unwrap();
        assert_eq!(p.cancel(reserved, reserved, 3), 0);
        let (_, later) = p.check(reserved, 0, 1).unwrap();
        assert_eq!(p.cancel(later, reserved, 3), 20);
    }
}
