//! The keyed breaker: one breaker per authority, bounded in number, and how its openings wake
//! the retry layer without holding back the other authorities.

use crate::scripted::*;
use http::uri::Authority;
use std::collections::HashMap;
use std::future::Ready;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready, assert_ready_ok};
use tower::{Layer, Service};
use tower_http_retry::circuit_breaker::{CircuitState, KeyedCircuitBreakerLayer};
use tower_http_retry::{AbortSignal, RetryReport, StopReason};

/// Upstreams behind one client: each authority answers as its own [`Endpoint`] (200 until set
/// otherwise); requests without an authority go to the one named `""`.
#[derive(Clone, Default)]
struct Upstreams(Arc<Mutex<HashMap<String, Endpoint>>>);

impl Upstreams {
    fn host(&self, authority: &str) -> Endpoint {
        let mut hosts = self.0.lock().unwrap();
        let endpoint = hosts.entry(authority.to_owned());
        endpoint.or_insert_with(|| Endpoint::answering(200)).clone()
    }
}

impl Service<Req> for Upstreams {
    type Response = Res;
    type Error = io::Error;
    type Future = Ready<Result<Res, io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let authority = request.uri().authority().map_or("", |a| a.as_str());
        self.host(authority).call(request)
    }
}

fn to(authority: &str) -> Req {
    http::Request::get(format!("http://{authority}/"))
        .body(())
        .unwrap()
}

fn post_to(authority: &str) -> Req {
    http::Request::post(format!("http://{authority}/"))
        .body(())
        .unwrap()
}

fn key(authority: &str) -> Authority {
    authority.parse().unwrap()
}

/// The scripted breaker (3 failures in a row, open 1 s) per authority, for at most `max`.
fn keyed(max: usize) -> KeyedCircuitBreakerLayer {
    breaker().build_per_authority(max).unwrap()
}

fn is_open(state: Option<CircuitState>) -> bool {
    matches!(state, Some(CircuitState::Open { .. }))
}

/// Sends one call to each authority in turn, in that order.
async fn visit<S>(service: &mut S, authorities: &[&str])
where
    S: Service<Req, Response = Res, Error = tower::BoxError>,
{
    for authority in authorities {
        send(service, to(authority)).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn one_authority_tripping_leaves_another_closed() {
    let upstreams = Upstreams::default();
    upstreams.host("down.test").answer(503);
    let layer = keyed(8);
    let mut service = layer.layer(upstreams.clone());
    // Interleaved: one shared breaker would see every failure reset by the next success.
    for _ in 0..3 {
        assert_eq!(send(&mut service, to("down.test")).await.unwrap(), 503);
        assert_eq!(send(&mut service, to("up.test")).await.unwrap(), 200);
    }
    assert!(is_open(layer.state(Some(&key("down.test")))));
    assert_eq!(
        layer.state(Some(&key("up.test"))),
        Some(CircuitState::Closed)
    );

    refused(send(&mut service, to("down.test")).await);
    assert_eq!(send(&mut service, to("up.test")).await.unwrap(), 200);
    assert_eq!(upstreams.host("down.test").calls(), 3);
    assert_eq!(upstreams.host("up.test").calls(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_circuit_open_names_its_authority() {
    let upstreams = Upstreams::default();
    upstreams.host("down.test:8080").answer(503);
    let layer = keyed(8);
    let mut service = layer.layer(upstreams);
    visit(&mut service, &["down.test:8080"; 3]).await;

    let open = refused(send(&mut service, to("down.test:8080")).await);
    assert_eq!(open.authority(), Some(&key("down.test:8080")));
    assert_eq!(open.half_open_at(), Instant::now() + SEC);
    assert_eq!(
        open.to_string(),
        "circuit open for down.test:8080: next probe in 1s"
    );
}

#[tokio::test(start_paused = true)]
async fn requests_without_an_authority_share_one_breaker() {
    let upstreams = Upstreams::default();
    upstreams.host("").answer(503);
    let layer = keyed(8);
    let mut service = layer.layer(upstreams);
    let relative = || http::Request::get("/").body(()).unwrap();
    for _ in 0..3 {
        send(&mut service, relative()).await.unwrap();
    }

    let open = refused(send(&mut service, relative()).await);
    assert_eq!(open.authority(), None);
    assert!(is_open(layer.state(None)));
    assert_eq!(layer.authorities(), 0, "not counted against the maximum");
    assert_eq!(send(&mut service, to("up.test")).await.unwrap(), 200);
}

#[tokio::test(start_paused = true)]
async fn the_number_of_breakers_never_exceeds_the_maximum() {
    let layer = keyed(4);
    let mut service = layer.layer(Upstreams::default());
    for i in 0..20 {
        visit(&mut service, &[&format!("host{i}.test")]).await;
        assert!(layer.authorities() <= 4, "{} breakers", layer.authorities());
    }
    assert_eq!(layer.authorities(), 4);
    assert_eq!(layer.evictions(), 16);
    assert_eq!(layer.untracked_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_least_recently_used_closed_breaker_is_evicted() {
    let layer = keyed(3);
    let mut service = layer.layer(Upstreams::default());
    let uses = ["a.test", "b.test", "c.test", "b.test", "a.test", "d.test"];
    visit(&mut service, &uses).await;

    assert_eq!(layer.state(Some(&key("c.test"))), None, "evicted");
    for kept in ["a.test", "b.test", "d.test"] {
        assert_eq!(layer.state(Some(&key(kept))), Some(CircuitState::Closed));
    }
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_is_not_evicted_while_closed_ones_exist() {
    let upstreams = Upstreams::default();
    upstreams.host("down.test").answer(503);
    let layer = keyed(3);
    let mut service = layer.layer(upstreams.clone());
    // The open breaker is the least recently used of all.
    visit(&mut service, &["down.test"; 3]).await;
    for i in 0..10 {
        visit(&mut service, &[&format!("host{i}.test")]).await;
    }

    assert_eq!(layer.evictions(), 8);
    assert!(is_open(layer.state(Some(&key("down.test")))));
    refused(send(&mut service, to("down.test")).await);
    assert_eq!(upstreams.host("down.test").calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn when_every_breaker_is_open_a_new_authority_goes_through_untracked() {
    let upstreams = Upstreams::default();
    upstreams.host("a.test").answer(503);
    upstreams.host("b.test").answer(503);
    upstreams.host("c.test").answer(503);
    let layer = keyed(2);
    let mut service = layer.layer(upstreams.clone());
    visit(&mut service, &["a.test", "b.test"].repeat(3)).await;

    // No breaker to trip: every call to c.test reaches it, and a.test and b.test stay open.
    visit(&mut service, &["c.test"; 5]).await;
    assert_eq!(upstreams.host("c.test").calls(), 5);
    assert_eq!(layer.untracked_calls(), 5);
    assert_eq!(layer.state(Some(&key("c.test"))), None);
    assert_eq!(layer.authorities(), 2);
    assert!(is_open(layer.state(Some(&key("a.test")))));
    assert!(is_open(layer.state(Some(&key("b.test")))));
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_whose_open_period_is_over_can_be_evicted() {
    let upstreams = Upstreams::default();
    upstreams.host("a.test").answer(503);
    upstreams.host("b.test").answer(503);
    let layer = keyed(2);
    let mut service = layer.layer(upstreams);
    visit(&mut service, &["a.test", "b.test"].repeat(3)).await;
    advance(SEC).await;

    visit(&mut service, &["c.test"]).await;
    assert_eq!(layer.untracked_calls(), 0);
    assert_eq!(layer.state(Some(&key("a.test"))), None, "evicted");
    assert_eq!(
        layer.state(Some(&key("b.test"))),
        Some(CircuitState::HalfOpen)
    );
    assert_eq!(
        layer.state(Some(&key("c.test"))),
        Some(CircuitState::Closed)
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_breaker_is_evicted_before_an_open_one_whose_period_is_over() {
    let upstreams = Upstreams::default();
    upstreams.host("a.test").answer(503);
    let layer = keyed(2);
    let mut service = layer.layer(upstreams);
    visit(&mut service, &["a.test", "a.test", "a.test", "b.test"]).await;
    advance(SEC).await;

    visit(&mut service, &["c.test"]).await;
    assert_eq!(layer.state(Some(&key("b.test"))), None, "evicted");
    assert_eq!(
        layer.state(Some(&key("a.test"))),
        Some(CircuitState::HalfOpen)
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_with_a_call_in_flight_is_not_evicted() {
    let signal = AbortSignal::new();
    let layer = breaker()
        .consecutive_failures(1)
        .abort_signal(signal.clone())
        .build_per_authority(1)
        .unwrap();
    let (mut service, mut handle) = tower_test::mock::spawn_with(|mock| layer.layer(mock));
    assert_ready_ok!(service.poll_ready());
    let mut to_a = tokio_test::task::spawn(service.call(to("a.test")));
    let (_, reply_a) = assert_ready!(handle.poll_request()).unwrap();

    // The map is full, and its one breaker has a call in flight: b.test goes through untracked.
    assert_ready_ok!(service.poll_ready());
    let mut to_b = tokio_test::task::spawn(service.call(to("b.test")));
    let (_, reply_b) = assert_ready!(handle.poll_request()).unwrap();
    reply_b.send_response(status(200));
    assert_ready_ok!(to_b.poll());

    // a.test's 503 opens the breaker the layer reports for a.test, the one holding its signal.
    reply_a.send_response(status(503));
    assert_eq!(assert_ready_ok!(to_a.poll()).status(), 503);
    let held = signal.held_until(Some(&key("a.test")));
    let state = layer.state(Some(&key("a.test")));
    assert!(
        held.is_some(),
        "the 503 opened a circuit (a.test is {state:?})"
    );
    assert_eq!(
        state,
        held.map(|half_open_at| CircuitState::Open { half_open_at }),
        "a.test is held until {held:?}"
    );
    assert_ready_ok!(service.poll_ready());
    let mut again = tokio_test::task::spawn(service.call(to("a.test")));
    refused(assert_ready!(again.poll()).map(|r| r.status().as_u16()));
    assert!(handle.poll_request().is_pending(), "a.test was not called");
    assert_eq!((layer.evictions(), layer.untracked_calls()), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_breaker_whose_call_was_dropped_can_be_evicted() {
    let layer = keyed(1);
    let (mut service, mut handle) = tower_test::mock::spawn_with(|mock| layer.layer(mock));
    assert_ready_ok!(service.poll_ready());
    let to_a = tokio_test::task::spawn(service.call(to("a.test")));
    assert_ready!(handle.poll_request()).unwrap();
    drop(to_a);

    assert_ready_ok!(service.poll_ready());
    let mut to_b = tokio_test::task::spawn(service.call(to("b.test")));
    let (_, reply_b) = assert_ready!(handle.poll_request()).unwrap();
    reply_b.send_response(status(200));
    assert_ready_ok!(to_b.poll());
    assert_eq!((layer.evictions(), layer.untracked_calls()), (1, 0));
    assert_eq!(layer.state(Some(&key("a.test"))), None, "evicted");
}

/// The keyed breaker over `tower_test::mock`, with "down.test" tripped.
fn mocked_with_one_open() -> (
    tower_test::mock::Spawn<impl Service<Req, Response = Res, Error = tower::BoxError>>,
    Handle,
) {
    let layer = keyed(8);
    let (mut service, mut handle) = tower_test::mock::spawn_with(|mock| layer.layer(mock));
    for _ in 0..3 {
        assert_ready_ok!(service.poll_ready());
        let mut future = tokio_test::task::spawn(service.call(to("down.test")));
        let (_, reply) = assert_ready!(handle.poll_request()).unwrap();
        reply.send_response(status(503));
        assert_ready_ok!(future.poll());
    }
    (service, handle)
}

#[tokio::test(start_paused = true)]
async fn poll_ready_waits_for_the_inner_service_whatever_the_authority() {
    let (mut service, mut handle) = mocked_with_one_open();
    handle.allow(0);
    assert_pending!(
        service.poll_ready(),
        "the next call may be for a healthy authority"
    );
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_refused_call_leaves_the_inner_readiness_to_the_next_call() {
    let (mut service, mut handle) = mocked_with_one_open();
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
    let mut future = tokio_test::task::spawn(service.call(to("down.test")));
    refused(assert_ready!(future.poll()).map(|r| r.status().as_u16()));
    assert!(
        handle.poll_request().is_pending(),
        "the mock was not called"
    );

    assert_ready_ok!(service.poll_ready());
    let mut future = tokio_test::task::spawn(service.call(to("up.test")));
    let (request, reply) = assert_ready!(handle.poll_request()).unwrap();
    assert_eq!(request.uri().authority(), Some(&key("up.test")));
    reply.send_response(status(200));
    assert_eq!(assert_ready_ok!(future.poll()).status(), 200);
}

/// retry (3 attempts, 30 s apart) -> keyed breaker (2 failures in a row, open 60 s, sharing the
/// retry layer's signal) -> upstreams where down.test and flaky.test answer 503.
struct Stack {
    service: tower_http_retry::retry::Retry<
        tower_http_retry::circuit_breaker::KeyedCircuitBreaker<
            Upstreams,
            tower_http_retry::HttpClassifier,
        >,
        tower_http_retry::HttpClassifier,
    >,
    layer: KeyedCircuitBreakerLayer,
    upstreams: Upstreams,
    budget: Arc<tower_http_retry::retry::TokenBucket>,
}

fn stack() -> Stack {
    let signal = AbortSignal::new();
    let budget = bucket();
    let layer = breaker()
        .consecutive_failures(2)
        .open_duration(60 * SEC)
        .max_open_duration(60 * SEC)
        .abort_signal(signal.clone())
        .build_per_authority(8)
        .unwrap();
    let upstreams = Upstreams::default();
    upstreams.host("down.test").answer(503);
    upstreams.host("flaky.test").answer(503);
    let service = retry(&signal, &budget)
        .build()
        .unwrap()
        .layer(layer.layer(upstreams.clone()));
    Stack {
        service,
        layer,
        upstreams,
        budget,
    }
}

impl Stack {
    /// Two POSTs (never retried) to down.test: the second failure opens its circuit.
    fn trip_down(&mut self) {
        for _ in 0..2 {
            let mut tripper = start(&mut self.service, post_to("down.test"));
            assert_eq!(assert_ready_ok!(tripper.poll()).status(), 503);
        }
        assert!(is_open(self.layer.state(Some(&key("down.test")))));
    }
}

#[tokio::test(start_paused = true)]
async fn opening_one_authority_wakes_a_sleeper_of_that_authority() {
    let mut stack = stack();
    let mut sleeper = start(&mut stack.service, to("down.test"));
    assert_pending!(sleeper.poll(), "503 once, then a 30 s sleep");
    let started = Instant::now();

    // The sleeper's 503 and one POST's: the second failure in a row opens the circuit.
    let mut tripper = start(&mut stack.service, post_to("down.test"));
    assert_ready_ok!(tripper.poll());
    assert!(is_open(stack.layer.state(Some(&key("down.test")))));

    assert!(sleeper.is_woken(), "woken by the opening, not by the clock");
    let response = assert_ready_ok!(sleeper.poll());
    assert_eq!(response.status(), 503, "its last outcome");
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Held));
    assert_eq!(Instant::now(), started);
    assert_eq!(stack.budget.available(), 10.0, "its token is refunded");
}

#[tokio::test(start_paused = true)]
async fn opening_one_authority_does_not_stop_others_from_sleeping_and_retrying() {
    let mut stack = stack();
    stack.trip_down();

    // An unkeyed breaker would hold the signal for 60 s, and this request would return its 503 at
    // once; here it sleeps, and its retry finds flaky.test back.
    let mut request = start(&mut stack.service, to("flaky.test"));
    assert_pending!(request.poll());
    stack.upstreams.host("flaky.test").answer(200);
    advance(BACKOFF).await;
    let response = assert_ready_ok!(request.poll());
    assert_eq!(response.status(), 200);
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn opening_one_authority_leaves_the_sleepers_of_the_others_asleep() {
    let mut stack = stack();
    let mut sleeper = start(&mut stack.service, to("flaky.test"));
    assert_pending!(sleeper.poll());

    // The opening holds the shared signal for down.test only: flaky.test's sleeper is woken
    // (the signal is shared), sees the hold is not for it, and goes back to sleep.
    stack.trip_down();
    assert_pending!(sleeper.poll());
    stack.upstreams.host("flaky.test").answer(200);
    advance(BACKOFF).await;
    let response = assert_ready_ok!(sleeper.poll());
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (2, StopReason::Success));
    assert_eq!(stack.upstreams.host("flaky.test").calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_that_opens_a_keyed_circuit_does_not_sleep() {
    let mut stack = stack();
    let mut post = start(&mut stack.service, post_to("down.test"));
    assert_ready_ok!(post.poll());
    let started = Instant::now();

    // Its 503 opens down.test's circuit, which holds the signal for down.test: a retry could only
    // be refused, so the request returns its 503 at once instead of sleeping 30 s.
    let mut tripper = start(&mut stack.service, to("down.test"));
    let response = assert_ready_ok!(tripper.poll());
    assert_eq!(response.status(), 503);
    let report = RetryReport::of(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::Held));
    assert!(is_open(stack.layer.state(Some(&key("down.test")))));
    assert_eq!(Instant::now(), started);
    assert_eq!(stack.budget.available(), 10.0, "no token kept");
    assert_eq!(stack.upstreams.host("down.test").calls(), 2);
}
