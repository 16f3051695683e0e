//! A process's own pacing while its store cannot be reached: the endpoint's last known shared
//! state, cut down to this process's share of the fleet. The same transition function runs on
//! it, with a configuration scaled by the share: the probe interval times the number of peers
//! (the fleet still probes at about its one stream's rate), the rates (and the ramp's additive
//! step) times the share, and a learned rate capped at [`HEADROOM`] times this process's share
//! of it (never unlimited). The peers are those waiting on the endpoint when the store was
//! lost; for an endpoint nobody was pacing (open, or heard of too long ago to say), the fleet
//! the store last counted: every process would otherwise enter its fallback alone, and a fleet
//! of N would probe and ramp the endpoint N times over.
//!
//! The state's times stay on the clock the fallback was entered with (the store's as last
//! measured, or the process's own when no round trip had measured it yet); a seed for the store
//! is moved onto the store's clock as it is when the process rejoins.

use crate::pacing::clock::{Clock, Nanos};
use crate::pacing::rate::Ramp;
use crate::pacing::rules::PacingRules;
use crate::pacing::shared::{Mode, SharedState};
use std::time::Duration;
use tokio::time::Instant;

/// How far the fleet's rate may grow above its last shared rate while the store is away.
pub(crate) const HEADROOM: f64 = 1.2;

/// The longest probe interval a fallback uses, however large the fleet.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(60);

/// One endpoint's fallback pacing.
#[derive(Clone, Debug)]
pub(crate) struct Fallback {
    pub(crate) state: SharedState,
    pub(crate) config: PacingRules,
    /// The clock the state's times are on.
    pub(crate) clock: Clock,
    /// This process's share of the fleet when the store was lost (`1 / peers`).
    share: f64,
}

impl Fallback {
    /// The fallback of `holder` for an endpoint last known as `last` (on `clock`), at `now`,
    /// in a fleet the store last counted as `fleet` processes.
    pub(crate) fn enter(
        last: &SharedState,
        config: &PacingRules,
        holder: u64,
        clock: Clock,
        now: Instant,
        fleet: u32,
    ) -> Self {
        let at = clock.to_shared(now);
        let peers = match last.waiting_peers(at) {
            0 => fleet,
            waiting => waiting,
        };
        let share = 1.0 / f64::from(peers.max(1));
        let mut local = PacingRules {
            probe_interval: config
                .probe_interval
                .mul_f64(1.0 / share)
                .min(MAX_PROBE_INTERVAL),
            ..config.clone()
        };
        local.rate.floor = 1.0 / local.probe_interval.as_secs_f64();
        // The fleet's additive step, shared out as its rate is: the fallbacks together grow as
        // the shared ramp would.
        local.rate.additive = config.rate.additive * share;
        let learned = match last.mode {
            Mode::Ramping { ramp, .. } => Some(ramp.rate(&config.rate)),
            _ => None,
        };
        local.rate.ceiling = match learned {
            Some(rate) => (rate * share * HEADROOM).max(local.rate.floor),
            None => (config.rate.ceiling * share).max(local.rate.floor),
        };
        let mut state = scaled(last, share);
        state.peers.clear();
        state.leases.retain(|lease| lease.holder == holder);
        Self {
            state,
            config: local,
            clock,
            share,
        }
    }

    /// The state to seed the store with on rejoining when the store lost the endpoint's record
    /// (it restarted empty): this process's state, scaled back up to the fleet, on the store's
    /// `clock` at `now`.
    pub(crate) fn seed(&self, clock: Clock, now: Instant) -> SharedState {
        let by = i128::from(clock.to_shared(now)) - i128::from(self.clock.to_shared(now));
        let mut state = scaled(&self.state, 1.0 / self.share);
        // Leases granted while alone: the fleet never saw them.
        state.leases.clear();
        shifted(state, by)
    }
}

/// `state`, which holds no lease (a seed's are cleared), with every time moved `by`
/// nanoseconds: the same instants on a clock whose epoch is `by` earlier. A peer that never
/// reported keeps its "never".
fn shifted(mut state: SharedState, by: i128) -> SharedState {
    debug_assert!(state.leases.is_empty(), "a seed's leases are cleared first");
    let shift = |t: &mut Nanos| {
        *t = u64::try_from((i128::from(*t) + by).max(0)).unwrap_or(Nanos::MAX);
    };
    match &mut state.mode {
        Mode::Open | Mode::Probing => {}
        Mode::Ramping {
            interval_start,
            idle_since,
            cut_settles_at,
            ..
        } => {
            shift(interval_start);
            idle_since.iter_mut().for_each(shift);
            shift(cut_settles_at);
        }
        Mode::Paused { until, .. } => shift(until),
    }
    for t in [
        &mut state.next_probe,
        &mut state.last_slot,
        &mut state.demand_until,
        &mut state.last_demand,
        &mut state.slots_at,
    ] {
        shift(t);
    }
    state.last_success.iter_mut().for_each(shift);
    for peer in &mut state.peers {
        shift(&mut peer.seen);
        shift(&mut peer.last_at);
        if peer.reported != 0 {
            shift(&mut peer.reported);
        }
    }
    state
}

/// `state` with every rate multiplied by `factor`.
fn scaled(state: &SharedState, factor: f64) -> SharedState {
    let mut state = state.clone();
    state.capacity = state.capacity.map(|capacity| capacity * factor);
    match &mut state.mode {
        Mode::Ramping {
            ramp,
            last_accepted,
            ..
        } => {
            *ramp = scale(*ramp, factor);
            *last_accepted *= factor;
        }
        Mode::Paused {
            resume: Some(ramp), ..
        } => *ramp = scale(*ramp, factor),
        _ => {}
    }
    state
}

fn scale(ramp: Ramp, factor: f64) -> Ramp {
    match ramp {
        Ramp::SlowStart { rate } => Ramp::SlowStart {
            rate: rate * factor,
        },
        Ramp::Cubic {
            last_max,
            since_loss_secs,
        } => Ramp::Cubic {
            last_max: last_max * factor,
            since_loss_secs,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::shared::{LeaseEntry, Peer};
    use crate::pacing::Pacing;

    fn ramping_at(rate: f64, peers: u64) -> SharedState {
        SharedState {
            mode: Mode::Ramping {
                ramp: Ramp::Cubic {
                    last_max: rate,
                    since_loss_secs: 1.0,
                },
                hinted: false,
                interval_start: 0,
                successes: 0,
                losses: 0,
                idle_since: None,
                cut_settles_at: 0,
                last_accepted: rate,
            },
            peers: (0..peers).map(|holder| Peer::new(holder, 0)).collect(),
            leases: vec![
                LeaseEntry {
                    id: 1,
                    holder: 0,
                    expires: 10,
                },
                LeaseEntry {
                    id: 2,
                    holder: 3,
                    expires: 10,
                },
            ],
            ..SharedState::new()
        }
    }

    /// A clock on which `now` is shared time 0, where [`ramping_at`]'s peers were seen.
    fn at_zero(now: Instant) -> Clock {
        Clock::new(now, 0)
    }

    #[test]
    fn a_fallback_paces_at_its_share_and_grows_at_most_to_the_headroom() {
        let (config, now) = (Pacing::new().rules().clone(), Instant::now());
        let last = ramping_at(1000.0, 10);
        let fallback = Fallback::enter(&last, &config, 0, at_zero(now), now, 4);
        let Mode::Ramping { ramp, .. } = fallback.state.mode else {
            panic!("still ramping")
        };
        // The ten peers waiting on the endpoint, not the fleet the store counted.
        assert!((ramp.rate(&fallback.config.rate) - 100.0).abs() < 1e-9);
        assert!((fallback.config.rate.ceiling - 120.0).abs() < 1e-9);
        assert_eq!(fallback.config.probe_interval, config.probe_interval * 10);
        assert_eq!(fallback.state.leases.len(), 1, "only its own lease");
        let Mode::Ramping { ramp, .. } = fallback.seed(at_zero(now), now).mode else {
            panic!("still ramping")
        };
        assert!((ramp.rate(&config.rate) - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn a_fallback_of_an_endpoint_that_was_down_probes_at_its_share_of_the_stream() {
        let (config, now) = (Pacing::new().rules().clone(), Instant::now());
        let mut last = ramping_at(1.0, 100);
        last.mode = Mode::Probing;
        let fallback = Fallback::enter(&last, &config, 0, at_zero(now), now, 1);
        assert_eq!(fallback.config.probe_interval, config.probe_interval * 100);
        assert!(fallback.config.rate.ceiling >= fallback.config.rate.floor);
    }

    #[test]
    fn a_fallback_of_an_endpoint_nobody_paced_takes_its_share_of_the_fleet_the_store_counted() {
        let (config, now) = (Pacing::new().rules().clone(), Instant::now());
        for last in [SharedState::new(), ramping_at(1000.0, 10)] {
            // Open, or heard of an hour ago: no peer is known to wait on it.
            let long_after = Clock::new(now, 3_600_000_000_000);
            let fallback = Fallback::enter(&last, &config, 0, long_after, now, 8);
            assert_eq!(fallback.config.probe_interval, config.probe_interval * 8);
            assert!(fallback.config.rate.ceiling <= config.rate.ceiling / 8.0 * HEADROOM);
        }
        let alone = Fallback::enter(&SharedState::new(), &config, 0, at_zero(now), now, 0);
        assert_eq!(alone.config.probe_interval, config.probe_interval);
    }

    #[test]
    fn a_seed_is_moved_onto_the_clock_the_store_has_when_the_process_rejoins() {
        let (config, now) = (Pacing::new().rules().clone(), Instant::now());
        // Entered before any round trip: the process's own epoch.
        let own = Clock::local(now);
        let until = own.to_shared(now + Duration::from_secs(30));
        let last = SharedState {
            mode: Mode::Paused {
                until,
                resume: None,
            },
            ..SharedState::new()
        };
        let fallback = Fallback::enter(&last, &config, 0, own, now, 1);
        // The store's clock, measured on rejoining: another epoch altogether.
        let store = Clock::new(now, 1_796_000_000_000_000_000);
        let seed = fallback.seed(store, now);
        let Mode::Paused { until: seeded, .. } = seed.mode else {
            panic!("still paused: {seed:?}")
        };
        assert_eq!(store.to_local(seeded), now + Duration::from_secs(30));
        assert_eq!(
            fallback.seed(own, now).mode,
            last.mode,
            "the same clock: as kept"
        );
    }
}
