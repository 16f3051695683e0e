//! What happened to one logical request: the [`RetryReport`] (its attempts, each [`Delay`] and
//! where it came from, [`DelaySource`], why retrying stopped, [`StopReason`], and when to send
//! it again), read from a response ([`RetryReport::of`]), from any outcome, errors included
//! ([`RetryReport::capture`], [`Captured`]), or through a [`ReportSlot`] in the request's
//! extensions.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_http_retry::report::DelaySource;
//! use tower_http_retry::{RetryLayer, RetryReport, StopReason};
//!
//! let busy = service_fn(|_: http::Request<String>| async {
//!     let limited = http::Response::builder().status(429).header("retry-after", "1");
//!     Ok::<_, std::io::Error>(limited.body(String::new()).unwrap())
//! });
//! let client = ServiceBuilder::new().layer(RetryLayer::new()).service(busy);
//! let response = client.oneshot(http::Request::new(String::new())).await.unwrap();
//! let report = RetryReport::of(&response);
//! assert_eq!((report.attempts, report.stop), (3, StopReason::AttemptsExhausted));
//! assert!(report.delays.iter().all(|delay| delay.source == DelaySource::RetryAfter));
//! assert!(report.resend_after.is_some()); // not final: when to send it again
//! # }
//! ```

use pin_project_lite::pin_project;
use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

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
    /// [`max_refused_retries`](crate::retry::RetryLayerBuilder::max_refused_retries) free resends.
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
    /// A short jittered pause: the server turned the last attempt away unprocessed
    /// ([`NotSent::Refused`](crate::classify::NotSent::Refused): connection rotation), and the
    /// request went again on the next connection.
    Refused,
}

impl DelaySource {
    /// A short `snake_case` name, for logs and metrics labels.
    ///
    /// ```
    /// use tower_http_retry::report::DelaySource;
    ///
    /// assert_eq!(DelaySource::RetryAfterClamped.as_str(), "retry_after_clamped");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            DelaySource::Backoff => "backoff",
            DelaySource::RetryAfter => "retry_after",
            DelaySource::RetryAfterClamped => "retry_after_clamped",
            DelaySource::FirstAttempt => "first_attempt",
            DelaySource::Paced => "paced",
            DelaySource::Refused => "refused",
        }
    }
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
    pub resend_after: Option<Duration>,
    /// [`resend_after`](Self::resend_after) as a wall-clock time (the layer's
    /// [`wall_clock`](crate::retry::RetryLayerBuilder::wall_clock) plus the duration), for a
    /// durable queue that stores when to redeliver.
    pub resend_at: Option<SystemTime>,
    /// The last error of this request that no rule of the classifier recognised, named by the
    /// classifier ([`Classify::unknown_error`](crate::classify::Classify::unknown_error);
    /// [`HttpClassifier`](crate::HttpClassifier) joins the `Display` of each link of its
    /// `source()` chain), so that a new error kind can be given a rule. `None` when there was
    /// none; [`RetryStats::unknown_errors`](crate::retry::RetryStats::unknown_errors) counts them.
    pub unknown_error: Option<String>,
}

impl RetryReport {
    /// The report of a request that succeeded at its first attempt, without delay.
    pub const FIRST_TRY: RetryReport = RetryReport {
        attempts: 1,
        slept: Duration::ZERO,
        delays: Vec::new(),
        stop: StopReason::Success,
        resend_after: None,
        resend_at: None,
        unknown_error: None,
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

    /// Whether the layer sent the request more than once.
    pub fn retried(&self) -> bool {
        self.attempts > 1
    }

    /// Whether a proxy should tell its own callers not to retry this outcome on top
    /// (`x-should-retry: false`): the layer held back on purpose or the server asked it to
    /// ([`StopReason::asks_callers_to_stand_down`]), **or it has itself retried and still
    /// failed**. In the second case the upstream has had its retries already; a caller that
    /// retried on top would multiply them (three attempts per hop over two hops is nine calls
    /// upstream for one request).
    ///
    /// ```
    /// use tower_http_retry::{RetryReport, StopReason};
    ///
    /// let mut report = RetryReport::default();
    /// report.stop = StopReason::AttemptsExhausted;
    /// report.attempts = 3;
    /// assert!(report.asks_callers_to_stand_down()); // retried already
    /// report.attempts = 1;
    /// assert!(!report.asks_callers_to_stand_down()); // `max_attempts(1)`: the caller may retry
    /// report.stop = StopReason::BudgetEmpty;
    /// assert!(report.asks_callers_to_stand_down()); // held back on purpose
    /// ```
    pub fn asks_callers_to_stand_down(&self) -> bool {
        self.stop.asks_callers_to_stand_down()
            || (self.stop != StopReason::Success && self.retried())
    }

    /// Runs `future` (a call through the retry layer, or anything that makes one: a tonic
    /// client's method, `ServiceExt::oneshot`) and returns its output with the report of the
    /// request, **whatever the outcome**: an `Ok` response, an error of any client (hyper,
    /// reqwest, tonic's `Status`), a circuit breaker's refusal. No [`ReportSlot`] needed.
    ///
    /// The layer hands the report over while `future` is polled, so the call must run inside
    /// it (not in a task of its own or behind a `tower::buffer::Buffer` in front of the retry
    /// layer), and the future should make one logical request: with several, the report of the
    /// last one to finish is returned. With nested retry layers it is the outermost layer's.
    /// A request that succeeded at its first attempt without delay gives
    /// [`FIRST_TRY`](Self::FIRST_TRY), as [`RetryReport::of`] does (the layer hands over
    /// nothing on that path, which costs nothing); so does a future in which no retry layer
    /// finished a request, one that ran elsewhere included.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use tower::{service_fn, ServiceBuilder, ServiceExt};
    /// use tower_http_retry::{RetryLayer, RetryReport, StopReason};
    ///
    /// let down = service_fn(|_: http::Request<String>| async {
    ///     Err::<http::Response<String>, _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    /// });
    /// let client = ServiceBuilder::new().layer(RetryLayer::new()).service(down);
    ///
    /// let (result, report) = RetryReport::capture(client.oneshot(http::Request::new(String::new()))).await;
    /// assert!(result.is_err());
    /// assert_eq!((report.attempts, report.stop), (3, StopReason::AttemptsExhausted));
    /// # }
    /// ```
    pub fn capture<F: Future>(future: F) -> Captured<F> {
        Captured {
            future: Some(future),
            slot: ReportSlot::new(),
        }
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

/// A request the retry layer handed back without sending it: a new request to an endpoint that
/// [pacing](crate::Pacing) knows is down or paused, whose predicted wait in the endpoint's queue
/// is beyond its deadline, or whose queue is full. Sending it would only have added load to an
/// endpoint known to be failing, to learn nothing the layer did not know.
///
/// Not final: its report says [`StopReason::Deferred`], no attempt, and when to send the request
/// again ([`resend_after`](Self::resend_after), [`resend_at`](Self::resend_at)). The resend
/// times of requests turned away together are spread over the pacer's predicted releases (by
/// their place behind the queue, with jitter) and never fall inside a pause the layer knows of,
/// so a durable queue that honours them does not bring the herd back.
///
/// The layer has no response or error of its own to return for a request it did not send, so
/// it returns this only through a classifier that hands such requests back
/// ([`Classify::unsent`](crate::classify::Classify::unsent)):
/// [`RetryLayerBuilder::fail_unsent`](crate::retry::RetryLayerBuilder::fail_unsent) returns it as the
/// service's error, which must implement `From<Unsent>` (as `tower::BoxError` does; checked at
/// compile time). Without it the request is sent once, as any first attempt.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use tower::{service_fn, BoxError, Layer, ServiceExt};
/// use tower_http_retry::report::{StopReason, Unsent};
/// use tower_http_retry::{Pacing, RetryLayer};
///
/// let down = service_fn(|_: http::Request<String>| async {
///     Ok::<_, BoxError>(http::Response::builder().status(503).body(String::new()).unwrap())
/// });
/// let layer = RetryLayer::builder()
///     .deadline(Duration::from_millis(200))
///     .pacing(Pacing::builder().outage_after(1).build().unwrap())
///     .fail_unsent()
///     .build()
///     .unwrap();
/// let client = layer.layer(down);
/// // The first request finds the endpoint down (and waits its deadline in the queue).
/// let first = client.clone().oneshot(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(first.status(), 503);
/// // The next one would wait past its deadline: it is handed back, unsent.
/// let error = client.oneshot(http::Request::new(String::new())).await.unwrap_err();
/// let unsent = error.downcast_ref::<Unsent>().unwrap();
/// assert_eq!(unsent.report().stop, StopReason::Deferred);
/// assert_eq!(unsent.report().attempts, 0);
/// assert!(unsent.resend_after().is_some());
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsent {
    report: RetryReport,
}

impl Unsent {
    pub(crate) fn new(report: RetryReport) -> Self {
        Self { report }
    }

    /// The request's report: [`StopReason::Deferred`], no attempt, when to send it again.
    pub fn report(&self) -> &RetryReport {
        &self.report
    }

    /// The report, owned.
    pub fn into_report(self) -> RetryReport {
        self.report
    }

    /// When sending the request again makes sense, from when it was handed back.
    pub fn resend_after(&self) -> Option<Duration> {
        self.report.resend_after
    }

    /// [`resend_after`](Self::resend_after) as a wall-clock time.
    pub fn resend_at(&self) -> Option<SystemTime> {
        self.report.resend_at
    }
}

impl fmt::Display for Unsent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "not sent: its endpoint is down or paused, and its queue could not take it in time",
        )?;
        if let Some(after) = self.report.resend_after {
            write!(f, "; send it again in {after:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Unsent {}

/// A place for the [`RetryReport`] of a request, whatever its outcome.
///
/// Insert a clone into the request's extensions; the layer fills it when the request finishes,
/// including when it returns an error (the error itself is returned untouched).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_http_retry::{RetryLayer, StopReason};
/// use tower_http_retry::report::ReportSlot;
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
/// let report = slot.take().unwrap();
/// // An error no rule recognises: transient, retried, and named.
/// assert_eq!(report.stop, StopReason::AttemptsExhausted);
/// assert_eq!(report.unknown_error.as_deref(), Some("boom"));
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

thread_local! {
    /// The slot of the [`Captured`] future being polled on this thread, if any.
    static CAPTURING: RefCell<Option<ReportSlot>> = const { RefCell::new(None) };
}

/// Hands `report` to the [`RetryReport::capture`] being polled, if there is one. Called where a
/// layer finishes a request with something to report (the first-try success is left out: the
/// capture starts from [`RetryReport::FIRST_TRY`]).
pub(crate) fn offer(report: &RetryReport) {
    CAPTURING.with(|capturing| {
        if let Some(slot) = &*capturing.borrow() {
            slot.fill(report.clone());
        }
    });
}

/// Puts the previous capture back when a poll ends, even by a panic.
struct Restore(Option<ReportSlot>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CAPTURING.with(|capturing| *capturing.borrow_mut() = previous);
    }
}

pin_project! {
    /// The future of [`RetryReport::capture`]: the output of the future it runs and the report of
    /// its request.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Captured<F> {
        // Dropped as soon as it is ready, while still capturing: a retry layer that an outer
        // timeout cut short reports `Cancelled` when its future is dropped.
        #[pin]
        future: Option<F>,
        slot: ReportSlot,
    }
}

impl<F: Future> Future for Captured<F> {
    type Output = (F::Output, RetryReport);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(future) = this.future.as_mut().as_pin_mut() else {
            panic!("`Captured` polled after it completed");
        };
        let previous = CAPTURING.with(|capturing| capturing.replace(Some(this.slot.clone())));
        let restore = Restore(previous);
        let polled = future.poll(cx);
        if polled.is_ready() {
            this.future.set(None);
        }
        drop(restore);
        match polled {
            Poll::Ready(output) => {
                Poll::Ready((output, this.slot.take().unwrap_or(RetryReport::FIRST_TRY)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Captured<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Captured").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_capture_inside_another_gets_its_own_report_and_restores_the_outer_one() {
        let report = |attempts| RetryReport {
            attempts,
            ..RetryReport::FIRST_TRY
        };
        let (inner, outer) = RetryReport::capture(async {
            let inner = RetryReport::capture(async { offer(&report(2)) }).await;
            offer(&report(3));
            inner.1
        })
        .await;
        assert_eq!((inner.attempts, outer.attempts), (2, 3));
        // Nothing is captured outside a capture.
        offer(&report(4));
        CAPTURING.with(|capturing| assert!(capturing.borrow().is_none()));
    }
}
