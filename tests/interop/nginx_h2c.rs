//! nginx serving h2c, rotating every connection after three requests with a graceful `GOAWAY`
//! and allowing four concurrent streams: every request it turns away unprocessed is sent again,
//! whatever its method, and rotation makes no request fail. (A POST can still fail on hyper's
//! `User(DispatchGone)`, which is ambiguous: see the classification table.)

use crate::servers::{self, Applied, Server, NGINX};
use crate::{burst, h2_client, retried, rotation_failed_nothing, tally, AttemptErrors, Ended};
use http::{Method, Uri};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tower_http_retry::RetryLayer;

const TEMPLATE: &str = include_str!("conf/nginx-h2c.conf");

pub(crate) fn start(test: &str) -> Option<(Server, Uri)> {
    let nginx = servers::require(NGINX, test)?;
    let port = servers::free_port();
    let vars = BTreeMap::from([("PORT", port.to_string())]);
    let server = Server::nginx(&nginx, TEMPLATE, vars, &[port]);
    let uri = format!("http://127.0.0.1:{port}/").parse().expect("a URI");
    Some((server, uri))
}

/// The access log once it holds at least `lines` lines (nginx writes an entry just after the
/// answer), or after a second.
pub(crate) async fn settled_log(server: &Server, lines: usize) -> Applied {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let log = server.access_log();
        if log.lines().count() >= lines || Instant::now() > until {
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Applied::from_access_log(&server.access_log(), 200);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The layer of the measurement: three attempts, everything else default.
fn layer() -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(3)
        .build()
        .expect("valid")
}

/// One burst's figures, as the table has them.
pub(crate) struct Figures {
    pub delivered: usize,
    pub sent: usize,
    pub twice: Vec<String>,
    pub missing: Vec<String>,
    pub errors: BTreeMap<String, u32>,
}

/// Sends `n` requests of `method` at once (at most `concurrency` in flight) through a fresh
/// client and layer, and reads what nginx applied.
pub(crate) async fn run(
    server: &Server,
    uri: &Uri,
    label: &str,
    methods: &[Method],
    n: usize,
    concurrency: usize,
) -> (Figures, Vec<Ended>) {
    let errors = AttemptErrors::default();
    let layer = layer();
    let service = retried(&layer, h2_client(), &errors);
    let before = server.access_log().lines().count();
    let requests: Vec<(Method, String)> = (0..n)
        .map(|i| {
            let method = methods[i % methods.len()].clone();
            (method, format!("{label}-{i}"))
        })
        .collect();
    let ids: Vec<String> = requests.iter().map(|(_, id)| id.clone()).collect();
    let ended = burst(service, uri, requests, concurrency).await;
    let applied = settled_log(server, before + n).await;
    let figures = Figures {
        delivered: ended
            .iter()
            .filter(|e| matches!(e.result, Ok(200..=299)))
            .count(),
        sent: n,
        twice: applied.twice(&ids),
        missing: ids
            .iter()
            .filter(|id| applied.count(id) == 0)
            .cloned()
            .collect(),
        errors: errors.snapshot(),
    };
    let stats = layer.stats();
    eprintln!(
        "[nginx h2c {label}] delivered {}/{n}; nginx's log: {}; applied twice: {:?}; never \
         applied: {}; failed attempts by reason: {:?}; {}; layer: {} attempts, {} rotation \
         resends, {} unknown errors, budget granted {}",
        figures.delivered,
        applied.summary(&ids),
        figures.twice,
        figures.missing.len(),
        figures.errors,
        tally(&ended),
        stats.attempts,
        stats.rotation_resends,
        stats.unknown_errors,
        stats.budget_granted,
    );
    (figures, ended)
}

/// What rotation may cost: nothing. See [`rotation_failed_nothing`]; and every request nginx
/// answered was applied.
fn assert_rotation_costs_nothing(figures: &Figures, ended: &[Ended]) {
    rotation_failed_nothing(ended, &figures.twice);
    let delivered_missing: Vec<_> = ended
        .iter()
        .filter(|e| e.result.is_ok() && figures.missing.contains(&e.id))
        .collect();
    assert!(delivered_missing.is_empty(), "{delivered_missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_fails_no_request_of_a_burst_of_60_gets_and_60_unkeyed_posts() {
    let Some((server, uri)) = start("nginx h2c rotation, 60 + 60") else {
        return;
    };
    let (gets, ended) = run(&server, &uri, "get", &[Method::GET], 60, 60).await;
    assert_rotation_costs_nothing(&gets, &ended);
    let (posts, ended) = run(&server, &uri, "post", &[Method::POST], 60, 60).await;
    assert_rotation_costs_nothing(&posts, &ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_fails_none_of_a_thousand_requests_at_100_concurrent() {
    let Some((server, uri)) = start("nginx h2c rotation, 1,000 at 100") else {
        return;
    };
    let (figures, ended) = run(
        &server,
        &uri,
        "mixed",
        &[Method::GET, Method::POST],
        1_000,
        100,
    )
    .await;
    assert_rotation_costs_nothing(&figures, &ended);
}

/// The table, re-measured: 20 runs of the 60 GET and 60 POST bursts, one line each.
/// `cargo test --test interop -- --ignored twenty --nocapture`
#[ignore = "a measurement, about 20 s"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_runs_of_the_rotation_burst() {
    let Some((server, uri)) = start("nginx h2c rotation, 20 runs") else {
        return;
    };
    let mut rows = Vec::new();
    for run_number in 1..=20 {
        for method in [Method::GET, Method::POST] {
            let label = format!("r{run_number}-{method}");
            let (figures, ended) =
                run(&server, &uri, &label, std::slice::from_ref(&method), 60, 60).await;
            assert_rotation_costs_nothing(&figures, &ended);
            rows.push((run_number, method, figures));
        }
    }
    println!("| run | method | delivered | applied twice | failed attempts by reason |");
    println!("|---:|---|---:|---:|---|");
    for (run_number, method, f) in &rows {
        println!(
            "| {run_number} | {method} | {}/{} | {} | {:?} |",
            f.delivered,
            f.sent,
            f.twice.len(),
            f.errors
        );
    }
}
