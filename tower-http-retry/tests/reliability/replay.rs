//! Streaming bodies through the retry layer, end to end over loopback: a body within the bound
//! is replayed from its buffer, with its trailers; a longer one is sent once and never buffered
//! whole.

use crate::support::{Reply, TestServer, REQUEST_ID};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};
use tower_http_retry::body::ReplayBody;
use tower_http_retry::report::ReportSlot;
use tower_http_retry::retry::RandomSource;
use tower_http_retry::{Backoff, Jitter, RetryLayer, StopReason};

/// The byte at offset `i` of every generated body.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) % 251) as u8
}

fn expected(total: usize) -> Bytes {
    (0..total).map(pattern).collect()
}

/// A body that is a stream (not `Clone`): `total` bytes of [`pattern`] in `chunk`-byte frames.
/// `live` counts the bytes of the frames it produced that are still held by someone.
struct Source {
    next: usize,
    total: usize,
    chunk: usize,
    live: Arc<AtomicUsize>,
}

impl Source {
    fn new(total: usize, chunk: usize) -> (Self, Arc<AtomicUsize>) {
        let live = Arc::new(AtomicUsize::new(0));
        let source = Self {
            next: 0,
            total,
            chunk,
            live: Arc::clone(&live),
        };
        (source, live)
    }
}

/// A frame's bytes; dropping it takes them off the `live` count.
struct Tracked {
    data: Vec<u8>,
    live: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.fetch_sub(self.data.len(), Ordering::SeqCst);
    }
}

impl Body for Source {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.next >= self.total {
            return Poll::Ready(None);
        }
        let start = self.next;
        let end = (start + self.chunk).min(self.total);
        self.next = end;
        self.live.fetch_add(end - start, Ordering::SeqCst);
        let tracked = Tracked {
            data: (start..end).map(pattern).collect(),
            live: Arc::clone(&self.live),
        };
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_owner(tracked)))))
    }
}

/// A server that answers `PUT`s with the statuses of `script` in turn (the last one repeated)
/// and keeps every body it received.
async fn sink(script: &'static [u16]) -> (TestServer, Arc<Mutex<Vec<Bytes>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let received = Arc::clone(&bodies);
    let server = TestServer::start(move |hit| {
        received.lock().unwrap().push(hit.body.clone());
        let n = (hit.nth as usize).min(script.len()) - 1;
        Reply::status(script[n])
    })
    .await;
    (server, bodies)
}

fn retry_layer() -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(3)
        .backoff(Backoff::new(
            Jitter::Full,
            Duration::from_millis(5),
            Duration::from_millis(20),
        ))
        .random_source(RandomSource::seeded(11))
        .build()
        .unwrap()
}

/// Sends `request` through `layer` over a hyper-util client; returns the status and the report.
async fn send<B>(layer: &RetryLayer, mut request: Request<ReplayBody<B>>) -> (u16, ReportSlot)
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let client: Client<HttpConnector, ReplayBody<B>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut service = layer.layer(client);
    let slot = ReportSlot::new();
    request.extensions_mut().insert(slot.clone());
    let response: Response<Incoming> = service
        .ready()
        .await
        .unwrap()
        .call(request)
        .await
        .expect("the sink answers");
    (response.status().as_u16(), slot)
}

fn put<B>(server: &TestServer, id: &str, body: B) -> Request<B> {
    Request::put(server.uri("/sink"))
        .header(REQUEST_ID, id)
        .body(body)
        .unwrap()
}

#[tokio::test]
async fn a_streamed_body_within_the_bound_is_resent_identically() {
    let (server, bodies) = sink(&[503, 503, 200]).await;
    let (source, live) = Source::new(40 * 1024, 4096);
    let request =
        ReplayBody::buffer_request(put(&server, "small", source), ReplayBody::DEFAULT_LIMIT)
            .await
            .unwrap();
    assert!(request.body().is_replayable());
    assert_eq!(
        live.load(Ordering::SeqCst),
        0,
        "the frames were copied into one buffer"
    );

    let layer = retry_layer();
    let (status, slot) = send(&layer, request).await;

    let report = slot.take().unwrap();
    assert_eq!(
        (status, report.attempts, report.stop),
        (200, 3, StopReason::Success)
    );
    assert_eq!(server.hits(&Method::PUT, "small"), 3);
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 3);
    for body in bodies.iter() {
        assert_eq!(
            *body,
            expected(40 * 1024),
            "every attempt carries the same bytes"
        );
    }
}

#[tokio::test]
async fn a_streamed_body_beyond_the_bound_is_sent_once_and_not_buffered() {
    const TOTAL: usize = 1024 * 1024;
    const CHUNK: usize = 8 * 1024;
    let (server, bodies) = sink(&[503]).await;
    let (source, live) = Source::new(TOTAL, CHUNK);
    let request =
        ReplayBody::buffer_request(put(&server, "large", source), ReplayBody::DEFAULT_LIMIT)
            .await
            .unwrap();
    assert!(!request.body().is_replayable());
    // Reading stopped at the frame that crossed the bound: 64 KiB plus one frame at most.
    let held = live.load(Ordering::SeqCst);
    assert!(
        held > ReplayBody::DEFAULT_LIMIT && held <= ReplayBody::DEFAULT_LIMIT + CHUNK,
        "{held}"
    );

    let layer = retry_layer();
    let (status, slot) = send(&layer, request).await;

    let report = slot.take().unwrap();
    assert_eq!((status, report.attempts), (503, 1));
    assert_eq!(report.stop, StopReason::NotReplayable);
    assert_eq!(server.hits(&Method::PUT, "large"), 1, "sent exactly once");
    assert_eq!(
        *bodies.lock().unwrap(),
        [expected(TOTAL)],
        "the whole body arrived"
    );
    assert_eq!(layer.stats().stopped(StopReason::NotReplayable), 1);
    assert_eq!(live.load(Ordering::SeqCst), 0, "every frame was released");
}

#[tokio::test]
async fn a_hyper_incoming_body_is_replayed_from_its_buffer() {
    const SIZE: usize = 20 * 1024;
    // One server both serves the payload (GET) and receives it (PUT, 503 once).
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let received = Arc::clone(&bodies);
    let server = TestServer::start(move |hit| {
        if hit.method == Method::GET {
            return Reply::Respond(Response::new(http_body_util::Full::new(expected(SIZE))));
        }
        received.lock().unwrap().push(hit.body.clone());
        Reply::status(if hit.nth == 1 { 503 } else { 200 })
    })
    .await;
    let download = crate::support::client()
        .request(crate::support::get(&server.uri("/payload"), "download"))
        .await
        .unwrap();
    let incoming: Incoming = download.into_body();

    let request =
        ReplayBody::buffer_request(put(&server, "forward", incoming), ReplayBody::DEFAULT_LIMIT)
            .await
            .unwrap();
    let layer = retry_layer();
    let (status, slot) = send(&layer, request).await;

    let report = slot.take().unwrap();
    assert_eq!(
        (status, report.attempts, report.stop),
        (200, 2, StopReason::Success)
    );
    assert_eq!(*bodies.lock().unwrap(), [expected(SIZE), expected(SIZE)]);
}

/// A body of the given frames in order, of unknown size (so hyper would send it chunked).
struct Frames(VecDeque<Frame<Bytes>>);

impl Frames {
    fn new(data: &'static [u8], trailers: Option<HeaderMap>) -> Self {
        let mut frames = VecDeque::from([Frame::data(Bytes::from_static(data))]);
        frames.extend(trailers.map(Frame::trailers));
        Self(frames)
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// One request as [`trailer_sink`] received it.
#[derive(Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

/// A hyper HTTP/1.1 server on `127.0.0.1:0` that answers with the statuses of `script` in turn
/// (the last one repeated) and keeps the headers, body and trailers of every request.
/// (`support::TestServer` collects bodies without their trailers.)
async fn trailer_sink(script: &'static [u16]) -> (SocketAddr, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let received = Arc::clone(&log);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let received = Arc::clone(&received);
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let received = Arc::clone(&received);
                async move {
                    let (parts, body) = req.into_parts();
                    let collected = body.collect().await?;
                    let trailers = collected.trailers().cloned();
                    let mut log = received.lock().unwrap();
                    log.push(Received {
                        headers: parts.headers,
                        body: collected.to_bytes(),
                        trailers,
                    });
                    let status = script[(log.len() - 1).min(script.len() - 1)];
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = StatusCode::from_u16(status).unwrap();
                    Ok::<_, hyper::Error>(response)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    (addr, log)
}

/// A `PUT` of `body` to `addr`, declaring a `checksum` trailer: hyper's HTTP/1 client sends only
/// the trailer fields the `Trailer` header names.
fn put_with_trailer<B>(addr: SocketAddr, body: B) -> Request<B> {
    Request::put(format!("http://{addr}/upload"))
        .header(header::TRAILER, "checksum")
        .body(body)
        .unwrap()
}

fn checksum() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("checksum", HeaderValue::from_static("7"));
    trailers
}

#[tokio::test]
async fn trailers_of_a_buffered_body_reach_the_server_on_every_attempt() {
    let (addr, log) = trailer_sink(&[503, 200]).await;
    let body = Frames::new(b"payload", Some(checksum()));
    let request = ReplayBody::buffer_request(put_with_trailer(addr, body), 1024)
        .await
        .unwrap();
    assert!(request.body().is_replayable());

    let layer = retry_layer();
    let (status, slot) = send(&layer, request).await;

    let report = slot.take().unwrap();
    assert_eq!(
        (status, report.attempts, report.stop),
        (200, 2, StopReason::Success)
    );
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2);
    for (attempt, received) in log.iter().enumerate() {
        assert_eq!(
            received.headers.get(header::TRANSFER_ENCODING),
            Some(&HeaderValue::from_static("chunked")),
            "attempt {attempt}: {received:?}"
        );
        assert_eq!(received.body, "payload", "attempt {attempt}");
        assert_eq!(
            received.trailers.as_ref(),
            Some(&checksum()),
            "attempt {attempt}: {received:?}"
        );
    }
}

#[tokio::test]
async fn a_buffered_body_without_trailers_is_sent_with_its_content_length() {
    let (addr, log) = trailer_sink(&[200]).await;
    let body = Frames::new(b"payload", None);
    let request = ReplayBody::buffer_request(put_with_trailer(addr, body), 1024)
        .await
        .unwrap();

    let (status, _) = send(&retry_layer(), request).await;

    assert_eq!(status, 200);
    let log = log.lock().unwrap();
    let received = &log[0];
    assert_eq!(
        received.headers.get(header::CONTENT_LENGTH),
        Some(&HeaderValue::from_static("7")),
        "{received:?}"
    );
    assert_eq!(received.headers.get(header::TRANSFER_ENCODING), None);
    assert_eq!(
        (&received.body, &received.trailers),
        (&Bytes::from_static(b"payload"), &None)
    );
}
