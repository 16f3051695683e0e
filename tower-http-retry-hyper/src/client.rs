//! [`rotation_safe_client`]: hyper-util's legacy client whose every task, each request's own
//! included, runs on a [`SerialExecutor`].

use super::{SerialConnector, SerialExecutor};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::client::legacy::{Builder, Client};
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::task::JoinHandle;
use tower::BoxError;
use tower_http_retry::classify::Unretryable;
use tower_service::Service;

/// hyper-util's legacy client whose tasks run on `executor`, one at a time, each request's own
/// included, and whose connections are marked [`SerialDispatch`](tower_http_retry::classify::SerialDispatch): a
/// `GOAWAY` it delivers is then proof that the server did not process the request, and
/// [`HttpClassifier`](tower_http_retry::HttpClassifier) resends it whatever its method (see the
/// [module](super) docs).
///
/// `configure` sets anything else on hyper-util's builder: `http2_only(true)` for HTTP/2 without
/// TLS (prior knowledge), timeouts, the pool, HTTP/2 windows and keep-alive (a timer, such as
/// hyper-util's `TokioTimer`, runs on the executor's runtime). The executor is the one thing it
/// cannot change. HTTP/1.1 connections are marked too, harmlessly: they have no `GOAWAY`.
///
/// Put a [`StreamSlotsLayer`](super::StreamSlotsLayer) in front of it, so that hyper never
/// parks a request (a parked request a `GOAWAY` ends is ambiguous, whatever the executor).
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::connect::HttpConnector;
/// use tower_http_retry_hyper::{rotation_safe_client, SerialExecutor};
///
/// let client = rotation_safe_client::<_, Full<Bytes>>(
///     SerialExecutor::start()?,
///     HttpConnector::new(),
///     |builder| {
///         builder.http2_only(true);
///     },
/// );
/// # let _ = client;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn rotation_safe_client<C, B>(
    executor: SerialExecutor,
    connector: C,
    configure: impl FnOnce(&mut Builder),
) -> RotationSafeClient<C, B>
where
    SerialConnector<C>: Connect + Clone,
    B: http_body::Body + Send,
    B::Data: Send,
{
    let mut builder = Client::builder(executor.clone());
    configure(&mut builder);
    RotationSafeClient {
        client: builder.build(SerialConnector { inner: connector }),
        executor,
    }
}

/// The client [`rotation_safe_client`] builds: a tower `Service` (always ready) whose requests
/// run on its executor, as tasks of their own, and end with hyper-util's error (boxed) or
/// [`ExecutorGone`].
///
/// The request's task runs on the executor's thread, beside hyper's connection tasks, because
/// hyper's channel to a connection checks that it is open and takes a request in two steps: a
/// connection that ends between them, on another thread, leaves the request in the channel
/// unanswered (seen against nginx: a request that never got an answer). One thread does both
/// steps, or neither. A response future dropped before it ends cancels its task.
///
/// # Clone
///
/// Clones share the connection pool and the executor.
pub struct RotationSafeClient<C, B> {
    client: Client<SerialConnector<C>, B>,
    executor: SerialExecutor,
}

impl<C, B> RotationSafeClient<C, B>
where
    SerialConnector<C>: Connect + Clone + Send + Sync + 'static,
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// Sends `request` (as [`Service::call`] does, without the readiness it never needs).
    pub fn request(&self, request: Request<B>) -> RotationSafeFuture {
        let sending = self.client.request(request);
        RotationSafeFuture {
            task: self.executor.spawn(sending),
        }
    }
}

impl<C, B> Service<Request<B>> for RotationSafeClient<C, B>
where
    SerialConnector<C>: Connect + Clone + Send + Sync + 'static,
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = RotationSafeFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> RotationSafeFuture {
        self.request(request)
    }
}

impl<C: Clone, B> Clone for RotationSafeClient<C, B> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            executor: self.executor.clone(),
        }
    }
}

impl<C, B> fmt::Debug for RotationSafeClient<C, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RotationSafeClient")
            .field("executor", &self.executor)
            .finish_non_exhaustive()
    }
}

/// The response future of [`RotationSafeClient`]: the request's task on the executor. Dropped,
/// it cancels the task (and with it the request, as dropping hyper-util's own future does).
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct RotationSafeFuture {
    task: JoinHandle<Result<Response<Incoming>, hyper_util::client::legacy::Error>>,
}

impl Future for RotationSafeFuture {
    type Output = Result<Response<Incoming>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match std::task::ready!(Pin::new(&mut self.task).poll(cx)) {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(error.into()),
            Err(_) => Err(ExecutorGone(Unretryable::new()).into()),
        })
    }
}

impl Drop for RotationSafeFuture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl fmt::Debug for RotationSafeFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RotationSafeFuture")
            .field("finished", &self.task.is_finished())
            .finish()
    }
}

/// A request's task on the [`SerialExecutor`] ended without an answer: the executor's runtime
/// shut down (a runtime the caller drives, [`SerialExecutor::with_handle`]), or the task
/// panicked. Nothing says whether the request was sent; no other attempt can help (the next one
/// meets the same runtime), so it carries the core's [`Unretryable`] marker as its source and
/// [`HttpClassifier`](tower_http_retry::HttpClassifier) takes it for permanent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecutorGone(Unretryable);

impl fmt::Display for ExecutorGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request's task on the serial executor ended without an answer")
    }
}

impl Error for ExecutorGone {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Empty;
    use hyper_util::client::legacy::connect::HttpConnector;
    use tower_http_retry::{HttpClassifier, Outcome};

    #[test]
    fn a_request_on_a_runtime_that_shut_down_ends_with_executor_gone_which_is_permanent() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let executor = SerialExecutor::with_handle(runtime.handle().clone()).unwrap();
        drop(runtime);
        let client =
            rotation_safe_client::<_, Empty<Bytes>>(executor, HttpConnector::new(), |_| {});
        let caller = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let request = Request::builder()
            .uri("http://127.0.0.1:1/")
            .body(Empty::new())
            .unwrap();
        let error = caller.block_on(client.request(request)).unwrap_err();
        assert!(error.is::<ExecutorGone>(), "{error:?}");
        assert_eq!(
            HttpClassifier::new().classify_error_chain(&*error),
            Outcome::Permanent
        );
    }
}
