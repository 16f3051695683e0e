//! The axum reverse proxy of `examples/axum_proxy.rs` (`demo/src/proxy.rs`), driven end to end:
//! a hyper-util client sends to the proxy, which forwards to a scripted loopback upstream through
//! retry, breaker and per-attempt timeout. Real sockets, so real time with small delays.

use test_support as support;

use bytes::Bytes;
use demo::proxy::{forwarder, router, serve, ATTEMPTS, BODY_LIMIT, SHOULD_RETRY, STOP};
use http::{Method, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::time::Duration;
use support::{client, refused_addr, request, Reply, TestServer};
use tower_http_retry::circuit_breaker::CircuitBreakerLayerBuilder;
use tower_http_retry::retry::{RandomSource, TokenBucket};
use tower_http_retry::{Backoff, CircuitBreakerLayer, Jitter, RetryLayer, RetryReport, StopReason};

const MS: Duration = Duration::from_millis(1);

/// Up to 3 attempts, 5 to 20 ms apart, no budget, seeded.
fn retry() -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::Full, 5 * MS, 20 * MS))
        .random_source(RandomSource::seeded(5))
        .without_budget()
        .build()
        .unwrap()
}

/// A breaker that does not trip in these tests unless a test asks for it.
fn breaker() -> CircuitBreakerLayerBuilder {
    CircuitBreakerLayer::builder()
        .consecutive_failures(100)
        .without_failure_ratio()
}

/// The proxy in front of `upstream`, with a 200 ms per-attempt timeout.
async fn proxy(upstream: SocketAddr, breaker: CircuitBreakerLayer) -> SocketAddr {
    proxy_retrying(upstream, retry(), breaker).await
}

/// The proxy in front of `upstream`, retrying with `retry`.
async fn proxy_retrying(
    upstream: SocketAddr,
    retry: RetryLayer,
    breaker: CircuitBreakerLayer,
) -> SocketAddr {
    let stack = forwarder(retry, breaker, 200 * MS);
    serve(router(upstream.to_string().parse().unwrap(), stack))
        .await
        .unwrap()
}

/// Sends `method path` with `body` (and optional headers) to the proxy.
async fn send(
    proxy: SocketAddr,
    method: Method,
    path: &str,
    id: &str,
    headers: &[(&'static str, &str)],
    body: impl Into<Bytes>,
) -> Response<Incoming> {
    let uri: Uri = format!("http://{proxy}{path}").parse().unwrap();
    let mut request = request(method, &uri, id, body);
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    client().request(request).await.unwrap()
}

fn header<'r>(response: &'r Response<Incoming>, name: &http::HeaderName) -> &'r str {
    response.headers().get(name).unwrap().to_str().unwrap()
}

/// Fails the first attempt of every request id with 503.
async fn flaky() -> TestServer {
    TestServer::start(|hit| match hit.nth {
        1 => Reply::status(503),
        _ => Reply::status(200),
    })
    .await
}

#[tokio::test]
async fn a_get_is_retried_through_the_proxy() {
    let upstream = flaky().await;
    let proxy = proxy(upstream.addr(), breaker().build().unwrap()).await;
    let response = send(proxy, Method::GET, "/items?page=2", "g", &[], "").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, &ATTEMPTS), "2");
    assert_eq!(upstream.hits(&Method::GET, "g"), 2);
}

#[tokio::test]
async fn a_post_without_idempotency_key_is_forwarded_once() {
    let upstream = flaky().await;
    let proxy = proxy(upstream.addr(), breaker().build().unwrap()).await;
    let response = send(proxy, Method::POST, "/orders", "p", &[], "order").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, &STOP), "not_idempotent");
    assert_eq!(upstream.hits(&Method::POST, "p"), 1);
}

#[tokio::test]
async fn a_post_with_idempotency_key_is_replayed_with_its_body() {
    let upstream = TestServer::start(|hit| match (hit.nth, &hit.body[..]) {
        (1, _) => Reply::status(503),
        (_, b"order 17") if hit.headers.contains_key("idempotency-key") => Reply::status(201),
        _ => Reply::status(400),
    })
    .await;
    let proxy = proxy(upstream.addr(), breaker().build().unwrap()).await;
    let key = [("idempotency-key", "order-17")];
    let response = send(proxy, Method::POST, "/orders", "k", &key, "order 17").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(upstream.hits(&Method::POST, "k"), 2);
}

#[tokio::test]
async fn a_body_over_the_limit_gets_413_and_never_reaches_the_upstream() {
    let upstream = flaky().await;
    let proxy = proxy(upstream.addr(), breaker().build().unwrap()).await;
    let big = vec![b'x'; BODY_LIMIT + 1];
    let response = send(proxy, Method::PUT, "/blob", "big", &[], big).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(upstream.total_hits(), 0);
}

#[tokio::test]
async fn a_body_at_the_limit_is_forwarded_whole_on_every_attempt() {
    let upstream = TestServer::start(|hit| match (hit.nth, hit.body.len()) {
        (1, _) => Reply::status(503),
        (_, BODY_LIMIT) => Reply::status(200),
        _ => Reply::status(400),
    })
    .await;
    let proxy = proxy(upstream.addr(), breaker().build().unwrap()).await;
    let body = vec![b'x'; BODY_LIMIT];
    let response = send(proxy, Method::PUT, "/blob", "full", &[], body).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(upstream.hits(&Method::PUT, "full"), 2);
}

#[tokio::test]
async fn a_slow_attempt_times_out_and_is_retried() {
    let upstream = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(200).after(Duration::from_secs(5)),
        _ => Reply::status(200),
    })
    .await;
    let proxy = proxy(upstream.addr(), breaker().build().unwrap()).await;
    let response = send(proxy, Method::GET, "/slow", "s", &[], "").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, &ATTEMPTS), "2");
}

#[tokio::test]
async fn an_upstream_that_always_hangs_gives_504() {
    let upstream = TestServer::start(|_| Reply::status(200).after(Duration::from_secs(5))).await;
    let proxy = proxy(upstream.addr(), breaker().build().unwrap()).await;
    let response = send(proxy, Method::GET, "/slow", "h", &[], "").await;
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(header(&response, &ATTEMPTS), "3");
}

#[tokio::test]
async fn an_unreachable_upstream_gives_502_after_retries() {
    let proxy = proxy(refused_addr(), breaker().build().unwrap()).await;
    let response = send(proxy, Method::GET, "/", "u", &[], "").await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(header(&response, &ATTEMPTS), "3");
}

#[tokio::test]
async fn an_open_circuit_answers_503_with_retry_after_without_the_upstream() {
    let upstream = TestServer::start(|_| Reply::status(503)).await;
    let breaker = breaker()
        .consecutive_failures(3)
        .open_duration(Duration::from_secs(10))
        .open_jitter(0.0)
        .build()
        .unwrap();
    let proxy = proxy(upstream.addr(), breaker).await;
    let first = send(proxy, Method::GET, "/", "1", &[], "").await;
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        header(&first, &ATTEMPTS),
        "3",
        "three failures: the circuit opens"
    );

    let refused = send(proxy, Method::GET, "/", "2", &[], "").await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&refused, &http::header::RETRY_AFTER), "10");
    assert_eq!(header(&refused, &STOP), "circuit_open");
    assert_eq!(upstream.total_hits(), 3);
}

#[tokio::test]
async fn a_proxy_out_of_budget_tells_its_callers_to_stand_down() {
    let upstream = TestServer::start(|_| Reply::status(503)).await;
    // One retry's worth of budget, never refilled.
    let budget = TokenBucket::builder()
        .capacity(1.0)
        .retry_cost(1.0)
        .refill_per_second(0.0)
        .build()
        .unwrap();
    let proxy_retry = RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::Full, 5 * MS, 20 * MS))
        .random_source(RandomSource::seeded(5))
        .budget(budget)
        .build()
        .unwrap();
    let proxy = proxy_retrying(upstream.addr(), proxy_retry, breaker().build().unwrap()).await;
    // The proxy's caller retries too, with this crate's defaults.
    let outer = RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::Full, 5 * MS, 20 * MS))
        .build()
        .unwrap();
    let mut caller = tower::ServiceBuilder::new()
        .layer(outer.clone())
        .service(client());
    let uri: Uri = format!("http://{proxy}/items").parse().unwrap();

    let response = tower::ServiceExt::oneshot(&mut caller, request(Method::GET, &uri, "g", ""))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, &STOP), "budget_empty");
    assert_eq!(header(&response, &SHOULD_RETRY), "false");
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::StandDown));
    // Two upstream attempts for the one call: not three callers' attempts of two each.
    assert_eq!(upstream.hits(&Method::GET, "g"), 2);
    assert_eq!(outer.stats().attempts, 1);
}

/// The measurement: a proxy and its caller both with this crate's default layer, an
/// upstream that is down and asks for a second (`Retry-After: 1`). Before the proxy stood its
/// callers down after retrying, the caller sent 3 requests, each retried 3 times by the proxy:
/// 9 upstream calls and about 8.6 s for one request. Real sockets and real time (about 2 s).
#[tokio::test]
async fn a_proxy_that_retried_stands_its_callers_down() {
    let upstream = TestServer::start(|_| Reply::status(503).header("retry-after", "1")).await;
    let proxy = proxy_retrying(
        upstream.addr(),
        RetryLayer::new(),
        breaker().build().unwrap(),
    )
    .await;
    let outer = RetryLayer::new();
    let mut caller = tower::ServiceBuilder::new()
        .layer(outer.clone())
        .service(client());
    let uri: Uri = format!("http://{proxy}/items").parse().unwrap();

    let started = std::time::Instant::now();
    let response = tower::ServiceExt::oneshot(&mut caller, request(Method::GET, &uri, "g", ""))
        .await
        .unwrap();
    let took = started.elapsed();

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, &STOP), "attempts_exhausted");
    assert_eq!(header(&response, &ATTEMPTS), "3");
    assert_eq!(header(&response, &SHOULD_RETRY), "false");
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::StandDown));
    assert_eq!(
        report.slept,
        Duration::ZERO,
        "the caller did not wait on top"
    );
    assert!(upstream.hits(&Method::GET, "g") <= 3);
    assert_eq!(
        upstream.hits(&Method::GET, "g"),
        3,
        "the proxy's own attempts"
    );
    assert_eq!(outer.stats().attempts, 1);
    println!(
        "upstream calls {}, one request took {took:?}",
        upstream.total_hits()
    );
}
