//! Instructions per successful call through each service stack, counted by callgrind.
//!
//! Wall-clock numbers on a shared machine vary from run to run; an instruction count is the same
//! every run, so small differences between the rows stay visible. The inner service is a
//! `tower::service_fn` that answers `200` at once; the request is a GET with an empty body. Each
//! row sends a batch of [`CALLS`] requests through one service and divides the count by
//! [`CALLS`]. Everything else happens outside the counted function: the service, the requests and
//! a current-thread runtime (entered, as a client's would be) are made beforehand, one warm-up call
//! runs lazy initialisation, the futures are polled once with a no-op waker (nothing waits), and
//! the responses are checked and dropped afterwards.
//!
//! Rows, as in `success_path`: no layer (the baseline), `tower::retry::Retry` with a minimal policy
//! and `TpsBudget`, tower-resilience's retry with its token-bucket budget, this crate's `RetryLayer` with the default configuration, with pacing
//! configured (`Pacing::new()`, the endpoint open: every call succeeds), and with the budget
//! turned off, the circuit breaker alone (closed), the hedging layer alone with its defaults
//! (`hedge_armed`: past the 20 latencies its sketch needs, every request is armed and answered
//! before its delay), tower's `hedge` with the same settings (`tower_hedge`, its histogram
//! seeded so that every request is armed too), and the retry layer over the hedging layer
//! (`ours_retry_hedge`).
//!
//! Callgrind counts instructions, not time: a clock read shows up as a few instructions plus a
//! system call that is not counted, and cache misses and atomics cost no more than other
//! instructions.
//!
//! This bench is a crate of its own (`benches-instructions/`, never published), so that its
//! release build is this crate with its default features, tower, http, tokio, gungraun and
//! tower-resilience's retry, and none of the main package's dev-dependencies. Run (needs valgrind, and the `gungraun-runner`
//! binary of exactly the version of the `gungraun` dependency):
//!
//! ```text
//! cargo install --locked gungraun-runner --version 0.20.0
//! cargo bench -p tower-http-retry-instructions --bench instructions -- --nocapture
//! ```
//!
//! gungraun prints each row's counts; `--nocapture` also lets through the table printed at the
//! end, instructions per call and their ratios to `tower::retry` and to the baseline, and each
//! layer's overhead (its row minus the baseline) over `tower::retry`'s. `cargo xtask
//! instructions` runs this bench and fails when our overhead ratio rises more than 5 % above the
//! value recorded in `benches-instructions/instructions.baseline`. The table
//! reads the latest callgrind profile of each row, kept under `target/gungraun/` (also for
//! `callgrind_annotate`), so a filtered run mixes fresh and earlier rows.

use gungraun::{library_benchmark, library_benchmark_group, main};
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::env;
use std::fmt::Debug;
use std::fs;
use std::future::ready;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;
use tokio::runtime::{EnterGuard, Runtime};
use tower::retry::budget::TpsBudget;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_http_retry::hedge::HedgeLayer;
use tower_http_retry::{CircuitBreakerLayer, Pacing, RetryLayer};
use tower_http_retry_instructions::{noop_waker, poll_now, TowerPolicy};

include!("support/harness.rs");

/// tower-resilience's retry as its docs configure it (3 attempts, exponential backoff from
/// 100 ms), with its token-bucket budget (10 tokens a second, 100 at most), the nearest to
/// `TpsBudget`.
fn tower_resilience_retry() -> Box<dyn Batch> {
    batch(|| {
        let budget = tower_resilience_retry::RetryBudgetBuilder::new()
            .token_bucket()
            .build()
            .expect("a valid budget");
        tower_resilience_retry::RetryLayer::<Req, Resp, Infallible>::builder()
            .max_attempts(3)
            .exponential_backoff(Duration::from_millis(100))
            .budget(budget)
            .build()
            // The same answer as `endpoint()`'s, from a service whose future is known to be
            // `Send`, as tower-resilience's boxed future needs.
            .layer(service_fn(|_: Req| {
                ready(Ok::<_, Infallible>(Response::new(String::new())))
            }))
    })
}

fn ours_default() -> Box<dyn Batch> {
    batch(|| RetryLayer::new().layer(endpoint()))
}

fn ours_pacing() -> Box<dyn Batch> {
    batch(|| {
        RetryLayer::builder()
            .pacing(Pacing::new())
            .build()
            .expect("a valid configuration")
            .layer(endpoint())
    })
}

fn ours_no_budget() -> Box<dyn Batch> {
    batch(|| {
        RetryLayer::builder()
            .without_budget()
            .build()
            .expect("a valid configuration")
            .layer(endpoint())
    })
}

/// The hedging layer with its defaults, past the latencies it needs for a delay: every request
/// is armed (a copy kept, a timer set) and answered before the delay, so no hedge goes out.
fn hedge_armed() -> Box<dyn Batch> {
    batch(|| {
        let hedge = HedgeLayer::builder()
            .build()
            .expect("a valid configuration");
        warmed(hedge.layer(endpoint()))
    })
}

/// tower's `hedge` at p95 with at least 20 latencies (the hedging layer's defaults), past its
/// first period (read from the previous one) so that every request is armed.
fn tower_hedge() -> Box<dyn Batch> {
    #[derive(Clone)]
    struct CloneAny;
    impl tower::hedge::Policy<Req> for CloneAny {
        fn clone_request(&self, request: &Req) -> Option<Req> {
            let mut copy = Request::new(request.body().clone());
            *copy.method_mut() = request.method().clone();
            *copy.uri_mut() = request.uri().clone();
            *copy.headers_mut() = request.headers().clone();
            Some(copy)
        }
        fn can_retry(&self, _: &Req) -> bool {
            true
        }
    }
    batch(|| {
        let period = Duration::from_secs(30);
        let latencies = [1; 20];
        let hedge = tower::hedge::Hedge::new_with_mock_latencies(
            endpoint(),
            CloneAny,
            20,
            0.95,
            period,
            &latencies,
        );
        warmed(hedge)
    })
}

/// The retry layer over the hedging layer, as the guide stacks them (the hedge charged to the
/// retry layer's budget and gated by its pacer).
fn ours_retry_hedge() -> Box<dyn Batch> {
    batch(|| {
        let retry = RetryLayer::new();
        let hedge = HedgeLayer::builder()
            .retry_layer(&retry)
            .build()
            .expect("a valid configuration");
        warmed(retry.layer(hedge.layer(endpoint())))
    })
}

/// Sends enough requests first for the latency sketch to give a delay (`min_samples`, 20).
fn warmed<S>(mut service: S) -> S
where
    S: Service<Req, Response = Resp>,
    S::Error: Debug,
{
    let waker = noop_waker();
    for _ in 0..20 {
        call(&mut service, request(), &waker);
    }
    service
}

fn circuit_breaker() -> Box<dyn Batch> {
    batch(|| CircuitBreakerLayer::new().layer(endpoint()))
}

fn check(batch: Box<dyn Batch>) {
    batch.check();
}

#[library_benchmark(teardown = check)]
#[bench::no_layer(no_layer())]
#[bench::tower_retry_tps_budget(tower_retry_tps_budget())]
#[bench::tower_resilience_retry(tower_resilience_retry())]
#[bench::ours_default(ours_default())]
#[bench::ours_pacing(ours_pacing())]
#[bench::ours_no_budget(ours_no_budget())]
#[bench::circuit_breaker(circuit_breaker())]
#[bench::hedge_armed(hedge_armed())]
#[bench::tower_hedge(tower_hedge())]
#[bench::ours_retry_hedge(ours_retry_hedge())]
fn success_x100(mut batch: Box<dyn Batch>) -> Box<dyn Batch> {
    batch.run();
    batch
}

library_benchmark_group!(name = success_path, benchmarks = success_x100);

/// The bench ids above, in table order. The ratios are taken to the first two rows.
const ROWS: [&str; 10] = [
    "no_layer",
    "tower_retry_tps_budget",
    "tower_resilience_retry",
    "ours_default",
    "ours_pacing",
    "ours_no_budget",
    "circuit_breaker",
    "hedge_armed",
    "tower_hedge",
    "ours_retry_hedge",
];

include!("support/table.rs");

main!(
    teardown = print_table();
    library_benchmark_groups = success_path
);
