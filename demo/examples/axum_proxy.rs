//! A reverse proxy in axum that forwards through retry + circuit breaker + per-attempt timeout.
//!
//! Starts a flaky upstream and the proxy on 127.0.0.1, sends a few requests through the proxy,
//! prints what happened to each, and exits.
//!
//! ```text
//! cargo run --example axum_proxy
//! ```
//!
//! The proxy itself (body buffering, which requests are retried, the error responses, the
//! `x-should-retry: false` cue to its callers, the report of every outcome) is `demo/src/proxy.rs`,
//! in the `demo` workspace crate, so that `tests/proxy/` drives the same router end to end. This
//! file builds the layers, stacks them with `forwarder` and serves the `router`.

use axum::extract::Request;
use axum::Router;
use bytes::Bytes;
use demo::proxy::{forwarder, router, serve, ATTEMPTS, BODY_LIMIT, SHOULD_RETRY, STOP};
use http::header::{self, HeaderName};
use http::StatusCode;
use http_body_util::Full;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tower::BoxError;
use tower_http_retry::{CircuitBreakerLayer, RetryLayer};

/// The demo: a flaky upstream, the proxy in front of it, and a few requests.
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use tower_http_retry::{AbortSignal, Backoff, Jitter};

    // The upstream fails the first attempt of every request (it reads the attempt number the
    // retry layer stamps), and /down fails always.
    let hits = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&hits);
    let upstream = Router::new().fallback(move |request: Request| {
        counter.fetch_add(1, Ordering::SeqCst);
        let first = request
            .headers()
            .get("x-retry-attempt")
            .is_some_and(|v| v == "1");
        let status = match (request.uri().path(), first) {
            ("/down", _) | (_, true) => StatusCode::SERVICE_UNAVAILABLE,
            (_, false) if request.method() == http::Method::POST => StatusCode::CREATED,
            _ => StatusCode::OK,
        };
        async move { status }
    });
    let upstream_addr = serve(upstream).await?;

    let wake = AbortSignal::new();
    let retry = RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
        .attempt_header(HeaderName::from_static("x-retry-attempt"))
        .abort_signal(wake.clone())
        .build()?;
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(3)
        .open_duration(Duration::from_secs(5))
        .abort_signal(wake)
        .build()?;
    breaker.check_retry(&retry)?;
    let stack = forwarder(retry, breaker, Duration::from_millis(500));
    let proxy_addr = serve(router(upstream_addr.to_string().parse()?, stack)).await?;
    println!("upstream on {upstream_addr}, proxy on {proxy_addr}\n");

    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http();
    let big = vec![b'x'; BODY_LIMIT + 1];
    let requests: [(&str, &str, Option<&str>, &[u8]); 7] = [
        ("GET", "/items", None, b""),
        ("POST", "/orders", None, b"order 1"),
        ("POST", "/orders", Some("order-2"), b"order 2"),
        ("POST", "/upload", None, &big),
        ("GET", "/down", None, b""),
        ("GET", "/down", None, b""),
        ("GET", "/items", None, b""),
    ];
    for (method, path, key, body) in requests {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("http://{proxy_addr}{path}"));
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let request = request.body(Full::new(Bytes::copy_from_slice(body)))?;
        let before = hits.load(Ordering::SeqCst);
        let response = client.request(request).await?;
        let header = |name: &HeaderName| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        let key = key.map_or(String::new(), |k| format!(" (Idempotency-Key {k})"));
        println!(
            "{method:4} {path:8} {:>6} B{key:27} -> {} | attempts {}, stop {}, upstream hits {}{}",
            body.len(),
            response.status(),
            header(&ATTEMPTS),
            header(&STOP),
            hits.load(Ordering::SeqCst) - before,
            match response.headers().get(header::RETRY_AFTER) {
                Some(value) => format!(", Retry-After {}", value.to_str()?),
                None => String::new(),
            } + match response.headers().get(&SHOULD_RETRY) {
                Some(value) => format!(", x-should-retry {}", value.to_str()?),
                None => String::new(),
            }
            .as_str()
        );
    }
    Ok(())
}
