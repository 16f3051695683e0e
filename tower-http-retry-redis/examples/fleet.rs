//! A fleet of senders paces one endpoint as one, through Redis: each worker has its own Redis
//! connection, its own `RetryLayer` and its own hyper-util client, as separate processes would.
//!
//! ```text
//! cargo run -p tower-http-retry-redis --example fleet          # through a RedisStore
//! cargo run -p tower-http-retry-redis --example fleet -- alone # the same workers, each pacing alone
//! ```
//!
//! It starts its own `redis-server` (Debian's `redis-server` package; without it the example
//! says so and exits) on a free loopback port, with nothing saved to disk, and an endpoint on
//! 127.0.0.1 that answers 503 for its first 4 s, then serves at most 200 requests a second (503
//! for the excess). Three workers each send 300 POSTs with an `Idempotency-Key`, spread over the
//! first half second. It prints what reached the endpoint while it was down (from 1 s on, only
//! probes), and per worker its deliveries, its probes and its Redis calls.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis::aio::ConnectionManager;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_http_retry::pacing::store::PacingStore;
use tower_http_retry::{Backoff, Jitter, Pacing, RetryLayer};
use tower_http_retry_redis::RedisStore;

const WORKERS: usize = 3;
const PER_WORKER: usize = 300;
const OUTAGE: Duration = Duration::from_secs(4);
const CAPACITY: f64 = 200.0;
/// Every worker has sent its first attempts by then: only probes reach the dead endpoint.
const PROBING: Duration = Duration::from_secs(1);

/// What the endpoint saw.
struct Endpoint {
    started: Instant,
    /// Tokens of the capacity, refilled at `CAPACITY` a second (at most 10 held), and when.
    bucket: (f64, Instant),
    /// Requests while down, and those from `PROBING` on (every first attempt made by then).
    while_down: u32,
    probing: u32,
    overload: u32,
}

async fn endpoint(State(state): State<Arc<Mutex<Endpoint>>>) -> StatusCode {
    let mut e = state.lock().unwrap();
    let now = Instant::now();
    if now < e.started + OUTAGE {
        e.while_down += 1;
        if now >= e.started + PROBING {
            e.probing += 1;
        }
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let (tokens, at) = e.bucket;
    let tokens = (tokens + (now - at.max(e.started + OUTAGE)).as_secs_f64() * CAPACITY).min(10.0);
    if tokens < 1.0 {
        e.bucket = (tokens, now);
        e.overload += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    e.bucket = (tokens - 1.0, now);
    StatusCode::OK
}

/// A redis-server of the example's own, killed when dropped.
struct RedisServer(Child);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> Option<(RedisServer, u16)> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let binary = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())?;
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new(binary)
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--logfile", ""])
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    let server = RedisServer(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..250 {
        if TcpStream::connect(addr).is_ok() {
            return Some((server, port));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let alone = std::env::args().any(|arg| arg == "alone");
    let Some((_redis, redis_port)) = start_redis() else {
        println!(
            "redis-server is not installed (or did not start): `apt-get install redis-server`"
        );
        return Ok(());
    };
    let started = Instant::now();
    let state = Arc::new(Mutex::new(Endpoint {
        started,
        bucket: (10.0, started),
        while_down: 0,
        probing: 0,
        overload: 0,
    }));
    let app = Router::new()
        .fallback(endpoint)
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let uri: http::Uri = format!("http://{}/", listener.local_addr()?).parse()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!(
        "redis-server on 127.0.0.1:{redis_port}; endpoint {uri}: 503 for {OUTAGE:?}, then \
         {CAPACITY}/s; {WORKERS} workers x {PER_WORKER} deliveries, {}",
        if alone {
            "each pacing alone"
        } else {
            "sharing a RedisStore"
        }
    );

    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..WORKERS {
        // A worker of the fleet: its own connection, store, layer and client.
        let client = redis::Client::open(format!("redis://127.0.0.1:{redis_port}/"))?;
        let store = RedisStore::builder(ConnectionManager::new(client).await?)
            .prefix("example:fleet")
            .build()?;
        let pacing = match alone {
            true => Pacing::new(),
            false => Pacing::builder().store(store.clone()).build()?,
        };
        let retry = RetryLayer::builder()
            .max_attempts(30)
            .backoff(Backoff::new(
                Jitter::Full,
                Duration::from_millis(100),
                Duration::from_secs(2),
            ))
            .pacing(pacing)
            .build()?;
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let service = ServiceBuilder::new()
            .layer(retry.clone())
            .timeout(Duration::from_secs(2))
            .service(client);
        let uri = uri.clone();
        workers.spawn(async move {
            let mut sends = tokio::task::JoinSet::new();
            for i in 0..PER_WORKER {
                let (service, uri) = (service.clone(), uri.clone());
                sends.spawn(async move {
                    let spread = Duration::from_millis(500) * i as u32 / PER_WORKER as u32;
                    tokio::time::sleep(spread).await;
                    let request = http::Request::post(uri)
                        .header("idempotency-key", format!("{worker}-{i}"))
                        .body(Full::new(Bytes::new()))?;
                    let response = service.oneshot(request).await?;
                    Ok::<_, BoxError>(response.status() == StatusCode::OK)
                });
            }
            let delivered = sends
                .join_all()
                .await
                .into_iter()
                .flatten()
                .filter(|ok| *ok);
            let delivered = delivered.count();
            let done = started.elapsed();
            let probes = retry
                .pacing_stats(uri.authority())
                .map_or(0, |stats| stats.probes);
            (
                worker,
                delivered,
                done,
                probes,
                retry.stats().attempts,
                store.stats(),
            )
        });
    }
    let mut results = workers.join_all().await;
    results.sort_by_key(|result| result.0);

    let e = state.lock().unwrap();
    let probing = (OUTAGE - PROBING).as_secs_f64();
    println!(
        "while down ({OUTAGE:?}): {} requests reached the endpoint, {} in its last {probing} s \
         ({:.1}/s: the probes); overload 503s after it: {}",
        e.while_down,
        e.probing,
        f64::from(e.probing) / probing,
        e.overload
    );
    println!("worker  delivered  done after recovery  probes  attempts  Redis calls (per attempt)  fallbacks");
    for (worker, delivered, done, probes, attempts, stats) in results {
        println!(
            "{worker:>6}  {delivered:>5}/{PER_WORKER}  {:>17.2} s  {probes:>6}  {attempts:>8}  {:>11} ({:.3})  {:>9}",
            done.saturating_sub(OUTAGE).as_secs_f64(),
            stats.calls,
            stats.calls as f64 / attempts.max(1) as f64,
            stats.fallbacks,
        );
    }
    Ok(())
}
