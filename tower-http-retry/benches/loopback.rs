//! Requests per second through a real HTTP/1 connection pool, with and without the retry layer.
//!
//! A hyper server on 127.0.0.1 (port 0) answers 200 to every request; hyper-util's legacy client
//! sends a fixed number of GETs from a fixed number of concurrent tasks, reading every body to
//! its end. Each round runs the bare client and the client behind `RetryLayer::new()` (the
//! default configuration) back to back, alternating which goes first. Reported: the median of the
//! per-round ratios (each pair ran under the same conditions), and the medians and bests of the
//! rates (on a shared machine other processes only ever slow a run down, so the best run is the
//! least disturbed one). Client and server share one 2-worker runtime: on a 2-core machine this
//! measures what the layer adds to the whole request path at saturation.
//!
//! Run: `cargo bench --all-features --bench loopback` (prints a table; no criterion statistics,
//! as each run is already 20 000 requests).

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::fmt::Debug;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::RetryLayer;

const REQUESTS: usize = 20_000;
const CONCURRENCY: usize = 32;
const ROUNDS: usize = 10;

type Body = Full<Bytes>;

/// Starts the server and returns its address; it runs until the runtime stops.
async fn serve() -> Uri {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let answer = hyper::service::service_fn(|_: Request<Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), answer),
            );
        }
    });
    format!("http://{addr}/").parse().expect("a valid uri")
}

/// Sends `total` requests from `CONCURRENCY` tasks and returns how long it took.
async fn run<S>(service: S, uri: &Uri, total: usize) -> Duration
where
    S: Service<Request<Body>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Debug + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let mut service = service.clone();
            let uri = uri.clone();
            tokio::spawn(async move {
                for _ in 0..total / CONCURRENCY {
                    let request = Request::get(uri.clone())
                        .body(Body::default())
                        .expect("a valid request");
                    let response = service
                        .ready()
                        .await
                        .expect("ready")
                        .call(request)
                        .await
                        .expect("a response");
                    assert_eq!(response.status(), StatusCode::OK);
                    response.into_body().collect().await.expect("a body");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client task panicked");
    }
    started.elapsed()
}

fn per_second(elapsed: Duration) -> f64 {
    (REQUESTS / CONCURRENCY * CONCURRENCY) as f64 / elapsed.as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let uri = serve().await;
        let bare = Client::builder(TokioExecutor::new()).build_http::<Body>();
        let layer = RetryLayer::new();
        let retried = layer.layer(bare.clone());

        // Warm-up: open the pooled connections, fault in the code paths.
        run(bare.clone(), &uri, REQUESTS / 4).await;
        run(retried.clone(), &uri, REQUESTS / 4).await;

        let (mut bare_rates, mut retried_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        println!("loopback: {REQUESTS} requests, concurrency {CONCURRENCY}, {ROUNDS} rounds");
        println!("{:>6} {:>12} {:>12} {:>7}", "round", "bare req/s", "layer req/s", "ratio");
        for round in 0..ROUNDS {
            let (bare_time, retried_time) = if round % 2 == 0 {
                let bare_time = run(bare.clone(), &uri, REQUESTS).await;
                (bare_time, run(retried.clone(), &uri, REQUESTS).await)
            } else {
                let retried_time = run(retried.clone(), &uri, REQUESTS).await;
                (run(bare.clone(), &uri, REQUESTS).await, retried_time)
            };
            let (b, r) = (per_second(bare_time), per_second(retried_time));
            println!("{round:>6} {b:>12.0} {r:>12.0} {:>7.3}", r / b);
            bare_rates.push(b);
            retried_rates.push(r);
            ratios.push(r / b);
        }
        let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
        let (b_best, r_best) = (best(&bare_rates), best(&retried_rates));
        let (b, r) = (median(bare_rates), median(retried_rates));
        println!("{:>6} {b:>12.0} {r:>12.0} {:>7.3}", "median", r / b);
        println!("{:>6} {b_best:>12.0} {r_best:>12.0} {:>7.3}", "best", r_best / b_best);
        let paired = median(ratios);
        println!(
            "layer / bare, median of the per-round ratios: {paired:.3} (throughput change {:+.1} %)",
            (paired - 1.0) * 100.0
        );

        let stats = layer.stats();
        assert_eq!(stats.retries, 0, "nothing failed, nothing was retried");
        assert_eq!(stats.requests, stats.attempts);
    });
}
