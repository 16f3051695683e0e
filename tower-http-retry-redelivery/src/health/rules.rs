//! The rules of an endpoint's health: when it is disabled, as one pure function of its state
//! and what it learns ([`next`]).

use serde::{Deserialize, Serialize};
use std::time::Duration;
use tower_http_retry::InvalidConfig;

/// When an endpoint is disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthRules {
    disable_after: Duration,
    pub(super) disable_on_gone: bool,
    receiver_control: bool,
}

impl HealthRules {
    /// Disabled after 5 days of failure, or at once on `410 Gone`.
    pub fn new() -> Self {
        Self {
            disable_after: Duration::from_secs(5 * 24 * 3600),
            disable_on_gone: true,
            receiver_control: true,
        }
    }

    /// How long an endpoint must fail every attempt before it is disabled.
    pub fn disable_after(mut self, window: Duration) -> Result<Self, InvalidConfig> {
        InvalidConfig::ensure_positive_duration("disable_after", window)?;
        self.disable_after = window;
        Ok(self)
    }

    /// Whether a `410 Gone` disables the endpoint at once (on by default); off, a 410 only
    /// dead-letters its own delivery.
    pub fn disable_on_gone(mut self, disable: bool) -> Self {
        self.disable_on_gone = disable;
        self
    }

    /// Whether the receiver steers its deliveries with the `webhook-delivery` response header,
    /// Svix's convention (on by default): `abort-message` dead-letters that delivery at once
    /// ([`DeadReason::Aborted`](crate::DeadReason::Aborted)), `disable` disables the endpoint as
    /// a `410 Gone` does ([`DisableReason::ReceiverAsked`]). Off, the header is ignored.
    pub fn receiver_control(mut self, honour: bool) -> Self {
        self.receiver_control = honour;
        self
    }

    /// Whether the receiver's `webhook-delivery` header is honoured.
    pub fn honours_receiver_control(&self) -> bool {
        self.receiver_control
    }
}

impl Default for HealthRules {
    fn default() -> Self {
        Self::new()
    }
}

/// Why an endpoint is disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisableReason {
    /// It answered `410 Gone`.
    Gone,
    /// It failed every attempt for the rules' window.
    FailingFor(Duration),
    /// It answered `webhook-delivery: disable` ([`HealthRules::receiver_control`]).
    ReceiverAsked,
}

/// An endpoint's state, as stored (JSON) when the health is shared; no state is a healthy
/// endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum State {
    /// Failing continuously, with no success since.
    Failing(Run),
    Disabled(DisableReason),
}

/// A day of a failing run, in Unix milliseconds.
const DAY_MS: u64 = 24 * 3600 * 1000;
/// How far apart a day's failures must be for the run to go on into the next day.
const DAY_SPAN_MS: u64 = DAY_MS / 2;

/// A run of failures, counted in days from its first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Run {
    /// The run's first failure.
    since: u64,
    /// The first and the last failure of the run's current day.
    day_first: u64,
    day_last: u64,
}

impl Run {
    fn starting(at: u64) -> Self {
        Run {
            since: at,
            day_first: at,
            day_last: at,
        }
    }

    /// The run after a failure at `at`: the same day, the next one when the current day's
    /// failures spanned half a day, or a new run.
    fn failed(self, at: u64) -> Self {
        let day = |t: u64| t.saturating_sub(self.since) / DAY_MS;
        let (current, next) = (day(self.day_last), day(at));
        if at < self.day_last || next == current {
            return Run {
                day_last: self.day_last.max(at),
                ..self
            };
        }
        if next == current + 1 && self.day_last - self.day_first >= DAY_SPAN_MS {
            return Run {
                day_first: at,
                day_last: at,
                ..self
            };
        }
        Run::starting(at)
    }
}

/// What an endpoint's health learns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// An attempt failed, at this Unix time in milliseconds.
    Failed(u64),
    Succeeded,
    Disable(DisableReason),
    Enable,
}

/// The state after `change`: the rules in one pure function, applied to the process's view and,
/// when the health is shared, to the stored state in a compare-and-swap.
pub(super) fn next(state: Option<State>, change: Change, rules: &HealthRules) -> Option<State> {
    match (state, change) {
        (_, Change::Enable) => None,
        (Some(State::Disabled(reason)), _) => Some(State::Disabled(reason)),
        (_, Change::Disable(reason)) => Some(State::Disabled(reason)),
        (_, Change::Succeeded) => None,
        (Some(State::Failing(run)), Change::Failed(at)) => {
            let run = run.failed(at);
            let window = rules.disable_after.as_millis().min(u128::from(u64::MAX)) as u64;
            Some(if at.saturating_sub(run.since) >= window {
                State::Disabled(DisableReason::FailingFor(rules.disable_after))
            } else {
                State::Failing(run)
            })
        }
        (None, Change::Failed(at)) => next(
            Some(State::Failing(Run::starting(at))),
            Change::Failed(at),
            rules,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_goes_on_into_a_day_only_after_failures_spanning_half_the_one_before() {
        let gap = Run::starting(0).failed(DAY_SPAN_MS).failed(3 * DAY_MS);
        assert_eq!(gap, Run::starting(3 * DAY_MS), "a day without a failure");
        let on = Run::starting(0).failed(DAY_SPAN_MS).failed(DAY_MS + 1);
        assert_eq!(on.since, 0, "a day spanned half a day: the run goes on");
    }
}
