//! The webhook scenario, shared by `examples/webhook_delivery.rs` (which prints what happened) and
//! `tests/webhook/main.rs` (which checks that the books add up).
//!
//! [`run`] starts a receiver on `127.0.0.1:0` (axum) and delivers [`DELIVERIES`] webhooks to it,
//! one every [`ARRIVAL`] as the events happen, each in a task of its own, through
//!
//! ```text
//! RetryLayer::bulk() -> GlobalConcurrencyLimit (16 attempts on the wire) -> Timeout (250 ms per
//!                       attempt) -> hyper-util legacy Client
//! ```
//!
//! with `bulk`'s backoff shortened to [`BACKOFF`] so that the run takes seconds; its pacing is
//! `Pacing::new()` (about 2 probes per second while the receiver is down). Each webhook is a
//! POST with an `Idempotency-Key`, so the layer may repeat it. The receiver deduplicates by that
//! key. It is down during [`OUTAGE`]: every request is answered 503 (what a load balancer with no
//! healthy upstream says), malformed or not. Around that window it is flaky the way real ones
//! are: 500s from its own errors, writes that commit and then answer 500, answers that arrive
//! after the client's per-attempt timeout, and a 400 for every malformed payload. A 500 is
//! transient but says nothing of the receiver's load, so only the outage's 503s and the timeouts
//! count as congestion to the pacer. Outside the outage what the receiver does depends only on
//! the webhook and the attempt number (the layer sends it in `x-retry-attempt`), and the layer's
//! jitter comes from a seeded [`RandomSource`]. The counts still vary between runs: the outage is
//! a window of wall time, and the probes that let requests through while it lasts are jittered.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::limit::{ConcurrencyLimit, GlobalConcurrencyLimitLayer};
use tower::timeout::{Timeout, TimeoutLayer};
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::pacing::PacingStats;
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::{RandomSource, Retry, RetryLayerBuilder, RetryStats};
use tower_http_retry::{Backoff, HttpClassifier, Jitter, Pacing, RetryReport};

pub const DELIVERIES: u32 = 300;
/// A new webhook is due every `ARRIVAL`: 300 over 4.5 s.
pub const ARRIVAL: Duration = Duration::from_millis(15);
/// Attempts on the wire at once. The retry layer gives its permit back while a request sleeps or
/// waits in the pacer's queue.
pub const ON_THE_WIRE: usize = 16;
pub const PER_ATTEMPT: Duration = Duration::from_millis(250);
/// `RetryLayer::bulk()`'s full jitter from 1 s capped at 30 s, shortened for a demo of seconds.
pub const BACKOFF: Range<Duration> = Duration::from_millis(50)..Duration::from_millis(500);
/// `RetryLayer::bulk()`'s probe interval (`Pacing::new()`'s), named here because the test's bound
/// on what the receiver sees while down is derived from it.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// When the receiver is down, from the start of the run: every request is answered 503.
pub const OUTAGE: Range<Duration> = Duration::from_millis(1000)..Duration::from_millis(3000);
pub const SEED: u64 = 2024;
const ATTEMPT_HEADER: &str = "x-retry-attempt";

type Stack = Retry<ConcurrencyLimit<Timeout<Client<HttpConnector, Full<Bytes>>>>, HttpClassifier>;

/// What happened to one webhook, as the sender saw it. Times are from the start of the run.
#[derive(Debug)]
pub struct Delivery {
    pub id: u32,
    /// When the webhook was handed to the client.
    pub due: Duration,
    /// When the client returned.
    pub done: Duration,
    pub delivered: bool,
    pub report: RetryReport,
}

/// The receiver's books.
#[derive(Clone, Debug, Default)]
pub struct Books {
    /// Requests received, malformed ones and those answered by the outage included.
    pub requests: u64,
    /// When each request arrived, from the start of the run.
    pub arrivals: Vec<Duration>,
    /// Requests received per `Idempotency-Key`.
    pub received: HashMap<String, u32>,
    /// Requests per `Idempotency-Key` answered 503 because the receiver was down.
    pub down: HashMap<String, u32>,
    /// The keys whose request was applied: a later request with one of them is a repeat.
    applied_keys: HashSet<String>,
    /// How often each webhook (by the id in its payload, not its key) was applied.
    pub applied: HashMap<u32, u32>,
    /// Requests whose key was applied before: each would have been a second application without
    /// the key.
    pub repeats: u64,
}

/// Everything a run leaves behind, deliveries sorted by id.
#[derive(Debug)]
pub struct Run {
    pub deliveries: Vec<Delivery>,
    pub max_attempts: u32,
    pub stats: RetryStats,
    /// The receiver's endpoint as the pacer saw it at the end.
    pub pacing: Option<PacingStats>,
    pub books: Books,
}

impl Run {
    /// Whether webhook `d` was caught by the outage: due while the receiver was down, or sent to
    /// it then (and answered 503).
    pub fn caught(&self, d: &Delivery) -> bool {
        OUTAGE.contains(&d.due) || self.books.down.contains_key(&key(d.id))
    }
}

/// The `Idempotency-Key` of webhook `id`: the same on every attempt.
pub fn key(id: u32) -> String {
    format!("delivery-{id:04}")
}

/// Whether a bug upstream cut this webhook's payload short; no number of retries will fix it.
pub fn malformed(id: u32) -> bool {
    id % 50 == 17
}

fn payload(id: u32) -> Bytes {
    let json = format!(
        r#"{{"id":{id},"event":"invoice.paid","amount_cents":{}}}"#,
        1000 + id
    );
    let len = if malformed(id) {
        json.len() / 2
    } else {
        json.len()
    };
    Bytes::from(json[..len].to_owned())
}

/// Delivers every webhook and returns what happened, on both sides.
pub async fn run(seed: u64) -> Run {
    let start = Instant::now();
    let receiver = Arc::new(Receiver {
        start,
        books: Mutex::default(),
    });
    let uri = start_receiver(Arc::clone(&receiver)).await;
    let layer = RetryLayerBuilder::bulk()
        .backoff(Backoff::new(Jitter::Full, BACKOFF.start, BACKOFF.end))
        .pacing(
            Pacing::builder()
                .probe_interval(PROBE_INTERVAL)
                .build()
                .expect("a valid pacing configuration"),
        )
        .attempt_header(HeaderName::from_static(ATTEMPT_HEADER))
        .random_source(RandomSource::seeded(seed))
        .build()
        .expect("a valid retry configuration");
    let client: Stack = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(GlobalConcurrencyLimitLayer::new(ON_THE_WIRE))
        .layer(TimeoutLayer::new(PER_ATTEMPT))
        .service(Client::builder(TokioExecutor::new()).build_http());

    let mut tasks = JoinSet::new();
    for id in 0..DELIVERIES {
        tokio::time::sleep_until(start + ARRIVAL * id).await;
        let (client, uri) = (client.clone(), uri.clone());
        tasks.spawn(deliver(client, uri, id, start));
    }
    let mut deliveries = tasks.join_all().await;
    deliveries.sort_by_key(|d| d.id);
    let books = receiver
        .books
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Run {
        deliveries,
        max_attempts: layer.max_attempts(),
        stats: layer.stats(),
        pacing: layer.pacing_stats(uri.authority()),
        books,
    }
}

async fn deliver(client: Stack, uri: Uri, id: u32, start: Instant) -> Delivery {
    let due = start.elapsed();
    let slot = ReportSlot::new();
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header("content-type", "application/json")
        .header("idempotency-key", key(id))
        .body(Full::new(payload(id)))
        .expect("a valid request");
    request.extensions_mut().insert(slot.clone());
    // hyper-util's client and the concurrency limit never fail `poll_ready`.
    let result = client.oneshot(request).await;
    Delivery {
        id,
        due,
        done: start.elapsed(),
        delivered: matches!(&result, Ok(response) if response.status().is_success()),
        // The layer fills the slot of every request it was called with, errors included.
        report: slot.take().expect("the retry layer fills the slot"),
    }
}

/// What the receiver does with one attempt of a well-formed webhook.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Apply and answer 200.
    Accept,
    /// Answer 500 without applying: a bug or a blip of the receiver's own (transient, but says
    /// nothing of its load).
    Error,
    /// Apply, then answer 500 (the commit happened, the answer says otherwise).
    AppliedThenError,
    /// Apply, then answer only after the client's per-attempt timeout (a timeout is congestion
    /// to the pacer).
    AppliedThenSlow,
    /// Answer 503: the receiver is down (what a load balancer with no healthy upstream says).
    Down,
}

/// Outside the outage, a fixed function of webhook and attempt, so every run faces the same
/// receiver.
fn fate(id: u32, attempt: u32) -> Fate {
    let roll = splitmix(u64::from(id) << 8 | u64::from(attempt)) % 100;
    // Percentiles below which each fate applies: the first attempt fares worse than retries.
    let table = if attempt == 1 {
        [85, 91, 95]
    } else {
        [92, 96, 98]
    };
    match table.iter().position(|&below| roll < below) {
        Some(0) => Fate::Accept,
        Some(1) => Fate::Error,
        Some(2) => Fate::AppliedThenError,
        _ => Fate::AppliedThenSlow,
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The webhook's id, or `None` for a malformed payload. A crude parse, enough to catch a
/// truncated body.
fn webhook_id(body: &[u8]) -> Option<u32> {
    let json = std::str::from_utf8(body).ok()?;
    let fields = json.strip_prefix(r#"{"id":"#)?.strip_suffix('}')?;
    fields.split(',').next()?.parse().ok()
}

impl Books {
    /// Applies webhook `id` unless a request with this key was applied before.
    fn apply_once(&mut self, key: &str, id: u32) {
        if self.applied_keys.insert(key.to_owned()) {
            *self.applied.entry(id).or_insert(0) += 1;
        } else {
            self.repeats += 1;
        }
    }

    /// Books one request arriving at `at`; returns what to do with it, or the 400 for a bad one.
    fn receive(
        &mut self,
        at: Duration,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Fate, &'static str> {
        self.requests += 1;
        self.arrivals.push(at);
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let key = header("idempotency-key").ok_or("no Idempotency-Key")?;
        *self.received.entry(key.to_owned()).or_insert(0) += 1;
        if OUTAGE.contains(&at) {
            // Down: nothing is parsed, nothing applied.
            *self.down.entry(key.to_owned()).or_insert(0) += 1;
            return Ok(Fate::Down);
        }
        let id = webhook_id(body).ok_or("malformed payload")?;
        let attempt = header(ATTEMPT_HEADER)
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let fate = fate(id, attempt);
        if matches!(
            fate,
            Fate::Accept | Fate::AppliedThenError | Fate::AppliedThenSlow
        ) {
            self.apply_once(key, id);
        }
        Ok(fate)
    }
}

struct Receiver {
    start: Instant,
    books: Mutex<Books>,
}

async fn hook(State(receiver): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> Response {
    let at = receiver.start.elapsed();
    let fate = receiver
        .books
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .receive(at, &headers, &body);
    match fate {
        Err(why) => (StatusCode::BAD_REQUEST, why).into_response(),
        Ok(Fate::Accept) => StatusCode::OK.into_response(),
        Ok(Fate::Down) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Ok(Fate::Error | Fate::AppliedThenError) => {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        Ok(Fate::AppliedThenSlow) => {
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
