//! [`EndpointHealth`]: which endpoints are disabled, by continuous failure over a window or at
//! once by a `410 Gone`, and their re-enabling.
//!
//! An endpoint that has failed every attempt for [`HealthRules::disable_after`] (5 days by
//! default, Svix's rule) is disabled, as is one that answered `410 Gone` (the Standard Webhooks
//! rule): its due deliveries go to the dead-letter queue with
//! [`DeadReason::EndpointDisabled`](crate::DeadReason::EndpointDisabled) without being sent,
//! until [`EndpointHealth::enable`]; then [`replay`](crate::replay) sends its dead letters again.
//!
//! The failures must be **continuous**: a failing run counts day by day from its first failure,
//! and goes on into a day only when the failures of the day before spanned at least 12 hours
//! (Svix's rule); a day without a failure, or a day with failures less than 12 hours apart,
//! starts the run again from the next failure. So two failures five days apart never disable an
//! endpoint, however quiet it was between them. A success ends the failing run.
//!
//! The state is the process's own, in memory: share one value between the workers of a process.
//! Across a fleet, each process judges by what it sees (a process that missed its peers'
//! successes still needs five days of continuous failures of its own), and a restart forgets it.

use crate::schedule::unix_ms;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tower_http_retry::InvalidConfig;

/// When an endpoint is disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthRules {
    disable_after: Duration,
    disable_on_gone: bool,
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

#[derive(Clone, Copy, Debug)]
enum State {
    /// Failing continuously, with no success since.
    Failing(Run),
    Disabled(DisableReason),
}

/// A day of a failing run, in Unix milliseconds.
const DAY_MS: u64 = 24 * 3600 * 1000;
/// How far apart a day's failures must be for the run to go on into the next day.
const DAY_SPAN_MS: u64 = DAY_MS / 2;

/// A run of failures, counted in days from its first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
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

/// The health of each endpoint the process delivers to. Cloning shares it.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_http_retry_redelivery::health::{DisableReason, EndpointHealth, HealthRules};
///
/// let rules = HealthRules::new().disable_after(Duration::from_secs(3600)).unwrap();
/// let health = EndpointHealth::new(rules);
/// let start = SystemTime::now();
/// assert_eq!(health.failed("https://a.example", start), None);
/// assert_eq!(health.failed("https://a.example", start + Duration::from_secs(3599)), None);
/// let late = start + Duration::from_secs(3600);
/// assert_eq!(health.failed("https://a.example", late), Some(DisableReason::FailingFor(Duration::from_secs(3600))));
/// assert!(health.disabled("https://a.example").is_some());
/// health.enable("https://a.example");
/// assert!(health.disabled("https://a.example").is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct EndpointHealth {
    rules: HealthRules,
    endpoints: Arc<Mutex<HashMap<String, State>>>,
}

impl EndpointHealth {
    /// No endpoint known yet.
    pub fn new(rules: HealthRules) -> Self {
        Self {
            rules,
            endpoints: Arc::default(),
        }
    }

    /// Why `endpoint` is disabled, if it is.
    pub fn disabled(&self, endpoint: &str) -> Option<DisableReason> {
        match self.lock().get(endpoint) {
            Some(State::Disabled(reason)) => Some(*reason),
            _ => None,
        }
    }

    /// Every disabled endpoint and why.
    pub fn disabled_endpoints(&self) -> Vec<(String, DisableReason)> {
        let mut disabled: Vec<_> = self
            .lock()
            .iter()
            .filter_map(|(endpoint, state)| match state {
                State::Disabled(reason) => Some((endpoint.clone(), *reason)),
                State::Failing(_) => None,
            })
            .collect();
        disabled.sort_by(|a, b| a.0.cmp(&b.0));
        disabled
    }

    /// Enables `endpoint` again, its failing run forgotten.
    pub fn enable(&self, endpoint: &str) {
        self.lock().remove(endpoint);
    }

    /// `endpoint` took a delivery: its failing run ends.
    pub fn succeeded(&self, endpoint: &str) {
        let mut endpoints = self.lock();
        if let Some(State::Failing(_)) = endpoints.get(endpoint) {
            endpoints.remove(endpoint);
        }
    }

    /// `endpoint` failed an attempt at `at`; returns the reason if this disabled it.
    pub fn failed(&self, endpoint: &str, at: SystemTime) -> Option<DisableReason> {
        let at = unix_ms(at);
        let mut endpoints = self.lock();
        let state = endpoints
            .entry(endpoint.to_owned())
            .or_insert(State::Failing(Run::starting(at)));
        let State::Failing(run) = *state else {
            return None;
        };
        let run = run.failed(at);
        if at.saturating_sub(run.since) >= self.window_ms() {
            let reason = DisableReason::FailingFor(self.rules.disable_after);
            *state = State::Disabled(reason);
            return Some(reason);
        }
        *state = State::Failing(run);
        None
    }

    /// `endpoint` answered `410 Gone`; returns the reason if this disabled it.
    pub fn gone(&self, endpoint: &str) -> Option<DisableReason> {
        if !self.rules.disable_on_gone {
            return None;
        }
        self.disable(endpoint, DisableReason::Gone)
    }

    /// The rules.
    pub fn rules(&self) -> &HealthRules {
        &self.rules
    }

    /// Disables `endpoint` for `reason`; returns the reason if this disabled it (`None` when it
    /// was disabled already).
    pub fn disable(&self, endpoint: &str, reason: DisableReason) -> Option<DisableReason> {
        let mut endpoints = self.lock();
        if let Some(State::Disabled(_)) = endpoints.get(endpoint) {
            return None;
        }
        endpoints.insert(endpoint.to_owned(), State::Disabled(reason));
        Some(reason)
    }

    fn window_ms(&self) -> u64 {
        self.rules
            .disable_after
            .as_millis()
            .min(u128::from(u64::MAX)) as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, State>> {
        // A panic while the map was held left it whole: every write is a single insert.
        self.endpoints
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_ends_the_failing_run() {
        let health = EndpointHealth::new(
            HealthRules::new()
                .disable_after(Duration::from_secs(10))
                .unwrap(),
        );
        let start = SystemTime::now();
        health.failed("e", start);
        health.succeeded("e");
        assert_eq!(health.failed("e", start + Duration::from_secs(9)), None);
        assert_eq!(
            health.failed("e", start + Duration::from_secs(18)),
            None,
            "run restarted at 9 s"
        );
        assert!(health
            .failed("e", start + Duration::from_secs(19))
            .is_some());
        health.succeeded("e");
        assert!(
            health.disabled("e").is_some(),
            "a disabled endpoint stays so until enabled"
        );
    }

    #[test]
    fn only_continuous_failure_disables() {
        const HOUR: Duration = Duration::from_secs(3600);
        let health = EndpointHealth::default();
        let start = SystemTime::now();
        // Failing every 6 hours for 5 days: disabled at the end of the fifth day, not before.
        for n in 0..20 {
            assert_eq!(health.failed("e", start + HOUR * 6 * n), None, "{n}");
        }
        assert!(health.failed("e", start + HOUR * 120).is_some());

        // Two failures five days apart: a new run.
        let quiet = EndpointHealth::default();
        quiet.failed("e", start);
        assert_eq!(quiet.failed("e", start + HOUR * 120), None);
        // A day whose failures spanned less than half of it starts the run again, as does a day
        // without a failure.
        let sparse = EndpointHealth::default();
        for n in 0..=5 {
            // Two failures an hour apart each day.
            sparse.failed("e", start + HOUR * 24 * n);
            assert_eq!(sparse.failed("e", start + HOUR * (24 * n + 1)), None, "{n}");
        }
        let gap = Run::starting(0).failed(DAY_SPAN_MS).failed(3 * DAY_MS);
        assert_eq!(gap, Run::starting(3 * DAY_MS), "a day without a failure");
        let on = Run::starting(0).failed(DAY_SPAN_MS).failed(DAY_MS + 1);
        assert_eq!(on.since, 0, "a day spanned half a day: the run goes on");
    }

    #[test]
    fn gone_disables_at_once_unless_turned_off() {
        let health = EndpointHealth::default();
        assert_eq!(health.gone("e"), Some(DisableReason::Gone));
        assert_eq!(health.gone("e"), None, "reported once");
        assert_eq!(
            health.disabled_endpoints(),
            [("e".to_owned(), DisableReason::Gone)]
        );
        let lenient = EndpointHealth::new(HealthRules::new().disable_on_gone(false));
        assert_eq!(lenient.gone("e"), None);
        assert_eq!(lenient.disabled("e"), None);
    }
}
