//! Chaos against a real server: thousands of requests through
//! `RetryLayer -> CircuitBreakerLayer -> TimeoutLayer -> hyper-util Client` to a loopback hyper
//! server that answers 200, 400, 404, 500, 503 or 429 (with small, huge or malformed
//! `Retry-After`), hangs up, or stalls past the per-attempt timeout, at random (seeded).
//!
//! What is asserted, per request id, with `attempts` from the request's [`RetryReport`] and the
//! per-attempt outcomes recorded just inside the retry layer:
//!
//! * every request ends exactly once, with a response or an error, and its report;
//! * the layer's report and the recorded attempts agree on the number of attempts;
//! * the server saw at most `attempts - refused` of them (`refused`: turned away by the breaker,
//!   so never sent): nothing reached the server twice or behind the layer's back;
//! * the server saw at least every attempt that got a response, and every status the client got
//!   is one the server sent for that id;
//! * an attempt that passed the breaker but never reached the server can only be one that timed
//!   out or failed in transport (its bytes never arrived); their number is printed, and is 0 in a
//!   normal run;
//! * a POST without an `Idempotency-Key` made one attempt and reached the server at most once;
//! * the budget's books balance: granted withdrawals minus refunds equals the retries sent, and
//!   withdrawals never exceed the capacity + deposits x 0.2 + refunds + refill x elapsed;
//! * once the client is dropped, the runtime has no task left but the server's accept loop, and
//!   none once the server is dropped.
//!
//! Real sockets mean real time: delays are small, and nothing is asserted on durations.

use test_support as support;

mod observe;
mod server;

use http::header::HeaderName;
use http::{Method, Request};
use observe::{ClientLog, Counted, Observe, Seen};
use server::{Did, ServerLog};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{Body, TestServer};
use tokio::runtime::Handle;
use tokio::time::Instant;
use tower::timeout::TimeoutLayer;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::hint::HintPolicy;
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::Idempotency;
use tower_http_retry::retry::{RandomSource, TokenBucket};
use tower_http_retry::CircuitBreakerLayer;
use tower_http_retry::{AbortSignal, Backoff, Jitter, RetryLayer, RetryReport, StopReason};

const REQUESTS: u64 = 5_000;
const CONCURRENCY: usize = 64;
/// Requests start no faster than one per `ARRIVAL` (while a worker is free), as callers
/// arrive, so that a circuit open for 50 ms refuses a few dozen of them, not the whole run.
const ARRIVAL: Duration = Duration::from_micros(400);
const SEED: u64 = 2024;
const PER_ATTEMPT: Duration = Duration::from_millis(300);
const STALL: Duration = Duration::from_millis(600);
/// Budget: capacity, deposit per success, refill per second.
const CAPACITY: f64 = 30.0;
const DEPOSIT: f64 = 0.2;
const REFILL: f64 = 20.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Get,
    KeyedPost,
    Post,
}

/// How one request ended.
#[derive(Debug)]
struct Ended {
    kind: Kind,
    result: Result<u16, Seen>,
    report: RetryReport,
}

fn kind_of(number: u64) -> Kind {
    match number % 4 {
        0 | 1 => Kind::Get,
        2 => Kind::KeyedPost,
        _ => Kind::Post,
    }
}

fn request(uri: &http::Uri, number: u64) -> Request<Body> {
    let id = format!("r{number}");
    match kind_of(number) {
        Kind::Get => support::get(uri, &id),
        Kind::KeyedPost => {
            let mut request = support::request(Method::POST, uri, &id, "{\"order\":1}");
            let key = http::HeaderValue::from_str(&format!("key-{number}")).unwrap();
            request
                .headers_mut()
                .insert(Idempotency::KEY_HEADER.clone(), key);
            request
        }
        Kind::Post => support::request(Method::POST, uri, &id, "{\"order\":2}"),
    }
}

/// Waits (up to 10 s, polling) until the runtime has at most `tasks` alive; returns how many
/// are alive then.
async fn settle_to(tasks: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = Handle::current().metrics().num_alive_tasks();
        if alive <= tasks || Instant::now() > deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_run_accounts_for_every_request_attempt_and_token() {
    let server_log = ServerLog::default();
    let outage = 2000..2400;
    let server =
        TestServer::start(server::script(SEED, outage, STALL, Arc::clone(&server_log))).await;
    let baseline = Handle::current().metrics().num_alive_tasks();
    assert_eq!(baseline, 1, "the server's accept loop");

    let started = Instant::now();
    let budget = Counted::new(
        TokenBucket::builder()
            .capacity(CAPACITY)
            .deposit_per_success(DEPOSIT)
            .refill_per_second(REFILL)
            .build()
            .unwrap(),
    );
    let wake = AbortSignal::new();
    let retry = RetryLayer::builder()
        .max_attempts(4)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(5),
            Duration::from_millis(40),
        ))
        .hint_policy(HintPolicy::honored().max_delay(Duration::from_millis(30)))
        .budget(Arc::clone(&budget))
        .abort_signal(wake.clone())
        .attempt_header(HeaderName::from_static("x-attempt"))
        .random_source(RandomSource::seeded(SEED))
        .build()
        .unwrap();
    let breaker = CircuitBreakerLayer::builder()
        .consecutive_failures(8)
        .failure_ratio(0.7)
        .minimum_calls(40)
        .window(Duration::from_secs(1))
        .open_duration(Duration::from_millis(50))
        .half_open_probes(2)
        .abort_signal(wake)
        .random_source(RandomSource::seeded(SEED))
        .build()
        .unwrap();
    let client_log = ClientLog::default();
    let log = Arc::clone(&client_log);
    let service = ServiceBuilder::new()
        .layer(retry.clone())
        .layer_fn(move |inner| Observe::new(inner, Arc::clone(&log)))
        .layer(breaker.clone())
        .layer(TimeoutLayer::new(PER_ATTEMPT))
        .service(support::client());

    // Bounded concurrency: CONCURRENCY workers take request numbers from one counter.
    let first_arrival = Instant::now();
    let ended: Arc<Vec<Mutex<Option<Ended>>>> =
        Arc::new((0..REQUESTS).map(|_| Mutex::new(None)).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let uri = server.uri("/chaos");
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (mut service, ended, next, uri) = (
            service.clone(),
            Arc::clone(&ended),
            Arc::clone(&next),
            uri.clone(),
        );
        workers.spawn(async move {
            loop {
                let number = next.fetch_add(1, Ordering::SeqCst) as u64;
                if number >= REQUESTS {
                    return;
                }
                tokio::time::sleep_until(first_arrival + ARRIVAL * number as u32).await;
                let mut request = request(&uri, number);
                let slot = ReportSlot::new();
                request.extensions_mut().insert(slot.clone());
                let result: Result<_, BoxError> = match service.ready().await {
                    Ok(ready) => ready.call(request).await,
                    Err(error) => Err(error),
                };
                let result = match result {
                    Ok(response) => Ok(response.status().as_u16()),
                    Err(error) if error.is::<tower::timeout::error::Elapsed>() => {
                        Err(Seen::TimedOut)
                    }
                    Err(error) if error.is::<tower_http_retry::circuit_breaker::CircuitOpen>() => {
                        Err(Seen::Refused)
                    }
                    Err(_) => Err(Seen::Transport),
                };
                let report = slot.take().expect("the layer fills every request's slot");
                let previous = ended[number as usize].lock().unwrap().replace(Ended {
                    kind: kind_of(number),
                    result,
                    report,
                });
                assert!(previous.is_none(), "request {number} ended twice");
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        joined.expect("a worker panicked");
    }
    let elapsed = started.elapsed();
    drop(service);

    // Every request ended exactly once.
    let ended: Vec<Ended> = Arc::try_unwrap(ended)
        .expect("the workers are done")
        .into_iter()
        .map(|slot| slot.into_inner().unwrap().expect("every request ended"))
        .collect();
    let stats = retry.stats();
    assert_eq!(stats.requests, REQUESTS);
    assert_eq!(stats.stops.iter().sum::<u64>(), REQUESTS);

    // Once the client is gone its connections close, and the server's connection tasks end
    // (a stalled handler after its stall): only the accept loop is left.
    let client_side_leaks = settle_to(baseline).await - baseline;
    let client_log = client_log.lock().unwrap().clone();
    let server_log = server_log.lock().unwrap().clone();

    let mut totals = Totals::default();
    for (number, end) in ended.iter().enumerate() {
        let id = format!("r{number}");
        let attempts = client_log.get(&id).cloned().unwrap_or_default();
        let did = server_log.get(&id).cloned().unwrap_or_default();
        totals.check(&id, end, &attempts, &did);
        let method = if end.kind == Kind::Get {
            Method::GET
        } else {
            Method::POST
        };
        assert_eq!(server.hits(&method, &id) as usize, did.len());
    }

    // The budget's books.
    let withdrawn = Counted::get(&budget.withdrawn);
    let refunded = Counted::get(&budget.refunded);
    let deposits = Counted::get(&budget.deposits);
    assert_eq!(withdrawn - refunded, stats.retries, "tokens balance");
    assert_eq!(refunded, stats.budget_refunded);
    assert_eq!(deposits, stats.stopped(StopReason::Success));
    let allowed = CAPACITY
        + deposits as f64 * DEPOSIT
        + refunded as f64
        + REFILL * started.elapsed().as_secs_f64();
    assert!(withdrawn as f64 <= allowed, "{withdrawn} > {allowed}");
    assert!(
        stats.budget_denied > 0,
        "the budget was a limit in this run"
    );
    let breaker_stats = breaker.stats();
    assert!(breaker_stats.trips > 0, "the outage tripped the breaker");

    drop(server);
    let server_side_leaks = settle_to(0).await;

    eprintln!(
        "chaos: {REQUESTS} requests in {elapsed:.1?}, {} attempts, {} retries, {} server hits, \
         {} refused by the breaker ({} trips), {} unseen attempts, {} duplicates; budget: {} \
         withdrawn, {} refunded, {} denied, {} deposits, {:.1} allowed; tasks left: {} client \
         side, {} after the server stopped",
        stats.attempts,
        stats.retries,
        totals.hits,
        totals.refused,
        breaker_stats.trips,
        totals.unseen,
        totals.duplicates,
        withdrawn,
        refunded,
        stats.budget_denied,
        deposits,
        allowed,
        client_side_leaks,
        server_side_leaks,
    );
    eprintln!("chaos: stops {:?}", stop_counts(&stats));
    assert_eq!(totals.duplicates, 0);
    assert_eq!(client_side_leaks, 0, "tasks left beyond the server's");
    assert_eq!(server_side_leaks, 0, "tasks left after the server stopped");
}

fn stop_counts(stats: &tower_http_retry::retry::RetryStats) -> Vec<(StopReason, u64)> {
    StopReason::ALL
        .iter()
        .map(|reason| (*reason, stats.stopped(*reason)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Sums over every request, checked one request at a time.
#[derive(Default)]
struct Totals {
    hits: usize,
    refused: usize,
    /// Attempts that passed the breaker but never reached the server.
    unseen: usize,
    /// Hits beyond the attempts that could have reached the server.
    duplicates: usize,
}

impl Totals {
    fn check(&mut self, id: &str, end: &Ended, attempts: &[Seen], did: &[Did]) {
        let report = &end.report;
        assert_eq!(
            report.attempts as usize,
            attempts.len(),
            "{id}: the report and the recorded attempts agree"
        );
        match end.result {
            Ok(status) => assert_eq!(attempts.last(), Some(&Seen::Status(status)), "{id}"),
            Err(seen) => assert_eq!(attempts.last(), Some(&seen), "{id}"),
        }
        let refused = attempts.iter().filter(|a| **a == Seen::Refused).count();
        let sent = attempts.len() - refused;
        self.hits += did.len();
        self.refused += refused;
        self.duplicates += did.len().saturating_sub(sent);
        assert!(
            did.len() <= sent,
            "{id}: {did:?} reached the server, {attempts:?} sent"
        );

        // Every response the client got is one the server sent for this id, and was a hit.
        let mut answered: HashMap<u16, usize> = HashMap::new();
        for did in did {
            if let Did::Answered(status) = did {
                *answered.entry(*status).or_default() += 1;
            }
        }
        for attempt in attempts {
            if let Seen::Status(status) = attempt {
                let left = answered.get_mut(status).filter(|n| **n > 0);
                *left.unwrap_or_else(|| panic!("{id}: {status} never sent ({did:?})")) -= 1;
            }
        }
        // What passed the breaker but never arrived could only have timed out or failed on the way.
        let unseen = sent - did.len();
        let lost_on_the_way = attempts
            .iter()
            .filter(|a| matches!(a, Seen::TimedOut | Seen::Transport))
            .count();
        assert!(unseen <= lost_on_the_way, "{id}: {attempts:?} vs {did:?}");
        self.unseen += unseen;

        if end.kind == Kind::Post {
            assert_eq!(report.attempts, 1, "{id}: an unkeyed POST is sent once");
            assert!(
                did.len() <= 1,
                "{id}: an unkeyed POST reached the server twice"
            );
        }
    }
}
