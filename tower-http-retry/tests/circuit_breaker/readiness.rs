//! Readiness: delegated while closed, always ready while open, never an error for an open
//! circuit; checked on `tower_test::mock`, which panics on a call without readiness.

use crate::scripted::*;
use std::future::poll_fn;
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready, assert_ready_err, assert_ready_ok};
use tower::limit::ConcurrencyLimit;
use tower::{Layer, Service};

#[tokio::test(start_paused = true)]
async fn closed_poll_ready_waits_for_the_inner_service() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.handle.allow(0);
    assert_pending!(mocked.svc.poll_ready());

    mocked.handle.allow(1);
    assert!(mocked.svc.is_woken());
    assert_ready_ok!(mocked.svc.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn closed_poll_ready_passes_inner_errors_on() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.handle.send_error("inner service failed");
    let error = assert_ready_err!(mocked.svc.poll_ready());
    assert_eq!(error.to_string(), "inner service failed");
}

#[tokio::test(start_paused = true)]
async fn open_poll_ready_is_ready_without_the_inner_service() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    for _ in 0..3 {
        mocked.round_trip(503).unwrap();
    }
    mocked.handle.allow(0);

    assert_ready_ok!(mocked.svc.poll_ready());
    let mut future = tokio_test::task::spawn(mocked.svc.call(get()));
    refused(assert_ready!(future.poll()).map(|r| r.status().as_u16()));
    mocked.assert_no_call();
}

#[tokio::test(start_paused = true)]
async fn open_poll_ready_does_not_report_an_error_the_inner_service_has() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    for _ in 0..3 {
        mocked.round_trip(503).unwrap();
    }
    mocked.handle.send_error("inner service failed");
    assert_ready_ok!(mocked.svc.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_call_readied_while_open_is_refused_after_half_opening() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    for _ in 0..3 {
        mocked.round_trip(503).unwrap();
    }
    assert_ready_ok!(mocked.svc.poll_ready());
    advance(SEC).await;

    // The inner service was never made ready for this call: it must not reach the mock.
    let mut future = tokio_test::task::spawn(mocked.svc.call(get()));
    refused(assert_ready!(future.poll()).map(|r| r.status().as_u16()));
    mocked.assert_no_call();
    assert_eq!(mocked.round_trip(200).unwrap(), 200, "the next call probes");
}

/// A breaker over the mock, tripped and polled ready while open (which leaves the mock
/// un-readied), then past its open period: the next `call` finds it due to half-open.
async fn readied_while_open_then_half_open(
    layer: &tower_http_retry::CircuitBreakerLayer,
) -> Mocked {
    let mut mocked = Mocked::new(layer);
    for _ in 0..3 {
        mocked.round_trip(503).unwrap();
    }
    assert_ready_ok!(mocked.svc.poll_ready());
    advance(SEC).await;
    mocked
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_after_half_opening_is_not_counted_as_a_probe() {
    let layer = breaker().build().unwrap();
    let mut mocked = readied_while_open_then_half_open(&layer).await;
    let mut future = tokio_test::task::spawn(mocked.svc.call(get()));
    refused(assert_ready!(future.poll()).map(|r| r.status().as_u16()));

    let stats = layer.stats();
    assert_eq!((stats.probes, stats.rejected), (0, 1), "{stats:?}");
    assert_eq!(mocked.round_trip(200).unwrap(), 200, "the next call probes");
    assert_eq!(layer.stats().probes, 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_after_half_opening_says_the_next_call_may_go_through_now() {
    let layer = breaker().build().unwrap();
    let mut mocked = readied_while_open_then_half_open(&layer).await;
    let mut future = tokio_test::task::spawn(mocked.svc.call(get()));
    let open = refused(assert_ready!(future.poll()).map(|r| r.status().as_u16()));

    assert_eq!(
        open.to_string(),
        "circuit open when the service was polled for readiness, so the call was not sent; \
         the next call may go through now"
    );
    assert_eq!(open.retry_after(), std::time::Duration::ZERO);
    assert!(open.half_open_at() <= Instant::now());
}

#[tokio::test(start_paused = true)]
async fn a_refused_call_gives_back_what_the_inner_readiness_held() {
    let endpoint = Endpoint::answering(200);
    let layer = breaker().build().unwrap();
    let mut first = layer.layer(ConcurrencyLimit::new(endpoint.clone(), 1));
    let mut second = first.clone();
    let mut ready = tokio_test::task::spawn(poll_fn(|cx| first.poll_ready(cx)));
    assert_ready_ok!(ready.poll(), "the first clone takes the only permit");
    drop(ready);

    // Another service of the layer trips the shared breaker before the first clone calls.
    calls(&mut layer.layer(Endpoint::answering(503)), 3).await;
    refused(first.call(get()).await.map(|r| r.status().as_u16()));
    advance(SEC).await;

    let mut ready = tokio_test::task::spawn(poll_fn(|cx| second.poll_ready(cx)));
    assert_ready_ok!(ready.poll(), "the refused call's permit is free again");
    drop(ready);
    assert_eq!(second.call(get()).await.unwrap().status(), 200, "the probe");
    assert_eq!(endpoint.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_breaker() {
    let endpoint = Endpoint::answering(503);
    let layer = breaker().build().unwrap();
    let mut first = layer.layer(endpoint.clone());
    let mut second = first.clone();
    calls(&mut first, 3).await;
    refused(call(&mut second).await);
    refused(call(&mut layer.layer(endpoint.clone())).await);
    assert_eq!(endpoint.calls(), 3);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "poll_ready must be called before call")]
async fn a_clone_starts_unready() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    assert_ready_ok!(mocked.svc.poll_ready());
    let mut clone = mocked.svc.get_ref().clone();
    drop(clone.call(get()));
}

#[tokio::test(start_paused = true)]
async fn readiness_survives_an_opening_between_two_poll_ready_calls() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    let mut tripper = Mocked::new(&layer); // another service sharing the same breaker
    mocked.handle.allow(1);
    assert_ready_ok!(mocked.svc.poll_ready());

    for _ in 0..3 {
        tripper.round_trip(503).unwrap();
    }
    assert_ready_ok!(mocked.svc.poll_ready(), "ready stays ready until the call");

    // By the time of the call the circuit has half-opened: the readied service is the probe.
    advance(SEC).await;
    let mut future = tokio_test::task::spawn(mocked.svc.call(get()));
    mocked.answer(200);
    assert_eq!(assert_ready_ok!(future.poll()).status(), 200);
}
