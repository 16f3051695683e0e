//! One endpoint's pacing state: its mode, its release schedule and its queue of waiting
//! requests. Every method takes `now`, so the state machine is unit-tested without a runtime.
//!
//! ```text
//!   Open ── N congestion outcomes in a row, or an empty budget ──> Probing
//!    ^                                                               │ a success  ^
//!    │ queue empty, no loss, for a while                             v            │ N congestion
//!    └──────────────────────────────────────────────────────────── Ramping ──────┘ outcomes in a
//!                                    (slow start, then cubic after a loss)          row, nothing
//!                                                                                   taken for an
//!                                                                                   interval
//!   any mode ── a quota's reset, or a hint when nothing gets through ──> Paused until then
//!   Paused ── the pause is over ──> Ramping (from the probe rate, or the cut of the ramp it left)
//!   Ramping, taking requests ── a hint ──> one multiplicative decrease (the request alone waits)
//! ```

use super::config::PacingConfig;
use super::rate::Ramp;
use super::schedule::{Growth, Resend, Schedule};
use crate::random::uniform;
use rand::rngs::SmallRng;
use std::collections::VecDeque;
use std::task::Waker;
use std::time::Duration;
use tokio::time::Instant;

/// What the endpoint is doing, as [`PacingStats`](crate::pacing::PacingStats) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PacingMode {
    /// Healthy: requests go through on their own timers.
    Open,
    /// Down: waiting requests are let through one probe at a time, at the probe rate.
    Probing,
    /// Recovering: waiting requests are released at a rate that grows while losses stay low.
    Ramping,
    /// Told to wait by the endpoint (`Retry-After`): nothing is released until the pause ends.
    Paused,
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

/// How a released request was let through; its outcome is recorded with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// One of the few requests in flight while the endpoint is down.
    Probe,
    /// Released by the rate (or the endpoint is open).
    Paced,
}

/// Whether the request at the head of the queue may go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    Now(Pass),
    /// Not before this instant.
    At(Instant),
    /// When a probe in flight finishes.
    Blocked,
}

/// Losses in one interval below this do not cut the rate, whatever their share.
const MIN_LOSSES_TO_CUT: u32 = 3;

/// The time between two releases at `rate` per second.
fn gap(rate: f64) -> Duration {
    Duration::from_secs_f64(1.0 / rate)
}

/// How far behind its schedule a ramp may release at once (see `try_release`).
const BURST_WINDOW: Duration = Duration::from_millis(10);

pub(crate) struct Waiter {
    pub(crate) id: u64,
    pub(crate) waker: Option<Waker>,
}

enum Mode {
    Open {
        congested_in_a_row: u32,
    },
    Probing {
        in_flight: u32,
    },
    Ramping {
        ramp: Ramp,
        /// Congestion outcomes since the last success: enough of them, with nothing taken for a
        /// whole interval, and the endpoint is down again.
        congested_in_a_row: u32,
        /// A hint came in this interval while the endpoint took requests: a rate signal, one
        /// cut when the interval closes.
        hinted: bool,
        /// The current measuring interval: when it started, successes and losses in it.
        interval_start: Instant,
        successes: u32,
        losses: u32,
        /// Since when the queue has been empty with no loss, if it is.
        idle_since: Option<Instant>,
        /// Losses before this instant do not cut the rate again: they answer requests released
        /// before the last cut, and one loss event deserves one cut.
        cut_settles_at: Instant,
        /// Successes per second in the last interval that closed.
        last_accepted: f64,
    },
    Paused {
        until: Instant,
        /// The ramp to resume with after the pause: the one that was running, cut as for a
        /// loss. `None` when none was (the release then ramps from the probe rate).
        resume: Option<Ramp>,
    },
}

pub(crate) struct EndpointState {
    mode: Mode,
    /// The earliest next release while probing or paused.
    next_release: Instant,
    /// While ramping: the slot of the last release. The next is due one gap (at the rate *now*)
    /// later, so a rate that grows brings the next release forward.
    last_slot: Instant,
    pub(crate) queue: VecDeque<Waiter>,
    next_id: u64,
    rng: SmallRng,
    pub(crate) probes: u64,
    pub(crate) deferred: u64,
    /// When the endpoint last took a request (answered a success), if it ever did.
    last_success: Option<Instant>,
    /// The rate the endpoint took at its last loss (a ramp's cut), per second: what a ramp
    /// after the next outage is predicted to reach.
    capacity: Option<f64>,
    /// The predicted release of the last place a request turned away was given: the next one
    /// turned away takes the place after it (or after the queue, if that is later), so a burst
    /// of them is spread over the predicted releases; the places before it drain as the
    /// schedule moves on (or as those requests come back and join the queue).
    horizon: Instant,
}

impl EndpointState {
    pub(crate) fn new(now: Instant, rng: SmallRng) -> Self {
        Self {
            mode: Mode::Open {
                congested_in_a_row: 0,
            },
            next_release: now,
            last_slot: now,
            queue: VecDeque::new(),
            next_id: 0,
            rng,
            probes: 0,
            deferred: 0,
            last_success: None,
            capacity: None,
            horizon: now,
        }
    }

    pub(crate) fn mode(&self) -> PacingMode {
        match self.mode {
            Mode::Open { .. } => PacingMode::Open,
            Mode::Probing { .. } => PacingMode::Probing,
            Mode::Ramping { .. } => PacingMode::Ramping,
            Mode::Paused { .. } => PacingMode::Paused,
        }
    }

    /// Whether requests to the endpoint wait in the queue now (rather than on their own timers).
    pub(crate) fn is_paced(&self) -> bool {
        !matches!(self.mode, Mode::Open { .. })
    }

    /// The release rate now, per second (0 while open: unpaced).
    pub(crate) fn rate(&self, config: &PacingConfig) -> f64 {
        match &self.mode {
            Mode::Open { .. } => 0.0,
            Mode::Probing { .. } | Mode::Paused { .. } => config.rate.floor,
            Mode::Ramping { ramp, .. } => ramp.rate(&config.rate),
        }
    }

    /// Joins the queue: its id, or `None` when the queue is full.
    pub(crate) fn enqueue(&mut self, config: &PacingConfig) -> Option<u64> {
        if self.queue.len() >= config.max_waiters {
            self.deferred += 1;
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back(Waiter { id, waker: None });
        crate::telemetry::queue_joined();
        Some(id)
    }

    /// Leaves the queue (a dropped or aborted waiter); wakes the new head if it was the head.
    pub(crate) fn remove(&mut self, id: u64) {
        let was_head = self.queue.front().is_some_and(|w| w.id == id);
        let before = self.queue.len();
        self.queue.retain(|w| w.id != id);
        crate::telemetry::queue_left(before - self.queue.len());
        if was_head {
            self.wake_head();
        }
    }

    pub(crate) fn wake_head(&mut self) {
        if let Some(waker) = self.queue.front_mut().and_then(|w| w.waker.take()) {
            waker.wake();
        }
    }

    /// When the pacer is predicted to release each place of the queue, from `now`: at once
    /// while open; while ramping, from the current rate, doubling every interval in slow start
    /// up to the rate the endpoint took at its last loss, or after a loss regaining that loss's
    /// rate by the end of the regain time; from the next probe (or the end of the pause) while
    /// down or paused, as the ramp it will start (or resume) would.
    pub(crate) fn schedule(&self, config: &PacingConfig, now: Instant) -> Schedule {
        let floor = config.rate.floor;
        let doubling = Growth::Doubling {
            interval: config.ramp_interval,
            cap: self.capacity.unwrap_or(config.rate.ceiling),
        };
        let from = |first: Instant, ramp: Option<&Ramp>| match ramp {
            None => Schedule {
                first: first.max(now),
                rate: floor,
                growth: doubling,
            },
            Some(ramp) => Schedule {
                first: first.max(now),
                rate: ramp.rate(&config.rate),
                growth: match *ramp {
                    Ramp::SlowStart { .. } => doubling,
                    Ramp::Cubic {
                        last_max,
                        since_loss_secs,
                    } => Growth::Step {
                        after: Duration::from_secs_f64(
                            (config.rate.regain_secs - since_loss_secs).max(0.0),
                        ),
                        to: last_max,
                    },
                },
            },
        };
        match &self.mode {
            Mode::Open { .. } => Schedule::now(now),
            Mode::Probing { .. } => from(self.next_release, None),
            Mode::Paused { until, resume } => {
                from((*until).max(self.next_release), resume.as_ref())
            }
            Mode::Ramping { ramp, .. } => {
                from(self.last_slot + gap(ramp.rate(&config.rate)), Some(ramp))
            }
        }
    }

    /// The predicted wait of a request that joins the queue now at `position` (0: the head).
    pub(crate) fn predicted_wait(
        &self,
        config: &PacingConfig,
        position: usize,
        now: Instant,
    ) -> Duration {
        self.schedule(config, now)
            .release_at(position as f64)
            .saturating_duration_since(now)
    }

    /// When a request the queue cannot take (full, or its predicted wait beyond its deadline)
    /// should be sent again, from `now`: at the predicted release of the next place behind the
    /// queue and behind the requests turned away before it whose time is still to come, plus a
    /// jitter within that place's gap. A burst turned away together is so spread over the
    /// predicted releases instead of coming back in one instant, and never inside a known pause
    /// (nothing is released before it ends). Takes the place (see
    /// [`take_turn_away`](Self::take_turn_away)).
    pub(crate) fn turn_away(&mut self, config: &PacingConfig, now: Instant) -> Resend {
        let resend = self.peek_turn_away(config, now);
        self.take_turn_away(config, now);
        resend
    }

    /// What [`turn_away`](Self::turn_away) would say, without taking the place (a first
    /// attempt turned away is sent instead, unless its classifier hands it back unsent).
    pub(crate) fn peek_turn_away(&self, config: &PacingConfig, now: Instant) -> Resend {
        let schedule = self.schedule(config, now);
        self.resend_on(&schedule, self.turn_away_position(&schedule, now), now)
    }

    /// Takes the next place behind the queue for a request turned away at `now`.
    pub(crate) fn take_turn_away(&mut self, config: &PacingConfig, now: Instant) {
        let schedule = self.schedule(config, now);
        let at = schedule.release_at(self.turn_away_position(&schedule, now));
        self.horizon = self.horizon.max(at);
    }

    /// The place a request turned away at `now` takes: after the queue, and after the last
    /// place given to a request turned away before it, while that one's time is to come.
    fn turn_away_position(&self, schedule: &Schedule, now: Instant) -> f64 {
        let behind_queue = self.queue.len() as f64;
        if self.horizon > now {
            behind_queue.max(schedule.released_by(self.horizon) + 1.0)
        } else {
            behind_queue
        }
    }

    /// When a request at `position` (in the queue, or the place behind it a request turned away
    /// takes) should be sent again, from `now`: its place's predicted release, spread within the
    /// place's gap.
    pub(crate) fn resend_from(
        &self,
        config: &PacingConfig,
        position: usize,
        now: Instant,
    ) -> Resend {
        self.resend_on(&self.schedule(config, now), position as f64, now)
    }

    fn resend_on(&self, schedule: &Schedule, position: f64, now: Instant) -> Resend {
        Resend {
            after: schedule.release_at(position).saturating_duration_since(now),
            spread: schedule.gap_at(position),
        }
    }

    /// Whether the endpoint takes requests: it answered a success within the last measuring
    /// interval. (What "nothing gets through" means below: a hint pauses the whole endpoint,
    /// and a run of congestion while ramping is an outage.)
    fn takes_requests(&self, config: &PacingConfig, now: Instant) -> bool {
        self.last_success
            .is_some_and(|at| now.saturating_duration_since(at) < config.ramp_interval)
    }

    /// Whether the head of the queue may go at `now`. Taking a release moves the schedule on.
    pub(crate) fn try_release(&mut self, config: &PacingConfig, now: Instant) -> Release {
        self.tick(config, now);
        match &mut self.mode {
            Mode::Open { .. } => Release::Now(Pass::Paced),
            Mode::Paused { until, .. } => Release::At(*until),
            Mode::Probing { in_flight } => {
                if *in_flight >= config.probes_in_flight {
                    Release::Blocked
                } else if now < self.next_release {
                    Release::At(self.next_release)
                } else {
                    *in_flight += 1;
                    self.probes += 1;
                    let interval = config.probe_interval;
                    // Jittered, so that a fleet that lost the endpoint together does not probe
                    // in step.
                    let gap = uniform(interval / 2, interval + interval / 2, &mut self.rng);
                    self.next_release = now + gap;
                    Release::Now(Pass::Probe)
                }
            }
            Mode::Ramping { ramp, .. } => {
                let due = self.last_slot + gap(ramp.rate(&config.rate));
                if now < due {
                    return Release::At(due);
                }
                // Releases due since the last one go now, up to a short window's worth: a timer
                // wakes the queue at most once a millisecond, so a rate above 1,000/s needs a
                // few releases per wake; an idle moment does not save up a burst beyond that.
                self.last_slot = due.max(now.checked_sub(BURST_WINDOW).unwrap_or(now));
                Release::Now(Pass::Paced)
            }
        }
    }

    /// Records what an outcome says. `pass` is how the attempt was released (`None`: it was
    /// not paced). Returns whether the head of the queue should look again.
    pub(crate) fn record(
        &mut self,
        config: &PacingConfig,
        pass: Option<Pass>,
        signal: Signal,
        now: Instant,
    ) -> bool {
        self.tick(config, now);
        let mut changed = false;
        if signal == Signal::Success {
            self.last_success = Some(now);
        }
        if let (Some(Pass::Probe), Mode::Probing { in_flight }) = (pass, &mut self.mode) {
            *in_flight = in_flight.saturating_sub(1);
            changed = true;
        }
        let mut down = false;
        match (&mut self.mode, signal) {
            (Mode::Open { congested_in_a_row }, Signal::Congestion) => {
                *congested_in_a_row += 1;
                if *congested_in_a_row >= config.outage_after {
                    self.enter_probing(config, now);
                    changed = true;
                }
            }
            (Mode::Open { congested_in_a_row }, Signal::Success) => *congested_in_a_row = 0,
            (Mode::Probing { .. }, Signal::Success) => {
                self.enter_ramping(config, now);
                changed = true;
            }
            (
                Mode::Ramping {
                    ramp,
                    congested_in_a_row,
                    successes,
                    losses,
                    idle_since,
                    ..
                },
                signal,
            ) => match signal {
                Signal::Success => {
                    *successes += 1;
                    *congested_in_a_row = 0;
                    ramp.on_success(&config.rate, config.ramp_interval.as_secs_f64());
                    // The rate may have grown: the head recomputes when it is due.
                    changed = true;
                }
                Signal::Congestion => {
                    *losses += 1;
                    *congested_in_a_row += 1;
                    *idle_since = None;
                    // Down again: the same rule as for an open endpoint, once nothing has been
                    // taken for a whole interval (a limit that rejects in runs while it still
                    // takes requests is a rate to find, not an outage).
                    down = *congested_in_a_row >= config.outage_after;
                }
                Signal::Neutral => {}
            },
            _ => {}
        }
        if down && !self.takes_requests(config, now) {
            self.remember_capacity(config);
            self.enter_probing(config, now);
            changed = true;
        }
        changed
    }

    /// A hint (`Retry-After`) on one response, asking that request to wait until `until`
    /// (RFC 9110, section 10.2.3: how long the user agent ought to wait before a follow-up
    /// request; it says nothing of every other request). While the endpoint takes requests, it is
    /// a rate signal: a ramp is cut once, as for a loss (one cut per loss event), and the request
    /// alone waits its hint; an open endpoint (not known to be down: the outage rule decides
    /// that) has no rate to cut. When nothing gets through (down, paused, or ramping with
    /// nothing taken for an interval) the whole endpoint pauses until then. Returns whether it
    /// did.
    pub(crate) fn hinted(&mut self, config: &PacingConfig, until: Instant, now: Instant) -> bool {
        self.tick(config, now);
        let takes = self.takes_requests(config, now);
        match &mut self.mode {
            // Not known to be down: the hint is this request's alone.
            Mode::Open { .. } => false,
            Mode::Ramping { hinted, .. } if takes => {
                // Cut when the interval closes, from what the endpoint took in it: the interval
                // before it was measured at a rate the ramp has since doubled.
                *hinted = true;
                false
            }
            _ => {
                self.pause_until(config, until, now);
                self.is_paused(now)
            }
        }
    }

    fn is_paused(&self, now: Instant) -> bool {
        matches!(self.mode, Mode::Paused { until, .. } if until > now)
    }

    /// Keeps what the endpoint was seen to take (see `capacity`): the rate of the ramp's last
    /// loss, or else the rate its last measured interval took.
    fn remember_capacity(&mut self, config: &PacingConfig) {
        let taken = match &self.mode {
            Mode::Ramping {
                ramp,
                last_accepted,
                ..
            } => ramp
                .last_max()
                .or((*last_accepted > config.rate.floor).then_some(*last_accepted)),
            Mode::Paused { resume, .. } => resume.as_ref().and_then(Ramp::last_max),
            _ => None,
        };
        if let Some(taken) = taken {
            self.capacity = Some(taken.max(config.rate.floor));
        }
    }

    /// An empty budget while open: the endpoint is failing more than the budget allows, so it
    /// is paced instead of refusing its requests.
    pub(crate) fn budget_empty(&mut self, config: &PacingConfig, now: Instant) {
        if let Mode::Open { .. } = self.mode {
            self.enter_probing(config, now);
        }
    }

    /// The endpoint said when to come back: every request waits until then. The release
    /// afterwards ramps from the probe rate, so a hint shared by a herd cannot bring it back in
    /// one instant; or, when a ramp was running (the endpoint is taking a known rate and asks
    /// for less), from that ramp cut as for a loss.
    pub(crate) fn pause_until(&mut self, config: &PacingConfig, until: Instant, now: Instant) {
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
                cut.lose(&config.rate, *last_accepted);
                self.mode = Mode::Paused {
                    until,
                    resume: Some(cut),
                };
                self.remember_capacity(config);
                trace(PacingMode::Paused);
            }
            _ => {
                self.mode = Mode::Paused {
                    until,
                    resume: None,
                };
                trace(PacingMode::Paused);
            }
        }
    }

    /// A circuit breaker refused a request for `wait`: the endpoint pauses until the breaker
    /// lets a probe through. A zero wait (the breaker is half-open, its probe in flight) says
    /// nothing of when it is done: the pause is then a probe interval, jittered, so that the
    /// request is not let through and refused again in the same instant.
    pub(crate) fn breaker_refused(&mut self, config: &PacingConfig, wait: Duration, now: Instant) {
        let wait = if wait.is_zero() {
            let interval = config.probe_interval;
            uniform(interval / 2, interval + interval / 2, &mut self.rng)
        } else {
            wait
        };
        self.pause_until(config, now + wait, now);
    }

    /// Moves the mode on with time when it is read, not only when a request comes: what
    /// [`PacingStats`](crate::pacing::PacingStats) says and what eviction sees are true at `now`.
    pub(crate) fn advance(&mut self, config: &PacingConfig, now: Instant) {
        self.tick_for(config, now, 0);
    }

    /// Moves the mode on with time for a request asking to go (or reporting an outcome).
    fn tick(&mut self, config: &PacingConfig, now: Instant) {
        self.tick_for(config, now, 1);
    }

    /// Moves the mode on with time: a pause that ended, a measuring interval that closed, a
    /// ramp that kept up with the demand. `asking` requests in the queue (at most the one
    /// asking) still count as no demand.
    fn tick_for(&mut self, config: &PacingConfig, now: Instant, asking: usize) {
        let queue_empty = self.queue.len() <= asking;
        if let Mode::Paused { until, resume } = self.mode {
            if now >= until {
                // Read late (no request came when it ended), the pause ended at `until`, and the
                // endpoint has had no demand since: it ramps, and opens, as it would have then.
                self.enter_ramping(config, until);
                if let Mode::Ramping { idle_since, .. } = &mut self.mode {
                    *idle_since = queue_empty.then_some(until);
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
                    *last_accepted = cut.rate(&config.rate);
                }
            }
        }
        let Mode::Ramping {
            ramp,
            interval_start,
            successes,
            losses,
            idle_since,
            cut_settles_at,
            last_accepted,
            hinted,
            ..
        } = &mut self.mode
        else {
            return;
        };
        let interval = config.ramp_interval;
        while now >= *interval_start + interval {
            let total = *successes + *losses;
            *last_accepted = f64::from(*successes) / interval.as_secs_f64();
            let loss = if total == 0 {
                0.0
            } else {
                f64::from(*losses) / f64::from(total)
            };
            // A loss or two at a low rate is noise (a stray 503), not the endpoint's limit; a
            // hint is the endpoint's own word that it takes less.
            if (loss > config.loss_threshold && *losses >= MIN_LOSSES_TO_CUT) || *hinted {
                if *interval_start >= *cut_settles_at {
                    let accepted = f64::from(*successes) / interval.as_secs_f64();
                    ramp.lose(&config.rate, accepted);
                    *cut_settles_at = *interval_start + interval * 2;
                    if let Some(max) = ramp.last_max() {
                        self.capacity = Some(max);
                    }
                }
            } else {
                ramp.interval_passed(interval.as_secs_f64());
            }
            *successes = 0;
            *losses = 0;
            *hinted = false;
            *interval_start += interval;
            if now >= *interval_start + interval * 8 {
                // A long quiet spell: skip to the current interval instead of looping.
                *interval_start = now;
            }
        }
        if queue_empty {
            let since = *idle_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= config.idle_to_open {
                self.mode = Mode::Open {
                    congested_in_a_row: 0,
                };
                trace(PacingMode::Open);
            }
        } else {
            *idle_since = None;
        }
    }

    fn enter_probing(&mut self, config: &PacingConfig, now: Instant) {
        self.mode = Mode::Probing { in_flight: 0 };
        let interval = config.probe_interval;
        self.next_release = now + uniform(interval / 2, interval + interval / 2, &mut self.rng);
        trace(PacingMode::Probing);
    }

    fn enter_ramping(&mut self, config: &PacingConfig, now: Instant) {
        self.mode = Mode::Ramping {
            ramp: Ramp::start(&config.rate),
            congested_in_a_row: 0,
            hinted: false,
            interval_start: now,
            successes: 0,
            losses: 0,
            idle_since: None,
            cut_settles_at: now,
            last_accepted: 0.0,
        };
        // The next waiter may go at once: the endpoint just answered.
        self.last_slot = now.checked_sub(gap(config.rate.floor)).unwrap_or(now);
        trace(PacingMode::Ramping);
    }
}

fn trace(mode: PacingMode) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "tower_http_retry::pacer", ?mode, "endpoint pacing");
    crate::telemetry::pacer_mode(mode);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::Pacing;
    use rand::SeedableRng;

    const MS: Duration = Duration::from_millis(1);

    fn config() -> PacingConfig {
        Pacing::new().config().clone()
    }

    fn state(now: Instant) -> EndpointState {
        EndpointState::new(now, SmallRng::seed_from_u64(1))
    }

    fn down(config: &PacingConfig, now: Instant) -> EndpointState {
        let mut s = state(now);
        for _ in 0..config.outage_after {
            s.record(config, None, Signal::Congestion, now);
        }
        assert_eq!(s.mode(), PacingMode::Probing);
        s
    }

    #[test]
    fn congestion_in_a_row_turns_an_open_endpoint_to_probing() {
        let config = config();
        let now = Instant::now();
        let mut s = state(now);
        for _ in 1..config.outage_after {
            s.record(&config, None, Signal::Congestion, now);
        }
        s.record(&config, None, Signal::Success, now);
        s.record(&config, None, Signal::Congestion, now);
        assert_eq!(s.mode(), PacingMode::Open, "a success resets the run");
        let _ = down(&config, now);
    }

    #[test]
    fn probing_lets_a_bounded_number_through_at_the_probe_rate() {
        let config = config();
        let start = Instant::now();
        let mut s = down(&config, start);
        let mut now = start;
        let mut probes = Vec::new();
        for _ in 0..100 {
            match s.try_release(&config, now) {
                Release::Now(pass) => {
                    assert_eq!(pass, Pass::Probe);
                    probes.push(now);
                    // The probe fails at once.
                    s.record(&config, Some(pass), Signal::Congestion, now);
                }
                Release::At(at) => now = at,
                Release::Blocked => panic!("no probe is in flight"),
            }
            if now > start + 10 * 1000 * MS {
                break;
            }
        }
        let per_second = probes.len() as f64 / 10.0;
        let nominal = 1.0 / config.probe_interval.as_secs_f64();
        assert!(
            per_second > nominal * 0.6 && per_second < nominal * 1.5,
            "{per_second}/s"
        );
    }

    #[test]
    fn probes_in_flight_are_bounded() {
        let config = config();
        let now = Instant::now();
        let mut s = down(&config, now);
        let later = now + 60 * 1000 * MS;
        let mut passes = 0;
        loop {
            match s.try_release(&config, later + passes * 1000 * MS) {
                Release::Now(_) => passes += 1,
                Release::Blocked => break,
                Release::At(_) => panic!("time was given"),
            }
        }
        assert_eq!(
            passes,
            u32::from(config.probes_in_flight > 0) * config.probes_in_flight
        );
    }

    #[test]
    fn a_successful_probe_starts_a_ramp_that_doubles_per_interval() {
        let config = config();
        let now = Instant::now();
        let mut s = down(&config, now);
        s.record(&config, Some(Pass::Probe), Signal::Success, now);
        assert_eq!(s.mode(), PacingMode::Ramping);
        s.queue.push_back(Waiter { id: 0, waker: None });
        // Each success of a released request adds `1 / interval`: a rate whose releases all
        // succeed doubles every interval (rate.rs checks the doubling itself).
        let floor = s.rate(&config);
        for n in 1..=3 {
            s.record(&config, Some(Pass::Paced), Signal::Success, now);
            let expected = floor + f64::from(n) / config.ramp_interval.as_secs_f64();
            assert!(
                (s.rate(&config) - expected).abs() < 1e-9,
                "{}",
                s.rate(&config)
            );
        }
    }

    #[test]
    fn losses_above_the_threshold_cut_the_rate_to_a_fraction_of_what_was_accepted() {
        let config = config();
        let now = Instant::now();
        let mut s = down(&config, now);
        s.record(&config, Some(Pass::Probe), Signal::Success, now);
        s.queue.push_back(Waiter { id: 0, waker: None });
        for _ in 0..10 {
            s.record(&config, Some(Pass::Paced), Signal::Success, now);
        }
        for _ in 0..10 {
            s.record(&config, Some(Pass::Paced), Signal::Congestion, now);
        }
        s.tick(&config, now + config.ramp_interval);
        let accepted = 10.0 / config.ramp_interval.as_secs_f64();
        let expected = (accepted * config.rate.decrease).max(config.rate.floor);
        assert!(
            (s.rate(&config) - expected).abs() < 1e-6,
            "{}",
            s.rate(&config)
        );
    }

    #[test]
    fn a_pause_holds_every_release_then_ramps_from_the_probe_rate() {
        let config = config();
        let now = Instant::now();
        let mut s = state(now);
        let until = now + 5000 * MS;
        s.pause_until(&config, until, now);
        assert_eq!(s.try_release(&config, now), Release::At(until));
        s.queue.push_back(Waiter { id: 0, waker: None });
        assert_eq!(s.try_release(&config, until), Release::Now(Pass::Paced));
        assert_eq!(s.mode(), PacingMode::Ramping);
        assert_eq!(s.rate(&config), config.rate.floor);
    }

    #[test]
    fn a_pause_read_long_after_it_ended_has_ended_and_with_no_demand_opened() {
        let config = config();
        let now = Instant::now();
        let mut s = state(now);
        let until = now + 1000 * MS;
        s.pause_until(&config, until, now);
        s.advance(&config, until + 10 * MS);
        assert_eq!(s.mode(), PacingMode::Ramping, "the pause is over");
        s.advance(&config, until + config.idle_to_open);
        assert_eq!(s.mode(), PacingMode::Open, "no demand since it ended");
        let mut s = state(now);
        s.pause_until(&config, until, now);
        s.advance(&config, until + 3600 * 1000 * MS);
        assert_eq!(s.mode(), PacingMode::Open, "read an hour later");
    }

    #[test]
    fn an_idle_ramp_opens_the_endpoint() {
        let config = config();
        let now = Instant::now();
        let mut s = down(&config, now);
        s.record(&config, Some(Pass::Probe), Signal::Success, now);
        s.tick(&config, now);
        s.tick(&config, now + config.idle_to_open);
        assert_eq!(s.mode(), PacingMode::Open);
    }

    #[test]
    fn a_full_queue_refuses_to_enqueue() {
        let mut config = config();
        config.max_waiters = 2;
        let mut s = state(Instant::now());
        assert!(s.enqueue(&config).is_some());
        assert!(s.enqueue(&config).is_some());
        assert!(s.enqueue(&config).is_none());
        assert_eq!(s.deferred, 1);
    }

    #[test]
    fn one_loss_event_cuts_the_rate_once() {
        let config = config();
        let now = Instant::now();
        let mut s = down(&config, now);
        s.record(&config, Some(Pass::Probe), Signal::Success, now);
        s.queue.push_back(Waiter { id: 0, waker: None });
        let mut at = now;
        let mut rates = Vec::new();
        // Two intervals in a row with half their requests lost: the second answers requests
        // released before the first cut.
        for _ in 0..2 {
            for _ in 0..10 {
                s.record(&config, Some(Pass::Paced), Signal::Success, at);
                s.record(&config, Some(Pass::Paced), Signal::Congestion, at);
            }
            at += config.ramp_interval;
            s.tick(&config, at);
            rates.push(s.rate(&config));
        }
        assert!(rates[1] >= rates[0], "cut twice: {rates:?}");
    }

    #[test]
    fn a_pause_during_a_ramp_resumes_from_the_ramp_cut_not_from_the_probe_rate() {
        let config = config();
        let now = Instant::now();
        let mut s = down(&config, now);
        s.record(&config, Some(Pass::Probe), Signal::Success, now);
        s.queue.push_back(Waiter { id: 0, waker: None });
        for _ in 0..100 {
            s.record(&config, Some(Pass::Paced), Signal::Success, now);
        }
        let at = now + config.ramp_interval;
        s.tick(&config, at); // 100 successes in the interval: 1,000/s accepted
        let until = at + 1000 * MS;
        s.pause_until(&config, until, at);
        assert_eq!(s.mode(), PacingMode::Paused);
        assert_eq!(s.try_release(&config, until), Release::Now(Pass::Paced));
        let expected = 1000.0 * config.rate.decrease;
        assert!(
            (s.rate(&config) - expected).abs() < 1e-6,
            "{}",
            s.rate(&config)
        );
    }

    #[test]
    fn a_rate_that_grows_brings_the_next_release_forward() {
        let config = config();
        let now = Instant::now();
        let mut s = down(&config, now);
        s.record(&config, Some(Pass::Probe), Signal::Success, now);
        s.queue.push_back(Waiter { id: 0, waker: None });
        assert_eq!(
            s.try_release(&config, now),
            Release::Now(Pass::Paced),
            "at once"
        );
        let Release::At(slow) = s.try_release(&config, now) else {
            panic!("the floor rate's gap")
        };
        s.record(&config, Some(Pass::Paced), Signal::Success, now);
        let Release::At(fast) = s.try_release(&config, now) else {
            panic!("a gap at the grown rate")
        };
        assert!(fast < slow, "{fast:?} not before {slow:?}");
    }

    /// Ramping after a probe's success, with 100 successes in the interval that just closed
    /// (1,000/s taken) and one more just now; a waiter keeps it from opening.
    fn ramping_at_1000(config: &PacingConfig, now: Instant) -> (EndpointState, Instant) {
        let mut s = down(config, now);
        s.record(config, Some(Pass::Probe), Signal::Success, now);
        s.queue.push_back(Waiter { id: 0, waker: None });
        for _ in 0..100 {
            s.record(config, Some(Pass::Paced), Signal::Success, now);
        }
        let at = now + config.ramp_interval;
        s.record(config, Some(Pass::Paced), Signal::Success, at);
        assert_eq!(s.mode(), PacingMode::Ramping);
        (s, at)
    }

    #[test]
    fn a_hint_while_the_endpoint_takes_requests_cuts_the_ramp_once_and_pauses_nothing() {
        let config = config();
        let (mut s, at) = ramping_at_1000(&config, Instant::now());
        assert!(
            !s.hinted(&config, at + 1000 * MS, at),
            "a rate signal, not a pause"
        );
        assert_eq!(s.mode(), PacingMode::Ramping);
        // More hints in the same interval, and 150 more successes (1,510/s taken in all).
        for _ in 0..20 {
            assert!(!s.hinted(&config, at + 1000 * MS, at + MS));
        }
        for _ in 0..150 {
            s.record(&config, Some(Pass::Paced), Signal::Success, at + 2 * MS);
        }
        let before = s.rate(&config);
        // One cut, when the interval closes, from what the endpoint took in it.
        s.tick(&config, at + config.ramp_interval);
        let cut = s.rate(&config);
        assert!(cut < before, "{cut} not below {before}");
        assert!((cut - 1510.0 * config.rate.decrease).abs() < 1.0, "{cut}");
        assert!(
            s.capacity.is_some_and(|c| (c - 1510.0).abs() < 1.0),
            "{:?}",
            s.capacity
        );
        s.tick(&config, at + config.ramp_interval * 2);
        assert!(s.rate(&config) >= cut, "cut once");
    }

    #[test]
    fn a_hint_when_nothing_gets_through_pauses_the_whole_endpoint() {
        let config = config();
        let now = Instant::now();
        // Down: probing.
        let mut s = down(&config, now);
        assert!(s.hinted(&config, now + 1000 * MS, now));
        assert_eq!(
            s.try_release(&config, now + 999 * MS),
            Release::At(now + 1000 * MS)
        );
        // Ramping, but nothing taken for a whole interval.
        let (mut s, at) = ramping_at_1000(&config, now);
        let later = at + config.ramp_interval;
        assert!(s.hinted(&config, later + 1000 * MS, later));
        assert_eq!(s.mode(), PacingMode::Paused);
    }

    #[test]
    fn a_hint_to_an_open_endpoint_pauses_nothing() {
        let config = config();
        let now = Instant::now();
        // Taking requests, or not known yet: the outage rule, not one hint, says it is down.
        let mut s = state(now);
        s.record(&config, None, Signal::Success, now);
        s.record(&config, None, Signal::Congestion, now + MS);
        assert!(!s.hinted(&config, now + 1000 * MS, now + MS));
        assert_eq!(s.mode(), PacingMode::Open);
        let mut fresh = state(now);
        assert!(!fresh.hinted(&config, now + 1000 * MS, now));
        assert_eq!(fresh.mode(), PacingMode::Open);
    }

    #[test]
    fn congestion_in_a_row_while_ramping_with_nothing_taken_for_an_interval_is_an_outage() {
        let config = config();
        let (mut s, at) = ramping_at_1000(&config, Instant::now());
        let after = at + config.ramp_interval;
        for i in 1..config.outage_after {
            s.record(&config, Some(Pass::Paced), Signal::Congestion, after);
            assert_eq!(s.mode(), PacingMode::Ramping, "{i} in a row");
        }
        s.record(&config, Some(Pass::Paced), Signal::Congestion, after);
        assert_eq!(
            s.mode(),
            PacingMode::Probing,
            "down again, probed as in a fresh start"
        );
        // The next outage's ramp is predicted to reach what this one took at its loss.
        assert!(
            s.capacity.is_some_and(|c| c > config.rate.floor),
            "{:?}",
            s.capacity
        );
    }

    #[test]
    fn runs_of_congestion_between_successes_while_ramping_are_a_rate_to_find_not_an_outage() {
        let config = config();
        let (mut s, mut at) = ramping_at_1000(&config, Instant::now());
        // A limit that admits in steps: 20 rejections in a row, then successes, every 10 ms.
        for _ in 0..50 {
            for _ in 0..20 {
                s.record(&config, Some(Pass::Paced), Signal::Congestion, at);
            }
            s.record(&config, Some(Pass::Paced), Signal::Success, at);
            at += 10 * MS;
        }
        assert_eq!(s.mode(), PacingMode::Ramping);
    }

    #[test]
    fn a_down_endpoint_predicts_slow_start_from_the_next_probe_up_to_its_last_known_rate() {
        let config = config();
        let now = Instant::now();
        let s = down(&config, now);
        let first = s.predicted_wait(&config, 0, now);
        assert!(first <= config.probe_interval * 3 / 2, "{first:?}");
        // 2/s doubling every 100 ms: 295 places in about a second after the first release.
        let ramp = s.predicted_wait(&config, 295, now) - first;
        assert!((900 * MS..=1100 * MS).contains(&ramp), "{ramp:?}");
        // With a known rate of 1,000/s, the places past the slow start go at it.
        let mut known = down(&config, now);
        known.capacity = Some(1000.0);
        let tail =
            known.predicted_wait(&config, 10_000, now) - known.predicted_wait(&config, 9_000, now);
        assert!((990 * MS..=1010 * MS).contains(&tail), "{tail:?}");
    }

    #[test]
    fn requests_turned_away_together_are_spread_over_the_predicted_releases() {
        let mut config = config();
        config.max_waiters = 1;
        let now = Instant::now();
        let mut s = down(&config, now);
        s.capacity = Some(100.0);
        assert!(s.enqueue(&config).is_some());
        let resends: Vec<Resend> = (0..500).map(|_| s.turn_away(&config, now)).collect();
        let first = resends[0].after;
        let last = resends[499].after;
        // 500 places behind the queue at up to 100/s: about 5 s, less the slow start's head.
        assert!(
            last - first >= Duration::from_secs(4),
            "{first:?} to {last:?}"
        );
        assert!(resends.windows(2).all(|w| w[1].after >= w[0].after));
        assert!(resends.iter().all(|r| r.spread > Duration::ZERO));
        // Once the last of them is due, the places are free again.
        let later = now + last + MS;
        assert!(s.turn_away(&config, later).after <= s.predicted_wait(&config, 1, later));
    }

    #[test]
    fn a_resend_time_never_falls_inside_a_known_pause() {
        let mut config = config();
        config.max_waiters = 1;
        let now = Instant::now();
        let mut s = state(now);
        let until = now + 5000 * MS;
        s.pause_until(&config, until, now);
        assert!(s.enqueue(&config).is_some());
        for _ in 0..100 {
            let resend = s.turn_away(&config, now);
            assert!(now + resend.after >= until, "{resend:?}");
        }
        assert!(now + s.resend_from(&config, 0, now).after >= until);
    }
}
