//! The hedging layer: which requests get a second copy, which copy answers, what a hedge is
//! charged and who may refuse it (in paused time, against scripted services), and a hedge that
//! cancels a stalled request on a real hyper server on `127.0.0.1:0`.

use test_support as support;

mod charges;
mod delay;
mod gates;
mod loopback;
mod winner;

use http::{Request, Response};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{service_fn, Service};

type Reply = Result<Response<String>, std::io::Error>;

/// What a scripted copy does: answer `status` after `after`.
#[derive(Clone, Copy, Debug)]
struct Script {
    status: u16,
    after: Duration,
}

fn answer(status: u16, after_ms: u64) -> Script {
    Script {
        status,
        after: Duration::from_millis(after_ms),
    }
}

/// Copies sent and copies whose future is still alive (not answered, not dropped).
#[derive(Clone, Default)]
struct Calls {
    sent: Arc<AtomicU32>,
    alive: Arc<AtomicU32>,
}

impl Calls {
    fn sent(&self) -> u32 {
        self.sent.load(Ordering::SeqCst)
    }

    fn alive(&self) -> u32 {
        self.alive.load(Ordering::SeqCst)
    }
}

struct Alive(Arc<AtomicU32>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A service whose `n`th call (from 0, over all requests) follows `script(n)`.
fn scripted(
    script: impl Fn(u32) -> Script + Send + Sync + 'static,
) -> (
    impl Service<Request<String>, Response = Response<String>, Error = std::io::Error, Future: Send>
        + Clone
        + Send,
    Calls,
) {
    let calls = Calls::default();
    let counted = calls.clone();
    let script = Arc::new(script);
    let service = service_fn(move |_: Request<String>| {
        let n = counted.sent.fetch_add(1, Ordering::SeqCst);
        counted.alive.fetch_add(1, Ordering::SeqCst);
        let alive = Alive(Arc::clone(&counted.alive));
        let Script { status, after } = script(n);
        async move {
            let _alive = alive;
            tokio::time::sleep(after).await;
            let mut response = Response::new(format!("copy {n}"));
            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
            Reply::Ok(response)
        }
    });
    (service, calls)
}

fn get(path: &str) -> Request<String> {
    Request::get(format!("http://api.internal{path}"))
        .body(String::new())
        .unwrap()
}
