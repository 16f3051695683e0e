//! Deliveries per second through the durable path to a healthy loopback receiver, on SQLite,
//! Redis or Postgres: the figures docs/redelivery.md reports.
//!
//! ```text
//! cargo run --release -p demo --example durable_throughput
//! cargo run --release -p demo --features redis --example durable_throughput -- redis
//! cargo run --release -p demo --features postgres --example durable_throughput -- postgres
//! ```
//!
//! Stores 5,000 deliveries (one write each, as senders store them), then runs workers on
//! threads of this process until every one is delivered, and prints both rates, for 1, 2 and 4
//! workers. Each worker takes batches of 50. On Redis each run starts a `redis-server` of its
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
use tower_http_retry_redelivery::sqlite::{self, SqliteOptions};
use tower_http_retry_redelivery::{RecordRules, Redelivery, Schedule};

const DELIVERIES: usize = 5_000;
const BATCH: usize = 50;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let engine = std::env::args().nth(1).unwrap_or_default();
    println!("workers   stored/s   delivered/s");
    for workers in [1, 2, 4] {
        let (stored, delivered) = match engine.as_str() {
            "redis" => on_redis(workers).await,
            "postgres" => on_postgres(workers).await,
            _ => on_sqlite(workers).await,
        };
        println!("{workers:>7}   {stored:>8.0}   {delivered:>11.0}");
    }
}

async fn on_sqlite(workers: usize) -> (f64, f64) {
    let dir = std::env::temp_dir().join(format!(
        "durable-throughput-{}-{workers}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = SqliteOptions {
        batch_size: BATCH,
        ..SqliteOptions::default()
    };
    let outbox = sqlite::open(dir.join("deliveries.db"), options)
        .await
        .unwrap();
    let rates = run(outbox, workers).await;
    let _ = std::fs::remove_dir_all(&dir);
    rates
}

#[cfg(feature = "redis")]
async fn on_redis(workers: usize) -> (f64, f64) {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::redis::{self, RedisOptions};
    let binary =
        servers::locate(servers::REDIS).expect("redis-server: apt-get install redis-server");
    let port = servers::free_port();
    let _server = Server::redis(&binary, port);
    let options = RedisOptions {
        batch_size: BATCH,
        ..RedisOptions::default()
    };
    let outbox = redis::open(&format!("redis://127.0.0.1:{port}/"), options)
        .await
        .unwrap();
    run(outbox, workers).await
}

#[cfg(not(feature = "redis"))]
async fn on_redis(_: usize) -> (f64, f64) {
    panic!("built without the `redis` feature: add `--features redis`")
}

#[cfg(feature = "postgres")]
async fn on_postgres(workers: usize) -> (f64, f64) {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::postgres::{self, PostgresOptions};
    let binary = servers::locate(servers::POSTGRES).expect("postgres: apt-get install postgresql");
    let port = servers::free_port();
    let _server = Server::postgres(&binary, port);
    let options = PostgresOptions {
        batch_size: BATCH,
        ..PostgresOptions::default()
    };
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let outbox = postgres::open(&url, options).await.unwrap();
    run(outbox, workers).await
}

#[cfg(not(feature = "postgres"))]
async fn on_postgres(_: usize) -> (f64, f64) {
    panic!("built without the `postgres` feature: add `--features postgres`")
}

async fn run<O: WorkerEngine>(outbox: O, workers: usize) -> (f64, f64) {
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
    let mut stops = Vec::new();
    let mut threads = Vec::new();
    let mut handles = Vec::new();
    for n in 0..workers {
        let redelivery: demo::durable::Worker<O> = Redelivery::new(
            demo::durable::client(&schedule),
            outbox.clone(),
            schedule.clone(),
        );
        handles.push(redelivery.clone());
        let outbox = outbox.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        threads.push(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let stopped = async move {
                let _ = stopped.await;
            };
            runtime.block_on(outbox.work(&format!("bench-{n}"), redelivery, stopped));
        }));
    }
    while received.load(Ordering::Relaxed) < DELIVERIES
        && start.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered = received.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    drop(stops);
    for thread in threads {
        let _ = thread.join();
    }
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
