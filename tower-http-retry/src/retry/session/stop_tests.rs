//! The stop reasons that end a request outside the ladder's usual rungs: a hint the policy gives
//! up on, a request that cannot be copied, a request its caller dropped.

use super::tests::{builder, config, request, response, sent, stop, Req};
use super::*;
use std::convert::Infallible;

#[test]
fn a_hint_longer_than_the_clamp_stops_when_the_policy_gives_up() {
    use crate::hint::{HintPolicy, WhenLonger};
    let policy = HintPolicy::honored()
        .max_delay(Duration::from_secs(1))
        .when_longer(WhenLonger::GiveUp);
    let config = config(builder().hint_policy(policy));
    let mut session = sent(&config, Method::GET);
    let told = Ok::<_, Infallible>(
        http::Response::builder()
            .status(503)
            .header(http::header::RETRY_AFTER, "60")
            .body(String::new())
            .unwrap(),
    );
    assert_eq!(
        stop(session.answer(&told, Instant::now)),
        StopReason::RetryAfterTooLong
    );
}

/// A request whose body cannot be copied (a stream read once).
struct Once(Req);

impl crate::message::RequestHead for Once {
    fn method(&self) -> &Method {
        self.0.method()
    }
    fn headers(&self) -> &http::HeaderMap {
        self.0.headers()
    }
    fn headers_mut(&mut self) -> &mut http::HeaderMap {
        self.0.headers_mut()
    }
    fn authority(&self) -> Option<std::borrow::Cow<'_, http::uri::Authority>> {
        self.0.uri().authority().map(std::borrow::Cow::Borrowed)
    }
}

impl RetryRequest for Once {
    fn try_clone(&self) -> Option<Self> {
        None
    }
}

#[test]
fn a_request_that_cannot_be_copied_stops_after_its_one_attempt() {
    let config = config(builder());
    let mut request = Once(request(Method::GET));
    let mut session = Session::new(Arc::clone(&config), &mut request);
    let mut service = tower::service_fn(|_: Once| async { response(503) });
    drop(session.send_request(request, &mut service));
    assert_eq!(
        stop(session.answer(&response(503), Instant::now)),
        StopReason::NotReplayable
    );
}

#[test]
fn a_request_dropped_by_its_caller_is_counted_and_reported_cancelled() {
    let config = config(builder());
    let slot = crate::report::ReportSlot::new();
    let mut request = request(Method::GET);
    request.extensions_mut().insert(slot.clone());
    let mut session = Session::new(Arc::clone(&config), &mut request);
    let mut service = tower::service_fn(|_: Req| async { response(200) });
    drop(session.send_request(request, &mut service));
    session.dropped(None, Instant::now());
    assert_eq!(config.counters.snapshot().stopped(StopReason::Cancelled), 1);
    assert_eq!(slot.get().expect("filled").stop, StopReason::Cancelled);
}
