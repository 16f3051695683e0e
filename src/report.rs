//! What happened to one logical request: attempts, sleeps and why retrying stopped.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// Why the retry layer stopped and returned the outcome it returned.
///
/// Ordered (in declaration order) and hashable, so it can key a map of counts or queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The last attempt succeeded.
    Success,
    /// The last outcome was permanent (e.g. a 400): retrying cannot help.
    Permanent,
    /// The last outcome was transient but `max_attempts` were made.
    AttemptsExhausted,
    /// The retry budget had no token for another attempt.
    BudgetEmpty,
    /// The next sleep would have ended after the request's deadline.
    Deadline,
    /// The outcome was transient but the request is not safe to repeat (e.g. a POST without an
    /// `Idempotency-Key`), so it was sent once.
    NotIdempotent,
    /// The outcome was transient but the request could not be copied for another attempt.
    NotReplayable,
    /// The server's `Retry-After` was longer than the clamp and the policy is
    /// [`WhenLonger::GiveUp`](crate::WhenLonger::GiveUp).
    RetryAfterTooLong,
    /// The [`AbortSignal`](crate::AbortSignal) was shut down, or woke every sleeping request
    /// ([`wake_sleepers`](crate::AbortSignal::wake_sleepers)): the process is stopping.
    Aborted,
    /// The inner service failed `poll_ready` before a retry; its error is returned.
    NotReady,
    /// The caller dropped the response future before it finished (an outer timeout fired, a
    /// `select!` chose another branch): nothing was returned. Recorded in the counters and the
    /// [`ReportSlot`], for the requests a total timeout ended mid-sleep.
    Cancelled,
    /// [Pacing](crate::Pacing) could not serve the request in time: the endpoint's queue was
    /// full, or the predicted wait (or the wait itself) went past the request's deadline. Not
    /// final: [`RetryReport::retry_after`] says when trying again makes sense.
    Deferred,
    /// A circuit breaker refused the attempt ([`CircuitOpen`](crate::CircuitOpen)): the
    /// endpoint is failing, not the request. [`RetryReport::retry_after`] is the time until the
    /// breaker lets a probe through.
    CircuitOpen,
    /// A circuit breaker that opened holds the [`AbortSignal`](crate::AbortSignal) for the
    /// request's endpoint ([`hold_until`](crate::AbortSignal::hold_until)): the request returned
    /// its last outcome instead of sleeping only to be refused. [`RetryReport::retry_after`] is
    /// the time until the hold ends.
    Held,
    /// The server refused the request unprocessed (an HTTP/2 `REFUSED_STREAM` or `GOAWAY`, see
    /// [`NotSent::Refused`](crate::NotSent::Refused)) once more after
    /// [`max_refused_retries`](crate::RetryLayerBuilder::max_refused_retries) free resends.
    RefusedTooOften,
    /// The server asked not to retry this request: `x-should-retry: false`,
    /// `x-envoy-overloaded`, a negative gRPC pushback (see [`ServerHint`](crate::ServerHint)).
    /// Its last outcome is returned. Not final: the server is shedding load *now*.
    StandDown,
    /// An outer retry layer retries this request (it marked it, see
    /// [`NestedLayers`](crate::NestedLayers)), so this layer sent it once and left the retrying
    /// to the outer one: retries do not multiply across layers.
    Delegated,
}

impl StopReason {
    /// Every reason, in declaration order.
    pub const ALL: [StopReason; 17] = [
        StopReason::Success,
        StopReason::Permanent,
        StopReason::AttemptsExhausted,
        StopReason::BudgetEmpty,
        StopReason::Deadline,
        StopReason::NotIdempotent,
        StopReason::NotReplayable,
        StopReason::RetryAfterTooLong,
        StopReason::Aborted,
        StopReason::NotReady,
        StopReason::Cancelled,
        StopReason::Deferred,
        StopReason::CircuitOpen,
        StopReason::Held,
        StopReason::RefusedTooOften,
        StopReason::StandDown,
        StopReason::Delegated,
    ];

    /// Whether sending the request again later cannot help: it succeeded, or the endpoint (or
    /// the request itself) says no. Every other stop is about *now* (an outage, a budget, a
    /// deadline, a shutdown): a sender redelivers those, after
    /// [`RetryReport::retry_after`] when the report has it.
    ///
    /// ```
    /// use tower_http_retry::StopReason;
    ///
    /// assert!(StopReason::Permanent.is_final());
    /// assert!(!StopReason::BudgetEmpty.is_final());
    /// ```
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            StopReason::Success
                | StopReason::Permanent
                | StopReason::NotIdempotent
                | StopReason::NotReplayable
        )
    }

    /// Whether the layer held back on purpose (the budget, the pacer, a circuit breaker) or
    /// because the server asked it to: a caller that retried on top would add the very load the
    /// layer held back. A proxy passes this on to its own callers as `x-should-retry: false`,
    /// which this crate's [`ServerHints`](crate::ServerHints) (and the SDKs that share the
    /// convention) honour, so that retries do not multiply across hops.
    ///
    /// ```
    /// use tower_http_retry::StopReason;
    ///
    /// assert!(StopReason::BudgetEmpty.asks_callers_to_stand_down());
    /// assert!(!StopReason::AttemptsExhausted.asks_callers_to_stand_down());
    /// ```
    pub const fn asks_callers_to_stand_down(self) -> bool {
        matches!(
            self,
            StopReason::BudgetEmpty
                | StopReason::Deferred
                | StopReason::CircuitOpen
                | StopReason::Held
                | StopReason::StandDown
        )
    }

    /// A short `snake_case` name, for logs and metrics labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Success => "success",
            StopReason::Permanent => "permanent",
            StopReason::AttemptsExhausted => "attempts_exhausted",
            StopReason::BudgetEmpty => "budget_empty",
            StopReason::Deadline => "deadline",
            StopReason::NotIdempotent => "not_idempotent",
            StopReason::NotReplayable => "not_replayable",
            StopReason::RetryAfterTooLong => "retry_after_too_long",
            StopReason::Aborted => "aborted",
            StopReason::NotReady => "not_ready",
            StopReason::Cancelled => "cancelled",
            StopReason::Deferred => "deferred",
            StopReason::CircuitOpen => "circuit_open",
            StopReason::Held => "held",
            StopReason::RefusedTooOften => "refused_too_often",
            StopReason::StandDown => "stand_down",
            StopReason::Delegated => "delegated",
        }
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a delay came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DelaySource {
    /// The backoff policy.
    Backoff,
    /// The server's `Retry-After`, within the clamp.
    RetryAfter,
    /// The server's `Retry-After`, cut to the clamp.
    RetryAfterClamped,
    /// The optional random delay before the first attempt.
    FirstAttempt,
    /// A wait in the endpoint's queue while [pacing](crate::Pacing) held it.
    Paced,
    /// None (zero): the server refused the last attempt unprocessed
    /// ([`NotSent::Refused`](crate::NotSent::Refused)), and the request went again at once.
    Refused,
}

/// One sleep of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delay {
    /// The attempt that failed before this sleep (0 for the first-attempt jitter).
    pub after_attempt: u32,
    /// How long the request slept (until the abort, if the sleep was aborted).
    pub duration: Duration,
    /// Where the duration came from.
    pub source: DelaySource,
}

/// What happened to one logical request.
///
/// Attached to the response's extensions whenever there is something to say: a response that
/// succeeded at the first attempt without delay carries none, and [`RetryReport::of`] returns
/// [`RetryReport::FIRST_TRY`] for it. For errors (which the layer returns untouched), put a
/// [`ReportSlot`] in the request's extensions before sending it.
///
/// ```
/// use tower_http_retry::{RetryReport, StopReason};
///
/// let response = http::Response::new(());
/// let report = RetryReport::of(&response);
/// assert_eq!(report.attempts, 1);
/// assert_eq!(report.stop, StopReason::Success);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryReport {
    /// Attempts sent, the first included.
    pub attempts: u32,
    /// Total time slept before attempts.
    pub slept: Duration,
    /// Every sleep, in order.
    pub delays: Vec<Delay>,
    /// Why the layer stopped.
    pub stop: StopReason,
    /// When sending the request again makes sense, from when it stopped, if the layer knows:
    /// the predicted wait in the endpoint's queue ([`StopReason::Deferred`]), the time until the
    /// breaker lets a probe through ([`StopReason::CircuitOpen`]) or its hold ends
    /// ([`StopReason::Held`]), the next backoff delay (attempts exhausted on a transient
    /// outcome, the budget empty, the deadline), or the server's `Retry-After`
    /// ([`StopReason::RetryAfterTooLong`]). Never before what the layer knows of the endpoint:
    /// what is left of the server's last hint, a breaker's hold of the
    /// [`AbortSignal`](crate::AbortSignal), the pacer's predicted release; a time taken from
    /// those is spread upward by the `Retry-After` jitter. `None` for a final stop.
    pub retry_after: Option<Duration>,
    /// [`retry_after`](Self::retry_after) as a wall-clock time (the layer's
    /// [`wall_clock`](crate::RetryLayerBuilder::wall_clock) plus the duration), for a durable
    /// queue that stores when to redeliver.
    pub retry_at: Option<SystemTime>,
}

impl RetryReport {
    /// The report of a request that succeeded at its first attempt, without delay.
    pub const FIRST_TRY: RetryReport = RetryReport {
        attempts: 1,
        slept: Duration::ZERO,
        delays: Vec::new(),
        stop: StopReason::Success,
        retry_after: None,
        retry_at: None,
    };

    /// Sleeps whose duration came from `Retry-After`.
    pub fn retry_after_delays(&self) -> impl Iterator<Item = &Delay> {
        self.delays.iter().filter(|d| {
            matches!(
                d.source,
                DelaySource::RetryAfter | DelaySource::RetryAfterClamped
            )
        })
    }

    /// Whether attaching this report to a response says anything beyond "first try, success".
    pub(crate) fn is_first_try(&self) -> bool {
        self.attempts <= 1 && self.stop == StopReason::Success && self.delays.is_empty()
    }
}

impl Default for RetryReport {
    fn default() -> Self {
        Self::FIRST_TRY
    }
}

/// A place for the [`RetryReport`] of a request, whatever its outcome.
///
/// Insert a clone into the request's extensions; the layer fills it when the request finishes,
/// including when it returns an error (the error itself is returned untouched).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_http_retry::{ReportSlot, RetryLayer, StopReason};
///
/// let failing = service_fn(|_req: http::Request<String>| async {
///     Err::<http::Response<String>, _>(std::io::Error::other("boom"))
/// });
/// let mut client = tower::ServiceBuilder::new().layer(RetryLayer::new()).service(failing);
///
/// let slot = ReportSlot::new();
/// let mut request = http::Request::new(String::new());
/// request.extensions_mut().insert(slot.clone());
/// let result = client.ready().await.unwrap().call(request).await;
/// assert!(result.is_err());
/// assert_eq!(slot.take().unwrap().stop, StopReason::Permanent); // an unknown error
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ReportSlot(Arc<Mutex<Option<RetryReport>>>);

impl ReportSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the report out, if the request has finished.
    pub fn take(&self) -> Option<RetryReport> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    pub(crate) fn fill(&self, report: RetryReport) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(report);
    }
}
