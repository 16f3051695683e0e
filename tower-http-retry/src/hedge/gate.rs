//! [`HedgeGate`]: what else must agree before a hedge is sent, and the gates the crate's own
//! layers are: the retry layer's pacer and the circuit breakers.

use crate::circuit_breaker::{CircuitBreakerLayer, CircuitState, KeyedCircuitBreakerLayer};
use crate::pacing::PacingMode;
use crate::RetryLayer;
use http::uri::Authority;
use std::fmt;

/// Something that may refuse a hedge to an endpoint: a hedge is an extra send, and is sent only
/// when every gate of the [`HedgeLayer`](super::HedgeLayer) allows it.
///
/// The crate's layers are gates: a [`RetryLayer`] allows a hedge while its pacer leaves the
/// endpoint open (none while the endpoint is probed, ramped or paused: those sends are the
/// pacer's to count; with [adaptive concurrency](crate::pacing::AdaptiveConcurrency), none
/// while the endpoint's limit is reached or requests wait for it), a [`CircuitBreakerLayer`] or [`KeyedCircuitBreakerLayer`] while the
/// endpoint's circuit is closed (none while it is open or half-open: a hedge must not become a
/// probe). A gate of one's own (a rate limiter's spare capacity, a load shedder) implements it.
///
/// ```
/// use http::uri::Authority;
/// use tower_http_retry::hedge::HedgeGate;
///
/// /// No hedges to the payments host, ever.
/// #[derive(Debug)]
/// struct NotPayments;
///
/// impl HedgeGate for NotPayments {
///     fn allows(&self, authority: Option<&Authority>) -> bool {
///         authority.map_or(true, |a| a.host() != "payments.internal")
///     }
/// }
/// assert!(!NotPayments.allows(Some(&"payments.internal:443".parse().unwrap())));
/// ```
pub trait HedgeGate: Send + Sync + fmt::Debug + 'static {
    /// Whether a hedge may be sent to `authority` now (`None`: a request without one).
    fn allows(&self, authority: Option<&Authority>) -> bool;
}

impl<C: Send + Sync + fmt::Debug + 'static> HedgeGate for RetryLayer<C> {
    fn allows(&self, authority: Option<&Authority>) -> bool {
        self.pacing_stats(authority).map_or(true, |stats| {
            // With adaptive concurrency, also none while the limit is reached or requests
            // wait for a place: a hedge is a request in flight the limit does not count.
            let room = match (stats.limit, stats.in_flight) {
                (Some(limit), Some(in_flight)) => in_flight < limit && stats.waiting == 0,
                _ => true,
            };
            stats.mode == PacingMode::Open && room
        })
    }
}

impl<C: Send + Sync + fmt::Debug + 'static> HedgeGate for CircuitBreakerLayer<C> {
    fn allows(&self, _authority: Option<&Authority>) -> bool {
        self.state() == CircuitState::Closed
    }
}

impl<C: Send + Sync + fmt::Debug + 'static> HedgeGate for KeyedCircuitBreakerLayer<C> {
    fn allows(&self, authority: Option<&Authority>) -> bool {
        self.state(authority)
            .map_or(true, |state| state == CircuitState::Closed)
    }
}
