//! [`ApalisOutbox`]: the [`Outbox`] on apalis 1.0, over any durable backend that implements
//! apalis's `TaskSink` (apalis-sqlite, apalis-redis and apalis-postgres are the ones this crate
//! builds and tests), and its [`DeadLetterQueue`], read and replayed.
//!
//! A delivery is a task due at its [`due_at`](Delivery::due_at) rounded **up** to the engine's
//! whole second (apalis stores `run_at` in seconds), so no engine hands one out early; its
//! idempotency key is its [`step_key`](Delivery::step_key), so a step stored twice (a worker
//! killed between storing the next step and its task's acknowledgement) is kept once. The dead
//! letters wait, in a queue no worker takes, to be read and replayed.

use crate::outbox::Outbox;
use crate::record::Delivery;
use crate::step::DeadLetter;
use apalis_core::backend::codec::Codec;
use apalis_core::backend::finalize::Durable;
use apalis_core::backend::{Filter, ListTasks, TaskSink, WireFormatBackend};
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::status::Status;
use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The outbox on an apalis backend: `queue` for deliveries, `dead` for dead letters.
#[derive(Clone, Debug)]
pub struct ApalisOutbox<Q, D> {
    queue: Q,
    dead: D,
}

impl<Q, D> ApalisOutbox<Q, D> {
    /// Deliveries in `queue`, dead letters in `dead`.
    pub fn new(queue: Q, dead: D) -> Self {
        Self { queue, dead }
    }

    /// The deliveries' queue: give it to the workers' `WorkerBuilder::backend`.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The dead letters' queue.
    pub fn dead(&self) -> &D {
        &self.dead
    }
}

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

/// `time` in whole seconds since the epoch, rounded up.
fn ceil_secs(time: SystemTime) -> u64 {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
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
            .run_at_timestamp(ceil_secs(delivery.due_at()))
            // The engine's own retries re-run a step only when storing its outcome failed (or
            // a worker died): a step must never run out of them and stay undone.
            .max_attempts(i32::MAX as usize)
            .idempotency_key(delivery.step_key())
            .build();
        stored(self.queue.clone().push_task(task).await)
    }

    async fn dead_letter(&self, letter: DeadLetter) -> Result<(), EngineError> {
        self.dead.push(letter).await
    }
}

/// Where an [`ApalisOutbox`] keeps its dead letters: each written once (under its delivery's
/// [`dead_key`](Delivery::dead_key)), all read back for [`replay`].
///
/// The engine modules implement it: `sqlite` on an apalis queue no worker takes; `redis` on a
/// hash of its own (apalis-redis 1.0's task listing reads a key its queues do not use, so it
/// finds nothing). Another engine implements it on whatever it can list.
pub trait DeadLetterQueue {
    /// Writes `letter`; the same delivery's letter written twice is kept once.
    fn push(&self, letter: DeadLetter) -> impl Future<Output = Result<(), EngineError>> + Send;

    /// Every letter, in any order.
    fn all(&self) -> impl Future<Output = Result<Vec<DeadLetter>, EngineError>> + Send;
}

/// [`DeadLetterQueue::push`] on an apalis queue that no worker takes.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) async fn push_to_queue<D>(dead: &D, letter: DeadLetter) -> Result<(), EngineError>
where
    D: TaskSink<DeadLetter, Durable> + Clone,
    D::Error: std::error::Error + Send + Sync + 'static,
{
    let key = letter.delivery.dead_key();
    let task = TaskBuilder::new(letter).idempotency_key(key).build();
    stored(dead.clone().push_task(task).await)
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

/// [`DeadLetterQueue::all`] on an apalis queue that no worker takes: its pending tasks, read
/// page by page.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) async fn list_queue<D>(dead: &D) -> Result<Vec<DeadLetter>, EngineError>
where
    D: ListTasks + WireFormatBackend + Sync,
    D::Codec: Codec<DeadLetter, Compact = D::Compact>,
    <D::Codec as Codec<DeadLetter>>::Error: std::error::Error + Send + Sync + 'static,
    D::Error: std::error::Error + Send + Sync + 'static,
{
    const PAGE: u32 = 500;
    let mut letters = Vec::new();
    for page in 1.. {
        let filter = Filter {
            status: Some(Status::Pending),
            page,
            page_size: Some(PAGE),
        };
        let tasks = dead.list_tasks(&filter).await.map_err(EngineError::new)?;
        let full = tasks.len() == PAGE as usize;
        for task in tasks {
            letters.push(dead.codec().decode(&task.args).map_err(EngineError::new)?);
        }
        if !full {
            break;
        }
    }
    Ok(letters)
}

/// Every dead letter in `dead`, oldest first.
pub async fn dead_letters<D: DeadLetterQueue>(dead: &D) -> Result<Vec<DeadLetter>, EngineError> {
    let mut letters = dead.all().await?;
    letters.sort_by_key(|letter| letter.at);
    Ok(letters)
}

/// Sends the dead letters dead-lettered at or after `since` again, from their schedule's first
/// slot, due at once; only those of `endpoint` when it is given (after
/// [`EndpointHealth::enable`](crate::health::EndpointHealth::enable)). Each keeps its id (the
/// receiver still deduplicates) and its history; a letter replayed twice is stored once.
/// Returns how many were stored.
pub async fn replay<Q, D>(
    outbox: &ApalisOutbox<Q, D>,
    since: SystemTime,
    endpoint: Option<&str>,
) -> Result<usize, EngineError>
where
    ApalisOutbox<Q, D>: Outbox<Error = EngineError>,
    D: DeadLetterQueue,
{
    let mut stored = 0;
    let now = SystemTime::now();
    for letter in dead_letters(outbox.dead()).await? {
        if letter.dead_at() < since || endpoint.is_some_and(|e| e != letter.delivery.endpoint()) {
            continue;
        }
        outbox.store(letter.delivery.replayed(now)).await?;
        stored += 1;
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_round_up_to_the_engine_second() {
        let second = UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(ceil_secs(second), 100);
        assert_eq!(ceil_secs(second + Duration::from_millis(1)), 101);
        assert_eq!(ceil_secs(second + Duration::from_nanos(1)), 101);
    }
}
