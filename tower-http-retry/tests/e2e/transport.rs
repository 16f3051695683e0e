//! Transport failures: refused connections, dropped connections and attempts that stall past the
//! per-attempt timeout, through hyper-util's client with and without a `TimeoutLayer`.

use super::support::{get, refused_addr, Body, Reply, TestServer};
use super::{retry, send, with_timeout, without_timeout, GENEROUS};
use http::{Method, Request, Response, Uri};
use hyper::body::Incoming;
use std::error::Error;
use std::io;
use std::time::Duration;
use tower::Service;
use tower_http_retry::classify::{Classify, NotSent};
use tower_http_retry::{HttpClassifier, Outcome, StopReason};

fn refused_uri() -> Uri {
    format!("http://{}/", refused_addr()).parse().unwrap()
}

/// Whether an `io::Error` of kind `ConnectionRefused` is somewhere in the `source()` chain.
fn refused_in_chain(error: &(dyn Error + 'static)) -> bool {
    let mut link = Some(error);
    while let Some(error) = link {
        if let Some(io) = error.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        link = error.source();
    }
    false
}

#[tokio::test]
async fn connection_refused_is_retried_until_attempts_run_out() {
    let layer = retry().max_attempts(4).build().unwrap();
    let mut client = with_timeout(&layer, GENEROUS);

    let (result, report) = send(&mut client, get(&refused_uri(), "nobody")).await;

    let error = result.expect_err("nothing listens there");
    assert!(refused_in_chain(&*error), "{error:?}");
    let outcome = HttpClassifier::new().classify_error_chain(&*error);
    assert_eq!(outcome, Outcome::NotSent(NotSent::Unconnected));
    assert_eq!(
        (report.attempts, report.stop),
        (4, StopReason::AttemptsExhausted)
    );
    assert_eq!(report.delays.len(), 3);
    assert_eq!(layer.stats().attempts, 4);
}

#[tokio::test]
async fn connection_refused_is_retried_without_a_timeout_layer() {
    let layer = retry().max_attempts(4).build().unwrap();
    let mut client = without_timeout(&layer);

    let (result, report) = send(&mut client, get(&refused_uri(), "nobody")).await;

    // hyper-util's own error type reaches the classifier, not a `BoxError`.
    let error: hyper_util::client::legacy::Error = result.expect_err("nothing listens there");
    assert!(error.is_connect(), "{error:?}");
    assert!(refused_in_chain(&error), "{error:?}");
    let outcome = <HttpClassifier as Classify<Response<Incoming>, _>>::classify_error(
        &HttpClassifier::new(),
        &error,
    );
    assert_eq!(outcome, Outcome::NotSent(NotSent::Unconnected));
    assert_eq!(
        (report.attempts, report.stop),
        (4, StopReason::AttemptsExhausted)
    );
    assert_eq!(layer.stats().attempts, 4);
}

/// Sends a GET through `client` to a server that drops the first connection unanswered and
/// answers 200 afterwards; checks it took exactly two attempts.
async fn recovers_after_a_dropped_connection<S>(mut client: S)
where
    S: Service<Request<Body>, Response = Response<Incoming>>,
    S::Error: std::fmt::Debug,
{
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::Hangup,
        _ => Reply::status(200),
    })
    .await;

    let (result, report) = send(&mut client, get(&server.uri("/"), "reset")).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(server.hits(&Method::GET, "reset"), 2);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
}

#[tokio::test]
async fn dropped_connection_is_retried_until_the_server_recovers() {
    let layer = retry().build().unwrap();
    recovers_after_a_dropped_connection(with_timeout(&layer, GENEROUS)).await;
}

#[tokio::test]
async fn dropped_connection_is_retried_without_a_timeout_layer() {
    let layer = retry().build().unwrap();
    recovers_after_a_dropped_connection(without_timeout(&layer)).await;
}

#[tokio::test]
async fn attempt_stalled_past_the_per_attempt_timeout_is_retried() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(200).after(Duration::from_secs(30)),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = with_timeout(&layer, Duration::from_millis(500));

    let (result, report) = send(&mut client, get(&server.uri("/"), "slow")).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(server.hits(&Method::GET, "slow"), 2);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
}
