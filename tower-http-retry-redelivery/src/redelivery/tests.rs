//! The backlog's move and resume, against an outbox that records them and holds a move until
//! the test lets it end.

use super::*;
use crate::health::EndpointHealth;
use std::convert::Infallible;
use tokio::sync::Notify;

const ENDPOINT: &str = "http://127.0.0.1:9/hook";

/// Moves `MOVED` deliveries when a move may end; each resume brings back what is moved.
#[derive(Clone, Default)]
struct HeldMoves {
    moved: Arc<Mutex<u64>>,
    resumes: Arc<Mutex<Vec<u64>>>,
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
