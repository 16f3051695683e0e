//! What happened to one logical request: the [`RetryReport`] (its attempts, each [`Delay`] and
//! where it came from, [`DelaySource`], why retrying stopped, [`StopReason`], and when to send
//! it again), read from a response ([`RetryReport::of`]), from any outcome, errors included
//! ([`RetryReport::capture`], [`Captured`]), or through a [`ReportSlot`] in the request's
//! extensions; and which copy of a hedged request answered, [`HedgeReport`].
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

mod capture;
mod delay;
mod hedge;
mod reason;
mod unsent;

pub(crate) use capture::offer;
pub use capture::{Captured, ReportSlot};
pub use delay::{Delay, DelaySource};
pub use hedge::HedgeReport;
pub use reason::{StopReason, UnknownName};
pub use unsent::Unsent;

use std::future::Future;
use std::time::{Duration, SystemTime};

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
///
/// With the `serde` feature, a report (and each [`StopReason`], [`Delay`] and [`DelaySource`])
/// serializes as it is, names in `snake_case` as [`StopReason::as_str`] gives them, so that a
/// durable queue can store it beside the request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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
    /// classifier ([`Signals::unknown_error`](crate::classify::Signals::unknown_error);
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
        Captured::new(future)
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
