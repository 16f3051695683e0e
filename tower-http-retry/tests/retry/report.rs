//! What the caller learns: the per-request report and the shared counters.

use crate::mock_client::*;
use std::io::ErrorKind;
use std::time::Duration;
use tokio_test::{assert_pending, assert_ready_err, assert_ready_ok};
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::DelayHistogram;
use tower_http_retry::{AbortSignal, Backoff, Jitter, RetryReport, StopReason};

/// The column of the delay histogram `delay` falls in.
fn bucket(delay: Duration) -> usize {
    DelayHistogram::BUCKETS
        .iter()
        .position(|bound| delay <= *bound)
        .unwrap_or(DelayHistogram::BUCKETS.len())
}

#[tokio::test(start_paused = true)]
async fn report_is_attached_to_retried_responses() {
    let mut client = Client::new(builder().build().unwrap());
    let mut future = client.sleeping(get());
    advance(100 * MS).await;
    assert_pending!(future.poll());
    client.reply(200);
    let response = assert_ready_ok!(future.poll());
    let report = response
        .extensions()
        .get::<RetryReport>()
        .expect("a report is attached");
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn first_try_success_carries_no_report() {
    let mut client = Client::new(builder().build().unwrap());
    let mut future = client.start(get());
    client.reply(200);
    let response = assert_ready_ok!(future.poll());
    assert!(response.extensions().get::<RetryReport>().is_none());
    assert_eq!(*RetryReport::of(&response), RetryReport::FIRST_TRY);
}

#[tokio::test(start_paused = true)]
async fn report_is_attached_to_a_first_try_failure() {
    let mut client = Client::new(builder().build().unwrap());
    let mut future = client.start(get());
    client.reply(404);
    let response = assert_ready_ok!(future.poll());
    let report = response.extensions().get::<RetryReport>().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
}

#[tokio::test(start_paused = true)]
async fn report_slot_is_filled_for_errors() {
    let mut client = Client::new(builder().build().unwrap());
    let (request, slot) = with_slot(get());
    let mut future = client.start(request);
    for delay in [100 * MS, 200 * MS] {
        client.fail(io_error(ErrorKind::ConnectionRefused));
        assert_pending!(future.poll());
        assert!(slot.take().is_none(), "filled only at the end");
        advance(delay).await;
        assert_pending!(future.poll());
    }
    client.fail(io_error(ErrorKind::ConnectionRefused));
    let error = assert_ready_err!(future.poll());
    let io = error
        .downcast_ref::<std::io::Error>()
        .expect("the real error");
    assert_eq!(io.kind(), ErrorKind::ConnectionRefused);
    let report = slot.take().expect("the slot is filled");
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::AttemptsExhausted)
    );
    assert_eq!(report.slept, 300 * MS);
}

#[tokio::test(start_paused = true)]
async fn report_slot_is_filled_on_first_try_success() {
    let mut client = Client::new(builder().build().unwrap());
    let (request, slot) = with_slot(get());
    let mut future = client.start(request);
    client.reply(200);
    finished(future.poll());
    assert_eq!(slot.take(), Some(RetryReport::FIRST_TRY));
}

#[tokio::test(start_paused = true)]
async fn report_delays_match_the_time_slept() {
    let layer = builder()
        .max_attempts(4)
        .backoff(Backoff::new(
            Jitter::Full,
            100 * MS,
            Duration::from_secs(10),
        ))
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let start = tokio::time::Instant::now();
    let mut future = client.sleeping(get());
    let mut gaps = Vec::new();
    for answer in [503, 503, 200] {
        let (gap, _, reply) =
            await_attempt(&mut client, &mut future, MS, Duration::from_secs(1)).await;
        gaps.push(gap);
        reply.send_response(status(answer));
        if answer != 200 {
            assert_pending!(future.poll());
        }
    }
    let (_, report) = finished(future.poll());
    assert_eq!(report.delays.len(), 3);
    for ((delay, gap), after) in report.delays.iter().zip(&gaps).zip(1..) {
        assert_eq!(
            (delay.after_attempt, delay.source),
            (after, DelaySource::Backoff)
        );
        assert!(
            *gap >= delay.duration && *gap - delay.duration < MS,
            "{delay:?} {gap:?}"
        );
    }
    let total: Duration = report.delays.iter().map(|d| d.duration).sum();
    assert_eq!(report.slept, total);
    assert!(start.elapsed() >= total && start.elapsed() - total < 3 * MS);
}

#[tokio::test(start_paused = true)]
async fn stats_count_attempts_retries_stops_and_delays() {
    let mut client = Client::new(builder().build().unwrap());
    run_through(&mut client, get(), &[503, 503, 200]).await;
    run_through(&mut client, get(), &[400]).await;
    run_through(&mut client, get(), &[503, 503, 503]).await;

    let stats = client.stats();
    assert_eq!(stats.requests, 3);
    assert_eq!(stats.attempts, 7);
    assert_eq!(stats.retries, 4);
    assert_eq!(stats.stopped(StopReason::Success), 1);
    assert_eq!(stats.stopped(StopReason::Permanent), 1);
    assert_eq!(stats.stopped(StopReason::AttemptsExhausted), 1);
    assert_eq!(stats.stops.iter().sum::<u64>(), 3);
    assert_eq!(stats.delays.total(), 4);
    assert_eq!(stats.delays.row(1)[bucket(100 * MS)], 2);
    assert_eq!(stats.delays.row(2)[bucket(200 * MS)], 2);
}

#[tokio::test(start_paused = true)]
async fn histogram_records_the_time_an_aborted_sleep_lasted() {
    let signal = AbortSignal::new();
    let layer = builder()
        .backoff(Backoff::new(
            Jitter::None,
            Duration::from_secs(8),
            Duration::from_secs(10),
        ))
        .abort_signal(signal.clone())
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let mut future = client.sleeping(get());
    advance(30 * MS).await;
    signal.wake_sleepers();
    let (_, report) = finished(future.poll());
    assert_eq!(report.slept, 30 * MS);
    let histogram = client.stats().delays;
    assert_eq!(histogram.total(), 1);
    assert_eq!(histogram.row(1)[bucket(30 * MS)], 1, "{histogram}");
}

#[tokio::test(start_paused = true)]
async fn histogram_ignores_a_sleep_abandoned_by_the_caller() {
    let mut client = Client::new(builder().build().unwrap());
    let future = client.sleeping(get());
    drop(future);
    assert_eq!(client.stats().delays.total(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_future_dropped_mid_sleep_is_reported_cancelled() {
    let mut client = Client::new(builder().build().unwrap());
    let (request, slot) = with_slot(get());
    let future = client.sleeping(request);
    drop(future); // e.g. an outer total timeout fired during the backoff sleep

    let report = slot.take().expect("the slot is filled on drop");
    assert_eq!((report.attempts, report.stop), (1, StopReason::Cancelled));
    let stats = client.stats();
    assert_eq!(stats.stopped(StopReason::Cancelled), 1);
    assert_eq!(stats.requests, 1);
}

#[tokio::test(start_paused = true)]
async fn a_finished_future_is_not_reported_cancelled_when_dropped() {
    let mut client = Client::new(builder().build().unwrap());
    let (code, _) = run_through(&mut client, get(), &[200]).await;
    assert_eq!(code, 200);
    let stats = client.stats();
    assert_eq!(stats.stopped(StopReason::Cancelled), 0);
    assert_eq!((stats.requests, stats.stopped(StopReason::Success)), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_future_dropped_mid_sleep_reports_the_time_it_slept() {
    let mut client = Client::new(builder().build().unwrap());
    let (request, slot) = with_slot(get());
    let mut future = client.sleeping(request); // a 100 ms backoff
    advance(30 * MS).await;
    assert_pending!(future.poll());
    drop(future);
    let report = slot.take().expect("the slot is filled on drop");
    assert_eq!(report.stop, StopReason::Cancelled);
    assert_eq!(report.slept, 30 * MS);
    assert_eq!(report.delays[0].duration, 30 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_future_dropped_during_the_first_attempt_jitter_reports_the_time_it_waited() {
    let layer = builder()
        .first_attempt_jitter(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut client = Client::new(layer);
    let (request, slot) = with_slot(get());
    let mut future = client.start(request);
    assert_pending!(future.poll());
    advance(MS).await;
    assert_pending!(future.poll());
    client.assert_no_request(); // still waiting out the jitter
    drop(future);
    let report = slot.take().expect("the slot is filled on drop");
    assert_eq!(report.stop, StopReason::Cancelled);
    assert_eq!(report.slept, MS);
}
