//! Connections: a request that sleeps between attempts holds no connection to the upstream.
//!
//! Each of 50 concurrent GETs gets one 503 with a 256 KiB body, sleeps a fixed 500 ms (long
//! enough to look at the server's connections during the sleep), then gets a 200. The server
//! counts the TCP connections it accepts and those still open. Without [`ReleaseBodyLayer`],
//! every unread 503 body keeps its connection checked out of hyper-util's pool through the sleep,
//! and every retry opens a new connection.

use super::send;
use super::support::{self, get, Hit, Reply, TestServer};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};
use std::time::Duration;
use tokio::task::JoinSet;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http_retry::body::ReleaseBodyLayer;
use tower_http_retry::retry::RetryLayerBuilder;
use tower_http_retry::{Backoff, Jitter, RetryLayer, StopReason};

const REQUESTS: u32 = 50;
/// Far more than hyper reads along with the head.
const PAGE: usize = 256 * 1024;
const SLEEP: Duration = Duration::from_millis(500);
/// Bounds every wait on the server, so that a regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(10);

/// A fixed sleep, no budget, no `Retry-After`: every request sleeps once, for the same time.
fn retry() -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::None, SLEEP, SLEEP))
        .without_budget()
        .without_hint_delays()
}

/// The byte at offset `i` of every page: a pattern, so that a wrong slice shows.
fn byte_at(i: usize) -> u8 {
    (i % 251) as u8
}

/// A response with this status, an `x-upstream` header and a `PAGE`-byte body.
fn page(status: u16) -> Reply {
    let body: Vec<u8> = (0..PAGE).map(byte_at).collect();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    Reply::Respond(response).header("x-upstream", "lb-3")
}

/// One 503 page per request id, then an empty 200.
fn one_503_page(hit: &Hit) -> Reply {
    match hit.nth {
        1 => page(503),
        _ => Reply::status(200),
    }
}

/// Sends `REQUESTS` concurrent GETs with distinct ids through `client`; each task returns the
/// final status.
fn fan_out<S, B>(server: &TestServer, client: S) -> JoinSet<StatusCode>
where
    S: Service<http::Request<support::Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: 'static,
{
    let mut requests = JoinSet::new();
    for i in 0..REQUESTS {
        let client = client.clone();
        let request = get(&server.uri("/"), &format!("r{i}"));
        requests.spawn(async move { client.oneshot(request).await.unwrap().status() });
    }
    requests
}

/// The fewest connections open on the server between the last first attempt and the first
/// retry, i.e. while every request sleeps.
async fn fewest_open_while_sleeping(server: &TestServer) -> u32 {
    let watch = async {
        while server.total_hits() < REQUESTS {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut fewest = u32::MAX;
        while server.total_hits() == REQUESTS {
            fewest = fewest.min(server.open_connections());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        fewest
    };
    tokio::time::timeout(PATIENCE, watch)
        .await
        .expect("every request sleeps, then retries")
}

async fn all_ok(requests: JoinSet<StatusCode>) {
    let statuses = tokio::time::timeout(PATIENCE, requests.join_all())
        .await
        .expect("every request ends");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
}

/// The control: what the tests below would see without the layer. Were hyper to read or release
/// these bodies by itself, the tests below would prove nothing, and this one would say so.
#[tokio::test]
async fn without_release_every_sleeping_request_holds_its_connection() {
    let server = TestServer::start(one_503_page).await;
    let client = ServiceBuilder::new()
        .layer(retry().build().unwrap())
        .service(support::client());

    let requests = fan_out(&server, client);
    let fewest_open = fewest_open_while_sleeping(&server).await;
    all_ok(requests).await;

    assert_eq!(fewest_open, REQUESTS, "each sleeping request holds one");
    // None of them can serve a retry: retries open new connections (measured: 50 of them, one
    // per retry; a late retry may reuse the connection of an early one).
    assert!(server.accepted() > REQUESTS, "{}", server.accepted());
}

#[tokio::test]
async fn a_transient_body_within_the_limit_lets_the_retry_reuse_its_connection() {
    let server = TestServer::start(one_503_page).await;
    let client = ServiceBuilder::new()
        .layer(retry().build().unwrap())
        .layer(ReleaseBodyLayer::builder().limit(PAGE).build().unwrap())
        .service(support::client());

    all_ok(fan_out(&server, client)).await;

    assert_eq!(server.total_hits(), 2 * REQUESTS);
    // Every retry finds a connection of the first attempts idle in the pool (measured: exactly
    // 50; fewer would mean first attempts shared connections too).
    let accepted = server.accepted();
    assert!(
        accepted <= REQUESTS,
        "{accepted} connections for {REQUESTS} requests"
    );
}

#[tokio::test]
async fn a_transient_body_past_the_limit_closes_its_connection_before_the_sleep() {
    let server = TestServer::start(one_503_page).await;
    let client = ServiceBuilder::new()
        .layer(retry().build().unwrap())
        .layer(ReleaseBodyLayer::new()) // 64 KiB < PAGE
        .service(support::client());

    let requests = fan_out(&server, client);
    let fewest_open = fewest_open_while_sleeping(&server).await;
    all_ok(requests).await;

    assert_eq!(fewest_open, 0, "no sleeping request holds a connection");
}

#[tokio::test]
async fn the_last_transient_response_is_returned_with_the_part_of_its_body_read() {
    let server = TestServer::start(|_| page(503)).await;
    let mut client = ServiceBuilder::new()
        .layer(retry().max_attempts(2).build().unwrap())
        .layer(ReleaseBodyLayer::new())
        .service(support::client());

    let (result, report) = send(&mut client, get(&server.uri("/"), "down")).await;

    assert_eq!(
        (report.attempts, report.stop),
        (2, StopReason::AttemptsExhausted)
    );
    let response = result.expect("the last response");
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["x-upstream"], "lb-3");
    assert_eq!(response.headers()["content-length"], PAGE.to_string());
    assert!(response.body().is_truncated());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let expected: Vec<u8> = (0..ReleaseBodyLayer::DEFAULT_LIMIT).map(byte_at).collect();
    assert!(
        body == expected,
        "the first {} bytes",
        ReleaseBodyLayer::DEFAULT_LIMIT
    );
}

#[tokio::test]
async fn a_successful_body_is_streamed_untouched() {
    let server = TestServer::start(|_| page(200)).await;
    let mut client = ServiceBuilder::new()
        .layer(retry().build().unwrap())
        .layer(ReleaseBodyLayer::new())
        .service(support::client());

    let (result, _) = send(&mut client, get(&server.uri("/"), "ok")).await;

    let response = result.unwrap();
    assert!(!response.body().is_buffered());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len(), PAGE);
}
