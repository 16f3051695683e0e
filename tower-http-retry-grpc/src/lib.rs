//! Retrying gRPC calls (tonic's `Channel` is a tower `Service` of `http::Request`) with
//! [tower-http-retry](tower_http_retry) by the gRPC rules: gRPC proposal A6 ("gRPC Retry
//! Design") and Google AIP-194 ("Automatic retry configuration").
//!
//! * [`layer`] is the preset for gRPC calls ([`builder`] its builder), and
//!   [`GrpcServiceConfig::retry_layer_builder`] sets one up from a service config.
//! * [`GrpcClassifier`] reads `grpc-status` from the response *headers*: a call that failed
//!   before sending anything (a Trailers-Only response) is classified by its code; a call whose
//!   headers came without a status is committed and passed through.
//! * Its [`signals`](tower_http_retry::classify::Classify::signals)' hint reads the server's
//!   `grpc-retry-pushback-ms`, then a `google.rpc.RetryInfo` in the call's rich status
//!   (`grpc-status-details-bin`).
//! * [`GrpcMetadata`], the layer's [attempt
//!   hook](tower_http_retry::retry::RetryLayerBuilder::attempt_hook), stamps
//!   `grpc-previous-rpc-attempts` and keeps `grpc-timeout` to the time left.
//! * [`BufferRequestLayer`](tower_http_retry::body::BufferRequestLayer) (protocol-neutral, beside
//!   [`ReplayBody`](tower_http_retry::body::ReplayBody)) makes request bodies replayable.
//! * [`GrpcServiceConfig`] reads a service config's `retryPolicy` and `retryThrottling`
//!   ([`GrpcThrottle`]).
//! * [`GrpcServiceConfig::stack`] and [`stack`] build the whole client stack around a tonic
//!   `Channel` in one call ([`GrpcStack`]).
//!
//! The crate does not depend on tonic: it reads and writes `http` headers.

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod classify;
mod code;
mod retry_info;
mod service_config;
mod stack;
mod throttle;
mod timeout;

pub use classify::{GrpcClassifier, Pushback};
pub use code::GrpcCode;
pub use service_config::{GrpcHedgingPolicy, GrpcRetryPolicy, GrpcServiceConfig};
pub use stack::{stack, GrpcStack, IntoBody, IntoBodyFuture};
pub use throttle::GrpcThrottle;
pub use timeout::GrpcMetadata;

use tower_http_retry::retry::{Idempotency, RetryLayer, RetryLayerBuilder};

/// The preset for gRPC calls: the [`GrpcClassifier`] (UNAVAILABLE retried, RESOURCE_EXHAUSTED
/// with pushback too), every call retryable whatever its method (gRPC calls are all POSTs; as
/// in A6, which codes are retryable is what says a retry is safe), and the [`GrpcMetadata`]
/// hook. The rest are the builder's defaults (3 attempts, full jitter from 100 ms to 10 s, the
/// default budget). [`builder`] starts a builder from it, to change a setting; a service
/// config's policy gives one too ([`GrpcServiceConfig::retry_layer_builder`]).
///
/// ```
/// let layer = tower_http_retry_grpc::layer();
/// assert_eq!(layer.max_attempts(), 3);
/// ```
pub fn layer() -> RetryLayer<GrpcClassifier> {
    builder().build().expect("the gRPC preset is valid")
}

/// A builder starting from the preset [`layer`], to change a setting.
///
/// ```
/// let layer = tower_http_retry_grpc::builder().max_attempts(4).build().unwrap();
/// assert_eq!(layer.max_attempts(), 4);
/// ```
pub fn builder() -> RetryLayerBuilder<GrpcClassifier> {
    RetryLayer::builder()
        .idempotency(Idempotency::Any)
        .attempt_hook(GrpcMetadata)
        .classifier(GrpcClassifier::new())
}

// The guide's code blocks are compiled and run as doctests, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/grpc.md")]
struct GuideDoctests;
