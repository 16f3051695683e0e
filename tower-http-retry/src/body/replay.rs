//! [`ReplayBody`]: the user-facing text is on the type.

use crate::message::RetryRequest;
use crate::report::ReportSlot;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::collections::VecDeque;
use std::fmt;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// A request body that is either buffered whole (and can be sent again) or streamed once.
    ///
    /// Built by [`buffer`](Self::buffer) or [`buffer_request`](Self::buffer_request).
    /// `http::Request<ReplayBody<B>>` implements
    /// [`RetryRequest`](crate::retry::RetryRequest) whatever `B` is. `ReplayBody` deliberately
    /// does not implement `Clone`: [`try_clone`](Self::try_clone) says whether a copy exists.
    ///
    ///
    /// The retry layer repeats a request by copying it, and `http::Request<B>` can be copied only when
    /// `B: Clone`. A streaming body (hyper's `Incoming`, a file, a channel) cannot be. Wrapping it with
    /// [`ReplayBody::buffer`] (or a whole request with [`ReplayBody::buffer_request`]) reads it up to
    /// a bound, [`ReplayBody::DEFAULT_LIMIT`] (64 KiB) unless told otherwise:
    ///
    /// * a body that ends within the bound is kept as [`Bytes`] and sent again on every attempt;
    ///   copying it for another attempt only increments a reference count. Its trailers are kept and
    ///   sent again too; a body with trailers reports no exact size, so that an HTTP/1 client sends it
    ///   chunked rather than with a `Content-Length` that would leave no room for them (hyper's client
    ///   also sends only the trailer fields that the request's `Trailer` header names);
    /// * a longer body is passed on as it arrives, the part already read first and then the rest of
    ///   the stream, and is sent once: if that attempt fails transiently the request stops with
    ///   [`StopReason::NotReplayable`](crate::StopReason::NotReplayable).
    ///
    /// Reading stops at the frame that crosses the bound, so no more than the bound plus that one frame
    /// is ever held, and a body whose size hint already exceeds the bound is not read at all.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use bytes::Bytes;
    /// use http_body_util::{BodyExt, Full};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
    /// use tower_http_retry::body::ReplayBody;
    /// use tower_http_retry::RetryLayer;
    ///
    /// // An endpoint that answers 503 once, then echoes the body back.
    /// let calls = Arc::new(AtomicU32::new(0));
    /// let counter = calls.clone();
    /// let endpoint = service_fn(move |req: http::Request<ReplayBody<Full<Bytes>>>| {
    ///     let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
    ///     async move {
    ///         let body = req.into_body().collect().await?.to_bytes();
    ///         let status = if first { 503 } else { 200 };
    ///         Ok::<_, std::convert::Infallible>(http::Response::builder().status(status).body(body).unwrap())
    ///     }
    /// });
    /// let mut client = ServiceBuilder::new().layer(RetryLayer::new()).service(endpoint);
    ///
    /// let request = http::Request::put("/doc/7").body(Full::new(Bytes::from("hello"))).unwrap();
    /// let request = ReplayBody::buffer_request(request, ReplayBody::DEFAULT_LIMIT).await.unwrap();
    /// assert!(request.body().is_replayable());
    /// let response = client.ready().await.unwrap().call(request).await.unwrap();
    /// assert_eq!((response.status().as_u16(), response.body().as_ref()), (200, &b"hello"[..]));
    /// assert_eq!(calls.load(Ordering::SeqCst), 2);
    /// # }
    /// ```
    pub struct ReplayBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        // The whole body, read within the bound.
        Buffered {
            data: Bytes,
            trailers: Option<HeaderMap>,
        },
        // Longer than the bound: the frames already read, then the rest of the stream.
        Streaming {
            prefix: VecDeque<Bytes>,
            #[pin]
            rest: B,
        },
    }
}

// On `ReplayBody<()>` alone, so that the constant is named without a body type.
impl ReplayBody<()> {
    /// The bound [`buffer_request`](Self::buffer_request) and
    /// [`BufferRequestLayer`](crate::body::BufferRequestLayer) read up to unless told otherwise:
    /// 64 KiB.
    pub const DEFAULT_LIMIT: usize = 64 * 1024;
}

impl<B> ReplayBody<B> {
    /// Reads `body` until it ends or more than `limit` bytes have arrived.
    ///
    /// A body that ends within `limit` bytes becomes replayable; a longer one (or one whose size
    /// hint already exceeds `limit`) is passed on once. An error of `body` while it is read is
    /// returned. A body that is not `Unpin` can be passed as `Box::pin(body)`.
    pub async fn buffer(body: B, limit: usize) -> Result<Self, B::Error>
    where
        B: Body + Unpin,
    {
        Self::read(body, limit, true).await
    }

    /// [`buffer`](Self::buffer), or with `wait` false, reads only the frames that are ready:
    /// a body that is not over when none is (a gRPC stream the caller feeds as it goes) is
    /// streamed once instead of waited for.
    pub(crate) async fn read(mut body: B, limit: usize, wait: bool) -> Result<Self, B::Error>
    where
        B: Body + Unpin,
    {
        let limit_bytes = u64::try_from(limit).unwrap_or(u64::MAX);
        if body.size_hint().lower() > limit_bytes {
            return Ok(Self::streaming(VecDeque::new(), body));
        }
        let mut chunks = VecDeque::new();
        let mut read = 0usize;
        let mut trailers: Option<HeaderMap> = None;
        while !body.is_end_stream() {
            let next = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
                Poll::Pending if !wait => Poll::Ready(None),
                polled => polled.map(Some),
            })
            .await;
            let frame = match next {
                Some(Some(frame)) => frame,
                Some(None) => break,
                None => return Ok(Self::streaming(chunks, body)),
            };
            match frame?.into_data() {
                Ok(mut data) => {
                    let chunk = data.copy_to_bytes(data.remaining());
                    read = read.saturating_add(chunk.len());
                    if !chunk.is_empty() {
                        chunks.push_back(chunk);
                    }
                    if read > limit {
                        return Ok(Self::streaming(chunks, body));
                    }
                }
                Err(frame) => {
                    if let Ok(map) = frame.into_trailers() {
                        trailers.get_or_insert_with(HeaderMap::new).extend(map);
                    }
                }
            }
        }
        Ok(Self {
            kind: Kind::Buffered {
                data: concat(chunks, read),
                trailers,
            },
        })
    }

    /// [`buffer`](Self::buffer)s the body of `request`, keeping its head.
    pub async fn buffer_request(
        request: http::Request<B>,
        limit: usize,
    ) -> Result<http::Request<Self>, B::Error>
    where
        B: Body + Unpin,
    {
        let (parts, body) = request.into_parts();
        let body = Self::buffer(body, limit).await?;
        Ok(http::Request::from_parts(parts, body))
    }

    /// Whether the whole body is buffered, so that the request can be sent again.
    pub fn is_replayable(&self) -> bool {
        matches!(self.kind, Kind::Buffered { .. })
    }

    /// A copy of a buffered body (what is left of it, if it was partly sent), or `None` for a body
    /// that is streamed.
    pub fn try_clone(&self) -> Option<Self> {
        match &self.kind {
            Kind::Buffered { data, trailers } => Some(Self {
                kind: Kind::Buffered {
                    data: data.clone(),
                    trailers: trailers.clone(),
                },
            }),
            Kind::Streaming { .. } => None,
        }
    }

    fn streaming(prefix: VecDeque<Bytes>, rest: B) -> Self {
        Self {
            kind: Kind::Streaming { prefix, rest },
        }
    }
}

/// One `Bytes` of `len` bytes from `chunks`; copies only when there is more than one chunk.
fn concat(mut chunks: VecDeque<Bytes>, len: usize) -> Bytes {
    if chunks.len() <= 1 {
        return chunks.pop_front().unwrap_or_default();
    }
    let mut joined = BytesMut::with_capacity(len);
    for chunk in chunks {
        joined.put(chunk);
    }
    joined.freeze()
}

impl<B> Body for ReplayBody<B>
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
            KindProj::Buffered { data, trailers } => {
                if !data.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(std::mem::take(data)))));
                }
                Poll::Ready(trailers.take().map(|map| Ok(Frame::trailers(map))))
            }
            KindProj::Streaming { prefix, rest } => {
                if let Some(chunk) = prefix.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                rest.poll_frame(cx).map(|frame| {
                    frame.map(|result| {
                        result.map(|frame| {
                            frame.map_data(|mut data| data.copy_to_bytes(data.remaining()))
                        })
                    })
                })
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Buffered { data, trailers } => data.is_empty() && trailers.is_none(),
            Kind::Streaming { prefix, rest } => prefix.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Buffered { data, trailers } => {
                let len = data.len() as u64;
                match trailers {
                    // An exact size makes hyper's HTTP/1 client send `Content-Length`, which has
                    // no room for trailers; without one it sends the body chunked, trailers last.
                    Some(_) => {
                        let mut hint = SizeHint::new();
                        hint.set_lower(len);
                        hint
                    }
                    None => SizeHint::with_exact(len),
                }
            }
            Kind::Streaming { prefix, rest } => {
                let read: u64 = prefix.iter().map(|chunk| chunk.len() as u64).sum();
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(read));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(read));
                }
                hint
            }
        }
    }
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Buffered { data, trailers } => f
                .debug_struct("ReplayBody::Buffered")
                .field("len", &data.len())
                .field("trailers", &trailers.is_some())
                .finish(),
            Kind::Streaming { prefix, .. } => f
                .debug_struct("ReplayBody::Streaming")
                .field("prefix_chunks", &prefix.len())
                .finish_non_exhaustive(),
        }
    }
}

/// A request whose body was read into a bounded buffer: copied when the whole body fit, sent once
/// otherwise. (`ReplayBody` is not `Clone`, so this does not overlap the impl for `Clone` bodies.)
impl<B> RetryRequest for http::Request<ReplayBody<B>> {
    fn try_clone(&self) -> Option<Self> {
        let mut copy = http::Request::new(self.body().try_clone()?);
        *copy.method_mut() = self.method().clone();
        *copy.uri_mut() = self.uri().clone();
        *copy.version_mut() = self.version();
        *copy.headers_mut() = self.headers().clone();
        *copy.extensions_mut() = self.extensions().clone();
        Some(copy)
    }

    fn report_slot(&self) -> Option<&ReportSlot> {
        self.extensions().get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::convert::Infallible;

    /// A body that yields `chunks` one frame at a time, then optional trailers; not `Clone`.
    struct Chunks {
        chunks: VecDeque<Bytes>,
        trailers: Option<HeaderMap>,
        hint: SizeHint,
    }

    impl Chunks {
        fn new(chunks: &[&'static [u8]]) -> Self {
            Self {
                chunks: chunks.iter().map(|c| Bytes::from_static(c)).collect(),
                trailers: None,
                hint: SizeHint::new(),
            }
        }
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if let Some(chunk) = self.chunks.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
        }

        fn size_hint(&self) -> SizeHint {
            self.hint
        }
    }

    /// Every frame of `body`: data chunks and trailers.
    async fn frames<B: Body<Data = Bytes> + Unpin>(mut body: B) -> (Vec<Bytes>, Option<HeaderMap>)
    where
        B::Error: fmt::Debug,
    {
        let (mut data, mut trailers) = (Vec::new(), None);
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            match frame.unwrap().into_data() {
                Ok(chunk) => data.push(chunk),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        (data, trailers)
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_buffered_whole_and_copied() {
        let body = ReplayBody::buffer(Chunks::new(&[b"ab", b"cd", b""]), 4)
            .await
            .unwrap();
        assert!(body.is_replayable());
        assert_eq!(body.size_hint().exact(), Some(4));
        let copy = body.try_clone().expect("buffered");
        assert_eq!(frames(body).await.0, [Bytes::from_static(b"abcd")]);
        assert_eq!(frames(copy).await.0, [Bytes::from_static(b"abcd")]);
    }

    #[tokio::test]
    async fn a_body_of_exactly_the_limit_is_replayable() {
        let body = ReplayBody::buffer(Chunks::new(&[b"ab", b"cd"]), 4)
            .await
            .unwrap();
        assert!(body.is_replayable());
        assert_eq!(body.size_hint().exact(), Some(4));
    }

    #[tokio::test]
    async fn a_body_past_the_limit_streams_the_prefix_then_the_rest() {
        let body = ReplayBody::buffer(Chunks::new(&[b"ab", b"cd", b"e", b"fg"]), 3)
            .await
            .unwrap();
        assert!(!body.is_replayable());
        assert!(body.try_clone().is_none());
        let expected: Vec<Bytes> = [&b"ab"[..], b"cd", b"e", b"fg"]
            .into_iter()
            .map(Bytes::from_static)
            .collect();
        assert_eq!(frames(body).await.0, expected);
    }

    #[tokio::test]
    async fn reading_stops_at_the_frame_that_crosses_the_limit() {
        let source = Chunks::new(&[b"ab", b"cd", b"e", b"fg"]);
        let body = ReplayBody::buffer(source, 3).await.unwrap();
        match &body.kind {
            Kind::Streaming { prefix, rest } => {
                assert_eq!(prefix.len(), 2, "ab and cd read, nothing more");
                assert_eq!(rest.chunks.len(), 2);
            }
            Kind::Buffered { .. } => panic!("past the limit"),
        }
    }

    #[tokio::test]
    async fn a_body_whose_size_hint_exceeds_the_limit_is_not_read() {
        let mut source = Chunks::new(&[b"abcdef"]);
        source.hint = SizeHint::with_exact(6);
        let body = ReplayBody::buffer(source, 5).await.unwrap();
        match &body.kind {
            Kind::Streaming { prefix, rest } => {
                assert!(prefix.is_empty());
                assert_eq!(rest.chunks.len(), 1);
            }
            Kind::Buffered { .. } => panic!("the hint says 6 > 5"),
        }
        assert_eq!(body.size_hint().lower(), 6);
    }

    #[tokio::test]
    async fn trailers_are_kept_and_replayed() {
        let mut source = Chunks::new(&[b"x"]);
        let mut trailers = HeaderMap::new();
        trailers.insert("checksum", "7".parse().unwrap());
        source.trailers = Some(trailers.clone());
        let body = ReplayBody::buffer(source, 10).await.unwrap();
        let copy = body.try_clone().unwrap();
        assert_eq!(
            frames(copy).await,
            (vec![Bytes::from_static(b"x")], Some(trailers))
        );
    }

    fn with_trailers(chunks: &[&'static [u8]]) -> Chunks {
        let mut source = Chunks::new(chunks);
        let mut trailers = HeaderMap::new();
        trailers.insert("checksum", "7".parse().unwrap());
        source.trailers = Some(trailers);
        source
    }

    #[tokio::test]
    async fn a_buffered_body_with_trailers_reports_no_exact_size() {
        let body = ReplayBody::buffer(with_trailers(&[b"ab", b"cd"]), 10)
            .await
            .unwrap();
        let hint = body.size_hint();
        assert_eq!((hint.lower(), hint.upper(), hint.exact()), (4, None, None));
    }

    #[tokio::test]
    async fn a_replayed_copy_yields_data_then_trailers_then_ends() {
        let body = ReplayBody::buffer(with_trailers(&[b"ab", b"cd"]), 10)
            .await
            .unwrap();
        let mut copy = body.try_clone().unwrap();
        let data = copy.frame().await.unwrap().unwrap();
        assert_eq!(data.into_data().unwrap(), "abcd");
        assert!(!copy.is_end_stream(), "the trailers are still to come");
        assert_eq!(copy.size_hint().exact(), None);
        let trailers = copy.frame().await.unwrap().unwrap();
        assert_eq!(trailers.trailers_ref().unwrap()["checksum"], "7");
        assert!(copy.is_end_stream());
        assert_eq!(copy.size_hint().exact(), Some(0));
        assert!(copy.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_buffered_body_of_trailers_alone_is_not_at_its_end() {
        let body = ReplayBody::buffer(with_trailers(&[]), 10).await.unwrap();
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().exact(), None);
        assert_eq!(frames(body).await.0, Vec::<Bytes>::new());
    }

    #[tokio::test]
    async fn an_empty_body_is_replayable_and_ends_at_once() {
        let body = ReplayBody::buffer(Chunks::new(&[]), 0).await.unwrap();
        assert!(body.is_replayable() && body.is_end_stream());
    }
}
