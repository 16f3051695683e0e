//! A fleet's engine: the deliveries on apalis-redis, the dead letters in a hash of the same
//! Redis server, so that every process of a fleet takes from one queue.
//!
//! What a crash costs is the same as on SQLite: a killed worker's deliveries are handed out
//! again once it has missed two heartbeats, and a step it had already stored again is kept once
//! (its idempotency key is kept for [`RedisOptions::idempotency_ttl`]). What Redis adds is its
//! own durability: with `appendonly yes` and `appendfsync everysec` (Redis's advice for a queue)
//! a server crash loses at most the last second's writes; without persistence a restart of the
//! server loses the queue. A worker's connection ([`redis::aio::ConnectionManager`]) reconnects by
//! itself; a delivery whose store fails meanwhile is returned to the caller
//! ([`StoreFailed`](crate::StoreFailed)), never dropped.

use crate::engine::{self, ApalisOutbox, DeadLetterQueue, EngineError, Reclaim};
use crate::record::Delivery;
use crate::step::DeadLetter;
use apalis_redis::{Config, RedisStorage};
use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use std::time::Duration;

/// The outbox on Redis.
pub type RedisOutbox = ApalisOutbox<RedisStorage<Delivery>, RedisDeadLetters>;

/// The deliveries' queue name (apalis-redis's keys start with it).
pub const DELIVERIES: &str = "tower_http_retry_redelivery::deliveries";
/// The dead letters' hash: one field per delivery (its [`dead_key`](Delivery::dead_key)),
/// the letter's JSON as its value.
pub const DEAD_LETTERS: &str = "tower_http_retry_redelivery::dead_letters";

/// How a process uses the Redis server.
#[derive(Clone, Copy, Debug)]
pub struct RedisOptions {
    /// How often a worker tells the engine it is alive (apalis's heartbeat, 30 s by default);
    /// a worker that missed [`missed_heartbeats`](Self::missed_heartbeats) is dead and its
    /// deliveries are handed out again.
    pub heartbeat: Duration,
    /// Heartbeats a worker may miss before it is dead (2; apalis-redis 1.0's own default is
    /// ten, where its docs say two).
    pub missed_heartbeats: usize,
    /// Tasks a worker takes at once (10).
    pub batch_size: usize,
    /// How long a stored step's idempotency key is kept (7 days). It only has to outlive the
    /// window in which a crash can make a worker store the same step again (two heartbeats and
    /// a handling), so a week is ample; apalis-redis would otherwise keep every key forever.
    pub idempotency_ttl: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(30),
            missed_heartbeats: 2,
            batch_size: 10,
            idempotency_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Connects to the Redis server at `url` (`redis://127.0.0.1:6379/0`) and opens both queues.
///
/// ```no_run
/// # async fn run() -> Result<(), tower_http_retry_redelivery::EngineError> {
/// use tower_http_retry_redelivery::redis::{self, RedisOptions};
///
/// // Every process of the fleet opens the same server; their workers share one queue.
/// let outbox = redis::open("redis://127.0.0.1:6379/0", RedisOptions::default()).await?;
/// # let _ = outbox;
/// # Ok(())
/// # }
/// ```
pub async fn open(url: &str, options: RedisOptions) -> Result<RedisOutbox, EngineError> {
    let connection = apalis_redis::connect(url).await.map_err(EngineError::new)?;
    Ok(outbox(connection, options))
}

/// Both queues on an open connection.
pub fn outbox(connection: ConnectionManager, options: RedisOptions) -> RedisOutbox {
    let config = Config::default()
        .queue(DELIVERIES)
        .heartbeat_interval(options.heartbeat)
        .missed_heartbeats(options.missed_heartbeats)
        .batch_size(options.batch_size)
        .idempotency_ttl(Some(options.idempotency_ttl));
    ApalisOutbox::new(
        RedisStorage::new(connection.clone()).with_config(config),
        RedisDeadLetters {
            connection,
            key: DEAD_LETTERS.to_owned(),
        },
    )
}

/// Moves the in-flight deliveries of the worker `ARGV[1]` and of its runs (`ARGV[2]` and a run
/// id) back to the queue, as apalis-redis does for a worker whose heartbeats are missed.
///
/// KEYS: the workers' sorted set, the queue's list, its signal list, the in-flight sets' prefix.
const RECLAIM: &str = r#"
local moved = 0
for _, worker in ipairs(redis.call("zrange", KEYS[1], 0, -1)) do
    if worker == ARGV[1] or string.sub(worker, 1, #ARGV[2]) == ARGV[2] then
        local inflight = KEYS[4] .. ":" .. worker
        local tasks = redis.call("smembers", inflight)
        if #tasks > 0 then
            redis.call("rpush", KEYS[2], unpack(tasks))
            moved = moved + #tasks
        end
        redis.call("del", inflight)
        redis.call("zrem", KEYS[1], worker)
    end
end
if moved > 0 then
    redis.call("del", KEYS[3])
    redis.call("lpush", KEYS[3], 1)
end
return moved
"#;

impl Reclaim for RedisOutbox {
    async fn reclaim(&self, name: &str) -> Result<u64, EngineError> {
        let mut queue = self.queue().clone();
        let config = queue.get_config().clone();
        redis::Script::new(RECLAIM)
            .key(config.workers_set())
            .key(config.active_jobs_list())
            .key(config.signal_list())
            .key(config.inflight_jobs_set())
            .arg(name)
            .arg(engine::runs_prefix(name))
            .invoke_async(queue.get_connection())
            .await
            .map_err(EngineError::new)
    }
}

/// The dead letters in a Redis hash.
#[derive(Clone)]
pub struct RedisDeadLetters {
    connection: ConnectionManager,
    key: String,
}

impl std::fmt::Debug for RedisDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDeadLetters")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl RedisDeadLetters {
    /// The set of the replayed letters' keys.
    fn replayed_key(&self) -> String {
        format!("{}:replayed", self.key)
    }
}

impl DeadLetterQueue for RedisDeadLetters {
    async fn push(&self, letter: DeadLetter) -> Result<(), EngineError> {
        let json = serde_json::to_string(&letter).map_err(EngineError::new)?;
        let mut connection = self.connection.clone();
        connection
            .hset_nx::<_, _, _, bool>(&self.key, letter.delivery.dead_key(), json)
            .await
            .map(drop)
            .map_err(EngineError::new)
    }

    async fn was_replayed(&self, letter: &DeadLetter) -> Result<bool, EngineError> {
        let mut connection = self.connection.clone();
        connection
            .sismember(self.replayed_key(), letter.delivery.dead_key())
            .await
            .map_err(EngineError::new)
    }

    async fn mark_replayed(&self, letter: &DeadLetter) -> Result<(), EngineError> {
        let mut connection = self.connection.clone();
        connection
            .sadd::<_, _, ()>(self.replayed_key(), letter.delivery.dead_key())
            .await
            .map_err(EngineError::new)
    }

    async fn all(&self) -> Result<Vec<DeadLetter>, EngineError> {
        // HSCAN, not HGETALL: a long queue is read in steps, never in one blocking reply. A
        // field may come back twice while the hash grows: keyed by field, each is kept once.
        let mut connection = self.connection.clone();
        let mut letters = std::collections::HashMap::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, fields): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                .arg(&self.key)
                .arg(cursor)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut connection)
                .await
                .map_err(EngineError::new)?;
            for (field, json) in fields {
                letters.insert(
                    field,
                    serde_json::from_str(&json).map_err(EngineError::new)?,
                );
            }
            if next == 0 {
                return Ok(letters.into_values().collect());
            }
            cursor = next;
        }
    }
}
