//! End-to-end tests: the retry layer in front of hyper-util's legacy client, against a real hyper
//! server on `127.0.0.1:0`.
//!
//! Real sockets mean real time: backoff is small (5 ms base, 50 ms cap) and the tests assert on
//! server hit counts, reports and counters, never on measured durations.

use test_support as support;

mod budget;
mod connections;
mod frames;
mod hints;
mod idempotency;
mod not_sent;
mod status;
mod transport;

use http::{Request, Response};
use std::time::Duration;
use support::{Body, HttpClient};
use tower::timeout::{Timeout, TimeoutLayer};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http_retry::hint::HintPolicy;
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::{RandomSource, Retry, RetryLayerBuilder};
use tower_http_retry::{Backoff, HttpClassifier, Jitter, RetryLayer, RetryReport};

/// A per-attempt timeout that no healthy loopback answer comes near.
const GENEROUS: Duration = Duration::from_secs(5);

/// The configuration every test starts from: 3 attempts, full jitter from 5 ms capped at 50 ms,
/// `Retry-After` honoured up to 2 s, a seeded random source, the default budget.
fn retry() -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .hint_policy(HintPolicy::honored().max_delay(Duration::from_secs(2)))
        .random_source(RandomSource::seeded(7))
}

/// `retry -> timeout(per attempt) -> hyper-util client`: errors are `BoxError`.
fn with_timeout(
    layer: &RetryLayer,
    per_attempt: Duration,
) -> Retry<Timeout<HttpClient>, HttpClassifier> {
    ServiceBuilder::new()
        .layer(layer.clone())
        .layer(TimeoutLayer::new(per_attempt))
        .service(support::client())
}

/// `retry -> hyper-util client`: errors are hyper-util's own `legacy::Error`.
fn without_timeout(layer: &RetryLayer) -> Retry<HttpClient, HttpClassifier> {
    ServiceBuilder::new()
        .layer(layer.clone())
        .service(support::client())
}

/// Sends one request and returns its outcome with the report the layer wrote for it.
async fn send<S, B>(
    service: &mut S,
    mut request: Request<Body>,
) -> (Result<Response<B>, S::Error>, RetryReport)
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let slot = ReportSlot::new();
    request.extensions_mut().insert(slot.clone());
    let result = match service.ready().await {
        Ok(ready) => ready.call(request).await,
        Err(error) => panic!("the client is always ready, got {error:?}"),
    };
    let report = slot
        .take()
        .expect("the layer fills the slot of every request");
    (result, report)
}
