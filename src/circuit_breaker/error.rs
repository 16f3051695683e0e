//! [`CircuitOpen`]: the one error the breaker makes itself.

use http::uri::Authority;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// The call was refused without reaching the inner service: the circuit is open (or half-open
/// with every probe slot taken).
///
/// It is returned as a `tower::BoxError`; find it with `downcast_ref`. The retry layer's
/// [`HttpClassifier`](crate::HttpClassifier) classifies it as permanent for this call, whatever
/// its `unknown_errors` setting, so an open circuit is never retried by the same request.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_http_retry::circuit_breaker::{CircuitBreakerLayer, CircuitOpen};
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
}

impl CircuitOpen {
    pub(crate) fn new(half_open_at: Instant) -> Self {
        Self {
            half_open_at,
            authority: None,
        }
    }

    /// The same refusal, from the breaker of `authority`.
    pub(crate) fn for_authority(mut self, authority: Option<&Authority>) -> Self {
        self.authority = authority.cloned();
        self
    }

    /// The authority (`host:port` as the request URI wrote it) whose breaker refused the call,
    /// when it came from a [`KeyedCircuitBreakerLayer`](super::KeyedCircuitBreakerLayer) and the
    /// request had one; `None` from a [`CircuitBreakerLayer`](super::CircuitBreakerLayer), or
    /// from the keyed layer's breaker shared by requests without an authority.
    pub fn authority(&self) -> Option<&Authority> {
        self.authority.as_ref()
    }

    /// When the breaker expects to let a probe through. For a half-open breaker whose probe slots
    /// are all taken, the moment it half-opened (already past).
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
        let wait = self.retry_after();
        if wait.is_zero() {
            f.write_str(": every half-open probe slot is taken")
        } else {
            write!(f, ": next probe in {wait:?}")
        }
    }
}

impl std::error::Error for CircuitOpen {}
