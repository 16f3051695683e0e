//! A reverse proxy over a pool of two upstreams, as a user builds it: a real hyper server whose
//! handler sends each request through the retry layer, a [`PoolLayer`] and hyper-util's client,
//! and answers an error with [`proxy::error_response`]. One upstream answers `503` with
//! `Retry-After: 7`: the retries go to the other one without waiting for that hint; both do: the
//! caller gets a `503` with a `Retry-After` at once.
//!
//! Real sockets mean real time: the tests assert on the servers' hits and the answers, and bound
//! the time only by the hint itself (a proxy that waited for it would take 7 s).

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use test_support::{client, get, Reply, TestServer};
use tokio::net::TcpListener;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::pool::PoolLayer;
use tower_http_retry::{RetryLayer, RetryReport};
use tower_http_retry_hyper::proxy;

/// The proxy's whole-request deadline: what a browser waits for.
const DEADLINE: Duration = Duration::from_secs(10);

/// Starts the proxy over `upstreams`; returns its address.
async fn start_proxy(upstreams: &[&TestServer]) -> SocketAddr {
    let pool = PoolLayer::new(upstreams.iter().map(|server| {
        server
            .addr()
            .to_string()
            .parse()
            .expect("an address is an authority")
    }))
    .expect("a pool of two");
    let stack = ServiceBuilder::new()
        .timeout(DEADLINE)
        .layer(RetryLayer::interactive())
        .layer(pool)
        .timeout(Duration::from_secs(2))
        .service(client());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let stack = stack.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let stack = stack.clone();
                    async move { Ok::<_, Infallible>(forward(stack, request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// What the proxy's handler does: the request's body read, sent through the stack, the answer
/// (or the error's mapping) returned, with `x-should-retry: false` when the proxy retried.
async fn forward<S>(stack: S, request: Request<Incoming>) -> Response<Full<Bytes>>
where
    S: Service<Request<Full<Bytes>>, Response = Response<Incoming>, Error = BoxError>,
{
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let request = Request::from_parts(parts, Full::new(body));
    let (result, report) = RetryReport::capture(stack.oneshot(request)).await;
    match result {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            proxy::stand_down(&mut parts.headers, &report);
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Response::from_parts(parts, Full::new(body))
        }
        Err(error) => proxy::error_response(&*error, &report),
    }
}

#[tokio::test]
async fn a_retry_after_holds_only_the_upstream_that_sent_it() {
    let down = TestServer::start(|_| Reply::status(503).header("retry-after", "7")).await;
    let up = TestServer::start(|_| Reply::status(200)).await;
    let proxy = start_proxy(&[&down, &up]).await;
    let uri: http::Uri = format!("http://{proxy}/orders").parse().unwrap();

    let started = Instant::now();
    for i in 0..4 {
        let response = client()
            .request(get(&uri, &format!("get-{i}")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "GET {i}");
    }
    let took = started.elapsed();
    eprintln!("4 GETs through the pool, one upstream holding Retry-After: 7: {took:?}");
    assert_eq!(down.total_hits(), 1, "held after its first answer");
    assert_eq!(
        up.total_hits(),
        4,
        "every GET answered by the healthy upstream"
    );
    assert!(
        took < Duration::from_secs(7),
        "no GET waited for the other upstream's hint"
    );
}

#[tokio::test]
async fn when_every_upstream_is_held_the_caller_gets_a_503_with_retry_after_at_once() {
    let first = TestServer::start(|_| Reply::status(503).header("retry-after", "7")).await;
    let second = TestServer::start(|_| Reply::status(503).header("retry-after", "7")).await;
    let proxy = start_proxy(&[&first, &second]).await;
    let uri: http::Uri = format!("http://{proxy}/orders").parse().unwrap();

    let started = Instant::now();
    let response = client().request(get(&uri, "both-down")).await.unwrap();
    let took = started.elapsed();
    eprintln!("a GET through the pool, both upstreams holding Retry-After: 7: {took:?}");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=7).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(response.headers()[proxy::SHOULD_RETRY], "false");
    assert_eq!(
        first.total_hits() + second.total_hits(),
        2,
        "each asked once"
    );
    assert!(
        took < DEADLINE.min(Duration::from_secs(7)),
        "within the deadline, not after the hint"
    );

    // A second GET meets two held upstreams: refused without reaching either.
    let response = client().request(get(&uri, "again")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(first.total_hits() + second.total_hits(), 2);
}
