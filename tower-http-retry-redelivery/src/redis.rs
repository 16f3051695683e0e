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
//!
//! A failing endpoint's backlog, moved a slot's deadline ahead
//! ([`Outbox::defer_due`](crate::Outbox::defer_due)), waits in a sorted set of the outbox's own
//! (`DELIVERIES` then `::deferred`), from which every process's outbox moves it back to the queue
//! in slices as it falls due: apalis-redis's own fetch would move all of it in one call, which
//! fails past about 8,000 and stops the worker.

use crate::engine::{self, ApalisOutbox, DeadLetterQueue, EngineError, Polled, Reclaim};
use crate::health::{HealthStore, StoreFuture};
use crate::record::Delivery;
use crate::step::DeadLetter;
use apalis_redis::{Config, RedisStorage};
use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

mod backlog;

/// The outbox on Redis.
pub type RedisOutbox = ApalisOutbox<Polled<RedisStorage<Delivery>>, RedisDeadLetters>;

/// The deliveries' queue name (apalis-redis's keys start with it).
pub const DELIVERIES: &str = "tower_http_retry_redelivery::deliveries";
/// The endpoints' shared health ([`EndpointHealth::shared`](crate::health::EndpointHealth::shared)):
/// a hash, one field per endpoint.
pub const ENDPOINT_HEALTH: &str = "tower_http_retry_redelivery::endpoint_health";
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
    /// How often an idle worker looks for due deliveries (100 ms; see
    /// [`Polled`]).
    pub poll_interval: Duration,
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
            poll_interval: engine::POLL_INTERVAL,
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
    let outbox = outbox(connection, options);
    // Whatever fell due while no process ran goes to the queue before a worker fetches.
    let keys = QueueKeys::of(outbox.queue());
    while keys.promote(&mut outbox.dead().connection.clone()).await? >= QueueKeys::AT_ONCE {}
    Ok(outbox)
}

/// Both queues on an open connection. Call it within a tokio runtime: the outbox moves due
/// deliveries to the queue from a task of its own ([`open`] also moves those already due before
/// it returns); outside one, or once that runtime is gone, it moves no failing endpoint's
/// backlog aside (each such delivery is handed back as it is taken).
pub fn outbox(connection: ConnectionManager, options: RedisOptions) -> RedisOutbox {
    let config = Config::default()
        .queue(DELIVERIES)
        .heartbeat_interval(options.heartbeat)
        .missed_heartbeats(options.missed_heartbeats)
        .batch_size(options.batch_size)
        .idempotency_ttl(Some(options.idempotency_ttl));
    let queue = RedisStorage::new(connection.clone()).with_config(config);
    let keys = QueueKeys::of(&queue);
    let promoter = keys
        .clone()
        .spawn(connection.clone(), options.poll_interval);
    ApalisOutbox::new(
        engine::polled(queue, options.poll_interval),
        RedisDeadLetters {
            connection,
            key: DEAD_LETTERS.to_owned(),
            queue: keys,
            promoter,
        },
    )
}

/// Moves due deliveries from apalis-redis's scheduled set and from the outbox's set of moved
/// deliveries (`backlog`'s move) to the queue, at most [`QueueKeys::AT_ONCE`] from each a call.
///
/// apalis-redis 1.0 schedules every task, and a worker's fetch moves *every* due one to the
/// queue in one Lua call, `unpack`ing their ids: past about 8,000 (Lua's stack) the call fails,
/// and every worker of the fleet stops on it, again after each restart. 10,000 deliveries due at
/// once (a burst, or a backlog while no worker ran) did that. Moved here in slices every poll
/// interval, a fetch finds few due ones left; a moved backlog, due again all in one second,
/// waits where no fetch looks.
///
/// KEYS: the scheduled set, the queue's list, its signal list, the moved set. ARGV: now (Unix
/// seconds, as apalis-redis scores them), the most to move from each set.
const PROMOTE: &str = r#"
local promoted = 0
for _, set in ipairs({KEYS[1], KEYS[4]}) do
    local due = redis.call("zrangebyscore", set, 0, ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
    if #due > 0 then
        redis.call("rpush", KEYS[2], unpack(due))
        redis.call("zrem", set, unpack(due))
        promoted = promoted + #due
    end
end
if promoted > 0 then
    redis.call("del", KEYS[3])
    redis.call("lpush", KEYS[3], 1)
end
return promoted
"#;

/// Sets or removes a field of a hash if it still holds what the caller read: the compare-and-swap
/// of the endpoints' shared health. KEYS: the hash. ARGV: the field, whether a value was
/// expected ("1") and which, whether one is written ("1") and which. Returns 1 if it swapped.
const SWAP: &str = r#"
local current = redis.call("hget", KEYS[1], ARGV[1])
if ARGV[2] == "1" then
    if current ~= ARGV[3] then return 0 end
elseif current then
    return 0
end
if ARGV[4] == "1" then
    redis.call("hset", KEYS[1], ARGV[1], ARGV[5])
else
    redis.call("hdel", KEYS[1], ARGV[1])
end
return 1
"#;

/// [`SWAP`], hashed once.
static SWAP_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SWAP));

/// [`PROMOTE`], hashed once.
static PROMOTE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PROMOTE));

/// [`RECLAIM`], hashed once.
static RECLAIM_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RECLAIM));

/// The keys of apalis-redis's queue that the outbox's own scripts work on.
#[derive(Clone)]
struct QueueKeys {
    scheduled: String,
    active: String,
    signal: String,
    data: String,
    /// The deliveries a move of an endpoint's backlog set aside, by the second they are due
    /// again.
    moved: String,
}

impl QueueKeys {
    /// The most deliveries one call of [`PROMOTE`] moves (well under Lua's stack).
    const AT_ONCE: usize = 1_000;

    fn of<C>(queue: &RedisStorage<Delivery, C>) -> Self
    where
        C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    {
        let config = queue.get_config();
        QueueKeys {
            scheduled: config.scheduled_jobs_set(),
            active: config.active_jobs_list(),
            signal: config.signal_list(),
            data: config.job_data_hash(),
            moved: format!("{DELIVERIES}::deferred"),
        }
    }

    /// Moves up to [`AT_ONCE`](Self::AT_ONCE) due deliveries from each set; returns how many.
    async fn promote(&self, connection: &mut ConnectionManager) -> Result<usize, EngineError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        PROMOTE_SCRIPT
            .key(&self.scheduled)
            .key(&self.active)
            .key(&self.signal)
            .key(&self.moved)
            .arg(now)
            .arg(Self::AT_ONCE)
            .invoke_async(connection)
            .await
            .map_err(EngineError::new)
    }

    /// Promotes every `interval`, from a task that ends when the returned handle's last clone
    /// is dropped; none outside a tokio runtime.
    fn spawn(self, mut connection: ConnectionManager, interval: Duration) -> Option<Arc<Promoter>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let task = runtime.spawn(async move {
            loop {
                // A failed call (Redis away) is tried again at the next tick: a worker's own
                // fetch promotes apalis-redis's scheduled set meanwhile (not the moved set).
                while matches!(self.promote(&mut connection).await, Ok(n) if n >= Self::AT_ONCE) {}
                tokio::time::sleep(interval).await;
            }
        });
        Some(Arc::new(Promoter(task.abort_handle())))
    }
}

/// Stops the promoting task when dropped.
struct Promoter(tokio::task::AbortHandle);

impl Promoter {
    /// Whether the task still runs (its runtime may be gone).
    fn is_running(&self) -> bool {
        !self.0.is_finished()
    }
}

impl Drop for Promoter {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Moves the in-flight deliveries of the worker `ARGV[1]` and of its runs (`ARGV[2]` and a run
/// id) back to the head of the queue, as apalis-redis does (at its tail) for a worker whose
/// heartbeats are missed.
///
/// KEYS: the workers' sorted set, the queue's list, its signal list, the in-flight sets' prefix.
const RECLAIM: &str = r#"
local moved = 0
for _, worker in ipairs(redis.call("zrange", KEYS[1], 0, -1)) do
    if worker == ARGV[1] or string.sub(worker, 1, #ARGV[2]) == ARGV[2] then
        local inflight = KEYS[4] .. ":" .. worker
        local tasks = redis.call("smembers", inflight)
        -- At the head of the queue, where they were taken from (at its tail they waited for
        -- every delivery due since); in slices: `unpack` of more than about 8,000 ids fails.
        for first = 1, #tasks, 1000 do
            redis.call("lpush", KEYS[2], unpack(tasks, first, math.min(first + 999, #tasks)))
        end
        moved = moved + #tasks
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
        RECLAIM_SCRIPT
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

/// The endpoints' health in the hash [`ENDPOINT_HEALTH`] of the same server.
impl HealthStore for RedisDeadLetters {
    fn get<'a>(&'a self, endpoint: &'a str) -> StoreFuture<'a, Option<String>> {
        let mut connection = self.connection.clone();
        Box::pin(async move {
            connection
                .hget(ENDPOINT_HEALTH, endpoint)
                .await
                .map_err(crate::health::BoxError::from)
        })
    }

    fn swap<'a>(
        &'a self,
        endpoint: &'a str,
        expected: Option<&'a str>,
        new: Option<&'a str>,
    ) -> StoreFuture<'a, bool> {
        let mut connection = self.connection.clone();
        let flag = |value: Option<&str>| if value.is_some() { "1" } else { "0" };
        let mut call = SWAP_SCRIPT.key(ENDPOINT_HEALTH);
        call.arg(endpoint)
            .arg(flag(expected))
            .arg(expected.unwrap_or_default())
            .arg(flag(new))
            .arg(new.unwrap_or_default());
        Box::pin(async move {
            call.invoke_async(&mut connection)
                .await
                .map_err(crate::health::BoxError::from)
        })
    }
}

/// The dead letters in a Redis hash.
#[derive(Clone)]
pub struct RedisDeadLetters {
    connection: ConnectionManager,
    key: String,
    /// The deliveries' queue, for the moves of a failing endpoint's backlog.
    queue: QueueKeys,
    /// The outbox's task that moves due deliveries to the queue, alive as long as the outbox
    /// (none outside a tokio runtime: then no backlog is moved).
    promoter: Option<Arc<Promoter>>,
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
    fn health_store(&self) -> Option<std::sync::Arc<dyn HealthStore>> {
        Some(std::sync::Arc::new(self.clone()))
    }

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

    async fn defer_due(
        &self,
        endpoint: &str,
        before: SystemTime,
        until: SystemTime,
    ) -> Result<u64, EngineError> {
        self.move_backlog(endpoint, before, until).await
    }

    async fn resume_deferred(&self, endpoint: &str, now: SystemTime) -> Result<u64, EngineError> {
        self.resume_backlog(endpoint, now).await
    }

    async fn resume_one(&self, endpoint: &str, at: SystemTime) -> Result<u64, EngineError> {
        self.resume_oldest(endpoint, at).await
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
