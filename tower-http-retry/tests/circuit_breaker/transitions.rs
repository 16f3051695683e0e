//! Closed to open (by count, by ratio), open to half-open, and the open duration.

use crate::scripted::*;
use std::collections::BTreeSet;
use tokio::time::{advance, Instant};
use tower::Layer;
use tower_http_retry::circuit_breaker::CircuitState;
use tower_http_retry::retry::RandomSource;

#[tokio::test(start_paused = true)]
async fn trips_after_consecutive_failures() {
    let endpoint = Endpoint::answering(503);
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 2).await;
    assert_eq!(layer.state(), CircuitState::Closed);

    calls(&mut service, 1).await;
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
    assert_eq!(layer.stats().trips, 1);
}

#[tokio::test(start_paused = true)]
async fn open_circuit_fails_fast_without_calling_the_endpoint() {
    let endpoint = Endpoint::answering(503);
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 3).await;

    let open = refused(call(&mut service).await);
    assert_eq!(open.half_open_at(), Instant::now() + SEC);
    assert_eq!(open.retry_after(), SEC);
    assert_eq!(endpoint.calls(), 3);
    assert_eq!(layer.stats().rejected, 1);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_shown_after_the_open_period_says_the_next_call_may_probe() {
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(Endpoint::answering(503));
    calls(&mut service, 3).await;
    let open = refused(call(&mut service).await);
    assert_eq!(open.to_string(), "circuit open: next probe in 1s");

    advance(SEC).await;
    assert_eq!(
        open.to_string(),
        "circuit open: its open period is over, the next call may probe"
    );
    assert!(open.retry_after().is_zero());
}

#[tokio::test(start_paused = true)]
async fn a_success_resets_the_run_of_failures() {
    let endpoint = Endpoint::answering(503);
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(endpoint.clone());
    for _ in 0..5 {
        calls(&mut service, 2).await;
        endpoint.answer(200);
        calls(&mut service, 1).await;
        endpoint.answer(503);
    }
    assert_eq!(layer.state(), CircuitState::Closed);
    assert_eq!(endpoint.calls(), 15);
}

fn by_ratio(minimum_calls: u32) -> tower_http_retry::CircuitBreakerLayer {
    breaker()
        .without_consecutive_failures()
        .failure_ratio(0.5)
        .minimum_calls(minimum_calls)
        .window(10 * SEC)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn trips_when_the_failure_ratio_is_reached() {
    let endpoint = Endpoint::answering(200);
    let layer = by_ratio(10);
    let mut service = layer.layer(endpoint.clone());
    // Alternating success and failure: never 2 failures in a row, but half of the calls fail.
    for _ in 0..4 {
        endpoint.answer(200);
        calls(&mut service, 1).await;
        endpoint.answer(503);
        calls(&mut service, 1).await;
    }
    endpoint.answer(200);
    calls(&mut service, 1).await;
    assert_eq!(layer.state(), CircuitState::Closed, "4 of 9 failed");

    endpoint.answer(503);
    calls(&mut service, 1).await;
    assert!(
        matches!(layer.state(), CircuitState::Open { .. }),
        "5 of 10 failed"
    );
}

#[tokio::test(start_paused = true)]
async fn the_ratio_waits_for_the_minimum_number_of_calls() {
    let endpoint = Endpoint::answering(503);
    let layer = by_ratio(10);
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 9).await;
    assert_eq!(
        layer.state(),
        CircuitState::Closed,
        "9 of 9 failed, below 10 calls"
    );

    calls(&mut service, 1).await;
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn failures_older_than_the_window_are_forgotten() {
    let endpoint = Endpoint::answering(503);
    let layer = by_ratio(5);
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 4).await;

    advance(10 * SEC).await;
    calls(&mut service, 1).await;
    assert_eq!(
        layer.state(),
        CircuitState::Closed,
        "the 4 old failures left the window: 1 call in it"
    );
    calls(&mut service, 3).await;
    assert_eq!(layer.state(), CircuitState::Closed);
    calls(&mut service, 1).await;
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn failures_inside_the_window_still_count() {
    let endpoint = Endpoint::answering(503);
    let layer = by_ratio(5);
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 4).await;

    advance(8 * SEC).await;
    calls(&mut service, 1).await;
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
}

#[tokio::test(start_paused = true)]
async fn open_circuit_half_opens_after_its_duration() {
    let endpoint = Endpoint::answering(503);
    let layer = breaker().build().unwrap();
    let mut service = layer.layer(endpoint.clone());
    calls(&mut service, 3).await;

    advance(SEC - MS).await;
    refused(call(&mut service).await);
    assert_eq!(endpoint.calls(), 3);

    advance(MS).await;
    assert_eq!(layer.state(), CircuitState::HalfOpen);
    endpoint.answer(200);
    assert_eq!(
        call(&mut service).await.unwrap(),
        200,
        "the probe went through"
    );
    assert_eq!(endpoint.calls(), 4);
    assert_eq!(layer.stats().probes, 1);
}

/// Trips a breaker made by `build`, now, and returns how long it stays open.
async fn open_for(layer: &tower_http_retry::CircuitBreakerLayer) -> std::time::Duration {
    let mut service = layer.layer(Endpoint::answering(503));
    calls(&mut service, 3).await;
    match layer.state() {
        CircuitState::Open { half_open_at } => half_open_at - Instant::now(),
        state => panic!("expected an open circuit, got {state:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn open_duration_is_jittered_within_bounds() {
    let random = RandomSource::seeded(42);
    let mut durations = BTreeSet::new();
    for _ in 0..50 {
        let layer = breaker()
            .open_duration(10 * SEC)
            .max_open_duration(10 * SEC)
            .open_jitter(0.5)
            .random_source(random.clone())
            .build()
            .unwrap();
        let open = open_for(&layer).await;
        assert!(open >= 10 * SEC && open <= 15 * SEC, "{open:?}");
        durations.insert(open);
    }
    assert_eq!(durations.len(), 50, "every instance draws its own duration");
    let spread = *durations.last().unwrap() - *durations.first().unwrap();
    assert!(
        spread > 4 * SEC,
        "50 draws cover most of the 5 s range: {spread:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn instances_seeded_from_entropy_open_for_different_durations() {
    let build = || {
        breaker()
            .open_jitter(0.5)
            .random_source(RandomSource::from_entropy())
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    assert_ne!(open_for(&a).await, open_for(&b).await);
}

#[tokio::test(start_paused = true)]
async fn an_open_state_says_how_long_until_a_probe_as_a_duration() {
    let layer = breaker().consecutive_failures(1).build().unwrap();
    assert_eq!(layer.state().retry_after(), None);
    calls(&mut layer.layer(Endpoint::answering(503)), 1).await;
    let wait = layer.state().retry_after().expect("open");
    assert!(wait > std::time::Duration::ZERO);
    advance(wait).await;
    assert_eq!(
        layer.state().retry_after(),
        None,
        "half-open once the time is up"
    );
}
