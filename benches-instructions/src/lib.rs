//! What every bench of the workspace shares with the instruction gate, so that each compares
//! against the same baseline: tower's retry policy (the row the overheads are divided by), and a
//! way to drive a future that is ready on its first poll without an executor.
//!
//! The main package's criterion benches use it through `benches/support`; the gate's bench
//! (`benches/instructions.rs`) uses it directly.

use http::{Request, Response};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::time::Sleep;
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::Policy;

/// The smallest useful `tower::retry` policy: retry 5xx while `TpsBudget` allows, after `delay`;
/// deposit on success; copy the request for the retry.
#[derive(Clone, Debug)]
pub struct TowerPolicy {
    pub budget: Arc<TpsBudget>,
    pub delay: Duration,
}

impl<B: Clone, R, E> Policy<Request<B>, Response<R>, E> for TowerPolicy {
    type Future = Sleep;

    fn retry(
        &mut self,
        _: &mut Request<B>,
        result: &mut Result<Response<R>, E>,
    ) -> Option<Self::Future> {
        let failed = match result {
            Ok(response) => response.status().is_server_error(),
            Err(_) => true,
        };
        if !failed {
            self.budget.deposit();
            return None;
        }
        self.budget
            .withdraw()
            .then(|| tokio::time::sleep(self.delay))
    }

    fn clone_request(&mut self, request: &Request<B>) -> Option<Request<B>> {
        Some(request.clone())
    }
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// A waker that does nothing, for futures that complete on their first poll.
pub fn noop_waker() -> Waker {
    Waker::from(Arc::new(NoopWake))
}

/// Polls `future` once; it must be ready (nothing here ever waits).
pub fn poll_now<F: Future>(future: F, waker: &Waker) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the success path completes on its first poll"),
    }
}
