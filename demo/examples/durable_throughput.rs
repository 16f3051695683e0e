//! Deliveries per second through the durable path on SQLite to a healthy loopback receiver:
//! the figure docs/redelivery.md reports.
//!
//! ```text
//! cargo run --release -p demo --example durable_throughput
//! ```
//!
//! Stores 5,000 deliveries (one transaction each, as senders store them), then runs workers on
//! threads of this process until every one is delivered, and prints both rates, for 1, 2 and 4
//! workers. Each worker takes batches of 50 (`SqliteOptions::batch_size`).

use bytes::Bytes;
use http::header::HeaderName;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::{Reply, TestServer};
use tower_http_retry_redelivery::sqlite::{self, SqliteOptions};
use tower_http_retry_redelivery::{Delivery, Outbox, RecordRules, Redelivery, Schedule};

const DELIVERIES: usize = 5_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("workers   stored/s   delivered/s");
    for workers in [1, 2, 4] {
        let (stored, delivered) = run(workers).await;
        println!("{workers:>7}   {stored:>8.0}   {delivered:>11.0}");
    }
}

async fn run(workers: usize) -> (f64, f64) {
    let received = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&received);
    let receiver = TestServer::start(move |_| {
        count.fetch_add(1, Ordering::Relaxed);
        Reply::status(200)
    })
    .await;
    let dir = std::env::temp_dir().join(format!(
        "durable-throughput-{}-{workers}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = SqliteOptions {
        batch_size: 50,
        ..SqliteOptions::default()
    };
    let outbox = sqlite::open(dir.join("deliveries.db"), options)
        .await
        .unwrap();
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
    for n in 0..workers {
        let redelivery: demo::durable::Worker = Redelivery::new(
            demo::durable::client(&schedule),
            outbox.clone(),
            schedule.clone(),
        );
        let worker = apalis_core::worker::builder::WorkerBuilder::new(format!("bench-{n}"))
            .backend(outbox.queue().clone())
            .build(move |delivery: Delivery| redelivery.handle(delivery));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        threads.push(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let _ = worker
                    .run_until(async move {
                        let _ = stopped.await;
                        Ok::<(), std::io::Error>(())
                    })
                    .await;
            });
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
    let _ = std::fs::remove_dir_all(&dir);
    (stored, delivered)
}
