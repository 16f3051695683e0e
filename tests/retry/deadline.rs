//! The deadline: a sleep that would end after it is not started.

use crate::support::*;
use std::time::Duration;
use tokio::time::Instant;
use tokio_test::assert_pending;
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
