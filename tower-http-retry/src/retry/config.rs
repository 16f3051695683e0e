//! The configuration every clone of a [`RetryLayer`](crate::RetryLayer) shares: what the builder
//! collects ([`Settings`]), checked once, and what the layer derives from it ([`Config`]).
//!
//! It has a file of its own so that the layer, the service and the future all read it without
//! importing each other.

use super::attempt::AttemptStamps;
use super::backoff::Backoff;
use super::budget::{RetryBudget, TokenBucket};
use super::idempotency::Idempotency;
use super::nested::NestedLayers;
use super::stats::Counters;
use crate::abort::AbortSignal;
use crate::error::{at_least_one, duration_at_most_max, non_zero, InvalidConfig};
use crate::hint::HintPolicy;
use crate::pacing::{Pacer, Pacing};
use crate::random::RandomSource;
use crate::telemetry::{self, Labels};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The clock HTTP-date `Retry-After` values are measured against.
pub(crate) type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Everything but the classifier, as the builder collects it: a type-changing
/// [`classifier`](crate::retry::RetryLayerBuilder::classifier) setter moves it whole.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) backoff: Backoff,
    pub(crate) max_attempts: u32,
    /// Free resends per request of a request the server refused unprocessed.
    pub(crate) max_refused_retries: u32,
    pub(crate) first_attempt_jitter: Duration,
    /// `None`: `Retry-After` is ignored.
    pub(crate) hint_policy: Option<HintPolicy>,
    pub(crate) idempotency: Idempotency,
    /// The attempt header, the `Idempotency-Key`, a protocol's per-attempt metadata.
    pub(crate) stamps: AttemptStamps,
    pub(crate) deadline: Option<Duration>,
    pub(crate) budget: Option<Arc<dyn RetryBudget>>,
    pub(crate) abort: Option<AbortSignal>,
    pub(crate) random: RandomSource,
    pub(crate) wall_clock: WallClock,
    pub(crate) pacing: Option<Pacing>,
    pub(crate) nested: NestedLayers,
    /// The `layer` label of the layer's metrics.
    pub(crate) metrics_label: Option<Arc<str>>,
    /// The endpoints whose pacer metrics carry an `authority` label (lower case).
    pub(crate) metrics_authorities: Vec<Box<str>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            max_attempts: 3,
            max_refused_retries: 200,
            first_attempt_jitter: Duration::ZERO,
            hint_policy: Some(HintPolicy::honored()),
            idempotency: Idempotency::default(),
            stamps: AttemptStamps::default(),
            deadline: None,
            budget: Some(Arc::new(TokenBucket::default())),
            abort: None,
            random: RandomSource::default(),
            wall_clock: Arc::new(SystemTime::now),
            pacing: None,
            nested: NestedLayers::Defer,
            metrics_label: None,
            metrics_authorities: Vec::new(),
        }
    }
}

impl Settings {
    /// Checks every value (see
    /// [`RetryLayerBuilder::build`](crate::retry::RetryLayerBuilder::build)).
    pub(crate) fn validate(&self) -> Result<(), InvalidConfig> {
        self.backoff.validate()?;
        if let Some(policy) = &self.hint_policy {
            policy.validate()?;
        }
        at_least_one("max_attempts", self.max_attempts.into())?;
        if self.metrics_label.as_deref() == Some("") {
            return Err(InvalidConfig::new("metrics_label", "must not be empty"));
        }
        telemetry::check_metrics_authorities(&self.metrics_authorities)?;
        duration_at_most_max("first_attempt_jitter", self.first_attempt_jitter)?;
        if let Some(deadline) = self.deadline {
            non_zero("deadline", deadline)?;
            // The deadline counts from the call, so the first-attempt delay is part of it.
            if self.first_attempt_jitter >= deadline {
                return Err(InvalidConfig::new(
                    "first_attempt_jitter",
                    format!(
                        "({:?}) must be below the deadline ({deadline:?})",
                        self.first_attempt_jitter
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("Settings");
        f.field("backoff", &self.backoff)
            .field("max_attempts", &self.max_attempts)
            .field("max_refused_retries", &self.max_refused_retries)
            .field("first_attempt_jitter", &self.first_attempt_jitter)
            .field("hint_policy", &self.hint_policy)
            .field("idempotency", &self.idempotency)
            .field("stamps", &self.stamps)
            .field("deadline", &self.deadline)
            .field("budget", &self.budget)
            .field("abort", &self.abort)
            .field("random", &self.random)
            .field("pacing", &self.pacing)
            .field("nested", &self.nested)
            .field("metrics_label", &self.metrics_label)
            .field("metrics_authorities", &self.metrics_authorities);
        f.finish_non_exhaustive()
    }
}

/// The checked settings, the classifier and the counters; one `Arc` per layer, read by every
/// request session.
pub(crate) struct Config<C> {
    pub(crate) classifier: C,
    pub(crate) settings: Settings,
    /// The `Retry-After` clamp, resolved against the backoff cap.
    pub(crate) retry_after_clamp: Duration,
    pub(crate) counters: Counters,
    pub(crate) pacer: Option<Pacer>,
}

impl<C> Config<C> {
    /// Checks `settings` and derives what the sessions read.
    pub(crate) fn new(classifier: C, settings: Settings) -> Result<Self, InvalidConfig> {
        settings.validate()?;
        let cap = settings.backoff.cap();
        let labels = Labels::new(
            settings.metrics_label.as_deref(),
            &settings.metrics_authorities,
        );
        Ok(Self {
            pacer: settings
                .pacing
                .clone()
                .map(|pacing| Pacer::new(pacing, settings.random.clone(), labels.clone())),
            retry_after_clamp: settings
                .hint_policy
                .map_or(cap, |policy| policy.clamp_or(cap)),
            classifier,
            counters: Counters::labelled(labels),
            settings,
        })
    }
}

impl<C: fmt::Debug> fmt::Debug for Config<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryConfig")
            .field("classifier", &self.classifier)
            .field("settings", &self.settings)
            .field("retry_after_clamp", &self.retry_after_clamp)
            .finish_non_exhaustive()
    }
}
