//! Endpoint pacing on tokio's paused clock against an in-process endpoint that is down for a
//! while: requests wait and are let through by probes, then a ramp, instead of firing on their
//! own timers or being refused.

use test_support as support;

mod concurrency;
mod deadline;
mod defects;
mod fleet;
mod loopback;
mod model;
mod resend;
mod rules;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::{AbortSignal, Backoff, Jitter, Pacing, RetryLayer, RetryReport, StopReason};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

type Req = http::Request<String>;
type Res = http::Response<String>;

/// When the endpoint answered each attempt (10 ms after it arrived, unless said otherwise), and
/// with what status.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(Duration, u16)>>>);

/// An endpoint that answers 503 until `down_for` has passed, then 200, after 10 ms.
fn endpoint(
    down_for: Duration,
    log: Log,
) -> impl Service<Req, Response = Res, Error = std::io::Error, Future: Send> + Clone {
    answering(
        log,
        |_| 10 * MS,
        move |_, at| if at < down_for { 503 } else { 200 },
    )
}

/// An endpoint that takes `latency(arrived)` to answer a request, with `status(arrived,
/// answered)` (both times since it was made); it logs when it answered.
fn answering(
    log: Log,
    latency: impl Fn(Duration) -> Duration + Clone + Send + 'static,
    status: impl Fn(Duration, Duration) -> u16 + Clone + Send + 'static,
) -> impl Service<Req, Response = Res, Error = std::io::Error, Future: Send> + Clone {
    let start = Instant::now();
    service_fn(move |_: Req| {
        let (log, latency, status) = (log.clone(), latency.clone(), status.clone());
        async move {
            let arrived = start.elapsed();
            tokio::time::sleep(latency(arrived)).await;
            let at = start.elapsed();
            let status = status(arrived, at);
            log.0.lock().unwrap().push((at, status));
            let response = http::Response::builder().status(status);
            Ok(response.body(String::new()).unwrap())
        }
    })
}

fn builder() -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(20)
        .backoff(Backoff::new(Jitter::Full, 100 * MS, 2 * SEC))
        .random_source(RandomSource::seeded(5))
        .pacing(Pacing::new())
}

fn post(id: usize) -> Req {
    http::Request::post("http://hooks.test/")
        .header("idempotency-key", id.to_string())
        .body(String::new())
        .unwrap()
}

/// Sends `n` keyed POSTs at once; returns each one's status and report.
async fn burst<S>(service: S, n: usize) -> Vec<(u16, RetryReport)>
where
    S: Service<Req, Response = Res, Error = std::io::Error> + Clone + Send + 'static,
    S::Future: Send,
{
    let mut tasks = JoinSet::new();
    for id in 0..n {
        let service = service.clone();
        tasks.spawn(async move {
            let response = service.oneshot(post(id)).await.unwrap();
            (
                response.status().as_u16(),
                RetryReport::of(&response).clone(),
            )
        });
    }
    tasks.join_all().await
}

#[tokio::test(start_paused = true)]
async fn a_burst_against_a_dead_endpoint_waits_and_is_delivered_after_recovery() {
    let log = Log::default();
    let layer = builder().build().unwrap();
    let service = layer.layer(endpoint(5 * SEC, log.clone()));
    let results = burst(service, 200).await;

    assert!(
        results.iter().all(|(status, _)| *status == 200),
        "every delivery got through"
    );
    let arrivals = log.0.lock().unwrap().clone();
    // The 200 first attempts, then while down: only probes (about 2/s, jittered), not 200
    // retries on their own timers.
    let retries_while_down = arrivals
        .iter()
        .filter(|(at, _)| *at >= 100 * MS && *at < 5 * SEC)
        .count();
    assert!(
        retries_while_down <= 15,
        "{retries_while_down} retries reached a dead endpoint"
    );
    let last = arrivals.iter().map(|(at, _)| *at).max().unwrap();
    assert!(
        last < 8 * SEC,
        "the last delivery came {last:?} after the start"
    );
    let stats = layer.stats();
    assert_eq!(stats.stopped(StopReason::Success), 200);
    assert_eq!(stats.stopped(StopReason::BudgetEmpty), 0);
}

#[tokio::test(start_paused = true)]
async fn without_pacing_the_budget_refuses_the_same_burst() {
    let log = Log::default();
    let layer = RetryLayer::builder()
        .max_attempts(20)
        .backoff(Backoff::new(Jitter::Full, 100 * MS, 2 * SEC))
        .random_source(RandomSource::seeded(5))
        .build()
        .unwrap();
    let service = layer.layer(endpoint(5 * SEC, log.clone()));
    let results = burst(service, 200).await;
    let refused = results
        .iter()
        .filter(|(_, report)| report.stop == StopReason::BudgetEmpty)
        .count();
    assert!(
        refused > 50,
        "only {refused} refused: the comparison shows nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_whose_deadline_is_too_short_for_the_queue_is_deferred_with_a_retry_time() {
    let log = Log::default();
    let layer = builder().deadline(2 * SEC).build().unwrap();
    let service = layer.layer(endpoint(60 * SEC, log.clone()));
    let results = burst(service, 50).await;
    let deferred: Vec<_> = results
        .iter()
        .filter(|(_, report)| report.stop == StopReason::Deferred)
        .collect();
    assert!(!deferred.is_empty());
    for (status, report) in deferred {
        assert_eq!(*status, 503, "the last real response is returned");
        assert!(report.resend_after.is_some(), "{report:?}");
    }
    let stats = layer.stats();
    assert_eq!(stats.requests, 50);
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_every_waiter_with_its_last_outcome() {
    let log = Log::default();
    let abort = AbortSignal::new();
    let layer = builder().abort_signal(abort.clone()).build().unwrap();
    let service = layer.layer(endpoint(3600 * SEC, log.clone()));
    let mut tasks = JoinSet::new();
    for id in 0..20 {
        let service = service.clone();
        tasks.spawn(async move { service.oneshot(post(id)).await.unwrap() });
    }
    tokio::time::sleep(2 * SEC).await;
    let stats = layer
        .pacing_stats(Some(&"hooks.test".parse().unwrap()))
        .unwrap();
    assert_eq!(stats.mode, PacingMode::Probing);
    assert!(stats.waiting > 0);
    abort.shutdown();
    let responses = tokio::time::timeout(10 * MS, tasks.join_all())
        .await
        .unwrap();
    assert!(responses.iter().all(|r| r.status() == 503));
    assert!(responses
        .iter()
        .all(|r| RetryReport::of(r).stop == StopReason::Aborted));
}

#[tokio::test(start_paused = true)]
async fn first_attempts_to_an_endpoint_known_to_be_down_wait_too() {
    let log = Log::default();
    let layer = builder().build().unwrap();
    let service = layer.layer(endpoint(5 * SEC, log.clone()));
    let _ = burst(service.clone(), 20).await; // teaches the pacer the endpoint was down
                                              // Down again for a while: a new outage.
    let log2 = Log::default();
    let service = layer.layer(endpoint(5 * SEC, log2.clone()));
    let mut tasks = JoinSet::new();
    for id in 0..20 {
        let service = service.clone();
        tasks.spawn(async move { service.oneshot(post(id)).await.unwrap() });
    }
    tokio::time::sleep(SEC).await; // the first attempts failed: the endpoint is down
    let late = burst(service.clone(), 100);
    let arrivals_before_late = log2.0.lock().unwrap().len();
    let late = tokio::spawn(late);
    tokio::time::sleep(100 * MS).await;
    let arrivals = log2.0.lock().unwrap().len();
    assert!(
        arrivals - arrivals_before_late <= 2,
        "{} new first attempts reached the dead endpoint",
        arrivals - arrivals_before_late
    );
    assert!(late.await.unwrap().iter().all(|(s, _)| *s == 200));
    let _ = tasks.join_all().await;
}

/// A burst of 200 keyed POSTs through `builder` (seeded) to an endpoint down for 3 s: each
/// status, and how long the burst took.
async fn through_a_short_outage(builder: RetryLayerBuilder) -> (Vec<u16>, Duration) {
    let layer = builder
        .random_source(RandomSource::seeded(9))
        .build()
        .unwrap();
    let service = layer.layer(endpoint(3 * SEC, Log::default()));
    let start = Instant::now();
    let results = burst(service, 200).await;
    (
        results.into_iter().map(|(status, _)| status).collect(),
        start.elapsed(),
    )
}

#[tokio::test(start_paused = true)]
async fn the_bulk_preset_delivers_a_burst_through_a_short_outage() {
    let (statuses, took) = through_a_short_outage(RetryLayerBuilder::bulk()).await;
    assert!(statuses.iter().all(|status| *status == 200));
    assert!(took < 7 * SEC, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_interactive_preset_answers_within_about_a_second_in_the_same_outage() {
    let (statuses, took) = through_a_short_outage(RetryLayerBuilder::interactive()).await;
    assert!(took < 2 * SEC, "{took:?}");
    assert!(statuses.iter().all(|status| *status == 503));
}

#[tokio::test(start_paused = true)]
async fn with_a_breaker_below_an_open_circuit_pauses_the_endpoint_and_requests_wait() {
    use tower_http_retry::CircuitBreakerLayer;
    let log = Log::default();
    let signal = AbortSignal::new();
    let layer = builder().abort_signal(signal.clone()).build().unwrap();
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(5)
        .abort_signal(signal)
        .build()
        .unwrap();
    let inner = tower::ServiceBuilder::new()
        .layer(breaker.clone())
        .service(endpoint(3 * SEC, log.clone()));
    let service = layer.layer(inner);
    let mut tasks = JoinSet::new();
    for id in 0..100 {
        let service = service.clone();
        tasks.spawn(async move {
            let response = service.oneshot(post(id)).await;
            response.map(|r| (r.status().as_u16(), RetryReport::of(&r).stop))
        });
    }
    let results = tasks.join_all().await;
    // Every delivery waited out the open circuit (and the outage) in the pacer's queue, instead
    // of returning with `Held` or `CircuitOpen`.
    let delivered = results.iter().filter(|r| matches!(r, Ok((200, _)))).count();
    assert_eq!(delivered, 100, "{:?}", &results[..5]);
    assert!(breaker.stats().trips >= 1, "the breaker opened");
}
