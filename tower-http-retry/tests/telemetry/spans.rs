//! The `attempt` span: one per attempt, entered while the attempt's future is polled, with
//! OpenTelemetry's `http.request.resend_count` on retries. A small capturing subscriber records
//! every span (its fields, its parent) and every event (the span it happened in).

use super::support::{self, get, Reply, TestServer};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{Backoff, Jitter, RetryLayer};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Instrument, Metadata, Subscriber};

#[derive(Clone, Debug)]
struct SpanData {
    name: &'static str,
    parent: Option<u64>,
    fields: BTreeMap<&'static str, String>,
}

#[derive(Clone, Debug)]
struct EventData {
    message: String,
    /// The span entered when the event happened.
    span: Option<u64>,
}

#[derive(Default)]
struct Captured {
    spans: Vec<SpanData>,
    events: Vec<EventData>,
    /// The spans entered now, innermost last (the runtime has one thread).
    stack: Vec<u64>,
}

/// Records everything, on any thread it is the default of.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Captured>>);

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut captured = self.0.lock().unwrap();
        let parent = match attrs.parent() {
            Some(id) => Some(id.into_u64()),
            None if attrs.is_contextual() => captured.stack.last().copied(),
            None => None,
        };
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        captured.spans.push(SpanData {
            name: attrs.metadata().name(),
            parent,
            fields,
        });
        Id::from_u64(captured.spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut captured = self.0.lock().unwrap();
        let index = span.into_u64() as usize - 1;
        values.record(&mut Fields(&mut captured.spans[index].fields));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut captured = self.0.lock().unwrap();
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let span = captured.stack.last().copied();
        captured.events.push(EventData {
            message: fields.remove("message").unwrap_or_default(),
            span,
        });
    }

    fn enter(&self, span: &Id) {
        self.0.lock().unwrap().stack.push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut captured = self.0.lock().unwrap();
        let top = captured.stack.pop();
        assert_eq!(
            top,
            Some(span.into_u64()),
            "spans exit in the order they entered"
        );
    }
}

impl Capture {
    fn spans(&self) -> Vec<SpanData> {
        self.0.lock().unwrap().spans.clone()
    }

    fn events(&self) -> Vec<EventData> {
        self.0.lock().unwrap().events.clone()
    }
}

/// Runs `test` on a current-thread runtime with `capture` as this thread's subscriber.
fn with_capture<Fut: std::future::Future<Output = ()>>(capture: &Capture, test: Fut) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tracing::subscriber::with_default(capture.clone(), || runtime.block_on(test));
}

#[test]
fn each_attempt_is_a_span_with_the_resend_count_on_retries() {
    let capture = Capture::default();
    let port = Arc::new(Mutex::new(0));
    with_capture(&capture, {
        let port = Arc::clone(&port);
        async move {
            let server = TestServer::start(|hit| match hit.nth {
                1 | 2 => Reply::status(503),
                _ => Reply::status(200),
            })
            .await;
            *port.lock().unwrap() = server.addr().port();
            let client = support::client();
            // Around the real client: an event when called, and one after the response came,
            // in a later poll than the call's.
            let inner = service_fn(move |request| {
                let mut client = client.clone();
                tracing::info!("calling");
                let response = client.call(request);
                async move {
                    let response = response.await;
                    tracing::info!("answered");
                    response
                }
            });
            let service = RetryLayer::builder()
                .backoff(Backoff::new(
                    Jitter::None,
                    Duration::from_millis(5),
                    Duration::from_millis(5),
                ))
                .random_source(RandomSource::seeded(1))
                .build()
                .unwrap()
                .layer(inner);
            let response = service
                .oneshot(get(&server.uri("/resource"), "r"))
                .instrument(tracing::info_span!("request"))
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
    });

    let spans = capture.spans();
    let request = spans.iter().position(|s| s.name == "request").unwrap() as u64 + 1;
    let attempts: Vec<(u64, &SpanData)> = spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.name == "attempt")
        .map(|(i, s)| (i as u64 + 1, s))
        .collect();
    assert_eq!(attempts.len(), 3, "{spans:#?}");
    let port = port.lock().unwrap().to_string();
    for (n, (_, span)) in attempts.iter().enumerate() {
        let field = |name: &str| span.fields.get(name).map(String::as_str);
        let number = (n + 1).to_string();
        assert_eq!(field("attempt"), Some(number.as_str()));
        assert_eq!(field("http.request.method"), Some("GET"));
        assert_eq!(field("server.address"), Some("127.0.0.1"));
        assert_eq!(field("server.port"), Some(port.as_str()));
        let resend = n.to_string();
        let expected_resend = (n > 0).then_some(resend.as_str());
        assert_eq!(
            field("http.request.resend_count"),
            expected_resend,
            "the first attempt has none, retry n has n: {span:?}"
        );
        let status = if n < 2 { "503" } else { "200" };
        assert_eq!(field("http.response.status_code"), Some(status));
        assert_eq!(
            span.parent,
            Some(request),
            "an attempt is a child of its request"
        );
    }
    // Each attempt's call and the poll that saw its response ran inside its span.
    let events = capture.events();
    for message in ["calling", "answered"] {
        let inside: Vec<Option<u64>> = events
            .iter()
            .filter(|e| e.message == message)
            .map(|e| e.span)
            .collect();
        let expected: Vec<Option<u64>> = attempts.iter().map(|(id, _)| Some(*id)).collect();
        assert_eq!(inside, expected, "{message}: {events:#?}");
    }
    // The decisions on each outcome are the attempt's: a retry after each 503, the stop after
    // the 200 (an on-call engineer reads why beside the status that caused it).
    let in_span = |message: &str| -> Vec<Option<u64>> {
        events
            .iter()
            .filter(|e| e.message == message)
            .map(|e| e.span)
            .collect()
    };
    let ids: Vec<Option<u64>> = attempts.iter().map(|(id, _)| Some(*id)).collect();
    assert_eq!(in_span("retrying after delay"), ids[..2], "{events:#?}");
    assert_eq!(in_span("finished"), ids[2..], "{events:#?}");
    // And "sending attempt" is the attempt's too: its method, address and port beside it.
    assert_eq!(in_span("sending attempt"), ids, "{events:#?}");
}

#[test]
fn a_boxed_error_is_named_by_its_type_not_the_box() {
    let capture = Capture::default();
    with_capture(&capture, async {
        // A breaker under the retry layer: its refusals come up boxed.
        let breaker = tower_http_retry::CircuitBreakerLayer::builder()
            .consecutive_failures(1)
            .build()
            .unwrap();
        let failing = service_fn(|_: http::Request<String>| async {
            Ok::<_, std::io::Error>(
                http::Response::builder()
                    .status(503)
                    .body(String::new())
                    .unwrap(),
            )
        });
        let service = tower::ServiceBuilder::new()
            .layer(RetryLayer::builder().max_attempts(3).build().unwrap())
            .layer(breaker)
            .service(failing);
        let request = http::Request::get("http://a.test/").body(String::new());
        let error = service.oneshot(request.unwrap()).await.unwrap_err();
        assert!(error.is::<tower_http_retry::circuit_breaker::CircuitOpen>());
    });
    let spans = capture.spans();
    let refused: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "attempt")
        .filter_map(|s| s.fields.get("error.type"))
        .collect();
    assert_eq!(
        refused,
        ["tower_http_retry::circuit_breaker::CircuitOpen"],
        "the refusal named by its type"
    );
}

#[test]
fn a_failed_attempt_records_the_error_type() {
    let capture = Capture::default();
    with_capture(&capture, async {
        let failing = service_fn(|_: http::Request<String>| async {
            Err::<http::Response<String>, _>(std::io::Error::other("down"))
        });
        let service = RetryLayer::builder()
            .max_attempts(1)
            .build()
            .unwrap()
            .layer(failing);
        let request = http::Request::get("http://a.test/").body(String::new());
        assert!(service.oneshot(request.unwrap()).await.is_err());
    });
    let spans = capture.spans();
    let attempt = spans.iter().find(|s| s.name == "attempt").unwrap();
    assert_eq!(
        attempt.fields.get("error.type").map(String::as_str),
        Some("std::io::error::Error")
    );
    assert_eq!(
        attempt.fields.get("server.address").map(String::as_str),
        Some("a.test")
    );
    assert_eq!(
        attempt.fields.get("server.port"),
        None,
        "no port in the URI"
    );
    assert_eq!(attempt.fields.get("http.request.resend_count"), None);
}
