//! One endpoint as a process holds it: the shared state of its rules (`shared/`), kept here
//! when the process paces alone or as a replica of the fleet's when a store keeps it, and what
//! only the process can hold: its queue of waiting requests and their wakers, its own run of
//! congestion outcomes, the places it gave requests it turned away, and with a store, what
//! `link.rs` holds (unused slots, a probe granted, events not sent yet). Every method takes
//! `now`, so the state machine is unit-tested without a runtime.

use super::clock::Clock;
use super::config::PacingConfig;
use super::link::Link;
use super::schedule::{Resend, Schedule};
use super::shared::{Batch, Grant, Mode, Rules, SharedState, Signal};
use super::store::Lease;
use crate::random::uniform;
use rand::rngs::SmallRng;
use rand::RngExt;
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

impl PacingMode {
    /// The mode's name in lower case (`open`, `probing`, `ramping`, `paused`): the label its
    /// metrics carry.
    pub const fn as_str(self) -> &'static str {
        match self {
            PacingMode::Open => "open",
            PacingMode::Probing => "probing",
            PacingMode::Ramping => "ramping",
            PacingMode::Paused => "paused",
        }
    }
}

/// How a released request was let through; its outcome is recorded with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// One of the few requests in flight while the endpoint is down, on this lease of its probe
    /// stream.
    Probe(Lease),
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
    /// When the fleet's store answers (`link.rs`): the head waits for the call it asked for.
    Asked,
}

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
    /// With a store: what the process holds of the fleet's state beyond its replica.
    pub(crate) link: Option<Link>,
}

impl EndpointState {
    pub(crate) fn new(now: Instant, rng: SmallRng, link: Option<Link>) -> Self {
        Self {
            shared: SharedState::new(),
            clock: Clock::local(now),
            queue: VecDeque::new(),
            next_id: 0,
            rng,
            probes: 0,
            deferred: 0,
            run: 0,
            horizon: now,
            link,
        }
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
    pub(crate) fn rate(&self, config: &PacingConfig) -> f64 {
        self.shared.rate(&self.rules(config))
    }

    /// The rules this process applies to its state: a process alone's, or with a store the
    /// fleet's (its replica is the fleet's state).
    pub(crate) fn rules<'a>(&self, config: &'a PacingConfig) -> Rules<'a> {
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
            trace(mode);
        }
        true
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

    /// When the pacer is predicted to release each place of the fleet's queue (the shared
    /// state's [`schedule`](SharedState::schedule)), from `now`.
    pub(crate) fn schedule(&self, config: &PacingConfig, now: Instant) -> Schedule {
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
        config: &PacingConfig,
        position: usize,
        now: Instant,
    ) -> Duration {
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
        config: &PacingConfig,
        position: usize,
        now: Instant,
    ) -> Resend {
        self.resend_on(&self.schedule(config, now), position as f64, now)
    }

    fn resend_on(&self, schedule: &Schedule, position: f64, now: Instant) -> Resend {
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
    pub(crate) fn try_release(&mut self, config: &PacingConfig, now: Instant) -> Release {
        if self.link.is_some() {
            return self.release_linked(config, now);
        }
        let rules = self.rules(config);
        let at = self.at(now);
        self.shared.advance(&rules, self.queue.len() > 1, at);
        self.settle();
        let rng = &mut self.rng;
        let grant = self
            .shared
            .release(&rules, 0, Batch::One, at, || rng.random());
        self.settle();
        match grant {
            Grant::Unpaced | Grant::Slots { .. } => Release::Now(Pass::Paced),
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
        config: &PacingConfig,
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
        let mut changed = self.shared.outcome(&rules, signal, lease.map(|l| l.id), at);
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

    /// A hint (`Retry-After`) on one response, asking that request to wait until `until`: see
    /// [`SharedState::hinted`]. Returns whether the whole endpoint paused.
    pub(crate) fn hinted(&mut self, config: &PacingConfig, until: Instant, now: Instant) -> bool {
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
    pub(crate) fn budget_empty(&mut self, config: &PacingConfig, now: Instant) {
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
    pub(crate) fn pause_until(&mut self, config: &PacingConfig, until: Instant, now: Instant) {
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
        let rules = self.rules(config);
        let at = self.at(now);
        self.shared.advance(&rules, !self.queue.is_empty(), at);
        self.settle();
    }
}

/// A mode entered, in the telemetry.
pub(crate) fn trace(mode: PacingMode) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "tower_http_retry::pacer", ?mode, "endpoint pacing");
    crate::telemetry::pacer_mode(mode.as_str());
}

impl EndpointState {
    /// Moves the mode on with time as a request asking to go (or an outcome) does.
    #[cfg(test)]
    fn tick(&mut self, config: &PacingConfig, now: Instant) {
        let at = self.at(now);
        self.shared
            .advance(&self.rules(config), self.queue.len() > 1, at);
        self.settle();
    }
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

    /// A probe's pass (its lease is not checked: the endpoint takes its outcome as a probe's).
    fn probe() -> Pass {
        Pass::Probe(Lease {
            id: 0,
            expires: Instant::now(),
            local: false,
        })
    }

    fn state(now: Instant) -> EndpointState {
        EndpointState::new(now, SmallRng::seed_from_u64(1), None)
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
                    assert!(matches!(pass, Pass::Probe(_)), "{pass:?}");
                    probes.push(now);
                    // The probe fails at once.
                    s.record(&config, Some(pass), Signal::Congestion, now);
                }
                Release::At(at) => now = at,
                Release::Blocked | Release::Asked => panic!("no probe is in flight"),
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
                Release::At(_) | Release::Asked => panic!("time was given"),
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
        s.record(&config, Some(probe()), Signal::Success, now);
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
        s.record(&config, Some(probe()), Signal::Success, now);
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
        s.record(&config, Some(probe()), Signal::Success, now);
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
        s.record(&config, Some(probe()), Signal::Success, now);
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
        s.record(&config, Some(probe()), Signal::Success, now);
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
        s.record(&config, Some(probe()), Signal::Success, now);
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
        s.record(config, Some(probe()), Signal::Success, now);
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
            s.shared.capacity.is_some_and(|c| (c - 1510.0).abs() < 1.0),
            "{:?}",
            s.shared.capacity
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
            s.shared.capacity.is_some_and(|c| c > config.rate.floor),
            "{:?}",
            s.shared.capacity
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
        known.shared.capacity = Some(1000.0);
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
        s.shared.capacity = Some(100.0);
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
