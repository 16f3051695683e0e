//! Retrying and circuit-breaking reqwest's `Client`, a tower `Service<reqwest::Request>`.
//!
//! Starts a local upstream on 127.0.0.1 that answers 503 to every other request, sends a few
//! requests through `RetryLayer -> CircuitBreakerLayer -> reqwest::Client`, prints what happened
//! to each, and exits.
//!
//! ```text
//! cargo run --example reqwest --features reqwest
//! ```

use axum::{http::StatusCode, routing::any, Router};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http_retry::{
    AbortSignal, Backoff, CircuitBreakerLayer, Jitter, RetryLayer, RetryReport,
};

#[tokio::main]
async fn main() -> Result<(), tower::BoxError> {
    // The upstream: odd-numbered hits get a 503, even-numbered ones a 200.
    let hits = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&hits);
    let upstream = Router::new().fallback(any(move || {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if n % 2 == 1 {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            }
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, upstream).await });

    let wake = AbortSignal::new();
    let retry = RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(10),
            Duration::from_millis(200),
        ))
        .abort_signal(wake.clone())
        .build()?;
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(3)
        .abort_signal(wake)
        .build()?;
    breaker.check_retry(&retry)?;

    // reqwest's own per-request timeout bounds each attempt; its timeout errors are transient.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let mut service = ServiceBuilder::new()
        .layer(retry)
        .layer(breaker.clone())
        .service(client.clone());

    for (method, path) in [("GET", "/a"), ("GET", "/b"), ("POST", "/c"), ("PUT", "/d")] {
        let request = client
            .request(method.parse()?, format!("{base}{path}"))
            .body("payload")
            .build()?;
        let response = service.ready().await?.call(request).await?;
        let report = response
            .extensions()
            .get::<RetryReport>()
            .cloned()
            .unwrap_or_default();
        println!(
            "{method:4} {path}: {} after {} attempt(s), stopped: {}",
            response.status(),
            report.attempts,
            report.stop
        );
    }
    println!(
        "upstream saw {} requests; breaker: {:?}",
        hits.load(Ordering::SeqCst),
        breaker.state()
    );
    Ok(())
}
