//! The resend time a report gives (`RetryReport::resend_after`) uses what the layer knows of the
//! endpoint, not only the next backoff draw: a durable queue that honours it must not redeliver
//! into a wall it was told about.

use http::uri::Authority;
use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, ServiceExt};
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::{AbortSignal, Backoff, Jitter, Pacing, RetryLayer, RetryReport, StopReason};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

type Req = http::Request<String>;
type Res = http::Response<String>;

/// Plain exponential 100 ms .. 1 s, seeded, no budget.
fn builder() -> RetryLayerBuilder {
    RetryLayer::builder()
        .backoff(Backoff::new(Jitter::None, 100 * MS, SEC))
        .random_source(RandomSource::seeded(3))
        .without_budget()
}

/// Sends one GET to a.test through `layer` over an endpoint that answers `answer`.
async fn report_of(layer: RetryLayer, answer: fn() -> Res) -> RetryReport {
    let endpoint = service_fn(move |_: Req| async move { Ok::<_, std::io::Error>(answer()) });
    let request = http::Request::get("http://a.test/")
        .body(String::new())
        .unwrap();
    let response = layer.layer(endpoint).oneshot(request).await.unwrap();
    RetryReport::of(&response).clone()
}

fn within(report: &RetryReport, low: Duration, high: Duration) {
    let after = report.resend_after.expect("a time to send again");
    assert!(
        after >= low && after <= high,
        "{after:?} not in {low:?}..={high:?}: {report:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn after_attempts_run_out_the_resend_time_waits_out_the_servers_last_hint() {
    let report = report_of(builder().max_attempts(1).build().unwrap(), || {
        http::Response::builder()
            .status(429)
            .header("retry-after", "5")
            .body(String::new())
            .unwrap()
    })
    .await;
    assert_eq!(report.stop, StopReason::AttemptsExhausted);
    // The hint, spread upward by the `Retry-After` jitter (10 %), not the 100 ms backoff draw.
    within(&report, 5 * SEC, 5500 * MS);
}

#[tokio::test(start_paused = true)]
async fn the_resend_time_waits_out_a_breakers_hold_of_the_endpoint() {
    let signal = AbortSignal::new();
    let authority: Authority = "a.test".parse().unwrap();
    signal.hold_authority_until(Some(&authority), Instant::now() + 6 * SEC);
    let layer = builder()
        .max_attempts(1)
        .abort_signal(signal)
        .build()
        .unwrap();
    let report = report_of(layer, || {
        http::Response::builder()
            .status(503)
            .body(String::new())
            .unwrap()
    })
    .await;
    assert_eq!(report.stop, StopReason::AttemptsExhausted);
    within(&report, 6 * SEC, 6600 * MS);
}

#[tokio::test(start_paused = true)]
async fn the_resend_time_to_a_paced_endpoint_is_not_before_the_pacers_next_release() {
    let layer = builder()
        .max_attempts(1)
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .build()
        .unwrap();
    let report = report_of(layer, || {
        http::Response::builder()
            .status(503)
            .body(String::new())
            .unwrap()
    })
    .await;
    assert_eq!(report.stop, StopReason::AttemptsExhausted);
    // The endpoint is down: its first probe goes after 250..750 ms (500 ms, jittered by half),
    // later than the 100 ms backoff draw.
    within(&report, 250 * MS, 825 * MS);
}

#[tokio::test(start_paused = true)]
async fn without_anything_known_the_resend_time_is_the_next_backoff_draw() {
    let report = report_of(builder().max_attempts(1).build().unwrap(), || {
        http::Response::builder()
            .status(503)
            .body(String::new())
            .unwrap()
    })
    .await;
    within(&report, 100 * MS, 100 * MS);
}
