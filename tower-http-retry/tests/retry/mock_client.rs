//! Shared helpers: a retrying client over `tower_test::mock`, message builders, a counting
//! budget and a readiness probe.

use http::header::HeaderName;
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tokio_test::task;
use tokio_test::{assert_pending, assert_ready_ok};
use tower::{BoxError, Layer, Service};
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::{RandomSource, Retry, RetryLayerBuilder};
use tower_http_retry::retry::{RetryBudget, RetryFuture, RetryStats};
use tower_http_retry::{Backoff, HttpClassifier, Jitter, RetryLayer, RetryReport};

pub type Req = http::Request<String>;
pub type Res = http::Response<String>;
pub type Mock = tower_test::mock::Mock<Req, Res>;
pub type Handle = tower_test::mock::Handle<Req, Res>;
pub type Reply = tower_test::mock::SendResponse<Res>;
/// A response future of the layer, on a mock task that records wake-ups.
pub type Fut<S = Mock> = task::Spawn<RetryFuture<S, Req, HttpClassifier>>;

pub const MS: Duration = Duration::from_millis(1);

/// Deterministic defaults for the tests: no jitter (100 ms, 200 ms, ... capped at 10 s), a seeded
/// random source and no budget. Tests change what they are about.
pub fn builder() -> RetryLayerBuilder {
    RetryLayer::builder()
        .backoff(Backoff::new(Jitter::None, 100 * MS, 10_000 * MS))
        .random_source(RandomSource::seeded(7))
        .without_budget()
}

pub fn get() -> Req {
    http::Request::get("http://example.test/")
        .body(String::new())
        .unwrap()
}

pub fn post() -> Req {
    http::Request::post("http://example.test/orders")
        .body("{}".to_owned())
        .unwrap()
}

/// A request with a fresh [`ReportSlot`] in its extensions, and the slot.
pub fn with_slot(mut request: Req) -> (Req, ReportSlot) {
    let slot = ReportSlot::new();
    request.extensions_mut().insert(slot.clone());
    (request, slot)
}

pub fn status(code: u16) -> Res {
    http::Response::builder()
        .status(code)
        .body(String::new())
        .unwrap()
}

pub fn with_retry_after(code: u16, value: &str) -> Res {
    let mut response = status(code);
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, value.parse().unwrap());
    response
}

pub fn io_error(kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::from(kind)
}

/// The status of a finished request, its report and why it stopped; panics on an error.
pub fn finished(poll: Poll<Result<Res, BoxError>>) -> (u16, RetryReport) {
    let response = assert_ready_ok!(poll);
    (
        response.status().as_u16(),
        RetryReport::of(&response).clone(),
    )
}

pub fn header<'r>(request: &'r Req, name: &HeaderName) -> Option<&'r str> {
    request.headers().get(name).map(|v| v.to_str().unwrap())
}

/// A retrying client over a mock: `send` polls it ready and calls it, `reply`/`fail` answer the
/// next attempt the mock received.
pub struct Client<S = Mock> {
    svc: tower_test::mock::Spawn<Retry<S, HttpClassifier>>,
    pub handle: Handle,
    pub layer: RetryLayer,
}

impl Client<Mock> {
    pub fn new(layer: RetryLayer) -> Self {
        Self::wrapping(layer, |mock| mock)
    }
}

impl<S> Client<S>
where
    S: Service<Req, Response = Res, Error = BoxError> + Clone,
{
    /// A client whose retry layer wraps `wrap(mock)` instead of the bare mock.
    pub fn wrapping(layer: RetryLayer, wrap: impl Fn(Mock) -> S) -> Self {
        let (svc, handle) = tower_test::mock::spawn_with(|mock| layer.layer(wrap(mock)));
        Self { svc, handle, layer }
    }

    /// Readiness of the retry service itself.
    pub fn poll_ready(&mut self) -> Poll<Result<(), BoxError>> {
        self.svc.poll_ready()
    }

    /// Polls the retry service ready, calls it and returns the (not yet polled) future.
    pub fn send(&mut self, request: Req) -> Fut<S> {
        assert_ready_ok!(self.svc.poll_ready());
        task::spawn(self.svc.call(request))
    }

    /// `send`, then one poll, which must leave the request pending.
    pub fn start(&mut self, request: Req) -> Fut<S> {
        let mut future = self.send(request);
        assert_pending!(future.poll());
        future
    }

    /// An attempt the mock received, if one is waiting.
    pub fn poll_attempt(&mut self) -> Poll<Option<(Req, Reply)>> {
        // Unconstrained: after many receives in one test step tokio's cooperative budget would
        // make the channel look empty.
        task::spawn(tokio::task::unconstrained(self.handle.next_request())).poll()
    }

    /// `start`, then answers the first attempt with 503: the request now sleeps before its retry.
    pub fn sleeping(&mut self, request: Req) -> Fut<S> {
        let mut future = self.start(request);
        self.reply(503);
        assert_pending!(future.poll());
        future
    }

    /// The next attempt the mock received; panics if none is waiting.
    pub fn next_request(&mut self) -> (Req, Reply) {
        match self.poll_attempt() {
            Poll::Ready(Some(pair)) => pair,
            Poll::Ready(None) => panic!("the mock was closed"),
            Poll::Pending => panic!("expected an attempt to have reached the mock"),
        }
    }

    pub fn assert_no_request(&mut self) {
        if let Poll::Ready(request) = self.poll_attempt() {
            panic!(
                "no attempt expected, got {:?}",
                request.map(|(r, _)| r.headers().clone())
            );
        }
    }

    /// Answers the next attempt with `code`; returns the attempt's request.
    pub fn reply(&mut self, code: u16) -> Req {
        self.reply_with(status(code))
    }

    pub fn reply_with(&mut self, response: Res) -> Req {
        let (request, reply) = self.next_request();
        reply.send_response(response);
        request
    }

    /// Fails the next attempt with `error`; returns the attempt's request.
    pub fn fail(&mut self, error: impl Into<BoxError>) -> Req {
        let (request, reply) = self.next_request();
        reply.send_error(error);
        request
    }

    pub fn stats(&self) -> RetryStats {
        self.layer.stats()
    }
}

/// Advances paused time by `duration`.
pub async fn advance(duration: Duration) {
    tokio::time::advance(duration).await;
}

/// Answers attempts with `codes` in order, sleeping out each delay of the deterministic
/// [`builder`] backoff in between; returns the finished request's status and report.
pub async fn run_through(client: &mut Client, request: Req, codes: &[u16]) -> (u16, RetryReport) {
    let mut future = client.start(request);
    let mut delay = 100 * MS;
    let (last, earlier) = codes.split_last().expect("at least one answer");
    for code in earlier {
        client.reply(*code);
        assert_pending!(future.poll());
        advance(delay).await;
        assert_pending!(future.poll());
        delay *= 2;
    }
    client.reply(*last);
    finished(future.poll())
}

/// Steps paused time by `step`, polling `future` after each step, until an attempt reaches the
/// mock; returns how long that took and the attempt.
pub async fn await_attempt(
    client: &mut Client,
    future: &mut Fut,
    step: Duration,
    limit: Duration,
) -> (Duration, Req, Reply) {
    let start = Instant::now();
    loop {
        if let Poll::Ready(Some((request, reply))) = client.poll_attempt() {
            return (start.elapsed(), request, reply);
        }
        assert!(start.elapsed() < limit, "no attempt within {limit:?}");
        advance(step).await;
        assert_pending!(future.poll());
    }
}

/// A [`RetryBudget`] that grants a fixed number of withdrawals and counts every call.
#[derive(Debug, Default)]
pub struct CountingBudget {
    tokens: AtomicI64,
    deposits: AtomicU32,
    withdrawals: AtomicU32,
    denials: AtomicU32,
    refunds: AtomicU32,
}

/// What a [`CountingBudget`] was asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetCalls {
    pub deposits: u32,
    pub withdrawals: u32,
    pub denials: u32,
    pub refunds: u32,
}

impl CountingBudget {
    pub fn with_tokens(tokens: i64) -> Arc<Self> {
        Arc::new(Self {
            tokens: AtomicI64::new(tokens),
            ..Self::default()
        })
    }

    pub fn calls(&self) -> BudgetCalls {
        BudgetCalls {
            deposits: self.deposits.load(Ordering::SeqCst),
            withdrawals: self.withdrawals.load(Ordering::SeqCst),
            denials: self.denials.load(Ordering::SeqCst),
            refunds: self.refunds.load(Ordering::SeqCst),
        }
    }
}

impl RetryBudget for CountingBudget {
    fn deposit(&self) {
        self.deposits.fetch_add(1, Ordering::SeqCst);
    }

    fn withdraw(&self) -> bool {
        let granted = self
            .tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                (t > 0).then_some(t - 1)
            })
            .is_ok();
        let counter = if granted {
            &self.withdrawals
        } else {
            &self.denials
        };
        counter.fetch_add(1, Ordering::SeqCst);
        granted
    }

    fn refund(&self) {
        self.tokens.fetch_add(1, Ordering::SeqCst);
        self.refunds.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counts `poll_ready` calls on the wrapped service and all its clones.
#[derive(Clone)]
pub struct ReadyProbe<S> {
    inner: S,
    polls: Arc<AtomicUsize>,
}

impl<S> ReadyProbe<S> {
    pub fn new(inner: S, polls: Arc<AtomicUsize>) -> Self {
        Self { inner, polls }
    }
}

impl<S: fmt::Debug> fmt::Debug for ReadyProbe<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReadyProbe").field(&self.inner).finish()
    }
}

impl<S: Service<Req>> Service<Req> for ReadyProbe<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        self.inner.call(request)
    }
}
