//! A process's own pacing while its store cannot be reached: the endpoint's last known shared
//! state, cut down to this process's share of the fleet. The same transition function runs on
//! it, with a configuration scaled by the share: the probe interval times the number of peers
//! (the fleet still probes at about its one stream's rate), the rates (and the ramp's additive
//! step) times the share, and a learned rate capped at [`HEADROOM`] times this process's share
//! of it (never unlimited).

use crate::pacing::rate::Ramp;
use crate::pacing::rules::PacingRules;
use crate::pacing::shared::{Mode, SharedState};
use std::time::Duration;

/// How far the fleet's rate may grow above its last shared rate while the store is away.
pub(crate) const HEADROOM: f64 = 1.2;

/// The longest probe interval a fallback uses, however large the fleet.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(60);

/// One endpoint's fallback pacing.
#[derive(Clone, Debug)]
pub(crate) struct Fallback {
    pub(crate) state: SharedState,
    pub(crate) config: PacingRules,
    /// This process's share of the fleet when the store was lost (`1 / peers`).
    share: f64,
}

impl Fallback {
    /// The fallback of `holder` for an endpoint last known as `last`, at store time `now`.
    pub(crate) fn enter(last: &SharedState, config: &PacingRules, holder: u64, now: u64) -> Self {
        let share = 1.0 / f64::from(last.active_peers(now));
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
            share,
        }
    }

    /// The state to seed the store with on rejoining when the store lost the endpoint's record
    /// (it restarted empty): this process's state, scaled back up to the fleet.
    pub(crate) fn seed(&self) -> SharedState {
        let mut state = scaled(&self.state, 1.0 / self.share);
        // Leases granted while alone: the fleet never saw them.
        state.leases.clear();
        state
    }
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

    #[test]
    fn a_fallback_paces_at_its_share_and_grows_at_most_to_the_headroom() {
        let config = Pacing::new().rules().clone();
        let last = ramping_at(1000.0, 10);
        let fallback = Fallback::enter(&last, &config, 0, 0);
        let Mode::Ramping { ramp, .. } = fallback.state.mode else {
            panic!("still ramping")
        };
        assert!((ramp.rate(&fallback.config.rate) - 100.0).abs() < 1e-9);
        assert!((fallback.config.rate.ceiling - 120.0).abs() < 1e-9);
        assert_eq!(fallback.config.probe_interval, config.probe_interval * 10);
        assert_eq!(fallback.state.leases.len(), 1, "only its own lease");
        let Mode::Ramping { ramp, .. } = fallback.seed().mode else {
            panic!("still ramping")
        };
        assert!((ramp.rate(&config.rate) - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn a_fallback_of_an_endpoint_that_was_down_probes_at_its_share_of_the_stream() {
        let config = Pacing::new().rules().clone();
        let mut last = ramping_at(1.0, 100);
        last.mode = Mode::Probing;
        let fallback = Fallback::enter(&last, &config, 0, 0);
        assert_eq!(fallback.config.probe_interval, config.probe_interval * 100);
        assert!(fallback.config.rate.ceiling >= fallback.config.rate.floor);
    }
}
