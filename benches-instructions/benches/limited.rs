//! Instructions per successful call with adaptive concurrency on, beside pacing alone, counted
//! as the gated bench (`instructions.rs`) counts them: the same harness and table, in a binary
//! of its own so that this row, which is not gated, does not move the gated rows' counts.
//!
//! `cargo bench -p tower-http-retry-instructions --bench limited -- --nocapture`

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
use tower_http_retry::pacing::AdaptiveConcurrency;
use tower_http_retry::{Pacing, RetryLayer};
use tower_http_retry_instructions::{noop_waker, poll_now, TowerPolicy};

include!("support/harness.rs");

/// The retry layer over the endpoint with `pacing`.
fn paced(pacing: Pacing) -> Box<dyn Batch> {
    batch(move || {
        RetryLayer::builder()
            .pacing(pacing)
            .build()
            .expect("a valid configuration")
            .layer(endpoint())
    })
}

fn ours_pacing() -> Box<dyn Batch> {
    paced(Pacing::new())
}

/// Pacing with adaptive concurrency on a healthy endpoint: every request takes and gives back a
/// place in flight under the endpoint's lock.
fn ours_limited() -> Box<dyn Batch> {
    let limited = Pacing::builder()
        .adaptive_concurrency(AdaptiveConcurrency::new())
        .build()
        .expect("a valid configuration");
    paced(limited)
}

fn check(batch: Box<dyn Batch>) {
    batch.check();
}

#[library_benchmark(teardown = check)]
#[bench::no_layer(no_layer())]
#[bench::tower_retry_tps_budget(tower_retry_tps_budget())]
#[bench::ours_pacing(ours_pacing())]
#[bench::ours_limited(ours_limited())]
fn success_x100(mut batch: Box<dyn Batch>) -> Box<dyn Batch> {
    batch.run();
    batch
}

library_benchmark_group!(name = success_path, benchmarks = success_x100);

/// The bench ids above, in table order. The ratios are taken to the first two rows.
const ROWS: [&str; 4] = [
    "no_layer",
    "tower_retry_tps_budget",
    "ours_pacing",
    "ours_limited",
];

include!("support/table.rs");

main!(
    teardown = print_table();
    library_benchmark_groups = success_path
);
