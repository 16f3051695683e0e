//! Retry middleware for [tower] HTTP clients that does not turn an outage into a retry storm.
//!
//! After a shared outage, thousands of clients that failed together retry together. Jitter
//! spreads *when* their retries arrive; a budget bounds *how many* arrive. This crate does both,
//! and the rest a production client needs: outcomes classified into success, transient and
//! permanent; `Retry-After` honoured but clamped; only idempotent requests repeated; sleeps that
//! end at once on shutdown; and a report of what happened to every request.
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
//! See the [`retry`] module for how a request flows through the layer, why a budget, and how this
//! differs from `tower::retry`.
//!
//! A [`circuit_breaker`] goes between the retry layer and the per-attempt timeout; give both the
//! same [`AbortSignal`] so that an opening circuit ends the sleeps of the requests behind it.
//!
//! # Features
//!
//! * `hyper` (default): the classifier recognises `hyper::Error` and hyper-util's client error.
//! * `tracing`: one `tracing` event per decision (attempt sent, delay chosen, stop).
//! * `reqwest`: [`RetryRequest`](retry::RetryRequest) and friends for `reqwest::Request` and
//!   `reqwest::Response`, so the layers wrap reqwest's `Client` (a tower `Service`).
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

pub mod circuit_breaker;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest;
pub mod retry;
mod sync;

pub use circuit_breaker::{
    CircuitBreakerLayer, CircuitBreakerLayerBuilder, CircuitOpen, KeyedCircuitBreakerLayer,
};

pub use retry::{
    classify_fn, AbortSignal, Backoff, Classify, Delay, DelayHistogram, DelaySource,
    HttpClassifier, Idempotency, InvalidConfig, Jitter, Outcome, RandomSource, ReplayBody,
    ReportSlot, Retry, RetryAfter, RetryBudget, RetryLayer, RetryLayerBuilder, RetryReport,
    RetryStats, StatsSnapshot, StopReason, TokenBucket, WhenLonger, DEFAULT_REPLAY_LIMIT,
};

// The README's code blocks are compiled and run as doctests, so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
