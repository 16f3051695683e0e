//! A worker's memory while a dead endpoint's backlog is due, and the healthy deliveries queued
//! behind it: the figures docs/redelivery.md reports.
//!
//! ```text
//! cargo run --release -p demo --example durable_backlog
//! cargo run --release -p demo --features redis --example durable_backlog -- redis 100000
//! ```
//!
//! The first argument is the engine (as for `durable_throughput`), the second the backlog N
//! (100,000 by default). Stores N deliveries to an endpoint that answers 503 to everything,
//! then 200 to a healthy one, all due at once; then runs 4 workers (each holding at most 10
//! deliveries, the demo's bound) for 60 s, and prints the process's resident memory before and
//! at its highest during the run (Linux's `/proc/self/status`), the healthy deliveries' delay
//! after they fell due (p50, p99, the last), the attempts that reached the dead endpoint, and
//! the engine writes the deferred deliveries cost (one store each, beside apalis's batched
//! acknowledgement).

use bytes::Bytes;
use demo::durable::WorkerEngine;
use http::header::HeaderName;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::{Reply, TestServer};
use tower_http_retry_redelivery::{RecordRules, Redelivery, Schedule};

mod engines;

const HEALTHY: usize = 200;
const WORKERS: usize = 4;
const BATCH: usize = 10;
const RUN: Duration = Duration::from_secs(60);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let backlog: usize = std::env::args()
        .nth(2)
        .map_or(100_000, |n| n.parse().expect("the backlog: a number"));
    let run = engines::on_engine(BATCH, Backlog { backlog }).await;
    println!("backlog {backlog} due at once to a dead endpoint, {HEALTHY} healthy behind it, {WORKERS} workers holding at most 10 each");
    println!(
        "resident memory: {:.1} MiB after storing, {:.1} MiB at most while running ({:+.1} MiB)",
        mib(run.rss_before),
        mib(run.rss_peak),
        mib(run.rss_peak) - mib(run.rss_before)
    );
    match run.healthy_delays.as_slice() {
        [] => println!("healthy deliveries: none delivered within {} s", RUN.as_secs()),
        delays => println!(
            "healthy deliveries: {} of {HEALTHY} delivered; after falling due: p50 {:.2} s, p99 {:.2} s, last {:.2} s",
            delays.len(),
            delays[delays.len() / 2],
            delays[(delays.len() * 99).div_ceil(100) - 1],
            delays[delays.len() - 1]
        ),
    }
    println!("attempts to the dead endpoint: {}", run.dead_hits);
    println!(
        "deferred (stored again unsent, one engine write each): {} in {} s; sent and stored again: {}",
        run.deferred,
        RUN.as_secs(),
        run.stored_again
    );
    eprintln!("  {}", run.stats);
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The process's resident memory now, in KiB (`VmRSS`; 0 off Linux).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct Backlog {
    backlog: usize,
}

struct Ran {
    rss_before: u64,
    rss_peak: u64,
    healthy_delays: Vec<f64>,
    dead_hits: usize,
    deferred: u64,
    stored_again: u64,
    stats: String,
}

impl engines::EngineRun for Backlog {
    type Output = Ran;

    async fn run<O: WorkerEngine>(self, outbox: O) -> Ran {
        let rules = RecordRules::new().id_header(HeaderName::from_static(demo::durable::ID_HEADER));
        let body = Bytes::from(vec![b'x'; 512]);
        let dead_hits = Arc::new(AtomicUsize::new(0));
        let hits = Arc::clone(&dead_hits);
        let dead = TestServer::start(move |_| {
            hits.fetch_add(1, Ordering::Relaxed);
            Reply::status(503)
        })
        .await;
        let received = Arc::new(Mutex::new(Vec::new()));
        let arrivals = Arc::clone(&received);
        let healthy = TestServer::start(move |_| {
            arrivals.lock().unwrap().push(Instant::now());
            Reply::status(200)
        })
        .await;
        for n in 0..self.backlog {
            let request = http::Request::post(dead.uri("/hook"))
                .body(body.clone())
                .unwrap();
            outbox
                .store(rules.record(format!("dead_{n}"), request).unwrap())
                .await
                .unwrap();
        }
        for n in 0..HEALTHY {
            let request = http::Request::post(healthy.uri("/hook"))
                .body(body.clone())
                .unwrap();
            outbox
                .store(rules.record(format!("healthy_{n}"), request).unwrap())
                .await
                .unwrap();
        }
        // Every delivery is due by now.
        let due = Instant::now();
        let rss_before = rss_kib();

        let schedule = Schedule::standard_webhooks();
        let redelivery: demo::durable::Worker<O> =
            Redelivery::new(demo::durable::client(&schedule), outbox.clone(), schedule);
        let handles = vec![redelivery.clone(); WORKERS];
        let running = engines::Workers::start(&outbox, &handles);
        let mut rss_peak = rss_before;
        let started = Instant::now();
        while started.elapsed() < RUN {
            tokio::time::sleep(Duration::from_millis(100)).await;
            rss_peak = rss_peak.max(rss_kib());
        }
        running.stop();
        let stats = redelivery.stats();
        let mut healthy_delays: Vec<f64> = received
            .lock()
            .unwrap()
            .iter()
            .map(|at| at.duration_since(due).as_secs_f64())
            .collect();
        healthy_delays.sort_by(f64::total_cmp);
        Ran {
            rss_before,
            rss_peak,
            healthy_delays,
            dead_hits: dead_hits.load(Ordering::Relaxed),
            deferred: stats.deferred,
            stored_again: stats.stored_again,
            stats: format!("{stats:?}"),
        }
    }
}
