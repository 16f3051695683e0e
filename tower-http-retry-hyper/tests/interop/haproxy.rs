//! HAProxy in front of the test's upstream, closing idle client connections after 50 ms: a second
//! implementation of the rotation signals (a `GOAWAY` over h2c, a closed socket over HTTP/1.1).
//! Its access log (per request id and attempt) arrives on a UDP socket of the test's; the
//! upstream keeps what it applied.

use crate::attempts::assert_no_post_resent_after_applied;
use crate::servers::{self, Server, HAPROXY};
use crate::upstream::Upstream;
use crate::{
    burst, h1_client, h2_client, retried, retried_rotation_safe, rotation_failed_nothing,
    rotation_safe_h2_client, tally, undelivered, AppliedAttempts, Attempts, Ended,
};
use http::{Method, Uri};
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tower_http_retry::RetryLayer;
use tower_http_retry_hyper::StreamSlotsLayer;

const TEMPLATE: &str = include_str!("conf/haproxy.cfg");

/// The config's `tune.h2.max-concurrent-streams`.
const MAX_STREAMS: u32 = 4;
const WAVES: usize = 15;
const PER_WAVE: usize = 40;

/// HAProxy's access log: the lines it sends to a UDP socket on loopback (a syslog target; a
/// datagram per line), collected by a thread until dropped.
struct LogSocket {
    port: u16,
    lines: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LogSocket {
    fn bind() -> LogSocket {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the log socket");
        let port = socket.local_addr().expect("a bound socket").port();
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("a read timeout");
        let lines: Arc<Mutex<String>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (collected, stopping) = (Arc::clone(&lines), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut buffer = vec![0; 64 * 1024];
            while !stopping.load(Ordering::Relaxed) {
                if let Ok(n) = socket.recv(&mut buffer) {
                    let line = String::from_utf8_lossy(&buffer[..n]);
                    let mut lines = collected.lock().unwrap_or_else(PoisonError::into_inner);
                    lines.push_str(line.trim_end());
                    lines.push('\n');
                }
            }
        });
        LogSocket {
            port,
            lines,
            stop,
            thread: Some(thread),
        }
    }

    fn text(&self) -> String {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for LogSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// HAProxy before a fresh upstream, its log socket, and the URIs of its h2c and HTTP/1.1
/// frontends.
struct Proxy {
    upstream: Upstream,
    log: LogSocket,
    _server: Server,
    h2: Uri,
    h1: Uri,
}

async fn start(test: &str) -> Option<Proxy> {
    let haproxy = servers::require(HAPROXY, test)?;
    let upstream = Upstream::start().await;
    let log = LogSocket::bind();
    let (h2_port, h1_port) = (servers::free_port(), servers::free_port());
    let vars = BTreeMap::from([
        ("H2_PORT", h2_port.to_string()),
        ("H1_PORT", h1_port.to_string()),
        ("UPSTREAM", upstream.port.to_string()),
        ("LOG_PORT", log.port.to_string()),
    ]);
    let server = Server::haproxy(&haproxy, TEMPLATE, vars, &[h2_port, h1_port]);
    let uri = |port: u16| format!("http://127.0.0.1:{port}/").parse().expect("a URI");
    Some(Proxy {
        upstream,
        log,
        _server: server,
        h2: uri(h2_port),
        h1: uri(h1_port),
    })
}

/// Sends waves of GETs and unkeyed POSTs, pausing around HAProxy's 50 ms keep-alive timeout
/// between them.
async fn waves<S, B>(service: S, uri: &Uri, label: &str) -> Vec<Ended>
where
    S: tower::Service<
            http::Request<crate::Body>,
            Response = http::Response<B>,
            Error = tower::BoxError,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Send,
{
    let mut all = Vec::new();
    for wave in 0..WAVES {
        let requests: Vec<_> = (0..PER_WAVE)
            .map(|i| {
                let method = if i % 2 == 0 {
                    Method::GET
                } else {
                    Method::POST
                };
                (method, format!("{label}-{wave}-{i}"))
            })
            .collect();
        all.extend(burst(service.clone(), uri, requests, PER_WAVE).await);
        let pause = 40 + (wave as u64 * 7) % 25;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    all
}

/// What the upstream applied and HAProxy logged for `ended`, printed; no POST was sent again
/// after an attempt either of them saw applied.
async fn check(proxy: &Proxy, name: &str, ended: &[Ended], attempts: &Attempts) -> AppliedAttempts {
    // The proxy answers once the upstream did, and logs just after.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let applied = proxy.upstream.applied();
    let upstream = proxy.upstream.applied_attempts();
    let logged = AppliedAttempts::from_access_log(&proxy.log.text(), 200);
    let ids: Vec<String> = ended.iter().map(|e| e.id.clone()).collect();
    let failed = undelivered(ended);
    eprintln!(
        "[HAProxy {name}] delivered {}/{}; upstream: {}; applied twice: {:?}; HAProxy's log: {} \
         ids answered 200; failed attempts by reason: {:?}; {}; failed: {:?}",
        ended.len() - failed.len(),
        ended.len(),
        applied.summary(&ids),
        applied.twice(&ids),
        ids.iter().filter(|id| logged.0.contains_key(*id)).count(),
        attempts.errors(),
        tally(ended),
        failed,
    );
    assert_no_post_resent_after_applied(ended, attempts, &upstream);
    assert_no_post_resent_after_applied(ended, attempts, &logged);
    upstream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_closing_idle_connections_fails_no_request_on_a_rotation_signal() {
    let Some(proxy) = start("HAProxy keep-alive closes").await else {
        return;
    };
    let layer = RetryLayer::builder().max_attempts(3).build().unwrap();

    let h2_attempts = Attempts::default();
    let over_h2 = waves(retried(&layer, h2_client(), &h2_attempts), &proxy.h2, "h2").await;
    let h1_attempts = Attempts::default();
    let h1 = retried(&layer, h1_client(Duration::from_secs(30)), &h1_attempts);
    let over_h1 = waves(h1, &proxy.h1, "h1").await;

    for (name, ended, attempts) in [
        ("h2c", &over_h2, &h2_attempts),
        ("HTTP/1.1", &over_h1, &h1_attempts),
    ] {
        check(&proxy, name, ended, attempts).await;
        let ids: Vec<String> = ended.iter().map(|e| e.id.clone()).collect();
        rotation_failed_nothing(ended, &proxy.upstream.applied().twice(&ids));
    }
}

/// The rotation-safe stack through a second implementation: every `GOAWAY` is proof (none is a
/// rotation without it), so no request fails on one, and none is applied twice. (HAProxy closes an
/// idle connection right after its `GOAWAY`; a request written just then meets a reset or a
/// broken pipe, ambiguous by its type, so a POST can still fail, unapplied, on that.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rotation_safe_stack_through_haproxy_fails_no_request_on_a_goaway() {
    let Some(proxy) = start("HAProxy keep-alive closes, rotation-safe").await else {
        return;
    };
    let layer = RetryLayer::builder().max_attempts(3).build().unwrap();
    let attempts = Attempts::default();
    let slots = StreamSlotsLayer::new(MAX_STREAMS).unwrap();
    let service = retried_rotation_safe(&layer, rotation_safe_h2_client(), &slots, &attempts);

    let ended = waves(service, &proxy.h2, "safe").await;

    let upstream = check(&proxy, "h2c, rotation-safe", &ended, &attempts).await;
    let stats = layer.stats();
    eprintln!(
        "[HAProxy h2c, rotation-safe] {} rotation resends, {} unproven rotations",
        stats.rotation_resends, stats.unproven_rotations
    );
    assert_eq!(stats.unproven_rotations, 0, "every GOAWAY is proof");
    let ids: Vec<String> = ended.iter().map(|e| e.id.clone()).collect();
    rotation_failed_nothing(&ended, &proxy.upstream.applied().twice(&ids));
    let twice: Vec<_> = upstream
        .not_once(&ended)
        .into_iter()
        .filter(|(_, times)| *times > 1)
        .collect();
    let posts_twice: Vec<_> = twice
        .iter()
        .filter(|(id, _)| {
            ended
                .iter()
                .any(|e| e.id == *id && e.method == Method::POST)
        })
        .collect();
    assert!(posts_twice.is_empty(), "{posts_twice:?}");
}
