//! What the telemetry features emit, in the ecosystem's terms.
//!
//! * `tracing`: each attempt runs in an `attempt` span carrying OpenTelemetry's HTTP attributes
//!   (`http.request.resend_count` on retries, method, server address and port, status or
//!   `error.type`), and each decision of the retry layer is a debug event (target
//!   `tower_http_retry`), those on an attempt's outcome inside that attempt's span.
//! * `metrics`: counters, histograms and a gauge through the `metrics` facade (attempts,
//!   retries by delay source, requests by stop reason, budget withdrawals and refunds, pacing
//!   mode changes, the delays, the pacer's queues and paced endpoints, circuit breakers by
//!   state, their transitions and rejections, hedging's events); `describe_metrics` (with the feature) gives an
//!   installed recorder their units and help texts.
//!
//! The names, units and labels are tabled in docs/telemetry.md and on
//! `describe_metrics`. Without its feature, each of them compiles to nothing.

// The retry core calls the functions of this module at the points where it already records
// (the shared counters of `retry/stats.rs`, the pacer's mode changes and queue, the one place
// an attempt is sent). Without its feature each function is an empty inline function and
// `Attempt` is the inner future itself, so the core names no feature and pays nothing.

use crate::error::InvalidConfig;

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(not(feature = "metrics"))]
#[path = "metrics_off.rs"]
mod metrics;

#[cfg(feature = "tracing")]
mod span;
#[cfg(not(feature = "tracing"))]
#[path = "span_off.rs"]
mod span;

#[cfg(feature = "metrics")]
pub use self::metrics::describe_metrics;
pub(crate) use self::metrics::{
    attempt, budget_denied, budget_granted, budget_refunded, circuit, circuit_dropped,
    circuit_rejected, concurrency, delay, hedge, paced_endpoint, pacer_mode, queue_joined,
    queue_left, stop, Labels,
};
pub(crate) use self::span::{ended_span, enter_attempt, Attempt, AttemptSpan, EndedSpan};

/// A decision of the retry core, as a `tracing` debug event (feature `tracing`; nothing
/// without it).
macro_rules! decision {
    ($($arg:tt)*) => {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "tower_http_retry", $($arg)*);
    };
}
pub(crate) use decision;

/// The most endpoints
/// [`RetryLayerBuilder::metrics_authorities`](crate::retry::RetryLayerBuilder::metrics_authorities)
/// may list.
pub(crate) const MAX_METRICS_AUTHORITIES: usize = 64;

/// An allowlist as the builders take it: each authority in lower case, as endpoints are keyed.
pub(crate) fn authority_list<I>(authorities: I) -> Vec<Box<str>>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    authorities
        .into_iter()
        .map(|authority| authority.as_ref().to_ascii_lowercase().into())
        .collect()
}

/// An allowlist of authorities whose metrics carry their `authority` label (a retry layer's
/// pacer, a breaker per authority): at most [`MAX_METRICS_AUTHORITIES`], none empty.
pub(crate) fn check_metrics_authorities(authorities: &[Box<str>]) -> Result<(), InvalidConfig> {
    if authorities.len() > MAX_METRICS_AUTHORITIES {
        return Err(InvalidConfig::new(
            "metrics_authorities",
            format!(
                "lists {}: at most {MAX_METRICS_AUTHORITIES}, each a series of its own",
                authorities.len()
            ),
        ));
    }
    if authorities.iter().any(|a| a.is_empty()) {
        return Err(InvalidConfig::new(
            "metrics_authorities",
            "must not list an empty authority",
        ));
    }
    Ok(())
}
