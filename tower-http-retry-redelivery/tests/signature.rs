//! Standard Webhooks signatures made by `SignService`, checked by the specification's own Rust
//! receiver (`standardwebhooks`, the Standard Webhooks repository's library): every attempt
//! verifies, a timestamp is fresh at each attempt (30 hours apart, under the retry layer), a
//! receiver holding either secret of a rotation verifies, and a request that cannot be signed
//! is never sent. No network: the transport is a `service_fn` that keeps what it got.

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use standardwebhooks::{Webhook, WebhookError};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::retry::Idempotency;
use tower_http_retry::{Backoff, Jitter, RetryLayer};
use tower_http_retry_redelivery::signature::{
    Secret, SignError, SignLayer, Signer, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP,
};

/// The Standard Webhooks test vectors' secrets, and a third one that signs nothing here.
const CURRENT: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const PREVIOUS: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const UNRELATED: &str = "whsec_YSB0aGlyZCBrZXksIDI0IGJ5dGVzIG9r";

const BODY: &[u8] = br#"{"type":"invoice.paid","data":{"id":"in_1"}}"#;
const THIRTY_HOURS: u64 = 30 * 3600;

/// What the transport got: each attempt's headers and body.
type Sent = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

fn secret(text: &str) -> Secret {
    text.parse().unwrap()
}

fn receiver(text: &str) -> Webhook {
    Webhook::new(text).unwrap()
}

fn webhook(uri: &str, id: &str) -> Request<Bytes> {
    Request::post(uri)
        .header("webhook-id", id)
        .header("content-type", "application/json")
        .body(Bytes::from_static(BODY))
        .unwrap()
}

/// A transport that keeps each request and answers with the next of `statuses` (the last one
/// from then on).
fn transport(
    statuses: &'static [StatusCode],
) -> (
    impl Service<Request<Bytes>, Response = Response<()>, Error = BoxError> + Clone,
    Sent,
) {
    let sent = Sent::default();
    let kept = Arc::clone(&sent);
    let service = tower::service_fn(move |request: Request<Bytes>| {
        let kept = Arc::clone(&kept);
        async move {
            let (parts, body) = request.into_parts();
            let mut kept = kept.lock().unwrap();
            kept.push((parts.headers, body));
            let status = statuses[(kept.len() - 1).min(statuses.len() - 1)];
            let mut response = Response::new(());
            *response.status_mut() = status;
            Ok::<_, BoxError>(response)
        }
    });
    (service, sent)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn timestamp(headers: &HeaderMap) -> i64 {
    headers[WEBHOOK_TIMESTAMP]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The receiver's check at its time `now` (Unix seconds): what `Webhook::verify` does at the
/// real time, here with a time of the test's choosing. standardwebhooks 1.0.1, the version on
/// crates.io, has no `verify_with_timestamp`, so this uses the receiver's own `sign` and the
/// specification's five-minute tolerance, as its `verify` does.
fn verify_at(
    receiver: &Webhook,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), WebhookError> {
    let id = headers["webhook-id"].to_str().unwrap();
    let sent_at = timestamp(headers);
    if now - sent_at > 5 * 60 {
        return Err(WebhookError::TimestampTooOldError);
    }
    if sent_at > now + 5 * 60 {
        return Err(WebhookError::FutureTimestampError);
    }
    let expected = receiver.sign(id, sent_at, body)?;
    let signatures = headers[WEBHOOK_SIGNATURE].to_str().unwrap();
    if signatures.split(' ').any(|signature| signature == expected) {
        Ok(())
    } else {
        Err(WebhookError::InvalidSignature)
    }
}

async fn send<S>(service: &mut S, request: Request<Bytes>) -> Result<Response<()>, BoxError>
where
    S: Service<Request<Bytes>, Response = Response<()>, Error = BoxError>,
{
    service.ready().await?.call(request).await
}

#[tokio::test]
async fn every_attempt_verifies_with_the_reference_receiver() {
    let (transport, sent) = transport(&[StatusCode::OK]);
    let mut service = SignLayer::new(Signer::new(secret(CURRENT))).layer(transport);
    for _ in 0..3 {
        send(&mut service, webhook("https://hooks.example/in", "msg_1"))
            .await
            .unwrap();
    }
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 3);
    for (headers, body) in sent.iter() {
        assert_eq!(headers.get_all(WEBHOOK_TIMESTAMP).iter().count(), 1);
        assert_eq!(headers.get_all(WEBHOOK_SIGNATURE).iter().count(), 1);
        assert_eq!(body, BODY);
        receiver(CURRENT).verify(body, headers).unwrap();
        // The bare base64, as a receiver may hold it.
        receiver(CURRENT.strip_prefix("whsec_").unwrap())
            .verify(body, headers)
            .unwrap();
        assert!(matches!(
            receiver(PREVIOUS).verify(body, headers),
            Err(WebhookError::InvalidSignature)
        ));
        // Another body under the same headers does not verify.
        assert!(matches!(
            receiver(CURRENT).verify(br#"{"type":"invoice.paid"}"#, headers),
            Err(WebhookError::InvalidSignature)
        ));
    }
}

/// Under the retry layer, as the module says it goes: the transport fails twice (503), the
/// clock moves 30 hours after each attempt, and each attempt carries its own time, which the
/// receiver accepts at that time. The first attempt's headers, resent at the last attempt's
/// time (what a stored signature would do), are refused as too old.
#[tokio::test]
async fn each_attempt_under_the_retry_layer_is_signed_anew_30_hours_apart() {
    let start = unix_now() as u64 - 2 * THIRTY_HOURS;
    let clock = Arc::new(AtomicU64::new(start));
    let read = Arc::clone(&clock);
    let sign = SignLayer::new(Signer::new(secret(CURRENT)))
        .with_clock(move || UNIX_EPOCH + Duration::from_secs(read.load(Ordering::SeqCst)));
    let (transport, sent) = transport(&[
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::OK,
    ]);
    let advance = Arc::clone(&clock);
    let transport = transport.map_response(move |response| {
        advance.fetch_add(THIRTY_HOURS, Ordering::SeqCst);
        response
    });
    let retry = RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(
            Jitter::None,
            Duration::from_millis(1),
            Duration::from_millis(1),
        ))
        .idempotency(Idempotency::Any)
        .without_budget()
        .build()
        .unwrap();
    let mut client = ServiceBuilder::new()
        .layer(retry)
        .layer(sign)
        .service(transport);

    let response = send(&mut client, webhook("https://hooks.example/in", "msg_30h"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 3, "one request, three attempts");
    let receiver = receiver(CURRENT);
    for (attempt, (headers, body)) in sent.iter().enumerate() {
        let at = (start + attempt as u64 * THIRTY_HOURS) as i64;
        assert_eq!(timestamp(headers), at, "attempt {attempt}");
        verify_at(&receiver, headers, body, at).unwrap();
        assert_eq!(headers.get_all(WEBHOOK_SIGNATURE).iter().count(), 1);
    }
    assert_ne!(sent[0].0[WEBHOOK_SIGNATURE], sent[1].0[WEBHOOK_SIGNATURE]);

    // The last attempt's time is the real one: the receiver's own `verify`, at its clock.
    let (last_headers, last_body) = &sent[2];
    receiver.verify(last_body, last_headers).unwrap();
    // The first attempt's headers, had they been stored and resent, are 60 hours old.
    let (first_headers, first_body) = &sent[0];
    assert!(matches!(
        receiver.verify(first_body, first_headers),
        Err(WebhookError::TimestampTooOldError)
    ));
    assert!(matches!(
        verify_at(
            &receiver,
            first_headers,
            first_body,
            timestamp(last_headers)
        ),
        Err(WebhookError::TimestampTooOldError)
    ));
}

#[tokio::test]
async fn during_rotation_a_receiver_holding_either_secret_verifies() {
    let (transport, sent) = transport(&[StatusCode::OK]);
    let signer = Signer::rotating([secret(CURRENT), secret(PREVIOUS)]);
    let mut service = SignLayer::new(signer).layer(transport);
    for id in ["msg_a", "msg_b"] {
        send(&mut service, webhook("https://hooks.example/in", id))
            .await
            .unwrap();
    }
    for (headers, body) in sent.lock().unwrap().iter() {
        let signatures = headers[WEBHOOK_SIGNATURE].to_str().unwrap();
        assert_eq!(signatures.split(' ').count(), 2, "{signatures}");
        receiver(CURRENT).verify(body, headers).unwrap();
        receiver(PREVIOUS).verify(body, headers).unwrap();
        assert!(matches!(
            receiver(UNRELATED).verify(body, headers),
            Err(WebhookError::InvalidSignature)
        ));
    }
}

#[tokio::test]
async fn each_endpoint_is_signed_with_its_own_secret_and_one_without_is_not_sent() {
    let (transport, sent) = transport(&[StatusCode::OK]);
    let (a, b) = (secret(CURRENT), secret(PREVIOUS));
    let signer = Signer::per_endpoint(move |endpoint: &str| match endpoint {
        "https://a.example" => Some(vec![a.clone()]),
        "https://b.example:8443" => Some(vec![b.clone()]),
        _ => None,
    });
    let mut service = SignLayer::new(signer).layer(transport);
    send(&mut service, webhook("https://a.example/in", "msg_a"))
        .await
        .unwrap();
    send(&mut service, webhook("https://b.example:8443/in", "msg_b"))
        .await
        .unwrap();
    let error = send(&mut service, webhook("https://c.example/in", "msg_c"))
        .await
        .unwrap_err();
    assert_eq!(
        error.downcast_ref::<SignError>(),
        Some(&SignError::NoSecret {
            endpoint: "https://c.example".into()
        })
    );

    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 2, "the endpoint without a secret got nothing");
    let (a_headers, a_body) = &sent[0];
    receiver(CURRENT).verify(a_body, a_headers).unwrap();
    assert!(receiver(PREVIOUS).verify(a_body, a_headers).is_err());
    let (b_headers, b_body) = &sent[1];
    receiver(PREVIOUS).verify(b_body, b_headers).unwrap();
    assert!(receiver(CURRENT).verify(b_body, b_headers).is_err());
}

/// A request that cannot be signed fails once: the retry layer takes the error for permanent
/// and does not ask again (the lookup runs once), and the transport never sees it.
#[tokio::test]
async fn a_request_that_cannot_be_signed_is_not_retried_nor_sent() {
    let (transport, sent) = transport(&[StatusCode::OK]);
    let lookups = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&lookups);
    let signer = Signer::per_endpoint(move |_: &str| {
        counted.fetch_add(1, Ordering::SeqCst);
        None
    });
    let retry = RetryLayer::builder()
        .max_attempts(3)
        .idempotency(Idempotency::Any)
        .without_budget()
        .build()
        .unwrap();
    let mut client = ServiceBuilder::new()
        .layer(retry)
        .layer(SignLayer::new(signer))
        .service(transport);
    let error = send(&mut client, webhook("https://hooks.example/in", "msg_1"))
        .await
        .unwrap_err();
    assert!(matches!(
        error.downcast_ref::<SignError>(),
        Some(SignError::NoSecret { .. })
    ));
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    assert!(sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_request_without_its_id_is_not_sent() {
    let (transport, sent) = transport(&[StatusCode::OK]);
    let mut service = SignLayer::new(Signer::new(secret(CURRENT))).layer(transport);
    let request = Request::post("https://hooks.example/in")
        .body(Bytes::from_static(BODY))
        .unwrap();
    let error = send(&mut service, request).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<SignError>(),
        Some(&SignError::MissingId {
            header: http::HeaderName::from_static("webhook-id")
        })
    );
    let empty = webhook("https://hooks.example/in", "");
    let error = send(&mut service, empty).await.unwrap_err();
    assert!(matches!(
        error.downcast_ref::<SignError>(),
        Some(SignError::InvalidId { .. })
    ));
    assert!(sent.lock().unwrap().is_empty());
}

/// The id header is configurable (as `RecordRules::id_header` is): the signature covers the id
/// read from it.
#[tokio::test]
async fn the_id_is_read_from_the_configured_header() {
    let (transport, sent) = transport(&[StatusCode::OK]);
    let mut service = SignLayer::new(Signer::new(secret(CURRENT)))
        .id_header(http::HeaderName::from_static("idempotency-key"))
        .layer(transport);
    let request = Request::post("https://hooks.example/in")
        .header("idempotency-key", "key_1")
        .body(Bytes::from_static(BODY))
        .unwrap();
    send(&mut service, request).await.unwrap();
    let sent = sent.lock().unwrap();
    let (headers, body) = &sent[0];
    let expected = receiver(CURRENT)
        .sign("key_1", timestamp(headers), body)
        .unwrap();
    assert_eq!(headers[WEBHOOK_SIGNATURE], expected.as_str());
}

#[tokio::test]
async fn an_earlier_attempts_headers_are_replaced() {
    let (transport, sent) = transport(&[StatusCode::OK]);
    let mut service = SignLayer::new(Signer::new(secret(CURRENT))).layer(transport);
    let mut request = webhook("https://hooks.example/in", "msg_1");
    let headers = request.headers_mut();
    headers.append(WEBHOOK_TIMESTAMP, "1614265330".parse().unwrap());
    headers.append(WEBHOOK_TIMESTAMP, "1".parse().unwrap());
    headers.append(
        WEBHOOK_SIGNATURE,
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
            .parse()
            .unwrap(),
    );
    send(&mut service, request).await.unwrap();
    let sent = sent.lock().unwrap();
    let (headers, body) = &sent[0];
    assert_eq!(headers.get_all(WEBHOOK_TIMESTAMP).iter().count(), 1);
    assert_eq!(headers.get_all(WEBHOOK_SIGNATURE).iter().count(), 1);
    assert!((timestamp(headers) - unix_now()).abs() <= 5);
    receiver(CURRENT).verify(body, headers).unwrap();
}

/// A transport that takes `Full<Bytes>` (hyper's client) goes below the signature, with a
/// `map_request`: the receiver verifies the bytes it reads from the body.
#[tokio::test]
async fn a_full_body_transport_below_the_signature() {
    let received = Sent::default();
    let kept = Arc::clone(&received);
    let transport = tower::service_fn(move |request: Request<Full<Bytes>>| {
        let kept = Arc::clone(&kept);
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await?.to_bytes();
            kept.lock().unwrap().push((parts.headers, body));
            Ok::<_, BoxError>(Response::new(()))
        }
    });
    let mut client = ServiceBuilder::new()
        .layer(SignLayer::new(Signer::new(secret(CURRENT))))
        .map_request(|request: Request<Bytes>| request.map(Full::new))
        .service(transport);
    send(&mut client, webhook("https://hooks.example/in", "msg_full"))
        .await
        .unwrap();
    let received = received.lock().unwrap();
    let (headers, body) = &received[0];
    assert_eq!(body, BODY);
    receiver(CURRENT).verify(body, headers).unwrap();
}
