//! The application behind a proxy: a small hyper HTTP/1.1 server on `127.0.0.1:0` that applies
//! each request (counts its `x-request-id`, and which attempt it was: `x-attempt`) and answers
//! 200.

use crate::attempts::{AppliedAttempts, ATTEMPT};
use crate::servers::Applied;
use crate::REQUEST_ID;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// Stopped, with its connections, when dropped.
pub struct Upstream {
    pub port: u16,
    applied: Arc<Mutex<Applied>>,
    attempts: Arc<Mutex<AppliedAttempts>>,
    task: tokio::task::AbortHandle,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("bound").port();
        let applied = Arc::new(Mutex::new(Applied::default()));
        let attempts = Arc::new(Mutex::new(AppliedAttempts::default()));
        let log = Arc::clone(&applied);
        let attempt_log = Arc::clone(&attempts);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let log = Arc::clone(&log);
                let attempt_log = Arc::clone(&attempt_log);
                connections.spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let log = Arc::clone(&log);
                        let attempt_log = Arc::clone(&attempt_log);
                        async move {
                            let header = |name: &str| {
                                request
                                    .headers()
                                    .get(name)
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("")
                                    .to_owned()
                            };
                            let (id, attempt) = (header(REQUEST_ID), header(ATTEMPT));
                            // Applied once the whole request arrived.
                            let _ = request.into_body().collect().await;
                            let mut applied = log.lock().unwrap_or_else(PoisonError::into_inner);
                            *applied.per_id.entry(id.clone()).or_default() += 1;
                            *applied.statuses.entry(200).or_default() += 1;
                            if let Ok(attempt) = attempt.parse() {
                                attempt_log
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .record(&id, attempt);
                            }
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                                b"applied\n",
                            ))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Upstream {
            port,
            applied,
            attempts,
            task: task.abort_handle(),
        }
    }

    /// What it applied so far.
    pub fn applied(&self) -> Applied {
        let applied = self.applied.lock().unwrap_or_else(PoisonError::into_inner);
        Applied {
            per_id: applied.per_id.clone(),
            statuses: applied.statuses.clone(),
        }
    }
}

impl Upstream {
    /// Which attempts of each id it applied so far.
    pub fn applied_attempts(&self) -> AppliedAttempts {
        let attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        AppliedAttempts(attempts.0.clone())
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
