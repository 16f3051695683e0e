//! One endpoint as a process holds it: the shared state of its rules (`shared/`), kept here
//! when the process paces alone or as a replica of the fleet's when a store keeps it, and what
//! only the process can hold: its queue of waiting requests and their wakers, its own run of
//! congestion outcomes, the places it gave requests it turned away, and with a store, what
//! its [`Link`] holds (unused slots, a probe granted, events not sent yet; `fleet.rs` is what
//! the endpoint does with it). Every method takes
//! `now`, so the state machine is unit-tested without a runtime.

mod fleet;
mod link;

pub(crate) use link::{Link, StoreNext};

use super::clock::{Clock, Nanos};
use super::limit::Limit;
use super::mode::{trace, PacingMode};
use super::pass::{Pass, Release};
use super::rules::PacingRules;
use super::schedule::{Resend, Schedule};
use super::shared::{Batch, Grant, Mode, Rules, SharedState, Signal};
use super::store::Lease;
use crate::random::uniform;
use crate::telemetry::Labels;
use rand::rngs::SmallRng;
use rand::RngExt;
use std::collections::VecDeque;
use std::task::Waker;
use std::time::Duration;
use tokio::time::Instant;

/// How late the head of a queue may ask for its release and still be on time: the timer's
/// resolution (1 ms) and as long again for the woken task to run. A later head owes the slots of
/// this slack, not of the spell past it.
const WAKE_SLACK: Nanos = 2_000_000;

pub(crate) struct Waiter {
    pub(crate) id: u64,
    pub(crate) waker: Option<Waker>,
}

pub(crate) struct EndpointState {
    /// The rules' state: this process's own, or its replica of the fleet's.
    pub(crate) shared: SharedState,
    /// Local instants in the shared state's time.
    pub(crate) clock: Clock,
    pub(crate) queue: VecDeque<Waiter>,
    /// When the queue last went from empty to waited on: the slots that passed before were
    /// nobody's to take.
    queued_since: Instant,
    next_id: u64,
    pub(crate) rng: SmallRng,
    pub(crate) probes: u64,
    pub(crate) deferred: u64,
    /// The process's own congestion outcomes in a row while the endpoint is open or ramping
    /// (since its last success or change of mode): enough of them, and it is down.
    pub(crate) run: u32,
    /// The predicted release of the last place a request turned away was given: the next one
    /// turned away takes the place after it (or after the queue, if that is later), so a burst
    /// of them is spread over the predicted releases; the places before it drain as the
    /// schedule moves on (or as those requests come back and join the queue).
    horizon: Instant,
    /// Alone: the smoothed round trip of the paced requests the endpoint took (TCP's SRTT,
    /// RFC 6298, timed on answered requests only, as Karn's algorithm does), in nanoseconds:
    /// the releases made within one round trip after a cut met the load released before it.
    round_trip: Option<Nanos>,
    /// Alone: the latest the head of the queue asks on time, if it was told when (the release
    /// it waits for, or now for the next head after a release, and [`WAKE_SLACK`]). Any next
    /// call takes it; one that finds nobody waiting owes nothing anyway.
    woken_by: Option<Nanos>,
    /// With a store: what the process holds of the fleet's state beyond its replica.
    pub(crate) link: Option<Link>,
    /// The mode the paced endpoints' gauge counts this endpoint in (as its last settled
    /// change left it).
    gauged: PacingMode,
    /// The keys this endpoint's metrics are recorded under: the layer's, with the endpoint's
    /// authority when the layer lists it.
    pub(crate) labels: Labels,
    /// Whether a timer moves the endpoint on while nobody calls it (see
    /// [`watch_idle`](Self::watch_idle)).
    pub(super) watched: bool,
    /// With adaptive concurrency, the endpoint's limit on requests in flight.
    pub(crate) limit: Option<Limit>,
}

impl Drop for EndpointState {
    /// An endpoint forgotten (or its pacer dropped) leaves the paced endpoints' gauge, and its
    /// limit's gauges read 0.
    fn drop(&mut self) {
        let open = PacingMode::Open.as_str();
        crate::telemetry::paced_endpoint(&self.labels, self.gauged.as_str(), open);
        if self.limit.is_some() {
            crate::telemetry::concurrency(&self.labels, 0, 0, None);
        }
    }
}

impl EndpointState {
    pub(crate) fn new(now: Instant, rng: SmallRng, link: Option<Link>, labels: Labels) -> Self {
        Self {
            shared: SharedState::new(),
            clock: Clock::local(now),
            queue: VecDeque::new(),
            queued_since: now,
            next_id: 0,
            rng,
            probes: 0,
            deferred: 0,
            run: 0,
            horizon: now,
            round_trip: None,
            woken_by: None,
            link,
            gauged: PacingMode::Open,
            labels,
            watched: false,
            limit: None,
        }
    }

    /// Whether a timer should now start to move the endpoint on with time, which nobody else
    /// would do: it recovers (ramping, or paused on its way there) and no request waits, so its
    /// mode, its gauge and its stats would stay where the last call left them when traffic
    /// stops. Probing is left alone: nothing has said the endpoint is back. Marks it watched.
    pub(crate) fn watch_idle(&mut self) -> bool {
        let recovering = matches!(self.mode(), PacingMode::Ramping | PacingMode::Paused);
        let start = recovering && self.queue.is_empty() && !self.watched;
        self.watched |= start;
        start
    }

    /// The watch's timer fired at `now`: the endpoint moved on; whether to watch it further.
    pub(crate) fn watched_idle(&mut self, config: &PacingRules, now: Instant) -> bool {
        self.advance(config, now);
        let recovering = matches!(self.mode(), PacingMode::Ramping | PacingMode::Paused);
        self.watched = recovering && self.queue.is_empty();
        self.watched
    }

    pub(crate) fn mode(&self) -> PacingMode {
        self.shared.mode_kind()
    }

    /// Whether requests to the endpoint wait in the queue now (rather than on their own timers).
    pub(crate) fn is_paced(&self) -> bool {
        !self.shared.is_open()
    }

    /// Whether a success has nothing to tell the endpoint: it is open, counts no congestion in
    /// a row, and nobody waits in its queue. Recording a success changes nothing then, so the
    /// pacer lets a success skip every endpoint while all of them are so
    /// ([`Pacer::all_settled`](super::endpoints::Pacer::all_settled)).
    pub(crate) fn is_settled(&self) -> bool {
        self.shared.is_open() && self.run == 0 && self.queue.is_empty()
    }

    /// The release rate now, per second (0 while open: unpaced).
    pub(crate) fn rate(&self, config: &PacingRules) -> f64 {
        self.shared.rate(&self.rules(config))
    }

    /// The rules this process applies to its state: a process alone's, or with a store the
    /// fleet's (its replica is the fleet's state).
    pub(crate) fn rules<'a>(&self, config: &'a PacingRules) -> Rules<'a> {
        match self.link {
            None => Rules::alone(config),
            // The replica grants no probe: the store's leases are the store's.
            Some(_) => Rules::fleet(config, u64::MAX),
        }
    }

    fn at(&self, now: Instant) -> u64 {
        self.clock.to_shared(now)
    }

    /// Takes the modes the shared state entered: each is traced, and a new mode starts a new
    /// congestion run. Returns whether there was one.
    pub(crate) fn settle(&mut self) -> bool {
        let entered = self.shared.take_entered();
        if !entered.any() {
            return false;
        }
        self.run = 0;
        for mode in entered.each() {
            trace(&self.labels, mode);
        }
        self.gauge_mode();
        true
    }

    /// Moves the endpoint, in the paced endpoints' gauge, to the mode it is in now.
    fn gauge_mode(&mut self) {
        let mode = self.mode();
        if mode != self.gauged {
            crate::telemetry::paced_endpoint(&self.labels, self.gauged.as_str(), mode.as_str());
            self.gauged = mode;
        }
    }

    /// Joins the queue at `now`: its id, or `None` when the queue is full.
    pub(crate) fn enqueue(&mut self, config: &PacingRules, now: Instant) -> Option<u64> {
        if self.queue.len() >= config.max_waiters {
            self.deferred += 1;
            return None;
        }
        if self.queue.is_empty() {
            self.queued_since = now;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back(Waiter { id, waker: None });
        crate::telemetry::queue_joined(&self.labels);
        Some(id)
    }

    /// Leaves the queue (a dropped or aborted waiter); wakes the new head if it was the head.
    pub(crate) fn remove(&mut self, id: u64) {
        let was_head = self.queue.front().is_some_and(|w| w.id == id);
        let before = self.queue.len();
        self.queue.retain(|w| w.id != id);
        crate::telemetry::queue_left(&self.labels, before - self.queue.len());
        if was_head {
            self.wake_head();
        }
    }

    pub(crate) fn wake_head(&mut self) {
        if let Some(waker) = self.queue.front_mut().and_then(|w| w.waker.take()) {
            waker.wake();
        }
    }

    /// When the pacer is predicted to release each place of the fleet's queue (the shared
    /// state's [`schedule`](SharedState::schedule)), from `now`.
    pub(crate) fn schedule(&self, config: &PacingRules, now: Instant) -> Schedule {
        self.shared
            .schedule(&self.rules(config), self.clock, self.at(now))
    }

    /// How many places of the fleet's schedule one place of this process's queue stands for:
    /// the peers share the releases (1 for a process pacing alone).
    fn share(&self, now: Instant) -> f64 {
        f64::from(self.shared.active_peers(self.at(now)))
    }

    /// The predicted wait of a request that joins the queue now at `position` (0: the head).
    pub(crate) fn predicted_wait(
        &self,
        config: &PacingRules,
        position: usize,
        now: Instant,
    ) -> Duration {
        if let Some(limit) = self.limit.as_ref().filter(|_| self.shared.is_open()) {
            return limit.predicted_wait(position);
        }
        self.schedule(config, now)
            .release_at(position as f64 * self.share(now))
            .saturating_duration_since(now)
    }

    /// When a request the queue cannot take (full, or its predicted wait beyond its deadline)
    /// should be sent again, from `now`: at the predicted release of the next place behind the
    /// queue and behind the requests turned away before it whose time is still to come, plus a
    /// jitter within that place's gap. A burst turned away together is so spread over the
    /// predicted releases instead of coming back in one instant, and never inside a known pause
    /// (nothing is released before it ends). Takes the place (see
    /// [`take_turn_away`](Self::take_turn_away)).
    pub(crate) fn turn_away(&mut self, config: &PacingRules, now: Instant) -> Resend {
        let resend = self.peek_turn_away(config, now);
        self.take_turn_away(config, now);
        resend
    }

    /// What [`turn_away`](Self::turn_away) would say, without taking the place (a first
    /// attempt turned away is sent instead, unless its classifier hands it back unsent).
    pub(crate) fn peek_turn_away(&self, config: &PacingRules, now: Instant) -> Resend {
        let schedule = self.schedule(config, now);
        self.resend_on(&schedule, self.turn_away_position(&schedule, now), now)
    }

    /// Takes the next place behind the queue for a request turned away at `now`.
    pub(crate) fn take_turn_away(&mut self, config: &PacingRules, now: Instant) {
        let schedule = self.schedule(config, now);
        let position = self.turn_away_position(&schedule, now);
        let at = schedule.release_at(position * self.share(now));
        self.horizon = self.horizon.max(at);
    }

    /// The place a request turned away at `now` takes: after the queue, and after the last
    /// place given to a request turned away before it, while that one's time is to come.
    fn turn_away_position(&self, schedule: &Schedule, now: Instant) -> f64 {
        let behind_queue = self.queue.len() as f64;
        if self.horizon > now {
            behind_queue.max(schedule.released_by(self.horizon) / self.share(now) + 1.0)
        } else {
            behind_queue
        }
    }

    /// When a request at `position` (in the queue, or the place behind it a request turned away
    /// takes) should be sent again, from `now`: its place's predicted release, spread within the
    /// place's gap.
    pub(crate) fn resend_from(
        &self,
        config: &PacingRules,
        position: usize,
        now: Instant,
    ) -> Resend {
        self.resend_on(&self.schedule(config, now), position as f64, now)
    }

    fn resend_on(&self, schedule: &Schedule, position: f64, now: Instant) -> Resend {
        if let Some(limit) = self.limit.as_ref().filter(|_| self.shared.is_open()) {
            // Open, but over its limit: the place's turn for a place in flight, spread over
            // one round of the no-load latency.
            return Resend {
                after: limit.predicted_wait(position as usize),
                spread: limit.no_load().unwrap_or_default(),
            };
        }
        let share = self.share(now);
        let place = position * share;
        let gap = schedule.gap_at(place);
        Resend {
            after: schedule.release_at(place).saturating_duration_since(now),
            // This process's next place is `share` places of the fleet's later.
            spread: if share > 1.0 { gap.mul_f64(share) } else { gap },
        }
    }

    /// Whether the head of the queue may go at `now`. Taking a release moves the schedule on.
    pub(crate) fn try_release(&mut self, config: &PacingRules, now: Instant) -> Release {
        let Some(limit) = &self.limit else {
            return self.release(config, now);
        };
        if !limit.admits() {
            // Blocked until a request in flight finishes: its outcome wakes the head, which
            // then owes the slots the limit held (up to the burst window), as a head woken by
            // anything but its own timer does.
            self.woken_by = None;
            return Release::Blocked;
        }
        let release = self.release(config, now);
        if let (Release::Now(_), Some(limit)) = (release, &mut self.limit) {
            limit.sent();
            self.gauge_limit();
        }
        release
    }

    /// A request that went with adaptive concurrency came back after `latency` (`None`: it
    /// was cancelled), a `success` or not: a place in flight is free, and the head of the
    /// queue should look again.
    pub(crate) fn finished(&mut self, latency: Option<Duration>, success: bool, now: Instant) {
        if let Some(limit) = &mut self.limit {
            limit.finished(latency, success, now);
            self.gauge_limit();
        }
    }

    fn gauge_limit(&self) {
        if let Some(limit) = &self.limit {
            let (current, in_flight) = (limit.current(), limit.in_flight());
            crate::telemetry::concurrency(&self.labels, current, in_flight, limit.no_load());
        }
    }

    /// Whether the pacer lets the head of the queue go now, the limit aside.
    fn release(&mut self, config: &PacingRules, now: Instant) -> Release {
        if self.link.is_some() {
            return self.release_linked(config, now);
        }
        let rules = self.rules(config);
        let at = self.at(now);
        self.shared.advance(&rules, self.queue.len() > 1, at);
        self.settle();
        let mut waiting_since = if self.queue.is_empty() {
            at
        } else {
            self.at(self.queued_since)
        };
        // A head that asks more than the slack after it was due to be woken: the process did
        // not run meanwhile (its threads, or the machine's cores, were busy). The slots of that
        // spell are not owed: sent at once, they would reach the receiver as a burst past its
        // own limit, whose refusals would read as a capacity the endpoint is not at. The
        // schedule moves on by the spell past the slack, as after an idle moment.
        if self.woken_by.take().is_some_and(|on_time| at > on_time) {
            waiting_since = waiting_since.max(at.saturating_sub(WAKE_SLACK));
        }
        let rng = &mut self.rng;
        let batch = Batch::One { waiting_since };
        let grant = self.shared.release(&rules, 0, batch, at, || rng.random());
        self.settle();
        self.woken_by = match grant {
            Grant::At(t) => Some(t),
            // The next head is woken now.
            Grant::Slots { .. } if self.queue.len() > 1 => Some(at),
            _ => None,
        }
        .map(|t| t.saturating_add(WAKE_SLACK));
        match grant {
            Grant::Unpaced | Grant::Slots { .. } => Release::Now(Pass::Paced { released: at }),
            Grant::At(t) => Release::At(self.clock.to_local(t)),
            Grant::Blocked { .. } => Release::Blocked,
            Grant::Probe { lease, .. } => {
                self.probes += 1;
                Release::Now(Pass::Probe(Lease {
                    id: lease,
                    expires: now,
                    local: false,
                }))
            }
        }
    }

    /// Records what an outcome says. `pass` is how the attempt was released (`None`: it was
    /// not paced). Returns whether the head of the queue should look again.
    pub(crate) fn record(
        &mut self,
        config: &PacingRules,
        pass: Option<Pass>,
        signal: Signal,
        now: Instant,
    ) -> bool {
        let rules = self.rules(config);
        let at = self.at(now);
        self.shared.advance(&rules, self.queue.len() > 1, at);
        self.settle();
        let paced = self.is_paced();
        let lease = match pass {
            Some(Pass::Probe(lease)) => Some(lease),
            _ => None,
        };
        let mut changed = match pass {
            // Only a process alone knows when each of its requests went: a fleet's passes are
            // on clocks its store's answers replace, and its store hears outcomes in reports.
            Some(Pass::Paced { released }) if self.link.is_none() => {
                self.record_timed(&rules, signal, released, at)
            }
            _ => self.shared.outcome(&rules, signal, lease.map(|l| l.id), at),
        };
        let mut down = None;
        // A new mode (a probe's success starts a ramp): the outcome was the old mode's, and the
        // new mode's run starts at nothing.
        if !self.settle() && matches!(self.shared.mode, Mode::Open | Mode::Ramping { .. }) {
            match signal {
                Signal::Success => self.run = 0,
                Signal::Congestion => self.run += 1,
                Signal::Neutral => {}
            }
            if signal == Signal::Congestion && self.run >= config.outage_after {
                // Down (or down again while ramping, if nothing has been taken for an
                // interval). A store hears of it when this process's replica went down: a
                // run it saw while the fleet took requests is no outage, then or later.
                let rng = &mut self.rng;
                let went = self.shared.down(&rules, at, || {
                    let jitter = rng.random();
                    down = Some(jitter);
                    jitter
                });
                changed |= went;
                self.settle();
            }
        }
        if let Some(link) = &mut self.link {
            link.recorded(config, lease, signal, paced, down, now);
        }
        changed
    }

    /// Records the outcome of a request this process, pacing alone, released at `released`.
    /// A success times the round trip (a timeout or a cancelled request says nothing of it,
    /// and would hide the losses after the next cut for as long as it took). A loss of a
    /// request that went before the ramp's last cut, or within a round trip after it, when the
    /// endpoint still had the releases made before the cut to answer, is no news of the rate
    /// now: one cut per round trip, as TCP cuts once per window. A success counts whenever its
    /// request went: the successes are what the endpoint took, the rate a cut starts from.
    fn record_timed(
        &mut self,
        rules: &Rules<'_>,
        signal: Signal,
        released: Nanos,
        at: Nanos,
    ) -> bool {
        if signal == Signal::Success {
            let sample = at.saturating_sub(released);
            // RFC 6298's gain of 1/8.
            let smoothed = self.round_trip.map_or(sample, |rtt| {
                rtt.saturating_sub(rtt / 8).saturating_add(sample / 8)
            });
            self.round_trip = Some(smoothed);
        }
        let went = released.saturating_sub(self.round_trip.unwrap_or(0));
        let counted = match signal {
            Signal::Congestion if self.shared.released_before_cut(rules, went) => Signal::Neutral,
            _ => signal,
        };
        self.shared.timed_outcome(rules, counted, at)
    }

    /// A hint (`Retry-After`) on one response, asking that request to wait until `until`: see
    /// [`SharedState::hinted`]. Returns whether the whole endpoint paused.
    pub(crate) fn hinted(&mut self, config: &PacingRules, until: Instant, now: Instant) -> bool {
        let rules = self.rules(config);
        let at = self.at(now);
        self.shared.advance(&rules, self.queue.len() > 1, at);
        self.settle();
        let paused = self.shared.hinted(&rules, self.at(until), at);
        self.settle();
        if let Some(link) = &mut self.link {
            link.hinted(until, paused);
        }
        paused
    }

    /// An empty budget while open: the endpoint is failing more than the budget allows, so it
    /// is paced instead of refusing its requests.
    pub(crate) fn budget_empty(&mut self, config: &PacingRules, now: Instant) {
        if !self.shared.is_open() {
            return;
        }
        let jitter: f64 = self.rng.random();
        let rules = self.rules(config);
        self.shared.down(&rules, self.at(now), || jitter);
        self.settle();
        if let Some(link) = &mut self.link {
            link.down(jitter);
        }
    }

    /// The endpoint said when to come back: every request waits until then (see
    /// [`SharedState::pause_until`]).
    pub(crate) fn pause_until(&mut self, config: &PacingRules, until: Instant, now: Instant) {
        let rules = self.rules(config);
        self.shared
            .pause_until(&rules, self.at(until), self.at(now));
        self.settle();
        if let Some(link) = &mut self.link {
            if until > now {
                link.pause(until);
            }
        }
    }

    /// A circuit breaker refused a request for `wait`: the endpoint pauses until the breaker
    /// lets a probe through. A zero wait (the breaker is half-open, its probe in flight) says
    /// nothing of when it is done: the pause is then a probe interval, jittered, so that the
    /// request is not let through and refused again in the same instant.
    pub(crate) fn breaker_refused(&mut self, config: &PacingRules, wait: Duration, now: Instant) {
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
    pub(crate) fn advance(&mut self, config: &PacingRules, now: Instant) {
        let rules = self.rules(config);
        let at = self.at(now);
        self.shared.advance(&rules, !self.queue.is_empty(), at);
        self.settle();
    }
}

impl EndpointState {
    /// Moves the mode on with time as a request asking to go (or an outcome) does.
    #[cfg(test)]
    fn tick(&mut self, config: &PacingRules, now: Instant) {
        let at = self.at(now);
        self.shared
            .advance(&self.rules(config), self.queue.len() > 1, at);
        self.settle();
    }
}

#[cfg(test)]
mod tests;
