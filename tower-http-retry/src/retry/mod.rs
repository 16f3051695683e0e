//! The retry layer: [`RetryLayer`] (configured with [`RetryLayerBuilder`], or a preset:
//! [`interactive`](RetryLayer::interactive), [`bulk`](RetryLayer::bulk)) makes [`Retry`]
//! services, whose [`RetryFuture`] drives one request through its attempts.
//!
//! Beside it, what a retry is made of: the [`Backoff`] and its [`Jitter`]; the retry budget
//! ([`RetryBudget`], [`TokenBucket`], [`TokenBucketBuilder`]); which requests may be sent again
//! ([`Idempotency`]); what a layer does inside another ([`NestedLayers`]); the [`AbortSignal`]
//! that ends sleeps; the [`RandomSource`] the jitter draws from; the counters ([`RetryStats`],
//! [`DelayHistogram`]); and the traits a request and a response implement to be retried
//! ([`RequestHead`], [`RetryRequest`], [`RetryResponse`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_http_retry::retry::{Idempotency, TokenBucket};
//! use tower_http_retry::{Backoff, Jitter, RetryLayer};
//!
//! let layer = RetryLayer::builder()
//!     .max_attempts(4)
//!     .backoff(Backoff::new(Jitter::Full, Duration::from_millis(50), Duration::from_secs(2)))
//!     .budget(TokenBucket::default())
//!     .idempotency(Idempotency::RequireKey)
//!     .build()
//!     .unwrap();
//! let flaky = service_fn(|_: http::Request<String>| async {
//!     Ok::<_, std::io::Error>(http::Response::builder().status(503).body(String::new()).unwrap())
//! });
//! let client = ServiceBuilder::new().layer(layer.clone()).service(flaky);
//! let keyed = http::Request::builder().method("POST").header("idempotency-key", "order-17");
//! let response = client.oneshot(keyed.body(String::new()).unwrap()).await.unwrap();
//! assert_eq!(response.status(), 503);
//! assert_eq!(layer.stats().attempts, 4);
//! # }
//! ```
//!
//! How a request flows through the layer, why a budget, and how this differs from
//! `tower::retry` are written on [`RetryLayer`], where rustdoc shows them.

// A newcomer can follow one request from `Service::call` (`service.rs`) through the future's
// states (`future.rs`) and its one wait (`wait.rs`) to each decision of the session
// (`session/`: the ladder in `ladder.rs`, pacing's rewrite of its verdict in `pacing.rs`, the
// report trail in `trail.rs`), and find each policy in the file named after it.

mod attempt;
mod backoff;
pub(crate) mod budget;
mod config;
mod deadline;
mod future;
mod hand_back;
mod idempotency;
mod layer;
mod nested;
mod presets;
mod service;
pub(crate) mod session;
pub(crate) mod stats;
mod wait;
mod watch;

pub use crate::abort::AbortSignal;
pub use crate::message::{RequestHead, RetryRequest, RetryResponse};
pub use crate::random::RandomSource;
pub use attempt::AttemptHook;
pub use backoff::{Backoff, Jitter};
pub use budget::{RetryBudget, TokenBucket, TokenBucketBuilder};
pub use future::RetryFuture;
pub use hand_back::{FailUnsent, HandBack, SendAnyway};
pub use idempotency::Idempotency;
pub use layer::{FailUnsentBuilder, RetryLayer, RetryLayerBuilder};
pub use nested::NestedLayers;
pub use service::Retry;
pub use stats::{DelayHistogram, RetryStats};
