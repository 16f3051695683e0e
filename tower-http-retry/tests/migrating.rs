//! The migration guide (docs/migrating.md) tried end to end: each "before" program (a retry loop
//! written with `backoff` or `tokio-retry`) and the layer configured as the guide says, against
//! the same flaky in-process endpoint (`tower::service_fn`), on paused time.
//!
//! Neither crate is a dependency (`backoff` is unmaintained, RUSTSEC-2025-0012): each "before"
//! loop is a model of what the crate computes, written from its documentation. `backoff`'s
//! `ExponentialBackoff::default()`: interval `I(0) = 500 ms`, `I(n+1) = min(60 s, 1.5 I(n))`,
//! each sleep drawn uniformly in `[I(n)(1 - 0.5), I(n)(1 + 0.5)]`, `notify(err, sleep)` called
//! before each sleep. `tokio-retry`'s `ExponentialBackoff::from_millis(10)`: 10 ms, 100 ms, 1 s.
//!
//! The figures the guide gives for its nearest equivalent of `backoff`'s randomization factor
//! are sampled here (`cargo test -p tower-http-retry --test migrating -- --nocapture` prints
//! them).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::{AttemptHook, RandomSource, RetryLayerBuilder};
use tower_http_retry::{Backoff, Jitter, RetryLayer, RetryReport, StopReason};

type Req = http::Request<String>;
type Res = http::Response<String>;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// `backoff`'s defaults.
const BACKOFF_INITIAL: Duration = Duration::from_millis(500);
const BACKOFF_MULTIPLIER: f64 = 1.5;
const BACKOFF_RANDOMIZATION: f64 = 0.5;
const BACKOFF_MAX_INTERVAL: Duration = Duration::from_secs(60);

/// The guide's nearest equivalent of `ExponentialBackoff::default()`: equal jitter draws in
/// `[v/2, v]`, whose mean `3v/4` is `backoff`'s interval when `v` is 4/3 of it.
fn guide_backoff() -> Backoff {
    Backoff::new(
        Jitter::Equal,
        BACKOFF_INITIAL * 4 / 3,
        Duration::from_secs(80),
    )
    .multiplier(1.5)
}

/// The guide's layer for `backoff` users (its whole program's, without the real client).
fn guide_layer() -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(10)
        .backoff(guide_backoff())
        .deadline(Duration::from_secs(15 * 60))
}

fn get() -> Req {
    http::Request::get("http://example.test/")
        .body(String::new())
        .unwrap()
}

/// An endpoint that answers 503 `failures` times, then 200; and how many calls it got.
fn flaky(
    failures: u32,
) -> (
    impl Service<Req, Response = Res, Error = io::Error, Future: Send> + Clone + Send,
    Arc<AtomicU32>,
) {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let service = service_fn(move |_: Req| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let status = if n < failures { 503 } else { 200 };
        let response = http::Response::builder()
            .status(status)
            .body(String::new())
            .unwrap();
        std::future::ready(Ok::<_, io::Error>(response))
    });
    (service, calls)
}

/// `backoff`'s interval before retry `n` (0 for the first): `min(60 s, 500 ms * 1.5^n)`,
/// computed as the crate does, one multiplication per retry.
fn backoff_interval(n: u32) -> Duration {
    let mut interval = BACKOFF_INITIAL;
    for _ in 0..n {
        interval = if interval.as_secs_f64() >= BACKOFF_MAX_INTERVAL.as_secs_f64() / 1.5 {
            BACKOFF_MAX_INTERVAL
        } else {
            interval.mul_f64(BACKOFF_MULTIPLIER)
        };
    }
    interval
}

/// `backoff`'s range for the sleep before retry `n`: `I(n) * [1 - f, 1 + f]`.
fn backoff_range(n: u32) -> (Duration, Duration) {
    let interval = backoff_interval(n);
    (
        interval.mul_f64(1.0 - BACKOFF_RANDOMIZATION),
        interval.mul_f64(1.0 + BACKOFF_RANDOMIZATION),
    )
}

/// The "before" program: `backoff::future::retry_notify(ExponentialBackoff::default(), op,
/// notify)` where `op` sends the request and calls a 5xx a transient error; a model of the loop.
async fn before_backoff<S>(
    service: S,
    rng: &mut SmallRng,
    mut notify: impl FnMut(http::StatusCode, Duration),
) -> Res
where
    S: Service<Req, Response = Res, Error = io::Error> + Clone,
{
    let mut retry = 0;
    loop {
        let response = service.clone().oneshot(get()).await.unwrap();
        if !response.status().is_server_error() {
            return response;
        }
        let (low, high) = backoff_range(retry);
        let fraction: f64 = rng.random();
        let sleep = low + (high - low).mul_f64(fraction);
        notify(response.status(), sleep);
        tokio::time::sleep(sleep).await;
        retry += 1;
    }
}

/// The guide's live counterpart of `notify` without `tracing`: a hook that sees each attempt
/// as it is sent (attempt 2 and later are retries).
#[derive(Clone, Default)]
struct SeenAttempts(Arc<Mutex<Vec<u32>>>);

impl AttemptHook for SeenAttempts {
    fn own_deadline(&self, _: &HeaderMap) -> Option<Duration> {
        None
    }

    fn stamp(&self, _: &mut HeaderMap, attempt: u32, _: Option<Duration>) {
        self.0.lock().unwrap().push(attempt);
    }
}

#[tokio::test(start_paused = true)]
async fn from_backoff_three_attempts_the_same_retries_and_a_delay_per_retry() {
    // Before: two 503s, then a 200; `notify` is told of each retry's sleep.
    let (endpoint, calls) = flaky(2);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut notified = Vec::new();
    let response = before_backoff(endpoint, &mut rng, |status, sleep| {
        notified.push((status, sleep))
    })
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(notified.len(), 2);
    for (n, (status, sleep)) in notified.iter().enumerate() {
        let (low, high) = backoff_range(n as u32);
        assert_eq!(*status, 503);
        assert!(*sleep >= low && *sleep <= high, "{sleep:?}");
    }

    // After: the guide's layer around the same endpoint; the report holds what `notify` saw.
    let (endpoint, calls) = flaky(2);
    let seen = SeenAttempts::default();
    let layer = guide_layer()
        .attempt_hook(seen.clone())
        .random_source(RandomSource::seeded(7))
        .build()
        .unwrap();
    let start = Instant::now();
    let response = layer.layer(endpoint).oneshot(get()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (3, StopReason::Success));
    assert_eq!(report.delays.len(), notified.len(), "one delay per retry");
    let backoff = guide_backoff();
    for (n, delay) in report.delays.iter().enumerate() {
        let ceiling = backoff.ceiling(n as u32);
        assert_eq!(delay.after_attempt, n as u32 + 1);
        assert_eq!(delay.source, DelaySource::Backoff);
        assert!(
            delay.duration >= ceiling / 2 && delay.duration <= ceiling,
            "retry {n}: {:?} outside [{:?}, {ceiling:?}]",
            delay.duration,
            ceiling / 2
        );
        // Within `backoff`'s own range for that retry too.
        let (low, high) = backoff_range(n as u32);
        assert!(delay.duration >= low && delay.duration <= high);
    }
    let slept: Duration = report.delays.iter().map(|delay| delay.duration).sum();
    assert_eq!(report.slept, slept);
    // The endpoint answers at once: the time taken is the sleeps (tokio's timer rounds each up
    // to its next millisecond).
    let elapsed = start.elapsed();
    assert!(elapsed >= slept && elapsed <= slept + 2 * MS, "{elapsed:?}");
    // The hook saw every attempt as it went out.
    assert_eq!(*seen.0.lock().unwrap(), [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn the_multiplier_sets_the_growth_of_the_delays() {
    // Plain exponential (no jitter), so that the growth is exact: ×1.5 from retry to retry.
    let backoff = Backoff::new(Jitter::None, BACKOFF_INITIAL, BACKOFF_MAX_INTERVAL).multiplier(1.5);
    let (endpoint, calls) = flaky(4);
    let layer = guide_layer().backoff(backoff).build().unwrap();
    let response = layer.layer(endpoint).oneshot(get()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    let delays: Vec<Duration> = RetryReport::of(&response)
        .delays
        .iter()
        .map(|delay| delay.duration)
        .collect();
    assert_eq!(
        delays,
        [
            500 * MS,
            750 * MS,
            1125 * MS,
            Duration::from_micros(1_687_500)
        ]
    );
    for pair in delays.windows(2) {
        let ratio = pair[1].as_secs_f64() / pair[0].as_secs_f64();
        assert!((ratio - 1.5).abs() < 1e-9, "{ratio}");
    }
    // `backoff`'s intervals, the centres of its ranges, are the same.
    for (n, delay) in delays.iter().enumerate() {
        assert_eq!(*delay, backoff_interval(n as u32));
    }
    // The guide's equal jitter grows its ceiling by the same factor.
    for n in 0..5 {
        let ratio =
            guide_backoff().ceiling(n + 1).as_secs_f64() / guide_backoff().ceiling(n).as_secs_f64();
        assert!((ratio - 1.5).abs() < 1e-6, "{ratio}");
    }
}

/// Mean and standard deviation of `draws`, in seconds.
fn moments(draws: &[Duration]) -> (f64, f64) {
    let count = draws.len() as f64;
    let mean = draws.iter().map(Duration::as_secs_f64).sum::<f64>() / count;
    let variance = draws
        .iter()
        .map(|d| (d.as_secs_f64() - mean).powi(2))
        .sum::<f64>()
        / count;
    (mean, variance.sqrt())
}

/// The guide's figures: the n-th delay of `backoff`'s defaults and of its nearest equivalent
/// (equal jitter, base 667 ms, ×1.5, cap 80 s): the same mean at every retry, the cap included;
/// a narrower range, `[2/3, 4/3]` of the mean instead of `[1/2, 3/2]`.
#[test]
fn equal_jitter_has_backoffs_mean_with_a_narrower_spread() {
    const DRAWS: usize = 50_000;
    let ours = guide_backoff();
    let mut rng = SmallRng::seed_from_u64(42);
    println!("retry | backoff range, mean (s) | layer range, mean (s) | sd backoff / layer");
    for n in [0, 1, 2, 4, 9, 12, 20] {
        let interval = backoff_interval(n);
        let (low, high) = backoff_range(n);
        let theirs: Vec<Duration> = (0..DRAWS)
            .map(|_| low + (high - low).mul_f64(rng.random::<f64>()))
            .collect();
        let previous = if n == 0 {
            ours.base()
        } else {
            ours.ceiling(n - 1)
        };
        let draws: Vec<Duration> = (0..DRAWS)
            .map(|_| ours.delay(n, previous, &mut rng))
            .collect();
        let ceiling = ours.ceiling(n);
        assert!(draws.iter().all(|d| *d >= ceiling / 2 && *d <= ceiling));
        let (their_mean, their_sd) = moments(&theirs);
        let (mean, sd) = moments(&draws);
        let i = interval.as_secs_f64();
        // The same mean (within sampling error), `backoff`'s interval.
        assert!((mean / i - 1.0).abs() < 0.01, "retry {n}: {mean} vs {i}");
        assert!((their_mean / i - 1.0).abs() < 0.01);
        // The spread: uniform over a width of I (backoff) or 2I/3 (ours), sd = width / sqrt(12).
        assert!((their_sd / (i / 12f64.sqrt()) - 1.0).abs() < 0.02);
        assert!((sd / (i * 2.0 / 3.0 / 12f64.sqrt()) - 1.0).abs() < 0.02);
        // Ranges: [I/2, 3I/2] against [2I/3, 4I/3].
        let close = |a: Duration, b: f64| (a.as_secs_f64() - b).abs() < 1e-6 * b.max(1.0);
        assert!(close(ceiling / 2, i * 2.0 / 3.0) && close(ceiling, i * 4.0 / 3.0));
        println!(
            "{:>5} | [{:.3}, {:.3}], {:.3} | [{:.3}, {:.3}], {:.3} | {:.3} / {:.3}",
            n + 1,
            low.as_secs_f64(),
            high.as_secs_f64(),
            their_mean,
            (ceiling / 2).as_secs_f64(),
            ceiling.as_secs_f64(),
            mean,
            their_sd,
            sd
        );
    }
    // Past the cap: backoff 60 s ± 30 s, ours 60 s mean in [40 s, 80 s].
    assert_eq!(backoff_interval(12), 60 * SEC);
    assert_eq!(ours.ceiling(12), 80 * SEC);
    assert!(ours.ceiling(11) < 80 * SEC, "capped from the same retry on");
    // Nine retries (10 attempts): the same mean total sleep, 1.5^9 - 1 = 37.44 s.
    let total: f64 = (0..9).map(|n| backoff_interval(n).as_secs_f64()).sum();
    let ours_total: f64 = (0..9).map(|n| ours.ceiling(n).as_secs_f64() * 0.75).sum();
    assert!((total - 37.443).abs() < 0.001 && (ours_total - total).abs() < 1e-6);
}

#[tokio::test(start_paused = true)]
async fn from_tokio_retry_four_attempts_and_tenfold_delays() {
    // Before: `ExponentialBackoff::from_millis(10).take(3)` (without `map(jitter)`, so that the
    // delays are exact): 10 ms, 100 ms, 1 s, then the last error.
    let before: Vec<Duration> = std::iter::successors(Some(10 * MS), |d| Some(*d * 10))
        .take(3)
        .collect();

    // After: the guide's layer, plain exponential for the comparison.
    let (endpoint, calls) = flaky(u32::MAX);
    let layer = RetryLayer::builder()
        .max_attempts(4)
        .backoff(Backoff::new(Jitter::None, 10 * MS, SEC).multiplier(10.0))
        .build()
        .unwrap();
    let response = layer.layer(endpoint).oneshot(get()).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let report = RetryReport::of(&response);
    assert_eq!(
        (report.attempts, report.stop),
        (4, StopReason::AttemptsExhausted)
    );
    let after: Vec<Duration> = report.delays.iter().map(|delay| delay.duration).collect();
    assert_eq!(after, before);

    // With `map(jitter)`: full jitter, each delay below the same ceilings.
    let (endpoint, calls) = flaky(u32::MAX);
    let layer = RetryLayer::builder()
        .max_attempts(4)
        .backoff(Backoff::new(Jitter::Full, 10 * MS, SEC).multiplier(10.0))
        .random_source(RandomSource::seeded(3))
        .build()
        .unwrap();
    let response = layer.layer(endpoint).oneshot(get()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let report = RetryReport::of(&response);
    assert_eq!(report.delays.len(), 3);
    for (delay, ceiling) in report.delays.iter().zip(&before) {
        assert!(delay.duration <= *ceiling, "{delay:?}");
    }
}
