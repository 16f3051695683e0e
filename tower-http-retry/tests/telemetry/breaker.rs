//! The circuit breaker's metrics, on tokio's paused clock against an in-process endpoint that
//! fails its first two calls: circuits by state, transitions and rejections.

use super::{with_recorder, Readings};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::CircuitBreakerLayer;

const SEC: Duration = Duration::from_secs(1);

type Req = http::Request<String>;
type Res = http::Response<String>;

fn get() -> Req {
    http::Request::get("http://breaker.test/")
        .body(String::new())
        .unwrap()
}

/// 503 to its first two calls, 200 after.
fn endpoint() -> impl Service<Req, Response = Res, Error = std::io::Error, Future: Send> + Clone {
    let calls = Arc::new(AtomicU32::new(0));
    service_fn(move |_: Req| {
        let status = if calls.fetch_add(1, Ordering::SeqCst) < 2 {
            503
        } else {
            200
        };
        async move {
            Ok::<Res, std::io::Error>(
                http::Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap(),
            )
        }
    })
}

const CIRCUITS: &str = "http_client_retry_circuits";
const TRANSITIONS: &str = "http_client_retry_circuit_transitions_total";
const REJECTIONS: &str = "http_client_retry_circuit_rejections_total";

#[test]
fn a_trip_a_rejection_and_a_recovery_move_the_circuit_through_its_states() {
    with_recorder(true, |snapshotter| async move {
        let layer = CircuitBreakerLayer::builder()
            .consecutive_failures(2)
            .open_duration(10 * SEC)
            .open_jitter(0.0)
            .build()
            .unwrap();
        let service = layer.layer(endpoint());
        let made = Readings::take(&snapshotter);
        assert_eq!(made.gauge_of(CIRCUITS, &[("state", "closed")]), 1.0);

        for _ in 0..2 {
            let response = service.clone().oneshot(get()).await.unwrap();
            assert_eq!(response.status(), 503);
        }
        let refused = service.clone().oneshot(get()).await;
        assert!(refused.is_err(), "the open circuit turns it away");
        let tripped = Readings::take(&snapshotter);
        assert_eq!(tripped.counter(TRANSITIONS, &[("state", "open")]), 1);
        assert_eq!(tripped.gauge_of(CIRCUITS, &[("state", "closed")]), -1.0);
        assert_eq!(tripped.gauge_of(CIRCUITS, &[("state", "open")]), 1.0);
        assert_eq!(tripped.counter(REJECTIONS, &[]), 1);
        assert_eq!(
            tripped.series(TRANSITIONS).len(),
            1,
            "{:?}",
            tripped.series(TRANSITIONS)
        );

        tokio::time::sleep(10 * SEC).await;
        let probe = service.clone().oneshot(get()).await.unwrap();
        assert_eq!(probe.status(), 200);
        let recovered = Readings::take(&snapshotter);
        assert_eq!(recovered.counter(TRANSITIONS, &[("state", "half_open")]), 1);
        assert_eq!(recovered.counter(TRANSITIONS, &[("state", "closed")]), 1);
        assert_eq!(recovered.gauge_of(CIRCUITS, &[("state", "open")]), -1.0);
        assert_eq!(recovered.gauge_of(CIRCUITS, &[("state", "half_open")]), 0.0);
        assert_eq!(recovered.gauge_of(CIRCUITS, &[("state", "closed")]), 1.0);
        assert_eq!(recovered.counter(REJECTIONS, &[]), 0);

        drop((service, layer));
        let dropped = Readings::take(&snapshotter);
        assert_eq!(dropped.gauge_of(CIRCUITS, &[("state", "closed")]), -1.0);
    });
}

#[test]
fn a_labelled_breaker_records_under_its_label() {
    with_recorder(true, |snapshotter| async move {
        let layer = CircuitBreakerLayer::builder()
            .consecutive_failures(2)
            .open_duration(10 * SEC)
            .metrics_label("api")
            .build()
            .unwrap();
        let service = layer.layer(endpoint());
        for _ in 0..3 {
            let _ = service.clone().oneshot(get()).await;
        }
        let m = Readings::take(&snapshotter);
        let api = ("layer", "api");
        assert_eq!(m.counter(TRANSITIONS, &[api, ("state", "open")]), 1);
        assert_eq!(m.gauge_of(CIRCUITS, &[api, ("state", "open")]), 1.0);
        assert_eq!(m.counter(REJECTIONS, &[api]), 1);
        assert_eq!(
            m.series(TRANSITIONS).len(),
            1,
            "{:?}",
            m.series(TRANSITIONS)
        );
        assert_eq!(
            m.gauge_of(CIRCUITS, &[("state", "open")]),
            0.0,
            "nothing unlabelled"
        );
        assert!(CircuitBreakerLayer::builder()
            .metrics_label("")
            .build()
            .is_err());
    });
}

#[test]
fn a_breaker_per_authority_names_the_listed_authority_whose_circuit_opened() {
    with_recorder(true, |snapshotter| async move {
        let layer = CircuitBreakerLayer::builder()
            .consecutive_failures(2)
            .open_duration(10 * SEC)
            .metrics_authorities(["BREAKER.test"])
            .build_per_authority(16)
            .unwrap();
        let service = layer.layer(endpoint());
        for _ in 0..3 {
            let _ = service.clone().oneshot(get()).await;
        }
        let m = Readings::take(&snapshotter);
        let upstream = ("authority", "breaker.test");
        assert_eq!(m.gauge_of(CIRCUITS, &[upstream, ("state", "open")]), 1.0);
        assert_eq!(m.counter(TRANSITIONS, &[upstream, ("state", "open")]), 1);
        assert_eq!(m.counter(REJECTIONS, &[upstream]), 1);
        assert_eq!(
            m.gauge_of(CIRCUITS, &[("state", "open")]),
            0.0,
            "nothing without the label"
        );
        let too_many = (0..65).map(|n| format!("h{n}.test"));
        assert!(CircuitBreakerLayer::builder()
            .metrics_authorities(too_many)
            .build_per_authority(16)
            .is_err());
    });
}
