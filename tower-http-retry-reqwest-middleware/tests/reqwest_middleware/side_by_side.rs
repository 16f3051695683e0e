//! reqwest-retry's default policy and this crate's default, as a `ClientWithMiddleware` user
//! would swap one for the other, in the same run against the same loopback server. Prints the
//! table docs/reqwest-middleware.md shows (`cargo test -p tower-http-retry-reqwest-middleware
//! --test reqwest_middleware side_by_side -- --nocapture`).
//!
//! Assertions only on what is deterministic: this crate's attempt limit, budget, `Retry-After`
//! and idempotency rules, and reqwest-retry's attempt count. Its timings are printed, not
//! asserted (they are random by design).

use super::support::{Reply, TestServer, REQUEST_ID};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tower_http_retry_reqwest_middleware::RetryMiddleware;

/// GETs sent at once while the server is down.
const CONCURRENT: usize = 100;
/// GETs sent at once to a rate-limited endpoint.
const LIMITED: usize = 10;
/// The `Retry-After` of the rate-limited endpoint.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The arrivals of each request id, in order.
type Arrivals = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

/// One server for every scenario, told apart by the request id's prefix: `down-*` always 503;
/// `limited-*` 429 with `Retry-After: 1` until a second after that id's first arrival, then 200;
/// `post-*` 503 once, then 201.
async fn server() -> (TestServer, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let seen = Arc::clone(&arrivals);
    let server = TestServer::start(move |hit| {
        let now = Instant::now();
        let first = {
            let mut seen = seen.lock().unwrap();
            let times = seen.entry(hit.id.clone()).or_default();
            times.push(now);
            times[0]
        };
        if hit.id.starts_with("down-") {
            Reply::status(503)
        } else if hit.id.starts_with("limited-") {
            if now - first < RETRY_AFTER {
                Reply::status(429).header("retry-after", "1")
            } else {
                Reply::status(200)
            }
        } else if hit.nth == 1 {
            Reply::status(503)
        } else {
            Reply::status(201)
        }
    })
    .await;
    (server, arrivals)
}

/// What one side did in every scenario.
#[derive(Debug)]
struct Measured {
    /// The most attempts one GET made against the down server.
    attempts_down: usize,
    /// Requests the down server received for the `CONCURRENT` GETs.
    load_down: usize,
    /// When the median and the last of those GETs gave up.
    give_up_median: Duration,
    give_up_last: Duration,
    /// Retries sent to the rate-limited endpoint before its `Retry-After` ended, of all retries.
    early_retries: usize,
    retries_limited: usize,
    /// Rate-limited GETs that ended in a 200, and when the last of them ended.
    limited_ok: usize,
    limited_last: Duration,
    /// Requests the POST (no `Idempotency-Key`) made, and its final status.
    post_hits: usize,
    post_status: u16,
}

/// Runs every scenario at once, each with its own client from `make` (so that one scenario's
/// retries do not spend another's budget).
async fn measure(
    side: &str,
    make: impl Fn() -> ClientWithMiddleware,
    base: &str,
    arrivals: &Arrivals,
) -> Measured {
    let get = |client: &ClientWithMiddleware, id: String| {
        let request = client.get(base).header(REQUEST_ID, id);
        async move {
            let started = Instant::now();
            let status = match request.send().await {
                Ok(response) => response.status().as_u16(),
                Err(_) => 0,
            };
            (status, started.elapsed())
        }
    };
    let (for_down, for_limited, for_post) = (make(), make(), make());

    // The server is down: every GET at once.
    let down = (0..CONCURRENT).map(|i| get(&for_down, format!("down-{side}-{i}")));
    let limited = (0..LIMITED).map(|i| get(&for_limited, format!("limited-{side}-{i}")));
    let post = async {
        let response = for_post
            .post(base)
            .header(REQUEST_ID, format!("post-{side}"))
            .body("order 17")
            .send()
            .await;
        response.map_or(0, |r| r.status().as_u16())
    };
    let (down, limited, post_status) =
        tokio::join!(futures_join_all(down), futures_join_all(limited), post);

    let mut give_up: Vec<Duration> = down.iter().map(|(_, took)| *took).collect();
    give_up.sort();
    let arrivals = arrivals.lock().unwrap();
    let of = |prefix: &str| -> Vec<&Vec<Instant>> {
        arrivals
            .iter()
            .filter(|(id, _)| id.starts_with(prefix))
            .map(|(_, times)| times)
            .collect()
    };
    let down_prefix = format!("down-{side}-");
    let limited_prefix = format!("limited-{side}-");
    let early = |times: &Vec<Instant>| {
        times[1..]
            .iter()
            .filter(|at| **at - times[0] < RETRY_AFTER)
            .count()
    };
    Measured {
        attempts_down: of(&down_prefix)
            .into_iter()
            .map(Vec::len)
            .max()
            .unwrap_or(0),
        load_down: of(&down_prefix).into_iter().map(Vec::len).sum(),
        give_up_median: give_up[give_up.len() / 2],
        give_up_last: give_up[give_up.len() - 1],
        early_retries: of(&limited_prefix).into_iter().map(early).sum(),
        retries_limited: of(&limited_prefix)
            .into_iter()
            .map(|times| times.len() - 1)
            .sum(),
        limited_ok: limited.iter().filter(|(status, _)| *status == 200).count(),
        limited_last: limited
            .iter()
            .map(|(_, took)| *took)
            .max()
            .unwrap_or_default(),
        post_hits: arrivals.get(&format!("post-{side}")).map_or(0, Vec::len),
        post_status,
    }
}

/// Every future of `futures`, concurrently, in order (tokio has no `join_all`).
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in pinned.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

fn secs(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_by_side_with_reqwest_retry() {
    let (server, arrivals) = server().await;
    let base = server.uri("/").to_string();
    // reqwest-retry's README: exponential backoff from 1 s, full jitter, 3 retries.
    let theirs = || {
        ClientBuilder::new(reqwest::Client::new())
            .with(RetryTransientMiddleware::new_with_policy(
                ExponentialBackoff::builder().build_with_max_retries(3),
            ))
            .build()
    };
    let ours = || {
        ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::default())
            .build()
    };

    let (theirs, ours) = tokio::join!(
        measure("theirs", theirs, &base, &arrivals),
        measure("ours", ours, &base, &arrivals),
    );

    let rows = [
        (
            "attempts per GET, server down (503)".to_owned(),
            theirs.attempts_down.to_string(),
            ours.attempts_down.to_string(),
        ),
        (
            format!("load while down: requests for {CONCURRENT} concurrent GETs"),
            theirs.load_down.to_string(),
            ours.load_down.to_string(),
        ),
        (
            "time to give up, median / slowest".to_owned(),
            format!(
                "{} / {}",
                secs(theirs.give_up_median),
                secs(theirs.give_up_last)
            ),
            format!(
                "{} / {}",
                secs(ours.give_up_median),
                secs(ours.give_up_last)
            ),
        ),
        (
            format!("`Retry-After: 1` on a 429 ({LIMITED} GETs): retries sent before it ended"),
            format!("{} of {}", theirs.early_retries, theirs.retries_limited),
            format!("{} of {}", ours.early_retries, ours.retries_limited),
        ),
        (
            "those GETs that ended in 200; the slowest took".to_owned(),
            format!(
                "{} of {LIMITED}; {}",
                theirs.limited_ok,
                secs(theirs.limited_last)
            ),
            format!(
                "{} of {LIMITED}; {}",
                ours.limited_ok,
                secs(ours.limited_last)
            ),
        ),
        (
            "POST without `Idempotency-Key` after a 503: requests, final status".to_owned(),
            format!("{}, {}", theirs.post_hits, theirs.post_status),
            format!("{}, {}", ours.post_hits, ours.post_status),
        ),
    ];
    println!("| | reqwest-retry 0.9, `ExponentialBackoff::builder().build_with_max_retries(3)` | tower-http-retry, `RetryMiddleware::default()` |");
    println!("|---|---|---|");
    for (what, theirs, ours) in &rows {
        println!("| {what} | {theirs} | {ours} |");
    }

    // reqwest-retry: 1 + 3 retries of every GET, and the POST retried.
    assert_eq!(theirs.attempts_down, 4, "{theirs:?}");
    assert_eq!(
        (theirs.post_hits, theirs.post_status),
        (2, 201),
        "{theirs:?}"
    );
    // This crate: at most 3 attempts, fewer once the shared budget (100 tokens) runs dry.
    assert_eq!(ours.attempts_down, 3, "{ours:?}");
    assert!(ours.load_down < 3 * CONCURRENT, "{ours:?}");
    assert!(ours.load_down >= CONCURRENT, "{ours:?}");
    // `Retry-After` waited for: no retry inside it, every GET served.
    assert_eq!(ours.early_retries, 0, "{ours:?}");
    assert_eq!(ours.retries_limited, LIMITED, "{ours:?}");
    assert_eq!(ours.limited_ok, LIMITED, "{ours:?}");
    // A POST without a key is not retried.
    assert_eq!((ours.post_hits, ours.post_status), (1, 503), "{ours:?}");
}
