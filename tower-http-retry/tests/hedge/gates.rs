//! Who else may refuse a hedge: the retry layer's pacer (none while the endpoint is probed or
//! paused) and the circuit breaker (none while it is open), and the idempotency rules (no hedge
//! of a POST without an idempotency key).

use super::{answer, get, scripted};
use http::uri::Authority;
use http::{Request, Response};
use std::time::Duration;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_http_retry::circuit_breaker::CircuitState;
use tower_http_retry::hedge::HedgeLayer;
use tower_http_retry::pacing::{Pacing, PacingMode};
use tower_http_retry::{CircuitBreakerLayer, RetryLayer};

fn hedge() -> tower_http_retry::hedge::HedgeLayerBuilder {
    HedgeLayer::builder().delay(Duration::from_millis(10))
}

/// Answers `status` (with `retry_after`, if any) at once: a failing endpoint.
async fn fail_once_through<L>(layer: L, status: u16, retry_after: Option<&'static str>)
where
    L: tower::Layer<
        tower::util::BoxCloneSyncService<Request<String>, Response<String>, std::io::Error>,
    >,
    L::Service: tower::Service<Request<String>, Response = Response<String>>,
    <L::Service as tower::Service<Request<String>>>::Error: std::fmt::Debug,
{
    let failing = tower::util::BoxCloneSyncService::new(service_fn(move |_| async move {
        let mut response = Response::new(String::new());
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        if let Some(after) = retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, after.parse().unwrap());
        }
        Ok::<_, std::io::Error>(response)
    }));
    let response = layer.layer(failing).oneshot(get("/down")).await.unwrap();
    assert_eq!(response.status(), status);
}

fn authority() -> Authority {
    Authority::from_static("api.internal")
}

/// Sends a GET whose first copy stalls through `hedge`: the copies sent.
async fn stalled_request(hedge: HedgeLayer) -> u32 {
    stalled(hedge, get("/slow")).await
}

/// Sends `request`, whose first copy stalls, through `hedge`: the copies sent.
async fn stalled(hedge: HedgeLayer, request: Request<String>) -> u32 {
    let (service, calls) = scripted(|n| {
        if n == 0 {
            answer(200, 1_000)
        } else {
            answer(200, 5)
        }
    });
    let client = ServiceBuilder::new().layer(hedge).service(service);
    client.oneshot(request).await.unwrap();
    calls.sent()
}

#[tokio::test(start_paused = true)]
async fn no_hedge_while_the_pacer_probes_the_endpoint() {
    let retry = RetryLayer::builder()
        .max_attempts(1)
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .build()
        .unwrap();
    // The control: while the endpoint is open, the stalled request is hedged.
    let open = hedge().retry_layer(&retry).build().unwrap();
    assert_eq!(stalled_request(open.clone()).await, 2);

    fail_once_through(retry.clone(), 503, None).await;
    let mode = retry.pacing_stats(Some(&authority())).map(|s| s.mode);
    assert_eq!(mode, Some(PacingMode::Probing));
    let probing = hedge().retry_layer(&retry).build().unwrap();
    assert_eq!(stalled_request(probing.clone()).await, 1);
    let stats = probing.stats();
    assert_eq!((stats.hedges, stats.refused_by_gate), (0, 1), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn no_hedge_while_the_endpoint_asked_callers_to_wait() {
    let retry = RetryLayer::builder()
        .max_attempts(1)
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .build()
        .unwrap();
    // Down, then told to wait: the pacer pauses the endpoint for 30 s.
    fail_once_through(retry.clone(), 503, None).await;
    fail_once_through(retry.clone(), 503, Some("30")).await;
    let mode = retry.pacing_stats(Some(&authority())).map(|s| s.mode);
    assert_eq!(mode, Some(PacingMode::Paused));
    let paused = hedge().retry_layer(&retry).build().unwrap();
    assert_eq!(stalled_request(paused.clone()).await, 1);
    assert_eq!(paused.stats().refused_by_gate, 1);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_while_the_breaker_is_open() {
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(2)
        .build()
        .unwrap();
    let gated = hedge().gate(breaker.clone()).build().unwrap();
    assert_eq!(stalled_request(gated.clone()).await, 2, "closed: hedged");

    fail_once_through(breaker.clone(), 503, None).await;
    fail_once_through(breaker.clone(), 503, None).await;
    assert!(matches!(breaker.state(), CircuitState::Open { .. }));
    assert_eq!(stalled_request(gated.clone()).await, 1, "open: not hedged");
    let stats = gated.stats();
    assert_eq!((stats.hedges, stats.refused_by_gate), (1, 1), "{stats:?}");
}

fn post(key: Option<&str>) -> Request<String> {
    let mut request = Request::post("http://api.internal/orders");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body("{}".to_owned()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_post_is_hedged_only_with_an_idempotency_key() {
    let hedge = hedge().build().unwrap();
    let sent = stalled(hedge.clone(), post(None)).await;
    assert_eq!(sent, 1, "an unkeyed POST is sent once");
    assert_eq!(hedge.stats().armed, 0);
    let sent = stalled(hedge.clone(), post(Some("order-17"))).await;
    assert_eq!(sent, 2, "a keyed POST may be hedged");
}
