//! The decision engine: everything one logical request remembers between attempts, and the
//! ladder that decides, after each attempt, whether to stop or to sleep and for how long.
//!
//! After a transient outcome the decision is taken in this order: is the request repeatable
//! (and not left to an outer retry layer), did the server ask to stand down, are attempts left,
//! does the abort signal forbid a sleep, how long to wait (the server's hint or the backoff
//! policy), does the wait fit the deadline, and last, does the budget grant a token.
//! Only then does the request sleep, so a request that will not be retried never waits and never
//! spends a token. Apart from the clock, which the caller passes in as `now`, the ladder is pure:
//! the unit tests (`tests.rs`) drive it without a runtime's timers or an inner service.
//!
//! The concerns around the ladder live beside it: the wait before the next attempt (`delay.rs`:
//! the server's hint, the backoff draw, the pause before a refused resend), pacing (`pacing.rs`:
//! the outcome booked to the endpoint, the queue instead of a sleep), the report trail
//! (`trail.rs`), the deadlines (`../deadline.rs`), per-attempt metadata (`../attempt.rs`) and the
//! budget token (`../budget.rs`).

mod delay;
mod pacing;
#[cfg(test)]
pub(crate) mod tests;
mod trail;

pub(crate) use pacing::AfterSleep;

use super::attempt;
use super::budget::Withdrawal;
use super::config::Config;
use super::deadline::Deadline;
use super::nested::{retried_outside, retrying, NestedLayers};
use super::watch::AbortWatch;
use crate::abort::{Forbidden, Listener};
use crate::classify::{Classify, NotSent, Outcome};
use crate::hint::ServerHint;
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::{PassGuard, QueueWait};
use crate::random::uniform;
use crate::report::{Delay, DelaySource, ReportSlot, StopReason};
use crate::telemetry::{self, decision, Attempt};
use http::uri::Authority;
use http::Method;
use rand::rngs::SmallRng;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;

/// Everything one logical request remembers between attempts.
///
/// It is moved a few times between `call` and the executor, so what only a request that waits
/// needs is boxed apart ([`Waits`]), made at its first wait: a request that succeeds at once
/// carries a small session and allocates nothing for it.
pub(crate) struct Session<Req, C> {
    config: Arc<Config<C>>,
    kept: Kept<Req>,
    /// Set when the request must not be sent again, and why. `NotIdempotent` still lets a
    /// request that was [not sent](Outcome::NotSent) go again.
    not_retryable: Option<StopReason>,
    /// Attempts sent, the free resends of refused requests included.
    attempts: u32,
    /// Free resends of refused requests so far.
    refused: u32,
    /// The layer's deadline and the request's own (read by the attempt hook).
    deadline: Deadline,
    slot: Option<ReportSlot>,
    waits: Option<Box<Waits>>,
}

/// What the session keeps of the request between attempts.
enum Kept<Req> {
    /// A copy for the next attempt (its method is the classifier's).
    Copy(Req),
    /// No copy (no other attempt may follow): only the method, for the classifier, and with
    /// pacing or an abort signal the authority (the pacer books the outcome to it; the
    /// report's resend time reads what is known of it).
    Method(Method, Option<Authority>),
}

/// What only a request that waits needs.
#[derive(Default)]
struct Waits {
    /// This request's own random stream, created when first needed.
    rng: Option<SmallRng>,
    /// Every wait so far; the time slept and the previous delay are read from it.
    delays: Vec<Delay>,
    /// How the attempt in flight was let through by the pacer, if it was.
    pass: Option<PassGuard>,
    /// When the request joined an endpoint's queue, while it waits there.
    queued_at: Option<Instant>,
    /// When sending again makes sense, for the report of a deferred request.
    resend_after: Option<Duration>,
    /// The last error no classification rule recognised, named for the report.
    unknown_error: Option<String>,
    /// The last hint the server gave (when, and how long it asked for), which the report's
    /// resend time does not undercut.
    last_hint: Option<(Instant, Duration)>,
}

/// What to do after an attempt.
pub(crate) enum Next {
    Stop(StopReason),
    Sleep {
        delay: Duration,
        listener: Option<Listener>,
        token: Option<Withdrawal>,
    },
    /// Wait in the endpoint's queue until the pacer lets the request go, or until `deadline`.
    Queue {
        wait: QueueWait,
        listener: Option<Listener>,
        deadline: Option<Instant>,
    },
}

impl<Req, C> Session<Req, C> {
    pub(crate) fn config(&self) -> &Config<C> {
        &self.config
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Attempts that count against `max_attempts`: the free resends of refused requests do not.
    fn counted(&self) -> u32 {
        self.attempts - self.refused
    }

    /// The pacer let the request go with `pass`: its next outcome is recorded with it.
    pub(crate) fn released(&mut self, pass: PassGuard, now: Instant) {
        self.left_queue(now);
        self.sleep_ended();
        self.waits().pass = Some(pass);
    }

    /// The stop an abort signal's `forbidden` means at `now`, with when to try again.
    pub(crate) fn stop_for(&mut self, forbidden: Forbidden, now: Instant) -> StopReason {
        match forbidden {
            Forbidden::Shutdown => StopReason::Aborted,
            Forbidden::Held(until) => {
                self.retry_in(until.saturating_duration_since(now));
                StopReason::Held
            }
        }
    }

    /// What ends a sleep before a retry: a shutdown, and a breaker's hold too unless pacing is
    /// on (then the hold pauses the endpoint, and the request, once awake, waits in its queue).
    pub(crate) fn sleep_watch(&self, listener: Listener) -> AbortWatch {
        if self.config.pacer.is_some() {
            AbortWatch::shutdown_only(listener)
        } else {
            AbortWatch::new(listener)
        }
    }

    /// When the request started, if it has a deadline.
    #[cfg(test)]
    pub(crate) fn started(&self) -> Option<Instant> {
        self.deadline.started()
    }

    /// When the deadline falls, if there is one.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline.at()
    }

    /// Whether the deadline has passed at `now`: a retry whose service became ready only then
    /// is not sent.
    pub(crate) fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.passed(now)
    }

    fn rng(&mut self) -> &mut SmallRng {
        let config = Arc::clone(&self.config);
        self.waits()
            .rng
            .get_or_insert_with(|| config.settings.random.stream())
    }
}

impl<Req: RetryRequest, C> Session<Req, C> {
    /// Prepares the session for `request` (stamping its key if configured); the request itself
    /// is sent by the caller or [stored](Self::store).
    #[inline]
    pub(crate) fn new(config: Arc<Config<C>>, request: &mut Req) -> Self {
        let settings = &config.settings;
        let method = request.method().clone();
        let waits = attempt::stamp_key(settings, &method, request.headers_mut()).map(|stream| {
            Box::new(Waits {
                rng: Some(stream),
                ..Waits::default()
            })
        });
        let mut not_retryable = (!settings
            .idempotency
            .allows(request.method(), request.headers()))
        .then_some(StopReason::NotIdempotent);
        if settings.nested == NestedLayers::Defer && retried_outside() {
            not_retryable = Some(StopReason::Delegated);
        }
        // The request's own deadline (gRPC's `grpc-timeout`) counts from this call.
        let own = attempt::own_deadline(settings, request.headers());
        Self {
            deadline: Deadline::new(settings.deadline, own, Instant::now),
            slot: request.report_slot().cloned(),
            kept: Kept::Method(method, None),
            config,
            not_retryable,
            attempts: 0,
            refused: 0,
            waits,
        }
    }

    pub(crate) fn has_first_attempt_jitter(&self) -> bool {
        !self.config.settings.first_attempt_jitter.is_zero()
    }

    /// Whether a second attempt is possible at all (and the service worth keeping): even a
    /// request that is not idempotent is sent again when it provably was not sent.
    pub(crate) fn may_retry(&self) -> bool {
        self.config.settings.max_attempts > 1
    }

    /// Keeps `request` for an attempt that is sent later (after the first-attempt jitter).
    pub(crate) fn store(&mut self, request: Req) {
        self.kept = Kept::Copy(request);
    }

    /// Sends the stored request to `service`, keeping a copy if another attempt may follow.
    pub(crate) fn send<S: Service<Req>>(&mut self, service: &mut S) -> Attempt<S::Future> {
        // The placeholder lasts until `send_request` decides what to keep.
        let kept = std::mem::replace(&mut self.kept, Kept::Method(Method::GET, None));
        let Kept::Copy(request) = kept else {
            unreachable!("a request is stored before every attempt");
        };
        self.send_request(request, service)
    }

    /// Sends `request` to `service`, keeping a copy if another attempt may follow. The first
    /// attempt comes here straight from `call`: the request is not moved in and out of the
    /// session on the way.
    pub(crate) fn send_request<S: Service<Req>>(
        &mut self,
        mut request: Req,
        service: &mut S,
    ) -> Attempt<S::Future> {
        self.attempts += 1;
        let settings = &self.config.settings;
        let deadline = self.deadline;
        attempt::stamp(settings, request.headers_mut(), self.attempts, || {
            deadline.own_left(Instant::now())
        });
        let keep = settings.max_attempts > 1
            && self.not_retryable != Some(StopReason::Delegated)
            && (self.counted() < settings.max_attempts
                || self.refused < settings.max_refused_retries);
        match keep.then(|| request.try_clone()) {
            Some(Some(copy)) => self.kept = Kept::Copy(copy),
            copy => {
                if copy.is_some() {
                    self.not_retryable = Some(StopReason::NotReplayable);
                }
                // With pacing, the outcome of this attempt is booked to its endpoint; the
                // report's resend time reads the pacer's and a breaker's hold of it.
                let knows = self.config.settings.abort.is_some() || self.config.pacer.is_some();
                let authority = knows
                    .then(|| request.authority().map(std::borrow::Cow::into_owned))
                    .flatten();
                self.kept = Kept::Method(request.method().clone(), authority);
            }
        }
        let after = self.delays().last().map(|delay| delay.source);
        self.config.counters.attempt(self.attempts, after);
        decision!(attempt = self.attempts, "sending attempt");
        let mark = self.inner_layers_mark();
        telemetry::send(request, self.attempts, |request| {
            retrying(mark, || service.call(request))
        })
    }

    /// What the inner layers are told while this one calls and polls them (see [`retrying`]).
    /// A deferring layer that may retry this request tells them it retries, so they send once;
    /// one that cannot (a POST, a body it cannot copy, an outer layer retrying) leaves the mark
    /// as it is, so an inner layer allowed to retry it does. An independent layer lets the
    /// layers inside it retry, whatever wraps it.
    pub(crate) fn inner_layers_mark(&self) -> Option<bool> {
        let settings = &self.config.settings;
        match settings.nested {
            NestedLayers::Independent => Some(false),
            NestedLayers::Defer => {
                (settings.max_attempts > 1 && self.not_retryable.is_none()).then_some(true)
            }
        }
    }

    /// The authority of the request, which a hold of the abort signal may concern.
    pub(crate) fn authority(&self) -> Option<std::borrow::Cow<'_, Authority>> {
        match &self.kept {
            Kept::Copy(request) => request.authority(),
            Kept::Method(_, authority) => authority.as_ref().map(std::borrow::Cow::Borrowed),
        }
    }

    /// The delay before the first attempt, `U(0, first_attempt_jitter)`, recorded (zero when
    /// the abort signal forbids sleeping now), and the listener the wait is aborted with.
    pub(crate) fn first_attempt_delay(&mut self) -> (Duration, Option<Listener>) {
        let config = Arc::clone(&self.config);
        let mut forbidden = false;
        let listener = config.settings.abort.as_ref().map(|abort| {
            let authority = self.authority();
            let (listener, forbids) = abort.listen_checked(authority.as_deref());
            forbidden = forbids.is_some();
            listener
        });
        let jitter = config.settings.first_attempt_jitter;
        let delay = if forbidden {
            Duration::ZERO
        } else {
            uniform(Duration::ZERO, jitter, self.rng())
        };
        self.record_delay(delay, DelaySource::FirstAttempt);
        (delay, listener)
    }

    /// Takes the decision after an attempt that ended at `now` (read only for a transient
    /// outcome, or when pacing learns from every outcome): stop with a reason, sleep this long,
    /// or wait in the endpoint's queue.
    pub(crate) fn decide<Res, E>(
        &mut self,
        result: &Result<Res, E>,
        now: impl FnOnce() -> Instant,
    ) -> Next
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        let mut now = Now::new(now);
        let method = match &self.kept {
            Kept::Copy(request) => request.method(),
            Kept::Method(method, _) => method,
        };
        let config = &self.config;
        let mut outcome = config.classifier.classify(method, result);
        // What the response says about retrying it: read unless it is a success, and for a
        // success too with pacing (a used-up quota pauses the endpoint).
        let hint = match result {
            Ok(response) if outcome != Outcome::Success || config.pacer.is_some() => config
                .classifier
                .hint(response, (config.settings.wall_clock)()),
            _ => ServerHint::NONE,
        };
        if let Err(error) = result {
            // Counted and named, so that a new kind of error gets a rule (see `unknown_errors`).
            if let Some(name) = self.config.classifier.unknown_error(error) {
                decision!(error = %name, "an error no classification rule recognises");
                self.config.counters.unknown_error();
                self.waits().unknown_error = Some(name);
            }
        }
        // The pacer learns what the response was, before the server's word below changes it.
        let endpoint = match &self.config.pacer {
            Some(pacer) => {
                let congestion = match result {
                    Ok(response) if outcome == Outcome::Transient => self
                        .config
                        .classifier
                        .is_congestion(response, &pacer.config().congestion),
                    _ => false,
                };
                self.learn(outcome, congestion, result, now.get())
            }
            None => None,
        };
        if outcome == Outcome::Permanent && result.is_ok() && hint.should_retry() == Some(true) {
            // The server says this response is worth another attempt, whatever its status.
            outcome = Outcome::Transient;
        }
        // A breaker's refusal: the endpoint is failing, not the request.
        let breaker_wait = match (outcome, result) {
            (Outcome::Permanent, Err(error)) => self.config.classifier.refused_for(error),
            _ => None,
        };
        let not_sent = match (outcome, breaker_wait) {
            (Outcome::Success, _) => {
                if let Some(budget) = &self.config.settings.budget {
                    budget.deposit();
                }
                if let (Some(endpoint), Some(after)) = (&endpoint, self.hint_delay(&hint)) {
                    // A success that used up the quota: the next requests wait for its reset.
                    let now = now.get();
                    self.config.counters.quota_paused();
                    endpoint.pause_until(now + after.min(self.config.retry_after_clamp), now);
                }
                return Next::Stop(StopReason::Success);
            }
            (Outcome::Permanent, None) => return Next::Stop(StopReason::Permanent),
            // A refusal stops the request as `CircuitOpen` when it would not wait in the queue
            // (no pacing, or a request that is not sent again), never as `NotIdempotent`: it
            // was not sent. With pacing the endpoint pauses all the same.
            (Outcome::Permanent, Some(wait))
                if endpoint.is_none() || self.not_retryable.is_some() =>
            {
                if let Some(endpoint) = &endpoint {
                    endpoint.breaker_refused(wait, now.get());
                }
                self.retry_in(wait);
                return Next::Stop(StopReason::CircuitOpen);
            }
            (Outcome::NotSent(kind), _) => Some(kind),
            _ => None,
        };
        // Cloned and read only past this point: without pacing, the success path pays no
        // reference count and no clock.
        let now = now.get();
        let config = Arc::clone(&self.config);
        let settings = &config.settings;
        if let Some(after) = hint.retry_after() {
            // Kept for the report: a resend time never undercuts what the server asked.
            self.waits().last_hint = Some((now, after));
        }
        if let (Some(wait), Some(endpoint)) = (breaker_wait, &endpoint) {
            // With pacing, an open circuit pauses the endpoint until the breaker lets a probe
            // through, and the request waits with the others.
            endpoint.breaker_refused(wait, now);
        }
        match self.not_retryable {
            // It never reached the server, or the server says repeating it is safe: whatever
            // its method.
            Some(StopReason::NotIdempotent)
                if not_sent.is_some() || hint.should_retry() == Some(true) => {}
            Some(reason) => return Next::Stop(reason),
            None => {}
        }
        if hint.should_retry() == Some(false) {
            if let Some(after) = self.hint_delay(&hint) {
                self.retry_in(after);
            }
            decision!("the server asks not to retry");
            return Next::Stop(StopReason::StandDown);
        }
        let refused = not_sent == Some(NotSent::Refused);
        if let Some(reason) = self.exhausted(refused) {
            if reason == StopReason::AttemptsExhausted {
                let (delay, _) = self.backoff_delay();
                self.retry_in(delay);
            }
            return Next::Stop(reason);
        }
        let listener = match &settings.abort {
            Some(abort) => {
                let authority = self.authority();
                let (listener, forbidden) = abort.listen_checked(authority.as_deref());
                drop(authority);
                match (forbidden, &endpoint) {
                    // With pacing, a breaker's hold pauses the endpoint and the request waits.
                    (Some(Forbidden::Held(until)), Some(endpoint)) => {
                        endpoint.pause_until(until, now)
                    }
                    (Some(forbidden), _) => return Next::Stop(self.stop_for(forbidden, now)),
                    (None, _) => {}
                }
                Some(listener)
            }
            None => None,
        };
        if let (Some(_), Some(endpoint)) = (breaker_wait, &endpoint) {
            return self.enter_queue(endpoint, listener, now);
        }
        if refused {
            return self.resend_refused(listener, now);
        }
        let (delay, source) = match self.delay_for(&hint, now) {
            Ok(chosen) => chosen,
            Err(reason) => return Next::Stop(reason),
        };
        if let Some(endpoint) = &endpoint {
            if matches!(
                source,
                DelaySource::RetryAfter | DelaySource::RetryAfterClamped
            ) {
                // The hint pauses the endpoint, not only this request.
                endpoint.pause_until(now + delay, now);
            }
            if endpoint.is_paced() {
                return self.enter_queue(endpoint, listener, now);
            }
        }
        if !self.deadline.fits(delay, now) {
            self.retry_in(delay);
            return Next::Stop(StopReason::Deadline);
        }
        let token = match &settings.budget {
            Some(budget) => match Withdrawal::take(budget, &config.counters) {
                Some(token) => Some(token),
                None => {
                    if let Some(endpoint) = &endpoint {
                        // With pacing, an empty budget slows the endpoint instead of dropping
                        // the request.
                        endpoint.budget_empty(now);
                        return self.enter_queue(endpoint, listener, now);
                    }
                    self.retry_in(delay);
                    return Next::Stop(StopReason::BudgetEmpty);
                }
            },
            None => None,
        };
        self.record_delay(delay, source);
        decision!(
            attempt = self.attempts,
            ?delay,
            ?source,
            "retrying after delay"
        );
        Next::Sleep {
            delay,
            listener,
            token,
        }
    }

    /// Why no attempt may follow, if none may: a free resend of a refused request has its own
    /// cap, any other retry spends an attempt. (`max_attempts == 1` turns every retry off.)
    fn exhausted(&self, refused: bool) -> Option<StopReason> {
        let settings = &self.config.settings;
        if refused && settings.max_attempts > 1 {
            (self.refused >= settings.max_refused_retries).then_some(StopReason::RefusedTooOften)
        } else {
            (self.counted() >= settings.max_attempts).then_some(StopReason::AttemptsExhausted)
        }
    }
}

/// The clock, read at most once and only when needed.
struct Now<F> {
    read: Option<F>,
    at: Option<Instant>,
}

impl<F: FnOnce() -> Instant> Now<F> {
    fn new(read: F) -> Self {
        Self {
            read: Some(read),
            at: None,
        }
    }

    fn get(&mut self) -> Instant {
        if let Some(at) = self.at {
            return at;
        }
        let at = (self.read.take().expect("read once"))();
        self.at = Some(at);
        at
    }
}
