//! [`Redelivery`]: the worker's side. It stores new deliveries, and sends each due one through
//! the retry layer, then stores it again, dead-letters it or is done with it.

use crate::health::{lock, EndpointHealth, HealthRules};
use crate::outbox::Outbox;
use crate::record::Delivery;
use crate::schedule::{unix_ms, Schedule};
use crate::stats::{Counters, Event, RedeliveryStats};
use crate::step::{self, DeadLetter, DeadReason, ReceiverControl, SlotResult, Step};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tower::ServiceExt;
use tower_http_retry::{RetryReport, StopReason};
use tower_service::Service;

/// Sends due deliveries through a client (the retry layer, its pacer and fleet store, the
/// transport) and applies the [schedule](Schedule) and the [endpoint health](EndpointHealth)
/// to what comes back. Cloning shares the client, the health and the counters.
///
/// `B` is the client's request body, made from the record's bytes (`From<Bytes>`: `Bytes`,
/// `http_body_util::Full<Bytes>`, ...).
pub struct Redelivery<S, O, B = Bytes> {
    inner: Arc<Inner<S, O>>,
    _body: PhantomData<fn(B)>,
}

struct Inner<S, O> {
    client: S,
    outbox: O,
    schedule: Schedule,
    health: EndpointHealth,
    counters: Counters,
    /// Per endpoint, its backlog's last move in bulk (pruned once the backlog falls due).
    deferrals: Mutex<HashMap<String, Deferral>>,
}

/// An endpoint's backlog moved in bulk: when it may move again (its pause's end), the time it
/// was moved to, and the probe a delivery of it was last made due for.
#[derive(Clone, Copy, Debug)]
struct Deferral {
    next_move: SystemTime,
    moved_to: SystemTime,
    probe_at: Option<SystemTime>,
}

impl<S, O, B> Clone for Redelivery<S, O, B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            _body: PhantomData,
        }
    }
}

impl<S, O, B> fmt::Debug for Redelivery<S, O, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redelivery")
            .field("schedule", &self.inner.schedule)
            .field("stats", &self.inner.counters.snapshot())
            .finish_non_exhaustive()
    }
}

/// What a worker did with one due delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handled {
    /// Delivered.
    Delivered,
    /// Sent and failed; stored again for its next slot.
    StoredAgain {
        /// The slot it is due in.
        slot: u32,
        /// When, Unix milliseconds.
        due_at: u64,
    },
    /// Handed back unsent by the retry layer (its endpoint down or paused); stored again at the
    /// pacer's time, in the same slot.
    Deferred {
        /// When, Unix milliseconds.
        due_at: u64,
    },
    /// Moved to the dead-letter queue.
    DeadLettered(DeadReason),
}

/// A call through the client, boxed.
type BoxedCall<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

/// The future of [`Redelivery::handle`].
pub type HandleFuture<E> = Pin<Box<dyn Future<Output = Result<Handled, StoreFailed<E>>> + Send>>;

/// The outbox failed to store what the worker decided. The delivery's task is not done: the
/// engine hands it out again (at least once), and the receiver deduplicates a second send.
#[derive(Debug)]
pub struct StoreFailed<E>(pub E);

impl<E: fmt::Display> fmt::Display for StoreFailed<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the outbox could not store a delivery: {}", self.0)
    }
}

impl<E: std::error::Error + 'static> std::error::Error for StoreFailed<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl<S, O: Outbox, B> Redelivery<S, O, B> {
    /// Sends through `client`, stores in `outbox`, on `schedule`; endpoints disabled by
    /// [`HealthRules::default`], their health kept in the outbox's engine when it keeps one
    /// ([`Outbox::health_store`]: SQLite, Redis and Postgres do), so that the fleet judges as
    /// one and a restart keeps it (see [`with_health`](Self::with_health)).
    pub fn new(client: S, outbox: O, schedule: Schedule) -> Self {
        let health = match outbox.health_store() {
            Some(store) => EndpointHealth::shared(HealthRules::default(), store),
            None => EndpointHealth::default(),
        };
        Self::with_health(client, outbox, schedule, health)
    }

    /// As [`new`](Self::new), with the endpoint health given: other rules
    /// (`EndpointHealth::shared(rules, store)` with the outbox's
    /// [`health_store`](Outbox::health_store)), or one in this process's memory only
    /// ([`EndpointHealth::new`]).
    pub fn with_health(client: S, outbox: O, schedule: Schedule, health: EndpointHealth) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                outbox,
                schedule,
                health,
                counters: Counters::default(),
                deferrals: Mutex::default(),
            }),
            _body: PhantomData,
        }
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.inner.schedule
    }

    /// The endpoint health: which endpoints are disabled, and their re-enabling.
    pub fn health(&self) -> &EndpointHealth {
        &self.inner.health
    }

    /// The outbox.
    pub fn outbox(&self) -> &O {
        &self.inner.outbox
    }

    /// What this process's workers did so far.
    pub fn stats(&self) -> RedeliveryStats {
        self.inner.counters.snapshot()
    }

    /// Stores a new delivery, due at once: the outbox. Nothing is sent before it is stored; a
    /// worker takes it from the queue.
    pub async fn enqueue(&self, delivery: Delivery) -> Result<(), O::Error> {
        self.inner.outbox.store(delivery).await?;
        self.inner.counters.count(Event::Stored);
        Ok(())
    }
}

impl<S, O, B, RB> Redelivery<S, O, B>
where
    S: Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Send,
    O: Outbox,
    B: From<Bytes> + Send + 'static,
    RB: Send + 'static,
{
    /// Handles one due delivery: sends it through the client unless its endpoint is disabled,
    /// then stores it again, dead-letters it, or returns [`Handled::Delivered`] (the engine
    /// marks its task done). An `Err` means the outbox failed; the task is not done.
    ///
    /// The future is boxed (and `Send`, `'static`): an apalis worker's handler can return it
    /// as it is, whatever the client's type.
    pub fn handle(&self, delivery: Delivery) -> HandleFuture<O::Error> {
        let this = self.clone();
        Box::pin(async move { this.run(delivery).await })
    }

    async fn run(&self, delivery: Delivery) -> Result<Handled, StoreFailed<O::Error>> {
        let inner = &*self.inner;
        let _handling = inner.counters.handling();
        inner.counters.count(Event::Due);
        // A shared health: what the fleet learned (at most a second old) before judging.
        inner.health.sync(delivery.endpoint()).await;
        let step = match step::before_sending(&delivery, &inner.health, SystemTime::now()) {
            Some(step) => step,
            None => match delivery.try_request() {
                Ok(request) => self.send(delivery, request).await,
                Err(_) => Step::DeadLetter(DeadLetter {
                    delivery,
                    reason: DeadReason::Unreadable,
                    at: unix_ms(SystemTime::now()),
                }),
            },
        };
        self.apply(step).await
    }

    async fn send(&self, delivery: Delivery, request: http::Request<Bytes>) -> Step {
        let inner = &*self.inner;
        let started = SystemTime::now();
        // Boxed here, where `S::Future: Send` is a bound: a caller's `Send` check of the
        // unboxed call would walk the retry layer's future type and trip on the higher-ranked
        // bounds of its classifier (rustc's "not general enough").
        let call: BoxedCall<S::Response, S::Error> =
            Box::pin(inner.client.clone().oneshot(request.map(B::from)));
        let limit = inner.schedule.slot_limit();
        let (result, report) = match tokio::time::timeout(limit, RetryReport::capture(call)).await {
            Ok((result, report)) => (Some(result), report),
            // A receiver that never answers (or a stack without a per-attempt timeout): the
            // slot failed at its limit, as a timed-out attempt; the next slot is on schedule.
            Err(_) => {
                let mut report = RetryReport::default();
                report.attempts = 1;
                report.stop = StopReason::Deadline;
                (None, report)
            }
        };
        if report.attempts > 0 {
            inner.counters.count(Event::Sent);
        }
        let response = result.as_ref().and_then(|result| result.as_ref().ok());
        let status = response.map(|response| response.status().as_u16());
        let control = response
            .filter(|_| inner.health.rules().honours_receiver_control())
            .and_then(|response| ReceiverControl::of(response.headers()));
        drop(result);
        let endpoint = delivery.endpoint().to_owned();
        let was_disabled = inner.health.disabled(&endpoint).is_some();
        let was_failing = inner.health.failing(&endpoint);
        // The slot's first attempt went out after its waits before it (the pacer's queue, a
        // first-attempt jitter): the next slot's delay counts from there, not from the call.
        let waited: Duration = report
            .delays
            .iter()
            .filter(|delay| delay.after_attempt == 0)
            .map(|delay| delay.duration)
            .sum();
        let result = SlotResult {
            started: started + waited,
            status,
            report,
        };
        let resend_at = result.report.resend_at;
        let now = SystemTime::now();
        let step = match control {
            Some(control) => {
                step::on_receiver_control(delivery, &result, control, &inner.health, now)
            }
            None => step::decide(delivery, result, &inner.schedule, &inner.health, now),
        };
        if !was_disabled && inner.health.disabled(&endpoint).is_some() {
            inner.counters.count(Event::EndpointDisabled);
        }
        inner.health.flush().await;
        if was_failing && matches!(step, Step::Delivered) {
            self.resume_backlog(&endpoint, now).await;
        }
        if let Some(at) = resend_at.filter(|at| step.leaves_the_probe(*at)) {
            self.keep_probe_due(&endpoint, at, now).await;
        }
        step
    }

    /// A delivery to `endpoint` that could carry its next probe no longer does
    /// ([`Step::leaves_the_probe`]), and the retry layer (its pacer) would send again at `at`: if
    /// this process moved the endpoint's backlog until after then, and has not made one of it due
    /// for a probe between now and then already, one is made due then (one write a probe, none when
    /// nothing is moved). Without it, a moved backlog's endpoint could be seen back only when the
    /// backlog falls due: no other delivery to it may be due before. A failed write loses nothing:
    /// the backlog falls due at the time it was moved to.
    async fn keep_probe_due(&self, endpoint: &str, at: SystemTime, now: SystemTime) {
        let inner = &*self.inner;
        if !inner.health.failing(endpoint) {
            return;
        }
        {
            let mut deferrals = lock(&inner.deferrals);
            let Some(deferral) = deferrals.get_mut(endpoint) else {
                return;
            };
            let carried = deferral
                .probe_at
                .is_some_and(|probe| now < probe && probe <= at);
            if at >= deferral.moved_to || carried {
                return;
            }
            deferral.probe_at = Some(at);
        }
        let resumed = inner.outbox.resume_one(endpoint, at).await.unwrap_or(0);
        inner.counters.count_n(Event::ResumedForProbe, resumed);
        if resumed == 0 {
            // Nothing made due (a move not yet written, a failed write): the next failed
            // attempt before the probe tries again.
            if let Some(deferral) = lock(&inner.deferrals).get_mut(endpoint) {
                if deferral.probe_at == Some(at) {
                    deferral.probe_at = None;
                }
            }
        }
    }

    /// A delivery to `endpoint` was handed back until `pause_end`: if the endpoint is failing (its
    /// last attempt failed: down, or a loss while it ramps), the engine moves its other deliveries
    /// due before then a slot's deadline ahead in bulk (one write, or slices on Redis), so that the
    /// workers take its backlog neither one delivery at a time ahead of other endpoints' deliveries
    /// nor all of it at each probe: the delivery handed back, due at the pause's end, carries the
    /// probe, and one moved delivery is made due for each probe after it
    /// ([`keep_probe_due`](Self::keep_probe_due)). A success brings the backlog back
    /// ([`resume_backlog`](Self::resume_backlog)); without one, it falls due a deadline later and
    /// moves again, so a moved delivery whose schedule ends meanwhile is dead-lettered at most that
    /// late. Once per pause: no other move until its end, and then only the deliveries that fell
    /// due since. Nothing is lost if the move fails: each delivery is then handed back as it is
    /// taken.
    async fn defer_backlog(&self, endpoint: String, pause_end: SystemTime) {
        let inner = &*self.inner;
        if !inner.health.failing(&endpoint) {
            return;
        }
        let now = SystemTime::now();
        let moved_to = now + inner.schedule.slot_sequence().deadline;
        let deferral = Deferral {
            next_move: pause_end.min(moved_to),
            moved_to,
            probe_at: None,
        };
        {
            let mut deferrals = lock(&inner.deferrals);
            deferrals.retain(|_, last| last.moved_to > now);
            if deferrals
                .get(&endpoint)
                .is_some_and(|last| last.next_move > now)
            {
                return;
            }
            deferrals.insert(endpoint.clone(), deferral);
        }
        match (inner.outbox)
            .defer_due(&endpoint, deferral.next_move, moved_to)
            .await
        {
            Ok(moved) => inner.counters.count_n(Event::DeferredInBulk, moved),
            // Moved at the next hand-back instead (nothing to resume on an engine that failed).
            Err(_) => {
                let mut deferrals = lock(&inner.deferrals);
                if deferrals.get(&endpoint).map(|last| last.moved_to) == Some(moved_to) {
                    deferrals.remove(&endpoint);
                }
                return;
            }
        }
        // The endpoint took a delivery while the move ran (the probe goes out as the pause
        // ends, when the move may start): its resume, which takes the move's entry away, may
        // have come first or skipped rows the move held. Whether it fails again since does not
        // matter: with its backlog moved, it may see no other delivery to bring it back before
        // the deadline. (A later move's entry instead: that move resumes, or its probe does.)
        let resumed_meanwhile = !lock(&inner.deferrals).contains_key(&endpoint);
        if resumed_meanwhile || !inner.health.failing(&endpoint) {
            self.resume_backlog(&endpoint, SystemTime::now()).await;
        }
    }

    /// `endpoint` took a delivery after failing (in this process's view): the backlog a move in
    /// bulk set aside (this process's, or a peer's that this process saw failing too) is due
    /// again in bulk, each delivery at its own due time or now, not a deadline later. A
    /// failed write loses nothing: the backlog falls due at the time it was moved to.
    async fn resume_backlog(&self, endpoint: &str, now: SystemTime) {
        let inner = &*self.inner;
        lock(&inner.deferrals).remove(endpoint);
        if let Ok(moved) = inner.outbox.resume_deferred(endpoint, now).await {
            inner.counters.count_n(Event::ResumedInBulk, moved);
        }
    }

    async fn apply(&self, step: Step) -> Result<Handled, StoreFailed<O::Error>> {
        let inner = &*self.inner;
        match step {
            Step::Delivered => {
                inner.counters.count(Event::Delivered);
                Ok(Handled::Delivered)
            }
            Step::StoreAgain { delivery, sent } => {
                let handled = if sent {
                    Handled::StoredAgain {
                        slot: delivery.slot(),
                        due_at: unix_ms(delivery.due_at()),
                    }
                } else {
                    Handled::Deferred {
                        due_at: unix_ms(delivery.due_at()),
                    }
                };
                let endpoint = (!sent).then(|| delivery.endpoint().to_owned());
                let due = delivery.due_at();
                inner.outbox.store(delivery).await.map_err(StoreFailed)?;
                inner.counters.count(if sent {
                    Event::StoredAgain
                } else {
                    Event::Deferred
                });
                if let Some(endpoint) = endpoint {
                    self.defer_backlog(endpoint, due).await;
                }
                Ok(handled)
            }
            Step::DeadLetter(letter) => {
                let reason = letter.reason;
                inner
                    .outbox
                    .dead_letter(letter)
                    .await
                    .map_err(StoreFailed)?;
                inner.counters.count(Event::DeadLettered);
                Ok(Handled::DeadLettered(reason))
            }
        }
    }
}

#[cfg(test)]
mod tests;
