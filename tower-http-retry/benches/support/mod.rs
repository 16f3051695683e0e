//! Pieces shared by the benches: the inner service, the request and the row runner; tower's
//! retry policy is the instruction gate's (`benches-instructions/`, as are the poll helpers), so
//! that every bench compares against the same policy.
// Each bench compiles its own copy of this module and uses only part of it.
#![allow(dead_code)]

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::Service;
pub use tower_http_retry_instructions::TowerPolicy;

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
