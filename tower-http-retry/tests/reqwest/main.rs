//! The retry layer and the circuit breaker around reqwest's `Client`, against a loopback hyper
//! server (real sockets, so real time with small delays; assertions on counts, not durations).

use test_support as support;

use http::Method;
use std::time::Duration;
use support::{refused_addr, H2Reply, H2Server, Reply, TestServer, REQUEST_ID};
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::circuit_breaker::CircuitOpen;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::retry::RetryStats;
use tower_http_retry::{Backoff, CircuitBreakerLayer, Jitter, RetryLayer, RetryReport, StopReason};

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

fn request(client: &reqwest::Client, method: Method, url: String, id: &str) -> reqwest::Request {
    client
        .request(method, url)
        .header(REQUEST_ID, id)
        .build()
        .unwrap()
}

async fn send<S>(service: &mut S, request: reqwest::Request) -> Result<reqwest::Response, S::Error>
where
    S: Service<reqwest::Request, Response = reqwest::Response>,
{
    service.ready().await?.call(request).await
}

/// Answers 503 to the first attempt of each request, 200 after.
async fn flaky() -> TestServer {
    TestServer::start(|hit| match hit.nth {
        1 => Reply::status(503),
        _ => Reply::status(200),
    })
    .await
}

fn stats(layer: &RetryLayer) -> RetryStats {
    layer.stats()
}

#[tokio::test]
async fn a_503_is_retried_and_the_report_attached() {
    let server = flaky().await;
    let client = reqwest::Client::new();
    let layer = retry();
    let mut service = layer.layer(client.clone());

    let url = server.uri("/").to_string();
    let response = send(&mut service, request(&client, Method::GET, url, "a"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.hits(&Method::GET, "a"), 2);
    let report = response.extensions().get::<RetryReport>().unwrap();
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
}

#[tokio::test]
async fn a_post_without_idempotency_key_is_sent_once() {
    let server = flaky().await;
    let client = reqwest::Client::new();
    let layer = retry();
    let mut service = layer.layer(client.clone());

    let url = server.uri("/").to_string();
    let response = send(&mut service, request(&client, Method::POST, url, "p"))
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(server.hits(&Method::POST, "p"), 1);
    assert_eq!(stats(&layer).stopped(StopReason::NotIdempotent), 1);
}

#[tokio::test]
async fn a_post_with_a_body_and_a_key_is_replayed() {
    let server = TestServer::start(|hit| match (hit.nth, &hit.body[..]) {
        (1, _) => Reply::status(503),
        (_, b"order 17") => Reply::status(201),
        _ => Reply::status(400),
    })
    .await;
    let client = reqwest::Client::new();
    let mut service = retry().layer(client.clone());

    let request = client
        .post(server.uri("/orders").to_string())
        .header(REQUEST_ID, "k")
        .header("idempotency-key", "order-17")
        .body("order 17")
        .build()
        .unwrap();
    let response = send(&mut service, request).await.unwrap();
    assert_eq!(
        response.status(),
        201,
        "the second attempt carried the same body"
    );
    assert_eq!(server.hits(&Method::POST, "k"), 2);
}

#[tokio::test]
async fn a_refused_connection_is_retried_until_attempts_run_out() {
    let client = reqwest::Client::new();
    let layer = retry();
    let mut service = layer.layer(client.clone());

    let url = format!("http://{}/", refused_addr());
    let error = send(&mut service, request(&client, Method::GET, url, "r"))
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error}");
    let stats = stats(&layer);
    assert_eq!(stats.attempts, 3);
    assert_eq!(stats.stopped(StopReason::AttemptsExhausted), 1);
}

#[tokio::test]
async fn a_reqwest_timeout_is_retried() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(200).after(Duration::from_secs(5)),
        _ => Reply::status(200),
    })
    .await;
    let client = reqwest::Client::new();
    let layer = retry();
    let mut service = layer.layer(client.clone());

    let request = client
        .get(server.uri("/slow").to_string())
        .header(REQUEST_ID, "t")
        .timeout(50 * MS)
        .build()
        .unwrap();
    let response = send(&mut service, request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.hits(&Method::GET, "t"), 2);
}

#[tokio::test]
async fn retry_after_is_read_from_reqwest_headers() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(503).header("retry-after", "0"),
        _ => Reply::status(200),
    })
    .await;
    let client = reqwest::Client::new();
    let layer = retry();
    let mut service = layer.layer(client.clone());

    let url = server.uri("/").to_string();
    let response = send(&mut service, request(&client, Method::GET, url, "h"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(stats(&layer).retry_after_seen, 1);
}

#[tokio::test]
async fn the_breaker_opens_around_reqwest_and_fails_fast() {
    let server = TestServer::start(|_| Reply::status(503)).await;
    let client = reqwest::Client::new();
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(2)
        .build()
        .unwrap();
    let mut service = breaker.layer(client.clone());

    for id in ["1", "2"] {
        let url = server.uri("/").to_string();
        let response = send(&mut service, request(&client, Method::GET, url, id))
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
    }
    let url = server.uri("/").to_string();
    let error = send(&mut service, request(&client, Method::GET, url, "3"))
        .await
        .unwrap_err();
    assert!(error.is::<CircuitOpen>(), "{error}");
    assert_eq!(server.total_hits(), 2);
}

#[test]
fn a_reqwest_request_reports_the_authority_of_its_url() {
    use tower_http_retry::retry::RequestHead;
    let client = reqwest::Client::new();
    let with_port = client.get("http://127.0.0.1:8080/x").build().unwrap();
    let authority = RequestHead::authority(&with_port).expect("a URL with a host");
    assert_eq!(authority.as_str(), "127.0.0.1:8080");
    let without_port = client.get("https://example.test/x").build().unwrap();
    let authority = RequestHead::authority(&without_port).expect("a URL with a host");
    assert_eq!(authority.as_str(), "example.test");
}

#[tokio::test]
async fn a_keyed_breaker_over_reqwest_refuses_only_the_failing_authority() {
    let up = TestServer::start(|_| Reply::status(200)).await;
    let breakers = CircuitBreakerLayer::builder()
        .consecutive_failures(1)
        .build_per_authority(8)
        .unwrap();
    let client = reqwest::Client::new();
    let mut service = breakers.layer(client.clone());
    let down_addr = refused_addr();
    let down = format!("http://{down_addr}/");
    assert!(send(
        &mut service,
        request(&client, Method::GET, down.clone(), "d1")
    )
    .await
    .is_err());
    let refused = send(&mut service, request(&client, Method::GET, down, "d2"))
        .await
        .unwrap_err();
    let open = refused.downcast_ref::<CircuitOpen>().expect("refused fast");
    assert_eq!(
        open.authority().map(|a| a.as_str().to_owned()),
        Some(down_addr.to_string())
    );
    let ok = send(
        &mut service,
        request(&client, Method::GET, up.uri("/").to_string(), "u1"),
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), 200);
}

/// An HTTP/2 client over prior knowledge, with reqwest's own retry policy `retry`.
fn h2_client(retry: reqwest::retry::Builder) -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .retry(retry)
        .build()
        .unwrap()
}

/// reqwest 0.13 resends a refused HTTP/2 stream by itself (its default policy retries "protocol
/// NACKs", within a budget of 20 % extra requests): under the layer, a POST refused once is
/// sent twice and handled once, and the layer sees one success (its report says nothing of the
/// resend). With `reqwest::retry::never()`, the layer makes that resend itself, free
/// (`NotSent::Refused`), and reports it: one retry engine decides, and counts.
#[tokio::test]
async fn a_refused_stream_is_resent_once_by_reqwest_or_by_the_layer_and_handled_once() {
    let server = H2Server::start(|arrival| match arrival.nth {
        1 => H2Reply::Refuse,
        _ => H2Reply::Status(200),
    })
    .await;
    let url = server.uri("/orders").to_string();
    for (id, policy, attempts) in [
        ("reqwest-default", None, 1),
        ("reqwest-never", Some(reqwest::retry::never()), 2),
    ] {
        let client = match policy {
            None => reqwest::Client::builder()
                .http2_prior_knowledge()
                .build()
                .unwrap(),
            Some(never) => h2_client(never),
        };
        let mut service = retry().layer(client.clone());
        let response = send(
            &mut service,
            request(&client, Method::POST, url.clone(), id),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 200, "{id}");
        assert_eq!(RetryReport::of(&response).attempts, attempts, "{id}");
        assert_eq!(server.handled(&Method::POST, id), 1, "{id}: handled once");
    }
    assert_eq!(server.refused(), 2, "one refusal each");
}
