//! What a deadline costs the recovery of a webhook sender with a redelivery queue: 500 keyed
//! POSTs arriving at 100/s to a receiver down for the first 12 s that then takes 100/s, through
//! `bulk()`, with no deadline, and with a 5 s deadline, `fail_unsent()` and every delivery that
//! did not get through sent again at its `resend_after`, as a durable queue does.

use super::{MS, SEC};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_http_retry::report::Unsent;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::RetryReport;

const DELIVERIES: usize = 500;
const ARRIVAL: Duration = Duration::from_millis(10);
const DOWN_FOR: Duration = Duration::from_secs(12);
/// What the receiver takes once it is back: 100 a second, 10 at once.
const RATE: f64 = 100.0;
const BURST: f64 = 10.0;
/// A durable queue's resend cap, and its wait when a report gives none.
const MAX_SENDS: usize = 50;
const NO_HINT: Duration = Duration::from_secs(30);

type Req = http::Request<String>;
type Res = http::Response<String>;

/// 503 until `DOWN_FOR`, then a token bucket: a request past the capacity is a 503 too.
fn receiver(
    start: Instant,
) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
    let bucket = Arc::new(Mutex::new((BURST, DOWN_FOR)));
    service_fn(move |_: Req| {
        let bucket = Arc::clone(&bucket);
        async move {
            tokio::time::sleep(10 * MS).await;
            let at = start.elapsed();
            let status = if at < DOWN_FOR {
                503
            } else {
                let mut bucket = bucket.lock().unwrap();
                let (tokens, last) = &mut *bucket;
                *tokens = (*tokens + (at - *last).as_secs_f64() * RATE).min(BURST);
                *last = at;
                if *tokens >= 1.0 {
                    *tokens -= 1.0;
                    200
                } else {
                    503
                }
            };
            Ok(http::Response::builder()
                .status(status)
                .body(String::new())
                .unwrap())
        }
    })
}

fn post(id: usize) -> Req {
    http::Request::post("http://hooks.test/")
        .header("idempotency-key", id.to_string())
        .body(String::new())
        .unwrap()
}

/// When the resend of an answer the layer gave up on is due, if it is to be sent again.
fn resend_after(result: &Result<Res, BoxError>) -> Option<Duration> {
    match result {
        Ok(response) if response.status().is_success() => None,
        Ok(response) => {
            let report = RetryReport::of(response);
            (!report.stop.is_final()).then(|| report.resend_after.unwrap_or(NO_HINT))
        }
        Err(error) => match error.downcast_ref::<Unsent>() {
            Some(unsent) => Some(unsent.resend_after().unwrap_or(NO_HINT)),
            None => panic!("an error that is not a hand-back: {error}"),
        },
    }
}

/// Sends the deliveries through `service`, each again at its `resend_after` until delivered;
/// returns the time after the receiver's return by which 99 % were delivered, and the resends.
async fn deliver<S>(service: S, start: Instant) -> (Duration, usize)
where
    S: Service<Req, Response = Res, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let mut deliveries = JoinSet::new();
    for id in 0..DELIVERIES {
        let service = service.clone();
        deliveries.spawn(async move {
            tokio::time::sleep_until(start + ARRIVAL * id as u32).await;
            for sends in 0..MAX_SENDS {
                let result = service.clone().oneshot(post(id)).await;
                match resend_after(&result) {
                    None => {
                        assert_eq!(result.unwrap().status(), 200, "delivery {id}");
                        return (start.elapsed(), sends);
                    }
                    Some(wait) => tokio::time::sleep(wait).await,
                }
            }
            panic!("delivery {id} not delivered in {MAX_SENDS} sends");
        });
    }
    let (mut delivered, resends): (Vec<_>, Vec<_>) =
        deliveries.join_all().await.into_iter().unzip();
    delivered.sort_unstable();
    let p99 = delivered[DELIVERIES * 99 / 100 - 1].saturating_sub(DOWN_FOR);
    (p99, resends.iter().sum())
}

async fn p99_after_recovery(deadline: Option<Duration>, seed: u64) -> (Duration, usize) {
    let start = Instant::now();
    let builder = RetryLayerBuilder::bulk().random_source(RandomSource::seeded(seed));
    let receiver = receiver(start);
    match deadline {
        None => deliver(builder.build().unwrap().layer(receiver), start).await,
        Some(deadline) => {
            let layer = builder.deadline(deadline).fail_unsent().build().unwrap();
            deliver(layer.layer(receiver), start).await
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_with_redelivery_costs_the_recovery_at_most_a_second() {
    for seed in 1..=3 {
        let (without, none) = p99_after_recovery(None, seed).await;
        let (with, resends) = p99_after_recovery(Some(5 * SEC), seed).await;
        println!(
            "seed {seed}: 99 % delivered {without:?} after the return without a deadline, \
             {with:?} with one ({resends} resends by the queue)"
        );
        assert_eq!(none, 0, "without a deadline the layer delivers every one");
        assert!(
            resends >= 100,
            "the deadline handed deliveries back: {resends}"
        );
        assert!(
            with <= without + SEC,
            "seed {seed}: {with:?} with the deadline against {without:?} without"
        );
    }
}
