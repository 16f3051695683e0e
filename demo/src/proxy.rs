//! The reverse proxy of `examples/axum_proxy.rs` (which starts it in front of a flaky upstream
//! and prints what happens to a few requests) and of `tests/proxy/` (which drives it end to
//! end): an axum router that forwards every request through retry + circuit breaker +
//! per-attempt timeout.
//!
//! * **Bodies.** `http::Request<B>` is not `Clone`, and a streamed body cannot be sent twice. The
//!   proxy buffers each incoming body, bounded by [`BODY_LIMIT`] (413 past it, and the upstream
//!   never sees the request), into a `Full<Bytes>`, which is cheap to clone for every attempt.
//! * **Idempotency.** A GET is retried; a POST is retried only when it carries an
//!   `Idempotency-Key` (the upstream can then recognise the repeat); a POST without one is sent
//!   once and its 503 passed on.
//! * **Errors.** An open circuit becomes a 503 with `Retry-After`; a timed-out last attempt a
//!   504; a transport error a 502 (`tower_http_retry_hyper::proxy::error_response`, published). Each response says how many attempts it took
//!   ([`ATTEMPTS`]) and why the retry layer stopped ([`STOP`]).
//! * **No retries on top.** When the retry layer has itself retried, held back on purpose (its
//!   budget ran out, the circuit is open) or the upstream asked it to
//!   ([`RetryReport::asks_callers_to_stand_down`]), the response carries
//!   `x-should-retry: false`, so that the proxy's own callers do not retry on top and multiply
//!   the load (3 attempts per hop over 2 hops would be 9 upstream calls for one request).
//! * **Reports.** [`RetryReport::capture`] gives the report of every outcome, an upstream error
//!   included, without a `ReportSlot`.

use axum::body::Body as AxumBody;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::uri::Authority;
use http::{StatusCode, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;
use tower::timeout::Timeout;
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::circuit_breaker::CircuitBreaker;
use tower_http_retry::retry::Retry;
use tower_http_retry::{CircuitBreakerLayer, HttpClassifier, RetryLayer, RetryReport};
use tower_http_retry_hyper::proxy;

/// The largest request body the proxy forwards. Bodies are buffered whole so that a retry can
/// send them again; the bound keeps that memory in check.
pub const BODY_LIMIT: usize = 64 * 1024;

/// The attempts of one request, in a response header.
pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-proxy-attempts");
/// Why the retry layer stopped, in a response header.
pub const STOP: HeaderName = HeaderName::from_static("x-proxy-stop");
/// The caller's cue not to retry (`false`), honoured by this crate and by many SDKs.
pub const SHOULD_RETRY: HeaderName = proxy::SHOULD_RETRY;

/// The body sent upstream: buffered, so every attempt can send it again.
pub type Body = Full<Bytes>;

/// hyper-util's client inside a per-attempt timeout, a circuit breaker and the retry layer.
pub type Forwarder = Retry<
    CircuitBreaker<
        Timeout<hyper_util::client::legacy::Client<HttpConnector, Body>>,
        HttpClassifier,
    >,
    HttpClassifier,
>;

/// The client stack the proxy forwards through, outermost first.
pub fn forwarder(
    retry: RetryLayer,
    breaker: CircuitBreakerLayer,
    per_attempt: Duration,
) -> Forwarder {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http();
    ServiceBuilder::new()
        .layer(retry)
        .layer(breaker)
        .timeout(per_attempt)
        .service(client)
}

#[derive(Clone)]
struct Proxy {
    upstream: Authority,
    forwarder: Forwarder,
}

/// A router that forwards every request to `upstream` (host:port) through `forwarder`.
pub fn router(upstream: Authority, forwarder: Forwarder) -> Router {
    Router::new().fallback(forward).with_state(Proxy {
        upstream,
        forwarder,
    })
}

/// Serves `router` on 127.0.0.1 (any free port) in the background; returns the address.
pub async fn serve(router: Router) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

/// Headers that describe one hop, not the message: not forwarded.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::HOST,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

async fn forward(State(proxy): State<Proxy>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<LengthLimitError>() => {
            return (StatusCode::PAYLOAD_TOO_LARGE, "request body over 64 KiB").into_response();
        }
        Err(_) => return (StatusCode::BAD_REQUEST, "unreadable request body").into_response(),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri = Uri::builder()
        .scheme("http")
        .authority(proxy.upstream.clone())
        .path_and_query(path)
        .build()
        .expect("an authority and a path from valid URIs");
    let mut upstream = http::Request::new(Full::new(bytes));
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = uri;
    *upstream.headers_mut() = parts.headers;
    for name in &HOP_BY_HOP {
        upstream.headers_mut().remove(name);
    }
    // The report of the request whatever the outcome, errors included.
    let (result, report) = RetryReport::capture(proxy.forwarder.oneshot(upstream)).await;
    let mut response = match result {
        Ok(mut response) => {
            // The proxy has retried (or held back on purpose): a caller that retried on top
            // would multiply the upstream's load, three attempts per hop.
            proxy::stand_down(response.headers_mut(), &report);
            response.map(AxumBody::new)
        }
        // 503 and `Retry-After` for an open circuit, 504 for a timeout, 502 otherwise.
        Err(error) => proxy::error_response(&*error, &report),
    };
    let headers = response.headers_mut();
    headers.insert(ATTEMPTS, HeaderValue::from(report.attempts));
    headers.insert(STOP, HeaderValue::from_static(report.stop.as_str()));
    response
}
