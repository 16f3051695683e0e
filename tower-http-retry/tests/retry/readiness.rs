//! The readiness contract: the first attempt goes to the readied service, every retry polls the
//! stored clone only after its sleep, and nothing is held while sleeping.

use crate::mock_client::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_test::{assert_pending, assert_ready, assert_ready_err, assert_ready_ok};
use tower::limit::ConcurrencyLimit;
use tower_http_retry::StopReason;

fn probed_client(polls: &Arc<AtomicUsize>) -> Client<ReadyProbe<Mock>> {
    let layer = builder().build().unwrap();
    Client::wrapping(layer, |mock| ReadyProbe::new(mock, Arc::clone(polls)))
}

#[tokio::test(start_paused = true)]
async fn first_attempt_goes_to_the_readied_service() {
    let polls = Arc::new(AtomicUsize::new(0));
    let mut client = probed_client(&polls);
    let mut future = client.send(get());
    assert_eq!(
        polls.load(Ordering::SeqCst),
        1,
        "only the caller's poll_ready"
    );
    assert_pending!(future.poll());
    // The mock would have panicked had the attempt gone to an un-readied clone.
    client.reply(200);
    assert_eq!(polls.load(Ordering::SeqCst), 1, "no second poll_ready");
    let (code, _) = finished(future.poll());
    assert_eq!(code, 200);
}

#[tokio::test(start_paused = true)]
async fn retry_polls_the_stored_clone_only_after_the_sleep() {
    let polls = Arc::new(AtomicUsize::new(0));
    let mut client = probed_client(&polls);
    let mut future = client.sleeping(get());
    let before = polls.load(Ordering::SeqCst);

    advance(99 * MS).await;
    assert!(!future.is_woken());
    assert_pending!(future.poll());
    assert_eq!(
        polls.load(Ordering::SeqCst),
        before,
        "polled while sleeping"
    );
    client.assert_no_request();

    advance(MS).await;
    assert!(future.is_woken());
    assert_pending!(future.poll());
    assert_eq!(polls.load(Ordering::SeqCst), before + 1);
    client.reply(200);
    assert_eq!(finished(future.poll()).0, 200);
}

#[tokio::test(start_paused = true)]
async fn retry_waits_for_the_clone_to_become_ready() {
    let mut client = Client::new(builder().build().unwrap());
    let mut future = client.sleeping(get());
    client.handle.allow(0);

    advance(100 * MS).await;
    assert_pending!(future.poll());
    client.assert_no_request();

    client.handle.allow(1);
    assert!(future.is_woken(), "readiness wakes the request");
    assert_pending!(future.poll());
    client.reply(200);
    assert_eq!(finished(future.poll()).0, 200);
}

#[tokio::test(start_paused = true)]
async fn poll_ready_error_before_a_retry_ends_the_request_with_it() {
    let mut client = Client::new(builder().build().unwrap());
    let (request, slot) = with_slot(get());
    let mut future = client.sleeping(request);
    client.handle.send_error("connection pool closed");

    advance(100 * MS).await;
    let error = assert_ready_err!(future.poll());
    assert_eq!(error.to_string(), "connection pool closed");
    let report = slot.take().expect("the slot is filled");
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReady));
    assert_eq!(client.stats().stopped(StopReason::NotReady), 1);
    client.assert_no_request();
}

#[tokio::test(start_paused = true)]
async fn no_concurrency_permit_is_held_while_sleeping() {
    let layer = builder().build().unwrap();
    let mut client = Client::wrapping(layer, |mock| ConcurrencyLimit::new(mock, 1));
    let mut sleeper = client.sleeping(get());

    // The only permit is free while the first request sleeps: a second request gets it.
    assert_ready_ok!(client.poll_ready());
    let mut other = client.start(get());
    let (_, reply) = client.next_request();

    // The first request wakes up but must wait for the permit the second one holds.
    advance(100 * MS).await;
    assert_pending!(sleeper.poll());
    client.assert_no_request();

    reply.send_response(status(200));
    assert_eq!(finished(other.poll()).0, 200);
    drop(other);
    assert!(sleeper.is_woken());
    assert_pending!(sleeper.poll());
    client.reply(200);
    let (code, report) = finished(sleeper.poll());
    assert_eq!((code, report.attempts), (200, 2));
    assert_ready!(client.poll_ready()).unwrap();
}

#[tokio::test(start_paused = true)]
async fn first_attempt_jitter_holds_no_permit_while_sleeping() {
    let layer = builder()
        .first_attempt_jitter(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut client = Client::wrapping(layer, |mock| ConcurrencyLimit::new(mock, 1));
    let mut future = client.start(get());
    // Whatever the caller's `poll_ready` reserved must not be held by the retry service while the
    // request waits: the attempt needs that permit after the delay.
    advance(Duration::from_secs(1)).await;
    assert_pending!(future.poll());
    client.reply(200);
    assert_eq!(finished(future.poll()).0, 200);
}

/// The futures and services must be `Send` when their parts are, to be spawned and awaited in
/// multi-threaded handlers (axum's, for one). A compile-time check.
#[allow(dead_code)]
fn futures_and_services_are_send() {
    fn send<T: Send>() {}
    type Inner = tower::util::BoxCloneSyncService<Req, Res, tower::BoxError>;
    type Stack =
        tower_http_retry::retry::Retry<tower_http_retry::circuit_breaker::CircuitBreaker<Inner>>;
    send::<Stack>();
    send::<<Stack as tower::Service<Req>>::Future>();
    send::<tower_http_retry::RetryLayer>();
    send::<tower_http_retry::CircuitBreakerLayer>();
}
