//! [`BufferRequestLayer`]: makes a streaming client's requests (tonic's, or any whose body is
//! not `Clone`) replayable in front of the retry layer. Protocol-neutral.

use super::replay::ReplayBody;
use http_body::Body;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Reads each request's body into a [`ReplayBody`] before passing the request on, so that the
/// retry layer behind it can send it again.
///
/// A streaming request body, such as a gRPC client's stream of messages (tonic's
/// `tonic::body::Body`), is never `Clone`. This layer reads the frames that are *ready*, up to `limit` bytes
/// ([`ReplayBody::DEFAULT_LIMIT`] by default): a unary call's single message, or a client stream
/// whose messages are all at hand, ends there and becomes replayable. A larger body, or a
/// stream whose next message is not ready yet (a bidirectional call that answers as it goes),
/// is not waited for: it is passed on once, and a transient failure returns it with
/// [`StopReason::NotReplayable`](crate::StopReason::NotReplayable).
///
/// An error of the body while it is read ends the request with that error.
///
/// ```
/// use tower::ServiceBuilder;
/// use tower_http_retry::RetryLayer;
/// use tower_http_retry::body::BufferRequestLayer;
/// # fn channel() -> impl tower::Service<http::Request<tower_http_retry::body::ReplayBody<String>>, Response = http::Response<String>, Error = tower::BoxError> + Clone + Send + 'static {
/// #     tower::service_fn(|_| async { Ok(http::Response::new(String::new())) })
/// # }
///
/// let client = ServiceBuilder::new()
///     .layer(BufferRequestLayer::new())
///     .layer(RetryLayer::builder().build().unwrap())
///     // (for gRPC, the gRPC crate's `layer()`; tonic's `Channel` takes `tonic::body::Body`: `.map_request(|r: http::Request<_>| r.map(tonic::body::Body::new))`)
///     .service(channel());
/// # let _ = client;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct BufferRequestLayer {
    limit: usize,
}

impl BufferRequestLayer {
    /// Buffers up to [`ReplayBody::DEFAULT_LIMIT`] (64 KiB) per request.
    pub const fn new() -> Self {
        Self::with_limit(ReplayBody::DEFAULT_LIMIT)
    }

    /// Buffers up to `limit` bytes per request.
    pub const fn with_limit(limit: usize) -> Self {
        Self { limit }
    }
}

impl Default for BufferRequestLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for BufferRequestLayer {
    type Service = BufferRequest<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BufferRequest {
            inner,
            limit: self.limit,
        }
    }
}

/// The service of [`BufferRequestLayer`].
#[derive(Clone, Debug)]
pub struct BufferRequest<S> {
    inner: S,
    limit: usize,
}

impl<S> BufferRequest<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming `self`.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The future of [`BufferRequest`]: the body is read, then the inner service called.
pub type BufferRequestFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B> Service<http::Request<B>> for BufferRequest<S>
where
    S: Service<http::Request<ReplayBody<B>>> + Clone + Send + 'static,
    S::Future: Send,
    B: Body + Unpin + Send + 'static,
    B::Error: Into<S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BufferRequestFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The service made ready goes with the request; a clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self.limit;
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = ReplayBody::read(body, limit, false)
                .await
                .map_err(Into::into)?;
            inner.call(http::Request::from_parts(parts, body)).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body::Frame;
    use std::collections::VecDeque;
    use std::convert::Infallible;

    /// Frames that are ready, then `Pending` forever if `more` (a stream still being fed).
    struct Feed {
        frames: VecDeque<Bytes>,
        more: bool,
    }

    impl Body for Feed {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.frames.pop_front() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None if self.more => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    async fn read(frames: &[&'static str], more: bool, limit: usize) -> ReplayBody<Feed> {
        let body = Feed {
            frames: frames
                .iter()
                .map(|f| Bytes::from_static(f.as_bytes()))
                .collect(),
            more,
        };
        ReplayBody::read(body, limit, false).await.unwrap()
    }

    #[tokio::test]
    async fn a_body_that_ends_when_read_is_replayable() {
        assert!(read(&["one message"], false, 64).await.is_replayable());
        assert!(read(&["two", "messages"], false, 64).await.is_replayable());
    }

    #[tokio::test]
    async fn a_stream_still_being_fed_is_not_waited_for() {
        // With `wait`, this would never finish.
        let body = read(&["first"], true, 64).await;
        assert!(!body.is_replayable());
        assert_eq!(body.size_hint().lower(), 5);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_streamed() {
        assert!(!read(&["0123456789"], false, 4).await.is_replayable());
    }
}
