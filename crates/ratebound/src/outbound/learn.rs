//! The learning rule: a fleet configured above a partner's real limit finds
//! that limit by itself — sans-I/O, one `u64` of shared state.
//!
//! The configured rate is a **ceiling**, not a promise. The fleet's shared
//! limiter runs at `ceiling × fraction`, where the fraction is [`Learned`]:
//! one word that the store keeping the limiter's state (an `AtomicU64`, a
//! shared-memory slot, a Redis field beside the bucket) holds and replaces
//! by compare-and-swap. Fresh state — nothing learned, the word 0 — is the
//! ceiling.
//!
//! - **Down on refusals.** A refusal (429, or 503) is evidence that the
//!   rate the request was sent under was too high: [`Learning::refused`]
//!   cuts the fraction multiplicatively (× [`DEFAULT_FACTOR`]), never below
//!   the floor.
//! - **Up when quiet.** An answer (a 2xx) arriving when the fraction last
//!   changed at least a probe period ago ([`DEFAULT_PROBE`]) raises it by
//!   one additive step ([`DEFAULT_STEP`] of the ceiling), never above the
//!   ceiling: [`Learning::answered`].
//! - **The quota a partner announces.** An answer telling what is left
//!   before its window resets (`RateLimit-Remaining` / `RateLimit-Reset`,
//!   `X-RateLimit-*`, the IETF `RateLimit` field) sets the fraction that
//!   spends no more than that before the reset, in place of the step up:
//!   [`Learning::announced`].
//!
//! **Fifty instances cut once.** Each transition is computed from the state
//! the instance *saw* when it sent (the word its acquisition read), and the
//! store applies it only by a compare-and-swap from that word. Fifty
//! instances hearing the same burst of 429s all propose the same cut from
//! the same `seen`; the first exchange wins, the others find the word
//! changed and drop their proposal — their evidence is about a rate that is
//! no longer in force. Every transition moves the change instant strictly
//! forward, so a word never comes back to bits an instance saw before (no
//! ABA). Besides, a refusal within [`DEFAULT_GAP`] after a *cut* is not
//! evidence against the new rate either: requests sent just after a cut
//! reach a partner whose own bucket the old rate emptied, and their 429s
//! would cut again a rate that was never tried (a cascade far below the
//! limit). After a step up there is no gap: the first refusal of the new
//! rate cuts it, before the next probe.
//!
//! # The constants, from the simulation
//!
//! `tests/learn_fleet.rs` runs a fleet of 50 instances in virtual time (a
//! discrete-event loop in milliseconds, round trips of 20–80 ms) sharing
//! one token bucket configured at 30/s burst 30, against a partner that
//! admits 10/s burst 20 and answers a bare 429 beyond. With the defaults —
//! cut × 0.7, floor 1/20, a step of 1/60 of the ceiling (0.5/s here) after
//! 500 ms without a change, a gap of 250 ms — the last 10 s of a 20 s run
//! see 1.9 % of what reached the partner refused (2 of 103) and 101 % of its
//! capacity served (its burst counts); without learning, 66.7 % are
//! refused. When the partner drops to 5/s and back to 10/s, the second
//! half of each phase sees at most 3.8 % refused, and the learned rate is
//! back at 8/s 2 s after the limit rose. Over 20 other round-trip
//! sequences, the worst were 3.0 % refused (98 % served) and 7.7 % in the
//! changing case. A multiplicative cut finds the partner's limit from any
//! ceiling in a few round trips (30/s → 10/s within the first second)
//! where cutting to a measured acceptance rate would need a fleet-wide
//! count of answers that one word has no room for. Of the cuts tried
//! (0.7, 0.8, 0.9), 0.7 refused least (a deeper trough lets the partner's
//! bucket refill, which absorbs the next overshoot) at no cost in goodput;
//! 0.9 refused 6.5 % against the 10/s partner and 13.8 % against the
//! 5/s one. A step of 1/60 every 500 ms climbs 1/s per second here: 5/s
//! back to 10/s in seconds; twice that refused 4–11 %, half of it took
//! 6 s to come back. The floor of 1/20 of the ceiling keeps a fleet that a
//! partner's outage (503s for 30 s) cut all the way down sending a trickle
//! (1.5/s here) that hears the partner come back; it was at 8/s again 8 s
//! after the partner was.
//!
//! # Examples
//! ```
//! use ratebound::Quota;
//! use ratebound::outbound::{Learned, Learning};
//! let learning = Learning::new(Quota::parse("30/s burst 30")?);
//! let fresh = Learned::from_bits(0);
//! assert!((learning.rate(fresh) - 30.0).abs() < 0.01);
//! // Fifty instances saw the fresh state and heard a 429: the same cut...
//! let cut = learning.refused(fresh, 1_000).unwrap();
//! assert_eq!(learning.refused(fresh, 1_000), Some(cut));
//! // ...applied once, by a compare-and-swap from `fresh`'s bits: the first
//! // exchange wins, the other 49 find other bits and drop theirs.
//! let mut store = fresh.to_bits();
//! let applied = (0..50).filter(|_| {
//!     let ok = store == fresh.to_bits();
//!     if ok { store = cut.to_bits(); }
//!     ok
//! });
//! assert_eq!(applied.count(), 1);
//! assert!((learning.rate(Learned::from_bits(store)) - 21.0).abs() < 0.01);
//! // Quiet for a probe period: one step up (0.5/s).
//! assert_eq!(learning.answered(cut, 1_200), None);
//! let up = learning.answered(cut, 1_500).unwrap();
//! assert!((learning.rate(up) - 21.5).abs() < 0.01);
//! # Ok::<(), ratebound::Error>(())
//! ```

use std::time::Duration;

use super::Announced;
use crate::{Error, Quota};

/// The fraction 1 (the ceiling) in [`Learned::fraction_units`].
pub const FULL: u32 = 1 << 16;

/// The latest instant a [`Learned`] holds, in ms: 2^44 − 1 (about 557
/// years); later instants count as this one.
pub const MAX_INSTANT_MS: u64 = (1 << 44) - 1;

/// The default floor: 1/20 of the ceiling.
pub const DEFAULT_FLOOR: f64 = 0.05;

/// The default cut on a refusal: × 0.7.
pub const DEFAULT_FACTOR: f64 = 0.7;

/// The default quiet time before a step up: 500 ms.
pub const DEFAULT_PROBE: Duration = Duration::from_millis(500);

/// The default step up: 1/60 of the ceiling.
pub const DEFAULT_STEP: f64 = 1.0 / 60.0;

/// The default time after a cut during which a refusal is not evidence
/// against the new rate: 250 ms.
pub const DEFAULT_GAP: Duration = Duration::from_millis(250);

/// An announced quota lowers the learned fraction when it calls for at
/// least 1/`ANNOUNCED_DOWN` (1/32, about 3 %) less: see
/// [`Learning::announced`].
pub const ANNOUNCED_DOWN: u32 = 32;

/// An announced quota raises the learned fraction when it allows at least
/// 1/`ANNOUNCED_UP` (1/8, 12.5 %) more, or the ceiling: see
/// [`Learning::announced`].
pub const ANNOUNCED_UP: u32 = 8;

const TIME_BITS: u32 = 44;
const CUT_BIT: u32 = 61;

/// What the fleet has learned: the fraction of the ceiling it runs at, the
/// instant that fraction last changed and whether that change was a cut,
/// packed in one `u64`.
///
/// Layout of [`to_bits`](Self::to_bits): bits 0–43 the instant of the last
/// change in ms on the clock every sharer uses (Redis `TIME`, the machine's
/// monotonic clock), at most [`MAX_INSTANT_MS`]; bits 44–60 the *cut*,
/// `FULL − fraction` with the fraction in 1/65536ths of the ceiling (so 0
/// is the ceiling); bit 61 set when the last change was a cut; bits 62–63
/// zero. The word 0 is fresh state: the ceiling, never changed. [`from_bits`](Self::from_bits) reads any word
/// (a damaged store's too) into these bounds.
///
/// A store applies a transition with one compare-and-swap from the bits
/// the instance saw to the proposal's bits; a failed exchange drops the
/// proposal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Learned {
    fraction: u32,
    changed_ms: u64,
    cut: bool,
}

impl Learned {
    /// A fraction of `fraction` 65536ths of the ceiling (at most [`FULL`])
    /// changed at `changed_ms` (at most [`MAX_INSTANT_MS`]).
    pub fn new(fraction: u32, changed_ms: u64) -> Learned {
        Learned {
            fraction: fraction.min(FULL),
            changed_ms: changed_ms.min(MAX_INSTANT_MS),
            cut: false,
        }
    }

    /// The same state, marked as left by a cut (`true`) or a step up.
    #[must_use]
    pub fn with_cut(mut self, cut: bool) -> Learned {
        self.cut = cut;
        self
    }

    /// The fresh state: the ceiling, nothing learned.
    pub fn fresh() -> Learned {
        Learned::from_bits(0)
    }

    /// The word a store keeps (see the layout above).
    pub fn to_bits(self) -> u64 {
        (u64::from(self.cut) << CUT_BIT)
            | (u64::from(FULL - self.fraction) << TIME_BITS)
            | self.changed_ms
    }

    /// Reads a stored word: bits 62–63 are ignored and a cut
    /// beyond [`FULL`] counts as a fraction of 0 (the floor, once a
    /// [`Learning`] reads it).
    pub fn from_bits(bits: u64) -> Learned {
        let cut = (bits >> TIME_BITS) & ((1 << 17) - 1);
        let fraction = u64::from(FULL).saturating_sub(cut);
        Learned {
            // At most FULL: fits.
            fraction: u32::try_from(fraction).unwrap_or(FULL),
            changed_ms: bits & MAX_INSTANT_MS,
            cut: (bits >> CUT_BIT) & 1 == 1,
        }
    }

    /// The fraction of the ceiling in 65536ths (before the floor).
    pub fn fraction_units(self) -> u32 {
        self.fraction
    }

    /// The instant of the last change, in ms (0: never changed).
    pub fn changed_ms(self) -> u64 {
        self.changed_ms
    }

    /// Whether the last change was a cut (a refusal's) rather than a step
    /// up.
    pub fn was_cut(self) -> bool {
        self.cut
    }

    /// Whether nothing was ever learned (the word 0).
    pub fn is_fresh(self) -> bool {
        self.to_bits() == 0
    }

    /// The change instant of a transition at `now`: strictly after the
    /// last one (so every transition changes the bits), saturated.
    /// The quota a store runs at under this word: `ceiling`'s rate and
    /// burst scaled by the fraction (at least 1/65536: a word the rule
    /// wrote is never below its floor), the interval rounded up so the
    /// quota never exceeds the learned rate, a burst of at least 1. A
    /// period past a quota's longest is the longest, and the burst is cut
    /// so that period × burst stays within it too: a valid quota, never the
    /// ceiling in its place. The one scaling every store applies (Redis'
    /// script does the same in µs).
    ///
    /// # Examples
    /// ```
    /// use ratebound::Quota;
    /// use ratebound::outbound::{FULL, Learned};
    /// let ceiling = Quota::parse("30/s burst 30")?;
    /// assert_eq!(Learned::fresh().scale(ceiling), ceiling);
    /// // A third (21845 65536ths): 9 tokens of burst, and never above a third
    /// // of the rate (the interval at least three times the ceiling's).
    /// let third = Learned::new(FULL / 3, 1).scale(ceiling);
    /// assert_eq!(third.burst(), 9);
    /// assert!(third.emission_interval_nanos() >= 3 * ceiling.emission_interval_nanos());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn scale(self, ceiling: Quota) -> Quota {
        let f = u128::from(self.fraction.clamp(1, FULL));
        if f == u128::from(FULL) {
            return ceiling;
        }
        let full = u128::from(FULL);
        let max = u128::from(crate::MAX_SPAN_NANOS);
        // f ≥ 1; period × 2^16 fits u128.
        let period = (u128::from(ceiling.emission_interval_nanos()) * full)
            .div_ceil(f)
            .clamp(1, max);
        let burst = (u128::from(ceiling.burst()) * f / full).clamp(1, max / period);
        // Both within 2^60 by the clamps.
        Quota::from_params(
            u64::try_from(period).unwrap_or(crate::MAX_SPAN_NANOS),
            u64::try_from(burst).unwrap_or(1),
        )
    }

    /// Whether this word is lower than `earlier` and newer (a cut came
    /// since, whatever steps up followed it): a slot taken under `earlier`
    /// — a waiter already in line — was priced at a rate since found too
    /// high. The call
    /// machine then waits again rather than send at the old pace (see
    /// [`Call::reserving`](super::Call::reserving)).
    pub fn cut_since(self, earlier: Learned) -> bool {
        self.changed_ms > earlier.changed_ms && self.fraction < earlier.fraction
    }

    fn next_instant(self, now_ms: u64) -> u64 {
        now_ms
            .max(self.changed_ms.saturating_add(1))
            .min(MAX_INSTANT_MS)
    }
}

/// The learning rule's parameters: the ceiling (the limiter's configured
/// quota), the floor, the cut, the probe period and step, and the gap after
/// a change (see the module's notes for the defaults and why).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Learning {
    ceiling: Quota,
    floor: u32,
    factor: u32,
    probe_ms: u64,
    step: u32,
    gap_ms: u64,
}

impl Learning {
    /// Learning under the ceiling `ceiling` (the limiter's configured
    /// quota), with the default floor, cut, probe and gap.
    pub fn new(ceiling: Quota) -> Learning {
        Learning {
            ceiling,
            floor: units(DEFAULT_FLOOR),
            factor: units(DEFAULT_FACTOR),
            probe_ms: millis(DEFAULT_PROBE),
            step: units(DEFAULT_STEP),
            gap_ms: millis(DEFAULT_GAP),
        }
    }

    /// Never below `floor` of the ceiling (default 1/20).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `floor` unless it is above 0 and at
    /// most 1 (a floor above the ceiling), or when it is under 1/65536.
    pub fn with_floor(mut self, floor: f64) -> Result<Learning, Error> {
        self.floor = fraction(
            "floor",
            floor,
            "must be above 0 and at most 1 (the ceiling)",
        )?;
        Ok(self)
    }

    /// Cuts the rate to `factor` of itself on a refusal (default 0.7).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `factor` unless it is strictly
    /// between 0 and 1.
    pub fn with_factor(mut self, factor: f64) -> Result<Learning, Error> {
        let reason = "must be strictly between 0 and 1 (a cut)";
        let f = fraction("factor", factor, reason)?;
        if f >= FULL {
            return Err(invalid("factor", factor, reason));
        }
        self.factor = f;
        Ok(self)
    }

    /// Steps up by `step` of the ceiling after `period` without a change
    /// (default 1/60 each 500 ms).
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `probe` for a period under 1 ms,
    /// over [`MAX_INSTANT_MS`] ms or shorter than the gap, `step` unless it is above 0 and at most 1.
    pub fn with_probe(mut self, period: Duration, step: f64) -> Result<Learning, Error> {
        let probe_ms = instant_span("probe", period)?;
        if probe_ms < self.gap_ms {
            return Err(Error::InvalidNumber {
                name: "probe",
                value: format!("{period:?}"),
                reason: "must be at least the gap (a rate would step up before its refusals counted)",
            });
        }
        self.probe_ms = probe_ms;
        self.step = fraction("step", step, "must be above 0 and at most 1 (the ceiling)")?;
        Ok(self)
    }

    /// Ignores refusals within `gap` after a cut (default 250 ms; 0:
    /// never). The gap is at most the probe period.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming `gap` when it is longer than the
    /// probe period (a rate would step up before its refusals counted).
    pub fn with_gap(mut self, gap: Duration) -> Result<Learning, Error> {
        let ms = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX);
        if ms > self.probe_ms {
            return Err(Error::InvalidNumber {
                name: "gap",
                value: format!("{gap:?}"),
                reason: "must be at most the probe period",
            });
        }
        self.gap_ms = ms;
        Ok(self)
    }

    /// The configured quota: the ceiling.
    pub fn ceiling(&self) -> Quota {
        self.ceiling
    }

    /// This rule under another ceiling (the limiter's quota was changed:
    /// `TokenBucket::set_quota`); the learned word, a fraction, then
    /// stands for that share of the new one.
    #[must_use]
    pub fn with_ceiling(mut self, ceiling: Quota) -> Learning {
        self.ceiling = ceiling;
        self
    }

    /// The floor, as a fraction of the ceiling (kept in 65536ths: the
    /// nearest one to the fraction given).
    pub fn floor(&self) -> f64 {
        f64::from(self.floor) / f64::from(FULL)
    }

    /// The cut after a refusal sent under `seen` (the state its sender
    /// read), at `now_ms`: `seen`'s fraction × the factor, at least the
    /// floor, changed at `now_ms`. `None` when there is nothing to cut
    /// (at the floor already) or the evidence is too early (within the gap
    /// after a cut: the partner's answers to the new rate are not all in;
    /// a step up has no gap, its refusals count at once). The store applies it by
    /// a compare-and-swap from `seen`: a failed exchange means someone cut
    /// already, and the proposal is dropped.
    pub fn refused(&self, seen: Learned, now_ms: u64) -> Option<Learned> {
        if seen.cut && now_ms.saturating_sub(seen.changed_ms) < self.gap_ms {
            return None;
        }
        let from = seen.fraction.max(self.floor);
        // Both at most FULL = 2^16: the product fits in u64 and the
        // quotient in u32.
        let cut = (u64::from(from) * u64::from(self.factor)) >> 16;
        let cut = u32::try_from(cut)
            .unwrap_or(FULL)
            .min(from.saturating_sub(1))
            .max(self.floor);
        (cut < seen.fraction).then(|| Learned::new(cut, seen.next_instant(now_ms)).with_cut(true))
    }

    /// The step up after an answer sent under `seen`, at `now_ms`: one step
    /// when `seen` last changed at least a probe period ago, never above
    /// the ceiling; `None` otherwise. Applied as [`refused`](Self::refused)'s
    /// cut is: one step per probe period for the whole fleet.
    pub fn answered(&self, seen: Learned, now_ms: u64) -> Option<Learned> {
        if seen.fraction >= FULL || now_ms.saturating_sub(seen.changed_ms) < self.probe_ms {
            return None;
        }
        let up = seen
            .fraction
            .max(self.floor)
            .saturating_add(self.step)
            .min(FULL);
        Some(Learned::new(up, seen.next_instant(now_ms)))
    }

    /// The fraction that follows the quota a partner `announced` on an
    /// answer sent under `seen`, at `now_ms`: for each window (R requests
    /// left, resetting in t seconds) the fraction f with
    /// `burst·f + rate·f·t ≤ R` — the ceiling's burst counts, since the
    /// fleet may spend its whole burst at once, and the rate for the rest
    /// of the window — the smallest over the windows, within
    /// [floor, 1]. A window with R = 0 proposes nothing: the answer's
    /// pause until its reset is the rule there (see [`pause_asked`](super::pause_asked)).
    ///
    /// Proposed only when it differs enough from `seen` to matter, so that
    /// answers do not each cost the store a compare-and-swap: down when it
    /// is at least 1/[`ANNOUNCED_DOWN`] (about 3 %) lower — what the fleet
    /// would overspend is then under 3 % of what is left, and the next
    /// answers keep correcting it as R and t shrink; up when it is at
    /// least 1/[`ANNOUNCED_UP`] (12.5 %) higher, or the ceiling. A fleet
    /// spending exactly at the pace it was given announces the same
    /// fraction again (R and t shrink together: `R = f·(burst + rate·t)`
    /// stays true), so steady answers cost no store call; what moves it is
    /// the partner's rounding of t to whole seconds (rounded up, as
    /// partners do, it only ever understates the pace: the wider upward
    /// threshold keeps that jitter from raising and lowering the word on
    /// alternate answers). A drop of 1/[`ANNOUNCED_UP`] or more is marked
    /// as a cut (the gap after a cut then keeps the refusals of what was
    /// already in flight from cutting again). Any drop, marked or not,
    /// makes the waiters in line whose slots were priced higher wait again
    /// ([`Learned::cut_since`]), and the stores drop the slots taken beyond
    /// an empty bucket (`TokenBucket::adapt`): the simulated fleet in line
    /// serves 287 of the 300 the three windows after the first allow, with
    /// no refusal.
    ///
    /// When a window resets, the next answers announce the new one — R
    /// back to the full count, t to the window's length — and the fraction
    /// goes back up by the same rule, at once. The quiet probe's step up
    /// does not run on an answer that announces a quota (a probe above
    /// what the partner announced would only draw its refusals): the
    /// adapters ask this rule instead ([`Call::answered`](super::Call::answered)).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use ratebound::Quota;
    /// use ratebound::outbound::{Announced, Learned, Learning};
    /// let learning = Learning::new(Quota::parse("30/s burst 30")?);
    /// // 99 left for 10 s: 99 / (30 + 30 × 10) = 0.3 of the ceiling, 9/s.
    /// let quota = Announced::new(99, Duration::from_secs(10)).unwrap();
    /// let next = learning.announced(Learned::fresh(), &quota, 1_000).unwrap();
    /// assert!((learning.rate(next) - 9.0).abs() < 0.01);
    /// // The same announcement again: nothing to change.
    /// assert_eq!(learning.announced(next, &quota, 1_100), None);
    /// // The window reset: 100 left for 10 s is too close to propose...
    /// let reset = Announced::new(100, Duration::from_secs(10)).unwrap();
    /// assert_eq!(learning.announced(next, &reset, 2_000), None);
    /// // ...a generous one goes back to the ceiling.
    /// let generous = Announced::new(5000, Duration::from_secs(10)).unwrap();
    /// assert!((learning.rate(learning.announced(next, &generous, 2_000).unwrap()) - 30.0).abs() < 0.01);
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn announced(&self, seen: Learned, announced: &Announced, now_ms: u64) -> Option<Learned> {
        // At least 1 (a quota's burst is): never a division by zero.
        let burst = self.ceiling.burst() as f64;
        let rate = self.ceiling.rate_per_second();
        let target = announced
            .windows()
            .iter()
            .filter(|(remaining, _)| *remaining > 0)
            .map(|&(remaining, reset)| remaining as f64 / (burst + rate * reset.as_secs_f64()))
            .fold(None, |low: Option<f64>, f| {
                Some(low.map_or(f, |l| l.min(f)))
            })?;
        // Finite and ≥ 0 (a finite count over at least 1): in units,
        // rounded down (never above the quota), within [floor, FULL].
        let units = if target >= 1.0 {
            FULL
        } else {
            (target * f64::from(FULL)).floor() as u32
        }
        .clamp(self.floor, FULL);
        let from = seen.fraction.clamp(self.floor, FULL);
        let up = from.div_ceil(ANNOUNCED_UP);
        let matters = if units < from {
            from - units >= from.div_ceil(ANNOUNCED_DOWN)
        } else {
            units > from && (units == FULL || units - from >= up)
        };
        // A large drop is a cut: the waiters in line wait again at the new
        // pace. A small one is not (each wait given up leaves a silence of
        // a queue's length: a cut for the partner's rounding would cost
        // more than the few requests it saves).
        let cut = units < from && from - units >= up;
        matters.then(|| Learned::new(units, seen.next_instant(now_ms)).with_cut(cut))
    }

    /// The fraction of the ceiling `learned` stands for, within [floor, 1].
    pub fn fraction(&self, learned: Learned) -> f64 {
        f64::from(learned.fraction.clamp(self.floor, FULL)) / f64::from(FULL)
    }

    /// The learned rate in tokens per second (for a gauge).
    pub fn rate(&self, learned: Learned) -> f64 {
        self.ceiling.rate_per_second() * self.fraction(learned)
    }

    /// The quota the shared limiter runs at: the ceiling's rate and burst
    /// scaled by [`fraction`](Self::fraction) (a burst of at least 1; the
    /// interval rounded up, so never above the learned rate).
    pub fn quota(&self, learned: Learned) -> Quota {
        let f = learned.fraction.clamp(self.floor, FULL);
        Learned::new(f, learned.changed_ms).scale(self.ceiling)
    }
}

fn units(f: f64) -> u32 {
    // f in (0, 1]: at most FULL.
    (f * f64::from(FULL)).round() as u32
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn invalid(name: &'static str, value: f64, reason: &'static str) -> Error {
    Error::InvalidNumber {
        name,
        value: crate::error::show(value),
        reason,
    }
}

/// A fraction in (0, 1] as 65536ths (at least 1).
fn fraction(name: &'static str, value: f64, reason: &'static str) -> Result<u32, Error> {
    if !(value > 0.0 && value <= 1.0) {
        return Err(invalid(name, value, reason));
    }
    let u = units(value);
    if u == 0 {
        return Err(invalid(name, value, "must be at least 1/65536"));
    }
    Ok(u)
}

fn instant_span(name: &'static str, d: Duration) -> Result<u64, Error> {
    let ms = millis(d);
    if ms == 0 || ms > MAX_INSTANT_MS {
        return Err(Error::InvalidNumber {
            name,
            value: format!("{d:?}"),
            reason: "must be at least 1 ms and at most 2^44 − 1 ms",
        });
    }
    Ok(ms)
}
