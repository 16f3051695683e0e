//! The connections of a [`rotation_safe_client`](super::rotation_safe_client), marked
//! [`SerialDispatch`] so that the classifier knows.
//!
//! hyper-util copies the marker into the extensions of each response, and into each error's
//! `connect_info`, where [`HttpClassifier`](tower_http_retry::HttpClassifier) reads it:
//!
//! ```no_run
//! # async fn demo(client: tower_http_retry_hyper::RotationSafeClient<
//! #     hyper_util::client::legacy::connect::HttpConnector,
//! #     http_body_util::Empty<bytes::Bytes>,
//! # >) -> Result<(), tower::BoxError> {
//! use tower_http_retry::classify::SerialDispatch;
//!
//! let response = client.request(http::Request::new(Default::default())).await?;
//! assert!(response.extensions().get::<SerialDispatch>().is_some());
//! # Ok(())
//! # }
//! ```

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_http_retry::classify::SerialDispatch;
use tower_service::Service;

/// The connector of a [`rotation_safe_client`](super::rotation_safe_client): `C`'s connections,
/// marked [`SerialDispatch`]. Only that function makes one, so that the marker never sits on a
/// connection whose tasks may run in parallel.
#[derive(Clone, Debug)]
pub struct SerialConnector<C> {
    pub(super) inner: C,
}

impl<C> Service<Uri> for SerialConnector<C>
where
    C: Service<Uri>,
{
    type Response = SerialConnection<C::Response>;
    type Error = C::Error;
    type Future = SerialConnecting<C::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        SerialConnecting {
            inner: self.inner.call(uri),
        }
    }
}

pin_project_lite::pin_project! {
    /// A [`SerialConnector`]'s connect in progress.
    #[derive(Debug)]
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct SerialConnecting<F> {
        #[pin]
        inner: F,
    }
}

impl<F, T, E> Future for SerialConnecting<F>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<SerialConnection<T>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .inner
            .poll(cx)
            .map_ok(|inner| SerialConnection { inner })
    }
}

/// A connection of a [`SerialConnector`]: the inner connection, with [`SerialDispatch`] in what
/// it reports of itself (`Connection::connected`).
#[derive(Debug)]
pub struct SerialConnection<T> {
    inner: T,
}

impl<T> SerialConnection<T> {
    /// The inner connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: Connection> Connection for SerialConnection<T> {
    fn connected(&self) -> Connected {
        self.inner.connected().extra(SerialDispatch::new())
    }
}

impl<T: Read + Unpin> Read for SerialConnection<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for SerialConnection<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
}
