//! [`CircuitBreakerLayer`]: one breaker, shared by every clone, and [`CircuitBreakerLayerBuilder`],
//! every setting of a breaker, checked when it is built.

use super::check::{check_retry, RetryMismatch};
use super::config::{Config, Settings};
use super::keyed::KeyedCircuitBreakerLayer;
use super::service::CircuitBreaker;
use super::state::{CircuitState, CircuitStats};
use super::template::{Shared, Template};
use crate::abort::AbortSignal;
use crate::classify::HttpClassifier;
use crate::error::{at_least_one, InvalidConfig};
use crate::random::RandomSource;
use crate::retry::RetryLayer;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower_layer::Layer;

#[doc = include_str!("../docs/circuit_breaker.md")]
#[must_use]
pub struct CircuitBreakerLayer<C = HttpClassifier> {
    pub(super) shared: Arc<Shared<C>>,
}

impl CircuitBreakerLayer {
    /// The default configuration (see [`CircuitBreakerLayerBuilder`]).
    pub fn new() -> Self {
        Self::builder()
            .build()
            .expect("the default configuration is valid")
    }

    /// A builder starting from the defaults.
    pub fn builder() -> CircuitBreakerLayerBuilder {
        CircuitBreakerLayerBuilder::default()
    }

    /// The preset for callers that wait for the answer, to go under
    /// [`RetryLayer::interactive`](crate::RetryLayer::interactive): a short open duration that
    /// grows while the outage lasts. [`CircuitBreakerLayerBuilder::interactive`] starts a
    /// builder from it, to change a setting (an abort signal, say).
    ///
    /// The **open duration** is the shortest outage every caller sees once the breaker trips:
    /// for that long each call fails at once, whatever the endpoint does meanwhile. The
    /// defaults (5 to 7.5 s) suit a batch client; behind a user's click a 2 s blip becomes a
    /// 5 to 7.5 s lockout. This preset:
    ///
    /// | setter | value |
    /// |---|---|
    /// | [`consecutive_failures`](CircuitBreakerLayerBuilder::consecutive_failures) | 3 (one request's attempts in `interactive()`) |
    /// | [`open_duration`](CircuitBreakerLayerBuilder::open_duration) | 250 ms |
    /// | [`open_jitter`](CircuitBreakerLayerBuilder::open_jitter) | 0.5 (open 0.25 to 0.375 s after a first trip) |
    /// | [`open_multiplier`](CircuitBreakerLayerBuilder::open_multiplier) | 1.25: each failed probe, and each trip less than a [`window`](CircuitBreakerLayerBuilder::window) after the circuit closed, opens it a quarter longer |
    /// | [`max_open_duration`](CircuitBreakerLayerBuilder::max_open_duration) | 3 s (4.5 s with jitter: within `interactive()`'s 5 s deadline) |
    ///
    /// and the defaults for the rest (a 50 % failure ratio over 10 s with at least 20 calls,
    /// one probe). A short blip costs callers about the blip: with 20 clicks at once and one
    /// every 250 ms against an endpoint down for 2 s, the first click succeeds at 2 to 2.5 s
    /// (5.75 to 7.5 s with the defaults), and over blips of 1 to 8 s it came on average
    /// 0 to 1.2 s after the endpoint's return. A long outage is probed by one call every 3 to
    /// 4.5 s once the growth reaches its cap.
    ///
    /// ```
    /// use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
    ///
    /// let breaker = CircuitBreakerLayer::interactive();
    /// breaker.check_retry(&RetryLayer::interactive()).unwrap();
    /// ```
    pub fn interactive() -> Self {
        CircuitBreakerLayerBuilder::interactive()
            .build()
            .expect("the interactive preset is valid")
    }
}

impl<C> CircuitBreakerLayer<C> {
    /// The state now.
    pub fn state(&self) -> CircuitState {
        self.shared.breaker.state(Instant::now())
    }

    /// The state and counters now.
    pub fn stats(&self) -> CircuitStats {
        self.shared.breaker.stats(Instant::now())
    }

    /// The signal woken each time the circuit opens, if one was configured.
    pub fn abort_signal(&self) -> Option<&AbortSignal> {
        self.shared.breaker.abort_signal()
    }

    pub(crate) fn config(&self) -> &Config {
        self.shared.breaker.config()
    }
}

impl<C> CircuitBreakerLayer<C> {
    /// Checks that this breaker fits the retry layer above it:
    ///
    /// * the failures of one request's retry sequence can trip it, so that an endpoint that is
    ///   down opens the circuit while requests are still sleeping between attempts (and the
    ///   [`AbortSignal`](crate::AbortSignal) wakes them), rather than after they have all run
    ///   their course ([`RetryMismatch::SlowTrip`]). The consecutive-failures trip qualifies
    ///   when it needs no more failures than `max_attempts`; the ratio trip when
    ///   `minimum_calls` attempts fit in `max_attempts` and their sleeps (taken at the
    ///   backoff's ceiling) fit in the window;
    /// * when the retry layer has a [deadline](crate::retry::RetryLayerBuilder::deadline), the
    ///   circuit half-opens within it after its first trip, jitter included
    ///   ([`RetryMismatch::OpenPastDeadline`]).
    ///
    /// ```
    /// use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
    /// use tower_http_retry::circuit_breaker::RetryMismatch;
    ///
    /// let retry = RetryLayer::builder().max_attempts(3).build().unwrap();
    /// let slow = CircuitBreakerLayer::builder().consecutive_failures(10).build().unwrap();
    /// let RetryMismatch::SlowTrip(warning) = slow.check_retry(&retry).unwrap_err() else {
    ///     panic!()
    /// };
    /// assert_eq!(warning.failures_to_trip(), 10);
    ///
    /// let fast = CircuitBreakerLayer::builder().consecutive_failures(3).build().unwrap();
    /// assert!(fast.check_retry(&retry).is_ok());
    ///
    /// // A caller that waits at most 5 s, a circuit open 5 to 7.5 s (the defaults).
    /// let interactive = RetryLayer::interactive();
    /// let long = CircuitBreakerLayer::builder().consecutive_failures(3).build().unwrap();
    /// assert!(matches!(long.check_retry(&interactive), Err(RetryMismatch::OpenPastDeadline(_))));
    /// // The preset for interactive callers fits it.
    /// let short = CircuitBreakerLayer::interactive();
    /// assert!(short.check_retry(&interactive).is_ok());
    /// ```
    pub fn check_retry<R>(&self, retry: &RetryLayer<R>) -> Result<(), RetryMismatch> {
        check_retry(self.config(), retry)
    }
}

impl Default for CircuitBreakerLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> Clone for CircuitBreakerLayer<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, C> Layer<S> for CircuitBreakerLayer<C> {
    type Service = CircuitBreaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(inner, Arc::clone(&self.shared))
    }
}

impl<C: fmt::Debug> fmt::Debug for CircuitBreakerLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("breaker", &self.shared.breaker)
            .field("classifier", &self.shared.classifier)
            .finish()
    }
}

/// Configures a [`CircuitBreakerLayer`]; [`build`](Self::build) checks every value.
///
/// | setter | default |
/// |---|---|
/// | [`consecutive_failures`](Self::consecutive_failures) | 5 |
/// | [`failure_ratio`](Self::failure_ratio) | 0.5 |
/// | [`minimum_calls`](Self::minimum_calls) | 20 |
/// | [`window`](Self::window) | 10 s |
/// | [`open_duration`](Self::open_duration) | 5 s |
/// | [`open_jitter`](Self::open_jitter) | 0.5 (the circuit stays open 5 to 7.5 s) |
/// | [`open_multiplier`](Self::open_multiplier) | 2 |
/// | [`max_open_duration`](Self::max_open_duration) | 60 s, or the open duration if longer |
/// | [`half_open_probes`](Self::half_open_probes) | 1 |
/// | [`successes_to_close`](Self::successes_to_close) | 1 |
/// | [`abort_signal`](Self::abort_signal) | none |
/// | [`random_source`](Self::random_source) | [`RandomSource::from_entropy`] |
/// | [`classifier`](Self::classifier) | [`HttpClassifier::new`] |
///
/// Only [`Outcome::Transient`](crate::Outcome::Transient) outcomes count as failures; a
/// success resets the run of consecutive failures; a permanent outcome (a 404: the caller's
/// fault) is not counted at all.
#[must_use]
pub struct CircuitBreakerLayerBuilder<C = HttpClassifier> {
    classifier: C,
    settings: Settings,
}

impl Default for CircuitBreakerLayerBuilder {
    fn default() -> Self {
        Self {
            classifier: HttpClassifier::new(),
            settings: Settings::default(),
        }
    }
}

impl CircuitBreakerLayerBuilder {
    /// A builder starting from the preset
    /// [`CircuitBreakerLayer::interactive`] (trips after 3 failures in a row, open 250 ms and
    /// longer while the outage lasts, up to 3 s), to change a setting.
    ///
    /// ```
    /// use tower_http_retry::AbortSignal;
    /// use tower_http_retry::circuit_breaker::CircuitBreakerLayerBuilder;
    /// use tower_http_retry::retry::RetryLayerBuilder;
    ///
    /// let wake = AbortSignal::new();
    /// let retry = RetryLayerBuilder::interactive().abort_signal(wake.clone()).build().unwrap();
    /// let breaker = CircuitBreakerLayerBuilder::interactive().abort_signal(wake).build().unwrap();
    /// breaker.check_retry(&retry).unwrap();
    /// ```
    pub fn interactive() -> Self {
        Self::default()
            .consecutive_failures(3)
            .open_duration(Duration::from_millis(250))
            .open_jitter(0.5)
            .open_multiplier(1.25)
            .max_open_duration(Duration::from_secs(3))
    }
}

impl<C> CircuitBreakerLayerBuilder<C> {
    /// Opens the circuit after this many failures in a row (at least 1).
    pub fn consecutive_failures(mut self, failures: u32) -> Self {
        self.settings.consecutive_failures = Some(failures);
        self
    }

    /// Turns the consecutive-failures trip off (the ratio trip must then be on).
    pub fn without_consecutive_failures(mut self) -> Self {
        self.settings.consecutive_failures = None;
        self
    }

    /// Opens the circuit when at least this fraction of the calls in the
    /// [`window`](Self::window) failed, in `(0, 1]`, once there were
    /// [`minimum_calls`](Self::minimum_calls).
    pub fn failure_ratio(mut self, ratio: f64) -> Self {
        self.settings.failure_ratio = Some(ratio);
        self
    }

    /// Turns the failure-ratio trip off (the consecutive-failures trip must then be on).
    pub fn without_failure_ratio(mut self) -> Self {
        self.settings.failure_ratio = None;
        self
    }

    /// The fewest calls in the window for the ratio to count (at least 1), so that two failures
    /// out of three calls at night do not open the circuit.
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.settings.minimum_calls = calls;
        self
    }

    /// How far back the failure ratio looks. The window slides in tenths: a call is forgotten
    /// between 0.9 and 1 window after it finished.
    pub fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// How long the circuit stays open after its first trip, before jitter: the shortest
    /// outage every caller sees once the breaker trips (each call in that time fails at once).
    /// Keep it within the deadline of the callers above it
    /// ([`CircuitBreakerLayer::check_retry`] checks it).
    pub fn open_duration(mut self, duration: Duration) -> Self {
        self.settings.open_duration = duration;
        self
    }

    /// Lengthens each open period by `U(0, jitter)` times itself, in `[0, 1]`, so that clients
    /// that tripped together do not probe together.
    pub fn open_jitter(mut self, jitter: f64) -> Self {
        self.settings.open_jitter = jitter;
        self
    }

    /// Multiplies the open duration each time the circuit trips again soon (at least 1; 1
    /// turns growth off): a probe failed, or the circuit tripped less than one
    /// [`window`](Self::window) after it closed (an endpoint that flaps). It falls back to the
    /// base duration once the circuit has stayed closed for a whole window.
    pub fn open_multiplier(mut self, multiplier: f64) -> Self {
        self.settings.open_multiplier = multiplier;
        self
    }

    /// Caps the grown open duration (before jitter).
    pub fn max_open_duration(mut self, duration: Duration) -> Self {
        self.settings.max_open_duration = Some(duration);
        self
    }

    /// How many probe calls may be in flight at once while half-open (at least 1).
    pub fn half_open_probes(mut self, probes: u32) -> Self {
        self.settings.half_open_probes = probes;
        self
    }

    /// How many probes must succeed for the circuit to close (at least 1). One failed probe
    /// re-opens it.
    pub fn successes_to_close(mut self, successes: u32) -> Self {
        self.settings.successes_to_close = successes;
        self
    }

    /// The signal to wake each time the circuit opens; give the same one to
    /// [`RetryLayerBuilder::abort_signal`](crate::retry::RetryLayerBuilder::abort_signal) so that
    /// requests sleeping before a retry return their last outcome at once.
    pub fn abort_signal(mut self, signal: AbortSignal) -> Self {
        self.settings.abort = Some(signal);
        self
    }

    /// Labels the metrics of this layer's breakers (feature `metrics`) with
    /// `layer="<label>"`: the circuits by state, their transitions and rejections, as
    /// [`RetryLayerBuilder::metrics_label`](crate::retry::RetryLayerBuilder::metrics_label)
    /// does for a retry layer (give both of a stack the same one). An empty label fails
    /// [`build`](Self::build).
    pub fn metrics_label(mut self, label: impl Into<String>) -> Self {
        self.settings.metrics_label = Some(label.into().into());
        self
    }

    /// Names the authorities whose breakers' metrics (circuits by state, transitions,
    /// rejections) also carry `authority="<authority>"` (feature `metrics`), with one breaker
    /// per authority ([`build_per_authority`](Self::build_per_authority)): the scrape of an
    /// outage names the upstream whose circuit is open. The same allowlist as
    /// [`RetryLayerBuilder::metrics_authorities`](crate::retry::RetryLayerBuilder::metrics_authorities)
    /// (at most 64, each the host with the port when the URI has one, compared in lower case;
    /// the others counted without the label); more than 64, or an empty one, fails the build.
    /// A single breaker ([`build`](Self::build)) guards every authority at once and carries no
    /// `authority` label.
    pub fn metrics_authorities<I>(mut self, authorities: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.settings.metrics_authorities = crate::telemetry::authority_list(authorities);
        self
    }

    /// Where the open-duration jitter is drawn from (seed it in tests).
    pub fn random_source(mut self, random: RandomSource) -> Self {
        self.settings.random = random;
        self
    }

    /// Replaces the classifier (the type changes with it). Use the retry layer's, so that what is
    /// retried is what trips the breaker.
    pub fn classifier<C2>(self, classifier: C2) -> CircuitBreakerLayerBuilder<C2> {
        CircuitBreakerLayerBuilder {
            classifier,
            settings: self.settings,
        }
    }

    /// Checks every value and builds the layer.
    ///
    /// Fails, naming the field, when a count is zero, the ratio is outside `(0, 1]`, the jitter
    /// outside `[0, 1]`, the multiplier below 1 or not finite, a duration zero or above
    /// [`InvalidConfig::MAX_DURATION`](crate::InvalidConfig::MAX_DURATION), the maximum open
    /// duration below the open duration, the window shorter than 10 ns, or both trips are turned
    /// off.
    pub fn build(self) -> Result<CircuitBreakerLayer<C>, InvalidConfig> {
        let template = Template::new(self.classifier, self.settings, false)?;
        Ok(CircuitBreakerLayer {
            shared: template.make(None),
        })
    }

    /// Checks every value and builds a [`KeyedCircuitBreakerLayer`]: one breaker with this
    /// configuration per authority, for at most `max_authorities` authorities at once
    /// ([`KeyedCircuitBreakerLayer::DEFAULT_MAX_AUTHORITIES`] is a sensible start). See
    /// [one breaker per authority](CircuitBreakerLayer#one-breaker-per-authority).
    ///
    /// Fails as [`build`](Self::build) does, and when `max_authorities` is zero.
    pub fn build_per_authority(
        self,
        max_authorities: usize,
    ) -> Result<KeyedCircuitBreakerLayer<C>, InvalidConfig> {
        at_least_one("max_authorities", max_authorities as u64)?;
        let template = Template::new(self.classifier, self.settings, true)?;
        Ok(KeyedCircuitBreakerLayer::new_with(
            template,
            max_authorities,
        ))
    }
}

impl<C: fmt::Debug> fmt::Debug for CircuitBreakerLayerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayerBuilder")
            .field("classifier", &self.classifier)
            .field("settings", &self.settings)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_long_open_duration_raises_the_default_cap() {
        let layer = CircuitBreakerLayer::builder()
            .open_duration(Duration::from_secs(600))
            .build()
            .unwrap();
        assert_eq!(layer.config().open.cap(), Duration::from_secs(600));
    }

    #[test]
    fn invalid_values_fail_at_build_time_naming_the_field() {
        let field = |b: CircuitBreakerLayerBuilder| b.build().unwrap_err().field();
        let b = CircuitBreakerLayer::builder;
        assert_eq!(field(b().consecutive_failures(0)), "consecutive_failures");
        assert_eq!(
            field(b().without_consecutive_failures().without_failure_ratio()),
            "consecutive_failures"
        );
        assert_eq!(field(b().failure_ratio(0.0)), "failure_ratio");
        assert_eq!(field(b().failure_ratio(f64::NAN)), "failure_ratio");
        assert_eq!(field(b().failure_ratio(1.5)), "failure_ratio");
        assert_eq!(field(b().minimum_calls(0)), "minimum_calls");
        assert_eq!(field(b().half_open_probes(0)), "half_open_probes");
        assert_eq!(field(b().successes_to_close(0)), "successes_to_close");
        assert_eq!(field(b().window(Duration::ZERO)), "window");
        assert_eq!(field(b().window(Duration::from_nanos(9))), "window");
        assert_eq!(field(b().open_duration(Duration::ZERO)), "open_duration");
        assert_eq!(field(b().open_duration(Duration::MAX)), "open_duration");
        assert_eq!(
            field(b().max_open_duration(Duration::from_secs(1))),
            "max_open_duration"
        );
        assert_eq!(field(b().open_jitter(-0.1)), "open_jitter");
        assert_eq!(field(b().open_multiplier(0.5)), "open_multiplier");
        assert_eq!(field(b().open_multiplier(f64::INFINITY)), "open_multiplier");
        let keyed = |b: CircuitBreakerLayerBuilder, max| b.build_per_authority(max).unwrap_err();
        assert_eq!(keyed(b(), 0).field(), "max_authorities");
        assert_eq!(keyed(b().minimum_calls(0), 8).field(), "minimum_calls");
    }
}
