//! The canonical stack through an outage: the breaker opens, sleeping retries are woken, calls
//! fail fast, a half-open probe goes through, and the circuit closes again.
//!
//! ```text
//! cargo run --example stack
//! ```
//!
//! The stack, outermost first:
//!
//! ```text
//! TimeoutLayer(total 3 s) -> RetryLayer -> CircuitBreakerLayer -> TimeoutLayer(300 ms per attempt) -> hyper-util client
//! ```
//!
//! A local server on 127.0.0.1 answers 200, except from 0.5 s to 1.6 s, when it answers 503.
//! Eight clients send a GET every 40 ms for 3.5 s. The example prints a timeline of what the
//! breaker and the retry layer did, then a summary, and exits.

use axum::http::StatusCode;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::timeout::error::Elapsed;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::circuit_breaker::CircuitOpen;
use tower_http_retry::circuit_breaker::CircuitState;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{AbortSignal, Backoff, CircuitBreakerLayer, Jitter, RetryLayer, StopReason};

const OUTAGE: (Duration, Duration) = (Duration::from_millis(500), Duration::from_millis(1600));
const RUN: Duration = Duration::from_millis(3500);
const CLIENTS: usize = 8;

/// What the callers saw, by kind.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed_after_retries: AtomicU64,
    refused_fast: AtomicU64,
    timed_out: AtomicU64,
    other: AtomicU64,
    upstream_hits_in_outage: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let start = Instant::now();
    let at = move || format!("[{:>5.3} s]", start.elapsed().as_secs_f64());
    let tally = Arc::new(Tally::default());

    // The upstream: healthy, except while `down` is set.
    let down = Arc::new(AtomicBool::new(false));
    let (flag, counts) = (Arc::clone(&down), Arc::clone(&tally));
    let upstream = Router::new().fallback(move || {
        let status = if flag.load(Ordering::SeqCst) {
            counts
                .upstream_hits_in_outage
                .fetch_add(1, Ordering::Relaxed);
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        async move { status }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let uri: http::Uri = format!("http://{}/", listener.local_addr()?).parse()?;
    tokio::spawn(async move { axum::serve(listener, upstream).await });

    // One signal: the breaker wakes it when it opens, the retry layer's sleeps listen to it.
    let wake = AbortSignal::new();
    let retry = RetryLayer::builder()
        .max_attempts(4)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(100),
            Duration::from_secs(1),
        ))
        .abort_signal(wake.clone())
        .random_source(RandomSource::seeded(1))
        .build()?;
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(4)
        .failure_ratio(0.5)
        .minimum_calls(10)
        .window(Duration::from_secs(2))
        .open_duration(Duration::from_millis(500))
        .open_jitter(0.5)
        .open_multiplier(2.0)
        .max_open_duration(Duration::from_secs(2))
        .abort_signal(wake)
        .random_source(RandomSource::seeded(2))
        .build()?;
    breaker.check_retry(&retry)?;

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let service = ServiceBuilder::new()
        .timeout(Duration::from_secs(3)) // total, sleeps included
        .layer(retry.clone())
        .layer(breaker.clone())
        .timeout(Duration::from_millis(300)) // each attempt
        .service(client);

    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let (mut service, uri, tally) = (service.clone(), uri.clone(), Arc::clone(&tally));
        workers.spawn(async move {
            while start.elapsed() < RUN {
                let request = http::Request::get(uri.clone()).body(Full::new(Bytes::new()))?;
                let result = service.ready().await?.call(request).await;
                let counter = match &result {
                    Ok(response) if response.status().is_success() => &tally.ok,
                    Ok(_) => &tally.failed_after_retries,
                    Err(e) if e.is::<CircuitOpen>() => &tally.refused_fast,
                    Err(e) if e.is::<Elapsed>() => &tally.timed_out,
                    Err(_) => &tally.other,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            Ok::<_, BoxError>(())
        });
    }

    // The timeline: outage edges, breaker transitions, and retries woken from their sleep.
    let (mut outage_started, mut outage_ended) = (false, false);
    let mut last_state = breaker.state();
    let mut last_woken = 0;
    let mut last_refused = 0;
    println!("{} breaker closed, {CLIENTS} clients start", at());
    while start.elapsed() < RUN {
        let now = start.elapsed();
        if !outage_started && now >= OUTAGE.0 {
            outage_started = true;
            down.store(true, Ordering::SeqCst);
            println!("{} upstream: outage begins (503)", at());
        }
        if !outage_ended && now >= OUTAGE.1 {
            outage_ended = true;
            down.store(false, Ordering::SeqCst);
            println!("{} upstream: recovered (200)", at());
        }
        let state = breaker.state();
        if state != last_state {
            let refused = tally.refused_fast.load(Ordering::Relaxed);
            if matches!(last_state, CircuitState::Open { .. }) {
                println!(
                    "{}   ... {} calls refused fast while open",
                    at(),
                    refused - last_refused
                );
            }
            last_refused = refused;
            match state {
                CircuitState::Open { half_open_at } => println!(
                    "{} breaker OPEN, half-open in {} ms",
                    at(),
                    half_open_at.duration_since(Instant::now()).as_millis()
                ),
                CircuitState::HalfOpen => {
                    println!("{} breaker HALF-OPEN: the next call is a probe", at())
                }
                CircuitState::Closed => println!("{} breaker CLOSED: the probe succeeded", at()),
            }
            last_state = state;
        }
        let woken = retry.stats().stopped(StopReason::Held);
        if woken != last_woken {
            println!(
                "{} retry: {} request(s) stopped by the opening (woken from their sleep, or \
                 not let to start one), returned their last 503 at once",
                at(),
                woken - last_woken
            );
            last_woken = woken;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    while let Some(worker) = workers.join_next().await {
        worker??;
    }

    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let stats = retry.stats();
    let circuit = breaker.stats();
    println!("\nwhat the callers got:");
    println!("  200 OK                           {:>4}", load(&tally.ok));
    println!(
        "  503, the last outcome            {:>4}",
        load(&tally.failed_after_retries)
    );
    println!(
        "  CircuitOpen (failed fast)        {:>4}",
        load(&tally.refused_fast)
    );
    println!(
        "  Elapsed (timed out)              {:>4}",
        load(&tally.timed_out)
    );
    println!(
        "  other errors                     {:>4}",
        load(&tally.other)
    );
    println!("retry layer:");
    println!(
        "  attempts / retries               {:>4} / {}",
        stats.attempts, stats.retries
    );
    println!(
        "  stopped by the breaker (held)    {:>4}",
        stats.stopped(StopReason::Held)
    );
    println!(
        "  of those woken from a sleep      {:>4}  (their budget tokens refunded)",
        stats.budget_refunded
    );
    println!("breaker:");
    println!(
        "  trips / probes / refused         {:>4} / {} / {}",
        circuit.trips, circuit.probes, circuit.rejected
    );
    println!("  final state                      {:?}", circuit.state);
    println!(
        "upstream hits during the outage    {:>4}",
        load(&tally.upstream_hits_in_outage)
    );
    Ok(())
}
