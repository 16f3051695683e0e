//! Pieces shared by the benches: the inner service, the request, tower's retry policy, the row
//! runner, and a way to drive a future that is already ready without an executor.
// Each bench compiles its own copy of this module and uses only part of it.
#![allow(dead_code)]

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::time::Sleep;
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::Policy;
use tower::Service;

/// The body every bench sends and receives.
pub type Body = Full<Bytes>;

/// A small GET, the same in every row. (The URI is parsed, as a real client's would be, so
/// copying the request bumps reference counts.)
pub fn request() -> Request<Body> {
    Request::builder()
        .uri("http://example.test/ping")
        .body(Full::new(Bytes::from_static(b"ping")))
        .expect("a valid request")
}

/// An in-process endpoint that is always ready and answers at once: always 200, or, when built
/// by [`Endpoint::failing_every_other_call`], 503 and 200 in turn.
#[derive(Clone, Debug, Default)]
pub struct Endpoint {
    calls: Option<Arc<AtomicU64>>,
}

impl Endpoint {
    /// Answers 200 to every call.
    pub fn ok() -> Self {
        Self::default()
    }

    /// Answers 503, then 200, then 503...: every logical request fails once, then succeeds.
    pub fn failing_every_other_call() -> Self {
        Self {
            calls: Some(Arc::default()),
        }
    }
}

impl<B> Service<Request<B>> for Endpoint {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        let mut response = Response::new(Body::default());
        if let Some(calls) = &self.calls {
            if calls.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            }
        }
        ready(Ok(response))
    }
}

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

/// One row: `call` sends a fresh request (built outside the measurement) and returns the
/// response, which must be a 200, so that a row cannot silently measure a failure. Responses are
/// dropped outside the measurement.
pub fn bench_calls(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    mut call: impl FnMut(Request<Body>) -> Response<Body>,
) {
    group.bench_function(name, |b| {
        b.iter_batched(
            request,
            |req| {
                let response = call(req);
                assert_eq!(response.status(), StatusCode::OK);
                response
            },
            BatchSize::SmallInput,
        );
    });
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
