//! The embedded engine: both queues in one SQLite file through apalis-sqlite, no server.

use crate::engine::{self, ApalisOutbox, DeadLetterQueue, EngineError, Polled, Reclaim};
use crate::health::HealthStore;
use crate::record::{self, Delivery};
use crate::step::DeadLetter;
use apalis_core::backend::BackendConfig;
use apalis_sqlite::{Config, SqliteStorage};

/// sqlx's types for a pool built by hand ([`setup`], then [`outbox`]), re-exported so that they
/// are the versions this crate uses.
pub use apalis_sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The outbox on SQLite.
pub type SqliteOutbox = ApalisOutbox<Polled<SqliteStorage<Delivery>>, SqliteStorage<DeadLetter>>;

/// The deliveries' queue name in the `Jobs` table.
pub const DELIVERIES: &str = "tower_http_retry_redelivery::deliveries";
/// The dead letters' queue name.
pub const DEAD_LETTERS: &str = "tower_http_retry_redelivery::dead_letters";

/// How a process opens the SQLite file.
#[derive(Clone, Copy, Debug)]
pub struct SqliteOptions {
    /// How often a worker tells the engine it is alive (apalis's heartbeat, 30 s by default).
    /// A worker that missed [`missed_heartbeats`](Self::missed_heartbeats) is dead, and its
    /// deliveries are handed out again by the next live worker's heartbeat: a `kill -9` costs
    /// its deliveries about three heartbeats' delay, or none when it restarts under its name
    /// ([`start_run`](crate::start_run)). apalis-sqlite keeps the heartbeat in whole seconds:
    /// give at least one.
    pub heartbeat: Duration,
    /// Heartbeats a worker may miss before it is dead (2).
    pub missed_heartbeats: usize,
    /// Tasks a worker takes at once (10).
    pub batch_size: usize,
    /// How often an idle worker looks for due deliveries (100 ms; see
    /// [`Polled`]).
    pub poll_interval: Duration,
    /// How long a writer waits for another process's write lock (30 s).
    pub busy_timeout: Duration,
    /// The process's connections to the file for stores, dead letters and the endpoints'
    /// health (10, sqlx's default). The workers of the process write (their takes and
    /// acknowledgements) on one connection of their own besides ([`outbox`]).
    pub max_connections: u32,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(30),
            missed_heartbeats: 2,
            batch_size: 10,
            poll_interval: engine::POLL_INTERVAL,
            busy_timeout: Duration::from_secs(30),
            max_connections: 10,
        }
    }
}

/// Opens (creating it if needed) the SQLite file at `path` and its two queues: WAL, so that
/// the workers of several processes share it, `synchronous = NORMAL` (a `kill -9` loses no
/// commit; a power cut may lose the last ones), and apalis's schema migrated.
pub async fn open(
    path: impl AsRef<Path>,
    options: SqliteOptions,
) -> Result<SqliteOutbox, EngineError> {
    let connect = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .pragma("journal_mode", "WAL")
        .pragma("synchronous", "NORMAL")
        .busy_timeout(options.busy_timeout);
    setup(&connect).await?;
    let pool = SqlitePoolOptions::new()
        .max_connections(options.max_connections.max(1))
        .connect_with(connect)
        .await
        .map_err(EngineError::new)?;
    Ok(outbox(&pool, options))
}

/// Sets up the schema of the file `connect` opens, for a pool built by hand (then
/// [`outbox`]); [`open`] does it too: apalis's tables, the endpoints' shared health
/// ([`ENDPOINT_HEALTH_TABLE`](crate::health::ENDPOINT_HEALTH_TABLE)), and the query planner's
/// statistics for apalis's table (those of a large queue, written over any the file held, so
/// that a worker's lock of the tasks it takes reads them by id, not the whole queue; an
/// `ANALYZE` later replaces them with the file's own; a connection reads them when it opens,
/// so a pool built by hand connects after `setup`). Idempotent, and tried
/// again, bounded, while another process's workers hold the file's lock. It runs on a
/// connection of its own, closed after: apalis's setup sets `synchronous = OFF` on the
/// connection it runs on, which a pool's connection must not keep.
pub async fn setup(connect: &SqliteConnectOptions) -> Result<(), EngineError> {
    let migrate = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(connect.clone())
        .await
        .map_err(EngineError::new)?;
    // The setup writes (pragmas, migrations) while other processes' workers write to the same
    // file: SQLite may refuse at once with SQLITE_BUSY, its busy handler not asked (a read
    // transaction that must become a write). The setup is idempotent: tried again, bounded.
    let mut tries = 0;
    while let Err(error) = setup_once(&migrate).await {
        tries += 1;
        if tries == SETUP_TRIES || !is_busy(&error) {
            return Err(EngineError::new(error));
        }
        tokio::time::sleep(Duration::from_millis(50 * tries)).await;
    }
    migrate.close().await;
    Ok(())
}

/// apalis's schema, the endpoints' shared health, and the planner's statistics, once.
async fn setup_once(pool: &SqlitePool) -> Result<(), apalis_sqlite::Error> {
    SqliteStorage::setup(pool).await?;
    sqlx::query(engine::CREATE_ENDPOINT_HEALTH)
        .execute(pool)
        .await?;
    // In one transaction: processes that set up the same file at once each write all of them.
    let mut statistics = pool.begin().await?;
    sqlx::raw_sql(PLANNER_STATISTICS)
        .execute(&mut *statistics)
        .await?;
    // SQLite built with `SQLITE_ENABLE_STAT4` (sqlx's bundled one is) also reads the samples an
    // earlier `ANALYZE` took, with these figures; the planner is left with these alone.
    let samples: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat4'")
            .fetch_optional(&mut *statistics)
            .await?;
    if samples.is_some() {
        sqlx::query("DELETE FROM sqlite_stat4 WHERE tbl = 'Jobs'")
            .execute(&mut *statistics)
            .await?;
    }
    statistics.commit().await?;
    Ok(())
}

/// The statistics SQLite's query planner reads (`sqlite_stat1`) for apalis's table, written at
/// setup: those of a large queue (a million rows, a fifth of them in each status), the same
/// whatever the file holds now. Without any, the planner found the rows a worker locks (apalis's
/// `lock.sql`, a list of task ids, written before each task it takes) by reading every row of
/// their status, the whole queue: 60 ms a batch with 100,000 deliveries waiting, which held the
/// workers to about 160 deliveries a second. With them it reads each task by its id, as it
/// does with the statistics `ANALYZE` takes of a large queue, and every other query apalis's
/// workers run keeps its index. `ANALYZE Workers` creates the statistics' table.
const PLANNER_STATISTICS: &str = "ANALYZE Workers; \
    DELETE FROM sqlite_stat1 WHERE tbl = 'Jobs'; \
    INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES \
    ('Jobs', NULL, '1000000'), \
    ('Jobs', 'sqlite_autoindex_Jobs_1', '1000000 1'), \
    ('Jobs', 'idx_jobs_idempotency_key', '1000000 500000 1'), \
    ('Jobs', 'idx_jobs_status_run_at', '1000000 200000 2'), \
    ('Jobs', 'idx_jobs_job_type_status_run_at', '1000000 500000 100000 2'), \
    ('Jobs', 'LIdx', '1000000 100000'), \
    ('Jobs', 'idx_jobs_claimable', '1000000 200000 100000'), \
    ('Jobs', 'idx_jobs_pending', '1000000 500000 400000 2 1'), \
    ('Jobs', 'idx_jobs_failed', '1000000 500000 400000 2 1'), \
    ('Jobs', 'idx_jobs_running', '1000000 2'), \
    ('Jobs', 'idx_jobs_completed_done_at', '1000000 300000 2 1');";

/// How many times [`open`] tries the schema's setup while another process holds the lock.
const SETUP_TRIES: u64 = 20;

/// Whether `error` is SQLite's `SQLITE_BUSY` or one of its extended codes (the file locked by
/// another writer): the primary code is the low byte.
fn is_busy(error: &apalis_sqlite::Error) -> bool {
    const SQLITE_BUSY: i32 = 5;
    matches!(
        error,
        apalis_sqlite::Error::Database(sqlx::Error::Database(database))
            if database
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .is_some_and(|code| code & 0xff == SQLITE_BUSY)
    )
}

/// The two queues on an open pool, its schema already set up by [`setup`] (or [`open`]):
/// apalis's, and the [`ENDPOINT_HEALTH_TABLE`](crate::health::ENDPOINT_HEALTH_TABLE).
///
/// The process's workers take and acknowledge deliveries on **one connection** of their own,
/// opened with `pool`'s connect options (not its pool settings, such as `after_connect` hooks);
/// stores, dead letters and health use `pool`
/// ([`ApalisOutbox::storing_through`]). SQLite has one writer at a time, and connections that
/// want the lock wait in SQLite's busy handler, which sleeps 1 to 100 ms between tries: on one
/// connection the workers' writes queue in order instead (4 workers of one process delivered
/// 1,413 a second on 10 connections, 1,550 on 5, 1,773 on 3, 2,334 on 1). The handlers never
/// wait for that connection (on a single pool of one, a worker's handler waited 30 s, the pool's
/// acquire timeout, for the connection its worker held).
pub fn outbox(pool: &SqlitePool, options: SqliteOptions) -> SqliteOutbox {
    let config = |queue: &str| {
        Config::default()
            .queue(queue)
            .heartbeat_interval(options.heartbeat)
            .missed_heartbeats(options.missed_heartbeats)
            .batch_size(options.batch_size)
    };
    let workers = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_lazy_with((*pool.connect_options()).clone());
    let deliveries = |pool: &SqlitePool| SqliteStorage::new(pool).with_config(config(DELIVERIES));
    ApalisOutbox::new(
        engine::polled(deliveries(&workers), options.poll_interval),
        SqliteStorage::new(pool).with_config(config(DEAD_LETTERS)),
    )
    .storing_through(engine::polled(deliveries(pool), options.poll_interval))
}

/// Whether a dead letter was replayed: its row's `attempts`, which nothing else counts in a
/// queue no worker takes (the row found by its idempotency key, the letter's dead key).
const REPLAYED: &str = "SELECT attempts > 0 FROM Jobs WHERE job_type = ?1 AND idempotency_key = ?2";
/// Marks a dead letter replayed.
const MARK_REPLAYED: &str =
    "UPDATE Jobs SET attempts = attempts + 1 WHERE job_type = ?1 AND idempotency_key = ?2";

/// Moves the deliveries to an endpoint that wait in the deliveries' queue (`?1`) due before
/// `?2` to `?3`: the records that hold `?4`, the endpoint's field as stored
/// (`record::endpoint_field`), a search of the stored text rather than a read of each record as
/// JSON, which took twice as long (100,000 records moved in 1.1 s against 2 s).
const DEFER_DUE: &str = "UPDATE Jobs SET run_at = ?3 \
     WHERE job_type = ?1 AND status = 'Pending' AND lock_by IS NULL AND run_at < ?2 \
     AND instr(CAST(job AS TEXT), ?4) > 0";

/// The deliveries to an endpoint (`?3`, its field as stored) that wait in the queue (`?1`) past
/// both `?2` and their own due time (`due_at`, Unix milliseconds in the record, rounded up to the
/// second as every store rounds it), that is the ones `DEFER_DUE` moved. A delivery stored for
/// later on its own is never among them.
macro_rules! moved_past {
    () => {
        "job_type = ?1 AND status = 'Pending' AND lock_by IS NULL AND run_at > ?2 \
         AND instr(CAST(job AS TEXT), ?3) > 0 \
         AND run_at > (json_extract(CAST(job AS TEXT), '$.due_at') + 999) / 1000"
    };
}

/// Due again at the later of `?2` and the delivery's own due time.
macro_rules! due_again {
    () => {
        "UPDATE Jobs \
         SET run_at = MAX(?2, (json_extract(CAST(job AS TEXT), '$.due_at') + 999) / 1000) "
    };
}

/// Every delivery [`moved_past`] now (`?2`), due again.
const RESUME_DEFERRED: &str = concat!(due_again!(), "WHERE ", moved_past!());

/// The oldest delivery [`moved_past`] the pacer's next probe (`?2`), due again then.
const RESUME_ONE: &str = concat!(
    due_again!(),
    "WHERE id = (SELECT id FROM Jobs WHERE ",
    moved_past!(),
    " ORDER BY json_extract(CAST(job AS TEXT), '$.due_at') LIMIT 1)"
);

/// The dead letters as a queue of the same file that no worker takes.
impl DeadLetterQueue for SqliteStorage<DeadLetter> {
    fn health_store(&self) -> Option<std::sync::Arc<dyn HealthStore>> {
        Some(std::sync::Arc::new(self.clone()))
    }

    async fn push(&self, letter: DeadLetter) -> Result<(), EngineError> {
        engine::push_to_queue(self, letter).await
    }

    async fn all(&self) -> Result<Vec<DeadLetter>, EngineError> {
        engine::list_queue(self).await
    }

    async fn was_replayed(&self, letter: &DeadLetter) -> Result<bool, EngineError> {
        sqlx::query_scalar(REPLAYED)
            .bind(self.config().queue.to_string())
            .bind(letter.delivery.dead_key())
            .fetch_optional(self.pool())
            .await
            .map(|marked: Option<bool>| marked.unwrap_or(false))
            .map_err(EngineError::new)
    }

    async fn defer_due(
        &self,
        endpoint: &str,
        before: SystemTime,
        until: SystemTime,
    ) -> Result<u64, EngineError> {
        let move_due = sqlx::query(DEFER_DUE)
            .bind(DELIVERIES)
            .bind(engine::second_rounded_up(before))
            .bind(engine::second_rounded_up(until))
            .bind(record::endpoint_field(endpoint));
        rows_changed(move_due, self.pool()).await
    }

    async fn resume_deferred(&self, endpoint: &str, now: SystemTime) -> Result<u64, EngineError> {
        resume(
            self.pool(),
            RESUME_DEFERRED,
            endpoint,
            engine::now_second(now),
        )
        .await
    }

    async fn resume_one(&self, endpoint: &str, at: SystemTime) -> Result<u64, EngineError> {
        resume(
            self.pool(),
            RESUME_ONE,
            endpoint,
            engine::second_rounded_up(at),
        )
        .await
    }

    async fn mark_replayed(&self, letter: &DeadLetter) -> Result<(), EngineError> {
        sqlx::query(MARK_REPLAYED)
            .bind(self.config().queue.to_string())
            .bind(letter.delivery.dead_key())
            .execute(self.pool())
            .await
            .map(drop)
            .map_err(EngineError::new)
    }
}

impl Reclaim for SqliteOutbox {
    async fn reclaim(&self, name: &str) -> Result<u64, EngineError> {
        let queue = self.queue();
        let reclaim = sqlx::query(
            "UPDATE Jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL, \
             done_at = NULL, attempts = attempts + 1 \
             WHERE job_type = ?1 AND status IN ('Queued', 'Running') \
             AND (lock_by = ?2 OR substr(lock_by, 1, length(?3)) = ?3)",
        )
        .bind(queue.config().queue.to_string())
        .bind(name)
        .bind(engine::runs_prefix(name));
        rows_changed(reclaim, queue.pool()).await
    }
}

crate::engine::sql_health_store!(SqliteStorage<DeadLetter>, "?");

/// `resume` ([`RESUME_DEFERRED`] or [`RESUME_ONE`]) for `endpoint`, due at the second `at` at
/// the earliest.
async fn resume(
    pool: &SqlitePool,
    resume: &'static str,
    endpoint: &str,
    at: i64,
) -> Result<u64, EngineError> {
    let resume = sqlx::query(resume)
        .bind(DELIVERIES)
        .bind(at)
        .bind(record::endpoint_field(endpoint));
    rows_changed(resume, pool).await
}

/// Runs `statement` on `pool` and returns how many rows it changed.
async fn rows_changed(
    statement: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    pool: &SqlitePool,
) -> Result<u64, EngineError> {
    statement
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
        .map_err(EngineError::new)
}
