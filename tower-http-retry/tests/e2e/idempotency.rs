//! Only requests that are safe to repeat are repeated.

use super::support::{request, Reply, TestServer};
use super::{retry, send, with_timeout, GENEROUS};
use http::Method;
use tower_http_retry::StopReason;

const ORDER: &str = r#"{"order":17}"#;

/// 503 on the first attempt, 200 afterwards; 400 if an attempt arrives without the whole body
/// (a replay must resend it).
async fn fails_once() -> TestServer {
    TestServer::start(|hit| match hit.nth {
        _ if hit.body != ORDER => Reply::status(400),
        1 => Reply::status(503),
        _ => Reply::status(200),
    })
    .await
}

#[tokio::test]
async fn post_without_idempotency_key_is_sent_once_on_503() {
    let server = fails_once().await;
    let layer = retry().build().unwrap();
    let mut client = with_timeout(&layer, GENEROUS);
    let post = request(Method::POST, &server.uri("/orders"), "order", ORDER);

    let (result, report) = send(&mut client, post).await;

    assert_eq!(
        result.unwrap().status(),
        503,
        "the 503 is returned, not retried"
    );
    assert_eq!(server.hits(&Method::POST, "order"), 1);
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::NotIdempotent)
    );
}

#[tokio::test]
async fn post_with_idempotency_key_is_retried() {
    let server = fails_once().await;
    let layer = retry().build().unwrap();
    let mut client = with_timeout(&layer, GENEROUS);
    let mut post = request(Method::POST, &server.uri("/orders"), "order", ORDER);
    post.headers_mut()
        .insert("idempotency-key", "order-17".parse().unwrap());

    let (result, report) = send(&mut client, post).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(server.hits(&Method::POST, "order"), 2);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
}
