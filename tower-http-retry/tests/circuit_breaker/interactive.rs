//! The interactive recipe of docs/retrying.md, `RetryLayer::interactive()` over
//! `CircuitBreakerLayer::interactive()` sharing one abort signal, tried as a user's clicks
//! would: how long a short blip locks users out, and how a server's hint is waited for or given
//! up on within the 5 s deadline. Paused time, so the figures are exact.

use super::scripted::{get, Req, Res, MS, SEC};
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_http_retry::circuit_breaker::CircuitBreakerLayerBuilder;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::{AbortSignal, CircuitBreakerLayer, RetryReport, StopReason};

/// An endpoint that answers `down` (with `headers`) until `blip` has passed, then 200.
fn blip(
    blip: Duration,
    down: u16,
    headers: &'static [(&'static str, &'static str)],
) -> impl tower::Service<Req, Response = Res, Error = std::io::Error, Future: Send> + Clone + Send {
    let start = Instant::now();
    service_fn(move |_: Req| async move {
        let mut response = http::Response::builder();
        if start.elapsed() < blip {
            response = response.status(down);
            for (name, value) in headers {
                response = response.header(*name, *value);
            }
        }
        Ok(response.body(()).unwrap())
    })
}

/// What the clicks of [`clicks`] got.
#[derive(Debug)]
struct Clicks {
    first_success: Option<Duration>,
    failed: usize,
    total: usize,
}

/// 20 clicks at once, then one every 250 ms until 8 s (52 in all), against an endpoint down for
/// the first 2 s, through the interactive retry layer over `breaker`, both seeded with `seed`.
async fn clicks(breaker: CircuitBreakerLayerBuilder, seed: u64) -> Clicks {
    let wake = AbortSignal::new();
    let retry = RetryLayerBuilder::interactive()
        .abort_signal(wake.clone())
        .random_source(RandomSource::seeded(seed))
        .build()
        .unwrap();
    let breaker = breaker
        .abort_signal(wake)
        .random_source(RandomSource::seeded(seed + 1000))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(retry)
        .layer(breaker)
        .service(blip(2 * SEC, 503, &[]));
    let start = Instant::now();
    let at = (0..20)
        .map(|_| Duration::ZERO)
        .chain((1..=32).map(|n| n * 250 * MS));
    let tasks: Vec<_> = at
        .map(|at| {
            let client = client.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + at).await;
                let result = client.oneshot(get()).await;
                let ok = matches!(&result, Ok(response) if response.status() == 200);
                (ok, start.elapsed())
            })
        })
        .collect();
    let mut outcome = Clicks {
        first_success: None,
        failed: 0,
        total: tasks.len(),
    };
    for task in tasks {
        let (ok, done) = task.await.unwrap();
        if ok {
            outcome.first_success = Some(outcome.first_success.map_or(done, |t| t.min(done)));
        } else {
            outcome.failed += 1;
        }
    }
    outcome
}

#[tokio::test(start_paused = true)]
async fn a_two_second_blip_locks_users_out_for_about_the_blip_with_the_interactive_breaker() {
    for seed in 0..10 {
        let interactive = clicks(CircuitBreakerLayerBuilder::interactive(), seed).await;
        let default = clicks(CircuitBreakerLayer::builder().consecutive_failures(3), seed).await;
        println!("seed {seed}: interactive {interactive:?}, default {default:?}");
        assert_eq!((interactive.total, default.total), (52, 52));
        let first = interactive.first_success.expect("some click succeeded");
        assert!(first >= 2 * SEC, "nothing succeeds during the blip");
        // The preset's promise: a 2 s blip costs users about the blip, within a second.
        assert!(first <= 3 * SEC, "seed {seed}: {interactive:?}");
        // The default breaker is open 5 to 7.5 s from its first trip: no click gets through
        // before 5 s.
        assert!(default.first_success.expect("some click succeeded") >= 5 * SEC);
    }
}

/// One GET through the interactive retry layer alone, against an endpoint that answers 429 with
/// `headers` until `down` has passed; the report and the time it took.
async fn rate_limited(
    down: Duration,
    headers: &'static [(&'static str, &'static str)],
) -> (u16, RetryReport, Duration) {
    let retry = RetryLayerBuilder::interactive()
        .random_source(RandomSource::seeded(3))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(retry)
        .service(blip(down, 429, headers));
    let start = Instant::now();
    let response = client.oneshot(get()).await.unwrap();
    let report = RetryReport::from_response(&response);
    (response.status().as_u16(), report, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn interactive_waits_once_for_a_reset_that_fits_its_deadline() {
    let dialects: [&'static [(&str, &str)]; 4] = [
        &[("retry-after", "2")],
        &[("retry-after-ms", "2000")],
        &[("ratelimit", "\"default\";r=0;t=2")],
        &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2")],
    ];
    for header in dialects {
        let (status, report, took) = rate_limited(2 * SEC, header).await;
        assert_eq!(status, 200, "{header:?}: {report:?}");
        assert_eq!(
            report.attempts, 2,
            "{header:?}: one wait, no retry into the limit"
        );
        assert!(
            (2 * SEC..=2200 * MS).contains(&took),
            "{header:?}: {took:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn interactive_gives_up_at_once_on_a_hint_past_its_deadline_with_the_exact_time() {
    let (status, report, took) = rate_limited(60 * SEC, &[("retry-after", "8")]).await;
    assert_eq!(status, 429);
    assert_eq!(took, Duration::ZERO, "no wait");
    assert_eq!(
        (report.attempts, report.stop, report.resend_after),
        (1, StopReason::RetryAfterTooLong, Some(8 * SEC))
    );
}

#[tokio::test(start_paused = true)]
async fn interactive_gives_up_on_a_hint_past_the_time_left_with_the_exact_time() {
    // 3 s at first (waited), then 3 s again at about 3 s: only about 2 s are left.
    let (status, report, took) = rate_limited(60 * SEC, &[("retry-after", "3")]).await;
    assert_eq!(status, 429);
    assert_eq!(report.attempts, 2);
    assert_eq!(
        (report.stop, report.resend_after),
        (StopReason::Deadline, Some(3 * SEC))
    );
    assert!(
        took - report.slept < 10 * MS,
        "gave up at once after the wait: {took:?}"
    );
}
