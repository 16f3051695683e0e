//! HAProxy in front of the test's upstream, closing idle client connections after 50 ms: a second
//! implementation of the rotation signals (a `GOAWAY` over h2c, a closed socket over HTTP/1.1).

use crate::servers::{self, Server, HAPROXY};
use crate::upstream::Upstream;
use crate::{
    burst, h1_client, h2_client, retried, rotation_failed_nothing, tally, undelivered,
    AttemptErrors, Ended,
};
use http::Method;
use std::collections::BTreeMap;
use std::time::Duration;
use tower_http_retry::RetryLayer;

const TEMPLATE: &str = include_str!("conf/haproxy.cfg");

const WAVES: usize = 15;
const PER_WAVE: usize = 40;

/// Sends waves of GETs and unkeyed POSTs, pausing around HAProxy's 50 ms keep-alive timeout
/// between them.
async fn waves<S>(service: S, uri: &http::Uri, label: &str) -> Vec<Ended>
where
    S: tower::Service<
            http::Request<crate::Body>,
            Response = http::Response<hyper::body::Incoming>,
            Error = tower::BoxError,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let mut all = Vec::new();
    for wave in 0..WAVES {
        let requests: Vec<_> = (0..PER_WAVE)
            .map(|i| {
                let method = if i % 2 == 0 {
                    Method::GET
                } else {
                    Method::POST
                };
                (method, format!("{label}-{wave}-{i}"))
            })
            .collect();
        all.extend(burst(service.clone(), uri, requests, PER_WAVE).await);
        let pause = 40 + (wave as u64 * 7) % 25;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_closing_idle_connections_fails_no_request_on_a_rotation_signal() {
    let Some(haproxy) = servers::require(HAPROXY, "HAProxy keep-alive closes") else {
        return;
    };
    let upstream = Upstream::start().await;
    let (h2_port, h1_port) = (servers::free_port(), servers::free_port());
    let vars = BTreeMap::from([
        ("H2_PORT", h2_port.to_string()),
        ("H1_PORT", h1_port.to_string()),
        ("UPSTREAM", upstream.port.to_string()),
    ]);
    let _server = Server::haproxy(&haproxy, TEMPLATE, vars, &[h2_port, h1_port]);
    let layer = RetryLayer::builder().max_attempts(3).build().unwrap();

    let h2_errors = AttemptErrors::default();
    let h2_uri = format!("http://127.0.0.1:{h2_port}/").parse().unwrap();
    let over_h2 = waves(retried(&layer, h2_client(), &h2_errors), &h2_uri, "h2").await;
    let h1_errors = AttemptErrors::default();
    let h1_uri = format!("http://127.0.0.1:{h1_port}/").parse().unwrap();
    let over_h1 = waves(
        retried(&layer, h1_client(Duration::from_secs(30)), &h1_errors),
        &h1_uri,
        "h1",
    )
    .await;
    // The proxy answers once the upstream did.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let applied = upstream.applied();

    for (name, ended, errors) in [
        ("h2c", &over_h2, &h2_errors),
        ("HTTP/1.1", &over_h1, &h1_errors),
    ] {
        let ids: Vec<String> = ended.iter().map(|e| e.id.clone()).collect();
        let failed = undelivered(ended);
        eprintln!(
            "[HAProxy {name}] delivered {}/{}; upstream: {}; applied twice: {:?}; failed \
             attempts by reason: {:?}; {}; failed: {:?}",
            ended.len() - failed.len(),
            ended.len(),
            applied.summary(&ids),
            applied.twice(&ids),
            errors.snapshot(),
            tally(ended),
            failed,
        );
        rotation_failed_nothing(ended, &applied.twice(&ids));
    }
}
