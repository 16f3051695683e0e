//! Reading a report whatever the outcome: a [`ReportSlot`] in the request, or
//! [`RetryReport::capture`]'s [`Captured`] future.

use super::RetryReport;
use pin_project_lite::pin_project;
use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

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

    /// A copy of the report, left in the slot, if the request has finished.
    pub fn get(&self) -> Option<RetryReport> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

impl<F> Captured<F> {
    pub(super) fn new(future: F) -> Self {
        Self {
            future: Some(future),
            slot: ReportSlot::new(),
        }
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
