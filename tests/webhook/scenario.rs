//! The webhook scenario, shared by `examples/webhook_delivery.rs` (which prints what happened) and
//! `tests/webhook/main.rs` (which checks that the books add up).
//!
//! [`run`] starts a flaky receiver on `127.0.0.1:0` (axum) and delivers [`DELIVERIES`] webhooks to
//! it through
//!
//! ```text
//! RetryLayer -> GlobalConcurrencyLimit (16 attempts on the wire) -> Timeout (250 ms per attempt)
//!            -> hyper-util legacy Client
//! ```
//!
//! with 48 deliveries in flight at a time. Each webhook is a POST with an `Idempotency-Key`, so
//! the layer may repeat it. The receiver deduplicates by that key and misbehaves the way real
//! ones do: 503s, 429s with `Retry-After: 1`, writes that commit and then answer 503, answers that
//! arrive after the client's per-attempt timeout, an outage that fails every attempt of 40
//! deliveries in a row, and a 400 for every malformed payload. What it does depends only on the
//! webhook and the attempt number (the layer sends it in `x-retry-attempt`), and the layer's
//! jitter comes from a seeded [`RandomSource`]. The counts still vary by a few between runs: which
//! delivery gets which random stream, and which retries the shared budget refuses, depend on the
//! order in which concurrent tasks get there.
//!
//! Include it with `#[path = "../tests/webhook/scenario.rs"] mod scenario;` (example) or
//! `mod scenario;` (test).

// The example and the test each use a different part of this file.
#![allow(dead_code)]

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::header::{HeaderName, RETRY_AFTER};
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
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::limit::{ConcurrencyLimit, GlobalConcurrencyLimitLayer};
use tower::timeout::{Timeout, TimeoutLayer};
use tower::{ServiceBuilder, ServiceExt};
use tower_http_retry::{
    Backoff, HttpClassifier, Jitter, RandomSource, ReportSlot, Retry, RetryAfter, RetryLayer,
    RetryReport, RetryStats, TokenBucket,
};

pub const DELIVERIES: u32 = 300;
/// Deliveries in flight at once (each worker keeps its delivery through all its retries).
pub const WORKERS: usize = 48;
/// Attempts on the wire at once. The retry layer gives its permit back while it sleeps.
pub const ON_THE_WIRE: usize = 16;
pub const PER_ATTEMPT: Duration = Duration::from_millis(250);
pub const MAX_ATTEMPTS: u32 = 4;
/// Webhooks in this range hit an outage: every attempt fails.
pub const OUTAGE: Range<u32> = 200..240;
/// The receiver's `Retry-After` on a 429, in seconds.
pub const RETRY_AFTER_SECS: u64 = 1;
pub const SEED: u64 = 2024;
const ATTEMPT_HEADER: &str = "x-retry-attempt";

type Stack = Retry<ConcurrencyLimit<Timeout<Client<HttpConnector, Full<Bytes>>>>, HttpClassifier>;

/// What happened to one webhook, as the sender saw it.
#[derive(Debug)]
pub struct Delivery {
    pub id: u32,
    pub delivered: bool,
    pub report: RetryReport,
}

/// The receiver's books.
#[derive(Clone, Debug, Default)]
pub struct Books {
    /// Requests received, malformed ones included.
    pub requests: u64,
    /// Requests received per `Idempotency-Key`.
    pub received: HashMap<String, u32>,
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
    pub stats: RetryStats,
    pub books: Books,
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
    let books = Arc::new(Mutex::new(Books::default()));
    let uri = start_receiver(Arc::clone(&books)).await;
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
        .random_source(RandomSource::seeded(seed))
        .build()
        .expect("a valid retry configuration");
    let client: Stack = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(GlobalConcurrencyLimitLayer::new(ON_THE_WIRE))
        .layer(TimeoutLayer::new(PER_ATTEMPT))
        .service(Client::builder(TokioExecutor::new()).build_http());

    let workers = Arc::new(Semaphore::new(WORKERS));
    let mut tasks = JoinSet::new();
    for id in 0..DELIVERIES {
        let permit = Arc::clone(&workers)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (client, uri) = (client.clone(), uri.clone());
        tasks.spawn(async move {
            let delivery = deliver(client, uri, id).await;
            drop(permit);
            delivery
        });
    }
    let mut deliveries = tasks.join_all().await;
    deliveries.sort_by_key(|d| d.id);
    let books = books.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Run {
        deliveries,
        stats: layer.stats(),
        books,
    }
}

async fn deliver(client: Stack, uri: Uri, id: u32) -> Delivery {
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
    /// Answer 503 without applying.
    Unavailable,
    /// Answer 429 with `Retry-After` without applying.
    RateLimited,
    /// Apply, then answer 503 (the commit happened, the answer says otherwise).
    AppliedThen503,
    /// Apply, then answer only after the client's per-attempt timeout.
    AppliedThenSlow,
}

/// A fixed function of webhook and attempt, so every run faces the same receiver.
fn fate(id: u32, attempt: u32) -> Fate {
    if OUTAGE.contains(&id) {
        return Fate::Unavailable;
    }
    let roll = splitmix(u64::from(id) << 8 | u64::from(attempt)) % 100;
    // Percentiles below which each fate applies: the first attempt fares worse than retries.
    let table = if attempt == 1 {
        [60, 72, 84, 92]
    } else {
        [78, 88, 92, 96]
    };
    match table.iter().position(|&below| roll < below) {
        Some(0) => Fate::Accept,
        Some(1) => Fate::Unavailable,
        Some(2) => Fate::RateLimited,
        Some(3) => Fate::AppliedThen503,
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

    /// Books one request; returns what to do with it, or the 400 for a bad one.
    fn receive(&mut self, headers: &HeaderMap, body: &[u8]) -> Result<Fate, &'static str> {
        self.requests += 1;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let key = header("idempotency-key").ok_or("no Idempotency-Key")?;
        *self.received.entry(key.to_owned()).or_insert(0) += 1;
        let id = webhook_id(body).ok_or("malformed payload")?;
        let attempt = header(ATTEMPT_HEADER)
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let fate = fate(id, attempt);
        if matches!(
            fate,
            Fate::Accept | Fate::AppliedThen503 | Fate::AppliedThenSlow
        ) {
            self.apply_once(key, id);
        }
        Ok(fate)
    }
}

async fn hook(State(books): State<Arc<Mutex<Books>>>, headers: HeaderMap, body: Bytes) -> Response {
    let fate = books
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .receive(&headers, &body);
    match fate {
        Err(why) => (StatusCode::BAD_REQUEST, why).into_response(),
        Ok(Fate::Accept) => StatusCode::OK.into_response(),
        Ok(Fate::Unavailable | Fate::AppliedThen503) => {
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        Ok(Fate::RateLimited) => {
            let retry_after = RETRY_AFTER_SECS.to_string();
            (StatusCode::TOO_MANY_REQUESTS, [(RETRY_AFTER, retry_after)]).into_response()
        }
        Ok(Fate::AppliedThenSlow) => {
            tokio::time::sleep(PER_ATTEMPT * 3).await;
            StatusCode::OK.into_response()
        }
    }
}

async fn start_receiver(books: Arc<Mutex<Books>>) -> Uri {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let app = Router::new().route("/hooks", post(hook)).with_state(books);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/hooks").parse().expect("a valid URI")
}
