//! Deliveries per second through the durable path to a healthy loopback receiver, on SQLite,
//! Redis or Postgres: the figures docs/redelivery.md reports.
//!
//! ```text
//! cargo run --release -p demo --example durable_throughput
//! cargo run --release -p demo --features redis --example durable_throughput -- redis
//! cargo run --release -p demo --features postgres --example durable_throughput -- postgres
//! SQLITE_CONNECTIONS=1 cargo run --release -p demo --example durable_throughput
//! ```
//!
//! Stores 5,000 deliveries (one write each, as senders store them), then runs workers on
//! threads of this process until every one is delivered, and prints both rates, for 1, 2 and 4
//! workers, beside the engine's own ceiling measured on the same engine just before: single-row
//! writes a second through the crate's connection, from as many writers as workers. Each
//! worker takes batches of 50. On Redis each run starts a `redis-server` of its
//! own on loopback (Debian's `redis-server`), nothing saved to disk; on Postgres a server of its
//! own (Debian's `postgresql`, a cluster made by `initdb` in a temporary directory, its
//! defaults: every commit flushed to disk).

use bytes::Bytes;
use demo::durable::WorkerEngine;
use http::header::HeaderName;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::{Reply, TestServer};
use tower_http_retry_redelivery::{RecordRules, Redelivery, Schedule};

const DELIVERIES: usize = 5_000;
const BATCH: usize = 50;

mod engines;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("workers   stored/s   delivered/s   engine writes/s   delivered/writes");
    for workers in [1, 2, 4] {
        let (stored, delivered, ceiling) = engines::on_engine(BATCH, Throughput { workers }).await;
        let share = 100.0 * delivered / ceiling;
        println!(
            "{workers:>7}   {stored:>8.0}   {delivered:>11.0}   {ceiling:>15.0}   {share:>15.0} %"
        );
    }
}

struct Throughput {
    workers: usize,
}

impl engines::EngineRun for Throughput {
    type Output = (f64, f64, f64);

    async fn run<O: WorkerEngine>(self, outbox: O) -> (f64, f64, f64) {
        // The engine's own ceiling, as many writers as workers, on the same engine just before
        // (after, the Postgres pool's connections would be those the workers' runtimes opened,
        // gone with them).
        let ceiling = engines::write_ceiling(&outbox, self.workers).await;
        let (stored, delivered) = run(&outbox, self.workers).await;
        (stored, delivered, ceiling)
    }
}

async fn run<O: WorkerEngine>(outbox: &O, workers: usize) -> (f64, f64) {
    let received = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&received);
    let receiver = TestServer::start(move |_| {
        count.fetch_add(1, Ordering::Relaxed);
        Reply::status(200)
    })
    .await;
    let rules = RecordRules::new().id_header(HeaderName::from_static(demo::durable::ID_HEADER));
    let body = Bytes::from(vec![b'x'; 512]);
    let start = Instant::now();
    for n in 0..DELIVERIES {
        let request = http::Request::post(receiver.uri("/hook"))
            .body(body.clone())
            .unwrap();
        outbox
            .store(rules.record(format!("evt_{n}"), request).unwrap())
            .await
            .unwrap();
    }
    let stored = DELIVERIES as f64 / start.elapsed().as_secs_f64();

    let schedule = Schedule::standard_webhooks();
    let start = Instant::now();
    // One client (so one retry layer and pacer) per worker.
    let handles: Vec<demo::durable::Worker<O>> = (0..workers)
        .map(|_| {
            Redelivery::new(
                demo::durable::client(&schedule),
                outbox.clone(),
                schedule.clone(),
            )
        })
        .collect();
    let running = engines::Workers::start(outbox, &handles);
    while received.load(Ordering::Relaxed) < DELIVERIES
        && start.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered = received.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    running.stop();
    let (mut again, mut deferred, mut sent) = (0, 0, 0);
    for handle in &handles {
        let stats = handle.stats();
        again += stats.stored_again;
        deferred += stats.deferred;
        sent += stats.sent;
    }
    // To stderr, beside the table: a rate the pacer set would show here as deferred.
    eprintln!("  {workers} worker(s): {sent} slots sent, {again} stored again, {deferred} deferred, {} received", received.load(Ordering::Relaxed));
    (stored, delivered)
}
