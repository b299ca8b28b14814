//! The adaptive concurrency limit: its tuning ([`AdaptiveConcurrency`]),
//! request priorities ([`Priority`]) and the controller that moves the
//! limit from the latencies of the requests it let in.
//!
//! The controller is a gradient on latency, chosen over Vegas and over a
//! minimum-RTT baseline by the measurements in ratebound-http's README:
//! each window of samples compares its mean latency with a baseline and
//! moves the limit toward `limit · max(½, tolerance · baseline / mean)`
//! when the mean is beyond the tolerance, or `limit + √limit` when it is
//! within it and the limit is in use, smoothed. Where the baseline comes from is what keeps it
//! honest (Gradient2's long-term average drifts up under a sustained
//! overload, and a minimum sample is wrong for a service whose requests
//! differ):
//! - the baseline is the mean latency of requests that entered **alone**
//!   (nothing else in flight): they queued behind nothing of this
//!   process, whatever the load, and they are a fair sample of the mix of
//!   requests; an overload that never lets a request in alone leaves the
//!   baseline where it was;
//! - when a cut of the limit lost throughput, the latency is not queueing
//!   but a slower service: the baseline is re-learned from it. By Little's
//!   law a full limit serves `limit / latency`: cutting a queue shortens
//!   the latency in proportion and keeps that rate, cutting below the
//!   service's own concurrency leaves the latency and loses rate. So the
//!   first cut that lost more than `LOST` (15 %) of the rate of the
//!   lowest limit that kept it (one step below the knee; judged on the
//!   window after the cut's own, whose first requests entered under the
//!   limit before) re-learns the baseline and puts the limit back at that
//!   lowest limit — instead of waiting for a cut by a third below the
//!   knee, which at ~10 % a window near a small limit kept a slower
//!   service shed at 2–3 for seconds;
//! - a baseline that no request alone confirms decays toward the lowest
//!   baseline of the last 64–128 windows (a windowed minimum): after a
//!   slowdown ends under an overload (nothing enters alone, so nothing else
//!   would bring it down) it returns to the fast latency within tens of
//!   windows, and a slowdown that lasts is re-learned again by the rule
//!   above each time the decay probes below it, until the minimum forgets
//!   the fast latency.
//!
//! Lock-free: a sample is one compare-exchange on the window's word (two
//! for a request that entered alone); the one release that fills a window
//! runs the controller (a flag, taken without waiting, keeps it to one
//! thread at a time; a window that finds it taken goes back into the next
//! one, so no sample is lost).

use crate::Error;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// How urgent a request is, for load shedding: when the concurrency limit
/// is reached, [`Background`](Priority::Background) work is shed first and
/// [`Critical`](Priority::Critical) never.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Never shed: a health check, a payment. It takes a place when one
    /// is free and goes on without one when none is.
    Critical,
    /// Admitted up to the limit (the default).
    #[default]
    Normal,
    /// Admitted only while fewer than a fraction of the limit are in
    /// flight (`background_fraction`, default ½): shed first when load
    /// rises, back first when it falls.
    Background,
}

impl Priority {
    /// By name: `"critical"`, `"normal"` or `"background"`.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming any other value.
    ///
    /// # Examples
    /// ```
    /// use ratebound::http::Priority;
    /// assert_eq!(Priority::parse("background")?, Priority::Background);
    /// assert_eq!(Priority::parse("urgent").unwrap_err().to_string(),
    ///            "invalid priority \"urgent\": is \"critical\", \"normal\" or \"background\"");
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn parse(name: &str) -> Result<Priority, Error> {
        match name {
            "critical" => Ok(Priority::Critical),
            "normal" => Ok(Priority::Normal),
            "background" => Ok(Priority::Background),
            other => Err(Error::InvalidOption {
                name: "priority",
                value: other.to_string(),
                reason: "is \"critical\", \"normal\" or \"background\"",
            }),
        }
    }

    /// `"critical"`, `"normal"` or `"background"`: the same words in every
    /// front door.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Normal => "normal",
            Priority::Background => "background",
        }
    }
}

/// The tuning of an adaptive concurrency limit. [`Default`] works with no
/// tuning: start at 20 in flight, stay within 2–1000, call a window
/// congested when its mean latency exceeds 1.5× the baseline.
///
/// # Examples
/// ```
/// use ratebound::http::AdaptiveConcurrency;
/// let tuned = AdaptiveConcurrency { max_limit: 200, ..AdaptiveConcurrency::default() };
/// tuned.check()?;
/// let bad = AdaptiveConcurrency { tolerance: f64::NAN, ..AdaptiveConcurrency::default() };
/// assert_eq!(bad.check().unwrap_err().to_string(),
///            "invalid concurrency tolerance NaN: must be a finite number of at least 1");
/// # Ok::<(), ratebound::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveConcurrency {
    /// The limit before anything is measured (default 20).
    pub initial_limit: usize,
    /// The limit never goes below this (default 2).
    pub min_limit: usize,
    /// Nor above this (default 1000).
    pub max_limit: usize,
    /// How much slower than the baseline a window's mean latency may be
    /// before the limit is cut (default 1.5; at least 1).
    pub tolerance: f64,
    /// How far each window moves the limit toward its target, in (0, 1]
    /// (default 0.2).
    pub smoothing: f64,
}

impl Default for AdaptiveConcurrency {
    fn default() -> Self {
        AdaptiveConcurrency {
            initial_limit: 20,
            min_limit: 2,
            max_limit: 1000,
            tolerance: 1.5,
            smoothing: 0.2,
        }
    }
}

impl AdaptiveConcurrency {
    /// Checks the tuning.
    ///
    /// # Errors
    /// [`Error::InvalidNumber`] naming the bad value: a limit of 0, a
    /// minimum above the maximum, an initial limit outside them, a
    /// tolerance below 1 or not finite, a smoothing outside (0, 1].
    pub fn check(&self) -> Result<(), Error> {
        let bad = |name, value: String, reason| {
            Err(Error::InvalidNumber {
                name,
                value,
                reason,
            })
        };
        if self.min_limit == 0 {
            return bad("concurrency min_limit", "0".into(), "must be at least 1");
        }
        if self.max_limit < self.min_limit {
            return bad(
                "concurrency max_limit",
                self.max_limit.to_string(),
                "must be at least min_limit",
            );
        }
        if !(self.min_limit..=self.max_limit).contains(&self.initial_limit) {
            return bad(
                "concurrency initial_limit",
                self.initial_limit.to_string(),
                "must lie within min_limit..=max_limit",
            );
        }
        if !(self.tolerance.is_finite() && self.tolerance >= 1.0) {
            return bad(
                "concurrency tolerance",
                crate::error::show(self.tolerance),
                "must be a finite number of at least 1",
            );
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return bad(
                "concurrency smoothing",
                crate::error::show(self.smoothing),
                "must be more than 0 and at most 1",
            );
        }
        Ok(())
    }
}

/// What an adaptive limit knows now, for metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveState {
    /// The limit in force.
    pub limit: usize,
    /// The baseline latency (µs): learned from requests that entered alone
    /// (or re-learned from a slower service), decaying toward the lowest
    /// recent one while nothing confirms it; 0 before the first window.
    pub baseline_us: f64,
    /// The last window's mean latency (µs).
    pub recent_us: f64,
    /// Windows measured so far.
    pub windows: u64,
    /// Requests timed so far: those of the windows measured and of the
    /// one being filled.
    pub samples: u64,
}

/// Samples per window, at least (and at most [`WINDOW_MAX`]): a window
/// holds `limit` samples within these bounds. (Two under loom, so that a
/// model closes windows in a few steps.)
#[cfg(not(ratebound_loom))]
const WINDOW_MIN: u64 = 16;
#[cfg(ratebound_loom)]
const WINDOW_MIN: u64 = 2;
const WINDOW_MAX: u64 = 256;
/// The window word: the count in the top 16 bits, the sum of µs below.
const COUNT_SHIFT: u32 = 48;
const SUM_MASK: u64 = (1 << COUNT_SHIFT) - 1;
/// A sample is at most this many µs (~71 minutes): 256 of them fit the sum.
const SAMPLE_MAX_US: u64 = (1 << 32) - 1;
/// Windows congested at the minimum limit before its latency is taken as
/// the service's own.
const STALE_AT_MIN: u64 = 4;
/// Windows per epoch of the baseline's floor: the floor is the lowest
/// baseline of the current epoch and the one before (a minimum over the
/// last 64–128 windows).
const FLOOR_EPOCH: u64 = 64;
/// How far a window with no request alone moves the baseline toward the
/// floor.
const DECAY: f64 = 0.1;
/// A cut that lost more than this share of the rate (`limit / latency`)
/// was in vain: the latency is the service's own.
const LOST: f64 = 0.15;
/// A window this much slower than the reference is judged afresh (the
/// service slowed, or a queue is still growing): a cut is in vain only if
/// the latency did not rise.
const RISE: f64 = 0.05;
/// A cut that kept at least this share of the rate shortened a queue: the
/// next cut is judged from it.
const KEPT: f64 = 0.95;

/// The controller of an adaptive limit; see the module's notes.
#[derive(Debug)]
pub(crate) struct Controller {
    config: AdaptiveConcurrency,
    /// Samples of the window being filled: count << 48 | sum of µs.
    window: AtomicU64,
    /// The same, of the requests that entered alone, since the last update.
    alone: AtomicU64,
    /// 1 while a thread runs [`Controller::update`].
    busy: AtomicUsize,
    // Read and written only by the holder of `busy` (Relaxed, ordered by
    // its Acquire/Release), except for the metrics' Relaxed loads.
    /// The limit as a real number (f64 bits).
    estimate: AtomicU64,
    /// The baseline mean latency in µs (f64 bits; 0: none yet).
    baseline: AtomicU64,
    /// The last window's mean (f64 bits).
    recent: AtomicU64,
    /// While congested: the lowest limit in force that kept the rate and
    /// its mean (f64 bits), which the next cuts are compared with to tell
    /// queueing from a slower service (0: none).
    ref_limit: AtomicU64,
    ref_mean: AtomicU64,
    /// The limit in force during the last window (f64 bits).
    last_held: AtomicU64,
    /// Congested windows in a row at the minimum limit.
    at_min: AtomicU64,
    /// The lowest baseline of this epoch and of the one before (f64 bits;
    /// 0: none).
    floor: AtomicU64,
    floor_before: AtomicU64,
    windows: AtomicU64,
    /// Samples of the windows measured.
    measured: AtomicU64,
    /// Whether a request was refused at the limit since the last update:
    /// the limit was in use during the window, whatever is in flight when
    /// the window closes.
    reached: AtomicUsize,
}

fn load_f(a: &AtomicU64) -> f64 {
    f64::from_bits(a.load(Ordering::Relaxed))
}

fn store_f(a: &AtomicU64, v: f64) {
    a.store(v.to_bits(), Ordering::Relaxed);
}

impl Controller {
    pub(crate) fn new(config: AdaptiveConcurrency) -> Controller {
        Controller {
            config,
            window: AtomicU64::new(0),
            alone: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            estimate: AtomicU64::new((config.initial_limit as f64).to_bits()),
            baseline: AtomicU64::new(0),
            recent: AtomicU64::new(0),
            ref_limit: AtomicU64::new(0),
            ref_mean: AtomicU64::new(0),
            last_held: AtomicU64::new(0),
            at_min: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            floor_before: AtomicU64::new(0),
            windows: AtomicU64::new(0),
            measured: AtomicU64::new(0),
            reached: AtomicUsize::new(0),
        }
    }

    /// A request was refused at the limit: the window being filled used the
    /// whole limit (so a limit at the baseline latency may rise).
    #[inline]
    pub(crate) fn refused_at_limit(&self) {
        // Ordering: Relaxed — a hint for the next update, which reads it
        // with a swap; a write only when it changes, so refusals under
        // overload do not all write one line.
        if self.reached.load(Ordering::Relaxed) == 0 {
            self.reached.store(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn config(&self) -> &AdaptiveConcurrency {
        &self.config
    }

    /// Adds one request's latency (µs) — `alone` when nothing else was in
    /// flight as it entered; returns the new limit when this sample closed a
    /// window and the controller moved it.
    #[inline]
    pub(crate) fn sample(
        &self,
        micros: u64,
        alone: bool,
        limit: usize,
        in_flight: usize,
    ) -> Option<usize> {
        let one = (1u64 << COUNT_SHIFT) | micros.clamp(1, SAMPLE_MAX_US);
        if alone {
            // Ordering: Relaxed, as the window. Saturates rather than
            // carries into nothing: at most one window's worth is kept.
            let _ = self
                .alone
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                    ((w >> COUNT_SHIFT) < WINDOW_MAX).then_some(w + one)
                });
        }
        let size = (limit as u64).clamp(WINDOW_MIN, WINDOW_MAX);
        // Ordering: Relaxed — the window's samples are plain numbers; the
        // closer reads the word it swapped out, nothing else depends on it.
        let mut taken = 0;
        let _always = self
            .window
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                let count = (w >> COUNT_SHIFT) + 1;
                if count >= size {
                    taken = w + one;
                    Some(0)
                } else {
                    taken = 0;
                    Some(w + one)
                }
            });
        if taken == 0 {
            return None;
        }
        // Ordering: Acquire pairs with the previous holder's Release: its
        // writes to the controller's state are seen here.
        if self
            .busy
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Another thread is updating: these samples join the next window.
            self.window.fetch_add(taken, Ordering::Relaxed);
            return None;
        }
        let count = taken >> COUNT_SHIFT;
        self.measured.fetch_add(count, Ordering::Relaxed);
        let mean = (taken & SUM_MASK) as f64 / count as f64;
        let limit = self.update(mean, in_flight);
        // Ordering: Release — the state written above is seen by the next
        // holder.
        self.busy.store(0, Ordering::Release);
        Some(limit)
    }

    /// One window's mean latency (µs) moves the limit; `in_flight` is the
    /// requests in flight now (a limit nobody uses is not raised).
    fn update(&self, mean: f64, in_flight: usize) -> usize {
        let c = &self.config;
        let (min, max) = (c.min_limit as f64, c.max_limit as f64);
        let limit = load_f(&self.estimate);
        // Ordering: Relaxed — see `refused_at_limit`.
        let reached = self.reached.swap(0, Ordering::Relaxed) == 1;
        let windows = self.windows.fetch_add(1, Ordering::Relaxed) + 1;
        self.age_floor(windows);
        store_f(&self.recent, mean);
        let mut baseline = load_f(&self.baseline);
        let alone = self.alone.swap(0, Ordering::Relaxed);
        let count = alone >> COUNT_SHIFT;
        if count > 0 {
            let alone_mean = (alone & SUM_MASK) as f64 / count as f64;
            baseline = if baseline <= 0.0 {
                alone_mean
            } else {
                let weight = count as f64 / (count as f64 + 8.0);
                baseline + (alone_mean - baseline) * weight
            };
            store_f(&self.baseline, baseline);
            self.learned(baseline);
        } else if baseline > 0.0 {
            // Nothing confirmed the baseline: it decays toward the floor
            // (a slowdown that ended is forgotten; one that lasts is
            // re-learned below when the decay cuts the limit in vain — and
            // once the floor has forgotten the faster latency, a baseline
            // caught below it in a decay goes back up to it).
            let floor = self.floor();
            if floor > 0.0 && baseline != floor {
                baseline -= (baseline - floor) * DECAY;
                store_f(&self.baseline, baseline);
            }
        }
        if baseline <= 0.0 {
            // Nothing entered alone yet: the first window is the baseline.
            store_f(&self.baseline, mean);
            self.learned(mean);
            return limit.round() as usize;
        }
        let congested = mean > c.tolerance * baseline;
        let mut limit = limit;
        let last_held = load_f(&self.last_held);
        store_f(&self.last_held, limit.round());
        if congested {
            let at_min = if limit <= min {
                self.at_min.fetch_add(1, Ordering::Relaxed) + 1
            } else {
                self.at_min.store(0, Ordering::Relaxed);
                0
            };
            // The limit in force during the window and the one before
            // (the window's first requests entered under that one: a cut
            // is judged once its window is all behind it), and what it
            // served if full (Little's law).
            let held = limit.round().max(last_held);
            let rate = held / mean;
            let (ref_limit, ref_mean) = (load_f(&self.ref_limit), load_f(&self.ref_mean));
            let referenced = ref_limit > 0.0;
            let ref_rate = ref_limit / ref_mean;
            let worse = referenced && mean > (1.0 + RISE) * ref_mean;
            let cut = referenced && held < ref_limit;
            let cut_in_vain = cut && !worse && rate < (1.0 - LOST) * ref_rate;
            if cut_in_vain || at_min >= STALE_AT_MIN {
                // Fewer requests in flight and no faster (or the fewest
                // allowed, for a while): the latency is the service's own,
                // not a queue's; the limit goes back to the lowest that
                // kept the rate.
                baseline = mean;
                store_f(&self.baseline, baseline);
                self.learned(baseline);
                if cut_in_vain {
                    limit = limit.max(ref_limit);
                }
                store_f(&self.ref_limit, 0.0);
                self.at_min.store(0, Ordering::Relaxed);
            } else if !referenced || worse || (!cut && rate < ref_rate) {
                // The first congested window, or a slower one (the service
                // slowed, or a queue is still growing): the next cut is
                // judged against this one.
                store_f(&self.ref_limit, held);
                store_f(&self.ref_mean, mean);
            } else if cut && rate >= KEPT * ref_rate {
                // A cut that kept the rate shortened a queue: the next cut
                // is judged from this limit, at the lower of the two rates
                // (a lucky window does not raise the bar).
                store_f(&self.ref_limit, held);
                store_f(&self.ref_mean, mean.max(held / ref_rate));
            }
        } else {
            store_f(&self.ref_limit, 0.0);
            self.at_min.store(0, Ordering::Relaxed);
        }
        // Within the tolerance the limit probes upward by √limit (when it
        // is in use: a limit nobody reaches is not raised — in use means a
        // request was refused at it during the window, or half of it is in
        // flight as the window closes); beyond it, it is cut in
        // proportion, by half at most.
        let gradient = (c.tolerance * baseline / mean).clamp(0.5, 1.0);
        let target = if gradient < 1.0 {
            limit * gradient
        } else if !reached && (in_flight as f64) < limit / 2.0 {
            limit
        } else {
            limit + limit.sqrt()
        };
        let next = (limit + (target - limit) * c.smoothing).clamp(min, max);
        store_f(&self.estimate, next);
        next.round() as usize
    }

    /// The floor the baseline decays toward: the lowest of the two epochs'
    /// (0: none).
    fn floor(&self) -> f64 {
        let (now, before) = (load_f(&self.floor), load_f(&self.floor_before));
        if before > 0.0 && (now <= 0.0 || before < now) {
            before
        } else {
            now
        }
    }

    /// Starts a new epoch of the floor every [`FLOOR_EPOCH`] windows: the
    /// one that ends becomes the one before.
    fn age_floor(&self, windows: u64) {
        if windows.is_multiple_of(FLOOR_EPOCH) {
            store_f(&self.floor_before, load_f(&self.floor));
            store_f(&self.floor, 0.0);
        }
    }

    /// A baseline learned (from requests alone, or re-learned): the floor
    /// is the lowest of these, never a decayed one (a decay would
    /// otherwise keep its own target alive).
    fn learned(&self, baseline: f64) {
        let now = load_f(&self.floor);
        if now <= 0.0 || baseline < now {
            store_f(&self.floor, baseline);
        }
    }

    pub(crate) fn state(&self, limit: usize) -> AdaptiveState {
        AdaptiveState {
            limit,
            baseline_us: load_f(&self.baseline),
            recent_us: load_f(&self.recent),
            windows: self.windows.load(Ordering::Relaxed),
            samples: self.measured.load(Ordering::Relaxed)
                + (self.window.load(Ordering::Relaxed) >> COUNT_SHIFT),
        }
    }
}
