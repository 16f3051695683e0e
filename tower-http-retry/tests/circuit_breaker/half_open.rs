//! Half-open: bounded probes, probe slots held by response futures, recovery and re-opening.

use crate::scripted::*;
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready};
use tower_http_retry::circuit_breaker::CircuitState;

#[tokio::test(start_paused = true)]
async fn half_open_admits_a_bounded_number_of_probes() {
    let layer = breaker().half_open_probes(2).build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;

    let mut first = mocked.start();
    assert_pending!(first.poll());
    let mut second = mocked.start();
    assert_pending!(second.poll());
    let mut third = mocked.start();
    let open = refused(assert_ready!(third.poll()).map(|r| r.status().as_u16()));
    assert!(open.retry_after().is_zero(), "already half-open");
    assert_eq!(layer.stats().probes, 2);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_probe_frees_its_slot() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;

    let mut probe = mocked.start();
    assert_pending!(probe.poll());
    refused(mocked.round_trip(200));

    drop(probe);
    // The dropped probe's call still sits at the mock; nobody waits for its answer.
    assert!(mocked.handle.poll_request().is_ready());
    assert_eq!(
        mocked.round_trip(200).unwrap(),
        200,
        "a new probe went through"
    );
}

#[tokio::test(start_paused = true)]
async fn enough_successful_probes_close_the_circuit() {
    let layer = breaker().successes_to_close(2).build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;

    mocked.round_trip(200).unwrap();
    assert_eq!(layer.state(), CircuitState::HalfOpen);
    mocked.round_trip(200).unwrap();
    assert_eq!(layer.state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_closed_circuit_counts_failures_afresh() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;
    mocked.round_trip(200).unwrap();

    for _ in 0..2 {
        mocked.round_trip(503).unwrap();
    }
    assert_eq!(layer.state(), CircuitState::Closed, "two failures of three");
    mocked.round_trip(503).unwrap();
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
}

/// How long the circuit is open for, from now.
fn open_for(layer: &tower_http_retry::CircuitBreakerLayer) -> std::time::Duration {
    match layer.state() {
        CircuitState::Open { half_open_at } => half_open_at - Instant::now(),
        state => panic!("expected an open circuit, got {state:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_for_longer() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;

    let mut opened_for = Vec::new();
    for _ in 0..4 {
        mocked.round_trip(503).unwrap();
        let open = open_for(&layer);
        opened_for.push(open);
        advance(open).await;
    }
    assert_eq!(
        opened_for,
        [2 * SEC, 4 * SEC, 8 * SEC, 8 * SEC],
        "doubling, capped at 8 s"
    );
    assert_eq!(layer.stats().trips, 5);
}

#[tokio::test(start_paused = true)]
async fn the_open_duration_shrinks_back_after_a_window_closed() {
    let layer = breaker().window(10 * SEC).build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;
    mocked.round_trip(503).unwrap();
    advance(open_for(&layer)).await;
    mocked.round_trip(200).unwrap();
    assert_eq!(layer.state(), CircuitState::Closed);

    // Flapping: a trip a second after closing keeps the growth.
    advance(SEC).await;
    for _ in 0..3 {
        mocked.round_trip(503).unwrap();
    }
    let open = open_for(&layer);
    assert_eq!(open, 4 * SEC);
    advance(open).await;
    mocked.round_trip(200).unwrap();

    // Closed for a whole window: a new outage starts from the base again.
    advance(10 * SEC).await;
    for _ in 0..3 {
        mocked.round_trip(503).unwrap();
    }
    assert_eq!(open_for(&layer), SEC);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_probe_outcome_frees_the_slot_without_closing() {
    let layer = breaker().build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;

    assert_eq!(mocked.round_trip(404).unwrap(), 404);
    assert_eq!(layer.state(), CircuitState::HalfOpen);
    assert_eq!(
        mocked.round_trip(200).unwrap(),
        200,
        "the slot was free again"
    );
    assert_eq!(layer.state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_succeeds_after_another_reopened_the_circuit_is_ignored() {
    let layer = breaker().half_open_probes(2).build().unwrap();
    let mut mocked = Mocked::new(&layer);
    mocked.half_open().await;
    let mut failing = mocked.start();
    assert_pending!(failing.poll());
    let mut late = mocked.start();
    assert_pending!(late.poll());

    mocked.answer(503);
    assert!(assert_ready!(failing.poll()).is_ok());
    assert!(matches!(layer.state(), CircuitState::Open { .. }));
    mocked.answer(200);
    assert!(assert_ready!(late.poll()).is_ok());
    assert!(
        matches!(layer.state(), CircuitState::Open { .. }),
        "a success of the previous half-open phase must not close the circuit"
    );
}
