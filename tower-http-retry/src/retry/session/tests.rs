//! The decision ladder on its own: no runtime timers, no inner service, `now` passed in.

use super::*;
use crate::retry::hand_back::{SendAnyway, Sorting};
use crate::retry::nested::retrying;
use crate::retry::RandomSource;
use crate::retry::{Backoff, Jitter, RetryBudget, RetryLayer, RetryLayerBuilder, TokenBucket};
use crate::{AbortSignal, HttpClassifier};
use std::convert::Infallible;

pub(crate) type Req = http::Request<String>;
pub(crate) type Res = http::Response<String>;
pub(crate) const MS: Duration = Duration::from_millis(1);

/// No jitter (100 ms, 200 ms, ...), seeded, no budget.
pub(crate) fn builder() -> RetryLayerBuilder {
    RetryLayer::builder()
        .backoff(Backoff::new(
            Jitter::None,
            100 * MS,
            Duration::from_secs(10),
        ))
        .random_source(RandomSource::seeded(1))
        .without_budget()
}

/// The layer's classifier `C`, as a session reads it (sending what it does not send).
pub(crate) type Layered<C> = Sorting<C, SendAnyway>;

pub(crate) fn config<C, H>(builder: RetryLayerBuilder<C, H>) -> Arc<Config<Sorting<C, H>>> {
    let RetryLayerBuilder {
        classifier,
        hand_back,
        settings,
    } = builder;
    Arc::new(Config::new(Sorting::new(classifier, hand_back), settings).unwrap())
}

pub(crate) fn request(method: Method) -> Req {
    http::Request::builder()
        .method(method)
        .uri("http://a.test/")
        .body(String::new())
        .unwrap()
}

pub(crate) fn response(code: u16) -> Result<Res, Infallible> {
    Ok(http::Response::builder()
        .status(code)
        .body(String::new())
        .unwrap())
}

/// A session whose first attempt was just sent.
pub(crate) fn sent<C>(config: &Arc<Config<C>>, method: Method) -> Session<Req, C> {
    let mut request = request(method);
    let mut session = Session::new(Arc::clone(config), &mut request);
    let mut service = tower::service_fn(|_: Req| async { response(200) });
    drop(session.send_request(request, &mut service));
    session
}

pub(crate) fn stop(next: Next) -> StopReason {
    match next {
        Next::Stop(reason) => reason,
        Next::Sleep { delay, .. } => panic!("expected a stop, got a sleep of {delay:?}"),
        Next::Queue { .. } => panic!("expected a stop, got a wait in the queue"),
    }
}

pub(crate) fn sleep(next: Next) -> Duration {
    match next {
        Next::Sleep { delay, .. } => delay,
        Next::Stop(reason) => panic!("expected a sleep, got a stop: {reason}"),
        Next::Queue { .. } => panic!("expected a sleep, got a wait in the queue"),
    }
}

#[test]
fn success_and_permanent_outcomes_stop_at_once() {
    let config = config(builder());
    let now = Instant::now();
    let mut session = sent(&config, Method::GET);
    assert_eq!(
        stop(session.answer(&response(200), || now)),
        StopReason::Success
    );
    let mut session = sent(&config, Method::GET);
    assert_eq!(
        stop(session.answer(&response(404), || now)),
        StopReason::Permanent
    );
}

#[test]
fn a_first_try_success_ends_before_the_ladder_as_the_ladder_would_end_it() {
    let bucket = Arc::new(TokenBucket::default());
    assert!(bucket.withdraw());
    let before = bucket.available();
    let config = config(builder().budget(Arc::clone(&bucket)));
    let mut session = sent(&config, Method::GET);
    let ok = response(200);
    assert!(session.first_try_success(&ok, session.classify(&ok)));
    assert_eq!(config.counters.snapshot().stopped(StopReason::Success), 1);
    assert!(bucket.available() > before, "the budget earned the deposit");
    // Anything else goes to the ladder: a failure, or a success with pacing.
    let mut session = sent(&config, Method::GET);
    let failed = response(503);
    assert!(!session.first_try_success(&failed, session.classify(&failed)));
    let paced = self::config(builder().pacing(crate::Pacing::new()));
    let mut session = sent(&paced, Method::GET);
    assert!(!session.first_try_success(&ok, session.classify(&ok)));
    assert_eq!(config.counters.snapshot().stopped(StopReason::Success), 1);
}

#[test]
fn a_transient_outcome_of_a_get_sleeps_the_backoff_delay() {
    let config = config(builder());
    let mut session = sent(&config, Method::GET);
    assert_eq!(
        sleep(session.answer(&response(503), Instant::now)),
        100 * MS
    );
}

#[test]
fn a_post_without_a_key_is_not_repeated() {
    let config = config(builder());
    let mut session = sent(&config, Method::POST);
    let next = session.answer(&response(503), Instant::now);
    assert_eq!(stop(next), StopReason::NotIdempotent);
}

#[test]
fn the_last_attempt_is_not_followed_by_a_sleep() {
    let config = config(builder().max_attempts(1));
    let mut session = sent(&config, Method::GET);
    let next = session.answer(&response(503), Instant::now);
    assert_eq!(stop(next), StopReason::AttemptsExhausted);
}

#[test]
fn a_shut_down_signal_stops_before_a_delay_is_drawn() {
    let abort = AbortSignal::new();
    let config = config(builder().abort_signal(abort.clone()));
    abort.shutdown();
    let mut session = sent(&config, Method::GET);
    assert_eq!(
        stop(session.answer(&response(503), Instant::now)),
        StopReason::Aborted
    );
    assert!(session.delays().is_empty());
}

#[test]
fn a_valid_retry_after_replaces_the_backoff_delay() {
    let config = config(builder().hint_policy(crate::hint::HintPolicy::honored().jitter(0.0)));
    let mut session = sent(&config, Method::GET);
    let mut hinted = response(503);
    if let Ok(response) = &mut hinted {
        let value = http::HeaderValue::from_static("2");
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, value);
    }
    assert_eq!(sleep(session.answer(&hinted, Instant::now)), 2 * 1000 * MS);
    assert_eq!(session.delays()[0].source, DelaySource::RetryAfter);
}

#[test]
fn the_deadline_is_measured_at_the_now_it_is_given() {
    let config = config(builder().deadline(Duration::from_secs(1)));
    let mut session = sent(&config, Method::GET);
    let started = session.started().unwrap();
    // 900 ms in, the 100 ms delay ends exactly at the deadline: allowed.
    assert_eq!(
        sleep(session.answer(&response(503), || started + 900 * MS)),
        100 * MS
    );
    let mut session = sent(&config, Method::GET);
    let started = session.started().unwrap();
    let next = session.answer(&response(503), || started + 901 * MS);
    assert_eq!(stop(next), StopReason::Deadline);
    assert!(!session.past_deadline(started + 1000 * MS));
    assert!(session.past_deadline(started + 1001 * MS));
}

#[test]
fn the_deadline_is_asked_before_the_budget() {
    let bucket = Arc::new(TokenBucket::default());
    let config = config(builder().deadline(MS).budget(Arc::clone(&bucket)));
    let mut session = sent(&config, Method::GET);
    let before = bucket.available();
    let started = session.started().unwrap();
    assert_eq!(
        stop(session.answer(&response(503), || started)),
        StopReason::Deadline
    );
    assert_eq!(
        bucket.available(),
        before,
        "no token taken for a sleep not started"
    );
}

#[test]
fn an_empty_budget_stops_the_retry() {
    let empty = TokenBucket::builder()
        .capacity(1.0)
        .deposit_per_success(0.0)
        .refill_per_second(0.0)
        .build()
        .unwrap();
    assert!(empty.withdraw());
    let config = config(builder().budget(empty));
    let mut session = sent(&config, Method::GET);
    let next = session.answer(&response(503), Instant::now);
    assert_eq!(stop(next), StopReason::BudgetEmpty);
}

#[test]
fn the_classifier_sees_the_method() {
    #[derive(Debug)]
    struct PutConflicts;
    impl Classify<Res, Infallible> for PutConflicts {
        fn classify_response(&self, response: &Res) -> Outcome {
            HttpClassifier::new().classify_status(response.status())
        }
        fn classify_error(&self, error: &Infallible) -> Outcome {
            match *error {}
        }
        fn classify(&self, method: &Method, result: &Result<Res, Infallible>) -> Outcome {
            match result {
                Ok(r) if method == Method::PUT && r.status() == 409 => Outcome::Transient,
                Ok(r) => self.classify_response(r),
                Err(e) => self.classify_error(e),
            }
        }
    }
    let config = config(builder().classifier(PutConflicts));
    let mut put = sent(&config, Method::PUT);
    assert_eq!(sleep(put.answer(&response(409), Instant::now)), 100 * MS);
    let mut delete = sent(&config, Method::DELETE);
    let next = delete.answer(&response(409), Instant::now);
    assert_eq!(stop(next), StopReason::Permanent);
}

/// 421 stands for a refused request, 599 for a failed connect, 503 stays transient.
pub(crate) fn empty_bucket() -> TokenBucket {
    let bucket = TokenBucket::builder()
        .capacity(1.0)
        .deposit_per_success(0.0)
        .refill_per_second(0.0)
        .build()
        .unwrap();
    assert!(bucket.withdraw());
    bucket
}

#[test]
fn a_stop_that_is_not_final_says_when_to_try_again() {
    let config = config(builder().max_attempts(1));
    let mut session = sent(&config, Method::GET);
    let next = session.answer(&response(503), Instant::now);
    assert_eq!(stop(next), StopReason::AttemptsExhausted);
    let report = session.report(StopReason::AttemptsExhausted);
    assert_eq!(report.resend_after, Some(100 * MS), "the next backoff draw");
    assert!(report.resend_at.is_some());

    let config = self::config(builder().deadline(MS));
    let mut session = sent(&config, Method::GET);
    let started = session.started().unwrap();
    assert_eq!(
        stop(session.answer(&response(503), || started)),
        StopReason::Deadline
    );
    assert_eq!(
        session.report(StopReason::Deadline).resend_after,
        Some(100 * MS)
    );
}

#[test]
fn a_final_stop_says_nothing_of_trying_again() {
    let config = config(builder());
    let mut session = sent(&config, Method::GET);
    assert_eq!(
        stop(session.answer(&response(404), Instant::now)),
        StopReason::Permanent
    );
    let report = session.report(StopReason::Permanent);
    assert_eq!((report.resend_after, report.resend_at), (None, None));
}

fn with_headers(code: u16, pairs: &[(&'static str, &'static str)]) -> Result<Res, Infallible> {
    let mut result = response(code);
    if let Ok(response) = &mut result {
        for (name, value) in pairs {
            let value = http::HeaderValue::from_static(value);
            response.headers_mut().append(*name, value);
        }
    }
    result
}

#[test]
fn a_rate_limit_reset_replaces_the_backoff_delay_like_retry_after() {
    let config = config(builder().hint_policy(crate::hint::HintPolicy::honored().jitter(0.0)));
    let mut session = sent(&config, Method::GET);
    let limited = with_headers(429, &[("retry-after-ms", "1500")]);
    assert_eq!(sleep(session.answer(&limited, Instant::now)), 1500 * MS);
    assert_eq!(session.delays()[0].source, DelaySource::RetryAfter);
    assert_eq!(config.counters.snapshot().retry_after_seen, 1);
}

#[test]
fn a_reset_longer_than_the_clamp_is_clamped_like_retry_after() {
    let config = config(
        builder().hint_policy(
            crate::hint::HintPolicy::honored()
                .max_delay(Duration::from_secs(1))
                .jitter(0.0),
        ),
    );
    let mut session = sent(&config, Method::GET);
    let limited = with_headers(429, &[("ratelimit", "\"q\";r=0;t=3600")]);
    assert_eq!(sleep(session.answer(&limited, Instant::now)), 1000 * MS);
    assert_eq!(session.delays()[0].source, DelaySource::RetryAfterClamped);
}

#[test]
fn a_used_up_quota_makes_a_403_transient() {
    let config = config(builder().hint_policy(crate::hint::HintPolicy::honored().jitter(0.0)));
    let mut session = sent(&config, Method::GET);
    let forbidden = response(403);
    assert_eq!(
        stop(session.answer(&forbidden, Instant::now)),
        StopReason::Permanent
    );
    let mut session = sent(&config, Method::GET);
    let quota = with_headers(
        403,
        &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "7")],
    );
    // `7` in auto mode is a delta: seven seconds.
    assert_eq!(sleep(session.answer(&quota, Instant::now)), 7000 * MS);
}

#[test]
fn a_server_that_says_not_to_retry_is_obeyed() {
    let config = config(builder());
    for pairs in [
        &[("x-should-retry", "false")][..],
        &[("x-envoy-overloaded", "true")][..],
    ] {
        let mut session = sent(&config, Method::GET);
        let shed = with_headers(503, pairs);
        assert_eq!(
            stop(session.answer(&shed, Instant::now)),
            StopReason::StandDown
        );
    }
}

#[test]
fn a_stand_down_with_a_reset_says_when_to_try_again() {
    let config = config(builder());
    let mut session = sent(&config, Method::GET);
    let shed = with_headers(503, &[("x-should-retry", "false"), ("retry-after", "30")]);
    assert_eq!(
        stop(session.answer(&shed, Instant::now)),
        StopReason::StandDown
    );
    let report = session.report(StopReason::StandDown);
    assert_eq!(report.resend_after, Some(Duration::from_secs(30)));
}

#[test]
fn a_server_that_says_to_retry_overrides_the_status_and_the_method() {
    let config = config(builder());
    let mut session = sent(&config, Method::POST);
    let plain = response(500);
    assert_eq!(
        stop(session.answer(&plain, Instant::now)),
        StopReason::NotIdempotent
    );
    for code in [500, 400] {
        let mut session = sent(&config, Method::POST);
        let retry = with_headers(code, &[("x-should-retry", "true")]);
        assert_eq!(
            sleep(session.answer(&retry, Instant::now)),
            100 * MS,
            "{code}"
        );
    }
}

#[test]
fn markers_can_be_ignored() {
    let hints = crate::hint::ServerHints::new()
        .should_retry_header(None)
        .stand_down_headers([]);
    let config = config(builder().classifier(HttpClassifier::new().hints(hints)));
    let mut session = sent(&config, Method::GET);
    let shed = with_headers(
        503,
        &[("x-should-retry", "false"), ("x-envoy-overloaded", "1")],
    );
    assert_eq!(sleep(session.answer(&shed, Instant::now)), 100 * MS);
}

#[test]
fn without_hint_delays_ignores_the_reset_but_not_the_markers() {
    let config = config(builder().without_hint_delays());
    let mut session = sent(&config, Method::GET);
    let limited = with_headers(429, &[("retry-after-ms", "5000")]);
    assert_eq!(sleep(session.answer(&limited, Instant::now)), 100 * MS);
    let mut session = sent(&config, Method::GET);
    let shed = with_headers(503, &[("x-should-retry", "false")]);
    assert_eq!(
        stop(session.answer(&shed, Instant::now)),
        StopReason::StandDown
    );
}

#[test]
fn a_malformed_hint_is_counted_and_the_backoff_decides() {
    let config = config(builder());
    let mut session = sent(&config, Method::GET);
    let garbled = with_headers(503, &[("retry-after-ms", "soon")]);
    assert_eq!(sleep(session.answer(&garbled, Instant::now)), 100 * MS);
    assert_eq!(config.counters.snapshot().retry_after_malformed, 1);
}

#[test]
fn a_request_an_outer_layer_retries_is_sent_once() {
    let outer = config(builder());
    let inner = config(builder());
    let mut session = sent(&outer, Method::GET);
    assert_eq!(session.inner_layers_mark(), Some(true));
    let mut inner_session = retrying(Some(true), || sent(&inner, Method::GET));
    assert_eq!(inner_session.inner_layers_mark(), None);
    assert_eq!(
        stop(inner_session.answer(&response(503), Instant::now)),
        StopReason::Delegated
    );
    assert_eq!(
        sleep(session.answer(&response(503), Instant::now)),
        100 * MS
    );
}

#[test]
fn a_request_the_outer_layer_cannot_retry_is_retried_by_an_inner_layer_that_can() {
    // A default layer around a gRPC-style one: the POST is not the outer layer's to retry.
    let outer = config(builder());
    let inner = config(builder().idempotency(crate::retry::Idempotency::Any));
    let session = sent(&outer, Method::POST);
    assert_eq!(session.inner_layers_mark(), None);
    let mut inner_session = retrying(session.inner_layers_mark(), || sent(&inner, Method::POST));
    assert_eq!(
        sleep(inner_session.answer(&response(503), Instant::now)),
        100 * MS
    );
}

#[test]
fn an_independent_layer_retries_inside_another_and_lets_its_inner_layers_retry() {
    let independent = config(builder().nested_layers(crate::retry::NestedLayers::Independent));
    let inner = config(builder());
    let mut middle = retrying(Some(true), || sent(&independent, Method::GET));
    assert_eq!(middle.inner_layers_mark(), Some(false));
    assert_eq!(sleep(middle.answer(&response(503), Instant::now)), 100 * MS);
    let mut innermost = retrying(Some(true), || {
        retrying(middle.inner_layers_mark(), || sent(&inner, Method::GET))
    });
    assert_eq!(
        sleep(innermost.answer(&response(503), Instant::now)),
        100 * MS
    );
    assert!(!super::retried_outside());
}

#[test]
fn a_layer_that_cannot_retry_tells_inner_layers_nothing() {
    let once = config(builder().max_attempts(1));
    assert_eq!(sent(&once, Method::GET).inner_layers_mark(), None);
    assert!(!super::retried_outside());
}

// A request's own deadline, read and rewritten by an attempt hook (as the gRPC crate's
// `grpc-timeout` is).

/// Reads the request's own deadline from `x-deadline-ms` and rewrites it on each attempt to
/// what is left.
struct OwnDeadlineMs;

impl crate::retry::AttemptHook for OwnDeadlineMs {
    fn own_deadline(&self, headers: &http::HeaderMap) -> Option<Duration> {
        own_deadline_ms(headers)
    }

    fn stamp(&self, headers: &mut http::HeaderMap, _attempt: u32, own_left: Option<Duration>) {
        if let Some(left) = own_left {
            let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
            headers.insert("x-deadline-ms", http::HeaderValue::from(ms));
        }
    }
}

fn own_deadline_ms(headers: &http::HeaderMap) -> Option<Duration> {
    let ms = headers.get("x-deadline-ms")?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

/// A session (every method retryable, the hook on) whose first attempt, with its own deadline
/// of `deadline_ms`, was just sent to `service`.
fn sent_with_own_deadline<S: Service<Req>>(
    builder: RetryLayerBuilder,
    deadline_ms: u64,
    service: &mut S,
) -> Session<Req, Layered<HttpClassifier>> {
    let config = config(
        builder
            .attempt_hook(OwnDeadlineMs)
            .idempotency(crate::retry::Idempotency::Any),
    );
    let mut request = request(Method::POST);
    let deadline = http::HeaderValue::from(deadline_ms);
    request.headers_mut().insert("x-deadline-ms", deadline);
    let mut session = Session::new(config, &mut request);
    drop(session.send_request(request, service));
    session
}

#[test]
fn a_request_deadline_leaves_the_attempt_time_to_run() {
    let mut service = tower::service_fn(|_: Req| async { response(200) });
    let mut session = sent_with_own_deadline(builder(), 1000, &mut service);
    let started = session.started().unwrap();
    // A wait that ends exactly on the deadline would send a deadline of zero.
    let next = session.answer(&response(503), || started + 900 * MS);
    assert_eq!(stop(next), StopReason::Deadline);
    assert!(!session.past_deadline(started + 999 * MS));
    assert!(session.past_deadline(started + 1000 * MS));
}

#[test]
fn a_shorter_layer_deadline_bounds_the_waits_but_is_not_sent_as_the_request_deadline() {
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&sent);
    let mut service = tower::service_fn(move |request: Req| {
        let deadline = own_deadline_ms(request.headers());
        seen.lock().unwrap().push(deadline.unwrap());
        async { response(200) }
    });
    let layer_deadline = builder().deadline(Duration::from_secs(1));
    let mut session = sent_with_own_deadline(layer_deadline, 5000, &mut service);
    let started = session.started().unwrap();
    // The wait may end on the layer's deadline, as without a hook.
    assert_eq!(
        sleep(session.answer(&response(503), || started + 900 * MS)),
        100 * MS
    );
    // Each attempt carries the time left of the request's own 5 s, not the layer's 1 s.
    drop(session.send(&mut service));
    assert_eq!(sent.lock().unwrap().len(), 2);
    for deadline in sent.lock().unwrap().iter() {
        assert!(*deadline > Duration::from_secs(4), "{deadline:?}");
    }
}
