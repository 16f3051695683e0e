//! Defects of the pacer found against real callers, each pinned by the behaviour it
//! broke. The endpoint is scripted: every attempt is handed to the test, which answers it when
//! it chooses, on tokio's paused clock. Waits are bounded, so a request that hangs fails the test
//! instead of hanging it.

use http::uri::Authority;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_http_retry::pacing::PacingMode;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};
use tower_http_retry::{AbortSignal, Backoff, Jitter, Pacing, RetryLayer, RetryReport, StopReason};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

type Req = http::Request<String>;
type Res = http::Response<String>;
type Answer = oneshot::Sender<Result<Res, std::io::Error>>;
type Calls = mpsc::UnboundedReceiver<(Req, Answer)>;

/// An inner service that hands every attempt to the test, which answers it through the
/// returned sender when it chooses.
fn scripted() -> (
    impl Service<Req, Response = Res, Error = std::io::Error, Future: Send + 'static>
        + Clone
        + Send
        + 'static,
    Calls,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let service = service_fn(move |request: Req| {
        let (answer, response) = oneshot::channel();
        let _ = tx.send((request, answer));
        async move {
            response
                .await
                .unwrap_or_else(|_| Err(std::io::Error::other("the test dropped the attempt")))
        }
    });
    (service, rx)
}

/// The next attempt the inner service received, waiting at most `limit` (paused time).
async fn next_call(calls: &mut Calls, limit: Duration) -> Option<(Req, Answer)> {
    tokio::time::timeout(limit, calls.recv())
        .await
        .ok()
        .flatten()
}

fn get(authority: &str) -> Req {
    http::Request::get(format!("http://{authority}/"))
        .body(String::new())
        .unwrap()
}

fn status(code: u16) -> Res {
    http::Response::builder()
        .status(code)
        .body(String::new())
        .unwrap()
}

fn with_header(code: u16, name: &'static str, value: &str) -> Res {
    http::Response::builder()
        .status(code)
        .header(name, value)
        .body(String::new())
        .unwrap()
}

fn authority(a: &str) -> Authority {
    a.parse().unwrap()
}

/// Deterministic: plain exponential 100 ms .. 1 s, seeded, no budget.
fn builder() -> RetryLayerBuilder {
    RetryLayer::builder()
        .backoff(Backoff::new(Jitter::None, 100 * MS, SEC))
        .random_source(RandomSource::seeded(3))
        .without_budget()
}

fn spawn_call<S>(service: &S, request: Req) -> JoinHandle<Result<Res, BoxError>>
where
    S: Service<Req, Response = Res> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
    let service = service.clone();
    tokio::spawn(async move { service.oneshot(request).await.map_err(Into::into) })
}

/// Lets spawned tasks run without moving the paused clock.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn report(response: &Res) -> RetryReport {
    RetryReport::of(response).clone()
}

/// A caller makes two calls to an endpoint that is down and awaits the second first: tower does
/// not require a response future to be polled promptly, so the first, not polled yet, must not
/// hold a place at the head of the queue that blocks the second.
#[tokio::test(start_paused = true)]
async fn a_future_not_polled_yet_does_not_block_the_queue() {
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(5)
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .build()
        .unwrap();
    let service = layer.layer(inner);
    // The endpoint goes down, then comes back: A's probe succeeds.
    let a = spawn_call(&service, get("a.test"));
    let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
    answer.send(Ok(status(503))).unwrap();
    settle().await;

    let mut svc = service.clone();
    svc.ready().await.unwrap();
    let f1 = svc.call(get("a.test")); // not polled
    svc.ready().await.unwrap();
    let f2 = tokio::spawn(svc.call(get("a.test")));

    let (_, answer) = next_call(&mut calls, 5 * SEC).await.expect("A's probe");
    answer.send(Ok(status(200))).unwrap();
    assert_eq!(a.await.unwrap().unwrap().status(), 200);
    let released = next_call(&mut calls, 60 * SEC).await;
    let stats = layer.pacing_stats(Some(&authority("a.test")));
    let (_, answer) = released.unwrap_or_else(|| {
        panic!("a minute after the endpoint came back, f2 still waits behind f1: {stats:?}")
    });
    answer.send(Ok(status(200))).unwrap();
    assert_eq!(f2.await.unwrap().unwrap().status(), 200);
    // f1, polled at last, joins the queue then and is delivered too.
    let f1 = tokio::spawn(f1);
    let (_, answer) = next_call(&mut calls, 60 * SEC).await.expect("f1 is sent");
    answer.send(Ok(status(200))).unwrap();
    assert_eq!(f1.await.unwrap().unwrap().status(), 200);
}

/// The endpoint is down and its one probe is in flight, so the head of the queue is blocked
/// until the probe's outcome. Meanwhile another request's `Retry-After` pauses the endpoint, and
/// the probe succeeds during the pause. Once the pause is over the queue must move on.
#[tokio::test(start_paused = true)]
async fn a_head_blocked_behind_a_probe_is_released_after_a_pause_that_came_meanwhile() {
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(10)
        .pacing(
            Pacing::builder()
                .outage_after(1)
                .probes_in_flight(1)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let a_test = authority("a.test");

    // C: a first attempt in flight while the endpoint is still open.
    let c = spawn_call(&service, get("a.test"));
    let (_, c_answer) = next_call(&mut calls, SEC).await.expect("C's first attempt");
    // A: its 503 marks the endpoint down; A waits, and is let through as the probe.
    let a = spawn_call(&service, get("a.test"));
    let (_, a_answer) = next_call(&mut calls, SEC).await.expect("A's first attempt");
    a_answer.send(Ok(status(503))).unwrap();
    let (_, probe_answer) = next_call(&mut calls, 5 * SEC).await.expect("A's probe");
    // B: blocked at the head of the queue behind the probe in flight.
    let b = spawn_call(&service, get("a.test"));
    settle().await;
    let stats = layer.pacing_stats(Some(&a_test)).unwrap();
    assert_eq!((stats.mode, stats.waiting), (PacingMode::Probing, 1));

    // C's answer pauses the endpoint for 1 s; C waits behind B.
    c_answer
        .send(Ok(with_header(503, "retry-after", "1")))
        .unwrap();
    settle().await;
    let stats = layer.pacing_stats(Some(&a_test)).unwrap();
    assert_eq!((stats.mode, stats.waiting), (PacingMode::Paused, 2));
    probe_answer.send(Ok(status(200))).unwrap();
    assert_eq!(a.await.unwrap().unwrap().status(), 200);

    // The pause ends after about 1.1 s: B, then C, are released by the ramp.
    for name in ["B", "C"] {
        let released = next_call(&mut calls, 5 * SEC).await;
        let stats = layer.pacing_stats(Some(&a_test)).unwrap();
        let (_, answer) = released
            .unwrap_or_else(|| panic!("{name} not let through 5 s after a 1 s pause: {stats:?}"));
        answer.send(Ok(status(200))).unwrap();
    }
    assert_eq!(b.await.unwrap().unwrap().status(), 200);
    assert_eq!(c.await.unwrap().unwrap().status(), 200);
}

/// A success that used up its quota pauses a.test for 1 s. An hour later nothing has been sent
/// to a.test: its mode has moved on all the same (the pause is over, and with nobody waiting the
/// endpoint is open), so with `max_endpoints(1)` it can be forgotten and b.test, which then
/// fails, is paced.
#[tokio::test(start_paused = true)]
async fn a_pause_long_over_reads_as_over_and_its_endpoint_can_be_forgotten() {
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(3)
        .pacing(
            Pacing::builder()
                .outage_after(1)
                .max_endpoints(1)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let pending = spawn_call(&service, get("a.test"));
    let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
    let quota = http::Response::builder()
        .status(200)
        .header("x-ratelimit-remaining", "0")
        .header("x-ratelimit-reset", "1")
        .body(String::new())
        .unwrap();
    answer.send(Ok(quota)).unwrap();
    let _ = pending.await.unwrap().unwrap();
    assert_eq!(layer.stats().quota_paused, 1);
    let a_test = authority("a.test");
    assert_eq!(
        layer.pacing_stats(Some(&a_test)).unwrap().mode,
        PacingMode::Paused
    );
    tokio::time::sleep(Duration::from_secs(3600)).await;

    let a = layer.pacing_stats(Some(&a_test)).unwrap();
    assert_eq!(a.mode, PacingMode::Open, "an hour after a 1 s pause: {a:?}");
    let pending = spawn_call(&service, get("b.test"));
    let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
    answer.send(Ok(status(503))).unwrap();
    settle().await;
    let b = layer.pacing_stats(Some(&authority("b.test")));
    assert_eq!(
        b.map(|b| b.mode),
        Some(PacingMode::Probing),
        "a.test, open and unused, is forgotten for b.test"
    );
    assert!(layer.pacing_stats(Some(&a_test)).is_none());
    drop(pending);
}

/// A half-open breaker refuses every call but its one probe, with a `CircuitOpen` whose wait is
/// zero ("the next call may probe"). With pacing the refused request waits (the pacer looks again
/// at its probe rate) instead of being let through and refused again at once until its attempts
/// are gone; once the breaker's probe succeeds, it is delivered.
#[tokio::test(start_paused = true)]
async fn a_refusal_by_a_half_open_breaker_waits_under_pacing_instead_of_spending_every_attempt() {
    use tower_http_retry::report::ReportSlot;
    use tower_http_retry::CircuitBreakerLayer;
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(1)
        .without_failure_ratio()
        .open_duration(SEC)
        .open_jitter(0.0)
        .random_source(RandomSource::seeded(1))
        .build()
        .unwrap();
    let (inner, mut calls) = scripted();
    let guarded = breaker.layer(inner);
    let layer = builder()
        .max_attempts(5)
        .pacing(Pacing::new())
        .build()
        .unwrap();
    let service = layer.layer(guarded.clone());

    // Another client of the same breaker trips it, and, a second later, probes.
    let trip = spawn_call(&guarded, get("a.test"));
    let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
    answer.send(Ok(status(503))).unwrap();
    let _ = trip.await.unwrap();
    tokio::time::sleep(SEC).await;
    let probe = spawn_call(&guarded, get("a.test"));
    let (_, probe_answer) = next_call(&mut calls, SEC).await.expect("the probe");

    // A paced request while the probe is in flight.
    let slot = ReportSlot::new();
    let mut request = get("a.test");
    request.extensions_mut().insert(slot.clone());
    let start = Instant::now();
    let mut paced = spawn_call(&service, request);
    if let Ok(result) = tokio::time::timeout(200 * MS, &mut paced).await {
        let report = slot.take().unwrap();
        panic!(
            "refused by a half-open breaker, the request stopped after {:?} ({result:?}): \
             {report:?}",
            start.elapsed()
        );
    }
    probe_answer.send(Ok(status(200))).unwrap();
    assert_eq!(probe.await.unwrap().unwrap().status(), 200);
    let (_, answer) = next_call(&mut calls, 5 * SEC)
        .await
        .expect("the paced request is sent once the breaker closed");
    answer.send(Ok(status(200))).unwrap();
    let response = paced.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert!(report(&response).attempts < 5, "{:?}", report(&response));
}

/// A POST without a key refused by an open breaker never reached the server: it stops with
/// `CircuitOpen` (not final, with when to try again) whether pacing is on or not, never as
/// `NotIdempotent`, which would tell a durable queue to dead-letter it.
#[tokio::test(start_paused = true)]
async fn a_post_refused_by_an_open_breaker_stops_as_circuit_open_with_or_without_pacing() {
    use tower_http_retry::report::ReportSlot;
    use tower_http_retry::CircuitBreakerLayer;
    for pacing in [false, true] {
        let breaker = CircuitBreakerLayer::builder()
            .consecutive_failures(1)
            .without_failure_ratio()
            .open_duration(10 * SEC)
            .open_jitter(0.0)
            .random_source(RandomSource::seeded(1))
            .build()
            .unwrap();
        let (inner, mut calls) = scripted();
        let guarded = breaker.layer(inner);
        let mut retry = builder().max_attempts(3);
        if pacing {
            retry = retry.pacing(Pacing::new());
        }
        let layer = retry.build().unwrap();
        let service = layer.layer(guarded.clone());
        let trip = spawn_call(&guarded, get("a.test"));
        let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
        answer.send(Ok(status(503))).unwrap();
        let _ = trip.await.unwrap();

        let slot = ReportSlot::new();
        let mut request = http::Request::post("http://a.test/orders")
            .body("{}".to_owned())
            .unwrap();
        request.extensions_mut().insert(slot.clone());
        let result = tokio::time::timeout(SEC, spawn_call(&service, request))
            .await
            .expect("returns at once")
            .unwrap();
        assert!(result.is_err(), "refused by the breaker");
        let report = slot.take().unwrap();
        assert_eq!(report.stop, StopReason::CircuitOpen, "pacing {pacing}");
        assert!(!report.stop.is_final());
        assert!(report.resend_after.is_some(), "pacing {pacing}: {report:?}");
    }
}

/// With `max_attempts(1)` the session keeps no copy of the request; the outcomes are booked to
/// the request's own endpoint all the same, not to the endpoint of requests without an
/// authority: a.test, which failed, is paced, and a request with a relative URI is not.
#[tokio::test(start_paused = true)]
async fn outcomes_of_a_request_sent_without_a_kept_copy_are_booked_to_its_authority() {
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(1)
        .pacing(Pacing::builder().outage_after(2).build().unwrap())
        .build()
        .unwrap();
    let service = layer.layer(inner);
    for _ in 0..3 {
        let pending = spawn_call(&service, get("a.test"));
        let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
        answer.send(Ok(status(503))).unwrap();
        let _ = pending.await.unwrap().unwrap();
    }
    let a = layer.pacing_stats(Some(&authority("a.test")));
    let none = layer.pacing_stats(None);
    assert_eq!(
        a.map(|a| a.mode),
        Some(PacingMode::Probing),
        "a.test failed 3 times with outage_after(2): a.test {a:?}, no authority {none:?}"
    );
    assert!(
        none.is_none_or(|none| none.mode == PacingMode::Open),
        "{none:?}"
    );
    // A request with a relative URI never failed: it is sent at once.
    let relative = http::Request::get("/local").body(String::new()).unwrap();
    let pending = spawn_call(&service, relative);
    let (_, answer) = next_call(&mut calls, 10 * MS).await.expect("sent at once");
    answer.send(Ok(status(200))).unwrap();
    assert_eq!(pending.await.unwrap().unwrap().status(), 200);
}

/// S sleeps its backoff while the endpoint is open; T's 503 marks it down and T takes the
/// queue's only place. When S wakes it finds the queue full: it is not sent to the endpoint that
/// is down, ahead of any probe, but returns its last answer with `StopReason::Deferred` and a
/// time to try again, counted as deferred by the pacer and by the layer alike.
#[tokio::test(start_paused = true)]
async fn a_retry_that_finds_the_queue_full_after_its_sleep_is_deferred_not_sent() {
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(5)
        .pacing(
            Pacing::builder()
                .outage_after(2)
                .max_waiters(1)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let a_test = authority("a.test");
    let s = spawn_call(&service, get("a.test"));
    let t = spawn_call(&service, get("a.test"));
    let (_, s_answer) = next_call(&mut calls, SEC).await.unwrap();
    let (_, t_answer) = next_call(&mut calls, SEC).await.unwrap();
    s_answer.send(Ok(status(503))).unwrap(); // S sleeps 100 ms; the endpoint is still open
    settle().await;
    t_answer.send(Ok(status(503))).unwrap(); // the endpoint is down; T waits in the queue
    settle().await;
    let stats = layer.pacing_stats(Some(&a_test)).unwrap();
    assert_eq!((stats.mode, stats.waiting), (PacingMode::Probing, 1));

    // The first probe cannot go before 250 ms (probe interval 500 ms, jittered by half).
    let s = tokio::time::timeout(200 * MS, s)
        .await
        .expect("S returns once its sleep is over")
        .unwrap()
        .unwrap();
    assert_eq!(s.status(), 503, "its last answer");
    let s_report = report(&s);
    assert_eq!(s_report.stop, StopReason::Deferred, "{s_report:?}");
    assert!(s_report.resend_after.is_some(), "{s_report:?}");
    assert_eq!(s_report.attempts, 1);
    let early = next_call(&mut calls, 40 * MS).await;
    assert!(
        early.is_none(),
        "an attempt reached the endpoint that is down"
    );
    assert_eq!(layer.pacing_stats(Some(&a_test)).unwrap().deferred, 1);
    assert_eq!(layer.stats().stopped(StopReason::Deferred), 1);
    drop(t);
}

/// A gRPC server that is down or out of quota answers UNAVAILABLE, or RESOURCE_EXHAUSTED with a
/// pushback (transient), in a Trailers-Only response (HTTP 200 with `grpc-status`): the
/// classifier calls it congestion, so the endpoint is paced as an HTTP one answering 503 is.
#[tokio::test(start_paused = true)]
async fn grpc_unavailable_and_resource_exhausted_count_as_congestion() {
    for (code, pushback) in [("14", None), ("8", Some("100"))] {
        let (inner, mut calls) = scripted();
        let layer = tower_http_retry_grpc::builder()
            .max_attempts(1)
            .without_budget()
            .pacing(Pacing::builder().outage_after(2).build().unwrap())
            .build()
            .unwrap();
        let service = layer.layer(inner);
        for _ in 0..2 {
            let call = http::Request::post("http://grpc.test/pkg.Service/Method")
                .header("content-type", "application/grpc")
                .body(String::new())
                .unwrap();
            let pending = spawn_call(&service, call);
            let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
            let mut response = with_header(200, "grpc-status", code);
            if let Some(pushback) = pushback {
                let value = http::HeaderValue::from_static(pushback);
                response
                    .headers_mut()
                    .insert("grpc-retry-pushback-ms", value);
            }
            answer.send(Ok(response)).unwrap();
            let _ = pending.await.unwrap().unwrap();
        }
        let stats = layer.pacing_stats(Some(&authority("grpc.test")));
        assert_eq!(
            stats.map(|s| s.mode),
            Some(PacingMode::Probing),
            "two calls ending with grpc-status {code} and outage_after(2): {stats:?}"
        );
    }
}

/// What docs/pacing.md and `Pacing` say of a breaker's hold with pacing: it does not release the
/// requests waiting in the endpoint's queue (they wait for the breaker to let a probe through);
/// a shutdown does, each with its last answer.
#[tokio::test(start_paused = true)]
async fn a_breaker_hold_keeps_paced_waiters_waiting_and_a_shutdown_releases_them() {
    let signal = AbortSignal::new();
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(5)
        .abort_signal(signal.clone())
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let mut waiter = spawn_call(&service, get("a.test"));
    let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
    answer.send(Ok(status(503))).unwrap();
    settle().await;
    let a = authority("a.test");
    assert_eq!(layer.pacing_stats(Some(&a)).unwrap().waiting, 1);
    signal.hold_authority_until(Some(&a), Instant::now() + 10 * SEC);
    assert!(
        tokio::time::timeout(10 * MS, &mut waiter).await.is_err(),
        "the hold released the waiter"
    );
    assert_eq!(layer.pacing_stats(Some(&a)).unwrap().waiting, 1);
    signal.shutdown();
    let response = tokio::time::timeout(10 * MS, waiter)
        .await
        .expect("released by the shutdown")
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(report(&response).stop, StopReason::Aborted);
}

/// Every request the pacer turns away is one `StopReason::Deferred` in the reports and in the
/// layer's counters, and one `deferred` in `pacing_stats`: a request whose deadline ends in the
/// queue is counted, and a first attempt that finds the queue full (and is sent, having no
/// answer to return) is not.
#[tokio::test(start_paused = true)]
async fn pacing_stats_count_exactly_the_requests_stopped_as_deferred() {
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(5)
        .deadline(2 * SEC)
        .pacing(
            Pacing::builder()
                .outage_after(1)
                .max_waiters(1)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let a_test = authority("a.test");
    // A's 503 marks the endpoint down; A takes the queue's only place.
    let a = spawn_call(&service, get("a.test"));
    let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
    answer.send(Ok(status(503))).unwrap();
    settle().await;
    // B, a first attempt, finds the queue full: it is sent at once, not deferred. Its 503
    // finds the queue still full: B is deferred.
    let b = spawn_call(&service, get("a.test"));
    let (_, b_answer) = next_call(&mut calls, 10 * MS).await.expect("B is sent");
    assert_eq!(layer.pacing_stats(Some(&a_test)).unwrap().deferred, 0);
    b_answer.send(Ok(status(503))).unwrap();
    let b = tokio::time::timeout(10 * MS, b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(report(&b).stop, StopReason::Deferred);
    assert_eq!(layer.pacing_stats(Some(&a_test)).unwrap().deferred, 1);
    // The endpoint stays down: A's probes fail until its deadline, which ends its wait.
    let responder = tokio::spawn(async move {
        while let Some((_, answer)) = calls.recv().await {
            let _ = answer.send(Ok(status(503)));
        }
    });
    let a = tokio::time::timeout(5 * SEC, a)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(report(&a).stop, StopReason::Deferred, "{:?}", report(&a));
    responder.abort();
    assert_eq!(layer.stats().stopped(StopReason::Deferred), 2);
    assert_eq!(layer.pacing_stats(Some(&a_test)).unwrap().deferred, 2);
}

/// Found by the model test: a request made after a shutdown, to an endpoint that is down, does
/// not wait in its queue (nothing would release it early); it is sent at once, as a
/// first-attempt delay is skipped after a shutdown.
#[tokio::test(start_paused = true)]
async fn a_request_made_after_a_shutdown_does_not_wait_in_the_queue() {
    let signal = AbortSignal::new();
    let (inner, mut calls) = scripted();
    let layer = builder()
        .max_attempts(5)
        .abort_signal(signal.clone())
        .pacing(Pacing::builder().outage_after(1).build().unwrap())
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let a = spawn_call(&service, get("a.test"));
    let (_, answer) = next_call(&mut calls, SEC).await.unwrap();
    answer.send(Ok(status(503))).unwrap();
    settle().await;
    signal.shutdown();
    assert_eq!(a.await.unwrap().unwrap().status(), 503);
    let b = spawn_call(&service, get("a.test"));
    let (_, answer) = next_call(&mut calls, MS)
        .await
        .expect("sent at once, not queued");
    answer.send(Ok(status(503))).unwrap();
    let b = b.await.unwrap().unwrap();
    assert_eq!(report(&b).stop, StopReason::Aborted);
}
