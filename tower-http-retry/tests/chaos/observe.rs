//! Instruments for the chaos run: a layer that records the outcome of every attempt, and a budget
//! that counts what the retry layer asked of the real token bucket.

use crate::support::{Body, REQUEST_ID};
use http::{Request, Response};
use hyper::body::Incoming;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower::BoxError;
use tower::Service;
use tower_http_retry::circuit_breaker::CircuitOpen;
use tower_http_retry::retry::RetryBudget;
use tower_http_retry::retry::TokenBucket;

/// How one attempt ended, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// An HTTP response with this status.
    Status(u16),
    /// Refused by the circuit breaker: it never left the client.
    Refused,
    /// The per-attempt timeout fired.
    TimedOut,
    /// A transport error (e.g. the connection closed before a response).
    Transport,
}

/// Every attempt per request id, in order.
pub type ClientLog = Arc<Mutex<HashMap<String, Vec<Seen>>>>;

/// Records the outcome of every attempt that passes through it, by request id.
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    log: ClientLog,
}

impl<S> Observe<S> {
    pub fn new(inner: S, log: ClientLog) -> Self {
        Self { inner, log }
    }
}

fn seen(result: &Result<Response<Incoming>, BoxError>) -> Seen {
    match result {
        Ok(response) => Seen::Status(response.status().as_u16()),
        Err(error) if error.is::<CircuitOpen>() => Seen::Refused,
        Err(error) if error.is::<tower::timeout::error::Elapsed>() => Seen::TimedOut,
        Err(_) => Seen::Transport,
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request<Body>> for Observe<S>
where
    S: Service<Request<Body>, Response = Response<Incoming>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Response<Incoming>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let id = request.headers()[REQUEST_ID].to_str().unwrap().to_owned();
        let future = self.inner.call(request);
        let log = Arc::clone(&self.log);
        Box::pin(async move {
            let result = future.await;
            log.lock()
                .unwrap()
                .entry(id)
                .or_default()
                .push(seen(&result));
            result
        })
    }
}

/// The real [`TokenBucket`], with every call counted.
#[derive(Debug)]
pub struct Counted {
    pub bucket: TokenBucket,
    pub deposits: AtomicU64,
    pub withdrawn: AtomicU64,
    pub refunded: AtomicU64,
}

impl Counted {
    pub fn new(bucket: TokenBucket) -> Arc<Self> {
        Arc::new(Self {
            bucket,
            deposits: AtomicU64::new(0),
            withdrawn: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
        })
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }
}

impl RetryBudget for Counted {
    fn deposit(&self) {
        self.bucket.deposit();
        self.deposits.fetch_add(1, Ordering::SeqCst);
    }

    fn withdraw(&self) -> bool {
        let granted = self.bucket.withdraw();
        if granted {
            self.withdrawn.fetch_add(1, Ordering::SeqCst);
        }
        granted
    }

    fn refund(&self) {
        self.bucket.refund();
        self.refunded.fetch_add(1, Ordering::SeqCst);
    }
}
