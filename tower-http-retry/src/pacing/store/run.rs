//! What every store does around the rules: turns a process's [`Event`]s (local time) into
//! operations on a [`SharedState`] (shared time) and the grants back into [`Reply`]s, describes
//! a state as a [`View`], and says how long a record is kept.

use super::protocol::{Applied, Event, Lease, Release, Reply, View};
use crate::error::{positive_duration, InvalidConfig};
use crate::pacing::clock::{nanos, Clock, Nanos};
use crate::pacing::mode::PacingMode;
use crate::pacing::rate::Ramp;
use crate::pacing::rules::PacingRules;
use crate::pacing::shared::{Grant, Mode, Op, Rules, SharedState};
use std::time::Duration;
use tokio::time::Instant;

/// A lease id that matches no lease of the shared state: a lease granted by a process's
/// fallback pacing, ended once the process has rejoined.
const NO_LEASE: u64 = u64::MAX;

/// The fleet's timing that is not in [`Pacing`](crate::Pacing), set on a store; the same for every process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    /// A probe lease not ended by then is taken back.
    pub(crate) lease_ttl: Duration,
    /// A record is kept this long after the last time it holds (a pause's end, a lease's
    /// expiry) and its last change; then it expires, and the endpoint is open.
    pub(crate) record_ttl: Duration,
}

impl Timing {
    pub(crate) const DEFAULT: Timing = Timing {
        lease_ttl: Duration::from_secs(10),
        record_ttl: Duration::from_secs(60),
    };

    /// Checks both values.
    pub(crate) fn check(self) -> Result<Self, InvalidConfig> {
        positive_duration("store.lease_ttl", self.lease_ttl)?;
        positive_duration("store.record_ttl", self.record_ttl)?;
        Ok(self)
    }

    pub(crate) fn rules<'a>(&self, pacing: &'a PacingRules) -> Rules<'a> {
        Rules::fleet(pacing, nanos(self.lease_ttl))
    }

    /// The record's time to live from `now`, in milliseconds (at least 1).
    pub(crate) fn expiry_ms(&self, state: &SharedState, now: Nanos) -> u64 {
        let held = state.holds_until().saturating_sub(now);
        (held.saturating_add(nanos(self.record_ttl)) / 1_000_000).max(1)
    }
}

/// A random id for one process (one store handle).
pub(crate) fn holder_id() -> u64 {
    rand::random()
}

/// Applies `events` by `holder` at `now` to `state`, and says what the process hears back.
/// `local`: the state is the process's fallback copy, not the fleet's.
pub(crate) fn run(
    state: &mut SharedState,
    rules: &Rules<'_>,
    holder: u64,
    events: &[Event],
    clock: &Clock,
    now: Instant,
    local: bool,
) -> Vec<Reply> {
    let at = clock.to_shared(now);
    let replies = events
        .iter()
        .map(|event| {
            let op = match *event {
                Event::Down { jitter } => Op::Down { jitter },
                Event::Pause { until } => Op::Pause {
                    until: clock.to_shared(until),
                },
                Event::Hint { until } => Op::Hint {
                    until: clock.to_shared(until),
                },
                Event::Release { want, jitter } => Op::Release { want, jitter },
                Event::ProbeDone { lease, success } => Op::ProbeDone {
                    lease: if lease.local && !local {
                        NO_LEASE
                    } else {
                        lease.id
                    },
                    success,
                },
                Event::Report {
                    successes,
                    losses,
                    over,
                } => Op::Report {
                    successes,
                    losses,
                    over: nanos(over),
                },
                Event::Refresh => Op::Refresh,
            };
            match state.apply(rules, holder, op, at) {
                None => Reply::Done,
                Some(grant) => Reply::Release(release(grant, clock, local)),
            }
        })
        .collect();
    // The modes entered are the process's to trace, from what it hears.
    state.take_entered();
    replies
}

fn release(grant: Grant, clock: &Clock, local: bool) -> Release {
    match grant {
        Grant::Unpaced => Release::Unpaced,
        Grant::Probe { lease, expires } => Release::Probe(Lease {
            id: lease,
            expires: clock.to_local(expires),
            local,
        }),
        Grant::Slots { first, gap, count } => Release::Slots {
            first: clock.to_local(first),
            gap: Duration::from_nanos(gap),
            count,
        },
        Grant::At(at) => Release::At(clock.to_local(at)),
        Grant::Blocked { until } => Release::Blocked {
            until: clock.to_local(until),
        },
    }
}

/// What a call answers: the replies, and `state` (on `clock`) as it is after them, at shared
/// time `now`.
pub(crate) fn applied(
    replies: Vec<Reply>,
    state: &SharedState,
    rules: &Rules<'_>,
    clock: Clock,
    now: Nanos,
) -> Applied {
    Applied {
        replies,
        view: view(state, rules, &clock, now),
        fallback: None,
        state: state.clone(),
        clock,
    }
}

/// `state` as a [`View`], at shared time `now`.
pub(crate) fn view(state: &SharedState, rules: &Rules<'_>, clock: &Clock, now: Nanos) -> View {
    let paused_until = match state.mode {
        Mode::Paused { until, .. } => Some(clock.to_local(until)),
        _ => None,
    };
    View {
        mode: state.mode_kind(),
        rate: state.rate(rules),
        peers: state.peers(now),
        paused_until,
        probes: state.probes,
        heard_at: clock.to_local(now),
    }
}

/// `state` as heard of at `heard_at`, moved on to `now` (a pause that ended, a ramp with no
/// demand left); an open endpoint costs nothing.
pub(crate) fn cached_view(
    state: &SharedState,
    rules: &Rules<'_>,
    clock: &Clock,
    heard_at: Instant,
    now: Instant,
) -> View {
    if let Mode::Open = state.mode {
        return View::open(heard_at);
    }
    let at = clock.to_shared(now);
    let mut moved = state.clone();
    moved.apply(rules, 0, Op::Refresh, at);
    View {
        heard_at,
        ..view(&moved, rules, clock, at)
    }
}

impl SharedState {
    /// A guess of the fleet's state from a [`View`] (what a process knows of an endpoint it has
    /// not called about yet), until a call brings the state itself: the mode, the pause's end,
    /// the rate (as a slow start), the next probe now.
    pub(crate) fn from_view(view: &View, clock: &Clock, now: Instant) -> SharedState {
        let at = clock.to_shared(now);
        let mode = match view.mode {
            PacingMode::Open => Mode::Open,
            PacingMode::Probing => Mode::Probing,
            PacingMode::Paused => Mode::Paused {
                until: view.paused_until.map_or(at, |until| clock.to_shared(until)),
                resume: None,
            },
            PacingMode::Ramping => Mode::Ramping {
                ramp: Ramp::SlowStart { rate: view.rate },
                hinted: false,
                interval_start: at,
                successes: 0,
                losses: 0,
                idle_since: None,
                cut_settles_at: at,
                last_accepted: 0.0,
            },
        };
        let mut state = SharedState {
            mode,
            next_probe: at,
            last_slot: at,
            ..SharedState::new()
        };
        if view.mode != PacingMode::Open {
            state.entered.enter(view.mode);
        }
        state
    }
}
