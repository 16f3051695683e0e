//! `RetryMiddleware` in a `reqwest_middleware::ClientWithMiddleware`, against a loopback hyper
//! server (real sockets, so real time with small delays; assertions on counts, not durations),
//! and side by side with reqwest-retry (`side_by_side.rs`).

use test_support as support;

mod side_by_side;

use http::{Extensions, Method};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{refused_addr, Reply, TestServer, REQUEST_ID};
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{Backoff, Jitter, RetryLayer, RetryReport, StopReason};
use tower_http_retry_reqwest_middleware::RetryMiddleware;

const MS: Duration = Duration::from_millis(1);

/// Up to 3 attempts, 5 to 20 ms apart, no budget, seeded.
fn retry() -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::Full, 5 * MS, 20 * MS))
        .random_source(RandomSource::seeded(3))
        .without_budget()
        .build()
        .unwrap()
}

/// Answers 503 to the first attempt of each request, 200 (201 to a POST) after.
async fn flaky() -> TestServer {
    TestServer::start(|hit| match (hit.nth, &hit.method) {
        (1, _) => Reply::status(503),
        (_, &Method::POST) => Reply::status(201),
        _ => Reply::status(200),
    })
    .await
}

/// Counts the requests that pass it, and leaves a mark in their extensions.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicU32>);

#[derive(Clone, Debug, PartialEq)]
struct Seen(u32);

#[async_trait::async_trait]
impl Middleware for Counter {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        extensions.insert(Seen(n));
        next.run(request, extensions).await
    }
}

impl Counter {
    fn count(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

fn client_with(retry: RetryMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(retry)
        .build()
}

#[tokio::test]
async fn a_503_is_retried_through_the_chain_and_the_report_attached() {
    let server = flaky().await;
    let client = client_with(RetryMiddleware::new(retry()));

    let response = client
        .get(server.uri("/").to_string())
        .header(REQUEST_ID, "a")
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!(server.hits(&Method::GET, "a"), 2);
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
}

#[tokio::test]
async fn middlewares_after_it_run_per_attempt_and_before_it_per_request() {
    let server = flaky().await;
    let (outer, inner) = (Counter::default(), Counter::default());
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(outer.clone())
        .with(RetryMiddleware::new(retry()))
        .with(inner.clone())
        .build();
    let mut extensions = Extensions::new();

    let request = client
        .get(server.uri("/").to_string())
        .header(REQUEST_ID, "chain")
        .build()
        .unwrap();
    let response = client
        .execute_with_extensions(request, &mut extensions)
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!((outer.count(), inner.count()), (1, 2));
    // The caller sees what the last attempt's middlewares left.
    assert_eq!(extensions.get::<Seen>(), Some(&Seen(2)));
}

#[tokio::test]
async fn a_post_without_an_idempotency_key_is_sent_once() {
    let server = flaky().await;
    let retry = RetryMiddleware::new(retry());
    let client = client_with(retry.clone());

    let response = client
        .post(server.uri("/").to_string())
        .header(REQUEST_ID, "p")
        .body("order")
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 503);
    assert_eq!(server.hits(&Method::POST, "p"), 1);
    assert_eq!(retry.stats().stopped(StopReason::NotIdempotent), 1);

    let keyed = client
        .post(server.uri("/").to_string())
        .header(REQUEST_ID, "k")
        .header("idempotency-key", "order-1")
        .body("order")
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status(), 201);
    assert_eq!(server.hits(&Method::POST, "k"), 2);
}

#[tokio::test]
async fn the_report_of_an_error_is_in_the_extensions_and_the_error_is_not_wrapped() {
    let client = client_with(RetryMiddleware::new(retry()));
    let mut extensions = Extensions::new();
    let request = client
        .get(format!("http://{}/", refused_addr()))
        .build()
        .unwrap();

    let error = client
        .execute_with_extensions(request, &mut extensions)
        .await
        .unwrap_err();

    assert!(
        matches!(&error, reqwest_middleware::Error::Reqwest(e) if e.is_connect()),
        "{error:?}"
    );
    let report = extensions.get::<RetryReport>().expect("a report");
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::AttemptsExhausted)
    );
}

#[tokio::test]
async fn a_report_slot_in_the_extensions_is_filled() {
    let server = TestServer::start(|_| Reply::status(503)).await;
    let client = client_with(RetryMiddleware::new(retry()));
    let slot = ReportSlot::new();

    let response = client
        .get(server.uri("/").to_string())
        .header(REQUEST_ID, "s")
        .with_extension(slot.clone())
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 503);
    let report = slot.take().expect("the slot was filled");
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::AttemptsExhausted)
    );
}

#[tokio::test]
async fn a_retry_after_is_waited_for() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(429).header("retry-after", "1"),
        _ => Reply::status(200),
    })
    .await;
    let client = client_with(RetryMiddleware::default());

    let response = client
        .get(server.uri("/").to_string())
        .header(REQUEST_ID, "ra")
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    let report = RetryReport::of(&response);
    assert_eq!(report.delays.len(), 1, "{report:?}");
    assert!(
        report.delays[0].duration >= Duration::from_secs(1),
        "{report:?}"
    );
}
