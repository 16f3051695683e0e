//! A capacity-limited loopback endpoint for the multi-process fleet (`processes.rs`): HTTP/1.1 on
//! `127.0.0.1:0` through hyper, down (503 to everything) for its first `outage`, then serving at
//! most `capacity` requests a second (a token bucket holding 50 ms' worth), 503 for the excess.
//! A success is answered after 10 ms, a refusal at once.
//!
//! It logs every request as it arrives: when, its id (`idempotency-key`), the worker that sent it
//! (`x-fleet-worker`) and the answer. A request counts as applied when it was answered 200.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The header naming the worker (process) that sent a request.
pub const WORKER_HEADER: &str = "x-fleet-worker";
/// How long a success takes to answer.
const LATENCY: Duration = Duration::from_millis(10);

/// One request as the endpoint saw it.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// Since the endpoint started.
    pub at: Duration,
    pub id: String,
    pub worker: usize,
    pub status: u16,
}

/// The endpoint, stopped when dropped.
pub struct Endpoint {
    pub addr: SocketAddr,
    /// When it started, on this process's clocks (the workers, other processes, use the wall
    /// clock).
    pub started: Instant,
    pub started_wall: SystemTime,
    log: Arc<Mutex<Vec<Arrival>>>,
    task: JoinHandle<()>,
}

/// A token bucket: `per_second` tokens a second, at most `burst` held.
struct Bucket {
    tokens: f64,
    burst: f64,
    per_second: f64,
    last: Option<Instant>,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        let last = *self.last.get_or_insert(now);
        let refill = now.saturating_duration_since(last).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Endpoint {
    /// Down for `outage` from now, then `capacity` requests a second.
    pub async fn start(outage: Duration, capacity: u32) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let (started, started_wall) = (Instant::now(), SystemTime::now());
        let log = Arc::new(Mutex::new(Vec::new()));
        let burst = (f64::from(capacity) / 20.0).max(1.0);
        let bucket = Arc::new(Mutex::new(Bucket {
            tokens: burst,
            burst,
            per_second: f64::from(capacity),
            last: None,
        }));
        let arrivals = Arc::clone(&log);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (log, bucket) = (Arc::clone(&arrivals), Arc::clone(&bucket));
                let service = service_fn(move |request: Request<Incoming>| {
                    let now = Instant::now();
                    let at = now - started;
                    let up = at >= outage;
                    let status = if up && lock(&bucket).take(now) {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    let header = |name: &str| {
                        request
                            .headers()
                            .get(name)
                            .and_then(|value| value.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    lock(&log).push(Arrival {
                        at,
                        id: header("idempotency-key"),
                        worker: header(WORKER_HEADER).parse().unwrap_or(usize::MAX),
                        status: status.as_u16(),
                    });
                    async move {
                        if status == StatusCode::OK {
                            tokio::time::sleep(LATENCY).await;
                        }
                        let response = Response::builder().status(status);
                        Ok::<_, Infallible>(response.body(Full::new(Bytes::new())).unwrap())
                    }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Endpoint {
            addr,
            started,
            started_wall,
            log,
            task,
        }
    }

    /// Every request so far, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        lock(&self.log).clone()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}
