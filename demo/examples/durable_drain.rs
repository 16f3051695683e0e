//! The drain after a long outage, through the durable path: 10,000 deliveries due at once to an
//! endpoint that is down, then comes back with a capacity (a token bucket; the excess answered
//! 503). The figures docs/redelivery.md reports against the targets: overload 503s at most 1 %
//! of N, 99 % delivered within N / C + 2 s of the endpoint's return.
//!
//! ```text
//! cargo run --release -p demo --features postgres --example durable_drain -- postgres
//! cargo run --release -p demo --example durable_drain -- sqlite 250
//! ```
//!
//! The first argument is the engine (as for `durable_throughput`), the second the capacity C
//! per second (1,000 by default), the third the pacer's `loss_threshold` (0.05 when left out:
//! the share of an interval's outcomes that, with at least 3 losses, cuts the rate; it sets
//! what the pacer's probing of a hard limit costs). One process, 4 workers on threads of their
//! own (batches of 10, the default) sharing one client, so one retry layer and one pacer, as a
//! sender's process would; the Standard Webhooks schedule, unscaled: a delivery that fails its slot
//! waits 5 s, then 5 min. With `DRAIN_ARRIVALS=<file>`, every arrival at the endpoint is
//! written there as `seconds since its return,status` (negative while down): where the 503s
//! fall, and what came just before them. With `DRAIN_TRACE=<file>`, every 20 ms the pacer's
//! state of the endpoint (its mode, rate and queue) beside the workers' (deliveries in hand,
//! taken, delivered): whether the pacer or the engine set the pace.

use bytes::Bytes;
use demo::durable::WorkerEngine;
use http::header::HeaderName;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::{Reply, TestServer};
use tower_http_retry::pacing::Pacing;
use tower_http_retry_redelivery::{RecordRules, Redelivery, Schedule};

mod engines;

const N: usize = 10_000;
const WORKERS: usize = 4;
const BATCH: usize = 10;
/// How long the endpoint is down after the workers start.
const OUTAGE: Duration = Duration::from_secs(20);
/// Room for arrivals bunched by the machine (25 ms worth at 200/s, as the in-memory test).
const BURST: f64 = 5.0;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let capacity: f64 = std::env::args()
        .nth(2)
        .map_or(1_000.0, |c| c.parse().expect("the capacity: a number"));
    let loss_threshold: Option<f64> = std::env::args()
        .nth(3)
        .map(|t| t.parse().expect("the loss threshold: a number"));
    // Checked before anything is stored.
    let pacing = loss_threshold.map(|threshold| {
        let pacing = Schedule::standard_webhooks().pacing();
        let pacing = pacing.loss_threshold(threshold).build();
        pacing.expect("the loss threshold: a share, from 0 to 1")
    });
    let drain = engines::on_engine(BATCH, Drain { capacity, pacing }).await;
    let slack = N as f64 / capacity + 2.0;
    let target = |met: bool| if met { "met" } else { "missed" };
    println!(
        "N {N}, C {capacity}/s, down {} s, {WORKERS} workers sharing one pacer",
        OUTAGE.as_secs()
    );
    if let Some(threshold) = loss_threshold {
        println!("the pacer's loss threshold   {threshold:>8}");
    }
    println!(
        "attempts while down          {:>8}",
        drain.attempts_while_down
    );
    println!(
        "overload 503s after return   {:>8}   ({:.2} % of N; target <= 1 %: {})",
        drain.overload,
        100.0 * drain.overload as f64 / N as f64,
        target(drain.overload * 100 <= N)
    );
    match drain.first {
        Some(first) => println!(
            "first delivered after return {:>7.1} s   (the endpoint's return seen)",
            first.as_secs_f64()
        ),
        None => println!("first delivered after return     never"),
    }
    match drain.t99 {
        Some(t99) => println!(
            "99 % delivered after return  {:>7.1} s   (target <= N/C + 2 s = {slack:.1} s: {})",
            t99.as_secs_f64(),
            target(t99.as_secs_f64() <= slack)
        ),
        None => println!("99 % delivered after return      never (within the run's limit)"),
    }
    println!("delivered                    {:>8}", drain.delivered);
    eprintln!("  {}", drain.stats);
}

struct Drain {
    capacity: f64,
    /// The pacer with the loss threshold asked for, if one was.
    pacing: Option<Pacing>,
}

struct Drained {
    attempts_while_down: usize,
    overload: usize,
    first: Option<Duration>,
    t99: Option<Duration>,
    delivered: usize,
    stats: String,
}

/// The endpoint: down until `up_at`, then a token bucket of `capacity` a second.
struct Endpoint {
    up_at: Instant,
    capacity: f64,
    tokens: f64,
    refilled: Instant,
    /// (since `up_at`, negative while down; status) per arrival.
    arrivals: Vec<(f64, u16)>,
}

impl Endpoint {
    fn answer(&mut self) -> u16 {
        let now = Instant::now();
        let status = if now < self.up_at {
            503
        } else {
            let since = now.duration_since(self.refilled.max(self.up_at));
            self.tokens = (self.tokens + since.as_secs_f64() * self.capacity).min(BURST);
            self.refilled = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                200
            } else {
                503
            }
        };
        self.arrivals.push((since(self.up_at, now), status));
        status
    }
}

/// Seconds from `up_at` to `now`, negative before it.
fn since(up_at: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(up_at).as_secs_f64()
        - up_at.saturating_duration_since(now).as_secs_f64()
}

impl engines::EngineRun for Drain {
    type Output = Drained;

    async fn run<O: WorkerEngine>(self, outbox: O) -> Drained {
        let rules = RecordRules::new().id_header(HeaderName::from_static(demo::durable::ID_HEADER));
        // Every delivery is stored, due at once, before the workers start.
        let body = Bytes::from(vec![b'x'; 512]);
        let endpoint = Arc::new(Mutex::new(Endpoint {
            up_at: Instant::now() + Duration::from_secs(3600),
            capacity: self.capacity,
            tokens: BURST,
            refilled: Instant::now(),
            arrivals: Vec::new(),
        }));
        let answer = Arc::clone(&endpoint);
        let receiver =
            TestServer::start(move |_| Reply::status(answer.lock().unwrap().answer())).await;
        let uri = receiver.uri("/hook");
        for n in 0..N {
            let request = http::Request::post(uri.clone()).body(body.clone()).unwrap();
            outbox
                .store(rules.record(format!("evt_{n}"), request).unwrap())
                .await
                .unwrap();
        }

        let schedule = Schedule::standard_webhooks();
        let retry = match self.pacing {
            None => demo::durable::retry_layer(&schedule),
            Some(pacing) => {
                let layer = schedule.retry_layer().pacing(pacing).build();
                layer.expect("the preset's layer builds")
            }
        };
        let client = demo::durable::client_over(retry.clone(), &schedule);
        let redelivery: demo::durable::Worker<O> =
            Redelivery::new(client, outbox.clone(), schedule);
        let handles = vec![redelivery.clone(); WORKERS];
        let up_at = Instant::now() + OUTAGE;
        {
            let mut endpoint = endpoint.lock().unwrap();
            endpoint.up_at = up_at;
            endpoint.refilled = up_at;
        }
        let running = engines::Workers::start(&outbox, &handles);
        let limit = up_at + Duration::from_secs_f64(3.0 * N as f64 / self.capacity + 60.0);
        // (its path, its lines) when asked for.
        let mut trace = std::env::var("DRAIN_TRACE").ok().map(|path| {
            let header = "since_return,mode,rate,waiting,handling,taken,delivered\n";
            (path, header.to_owned())
        });
        let authority = uri.authority().cloned();
        while redelivery.stats().delivered < N as u64 && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let Some((_, lines)) = trace.as_mut() else {
                continue;
            };
            if let Some(pacing) = retry.pacing_stats(authority.as_ref()) {
                let stats = redelivery.stats();
                writeln!(
                    lines,
                    "{:.3},{:?},{:.0},{},{},{},{}",
                    since(up_at, Instant::now()),
                    pacing.mode,
                    pacing.rate,
                    pacing.waiting,
                    stats.handling,
                    stats.due,
                    stats.delivered,
                )
                .expect("a String takes every write");
            }
        }
        running.stop();
        if let Some((path, lines)) = trace {
            std::fs::write(&path, lines).expect("DRAIN_TRACE: a writable path");
        }

        let endpoint = endpoint.lock().unwrap();
        if let Ok(path) = std::env::var("DRAIN_ARRIVALS") {
            let lines: String = endpoint
                .arrivals
                .iter()
                .map(|(at, status)| format!("{at:.6},{status}\n"))
                .collect();
            std::fs::write(&path, lines).expect("DRAIN_ARRIVALS: a writable path");
        }
        let mut delivered_at: Vec<f64> = endpoint
            .arrivals
            .iter()
            .filter(|(_, status)| *status == 200)
            .map(|(at, _)| *at)
            .collect();
        delivered_at.sort_by(f64::total_cmp);
        let p99 = (N * 99).div_ceil(100);
        Drained {
            attempts_while_down: endpoint.arrivals.iter().filter(|(at, _)| *at < 0.0).count(),
            overload: endpoint
                .arrivals
                .iter()
                .filter(|(at, status)| *at >= 0.0 && *status == 503)
                .count(),
            first: delivered_at.first().map(|at| Duration::from_secs_f64(*at)),
            t99: delivered_at
                .get(p99 - 1)
                .map(|at| Duration::from_secs_f64(*at)),
            delivered: delivered_at.len(),
            stats: format!("{:?}", redelivery.stats()),
        }
    }
}
