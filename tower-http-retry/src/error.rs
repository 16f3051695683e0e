//! The errors both middlewares share, and the one set of checks every builder validates with.
//!
//! They sit at the crate level, beside [`classify`](crate::classify::Classify) and the
//! [`AbortSignal`](crate::AbortSignal), so that the retry layer and the circuit breaker can both
//! use them without one importing the other.

use http::uri::Authority;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// A configuration value that cannot work, reported when a layer (or a budget, or a backoff) is
/// built, never at request time.
///
/// The message names the offending field, so `InvalidConfig` is meant to be shown to whoever
/// wrote the configuration.
///
/// ```
/// use std::time::Duration;
/// use tower_http_retry::{Backoff, Jitter, RetryLayer};
///
/// let err = RetryLayer::builder()
///     .backoff(Backoff::new(Jitter::Full, Duration::from_secs(2), Duration::from_secs(1)))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field(), "backoff.cap");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidConfig {
    field: &'static str,
    message: String,
}

impl InvalidConfig {
    /// The longest duration any setting may have (a year): a longer delay, deadline, clamp or
    /// open duration is a configuration mistake, refused with an `InvalidConfig`.
    pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

    /// A bad value of `field`, and why it cannot work: for the builders of other crates that
    /// plug into this one (a companion's store or client), so that every builder reports its
    /// mistakes the same way.
    ///
    /// ```
    /// use tower_http_retry::InvalidConfig;
    ///
    /// let err = InvalidConfig::new("max_streams", "must be at least 2");
    /// assert_eq!(err.to_string(), "invalid configuration: `max_streams` must be at least 2");
    /// ```
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    /// Checks that `value` is a finite number inside `[min, max]`, with the wording every
    /// builder of the crate uses for that bound.
    ///
    /// ```
    /// use tower_http_retry::InvalidConfig;
    ///
    /// assert!(InvalidConfig::ensure_in_range("ratio", 0.5, 0.0, 1.0).is_ok());
    /// let err = InvalidConfig::ensure_in_range("ratio", f64::NAN, 0.0, 1.0).unwrap_err();
    /// assert_eq!(err.field(), "ratio");
    /// ```
    pub fn ensure_in_range(
        field: &'static str,
        value: f64,
        min: f64,
        max: f64,
    ) -> Result<(), Self> {
        in_range(field, value, min, max)
    }

    /// Checks that `value` is a duration above zero and at most [`Self::MAX_DURATION`], with
    /// the wording every builder of the crate uses for that bound.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_http_retry::InvalidConfig;
    ///
    /// assert!(InvalidConfig::ensure_positive_duration("ttl", Duration::from_secs(1)).is_ok());
    /// assert!(InvalidConfig::ensure_positive_duration("ttl", Duration::ZERO).is_err());
    /// ```
    pub fn ensure_positive_duration(field: &'static str, value: Duration) -> Result<(), Self> {
        positive_duration(field, value)
    }

    /// The configuration field that holds the bad value, e.g. `"backoff.cap"`.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why the value cannot work.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid configuration: `{}` {}",
            self.field, self.message
        )
    }
}

impl std::error::Error for InvalidConfig {}

// One helper per kind of bound, each with one wording, for every builder of the crate.

/// A count that must be at least 1.
pub(crate) fn at_least_one(field: &'static str, value: u64) -> Result<(), InvalidConfig> {
    if value == 0 {
        Err(InvalidConfig::new(field, "must be at least 1"))
    } else {
        Ok(())
    }
}

/// A duration that is not zero (a bound, which any length can be).
pub(crate) fn non_zero(field: &'static str, value: Duration) -> Result<(), InvalidConfig> {
    if value.is_zero() {
        Err(InvalidConfig::new(field, "must be greater than zero"))
    } else {
        Ok(())
    }
}

/// A duration in `(0, InvalidConfig::MAX_DURATION]`.
pub(crate) fn positive_duration(field: &'static str, value: Duration) -> Result<(), InvalidConfig> {
    non_zero(field, value)?;
    duration_at_most_max(field, value)
}

/// A duration in `[0, InvalidConfig::MAX_DURATION]`.
pub(crate) fn duration_at_most_max(
    field: &'static str,
    value: Duration,
) -> Result<(), InvalidConfig> {
    if value > InvalidConfig::MAX_DURATION {
        let max = InvalidConfig::MAX_DURATION;
        Err(InvalidConfig::new(
            field,
            format!("({value:?}) must not exceed {max:?} (a year)"),
        ))
    } else {
        Ok(())
    }
}

/// `value` must not be below `floor`, named `floor_field` in the message.
pub(crate) fn not_below(
    field: &'static str,
    value: Duration,
    floor_field: &'static str,
    floor: Duration,
) -> Result<(), InvalidConfig> {
    if value < floor {
        Err(InvalidConfig::new(
            field,
            format!("({value:?}) must not be below {floor_field} ({floor:?})"),
        ))
    } else {
        Ok(())
    }
}

/// A float that is finite and inside `[min, max]`.
pub(crate) fn in_range(
    field: &'static str,
    value: f64,
    min: f64,
    max: f64,
) -> Result<(), InvalidConfig> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(InvalidConfig::new(
            field,
            format!("must be a finite number in [{min}, {max}], got {value}"),
        ))
    }
}

/// A fraction in `(0, 1]`.
pub(crate) fn ratio(field: &'static str, value: f64) -> Result<(), InvalidConfig> {
    if value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        Err(InvalidConfig::new(
            field,
            format!("must be a finite number in (0, 1], got {value}"),
        ))
    }
}

/// The call was refused by a circuit breaker without reaching the inner service: the circuit is
/// open, or half-open with every probe slot taken, or it was open when the service was polled for
/// readiness (the inner service was then not made ready, so the call cannot be sent even if the
/// circuit lets calls through by then). A [pool](crate::pool) whose every upstream asked to be
/// left alone refuses the same way, until the first of them may be asked again.
///
/// It is returned as a `tower::BoxError`; find it with `downcast_ref`. The retry layer's
/// [`HttpClassifier`](crate::HttpClassifier) classifies it as permanent for this call, whatever
/// its `unknown_errors` setting, so an open circuit is never retried by the same request.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_http_retry::CircuitBreakerLayer;
/// use tower_http_retry::circuit_breaker::CircuitOpen;
///
/// let breaker = CircuitBreakerLayer::builder().consecutive_failures(1).build().unwrap();
/// let mut svc = tower::ServiceBuilder::new().layer(breaker).service(service_fn(|_: http::Request<()>| async {
///     Ok::<_, std::io::Error>(http::Response::builder().status(503).body(()).unwrap())
/// }));
/// let _ = svc.ready().await.unwrap().call(http::Request::new(())).await; // trips
/// let error = svc.ready().await.unwrap().call(http::Request::new(())).await.unwrap_err();
/// let open = error.downcast_ref::<CircuitOpen>().expect("failed fast");
/// assert!(open.retry_after() > std::time::Duration::ZERO);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CircuitOpen {
    half_open_at: Instant,
    authority: Option<Authority>,
    refusal: Refusal,
}

/// Why the call was refused: each says something different of when to try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Open until `half_open_at`.
    Open,
    /// Half-open since `half_open_at`, with every probe slot taken.
    ProbesTaken,
    /// Open when the service was polled for readiness, no longer refusing at the call.
    NotReadied,
    /// Every upstream of a [pool](crate::pool) asked to be left alone until `half_open_at` or
    /// later.
    PoolHeld,
}

impl CircuitOpen {
    /// The circuit is open until `half_open_at`.
    pub(crate) fn new(half_open_at: Instant) -> Self {
        Self {
            half_open_at,
            authority: None,
            refusal: Refusal::Open,
        }
    }

    /// The circuit has been half-open since `since`, and every probe slot is taken.
    pub(crate) fn probes_taken(since: Instant) -> Self {
        Self {
            refusal: Refusal::ProbesTaken,
            ..Self::new(since)
        }
    }

    /// The circuit was open when the service was polled for readiness, so the inner service was
    /// not made ready; at `now`, the call time, the breaker would have let it through.
    pub(crate) fn not_readied(now: Instant) -> Self {
        Self {
            refusal: Refusal::NotReadied,
            ..Self::new(now)
        }
    }

    /// Every upstream of a [pool](crate::pool) is held, the first until `until`.
    pub(crate) fn held(until: Instant) -> Self {
        Self {
            refusal: Refusal::PoolHeld,
            ..Self::new(until)
        }
    }

    /// The same refusal, from the breaker of `authority`.
    pub(crate) fn for_authority(mut self, authority: Option<&Authority>) -> Self {
        self.authority = authority.cloned();
        self
    }

    /// The authority (`host:port` as the request URI wrote it) whose breaker refused the call, when
    /// it came from a
    /// [`KeyedCircuitBreakerLayer`](crate::circuit_breaker::KeyedCircuitBreakerLayer) and the
    /// request had one; `None` from a [`CircuitBreakerLayer`](crate::CircuitBreakerLayer), or from
    /// the keyed layer's breaker shared by requests without an authority.
    pub fn authority(&self) -> Option<&Authority> {
        self.authority.as_ref()
    }

    /// When the breaker expects to let a probe through, on tokio's clock
    /// ([`tokio::time::Instant`]). For a half-open breaker whose probe slots are all taken, the
    /// moment it half-opened (already past). For a call refused because the circuit was open when
    /// the service was polled for readiness, the moment of the call: the breaker would have let
    /// it through, and may let the next call through (as a probe if it is half-open).
    pub fn half_open_at(&self) -> Instant {
        self.half_open_at
    }

    /// How long from now until [`half_open_at`](Self::half_open_at); zero once it has passed.
    /// Suitable for a `Retry-After` header sent further up.
    pub fn retry_after(&self) -> Duration {
        self.half_open_at.saturating_duration_since(Instant::now())
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("circuit open")?;
        if let Some(authority) = &self.authority {
            write!(f, " for {authority}")?;
        }
        match self.refusal {
            Refusal::Open => match self.retry_after() {
                wait if wait.is_zero() => {
                    f.write_str(": its open period is over, the next call may probe")
                }
                wait => write!(f, ": next probe in {wait:?}"),
            },
            Refusal::ProbesTaken => f.write_str(": every half-open probe slot is taken"),
            Refusal::PoolHeld => write!(
                f,
                ": every upstream of the pool asked to be left alone, the first for another {:?}",
                self.retry_after()
            ),
            Refusal::NotReadied => f.write_str(
                " when the service was polled for readiness, so the call was not sent; \
                 the next call may go through now",
            ),
        }
    }
}

impl std::error::Error for CircuitOpen {}
