//! With the retry layer: opening wakes the requests sleeping behind the breaker, and an open
//! circuit ends a request instead of being retried.

use crate::scripted::*;
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready, assert_ready_ok};
use tower::{BoxError, Layer, Service};
use tower_http_retry::circuit_breaker::CircuitBreaker;
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::Retry;
use tower_http_retry::{
    AbortSignal, CircuitBreakerLayer, HttpClassifier, Outcome, RetryLayer, RetryReport, StopReason,
};

/// retry -> breaker (2 failures in a row) -> an endpoint answering 503.
struct Stack<S> {
    service: S,
    breaker: CircuitBreakerLayer,
    endpoint: Endpoint,
}

fn stack(
    retry: RetryLayer,
    signal: Option<&AbortSignal>,
) -> Stack<Retry<CircuitBreaker<Endpoint, HttpClassifier>, HttpClassifier>> {
    let mut breaker = breaker()
        .consecutive_failures(2)
        .open_duration(60 * SEC)
        .max_open_duration(60 * SEC);
    if let Some(signal) = signal {
        breaker = breaker.abort_signal(signal.clone());
    }
    let breaker = breaker.build().unwrap();
    let endpoint = Endpoint::answering(503);
    let service = retry.layer(breaker.layer(endpoint.clone()));
    Stack {
        service,
        breaker,
        endpoint,
    }
}

impl<S: Service<Req, Response = Res, Error = BoxError>> Stack<S> {
    fn start(&mut self, request: Req) -> tokio_test::task::Spawn<S::Future> {
        start(&mut self.service, request)
    }
}

#[tokio::test(start_paused = true)]
async fn opening_wakes_a_request_sleeping_in_a_30s_backoff() {
    let signal = AbortSignal::new();
    let mut stack = stack(retry(&signal, &bucket()).build().unwrap(), Some(&signal));
    let mut sleeper = stack.start(get());
    assert_pending!(sleeper.poll(), "503 once, then a 30 s sleep");
    let start = Instant::now();

    // A POST is not retried: its 503 is the second failure in a row and opens the circuit.
    let mut tripper = stack.start(post());
    assert_eq!(assert_ready_ok!(tripper.poll()).status(), 503);
    assert!(matches!(
        stack.breaker.state(),
        tower_http_retry::circuit_breaker::CircuitState::Open { .. }
    ));

    assert!(sleeper.is_woken(), "woken by the opening, not by the clock");
    let response = assert_ready_ok!(sleeper.poll());
    assert_eq!(Instant::now(), start);
    assert_eq!(response.status(), 503, "the last real outcome");
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Held));
    assert!(report.resend_after.is_some(), "until the hold ends");
    assert_eq!(stack.endpoint.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_woken_request_gets_its_budget_token_back() {
    let signal = AbortSignal::new();
    let budget = bucket();
    let mut stack = stack(retry(&signal, &budget).build().unwrap(), Some(&signal));
    let mut sleeper = stack.start(get());
    assert_pending!(sleeper.poll());
    assert_eq!(budget.available(), 9.0, "one token taken for the sleep");

    let mut tripper = stack.start(post());
    assert_ready_ok!(tripper.poll());
    assert_ready_ok!(sleeper.poll());
    assert_eq!(budget.available(), 10.0);
}

#[tokio::test(start_paused = true)]
async fn without_the_shared_signal_the_sleeper_waits_out_its_backoff() {
    let signal = AbortSignal::new();
    let mut stack = stack(retry(&signal, &bucket()).build().unwrap(), None);
    let mut sleeper = stack.start(get());
    assert_pending!(sleeper.poll());
    let mut tripper = stack.start(post());
    assert_ready_ok!(tripper.poll());

    assert!(!sleeper.is_woken());
    assert_pending!(sleeper.poll());
    tokio::time::advance(BACKOFF).await;
    // The retry wakes after 30 s only to be refused by the open circuit.
    let error = assert_ready!(sleeper.poll()).unwrap_err();
    assert!(
        error.is::<tower_http_retry::circuit_breaker::CircuitOpen>(),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_open_circuit_ends_the_request_without_a_retry() {
    let signal = AbortSignal::new();
    let lenient = HttpClassifier::new().unknown_errors(Outcome::Transient);
    let layer = retry(&signal, &bucket())
        .classifier(lenient)
        .build()
        .unwrap();
    let breaker = breaker().consecutive_failures(2).build().unwrap();
    let endpoint = Endpoint::answering(503);
    let mut service = layer.layer(breaker.layer(endpoint.clone()));
    for _ in 0..2 {
        send(&mut service, post()).await.unwrap();
    }

    let slot = ReportSlot::new();
    let mut request = get();
    request.extensions_mut().insert(slot.clone());
    let started = Instant::now();
    refused(send(&mut service, request).await);
    let report = slot.take().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::CircuitOpen));
    let wait = report
        .resend_after
        .expect("when the breaker lets a probe through");
    assert!(wait > std::time::Duration::ZERO);
    assert!(report.resend_at.is_some());
    assert_eq!(Instant::now(), started, "no sleep");
    assert_eq!(endpoint.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_that_opens_the_circuit_does_not_sleep() {
    let signal = AbortSignal::new();
    let budget = bucket();
    let mut stack = stack(retry(&signal, &budget).build().unwrap(), Some(&signal));
    let mut sleeper = stack.start(get());
    assert_pending!(sleeper.poll());
    let start = Instant::now();

    // A retryable GET whose 503 is the second failure in a row: it opens the circuit, and its
    // retry would only be refused, so it returns at once instead of sleeping 30 s.
    let mut tripper = stack.start(get());
    let response = assert_ready_ok!(tripper.poll());
    assert_eq!(response.status(), 503);
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Held));
    assert_eq!(Instant::now(), start);
    assert_ready_ok!(sleeper.poll());
    assert_eq!(
        budget.available(),
        10.0,
        "no token is kept by either request"
    );
}
