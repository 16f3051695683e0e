//! Which requests are repeated, and the headers stamped on attempts.

use crate::mock_client::*;
use http::header::HeaderName;
use tower_http_retry::retry::{Idempotency, RetryLayerBuilder};
use tower_http_retry::retry::{RequestHead, RetryRequest};
use tower_http_retry::StopReason;

fn keyed(mut request: Req, key: &'static str) -> Req {
    request
        .headers_mut()
        .insert(Idempotency::KEY_HEADER.clone(), key.parse().unwrap());
    request
}

/// Answers every attempt of `request` with 503 and returns the attempts the mock saw, and why
/// the layer stopped.
async fn attempts_of(builder: RetryLayerBuilder, request: Req) -> (Vec<Req>, StopReason) {
    let mut client = Client::new(builder.max_attempts(3).build().unwrap());
    let mut future = client.start(request);
    let mut seen = Vec::new();
    let mut delay = 100 * MS;
    loop {
        seen.push(client.reply(503));
        let poll = future.poll();
        if poll.is_ready() {
            let (_, report) = finished(poll);
            client.assert_no_request();
            return (seen, report.stop);
        }
        advance(delay).await;
        tokio_test::assert_pending!(future.poll());
        delay *= 2;
    }
}

#[tokio::test(start_paused = true)]
async fn post_without_key_is_sent_once() {
    let (attempts, stop) = attempts_of(builder(), post()).await;
    assert_eq!((attempts.len(), stop), (1, StopReason::NotIdempotent));
}

#[tokio::test(start_paused = true)]
async fn post_with_idempotency_key_is_retried() {
    let (attempts, stop) = attempts_of(builder(), keyed(post(), "order-17")).await;
    assert_eq!((attempts.len(), stop), (3, StopReason::AttemptsExhausted));
    for attempt in &attempts {
        assert_eq!(header(attempt, &Idempotency::KEY_HEADER), Some("order-17"));
    }
}

#[tokio::test(start_paused = true)]
async fn stamped_idempotency_key_is_identical_on_every_attempt() {
    let (attempts, stop) = attempts_of(builder().stamp_idempotency_key(true), post()).await;
    assert_eq!((attempts.len(), stop), (3, StopReason::AttemptsExhausted));
    let key = header(&attempts[0], &Idempotency::KEY_HEADER).expect("a key is stamped");
    assert!(!key.is_empty());
    for attempt in &attempts {
        assert_eq!(
            attempt
                .headers()
                .get_all(&Idempotency::KEY_HEADER)
                .iter()
                .count(),
            1
        );
        assert_eq!(header(attempt, &Idempotency::KEY_HEADER), Some(key));
    }
}

#[tokio::test(start_paused = true)]
async fn stamping_keeps_a_callers_key() {
    let builder = builder().stamp_idempotency_key(true);
    let (attempts, _) = attempts_of(builder, keyed(post(), "mine")).await;
    assert_eq!(header(&attempts[0], &Idempotency::KEY_HEADER), Some("mine"));
}

#[tokio::test(start_paused = true)]
async fn stamping_leaves_idempotent_methods_alone() {
    let builder = builder().stamp_idempotency_key(true);
    let (attempts, _) = attempts_of(builder, get()).await;
    assert_eq!(header(&attempts[0], &Idempotency::KEY_HEADER), None);
}

#[tokio::test(start_paused = true)]
async fn require_key_does_not_retry_a_get_without_key() {
    let builder = builder().idempotency(Idempotency::RequireKey);
    let (attempts, stop) = attempts_of(builder, get()).await;
    assert_eq!((attempts.len(), stop), (1, StopReason::NotIdempotent));
}

#[tokio::test(start_paused = true)]
async fn require_key_retries_a_keyed_request() {
    let builder = builder().idempotency(Idempotency::RequireKey);
    let (attempts, _) = attempts_of(builder, keyed(post(), "k")).await;
    assert_eq!(attempts.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn any_retries_a_post_without_key() {
    let builder = builder().idempotency(Idempotency::Any);
    let (attempts, stop) = attempts_of(builder, post()).await;
    assert_eq!((attempts.len(), stop), (3, StopReason::AttemptsExhausted));
    assert_eq!(header(&attempts[2], &Idempotency::KEY_HEADER), None);
}

#[tokio::test(start_paused = true)]
async fn attempt_header_carries_the_attempt_number() {
    let name = HeaderName::from_static("x-retry-attempt");
    let (attempts, _) = attempts_of(builder().attempt_header(name.clone()), get()).await;
    let numbers: Vec<_> = attempts.iter().map(|a| header(a, &name)).collect();
    assert_eq!(numbers, [Some("1"), Some("2"), Some("3")]);
}

/// A request that cannot be copied, like one with a streaming body.
struct Streaming(Req);

impl RequestHead for Streaming {
    fn method(&self) -> &http::Method {
        self.0.method()
    }
    fn headers(&self) -> &http::HeaderMap {
        self.0.headers()
    }
    fn headers_mut(&mut self) -> &mut http::HeaderMap {
        self.0.headers_mut()
    }
    fn authority(&self) -> Option<std::borrow::Cow<'_, http::uri::Authority>> {
        RequestHead::authority(&self.0)
    }
}

impl RetryRequest for Streaming {
    fn try_clone(&self) -> Option<Self> {
        None
    }
}

#[tokio::test(start_paused = true)]
async fn request_that_cannot_be_copied_is_sent_once() {
    let layer = builder().build().unwrap();
    let (mut svc, mut handle) = tower_test::mock::spawn_layer::<Streaming, Res, _>(layer);
    tokio_test::assert_ready_ok!(svc.poll_ready());
    let mut future = tokio_test::task::spawn(svc.call(Streaming(get())));
    tokio_test::assert_pending!(future.poll());
    let (_, reply) = tokio_test::assert_ready!(handle.poll_request()).unwrap();
    reply.send_response(status(503));
    let (code, report) = finished(future.poll());
    assert_eq!(code, 503);
    assert_eq!(
        (report.attempts, report.stop),
        (1, StopReason::NotReplayable)
    );
    advance(std::time::Duration::from_secs(1)).await;
    assert!(handle.poll_request().is_pending());
}
