//! What a fleet's store costs while the endpoint is open: no Redis call on the request path.
//! A request reads the process's cached view; the view is read again in the background once
//! it is older than the store's `view_ttl` (1 s), so a process makes about one Redis call a
//! second per endpoint, however many requests it sends.

use crate::endpoint::Endpoint;
use crate::Redis;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};
use tower_http_retry::pacing::store::PacingStore;
use tower_http_retry::{Pacing, RetryLayer};

#[tokio::test]
async fn an_open_endpoint_costs_no_redis_call_on_the_request_path() {
    let Some(redis) = Redis::start("an_open_endpoint_costs_no_redis_call_on_the_request_path")
    else {
        return;
    };
    let endpoint = Endpoint::start(Duration::ZERO, 1_000_000).await;
    let uri: http::Uri = format!("http://{}/", endpoint.addr).parse().unwrap();
    let store = redis.store("open", |b| b).await;
    let retry = RetryLayer::builder()
        .pacing(Pacing::builder().store(store.clone()).build().unwrap())
        .build()
        .unwrap();
    let service = retry.layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());

    let (requests, senders) = (2000, 20);
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for sender in 0..senders {
        let (service, uri) = (service.clone(), uri.clone());
        tasks.spawn(async move {
            for i in 0..requests / senders {
                let request = http::Request::post(uri.clone())
                    .header("idempotency-key", format!("{sender}-{i}"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                let response = service.clone().oneshot(request).await.unwrap();
                assert_eq!(response.status(), 200);
            }
        });
    }
    tasks.join_all().await;
    let took = started.elapsed();
    let calls = store.stats().calls;
    eprintln!(
        "FLEET open endpoint: {requests} requests in {:.2} s, {calls} Redis calls ({:.4} per \
         request)",
        took.as_secs_f64(),
        calls as f64 / f64::from(requests)
    );
    // The first request of an endpoint not heard of yet starts a read (the record and the
    // clock), then one read a second (`view_ttl`) and one more that may be under way at the
    // end: none is per request.
    let bound = 3 + took.as_secs();
    assert!(calls <= bound, "{calls} Redis calls in {took:?}");
}
