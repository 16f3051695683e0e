//! Jitter that de-synchronises: every request session draws from its own stream.

use crate::mock_client::*;
use std::time::Duration;
use tokio::time::Instant;
use tokio_test::assert_pending;
use tower::retry::backoff::{Backoff as TowerBackoff, ExponentialBackoffMaker, MakeBackoff};
use tower::util::rng::HasherRng;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{Backoff, Jitter, RetryLayer};

const SECOND: Duration = Duration::from_secs(1);

fn full_jitter(random: RandomSource) -> RetryLayer {
    builder()
        .backoff(Backoff::new(Jitter::Full, SECOND, 10 * SECOND))
        .random_source(random)
        .build()
        .unwrap()
}

/// Two requests fail at the same instant; returns the delay each drew for its retry.
async fn delays_of_simultaneous_failures(layer: RetryLayer) -> [Duration; 2] {
    let mut client = Client::new(layer);
    let mut futures = [client.start(get()), client.start(get())];
    for future in &mut futures {
        client.reply(503);
        assert_pending!(future.poll());
    }
    // Full jitter with base 1 s: both retries go out within a second.
    advance(SECOND).await;
    for future in &mut futures {
        assert_pending!(future.poll());
        client.reply(200);
    }
    futures.map(|mut future| {
        let (_, report) = finished(future.poll());
        assert_eq!(report.attempts, 2);
        report.delays[0].duration
    })
}

#[tokio::test(start_paused = true)]
async fn simultaneous_failures_draw_different_delays() {
    let [a, b] = delays_of_simultaneous_failures(full_jitter(RandomSource::default())).await;
    assert_ne!(a, b);
}

#[tokio::test(start_paused = true)]
async fn simultaneous_failures_draw_different_delays_when_seeded() {
    let [a, b] = delays_of_simultaneous_failures(full_jitter(RandomSource::seeded(42))).await;
    assert_ne!(a, b);
}

#[tokio::test(start_paused = true)]
async fn seeded_source_reproduces_the_same_delays() {
    let first = delays_of_simultaneous_failures(full_jitter(RandomSource::seeded(42))).await;
    let again = delays_of_simultaneous_failures(full_jitter(RandomSource::seeded(42))).await;
    assert_eq!(first, again);
}

/// The deadlines of the next five sleeps of a tower backoff session.
fn deadlines(backoff: &mut impl TowerBackoff<Future = tokio::time::Sleep>) -> Vec<Instant> {
    (0..5).map(|_| backoff.next_backoff().deadline()).collect()
}

/// The contrast this crate's docs draw: tower's maker clones one generator into every session,
/// so sessions made at the same instant sleep exactly as long as each other.
#[tokio::test(start_paused = true)]
async fn tower_backoff_maker_hands_every_session_the_same_delays() {
    let min = 100 * MS;
    let mut maker = ExponentialBackoffMaker::new(min, 10 * SECOND, 0.99, HasherRng::default())
        .expect("valid tower backoff");
    let mut first = maker.make_backoff();
    let mut second = maker.make_backoff();
    let now = Instant::now();
    let (a, b) = (deadlines(&mut first), deadlines(&mut second));
    assert_ne!(a[0] - now, min, "tower does add jitter...");
    assert_eq!(a, b, "...but the same jitter to every session");
}
