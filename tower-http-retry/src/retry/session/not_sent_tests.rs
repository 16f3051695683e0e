//! Requests that provably were not sent (refused, unconnected) and unknown errors: the free
//! resends of a refused request, their pauses, caps and costs, on the ladder alone.

use super::ladder::rotation_pause;
use super::tests::{builder, config, empty_bucket, response, sent, sleep, stop, Req, Res, MS};
use super::*;
use crate::classify::NotSent;
use crate::retry::RandomSource;
use crate::retry::RetryLayerBuilder;
use crate::{AbortSignal, HttpClassifier};
use std::convert::Infallible;

fn not_sent_builder() -> RetryLayerBuilder {
    let refused = Outcome::NotSent(NotSent::Refused);
    let unconnected = Outcome::NotSent(NotSent::Unconnected);
    builder().classifier(
        HttpClassifier::new()
            .status(http::StatusCode::MISDIRECTED_REQUEST, refused)
            .status(http::StatusCode::from_u16(599).unwrap(), unconnected),
    )
}

/// Sends the stored copy again, as the future does after a sleep.
fn resend<C>(session: &mut Session<Req, C>) {
    let mut service = tower::service_fn(|_: Req| async { response(200) });
    drop(session.send(&mut service));
}

#[test]
fn a_refused_post_without_a_key_is_resent_after_a_short_pause() {
    let config = config(not_sent_builder());
    let mut session = sent(&config, Method::POST);
    let pause = sleep(session.answer(&response(421), Instant::now));
    assert!((MS..=4 * MS).contains(&pause), "{pause:?}");
    assert_eq!(session.delays()[0].source, DelaySource::Refused);
    assert_eq!(config.counters.snapshot().rotation_resends, 1);
}

#[test]
fn an_unknown_error_is_counted_retried_when_idempotent_and_named_in_the_report() {
    let config = config(builder());
    let unknown = || Err::<Res, tower::BoxError>("a new kind of failure".into());
    let mut get = sent(&config, Method::GET);
    assert_eq!(sleep(get.answer(&unknown(), Instant::now)), 100 * MS);
    let mut post = sent(&config, Method::POST);
    assert_eq!(
        stop(post.answer(&unknown(), Instant::now)),
        StopReason::NotIdempotent
    );
    assert_eq!(config.counters.snapshot().unknown_errors, 2);
    let report = post.report(StopReason::NotIdempotent);
    assert_eq!(
        report.unknown_error.as_deref(),
        Some("a new kind of failure")
    );
    // A known error is neither counted nor named.
    let mut known = sent(&config, Method::GET);
    let reset: tower::BoxError = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
    sleep(known.answer(&Err::<Res, _>(reset), Instant::now));
    assert_eq!(config.counters.snapshot().unknown_errors, 2);
    assert_eq!(known.report(StopReason::Success).unknown_error, None);
}

#[test]
fn rotation_pauses_double_from_4_ms_to_50_ms_and_are_jittered() {
    let mut rng = RandomSource::seeded(3).stream();
    for resend in [0, 1, 2, 3, 5, 6, 7, 50, u32::MAX] {
        let high = (4 * MS * (1 << (resend.clamp(1, 16) - 1))).min(50 * MS);
        let pauses: Vec<_> = (0..64).map(|_| rotation_pause(resend, &mut rng)).collect();
        assert!(
            pauses.iter().all(|p| (high / 4..=high).contains(p)),
            "resend {resend}: {pauses:?}"
        );
        assert!(pauses.iter().any(|p| *p != pauses[0]), "jittered");
    }
}

#[test]
fn a_refused_resend_that_would_pass_the_deadline_stops() {
    let config = config(not_sent_builder().deadline(10 * MS));
    let mut session = sent(&config, Method::GET);
    let started = session.started().unwrap();
    let next = session.answer(&response(421), || started + 10 * MS);
    assert_eq!(stop(next), StopReason::Deadline);
    assert_eq!(config.counters.snapshot().rotation_resends, 0);
}

#[test]
fn continuous_rotation_is_resent_up_to_the_generous_default_cap() {
    let config = config(not_sent_builder().max_attempts(2));
    let mut session = sent(&config, Method::POST);
    for _ in 0..200 {
        resend_after(&mut session, 421);
    }
    let next = session.answer(&response(421), Instant::now);
    assert_eq!(stop(next), StopReason::RefusedTooOften);
    assert_eq!(session.attempts(), 201, "the first attempt and 200 resends");
    assert_eq!(config.counters.snapshot().rotation_resends, 200);
}

#[test]
fn an_unconnected_post_without_a_key_is_retried_after_the_backoff_delay() {
    let config = config(not_sent_builder());
    let mut session = sent(&config, Method::POST);
    assert_eq!(
        sleep(session.answer(&response(599), Instant::now)),
        100 * MS
    );
    assert_eq!(session.delays()[0].source, DelaySource::Backoff);
}

#[test]
fn a_transient_post_without_a_key_is_still_not_repeated() {
    let config = config(not_sent_builder());
    let mut session = sent(&config, Method::POST);
    resend_after(&mut session, 421);
    let next = session.answer(&response(503), Instant::now);
    assert_eq!(stop(next), StopReason::NotIdempotent);
}

/// Decides on `status` (expecting a sleep) and sends the next attempt.
fn resend_after<C: Classify<Res, Infallible>>(session: &mut Session<Req, C>, status: u16) {
    sleep(session.answer(&response(status), Instant::now));
    resend(session);
}

#[test]
fn refused_resends_spend_no_attempt() {
    let config = config(not_sent_builder().max_attempts(2));
    let mut session = sent(&config, Method::GET);
    resend_after(&mut session, 421);
    resend_after(&mut session, 421);
    // Three sent, one counted: the retry left gets the first backoff delay.
    assert_eq!(session.attempts(), 3);
    assert_eq!(
        sleep(session.answer(&response(503), Instant::now)),
        100 * MS
    );
    resend(&mut session);
    let next = session.answer(&response(503), Instant::now);
    assert_eq!(stop(next), StopReason::AttemptsExhausted);
}

#[test]
fn refused_resends_take_no_budget_token() {
    let config = config(not_sent_builder().budget(empty_bucket()));
    let mut session = sent(&config, Method::GET);
    match session.answer(&response(421), Instant::now) {
        Next::Sleep { delay, token, .. } => {
            assert!(delay <= 4 * MS);
            assert!(token.is_none());
        }
        Next::Stop(reason) => panic!("expected a resend, got a stop: {reason}"),
        Next::Queue { .. } => panic!("expected a resend, got a wait in the queue"),
    }
    assert_eq!(config.counters.snapshot().budget_denied, 0);
}

#[test]
fn refused_resends_stop_at_the_cap() {
    let config = config(not_sent_builder().max_refused_retries(2));
    let mut session = sent(&config, Method::POST);
    resend_after(&mut session, 421);
    resend_after(&mut session, 421);
    let next = session.answer(&response(421), Instant::now);
    assert_eq!(stop(next), StopReason::RefusedTooOften);
    assert_eq!(session.attempts(), 3);
}

#[test]
fn refused_resends_keep_the_backoff_where_it_was() {
    let config = config(not_sent_builder());
    let mut session = sent(&config, Method::GET);
    resend_after(&mut session, 503); // 100 ms
    resend_after(&mut session, 421); // a short pause, not a backoff delay
    assert_eq!(
        sleep(session.answer(&response(503), Instant::now)),
        200 * MS,
        "the second backoff delay, not the third"
    );
}

#[test]
fn unconnected_retries_count_as_attempts() {
    let config = config(not_sent_builder().max_attempts(2));
    let mut session = sent(&config, Method::POST);
    resend_after(&mut session, 599);
    let next = session.answer(&response(599), Instant::now);
    assert_eq!(stop(next), StopReason::AttemptsExhausted);
}

#[test]
fn unconnected_retries_take_a_budget_token() {
    let config = config(not_sent_builder().budget(empty_bucket()));
    let mut session = sent(&config, Method::POST);
    let next = session.answer(&response(599), Instant::now);
    assert_eq!(stop(next), StopReason::BudgetEmpty);
}

#[test]
fn one_max_attempt_turns_refused_resends_off_too() {
    let config = config(not_sent_builder().max_attempts(1));
    let mut session = sent(&config, Method::GET);
    let next = session.answer(&response(421), Instant::now);
    assert_eq!(stop(next), StopReason::AttemptsExhausted);
}

#[test]
fn a_shut_down_signal_stops_a_refused_resend() {
    let abort = AbortSignal::new();
    let config = config(not_sent_builder().abort_signal(abort.clone()));
    abort.shutdown();
    let mut session = sent(&config, Method::POST);
    let next = session.answer(&response(421), Instant::now);
    assert_eq!(stop(next), StopReason::Aborted);
}

#[test]
fn zero_max_refused_retries_turns_refused_resends_off() {
    let config = config(not_sent_builder().max_refused_retries(0));
    let mut session = sent(&config, Method::GET);
    let next = session.answer(&response(421), Instant::now);
    assert_eq!(stop(next), StopReason::RefusedTooOften);
}

#[test]
fn a_too_early_post_without_a_key_is_resent_once_for_free_and_a_second_425_stops_it() {
    // An empty budget: the resend spends no token (it would stop as `BudgetEmpty` otherwise).
    let config = config(builder().budget(empty_bucket()));
    assert_eq!(
        HttpClassifier::new().classify_status(http::StatusCode::TOO_EARLY),
        Outcome::NotSent(NotSent::TooEarly)
    );
    let mut session = sent(&config, Method::POST);
    let pause = sleep(session.answer(&response(425), Instant::now));
    assert!((MS..=4 * MS).contains(&pause), "{pause:?}");
    assert_eq!(session.delays()[0].source, DelaySource::Refused);
    resend(&mut session);
    assert_eq!(
        stop(session.answer(&response(425), Instant::now)),
        StopReason::RefusedTooOften
    );
    // Only the first attempt counted against `max_attempts` (3): the resend was free, and the
    // stop is the 425's own cap, not the attempts'.
    assert_eq!(session.counted(), 1);
}

#[test]
fn a_425_after_other_free_resends_is_still_resent_once() {
    let config = config(not_sent_builder());
    let mut session = sent(&config, Method::POST);
    sleep(session.answer(&response(421), Instant::now));
    resend(&mut session);
    sleep(session.answer(&response(425), Instant::now));
    resend(&mut session);
    sleep(session.answer(&response(421), Instant::now));
    resend(&mut session);
    assert_eq!(
        stop(session.answer(&response(425), Instant::now)),
        StopReason::RefusedTooOften
    );
}
