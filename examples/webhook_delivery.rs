//! Webhook delivery through a flaky receiver: the crate's main demo.
//!
//! ```text
//! cargo run --example webhook_delivery
//! ```
//!
//! Needs nothing else: it starts its own receiver on `127.0.0.1` (axum), then delivers 300
//! webhooks to it through
//!
//! ```text
//! RetryLayer -> GlobalConcurrencyLimit (16 attempts on the wire) -> Timeout (250 ms per attempt)
//!            -> hyper-util legacy Client
//! ```
//!
//! with 48 deliveries in flight at a time. Each webhook is a POST with an `Idempotency-Key`, so
//! the layer may repeat it. The receiver misbehaves the way real ones do: 503s, 429s with
//! `Retry-After: 1`, writes that commit and then answer 503, answers that arrive after the
//! client's per-attempt timeout, an outage that fails every attempt of 40 deliveries in a row,
//! and a 400 for every malformed payload. What it does depends only on the delivery id and the
//! attempt number (the layer sends it in `x-retry-attempt`), so every run faces the same
//! receiver, and the layer's jitter comes from a seeded [`RandomSource`]. The counts still vary
//! by a few between runs: which delivery gets which random stream, and which retries the shared
//! budget refuses, depend on the order in which concurrent tasks get there.
//!
//! It shows:
//! * a live progress line (delivered / dead-lettered / in flight / on the wire);
//! * the outcome of every delivery, failures included, learnt from a [`ReportSlot`]: delivered,
//!   or dead-lettered grouped by [`StopReason`];
//! * attempts in total and per delivery, `Retry-After` hints honoured, budget denials, and the
//!   histogram of realised delays (`RetryStats::delays`);
//! * that the receiver, which deduplicates by `Idempotency-Key`, applied no webhook twice, and
//!   how many repeats it recognised (each one a double delivery without the key).
//!
//! The run takes about two seconds, most of it `Retry-After` sleeps, and exits with status 1
//! if a consistency check fails.

use axum::extract::State;
use axum::response::{IntoResponse, Response as AxumResponse};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::header::{HeaderName, RETRY_AFTER};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::limit::{ConcurrencyLimit, GlobalConcurrencyLimitLayer};
use tower::timeout::{Timeout, TimeoutLayer};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http_retry::{
    Backoff, HttpClassifier, Jitter, RandomSource, ReportSlot, Retry, RetryAfter, RetryLayer,
    RetryReport, StopReason, TokenBucket,
};

const DELIVERIES: u32 = 300;
/// Deliveries in flight at once (each worker keeps its delivery through all its retries).
const WORKERS: usize = 48;
/// Attempts on the wire at once. The retry layer gives its permit back while it sleeps.
const ON_THE_WIRE: usize = 16;
const PER_ATTEMPT: Duration = Duration::from_millis(250);
const MAX_ATTEMPTS: u32 = 4;
/// Deliveries in this range hit an outage: every attempt fails.
const OUTAGE: std::ops::Range<u32> = 200..240;
const ATTEMPT_HEADER: &str = "x-retry-attempt";

type HttpClient = Client<HttpConnector, Full<Bytes>>;
type Stack = Retry<ConcurrencyLimit<Timeout<HttpClient>>, HttpClassifier>;

#[tokio::main]
async fn main() {
    let started = Instant::now();
    let receiver = Arc::new(Receiver::default());
    let uri = start_receiver(Arc::clone(&receiver)).await;

    let layer = RetryLayer::builder()
        .max_attempts(MAX_ATTEMPTS)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(20),
            Duration::from_millis(400),
        ))
        .retry_after(RetryAfter::honored().max_delay(Duration::from_secs(2)))
        // The default bucket: a burst of 100 retries, then 0.2 per success and 10 per second.
        .budget(TokenBucket::default())
        .attempt_header(HeaderName::from_static(ATTEMPT_HEADER))
        .random_source(RandomSource::seeded(2024))
        .build()
        .expect("a valid retry configuration");
    let wire = Arc::new(Semaphore::new(ON_THE_WIRE));
    let client: Stack = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::clone(
            &wire,
        )))
        .layer(TimeoutLayer::new(PER_ATTEMPT))
        .service(Client::builder(TokioExecutor::new()).build_http());

    println!(
        "Delivering {DELIVERIES} webhooks to {uri}: {WORKERS} in flight, {ON_THE_WIRE} attempts \
         on the wire, {PER_ATTEMPT:?} per attempt, up to {MAX_ATTEMPTS} attempts each.\n"
    );
    let progress = Arc::new(Progress::default());
    let ticker = tokio::spawn(show_progress(Arc::clone(&progress), Arc::clone(&wire)));

    let workers = Arc::new(Semaphore::new(WORKERS));
    let mut tasks = JoinSet::new();
    for id in 0..DELIVERIES {
        let permit = Arc::clone(&workers)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (mut client, uri, progress) = (client.clone(), uri.clone(), Arc::clone(&progress));
        progress.started.fetch_add(1, Relaxed);
        tasks.spawn(async move {
            let delivery = deliver(&mut client, &uri, id).await;
            let counter = if delivery.delivered {
                &progress.delivered
            } else {
                &progress.dead_lettered
            };
            counter.fetch_add(1, Relaxed);
            drop(permit);
            delivery
        });
    }
    let deliveries = tasks.join_all().await;
    ticker.abort();
    progress.print(&wire, true);

    let problems = summary(&deliveries, &layer, &receiver);
    println!("\nfinished in {:.1} s", started.elapsed().as_secs_f64());
    if problems > 0 {
        eprintln!("{problems} consistency check(s) failed");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------------
// The sender

/// What happened to one webhook.
struct Delivery {
    id: u32,
    delivered: bool,
    report: RetryReport,
}

fn payload(id: u32) -> Bytes {
    let json = format!(
        r#"{{"id":{id},"event":"invoice.paid","amount_cents":{}}}"#,
        1000 + id
    );
    if id % 50 == 17 {
        // A bug upstream cut this one short; no number of retries will fix it.
        Bytes::from(json[..json.len() / 2].to_owned())
    } else {
        Bytes::from(json)
    }
}

async fn deliver(client: &mut Stack, uri: &Uri, id: u32) -> Delivery {
    let slot = ReportSlot::new();
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(uri.clone())
        .header("content-type", "application/json")
        .header("idempotency-key", format!("delivery-{id:04}"))
        .body(Full::new(payload(id)))
        .expect("a valid request");
    request.extensions_mut().insert(slot.clone());
    // hyper-util's client and the concurrency limit never fail `poll_ready`.
    let ready = client
        .ready()
        .await
        .expect("the client stack is always ready");
    let result = ready.call(request).await;
    Delivery {
        id,
        delivered: matches!(&result, Ok(response) if response.status().is_success()),
        // The layer fills the slot of every request it was called with, errors included.
        report: slot.take().expect("the retry layer fills the slot"),
    }
}

// ---------------------------------------------------------------------------------------------
// The receiver

/// The receiver's books: which keys it applied, and how often a key came back.
#[derive(Default)]
struct Receiver {
    applied: Mutex<HashMap<String, u32>>,
    requests: AtomicU64,
    repeats: AtomicU64,
}

impl Receiver {
    /// Applies the webhook unless its key was applied before (a repeat, which a receiver that
    /// ignored the key would have applied again); returns whether it was new.
    fn apply_once(&self, key: &str) -> bool {
        let mut applied = self.applied.lock().expect("no panics while locked");
        let times = applied.entry(key.to_owned()).or_insert(0);
        if *times > 0 {
            self.repeats.fetch_add(1, Relaxed);
            return false;
        }
        *times += 1;
        true
    }
}

/// What the receiver does with one attempt of a well-formed webhook.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Apply and answer 200.
    Accept,
    /// Answer 503 without applying.
    Unavailable,
    /// Answer 429 with `Retry-After: 1` without applying.
    RateLimited,
    /// Apply, then fail to answer: 503 (the commit happened, the answer says otherwise).
    AppliedThen503,
    /// Apply, then answer only after the client's per-attempt timeout.
    AppliedThenSlow,
}

/// A fixed function of delivery and attempt, so every run sees the same receiver.
fn fate(id: u32, attempt: u32) -> Fate {
    if OUTAGE.contains(&id) {
        return Fate::Unavailable;
    }
    let roll = splitmix(u64::from(id) << 8 | u64::from(attempt)) % 100;
    let table: [(u64, Fate); 5] = if attempt == 1 {
        [
            (60, Fate::Accept),
            (72, Fate::Unavailable),
            (84, Fate::RateLimited),
            (92, Fate::AppliedThen503),
            (100, Fate::AppliedThenSlow),
        ]
    } else {
        [
            (78, Fate::Accept),
            (88, Fate::Unavailable),
            (92, Fate::RateLimited),
            (96, Fate::AppliedThen503),
            (100, Fate::AppliedThenSlow),
        ]
    };
    table
        .iter()
        .find(|(below, _)| roll < *below)
        .map_or(Fate::Accept, |&(_, fate)| fate)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A crude check, enough to catch a truncated body: braces balance and the event is named.
fn well_formed(body: &[u8]) -> bool {
    body.starts_with(b"{") && body.ends_with(b"}") && body.windows(8).any(|w| w == b"\"event\":")
}

async fn hook(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> AxumResponse {
    receiver.requests.fetch_add(1, Relaxed);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(key) = header("idempotency-key").map(str::to_owned) else {
        return (StatusCode::BAD_REQUEST, "missing Idempotency-Key").into_response();
    };
    if !well_formed(&body) {
        return (StatusCode::BAD_REQUEST, "malformed payload").into_response();
    }
    let id = key
        .strip_prefix("delivery-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let attempt = header(ATTEMPT_HEADER)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    match fate(id, attempt) {
        Fate::Unavailable => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Fate::RateLimited => (StatusCode::TOO_MANY_REQUESTS, [(RETRY_AFTER, "1")]).into_response(),
        Fate::Accept => {
            receiver.apply_once(&key);
            StatusCode::OK.into_response()
        }
        Fate::AppliedThen503 => {
            receiver.apply_once(&key);
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        Fate::AppliedThenSlow => {
            receiver.apply_once(&key);
            tokio::time::sleep(PER_ATTEMPT * 3).await;
            StatusCode::OK.into_response()
        }
    }
}

async fn start_receiver(receiver: Arc<Receiver>) -> Uri {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let app = Router::new()
        .route("/hooks", post(hook))
        .with_state(receiver);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/hooks").parse().expect("a valid URI")
}

// ---------------------------------------------------------------------------------------------
// Progress and summary

#[derive(Default)]
struct Progress {
    started: AtomicU64,
    delivered: AtomicU64,
    dead_lettered: AtomicU64,
}

impl Progress {
    fn print(&self, wire: &Semaphore, last: bool) {
        let delivered = self.delivered.load(Relaxed);
        let dead = self.dead_lettered.load(Relaxed);
        let in_flight = self.started.load(Relaxed) - delivered - dead;
        let sending = ON_THE_WIRE - wire.available_permits();
        let line = format!(
            "delivered {delivered:>3} | dead-lettered {dead:>3} | in flight {in_flight:>2} \
             (on the wire {sending:>2})"
        );
        let mut err = std::io::stderr();
        if err.is_terminal() {
            // Redraw the same line; a newline only at the end.
            let _ = write!(err, "\r\x1b[K{line}{}", if last { "\n" } else { "" });
            let _ = err.flush();
        } else {
            let _ = writeln!(err, "{line}");
        }
    }
}

async fn show_progress(progress: Arc<Progress>, wire: Arc<Semaphore>) {
    // Without a terminal every update is a new line, so update less often.
    let period = if std::io::stderr().is_terminal() {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(1)
    };
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        progress.print(&wire, false);
    }
}

/// Prints the summary tables; returns how many consistency checks failed.
fn summary(deliveries: &[Delivery], layer: &RetryLayer, receiver: &Receiver) -> usize {
    let stats = layer.stats();
    let total = deliveries.len() as f64;
    let delivered = deliveries.iter().filter(|d| d.delivered).count();
    let dead: Vec<&Delivery> = deliveries.iter().filter(|d| !d.delivered).collect();
    let attempts: u64 = deliveries
        .iter()
        .map(|d| u64::from(d.report.attempts))
        .sum();
    let mut by_attempts: BTreeMap<u32, usize> = BTreeMap::new();
    for d in deliveries {
        *by_attempts.entry(d.report.attempts).or_default() += 1;
    }
    let honoured: usize = deliveries
        .iter()
        .map(|d| d.report.retry_after_delays().count())
        .sum();
    let slept: Duration = deliveries.iter().map(|d| d.report.slept).sum();

    println!("\nSender");
    row("webhooks", deliveries.len(), "");
    row(
        "delivered",
        delivered,
        &format!("{:.1} %", 100.0 * delivered as f64 / total),
    );
    row("dead-lettered", dead.len(), "by why the layer stopped:");
    for reason in StopReason::ALL {
        let n = dead.iter().filter(|d| d.report.stop == reason).count();
        if n > 0 {
            row(&format!("  {reason}"), n, dead_letter_note(reason));
        }
    }
    row(
        "attempts",
        attempts,
        &format!("{:.2} per webhook", attempts as f64 / total),
    );
    for (n, count) in &by_attempts {
        let plural = if *n == 1 { "" } else { "s" };
        row(&format!("  after {n} attempt{plural}"), *count, "");
    }
    row(
        "Retry-After honoured",
        honoured,
        &format!(
            "of {} hints seen, {} clamped",
            stats.retry_after_seen, stats.retry_after_clamped
        ),
    );
    row("budget denials", stats.budget_denied, "retries refused");
    row(
        "time asleep",
        format!("{:.1} s", slept.as_secs_f64()),
        "summed over webhooks",
    );

    let outage: Vec<&Delivery> = deliveries
        .iter()
        .filter(|d| OUTAGE.contains(&d.id))
        .collect();
    let outage_attempts: u32 = outage.iter().map(|d| d.report.attempts).sum();
    let outage_denied = outage
        .iter()
        .filter(|d| d.report.stop == StopReason::BudgetEmpty)
        .count();
    println!(
        "\nOutage (webhooks {}-{}: every attempt fails)",
        OUTAGE.start,
        OUTAGE.end - 1
    );
    row(
        "delivered",
        outage.iter().filter(|d| d.delivered).count(),
        &format!("of {}", outage.len()),
    );
    row(
        "attempts sent",
        outage_attempts,
        &format!("of {} without a budget", outage.len() as u32 * MAX_ATTEMPTS),
    );
    row("stopped by the budget", outage_denied, "");

    // Every webhook the client counts as delivered must have been applied, exactly once.
    let applied = receiver.applied.lock().expect("no panics while locked");
    let key = |d: &Delivery| format!("delivery-{:04}", d.id);
    let twice = applied.values().filter(|&&n| n > 1).count();
    let missing = deliveries
        .iter()
        .filter(|d| d.delivered && !applied.contains_key(&key(d)))
        .count();
    let lost_acks = dead
        .iter()
        .filter(|d| applied.contains_key(&key(d)))
        .count();
    println!("\nReceiver (deduplicates by Idempotency-Key)");
    row("requests received", receiver.requests.load(Relaxed), "");
    row("webhooks applied", applied.len(), "");
    row(
        "repeats recognised",
        receiver.repeats.load(Relaxed),
        "by key: without it, applied twice",
    );
    row("applied twice", twice, "must be 0");
    row("delivered, not applied", missing, "must be 0");
    row(
        "applied, dead-lettered",
        lost_acks,
        "the last answer was lost",
    );

    println!("\nDelays before retries (count per retry number and bucket)");
    print!("{}", stats.delays);
    usize::from(twice > 0) + usize::from(missing > 0)
}

fn dead_letter_note(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Permanent => "400: malformed payload",
        StopReason::AttemptsExhausted => "still failing after the last attempt",
        StopReason::BudgetEmpty => "the retry budget said no",
        StopReason::RetryAfterTooLong => "Retry-After beyond the clamp",
        _ => "",
    }
}

fn row(label: &str, value: impl std::fmt::Display, note: &str) {
    println!("  {label:<24}{value:>8}  {note}");
}
