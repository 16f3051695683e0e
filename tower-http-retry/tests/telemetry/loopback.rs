//! The counters and the delay histogram, for requests through the retry layer in front of
//! hyper-util's client and a hyper server on `127.0.0.1:0`.

use super::support::{self, get, Reply, TestServer};
use super::{with_recorder, Readings};
use http::Method;
use std::time::Duration;
use tower::{Layer, ServiceExt};
use tower_http_retry::hint::HintPolicy;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder, TokenBucket};
use tower_http_retry::telemetry::describe_metrics;
use tower_http_retry::{Backoff, Jitter, RetryLayer};

const MS: Duration = Duration::from_millis(1);

/// 3 attempts, backoff 5 ms then 10 ms (no jitter, so the histogram's values are exact), hints
/// clamped to exactly 10 ms, no budget unless a test sets one.
fn layer() -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::None, 5 * MS, 50 * MS))
        .hint_policy(HintPolicy::honored().max_delay(10 * MS).jitter(0.0))
        .random_source(RandomSource::seeded(1))
        .without_budget()
}

/// Answers by request id: `ok-after-1` fails once, `hint` says `Retry-After: 1` once,
/// `down` always fails, anything else succeeds.
async fn server() -> TestServer {
    TestServer::start(|hit| match (hit.id.as_str(), hit.nth) {
        ("ok-after-1", 1) => Reply::status(503),
        ("hint", 1) => Reply::status(429).header("retry-after", "1"),
        ("down", _) => Reply::status(503),
        _ => Reply::status(200),
    })
    .await
}

#[test]
fn attempts_retries_stops_and_delays_are_counted_exactly() {
    with_recorder(false, |snapshotter| async move {
        let server = server().await;
        let service = layer()
            .budget(TokenBucket::default())
            .build()
            .unwrap()
            .layer(support::client());
        let uri = server.uri("/");
        for id in ["first-try", "ok-after-1", "hint", "down"] {
            let _ = service.clone().oneshot(get(&uri, id)).await.unwrap();
        }
        // A POST without an idempotency key is sent once.
        let post = support::request(Method::POST, &uri, "down", "body");
        let _ = service.clone().oneshot(post).await.unwrap();

        let m = Readings::take(&snapshotter);
        // first-try 1, ok-after-1 2, hint 2, down 3, POST 1.
        assert_eq!(m.counter("http_client_retry_attempts_total", &[]), 9);
        assert_eq!(
            server.total_hits(),
            9,
            "one attempt counted per request served"
        );
        let retries = "http_client_retry_retries_total";
        assert_eq!(m.counter(retries, &[("source", "backoff")]), 3);
        assert_eq!(
            m.counter(retries, &[("source", "retry_after_clamped")]),
            1,
            "{:?}",
            m.series(retries)
        );
        assert_eq!(m.series(retries).len(), 2, "{:?}", m.series(retries));
        let requests = "http_client_retry_requests_total";
        assert_eq!(m.counter(requests, &[("reason", "success")]), 3);
        assert_eq!(m.counter(requests, &[("reason", "attempts_exhausted")]), 1);
        assert_eq!(m.counter(requests, &[("reason", "not_idempotent")]), 1);
        assert_eq!(m.series(requests).len(), 3, "{:?}", m.series(requests));
        let delay = "http_client_retry_delay_seconds";
        // ok-after-1: 5 ms; down: 5 ms then 10 ms; the hint: clamped to 10 ms.
        assert_eq!(
            m.histogram(delay, &[("source", "backoff")]),
            [0.005, 0.005, 0.010]
        );
        assert_eq!(
            m.histogram(delay, &[("source", "retry_after_clamped")]),
            [0.010]
        );
        let budget = "http_client_retry_budget_withdrawals_total";
        assert_eq!(m.counter(budget, &[("result", "granted")]), 4);
        assert_eq!(m.counter(budget, &[("result", "denied")]), 0);
        assert_eq!(m.counter("http_client_retry_budget_refunds_total", &[]), 0);
    });
}

#[test]
fn a_labelled_layer_records_under_its_own_label_beside_an_unlabelled_one() {
    with_recorder(false, |snapshotter| async move {
        let server = server().await;
        let uri = server.uri("/");
        let webhooks = layer()
            .metrics_label("webhooks")
            .budget(TokenBucket::default())
            .build()
            .unwrap()
            .layer(support::client());
        let plain = layer().build().unwrap().layer(support::client());
        // The labelled layer: one delivery that gives up after 3 attempts, one that succeeds.
        for id in ["down", "first-try"] {
            let _ = webhooks.clone().oneshot(get(&uri, id)).await.unwrap();
        }
        // The other: one success after a retry.
        let _ = plain.oneshot(get(&uri, "ok-after-1")).await.unwrap();

        let m = Readings::take(&snapshotter);
        let layer = ("layer", "webhooks");
        let attempts = "http_client_retry_attempts_total";
        assert_eq!(m.counter(attempts, &[layer]), 4);
        assert_eq!(m.counter(attempts, &[]), 2, "the unlabelled layer's own");
        let requests = "http_client_retry_requests_total";
        assert_eq!(
            m.counter(requests, &[layer, ("reason", "attempts_exhausted")]),
            1
        );
        assert_eq!(m.counter(requests, &[layer, ("reason", "success")]), 1);
        assert_eq!(m.counter(requests, &[("reason", "success")]), 1);
        assert_eq!(m.series(requests).len(), 3, "{:?}", m.series(requests));
        let retries = "http_client_retry_retries_total";
        assert_eq!(m.counter(retries, &[layer, ("source", "backoff")]), 2);
        assert_eq!(m.counter(retries, &[("source", "backoff")]), 1);
        let delay = "http_client_retry_delay_seconds";
        assert_eq!(
            m.histogram(delay, &[layer, ("source", "backoff")]),
            [0.005, 0.010]
        );
        let budget = "http_client_retry_budget_withdrawals_total";
        assert_eq!(m.counter(budget, &[layer, ("result", "granted")]), 2);
        assert_eq!(m.series(budget).len(), 1, "{:?}", m.series(budget));
    });
}

#[test]
fn an_empty_budget_counts_a_denial_and_the_stop() {
    with_recorder(false, |snapshotter| async move {
        let server = server().await;
        // One token, none back: the first retry is granted, the second denied.
        let bucket = TokenBucket::builder()
            .capacity(1.0)
            .deposit_per_success(0.0)
            .refill_per_second(0.0)
            .build()
            .unwrap();
        let service = layer()
            .budget(bucket)
            .build()
            .unwrap()
            .layer(support::client());
        let response = service
            .oneshot(get(&server.uri("/"), "down"))
            .await
            .unwrap();
        assert_eq!(response.status(), 503);

        let m = Readings::take(&snapshotter);
        let budget = "http_client_retry_budget_withdrawals_total";
        assert_eq!(m.counter(budget, &[("result", "granted")]), 1);
        assert_eq!(m.counter(budget, &[("result", "denied")]), 1);
        assert_eq!(m.counter("http_client_retry_attempts_total", &[]), 2);
        let requests = "http_client_retry_requests_total";
        assert_eq!(m.counter(requests, &[("reason", "budget_empty")]), 1);
        assert_eq!(m.series(requests).len(), 1, "{:?}", m.series(requests));
    });
}

#[test]
fn a_request_dropped_mid_sleep_refunds_its_token_and_counts_as_cancelled() {
    with_recorder(false, |snapshotter| async move {
        let server = server().await;
        let service = RetryLayer::builder()
            .backoff(Backoff::new(Jitter::None, 60_000 * MS, 60_000 * MS))
            .build()
            .unwrap()
            .layer(support::client());
        let call = service.oneshot(get(&server.uri("/"), "down"));
        // The first attempt fails at once; the retry's 60 s sleep is cut by the drop.
        assert!(tokio::time::timeout(200 * MS, call).await.is_err());

        let m = Readings::take(&snapshotter);
        assert_eq!(m.counter("http_client_retry_attempts_total", &[]), 1);
        let budget = "http_client_retry_budget_withdrawals_total";
        assert_eq!(m.counter(budget, &[("result", "granted")]), 1);
        assert_eq!(m.counter("http_client_retry_budget_refunds_total", &[]), 1);
        let requests = "http_client_retry_requests_total";
        assert_eq!(m.counter(requests, &[("reason", "cancelled")]), 1);
        // A sleep abandoned by dropping the future is not a realised delay.
        assert!(m.series("http_client_retry_delay_seconds").is_empty());
    });
}

#[test]
fn described_metrics_carry_their_unit_and_help_text() {
    with_recorder(false, |snapshotter| async move {
        describe_metrics();
        let server = server().await;
        let service = layer().build().unwrap().layer(support::client());
        let _ = service
            .oneshot(get(&server.uri("/"), "ok-after-1"))
            .await
            .unwrap();

        let m = Readings::take(&snapshotter);
        for name in [
            "http_client_retry_attempts_total",
            "http_client_retry_retries_total",
            "http_client_retry_requests_total",
        ] {
            assert_eq!(m.units[name], (Some(metrics::Unit::Count), true), "{name}");
        }
        assert_eq!(
            m.units["http_client_retry_delay_seconds"],
            (Some(metrics::Unit::Seconds), true)
        );
    });
}
