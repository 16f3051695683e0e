//! The backlog's move and resume, against an outbox that records them and holds a move until
//! the test lets it end.

use super::*;
use crate::health::EndpointHealth;
use std::convert::Infallible;
use tokio::sync::Notify;

const ENDPOINT: &str = "http://127.0.0.1:9/hook";

/// Moves `MOVED` deliveries when a move may end; each resume brings back what is moved, each
/// resume of one (recorded with its time) one of them.
#[derive(Clone, Default)]
struct HeldMoves {
    moved: Arc<Mutex<u64>>,
    resumes: Arc<Mutex<Vec<u64>>>,
    probes: Arc<Mutex<Vec<SystemTime>>>,
    move_started: Arc<Notify>,
    move_may_end: Arc<Notify>,
    moves_fail: bool,
}

const MOVED: u64 = 5;

impl Outbox for HeldMoves {
    type Error = std::io::Error;

    async fn store(&self, _: Delivery) -> Result<(), Self::Error> {
        Ok(())
    }

    async fn dead_letter(&self, _: DeadLetter) -> Result<(), Self::Error> {
        Ok(())
    }

    async fn defer_due(&self, _: &str, _: SystemTime, _: SystemTime) -> Result<u64, Self::Error> {
        self.move_started.notify_one();
        self.move_may_end.notified().await;
        if self.moves_fail {
            return Err(std::io::Error::other("the engine is down"));
        }
        *lock(&self.moved) = MOVED;
        Ok(MOVED)
    }

    async fn resume_deferred(&self, _: &str, _: SystemTime) -> Result<u64, Self::Error> {
        let resumed = std::mem::take(&mut *lock(&self.moved));
        lock(&self.resumes).push(resumed);
        Ok(resumed)
    }

    async fn resume_one(&self, _: &str, at: SystemTime) -> Result<u64, Self::Error> {
        lock(&self.probes).push(at);
        let mut moved = lock(&self.moved);
        let resumed = u64::from(*moved > 0);
        *moved -= resumed;
        Ok(resumed)
    }
}

type Answer =
    fn(http::Request<Bytes>) -> std::future::Ready<Result<http::Response<()>, Infallible>>;

/// The redelivery of `outbox`, its endpoint failing (health kept in the process).
fn failing(outbox: &HeldMoves) -> Redelivery<tower::util::ServiceFn<Answer>, HeldMoves, Bytes> {
    let answer: Answer = |_| std::future::ready(Ok(http::Response::new(())));
    let client = tower::service_fn(answer);
    let schedule = Schedule::standard_webhooks();
    let health = EndpointHealth::default();
    health.failed(ENDPOINT, SystemTime::now());
    Redelivery::with_health(client, outbox.clone(), schedule, health)
}

#[tokio::test]
async fn a_delivery_taken_while_the_backlog_moves_brings_it_back_after_the_move() {
    let outbox = HeldMoves::default();
    let redelivery = failing(&outbox);
    let moving = tokio::spawn({
        let redelivery = redelivery.clone();
        let pause_end = SystemTime::now() + Duration::from_secs(5);
        async move {
            redelivery
                .defer_backlog(ENDPOINT.to_owned(), pause_end)
                .await
        }
    });
    outbox.move_started.notified().await;
    // The endpoint takes a delivery while the engine moves its backlog: the resume comes first
    // and finds nothing; then the endpoint fails again, and no other delivery to it is due.
    redelivery.health().succeeded(ENDPOINT);
    redelivery.resume_backlog(ENDPOINT, SystemTime::now()).await;
    redelivery.health().failed(ENDPOINT, SystemTime::now());
    outbox.move_may_end.notify_one();
    moving.await.unwrap();
    assert_eq!(*lock(&outbox.resumes), [0, MOVED]);
    let stats = redelivery.stats();
    assert_eq!(
        (stats.deferred_in_bulk, stats.resumed_in_bulk),
        (MOVED, MOVED)
    );
}

/// The redelivery of `outbox` after one move of its failing endpoint's backlog, not held.
async fn moved_at_once(
    outbox: &HeldMoves,
) -> Redelivery<tower::util::ServiceFn<Answer>, HeldMoves, Bytes> {
    let redelivery = failing(outbox);
    outbox.move_may_end.notify_one();
    let pause_end = SystemTime::now() + Duration::from_secs(5);
    redelivery
        .defer_backlog(ENDPOINT.to_owned(), pause_end)
        .await;
    redelivery
}

#[tokio::test]
async fn a_move_while_the_endpoint_keeps_failing_stays_until_it_takes_a_delivery() {
    let outbox = HeldMoves::default();
    moved_at_once(&outbox).await;
    assert!(lock(&outbox.resumes).is_empty());
    assert_eq!(*lock(&outbox.moved), MOVED);
}

#[tokio::test]
async fn a_move_that_failed_resumes_nothing() {
    let outbox = HeldMoves {
        moves_fail: true,
        ..HeldMoves::default()
    };
    let redelivery = moved_at_once(&outbox).await;
    assert!(
        lock(&outbox.resumes).is_empty(),
        "no write to a failed engine"
    );
    assert_eq!(redelivery.stats().deferred_in_bulk, 0);
}

#[tokio::test]
async fn a_moved_backlog_gives_one_delivery_to_each_probe_and_no_more() {
    let outbox = HeldMoves::default();
    let redelivery = moved_at_once(&outbox).await;
    let now = SystemTime::now();
    let seconds = |n: u64| now + Duration::from_secs(n);
    redelivery.keep_probe_due(ENDPOINT, seconds(2), now).await;
    // Failed again before that probe: it has its delivery (a later time would wait for it).
    redelivery.keep_probe_due(ENDPOINT, seconds(2), now).await;
    redelivery.keep_probe_due(ENDPOINT, seconds(4), now).await;
    // That probe went and failed: the next one gets a delivery.
    redelivery
        .keep_probe_due(ENDPOINT, seconds(6), seconds(3))
        .await;
    // The backlog falls due before this one anyway.
    redelivery
        .keep_probe_due(ENDPOINT, seconds(60), seconds(7))
        .await;
    assert_eq!(*lock(&outbox.probes), [seconds(2), seconds(6)]);
    assert_eq!(redelivery.stats().resumed_for_probes, 2);
    assert_eq!(*lock(&outbox.moved), MOVED - 2);
}

#[tokio::test]
async fn no_probe_takes_a_delivery_where_nothing_was_moved_or_the_endpoint_is_back() {
    let outbox = HeldMoves::default();
    let redelivery = failing(&outbox);
    let now = SystemTime::now();
    redelivery
        .keep_probe_due(ENDPOINT, now + Duration::from_secs(2), now)
        .await;
    let moved = moved_at_once(&outbox).await;
    moved.health().succeeded(ENDPOINT);
    moved
        .keep_probe_due(ENDPOINT, now + Duration::from_secs(2), now)
        .await;
    assert!(lock(&outbox.probes).is_empty(), "no write");
}
