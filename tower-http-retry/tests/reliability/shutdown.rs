//! Shutdown and dropped futures: a thousand requests sleeping in backoff return at once on
//! shutdown, with their last outcome and their tokens back; dropping a response future at any
//! point leaks no token, no call and no task. Paused time, an in-process endpoint.

use http::header::HeaderName;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready_ok, task};
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::retry::{RandomSource, TokenBucket};
use tower_http_retry::{AbortSignal, Backoff, Jitter, RetryLayer, RetryReport, StopReason};

type Req = http::Request<String>;
type Res = http::Response<String>;

const REQUESTS: usize = 1000;
const CAPACITY: f64 = 2000.0;
const BACKOFF: Duration = Duration::from_millis(100);

fn attempt_header() -> HeaderName {
    HeaderName::from_static("x-attempt")
}

/// A budget without deposits or refill: its level moves only by withdrawals and refunds.
fn bucket() -> Arc<TokenBucket> {
    let bucket = TokenBucket::builder()
        .capacity(CAPACITY)
        .deposit_per_success(0.0)
        .refill_per_second(0.0)
        .build()
        .unwrap();
    Arc::new(bucket)
}

/// Counts the endpoint's calls and how many of its futures are alive.
#[derive(Clone, Default)]
struct Endpoint {
    calls: Arc<AtomicU32>,
    live: Arc<AtomicUsize>,
}

/// Alive while an endpoint future is.
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Endpoint {
    /// A service answering 503 at once to attempts before `hang_from`, and never to the others.
    fn service(
        &self,
        hang_from: u32,
    ) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone + Send {
        let (calls, live) = (Arc::clone(&self.calls), Arc::clone(&self.live));
        service_fn(move |req: Req| {
            calls.fetch_add(1, Ordering::SeqCst);
            live.fetch_add(1, Ordering::SeqCst);
            let alive = Alive(Arc::clone(&live));
            let attempt: u32 = req.headers()[attempt_header()]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            async move {
                let _alive = alive;
                if attempt >= hang_from {
                    std::future::pending::<()>().await;
                }
                let response = http::Response::builder().status(503).body(String::new());
                Ok(response.unwrap())
            }
        })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

fn layer(budget: &Arc<TokenBucket>, signal: &AbortSignal) -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::None, BACKOFF, 10 * BACKOFF))
        .budget(Arc::clone(budget))
        .abort_signal(signal.clone())
        .attempt_header(attempt_header())
        .random_source(RandomSource::seeded(3))
        .build()
        .unwrap()
}

fn get() -> Req {
    http::Request::get("http://example.test/")
        .body(String::new())
        .unwrap()
}

/// Calls `service` `n` times and polls each response future once, on mock tasks that record
/// wake-ups; every future must be pending after that poll.
fn start<S>(service: S, n: usize) -> Vec<task::Spawn<S::Future>>
where
    S: Service<Req, Response = Res, Error = Infallible>,
{
    let mut service = tower_test::mock::Spawn::new(service);
    (0..n)
        .map(|_| {
            assert_ready_ok!(service.poll_ready());
            let mut future = task::spawn(service.call(get()));
            assert_pending!(future.poll());
            future
        })
        .collect()
}

fn no_tasks_left() {
    assert_eq!(Handle::current().metrics().num_alive_tasks(), 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_returns_a_thousand_sleepers_in_one_poll_with_their_last_outcome() {
    let (budget, signal, endpoint) = (bucket(), AbortSignal::new(), Endpoint::default());
    let layer = layer(&budget, &signal);
    let mut sleepers = start(layer.layer(endpoint.service(u32::MAX)), REQUESTS);
    assert_eq!(endpoint.calls(), REQUESTS as u32);
    assert_eq!(
        budget.available(),
        CAPACITY - REQUESTS as f64,
        "one token each"
    );
    let start = Instant::now();

    signal.shutdown();
    for future in &mut sleepers {
        assert!(future.is_woken());
        let response = assert_ready_ok!(future.poll(), "returned at the first poll");
        assert_eq!(response.status(), 503, "the last outcome");
        let report = RetryReport::of(&response);
        assert_eq!((report.attempts, report.stop), (1, StopReason::Aborted));
        assert_eq!(report.slept, Duration::ZERO, "no time passed");
    }
    assert_eq!(Instant::now(), start);
    assert_eq!(endpoint.calls(), REQUESTS as u32, "no retry was sent");
    assert_eq!(budget.available(), CAPACITY, "every token refunded");
    let stats = layer.stats();
    assert_eq!(stats.budget_refunded, REQUESTS as u64);
    assert_eq!(stats.stopped(StopReason::Aborted), REQUESTS as u64);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_spawned_sleepers_without_the_clock_moving() {
    let (budget, signal, endpoint) = (bucket(), AbortSignal::new(), Endpoint::default());
    let service = layer(&budget, &signal).layer(endpoint.service(u32::MAX));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        tasks.spawn(service.clone().oneshot(get()));
    }
    // Each task sends its first attempt and goes to sleep in the same poll. The clock cannot
    // move while this task keeps yielding: the runtime is never idle.
    while endpoint.calls() < REQUESTS as u32 {
        tokio::task::yield_now().await;
    }
    let start = Instant::now();

    signal.shutdown();
    let mut returned = 0;
    while let Some(joined) = tasks.join_next().await {
        let response = joined.unwrap().unwrap();
        assert_eq!(RetryReport::of(&response).stop, StopReason::Aborted);
        returned += 1;
    }
    assert_eq!(returned, REQUESTS);
    // Had any task waited out its sleep, the paused clock would have jumped to its deadline.
    assert_eq!(Instant::now(), start);
    assert_eq!(budget.available(), CAPACITY);
    no_tasks_left();
}

#[tokio::test(start_paused = true)]
async fn dropping_futures_mid_sleep_refunds_every_token() {
    let (budget, signal, endpoint) = (bucket(), AbortSignal::new(), Endpoint::default());
    let layer = layer(&budget, &signal);
    let sleepers = start(layer.layer(endpoint.service(u32::MAX)), REQUESTS);
    assert_eq!(budget.available(), CAPACITY - REQUESTS as f64);

    drop(sleepers);
    assert_eq!(budget.available(), CAPACITY);
    let stats = layer.stats();
    assert_eq!(stats.budget_refunded, REQUESTS as u64);
    assert_eq!(stats.retries, 0);
    assert_eq!(
        stats.delays.total(),
        0,
        "an abandoned sleep is not a realised delay"
    );
    assert_eq!(endpoint.live(), 0);
    no_tasks_left();
}

#[tokio::test(start_paused = true)]
async fn dropping_first_attempts_mid_call_takes_no_token_and_releases_the_calls() {
    let (budget, signal, endpoint) = (bucket(), AbortSignal::new(), Endpoint::default());
    let layer = layer(&budget, &signal);
    let calling = start(layer.layer(endpoint.service(1)), REQUESTS);
    assert_eq!(endpoint.live(), REQUESTS);

    drop(calling);
    assert_eq!(endpoint.live(), 0, "every call was dropped with its future");
    assert_eq!(budget.available(), CAPACITY);
    assert_eq!(layer.stats().budget_refunded, 0);
    no_tasks_left();
}

#[tokio::test(start_paused = true)]
async fn dropping_retries_mid_call_keeps_their_spent_tokens_spent() {
    let (budget, signal, endpoint) = (bucket(), AbortSignal::new(), Endpoint::default());
    let layer = layer(&budget, &signal);
    let mut retrying = start(layer.layer(endpoint.service(2)), REQUESTS);
    tokio::time::advance(BACKOFF).await;
    // Unconstrained: past tokio's cooperative budget (128 polls) a due sleep reports pending.
    tokio::task::unconstrained(async {
        for future in &mut retrying {
            assert_pending!(future.poll(), "the retry is in flight and never answered");
        }
    })
    .await;
    assert_eq!(endpoint.calls(), 2 * REQUESTS as u32);

    drop(retrying);
    assert_eq!(endpoint.live(), 0);
    let stats = layer.stats();
    // Withdrawn minus refunded equals the retries sent: each retry's token paid for a real send.
    assert_eq!(stats.retries, REQUESTS as u64);
    assert_eq!(stats.budget_refunded, 0);
    assert_eq!(CAPACITY - budget.available(), stats.retries as f64);
    no_tasks_left();
}

#[tokio::test(start_paused = true)]
async fn dropping_a_future_waiting_for_readiness_refunds_its_token() {
    let (budget, signal, endpoint) = (bucket(), AbortSignal::new(), Endpoint::default());
    let layer = layer(&budget, &signal);
    // One permit: a request that hangs on its first attempt holds it.
    let limited = tower::limit::ConcurrencyLimitLayer::new(1).layer(endpoint.service(2));
    let mut service = tower_test::mock::Spawn::new(layer.layer(limited));
    assert_ready_ok!(service.poll_ready());
    let mut waiter = task::spawn(service.call(get()));
    assert_pending!(waiter.poll(), "503 answered, sleeping");
    assert_ready_ok!(service.poll_ready());
    let mut holder = task::spawn(service.call(get()));
    assert_pending!(holder.poll(), "503 answered, sleeping too");
    tokio::time::advance(BACKOFF).await;
    assert_pending!(
        holder.poll(),
        "the holder's retry is sent and hangs, holding the permit"
    );
    assert_pending!(
        waiter.poll(),
        "the waiter's sleep is over; it waits for the permit"
    );
    assert_eq!(budget.available(), CAPACITY - 2.0);

    drop(waiter);
    assert_eq!(
        budget.available(),
        CAPACITY - 1.0,
        "the waiter's token is back"
    );
    assert_eq!(layer.stats().budget_refunded, 1);
    drop(holder);
    assert_eq!(endpoint.live(), 0);
    no_tasks_left();
}
