//! What a request waiting in the pacer's queue costs in memory, its task and the request
//! included: N requests (bare GETs, then webhook-sized POSTs: 1 KiB bodies, five headers) to an
//! endpoint that paused itself (a 429 with its quota reset in 60 s), the heap measured by dhat's
//! allocator before they are spawned and once every one of them waits; the request's own heap
//! (measured the same way, for requests made and kept) is shown beside it.
//!
//! `cargo run --release -p demo --example waiting_memory` (the target: at most 1 KiB each).

use std::time::Duration;
use tower::{service_fn, Layer, ServiceExt};
use tower_http_retry::hint::HintPolicy;
use tower_http_retry::{Pacing, RetryLayer};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

type Req = http::Request<String>;
type Res = http::Response<String>;
/// Makes request number `i` of a kind.
type MakeRequest = fn(usize) -> Req;

fn bare(_i: usize) -> Req {
    http::Request::get("http://receiver.test/")
        .body(String::new())
        .unwrap()
}

fn delivery(i: usize) -> Req {
    http::Request::post("http://receiver.test/hooks")
        .header("content-type", "application/json")
        .header("webhook-id", format!("msg_{i:08}"))
        .header("webhook-timestamp", "1764547200")
        .header(
            "webhook-signature",
            "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
        )
        .header("idempotency-key", format!("msg_{i:08}"))
        .body("x".repeat(1024))
        .unwrap()
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        // The first call pauses the endpoint for 60 s; nothing else is answered meanwhile.
        let endpoint = service_fn(|_: Req| async {
            Ok::<Res, std::io::Error>(
                http::Response::builder()
                    .status(429)
                    .header("x-ratelimit-remaining", "0")
                    .header("x-ratelimit-reset", "60")
                    .body(String::new())
                    .unwrap(),
            )
        });
        let layer = RetryLayer::builder()
            .hint_policy(HintPolicy::honored().max_delay(Duration::from_secs(120)))
            .pacing(
                Pacing::builder()
                    .max_waiters(200_000)
                    .build()
                    .expect("valid pacing"),
            )
            .build()
            .unwrap();
        let service = layer.layer(endpoint);
        // The first request, answered 429: the endpoint pauses and it waits for the reset.
        let first = tokio::spawn(service.clone().oneshot(delivery(0)));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let authority = "receiver.test".parse().unwrap();
        println!("request       waiting   heap per waiting request   of which the request   future");
        let mut tasks = Vec::new();
        let kinds: [(&str, MakeRequest); 2] = [("bare GET", bare), ("webhook POST", delivery)];
        for (kind, make) in kinds {
            for n in [10_000, 100_000] {
                let before = dhat::HeapStats::get().curr_bytes;
                let kept: Vec<Req> = (0..n).map(make).collect();
                let request = (dhat::HeapStats::get().curr_bytes - before) as f64 / n as f64;
                drop(kept);
                let size = std::mem::size_of_val(&service.clone().oneshot(make(0)));
                let before = dhat::HeapStats::get().curr_bytes;
                for i in 0..n {
                    tasks.push(tokio::spawn(service.clone().oneshot(make(i + 1))));
                }
                // Every one polled once: each waits in the endpoint's queue.
                tokio::time::sleep(Duration::from_millis(10)).await;
                let stats = layer.pacing_stats(Some(&authority)).expect("paced");
                assert!(stats.waiting >= n, "{} of {n} waiting", stats.waiting);
                let after = dhat::HeapStats::get().curr_bytes;
                let per = (after - before) as f64 / n as f64;
                println!(
                    "{kind:<12} {n:>8}   {per:>6.0} B ({:.2} KiB)          {request:>6.0} B              {size} B",
                    per / 1024.0
                );
                for task in tasks.drain(..) {
                    task.abort();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        first.abort();
    });
}
