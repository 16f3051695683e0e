//! Adaptive concurrency against a real server with a fixed pool of workers: a hyper server on
//! 127.0.0.1 whose 4 workers take 20 ms a request, and hyper-util's client behind the retry
//! layer with `AdaptiveConcurrency` capped at 12. A burst of 300 requests: every one is
//! answered, the server never holds more than the limit's cap at once (the rest waited in the
//! layer's queue, not in the server's), and the limit learned the server's no-load latency.
//!
//! Real sockets mean real time: the test asserts bounds that hold at any speed, never a time.

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use test_support::{client, get};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::pacing::{AdaptiveConcurrency, Pacing};
use tower_http_retry::RetryLayer;

const CAP: u32 = 12;

/// The server: 4 workers of 20 ms; counts the requests it holds (waiting for a worker or
/// served), and the most it held at once.
struct Workers {
    held: AtomicU32,
    most: AtomicU32,
    pool: Semaphore,
}

async fn start(workers: Arc<Workers>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let workers = Arc::clone(&workers);
            tokio::spawn(async move {
                let service = service_fn(move |_: Request<Incoming>| {
                    let workers = Arc::clone(&workers);
                    async move {
                        let held = workers.held.fetch_add(1, Ordering::SeqCst) + 1;
                        workers.most.fetch_max(held, Ordering::SeqCst);
                        let worker = workers.pool.acquire().await.expect("open");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        drop(worker);
                        workers.held.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(Response::new(Full::new(bytes::Bytes::new())))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_burst_waits_in_the_layer_not_in_the_servers_queue() {
    let workers = Arc::new(Workers {
        held: AtomicU32::new(0),
        most: AtomicU32::new(0),
        pool: Semaphore::new(4),
    });
    let addr = start(Arc::clone(&workers)).await;
    let layer = RetryLayer::builder()
        .pacing(
            Pacing::builder()
                .adaptive_concurrency(AdaptiveConcurrency::new().max(CAP))
                .build()
                .expect("valid pacing"),
        )
        .build()
        .expect("a valid layer");
    let stack = ServiceBuilder::new()
        .layer(layer.clone())
        .timeout(Duration::from_secs(5))
        .service(client());
    let uri: http::Uri = format!("http://{addr}/").parse().expect("a URI");
    let mut requests = JoinSet::new();
    for i in 0..300 {
        let (stack, request) = (stack.clone(), get(&uri, &i.to_string()));
        requests.spawn(async move { stack.oneshot(request).await.map(|r| r.status()) });
    }
    let mut answered = 0;
    while let Some(answer) = requests.join_next().await {
        let status = answer.expect("no panic").expect("answered");
        answered += u32::from(status.is_success());
    }
    assert_eq!(answered, 300);
    let most = workers.most.load(Ordering::SeqCst);
    assert!(
        most <= CAP,
        "the server held {most} at once, over the cap of {CAP}"
    );
    let endpoint = addr.to_string().parse().expect("an authority");
    let stats = layer.pacing_stats(Some(&endpoint)).expect("an endpoint");
    assert_eq!(stats.in_flight, Some(0));
    let no_load = stats.no_load.expect("learned");
    assert!(
        no_load >= Duration::from_millis(20),
        "no-load latency {no_load:?}"
    );
    // The figures docs/pacing.md quotes (`-- --nocapture`).
    println!(
        "held at most {most} at once; limit {:?}, no-load latency {no_load:?}",
        stats.limit
    );
}
