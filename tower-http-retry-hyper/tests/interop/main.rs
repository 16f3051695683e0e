//! Interop: the retry layer in front of hyper-util's legacy client, against real servers from
//! Debian (nginx, HAProxy) that rotate and close connections the way production servers do.
//!
//! The servers are started by the tests on `127.0.0.1` with configs from `tests/interop/conf/`
//! (see `test-support/src/servers.rs`); when a binary is missing the test says SKIPPED on stderr, and fails
//! instead with `TOWER_HTTP_RETRY_REQUIRE_SERVERS=1` (`cargo xtask test` sets it and installs
//! the packages). Every request carries an `x-request-id`, and each of its attempts an
//! `x-attempt` (`attempts.rs`); the server's access log (or, behind a proxy, the upstream in
//! `upstream.rs`) says how many times, and which attempts of, each id were applied, and each test
//! prints what it saw.
//!
//! Two client stacks: hyper-util's legacy client as it is ([`retried`]), and the rotation-safe
//! one of `tower_http_retry_hyper` behind its stream slots ([`retried_rotation_safe`]).
//!
//! Real servers mean real time: the tests assert on what the servers applied and on the
//! reports, never on measured durations.

mod attempts;
mod haproxy;
mod nginx_h1;
mod nginx_h2c;
mod nginx_limit;
use test_support::servers;
mod upstream;

use bytes::Bytes;
use http::{Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::timeout::TimeoutLayer;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_http_retry::classify::AsStdError;
use tower_http_retry::report::ReportSlot;
use tower_http_retry::{RetryLayer, RetryReport, StopReason};
use tower_http_retry_hyper::{
    rotation_safe_client, RotationSafeClient, SerialExecutor, SlotBody, StreamSlotsLayer,
};

pub use attempts::{AppliedAttempts, Attempts};

/// The header that names a logical request; its retries carry the same value.
pub const REQUEST_ID: &str = "x-request-id";

pub type Body = Full<Bytes>;
pub type HttpClient = Client<HttpConnector, Body>;
pub type SafeClient = RotationSafeClient<HttpConnector, Body>;
pub type ClientError = hyper_util::client::legacy::Error;

/// Bounds every burst, so that a regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);

/// hyper-util's legacy client speaking HTTP/2 only, without TLS (prior knowledge).
pub fn h2_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// [`h2_client`], rotation-safe: its hyper tasks on a thread of their own, one at a time.
pub fn rotation_safe_h2_client() -> SafeClient {
    let executor = SerialExecutor::start().expect("a thread for the HTTP/2 tasks");
    rotation_safe_client(executor, HttpConnector::new(), |builder| {
        builder.http2_only(true);
    })
}

/// hyper-util's legacy client over HTTP/1.1, its idle connections kept `idle` long.
pub fn h1_client(idle: Duration) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(idle)
        .build_http()
}

/// A label for an attempt's error, for the printout only (the layer never reads text).
fn reason(error: &(dyn Error + 'static)) -> String {
    let mut link = Some(error);
    while let Some(e) = link {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if h2.is_go_away() {
                return format!(
                    "h2 GOAWAY {:?}",
                    h2.reason().unwrap_or(h2::Reason::NO_ERROR)
                );
            }
            if h2.is_reset() {
                return format!(
                    "h2 RST_STREAM {:?}",
                    h2.reason().unwrap_or(h2::Reason::NO_ERROR)
                );
            }
        }
        if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
            if hyper.is_canceled() {
                return "hyper canceled (handed back unsent)".into();
            }
            if hyper.is_incomplete_message() {
                return "hyper incomplete message".into();
            }
            if hyper.is_user() {
                return format!("hyper user error: {hyper:?}");
            }
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return format!("io {:?}", io.kind());
        }
        link = e.source();
    }
    if error
        .downcast_ref::<ClientError>()
        .is_some_and(ClientError::is_connect)
    {
        return "connect".into();
    }
    format!("other: {error:?}")
}

/// A per-attempt timeout, as production stacks have one: none of these servers takes a tenth
/// of it, but hyper-util's HTTP/2 pool sometimes never answers a request queued on a connection
/// that went away (seen against nginx at 100 concurrent requests), and a test must not hang.
const PER_ATTEMPT: Duration = Duration::from_secs(3);

/// `client` under a per-attempt timeout, every failed attempt's reason recorded.
fn timed<C>(
    client: C,
    attempts: &Attempts,
) -> impl Service<Request<Body>, Response = Response<Incoming>, Error = BoxError, Future = impl Send>
       + Clone
       + Send
       + 'static
where
    C: Service<Request<Body>, Response = Response<Incoming>> + Clone + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError> + AsStdError,
{
    let attempts = attempts.clone();
    ServiceBuilder::new()
        .layer(TimeoutLayer::new(PER_ATTEMPT))
        .service(client.map_result(move |result| {
            if let Err(error) = &result {
                if let Some(error) = error.as_std_error() {
                    attempts.failed(&reason(error));
                }
            }
            result
        }))
}

/// `inner` under the retry layer, each attempt numbered ([`Attempts::stamp`]) and a per-attempt
/// timeout that fired recorded.
fn under_retry<S, B>(
    layer: &RetryLayer,
    attempts: &Attempts,
    inner: S,
) -> impl Service<Request<Body>, Response = Response<B>, Error = BoxError, Future = impl Send>
       + Clone
       + Send
       + 'static
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    let (stamping, timeouts) = (attempts.clone(), attempts.clone());
    ServiceBuilder::new()
        .layer(layer.clone())
        .map_request(move |request| stamping.stamp(request))
        .map_result(move |result: Result<Response<B>, BoxError>| {
            if let Err(error) = &result {
                if error.is::<tower::timeout::error::Elapsed>() {
                    timeouts.failed("per-attempt timeout (hyper-util never answered)");
                }
            }
            result
        })
        .service(inner)
}

/// hyper-util's client as it is, under the retry layer and a per-attempt timeout.
pub fn retried(
    layer: &RetryLayer,
    client: HttpClient,
    attempts: &Attempts,
) -> impl Service<Request<Body>, Response = Response<Incoming>, Error = BoxError, Future = impl Send>
       + Clone
       + Send
       + 'static {
    under_retry(layer, attempts, timed(client, attempts))
}

/// The rotation-safe stack: the retry layer, `slots`, a per-attempt timeout (once the attempt
/// has its slot), the rotation-safe client.
pub fn retried_rotation_safe(
    layer: &RetryLayer,
    client: SafeClient,
    slots: &StreamSlotsLayer,
    attempts: &Attempts,
) -> impl Service<
    Request<Body>,
    Response = Response<SlotBody<Incoming>>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let slotted = ServiceBuilder::new()
        .layer(slots.clone())
        .service(timed(client, attempts));
    under_retry(layer, attempts, slotted)
}

/// A request tagged with its id (and, when `keyed`, an `Idempotency-Key` of the same value).
pub fn request(method: Method, uri: &Uri, id: &str, keyed: bool) -> Request<Body> {
    let body = if method == Method::GET {
        Bytes::new()
    } else {
        Bytes::from(format!(r#"{{"order":"{id}"}}"#))
    };
    let mut builder = Request::builder()
        .method(method)
        .uri(uri.clone())
        .header(REQUEST_ID, id);
    if keyed {
        builder = builder.header("idempotency-key", id);
    }
    builder.body(Full::new(body)).expect("a valid request")
}

/// How one logical request ended.
#[derive(Debug)]
pub struct Ended {
    pub id: String,
    pub method: Method,
    /// The status, or the error's debug form.
    pub result: Result<u16, String>,
    pub report: RetryReport,
}

/// Sends one unkeyed request per `(method, id)` through `service`, at most `concurrency` at once.
pub async fn burst<S, B>(
    service: S,
    uri: &Uri,
    requests: Vec<(Method, String)>,
    concurrency: usize,
) -> Vec<Ended>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Send,
{
    burst_with(service, uri, requests, concurrency, false).await
}

/// [`burst`], the requests keyed if `keyed`.
pub async fn burst_with<S, B>(
    service: S,
    uri: &Uri,
    requests: Vec<(Method, String)>,
    concurrency: usize,
    keyed: bool,
) -> Vec<Ended>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Send,
{
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    for (method, id) in requests {
        let service = service.clone();
        let permits = Arc::clone(&permits);
        let mut request = request(method.clone(), uri, &id, keyed);
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("never closed");
            let slot = ReportSlot::new();
            request.extensions_mut().insert(slot.clone());
            let result = service.oneshot(request).await;
            let result = match result {
                Ok(response) => {
                    let status = response.status().as_u16();
                    // Read the body to its end, so that the stream finishes cleanly.
                    let _ = http_body_util::BodyExt::collect(response.into_body()).await;
                    Ok(status)
                }
                Err(error) => Err(format!("{error:?}")),
            };
            let report = slot.take().expect("the layer fills every slot");
            Ended {
                id,
                method,
                result,
                report,
            }
        });
    }
    tokio::time::timeout(PATIENCE, tasks.join_all())
        .await
        .expect("every request of the burst ends")
}

/// What a burst's reports say, in one printable line.
pub fn tally(ended: &[Ended]) -> String {
    let mut stops: BTreeMap<StopReason, u32> = BTreeMap::new();
    let mut delays: BTreeMap<String, u32> = BTreeMap::new();
    let mut most_attempts = 0;
    for e in ended {
        *stops.entry(e.report.stop).or_default() += 1;
        most_attempts = most_attempts.max(e.report.attempts);
        for delay in &e.report.delays {
            *delays.entry(delay.source.as_str().into()).or_default() += 1;
        }
    }
    format!("stops {stops:?}; resends by delay source {delays:?}; most attempts of one request {most_attempts}")
}

/// The ids of `ended` that did not end in a 2xx, with their error.
pub fn undelivered(ended: &[Ended]) -> Vec<(&str, &Result<u16, String>, StopReason)> {
    ended
        .iter()
        .filter(|e| !matches!(e.result, Ok(200..=299)))
        .map(|e| (e.id.as_str(), &e.result, e.report.stop))
        .collect()
}

/// Rotation failed no request: none stopped because the server turned it away too often, for
/// a permanent error or at a deadline; a request that failed failed on an ambiguous error (the
/// server may have processed it: a POST is then not resent, a GET used its attempts), and no
/// POST among `twice` (the ids applied more than once) was.
pub fn rotation_failed_nothing(ended: &[Ended], twice: &[String]) {
    for e in ended {
        match (&e.method, &e.result, e.report.stop) {
            (_, Ok(200..=299), _) => {}
            (&Method::POST, Err(_), StopReason::NotIdempotent) => {}
            (&Method::GET, Err(_), StopReason::AttemptsExhausted) => {}
            _ => panic!("{e:?}"),
        }
    }
    let posts_twice: Vec<_> = ended
        .iter()
        .filter(|e| e.method == Method::POST && twice.contains(&e.id))
        .collect();
    assert!(
        posts_twice.is_empty(),
        "POSTs applied twice: {posts_twice:?}"
    );
}
