//! The whole client stack of a tonic `Channel` in one call: [`GrpcServiceConfig::stack`] and
//! [`stack`].

use super::classify::GrpcClassifier;
use super::service_config::GrpcServiceConfig;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tower::BoxError;
use tower_http_retry::body::{BufferRequest, BufferRequestLayer, ReplayBody};
use tower_http_retry::retry::{Retry, RetryLayer};
use tower_http_retry::InvalidConfig;
use tower_layer::Layer;
use tower_service::Service;

/// A tonic `Channel` (or any `Service<http::Request<B>>`) behind the retry layer, as
/// [`GrpcServiceConfig::stack`] and [`stack`] build it: request bodies read
/// into a bounded buffer ([`BufferRequest`]), retried by the gRPC rules ([`Retry`] with the
/// [`GrpcClassifier`]), then handed to the channel in its own body type ([`IntoBody`]).
///
/// A named type, so that a struct can hold the client (`MyServiceClient<GrpcStack<Channel,
/// tonic::body::Body>>`).
pub type GrpcStack<S, B> = BufferRequest<Retry<IntoBody<S, B>, GrpcClassifier>>;

/// Turns the retry layer's replayable requests back into the channel's body type, and the
/// channel's error into a `BoxError` (which the classifier walks). The innermost part of a
/// [`GrpcStack`].
pub struct IntoBody<S, B> {
    inner: S,
    into_body: fn(ReplayBody<B>) -> B,
}

impl<S, B> IntoBody<S, B> {
    /// Wraps `inner`, making its bodies with `into_body` (for tonic: `tonic::body::Body::new`).
    pub fn new(inner: S, into_body: fn(ReplayBody<B>) -> B) -> Self {
        Self { inner, into_body }
    }

    /// The inner service (the channel).
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, B> Clone for IntoBody<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            into_body: self.into_body,
        }
    }
}

impl<S: fmt::Debug, B> fmt::Debug for IntoBody<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoBody")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<http::Request<ReplayBody<B>>> for IntoBody<S, B>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = IntoBodyFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<ReplayBody<B>>) -> Self::Future {
        IntoBodyFuture {
            inner: self.inner.call(request.map(self.into_body)),
        }
    }
}

pin_project! {
    /// The future of [`IntoBody`]: the channel's, with its error boxed.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct IntoBodyFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F, T, E> Future for IntoBodyFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(ready!(self.project().inner.poll(cx)).map_err(Into::into))
    }
}

impl<F> fmt::Debug for IntoBodyFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoBodyFuture").finish_non_exhaustive()
    }
}

/// Wraps `channel` (tonic's `Channel`) in the whole client stack: bodies buffered up to
/// [`ReplayBody::DEFAULT_LIMIT`](tower_http_retry::body::ReplayBody::DEFAULT_LIMIT) so a call
/// can be sent again, `layer`, and the conversion back to the channel's body type. `into_body`
/// is that conversion: `tonic::body::Body::new` (the crate does not depend on tonic, so it
/// cannot name it). The result goes straight into a generated client:
/// `MyServiceClient::new(stack(&layer, channel, Body::new))`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_http_retry::RetryReport;
///
/// // Stand-ins for tonic's `Channel` and `tonic::body::Body::new`.
/// let channel = service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::io::Error>(http::Response::new(String::new()))
/// });
/// let into_body = |_: tower_http_retry::body::ReplayBody<String>| String::new();
///
/// let layer = tower_http_retry_grpc::layer();
/// let mut client = tower_http_retry_grpc::stack(&layer, channel, into_body);
/// let response = client.ready().await.unwrap().call(http::Request::new(String::new())).await;
/// assert_eq!(RetryReport::of(&response.unwrap()).attempts, 1);
/// # }
/// ```
pub fn stack<S, B>(
    layer: &RetryLayer<GrpcClassifier>,
    channel: S,
    into_body: fn(ReplayBody<B>) -> B,
) -> GrpcStack<S, B> {
    BufferRequestLayer::new().layer(layer.layer(IntoBody::new(channel, into_body)))
}

impl GrpcServiceConfig {
    /// The whole client stack for the method at `path`, in one call: the layer of
    /// [`retry_layer_builder(path)`](Self::retry_layer_builder) (its policy, the config's throttle)
    /// around `channel`, as [`stack`] builds it. `into_body` is
    /// `tonic::body::Body::new`.
    ///
    /// ```rust,ignore
    /// use tonic::body::Body;
    ///
    /// let config = GrpcServiceConfig::from_json(SERVICE_CONFIG)?;
    /// let channel = Endpoint::from_shared("http://[::1]:50051")?.connect_lazy();
    /// let mut client = HealthClient::new(config.stack("/grpc.health.v1.Health/Check", channel, Body::new)?);
    /// ```
    ///
    /// To set more (an abort signal, a deadline), build the layer with
    /// [`retry_layer_builder`](Self::retry_layer_builder) and call [`stack`] with it. Fails as [`RetryLayerBuilder::build`](tower_http_retry::retry::RetryLayerBuilder::build) does.
    pub fn stack<S, B>(
        &self,
        path: &str,
        channel: S,
        into_body: fn(ReplayBody<B>) -> B,
    ) -> Result<GrpcStack<S, B>, InvalidConfig> {
        Ok(stack(
            &self.retry_layer_builder(path).build()?,
            channel,
            into_body,
        ))
    }
}
