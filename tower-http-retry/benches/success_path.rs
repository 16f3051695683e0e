//! Per-call cost of the retry layer when nothing fails.
//!
//! The inner service is in-process and always ready, so every row measures one
//! `ready().await` + `call().await` and the layer's own work, nothing else. The futures complete on
//! their first poll and are polled directly (no executor in the measurement); a tokio runtime is
//! entered so that anything reaching for the clock would find one.
//!
//! Rows: no layer (the baseline); `tower::retry::Retry` with a minimal policy and `TpsBudget`; this
//! crate's retry layer with the default configuration, and with the budget turned off; the circuit
//! breaker alone (closed: every call is admitted and recorded as a success).
//!
//! Run: `cargo bench --all-features --bench success_path`

mod support;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use support::{bench_calls, Body, Endpoint, TowerPolicy};
use tower::retry::budget::TpsBudget;
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
use tower_http_retry_instructions::{noop_waker, poll_now};

fn row<S>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut service: S)
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Error: Debug,
{
    let waker = noop_waker();
    bench_calls(group, name, |req| {
        let call = async { service.ready().await?.call(req).await };
        poll_now(call, &waker).expect("the call succeeds")
    });
}

fn success_path(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _context = runtime.enter();

    let tower_policy = TowerPolicy {
        budget: Arc::new(TpsBudget::default()),
        delay: Duration::from_millis(100),
    };
    let mut group = c.benchmark_group("success_path");
    row(&mut group, "no_layer", Endpoint::ok());
    row(
        &mut group,
        "tower_retry_tps_budget",
        tower::retry::Retry::new(tower_policy, Endpoint::ok()),
    );
    row(
        &mut group,
        "ours_default",
        RetryLayer::new().layer(Endpoint::ok()),
    );
    let no_budget = RetryLayer::builder()
        .without_budget()
        .build()
        .expect("a valid configuration");
    row(
        &mut group,
        "ours_no_budget",
        no_budget.layer(Endpoint::ok()),
    );
    row(
        &mut group,
        "circuit_breaker",
        CircuitBreakerLayer::new().layer(Endpoint::ok()),
    );
    group.finish();
}

criterion_group!(benches, success_path);
criterion_main!(benches);
