//! [`ReleasedBody`]: the body of a response that went through
//! [`ReleaseBody`](crate::body::ReleaseBody), either the inner body untouched or what was read of
//! it.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// A response body that is either the inner body, streamed untouched, or the part of it that
    /// [`ReleaseBody`](crate::body::ReleaseBody) read before returning the response.
    ///
    /// The bodies of responses the classifier calls transient are read; every other body streams.
    /// A read body yields its data in one frame, then its trailers, then the error the inner body
    /// failed with, if it failed while being read. Its size hint is exact. A body longer than the
    /// limit keeps its first `limit` bytes and reports [`is_truncated`](Self::is_truncated); the
    /// rest was never read.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body::Body;
    /// use http_body_util::Full;
    /// use tower_http_retry::body::ReleasedBody;
    ///
    /// // Bodies that were not read are the inner body, with its size hint.
    /// let body = ReleasedBody::new(Full::new(Bytes::from_static(b"hello")));
    /// assert!(!body.is_buffered() && !body.is_truncated());
    /// assert_eq!(body.size_hint().exact(), Some(5));
    /// ```
    pub struct ReleasedBody<B>
    where
        B: Body,
    {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B>
    where
        B: Body,
    {
        Streaming {
            #[pin]
            body: B,
        },
        // Read before the response was returned; the inner body is gone.
        Buffered {
            data: Bytes,
            trailers: Option<HeaderMap>,
            // What the inner body failed with while being read, yielded after the data.
            error: Option<B::Error>,
            // Only answers `is_truncated`: it changes nothing in how the body is polled.
            truncated: bool,
        },
    }
}

impl<B: Body> ReleasedBody<B> {
    /// Wraps `body` to be streamed untouched.
    pub fn new(body: B) -> Self {
        Self {
            kind: Kind::Streaming { body },
        }
    }

    /// Whether the body was read before the response was returned (the response was transient).
    pub fn is_buffered(&self) -> bool {
        matches!(self.kind, Kind::Buffered { .. })
    }

    /// Whether the body was longer than the limit: only its first `limit` bytes are kept, and the
    /// rest was dropped unread (which closed its connection). Its trailers, if it had any, are
    /// lost with the rest.
    pub fn is_truncated(&self) -> bool {
        matches!(
            self.kind,
            Kind::Buffered {
                truncated: true,
                ..
            }
        )
    }

    fn buffered(read: Read, error: Option<B::Error>, truncated: bool) -> Self {
        Self {
            kind: Kind::Buffered {
                data: read.data.freeze(),
                trailers: read.trailers,
                error,
                truncated,
            },
        }
    }
}

impl<B> Body for ReleasedBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Streaming { body } => body.poll_frame(cx).map(|frame| {
                frame.map(|result| {
                    result.map(|frame| {
                        frame.map_data(|mut data| data.copy_to_bytes(data.remaining()))
                    })
                })
            }),
            KindProj::Buffered {
                data,
                trailers,
                error,
                ..
            } => {
                if !data.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(std::mem::take(data)))));
                }
                if let Some(trailers) = trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                Poll::Ready(error.take().map(Err))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Streaming { body } => body.is_end_stream(),
            Kind::Buffered {
                data,
                trailers,
                error,
                ..
            } => data.is_empty() && trailers.is_none() && error.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Streaming { body } => body.size_hint(),
            Kind::Buffered { data, .. } => SizeHint::with_exact(data.len() as u64),
        }
    }
}

impl<B> fmt::Debug for ReleasedBody<B>
where
    B: Body,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Streaming { .. } => f
                .debug_struct("ReleasedBody::Streaming")
                .finish_non_exhaustive(),
            Kind::Buffered {
                data,
                trailers,
                error,
                truncated,
            } => f
                .debug_struct("ReleasedBody::Buffered")
                .field("len", &data.len())
                .field("trailers", &trailers.is_some())
                .field("error", &error.is_some())
                .field("truncated", truncated)
                .finish(),
        }
    }
}

/// What has been read of a body so far, up to a limit.
///
/// Data is copied out of the inner body's chunks, so that no buffer of the connection (which
/// may be far larger than the part kept) stays alive with the response.
#[derive(Debug)]
pub(super) struct Read {
    data: BytesMut,
    trailers: Option<HeaderMap>,
    limit: usize,
}

/// Whether the body still fits after a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fill {
    Fits,
    /// More than `limit` bytes arrived: the first `limit` are kept.
    Overflowed,
}

impl Read {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            data: BytesMut::new(),
            trailers: None,
            limit,
        }
    }

    /// Takes one frame of the body.
    pub(super) fn push<D: Buf>(&mut self, frame: Frame<D>) -> Fill {
        match frame.into_data() {
            Ok(mut data) => {
                let room = self.limit - self.data.len();
                let fill = if data.remaining() > room {
                    Fill::Overflowed
                } else {
                    Fill::Fits
                };
                let keep = data.remaining().min(room);
                self.data.put((&mut data).take(keep));
                fill
            }
            Err(frame) => {
                if let Ok(map) = frame.into_trailers() {
                    self.trailers.get_or_insert_with(HeaderMap::new).extend(map);
                }
                Fill::Fits
            }
        }
    }

    /// The bytes kept so far.
    pub(super) fn data(&self) -> &[u8] {
        &self.data
    }

    /// The body: whole (`error` is what the inner body failed with, if it did), or truncated.
    pub(super) fn finish<B: Body>(self, error: Option<B::Error>, fill: Fill) -> ReleasedBody<B> {
        ReleasedBody::buffered(self, error, fill == Fill::Overflowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    type Inner = Full<Bytes>;

    fn trailers() -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert("checksum", "7".parse().unwrap());
        map
    }

    fn read(limit: usize, chunks: &[&'static [u8]]) -> (Read, Fill) {
        let mut read = Read::new(limit);
        let mut fill = Fill::Fits;
        for chunk in chunks {
            fill = read.push(Frame::data(Bytes::from_static(chunk)));
            if fill == Fill::Overflowed {
                break;
            }
        }
        (read, fill)
    }

    #[test]
    fn a_streaming_body_keeps_the_size_hint_of_the_inner_body() {
        let body = ReleasedBody::new(Inner::new(Bytes::from_static(b"abc")));
        assert_eq!(body.size_hint().exact(), Some(3));
        assert!(!body.is_end_stream());
        let empty = ReleasedBody::new(Inner::new(Bytes::new()));
        assert!(empty.is_end_stream());
    }

    #[tokio::test]
    async fn a_streaming_body_yields_the_inner_frames() {
        let body = ReleasedBody::new(Inner::new(Bytes::from_static(b"abc")));
        assert_eq!(body.collect().await.unwrap().to_bytes(), &b"abc"[..]);
    }

    #[tokio::test]
    async fn a_buffered_body_has_an_exact_size_hint_until_its_end() {
        let (read, fill) = read(10, &[b"ab", b"cd"]);
        let mut body = read.finish::<Inner>(None, fill);
        assert!(body.is_buffered() && !body.is_truncated());
        assert_eq!(body.size_hint().exact(), Some(4));
        assert!(!body.is_end_stream());
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), &b"abcd"[..]);
        assert_eq!(body.size_hint().exact(), Some(0));
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_buffered_body_yields_its_trailers_after_the_data() {
        let mut read = Read::new(10);
        assert_eq!(read.push(Frame::data(Bytes::from_static(b"x"))), Fill::Fits);
        assert_eq!(read.push(Frame::<Bytes>::trailers(trailers())), Fill::Fits);
        let body = read.finish::<Inner>(None, Fill::Fits);
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers(), Some(&trailers()));
        assert_eq!(collected.to_bytes(), &b"x"[..]);
    }

    #[tokio::test]
    async fn a_buffered_body_with_only_trailers_is_not_at_its_end_before_them() {
        let mut read = Read::new(10);
        read.push(Frame::<Bytes>::trailers(trailers()));
        let mut body = read.finish::<Inner>(None, Fill::Fits);
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_trailers().unwrap(), trailers());
        assert!(body.is_end_stream());
    }

    #[test]
    fn a_body_of_exactly_the_limit_fits() {
        let (read, fill) = read(4, &[b"ab", b"cd"]);
        assert_eq!(fill, Fill::Fits);
        assert_eq!(read.data, &b"abcd"[..]);
    }

    #[test]
    fn a_body_past_the_limit_keeps_exactly_its_first_limit_bytes() {
        let (read, fill) = read(3, &[b"ab", b"cd", b"ef"]);
        assert_eq!(fill, Fill::Overflowed);
        assert_eq!(read.data, &b"abc"[..]);
        let body = read.finish::<Inner>(None, fill);
        assert!(body.is_truncated());
        assert_eq!(body.size_hint().exact(), Some(3));
    }

    #[test]
    fn empty_data_frames_past_a_full_buffer_do_not_truncate() {
        let (read, fill) = read(2, &[b"ab", b""]);
        assert_eq!(fill, Fill::Fits);
        assert_eq!(read.data, &b"ab"[..]);
    }

    /// A body type whose error is a `&'static str` (never polled: only its types are used).
    struct Failing;

    impl Body for Failing {
        type Data = Bytes;
        type Error = &'static str;

        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            Poll::Ready(Some(Err("cut")))
        }
    }

    #[tokio::test]
    async fn an_error_of_the_inner_body_is_yielded_after_the_data_read_before_it() {
        let (read, fill) = read(10, &[b"ab"]);
        let mut body = read.finish::<Failing>(Some("cut"), fill);
        assert!(!body.is_end_stream());
        let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(data, &b"ab"[..]);
        assert!(!body.is_end_stream(), "the error is still to come");
        assert_eq!(body.frame().await.unwrap().unwrap_err(), "cut");
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
    }
}
