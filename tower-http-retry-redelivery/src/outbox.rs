//! [`Outbox`]: the small trait between a worker and the queue it stores deliveries in.

use crate::health::HealthStore;
use crate::record::Delivery;
use crate::step::DeadLetter;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

/// Where deliveries are stored: the stable surface between the worker's rules and an engine.
///
/// "Done" is not here: a delivery taken from the queue is done when the worker's handler
/// returns `Ok`, and the engine marks its task so. An engine adapter
/// ([`ApalisOutbox`](crate::ApalisOutbox)) implements the two writes; a test can implement them
/// on a `Vec`.
pub trait Outbox: Clone + Send + Sync + 'static {
    /// The engine's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Stores `delivery`, due at its [`due_at`](Delivery::due_at), under its
    /// [`step_key`](Delivery::step_key): a worker that re-runs a step after a crash stores the
    /// next one again, and the engine keeps it once. Nothing is sent before this returns `Ok`.
    fn store(&self, delivery: Delivery) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Moves a delivery to the dead-letter queue.
    fn dead_letter(
        &self,
        letter: DeadLetter,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Where the engine keeps the endpoints' health for the whole fleet, if it does:
    /// [`Redelivery::new`](crate::Redelivery::new) shares its
    /// [`EndpointHealth`](crate::health::EndpointHealth) there. The default: nowhere (each
    /// process judges by what it sees, and a restart forgets).
    fn health_store(&self) -> Option<Arc<dyn HealthStore>> {
        None
    }

    /// Moves every delivery to `endpoint` that waits in the queue due before `before` to `until`
    /// (at or after `before`), in one engine write where the engine can (in slices where one would
    /// block it too long), and returns how many: called when the retry layer hands a delivery back
    /// because its endpoint is down (`before`: the end of its pause, or sooner), so that the
    /// workers do not take the endpoint's backlog one delivery at a time ahead of other endpoints'
    /// deliveries, nor all of it at each of its probes. The default moves none (each is then handed
    /// back as it is taken); an engine may move fewer (Redis stops after 10 s of slices): what it
    /// leaves is handed back the same way.
    fn defer_due(
        &self,
        endpoint: &str,
        before: SystemTime,
        until: SystemTime,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send {
        let _ = (endpoint, before, until);
        std::future::ready(Ok(0))
    }

    /// Makes due again every delivery to `endpoint` that [`defer_due`](Self::defer_due) moved
    /// past its own due time, each at the later of `now` and that time, as `defer_due` writes,
    /// and returns how many: called when the endpoint takes a delivery again after failing. The
    /// default moves none.
    fn resume_deferred(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send {
        let _ = (endpoint, now);
        std::future::ready(Ok(0))
    }

    /// Makes one delivery to `endpoint` that [`defer_due`](Self::defer_due) moved (the oldest
    /// where the engine can tell) due at `at`, or at its own due time if later, and returns how
    /// many (0 or 1): called by the process that moved the backlog when a delivery that could
    /// carry the endpoint's next probe no longer does and the pacer holds the endpoint until
    /// `at`, so that a delivery is due for that probe and the endpoint's return is seen then,
    /// not when the backlog falls due. If the endpoint comes back before `at`,
    /// [`resume_deferred`](Self::resume_deferred) makes that delivery due again with the rest
    /// where the engine cannot tell it from them (SQLite, Postgres). The default moves none.
    fn resume_one(
        &self,
        endpoint: &str,
        at: SystemTime,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send {
        let _ = (endpoint, at);
        std::future::ready(Ok(0))
    }
}
