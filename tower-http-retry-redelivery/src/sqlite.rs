//! The embedded engine: both queues in one SQLite file through apalis-sqlite, no server.

use crate::engine::{self, ApalisOutbox, DeadLetterQueue, EngineError};
use crate::record::Delivery;
use crate::step::DeadLetter;
use apalis_sqlite::{Config, SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteStorage};
use std::path::Path;
use std::time::Duration;

/// The outbox on SQLite.
pub type SqliteOutbox = ApalisOutbox<SqliteStorage<Delivery>, SqliteStorage<DeadLetter>>;

/// The deliveries' queue name in the `Jobs` table.
pub const DELIVERIES: &str = "tower_http_retry_redelivery::deliveries";
/// The dead letters' queue name.
pub const DEAD_LETTERS: &str = "tower_http_retry_redelivery::dead_letters";

/// How a process opens the SQLite file.
#[derive(Clone, Copy, Debug)]
pub struct SqliteOptions {
    /// How often a worker tells the engine it is alive (apalis's heartbeat, 30 s by default).
    /// A worker that missed two is dead, and its deliveries are handed out again: a
    /// `kill -9` costs its deliveries about two heartbeats' delay.
    pub heartbeat: Duration,
    /// Tasks a worker takes at once (10).
    pub batch_size: usize,
    /// How long a writer waits for another process's write lock (30 s).
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(30),
            batch_size: 10,
            busy_timeout: Duration::from_secs(30),
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
    // apalis's setup also sets `synchronous = OFF` on the connection it runs on: run it on one
    // of its own, closed after, so that every connection of the pool keeps `NORMAL`.
    let migrate = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(connect.clone())
        .await
        .map_err(EngineError::new)?;
    SqliteStorage::setup(&migrate)
        .await
        .map_err(EngineError::new)?;
    migrate.close().await;
    let pool = SqlitePoolOptions::new()
        .connect_with(connect)
        .await
        .map_err(EngineError::new)?;
    Ok(outbox(&pool, options))
}

/// The two queues on an open pool (its schema already set up).
pub fn outbox(pool: &SqlitePool, options: SqliteOptions) -> SqliteOutbox {
    let config = |queue: &str| {
        Config::default()
            .queue(queue)
            .heartbeat_interval(options.heartbeat)
            .batch_size(options.batch_size)
    };
    ApalisOutbox::new(
        SqliteStorage::new(pool).with_config(config(DELIVERIES)),
        SqliteStorage::new(pool).with_config(config(DEAD_LETTERS)),
    )
}

/// The dead letters as a queue of the same file that no worker takes.
impl DeadLetterQueue for SqliteStorage<DeadLetter> {
    async fn push(&self, letter: DeadLetter) -> Result<(), EngineError> {
        engine::push_to_queue(self, letter).await
    }

    async fn all(&self) -> Result<Vec<DeadLetter>, EngineError> {
        engine::list_queue(self).await
    }
}
