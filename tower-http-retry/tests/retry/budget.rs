//! The retry budget: asked before sleeping, fed by successes, refunded for abandoned sleeps.

use crate::mock_client::*;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready_err};
use tower_http_retry::retry::TokenBucket;
use tower_http_retry::{AbortSignal, StopReason};

fn client_with(budget: &Arc<CountingBudget>) -> Client {
    Client::new(builder().budget(Arc::clone(budget)).build().unwrap())
}

/// A client whose request has failed once and now sleeps 100 ms on a withdrawn token.
fn sleeping_on(budget: &Arc<CountingBudget>) -> (Client, Fut) {
    let mut client = client_with(budget);
    let future = client.sleeping(get());
    assert_eq!(budget.calls().withdrawals, 1);
    (client, future)
}

#[tokio::test(start_paused = true)]
async fn empty_budget_returns_the_failure_without_sleeping() {
    let budget = CountingBudget::with_tokens(0);
    let mut client = client_with(&budget);
    let mut future = client.start(get());
    let start = Instant::now();
    client.reply(503);
    let (code, report) = finished(future.poll());
    assert_eq!(Instant::now(), start, "time did not move");
    assert_eq!(code, 503);
    assert_eq!((report.attempts, report.stop), (1, StopReason::BudgetEmpty));
    assert!(report.delays.is_empty());
    let stats = client.stats();
    assert_eq!(stats.budget_denied, 1);
    assert_eq!(stats.stopped(StopReason::BudgetEmpty), 1);
    assert_eq!(budget.calls().denials, 1);
}

#[tokio::test(start_paused = true)]
async fn empty_budget_returns_a_transient_error_at_once() {
    let budget = CountingBudget::with_tokens(0);
    let mut client = client_with(&budget);
    let (request, slot) = with_slot(get());
    let mut future = client.start(request);
    let start = Instant::now();
    client.fail(io_error(std::io::ErrorKind::ConnectionReset));
    assert_ready_err!(future.poll());
    assert_eq!(Instant::now(), start);
    assert_eq!(slot.take().unwrap().stop, StopReason::BudgetEmpty);
}

/// How many deposits a request answered with `code` makes.
fn deposits_after(code: u16) -> u32 {
    let budget = CountingBudget::with_tokens(0);
    let mut client = client_with(&budget);
    let mut future = client.start(get());
    client.reply(code);
    finished(future.poll());
    budget.calls().deposits
}

#[tokio::test(start_paused = true)]
async fn success_deposits_into_the_budget() {
    assert_eq!(deposits_after(200), 1);
}

#[tokio::test(start_paused = true)]
async fn failures_deposit_nothing() {
    assert_eq!(deposits_after(404), 0);
}

#[tokio::test(start_paused = true)]
async fn token_is_spent_when_the_retry_is_sent() {
    let budget = CountingBudget::with_tokens(5);
    let (mut client, mut future) = sleeping_on(&budget);
    advance(100 * MS).await;
    assert_pending!(future.poll());
    client.reply(200);
    finished(future.poll());
    drop(future);
    let calls = budget.calls();
    assert_eq!((calls.withdrawals, calls.refunds), (1, 0));
    let stats = client.stats();
    assert_eq!((stats.budget_granted, stats.budget_refunded), (1, 0));
    assert_eq!(stats.budget_granted - stats.budget_refunded, stats.retries);
}

#[tokio::test(start_paused = true)]
async fn token_is_refunded_when_the_future_is_dropped_mid_sleep() {
    let budget = CountingBudget::with_tokens(5);
    let (client, future) = sleeping_on(&budget);
    advance(50 * MS).await;
    assert_eq!(budget.calls().refunds, 0);
    drop(future);
    assert_eq!(budget.calls().refunds, 1);
    let stats = client.stats();
    assert_eq!((stats.budget_granted, stats.budget_refunded), (1, 1));
    assert_eq!(stats.budget_granted - stats.budget_refunded, stats.retries);
}

#[tokio::test(start_paused = true)]
async fn token_is_refunded_when_the_sleep_is_aborted() {
    let budget = CountingBudget::with_tokens(5);
    let signal = AbortSignal::new();
    let layer = builder()
        .budget(Arc::clone(&budget))
        .abort_signal(signal.clone())
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let mut future = client.sleeping(get());
    signal.wake_sleepers();
    let (_, report) = finished(future.poll());
    assert_eq!(report.stop, StopReason::Aborted);
    assert_eq!(budget.calls().refunds, 1);
    assert_eq!(client.stats().budget_refunded, 1);
}

#[tokio::test(start_paused = true)]
async fn token_is_refunded_when_poll_ready_fails() {
    let budget = CountingBudget::with_tokens(5);
    let (mut client, mut future) = sleeping_on(&budget);
    client.handle.send_error("gone");
    advance(100 * MS).await;
    assert_ready_err!(future.poll());
    assert_eq!(budget.calls().refunds, 1);
}

#[tokio::test(start_paused = true)]
async fn token_bucket_is_whole_again_after_an_abandoned_sleep() {
    let bucket = Arc::new(
        TokenBucket::builder()
            .capacity(1.0)
            .deposit_per_success(0.0)
            .refill_per_second(0.0)
            .build()
            .unwrap(),
    );
    let mut client = Client::new(builder().budget(Arc::clone(&bucket)).build().unwrap());
    let future = client.sleeping(get());
    assert_eq!(bucket.available(), 0.0, "the sleep holds the only token");
    drop(future);
    assert_eq!(bucket.available(), 1.0);
}

#[tokio::test(start_paused = true)]
async fn deadline_stop_takes_no_token() {
    let budget = CountingBudget::with_tokens(5);
    let layer = builder()
        .budget(Arc::clone(&budget))
        .deadline(50 * MS)
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let mut future = client.start(get());
    client.reply(503);
    assert_eq!(finished(future.poll()).1.stop, StopReason::Deadline);
    assert_eq!(budget.calls(), BudgetCalls::default());
}
