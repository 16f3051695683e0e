//! The abort signal: sleeping requests return their last outcome at once.

use crate::mock_client::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_test::assert_pending;
use tower_http_retry::retry::RetryLayerBuilder;
use tower_http_retry::{AbortSignal, StopReason};

fn abortable(signal: &AbortSignal) -> RetryLayerBuilder {
    builder().abort_signal(signal.clone())
}

/// Starts `n` requests and answers each first attempt with 503: all of them sleep.
fn sleepers(client: &mut Client, n: usize) -> Vec<Fut> {
    (0..n).map(|_| client.sleeping(get())).collect()
}

#[tokio::test(start_paused = true)]
async fn wake_sleepers_wakes_every_sleeping_request_at_once() {
    let signal = AbortSignal::new();
    let mut client = Client::new(abortable(&signal).build().unwrap());
    let mut futures = sleepers(&mut client, 100);
    let start = Instant::now();

    signal.wake_sleepers();
    for future in &mut futures {
        assert!(future.is_woken(), "woken without any time passing");
        let (code, report) = finished(future.poll());
        assert_eq!(code, 503, "the last outcome is returned");
        assert_eq!((report.attempts, report.stop), (1, StopReason::Aborted));
    }
    assert_eq!(Instant::now(), start);
    client.assert_no_request();
    assert_eq!(client.stats().stopped(StopReason::Aborted), 100);
}

#[tokio::test(start_paused = true)]
async fn wake_sleepers_refunds_every_token() {
    let signal = AbortSignal::new();
    let budget = CountingBudget::with_tokens(100);
    let layer = abortable(&signal)
        .budget(Arc::clone(&budget))
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let mut futures = sleepers(&mut client, 100);
    assert_eq!(budget.calls().withdrawals, 100);

    signal.wake_sleepers();
    for future in &mut futures {
        finished(future.poll());
    }
    assert_eq!(budget.calls().refunds, 100);
    assert_eq!(client.stats().budget_refunded, 100);
}

#[tokio::test(start_paused = true)]
async fn wake_sleepers_lets_later_failures_sleep() {
    let signal = AbortSignal::new();
    let mut client = Client::new(abortable(&signal).build().unwrap());
    signal.wake_sleepers();
    let (code, report) = run_through(&mut client, get(), &[503, 200]).await;
    assert_eq!((code, report.attempts), (200, 2));
    assert_eq!(report.slept, 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_sleeping_requests() {
    let signal = AbortSignal::new();
    let mut client = Client::new(abortable(&signal).build().unwrap());
    let mut futures = sleepers(&mut client, 1);
    signal.shutdown();
    assert_eq!(finished(futures[0].poll()).1.stop, StopReason::Aborted);
}

#[tokio::test(start_paused = true)]
async fn after_shutdown_failures_return_without_sleeping() {
    let signal = AbortSignal::new();
    let budget = CountingBudget::with_tokens(10);
    let layer = abortable(&signal)
        .budget(Arc::clone(&budget))
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    signal.shutdown();

    let mut future = client.start(get());
    let start = Instant::now();
    client.reply(503);
    let (code, report) = finished(future.poll());
    assert_eq!(Instant::now(), start);
    assert_eq!(code, 503);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Aborted));
    assert!(report.delays.is_empty());
    assert_eq!(budget.calls(), BudgetCalls::default(), "no token taken");
}

#[tokio::test(start_paused = true)]
async fn aborted_report_shows_the_time_actually_slept() {
    let signal = AbortSignal::new();
    let mut client = Client::new(abortable(&signal).build().unwrap());
    let mut futures = sleepers(&mut client, 1);
    advance(40 * MS).await;
    signal.wake_sleepers();
    let (_, report) = finished(futures[0].poll());
    assert_eq!(report.slept, 40 * MS);
    assert_eq!(report.delays[0].duration, 40 * MS);
}

#[tokio::test(start_paused = true)]
async fn request_woken_during_first_attempt_jitter_is_sent_at_once() {
    let signal = AbortSignal::new();
    let layer = abortable(&signal)
        .first_attempt_jitter(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let mut future = client.start(get());
    client.assert_no_request();
    let start = Instant::now();

    signal.wake_sleepers();
    assert!(future.is_woken());
    assert_pending!(future.poll());
    client.reply(200);
    let (code, report) = finished(future.poll());
    assert_eq!(Instant::now(), start);
    assert_eq!((code, report.attempts), (200, 1));
    assert_eq!(report.slept, std::time::Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn shutdown_reaches_a_request_waiting_for_readiness() {
    let signal = AbortSignal::new();
    let budget = CountingBudget::with_tokens(10);
    let layer = abortable(&signal)
        .budget(Arc::clone(&budget))
        .build()
        .unwrap();
    let mut client = Client::wrapping(layer, |mock| tower::limit::ConcurrencyLimit::new(mock, 1));
    let mut waiter = client.sleeping(get());

    // A second request takes the only permit; the first one's sleep ends and it waits for it.
    tokio_test::assert_ready_ok!(client.poll_ready());
    let mut holder = client.start(get());
    let _held = client.next_request();
    advance(100 * MS).await;
    assert_pending!(waiter.poll());

    signal.shutdown();
    assert!(waiter.is_woken());
    let (code, report) = finished(waiter.poll());
    assert_eq!((code, report.stop), (503, StopReason::Aborted));
    assert_eq!(report.attempts, 1, "the retry was not sent");
    assert_eq!(budget.calls().refunds, 1);
    assert_pending!(holder.poll());
}

#[tokio::test(start_paused = true)]
async fn hold_until_wakes_sleepers_and_forbids_sleeping_until_then() {
    let signal = AbortSignal::new();
    let mut client = Client::new(abortable(&signal).build().unwrap());
    let mut sleeper = client.sleeping(get());

    signal.hold_until(Instant::now() + Duration::from_secs(10));
    assert_eq!(finished(sleeper.poll()).1.stop, StopReason::Held);
    // While held, a failure returns at once.
    let mut held = client.start(get());
    client.reply(503);
    let (code, report) = finished(held.poll());
    assert_eq!(
        (code, report.stop, report.attempts),
        (503, StopReason::Held, 1)
    );
    assert_eq!(
        report.resend_after,
        Some(Duration::from_secs(10)),
        "until the hold ends"
    );

    // After the hold, failures sleep and retry again.
    advance(Duration::from_secs(10)).await;
    let (code, report) = run_through(&mut client, get(), &[503, 200]).await;
    assert_eq!((code, report.attempts), (200, 2));
}

fn get_from(authority: &str) -> Req {
    http::Request::get(format!("http://{authority}/"))
        .body(String::new())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn hold_for_one_authority_ends_only_its_sleepers() {
    let signal = AbortSignal::new();
    let mut client = Client::new(abortable(&signal).build().unwrap());
    let mut down = client.sleeping(get_from("down.test"));
    let mut healthy = client.sleeping(get_from("healthy.test"));

    let down_authority = http::uri::Authority::from_static("down.test");
    signal.hold_authority_until(
        Some(&down_authority),
        Instant::now() + Duration::from_secs(60),
    );
    assert_eq!(finished(down.poll()).1.stop, StopReason::Held);
    assert_pending!(
        healthy.poll(),
        "a hold for another authority: back to sleep"
    );

    // A wake for everyone still reaches the request that went back to sleep.
    signal.wake_sleepers();
    assert_eq!(finished(healthy.poll()).1.stop, StopReason::Aborted);
}

#[tokio::test(start_paused = true)]
async fn a_shorter_hold_does_not_cut_a_longer_one() {
    let signal = AbortSignal::new();
    let mut client = Client::new(abortable(&signal).build().unwrap());
    signal.hold_until(Instant::now() + Duration::from_secs(40));
    signal.hold_until(Instant::now() + Duration::from_secs(5));
    advance(Duration::from_secs(10)).await;
    let mut held = client.start(get());
    client.reply(503);
    assert_eq!(
        finished(held.poll()).1.stop,
        StopReason::Held,
        "still held at 10 s"
    );
}
