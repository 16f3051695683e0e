//! Hedging's latency table: a real hyper server on `127.0.0.1:0` answers in 10 ms, and 1 % of
//! the requests it receives (each copy drawn on its own, from a seeded generator) stall 1 s more;
//! 40 callers send GETs through hyper-util's client, with no hedging, with tower's `hedge`
//! (p95 of the last window, at least 20 latencies: the same settings as ours; shared by the
//! callers through a `Buffer`, since it is not `Clone`) and with the
//! crate's `HedgeLayer` (its defaults: at most 5 % extra load, a burst of 10). Then a brownout:
//! every request takes 200 ms more, and the same callers go on.
//!
//! Both hedgers read their delay over 2-s windows here (the crate's default is 30 s), so that
//! the brownout spans a few windows in a short run.
//!
//! `cargo run --release -p demo --example hedging_tail` (the table of docs/hedging.md). The
//! latencies are wall-clock times on a shared machine: a few percent of noise between runs.

use http::Request;
use http_body_util::BodyExt;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::{self as support, Body, Reply, TestServer};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, ServiceExt};
use tower_http_retry::hedge::{HedgeLayer, HedgeStats};

const CALLERS: usize = 40;
const REQUESTS: usize = 10_000;
const BROWNOUT_REQUESTS: usize = 2_000;
const LATENCY: Duration = Duration::from_millis(10);
const STALL: Duration = Duration::from_secs(1);
const STALL_SHARE: f64 = 0.01;
const BROWNOUT: Duration = Duration::from_millis(200);
const WINDOW: Duration = Duration::from_secs(2);
const SEED: u64 = 0x4ed6e;

type Client = BoxCloneSyncService<Request<Body>, http::Response<hyper::body::Incoming>, BoxError>;

/// The server, and the switch of its brownout.
struct Endpoint {
    server: TestServer,
    brownout: Arc<AtomicBool>,
}

async fn endpoint() -> Endpoint {
    let brownout = Arc::new(AtomicBool::new(false));
    let slow = Arc::clone(&brownout);
    let rng = Mutex::new(StdRng::seed_from_u64(SEED));
    let server = TestServer::start(move |_| {
        let stalls = rng.lock().unwrap().random_bool(STALL_SHARE);
        let mut after = LATENCY;
        if stalls {
            after += STALL;
        }
        if slow.load(Ordering::SeqCst) {
            after += BROWNOUT;
        }
        Reply::status(200).after(after)
    })
    .await;
    Endpoint { server, brownout }
}

/// Sends `requests` GETs from `CALLERS` callers at once: each request's latency.
async fn send(client: &Client, endpoint: &Endpoint, requests: usize) -> Vec<Duration> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let client = client.clone();
        let next = Arc::clone(&next);
        let uri = endpoint.server.uri("/search");
        callers.spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < requests {
                let started = Instant::now();
                let response = client.clone().oneshot(support::get(&uri, "q")).await;
                let response = response.expect("the server answers every request");
                assert_eq!(response.status(), 200);
                response.into_body().collect().await.expect("a whole body");
                latencies.push(started.elapsed());
            }
            latencies
        });
    }
    callers.join_all().await.concat()
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// tower's policy: every GET of this run may be hedged.
#[derive(Clone)]
struct CloneGet;

impl tower::hedge::Policy<Request<Body>> for CloneGet {
    fn clone_request(&self, request: &Request<Body>) -> Option<Request<Body>> {
        let mut copy = Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.headers_mut() = request.headers().clone();
        Some(copy)
    }

    fn can_retry(&self, _request: &Request<Body>) -> bool {
        true
    }
}

struct Row {
    name: &'static str,
    latencies: Vec<Duration>,
    extra: f64,
    brownout_extra: f64,
    stats: Option<HedgeStats>,
    brownout_stats: Option<HedgeStats>,
}

async fn measure(
    name: &'static str,
    wrap: impl Fn(support::HttpClient) -> (Client, Option<HedgeLayer>),
) -> Row {
    let endpoint = endpoint().await;
    let (client, ours) = wrap(support::client());
    let mut latencies = send(&client, &endpoint, REQUESTS).await;
    latencies.sort();
    let hits = endpoint.server.total_hits() as f64;
    let extra = hits / REQUESTS as f64 - 1.0;
    let stats = ours.as_ref().map(HedgeLayer::stats);

    endpoint.brownout.store(true, Ordering::SeqCst);
    send(&client, &endpoint, BROWNOUT_REQUESTS).await;
    let brownout_hits = endpoint.server.total_hits() as f64 - hits;
    let brownout_extra = brownout_hits / BROWNOUT_REQUESTS as f64 - 1.0;
    let brownout_stats = ours.as_ref().map(HedgeLayer::stats);
    Row {
        name,
        latencies,
        extra,
        brownout_extra,
        stats,
        brownout_stats,
    }
}

#[tokio::main]
async fn main() {
    let rows = [
        measure("no hedging", |client| {
            (Client::new(client.map_err(BoxError::from)), None)
        })
        .await,
        measure("tower `hedge` (p95)", |client| {
            let hedge = tower::hedge::Hedge::new(client, CloneGet, 20, 0.95, WINDOW);
            // tower's `Hedge` is not `Clone`: its callers share it through a `Buffer`.
            let shared = tower::buffer::Buffer::new(hedge, 1024);
            (Client::new(shared), None)
        })
        .await,
        measure("`HedgeLayer` (defaults)", |client| {
            let layer = HedgeLayer::builder()
                .window(WINDOW)
                .build()
                .expect("valid settings");
            let hedged = layer.layer(client).map_err(BoxError::from);
            (Client::new(hedged), Some(layer))
        })
        .await,
    ];
    let baseline = &rows[0].latencies;
    println!(
        "{REQUESTS} GETs from {CALLERS} callers: {} ms each, {:.0} % of the copies stall {} ms more",
        LATENCY.as_millis(),
        STALL_SHARE * 100.0,
        STALL.as_millis()
    );
    println!();
    println!("| | p50 ms | p99 ms | p99.9 ms | p99 change | p99.9 ÷ | extra requests |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        let l = &row.latencies;
        let p99 = quantile(l, 0.99).as_secs_f64() / quantile(baseline, 0.99).as_secs_f64();
        let p999 = quantile(baseline, 0.999).as_secs_f64() / quantile(l, 0.999).as_secs_f64();
        println!(
            "| {} | {} | {} | {} | {:+.0} % | {:.1} | {:.1} % |",
            row.name,
            ms(quantile(l, 0.5)),
            ms(quantile(l, 0.99)),
            ms(quantile(l, 0.999)),
            (p99 - 1.0) * 100.0,
            p999,
            row.extra * 100.0
        );
    }
    println!();
    println!(
        "Then a brownout: {BROWNOUT_REQUESTS} more GETs, each {} ms slower",
        BROWNOUT.as_millis()
    );
    println!();
    println!("| | extra requests in the brownout | hedges (before → after) | pauses |");
    println!("|---|---:|---:|---:|");
    for row in &rows[1..] {
        let (hedges, pauses) = match (row.stats, row.brownout_stats) {
            (Some(before), Some(after)) => (
                format!("{} → {}", before.hedges, after.hedges),
                after.pauses.to_string(),
            ),
            _ => ("not counted".to_owned(), "none (no pause)".to_owned()),
        };
        println!(
            "| {} | {:.1} % | {hedges} | {pauses} |",
            row.name,
            row.brownout_extra * 100.0
        );
    }
    if let Some(stats) = rows[2].brownout_stats {
        println!();
        println!(
            "`HedgeLayer`'s counters: {} requests, {} armed, {} hedges, {} won by a hedge, \
             {} refused by the cap, {} pauses",
            stats.requests,
            stats.armed,
            stats.hedges,
            stats.won_by_hedge,
            stats.refused_by_cap,
            stats.pauses
        );
    }
}
