//! [`StopReason`]: why the retry layer stopped.

#[cfg(doc)]
use super::{ReportSlot, RetryReport, Unsent};
use std::fmt;
use std::str::FromStr;

/// Why the retry layer stopped and returned the outcome it returned.
///
/// Ordered (in declaration order) and hashable, so it can key a map of counts or queues.
///
/// What each reason tells a sender, checked here so that the docs cannot drift from the code
/// (the situation that produces each one is pinned by `tests/stop_reasons.rs`):
///
/// ```
/// use tower_http_retry::StopReason::{self, *};
///
/// // reason, is_final (sending it again cannot help), asks_callers_to_stand_down
/// let table = [
///     (Success, true, false),
///     (Permanent, true, false),
///     (AttemptsExhausted, false, false),
///     (BudgetEmpty, false, true),
///     (Deadline, false, false),
///     (NotIdempotent, true, false),
///     (NotReplayable, true, false),
///     (RetryAfterTooLong, false, false),
///     (Aborted, false, false),
///     (NotReady, false, false),
///     (Cancelled, false, false),
///     (Deferred, false, true),
///     (CircuitOpen, false, true),
///     (Held, false, true),
///     (RefusedTooOften, false, false),
///     (StandDown, false, true),
///     (Delegated, false, false),
/// ];
/// assert_eq!(table.map(|(reason, ..)| reason), StopReason::ALL);
/// for (reason, is_final, stand_down) in table {
///     assert_eq!(reason.is_final(), is_final, "{reason}");
///     assert_eq!(reason.asks_callers_to_stand_down(), stand_down, "{reason}");
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
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
    /// [`WhenLonger::GiveUp`](crate::hint::WhenLonger::GiveUp).
    RetryAfterTooLong,
    /// The [`AbortSignal`](crate::AbortSignal) was shut down, or woke every sleeping request
    /// ([`wake_sleepers`](crate::AbortSignal::wake_sleepers)): the process is stopping. A
    /// breaker's hold is [`Held`](Self::Held), not this.
    Aborted,
    /// The inner service failed `poll_ready` before a retry; its error is returned.
    NotReady,
    /// The caller dropped the response future before it finished (an outer timeout fired, a
    /// `select!` chose another branch): nothing was returned. Recorded in the counters and the
    /// [`ReportSlot`], for the requests a total timeout ended mid-sleep.
    Cancelled,
    /// [Pacing](crate::Pacing) could not serve the request in time: the endpoint's queue was
    /// full, or the predicted wait (or the wait itself) went past the request's deadline. Not
    /// final: [`RetryReport::resend_after`] says when trying again makes sense. A new request
    /// handed back without being sent ([`Unsent`]) has this reason and no attempt.
    Deferred,
    /// A circuit breaker refused the attempt
    /// ([`CircuitOpen`](crate::circuit_breaker::CircuitOpen)): the endpoint is failing, not the
    /// request. Not final, though the request was not retried into the open circuit:
    /// [`RetryReport::resend_after`] is the time until the breaker lets a probe through.
    CircuitOpen,
    /// A circuit breaker that opened holds the [`AbortSignal`](crate::AbortSignal) for the
    /// request's endpoint ([`hold_until`](crate::AbortSignal::hold_until)): the request returned
    /// its last outcome instead of sleeping only to be refused. Not final, and not a shutdown
    /// ([`Aborted`](Self::Aborted) is): [`RetryReport::resend_after`] is the time until the hold
    /// ends.
    Held,
    /// The server turned the request away unprocessed (an HTTP/2 `REFUSED_STREAM` or `GOAWAY`,
    /// see [`NotSent::Refused`](crate::classify::NotSent::Refused)) once more after
    /// [`max_refused_retries`](crate::retry::RetryLayerBuilder::max_refused_retries) free resends,
    /// or answered `425 Too Early` again after its one free resend
    /// ([`NotSent::TooEarly`](crate::classify::NotSent::TooEarly)).
    RefusedTooOften,
    /// The server asked not to retry this request: `x-should-retry: false`, `x-envoy-overloaded`, a
    /// negative gRPC pushback (see [`ServerHint`](crate::hint::ServerHint)). Its last outcome is
    /// returned. Not final: the server is shedding load *now*.
    StandDown,
    /// An outer retry layer retries this request (it marked it, see
    /// [`NestedLayers`](crate::retry::NestedLayers)), so this layer sent it once and left the
    /// retrying to the outer one: retries do not multiply across layers.
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
    /// [`RetryReport::resend_after`] when the report has it.
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
    /// which this crate's [`ServerHints`](crate::hint::ServerHints) (and the SDKs that share the
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

/// Reads back the name [`StopReason::as_str`] gives, so that a reason stored as text (a log
/// line, a column, a job queue's record) round-trips.
///
/// ```
/// use tower_http_retry::StopReason;
///
/// for reason in StopReason::ALL {
///     assert_eq!(reason.as_str().parse::<StopReason>(), Ok(reason));
/// }
/// assert!("exhausted".parse::<StopReason>().is_err());
/// ```
impl FromStr for StopReason {
    type Err = UnknownName;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        StopReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == name)
            .ok_or_else(|| UnknownName::new("stop reason", name))
    }
}

/// A name that no variant has: what parsing a [`StopReason`] or a
/// [`DelaySource`](super::DelaySource) from text returns for text it does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownName {
    kind: &'static str,
    name: String,
}

impl UnknownName {
    pub(super) fn new(kind: &'static str, name: &str) -> Self {
        Self {
            kind,
            name: name.to_owned(),
        }
    }

    /// The text that was not recognised.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} name: {:?}", self.kind, self.name)
    }
}

impl std::error::Error for UnknownName {}
