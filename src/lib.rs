//! Retry middleware for [tower] HTTP clients that does not turn an outage into a retry storm.
//!
//! After a shared outage, thousands of clients that failed together retry together. Jitter
//! spreads *when* their retries arrive; a budget bounds *how many* arrive. This crate does both,
//! and the rest a production client needs: outcomes classified into success, transient and
//! permanent; `Retry-After` honoured but clamped; only idempotent requests repeated (and those
//! that provably never reached the server); sleeps that end at once on shutdown; endpoint pacing
//! that makes requests to a dead endpoint wait and recover within seconds of its return; and a
//! report of what happened to every request.
//!
//! # Stacking
//!
//! ```
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tower_http_retry::{AbortSignal, Backoff, Jitter, RetryLayer};
//!
//! # fn client() -> impl tower::Service<http::Request<String>, Response = http::Response<String>, Error = std::io::Error> + Clone {
//! #     tower::service_fn(|_| async { Ok(http::Response::new(String::new())) })
//! # }
//! let shutdown = AbortSignal::new();
//! let retry = RetryLayer::builder()
//!     .max_attempts(5)
//!     .backoff(Backoff::new(Jitter::Full, Duration::from_millis(100), Duration::from_secs(10)))
//!     .abort_signal(shutdown.clone())
//!     .build()
//!     .expect("valid retry configuration");
//!
//! let client = ServiceBuilder::new()
//!     .timeout(Duration::from_secs(60)) // the whole request, sleeps included
//!     .layer(retry)                     // retries, backoff, budget
//!     .timeout(Duration::from_secs(5))  // each attempt
//!     .service(client());               // e.g. hyper_util's legacy Client
//! # let _ = client;
//! ```
//!
//! See [`RetryLayer`] for how a request flows through the layer, why a budget, and how this
//! differs from `tower::retry`.
//!
//! A [`CircuitBreakerLayer`] goes between the retry layer and the per-attempt timeout; give both
//! the same [`AbortSignal`] so that an opening circuit ends the sleeps of the requests behind it.
//!
//! Every public item is at the crate root; the modules are private.
//!
//! # Features
//!
//! * `hyper` (default): the classifier recognises `hyper::Error` and hyper-util's client error.
//! * `tracing`: each attempt in an `attempt` span with OpenTelemetry's HTTP attributes
//!   (`http.request.resend_count` on retries, method, server address and port, status), and one
//!   `tracing` event per decision (attempt sent, delay chosen, stop).
//! * `metrics`: counters (attempts, retries by delay source, requests by stop reason, budget
//!   grants, denials and refunds, pacing mode changes), a histogram of the delays and a gauge of
//!   the pacer's queues through the `metrics` facade; [`describe_metrics`] lists them.
//! * `reqwest`: [`RequestHead`], [`RetryRequest`], [`RetryResponse`] and [`AsStdError`] for
//!   `reqwest::Request`, `reqwest::Response` and `reqwest::Error`, so the layers wrap reqwest's
//!   `Client` (a tower `Service`). See [Retrying reqwest](RetryLayer#retrying-reqwest).
//! * `reqwest-middleware` (implies `reqwest`): [`RetryMiddleware`], the retry layer as a
//!   `reqwest_middleware::Middleware`, in place of reqwest-retry's `RetryTransientMiddleware`.
//! * `grpc`: retrying gRPC calls (tonic's `Channel`) by the gRPC rules: [`RetryLayer::grpc`],
//!   [`GrpcClassifier`], [`GrpcServiceConfig`] ([`BufferRequestLayer`], which makes streaming
//!   bodies replayable, needs no feature).
//!
//! [tower]: https://docs.rs/tower

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod abort;
pub mod body;
pub mod circuit_breaker;
pub mod classify;
mod error;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod hint;
mod message;
pub mod pacing;
mod random;
pub mod report;
#[cfg(feature = "reqwest")]
mod reqwest;
#[cfg(feature = "reqwest-middleware")]
pub mod reqwest_middleware;
pub mod retry;
mod sync;
pub mod telemetry;

#[cfg(feature = "reqwest-middleware")]
pub use self::reqwest_middleware::RetryMiddleware;
pub use abort::AbortSignal;
pub use body::{
    BufferRequest, BufferRequestFuture, BufferRequestLayer, ReleaseBody, ReleaseBodyFuture,
    ReleaseBodyLayer, ReleaseBodyLayerBuilder, ReleasedBody, ReplayBody,
};
pub use circuit_breaker::{
    CircuitBreaker, CircuitBreakerFuture, CircuitBreakerLayer, CircuitBreakerLayerBuilder,
    CircuitState, CircuitStats, KeyedCircuitBreaker, KeyedCircuitBreakerLayer, OpenPastDeadline,
    RetryMismatch, SlowTrip,
};
pub use classify::{
    classify_fn, AsStdError, Classify, ClassifyFn, HttpClassifier, NotSent, Outcome,
};
pub use error::{CircuitOpen, InvalidConfig};
#[cfg(feature = "grpc")]
pub use grpc::{
    GrpcClassifier, GrpcCode, GrpcRetryPolicy, GrpcServiceConfig, GrpcStack, GrpcThrottle,
    IntoBody, IntoBodyFuture, Pushback,
};
pub use hint::{
    parse_retry_after, HintPolicy, ResetFormat, ResetHeader, RetryAfterHint, ServerHint,
    ServerHints, WhenLonger, XRateLimit,
};
pub use message::{RequestHead, RetryRequest, RetryResponse};
pub use pacing::{Pacing, PacingBuilder, PacingMode, PacingStats};
pub use random::RandomSource;
pub use report::{Captured, Delay, DelaySource, ReportSlot, RetryReport, StopReason};
pub use retry::{
    Backoff, DelayHistogram, Idempotency, Jitter, NestedLayers, Retry, RetryBudget, RetryFuture,
    RetryLayer, RetryLayerBuilder, RetryStats, TokenBucket, TokenBucketBuilder,
};
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;

// The README's code blocks are compiled and run as doctests, so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
