//! Which outcomes are retried: the default HTTP table and transport errors.

use crate::mock_client::*;
use std::io::ErrorKind;
use tokio_test::{assert_pending, assert_ready_err};
use tower::BoxError;
use tower_http_retry::StopReason;

fn client() -> Client {
    Client::new(builder().max_attempts(5).build().unwrap())
}

/// Sends one request whose only attempt ends in `code`; checks nothing more reaches the mock.
fn single_attempt(code: u16) -> (u16, tower_http_retry::RetryReport) {
    let mut client = client();
    let mut future = client.start(get());
    client.reply(code);
    let done = finished(future.poll());
    client.assert_no_request();
    done
}

/// Fails the first attempt with `error`, answers the retry with 200.
async fn error_then_success(error: BoxError) -> (u16, tower_http_retry::RetryReport) {
    let mut client = client();
    let mut future = client.start(get());
    client.fail(error);
    assert_pending!(future.poll());
    advance(100 * MS).await;
    assert_pending!(future.poll());
    client.reply(200);
    finished(future.poll())
}

#[tokio::test(start_paused = true)]
async fn service_unavailable_twice_then_ok_takes_three_attempts() {
    let mut client = client();
    let (code, report) = run_through(&mut client, get(), &[503, 503, 200]).await;
    assert_eq!(code, 200);
    assert_eq!((report.attempts, report.stop), (3, StopReason::Success));
    assert_eq!(client.stats().attempts, 3);
}

#[tokio::test(start_paused = true)]
async fn bad_request_is_never_retried() {
    let (code, report) = single_attempt(400);
    assert_eq!(code, 400);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
}

#[tokio::test(start_paused = true)]
async fn not_implemented_is_permanent() {
    let (code, report) = single_attempt(501);
    assert_eq!(code, 501);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
}

#[tokio::test(start_paused = true)]
async fn connection_refused_is_retried() {
    let (code, report) = error_then_success(io_error(ErrorKind::ConnectionRefused).into()).await;
    assert_eq!((code, report.attempts), (200, 2));
}

#[tokio::test(start_paused = true)]
async fn attempt_timeout_is_retried() {
    let elapsed = tower::timeout::error::Elapsed::new();
    let (code, report) = error_then_success(elapsed.into()).await;
    assert_eq!((code, report.attempts), (200, 2));
}

#[tokio::test(start_paused = true)]
async fn an_unknown_error_is_retried_for_a_get_and_named_in_the_report() {
    let (status, report) = error_then_success(io_error(ErrorKind::PermissionDenied).into()).await;
    assert_eq!((status, report.attempts), (200, 2));
    assert_eq!(report.unknown_error.as_deref(), Some("permission denied"));
}

#[tokio::test(start_paused = true)]
async fn an_unknown_error_is_permanent_when_configured_so() {
    let classifier = tower_http_retry::HttpClassifier::new()
        .unknown_errors(tower_http_retry::Outcome::Permanent);
    let mut client = Client::new(builder().classifier(classifier).build().unwrap());
    let (request, slot) = with_slot(get());
    let mut future = client.start(request);
    client.fail(io_error(ErrorKind::PermissionDenied));
    let error = assert_ready_err!(future.poll());
    assert!(error.downcast_ref::<std::io::Error>().is_some());
    let report = slot.take().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
    client.assert_no_request();
}
