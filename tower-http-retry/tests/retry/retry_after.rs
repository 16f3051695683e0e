//! `Retry-After`: a valid hint replaces the backoff delay, within the clamp.

use crate::mock_client::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;
use tokio_test::assert_pending;
use tower_http_retry::hint::{HintPolicy, WhenLonger};
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::RetryLayerBuilder;
use tower_http_retry::{Backoff, Jitter, RetryReport, StopReason};

const SECOND: Duration = Duration::from_secs(1);

/// Backoff base 10 ms (no jitter), cap `cap`: the clamp defaults to the cap.
fn short_backoff(cap: Duration) -> RetryLayerBuilder {
    builder().backoff(Backoff::new(Jitter::None, 10 * MS, cap))
}

/// Answers the first attempt with `first`; checks nothing is sent before `quiet` has passed,
/// then steps 1 ms at a time until the retry arrives (within `window`), answers it with 200 and
/// returns when it arrived (from the first answer), the report and the client.
async fn retry_arrival(
    builder: RetryLayerBuilder,
    first: Res,
    quiet: Duration,
    window: Duration,
) -> (Duration, RetryReport, Client) {
    let mut client = Client::new(builder.build().unwrap());
    let mut future = client.start(get());
    client.reply_with(first);
    let start = Instant::now();
    assert_pending!(future.poll());
    if !quiet.is_zero() {
        advance(quiet).await;
        assert_pending!(future.poll());
        client.assert_no_request();
    }
    let (_, _, reply) = await_attempt(&mut client, &mut future, MS, window).await;
    let arrived = start.elapsed();
    reply.send_response(status(200));
    let (code, report) = finished(future.poll());
    assert_eq!((code, report.attempts), (200, 2));
    (arrived, report, client)
}

/// The only delay of `report`, checked against the time the retry took to arrive.
fn only_delay(report: &RetryReport, arrived: Duration) -> (Duration, DelaySource) {
    assert_eq!(report.delays.len(), 1, "{report:?}");
    let delay = report.delays[0];
    assert!(
        arrived >= delay.duration && arrived - delay.duration < MS,
        "slept {:?} but the retry came after {arrived:?}",
        delay.duration
    );
    (delay.duration, delay.source)
}

#[tokio::test(start_paused = true)]
async fn retry_after_replaces_the_backoff_delay() {
    let (arrived, report, client) = retry_arrival(
        short_backoff(10 * SECOND),
        with_retry_after(503, "5"),
        4990 * MS,
        600 * MS,
    )
    .await;
    let (delay, source) = only_delay(&report, arrived);
    assert_eq!(source, DelaySource::RetryAfter);
    assert!(delay >= 5 * SECOND && delay <= 5500 * MS, "{delay:?}");
    assert_eq!(client.stats().retry_after_seen, 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_above_the_clamp_is_clamped() {
    // The clamp is the backoff cap, 2 s; the hint is spread over the 10 % just below it.
    let (arrived, report, client) = retry_arrival(
        short_backoff(2 * SECOND),
        with_retry_after(429, "3600"),
        1799 * MS,
        210 * MS,
    )
    .await;
    let (delay, source) = only_delay(&report, arrived);
    assert_eq!(source, DelaySource::RetryAfterClamped);
    assert!(delay >= 1800 * MS && delay <= 2 * SECOND, "{delay:?}");
    let stats = client.stats();
    assert_eq!((stats.retry_after_seen, stats.retry_after_clamped), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn retry_after_max_delay_may_exceed_the_backoff_cap() {
    let policy = HintPolicy::honored().max_delay(30 * SECOND);
    let (arrived, report, _) = retry_arrival(
        short_backoff(2 * SECOND).hint_policy(policy),
        with_retry_after(503, "20"),
        19_990 * MS,
        2100 * MS,
    )
    .await;
    let (delay, source) = only_delay(&report, arrived);
    assert_eq!(source, DelaySource::RetryAfter);
    assert!(delay >= 20 * SECOND && delay <= 22 * SECOND, "{delay:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_too_long_gives_up_when_configured() {
    let policy = HintPolicy::honored().when_longer(WhenLonger::GiveUp);
    let layer = short_backoff(2 * SECOND)
        .hint_policy(policy)
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let mut future = client.start(get());
    let start = Instant::now();
    client.reply_with(with_retry_after(503, "3600"));
    let (code, report) = finished(future.poll());
    assert_eq!(Instant::now(), start);
    assert_eq!(code, 503);
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::RetryAfterTooLong)
    );
    assert_eq!(client.stats().retry_after_clamped, 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_http_date_is_measured_against_the_wall_clock() {
    // A fixed wall clock long before the real one: measured against `SystemTime::now` the date
    // would be in the past and the retry immediate.
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let date = httpdate::fmt_http_date(now + 7 * SECOND);
    let builder = short_backoff(10 * SECOND).wall_clock(move || now);
    let (arrived, report, _) =
        retry_arrival(builder, with_retry_after(503, &date), 6990 * MS, 800 * MS).await;
    let (delay, source) = only_delay(&report, arrived);
    assert_eq!(source, DelaySource::RetryAfter);
    assert!(delay >= 7 * SECOND && delay <= 7700 * MS, "{delay:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_http_date_in_the_past_retries_at_once() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let date = httpdate::fmt_http_date(now - 60 * SECOND);
    let builder = short_backoff(10 * SECOND).wall_clock(move || now);
    let (arrived, report, _) = retry_arrival(
        builder,
        with_retry_after(503, &date),
        Duration::ZERO,
        5 * MS,
    )
    .await;
    assert_eq!(only_delay(&report, arrived).0, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn malformed_retry_after_falls_back_to_the_backoff() {
    let (arrived, report, client) = retry_arrival(
        short_backoff(10 * SECOND),
        with_retry_after(503, "soon"),
        9 * MS,
        5 * MS,
    )
    .await;
    let (delay, source) = only_delay(&report, arrived);
    assert_eq!((delay, source), (10 * MS, DelaySource::Backoff));
    let stats = client.stats();
    assert_eq!(
        (stats.retry_after_malformed, stats.retry_after_seen),
        (1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn ignored_retry_after_leaves_the_backoff_in_charge() {
    let builder = short_backoff(10 * SECOND).without_hint_delays();
    let (arrived, report, client) =
        retry_arrival(builder, with_retry_after(503, "5"), 9 * MS, 5 * MS).await;
    assert_eq!(
        only_delay(&report, arrived),
        (10 * MS, DelaySource::Backoff)
    );
    assert_eq!(client.stats().retry_after_seen, 0);
}

#[tokio::test(start_paused = true)]
async fn give_up_never_retries_sooner_than_a_hint_just_under_the_clamp() {
    let policy = HintPolicy::honored()
        .max_delay(10 * SECOND)
        .when_longer(WhenLonger::GiveUp);
    for seed in 0..20 {
        let layer = builder()
            .random_source(tower_http_retry::retry::RandomSource::seeded(seed))
            .hint_policy(policy)
            .build()
            .unwrap();
        let mut client = Client::new(layer);
        let mut future = client.start(get());
        client.reply_with(with_retry_after(503, "10"));
        assert_pending!(future.poll());
        advance(10 * SECOND - MS).await;
        assert_pending!(future.poll());
        client.assert_no_request();
        advance(MS).await;
        assert_pending!(future.poll());
        client.reply(200);
        let (code, report) = finished(future.poll());
        assert_eq!(code, 200);
        assert_eq!(report.delays[0].duration, 10 * SECOND, "seed {seed}");
    }
}
