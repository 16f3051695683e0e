//! Retries for HTTP clients: classified outcomes, jittered backoff, clamped `Retry-After`, a
//! shared budget and sleeps that can be cut short.
//!
//! Each request goes through [`Retry`] like this: the outcome of an attempt is
//! [classified](classify) as success, transient or permanent. Only a transient outcome of a
//! repeatable request (see [`Idempotency`]) with attempts left is retried; the delay is the
//! server's `Retry-After` if valid ([`retry_after`], clamped) or else a draw from the
//! [`Backoff`] policy; the delay must fit the optional deadline; and the [`RetryBudget`] must grant
//! a token. Then, and only then, the request sleeps on tokio's clock, and an [`AbortSignal`] can
//! end the sleep early. When it stops, the layer returns the last real response or error,
//! untouched, and a [`RetryReport`] says why it stopped.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_http_retry::{RetryLayer, RetryReport, StopReason};
//!
//! // An endpoint that answers 503 twice, then 200.
//! let calls = Arc::new(AtomicU32::new(0));
//! let counter = calls.clone();
//! let flaky = service_fn(move |_req: http::Request<String>| {
//!     let n = counter.fetch_add(1, Ordering::SeqCst);
//!     async move {
//!         let status = if n < 2 { 503 } else { 200 };
//!         Ok::<_, std::io::Error>(http::Response::builder().status(status).body(String::new()).unwrap())
//!     }
//! });
//!
//! let mut client = ServiceBuilder::new().layer(RetryLayer::new()).service(flaky);
//! let response = client.ready().await.unwrap().call(http::Request::new(String::new())).await.unwrap();
//! assert_eq!(response.status(), 200);
//! let report = RetryReport::of(&response);
//! assert_eq!((report.attempts, report.stop), (3, StopReason::Success));
//! # }
//! ```
//!
//! # Why a budget, and not only a maximum number of attempts
//!
//! `max_attempts` bounds what one request may do; it says nothing about all of them. When an
//! endpoint goes down, every request fails and every one of them retries, so the endpoint sees
//! its normal load times `max_attempts` at the worst moment. Jitter spreads *when* that load
//! arrives; only a budget bounds *how much* arrives. The [`TokenBucket`] lets retries add about
//! 20 % to the load that succeeds (plus a small floor per second), so during an outage most
//! requests fail fast with their real error instead of piling on.
//!
//! # Differences from `tower::retry`
//!
//! * Jitter that actually de-synchronises: each request session draws from its own random
//!   stream ([`RandomSource`]). `tower::retry::backoff::ExponentialBackoffMaker` clones one
//!   generator into every session, so requests that fail together wait the same "random" delay.
//! * The budget is asked *before* sleeping, and a token taken for a sleep that is abandoned is
//!   refunded. `TpsBudget` takes a mutex per operation; [`TokenBucket`] is lock-free.
//! * HTTP semantics built in: the status table, transport errors found through `source()`,
//!   `Retry-After`, idempotency.
//! * The sleep can be aborted ([`AbortSignal`]), the request can have a deadline, and the
//!   caller learns what happened ([`RetryReport`], [`RetryStats`]).
//!
//! # Where the timeout goes
//!
//! A `tower::timeout::TimeoutLayer` *inside* the retry layer bounds each attempt (its
//! `Elapsed` error is transient, so a slow attempt is retried); one *outside* bounds the whole
//! request, sleeps included. Usually both: `timeout(total) -> retry -> timeout(per attempt)`.

mod abort;
mod backoff;
mod budget;
pub mod classify;
mod error;
mod future;
mod idempotency;
mod layer;
mod message;
mod random;
mod replay_body;
mod report;
pub mod retry_after;
mod service;
mod stats;

pub use abort::AbortSignal;
pub(crate) use backoff::uniform;
pub use backoff::{Backoff, Jitter, MAX_DELAY};
pub use budget::{RetryBudget, TokenBucket, TokenBucketBuilder};
pub use classify::{classify_fn, AsStdError, Classify, ClassifyFn, HttpClassifier, Outcome};
pub use error::InvalidConfig;
pub use future::ResponseFuture;
pub use idempotency::{Idempotency, IDEMPOTENCY_KEY};
pub use layer::{RetryLayer, RetryLayerBuilder};
pub use message::{RetryRequest, RetryResponse};
pub use random::RandomSource;
pub use replay_body::{ReplayBody, DEFAULT_REPLAY_LIMIT};
pub use report::{Delay, DelaySource, ReportSlot, RetryReport, StopReason};
pub use retry_after::{parse_retry_after, RetryAfter, RetryAfterHint, WhenLonger};
pub use service::Retry;
pub use stats::{DelayHistogram, RetryStats, StatsSnapshot, DELAY_BUCKETS, DELAY_ROWS};
