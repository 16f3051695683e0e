//! What the wire says besides the status, against real servers: rate-limit resets in the
//! dialects APIs use (GitHub's `x-ratelimit-*`, the IETF `RateLimit` fields of every draft,
//! `retry-after-ms`), read against the local clock or, when it disagrees, the response's `Date`;
//! stand-down markers; and retry layers nested in one process.

use super::support::{client, get, h2_client, request, Body, HttpClient, Reply, TestServer};
use super::{retry, send, GENEROUS};
use http::{Method, Request};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower::timeout::TimeoutLayer;
use tower::{Service, ServiceBuilder};
use tower_http_retry::hint::HintPolicy;
use tower_http_retry::report::DelaySource;
use tower_http_retry::retry::{NestedLayers, RetryLayerBuilder};
use tower_http_retry::{Pacing, RetryLayer, RetryReport, StopReason};

const SECOND: Duration = Duration::from_secs(1);

/// The server's clock in whole seconds, as its `Date` header carries it.
fn server_now() -> (u64, String) {
    let now = SystemTime::now();
    let seconds = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
    (
        seconds,
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(seconds)),
    )
}

/// GitHub's answer to a used-up quota: 403, nothing remaining, the reset as Unix seconds
/// `after` whole seconds after its own `Date` (so between `after - 1` and `after` seconds after
/// the answer).
fn github_limited(after: u64) -> Reply {
    let (now, date) = server_now();
    Reply::status(403)
        .header("date", &date)
        .header("x-ratelimit-limit", "60")
        .header("x-ratelimit-remaining", "0")
        .header("x-ratelimit-reset", &(now + after).to_string())
}

fn stack(
    layer: &RetryLayer,
    client: HttpClient,
) -> impl Service<Request<Body>, Response = http::Response<hyper::body::Incoming>, Error = tower::BoxError>
{
    ServiceBuilder::new()
        .layer(layer.clone())
        .layer(TimeoutLayer::new(GENEROUS))
        .service(client)
}

/// The single delay of `report`: slept on the server's hint, at least `at_least`.
fn assert_hinted(report: &RetryReport, at_least: Duration) {
    assert_eq!(report.delays.len(), 1, "{report:?}");
    let delay = report.delays[0];
    assert_eq!(delay.source, DelaySource::RetryAfter, "{report:?}");
    assert!(delay.duration >= at_least, "{delay:?}");
    // The 10 % upward spread, never more.
    assert!(delay.duration <= at_least.mul_f64(1.1), "{delay:?}");
}

#[tokio::test]
async fn a_github_style_403_with_no_quota_left_is_retried_at_the_reset() {
    for (server, client) in [
        (
            TestServer::start(|hit| match hit.nth {
                1 => github_limited(2),
                _ => Reply::status(200),
            })
            .await,
            client(),
        ),
        (
            TestServer::start_h2(|hit| match hit.nth {
                1 => github_limited(2),
                _ => Reply::status(200),
            })
            .await,
            h2_client(),
        ),
    ] {
        let layer = retry()
            .hint_policy(HintPolicy::honored().max_delay(5 * SECOND))
            .build()
            .unwrap();
        let mut client = stack(&layer, client);

        let (result, report) = send(&mut client, get(&server.uri("/"), "quota")).await;

        assert_eq!(result.unwrap().status(), 200);
        assert_eq!(server.hits(&Method::GET, "quota"), 2);
        // The reset is 2 s after the Date, the local clock a fraction of a second later.
        assert_eq!(report.delays.len(), 1, "{report:?}");
        let delay = report.delays[0];
        assert_eq!(delay.source, DelaySource::RetryAfter, "{report:?}");
        assert!(
            (SECOND..=(2 * SECOND).mul_f64(1.1)).contains(&delay.duration),
            "{delay:?}"
        );
    }
}

#[tokio::test]
async fn a_403_with_quota_left_is_permanent() {
    let server = TestServer::start(|_| {
        Reply::status(403)
            .header("x-ratelimit-remaining", "59")
            .header("x-ratelimit-reset", "1")
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = stack(&layer, client());

    let (result, report) = send(&mut client, get(&server.uri("/"), "denied")).await;

    assert_eq!(result.unwrap().status(), 403);
    assert_eq!(server.hits(&Method::GET, "denied"), 1);
    assert_eq!(report.stop, StopReason::Permanent);
}

#[tokio::test]
async fn a_skewed_client_clock_waits_what_the_server_meant() {
    // An hour fast, the reset looks past (a retry at once); an hour slow, it looks an hour away
    // (a retry at the clamp). Measured against the response's Date, it is one second.
    for skew in [3600i64, -3600] {
        let server = TestServer::start(|hit| match hit.nth {
            1 => github_limited(1),
            _ => Reply::status(200),
        })
        .await;
        let layer = retry()
            .wall_clock(move || {
                let now = SystemTime::now();
                let shift = Duration::from_secs(skew.unsigned_abs());
                if skew > 0 {
                    now + shift
                } else {
                    now - shift
                }
            })
            .build()
            .unwrap();
        let mut client = stack(&layer, client());

        let (result, report) = send(&mut client, get(&server.uri("/"), "skewed")).await;

        assert_eq!(result.unwrap().status(), 200);
        assert_hinted(&report, SECOND);
    }
}

#[tokio::test]
async fn an_ietf_ratelimit_429_is_retried_after_the_largest_exhausted_reset() {
    let server = TestServer::start_h2(|hit| match hit.nth {
        1 => Reply::status(429)
            .header("ratelimit", "\"burst\";r=0;t=1, \"hourly\";r=120;t=1800")
            .header(
                "ratelimit-policy",
                "\"burst\";q=10;w=1, \"hourly\";q=1000;w=3600",
            ),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = stack(&layer, h2_client());

    let (result, report) = send(&mut client, get(&server.uri("/"), "ietf")).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(server.hits(&Method::GET, "ietf"), 2);
    assert_hinted(&report, SECOND);
    assert_eq!(layer.stats().retry_after_seen, 1);
}

/// A rate limiter whose window closes `window` after the first request: until then every request
/// gets a 429 with the reset (whole seconds from now, rounded up, as servers write it) in the
/// dialect `limited` writes; after it, 200. Returns the server and the instants of its hits.
async fn window_limiter(
    window: Duration,
    limited: fn(u64) -> Reply,
) -> (TestServer, Arc<std::sync::Mutex<Vec<std::time::Instant>>>) {
    let arrivals = Arc::new(std::sync::Mutex::new(Vec::<std::time::Instant>::new()));
    let seen = Arc::clone(&arrivals);
    let server = TestServer::start(move |_| {
        let mut seen = seen.lock().unwrap();
        let now = std::time::Instant::now();
        let opened = *seen.first().unwrap_or(&now);
        seen.push(now);
        let left = window.saturating_sub(now - opened);
        if left.is_zero() {
            Reply::status(200)
        } else {
            limited(left.as_secs() + u64::from(left.subsec_nanos() > 0))
        }
    })
    .await;
    (server, arrivals)
}

/// express-rate-limit's `draft-6`: the drafts up to 06's three fields.
fn draft_6(reset: u64) -> Reply {
    Reply::status(429)
        .header("ratelimit-limit", "100")
        .header("ratelimit-remaining", "0")
        .header("ratelimit-reset", &reset.to_string())
}

/// express-rate-limit's `draft-7`: one dictionary, and the policy beside it.
fn draft_7(reset: u64) -> Reply {
    Reply::status(429)
        .header(
            "ratelimit",
            &format!("limit=100, remaining=0, reset={reset}"),
        )
        .header("ratelimit-policy", "100;w=60")
}

#[tokio::test]
async fn the_older_ietf_dialects_are_waited_for_by_default() {
    // The default layer (a new user's first try), against a 2 s window: one retry at the reset,
    // not three hits on plain backoff and a 429.
    let window = 2 * SECOND;
    for (dialect, limited) in [
        ("drafts <= 06", draft_6 as fn(u64) -> Reply),
        ("draft-07", draft_7),
    ] {
        let (server, arrivals) = window_limiter(window, limited).await;
        let layer = RetryLayer::new();
        let mut client = stack(&layer, client());
        let started = std::time::Instant::now();

        let (result, report) = send(&mut client, get(&server.uri("/"), "window")).await;

        let took = started.elapsed();
        let status = result.unwrap().status();
        let hits = arrivals.lock().unwrap().len();
        println!("{dialect}: {hits} hits, {took:.3?}, then {status}");
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(hits, 2, "{dialect}");
        assert_hinted(&report, window);
    }
}

#[tokio::test]
async fn an_epoch_reset_is_waited_from_the_local_clock_when_it_agrees_with_date() {
    // The request leaves in the middle of a second: its Date is rounded down by ~0.5 s. Measured
    // against the Date, a reset 2.000 s after the answer would be waited ~2.5 s; measured
    // against the local clock, which agrees with the Date, it is waited 2.0 s (plus the upward
    // spread of at most 10 %, so at most 2.2 s).
    let meant = 2 * SECOND;
    let answered = Arc::new(std::sync::Mutex::new(None));
    let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (answer, seen) = (Arc::clone(&answered), Arc::clone(&arrivals));
    let server = TestServer::start(move |hit| {
        seen.lock().unwrap().push(std::time::Instant::now());
        match hit.nth {
            1 => {
                let now = SystemTime::now();
                let since_epoch = now.duration_since(UNIX_EPOCH).unwrap();
                let date = UNIX_EPOCH + Duration::from_secs(since_epoch.as_secs());
                *answer.lock().unwrap() = Some(std::time::Instant::now());
                Reply::status(429)
                    .header("date", &httpdate::fmt_http_date(date))
                    .header("x-ratelimit-remaining", "0")
                    .header(
                        "x-ratelimit-reset",
                        &format!("{:.3}", (since_epoch + meant).as_secs_f64()),
                    )
            }
            _ => Reply::status(200),
        }
    })
    .await;
    let layer = RetryLayer::new();
    let mut client = stack(&layer, client());
    let into_second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(
        (1500 - into_second) % 1000,
    )))
    .await;

    let (result, report) = send(&mut client, get(&server.uri("/"), "epoch")).await;

    assert_eq!(result.unwrap().status(), 200);
    let answered = answered.lock().unwrap().unwrap();
    let waited = arrivals.lock().unwrap()[1] - answered;
    let hinted = report.delays[0];
    println!(
        "epoch reset meant {meant:.3?}: hint {:.3?}, waited {waited:.3?}",
        hinted.duration
    );
    assert_eq!(hinted.source, DelaySource::RetryAfter, "{report:?}");
    // The hint is read a little after the answer, so it may be a few ms short of 2 s.
    assert!(
        hinted.duration >= meant - Duration::from_millis(100),
        "{hinted:?}"
    );
    assert!(
        hinted.duration <= meant.mul_f64(1.1) + Duration::from_millis(100),
        "{hinted:?}: measured against the rounded Date, not the local clock"
    );
}

#[tokio::test]
async fn retry_after_ms_is_read_in_milliseconds() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(503).header("retry-after-ms", "150"),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = stack(&layer, client());

    let (result, report) = send(&mut client, get(&server.uri("/"), "ms")).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_hinted(&report, Duration::from_millis(150));
}

#[tokio::test]
async fn a_malformed_reset_is_counted_and_the_backoff_decides() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(429).header("ratelimit", "\"q\";r=0;t=soon"),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = stack(&layer, client());

    let (result, report) = send(&mut client, get(&server.uri("/"), "garbled")).await;

    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(report.delays[0].source, DelaySource::Backoff, "{report:?}");
    assert_eq!(layer.stats().retry_after_malformed, 1);
}

#[tokio::test]
async fn stand_down_markers_stop_retrying_at_once() {
    for (name, value) in [("x-should-retry", "false"), ("x-envoy-overloaded", "true")] {
        for (server, client) in [
            (
                TestServer::start(move |_| Reply::status(503).header(name, value)).await,
                client(),
            ),
            (
                TestServer::start_h2(move |_| Reply::status(503).header(name, value)).await,
                h2_client(),
            ),
        ] {
            let layer = retry().build().unwrap();
            let mut client = stack(&layer, client);

            let (result, report) = send(&mut client, get(&server.uri("/"), "shed")).await;

            assert_eq!(result.unwrap().status(), 503, "{name}");
            assert_eq!(server.hits(&Method::GET, "shed"), 1, "{name}");
            assert_eq!(
                (report.attempts, report.stop),
                (1, StopReason::StandDown),
                "{name}"
            );
        }
    }
}

#[tokio::test]
async fn x_should_retry_true_retries_a_post_without_a_key() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => Reply::status(500).header("x-should-retry", "true"),
        _ => Reply::status(201),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = stack(&layer, client());
    let post = || request(Method::POST, &server.uri("/"), "charge", "{}");

    let (result, report) = send(&mut client, post()).await;

    assert_eq!(result.unwrap().status(), 201);
    assert_eq!(server.hits(&Method::POST, "charge"), 2);
    assert_eq!(report.stop, StopReason::Success);
}

/// `depth` retry layers, each as an SDK would build it, over the hyper client.
fn nested(
    depth: usize,
    nesting: NestedLayers,
    layers: &mut Vec<RetryLayer>,
) -> tower::util::BoxCloneService<
    Request<Body>,
    http::Response<hyper::body::Incoming>,
    tower::BoxError,
> {
    let builder = || -> RetryLayerBuilder { retry().without_budget().nested_layers(nesting) };
    let mut service = tower::util::BoxCloneService::new(
        ServiceBuilder::new()
            .map_err(tower::BoxError::from)
            .service(client()),
    );
    for _ in 0..depth {
        let layer = builder().build().unwrap();
        layers.push(layer.clone());
        service = tower::util::BoxCloneService::new(
            ServiceBuilder::new()
                .layer(layer)
                .map_err(tower::BoxError::from)
                .service(service),
        );
    }
    service
}

#[tokio::test]
async fn three_nested_layers_over_a_failing_server_send_n_attempts_not_n_cubed() {
    let server = TestServer::start(|_| Reply::status(503)).await;
    let mut layers = Vec::new();
    let mut client = nested(3, NestedLayers::Defer, &mut layers);

    let (result, report) = send(&mut client, get(&server.uri("/"), "nested")).await;

    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(
        server.hits(&Method::GET, "nested"),
        3,
        "3 attempts, not 3³ = 27"
    );
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::AttemptsExhausted)
    );
    // The two inner layers sent each attempt once and said why.
    for inner in &layers[..2] {
        let stats = inner.stats();
        assert_eq!(
            (stats.attempts, stats.stopped(StopReason::Delegated)),
            (3, 3)
        );
    }
}

#[tokio::test]
async fn independent_nested_layers_multiply_as_configured() {
    let server = TestServer::start(|_| Reply::status(503)).await;
    let mut layers = Vec::new();
    let mut client = nested(3, NestedLayers::Independent, &mut layers);

    let (result, _) = send(&mut client, get(&server.uri("/"), "storm")).await;

    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(server.hits(&Method::GET, "storm"), 27);
}

#[tokio::test]
async fn a_success_that_used_up_the_quota_makes_the_next_request_wait_for_the_reset() {
    let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&arrivals);
    let server = TestServer::start(move |hit| {
        seen.lock().unwrap().push(std::time::Instant::now());
        match hit.nth {
            1 => {
                let (now, date) = server_now();
                Reply::status(200)
                    .header("date", &date)
                    .header("x-ratelimit-remaining", "0")
                    .header("x-ratelimit-reset", &(now + 2).to_string())
            }
            _ => Reply::status(200),
        }
    })
    .await;
    let layer = retry().pacing(Pacing::new()).build().unwrap();
    let mut client = stack(&layer, client());

    let (first, _) = send(&mut client, get(&server.uri("/"), "quota")).await;
    assert_eq!(first.unwrap().status(), 200);
    let answered = std::time::Instant::now();
    let (second, report) = send(&mut client, get(&server.uri("/"), "quota")).await;

    assert_eq!(second.unwrap().status(), 200);
    let arrivals = arrivals.lock().unwrap();
    assert_eq!(arrivals.len(), 2);
    // The reset was two seconds after the first answer's Date, so at least one after the
    // answer: the second request, sent at once, waited for it in the endpoint's queue (a lower
    // bound only; a slow machine adds).
    let waited = arrivals[1].saturating_duration_since(answered);
    assert!(
        waited >= Duration::from_millis(900),
        "waited only {waited:?}"
    );
    assert_eq!(
        report.delays.first().map(|d| d.source),
        Some(DelaySource::Paced),
        "{report:?}"
    );
    assert_eq!(layer.stats().quota_paused, 1);
}

/// A 429 whose JSON body holds a `google.rpc.RetryInfo`, as Google's APIs send one; no header
/// says when to come back.
fn google_limited(retry_delay: &str) -> Reply {
    let body = format!(
        r#"{{"error": {{"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "{retry_delay}"}}]}}}}"#
    );
    let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
    *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
    Reply::Respond(response).header("content-type", "application/json; charset=UTF-8")
}

#[cfg(feature = "json")]
#[tokio::test]
async fn a_retry_info_in_a_json_body_read_by_release_body_is_the_delay() {
    for (server, client) in [
        (
            TestServer::start(|hit| match hit.nth {
                1 => google_limited("0.3s"),
                _ => Reply::status(200),
            })
            .await,
            client(),
        ),
        (
            TestServer::start_h2(|hit| match hit.nth {
                1 => google_limited("0.3s"),
                _ => Reply::status(200),
            })
            .await,
            h2_client(),
        ),
    ] {
        let layer = retry().build().unwrap();
        let mut client = ServiceBuilder::new()
            .layer(layer.clone())
            .layer(TimeoutLayer::new(GENEROUS))
            .layer(tower_http_retry::body::ReleaseBodyLayer::new())
            .service(client);

        let (result, report) = send(&mut client, get(&server.uri("/"), "gemini")).await;

        assert_eq!(result.unwrap().status(), 200);
        assert_eq!(server.hits(&Method::GET, "gemini"), 2);
        assert_hinted(&report, Duration::from_millis(300));
    }
}

#[tokio::test]
async fn a_retry_info_body_nobody_reads_leaves_the_backoff() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => google_limited("30s"),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = stack(&layer, client());
    let (result, report) = send(&mut client, get(&server.uri("/"), "unread")).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(report.delays[0].source, DelaySource::Backoff, "{report:?}");
    assert_eq!(layer.stats().retry_after_malformed, 0);
}

#[cfg(feature = "json")]
#[tokio::test]
async fn a_retry_info_whose_delay_is_no_duration_is_counted_and_the_backoff_decides() {
    let server = TestServer::start(|hit| match hit.nth {
        1 => google_limited("soon"),
        _ => Reply::status(200),
    })
    .await;
    let layer = retry().build().unwrap();
    let mut client = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(tower_http_retry::body::ReleaseBodyLayer::new())
        .service(client());
    let (result, report) = send(&mut client, get(&server.uri("/"), "bad")).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(report.delays[0].source, DelaySource::Backoff, "{report:?}");
    assert_eq!(layer.stats().retry_after_malformed, 1);
}
