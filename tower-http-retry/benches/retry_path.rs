//! Cost of one retry: the first attempt answers 503, the second 200.
//!
//! Runs on a current-thread runtime with paused time, which jumps the clock forward whenever the
//! runtime is idle, so the sleep between the attempts costs a timer registration and not its
//! duration: what is measured is the state machine (classify, decide, budget, timer, re-ready,
//! copy of the request, report).
//!
//! Rows: a hand-written retry with no layer (two calls, a clone and a sleep: the floor), tower's
//! `Retry` with a minimal policy and `TpsBudget`, and this crate with a budget that every success
//! refills (so it never runs dry during the bench) and with no budget.
//!
//! Run: `cargo bench --all-features --bench retry_path`

mod support;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use http::Request;
use std::convert::Infallible;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use support::{bench_calls, Body, Endpoint, TowerPolicy};
use tokio::runtime::Runtime;
use tower::retry::budget::TpsBudget;
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::retry::TokenBucket;
use tower_http_retry::RetryLayer;

const DELAY: Duration = Duration::from_millis(100);

fn row<S>(group: &mut BenchmarkGroup<'_, WallTime>, runtime: &Runtime, name: &str, mut service: S)
where
    S: Service<Request<Body>, Response = http::Response<Body>>,
    S::Error: Debug,
{
    bench_calls(group, name, |req| {
        let call = async { service.ready().await?.call(req).await };
        runtime.block_on(call).expect("the call succeeds")
    });
}

fn retry_path(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    // Layers are built inside the runtime: the token bucket reads tokio's (paused) clock.
    let _context = runtime.enter();
    let mut group = c.benchmark_group("retry_path");

    let mut service = Endpoint::failing_every_other_call();
    bench_calls(&mut group, "no_layer_hand_written", |req| {
        let response = runtime.block_on(async {
            let first = ServiceExt::<Request<Body>>::ready(&mut service)
                .await?
                .call(req.clone())
                .await?;
            if !first.status().is_server_error() {
                return Ok::<_, Infallible>(first);
            }
            drop(first);
            tokio::time::sleep(DELAY).await;
            ServiceExt::<Request<Body>>::ready(&mut service)
                .await?
                .call(req)
                .await
        });
        response.expect("the call succeeds")
    });

    let tower_policy = TowerPolicy {
        budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 1.0)),
        delay: DELAY,
    };
    row(
        &mut group,
        &runtime,
        "tower_retry_tps_budget",
        tower::retry::Retry::new(tower_policy, Endpoint::failing_every_other_call()),
    );

    let refilled = TokenBucket::builder()
        .deposit_per_success(1.0)
        .build()
        .expect("a valid bucket");
    let ours = RetryLayer::builder()
        .budget(refilled)
        .build()
        .expect("a valid configuration");
    row(
        &mut group,
        &runtime,
        "ours_token_bucket",
        ours.layer(Endpoint::failing_every_other_call()),
    );
    let ours_no_budget = RetryLayer::builder()
        .without_budget()
        .build()
        .expect("a valid configuration");
    row(
        &mut group,
        &runtime,
        "ours_no_budget",
        ours_no_budget.layer(Endpoint::failing_every_other_call()),
    );
    group.finish();
}

criterion_group!(benches, retry_path);
criterion_main!(benches);
