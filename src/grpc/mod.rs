//! Retrying gRPC calls (tonic's `Channel` is a tower `Service` of `http::Request`) by the gRPC
//! rules: gRPC proposal A6 ("gRPC Retry Design") and Google AIP-194 ("Automatic retry
//! configuration"). Feature `grpc`.
//!
//! * [`RetryLayer::grpc`](crate::RetryLayer::grpc) is the preset for gRPC calls
//!   ([`RetryLayerBuilder::grpc`](crate::retry::RetryLayerBuilder::grpc) its builder), and
//!   [`GrpcServiceConfig::retry_layer_builder`] sets one up from a service config.
//! * [`GrpcClassifier`] reads `grpc-status` from the response *headers*: a call that failed
//!   before sending anything (a Trailers-Only response) is classified by its code; a call whose
//!   headers came without a status is committed and passed through.
//! * Its [`hint`](crate::classify::Classify::hint) reads the server's `grpc-retry-pushback-ms`.
//! * [`RetryLayerBuilder::grpc_metadata`](crate::retry::RetryLayerBuilder::grpc_metadata) stamps
//!   `grpc-previous-rpc-attempts` and keeps `grpc-timeout` to the time left.
//! * [`BufferRequestLayer`](crate::body::BufferRequestLayer) (protocol-neutral, beside
//!   [`ReplayBody`](crate::body::ReplayBody)) makes request bodies replayable.
//! * [`GrpcServiceConfig`] reads a service config's `retryPolicy` and `retryThrottling`
//!   ([`GrpcThrottle`]).
//! * [`GrpcServiceConfig::stack`] and [`RetryLayer::grpc_stack`](crate::RetryLayer::grpc_stack)
//!   build the whole client stack around a tonic `Channel` in one call ([`GrpcStack`]).
//!
//! The library does not depend on tonic: it reads and writes `http` headers.

mod classify;
mod code;
mod service_config;
mod stack;
mod throttle;
mod timeout;

pub use classify::{GrpcClassifier, Pushback};
pub use code::GrpcCode;
pub use service_config::{GrpcRetryPolicy, GrpcServiceConfig};
pub use stack::{GrpcStack, IntoBody, IntoBodyFuture};
pub use throttle::GrpcThrottle;

use crate::retry::{Idempotency, RetryLayer, RetryLayerBuilder};

impl RetryLayer<GrpcClassifier> {
    /// The preset for gRPC calls: the [`GrpcClassifier`] (UNAVAILABLE retried,
    /// RESOURCE_EXHAUSTED with pushback too), every call retryable whatever its method (gRPC
    /// calls are all POSTs; as in A6, which codes are retryable is what says a retry is safe),
    /// and [`grpc_metadata`](RetryLayerBuilder::grpc_metadata) on. The rest are the builder's
    /// defaults (3 attempts, full jitter from 100 ms to 10 s, the default budget).
    /// [`RetryLayerBuilder::grpc`] starts a builder from it, to change a setting; a service
    /// config's policy gives one too ([`GrpcServiceConfig::retry_layer_builder`]).
    ///
    /// ```
    /// use tower_http_retry::RetryLayer;
    ///
    /// let layer = RetryLayer::grpc();
    /// assert_eq!(layer.max_attempts(), 3);
    /// ```
    pub fn grpc() -> Self {
        RetryLayerBuilder::grpc()
            .build()
            .expect("the gRPC preset is valid")
    }
}

impl RetryLayerBuilder<GrpcClassifier> {
    /// A builder starting from the preset [`RetryLayer::grpc`], to change a setting.
    ///
    /// ```
    /// use tower_http_retry::retry::RetryLayerBuilder;
    ///
    /// let layer = RetryLayerBuilder::grpc().max_attempts(4).build().unwrap();
    /// assert_eq!(layer.max_attempts(), 4);
    /// ```
    pub fn grpc() -> Self {
        RetryLayer::builder()
            .idempotency(Idempotency::Any)
            .grpc_metadata(true)
            .classifier(GrpcClassifier::new())
    }
}
