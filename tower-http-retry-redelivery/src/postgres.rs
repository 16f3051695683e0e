//! A fleet's engine: both queues in apalis-postgres's `apalis.jobs` table on a Postgres server,
//! so that every process of a fleet takes from one queue, with Postgres's own durability (a
//! committed step survives a crash of the server as well as of a worker).
//!
//! What a crash costs is the same as on SQLite: a killed worker's deliveries are handed out
//! again once it has missed two heartbeats, and a step it had already stored again is kept once
//! (apalis-postgres keeps a unique index on the idempotency key; a second store of the same step
//! is the row already there, which this module counts as stored). A delivery whose store fails
//! (the server unreachable) is returned to the caller ([`StoreFailed`](crate::StoreFailed)),
//! never dropped.
//!
//! **A worker restarted under the same name** starts through [`start_run`](crate::start_run),
//! which takes back what the name's earlier runs had taken ([`Reclaim`]) and registers the run
//! under a name of its own: apalis-postgres 1.0 hands a dead worker's tasks out again only once
//! no worker *of that name* has been seen for its missed heartbeats, so a process that came
//! back under its predecessor's very name would keep that name alive and strand its tasks.

use crate::engine::{self, ApalisOutbox, DeadLetterQueue, EngineError, Polled, Reclaim};
use crate::health::HealthStore;
use crate::record::Delivery;
use crate::step::DeadLetter;
use apalis_core::backend::codec::Codec;
use apalis_core::backend::WireFormatBackend;
use apalis_postgres::{Config, PostgresStorage};

/// sqlx's types for a pool built by hand ([`setup`], then [`outbox`]), re-exported so that they
/// are the versions this crate uses.
pub use apalis_postgres::PgPool;
/// See [`PgPool`].
pub use sqlx::postgres::PgPoolOptions;
use std::time::{Duration, SystemTime};

/// The outbox on Postgres.
pub type PostgresOutbox =
    ApalisOutbox<Polled<PostgresStorage<Delivery>>, PostgresStorage<DeadLetter>>;

/// The deliveries' queue name (the `job_type` of their rows).
pub const DELIVERIES: &str = "tower_http_retry_redelivery::deliveries";
/// The dead letters' queue name, a queue no worker takes.
pub const DEAD_LETTERS: &str = "tower_http_retry_redelivery::dead_letters";

/// How a process uses the Postgres server.
#[derive(Clone, Copy, Debug)]
pub struct PostgresOptions {
    /// How often a worker tells the engine it is alive (apalis's heartbeat, 30 s by default);
    /// a worker that missed [`missed_heartbeats`](Self::missed_heartbeats) is dead and its
    /// deliveries are handed out again.
    pub heartbeat: Duration,
    /// Heartbeats a worker may miss before it is dead (2; apalis-postgres 1.0's own default
    /// is ten, where its docs say two).
    pub missed_heartbeats: usize,
    /// Tasks a worker takes at once (10).
    pub batch_size: usize,
    /// How often an idle worker looks for due deliveries (100 ms; see
    /// [`Polled`]).
    pub poll_interval: Duration,
    /// The process's connections to the server at most (10, sqlx's default): every worker of
    /// the process and every sender share them.
    pub max_connections: u32,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(30),
            missed_heartbeats: 2,
            batch_size: 10,
            poll_interval: engine::POLL_INTERVAL,
            max_connections: 10,
        }
    }
}

/// Connects to the Postgres server at `url` (`postgres://user@127.0.0.1:5432/db`), runs
/// apalis's migrations (its own `apalis` schema; the first process of a fleet creates it) and
/// opens both queues.
///
/// ```no_run
/// # async fn run() -> Result<(), tower_http_retry_redelivery::EngineError> {
/// use tower_http_retry_redelivery::postgres::{self, PostgresOptions};
///
/// // Every process of the fleet opens the same database; their workers share one queue.
/// let url = "postgres://deliveries@127.0.0.1:5432/deliveries";
/// let outbox = postgres::open(url, PostgresOptions::default()).await?;
/// # let _ = outbox;
/// # Ok(())
/// # }
/// ```
pub async fn open(url: &str, options: PostgresOptions) -> Result<PostgresOutbox, EngineError> {
    let pool = PgPoolOptions::new()
        .max_connections(options.max_connections)
        .connect(url)
        .await
        .map_err(EngineError::new)?;
    setup(&pool).await?;
    Ok(outbox(&pool, options))
}

/// Sets up the schema on a pool built by hand (then [`outbox`]); [`open`] does it too:
/// apalis's migrations (its own `apalis` schema) and the endpoints' shared health
/// ([`ENDPOINT_HEALTH_TABLE`](crate::health::ENDPOINT_HEALTH_TABLE)). Idempotent; several
/// processes may run it at once.
pub async fn setup(pool: &PgPool) -> Result<(), EngineError> {
    PostgresStorage::<()>::setup(pool)
        .await
        .map_err(EngineError::new)?;
    // Two processes opening at once may race on the new table's type: one of them fails, and
    // the table is there.
    if let Err(error) = sqlx::query(engine::CREATE_ENDPOINT_HEALTH)
        .execute(pool)
        .await
    {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(crate::health::ENDPOINT_HEALTH_TABLE)
            .fetch_one(pool)
            .await
            .map_err(EngineError::new)?;
        if !exists {
            return Err(EngineError::new(error));
        }
    }
    Ok(())
}

/// Both queues on an open pool, its schema already set up by [`setup`] (or [`open`]).
pub fn outbox(pool: &PgPool, options: PostgresOptions) -> PostgresOutbox {
    let config = |queue: &str| {
        Config::default()
            .queue(queue)
            .heartbeat_interval(options.heartbeat)
            .missed_heartbeats(options.missed_heartbeats)
            .batch_size(options.batch_size)
    };
    ApalisOutbox::new(
        engine::polled(
            PostgresStorage::new(pool).with_config(config(DELIVERIES)),
            options.poll_interval,
        ),
        PostgresStorage::new(pool).with_config(config(DEAD_LETTERS)),
    )
}

impl Reclaim for PostgresOutbox {
    async fn reclaim(&self, name: &str) -> Result<u64, EngineError> {
        let queue = self.queue();
        let reclaim = sqlx::query(
            "UPDATE apalis.jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL, \
             done_at = NULL, attempts = attempts + 1 \
             WHERE job_type = $1 AND status IN ('Queued', 'Running') \
             AND (lock_by = $2 OR starts_with(lock_by, $3))",
        )
        .bind(queue.config().queue.to_string())
        .bind(name)
        .bind(engine::runs_prefix(name));
        rows_changed(reclaim, queue.pool()).await
    }
}

/// Whether a dead letter was replayed: its row's `attempts`, which nothing else counts in a
/// queue no worker takes (the row found by its idempotency key, the letter's dead key).
const REPLAYED: &str =
    "SELECT attempts > 0 FROM apalis.jobs WHERE job_type = $1 AND idempotency_key = $2";
/// Marks a dead letter replayed.
const MARK_REPLAYED: &str =
    "UPDATE apalis.jobs SET attempts = attempts + 1 WHERE job_type = $1 AND idempotency_key = $2";

/// Moves the deliveries to an endpoint (`$4`, the record's `endpoint`) that wait in the
/// deliveries' queue (`$1`) due before the Unix second `$2` to the second `$3`. Rows another transaction
/// holds (a worker's fetch) are skipped, not waited for: waiting on them while the fetch waits
/// on rows this one holds is a deadlock, which Postgres ends by failing one side (the fetch
/// once, which stopped its worker).
const DEFER_DUE: &str = "UPDATE apalis.jobs SET run_at = to_timestamp($3) WHERE id IN ( \
     SELECT id FROM apalis.jobs \
     WHERE job_type = $1 AND status = 'Pending' AND lock_by IS NULL \
     AND run_at < to_timestamp($2) \
     AND convert_from(job, 'UTF8')::jsonb ->> 'endpoint' = $4 \
     FOR UPDATE SKIP LOCKED)";

/// The deliveries to an endpoint (`$3`) that wait in the queue (`$1`) past both the second `$2`
/// and their own due time (`due_at`, Unix milliseconds in the record, rounded up to the second
/// as every store rounds it), that is the ones `DEFER_DUE` moved, with that time (`own_due`);
/// then what follows (an order and a limit), and their rows locked. A delivery stored for later
/// on its own is never among them, nor a record without a numeric `due_at`; locked rows are
/// skipped as `DEFER_DUE` skips them.
macro_rules! moved_past {
    ($($then:literal)?) => {
        concat!(
            "SELECT candidates.id, due.own_due FROM apalis.jobs AS candidates \
             CROSS JOIN LATERAL (SELECT convert_from(candidates.job, 'UTF8')::jsonb AS record) \
               AS stored \
             CROSS JOIN LATERAL (SELECT to_timestamp(ceil(CASE \
               WHEN jsonb_typeof(stored.record -> 'due_at') = 'number' \
               THEN (stored.record ->> 'due_at')::numeric END / 1000)) AS own_due) AS due \
             WHERE candidates.job_type = $1 AND candidates.status = 'Pending' \
             AND candidates.lock_by IS NULL AND candidates.run_at > to_timestamp($2) \
             AND stored.record ->> 'endpoint' = $3 AND candidates.run_at > due.own_due ",
            $($then,)?
            " FOR UPDATE OF candidates SKIP LOCKED"
        )
    };
}

/// Due again at the later of `$2` and the delivery's own due time: those of `$moved`.
macro_rules! due_again {
    ($moved:expr) => {
        concat!(
            "UPDATE apalis.jobs AS jobs SET run_at = GREATEST(to_timestamp($2), moved.own_due) \
             FROM (",
            $moved,
            ") AS moved WHERE jobs.id = moved.id"
        )
    };
}

/// Every delivery [`moved_past`] now (`$2`), due again.
const RESUME_DEFERRED: &str = due_again!(moved_past!());

/// The oldest delivery [`moved_past`] the pacer's next probe (`$2`), due again then.
const RESUME_ONE: &str = due_again!(moved_past!("ORDER BY due.own_due LIMIT 1"));

/// The dead letters as a queue of the same table that no worker takes.
impl DeadLetterQueue for PostgresStorage<DeadLetter> {
    fn health_store(&self) -> Option<std::sync::Arc<dyn HealthStore>> {
        Some(std::sync::Arc::new(self.clone()))
    }

    async fn push(&self, letter: DeadLetter) -> Result<(), EngineError> {
        engine::push_to_queue(self, letter).await
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
            .bind(endpoint);
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

    /// Read by id, page after page, not through apalis's listing: that pages with `OFFSET` over
    /// an order with ties (letters written in the same second), which Postgres may break
    /// differently from one page's query to the next, so a long queue could lose or repeat some.
    async fn all(&self) -> Result<Vec<DeadLetter>, EngineError> {
        const PAGE: i64 = 500;
        let queue = self.config().queue.to_string();
        let mut letters = Vec::new();
        let mut after = String::new();
        loop {
            let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
                "SELECT id, job FROM apalis.jobs \
                 WHERE job_type = $1 AND status = 'Pending' AND id > $2 ORDER BY id LIMIT $3",
            )
            .bind(&queue)
            .bind(&after)
            .bind(PAGE)
            .fetch_all(self.pool())
            .await
            .map_err(EngineError::new)?;
            let full = rows.len() == PAGE as usize;
            for (id, job) in rows {
                letters.push(self.codec().decode(&job).map_err(EngineError::new)?);
                after = id;
            }
            if !full {
                return Ok(letters);
            }
        }
    }
}

crate::engine::sql_health_store!(PostgresStorage<DeadLetter>, "$");

/// `resume` ([`RESUME_DEFERRED`] or [`RESUME_ONE`]) for `endpoint`, due at the second `at` at
/// the earliest.
async fn resume(
    pool: &PgPool,
    resume: &'static str,
    endpoint: &str,
    at: i64,
) -> Result<u64, EngineError> {
    let resume = sqlx::query(resume).bind(DELIVERIES).bind(at).bind(endpoint);
    rows_changed(resume, pool).await
}

/// Runs `statement` on `pool` and returns how many rows it changed.
async fn rows_changed(
    statement: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    pool: &PgPool,
) -> Result<u64, EngineError> {
    statement
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
        .map_err(EngineError::new)
}
