//! nginx `limit_req` as a real rate limiter (429 with `Retry-After`, a burst) in front of the
//! test's upstream, and an outage (503 with `Retry-After`) toggled by a file: after the outage,
//! `RetryLayer::bulk()` makes every delivery with few overload rejections (the tighter target:
//! at most 5 % of N).

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
const OUTAGE: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_every_delivery_is_made_with_few_overload_rejections() {
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
        tokio::time::sleep(OUTAGE).await;
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
    let rejected = log.statuses.get(&429).copied().unwrap_or(0);
    let down = log.statuses.get(&503).copied().unwrap_or(0);
    let failed = undelivered(&ended);
    let limit = N / 20;
    eprintln!(
        "[nginx limit_req {RATE}/s burst {BURST}, outage {OUTAGE:?}] delivered {}/{N} in \
         {elapsed:?}; upstream applied: {}; nginx answered {:?}: 429 (overload) {rejected} = \
         {:.1} % of N (target <= 5 %: {}), 503 (outage) {down}; failed attempts: {:?}; {}",
        N - failed.len(),
        applied.summary(&ids),
        log.statuses,
        rejected as f64 * 100.0 / N as f64,
        if rejected as usize <= limit {
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
        rejected as usize <= limit,
        "overload rejections {rejected} > 5 % of {N}"
    );
}
