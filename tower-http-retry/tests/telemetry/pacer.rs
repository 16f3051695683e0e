//! The pacer's mode changes and queue depth, on tokio's paused clock against an in-process
//! endpoint (`tower::service_fn`) that asks for a pause once: its quota is used up until a
//! reset 1 s later (a plain `Retry-After` holds only the request it answers).

use super::{with_recorder, Readings};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::hint::HintPolicy;
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::{Backoff, Jitter, Pacing, RetryLayer, RetryReport, StopReason};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

type Req = http::Request<String>;
type Res = http::Response<String>;

fn get() -> Req {
    http::Request::get("http://paced.test/")
        .body(String::new())
        .unwrap()
}

/// The first call is told the quota is used up until 1 s later; every later one succeeds.
fn endpoint() -> impl Service<Req, Response = Res, Error = std::io::Error, Future: Send> + Clone {
    let calls = Arc::new(AtomicU32::new(0));
    service_fn(move |_: Req| {
        let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let mut response = http::Response::builder();
            if first {
                response = response
                    .status(429)
                    .header("x-ratelimit-remaining", "0")
                    .header("x-ratelimit-reset", "1");
            }
            Ok::<Res, std::io::Error>(response.body(String::new()).unwrap())
        }
    })
}

fn builder() -> RetryLayerBuilder {
    RetryLayer::builder()
        .backoff(Backoff::new(Jitter::None, 100 * MS, SEC))
        // The pause is the hint itself, 1 s, not spread.
        .hint_policy(HintPolicy::honored().max_delay(2 * SEC).jitter(0.0))
        .random_source(RandomSource::seeded(3))
        .pacing(Pacing::new())
}

fn layer() -> RetryLayer {
    builder().build().unwrap()
}

#[test]
fn a_pause_counts_its_mode_changes_and_the_queue_depth_goes_up_and_back_to_zero() {
    with_recorder(true, |snapshotter| async move {
        let layer = layer();
        let service = layer.layer(endpoint());

        let mut tasks = JoinSet::new();
        // The first request's 429 (quota used up) pauses the endpoint; it waits in the queue for
        // the retry.
        tasks.spawn(service.clone().oneshot(get()));
        tokio::time::sleep(10 * MS).await;
        // Two new requests find the endpoint paused: their first attempts wait too.
        for _ in 0..2 {
            tasks.spawn(service.clone().oneshot(get()));
        }
        tokio::time::sleep(500 * MS).await;
        let authority = "paced.test".parse().unwrap();
        assert_eq!(
            layer.pacing_stats(Some(&authority)).unwrap().mode,
            PacingMode::Paused
        );

        let during = Readings::take(&snapshotter);
        let depth = "http_client_retry_pacer_queue_depth";
        assert_eq!(during.gauge(depth), 3.0, "three requests wait in the queue");
        let modes = "http_client_retry_pacer_mode_changes_total";
        assert_eq!(during.counter(modes, &[("mode", "paused")]), 1);
        let paced = "http_client_retry_pacer_endpoints";
        assert_eq!(
            during.gauge_of(paced, &[("mode", "paused")]),
            1.0,
            "one endpoint paused"
        );
        assert_eq!(during.series(paced).len(), 1, "{:?}", during.series(paced));
        assert_eq!(during.series(modes).len(), 1, "{:?}", during.series(modes));

        let responses = tasks.join_all().await;
        for response in &responses {
            let response = response.as_ref().unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(RetryReport::of(response).stop, StopReason::Success);
        }

        let after = Readings::take(&snapshotter);
        // The recorder reset the gauge when it read 3; the three releases take 3 off again.
        assert_eq!(during.gauge(depth) + after.gauge(depth), 0.0);
        assert_eq!(after.counter(modes, &[("mode", "ramping")]), 1);
        assert_eq!(
            after.series(modes).len(),
            1,
            "the pause ended in a ramp, nothing else: {:?}",
            after.series(modes)
        );
        // One retry, the first request's, after its wait in the queue: the 1 s pause.
        let retries = "http_client_retry_retries_total";
        assert_eq!(after.counter(retries, &[("source", "paced")]), 1);
        assert_eq!(
            after.series(retries).len(),
            1,
            "{:?}",
            after.series(retries)
        );
        let waited = after.histogram("http_client_retry_delay_seconds", &[("source", "paced")]);
        assert_eq!(waited.len(), 1, "{waited:?}");
        assert_eq!(waited, [1.0]);
        // The new requests' waits came before their first attempt: not a retry's delay.
        assert_eq!(after.counter("http_client_retry_attempts_total", &[]), 3);
        assert_eq!(during.counter("http_client_retry_attempts_total", &[]), 1);

        // Out of the pause; forgotten with its pacer, the endpoint leaves the gauge.
        assert_eq!(after.gauge_of(paced, &[("mode", "paused")]), -1.0);
        drop((service, layer));
        let gone = Readings::take(&snapshotter);
        for mode in ["probing", "ramping", "paused"] {
            let net = [&during, &after, &gone]
                .iter()
                .map(|m| m.gauge_of(paced, &[("mode", mode)]))
                .sum::<f64>();
            assert_eq!(
                net,
                0.0,
                "{mode}: {:?} {:?}",
                after.series(paced),
                gone.series(paced)
            );
        }
    });
}

#[test]
fn a_request_dropped_from_the_queue_leaves_the_queue_depth() {
    with_recorder(true, |snapshotter| async move {
        let service = layer().layer(endpoint());
        let mut tasks = JoinSet::new();
        tasks.spawn(service.clone().oneshot(get()));
        tokio::time::sleep(10 * MS).await;
        // Waits in the queue behind the pause, then its caller gives up on it.
        let impatient = tokio::time::timeout(200 * MS, service.clone().oneshot(get()));
        assert!(
            impatient.await.is_err(),
            "the pause outlasts the caller's timeout"
        );

        let m = Readings::take(&snapshotter);
        let depth = "http_client_retry_pacer_queue_depth";
        assert_eq!(m.gauge(depth), 1.0, "two joined, the dropped one left");
        let requests = "http_client_retry_requests_total";
        assert_eq!(m.counter(requests, &[("reason", "cancelled")]), 1);

        let _ = tasks.join_all().await;
        // The reading above reset the gauge; the first request's release takes its 1 off.
        assert_eq!(Readings::take(&snapshotter).gauge(depth), -1.0);
    });
}

#[test]
fn a_labelled_layer_records_its_pacer_under_its_label() {
    with_recorder(true, |snapshotter| async move {
        let layer = builder().metrics_label("webhooks").build().unwrap();
        let service = layer.layer(endpoint());
        let mut tasks = JoinSet::new();
        tasks.spawn(service.clone().oneshot(get()));
        tokio::time::sleep(10 * MS).await;
        tasks.spawn(service.clone().oneshot(get()));
        tokio::time::sleep(500 * MS).await;

        let during = Readings::take(&snapshotter);
        let layer_label = ("layer", "webhooks");
        let modes = "http_client_retry_pacer_mode_changes_total";
        assert_eq!(during.counter(modes, &[layer_label, ("mode", "paused")]), 1);
        assert_eq!(during.series(modes).len(), 1, "{:?}", during.series(modes));
        let depth = "http_client_retry_pacer_queue_depth";
        assert_eq!(during.gauge_of(depth, &[layer_label]), 2.0);
        assert_eq!(during.gauge(depth), 0.0, "nothing unlabelled");
        let paced = "http_client_retry_pacer_endpoints";
        assert_eq!(
            during.gauge_of(paced, &[layer_label, ("mode", "paused")]),
            1.0
        );
        assert_eq!(during.series(paced).len(), 1, "{:?}", during.series(paced));
        let _ = tasks.join_all().await;
    });
}

#[test]
fn a_listed_authority_labels_its_endpoints_pacer_metrics_and_others_stay_unlabelled() {
    with_recorder(true, |snapshotter| async move {
        let layer = builder()
            .metrics_authorities(["Paced.Test"])
            .build()
            .unwrap();
        // Two endpoints pause: the listed one, and one that is not.
        let (listed, other) = (layer.layer(endpoint()), layer.layer(endpoint()));
        let unlisted = || {
            http::Request::get("http://other.test/")
                .body(String::new())
                .unwrap()
        };
        let mut tasks = JoinSet::new();
        tasks.spawn(listed.clone().oneshot(get()));
        tasks.spawn(other.clone().oneshot(unlisted()));
        tokio::time::sleep(500 * MS).await;

        let m = Readings::take(&snapshotter);
        let paced = "http_client_retry_pacer_endpoints";
        let authority = ("authority", "paced.test");
        assert_eq!(m.gauge_of(paced, &[authority, ("mode", "paused")]), 1.0);
        assert_eq!(m.gauge_of(paced, &[("mode", "paused")]), 1.0, "other.test");
        assert_eq!(m.series(paced).len(), 2, "{:?}", m.series(paced));
        let depth = "http_client_retry_pacer_queue_depth";
        assert_eq!(m.gauge_of(depth, &[authority]), 1.0);
        assert_eq!(m.gauge(depth), 1.0);
        // The layer's own metrics carry no authority.
        let attempts = "http_client_retry_attempts_total";
        assert_eq!(m.counter(attempts, &[]), 2);
        assert_eq!(m.series(attempts).len(), 1, "{:?}", m.series(attempts));
        let _ = tasks.join_all().await;
        let too_many = (0..65).map(|i| format!("host{i}.test"));
        assert!(RetryLayer::builder()
            .metrics_authorities(too_many)
            .build()
            .is_err());
        assert!(RetryLayer::builder()
            .metrics_authorities([""])
            .build()
            .is_err());
    });
}

#[test]
fn an_endpoint_that_recovered_reads_open_once_traffic_stops() {
    with_recorder(true, |snapshotter| async move {
        let layer = layer();
        let service = layer.layer(endpoint());
        // Paused by the first answer, then ramping once the pause is over: the last call leaves
        // it ramping, and nobody calls again.
        let response = service.clone().oneshot(get()).await.unwrap();
        assert_eq!(response.status(), 200);
        let authority = "paced.test".parse().unwrap();
        let paced = "http_client_retry_pacer_endpoints";
        let ramping = Readings::take(&snapshotter);
        assert_eq!(ramping.gauge_of(paced, &[("mode", "ramping")]), 1.0);

        tokio::time::sleep(10 * SEC).await;
        let idle = Readings::take(&snapshotter);
        let modes = "http_client_retry_pacer_mode_changes_total";
        assert_eq!(
            idle.counter(modes, &[("mode", "open")]),
            1,
            "{:?}",
            idle.series(modes)
        );
        assert_eq!(
            ramping.gauge_of(paced, &[("mode", "ramping")])
                + idle.gauge_of(paced, &[("mode", "ramping")]),
            0.0,
            "no longer counted as ramping"
        );
        assert_eq!(
            layer.pacing_stats(Some(&authority)).unwrap().mode,
            PacingMode::Open
        );
        drop((service, layer));
    });
}

#[test]
fn adaptive_concurrency_shows_a_listed_endpoints_limit_in_flight_and_no_load_latency() {
    with_recorder(true, |snapshotter| async move {
        let pacing = Pacing::builder()
            .adaptive_concurrency(tower_http_retry::pacing::AdaptiveConcurrency::new())
            .build()
            .unwrap();
        let layer = RetryLayer::builder()
            .pacing(pacing)
            .metrics_authorities(["paced.test"])
            .build()
            .unwrap();
        // 20 ms an answer; the other endpoint is not listed.
        let slow = service_fn(|_: Req| async {
            tokio::time::sleep(20 * MS).await;
            Ok::<Res, std::io::Error>(http::Response::new(String::new()))
        });
        let service = layer.layer(slow);
        for uri in ["http://paced.test/", "http://other.test/"] {
            let mut tasks = JoinSet::new();
            for _ in 0..30 {
                let request = http::Request::get(uri).body(String::new()).unwrap();
                tasks.spawn(service.clone().oneshot(request));
            }
            for answer in tasks.join_all().await {
                assert_eq!(answer.unwrap().status(), 200);
            }
        }
        let m = Readings::take(&snapshotter);
        let listed = [("authority", "paced.test")];
        let stats = layer
            .pacing_stats(Some(&"paced.test".parse().unwrap()))
            .unwrap();
        let limit = m.gauge_of("http_client_retry_concurrency_limit", &listed);
        assert_eq!(Some(limit as u32), stats.limit);
        assert_eq!(
            m.gauge_of("http_client_retry_concurrency_in_flight", &listed),
            0.0
        );
        let no_load = m.gauge_of("http_client_retry_concurrency_no_load_seconds", &listed);
        assert!((no_load - 0.020).abs() < 1e-6, "{no_load}");
        for name in [
            "http_client_retry_concurrency_limit",
            "http_client_retry_concurrency_no_load_seconds",
        ] {
            assert_eq!(
                m.series(name).len(),
                1,
                "the listed endpoint only: {:?}",
                m.series(name)
            );
        }
    });
}
