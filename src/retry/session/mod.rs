//! The decision engine: everything one logical request remembers between attempts, and the
//! ladder that decides, after each attempt, whether to stop or to sleep and for how long.
//!
//! After a transient outcome the decision is taken in this order: is the request repeatable
//! (and not left to an outer retry layer), did the server ask to stand down, are attempts left,
//! does the abort signal forbid a sleep, how long to wait (the server's hint or the backoff
//! policy), does the wait fit the deadline, and last, does the budget grant a token.
//! Only then does the request sleep, so a request that will not be retried never waits and never
//! spends a token. Apart from the clock, which the caller passes in as `now`, the ladder is pure:
//! the unit tests below drive it without a runtime's timers or an inner service.

use super::attempt;
use super::budget::Withdrawal;
use super::config::Config;
use super::deadline::Deadline;
use super::nested::{retried_outside, retrying, NestedLayers};
use super::retry_after::Resolved;
use super::watch::AbortWatch;
use crate::abort::{Forbidden, Listener};
use crate::classify::{Classify, NotSent, Outcome};
use crate::hint::ServerHint;
use crate::message::{RetryRequest, RetryResponse};
use crate::pacer::{Deferred, Endpoint, PassGuard, QueueWait, Signal};
use crate::random::uniform;
use crate::report::{Delay, DelaySource, ReportSlot, RetryReport, StopReason};
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
    retry_after: Option<Duration>,
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

/// What a request whose sleep is over does next, with pacing.
pub(crate) enum AfterSleep {
    /// Its endpoint is not paced: it is sent.
    Send,
    /// Its endpoint is paced: it waits in the queue.
    Queue(QueueWait),
    /// Its endpoint is paced and the queue cannot take it: it stops with
    /// [`StopReason::Deferred`] (a first attempt, with no outcome to return, is sent).
    Deferred(Deferred),
}

impl<Req, C> Session<Req, C> {
    pub(crate) fn config(&self) -> &Config<C> {
        &self.config
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Every wait so far.
    fn delays(&self) -> &[Delay] {
        self.waits.as_ref().map_or(&[], |waits| &waits.delays)
    }

    fn waits(&mut self) -> &mut Waits {
        self.waits.get_or_insert_with(Box::default)
    }

    /// Total time slept (an aborted sleep counts the time it lasted).
    pub(crate) fn slept(&self) -> Duration {
        self.delays().iter().map(|delay| delay.duration).sum()
    }

    /// Attempts that count against `max_attempts`: the free resends of refused requests do not.
    fn counted(&self) -> u32 {
        self.attempts - self.refused
    }

    /// The delay before the last retry, or `base` before the first one (what decorrelated
    /// jitter grows from). The first-attempt delay and free resends do not count.
    fn previous_delay(&self) -> Duration {
        self.delays()
            .iter()
            .rev()
            .find(|delay| delay.after_attempt > 0 && delay.source != DelaySource::Refused)
            .map_or(self.config.settings.backoff.base(), |delay| delay.duration)
    }

    /// The report so far, with the reason the request stopped.
    fn report(&mut self, stop: StopReason) -> RetryReport {
        self.config.counters.stop(stop);
        decision!(attempts = self.attempts, %stop, "finished");
        let retry_after = self
            .waits
            .as_mut()
            .and_then(|waits| waits.retry_after.take());
        let report = RetryReport {
            // Checked: a delay near `MAX_DELAY` must not panic at request time.
            retry_at: retry_after
                .and_then(|after| (self.config.settings.wall_clock)().checked_add(after)),
            retry_after,
            attempts: self.attempts,
            slept: self.slept(),
            delays: self
                .waits
                .as_mut()
                .map_or_else(Vec::new, |waits| std::mem::take(&mut waits.delays)),
            stop,
            unknown_error: self
                .waits
                .as_mut()
                .and_then(|waits| waits.unknown_error.take()),
        };
        // A `RetryReport::capture` being polled gets it too, whatever the outcome.
        crate::report::offer(&report);
        report
    }

    /// The caller dropped the future before it finished: the counters and the slot say so.
    pub(crate) fn cancel(&mut self) {
        let report = self.report(StopReason::Cancelled);
        if let Some(slot) = self.slot.take() {
            slot.fill(report);
        }
    }

    /// The last sleep is over, run out or cut short: the histogram counts the time it lasted
    /// (not the time planned, and nothing for a sleep abandoned by dropping the future).
    pub(crate) fn sleep_ended(&self) {
        let waited = |d: &&Delay| d.after_attempt > 0 && d.source != DelaySource::Refused;
        if let Some(last) = self.delays().last().filter(waited) {
            self.config
                .counters
                .delay(last.after_attempt, last.duration, last.source);
        }
    }

    /// The request leaves an endpoint's queue at `now` (let through, aborted, deferred or
    /// dropped): its wait is recorded with the time it lasted.
    pub(crate) fn left_queue(&mut self, now: Instant) {
        let Some(waits) = self.waits.as_mut() else {
            return;
        };
        if let (Some(queued_at), Some(last)) = (waits.queued_at.take(), waits.delays.last_mut()) {
            last.duration = now.saturating_duration_since(queued_at);
        }
    }

    /// The pacer let the request go with `pass`: its next outcome is recorded with it.
    pub(crate) fn released(&mut self, pass: PassGuard, now: Instant) {
        self.left_queue(now);
        self.sleep_ended();
        self.waits().pass = Some(pass);
    }

    /// Sending the request again makes sense in `retry_after`: the report says so.
    pub(crate) fn retry_in(&mut self, retry_after: Duration) {
        self.waits().retry_after = Some(retry_after);
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

    /// Joins `endpoint`'s queue at `now`, or says why it cannot.
    fn queue(&mut self, endpoint: &Arc<Endpoint>, now: Instant) -> Result<QueueWait, Deferred> {
        let wait = endpoint.enqueue(self.deadline.room(now), now, self.attempts == 0)?;
        self.record_delay(Duration::ZERO, DelaySource::Paced);
        self.waits().queued_at = Some(now);
        Ok(wait)
    }

    /// The last sleep was aborted with `remaining` left: the report shows the time slept.
    pub(crate) fn cut_last_sleep(&mut self, remaining: Duration) {
        if let Some(last) = self
            .waits
            .as_mut()
            .and_then(|waits| waits.delays.last_mut())
        {
            last.duration = last.duration.saturating_sub(remaining);
        }
    }

    /// Whether the deadline has passed at `now`: a retry whose service became ready only then
    /// is not sent.
    pub(crate) fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.passed(now)
    }

    fn record_delay(&mut self, duration: Duration, source: DelaySource) {
        let after_attempt = self.attempts;
        self.waits().delays.push(Delay {
            after_attempt,
            duration,
            source,
        });
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

    /// Tells the pacer what the outcome says of the endpoint; returns the endpoint (`None`
    /// when its map is full and the request is not paced).
    fn learn<Res: RetryResponse, E>(
        &mut self,
        outcome: Outcome,
        congestion: bool,
        result: &Result<Res, E>,
        now: Instant,
    ) -> Option<Arc<Endpoint>> {
        let config = Arc::clone(&self.config);
        let pacer = config.pacer.as_ref()?;
        let signal = signal_of(outcome, congestion, result);
        match self.waits.as_mut().and_then(|waits| waits.pass.take()) {
            Some(pass) => {
                let endpoint = pass.endpoint();
                pass.record(signal, now);
                Some(endpoint)
            }
            None => {
                let endpoint = pacer.endpoint(self.authority().as_deref())?;
                endpoint.record(None, signal, now);
                Some(endpoint)
            }
        }
    }

    fn enter_queue(
        &mut self,
        endpoint: &Arc<Endpoint>,
        listener: Option<Listener>,
        now: Instant,
    ) -> Next {
        match self.queue(endpoint, now) {
            Ok(wait) => {
                decision!(attempt = self.attempts, "waiting in the endpoint's queue");
                Next::Queue {
                    wait,
                    listener,
                    deadline: self.deadline(),
                }
            }
            Err(Deferred { retry_after }) => {
                self.retry_in(retry_after);
                Next::Stop(StopReason::Deferred)
            }
        }
    }

    /// With pacing, a request whose sleep began while its endpoint was open and ended while it
    /// is paced waits in its queue instead of firing on its own timer; and if the queue cannot
    /// take it (full, or a predicted wait beyond the deadline), it is not sent either.
    pub(crate) fn queue_after_sleep(&mut self, now: Instant) -> AfterSleep {
        if self.config.pacer.is_none() {
            return AfterSleep::Send;
        }
        let config = Arc::clone(&self.config);
        let Some(pacer) = config.pacer.as_ref() else {
            return AfterSleep::Send;
        };
        let Some(endpoint) = pacer.endpoint(self.authority().as_deref()) else {
            return AfterSleep::Send;
        };
        if !endpoint.is_paced() {
            return AfterSleep::Send;
        }
        match self.queue(&endpoint, now) {
            Ok(wait) => AfterSleep::Queue(wait),
            Err(deferred) => AfterSleep::Deferred(deferred),
        }
    }

    /// With pacing and its first-attempt gate on, whether a new request to `request`'s endpoint
    /// waits for the pacer (the endpoint is down). It joins the queue only when its future is
    /// first polled ([`join_first_queue`](Self::join_first_queue)): a future not polled yet must
    /// not hold the head of the queue.
    #[inline]
    pub(crate) fn first_attempt_waits(&self, request: &Req) -> bool {
        // Checked before anything else: the path of every call when pacing is off.
        let Some(pacer) = self
            .config
            .pacer
            .as_ref()
            .filter(|pacer| pacer.config().first_attempts)
        else {
            return false;
        };
        pacer.is_paced(request.authority().as_deref())
    }

    /// The first attempt's place in its endpoint's queue, joined at `now`, and the listener its
    /// wait is aborted with. `None` when it goes at once (the endpoint is open again, or its
    /// queue cannot take it: a first attempt has no outcome to return instead, so it is sent).
    pub(crate) fn join_first_queue(
        &mut self,
        now: Instant,
    ) -> Option<(QueueWait, Option<Listener>)> {
        let config = Arc::clone(&self.config);
        let pacer = config.pacer.as_ref()?;
        let authority = self.authority().map(std::borrow::Cow::into_owned);
        let endpoint = pacer.endpoint(authority.as_ref())?;
        if !endpoint.is_paced() {
            return None;
        }
        let abort = config.settings.abort.as_ref();
        if abort.is_some_and(|abort| abort.is_shut_down()) {
            // Made after a shutdown: it waits for nothing, as a first-attempt delay does not.
            return None;
        }
        let listener = abort.map(|abort| abort.listen(authority.as_ref()));
        let wait = self.queue(&endpoint, now).ok()?;
        Some((wait, listener))
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

    /// The server turned the request away unprocessed (it rotates or drains the connection):
    /// it goes again after a short jittered pause, within the deadline, spending neither an
    /// attempt nor a budget token (the endpoint is up; an outage looks like `Unconnected`).
    fn resend_refused(&mut self, listener: Option<Listener>, now: Instant) -> Next {
        self.refused += 1;
        let refused = self.refused;
        let pause = rotation_pause(refused, self.rng());
        if !self.deadline.fits(pause, now) {
            self.retry_in(pause);
            return Next::Stop(StopReason::Deadline);
        }
        self.config.counters.rotation_resend();
        self.record_delay(pause, DelaySource::Refused);
        decision!(
            attempt = self.attempts,
            ?pause,
            "resending a request the server turned away unprocessed"
        );
        Next::Sleep {
            delay: pause,
            listener,
            token: None,
        }
    }

    /// The server's "come back in", unless hints are turned off
    /// ([`without_retry_after`](crate::RetryLayerBuilder::without_retry_after)).
    fn hint_delay(&self, hint: &ServerHint) -> Option<Duration> {
        self.config.settings.retry_after.and(hint.retry_after())
    }

    /// The delay before the next attempt: the server's hint when it gave a valid one, else the
    /// backoff policy's draw.
    fn delay_for(
        &mut self,
        hint: &ServerHint,
        now: Instant,
    ) -> Result<(Duration, DelaySource), StopReason> {
        let config = Arc::clone(&self.config);
        let counters = &config.counters;
        let Some(retry_after) = &config.settings.retry_after else {
            return Ok(self.backoff_delay());
        };
        // Counted here, where a valid hint would have been used: not for a last attempt.
        if hint.is_malformed() {
            counters.retry_after_malformed();
            decision!("ignoring a malformed hint header");
        }
        if let Some(hint) = hint.retry_after() {
            counters.retry_after_seen();
            let clamp = config.retry_after_clamp;
            let room = self.deadline.room(now);
            return match retry_after.resolve(hint, clamp, room, self.rng()) {
                Resolved::Delay { delay, clamped } => {
                    if clamped {
                        counters.retry_after_clamped();
                        decision!(?hint, ?clamp, "clamping the server's hint");
                    }
                    let source = if clamped {
                        DelaySource::RetryAfterClamped
                    } else {
                        DelaySource::RetryAfter
                    };
                    Ok((delay, source))
                }
                Resolved::GiveUp => {
                    counters.retry_after_clamped();
                    self.retry_in(hint);
                    Err(StopReason::RetryAfterTooLong)
                }
            };
        }
        Ok(self.backoff_delay())
    }

    /// The backoff policy's draw for the retry after the current attempt.
    fn backoff_delay(&mut self) -> (Duration, DelaySource) {
        let config = Arc::clone(&self.config);
        let retry = self.counted().saturating_sub(1);
        let previous = self.previous_delay();
        let delay = config.settings.backoff.delay(retry, previous, self.rng());
        (delay, DelaySource::Backoff)
    }

    /// When sending the request again makes sense, from `now`: the stop's `own` reason (the
    /// next backoff draw, the predicted wait, the breaker's wait) or, when later, what the layer
    /// knows of the endpoint: what is left of the server's last hint, a breaker's hold of the
    /// abort signal, the pacer's predicted release. Those are shared by every request to the
    /// endpoint, so a time taken from them is spread upward as a `Retry-After` is (by its
    /// jitter), lest a durable queue that honours it send them all back in one instant.
    fn resend_after(&mut self, own: Duration, now: Instant) -> Duration {
        let config = Arc::clone(&self.config);
        let authority = self.authority().map(std::borrow::Cow::into_owned);
        let hint = self
            .waits
            .as_ref()
            .and_then(|waits| waits.last_hint)
            .filter(|_| config.settings.retry_after.is_some())
            .map(|(at, after)| after.saturating_sub(now.saturating_duration_since(at)));
        let hold = config
            .settings
            .abort
            .as_ref()
            .and_then(|abort| abort.held_until(authority.as_ref()))
            .map(|until| until.saturating_duration_since(now));
        let release = config
            .pacer
            .as_ref()
            .and_then(|pacer| pacer.predicted_release(authority.as_ref(), now));
        let shared = [hint, hold, release].into_iter().flatten().max();
        match shared {
            Some(shared) if shared > own => {
                let fraction = config
                    .settings
                    .retry_after
                    .map_or(0.1, |policy| policy.jitter_fraction());
                let spread = Duration::try_from_secs_f64(shared.as_secs_f64() * fraction)
                    .unwrap_or(Duration::ZERO);
                shared.saturating_add(uniform(Duration::ZERO, spread, self.rng()))
            }
            _ => own,
        }
    }

    /// Records the end of the request and hands back its last outcome.
    pub(crate) fn finish<Res: RetryResponse, E>(
        &mut self,
        result: Result<Res, E>,
        stop: StopReason,
    ) -> Result<Res, E> {
        if self.attempts == 1 && self.waits.is_none() && stop == StopReason::Success {
            // The common case: nothing to report beyond the counter.
            self.config.counters.stop(stop);
            if let Some(slot) = self.slot.take() {
                slot.fill(RetryReport::FIRST_TRY);
            }
            return result;
        }
        if !stop.is_final() {
            if let Some(own) = self.waits.as_ref().and_then(|waits| waits.retry_after) {
                let resend = self.resend_after(own, Instant::now());
                self.waits().retry_after = Some(resend);
            }
        }
        let report = self.report(stop);
        match result {
            Ok(mut response) => {
                if !report.is_first_try() {
                    if let Some(slot) = self.slot.take() {
                        slot.fill(report.clone());
                    }
                    response.attach_report(report);
                } else if let Some(slot) = self.slot.take() {
                    slot.fill(report);
                }
                Ok(response)
            }
            Err(error) => {
                if let Some(slot) = self.slot.take() {
                    slot.fill(report);
                }
                Err(error)
            }
        }
    }
}

/// The first rotation pause's upper bound, and the most any pause lasts.
const ROTATION_PAUSE: (Duration, Duration) = (Duration::from_millis(4), Duration::from_millis(50));

/// The pause before the `resend`-th (1-based) resend of a request turned away unprocessed:
/// `U(high/4, high)`, `high` doubling from 4 ms to 50 ms. Long enough for the client to see
/// the closing connection close (a resend at once lands on it again), short against a request's
/// time; jittered so that the streams one `GOAWAY` turned away do not arrive together.
fn rotation_pause(resend: u32, rng: &mut SmallRng) -> Duration {
    let (first, cap) = ROTATION_PAUSE;
    let high = first
        .saturating_mul(1 << resend.clamp(1, 16).saturating_sub(1))
        .min(cap);
    uniform(high / 4, high, rng)
}

/// What an outcome says of the endpoint's load; `congestion` is the classifier's word on a
/// transient response.
fn signal_of<Res, E>(outcome: Outcome, congestion: bool, result: &Result<Res, E>) -> Signal {
    match (outcome, result) {
        (Outcome::Success, _) => Signal::Success,
        // Transient errors are timeouts and connection failures: what an overloaded or
        // unreachable endpoint looks like.
        (Outcome::Transient, Err(_)) | (Outcome::NotSent(NotSent::Unconnected), _) => {
            Signal::Congestion
        }
        (Outcome::Transient, Ok(_)) if congestion => Signal::Congestion,
        _ => Signal::Neutral,
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

#[cfg(test)]
pub(crate) mod tests;
