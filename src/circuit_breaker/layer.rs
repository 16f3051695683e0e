//! [`CircuitBreakerLayer`] and its builder.

use super::keyed::KeyedCircuitBreakerLayer;
use super::service::CircuitBreaker;
use super::state::{open_backoff, Breaker, CircuitState, CircuitStats, Config, Hold};
use super::window::BUCKETS;
use crate::retry::{AbortSignal, HttpClassifier, InvalidConfig, RandomSource, MAX_DELAY};
use http::uri::Authority;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower_layer::Layer;

/// Wraps a service in a [`CircuitBreaker`]. Every clone of the layer, and every service it
/// makes, shares one breaker: one state, one failure count, one window.
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use tower_http_retry::circuit_breaker::CircuitBreakerLayer;
/// use tower_http_retry::AbortSignal;
///
/// let wake = AbortSignal::new(); // give the same signal to the RetryLayer
/// let breaker = CircuitBreakerLayer::builder()
///     .consecutive_failures(5)
///     .failure_ratio(0.5)
///     .minimum_calls(20)
///     .window(Duration::from_secs(10))
///     .open_duration(Duration::from_secs(5))
///     .abort_signal(wake.clone())
///     .build()
///     .expect("valid breaker configuration");
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::io::Error>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new().layer(breaker).service(client);
/// # let _ = client;
/// ```
#[must_use]
pub struct CircuitBreakerLayer<C = HttpClassifier> {
    shared: Arc<Shared<C>>,
}

/// The breaker and the classifier that feeds it; one `Arc` per layer (per authority when keyed).
pub(crate) struct Shared<C> {
    pub(crate) breaker: Breaker,
    pub(crate) classifier: Arc<C>,
}

/// A checked configuration, from which breakers are made: one for a [`CircuitBreakerLayer`],
/// one per authority for a [`KeyedCircuitBreakerLayer`].
pub(crate) struct Template<C> {
    config: Config,
    abort: Option<AbortSignal>,
    /// Whether each breaker made guards one authority (its opening holds only that authority).
    per_authority: bool,
    random: RandomSource,
    /// Shared by every breaker made, so a keyed layer does not clone it per authority.
    classifier: Arc<C>,
}

impl<C> Template<C> {
    /// A new closed breaker, with its own random stream, for calls to `authority` when the
    /// template is per authority.
    pub(crate) fn make(&self, authority: Option<&Authority>) -> Arc<Shared<C>> {
        let hold = if self.per_authority {
            Hold::Authority(authority.cloned())
        } else {
            Hold::Everyone
        };
        let abort = self.abort.clone().map(|signal| (signal, hold));
        Arc::new(Shared {
            breaker: Breaker::new(self.config.clone(), abort, &self.random),
            classifier: Arc::clone(&self.classifier),
        })
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn abort_signal(&self) -> Option<&AbortSignal> {
        self.abort.as_ref()
    }

    pub(crate) fn classifier(&self) -> &C {
        &self.classifier
    }
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
    consecutive_failures: Option<u32>,
    failure_ratio: Option<f64>,
    minimum_calls: u32,
    window: Duration,
    open_duration: Duration,
    open_jitter: f64,
    open_multiplier: f64,
    max_open_duration: Option<Duration>,
    half_open_probes: u32,
    successes_to_close: u32,
    abort: Option<AbortSignal>,
    random: RandomSource,
}

impl Default for CircuitBreakerLayerBuilder {
    fn default() -> Self {
        Self {
            classifier: HttpClassifier::new(),
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
        }
    }
}

impl<C> CircuitBreakerLayerBuilder<C> {
    /// Opens the circuit after this many failures in a row (at least 1).
    pub fn consecutive_failures(mut self, failures: u32) -> Self {
        self.consecutive_failures = Some(failures);
        self
    }

    /// Turns the consecutive-failures trip off (the ratio trip must then be on).
    pub fn without_consecutive_failures(mut self) -> Self {
        self.consecutive_failures = None;
        self
    }

    /// Opens the circuit when at least this fraction of the calls in the
    /// [`window`](Self::window) failed, in `(0, 1]`, once there were
    /// [`minimum_calls`](Self::minimum_calls).
    pub fn failure_ratio(mut self, ratio: f64) -> Self {
        self.failure_ratio = Some(ratio);
        self
    }

    /// Turns the failure-ratio trip off (the consecutive-failures trip must then be on).
    pub fn without_failure_ratio(mut self) -> Self {
        self.failure_ratio = None;
        self
    }

    /// The fewest calls in the window for the ratio to count (at least 1), so that two failures
    /// out of three calls at night do not open the circuit.
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.minimum_calls = calls;
        self
    }

    /// How far back the failure ratio looks. The window slides in tenths: a call is forgotten
    /// between 0.9 and 1 window after it finished.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How long the circuit stays open after its first trip, before jitter.
    pub fn open_duration(mut self, duration: Duration) -> Self {
        self.open_duration = duration;
        self
    }

    /// Lengthens each open period by `U(0, jitter)` times itself, in `[0, 1]`, so that clients
    /// that tripped together do not probe together.
    pub fn open_jitter(mut self, jitter: f64) -> Self {
        self.open_jitter = jitter;
        self
    }

    /// Multiplies the open duration each time a probe fails and the circuit re-opens (at least
    /// 1; 1 turns growth off). It falls back to the base duration once the circuit closes.
    pub fn open_multiplier(mut self, multiplier: f64) -> Self {
        self.open_multiplier = multiplier;
        self
    }

    /// Caps the grown open duration (before jitter).
    pub fn max_open_duration(mut self, duration: Duration) -> Self {
        self.max_open_duration = Some(duration);
        self
    }

    /// How many probe calls may be in flight at once while half-open (at least 1).
    pub fn half_open_probes(mut self, probes: u32) -> Self {
        self.half_open_probes = probes;
        self
    }

    /// How many probes must succeed for the circuit to close (at least 1). One failed probe
    /// re-opens it.
    pub fn successes_to_close(mut self, successes: u32) -> Self {
        self.successes_to_close = successes;
        self
    }

    /// The signal to wake each time the circuit opens; give the same one to
    /// [`RetryLayerBuilder::abort_signal`](crate::RetryLayerBuilder::abort_signal) so that
    /// requests sleeping before a retry return their last outcome at once.
    pub fn abort_signal(mut self, signal: AbortSignal) -> Self {
        self.abort = Some(signal);
        self
    }

    /// Where the open-duration jitter is drawn from (seed it in tests).
    pub fn random_source(mut self, random: RandomSource) -> Self {
        self.random = random;
        self
    }

    /// Replaces the classifier (the type changes with it). Use the retry layer's, so that what is
    /// retried is what trips the breaker.
    pub fn classifier<C2>(self, classifier: C2) -> CircuitBreakerLayerBuilder<C2> {
        CircuitBreakerLayerBuilder {
            classifier,
            consecutive_failures: self.consecutive_failures,
            failure_ratio: self.failure_ratio,
            minimum_calls: self.minimum_calls,
            window: self.window,
            open_duration: self.open_duration,
            open_jitter: self.open_jitter,
            open_multiplier: self.open_multiplier,
            max_open_duration: self.max_open_duration,
            half_open_probes: self.half_open_probes,
            successes_to_close: self.successes_to_close,
            abort: self.abort,
            random: self.random,
        }
    }

    /// Checks every value and builds the layer.
    ///
    /// Fails, naming the field, when a count is zero, the ratio is outside `(0, 1]`, the jitter
    /// outside `[0, 1]`, the multiplier below 1 or not finite, a duration zero or above
    /// [`MAX_DELAY`], the maximum open duration below the open duration, the window shorter than
    /// 10 ns, or both trips are turned off.
    pub fn build(self) -> Result<CircuitBreakerLayer<C>, InvalidConfig> {
        let template = self.template(false)?;
        Ok(CircuitBreakerLayer {
            shared: template.make(None),
        })
    }

    /// Checks every value and builds a [`KeyedCircuitBreakerLayer`]: one breaker with this
    /// configuration per authority, for at most `max_authorities` authorities at once
    /// ([`KeyedCircuitBreakerLayer::DEFAULT_MAX_AUTHORITIES`] is a sensible start). See
    /// [one breaker per authority](super#one-breaker-per-authority).
    ///
    /// Fails as [`build`](Self::build) does, and when `max_authorities` is zero.
    pub fn build_per_authority(
        self,
        max_authorities: usize,
    ) -> Result<KeyedCircuitBreakerLayer<C>, InvalidConfig> {
        if max_authorities == 0 {
            return Err(InvalidConfig::new("max_authorities", "must be at least 1"));
        }
        let template = self.template(true)?;
        Ok(KeyedCircuitBreakerLayer::new_with(
            template,
            max_authorities,
        ))
    }

    /// Checks every value.
    fn template(self, per_authority: bool) -> Result<Template<C>, InvalidConfig> {
        let fail = |field, message: &str| Err(InvalidConfig::new(field, message));
        if self.consecutive_failures.is_none() && self.failure_ratio.is_none() {
            return fail(
                "consecutive_failures",
                "and failure_ratio are both turned off: the circuit could never open",
            );
        }
        if self.consecutive_failures == Some(0) {
            return fail("consecutive_failures", "must be at least 1");
        }
        if self.failure_ratio.is_some_and(|r| !(r > 0.0 && r <= 1.0)) {
            return fail("failure_ratio", "must be in (0, 1]");
        }
        for (field, count) in [
            ("minimum_calls", self.minimum_calls),
            ("half_open_probes", self.half_open_probes),
            ("successes_to_close", self.successes_to_close),
        ] {
            if count == 0 {
                return fail(field, "must be at least 1");
            }
        }
        let max_open = self
            .max_open_duration
            .unwrap_or(Duration::from_secs(60).max(self.open_duration));
        for (field, duration) in [
            ("window", self.window),
            ("open_duration", self.open_duration),
            ("max_open_duration", max_open),
        ] {
            if duration.is_zero() || duration > MAX_DELAY {
                return fail(field, "must be greater than zero and at most a year");
            }
        }
        if self.window.as_nanos() < BUCKETS as u128 {
            return fail(
                "window",
                "must be at least 10 ns (it is kept in ten buckets)",
            );
        }
        if max_open < self.open_duration {
            return fail("max_open_duration", "must not be below open_duration");
        }
        if !(0.0..=1.0).contains(&self.open_jitter) {
            return fail("open_jitter", "must be in [0, 1]");
        }
        if !(self.open_multiplier.is_finite() && self.open_multiplier >= 1.0) {
            return fail("open_multiplier", "must be a finite number of at least 1");
        }
        let config = Config {
            consecutive_failures: self.consecutive_failures,
            failure_ratio: self.failure_ratio,
            minimum_calls: self.minimum_calls,
            window: self.window,
            open: open_backoff(self.open_duration, self.open_multiplier, max_open),
            open_jitter: self.open_jitter,
            half_open_probes: self.half_open_probes,
            successes_to_close: self.successes_to_close,
        };
        Ok(Template {
            config,
            abort: self.abort,
            per_authority,
            random: self.random,
            classifier: Arc::new(self.classifier),
        })
    }
}

impl<C: fmt::Debug> fmt::Debug for CircuitBreakerLayerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayerBuilder")
            .field("classifier", &self.classifier)
            .field("consecutive_failures", &self.consecutive_failures)
            .field("failure_ratio", &self.failure_ratio)
            .field("minimum_calls", &self.minimum_calls)
            .field("window", &self.window)
            .field("open_duration", &self.open_duration)
            .field("open_jitter", &self.open_jitter)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_long_open_duration_raises_the_default_cap() {
        let layer = CircuitBreakerLayer::builder()
            .open_duration(Duration::from_secs(600))
            .build()
            .unwrap();
        assert_eq!(layer.config().open.cap(), Duration::from_secs(600));
    }
}
