//! What a process says to a [`PacingStore`](super::PacingStore) and what it hears back, in the
//! process's own clock (tokio's [`Instant`]); every store maps it to its own.

use crate::pacing::clock::Clock;
use crate::pacing::mode::PacingMode;
use crate::pacing::shared::SharedState;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// What a process tells, or asks, the fleet about one endpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The process saw the endpoint fail (its own congestion outcomes in a row, or an empty
    /// retry budget): if the fleet has it open, or ramping with no success for a whole ramp
    /// interval, the fleet starts its one probe stream. `jitter`, in `[0, 1)`, places the first
    /// probe within a probe interval.
    Down {
        /// A uniform draw in `[0, 1)` from the process's random stream.
        jitter: f64,
    },
    /// The endpoint asked for a pause (`Retry-After`, a breaker's hold): nothing is released
    /// for the fleet before `until`; the latest pause wins.
    Pause {
        /// The end of the pause.
        until: Instant,
    },
    /// A hint (`Retry-After`) asked one request to wait until `until`: while the fleet still
    /// gets requests through, a rate signal (the fleet's ramp is cut once when its interval
    /// closes); when nothing gets through, a pause of the whole fleet until then.
    Hint {
        /// Until when the hint asked its request to wait.
        until: Instant,
    },
    /// The process has `want` requests waiting: how many may go, and when? Answered by a
    /// [`Release`]. `jitter` places the next probe if this one takes a probe.
    Release {
        /// Requests waiting (0: only asks when the next release would be).
        want: u32,
        /// A uniform draw in `[0, 1)` from the process's random stream.
        jitter: f64,
    },
    /// A probe ended: its lease is given back, and a success starts the fleet's ramp.
    ProbeDone {
        /// The lease of [`Release::Probe`].
        lease: Lease,
        /// Whether the endpoint took the request.
        success: bool,
    },
    /// Outcomes of requests released by slots since the process last reported: the fleet's
    /// rate learns from every process's outcomes.
    Report {
        /// Requests the endpoint took.
        successes: u32,
        /// Requests it refused for load (congestion outcomes).
        losses: u32,
        /// The time the outcomes came in over (since the process's last report); zero if
        /// unknown. The fleet takes the successes over it as what this process's share of the
        /// endpoint takes (the measure a cut starts from, whenever the reports come).
        over: Duration,
    },
    /// Nothing: read the endpoint's state as it is now.
    Refresh,
}

/// A probe let through by the fleet's one probe stream. End it with [`Event::ProbeDone`]; if
/// its holder never does (it died), the store takes it back when it expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub(crate) id: u64,
    pub(crate) expires: Instant,
    /// Granted by the process's fallback pacing, not by the shared store: the store never
    /// saw it.
    pub(crate) local: bool,
}

impl Lease {
    /// Which lease of the endpoint's probe stream this is (unique within its record).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// When the store takes the lease back if it is not ended before.
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// Whether the lease was granted by this process's fallback pacing while the store could
    /// not be reached (the fleet never saw it).
    pub fn is_local(&self) -> bool {
        self.local
    }
}

/// The answer to [`Event::Release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The endpoint is open: requests go on their own timers.
    Unpaced,
    /// One waiter goes now, as the fleet's probe.
    Probe(Lease),
    /// `count` waiters go, at `first`, `first + gap`, `first + 2 * gap`, …: slots of the fleet's
    /// rate, taken for this process in one call.
    Slots {
        /// The first slot (at or before now: it goes at once).
        first: Instant,
        /// The time between two slots, at the fleet's rate.
        gap: Duration,
        /// Slots granted (at least 1).
        count: u32,
    },
    /// Nothing goes before then: the next probe, the end of a pause, or the next slot within
    /// reach.
    At(Instant),
    /// Every probe lease is held; the first expires at `until` (a probe's end frees one
    /// sooner).
    Blocked {
        /// When the first held lease expires.
        until: Instant,
    },
}

/// The answer to one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Recorded.
    Done,
    /// The answer to [`Event::Release`].
    Release(Release),
}

/// An endpoint as the fleet sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct View {
    /// What the endpoint is doing.
    pub mode: PacingMode,
    /// The fleet's release rate, per second (0 while open).
    pub rate: f64,
    /// Processes that asked about the endpoint lately while it was paced (at least 1).
    pub peers: u32,
    /// The end of the pause, while paused.
    pub paused_until: Option<Instant>,
    /// Probes let through by the whole fleet since the store made the endpoint's record.
    pub probes: u64,
    /// When the store was last heard from about the endpoint (a view moved on with time since
    /// is no newer than this): a process trusts a view only over what it heard before it.
    pub heard_at: Instant,
}

impl View {
    /// An endpoint nobody has seen fail, as heard at `heard_at`.
    pub(crate) fn open(heard_at: Instant) -> View {
        View {
            mode: PacingMode::Open,
            rate: 0.0,
            peers: 1,
            paused_until: None,
            probes: 0,
            heard_at,
        }
    }
}

/// What a call to [`PacingStore::apply`](super::PacingStore::apply) returns: an answer always,
/// from the fleet's state or, when the store failed, from the process's fallback pacing.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Applied {
    /// One reply per event, in order.
    pub replies: Vec<Reply>,
    /// The endpoint after the events.
    pub view: View,
    /// `Some` when the answer came from the fallback: why the store was not used.
    pub fallback: Option<StoreError>,
    /// The endpoint's whole state after the events (the pacer's replica of it), and the clock
    /// its times are on.
    pub(crate) state: SharedState,
    pub(crate) clock: Clock,
}

impl Applied {
    /// The answer to the first [`Event::Release`] of the call, if it had one.
    pub fn release(&self) -> Option<Release> {
        self.replies.iter().find_map(|reply| match reply {
            Reply::Release(release) => Some(*release),
            Reply::Done => None,
        })
    }
}

/// Why a store could not be used. The process then paces on its own at its last known share of
/// the fleet's rate (never unlimited), and rejoins when the store answers again.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// No answer within the call timeout.
    Timeout(Duration),
    /// The store could not be reached or refused the call (connection refused or reset, a
    /// script error); the store's own message.
    Unavailable(String),
    /// The endpoint's record is not one this crate wrote (another format, or damaged).
    Malformed,
    /// Other processes changed the record every time this one tried, this many times in a row.
    Contention(u32),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout(after) => write!(f, "pacing store: no answer within {after:?}"),
            StoreError::Unavailable(why) => write!(f, "pacing store unavailable: {why}"),
            StoreError::Malformed => f.write_str("pacing store: a record in an unknown format"),
            StoreError::Contention(tries) => {
                write!(
                    f,
                    "pacing store: the record changed under {tries} tries in a row"
                )
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// A store's counters, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Calls to the store (round trips).
    pub calls: u64,
    /// Calls that found the record changed since it was read, and were made again.
    pub conflicts: u64,
    /// Calls that failed (a timeout, a connection error, a malformed record).
    pub errors: u64,
    /// Times the store was given up for the fallback (each logged once).
    pub fallbacks: u64,
    /// Answers given by the fallback.
    pub fallback_answers: u64,
    /// Times the store answered again after a fallback.
    pub rejoins: u64,
}
