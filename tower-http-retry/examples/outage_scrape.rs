//! The scrape an on-call engineer reads after an outage: two stacks in one process, a webhook
//! sender (`RetryLayerBuilder::bulk()`, pacing) and an API client (the `interactive()` retry
//! layer over the `interactive()` circuit breaker), each with its `metrics_label`, against
//! in-process endpoints down for the first 2 s (503), on tokio's paused clock, each endpoint
//! named in its stack's `metrics_authorities`. Prints the Prometheus text of the crate's metrics
//! (metrics-exporter-prometheus), without the help lines and the delays' quantiles: during the
//! outage, once every request has finished, and 10 s later with no traffic.
//!
//! `cargo run --example outage_scrape --features metrics`
//!
//! With `-- trace` (and the `tracing` feature), the API client alone, and instead of the scrape
//! its trace as `tracing-subscriber`'s `fmt` prints it (the attempt spans and the decisions,
//! without times): `cargo run --example outage_scrape --features metrics,tracing -- trace`

use std::time::Duration;
use tokio::time::Instant;
use tower::{service_fn, Layer, ServiceBuilder, ServiceExt};
use tower_http_retry::circuit_breaker::CircuitBreakerLayerBuilder;
use tower_http_retry::retry::{RandomSource, RetryLayerBuilder};

type Req = http::Request<String>;
type Res = http::Response<String>;

const SEC: Duration = Duration::from_secs(1);

/// 503 until `up`, 200 after.
fn endpoint(
    up: Instant,
) -> impl tower::Service<Req, Response = Res, Error = std::io::Error, Future: Send> + Clone {
    service_fn(move |_: Req| async move {
        let status = if Instant::now() < up { 503 } else { 200 };
        let response = http::Response::builder().status(status);
        Ok::<Res, std::io::Error>(response.body(String::new()).unwrap())
    })
}

fn main() {
    let trace = std::env::args().nth(1).as_deref() == Some("trace");
    if trace {
        #[cfg(feature = "tracing")]
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_target(false)
            .with_ansi(false)
            .without_time()
            .init();
    }
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            tower_http_retry::telemetry::describe_metrics();
            let up = Instant::now() + 2 * SEC;
            let webhooks = RetryLayerBuilder::bulk()
                .metrics_label("webhooks")
                .metrics_authorities(["receiver.test"])
                .random_source(RandomSource::seeded(1))
                .build()
                .unwrap()
                .layer(endpoint(up));
            let api = ServiceBuilder::new()
                .layer(
                    RetryLayerBuilder::interactive()
                        .metrics_label("api")
                        .metrics_authorities(["billing.test"])
                        .random_source(RandomSource::seeded(2))
                        .build()
                        .unwrap(),
                )
                .layer(
                    CircuitBreakerLayerBuilder::interactive()
                        .metrics_label("api")
                        .metrics_authorities(["billing.test"])
                        // Its open time is jittered too: seeded, so that every run prints the
                        // same scrape.
                        .random_source(RandomSource::seeded(3))
                        // One breaker per upstream, as a gateway has.
                        .build_per_authority(16)
                        .unwrap(),
                )
                .service(endpoint(up));
            let mut calls = tokio::task::JoinSet::new();
            let senders = if trace { 0 } else { 50 };
            for i in 0..senders {
                let request = http::Request::post("http://receiver.test/hooks")
                    .header("idempotency-key", format!("msg-{i}"))
                    .body(String::new())
                    .unwrap();
                calls.spawn(webhooks.clone().oneshot(request));
            }
            let clicks = tokio::spawn(async move {
                for _ in 0..12 {
                    let request = http::Request::get("http://billing.test/invoices")
                        .body(String::new())
                        .unwrap();
                    let _ = api.clone().oneshot(request).await;
                    tokio::time::sleep(SEC / 4).await;
                }
            });
            tokio::time::sleep(SEC * 3 / 2).await;
            if !trace {
                print("at 1.5 s, both endpoints down", &scrape);
            }
            calls.join_all().await;
            clicks.await.unwrap();
            if !trace {
                print("once every request has finished", &scrape);
                tokio::time::sleep(10 * SEC).await;
                print("10 s later, no traffic", &scrape);
            }
        })
    });
}

/// The crate's series, sorted (the exporter's order is its map's), without the help lines and
/// the delays' quantiles.
fn print(when: &str, scrape: &metrics_exporter_prometheus::PrometheusHandle) {
    println!("# {when}");
    let text = scrape.render();
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.contains("quantile="))
        .collect();
    lines.sort_unstable();
    for line in lines {
        println!("{line}");
    }
}
