//! The configuration of a breaker: what the builder collects ([`Settings`]), checked once into a
//! [`Config`]. Plain values: the breaker's state reads them, and `template.rs` makes breakers
//! from them.

use super::window::BUCKETS;
use crate::abort::AbortSignal;
use crate::error::{at_least_one, in_range, not_below, positive_duration, ratio, InvalidConfig};
use crate::random::RandomSource;
use crate::retry::{Backoff, Jitter};
use crate::telemetry::{self, Labels};
use std::sync::Arc;
use std::time::Duration;

/// Everything but the classifier, as the builder collects it: a type-changing
/// [`classifier`](crate::circuit_breaker::CircuitBreakerLayerBuilder::classifier) setter moves it
/// whole.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) consecutive_failures: Option<u32>,
    pub(crate) failure_ratio: Option<f64>,
    pub(crate) minimum_calls: u32,
    pub(crate) window: Duration,
    pub(crate) open_duration: Duration,
    pub(crate) open_jitter: f64,
    pub(crate) open_multiplier: f64,
    pub(crate) max_open_duration: Option<Duration>,
    pub(crate) half_open_probes: u32,
    pub(crate) successes_to_close: u32,
    pub(crate) abort: Option<AbortSignal>,
    pub(crate) random: RandomSource,
    /// The `layer` label of the breakers' metrics.
    pub(crate) metrics_label: Option<Arc<str>>,
    /// The authorities whose breakers' metrics carry their `authority` label (per authority).
    pub(crate) metrics_authorities: Vec<Box<str>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            consecutive_failures: Some(5),
            failure_ratio: Some(0.5),
            minimum_calls: 20,
            window: Duration::from_secs(10),
            open_duration: Duration::from_secs(5),
            open_jitter: 0.5,
            open_multiplier: 2.0,
            max_open_duration: None,
            half_open_probes: 1,
            successes_to_close: 1,
            abort: None,
            random: RandomSource::default(),
            metrics_label: None,
            metrics_authorities: Vec::new(),
        }
    }
}

/// The breaker's checked configuration.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) consecutive_failures: Option<u32>,
    pub(crate) failure_ratio: Option<f64>,
    pub(crate) minimum_calls: u32,
    pub(crate) window: Duration,
    /// Open duration, its growth per re-opening and its cap, as an unjittered backoff.
    pub(crate) open: Backoff,
    pub(crate) open_jitter: f64,
    pub(crate) half_open_probes: u32,
    pub(crate) successes_to_close: u32,
    /// The keys the breakers' metrics are recorded under.
    pub(crate) labels: Labels,
}

impl Settings {
    /// Checks every value (see
    /// [`CircuitBreakerLayerBuilder::build`](crate::circuit_breaker::CircuitBreakerLayerBuilder::build)).
    pub(crate) fn check(&self) -> Result<Config, InvalidConfig> {
        if self.consecutive_failures.is_none() && self.failure_ratio.is_none() {
            return Err(InvalidConfig::new(
                "consecutive_failures",
                "and failure_ratio are both turned off: the circuit could never open",
            ));
        }
        if let Some(failures) = self.consecutive_failures {
            at_least_one("consecutive_failures", failures.into())?;
        }
        if let Some(failure_ratio) = self.failure_ratio {
            ratio("failure_ratio", failure_ratio)?;
        }
        at_least_one("minimum_calls", self.minimum_calls.into())?;
        at_least_one("half_open_probes", self.half_open_probes.into())?;
        at_least_one("successes_to_close", self.successes_to_close.into())?;
        positive_duration("window", self.window)?;
        if self.window.as_nanos() < BUCKETS as u128 {
            return Err(InvalidConfig::new(
                "window",
                "must be at least 10 ns (it is kept in ten buckets)",
            ));
        }
        positive_duration("open_duration", self.open_duration)?;
        let max_open = self
            .max_open_duration
            .unwrap_or(Duration::from_secs(60).max(self.open_duration));
        positive_duration("max_open_duration", max_open)?;
        not_below(
            "max_open_duration",
            max_open,
            "open_duration",
            self.open_duration,
        )?;
        in_range("open_jitter", self.open_jitter, 0.0, 1.0)?;
        in_range("open_multiplier", self.open_multiplier, 1.0, f64::MAX)?;
        if self.metrics_label.as_deref() == Some("") {
            return Err(InvalidConfig::new("metrics_label", "must not be empty"));
        }
        telemetry::check_metrics_authorities(&self.metrics_authorities)?;
        Ok(Config {
            consecutive_failures: self.consecutive_failures,
            failure_ratio: self.failure_ratio,
            minimum_calls: self.minimum_calls,
            window: self.window,
            open: Backoff::new(Jitter::None, self.open_duration, max_open)
                .multiplier(self.open_multiplier),
            open_jitter: self.open_jitter,
            half_open_probes: self.half_open_probes,
            successes_to_close: self.successes_to_close,
            labels: Labels::new(self.metrics_label.as_deref(), &self.metrics_authorities),
        })
    }
}
