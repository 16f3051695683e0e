//! [`ApalisOutbox`]: the [`Outbox`] on apalis 1.0, over any durable backend that implements
//! apalis's `TaskSink` (apalis-sqlite, apalis-redis and apalis-postgres are the ones this crate
//! builds and tests), and its [`DeadLetterQueue`], read and replayed.
//!
//! A delivery is a task due at its [`due_at`](Delivery::due_at) rounded **up** to the engine's
//! whole second (apalis stores `run_at` in seconds), so no engine hands one out early (one due
//! already is stored due at once); its
//! idempotency key is its [`step_key`](Delivery::step_key), so a step stored twice (a worker
//! killed between storing the next step and its task's acknowledgement) is kept once. The dead
//! letters wait, in a queue no worker takes, to be read and replayed.

use crate::health::HealthStore;
use crate::outbox::Outbox;
use crate::record::Delivery;
use crate::step::DeadLetter;
use apalis_core::backend::ext::poll_strategy::{IntervalStrategy, PollWith};
use apalis_core::backend::finalize::Durable;
use apalis_core::backend::TaskSink;
use apalis_core::backend::{Backend, BackendConfig};
use apalis_core::layers::{Identity, Stack};
use apalis_core::task::builder::TaskBuilder;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_core::worker::context::WorkerContext;
use std::fmt;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower::limit::ConcurrencyLimitLayer;

mod dead;

#[cfg(feature = "sqlite")]
pub(crate) use dead::list_queue;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use dead::push_to_queue;
pub use dead::{dead_letters, replay, DeadLetterQueue};

/// An engine's queue as workers take from it: woken every `poll_interval` while idle.
///
/// apalis 1.0's SQLite, Redis and Postgres workers look for due tasks again, after a fetch that
/// found none, only at their next heartbeat (30 s by default). Deliveries are due at whole
/// seconds, so a fetch a moment early found nothing and a due delivery then waited for the
/// heartbeat: on Redis, 5,000 deliveries went at 164 a second, one heartbeat's worth, whatever
/// the workers. Woken every 100 ms (and, on Redis, due deliveries moved to the queue by the
/// outbox), the same runs delivered 10,629 to 14,909 a second.
pub type Polled<Q> = PollWith<Q, IntervalStrategy>;

/// `queue`, its idle workers woken every `interval`.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
pub(crate) fn polled<Q>(queue: Q, interval: Duration) -> Polled<Q> {
    PollWith::new(queue, IntervalStrategy::new(interval))
}

/// How often an idle worker looks for due deliveries, by default (every engine's options).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The outbox on an apalis backend: `queue` for deliveries, `dead` for dead letters.
#[derive(Clone, Debug)]
pub struct ApalisOutbox<Q, D> {
    queue: Q,
    /// The same queue on connections of its own, for stores, if apart from the workers'.
    stores: Option<Q>,
    dead: D,
}

impl<Q, D> ApalisOutbox<Q, D> {
    /// Deliveries in `queue`, dead letters in `dead`.
    pub fn new(queue: Q, dead: D) -> Self {
        Self {
            queue,
            stores: None,
            dead,
        }
    }

    /// Stores deliveries (new ones, and the next step of each) through `stores`, the same
    /// queue of the same engine on connections of its own, while the workers take them through
    /// [`queue`](Self::queue). A worker's handler then never waits for a connection its worker
    /// holds, so the workers can write on few connections: on SQLite, one (see
    /// [`sqlite::outbox`](crate::sqlite::outbox)).
    pub fn storing_through(mut self, stores: Q) -> Self {
        self.stores = Some(stores);
        self
    }

    /// The deliveries' queue: give it to the workers' `WorkerBuilder::backend`.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The dead letters' queue.
    pub fn dead(&self) -> &D {
        &self.dead
    }

    /// A worker of the deliveries, registered as `run` (a name [`start_run`] gave), handling at
    /// most [`IN_HAND`] deliveries at once (tower's `ConcurrencyLimitLayer`: apalis fetches no
    /// more while they are handled, so the worker holds at most that plus one fetched batch):
    /// what a `kill -9` gives back to the engine, and what the pacer holds in memory while an
    /// endpoint recovers. Add layers if you wish, then `build` it with the handler, and run it
    /// (under [`supervise`](crate::supervise), so that a run the engine ends is followed by
    /// another):
    ///
    /// ```rust,no_run
    /// # #[cfg(feature = "sqlite")]
    /// # async fn run(
    /// #     outbox: tower_http_retry_redelivery::sqlite::SqliteOutbox,
    /// #     redelivery: tower_http_retry_redelivery::Redelivery<
    /// #         tower::util::BoxCloneSyncService<http::Request<bytes::Bytes>, http::Response<()>, tower::BoxError>,
    /// #         tower_http_retry_redelivery::sqlite::SqliteOutbox,
    /// #     >,
    /// # ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use tower_http_retry_redelivery::start_run;
    ///
    /// let worker = outbox
    ///     .worker(start_run(&outbox, "worker-1").await?)
    ///     .build(move |delivery| {
    ///         let redelivery = redelivery.clone();
    ///         async move { redelivery.handle(delivery).await }
    ///     });
    /// // Ends at the first fetch that fails: `supervise` starts another run then.
    /// worker.run().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Without the bound, an apalis worker takes the next batch as soon as the last is handed
    /// out: one process held 199 taken deliveries, and 5,178 with 5,000 due to a dead endpoint.
    pub fn worker(
        &self,
        run: impl Into<WorkerContext>,
    ) -> WorkerBuilder<Delivery, Q, Stack<ConcurrencyLimitLayer, Identity>>
    where
        Q: Backend + BackendConfig<Args = Delivery> + Clone,
    {
        let in_hand = NonZeroUsize::new(IN_HAND).expect("IN_HAND is not zero");
        self.worker_holding(run, in_hand)
    }

    /// [`worker`](Self::worker), handling at most `in_hand` deliveries at once.
    pub fn worker_holding(
        &self,
        run: impl Into<WorkerContext>,
        in_hand: NonZeroUsize,
    ) -> WorkerBuilder<Delivery, Q, Stack<ConcurrencyLimitLayer, Identity>>
    where
        Q: Backend + BackendConfig<Args = Delivery> + Clone,
    {
        WorkerBuilder::new(run)
            .backend(self.queue.clone())
            .layer(ConcurrencyLimitLayer::new(in_hand.get()))
    }
}

/// The deliveries a worker of [`ApalisOutbox::worker`] handles at once: one fetch's batch at
/// the engines' default `batch_size` (a worker with a larger batch:
/// [`ApalisOutbox::worker_holding`]).
pub const IN_HAND: usize = 10;

/// The engine failed to store or read a delivery.
#[derive(Debug)]
pub struct EngineError(Box<dyn std::error::Error + Send + Sync>);

impl EngineError {
    pub(crate) fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job queue: {}", self.0)
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// An engine that can hand out again what earlier runs of a worker name had taken: what lets a
/// worker restart under a fixed name (a supervisor's, a StatefulSet's pod name) at once after a
/// `kill -9`.
///
/// The engines refuse a second worker of a name whose last heartbeat is recent (apalis-sqlite
/// with `WORKER_ALREADY_EXISTS`, apalis-redis with "worker is still active"), and hand out a dead
/// worker's deliveries only once its heartbeats are missed. [`start_run`] does both parts for
/// the user: each run registers under a name of its own, and takes its predecessors' deliveries
/// back before it starts.
pub trait Reclaim {
    /// Hands out again the deliveries that runs of the worker `name` (its earlier runs, named
    /// as [`start_run`] names them, or a worker registered under `name` itself) had taken and
    /// not finished; returns how many. Call it only while no run of `name` is alive: a live
    /// run's deliveries would be sent twice (the receiver deduplicates them, but the load is
    /// real).
    fn reclaim(&self, name: &str) -> impl Future<Output = Result<u64, EngineError>> + Send;
}

/// Starts a run of the worker `name`: takes back what its earlier runs had taken and not
/// finished ([`Reclaim::reclaim`]), and returns the name this run registers under with the
/// engine, `name~<run id>`. Give that to apalis's `WorkerBuilder::new`. One process at a time
/// runs a name, as a supervisor restarting it guarantees; a name is not empty and holds no `~`.
///
/// ```no_run
/// # async fn run() -> Result<(), tower_http_retry_redelivery::EngineError> {
/// use tower_http_retry_redelivery::{sqlite, start_run};
///
/// let outbox = sqlite::open("deliveries.db", sqlite::SqliteOptions::default()).await?;
/// let name = start_run(&outbox, "worker-1").await?; // "worker-1~..."
/// # let _ = name;
/// # Ok(())
/// # }
/// ```
pub async fn start_run<O: Reclaim>(outbox: &O, name: &str) -> Result<String, EngineError> {
    check_name(name)?;
    outbox.reclaim(name).await?;
    Ok(run_name(name, SystemTime::now()))
}

/// Refuses a name that cannot be a worker's: empty, or holding the separator, which would take
/// the runs of another name as its own.
pub(crate) fn check_name(name: &str) -> Result<(), EngineError> {
    if name.is_empty() || name.contains(RUN_SEPARATOR) {
        return Err(EngineError::new(format!(
            "worker name {name:?} is empty or holds {RUN_SEPARATOR:?}"
        )));
    }
    Ok(())
}

/// A time as the engine's whole second, rounded up as every store's due time is: the bounds of
/// a move in bulk ([`DeadLetterQueue::defer_due`]), so that nothing moved falls due early.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
pub(crate) fn second_rounded_up(until: SystemTime) -> i64 {
    i64::try_from(due_second(until, UNIX_EPOCH)).unwrap_or(i64::MAX)
}

/// `now` as the engine's whole second, rounded down (due now).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
pub(crate) fn now_second(now: SystemTime) -> i64 {
    i64::try_from(due_second(now, now)).unwrap_or(i64::MAX)
}

/// The separator between a worker's name and its run id.
pub(crate) const RUN_SEPARATOR: char = '~';

/// The name of a run of the worker `name` started at `now`: unique to this process and instant.
fn run_name(name: &str, now: SystemTime) -> String {
    let nanos = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{name}{RUN_SEPARATOR}{:x}-{nanos:x}", std::process::id())
}

/// What the names of `name`'s runs start with. The engines match it as a prefix, never with
/// `LIKE`, whose wildcards a name may hold.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
pub(crate) fn runs_prefix(name: &str) -> String {
    format!("{name}{RUN_SEPARATOR}")
}

/// The engine's due second for `due` at `now`: rounded **up**, so that no engine hands a
/// delivery out early; a delivery due already is due at its own second rounded down (due at
/// once), so that it is not held back up to a second for nothing, and a burst stored within a
/// second does not all fall due together at the next one.
pub(crate) fn due_second(due: SystemTime, now: SystemTime) -> u64 {
    let since = |time: SystemTime| time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    if due <= now {
        return since(due).as_secs();
    }
    let since = since(due);
    since.as_secs() + u64::from(since.subsec_nanos() > 0)
}

impl<Q, D> Outbox for ApalisOutbox<Q, D>
where
    Q: TaskSink<Delivery, Durable> + Clone + Send + Sync + 'static,
    Q::Error: std::error::Error + Send + Sync + 'static,
    D: DeadLetterQueue + Clone + Send + Sync + 'static,
{
    type Error = EngineError;

    async fn store(&self, delivery: Delivery) -> Result<(), EngineError> {
        let task = TaskBuilder::new(delivery.clone())
            .run_at_timestamp(due_second(delivery.due_at(), SystemTime::now()))
            // The engine's own retries re-run a step only when storing its outcome failed (or
            // a worker died): a step must never run out of them and stay undone.
            .max_attempts(i32::MAX as usize)
            .idempotency_key(delivery.step_key())
            .build();
        let queue = self.stores.as_ref().unwrap_or(&self.queue);
        stored(queue.clone().push_task(task).await)
    }

    async fn dead_letter(&self, letter: DeadLetter) -> Result<(), EngineError> {
        self.dead.push(letter).await
    }

    fn health_store(&self) -> Option<Arc<dyn HealthStore>> {
        self.dead.health_store()
    }

    fn defer_due(
        &self,
        endpoint: &str,
        before: SystemTime,
        until: SystemTime,
    ) -> impl Future<Output = Result<u64, EngineError>> + Send {
        self.dead.defer_due(endpoint, before, until)
    }

    fn resume_deferred(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<u64, EngineError>> + Send {
        self.dead.resume_deferred(endpoint, now)
    }

    fn resume_one(
        &self,
        endpoint: &str,
        at: SystemTime,
    ) -> impl Future<Output = Result<u64, EngineError>> + Send {
        self.dead.resume_one(endpoint, at)
    }
}

/// A push's outcome: a task the engine refused because it holds one with the same idempotency
/// key already (apalis-postgres's unique index; SQLite and Redis skip it quietly) is stored.
fn stored<E>(pushed: Result<(), E>) -> Result<(), EngineError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match pushed {
        Err(error) if !is_stored_already(&error) => Err(EngineError::new(error)),
        _ => Ok(()),
    }
}

/// Whether `error` (or what it wraps: apalis's sink error wraps the backend's) is
/// apalis-postgres refusing a second row with the same idempotency key.
fn is_stored_already(error: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(feature = "postgres")]
    return std::iter::successors(Some(error), |error| error.source()).any(|error| {
        matches!(
            error.downcast_ref::<apalis_postgres::Error>(),
            Some(apalis_postgres::Error::Database(sqlx::Error::Database(database)))
                if database.is_unique_violation()
                    && database.constraint() == Some("idx_jobs_idempotency_key")
        )
    });
    #[cfg(not(feature = "postgres"))]
    {
        let _ = error;
        false
    }
}

/// Creates the SQL engines' table of the endpoints' shared health, one row per endpoint.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const CREATE_ENDPOINT_HEALTH: &str = concat!(
    "CREATE TABLE IF NOT EXISTS tower_http_retry_endpoint_health ",
    "(endpoint TEXT PRIMARY KEY NOT NULL, state TEXT NOT NULL)"
);

/// [`HealthStore`] on an SQL engine's dead-letter queue (`$dead`, with a `pool()`), in the table
/// [`ENDPOINT_HEALTH_TABLE`](crate::health::ENDPOINT_HEALTH_TABLE); `$p` is the engine's
/// placeholder prefix (`?` or `$`). Each compare-and-swap is one statement: an insert that does
/// nothing on a conflict, or an update or a delete where the row still holds what was read.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! sql_health_store {
    ($dead:ty, $p:literal) => {
        impl crate::health::HealthStore for $dead {
            fn get<'a>(
                &'a self,
                endpoint: &'a str,
            ) -> crate::health::StoreFuture<'a, Option<String>> {
                Box::pin(async move {
                    sqlx::query_scalar(concat!(
                        "SELECT state FROM tower_http_retry_endpoint_health WHERE endpoint = ",
                        $p,
                        "1"
                    ))
                    .bind(endpoint)
                    .fetch_optional(self.pool())
                    .await
                    .map_err(crate::health::BoxError::from)
                })
            }

            fn swap<'a>(
                &'a self,
                endpoint: &'a str,
                expected: Option<&'a str>,
                new: Option<&'a str>,
            ) -> crate::health::StoreFuture<'a, bool> {
                Box::pin(async move {
                    let query = match (expected, new) {
                        (None, None) => return Ok(self.get(endpoint).await?.is_none()),
                        (None, Some(new)) => sqlx::query(concat!(
                            "INSERT INTO tower_http_retry_endpoint_health (endpoint, state) ",
                            "VALUES (", $p, "1, ", $p, "2) ON CONFLICT (endpoint) DO NOTHING"
                        ))
                        .bind(endpoint)
                        .bind(new),
                        (Some(expected), Some(new)) => sqlx::query(concat!(
                            "UPDATE tower_http_retry_endpoint_health SET state = ", $p, "3 ",
                            "WHERE endpoint = ", $p, "1 AND state = ", $p, "2"
                        ))
                        .bind(endpoint)
                        .bind(expected)
                        .bind(new),
                        (Some(expected), None) => sqlx::query(concat!(
                            "DELETE FROM tower_http_retry_endpoint_health ",
                            "WHERE endpoint = ", $p, "1 AND state = ", $p, "2"
                        ))
                        .bind(endpoint)
                        .bind(expected),
                    };
                    query
                        .execute(self.pool())
                        .await
                        .map(|done| done.rows_affected() == 1)
                        .map_err(crate::health::BoxError::from)
                })
            }
        }
    };
}
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use sql_health_store;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_name_is_its_worker_name_and_a_run_id() {
        let at = UNIX_EPOCH + Duration::from_secs(100);
        let run = run_name("worker-1", at);
        assert!(run.starts_with(&runs_prefix("worker-1")), "{run}");
        assert!(
            !run.starts_with(&runs_prefix("worker-")),
            "another worker's runs"
        );
        assert!(!run_name("worker-10", at).starts_with(&runs_prefix("worker-1")));
        assert_ne!(run, run_name("worker-1", at + Duration::from_nanos(1)));
    }

    #[test]
    fn due_times_round_up_to_the_engine_second_unless_due_already() {
        let second = UNIX_EPOCH + Duration::from_secs(100);
        let before = second - Duration::from_millis(500);
        assert_eq!(due_second(second, before), 100);
        assert_eq!(due_second(second + Duration::from_millis(1), before), 101);
        assert_eq!(due_second(second + Duration::from_nanos(1), before), 101);
        // Due already: the current second, not the next.
        let late = second + Duration::from_millis(300);
        assert_eq!(due_second(late, late), 100);
        assert_eq!(due_second(second + Duration::from_millis(1), late), 100);
    }
}
