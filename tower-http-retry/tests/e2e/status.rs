//! Status codes: transient ones are retried, `Retry-After` is honoured, permanent ones are not.

use super::support::{get, Reply, TestServer};
use super::{retry, send, with_timeout, GENEROUS};
use http::Method;
use std::time::Duration;
use tower_http_retry::report::DelaySource;
use tower_http_retry::{RetryReport, StopReason};

#[tokio::test]
async fn transient_503_is_retried_until_200() {
    let server = TestServer::start(|hit| match hit.nth {
        1 | 2 => Reply::status(503),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = with_timeout(&layer, GENEROUS);

    let (result, report) = send(&mut client, get(&server.uri("/"), "flaky")).await;

    let response = result.expect("the third attempt answers 200");
    assert_eq!(response.status(), 200);
    assert_eq!(server.hits(&Method::GET, "flaky"), 3);
    assert_eq!((report.attempts, report.stop), (3, StopReason::Success));
    assert_eq!(
        RetryReport::of(&response),
        &report,
        "attached to the response too"
    );
    assert_eq!(layer.stats().retries, 2);
}

#[tokio::test]
async fn retry_after_on_429_is_honoured() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(429).header("retry-after", "1"),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = with_timeout(&layer, GENEROUS);

    let (result, report) = send(&mut client, get(&server.uri("/"), "limited")).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(server.hits(&Method::GET, "limited"), 2);
    assert_eq!(report.delays.len(), 1, "{report:?}");
    let delay = report.delays[0];
    assert_eq!(delay.source, DelaySource::RetryAfter);
    assert_eq!(delay.after_attempt, 1);
    // The hint is 1 s; the layer may add up to 10 % of jitter, never subtract.
    assert!(delay.duration >= Duration::from_secs(1), "{delay:?}");
    assert!(delay.duration <= Duration::from_millis(1100), "{delay:?}");
    assert_eq!(layer.stats().retry_after_seen, 1);
}

#[tokio::test]
async fn permanent_400_is_not_retried() {
    let server = TestServer::start(|_| Reply::status(400)).await;
    let layer = retry().build().unwrap();
    let mut client = with_timeout(&layer, GENEROUS);

    let (result, report) = send(&mut client, get(&server.uri("/"), "bad")).await;

    assert_eq!(
        result.unwrap().status(),
        400,
        "the response is returned as is"
    );
    assert_eq!(server.hits(&Method::GET, "bad"), 1);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
    assert!(report.delays.is_empty());
}
