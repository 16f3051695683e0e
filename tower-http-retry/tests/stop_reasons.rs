//! One test per `StopReason`: the situation its documentation says produces it, and what its
//! report then tells a sender. Together with the table doctest on `StopReason` (each reason's
//! `is_final` and `asks_callers_to_stand_down`), the docs cannot drift from the code. Paused
//! time and in-process endpoints (`tower::service_fn`), so each outcome is exact.

use std::future::{ready, Ready};
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{service_fn, BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::body::ReplayBody;
use tower_http_retry::circuit_breaker::CircuitOpen;
use tower_http_retry::classify::{classify_fn, NotSent};
use tower_http_retry::hint::{HintPolicy, WhenLonger};
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::{NestedLayers, RandomSource, RetryLayerBuilder, TokenBucket};
use tower_http_retry::{
    AbortSignal, Backoff, CircuitBreakerLayer, HttpClassifier, Jitter, Outcome, Pacing, RetryLayer,
    RetryReport, StopReason,
};

type Req = http::Request<String>;
type Res = http::Response<String>;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// 3 attempts, a fixed 100 ms backoff, no budget.
fn layer() -> RetryLayerBuilder {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Jitter::None, 100 * MS, 100 * MS))
        .random_source(RandomSource::seeded(1))
        .without_budget()
}

fn response(status: u16, headers: &[(&'static str, &'static str)]) -> Res {
    let mut response = http::Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    response.body(String::new()).unwrap()
}

/// An endpoint that answers `statuses` in turn, then the last one for good.
fn answering(
    statuses: &'static [u16],
) -> impl Service<Req, Response = Res, Error = io::Error, Future: Send> + Clone + Send {
    let calls = Arc::new(AtomicU32::new(0));
    service_fn(move |_: Req| {
        let n = calls.fetch_add(1, Ordering::SeqCst) as usize;
        let status = statuses[n.min(statuses.len() - 1)];
        ready(Ok::<_, io::Error>(response(status, &[])))
    })
}

fn get() -> Req {
    http::Request::get("http://example.test/")
        .body(String::new())
        .unwrap()
}

/// Sends `request` through `layer` over `endpoint`; the result and the report.
async fn run<S>(
    layer: RetryLayerBuilder,
    endpoint: S,
    request: Req,
) -> (Result<Res, S::Error>, RetryReport)
where
    S: Service<Req, Response = Res> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    HttpClassifier: tower_http_retry::classify::Classify<Res, S::Error>,
{
    let client = layer.build().unwrap().layer(endpoint);
    RetryReport::capture(client.oneshot(request)).await
}

#[tokio::test(start_paused = true)]
async fn success_a_later_attempt_succeeded() {
    let (result, report) = run(layer(), answering(&[503, 200]), get()).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
    assert!(report.stop.is_final());
}

#[tokio::test(start_paused = true)]
async fn permanent_a_404_is_returned_at_once() {
    let (result, report) = run(layer(), answering(&[404]), get()).await;
    assert_eq!(result.unwrap().status(), 404);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Permanent));
    assert_eq!(report.resend_after, None, "final: no time to send again");
}

#[tokio::test(start_paused = true)]
async fn attempts_exhausted_every_attempt_failed_transiently() {
    let (result, report) = run(layer(), answering(&[503]), get()).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(
        (report.attempts, report.stop, report.resend_after),
        (3, StopReason::AttemptsExhausted, Some(100 * MS)),
        "not final: the next backoff delay says when to send again"
    );
}

#[tokio::test(start_paused = true)]
async fn budget_empty_the_budget_refused_a_retry() {
    // One retry's worth of tokens, never refilled.
    let budget = TokenBucket::builder()
        .capacity(1.0)
        .retry_cost(1.0)
        .deposit_per_success(0.0)
        .refill_per_second(0.0)
        .build()
        .unwrap();
    let (result, report) = run(layer().budget(budget), answering(&[503]), get()).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!((report.attempts, report.stop), (2, StopReason::BudgetEmpty));
    assert!(report.resend_after.is_some());
    assert!(report.asks_callers_to_stand_down());
}

#[tokio::test(start_paused = true)]
async fn deadline_the_next_sleep_would_end_past_the_deadline() {
    let (result, report) = run(layer().deadline(50 * MS), answering(&[503]), get()).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(
        (report.attempts, report.stop, report.resend_after),
        (1, StopReason::Deadline, Some(100 * MS))
    );
}

#[tokio::test(start_paused = true)]
async fn not_idempotent_a_post_without_a_key_is_sent_once() {
    let post = http::Request::post("http://example.test/")
        .body(String::new())
        .unwrap();
    let (result, report) = run(layer(), answering(&[503]), post).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::NotIdempotent)
    );
    assert!(report.stop.is_final(), "sending it again is not safe");
}

#[tokio::test(start_paused = true)]
async fn not_replayable_a_body_past_the_replay_bound_is_sent_once() {
    let request = http::Request::get("http://example.test/")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"0123456789",
        )))
        .unwrap();
    let request = ReplayBody::buffer_request(request, 4).await.unwrap();
    let endpoint = service_fn(|_: http::Request<ReplayBody<_>>| async {
        Ok::<_, io::Error>(response(503, &[]))
    });
    let client = layer().build().unwrap().layer(endpoint);
    let (result, report) = RetryReport::capture(client.oneshot(request)).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::NotReplayable)
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_too_long_a_hint_past_the_clamp_is_given_up_on() {
    let policy = HintPolicy::honored()
        .max_delay(SEC)
        .when_longer(WhenLonger::GiveUp);
    let endpoint =
        service_fn(|_: Req| async { Ok::<_, io::Error>(response(503, &[("retry-after", "10")])) });
    let (result, report) = run(layer().hint_policy(policy), endpoint, get()).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(
        (report.attempts, report.stop, report.resend_after),
        (1, StopReason::RetryAfterTooLong, Some(10 * SEC))
    );
}

#[tokio::test(start_paused = true)]
async fn aborted_a_shutdown_ends_the_sleep() {
    let signal = AbortSignal::new();
    let client = layer()
        .backoff(Backoff::new(Jitter::None, 10 * SEC, 10 * SEC))
        .abort_signal(signal.clone())
        .build()
        .unwrap()
        .layer(answering(&[503]));
    let call = tokio::spawn(RetryReport::capture(client.oneshot(get())));
    tokio::time::sleep(SEC).await;
    signal.shutdown();
    let (result, report) = call.await.unwrap();
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Aborted));
    assert_eq!(report.slept, SEC, "the sleep ended at the shutdown");
}

/// Ready once, then fails `poll_ready`: the retry meets an error.
#[derive(Clone)]
struct ReadyOnce {
    polls: Arc<AtomicU32>,
}

impl Service<Req> for ReadyOnce {
    type Response = Res;
    type Error = io::Error;
    type Future = Ready<Result<Res, io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        match self.polls.fetch_add(1, Ordering::SeqCst) {
            0 => Poll::Ready(Ok(())),
            _ => Poll::Ready(Err(io::Error::other("closed"))),
        }
    }

    fn call(&mut self, _: Req) -> Self::Future {
        ready(Ok(response(503, &[])))
    }
}

#[tokio::test(start_paused = true)]
async fn not_ready_the_inner_service_failed_poll_ready_before_a_retry() {
    let endpoint = ReadyOnce {
        polls: Arc::default(),
    };
    let (result, report) = run(layer(), endpoint, get()).await;
    assert!(result.is_err(), "the poll_ready error is returned");
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReady));
}

#[tokio::test(start_paused = true)]
async fn cancelled_the_caller_dropped_the_future_mid_sleep() {
    let slot = ReportSlot::new();
    let mut request = get();
    request.extensions_mut().insert(slot.clone());
    let client = layer().build().unwrap().layer(answering(&[503]));
    let outcome = tokio::time::timeout(50 * MS, client.oneshot(request)).await;
    assert!(outcome.is_err(), "the outer timeout fired mid-sleep");
    let report = slot.take().expect("the slot is filled on drop");
    assert_eq!((report.attempts, report.stop), (1, StopReason::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn deferred_pacing_cannot_serve_the_request_before_its_deadline() {
    let pacing = Pacing::builder()
        .outage_after(1)
        .probe_interval(10 * SEC)
        .build()
        .unwrap();
    let builder = layer().pacing(pacing).deadline(SEC);
    let (result, report) = run(builder, answering(&[503]), get()).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(report.stop, StopReason::Deferred);
    assert!(report.resend_after.is_some(), "{report:?}");
    assert!(report.asks_callers_to_stand_down());
}

/// Retry over a breaker that opens after one failure for 10 s.
fn over_breaker(
    retry: RetryLayerBuilder,
    breaker_signal: Option<AbortSignal>,
) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(1)
        .open_duration(10 * SEC)
        .open_jitter(0.0);
    let breaker = match breaker_signal {
        Some(signal) => breaker.abort_signal(signal),
        None => breaker,
    };
    ServiceBuilder::new()
        .layer(retry.build().unwrap())
        .layer(breaker.build().unwrap())
        .service(answering(&[503]))
}

#[tokio::test(start_paused = true)]
async fn circuit_open_a_breaker_refused_the_attempt() {
    let client = over_breaker(layer(), None);
    // The first request opens the circuit and is refused at its retry.
    let (result, report) = RetryReport::capture(client.clone().oneshot(get())).await;
    let error = result.unwrap_err();
    assert!(error.downcast_ref::<CircuitOpen>().is_some());
    assert_eq!((report.attempts, report.stop), (2, StopReason::CircuitOpen));
    // Not final: the time until the breaker lets a probe through.
    assert_eq!(report.resend_after, Some(10 * SEC - 100 * MS));
    assert!(report.asks_callers_to_stand_down());
}

#[tokio::test(start_paused = true)]
async fn held_an_opening_breaker_holds_the_abort_signal() {
    let signal = AbortSignal::new();
    let client = over_breaker(layer().abort_signal(signal.clone()), Some(signal));
    let (result, report) = RetryReport::capture(client.oneshot(get())).await;
    assert_eq!(result.unwrap().status(), 503, "the last real response");
    assert_eq!(
        (report.attempts, report.stop, report.resend_after),
        (1, StopReason::Held, Some(10 * SEC))
    );
    assert!(!report.stop.is_final(), "a hold is not a shutdown");
}

#[tokio::test(start_paused = true)]
async fn refused_too_often_the_server_refused_every_free_resend() {
    let refusing = service_fn(|_: Req| async { Err::<Res, _>(io::Error::other("refused stream")) });
    let classifier = classify_fn(
        |response: &Res| HttpClassifier::new().classify_status(response.status()),
        |_: &io::Error| Outcome::NotSent(NotSent::Refused),
    );
    let client = layer()
        .classifier(classifier)
        .max_refused_retries(2)
        .build()
        .unwrap()
        .layer(refusing);
    let (result, report) = RetryReport::capture(client.oneshot(get())).await;
    assert!(result.is_err());
    assert_eq!(
        (report.attempts, report.stop),
        (3, StopReason::RefusedTooOften),
        "the first attempt and 2 free resends"
    );
}

#[tokio::test(start_paused = true)]
async fn stand_down_the_server_asked_not_to_retry() {
    let endpoint = service_fn(|_: Req| async {
        Ok::<_, io::Error>(response(503, &[("x-should-retry", "false")]))
    });
    let (result, report) = run(layer(), endpoint, get()).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!((report.attempts, report.stop), (1, StopReason::StandDown));
    assert!(report.asks_callers_to_stand_down());
}

#[tokio::test(start_paused = true)]
async fn delegated_an_inner_layer_left_the_retrying_to_the_outer_one() {
    let inner = layer().nested_layers(NestedLayers::Defer).build().unwrap();
    let outer = layer().build().unwrap();
    let client = ServiceBuilder::new()
        .layer(outer.clone())
        .layer(inner.clone())
        .service(answering(&[503, 200]));
    let (result, report) = RetryReport::capture(client.oneshot(get())).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(
        (report.attempts, report.stop),
        (2, StopReason::Success),
        "the outermost layer's report"
    );
    assert_eq!(inner.stats().stopped(StopReason::Delegated), 1);
    assert_eq!(inner.stats().attempts, 2, "one per outer attempt");
}

#[tokio::test(start_paused = true)]
async fn cancelled_a_total_timeout_outside_the_layer_fired_mid_sleep() {
    let client = ServiceBuilder::new()
        .timeout(50 * MS)
        .layer(layer().build().unwrap())
        .service(answering(&[503]));
    let (result, report) = RetryReport::capture(client.oneshot(get())).await;
    let error = result.unwrap_err();
    assert!(error.is::<tower::timeout::error::Elapsed>());
    assert_eq!((report.attempts, report.stop), (1, StopReason::Cancelled));
    assert_eq!(report.slept, 50 * MS, "the sleep lasted until the timeout");
}
