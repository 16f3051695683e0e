//! The deadline: a sleep that would end after it is not started.

use crate::mock_client::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready_ok};
use tower_http_retry::{Backoff, Jitter, StopReason};

/// Deadline 1 s; delays 300 ms, 600 ms, 1.2 s, ...
fn client() -> Client {
    let layer = builder()
        .max_attempts(10)
        .backoff(Backoff::new(
            Jitter::None,
            300 * MS,
            Duration::from_secs(10),
        ))
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    Client::new(layer)
}

#[tokio::test(start_paused = true)]
async fn sleep_past_the_deadline_is_not_started() {
    let mut client = client();
    let start = Instant::now();
    let mut future = client.start(get());
    for delay in [300 * MS, 600 * MS] {
        client.reply(503);
        assert_pending!(future.poll());
        advance(delay).await;
        assert_pending!(future.poll());
    }
    // At 900 ms the next sleep (1.2 s) would end after the deadline: stop now.
    client.reply(503);
    let (code, report) = finished(future.poll());
    assert_eq!(start.elapsed(), 900 * MS);
    assert_eq!(code, 503);
    assert_eq!((report.attempts, report.stop), (3, StopReason::Deadline));
    assert_eq!(report.slept, 900 * MS);
    client.assert_no_request();
}

#[tokio::test(start_paused = true)]
async fn deadline_counts_the_time_spent_in_attempts() {
    let mut client = client();
    let mut future = client.start(get());
    // A slow first attempt: 800 ms + the 300 ms sleep would pass the 1 s deadline.
    advance(800 * MS).await;
    client.reply(503);
    let (_, report) = finished(future.poll());
    assert_eq!((report.attempts, report.stop), (1, StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn no_retry_starts_after_the_deadline_while_waiting_for_readiness() {
    let budget = CountingBudget::with_tokens(10);
    let layer = builder()
        .deadline(Duration::from_secs(1))
        .budget(Arc::clone(&budget))
        .build()
        .unwrap();
    let mut client = Client::wrapping(layer, |mock| tower::limit::ConcurrencyLimit::new(mock, 1));
    let mut sleeper = client.sleeping(get()); // a 100 ms backoff
                                              // Another request takes the only permit and holds it for 5 s.
    assert_ready_ok!(client.poll_ready());
    let mut other = client.start(get());
    let (_, reply) = client.next_request();
    advance(100 * MS).await;
    assert_pending!(sleeper.poll()); // slept; now waiting for the permit
    advance(Duration::from_secs(5)).await;
    reply.send_response(status(200));
    assert_eq!(finished(other.poll()).0, 200);
    drop(other);
    // The permit is free, but the deadline passed while waiting for it: no retry at 5.1 s.
    let (code, report) = finished(sleeper.poll());
    client.assert_no_request();
    assert_eq!(code, 503);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Deadline));
    let calls = budget.calls();
    assert_eq!(
        (calls.withdrawals, calls.refunds),
        (1, 1),
        "the token is refunded"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_jitter_stays_within_the_deadline() {
    // The hint (1 s) fits the 1.5 s deadline after a first attempt of 450 ms; its +10 % jitter
    // could end at 1.55 s, past the deadline: the jitter is cut, not the request.
    for seed in 0..20 {
        let layer = builder()
            .random_source(tower_http_retry::retry::RandomSource::seeded(seed))
            .deadline(1500 * MS)
            .build()
            .unwrap();
        let mut client = Client::new(layer);
        let mut future = client.start(get());
        advance(450 * MS).await;
        client.reply_with(with_retry_after(503, "1"));
        assert_pending!(future.poll());
        advance(Duration::from_secs(1)).await;
        assert_pending!(future.poll());
        advance(50 * MS).await;
        assert_pending!(future.poll());
        client.reply(200);
        let (code, report) = finished(future.poll());
        assert_eq!((code, report.attempts), (200, 2), "seed {seed}");
    }
}
