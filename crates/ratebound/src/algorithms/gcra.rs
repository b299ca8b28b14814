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

    /// The new TAT if `n ≤ b` tokens are admitted at `now`, `None` if
    /// refused. `n = 0` is a query: admitted, and TAT stays as it is.
    #[inline]
    pub(crate) fn admit(self, tat: u64, now: u64, n: u64) -> Option<u64> {
        if n == 0 {
            return Some(tat);
        }
        let (taken, tau) = (n * self.period, self.tau());
        // `max(TAT, now) + n·T − now ≤ τ`, tested as `n·T ≤ τ` and
        // `now ≥ TAT + n·T − τ`: both bounds come from the state and the
        // quota alone, so a check's clock reading meets one comparison on
        // its way to the exchange.
        (taken <= tau && now >= (tat + taken).saturating_sub(tau)).then(|| tat.max(now) + taken)
    }

    /// The answer for `n` at `now`, decided on state `tat` (the state before
    /// the admission, if there was one).
    #[inline]
    pub(crate) fn decision(self, tat: u64, now: u64, n: u64, allowed: bool) -> Decision {
        let tau = self.tau();
        let base = tat.max(now);
        let next = base + n * self.period;
        let (after, retry_after) = if allowed {
            (next, 0)
        } else {
            // A refusal means next − now > τ, so this is at least 1 ns.
            (base, next - tau - now)
        };
        Decision::new(
            allowed,
            self.burst,
            (now + tau).saturating_sub(after),
            self.period,
            retry_after,
            after - now,
        )
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

    /// The state after a pause of `d` ns at `now`: empty until `now + d`,
    /// refilling at the rate from then on — `max(TAT, now + d + τ)`. A
    /// pause that ends no later than one already on changes nothing, and
    /// reservations already taken keep their place (the TAT only grows).
    /// A pause of 0 changes nothing (as in the Redis script, which ends no
    /// later than the present).
    #[inline]
    pub(crate) fn pause(self, tat: u64, now: u64, d: u64) -> u64 {
        if d == 0 {
            return tat;
        }
        tat.max(
            now.saturating_add(d)
                .saturating_add(self.tau())
                .min(MAX_TAT),
        )
    }

    /// The state after a pause that moves every slot due from `start` on
    /// `shift` ns later (see [`crate::pause`]): `max(TAT, start + τ) +
    /// shift` — empty until `start + shift`, the queue kept in its order.
    #[inline]
    pub(crate) fn shift(self, tat: u64, start: u64, shift: u64) -> u64 {
        tat.max(start.saturating_add(self.tau()))
            .saturating_add(shift)
            .min(MAX_TAT)
    }

    /// The state after a resume at `now` of a pause ending at `end`, if
    /// nothing was built on the pause (the state is exactly `end + τ`, what
    /// the pause left): `now + τ`, empty now and refilling from `now`.
    /// `None` otherwise — reservations stand behind the pause.
    #[inline]
    pub(crate) fn lift(self, tat: u64, end: u64, now: u64) -> Option<u64> {
        let tau = self.tau();
        (tat == end.saturating_add(tau).min(MAX_TAT) && now < end).then(|| now + tau)
    }

    /// [`cancel`](Self::cancel), never into a pause that is on (`end`):
    /// the state stays at least `end + τ` (empty until `end`), unless it
    /// was below that already.
    #[inline]
    pub(crate) fn cancel_paused(
        self,
        tat: u64,
        reserved_tat: u64,
        n: u64,
        end: Option<u64>,
    ) -> u64 {
        let back = self.cancel(tat, reserved_tat, n);
        match end {
            Some(end) => back.max(end.saturating_add(self.tau()).min(tat)),
            None => back,
        }
    }

    /// The state after cancelling a reservation of `n` tokens that left TAT
    /// at `reserved_tat`: its `n·T` come back only if nobody has built on
    /// them — TAT is still `reserved_tat` — and nothing otherwise (see
    /// [`give_back`]).
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

/// A schedule `tat` after giving back the `n` slots of `period` that a
/// taker reserved up to `reserved` (the TAT its taking left): all of them if
/// `tat` is still `reserved`, none otherwise.
///
/// Why exactly that. The slots `[end − n·T, end)` of the takings still held
/// never overlap and all end at or before TAT: a taking starts at
/// `max(TAT, now)`, and a pause moves the slots from its start on later, in
/// their order, and TAT with them. So when TAT is a taking's own end, its
/// slot is the last one — every other held slot lies before it — and TAT
/// may go back to where that slot began, `max(the TAT before it, the time it
/// was taken)`: the state is then exactly as if it had never been taken, and
/// the slots still never overlap. When TAT is anything else, somebody built
/// on it (a later taking, a pause) or it is gone already: moving TAT back
/// would hand out slots under ones still held, and the tokens are lost
/// instead. Cancels in the reverse order of their takings chain (each finds
/// its own end again once the later ones are back). A waiter whose slot a
/// pause moved compares with its moved end (`any::Waiter` moves its mark
/// with the shift), so the last of a moved queue still gives back. The
/// leaky bucket's departure schedule is the same word, under the same rule.
///
/// The bound follows. A taking of `n ≤ b` is due at `a = max(now, end − τ)`:
/// its slot ends by `a + τ` and starts at or after `a` (at `max(TAT, now)
/// ≥ now = a` when due at once, at `end − n·T ≥ end − τ = a` when due
/// later). So the slots of the tokens due in any window `[s, s + t]` lie
/// within `[s, s + t + τ]` without overlapping: at most `t/T + b` tokens,
/// `burst + rate·t`. Giving back whatever no later taker needs (x/time/
/// rate's `Reservation.Cancel`: `n` less the later takers' tokens) breaks
/// it with a single word: see the test
/// `cancels_in_the_middle_never_let_a_window_exceed_the_bound`.
#[inline]
pub(crate) fn give_back(tat: u64, reserved: u64, n: u64, period: u64) -> u64 {
    if tat == reserved {
        tat.saturating_sub(n.saturating_mul(period))
    } else {
        tat
    }
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
            let next = p.admit(tat, 0, 1).unwrap();
            assert_eq!(p.decision(tat, 0, 1, true).remaining(), remaining);
            tat = next;
        }
        assert_eq!(p.admit(tat, 0, 1), None);
        let denied = p.decision(tat, 0, 1, false);
        assert_eq!(
            (denied.retry_after_nanos(), denied.reset_after_nanos()),
            (S / 2, 3 * S / 2)
        );
        assert_eq!(p.decision(tat, S / 4, 1, false).retry_after_nanos(), S / 4);
        assert!(p.admit(tat, S / 2, 1).is_some());
    }

    #[test]
    fn a_backwards_reading_never_adds_tokens() {
        let p = Params {
            period: 10,
            burst: 5,
        };
        let tat = p.admit(0, 1_000, 3).unwrap();
        assert!(p.available(tat, 900) <= p.available(tat, 1_000));
        assert_eq!(p.admit(tat, 0, 5), None);
        assert_eq!(p.admit(tat, 0, 0), Some(tat));
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
    fn a_pause_empties_until_its_end_and_never_shortens_another() {
        let p = Params {
            period: 10,
            burst: 4,
        };
        let tat = p.pause(0, 100, 50);
        assert_eq!(tat, 190);
        assert_eq!(p.available(tat, 149), 0);
        assert_eq!(p.available(tat, 160), 1);
        assert_eq!(p.available(tat, 190), 4);
        // An earlier end changes nothing; a later one extends.
        assert_eq!(p.pause(tat, 100, 20), tat);
        assert_eq!(p.pause(tat, 100, 60), 200);
        // Queued debt beyond the pause stays.
        assert_eq!(p.pause(500, 100, 50), 500);
        assert_eq!(p.pause(0, 0, u64::MAX), MAX_TAT);
        assert_eq!(p.pause(0, 100, 0), 0);
    }

    #[test]
    fn cancel_returns_only_what_nobody_built_on() {
        let p = Params {
            period: 10,
            burst: 4,
        };
        let (_, reserved) = p.reserve(0, 0, 3, u64::MAX).unwrap();
        assert_eq!(p.cancel(reserved, reserved, 3), 0);
        // A later taking built on it: nothing comes back, not even the
        // two slots the later taking "does not need".
        let later = p.admit(reserved, 0, 1).unwrap();
        assert_eq!(p.cancel(later, reserved, 3), later);
        // Cancelled in the reverse order, both come back.
        let back = p.cancel(later, later, 1);
        assert_eq!(p.cancel(back, reserved, 3), 0);
    }

    /// Burst 3, T = 10, all at time 0: the bucket emptied, then A (3, due
    /// at 30), B (3, due at 60), C (1, due at 70); B is cancelled, then A.
    /// Giving back what "no later taker needs" (B: 2 slots, A: 1) would put
    /// a new taking of 3 due at 70 beside C: 4 tokens at one instant, above
    /// the burst. Built on, both are lost: the new one is due after C.
    #[test]
    fn cancels_in_the_middle_never_let_a_window_exceed_the_bound() {
        let p = Params {
            period: 10,
            burst: 3,
        };
        let mut tat = p.admit(0, 0, 3).unwrap();
        let mut take = |n| {
            let (due, mark) = p.reserve(tat, 0, n, u64::MAX).unwrap();
            tat = mark;
            (due, mark)
        };
        let (_, a) = take(3);
        let (_, b) = take(3);
        let (due_c, _) = take(1);
        assert_eq!(due_c, 70);
        let tat = p.cancel(p.cancel(tat, b, 3), a, 3);
        let (due_d, _) = p.reserve(tat, 0, 3, u64::MAX).unwrap();
        assert_eq!(due_d, 100);
    }
}
