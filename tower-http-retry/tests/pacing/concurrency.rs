//! Adaptive concurrency through the retry layer: an endpoint of 4 workers that slows down as
//! its queue grows, never failing; the layer's limit bounds what is in flight to it, and the
//! requests over the limit wait in the endpoint's queue, then go.

use super::*;
use std::sync::atomic::{AtomicU32, Ordering};
use tower_http_retry::pacing::AdaptiveConcurrency;

/// 4 workers of 10 ms each; counts the requests it holds and the most it ever held.
#[derive(Clone)]
struct Workers {
    held: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
    workers: Arc<tokio::sync::Semaphore>,
}

impl Workers {
    fn new() -> Self {
        Self {
            held: Arc::default(),
            most: Arc::default(),
            workers: Arc::new(tokio::sync::Semaphore::new(4)),
        }
    }

    fn service(
        &self,
    ) -> impl Service<Req, Response = Res, Error = std::io::Error, Future: Send> + Clone {
        let this = self.clone();
        service_fn(move |_: Req| {
            let this = this.clone();
            async move {
                let held = this.held.fetch_add(1, Ordering::SeqCst) + 1;
                this.most.fetch_max(held, Ordering::SeqCst);
                let worker = this.workers.acquire().await.expect("open");
                tokio::time::sleep(10 * MS).await;
                drop(worker);
                this.held.fetch_sub(1, Ordering::SeqCst);
                Ok(http::Response::new(String::new()))
            }
        })
    }
}

fn limited() -> RetryLayer {
    RetryLayer::builder()
        .pacing(
            Pacing::builder()
                .adaptive_concurrency(AdaptiveConcurrency::new().initial(20).max(50))
                .build()
                .expect("valid pacing"),
        )
        .build()
        .expect("a valid layer")
}

fn request() -> Req {
    http::Request::get("http://slow.test/")
        .body(String::new())
        .expect("a valid request")
}

#[tokio::test(start_paused = true)]
async fn the_limit_bounds_what_is_in_flight_and_the_rest_waits_its_turn() {
    let workers = Workers::new();
    let layer = limited();
    let client = layer.layer(workers.service());
    let endpoint = "slow.test".parse().expect("an authority");
    let mut requests = JoinSet::new();
    let mut highest = 0;
    // 800 requests at 1,000 a second: twice what 4 workers of 10 ms serve.
    for _ in 0..800 {
        let client = client.clone();
        requests.spawn(async move { client.oneshot(request()).await.map(|r| r.status()) });
        tokio::time::sleep(MS).await;
        let stats = layer.pacing_stats(Some(&endpoint)).expect("an endpoint");
        let (limit, in_flight) = (
            stats.limit.expect("a limit"),
            stats.in_flight.expect("counted"),
        );
        // A limit that comes down leaves what is in flight to finish: never over the highest.
        highest = highest.max(limit);
        assert!(
            in_flight <= highest,
            "{in_flight} in flight over a limit of {highest}"
        );
    }
    let mut ok = 0;
    while let Some(answer) = requests.join_next().await {
        ok += u32::from(answer.expect("no panic").expect("answered").is_success());
    }
    assert_eq!(ok, 800, "every request waited its turn and was answered");
    let stats = layer.pacing_stats(Some(&endpoint)).expect("an endpoint");
    assert_eq!(stats.in_flight, Some(0), "every place in flight given back");
    assert_eq!(stats.no_load, Some(10 * MS), "the no-load latency learned");
    let limit = stats.limit.expect("a limit");
    assert!(
        (4..=10).contains(&limit),
        "the limit came down near 4 workers: {limit}"
    );
    let most = workers.most.load(Ordering::SeqCst);
    assert!(
        most <= highest,
        "the endpoint held {most}, over the highest limit {highest}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_request_gives_its_place_back() {
    let workers = Workers::new();
    let layer = limited();
    let client = layer.layer(workers.service());
    let endpoint = "slow.test".parse().expect("an authority");
    // Cut while in flight (an outer timeout), then while waiting in the queue.
    for _ in 0..30 {
        let call = client.clone().oneshot(request());
        assert!(tokio::time::timeout(MS, call).await.is_err());
    }
    let stats = layer.pacing_stats(Some(&endpoint)).expect("an endpoint");
    assert_eq!(stats.in_flight, Some(0));
    assert_eq!(stats.waiting, 0);
    assert_eq!(stats.no_load, None, "a cancel says nothing of the latency");
    let answer = client.oneshot(request()).await.expect("answered");
    assert!(answer.status().is_success());
}

#[test]
fn an_invalid_limit_fails_at_build_time() {
    let error = Pacing::builder()
        .adaptive_concurrency(AdaptiveConcurrency::new().min(0))
        .build()
        .expect_err("a zero floor");
    assert!(
        error.to_string().contains("adaptive_concurrency.min"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn no_hedge_goes_while_the_limit_is_reached() {
    use tower_http_retry::hedge::HedgeGate;
    let workers = Workers::new();
    let layer = limited();
    let client = layer.layer(workers.service());
    let endpoint = "slow.test".parse().expect("an authority");
    assert!(layer.allows(Some(&endpoint)), "an endpoint not met yet");
    let mut requests = JoinSet::new();
    for _ in 0..40 {
        let client = client.clone();
        requests.spawn(async move { client.oneshot(request()).await.map(|r| r.status()) });
    }
    tokio::time::sleep(MS).await;
    let stats = layer.pacing_stats(Some(&endpoint)).expect("an endpoint");
    assert!(stats.waiting > 0, "{stats:?}");
    assert!(
        !layer.allows(Some(&endpoint)),
        "the limit is reached: no hedge"
    );
    while let Some(answer) = requests.join_next().await {
        assert!(answer.expect("no panic").expect("answered").is_success());
    }
    assert!(layer.allows(Some(&endpoint)), "room again");
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_turned_away_and_sent_all_the_same_is_counted_in_flight() {
    // No `fail_unsent`: what the queue turns away (a wait over 1 ms) is sent anyway.
    let layer = RetryLayer::builder()
        .pacing(
            Pacing::builder()
                .adaptive_concurrency(AdaptiveConcurrency::new().initial(4).max(4))
                .max_queue_wait(MS)
                .build()
                .expect("valid pacing"),
        )
        .build()
        .expect("a valid layer");
    let workers = Workers::new();
    let client = layer.layer(workers.service());
    let endpoint = "slow.test".parse().expect("an authority");
    // The no-load latency learned first, one request at a time.
    for _ in 0..10 {
        client.clone().oneshot(request()).await.expect("answered");
        tokio::time::sleep(20 * MS).await;
    }
    let mut requests = JoinSet::new();
    for _ in 0..12 {
        let client = client.clone();
        requests.spawn(async move { client.oneshot(request()).await.map(|r| r.status()) });
    }
    tokio::time::sleep(MS).await;
    let stats = layer.pacing_stats(Some(&endpoint)).expect("an endpoint");
    let held = workers.held.load(Ordering::SeqCst);
    assert_eq!(
        stats.in_flight,
        Some(held),
        "everything at the endpoint is counted"
    );
    assert!(held > 4, "sent over the limit of 4: {held}");
    while let Some(answer) = requests.join_next().await {
        assert!(answer.expect("no panic").expect("answered").is_success());
    }
    let stats = layer.pacing_stats(Some(&endpoint)).expect("an endpoint");
    assert_eq!(stats.in_flight, Some(0));
}
