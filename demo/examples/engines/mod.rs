//! What the durable benches share: each engine opened on a server of the run's own (SQLite in a
//! temporary file, `redis-server` and Postgres from Debian on loopback), and workers on threads
//! of this process.

use demo::durable::{Worker, WorkerEngine};
use std::future::Future;
use std::time::{Duration, Instant};
use tower_http_retry_redelivery::Outbox;

/// The engine named by the program's first argument (`redis`, `postgres`; anything else is
/// SQLite), opened with `batch_size`, handed to `run`. Its server lives as long as `run`.
pub async fn on_engine<F, T>(batch_size: usize, run: F) -> T
where
    F: EngineRun<Output = T>,
{
    match std::env::args().nth(1).as_deref() {
        Some("redis") => on_redis(batch_size, run).await,
        Some("postgres") => on_postgres(batch_size, run).await,
        _ => on_sqlite(batch_size, run).await,
    }
}

/// What a bench does on an open engine (a trait, not a closure: it is generic over the
/// outbox's type).
pub trait EngineRun {
    type Output;
    fn run<O: WorkerEngine>(self, outbox: O) -> impl Future<Output = Self::Output>;
}

async fn on_sqlite<F: EngineRun>(batch_size: usize, run: F) -> F::Output {
    use tower_http_retry_redelivery::sqlite::{self, SqliteOptions};
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "durable-bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The process's connections to the file: `SQLITE_CONNECTIONS` (default: the crate's).
    let defaults = SqliteOptions::default();
    let max_connections = std::env::var("SQLITE_CONNECTIONS")
        .map(|n| n.parse().expect("SQLITE_CONNECTIONS: a number"))
        .unwrap_or(defaults.max_connections);
    let options = SqliteOptions {
        batch_size,
        max_connections,
        ..defaults
    };
    let outbox = sqlite::open(dir.join("deliveries.db"), options)
        .await
        .unwrap();
    let output = run.run(outbox).await;
    let _ = std::fs::remove_dir_all(&dir);
    output
}

#[cfg(feature = "redis")]
async fn on_redis<F: EngineRun>(batch_size: usize, run: F) -> F::Output {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::redis::{self, RedisOptions};
    let binary =
        servers::locate(servers::REDIS).expect("redis-server: apt-get install redis-server");
    let port = servers::free_port();
    let _server = Server::redis(&binary, port);
    let options = RedisOptions {
        batch_size,
        ..RedisOptions::default()
    };
    let outbox = redis::open(&format!("redis://127.0.0.1:{port}/"), options)
        .await
        .unwrap();
    run.run(outbox).await
}

#[cfg(not(feature = "redis"))]
async fn on_redis<F: EngineRun>(_: usize, _: F) -> F::Output {
    panic!("built without the `redis` feature: add `--features redis`")
}

#[cfg(feature = "postgres")]
async fn on_postgres<F: EngineRun>(batch_size: usize, run: F) -> F::Output {
    use test_support::servers::{self, Server};
    use tower_http_retry_redelivery::postgres::{self, PostgresOptions};
    let binary = servers::locate(servers::POSTGRES).expect("postgres: apt-get install postgresql");
    let port = servers::free_port();
    let _server = Server::postgres(&binary, port);
    let options = PostgresOptions {
        batch_size,
        ..PostgresOptions::default()
    };
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let outbox = postgres::open(&url, options).await.unwrap();
    run.run(outbox).await
}

#[cfg(not(feature = "postgres"))]
async fn on_postgres<F: EngineRun>(_: usize, _: F) -> F::Output {
    panic!("built without the `postgres` feature: add `--features postgres`")
}

/// Workers on threads of their own (apalis's worker future is not `Send`), one per redelivery
/// handle, stopped (and joined) by [`stop`](Workers::stop).
pub struct Workers {
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    pub fn start<O: WorkerEngine>(outbox: &O, redeliveries: &[Worker<O>]) -> Workers {
        let mut workers = Workers {
            stops: Vec::new(),
            threads: Vec::new(),
        };
        for (n, redelivery) in redeliveries.iter().enumerate() {
            let (outbox, redelivery) = (outbox.clone(), redelivery.clone());
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            workers.stops.push(stop);
            workers.threads.push(std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let stopped = async move {
                    let _ = stopped.await;
                };
                runtime.block_on(outbox.work(&format!("bench-{n}"), redelivery, stopped));
            }));
        }
        workers
    }

    pub fn stop(self) {
        drop(self.stops);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// The engine's own ceiling for one write, through the crate's own connection to it: single-row
/// writes a second (each its own commit on SQLite and Postgres, one script call on Redis: the
/// endpoint health's compare-and-swap, an insert then a delete of a row), from `writers`
/// concurrent writers of this process for 2 s. A delivery costs at least one such write (its
/// lock and acknowledgement, which apalis batches), so deliveries a second are compared to it.
// `durable_drain` shares this module and does not measure it.
#[allow(dead_code)]
pub async fn write_ceiling<O: Outbox>(outbox: &O, writers: usize) -> f64 {
    const FOR: Duration = Duration::from_secs(2);
    let store = outbox
        .health_store()
        .expect("the engines keep a health store");
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("http://ceiling-{writer}");
                let mut writes = 0u64;
                while start.elapsed() < FOR {
                    assert!(store.swap(&key, None, Some("x")).await.unwrap());
                    assert!(store.swap(&key, Some("x"), None).await.unwrap());
                    writes += 2;
                }
                writes
            })
        })
        .collect();
    let mut writes = 0;
    for task in tasks {
        writes += task.await.unwrap();
    }
    writes as f64 / start.elapsed().as_secs_f64()
}
