//! The pacer's rules for real servers and callers, each against an
//! in-process endpoint on tokio's paused clock that logs every arrival:
//! * a `Retry-After` on an endpoint that still takes other requests holds the request it
//!   answers, not the endpoint; a used-up quota, or a hint when nothing gets through, holds
//!   every request;
//! * a second outage while the pacer ramps is probed like the first;
//! * a new request to an endpoint known to be down that would wait past its deadline is handed
//!   back unsent, with a resend time spread over the pacer's predicted releases.

use super::post;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_http_retry::classify::HttpClassifier;
use tower_http_retry::pacing::{Pacing, PacingMode};
use tower_http_retry::report::{RetryReport, StopReason, Unsent};
use tower_http_retry::retry::FailUnsent;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::{Backoff, Jitter, RetryLayer};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

type Req = http::Request<String>;
type Res = http::Response<String>;

/// One arrival at the endpoint: when (from the start), which request, and the status answered.
#[derive(Clone, Copy, Debug)]
struct Hit {
    at: Duration,
    id: usize,
    status: u16,
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Hit>>>);

impl Log {
    fn hits(&self) -> Vec<Hit> {
        self.0.lock().unwrap().clone()
    }
}

/// An endpoint whose answer to the `n`-th arrival (0-based), at `at` from the start, is
/// `answer(n, at)`: a status and headers. Every answer takes 10 ms.
fn endpoint(
    log: Log,
    answer: impl Fn(usize, Duration) -> (u16, Vec<(&'static str, &'static str)>) + Send + Sync + 'static,
) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
    let start = Instant::now();
    let answer = Arc::new(answer);
    service_fn(move |request: Req| {
        let at = start.elapsed();
        let id: usize = request
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(usize::MAX);
        let (status, headers) = {
            let mut hits = log.0.lock().unwrap();
            let (status, headers) = answer(hits.len(), at);
            hits.push(Hit { at, id, status });
            (status, headers)
        };
        async move {
            tokio::time::sleep(10 * MS).await;
            let mut response = http::Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            Ok::<_, BoxError>(response.body(String::new()).unwrap())
        }
    })
}

fn builder() -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(20)
        .backoff(Backoff::new(Jitter::Full, 100 * MS, 2 * SEC))
        .random_source(RandomSource::seeded(11))
        .without_budget()
        .pacing(Pacing::new())
}

/// Sends a keyed POST every `every`, `n` of them, and waits for all: each one's result.
async fn stream<S>(service: S, n: usize, every: Duration) -> Vec<Result<Res, BoxError>>
where
    S: Service<Req, Response = Res, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
{
    let mut tasks = JoinSet::new();
    for id in 0..n {
        let service = service.clone();
        tasks.spawn(async move { (id, service.oneshot(post(id)).await) });
        tokio::time::sleep(every).await;
    }
    let mut results: Vec<_> = tasks.join_all().await;
    results.sort_by_key(|(id, _)| *id);
    results.into_iter().map(|(_, result)| result).collect()
}

/// Lets spawned tasks run without moving the paused clock.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// The longest stretch of `from..until` without an arrival.
fn longest_silence(hits: &[Hit], from: Duration, until: Duration) -> Duration {
    let mut times: Vec<Duration> = hits
        .iter()
        .map(|h| h.at)
        .filter(|at| (from..until).contains(at))
        .collect();
    times.push(from);
    times.push(until);
    times.sort();
    times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// A keyed POST every 10 ms for 2 s to an endpoint that answers the 21st arrival 429 with
/// `headers` and every other one 200: every arrival, and the 429's.
async fn stream_with_one_429(headers: Vec<(&'static str, &'static str)>) -> (Vec<Hit>, Hit) {
    let log = Log::default();
    let service = builder()
        .build()
        .unwrap()
        .layer(endpoint(log.clone(), move |n, _| match n {
            20 => (429, headers.clone()),
            _ => (200, vec![]),
        }));
    let results = stream(service, 200, 10 * MS).await;
    assert!(results.iter().all(|r| r.as_ref().unwrap().status() == 200));
    let hits = log.hits();
    let limited = *hits.iter().find(|h| h.status == 429).unwrap();
    (hits, limited)
}

/// One request in a steady stream of successes is answered 429 with `Retry-After: 1`: RFC 9110
/// makes that how long *this* request ought to wait. The others keep arriving, and the one
/// answered waits its second before it is sent again.
#[tokio::test(start_paused = true)]
async fn a_retry_after_while_the_endpoint_takes_other_requests_holds_only_that_request() {
    let (hits, limited) = stream_with_one_429(vec![("retry-after", "1")]).await;
    let silence = longest_silence(&hits, limited.at, limited.at + SEC);
    assert!(silence < 100 * MS, "the endpoint was held {silence:?}");
    let again = hits
        .iter()
        .find(|h| h.id == limited.id && h.at > limited.at)
        .unwrap();
    assert!(
        again.at >= limited.at + SEC,
        "sent again {:?} after its Retry-After: 1",
        again.at - limited.at
    );
}

/// The same stream, but the 429 says the quota is used up: every request to the endpoint waits
/// for its reset.
#[tokio::test(start_paused = true)]
async fn a_used_up_quota_holds_every_request_to_the_endpoint_until_its_reset() {
    let quota = vec![("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1")];
    let (hits, limited) = stream_with_one_429(quota).await;
    let silence = longest_silence(&hits, limited.at, limited.at + 2 * SEC);
    assert!(
        silence >= 900 * MS,
        "the endpoint was held only {silence:?} for a 1-s reset"
    );
}

/// Every request is answered 503 with `Retry-After: 1`: nothing gets through, so the whole
/// endpoint pauses (a halt, which is right here), instead of each request probing it on its own.
#[tokio::test(start_paused = true)]
async fn a_retry_after_when_nothing_gets_through_pauses_the_whole_endpoint() {
    let log = Log::default();
    let layer = builder().build().unwrap();
    let service = layer.layer(endpoint(log.clone(), |_, at| {
        if at < 3 * SEC {
            (503, vec![("retry-after", "1")])
        } else {
            (200, vec![])
        }
    }));
    let burst = tokio::spawn(stream(service, 50, MS));
    tokio::time::sleep(200 * MS).await;
    let stats = layer
        .pacing_stats(Some(&"hooks.test".parse().unwrap()))
        .unwrap();
    assert_eq!(stats.mode, PacingMode::Paused, "{stats:?}");
    let results = burst.await.unwrap();
    assert!(results.iter().all(|r| r.as_ref().unwrap().status() == 200));
    let while_down = log.hits().iter().filter(|h| h.at < 3 * SEC).count();
    // The 50 first attempts, and then a few per second: not 50 retries every second.
    assert!(while_down <= 50 + 12, "{while_down} arrivals while down");
}

/// The endpoint fails again while the pacer is ramping after the first outage: it is down
/// again as soon as nothing has been taken for an interval, and probed as in a fresh start,
/// instead of ramping on into the outage.
#[tokio::test(start_paused = true)]
async fn a_second_outage_while_ramping_is_probed_like_the_first() {
    let log = Log::default();
    let first = (Duration::ZERO, 2 * SEC);
    let second = (2500 * MS, 6500 * MS);
    let down =
        move |at: Duration| (first.0..first.1).contains(&at) || (second.0..second.1).contains(&at);
    let service =
        builder()
            .max_attempts(100)
            .build()
            .unwrap()
            .layer(endpoint(log.clone(), move |_, at| {
                if down(at) {
                    (503, vec![])
                } else {
                    (200, vec![])
                }
            }));
    let results = stream(service, 3_000, Duration::ZERO).await;
    assert!(results.iter().all(|r| r.as_ref().unwrap().status() == 200));
    let hits = log.hits();
    let failed = |(from, until): (Duration, Duration)| {
        hits.iter()
            .filter(|h| h.status == 503 && h.at >= from + 100 * MS && h.at < until)
            .count()
    };
    let (fresh, again) = (failed(first), failed(second));
    // While down, the probes (about 2 per second); the second outage also pays for what the
    // ramp had in flight when it began, and the interval it takes to see nothing get through.
    assert!(fresh <= 10, "{fresh} failed arrivals in the first outage");
    assert!(
        again <= 2 * fresh + 400,
        "{again} failed arrivals in the second outage (first: {fresh})"
    );
    let late = hits
        .iter()
        .filter(|h| h.status == 503 && h.at >= second.0 + SEC && h.at < second.1)
        .count();
    assert!(
        late <= 10,
        "{late} failed arrivals once the second outage was known"
    );
}

/// A layer that hands back unsent requests, with a 1-s deadline, to an endpoint that is down.
fn handing_back() -> RetryLayer<HttpClassifier, FailUnsent> {
    builder()
        .deadline(SEC)
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .fail_unsent()
        .build()
        .unwrap()
}

/// A new request to an endpoint known to be down, whose predicted wait is beyond its deadline,
/// never reaches the endpoint: it comes back at once as an `Unsent` error whose report says
/// `Deferred`, no attempt, and when to send it again.
#[tokio::test(start_paused = true)]
async fn a_new_request_to_a_down_endpoint_past_its_deadline_is_handed_back_unsent() {
    let log = Log::default();
    let layer = handing_back();
    let service = layer.layer(endpoint(log.clone(), |_, _| (503, vec![])));
    // The first request learns the endpoint is down, and takes the queue's head.
    let first = tokio::spawn(service.clone().oneshot(post(0)));
    tokio::time::sleep(50 * MS).await;
    // Enough wait in the queue ahead that the next one's predicted wait passes its deadline.
    let mut waiting = JoinSet::new();
    for id in 1..=400 {
        waiting.spawn(service.clone().oneshot(post(id)));
    }
    // They join (or are handed back) at this instant, as the next one is made.
    settle().await;
    let hits_before = log.hits().len();
    let started = Instant::now();
    let error = service.clone().oneshot(post(99)).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO, "handed back at once");
    let unsent = error.downcast_ref::<Unsent>().expect("an Unsent");
    let report = unsent.report();
    assert_eq!((report.stop, report.attempts), (StopReason::Deferred, 0));
    assert!(unsent.resend_after().unwrap() > Duration::ZERO);
    assert!(unsent.resend_at().is_some());
    assert_eq!(
        log.hits().len(),
        hits_before,
        "nothing reached the endpoint"
    );
    let stats = layer
        .pacing_stats(Some(&"hooks.test".parse().unwrap()))
        .unwrap();
    assert!(stats.deferred >= 1, "{stats:?}");
    let _ = first.await;
    let _ = waiting.join_all().await;
}

/// Without `fail_unsent`, the layer has no output of its own for such a request: it is sent
/// once, as before.
#[tokio::test(start_paused = true)]
async fn without_fail_unsent_a_new_request_past_its_deadline_is_sent_once() {
    let log = Log::default();
    let layer = builder()
        .deadline(SEC)
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .build()
        .unwrap();
    let service = layer.layer(endpoint(log.clone(), |_, _| (503, vec![])));
    let first = tokio::spawn(service.clone().oneshot(post(0)));
    tokio::time::sleep(50 * MS).await;
    let mut waiting = JoinSet::new();
    for id in 1..=20 {
        waiting.spawn(service.clone().oneshot(post(id)));
    }
    tokio::time::sleep(50 * MS).await;
    let response = service.clone().oneshot(post(99)).await.unwrap();
    assert_eq!(response.status(), 503);
    assert!(log.hits().iter().any(|h| h.id == 99), "it was sent");
    let _ = first.await;
    let _ = waiting.join_all().await;
}

/// Requests handed back together get resend times spread over the pacer's predicted releases,
/// all after a pause the layer knows of: a durable queue that honours them does not bring the
/// herd back in one instant, nor into the pause.
#[tokio::test(start_paused = true)]
async fn resend_times_of_requests_handed_back_together_are_spread_and_after_a_known_pause() {
    let log = Log::default();
    let layer = handing_back();
    // Nothing gets through, and the endpoint says when it will be back: the first answer marks
    // it down, the next one (a probe) pauses it for 2 s.
    let service = layer.layer(endpoint(log.clone(), |_, _| {
        (503, vec![("retry-after", "2")])
    }));
    let first = tokio::spawn(service.clone().oneshot(post(0)));
    let second = tokio::spawn(service.clone().oneshot(post(1)));
    tokio::time::sleep(SEC).await;
    let probe = log.hits().iter().find(|h| h.id == 1).expect("probed").at;
    let pause_ends = probe + 10 * MS + 2 * SEC;
    let now = SEC;
    assert!(pause_ends > now, "still paused");
    let paused_at = Instant::now();
    let mut handed = Vec::new();
    for id in 2..=201 {
        let error = service.clone().oneshot(post(id)).await.unwrap_err();
        let unsent = error.downcast::<Unsent>().unwrap();
        handed.push(unsent.resend_after().unwrap());
    }
    assert_eq!(paused_at.elapsed(), Duration::ZERO);
    let (min, max) = (*handed.iter().min().unwrap(), *handed.iter().max().unwrap());
    // None before the pause ends.
    assert!(
        now + min >= pause_ends,
        "a resend {min:?} from now, inside the pause ending {:?} from now",
        pause_ends - now
    );
    // 200 places behind the queue, in the predicted slow start from the probe rate.
    assert!(max - min >= 500 * MS, "spread over only {:?}", max - min);
    let mut sorted = handed.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), handed.len(), "no two the same");
    let _ = (first.await, second.await);
}

/// The report of a request handed back is the one `RetryReport::capture` sees, and its resend
/// time is the error's.
#[tokio::test(start_paused = true)]
async fn the_report_of_a_request_handed_back_is_the_errors() {
    let layer = handing_back();
    let service = layer.layer(endpoint(Log::default(), |_, _| (503, vec![])));
    let first = tokio::spawn(service.clone().oneshot(post(0)));
    tokio::time::sleep(50 * MS).await;
    for id in 1..=20 {
        drop(tokio::spawn(service.clone().oneshot(post(id))));
    }
    tokio::time::sleep(50 * MS).await;
    let (result, report): (Result<Res, BoxError>, RetryReport) =
        RetryReport::capture(service.clone().oneshot(post(99))).await;
    let error = result.unwrap_err();
    let unsent = error.downcast_ref::<Unsent>().unwrap();
    assert_eq!(unsent.report(), &report);
    assert!(layer.stats().stopped(StopReason::Deferred) >= 1);
    let _ = first.await;
}
