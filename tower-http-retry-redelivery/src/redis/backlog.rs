//! A failing endpoint's backlog moved aside on Redis and brought back, in slices of Lua calls
//! ([`Outbox::defer_due`], [`Outbox::resume_deferred`]), or one delivery of it for a probe
//! ([`Outbox::resume_one`]).
//!
//! [`Outbox::defer_due`]: crate::Outbox::defer_due
//! [`Outbox::resume_deferred`]: crate::Outbox::resume_deferred
//! [`Outbox::resume_one`]: crate::Outbox::resume_one

use super::RedisDeadLetters;
use crate::engine::{self, EngineError};
use crate::record;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

/// The most deliveries one call of a move of an endpoint's backlog (or of its resume) looks at:
/// a call blocks the server, and a worker's fetch that waits over its connection's response
/// timeout (500 ms) stops the worker; a slice of the queue's list of 100,000 took 10 ms.
const MOVE_AT_ONCE: u64 = 1_000;

/// The most bytes of records one slice of a move reads (at least one record): with large
/// bodies a slice looks at fewer deliveries, and stays short.
const MOVE_BYTES_AT_ONCE: u64 = 4 << 20;

/// How long a move of an endpoint's backlog may go on, slice after slice (past it, one slice
/// more of each place): what it leaves is handed back as it is taken.
const MOVE_TIME_LIMIT: Duration = Duration::from_secs(10);

/// How long the set of an endpoint's moved deliveries outlives its last move: only a resume
/// reads it, and one that never comes leaves the moved deliveries due a deadline later anyway.
const MOVED_KEPT: Duration = Duration::from_secs(24 * 3600);

/// One slice of a move of an endpoint's backlog ([`Outbox::defer_due`]): its deliveries due
/// before a time, moved to a later one in the outbox's set of moved deliveries, which
/// [`PROMOTE`](super::PROMOTE) empties in slices. Each call looks at no more than a slice of one
/// place: apalis-redis's scheduled set, the moved set (both below the time, from the latest), or
/// the queue's list (from its tail: a worker's fetch takes from its head, and a delivery moved
/// out of it leaves the others in their order), past the `offset` entries kept by the calls before; a delivery is
/// the endpoint's if its stored JSON holds the endpoint's field. A slice reads at most `budget`
/// bytes of records (one at least), so large bodies make it shorter, never slower. Each moved
/// one's own due second (0: due already) goes to the endpoint's set, for [`RESUME_DEFERRED`]; a
/// delivery moved again keeps the first.
///
/// KEYS: the scheduled set, the queue's list, the records' hash, the moved set, the endpoint's
/// set. ARGV: the endpoint's field, before (Unix seconds), until, the slice's length, how long
/// the endpoint's set is kept (seconds), the place (1, 2 or 3 in the order above), the offset,
/// the budget. Returns how many it moved, how many it kept, and 1 if the place has no more.
///
/// [`Outbox::defer_due`]: crate::Outbox::defer_due
const DEFER_DUE: &str = r#"
local field, until_at, most = ARGV[1], ARGV[3], tonumber(ARGV[4])
local place, offset, budget = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local moved, kept, read = 0, 0, 0
-- Whether the delivery `id` is the endpoint's; nil once the slice has read its budget.
local function ours(id)
    local size = redis.call("hstrlen", KEYS[3], id)
    if read > 0 and read + size > budget then
        return nil
    end
    read = read + size
    local record = redis.call("hget", KEYS[3], id)
    return record ~= false and string.find(record, field, 1, true) ~= nil
end
local function move(id, own_due)
    redis.call("zadd", KEYS[4], until_at, id)
    redis.call("zadd", KEYS[5], "NX", own_due, id)
    moved = moved + 1
end
local done
if place < 3 then
    local set = place == 1 and KEYS[1] or KEYS[4]
    local due = redis.call("zrevrangebyscore", set, "(" .. ARGV[2], "-inf", "WITHSCORES", "LIMIT", offset, most)
    done = #due < 2 * most
    for i = 1, #due, 2 do
        local mine = ours(due[i])
        if mine == nil then
            done = false
            break
        elseif mine then
            redis.call("zrem", set, due[i])
            move(due[i], due[i + 1])
        else
            kept = kept + 1
        end
    end
else
    -- Marked where they stand, then taken out in one pass, so that the others keep their order.
    local marker = KEYS[4] .. "::marker"
    local last = redis.call("llen", KEYS[2]) - 1 - offset
    local first = math.max(0, last - most + 1)
    done = first == 0
    local due = last >= 0 and redis.call("lrange", KEYS[2], first, last) or {}
    for i = #due, 1, -1 do
        local mine = ours(due[i])
        if mine == nil then
            done = false
            break
        elseif mine then
            redis.call("lset", KEYS[2], first + i - 1, marker)
            move(due[i], 0)
        else
            kept = kept + 1
        end
    end
    if moved > 0 then
        redis.call("lrem", KEYS[2], 0, marker)
    end
end
if moved > 0 then
    redis.call("expire", KEYS[5], ARGV[5])
end
return {moved, kept, done and 1 or 0}
"#;

/// One slice of a resume of what [`DEFER_DUE`] moved for an endpoint
/// ([`Outbox::resume_deferred`]): the first of the endpoint's set, taken out of it, each due at
/// the later of now and its own due second if it still waits in the moved set past that.
///
/// KEYS: the moved set, the endpoint's set. ARGV: now (Unix seconds), the slice's length.
/// Returns how many it resumed and how many it took from the endpoint's set.
///
/// [`Outbox::resume_deferred`]: crate::Outbox::resume_deferred
const RESUME_DEFERRED: &str = r#"
local now = tonumber(ARGV[1])
local resumed = 0
local deferred = redis.call("zpopmin", KEYS[2], tonumber(ARGV[2]))
for i = 1, #deferred, 2 do
    local at = tonumber(redis.call("zscore", KEYS[1], deferred[i]))
    local due = math.max(now, tonumber(deferred[i + 1]))
    if at and due < at then
        redis.call("zadd", KEYS[1], due, deferred[i])
        resumed = resumed + 1
    end
end
return {resumed, #deferred / 2}
"#;

/// The oldest delivery of an endpoint's backlog that [`DEFER_DUE`] moved, due at the later of the
/// pacer's next probe and its own due second ([`Outbox::resume_one`]). The endpoint's set also
/// holds deliveries that fell due from the moved set since (their entries are removed here, at
/// most `ARGV[2]` of them a call); a moved delivery due by the probe anyway is left as it is.
///
/// KEYS: the moved set, the endpoint's set. ARGV: the probe's time (Unix seconds), the most
/// entries to look at. Returns 1 if it made one due, else 0.
///
/// [`Outbox::resume_one`]: crate::Outbox::resume_one
const RESUME_ONE: &str = r#"
local at = tonumber(ARGV[1])
for _ = 1, tonumber(ARGV[2]) do
    local oldest = redis.call("zrange", KEYS[2], 0, 0, "WITHSCORES")
    if #oldest == 0 then
        return 0
    end
    local moved_to = tonumber(redis.call("zscore", KEYS[1], oldest[1]))
    if moved_to then
        local due = math.max(at, tonumber(oldest[2]))
        if due >= moved_to then
            return 0
        end
        redis.call("zadd", KEYS[1], due, oldest[1])
        redis.call("zrem", KEYS[2], oldest[1])
        return 1
    end
    redis.call("zrem", KEYS[2], oldest[1])
end
return 0
"#;

/// [`DEFER_DUE`], hashed once.
static DEFER_DUE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(DEFER_DUE));

/// [`RESUME_DEFERRED`], hashed once.
static RESUME_DEFERRED_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(RESUME_DEFERRED));

/// [`RESUME_ONE`], hashed once.
static RESUME_ONE_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(RESUME_ONE));

impl RedisDeadLetters {
    /// The sorted set of `endpoint`'s moved deliveries, by their own due second.
    fn deferred_key(&self, endpoint: &str) -> String {
        format!("{}::{endpoint}", self.queue.moved)
    }

    /// [`Outbox::defer_due`] on Redis, in slices.
    pub(super) async fn move_backlog(
        &self,
        endpoint: &str,
        before: SystemTime,
        until: SystemTime,
    ) -> Result<u64, EngineError> {
        // Without the outbox's task (an outbox made outside a runtime), nothing here would bring
        // a moved delivery back to the queue: each is handed back as it is taken instead.
        if !self
            .promoter
            .as_ref()
            .is_some_and(|promoter| promoter.is_running())
        {
            return Ok(0);
        }
        let mut connection = self.connection.clone();
        let started = std::time::Instant::now();
        let mut total = 0;
        // The queue's list first: what is due now. Each place gets a slice at least.
        for place in [3, 1, 2] {
            let mut offset = 0;
            loop {
                let (moved, kept, done): (u64, u64, u8) = DEFER_DUE_SCRIPT
                    .key(&self.queue.scheduled)
                    .key(&self.queue.active)
                    .key(&self.queue.data)
                    .key(&self.queue.moved)
                    .key(self.deferred_key(endpoint))
                    .arg(record::endpoint_field(endpoint))
                    .arg(engine::second_rounded_up(before))
                    .arg(engine::second_rounded_up(until))
                    .arg(MOVE_AT_ONCE)
                    .arg(MOVED_KEPT.as_secs())
                    .arg(place)
                    .arg(offset)
                    .arg(MOVE_BYTES_AT_ONCE)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(EngineError::new)?;
                total += moved;
                offset += kept;
                // Bounded: while workers store and fetch, the slices could chase a moving queue.
                if done == 1 || started.elapsed() >= MOVE_TIME_LIMIT {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// [`Outbox::resume_deferred`] on Redis, in slices.
    pub(super) async fn resume_backlog(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> Result<u64, EngineError> {
        let mut connection = self.connection.clone();
        let mut total = 0;
        loop {
            let (resumed, taken): (u64, u64) = RESUME_DEFERRED_SCRIPT
                .key(&self.queue.moved)
                .key(self.deferred_key(endpoint))
                .arg(engine::now_second(now))
                .arg(MOVE_AT_ONCE)
                .invoke_async(&mut connection)
                .await
                .map_err(EngineError::new)?;
            total += resumed;
            if taken < MOVE_AT_ONCE {
                return Ok(total);
            }
        }
    }

    /// [`Outbox::resume_one`] on Redis: one call, which looks at a slice's worth of entries at
    /// most.
    pub(super) async fn resume_oldest(
        &self,
        endpoint: &str,
        at: SystemTime,
    ) -> Result<u64, EngineError> {
        RESUME_ONE_SCRIPT
            .key(&self.queue.moved)
            .key(self.deferred_key(endpoint))
            .arg(engine::second_rounded_up(at))
            .arg(MOVE_AT_ONCE)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(EngineError::new)
    }
}
