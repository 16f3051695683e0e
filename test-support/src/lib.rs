//! Loopback HTTP helpers shared by the integration tests of every crate of the workspace (a
//! dev-dependency, never published), and [`servers`], the starter of the real servers some
//! suites run.
//!
//! The API, in full:
//!
//! * [`TestServer::start`] serves HTTP/1.1 on `127.0.0.1:0` with a scripted handler, a function
//!   from a [`Hit`] (the request, its id and how many times that id was seen with that method) to
//!   a [`Reply`]: a response ([`Reply::status`]), a response after a stall ([`Reply::after`]), or
//!   a dropped connection ([`Reply::Hangup`]). It counts hits per request id and method
//!   ([`TestServer::hits`], [`TestServer::total_hits`]), counts the TCP connections it accepted
//!   and those still open ([`TestServer::accepted`], [`TestServer::open_connections`]), and stops
//!   when dropped.
//! * [`refused_addr`] is a loopback address where nothing listens.
//! * [`client`] is hyper-util's legacy `Client` over plain HTTP; [`request`] builds requests for
//!   it, tagged with a [`REQUEST_ID`] header. [`h2_client`] speaks HTTP/2 only.
//! * [`H2Server::start`] serves HTTP/2 (prior knowledge) on `127.0.0.1:0` with the `h2` crate:
//!   a scripted handler sees each stream's [`Arrival`] before its body is read and answers with
//!   an [`H2Reply`]: a status (the handler ran: [`H2Server::handled`]) or a `REFUSED_STREAM`
//!   reset (it did not: [`H2Server::refused`]).
//!
//! Everything uses real sockets, so tests that use it run on real time (see CONTRIBUTING.md).

#![forbid(unsafe_code)]

pub mod servers;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::fmt;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::{AbortHandle, JoinSet};

/// The header that names a logical request; retries of one request carry the same value.
pub const REQUEST_ID: &str = "x-request-id";

/// The request and response body of the client: `Clone`, so requests can be replayed.
pub type Body = Full<Bytes>;

/// hyper-util's legacy client over plain HTTP, as the tests use it.
pub type HttpClient = Client<HttpConnector, Body>;

/// A new hyper-util legacy client (its own connection pool).
pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// hyper-util's legacy client speaking HTTP/2 only, without TLS (prior knowledge).
pub fn h2_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A request with the [`REQUEST_ID`] header set to `id`.
pub fn request(method: Method, uri: &Uri, id: &str, body: impl Into<Bytes>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri.clone())
        .header(REQUEST_ID, id)
        .body(Full::new(body.into()))
        .expect("a valid request")
}

/// A `GET` with the [`REQUEST_ID`] header set to `id`.
pub fn get(uri: &Uri, id: &str) -> Request<Body> {
    request(Method::GET, uri, id, Bytes::new())
}

/// A loopback address where nothing listens: a listener is bound to port 0 and closed again.
/// (Another process could take the port in between; on loopback in a test run that is rare.)
pub fn refused_addr() -> SocketAddr {
    let listener = StdListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener
        .local_addr()
        .expect("a bound listener has an address")
}

/// One request as the server's handler sees it.
#[derive(Debug)]
pub struct Hit {
    /// The [`REQUEST_ID`] header ("" when absent).
    pub id: String,
    /// The method.
    pub method: Method,
    /// 1 for the first request with this id and method, 2 for the second, ...
    pub nth: u32,
    /// The request headers.
    pub headers: HeaderMap,
    /// The whole request body.
    pub body: Bytes,
}

/// What the server does with a request.
pub enum Reply {
    /// Answer with this response.
    Respond(Response<Body>),
    /// Wait this long, then answer (a stall past a client's per-attempt timeout).
    Stall(Duration, Response<Body>),
    /// Read the request, then close the connection without answering. The client sees the
    /// connection end before a response (hyper's "incomplete message").
    Hangup,
}

impl Reply {
    /// An empty response with this status.
    pub fn status(code: u16) -> Self {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::from_u16(code).expect("a valid status code");
        Reply::Respond(response)
    }

    /// Adds a header to the response (no effect on [`Reply::Hangup`]).
    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        if let Reply::Respond(response) | Reply::Stall(_, response) = &mut self {
            response.headers_mut().insert(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).expect("a valid header value"),
            );
        }
        self
    }

    /// Answers only after `delay` (no effect on [`Reply::Hangup`]).
    pub fn after(self, delay: Duration) -> Self {
        match self {
            Reply::Respond(response) | Reply::Stall(_, response) => Reply::Stall(delay, response),
            Reply::Hangup => Reply::Hangup,
        }
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Respond(r) => f.debug_tuple("Respond").field(&r.status()).finish(),
            Reply::Stall(d, r) => f.debug_tuple("Stall").field(d).field(&r.status()).finish(),
            Reply::Hangup => f.write_str("Hangup"),
        }
    }
}

type Handler = dyn Fn(&Hit) -> Reply + Send + Sync;

/// Hits per (method, request id).
#[derive(Default)]
struct HitLog(Mutex<HashMap<(Method, String), u32>>);

impl HitLog {
    /// Counts one more hit and returns its number for this method and id.
    fn record(&self, method: &Method, id: &str) -> u32 {
        let mut hits = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = hits.entry((method.clone(), id.to_owned())).or_insert(0);
        *n += 1;
        *n
    }

    fn get(&self, method: &Method, id: &str) -> u32 {
        let hits = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        hits.get(&(method.clone(), id.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    fn total(&self) -> u32 {
        let hits = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        hits.values().sum()
    }
}

/// A scripted HTTP/1.1 server on `127.0.0.1`, stopped (with all its connections) when dropped.
pub struct TestServer {
    addr: SocketAddr,
    hits: Arc<HitLog>,
    connections: Arc<Connections>,
    task: AbortHandle,
}

/// Connections accepted, and those whose connection task has not ended yet.
#[derive(Default)]
struct Connections {
    accepted: AtomicU32,
    open: AtomicU32,
}

/// Counts one connection as open until dropped (when its connection task ends or is aborted).
struct OpenConnection(Arc<Connections>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl TestServer {
    /// Binds `127.0.0.1:0` and serves every request with `handler`, over HTTP/1.1.
    pub async fn start(handler: impl Fn(&Hit) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve(Protocol::Http1, handler).await
    }

    /// Like [`start`](Self::start), over HTTP/2 (prior knowledge, as [`h2_client`] speaks it).
    pub async fn start_h2(handler: impl Fn(&Hit) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve(Protocol::Http2, handler).await
    }

    async fn serve(
        protocol: Protocol,
        handler: impl Fn(&Hit) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let hits = Arc::new(HitLog::default());
        let handler: Arc<Handler> = Arc::new(handler);
        let connections = Arc::new(Connections::default());
        let task = tokio::spawn(accept_loop(
            protocol,
            listener,
            handler,
            Arc::clone(&hits),
            Arc::clone(&connections),
        ));
        Self {
            addr,
            hits,
            connections,
            task: task.abort_handle(),
        }
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn uri(&self, path: &str) -> Uri {
        format!("http://{}{path}", self.addr)
            .parse()
            .expect("a valid URI")
    }

    /// How many requests with this method and request id arrived.
    pub fn hits(&self, method: &Method, id: &str) -> u32 {
        self.hits.get(method, id)
    }

    /// How many requests arrived in all.
    pub fn total_hits(&self) -> u32 {
        self.hits.total()
    }

    /// How many TCP connections the server accepted.
    pub fn accepted(&self) -> u32 {
        self.connections.accepted.load(Ordering::SeqCst)
    }

    /// How many accepted connections are still open on the server's side.
    pub fn open_connections(&self) -> u32 {
        self.connections.open.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .field("total_hits", &self.total_hits())
            .finish()
    }
}

/// What a [`TestServer`] speaks.
#[derive(Clone, Copy)]
enum Protocol {
    Http1,
    Http2,
}

async fn accept_loop(
    protocol: Protocol,
    listener: TcpListener,
    handler: Arc<Handler>,
    hits: Arc<HitLog>,
    counts: Arc<Connections>,
) {
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            // E.g. too many open files: keep serving the connections already accepted.
            Err(_) => continue,
        };
        counts.accepted.fetch_add(1, Ordering::SeqCst);
        counts.open.fetch_add(1, Ordering::SeqCst);
        let open = OpenConnection(Arc::clone(&counts));
        let (handler, hits) = (Arc::clone(&handler), Arc::clone(&hits));
        let service = hyper::service::service_fn(move |req| {
            let (handler, hits) = (Arc::clone(&handler), Arc::clone(&hits));
            async move { answer(req, &*handler, &hits).await }
        });
        connections.spawn(async move {
            let _open = open;
            // A hangup ends the connection with an error; there is nothing to do about it.
            let io = TokioIo::new(stream);
            let _ = match protocol {
                Protocol::Http1 => {
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await
                }
                Protocol::Http2 => {
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await
                }
            };
        });
        // Reap finished connections so the set does not grow for the whole test.
        while connections.try_join_next().is_some() {}
    }
}

/// The error a hangup returns to hyper, which then drops the connection unanswered.
#[derive(Debug)]
struct HangUp;

impl fmt::Display for HangUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("scripted hangup")
    }
}

impl std::error::Error for HangUp {}

async fn answer(
    request: Request<Incoming>,
    handler: &Handler,
    hits: &HitLog,
) -> Result<Response<Body>, HangUp> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Err(HangUp),
    };
    let id = parts
        .headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let nth = hits.record(&parts.method, &id);
    let hit = Hit {
        id,
        method: parts.method,
        nth,
        headers: parts.headers,
        body,
    };
    match handler(&hit) {
        Reply::Respond(response) => Ok(response),
        Reply::Stall(delay, response) => {
            tokio::time::sleep(delay).await;
            Ok(response)
        }
        Reply::Hangup => Err(HangUp),
    }
}

/// Reads a whole response body (to check what the server sent).
pub async fn body_of(response: Response<Incoming>) -> Bytes {
    response
        .into_body()
        .collect()
        .await
        .expect("a complete response body")
        .to_bytes()
}

/// One HTTP/2 stream as the handler of an [`H2Server`] sees it, before its body is read.
#[derive(Debug)]
pub struct Arrival {
    /// The [`REQUEST_ID`] header ("" when absent).
    pub id: String,
    /// The method.
    pub method: Method,
    /// 1 for the first stream with this id and method, 2 for the second, ...
    pub nth: u32,
}

/// What an [`H2Server`] does with a stream.
#[derive(Clone, Copy, Debug)]
pub enum H2Reply {
    /// Read the body and answer with this status: the request was processed.
    Status(u16),
    /// Reset the stream with `REFUSED_STREAM` without reading it: the request was not processed.
    Refuse,
}

/// What an [`H2Server`] counts.
#[derive(Default)]
struct H2Log {
    arrivals: HitLog,
    handled: HitLog,
    refused: AtomicU32,
    connections: AtomicU32,
}

type H2Handler = dyn Fn(&Arrival) -> H2Reply + Send + Sync;

/// A scripted HTTP/2 server on `127.0.0.1`, stopped (with all its connections) when dropped.
pub struct H2Server {
    addr: SocketAddr,
    log: Arc<H2Log>,
    task: AbortHandle,
}

impl H2Server {
    /// Binds `127.0.0.1:0` and answers every stream as `handler` says.
    pub async fn start(handler: impl Fn(&Arrival) -> H2Reply + Send + Sync + 'static) -> Self {
        Self::serve(handler).await
    }

    async fn serve(handler: impl Fn(&Arrival) -> H2Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let log = Arc::new(H2Log::default());
        let handler: Arc<H2Handler> = Arc::new(handler);
        let task = tokio::spawn(h2_accept_loop(listener, handler, Arc::clone(&log)));
        Self {
            addr,
            log,
            task: task.abort_handle(),
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn uri(&self, path: &str) -> Uri {
        format!("http://{}{path}", self.addr)
            .parse()
            .expect("a valid URI")
    }

    /// How many streams with this method and request id were processed (answered with a status).
    pub fn handled(&self, method: &Method, id: &str) -> u32 {
        self.log.handled.get(method, id)
    }

    /// How many streams were processed in all.
    pub fn total_handled(&self) -> u32 {
        self.log.handled.total()
    }

    /// How many streams were refused with `REFUSED_STREAM`.
    pub fn refused(&self) -> u32 {
        self.log.refused.load(Ordering::SeqCst)
    }

    /// How many connections the server accepted.
    pub fn connections(&self) -> u32 {
        self.log.connections.load(Ordering::SeqCst)
    }
}

impl Drop for H2Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn h2_accept_loop(listener: TcpListener, handler: Arc<H2Handler>, log: Arc<H2Log>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            continue;
        };
        log.connections.fetch_add(1, Ordering::SeqCst);
        let (handler, log) = (Arc::clone(&handler), Arc::clone(&log));
        connections.spawn(async move {
            let Ok(mut connection) = h2::server::handshake(stream).await else {
                return;
            };
            let mut streams = JoinSet::new();
            // `accept` also drives the connection, so it is polled until the connection ends.
            while let Some(Ok((request, respond))) = connection.accept().await {
                let (handler, log) = (Arc::clone(&handler), Arc::clone(&log));
                streams.spawn(answer_h2(request, respond, handler, log));
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn answer_h2(
    request: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    handler: Arc<H2Handler>,
    log: Arc<H2Log>,
) {
    let (parts, mut body) = request.into_parts();
    let id = parts
        .headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let nth = log.arrivals.record(&parts.method, &id);
    let arrival = Arrival {
        id,
        method: parts.method,
        nth,
    };
    match handler(&arrival) {
        H2Reply::Refuse => {
            log.refused.fetch_add(1, Ordering::SeqCst);
            respond.send_reset(h2::Reason::REFUSED_STREAM);
        }
        H2Reply::Status(code) => {
            while let Some(chunk) = body.data().await {
                let Ok(chunk) = chunk else { return };
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            log.handled.record(&arrival.method, &arrival.id);
            let mut response = Response::new(());
            *response.status_mut() = StatusCode::from_u16(code).expect("a valid status code");
            let _ = respond.send_response(response, true);
        }
    }
}
