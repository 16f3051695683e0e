//! A rotation without proof ([`Signals::rotation`](crate::classify::Signals::rotation)): the ladder resends it as rotation when
//! the request may be repeated, and stops it otherwise; the pacer hears nothing of it.

use super::tests::{builder, config, request, sleep, stop, Layered, Req, Res, MS};
use super::*;
use crate::retry::{Idempotency, RetryLayerBuilder};
use crate::HttpClassifier;
use std::io;

/// The default table, and every `io::ErrorKind::Other` error is the server rotating its
/// connection without proof that the request was not processed (a `GOAWAY` through hyper).
#[derive(Clone, Debug)]
struct Rotations;

impl Classify<Res, io::Error> for Rotations {
    fn classify_response(&self, response: &Res) -> Outcome {
        HttpClassifier::new().classify_status(response.status())
    }
    fn classify_error(&self, error: &io::Error) -> Outcome {
        HttpClassifier::new().classify_error_chain(error)
    }
    fn signals(
        &self,
        result: &Result<Res, io::Error>,
        ask: &crate::classify::Ask<'_>,
    ) -> crate::classify::Signals {
        let mut signals = crate::classify::default_signals(result, ask);
        signals.rotation = matches!(result, Err(error) if error.kind() == io::ErrorKind::Other);
        signals
    }
}

fn rotations(builder: RetryLayerBuilder) -> Arc<Config<Layered<Rotations>>> {
    config(builder.classifier(Rotations))
}

fn rotated() -> Result<Res, io::Error> {
    Err(io::Error::other("GOAWAY"))
}

/// A session whose first attempt of `request` was just sent.
fn sent(
    config: &Arc<Config<Layered<Rotations>>>,
    mut request: Req,
) -> Session<Req, Layered<Rotations>> {
    let mut session = Session::new(Arc::clone(config), &mut request);
    let mut service = tower::service_fn(|_: Req| async { rotated() });
    drop(session.send_request(request, &mut service));
    session
}

fn keyed(method: Method) -> Req {
    let mut request = request(method);
    let key = http::HeaderValue::from_static("order-17");
    request.headers_mut().insert(Idempotency::KEY_HEADER, key);
    request
}

#[test]
fn a_rotation_of_a_get_is_resent_as_rotation_without_an_attempt_or_a_token() {
    let config = rotations(
        builder()
            .max_attempts(2)
            .budget(super::tests::empty_bucket()),
    );
    let mut session = sent(&config, request(Method::GET));
    let pause = sleep(session.answer(&rotated(), Instant::now));
    assert!(
        (MS..=4 * MS).contains(&pause),
        "the rotation pause: {pause:?}"
    );
    assert_eq!(session.delays()[0].source, DelaySource::Refused);
    let mut service = tower::service_fn(|_: Req| async { rotated() });
    drop(session.send(&mut service));
    assert_eq!((session.attempts(), session.counted()), (2, 1));
    let stats = config.counters.snapshot();
    assert_eq!((stats.unproven_rotations, stats.rotation_resends), (1, 1));
}

#[test]
fn a_rotation_of_a_post_without_a_key_is_not_resent() {
    let config = rotations(builder());
    let mut session = sent(&config, request(Method::POST));
    let next = session.answer(&rotated(), Instant::now);
    assert_eq!(stop(next), StopReason::NotIdempotent);
    let stats = config.counters.snapshot();
    assert_eq!((stats.unproven_rotations, stats.rotation_resends), (1, 0));
}

#[test]
fn a_rotation_of_a_keyed_post_is_resent_as_rotation() {
    let config = rotations(builder());
    let mut session = sent(&config, keyed(Method::POST));
    sleep(session.answer(&rotated(), Instant::now));
    assert_eq!(session.delays()[0].source, DelaySource::Refused);
}

#[test]
fn the_idempotency_policy_decides_what_a_rotation_may_resend() {
    let config = rotations(builder().idempotency(Idempotency::RequireKey));
    let mut get = sent(&config, request(Method::GET));
    assert_eq!(
        stop(get.answer(&rotated(), Instant::now)),
        StopReason::NotIdempotent
    );
    let config = rotations(builder().idempotency(Idempotency::Any));
    let mut post = sent(&config, request(Method::POST));
    sleep(post.answer(&rotated(), Instant::now));
    assert_eq!(post.delays()[0].source, DelaySource::Refused);
}

#[test]
fn a_rotation_is_asked_for_transient_errors_only() {
    // A transient error that is no rotation takes the backoff delay, as before.
    let config = rotations(builder());
    let mut session = sent(&config, request(Method::GET));
    let reset = Err::<Res, _>(io::Error::from(io::ErrorKind::ConnectionReset));
    assert_eq!(sleep(session.answer(&reset, Instant::now)), 100 * MS);
    assert_eq!(config.counters.snapshot().unproven_rotations, 0);
}

#[test]
fn a_rotation_is_no_congestion_for_the_pacer() {
    // Ten in a row would take an endpoint out (outage after 3 congested outcomes).
    let pacing = crate::Pacing::builder().outage_after(3).build().unwrap();
    let config = rotations(builder().pacing(pacing).max_attempts(2));
    for _ in 0..10 {
        let mut session = sent(&config, request(Method::POST));
        assert_eq!(
            stop(session.answer(&rotated(), Instant::now)),
            StopReason::NotIdempotent
        );
    }
    let pacer = config.pacer.as_ref().unwrap();
    let authority = http::uri::Authority::from_static("a.test");
    let state = pacer.stats(Some(&authority)).unwrap();
    assert_eq!(state.mode, crate::pacing::PacingMode::Open, "{state:?}");
}
