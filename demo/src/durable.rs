//! The durable path as the demo and the crash test run it: deliveries on SQLite, a schedule
//! with hours scaled to fractions of a second, and worker processes that can be killed.

use bytes::Bytes;
use http_body_util::Full;
use std::path::Path;
use std::time::Duration;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_http_retry_redelivery::sqlite::{self, SqliteOptions, SqliteOutbox};
use tower_http_retry_redelivery::{Delivery, Redelivery, Schedule};

/// The client a worker sends through: the schedule's retry layer over hyper-util.
pub type Client = BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<hyper::body::Incoming>,
    BoxError,
>;

/// A worker's redelivery.
pub type Worker = Redelivery<Client, SqliteOutbox, Full<Bytes>>;

/// The header that carries the delivery id in the demo (the receivers count by it).
pub const ID_HEADER: &str = "x-request-id";

/// The three-day schedule with an hour lasting `seconds_per_hour`.
pub fn schedule(seconds_per_hour: f64) -> Schedule {
    Schedule::three_days().scaled(seconds_per_hour / 3600.0)
}

/// The schedule's retry layer over hyper-util's client.
pub fn client(schedule: &Schedule) -> Client {
    let retry = schedule
        .retry_layer()
        .build()
        .expect("the preset's layer builds");
    let transport =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Full<Bytes>>();
    let stack = ServiceBuilder::new()
        .layer(retry)
        .map_err(BoxError::from)
        .service(transport);
    BoxCloneSyncService::new(stack.map_err(BoxError::from))
}

/// Opens the demo's SQLite file: a heartbeat of 1 s, so a killed worker's deliveries are handed
/// out again after about 2 s.
pub async fn open(database: &Path) -> SqliteOutbox {
    let options = SqliteOptions {
        heartbeat: Duration::from_secs(1),
        ..SqliteOptions::default()
    };
    sqlite::open(database, options)
        .await
        .expect("the SQLite file opens")
}

/// Runs one worker named `name` on `database` until its standard input closes (or the process
/// is killed): what `redelivery-worker` does.
pub fn run_worker(database: &Path, name: &str, seconds_per_hour: f64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let outbox = open(database).await;
        let schedule = schedule(seconds_per_hour);
        let redelivery: Worker = Redelivery::new(client(&schedule), outbox.clone(), schedule);
        let worker = apalis_core::worker::builder::WorkerBuilder::new(name)
            .backend(outbox.queue().clone())
            .build(move |delivery: Delivery| redelivery.handle(delivery));
        let stdin_closed = async {
            // The parent holds our stdin: when it closes it (or dies), stop.
            let _ = tokio::task::spawn_blocking(|| {
                let mut sink = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)
            })
            .await;
            Ok::<(), std::io::Error>(())
        };
        let _ = worker.run_until(stdin_closed).await;
    });
}
