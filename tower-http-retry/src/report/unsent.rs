//! [`Unsent`]: a request the layer handed back without sending it.

use super::RetryReport;
#[cfg(doc)]
use super::StopReason;
use std::fmt;
use std::time::{Duration, SystemTime};

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
/// it returns this only when told how to hand such requests back
/// ([`HandBack`](crate::retry::HandBack)):
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
