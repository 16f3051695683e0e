//! The pacer's rules: the state of one endpoint that a fleet of processes shares, a plain value
//! whose transitions are the only place the rules are written. An endpoint paced by one process
//! keeps it under its own lock (`endpoint/`) and calls these methods directly; a fleet keeps
//! one in a [store](super::store) and every store applies the same methods to it
//! ([`SharedState::apply`], `op.rs`). Times are [`Nanos`] of the keeper's clock and every method
//! takes `now`, so the rules are unit-tested without a runtime.
//!
//! ```text
//!   Open ── a process saw N congestion outcomes in a row, or an empty budget ──> Probing
//!    ^                                                                  │ a success  ^
//!    │ no demand, no loss, for a while                                  v            │ N in a row,
//!    └─────────────────────────────────────────────────────────────── Ramping ──────┘ nothing
//!                                    (slow start, then cubic after a loss)            taken for
//!                                                                                     an interval
//!   any mode ── a quota's reset, or a hint when nothing gets through ──> Paused until then
//!   Paused ── the pause is over ──> Ramping (from the probe rate, or the cut of the ramp it left)
//!   Ramping, taking requests ── a hint ──> one multiplicative decrease (the request alone waits)
//! ```
//!
//! What the fleet shares is here: the mode, the learned rate and the counts of the current
//! measuring interval, one probe stream (`release.rs`: leases that expire), the release slots
//! (GCRA's last slot), the peers. What only a process can hold is in `endpoint/`: its queue
//! and wakers, its own run of congestion outcomes (an outage is noticed locally and reported
//! once, [`down`](SharedState::down)), and with a store, its unused slots and unsent events.

mod cut;
mod entered;
mod op;
mod peer;
mod predict;
mod release;
mod slots;
#[cfg(test)]
mod tests;

pub(crate) use entered::Entered;
pub(crate) use op::Op;
pub(crate) use peer::{Peer, MAX_PEERS};
pub(crate) use release::{Batch, Grant};

use super::clock::{nanos, Nanos};
use super::mode::PacingMode;
use super::rate::Ramp;
use super::rules::PacingRules;
use std::time::Duration;

/// With a store, a process reports its outcomes within this, whatever else happens: the fleet's
/// rules allow for that lag.
pub(crate) const REPORT_WITHIN: Duration = Duration::from_secs(1);

/// The rules one transition reads: the pacing configuration, and how the state is kept.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules<'a> {
    pub(crate) pacing: &'a PacingRules,
    /// A probe lease not ended by then is taken back (its holder may be dead); `None` for an
    /// endpoint paced by one process, whose passes always end their lease.
    pub(crate) lease_ttl: Option<Nanos>,
    /// How late outcomes may be heard of (a fleet's processes report them in batches; 0 for a
    /// process alone): "nothing taken for an interval" waits this much longer.
    pub(crate) report_lag: Nanos,
}

impl<'a> Rules<'a> {
    /// The rules of an endpoint paced by one process alone.
    pub(crate) fn alone(pacing: &'a PacingRules) -> Self {
        Self {
            pacing,
            lease_ttl: None,
            report_lag: 0,
        }
    }

    /// The rules of a fleet's shared state, whose probe leases expire after `lease_ttl`.
    pub(crate) fn fleet(pacing: &'a PacingRules, lease_ttl: Nanos) -> Self {
        Self {
            pacing,
            lease_ttl: Some(lease_ttl),
            report_lag: nanos(REPORT_WITHIN),
        }
    }

    fn interval(&self) -> Nanos {
        nanos(self.pacing.ramp_interval).max(1)
    }
}

/// The mode and what each mode needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Mode {
    Open,
    Probing,
    Ramping {
        ramp: Ramp,
        /// A hint came in this interval while the endpoint took requests: a rate signal, one
        /// cut when the interval closes.
        hinted: bool,
        /// The current measuring interval: when it started, successes and losses in it.
        interval_start: Nanos,
        successes: u32,
        losses: u32,
        /// Since when there has been no demand and no loss, if so.
        idle_since: Option<Nanos>,
        /// Losses before this do not cut the rate again: they answer requests released
        /// before the last cut, and one loss event deserves one cut. A process alone, granted
        /// nothing ahead, cut an interval before (`last_cut`); it also knows when each of its
        /// requests went, and counts the losses of those released after the cut (and a round
        /// trip after it) at once.
        cut_settles_at: Nanos,
        /// Successes per second in the last interval that closed.
        last_accepted: f64,
    },
    Paused {
        until: Nanos,
        /// The ramp to resume with after the pause: the one that was running, cut as for a
        /// loss. `None` when none was (the release then ramps from the probe rate).
        resume: Option<Ramp>,
    },
}

/// A probe in flight: let through by the endpoint's one probe stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseEntry {
    pub(crate) id: u64,
    pub(crate) holder: u64,
    /// Taken back then if not ended before (`Nanos::MAX`: never).
    pub(crate) expires: Nanos,
}

/// One endpoint's pacing state, as a fleet shares it (or one process keeps it alone).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SharedState {
    pub(crate) mode: Mode,
    /// The earliest next probe while probing (and, after a pause, not before it).
    pub(crate) next_probe: Nanos,
    pub(crate) leases: Vec<LeaseEntry>,
    pub(crate) next_lease: u64,
    /// While ramping: the last slot granted. The next is due one gap (at the rate *now*) later,
    /// so a rate that grows brings the next release forward (GCRA with the rate read at each
    /// grant).
    pub(crate) last_slot: Nanos,
    /// While ramping, with a store: slots granted ahead are demand until then.
    pub(crate) demand_until: Nanos,
    /// The last time requests were seen waiting (a fleet's demand is heard only when a process
    /// asks: a ramp nobody asked of for a while has had no demand since then).
    pub(crate) last_demand: Nanos,
    /// With a store: the fleet's slot clock (`slots.rs`), slots passed since the ramp began
    /// as of `slots_at`.
    pub(crate) slots: f64,
    pub(crate) slots_at: Nanos,
    /// When the endpoint last took a request (answered a success), if it ever did.
    pub(crate) last_success: Option<Nanos>,
    /// The rate the endpoint took at its last loss (a ramp's cut), per second: what a ramp
    /// after the next outage is predicted to reach.
    pub(crate) capacity: Option<f64>,
    /// Processes that asked lately (a fleet's store only).
    pub(crate) peers: Vec<Peer>,
    /// Probes let through since the state was made.
    pub(crate) probes: u64,
    pub(crate) entered: Entered,
}

impl Default for SharedState {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedState {
    /// The state of an endpoint nobody has seen fail: open.
    pub(crate) fn new() -> Self {
        Self {
            mode: Mode::Open,
            next_probe: 0,
            leases: Vec::new(),
            next_lease: 0,
            last_slot: 0,
            demand_until: 0,
            last_demand: 0,
            slots: 0.0,
            slots_at: 0,
            last_success: None,
            capacity: None,
            peers: Vec::new(),
            probes: 0,
            entered: Entered::default(),
        }
    }

    /// The mode, as [`PacingStats`](crate::pacing::PacingStats) reports it.
    pub(crate) fn mode_kind(&self) -> PacingMode {
        match self.mode {
            Mode::Open => PacingMode::Open,
            Mode::Probing => PacingMode::Probing,
            Mode::Ramping { .. } => PacingMode::Ramping,
            Mode::Paused { .. } => PacingMode::Paused,
        }
    }

    /// Whether requests go on their own timers (rather than waiting for the pacer).
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.mode, Mode::Open)
    }

    /// The release rate now, per second (0 while open: unpaced).
    pub(crate) fn rate(&self, rules: &Rules<'_>) -> f64 {
        match &self.mode {
            Mode::Open => 0.0,
            Mode::Probing | Mode::Paused { .. } => rules.pacing.rate.floor,
            Mode::Ramping { ramp, .. } => ramp.rate(&rules.pacing.rate),
        }
    }

    /// The modes entered since the last call.
    pub(crate) fn take_entered(&mut self) -> Entered {
        std::mem::take(&mut self.entered)
    }

    /// Whether the endpoint takes requests: it answered a success within the last measuring
    /// interval. (What "nothing gets through" means below: a hint pauses the whole endpoint,
    /// and a run of congestion while ramping is an outage.)
    pub(crate) fn takes_requests(&self, rules: &Rules<'_>, now: Nanos) -> bool {
        let within = nanos(rules.pacing.ramp_interval).saturating_add(rules.report_lag);
        self.last_success
            .is_some_and(|at| now.saturating_sub(at) < within)
    }

    /// A pause that ended by `now` (read late: nobody asked when it ended) ended at its `until`,
    /// and the endpoint has had no demand since: it ramps, and opens, as it would have then.
    fn end_pause(&mut self, rules: &Rules<'_>, demand: bool, now: Nanos) {
        let Mode::Paused { until, resume } = self.mode else {
            return;
        };
        if now < until {
            return;
        }
        self.enter_ramping(rules, until);
        if let Mode::Ramping { idle_since, .. } = &mut self.mode {
            *idle_since = (!demand).then_some(until);
        }
        if let (
            Some(cut),
            Mode::Ramping {
                ramp,
                last_accepted,
                ..
            },
        ) = (resume, &mut self.mode)
        {
            *ramp = cut;
            // Until an interval has been measured, the endpoint is taken to accept the
            // rate resumed with: another pause right away cuts from it, not from nothing.
            *last_accepted = cut.rate(&rules.pacing.rate);
        }
    }

    /// Moves the mode on with time: a pause that ended, a measuring interval that closed, a
    /// ramp that kept up with the demand. `demand`: requests wait for a release (besides the
    /// one asking, when one asks).
    pub(crate) fn advance(&mut self, rules: &Rules<'_>, demand: bool, now: Nanos) {
        let demand = demand || now < self.demand_until;
        if demand {
            self.last_demand = self.last_demand.max(now);
        }
        // A process alone sees its queue at every step; a fleet's store only when a process
        // asks, so its quiet spell began at the last demand it heard of.
        let quiet_since = if rules.lease_ttl.is_some() {
            self.last_demand.max(self.demand_until).min(now)
        } else {
            now
        };
        self.end_pause(rules, demand, now);
        let reported = self.reported_accepted(now);
        let Mode::Ramping {
            ramp,
            interval_start,
            successes,
            losses,
            idle_since,
            cut_settles_at,
            last_accepted,
            hinted,
        } = &mut self.mode
        else {
            return;
        };
        let interval = rules.interval();
        let secs = rules.pacing.ramp_interval.as_secs_f64();
        while now >= interval_start.saturating_add(interval) {
            // The slot clock runs at the rate of the interval that closes.
            let closes = interval_start.saturating_add(interval);
            if rules.lease_ttl.is_some() && closes > self.slots_at {
                self.slots += (closes - self.slots_at) as f64 / 1e9 * ramp.rate(&rules.pacing.rate);
                self.slots_at = closes;
            }
            *last_accepted = f64::from(*successes) / secs;
            // A hint is the endpoint's own word that it takes less.
            if rules.is_loss_event(*successes, *losses) || *hinted {
                if *interval_start >= *cut_settles_at {
                    rules.cut(ramp, *successes, *losses, secs, reported);
                    *cut_settles_at = rules.settles(closes, self.demand_until);
                    if let Some(max) = ramp.last_max() {
                        self.capacity = Some(max);
                    }
                }
            } else {
                ramp.interval_passed(secs);
            }
            *successes = 0;
            *losses = 0;
            *hinted = false;
            *interval_start += interval;
            if now >= interval_start.saturating_add(interval * 8) {
                // A long quiet spell: skip to the current interval instead of looping.
                *interval_start = now;
            }
        }
        if rules.lease_ttl.is_some() && now > self.slots_at {
            self.slots += (now - self.slots_at) as f64 / 1e9 * ramp.rate(&rules.pacing.rate);
            self.slots_at = now;
        }
        if demand {
            *idle_since = None;
        } else {
            let since = *idle_since.get_or_insert(quiet_since);
            if now.saturating_sub(since) >= nanos(rules.pacing.idle_to_open) {
                self.mode = Mode::Open;
                self.entered.enter(PacingMode::Open);
            }
        }
    }

    /// Records what an outcome says (`lease`: the probe it answers, if it was one). Returns
    /// whether a request waiting for a release should look again.
    pub(crate) fn outcome(
        &mut self,
        rules: &Rules<'_>,
        signal: Signal,
        lease: Option<u64>,
        now: Nanos,
    ) -> bool {
        self.record_outcome(rules, signal, lease, now, false)
    }

    /// [`outcome`](Self::outcome) of a request a process alone released at the rate after its
    /// last cut settled (see [`released_before_cut`](Self::released_before_cut)): its loss is
    /// news of the rate now, and may cut it before the interval closes. The losses of requests
    /// the rate did not release (first attempts sent while the endpoint was taken to be open,
    /// or sent whatever the pacer says) come when their callers send them, in bursts that say
    /// nothing of the rate: they count when the interval closes.
    pub(crate) fn timed_outcome(&mut self, rules: &Rules<'_>, signal: Signal, now: Nanos) -> bool {
        self.record_outcome(rules, signal, None, now, true)
    }

    fn record_outcome(
        &mut self,
        rules: &Rules<'_>,
        signal: Signal,
        lease: Option<u64>,
        now: Nanos,
        timed: bool,
    ) -> bool {
        let mut changed = false;
        if signal == Signal::Success {
            self.last_success = Some(now);
        }
        if let Some(lease) = lease {
            self.leases.retain(|entry| entry.id != lease);
            // A probe's slot is free again.
            changed |= matches!(self.mode, Mode::Probing);
        }
        match (&mut self.mode, signal) {
            (Mode::Probing, Signal::Success) => {
                self.enter_ramping(rules, now);
                changed = true;
            }
            (
                Mode::Ramping {
                    ramp, successes, ..
                },
                Signal::Success,
            ) => {
                *successes += 1;
                ramp.on_success(&rules.pacing.rate, rules.pacing.ramp_interval.as_secs_f64());
                // The rate may have grown: a waiting request recomputes when it is due.
                changed = true;
            }
            (
                Mode::Ramping {
                    losses, idle_since, ..
                },
                Signal::Congestion,
            ) => {
                *losses += 1;
                *idle_since = None;
                changed |= self.cut_at_loss_event(rules, now, timed);
            }
            _ => {}
        }
        changed
    }

    /// A process saw the endpoint fail: its own [`outage_after`](super::PacingBuilder::outage_after)
    /// congestion outcomes in a row, or an empty retry budget. An open endpoint is down; a
    /// ramping one is down again (a flapping endpoint) once nothing has been taken for a whole
    /// interval — a limit that rejects in runs while it still takes requests is a rate to find,
    /// not an outage — and is probed as in a fresh start. `jitter`, a uniform draw in
    /// `[0, 1)`, places the first probe; it is drawn only if the endpoint goes down. Returns
    /// whether it did.
    pub(crate) fn down(
        &mut self,
        rules: &Rules<'_>,
        now: Nanos,
        jitter: impl FnOnce() -> f64,
    ) -> bool {
        match self.mode {
            Mode::Open => {}
            Mode::Ramping { .. } if !self.takes_requests(rules, now) => {
                self.remember_capacity(rules);
            }
            _ => return false,
        }
        self.enter_probing(rules, jitter(), now);
        true
    }

    /// A hint (`Retry-After`) on one response, asking that request to wait until `until`
    /// (RFC 9110, section 10.2.3: how long the user agent ought to wait before a follow-up
    /// request; it says nothing of every other request). While the endpoint takes requests, it is
    /// a rate signal: a ramp is cut once, as for a loss (one cut per loss event), and the request
    /// alone waits its hint; an open endpoint (not known to be down: the outage rule decides
    /// that) has no rate to cut. When nothing gets through (down, paused, or ramping with
    /// nothing taken for an interval) the whole endpoint pauses until then. Returns whether it
    /// did.
    pub(crate) fn hinted(&mut self, rules: &Rules<'_>, until: Nanos, now: Nanos) -> bool {
        let takes = self.takes_requests(rules, now);
        match &mut self.mode {
            // Not known to be down: the hint is this request's alone.
            Mode::Open => false,
            Mode::Ramping { hinted, .. } if takes => {
                // Cut when the interval closes, from what the endpoint took in it: the interval
                // before it was measured at a rate the ramp has since doubled.
                *hinted = true;
                false
            }
            _ => {
                self.pause_until(rules, until, now);
                self.is_paused(now)
            }
        }
    }

    fn is_paused(&self, now: Nanos) -> bool {
        matches!(self.mode, Mode::Paused { until, .. } if until > now)
    }

    /// The endpoint said when to come back: every request waits until then; the latest pause
    /// wins. The release afterwards ramps from the probe rate, so a hint shared by a herd
    /// cannot bring it back in one instant; or, when a ramp was running (the endpoint is taking
    /// a known rate and asks for less), from that ramp cut as for a loss.
    pub(crate) fn pause_until(&mut self, rules: &Rules<'_>, until: Nanos, now: Nanos) {
        if until <= now {
            return;
        }
        match &mut self.mode {
            Mode::Paused { until: current, .. } => *current = (*current).max(until),
            Mode::Ramping {
                ramp,
                last_accepted,
                ..
            } => {
                let mut cut = *ramp;
                cut.lose(&rules.pacing.rate, *last_accepted);
                self.mode = Mode::Paused {
                    until,
                    resume: Some(cut),
                };
                self.remember_capacity(rules);
                self.entered.enter(PacingMode::Paused);
            }
            _ => {
                self.mode = Mode::Paused {
                    until,
                    resume: None,
                };
                self.entered.enter(PacingMode::Paused);
            }
        }
    }

    /// Keeps what the endpoint was seen to take (see `capacity`): the rate of the ramp's last
    /// loss, or else the rate its last measured interval took.
    fn remember_capacity(&mut self, rules: &Rules<'_>) {
        let floor = rules.pacing.rate.floor;
        let taken = match &self.mode {
            Mode::Ramping {
                ramp,
                last_accepted,
                ..
            } => ramp
                .last_max()
                .or((*last_accepted > floor).then_some(*last_accepted)),
            Mode::Paused { resume, .. } => resume.as_ref().and_then(Ramp::last_max),
            _ => None,
        };
        if let Some(taken) = taken {
            self.capacity = Some(taken.max(floor));
        }
    }

    fn enter_probing(&mut self, rules: &Rules<'_>, jitter: f64, now: Nanos) {
        self.mode = Mode::Probing;
        // A new probe stream: the probes of an earlier one answered long ago.
        self.leases.clear();
        self.next_probe = now.saturating_add(probe_gap(rules, jitter));
        self.entered.enter(PacingMode::Probing);
    }

    fn enter_ramping(&mut self, rules: &Rules<'_>, now: Nanos) {
        self.mode = Mode::Ramping {
            ramp: Ramp::start(&rules.pacing.rate),
            hinted: false,
            interval_start: now,
            successes: 0,
            losses: 0,
            idle_since: None,
            cut_settles_at: now,
            last_accepted: 0.0,
        };
        // The next waiter may go at once: the endpoint just answered.
        self.last_slot = now.saturating_sub(gap(rules.pacing.rate.floor));
        // The ramp began with a request let through: its quiet spell starts no earlier.
        self.last_demand = self.last_demand.max(now);
        // A new slot clock: no slot before the ramp began, and every peer's stream starts
        // again (the slots of an earlier ramp are on the old clock).
        (self.slots, self.slots_at) = (0.0, now);
        for peer in &mut self.peers {
            peer.placed = false;
        }
        self.entered.enter(PacingMode::Ramping);
    }
}

/// What an outcome says about the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// It took the request.
    Success,
    /// It is overloaded or unreachable (429, 502, 503, 504, a timeout, a connection failure).
    Congestion,
    /// Nothing about its load (a 404, a 500 the classifier calls transient but not congestion).
    Neutral,
}

/// A jittered probe gap: uniform in `[interval / 2, 3 * interval / 2)` for `jitter` in
/// `[0, 1)`, as [`uniform`](crate::random::uniform) draws it.
fn probe_gap(rules: &Rules<'_>, jitter: f64) -> Nanos {
    let interval = rules.pacing.probe_interval;
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    nanos(crate::random::uniform_at(
        interval / 2,
        interval + interval / 2,
        jitter,
    ))
}

/// The time between two releases at `rate` per second.
pub(crate) fn gap(rate: f64) -> Nanos {
    nanos(Duration::from_secs_f64(1.0 / rate))
}
