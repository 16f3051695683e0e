//! What a deadline costs the recovery of a webhook sender with a redelivery queue: 500 keyed
//! POSTs arriving at 100/s to a receiver down for the first 12 s that then takes 100/s, through
//! `bulk()`, with no deadline, and with a 5 s deadline (with `fail_unsent()` and without) and every
//! delivery that did not get through sent again at its `resend_after`, as a durable queue does.

use super::{MS, SEC};
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// 503 until `DOWN_FOR`, then a token bucket: a request past the capacity is a 503 too. Counts
/// the requests that reach it while it is down.
fn receiver(
    start: Instant,
    hits_while_down: Arc<AtomicUsize>,
) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
    let bucket = Arc::new(Mutex::new((BURST, DOWN_FOR)));
    service_fn(move |_: Req| {
        let bucket = Arc::clone(&bucket);
        let hits_while_down = Arc::clone(&hits_while_down);
        async move {
            tokio::time::sleep(10 * MS).await;
            let at = start.elapsed();
            let status = if at < DOWN_FOR {
                hits_while_down.fetch_add(1, Ordering::Relaxed);
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

/// What a run of the scenario measured.
struct Run {
    /// After the receiver's return, when 99 % were delivered.
    p99: Duration,
    /// Sends by the redelivery queue after the first.
    resends: usize,
    hits_while_down: usize,
}

async fn run(deadline: Option<Duration>, fail_unsent: bool, seed: u64) -> Run {
    let start = Instant::now();
    let hits = Arc::new(AtomicUsize::new(0));
    let receiver = receiver(start, Arc::clone(&hits));
    let mut builder = RetryLayerBuilder::bulk().random_source(RandomSource::seeded(seed));
    if let Some(deadline) = deadline {
        builder = builder.deadline(deadline);
    }
    let (p99, resends) = if fail_unsent {
        deliver(
            builder.fail_unsent().build().unwrap().layer(receiver),
            start,
        )
        .await
    } else {
        deliver(builder.build().unwrap().layer(receiver), start).await
    };
    Run {
        p99,
        resends,
        hits_while_down: hits.load(Ordering::Relaxed),
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_with_redelivery_costs_the_recovery_at_most_a_second() {
    for seed in 1..=3 {
        let plain = run(None, false, seed).await;
        let unsent = run(Some(5 * SEC), true, seed).await;
        let sent_anyway = run(Some(5 * SEC), false, seed).await;
        println!(
            "seed {seed}: 99 % delivered after the return / resends / hits while down: no deadline \
             {:?} / {} / {}; deadline + fail_unsent {:?} / {} / {}; deadline alone {:?} / {} / {}",
            plain.p99,
            plain.resends,
            plain.hits_while_down,
            unsent.p99,
            unsent.resends,
            unsent.hits_while_down,
            sent_anyway.p99,
            sent_anyway.resends,
            sent_anyway.hits_while_down,
        );
        assert_eq!(
            plain.resends, 0,
            "without a deadline the layer delivers every one"
        );
        assert!(
            unsent.resends >= 100,
            "the deadline handed deliveries back: {}",
            unsent.resends
        );
        assert!(
            unsent.p99 <= plain.p99 + SEC,
            "seed {seed}: {:?} with the deadline against {:?} without",
            unsent.p99,
            plain.p99
        );
        // Without `fail_unsent` the redeliveries' first attempts go whatever the pacer says, in
        // bursts: the recovery costs no more (their losses cut the rate at an interval's close,
        // and settle an interval later, not at once, as the losses of what the rate released do).
        assert!(
            sent_anyway.p99 <= plain.p99 + SEC,
            "seed {seed}: {:?} with the deadline alone against {:?} without",
            sent_anyway.p99,
            plain.p99
        );
        // With `fail_unsent`, no more reaches the dead receiver than without a deadline; without
        // it, every redelivery's first attempt goes into the known outage.
        assert!(
            unsent.hits_while_down <= plain.hits_while_down,
            "seed {seed}: {} hits while down with fail_unsent, {} without a deadline",
            unsent.hits_while_down,
            plain.hits_while_down
        );
        assert!(
            unsent.hits_while_down < sent_anyway.hits_while_down,
            "seed {seed}: {} hits while down with fail_unsent, {} without",
            unsent.hits_while_down,
            sent_anyway.hits_while_down
        );
    }
}
