//! What goes into and comes out of [`Turns`](super::Turns): its tuning,
//! a call's entry and where it went, what the driver is to do with the
//! calls, what it is asked to schedule, and the counters.

use std::time::Duration;

/// The tunables of [`Turns`](super::Turns), measured on Node (see each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnTuning {
    /// The most calls sent and not yet settled. 256: 3 000 checks begun in
    /// one turn, batched or not, all answered by Redis within the default
    /// 50 ms deadline on a 2-core machine at a load average of 9 (512: a
    /// third of the unbatched ones timed out; 128: none, but more round
    /// trips).
    pub in_flight: usize,
    /// What a call sent alone counts against `in_flight` (a call in a
    /// batch: 1). 3 000 checks begun in one turn with batching off: 256
    /// sent alone at a time missed the deadline at a load average of 5
    /// (the last answered 60–120 ms after it went out); 64 at a time, none
    /// did.
    pub alone: usize,
    /// A queue of this many calls of one group or more, with nothing in
    /// flight, goes as two script runs.
    pub split_at: usize,
    /// The most calls waiting in the queue; beyond, a call is unsent at
    /// once.
    pub max_queued: usize,
    /// How many deadlines a call may wait in the queue (at least
    /// `queue_min`) before it is unsent: while Redis answers, `in_flight`
    /// calls go out per round trip; while it does not, per deadline.
    pub queue_deadlines: u32,
    /// See `queue_deadlines`.
    pub queue_min: Duration,
}

impl TurnTuning {
    /// Node's event loop (the measurements on each field).
    pub const EVENT_LOOP: TurnTuning = TurnTuning {
        in_flight: 256,
        alone: 4,
        split_at: 8,
        max_queued: 65_536,
        queue_deadlines: 20,
        queue_min: Duration::from_secs(1),
    };

    /// The longest a call waits in the queue for calls with `deadline`.
    pub fn queue_wait(&self, deadline: Duration) -> Duration {
        self.queue_min.max(deadline * self.queue_deadlines)
    }
}

/// How long after a signal opened the sends begun still carry it (see
/// the module docs): a millisecond's calls share one `AbortSignal`, one
/// object per millisecond rather than per call.
pub const SIGNAL_EPOCH: Duration = Duration::from_millis(1);

/// A call's number while [`Turns`](super::Turns) knows it (from [`Turns::enter`](super::Turns::enter) to
/// [`Turns::settle`](super::Turns::settle)); numbers are reused after.
pub type Ticket = u32;

/// A call as [`Turns`](super::Turns) needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its join class and hash slot (calls with equal ones may go as one
    /// script run; the class is the driver's number for calls that
    /// [join](crate::BatchCall::joins)), or `None`: it always goes alone.
    pub join: Option<(u32, u16)>,
    /// It must not be lost to the client's own overload (a pause, a
    /// give-back): never unsent, whatever it waited.
    pub keep: bool,
}

/// Where [`Turns::enter`](super::Turns::enter) put a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Go {
    /// Send it now, alone.
    Now,
    /// It waits in the queue.
    Queued,
    /// It never leaves: the queue is full (the client's own overload).
    /// The ticket is settled already.
    Unsent,
}

/// What the driver does with calls, as [`Turns::flush`](super::Turns::flush) and
/// [`Turns::sweep`](super::Turns::sweep) hand them back, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// Send the call alone.
    One(Ticket),
    /// Send the calls as one script run, in this order.
    Many(Vec<Ticket>),
    /// It never left and never will: it waited past the queue's limit
    /// (the client's own overload).
    Unsent(Ticket),
    /// It waited a whole deadline in the queue while Redis is slow: timed
    /// out.
    TimedOut(Ticket),
    /// It was sent and its deadline passed with no answer.
    Late(Ticket),
}

/// What the driver should schedule after a call into [`Turns`](super::Turns) (the bits
/// are [`Asks::FLUSH`] and [`Asks::STAMP`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Asks(pub u8);

impl Asks {
    /// Call [`Turns::flush`](super::Turns::flush) at the end of this turn.
    pub const FLUSH: u8 = 1;
    /// Call [`Turns::stamp`](super::Turns::stamp) once the client has written this turn's
    /// commands.
    pub const STAMP: u8 = 2;
    /// Abort the signal the settled call's send carried (see
    /// [`Turns::carry`](super::Turns::carry)).
    pub const ABORT: u8 = 4;

    /// Whether a flush is asked for.
    pub fn flush(self) -> bool {
        self.0 & Asks::FLUSH != 0
    }

    /// Whether a stamp is asked for.
    pub fn stamp(self) -> bool {
        self.0 & Asks::STAMP != 0
    }

    /// Whether the settled call's signal is to be aborted.
    pub fn abort(self) -> bool {
        self.0 & Asks::ABORT != 0
    }
}

/// The counters of [`Turns`](super::Turns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TurnStats {
    /// Commands sent (a script run alone or of a batch; not the `EVAL`
    /// after a `NOSCRIPT`).
    pub calls: u64,
    /// Of those, batches.
    pub batches: u64,
    /// Calls sent in batches.
    pub batched: u64,
    /// Calls that had to wait in the queue for room in flight.
    pub queued: u64,
    /// Calls that never left (the client's own overload).
    pub unsent: u64,
    /// Calls timed out: late (Redis slow) or waiting for a slow Redis.
    pub timeouts: u64,
}
