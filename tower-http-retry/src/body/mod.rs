//! Bodies around retries. `http::Request<B>` is not `Clone`, and a streamed body cannot be sent
//! twice; a response body that was not read holds its connection.
//!
//! * [`ReplayBody`] reads a request body up to a bound ([`ReplayBody::DEFAULT_LIMIT`], 64 KiB)
//!   so that it can be sent again ([`ReplayBody::buffer_request`]); [`BufferRequestLayer`]
//!   does it for every request of a stack ([`BufferRequest`], [`BufferRequestFuture`]), a
//!   gRPC client's streams included.
//! * [`ReleaseBodyLayer`] ([`ReleaseBodyLayerBuilder`]), under the retry layer, makes
//!   [`ReleaseBody`] services whose [`ReleaseBodyFuture`] reads the body of a transient response
//!   into a [`ReleasedBody`] before the retry layer sleeps, so that its connection is free
//!   while the request waits.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_http_retry::body::{BufferRequestLayer, ReleaseBodyLayer, ReplayBody};
//! use tower_http_retry::{RetryLayer, RetryReport};
//!
//! let upstream = service_fn(|_: http::Request<ReplayBody<String>>| async {
//!     Ok::<_, tower::BoxError>(http::Response::new(String::from("done")))
//! });
//! let client = ServiceBuilder::new()
//!     .layer(BufferRequestLayer::new()) // each request's body read into a `ReplayBody`
//!     .layer(RetryLayer::new())         // which every attempt sends again
//!     .layer(ReleaseBodyLayer::new())   // transient bodies read before the sleep
//!     .service(upstream);
//! let response = client.oneshot(http::Request::new(String::from("payload"))).await.unwrap();
//! assert_eq!(RetryReport::of(&response).attempts, 1);
//! # }
//! ```

mod buffer;
mod release;
mod replay;

pub use buffer::{BufferRequest, BufferRequestFuture, BufferRequestLayer};
pub use release::{
    ReleaseBody, ReleaseBodyFuture, ReleaseBodyLayer, ReleaseBodyLayerBuilder, ReleasedBody,
};
pub use replay::ReplayBody;
