//! What counts as a failure: the retry layer's classifier decides.

use crate::scripted::*;
use http::StatusCode;
use std::time::Duration;
use tower::{service_fn, Layer, ServiceBuilder};
use tower_http_retry::circuit_breaker::CircuitState;
use tower_http_retry::{HttpClassifier, Outcome};

#[tokio::test(start_paused = true)]
async fn permanent_4xx_does_not_trip() {
    let endpoint = Endpoint::answering(404);
    let layer = breaker()
        .failure_ratio(0.5)
        .minimum_calls(5)
        .build()
        .unwrap();
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 20).await;
    assert_eq!(layer.state(), CircuitState::Closed);
    assert_eq!(endpoint.calls(), 20);
}

#[tokio::test(start_paused = true)]
async fn server_errors_and_refused_connections_trip() {
    let endpoint = Endpoint::answering(502);
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 1).await;
    endpoint.answer(REFUSED);
    calls(&mut service, 1).await;
    endpoint.answer(500);
    calls(&mut service, 1).await;
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn attempt_timeouts_trip() {
    let hanging = service_fn(|_: Req| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, std::io::Error>(status(200))
    });
    let layer = breaker().build().unwrap();
    let mut service = ServiceBuilder::new()
        .layer(layer.clone())
        .timeout(100 * MS)
        .service(hanging);
    for _ in 0..3 {
        let error = call(&mut service).await.unwrap_err();
        assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
    }
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn unknown_errors_trip_like_transient_ones_unless_configured_permanent() {
    // What is retried is what trips the breaker: an unknown error is transient by default.
    let broken = service_fn(|_: Req| async { Err::<Res, _>(std::io::Error::other("no idea")) });
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(broken);
    for _ in 0..10 {
        call(&mut service).await.unwrap_err();
    }
    assert!(matches!(layer.state(), CircuitState::Open { .. }));

    let strict = HttpClassifier::new().unknown_errors(Outcome::Permanent);
    let layer = breaker().classifier(strict).build().unwrap();
    let mut service = layer.layer(broken);
    for _ in 0..10 {
        call(&mut service).await.unwrap_err();
    }
    assert_eq!(layer.state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_custom_classifier_decides_what_trips() {
    let endpoint = Endpoint::answering(409);
    let classifier = HttpClassifier::new().status(StatusCode::CONFLICT, Outcome::Transient);
    let layer = breaker().classifier(classifier).build().unwrap();
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 3).await;
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn circuit_open_is_permanent_even_when_unknown_errors_are_transient() {
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(Endpoint::answering(503));
    calls(&mut service, 3).await;
    let error = call(&mut service).await.unwrap_err();

    let lenient = HttpClassifier::new().unknown_errors(Outcome::Transient);
    assert_eq!(lenient.classify_error_chain(&*error), Outcome::Permanent);
    let other: tower::BoxError = "something else".into();
    assert_eq!(lenient.classify_error_chain(&*other), Outcome::Transient);
}

/// The default table, and every `io::ErrorKind::Other` error is the server rotating its
/// connection without proof that the request was not processed (as a `GOAWAY` through hyper).
#[derive(Clone, Debug)]
struct Rotations;

impl tower_http_retry::classify::Classify<Res, std::io::Error> for Rotations {
    fn classify_response(&self, response: &Res) -> Outcome {
        HttpClassifier::new().classify_status(response.status())
    }
    fn classify_error(&self, error: &std::io::Error) -> Outcome {
        HttpClassifier::new().classify_error_chain(error)
    }
    fn signals(
        &self,
        result: &Result<Res, std::io::Error>,
        ask: &tower_http_retry::classify::Ask<'_>,
    ) -> tower_http_retry::classify::Signals {
        let mut signals = tower_http_retry::classify::default_signals(result, ask);
        signals.rotation =
            matches!(result, Err(error) if error.kind() == std::io::ErrorKind::Other);
        signals
    }
}

#[tokio::test(start_paused = true)]
async fn a_rotation_without_proof_neither_trips_nor_closes() {
    // Transient (a rotation is no proof) yet the endpoint is up: no failure.
    let rotating = service_fn(|_: Req| async { Err::<Res, _>(std::io::Error::other("GOAWAY")) });
    let layer = breaker().classifier(Rotations).build().unwrap();
    let mut service = layer.layer(rotating);
    for _ in 0..10 {
        call(&mut service).await.unwrap_err();
    }
    assert_eq!(layer.state(), CircuitState::Closed);
    // A half-open probe that meets one is neither verdict: the breaker stays half-open.
    let failing = service_fn(|_: Req| async {
        Err::<Res, _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    });
    let layer = breaker().classifier(Rotations).build().unwrap();
    let mut service = layer.layer(failing);
    for _ in 0..10 {
        let _ = call(&mut service).await;
    }
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let mut probing = layer.layer(rotating);
    call(&mut probing).await.unwrap_err();
    assert_eq!(layer.state(), CircuitState::HalfOpen);
}
