//! The dead letters of an [`ApalisOutbox`]: where an engine keeps them
//! ([`DeadLetterQueue`], with the engine's moves of a failing endpoint's backlog), how they are
//! written and listed on an apalis queue no worker takes, and [`replay`].

use super::{stored, ApalisOutbox, EngineError};
use crate::health::HealthStore;
use crate::outbox::Outbox;
use crate::step::DeadLetter;
use apalis_core::backend::codec::Codec;
use apalis_core::backend::finalize::Durable;
use apalis_core::backend::{Filter, ListTasks, TaskSink, WireFormatBackend};
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::status::Status;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

/// Where an [`ApalisOutbox`] keeps its dead letters: each written once (under its delivery's
/// [`dead_key`](crate::Delivery::dead_key)), all read back for [`replay`].
///
/// The engine modules implement it: `sqlite` on an apalis queue no worker takes; `redis` on a
/// hash of its own (apalis-redis 1.0's task listing reads a key its queues do not use, so it
/// finds nothing). Another engine implements it on whatever it can list.
pub trait DeadLetterQueue {
    /// Writes `letter`; the same delivery's letter written twice is kept once.
    fn push(&self, letter: DeadLetter) -> impl Future<Output = Result<(), EngineError>> + Send;

    /// Every letter, in any order.
    fn all(&self) -> impl Future<Output = Result<Vec<DeadLetter>, EngineError>> + Send;

    /// Whether `letter` was [replayed](replay) already. The engines keep this with the letter,
    /// so that a later replay of the same span never sends a delivered letter again, even once
    /// the replayed step's key is gone from the deliveries' queue (a vacuum, a key's TTL). The
    /// default, for a queue that does not keep it: never.
    fn was_replayed(
        &self,
        letter: &DeadLetter,
    ) -> impl Future<Output = Result<bool, EngineError>> + Send {
        let _ = letter;
        std::future::ready(Ok(false))
    }

    /// Records that `letter` was replayed (after its replay was stored). The default keeps
    /// nothing.
    fn mark_replayed(
        &self,
        letter: &DeadLetter,
    ) -> impl Future<Output = Result<(), EngineError>> + Send {
        let _ = letter;
        std::future::ready(Ok(()))
    }

    /// Where the engine keeps the endpoints' health beside the dead letters, if it does (the
    /// SQLite, Redis and Postgres queues do; the default: nowhere, each process judges alone).
    fn health_store(&self) -> Option<Arc<dyn HealthStore>> {
        None
    }

    /// [`Outbox::defer_due`] on the deliveries' queue of the same engine, if it can: SQLite's
    /// and Postgres's move them in one `UPDATE` in the crate's deliveries queue (`DELIVERIES`,
    /// the name each engine module's `outbox` gives it), Redis's in slices of 1,000 into a set
    /// of the outbox's own; the default moves none.
    fn defer_due(
        &self,
        endpoint: &str,
        before: SystemTime,
        until: SystemTime,
    ) -> impl Future<Output = Result<u64, EngineError>> + Send {
        let _ = (endpoint, before, until);
        std::future::ready(Ok(0))
    }

    /// [`Outbox::resume_deferred`] on the deliveries' queue of the same engine, as
    /// [`defer_due`](Self::defer_due) moves them; the default moves none.
    fn resume_deferred(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<u64, EngineError>> + Send {
        let _ = (endpoint, now);
        std::future::ready(Ok(0))
    }

    /// [`Outbox::resume_one`] on the deliveries' queue of the same engine, as
    /// [`defer_due`](Self::defer_due) moves them; the default moves none.
    fn resume_one(
        &self,
        endpoint: &str,
        at: SystemTime,
    ) -> impl Future<Output = Result<u64, EngineError>> + Send {
        let _ = (endpoint, at);
        std::future::ready(Ok(0))
    }
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
/// receiver still deduplicates) and its history; a letter replayed twice is stored once. A letter
/// replayed before is not stored again ([`DeadLetterQueue::was_replayed`]), and letters of
/// unreadable records ([`Delivery::stored_form`](crate::Delivery::stored_form)) are skipped: they
/// make no request. Returns how many letters of the span are replayed, now or before.
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
        if letter.dead_at() < since
            || endpoint.is_some_and(|e| e != letter.delivery.endpoint())
            || letter.delivery.stored_form().is_some()
        {
            continue;
        }
        // Stored, then marked: a replay cut between the two is stored again by the next one,
        // and kept once while its step's key is held.
        if !outbox.dead().was_replayed(&letter).await? {
            outbox.store(letter.delivery.clone().replayed(now)).await?;
            outbox.dead().mark_replayed(&letter).await?;
        }
        stored += 1;
    }
    Ok(stored)
}
