//! The durable path as the demo and the crash test run it: deliveries on SQLite (or Redis, or
//! Postgres), a
//! schedule with hours scaled to fractions of a second, and worker processes that can be
//! killed.

use bytes::Bytes;
use http_body_util::Full;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_http_retry::retry::FailUnsent;
use tower_http_retry::HttpClassifier;
use tower_http_retry_redelivery::signature::{SignLayer, Signer};
use tower_http_retry_redelivery::sqlite::{self, SqliteOptions, SqliteOutbox};
use tower_http_retry_redelivery::{supervise, Delivery, Outbox, Reclaim, Redelivery, Schedule};

/// The client a worker sends through: the schedule's retry layer, the Standard Webhooks signer
/// and a per-attempt timeout over hyper-util.
pub type Client =
    BoxCloneSyncService<http::Request<Bytes>, http::Response<hyper::body::Incoming>, BoxError>;

/// A worker's redelivery on `O`.
pub type Worker<O = SqliteOutbox> = Redelivery<Client, O>;

/// Where a worker's deliveries are: a SQLite file, a Redis server or a Postgres database.
#[derive(Clone, Debug)]
pub enum Engine {
    /// The embedded engine's file.
    Sqlite(PathBuf),
    /// A `redis://` URL (with the `redis` feature).
    Redis(String),
    /// A `postgres://` URL (with the `postgres` feature).
    Postgres(String),
}

impl Engine {
    /// A `redis://` URL is Redis, a `postgres://` one Postgres, anything else a SQLite file's
    /// path.
    pub fn parse(arg: &str) -> Engine {
        if arg.starts_with("redis://") {
            Engine::Redis(arg.to_owned())
        } else if arg.starts_with("postgres://") {
            Engine::Postgres(arg.to_owned())
        } else {
            Engine::Sqlite(PathBuf::from(arg))
        }
    }

    /// The argument [`parse`](Engine::parse) reads back (the worker process's first).
    pub fn arg(&self) -> std::ffi::OsString {
        match self {
            Engine::Sqlite(path) => path.clone().into_os_string(),
            Engine::Redis(url) | Engine::Postgres(url) => url.into(),
        }
    }
}

/// The header that carries the delivery id (the Standard Webhooks one, which the signature
/// covers; the receivers count by it).
pub const ID_HEADER: &str = "webhook-id";

/// The demo's signing secret, shared with its receivers. A made-up one: a sender keeps each
/// endpoint's secret in its secret store, never in a record or a log.
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The delivery id a receiver got.
pub fn delivery_id(headers: &http::HeaderMap) -> String {
    headers
        .get(ID_HEADER)
        .and_then(|id| id.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The three-day schedule with an hour lasting `seconds_per_hour`.
pub fn schedule(seconds_per_hour: f64) -> Schedule {
    Schedule::three_days().scaled(seconds_per_hour / 3600.0)
}

/// The schedule's retry layer over hyper-util's client: each attempt signed with its own
/// timestamp ([`SECRET`]), and cut at the schedule's per-attempt timeout (a receiver that never
/// answers fails its slot, and the delivery moves on).
pub fn client(schedule: &Schedule) -> Client {
    client_over(retry_layer(schedule), schedule)
}

/// The schedule's retry layer, as [`client`] builds it.
pub fn retry_layer(
    schedule: &Schedule,
) -> tower_http_retry::RetryLayer<HttpClassifier, FailUnsent> {
    schedule
        .retry_layer()
        .build()
        .expect("the preset's layer builds")
}

/// [`client`] over `retry` (from [`retry_layer`]): a caller that keeps a clone reads its
/// pacer's state (`RetryLayer::pacing_stats`).
pub fn client_over(
    retry: tower_http_retry::RetryLayer<HttpClassifier, FailUnsent>,
    schedule: &Schedule,
) -> Client {
    let signer = Signer::new(SECRET.parse().expect("the demo's secret parses"));
    let transport =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Full<Bytes>>();
    let stack = ServiceBuilder::new()
        .layer(retry)
        .layer(SignLayer::new(signer))
        .timeout(schedule.attempt_timeout_duration())
        .map_request(|request: http::Request<Bytes>| request.map(Full::new))
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

/// Opens the demo's Redis queues at `url`: a heartbeat of 1 s, as on SQLite.
#[cfg(feature = "redis")]
pub async fn open_redis(url: &str) -> tower_http_retry_redelivery::redis::RedisOutbox {
    let options = tower_http_retry_redelivery::redis::RedisOptions {
        heartbeat: Duration::from_secs(1),
        ..Default::default()
    };
    tower_http_retry_redelivery::redis::open(url, options)
        .await
        .expect("the Redis server answers")
}

/// Opens the demo's Postgres queues at `url`: a heartbeat of 1 s, as on SQLite.
#[cfg(feature = "postgres")]
pub async fn open_postgres(url: &str) -> tower_http_retry_redelivery::postgres::PostgresOutbox {
    let options = tower_http_retry_redelivery::postgres::PostgresOptions {
        heartbeat: Duration::from_secs(1),
        ..Default::default()
    };
    tower_http_retry_redelivery::postgres::open(url, options)
        .await
        .expect("the Postgres server answers")
}

/// Set (to anything) in a worker process's environment, it prints `taken <id> <unix ms> <due
/// unix ms>` when its worker takes a delivery (the step's due time tells a step taken again
/// from the next one), `done <id> <unix ms>` once the delivery is delivered, stored
/// again or dead-lettered (its step written to the engine), and `failed <id> <unix ms>` if that
/// write failed (apalis hands the delivery out again); `run <run name> <unix ms>` when a run
/// starts, its name's earlier runs' deliveries taken back: what the crash test reads to measure
/// what a `kill -9` cost.
pub const REPORT_ENV: &str = "REDELIVERY_WORKER_REPORT";

/// `at` in Unix milliseconds.
pub fn unix_ms(at: SystemTime) -> u128 {
    at.duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

/// An outbox the demo's workers run on. apalis's worker bounds are each backend's own, so the
/// one worker loop is written once (a macro) and implemented for each engine.
pub trait WorkerEngine: Outbox + Reclaim {
    /// Runs the apalis worker `name` on this outbox's queue, handling each delivery with
    /// `redelivery`, until `stop` resolves: [`supervise`] starts each run (the name's earlier
    /// runs' deliveries taken back) and a new one after a run ends before the stop (apalis ends
    /// it on a fetch that fails).
    fn work(
        &self,
        name: &str,
        redelivery: Worker<Self>,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()>;
}

macro_rules! worker_engine {
    ($outbox:ty) => {
        impl WorkerEngine for $outbox {
            async fn work(
                &self,
                name: &str,
                redelivery: Worker<Self>,
                stop: impl Future<Output = ()> + Send + 'static,
            ) {
                let report = std::env::var_os(REPORT_ENV).is_some();
                let supervised = supervise(
                    self,
                    name,
                    |run, stopping| {
                        if report {
                            println!("run {run} {}", unix_ms(SystemTime::now()));
                        }
                        let redelivery = redelivery.clone();
                        // At most `IN_HAND` (10) deliveries in hand: what a `kill -9` leaves to
                        // the engine, and what the pacer holds while an endpoint recovers.
                        let worker = self.worker(run).build(move |delivery: Delivery| {
                            let id = delivery.id().to_owned();
                            if report {
                                let (now, due) = (SystemTime::now(), delivery.due_at());
                                println!("taken {id} {} {}", unix_ms(now), unix_ms(due));
                            }
                            let handled = redelivery.handle(delivery);
                            async move {
                                let handled = handled.await;
                                if report {
                                    let outcome = if handled.is_ok() { "done" } else { "failed" };
                                    println!("{outcome} {id} {}", unix_ms(SystemTime::now()));
                                }
                                handled
                            }
                        });
                        worker.run_until(stopping)
                    },
                    // Said, not swallowed; a new run follows after a pause.
                    |ended| eprintln!("{ended}"),
                    stop,
                );
                supervised.await.expect("a worker's name");
            }
        }
    };
}

worker_engine!(SqliteOutbox);
#[cfg(feature = "redis")]
worker_engine!(tower_http_retry_redelivery::redis::RedisOutbox);
#[cfg(feature = "postgres")]
worker_engine!(tower_http_retry_redelivery::postgres::PostgresOutbox);

/// Runs one worker named `name` on `engine` until its standard input closes (or the process
/// is killed): what `redelivery-worker` does.
pub fn run_worker(engine: &Engine, name: &str, seconds_per_hour: f64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        match engine {
            Engine::Sqlite(database) => serve(open(database).await, name, seconds_per_hour).await,
            #[cfg(feature = "redis")]
            Engine::Redis(url) => serve(open_redis(url).await, name, seconds_per_hour).await,
            #[cfg(not(feature = "redis"))]
            Engine::Redis(_) => panic!("redelivery-worker: built without the `redis` feature"),
            #[cfg(feature = "postgres")]
            Engine::Postgres(url) => serve(open_postgres(url).await, name, seconds_per_hour).await,
            #[cfg(not(feature = "postgres"))]
            Engine::Postgres(_) => {
                panic!("redelivery-worker: built without the `postgres` feature")
            }
        }
    });
}

/// The worker `name`, as a supervisor restarts it: its earlier runs' deliveries taken back at
/// once, each run registered under a name of its own.
async fn serve<O: WorkerEngine>(outbox: O, name: &str, seconds_per_hour: f64) {
    let schedule = schedule(seconds_per_hour);
    let redelivery: Worker<O> = Redelivery::new(client(&schedule), outbox.clone(), schedule);
    outbox.work(name, redelivery, stdin_closed()).await;
}

/// Resolves when the parent closes our standard input (or dies).
async fn stdin_closed() {
    let _ = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)
    })
    .await;
}
