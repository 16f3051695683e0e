//! nginx over HTTP/1.1 closing keep-alive connections after five requests and after 100 ms idle:
//! idempotent requests never fail; an unkeyed POST is never applied twice, nor sent again after
//! an attempt nginx applied.

use crate::attempts::assert_no_post_resent_after_applied;
use crate::nginx_h2c::settled_access_log;
use crate::servers::{self, Applied, Server, NGINX};
use crate::{
    burst, h1_client, retried, rotation_failed_nothing, tally, undelivered, AppliedAttempts,
    Attempts,
};
use http::Method;
use std::collections::BTreeMap;
use std::time::Duration;
use tower_http_retry::RetryLayer;

const TEMPLATE: &str = include_str!("conf/nginx-h1.conf");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_closes_fail_no_idempotent_request_and_apply_no_post_twice() {
    let Some(nginx) = servers::require(NGINX, "nginx HTTP/1.1 keep-alive closes") else {
        return;
    };
    let port = servers::free_port();
    let vars = BTreeMap::from([("PORT", port.to_string())]);
    let server = Server::nginx(&nginx, TEMPLATE, vars, &[port]);
    let uri: http::Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();

    let layer = RetryLayer::builder().max_attempts(3).build().unwrap();
    let errors = Attempts::default();
    // The client keeps idle connections far longer than nginx does: it reuses some just as
    // nginx closes them.
    let service = retried(&layer, h1_client(Duration::from_secs(30)), &errors);

    const WAVES: usize = 50;
    const PER_WAVE: usize = 20;
    let mut gets = Vec::new();
    let mut posts = Vec::new();
    for wave in 0..WAVES {
        let requests: Vec<_> = (0..PER_WAVE)
            .map(|i| (Method::GET, format!("get-{wave}-{i}")))
            .chain((0..PER_WAVE / 4).map(|i| (Method::POST, format!("post-{wave}-{i}"))))
            .collect();
        for ended in burst(service.clone(), &uri, requests, PER_WAVE).await {
            if ended.method == Method::GET {
                gets.push(ended);
            } else {
                posts.push(ended);
            }
        }
        // Around nginx's 100 ms keep-alive timeout, so that reuse and close meet.
        let pause = 90 + (wave as u64 * 7) % 25;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    let log = settled_access_log(&server, gets.len() + posts.len()).await;
    let applied = Applied::from_access_log(&log, 200);
    let get_ids: Vec<String> = gets.iter().map(|e| e.id.clone()).collect();
    let post_ids: Vec<String> = posts.iter().map(|e| e.id.clone()).collect();
    let failed_gets = undelivered(&gets);
    let failed_posts = undelivered(&posts);
    eprintln!(
        "[nginx h1 keep-alive] GETs delivered {}/{}; POSTs delivered {}/{}; nginx's log: GETs \
         {}; POSTs {}; POSTs applied twice: {:?}; failed attempts by reason: {:?}; GETs: {}; \
         POSTs: {}; failed POSTs: {:?}",
        gets.len() - failed_gets.len(),
        gets.len(),
        posts.len() - failed_posts.len(),
        posts.len(),
        applied.summary(&get_ids),
        applied.summary(&post_ids),
        applied.twice(&post_ids),
        errors.errors(),
        tally(&gets),
        tally(&posts),
        failed_posts,
    );
    assert_eq!(gets.len(), WAVES * PER_WAVE);
    assert!(failed_gets.is_empty(), "{failed_gets:?}");
    rotation_failed_nothing(&posts, &applied.twice(&post_ids));
    let attempts = AppliedAttempts::from_access_log(&log, 200);
    assert_no_post_resent_after_applied(&posts, &errors, &attempts);
}
