//! An HTTP/2 server written frame by frame, for a `GOAWAY` with a chosen last stream id.
//!
//! The `h2` crate's server always names the last stream it received, and its graceful shutdown
//! first announces the largest stream id and waits a round trip, so the client never loses a
//! stream to it. Servers that send one `GOAWAY` naming the last stream they will process (what
//! a connection limit such as nginx's `keepalive_requests` does) cut the streams the client sent
//! meanwhile; this server does that on purpose. Requests are told apart by their bodies: it
//! decodes no HPACK, and answers every request it processes with `:status: 200` and no body.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::Uri;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};

/// When a connection sends its `GOAWAY`.
#[derive(Clone, Copy, Debug)]
pub enum Rotation {
    /// On the first connection only: once `burst` requests have arrived whole, process the
    /// `covered` ones with the lowest stream ids and send a `GOAWAY` naming the highest of them.
    /// Later connections process every request.
    FirstCoversLowest { burst: usize, covered: usize },
    /// On every connection: process each request as it arrives whole, and once `after` have,
    /// send a `GOAWAY` naming the highest stream received so far (and process those up to it).
    EachCoversReceived { after: usize },
}

/// The server; stopped (with its connections) when dropped.
pub struct GoAwayServer {
    addr: SocketAddr,
    log: Arc<Log>,
    task: AbortHandle,
}

#[derive(Default)]
struct Log {
    /// Bodies processed, with how many times each was.
    handled: Mutex<HashMap<Bytes, u32>>,
    connections: Mutex<u32>,
    goaways: Mutex<u32>,
}

/// A connection with requests arrived but fewer than a rotation waits for processes them after
/// this long without a frame (the last requests of a test).
const IDLE: Duration = Duration::from_millis(200);

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
/// HPACK, static table entry 8: `:status: 200`.
const STATUS_200: u8 = 0x88;

impl GoAwayServer {
    pub async fn start(rotation: Rotation) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("a bound listener's address");
        let log = Arc::new(Log::default());
        let shared = Arc::clone(&log);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((socket, _)) = listener.accept().await {
                let nth = {
                    let mut count = shared.connections.lock().unwrap();
                    *count += 1;
                    *count
                };
                let rotation = match rotation {
                    Rotation::FirstCoversLowest { .. } if nth > 1 => None,
                    rotation => Some(rotation),
                };
                let connection = Connection {
                    socket,
                    rotation,
                    log: Arc::clone(&shared),
                    bodies: HashMap::new(),
                    complete: Vec::new(),
                    arrived: 0,
                    last: None,
                };
                connections.spawn(connection.serve());
                while connections.try_join_next().is_some() {}
            }
        });
        Self {
            addr,
            log,
            task: task.abort_handle(),
        }
    }

    pub fn uri(&self, path: &str) -> Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    /// Bodies processed, with how many times each was.
    pub fn handled(&self) -> HashMap<Bytes, u32> {
        self.log.handled.lock().unwrap().clone()
    }

    pub fn connections(&self) -> u32 {
        *self.log.connections.lock().unwrap()
    }

    pub fn goaways(&self) -> u32 {
        *self.log.goaways.lock().unwrap()
    }
}

impl Drop for GoAwayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Connection {
    socket: TcpStream,
    rotation: Option<Rotation>,
    log: Arc<Log>,
    /// The body so far of every stream received and not processed.
    bodies: HashMap<u32, BytesMut>,
    /// Streams arrived whole and not processed.
    complete: Vec<u32>,
    /// Streams arrived whole on this connection.
    arrived: usize,
    /// The last stream id of the `GOAWAY`, once sent.
    last: Option<u32>,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::with_capacity(9 + payload.len());
    let len = u32::try_from(payload.len()).unwrap();
    out.put_slice(&len.to_be_bytes()[1..]);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
    out.put_slice(payload);
    out.to_vec()
}

impl Connection {
    /// Serves until the client closes the connection (after a `GOAWAY`, once its streams are
    /// done, hyper's client does).
    async fn serve(mut self) -> io::Result<()> {
        let mut preface = [0; 24];
        self.socket.read_exact(&mut preface).await?;
        self.socket.write_all(&frame(SETTINGS, 0, 0, &[])).await?;
        loop {
            let mut head = [0; 9];
            match tokio::time::timeout(IDLE, self.socket.read_exact(&mut head)).await {
                Ok(Ok(_)) => {}
                Ok(Err(_closed)) => return Ok(()),
                Err(_idle) => {
                    self.process_complete().await?;
                    continue;
                }
            }
            let len = usize::try_from(u32::from_be_bytes([0, head[0], head[1], head[2]])).unwrap();
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0; len];
            self.socket.read_exact(&mut payload).await?;
            let mut payload = Bytes::from(payload);
            if self.last.is_some_and(|last| stream > last) {
                continue; // refused by the GOAWAY
            }
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    self.socket.write_all(&frame(SETTINGS, ACK, 0, &[])).await?;
                }
                PING if flags & ACK == 0 => {
                    self.socket
                        .write_all(&frame(PING, ACK, 0, &payload))
                        .await?;
                }
                HEADERS => {
                    self.bodies.entry(stream).or_default();
                }
                DATA => {
                    if flags & PADDED != 0 {
                        let pad = usize::from(payload.get_u8());
                        payload.truncate(payload.len() - pad);
                    }
                    self.bodies.entry(stream).or_default().put_slice(&payload);
                }
                _ => {}
            }
            if matches!(kind, HEADERS | DATA) && flags & END_STREAM != 0 {
                self.complete.push(stream);
                self.arrived += 1;
            }
            self.step().await?;
        }
    }

    async fn step(&mut self) -> io::Result<()> {
        match (self.rotation, self.last) {
            (Some(Rotation::FirstCoversLowest { burst, covered }), None) => {
                if self.complete.len() == burst {
                    self.complete.sort_unstable();
                    self.complete.truncate(covered);
                    self.go_away(self.complete[covered - 1]).await?;
                    self.process_complete().await?;
                }
            }
            (Some(Rotation::EachCoversReceived { after }), None) => {
                if self.arrived >= after {
                    let received = self.bodies.keys().chain(&self.complete).copied().max();
                    self.go_away(received.expect("streams arrived")).await?;
                }
                self.process_complete().await?;
            }
            // Not rotating, or rotating already: every stream that may be processed is.
            _ => self.process_complete().await?,
        }
        Ok(())
    }

    async fn go_away(&mut self, last: u32) -> io::Result<()> {
        let mut payload = BytesMut::new();
        payload.put_u32(last);
        payload.put_u32(0); // NO_ERROR
        self.socket
            .write_all(&frame(GOAWAY, 0, 0, &payload))
            .await?;
        self.last = Some(last);
        *self.log.goaways.lock().unwrap() += 1;
        Ok(())
    }

    /// Processes and answers every stream arrived whole.
    async fn process_complete(&mut self) -> io::Result<()> {
        for stream in std::mem::take(&mut self.complete) {
            let body = self.bodies.remove(&stream).unwrap_or_default().freeze();
            *self.log.handled.lock().unwrap().entry(body).or_insert(0) += 1;
            let status = frame(HEADERS, END_HEADERS | END_STREAM, stream, &[STATUS_200]);
            self.socket.write_all(&status).await?;
        }
        Ok(())
    }
}
