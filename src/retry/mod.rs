//! The retry layer: [`RetryLayer`](crate::RetryLayer) builds [`Retry`](crate::Retry) services
//! whose [`RetryFuture`](crate::RetryFuture) drives one request through its attempts.
//!
//! A newcomer can follow one request from `Service::call` (`service.rs`) through the future's
//! states (`future.rs`) to each decision of the session (`session.rs`), and find each policy in
//! the file named after it. What the crate docs say of the layer is written on
//! [`RetryLayer`](crate::RetryLayer), where rustdoc shows it.

pub(crate) mod attempt;
mod backoff;
mod budget;
mod config;
mod deadline;
mod future;
mod idempotency;
mod layer;
mod nested;
mod service;
pub(crate) mod session;
mod stats;
mod wait;
mod watch;

pub use crate::abort::AbortSignal;
pub use crate::message::{RequestHead, RetryRequest, RetryResponse};
pub use crate::random::RandomSource;
pub use backoff::{Backoff, Jitter};
pub use budget::{RetryBudget, TokenBucket, TokenBucketBuilder};
pub use future::RetryFuture;
pub use idempotency::Idempotency;
pub use layer::{RetryLayer, RetryLayerBuilder};
pub use nested::NestedLayers;
pub use service::Retry;
pub use stats::{DelayHistogram, RetryStats};
