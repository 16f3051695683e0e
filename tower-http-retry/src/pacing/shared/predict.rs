//! When the endpoint is predicted to release each place of a queue, from its shared state (the
//! arithmetic of the prediction is `schedule.rs`'s).

use super::{gap, Mode, Rules, SharedState};
use crate::pacing::clock::{Clock, Nanos};
use crate::pacing::rate::Ramp;
use crate::pacing::schedule::{Growth, Schedule};
use std::time::Duration;

impl SharedState {
    /// When the pacer is predicted to release each place of the queue, from `now`: at once
    /// while open; while ramping, from the current rate, doubling every interval in slow start
    /// up to the rate the endpoint took at its last loss, or after a loss regaining that loss's
    /// rate by the end of the regain time; from the next probe (or the end of the pause) while
    /// down or paused, as the ramp it will start (or resume) would. In local time, through
    /// `clock`.
    pub(crate) fn schedule(&self, rules: &Rules<'_>, clock: Clock, now: Nanos) -> Schedule {
        let config = &rules.pacing.rate;
        let doubling = Growth::Doubling {
            interval: rules.pacing.ramp_interval,
            cap: self.capacity.unwrap_or(config.ceiling),
        };
        let from = |first: Nanos, ramp: Option<&Ramp>| {
            let first = clock.to_local(first.max(now));
            match ramp {
                None => Schedule {
                    first,
                    rate: config.floor,
                    growth: doubling,
                },
                Some(ramp) => Schedule {
                    first,
                    rate: ramp.rate(config),
                    growth: match *ramp {
                        Ramp::SlowStart { .. } => doubling,
                        Ramp::Cubic {
                            last_max,
                            since_loss_secs,
                        } => Growth::Step {
                            after: Duration::from_secs_f64(
                                (config.regain_secs - since_loss_secs).max(0.0),
                            ),
                            to: last_max,
                        },
                    },
                },
            }
        };
        match &self.mode {
            Mode::Open => Schedule::now(clock.to_local(now)),
            Mode::Probing => from(self.next_probe, None),
            Mode::Paused { until, resume } => from((*until).max(self.next_probe), resume.as_ref()),
            Mode::Ramping { ramp, .. } => from(
                self.last_slot.saturating_add(gap(ramp.rate(config))),
                Some(ramp),
            ),
        }
    }
}
