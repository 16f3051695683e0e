//! A fleet in one process: layers that share one [`InProcessStore`] (each its own handle, a
//! peer of the others) pace an endpoint as one. The same wiring with a Redis store is in
//! `tower-http-retry-redis/tests/fleet/`.

use super::{burst, endpoint, Log, MS, SEC};
use std::time::Duration;
use tokio::task::JoinSet;
use tower::{Layer, ServiceExt};
use tower_http_retry::pacing::store::{InProcessStore, PacingStore};
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{Backoff, Jitter, Pacing, RetryLayer};

fn layer(store: &InProcessStore, seed: u64) -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(20)
        .backoff(Backoff::new(Jitter::Full, 100 * MS, 2 * SEC))
        .random_source(RandomSource::seeded(seed))
        .pacing(Pacing::builder().store(store.peer()).build().unwrap())
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_fleet_probes_a_dead_endpoint_as_one_stream_and_delivers_everything() {
    let store = InProcessStore::new();
    let log = Log::default();
    let layers: Vec<RetryLayer> = (0..4).map(|i| layer(&store, 10 + i)).collect();
    let mut tasks = JoinSet::new();
    for layer in &layers {
        let service = layer.layer(endpoint(5 * SEC, log.clone()));
        tasks.spawn(burst(service, 100));
    }
    let results: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
    assert!(results.iter().all(|(status, _)| *status == 200));
    let arrivals = log.0.lock().unwrap().clone();
    // The 400 first attempts, then while down one probe stream for the fleet (about 2/s): four
    // processes alone would send four.
    let while_down = arrivals
        .iter()
        .filter(|(at, _)| *at >= 100 * MS && *at < 5 * SEC)
        .count();
    assert!(
        while_down <= 15,
        "{while_down} retries reached a dead endpoint"
    );
    let last = arrivals.iter().map(|(at, _)| *at).max().unwrap();
    assert!(last < 8 * SEC, "the last delivery came at {last:?}");
}

#[tokio::test(start_paused = true)]
async fn an_outage_one_layer_saw_holds_the_first_attempts_of_another() {
    let store = InProcessStore::new();
    let (one, other) = (layer(&store, 1), layer(&store, 2));
    let log = Log::default();
    let first = tokio::spawn(burst(one.layer(endpoint(60 * SEC, log.clone())), 20));
    tokio::time::sleep(SEC).await;
    let authority = "hooks.test".parse().unwrap();
    assert_eq!(other.pacing_stats(Some(&authority)), None, "never met");
    let before = log.0.lock().unwrap().len();
    let service = other.layer(endpoint(60 * SEC, log.clone()));
    let late = tokio::spawn(burst(service, 10));
    tokio::time::sleep(100 * MS).await;
    let sent = log.0.lock().unwrap().len() - before;
    assert!(
        sent <= 1,
        "{sent} first attempts sent into an outage the fleet knew of"
    );
    let stats = other.pacing_stats(Some(&authority)).unwrap();
    assert_eq!(stats.mode, PacingMode::Probing);
    assert!(stats.waiting >= 9, "{stats:?}");
    late.abort();
    first.abort();
}

#[tokio::test(start_paused = true)]
async fn an_open_endpoint_costs_the_fleet_no_store_call() {
    let store = InProcessStore::new();
    let layers: Vec<RetryLayer> = (0..3).map(|i| layer(&store, i)).collect();
    let mut tasks = JoinSet::new();
    for layer in &layers {
        let service = layer.layer(endpoint(Duration::ZERO, Log::default()));
        tasks.spawn(async move {
            for id in 0..100 {
                let response = service.clone().oneshot(super::post(id)).await.unwrap();
                assert_eq!(response.status(), 200);
            }
        });
    }
    tasks.join_all().await;
    assert_eq!(store.stats().calls, 0);
}

#[tokio::test(start_paused = true)]
async fn a_fleet_whose_store_is_a_round_trip_away_delivers_everything_once_the_endpoint_is_back() {
    // Slots granted a burst window back reach the process a round trip later: they are still
    // its to use (they were once dropped as too late on arrival, and asked for again forever).
    let stores = herd::fleet_store::DelayedStore::fleet(10, MS);
    let log = Log::default();
    let mut tasks = JoinSet::new();
    for (i, store) in stores.iter().enumerate() {
        let layer = RetryLayer::builder()
            .max_attempts(20)
            .backoff(Backoff::new(Jitter::Full, 100 * MS, 2 * SEC))
            .random_source(RandomSource::seeded(i as u64))
            .pacing(Pacing::builder().store(store.clone()).build().unwrap())
            .build()
            .unwrap();
        tasks.spawn(burst(layer.layer(endpoint(2 * SEC, log.clone())), 1000));
    }
    let results = tokio::time::timeout(60 * SEC, tasks.join_all())
        .await
        .expect("every delivery made within a minute");
    let results: Vec<_> = results.into_iter().flatten().collect();
    assert_eq!(results.len(), 10_000);
    assert!(results.iter().all(|(status, _)| *status == 200));
}
