//! A fleet in one process: layers that share one [`InProcessStore`] (each its own handle, a
//! peer of the others) pace an endpoint as one. The same wiring with a Redis store is in
//! `tower-http-retry-redis/tests/fleet/`.

use super::{answering, burst, endpoint, Log, MS, SEC};
use std::time::Duration;
use tokio::task::JoinSet;
use tower::{Layer, ServiceExt};
use tower_http_retry::pacing::store::{InProcessStore, PacingStore};
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{Backoff, Jitter, Pacing, RetryLayer, RetryReport};

fn layer(store: &InProcessStore, seed: u64) -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(20)
        .backoff(Backoff::new(Jitter::Full, 100 * MS, 2 * SEC))
        .random_source(RandomSource::seeded(seed))
        .pacing(Pacing::builder().store(store.peer()).build().unwrap())
        .build()
        .unwrap()
}

/// `processes` layers on `store` (seeded from `seed` on), each sending `n` deliveries to an
/// endpoint of its own from `endpoint`.
fn fleet_bursts<S>(
    store: &InProcessStore,
    processes: u64,
    seed: u64,
    endpoint: impl Fn() -> S,
    n: usize,
) -> JoinSet<Vec<(u16, RetryReport)>>
where
    S: tower::Service<super::Req, Response = super::Res, Error = std::io::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let mut tasks = JoinSet::new();
    for i in 0..processes {
        tasks.spawn(burst(layer(store, seed + i).layer(endpoint()), n));
    }
    tasks
}

#[tokio::test(start_paused = true)]
async fn a_fleet_probes_a_dead_endpoint_as_one_stream_and_delivers_everything() {
    let store = InProcessStore::new();
    let log = Log::default();
    let tasks = fleet_bursts(&store, 4, 10, || endpoint(5 * SEC, log.clone()), 100);
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

/// An endpoint that refuses the first attempts at once, then swallows requests: from 100 ms
/// until `up_at`, a request hangs for 8 s before it is refused; from `up_at` on, 200 after
/// 10 ms.
fn swallowing(
    up_at: Duration,
    log: Log,
) -> impl tower::Service<super::Req, Response = super::Res, Error = std::io::Error, Future: Send> + Clone
{
    let hangs = move |arrived: Duration| arrived >= 100 * MS && arrived < up_at;
    answering(
        log,
        move |arrived| if hangs(arrived) { 8 * SEC } else { 10 * MS },
        move |arrived, _| if arrived < up_at { 503 } else { 200 },
    )
}

#[tokio::test(start_paused = true)]
async fn a_fleet_whose_probes_hang_asks_the_store_at_the_probes_pace() {
    let store = InProcessStore::new();
    let log = Log::default();
    let tasks = fleet_bursts(&store, 10, 20, || swallowing(12 * SEC, log.clone()), 10);
    // Both probe leases are held by hanging probes from about 1 s on: every process is told
    // they are, and asks again. At a ramp interval each, ten processes asked 100 times a
    // second; at the probes' pace, 20.
    tokio::time::sleep(2 * SEC).await;
    let before = store.stats().calls;
    tokio::time::sleep(6 * SEC).await;
    let per_second = (store.stats().calls - before) as f64 / 6.0;
    assert!(
        per_second <= 25.0,
        "{per_second:.0} store calls a second while the probes hung"
    );
    let results = tokio::time::timeout(60 * SEC, tasks.join_all())
        .await
        .expect("every delivery made within a minute");
    let results: Vec<_> = results.into_iter().flatten().collect();
    assert_eq!(results.len(), 100);
    assert!(results.iter().all(|(status, _)| *status == 200));
    // The fleet hears of the ramp a probe started within a probe interval, and delivers the
    // rest as it grows: 1.0 s after the first success (0.7 s when every process asked each
    // ramp interval).
    let log = log.0.lock().unwrap().clone();
    let first = log
        .iter()
        .filter(|(_, status)| *status == 200)
        .map(|(at, _)| *at)
        .min();
    let last = log.iter().map(|(at, _)| *at).max().unwrap();
    assert!(
        last - first.unwrap() < 1500 * MS,
        "delivered from {first:?} to {last:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_process_whose_hanging_probe_ends_takes_the_next_one_at_once() {
    let store = InProcessStore::new();
    let log = Log::default();
    let layer = layer(&store, 7);
    let burst = tokio::spawn(burst(layer.layer(swallowing(60 * SEC, log.clone())), 10));
    tokio::time::sleep(20 * SEC).await;
    burst.abort();
    // The probes (answered 8 s after they went): two out, both hanging; the next when the
    // first ends, not when the process's wait (up to a probe interval) has passed.
    let probes: Vec<Duration> = log.0.lock().unwrap().iter().map(|(at, _)| *at).collect();
    let probes: Vec<Duration> = probes.into_iter().filter(|at| *at >= 100 * MS).collect();
    assert!(probes.len() >= 3, "{probes:?}");
    let after = (probes[2] - 8 * SEC) - probes[0];
    assert!(
        after < 10 * MS,
        "{after:?} after the first probe ended: {probes:?}"
    );
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
