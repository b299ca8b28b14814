//! The request sequence, once for every front door: exempt → a place among
//! the requests in flight → critical → shed → the key → decide (with the
//! remote policies' answers) → report — and the place held by a guard
//! ([`Place`]) until the response is done.

use std::sync::Arc;

use crate::any::Key;
use crate::fingerprint::Fingerprint;
use crate::http::{ConcurrencyCap, Headers, PlaceWait, Priority};

use super::{Gate, KeySource, RemoteAnswer, Request, Verdict};

/// What a front door's user configured around the decision: the functions
/// of the framework's request that [`Gate::admit`] asks, in its order. Each
/// has the default of a middleware without it.
pub trait Hooks {
    /// Whether the request bypasses limiting altogether (a health check):
    /// asked first; an exempt request takes no place and is not reported.
    fn exempt(&mut self) -> bool {
        false
    }

    /// Whether the request goes on even when every place is taken (it then
    /// holds none): asked only when the concurrency cap is full (a
    /// shortcut for a [`priority`](Self::priority) of critical).
    fn critical(&mut self) -> bool {
        false
    }

    /// The request's priority under the concurrency cap: asked only once
    /// the requests in flight reach the background share of the limit
    /// (below it every request is admitted alike), at most once. `None` —
    /// the priority function failed (it raised, or answered what is no
    /// priority) — is the fail-safe answer: the request is shed as a
    /// background one (503 with `Retry-After`, reported), never a server
    /// error; the front door logs the hook's error. A front door reads a
    /// function answering nothing (`None`, `undefined`) as normal.
    fn priority(&mut self) -> Option<Priority> {
        Some(Priority::Normal)
    }

    /// The application's key ([`KeySource::Given`]), given to `f`: asked
    /// at most once, after shedding, and only when the gate's key is given
    /// and the [`Request`] carries none; `f(None)` (the default) is no key.
    /// Returning `None` without calling `f` — the key function failed —
    /// stops the sequence: [`Admit::Stopped`], nothing charged or reported.
    fn with_key<R>(&mut self, f: impl FnOnce(Option<Key<'_>>) -> R) -> Option<R> {
        Some(f(None))
    }

    /// Told the verdict of every request that was not exempt, once (a
    /// metrics hook): shed, refused, rejected or allowed.
    fn report(&mut self, verdict: &Verdict<'_>) {
        let _ = verdict;
    }
}

/// No hooks: nothing exempt, nothing critical, no given key, no report.
impl Hooks for () {}

/// A place among the requests in flight under the gate's concurrency cap,
/// given back when dropped (or [`release`](Self::release)d): hold it until
/// the response has been sent — a streaming body is in flight until it
/// ends. `Send`, `'static`: it may move into a response body.
///
/// Under an adaptive limit the place also times the request: its latency
/// is taken at [`responded`](Self::responded) (the response's head is
/// ready: a long stream does not count as a slow service) or, failing
/// that, when the place is given back.
#[derive(Debug)]
#[must_use = "the place is given back as soon as it is dropped"]
pub struct Place {
    cap: Arc<ConcurrencyCap>,
    /// The clock reading at entry; [`UNTIMED`] once recorded, or for a
    /// place whose latency must not count.
    start: u64,
    /// How many were in flight as it entered.
    before: usize,
}

const UNTIMED: u64 = u64::MAX;

impl Place {
    /// A place in `cap` for a request of `priority` (asked lazily), entered
    /// at `start`; `Err` carries the priority of a request refused one.
    #[inline]
    fn take(
        cap: &Arc<ConcurrencyCap>,
        start: u64,
        priority: impl FnOnce() -> Priority,
    ) -> Result<Place, Priority> {
        let before = cap.try_enter_as(priority)?;
        let start = if cap.is_adaptive() { start } else { UNTIMED };
        Ok(Place {
            cap: cap.clone(),
            start,
            before,
        })
    }

    /// The response's head is ready: under an adaptive limit the request's
    /// latency is taken now (once), while the place stays held until it is
    /// dropped.
    #[inline]
    pub fn responded(&mut self) {
        if self.start != UNTIMED {
            self.cap.record(self.start, self.before);
            self.start = UNTIMED;
        }
    }

    /// Gives the place back without timing the request (it was refused
    /// after taking a place, so its latency says nothing of the service).
    #[inline]
    pub fn forfeit(mut self) {
        self.start = UNTIMED;
    }

    /// Gives the place back now.
    pub fn release(self) {}
}

impl Drop for Place {
    #[inline]
    fn drop(&mut self) {
        self.responded();
        self.cap.leave();
    }
}

/// The gate's answer to a request, whole: the [`Verdict`] (already
/// reported to the hooks) and, when it passes under a concurrency cap, the
/// [`Place`] to hold until the response is done (`None` without a cap, for
/// a critical request let through a full cap, and for every refusal).
#[derive(Debug)]
pub struct Admission<'g> {
    /// Status 0 to go on to the application with the fields added, or the
    /// answer to send.
    pub verdict: Verdict<'g>,
    /// The request's concurrency place.
    pub place: Option<Place>,
}

/// Why [`Gate`] found no place at once.
enum Entry {
    Shed(Priority),
    Queued(PlaceWait),
}

/// What [`Gate::admit_or_queue`] found: the sequence's answer, or a
/// request waiting for a concurrency place.
#[derive(Debug)]
pub enum Queueing<'g> {
    /// As [`Gate::admit`].
    Admit(Admit<'g>),
    /// Waiting in the queue: poll [`Queued::poll_place`] until ready or
    /// [`Queued::max_wait`] has passed, then [`Gate::resume`].
    Queued(Queued),
}

/// A request waiting in the concurrency cap's queue. `Send`, `'static`;
/// dropped, it leaves the queue.
#[derive(Debug)]
#[must_use = "resume it with Gate::resume, or drop it to leave the queue"]
pub struct Queued {
    waiter: PlaceWait,
}

impl Queued {
    /// Ready once a place is granted; registers `cx`'s waker.
    pub fn poll_place(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.waiter.poll_place(cx)
    }

    /// The longest it may wait (the queue's wait).
    pub fn max_wait(&self) -> std::time::Duration {
        self.waiter.cap().queue_wait().unwrap_or_default()
    }
}

/// What [`Gate::admit`] found.
#[derive(Debug)]
pub enum Admit<'g> {
    /// Exempt: on to the application, unlimited, with nothing added.
    Exempt,
    /// Decided: send the verdict's answer, or go on with its fields.
    Decided(Admission<'g>),
    /// The remote policies must be asked first (their I/O is the front
    /// door's): each policy of [`Gate::remote_names`], in order, checks
    /// [`Ask::identity`] in its own scope; then [`Gate::finish`].
    Ask(Ask),
    /// A hook failed ([`Hooks::with_key`] gave no answer): nothing was
    /// decided, charged or reported, and the place went back. The front
    /// door raises the hook's error.
    Stopped,
}

/// A request waiting for its remote policies' answers: its resolved key,
/// the key's text for them, and its place. Owns everything it holds (it
/// may cross an `await`, or into Python or JavaScript); dropping it gives
/// the place back.
#[derive(Debug)]
#[must_use = "finish it with Gate::finish, or drop it to give the place back"]
pub struct Ask {
    key: Fingerprint,
    identity: Vec<u8>,
    place: Option<Place>,
}

/// An abandoned ask (its checks dropped, its hook failed) gives its place
/// back untimed: how long it waited says nothing of the service.
impl Drop for Ask {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            place.forfeit();
        }
    }
}

impl Ask {
    /// The request's key as every instance derives it (`key:…`, `ip:…` or
    /// `anonymous`; see [`Gate::identity`]): what each remote policy checks.
    pub fn identity(&self) -> &[u8] {
        &self.identity
    }
}

impl Gate {
    /// The whole sequence for one request, in the order every front door
    /// keeps: `hooks.exempt()` → a concurrency place (when capped; a full
    /// cap sheds with 503 unless `hooks.critical()`) → the key (`request`,
    /// or `hooks.with_key`) → the local policies, or first an [`Ask`] of the
    /// remote ones → `hooks.report(verdict)`. A front door converts its
    /// request, calls this, writes the answer and keeps the place until the
    /// response body is done.
    ///
    /// # Examples
    /// ```
    /// use ratebound::any::AnyClock;
    /// use ratebound::gate::{Admit, Gate, GateOptions, Request};
    /// use ratebound::{KeyedAlgorithm, ManualClock, Quota};
    ///
    /// let options = GateOptions { concurrency_limit: Some(1), ..GateOptions::default() };
    /// let policy = ("default".to_string(), KeyedAlgorithm::TokenBucket(Quota::parse("10/s")?));
    /// let gate = Gate::new(vec![policy], options, AnyClock::Manual(ManualClock::new()))?;
    /// let lines: [(&str, &str); 0] = [];
    /// let request = Request { key: None, peer: Some([10, 0, 0, 1].into()), headers: &lines[..] };
    /// let Admit::Decided(first) = gate.admit(&request, &mut ()) else { unreachable!() };
    /// assert!(first.verdict.is_pass() && first.place.is_some());
    /// let Admit::Decided(second) = gate.admit(&request, &mut ()) else { unreachable!() };
    /// assert_eq!(second.verdict.status, 503); // shed: the one place is held
    /// drop(first.place); // the first response is done
    /// let Admit::Decided(third) = gate.admit(&request, &mut ()) else { unreachable!() };
    /// assert!(third.verdict.is_pass());
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    #[inline]
    pub fn admit<H: Headers + ?Sized, K: Hooks>(
        &self,
        request: &Request<'_, H>,
        hooks: &mut K,
    ) -> Admit<'_> {
        if hooks.exempt() {
            return Admit::Exempt;
        }
        match self.enter(hooks, false) {
            Ok((place, now)) => self.proceed(place, now, request, hooks),
            Err(Entry::Shed(priority)) => self.shed_reported(priority, hooks),
            // Not asked for.
            Err(Entry::Queued(_)) => self.shed_reported(Priority::Normal, hooks),
        }
    }

    /// [`admit`](Self::admit), except that a normal request finding the
    /// concurrency cap full waits in its queue
    /// ([`GateOptions::concurrency_queue`](super::GateOptions::concurrency_queue)):
    /// [`Queueing::Queued`] — poll its [`PlaceWait`] until a place is granted
    /// or the queue's wait has passed, then [`resume`](Self::resume).
    #[inline]
    pub fn admit_or_queue<H: Headers + ?Sized, K: Hooks>(
        &self,
        request: &Request<'_, H>,
        hooks: &mut K,
    ) -> Queueing<'_> {
        if hooks.exempt() {
            return Queueing::Admit(Admit::Exempt);
        }
        Queueing::Admit(match self.enter(hooks, true) {
            Ok((place, now)) => self.proceed(place, now, request, hooks),
            Err(Entry::Shed(priority)) => self.shed_reported(priority, hooks),
            Err(Entry::Queued(waiter)) => return Queueing::Queued(Queued { waiter }),
        })
    }

    /// The rest of [`admit_or_queue`](Self::admit_or_queue) once `queued`
    /// was granted a place — or was not, in time: then it is shed (503),
    /// as without a queue.
    pub fn resume<H: Headers + ?Sized, K: Hooks>(
        &self,
        queued: Queued,
        request: &Request<'_, H>,
        hooks: &mut K,
    ) -> Admit<'_> {
        let cap = queued.waiter.cap().clone();
        if !queued.waiter.finish() {
            return self.shed_reported(Priority::Normal, hooks);
        }
        let start = cap.start();
        let now = cap.is_adaptive().then_some(start);
        let start = if cap.is_adaptive() { start } else { UNTIMED };
        // It waited behind a full cap: not a request that entered alone.
        let place = Place {
            cap,
            start,
            before: usize::MAX,
        };
        self.proceed(Some(place), now, request, hooks)
    }

    #[inline]
    fn shed_reported<K: Hooks>(&self, priority: Priority, hooks: &mut K) -> Admit<'_> {
        Admit::Decided(Self::reported(self.shed_as(priority), None, hooks))
    }

    /// A concurrency place (when capped), and the clock reading it was
    /// taken at when the cap is adaptive; a full cap sheds the request
    /// unless it is critical — or queues it, when `queue` and the cap has a
    /// queue and it is normal.
    #[inline]
    fn enter<K: Hooks>(
        &self,
        hooks: &mut K,
        queue: bool,
    ) -> Result<(Option<Place>, Option<u64>), Entry> {
        // Shedding first: a saturated service refuses before any token is
        // spent, and before the key is looked for. One clock reading times
        // the place and makes the decision.
        let Some(cap) = &self.cap else {
            return Ok((None, None));
        };
        let start = cap.start();
        let now = cap.is_adaptive().then_some(start);
        let mut failed = false;
        // A failed hook is asked at the background share, where a
        // background request is refused: no place is taken for it, and it
        // is shed — the fail-safe answer, a 503 with Retry-After.
        let taken = Place::take(cap, start, || {
            hooks.priority().unwrap_or_else(|| {
                failed = true;
                Priority::Background
            })
        });
        if failed {
            drop(taken);
            return Err(Entry::Shed(Priority::Background));
        }
        match taken {
            Ok(place) => Ok((Some(place), now)),
            Err(Priority::Critical) => Ok((None, now)),
            Err(_) if hooks.critical() => Ok((None, now)),
            Err(Priority::Normal) if queue => match cap.wait_for_place() {
                Some(waiter) => Err(Entry::Queued(waiter)),
                None => Err(Entry::Shed(Priority::Normal)),
            },
            Err(priority) => Err(Entry::Shed(priority)),
        }
    }

    /// The sequence after the concurrency place: the key, the policies (or
    /// an [`Ask`] of the remote ones), the report.
    #[inline]
    fn proceed<H: Headers + ?Sized, K: Hooks>(
        &self,
        place: Option<Place>,
        now: Option<u64>,
        request: &Request<'_, H>,
        hooks: &mut K,
    ) -> Admit<'_> {
        let lazy = request.key.is_none() && self.options.key == KeySource::Given;
        if !self.remote.is_empty() {
            let mut identity = Vec::new();
            let key = if lazy {
                let key =
                    hooks.with_key(|key| self.resolve(&Request { key, ..*request }, &mut identity));
                match key {
                    Some(key) => key,
                    None => return Admit::Stopped,
                }
            } else {
                self.resolve(request, &mut identity)
            };
            return match key {
                Ok(key) => Admit::Ask(Ask {
                    key,
                    identity,
                    place,
                }),
                Err(status) => {
                    let verdict = self.decide_key_with::<RemoteAnswer>(Err(status), &[], 0);
                    Admit::Decided(Self::reported(verdict, place, hooks))
                }
            };
        }
        let now = now.unwrap_or_else(|| self.now());
        let verdict = if self.limiters.is_empty() {
            Verdict::pass(super::Fields::default())
        } else if lazy {
            let decided = hooks.with_key(|key| {
                self.decide_key(self.resolve(&Request { key, ..*request }, &mut ()), now)
            });
            match decided {
                Some(verdict) => verdict,
                None => return Admit::Stopped,
            }
        } else {
            self.decide_key(self.resolve(request, &mut ()), now)
        };
        Admit::Decided(Self::reported(verdict, place, hooks))
    }

    /// The rest of [`admit`](Self::admit) once the remote policies have
    /// answered `ask` — one answer per [`remote_names`](Self::remote_names)
    /// entry, in order (a [`Decision`](crate::Decision) or a
    /// [`RemoteAnswer`]) — as [`decide_with`](Self::decide_with) decides.
    pub fn finish<R: Copy + Into<RemoteAnswer>, K: Hooks>(
        &self,
        ask: Ask,
        answers: &[R],
        hooks: &mut K,
    ) -> Admission<'_> {
        let mut ask = ask;
        let verdict = self.decide_key_with(Ok(ask.key), answers, self.now());
        Self::reported(verdict, ask.place.take(), hooks)
    }

    /// The names of the policies decided elsewhere, in the order
    /// [`finish`](Self::finish) takes their answers.
    pub fn remote_names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.remote.iter().map(crate::http::Policy::name)
    }

    /// `verdict` told to the hooks, with the place kept only if it passes.
    #[inline(always)]
    fn reported<'g, K: Hooks>(
        verdict: Verdict<'g>,
        place: Option<Place>,
        hooks: &mut K,
    ) -> Admission<'g> {
        hooks.report(&verdict);
        let place = match place {
            Some(place) if !verdict.is_pass() => {
                place.forfeit();
                None
            }
            place => place,
        };
        Admission { verdict, place }
    }
}
