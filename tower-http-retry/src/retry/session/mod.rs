//! The decision engine: everything one logical request remembers between attempts, and what
//! it does after each one.
//!
//! One entry point takes every decision: [`decide`](Session::decide) turns an event (an attempt
//! answered, a wait between attempts ended: `step.rs`) and `now` into the next step, which the
//! response future takes. After an attempt, a success at the first try without pacing ends at
//! once ([`first_try_success`](Session::first_try_success): the counters, the budget's deposit,
//! a waiting slot); any other outcome goes to [`decide_classified`](Session::decide_classified),
//! which reads the outcome's facts, lets the pacer
//! learn from them (with pacing), and climbs the ladder (`ladder.rs`), which gives a verdict:
//! stop with a reason, or retry after a delay from a source. After a transient outcome the
//! ladder asks, in this order: is the request repeatable (and not left to an outer retry layer),
//! did the server ask to stand down, are attempts left, does the abort signal forbid a sleep,
//! how long to wait (the server's hint or the backoff policy), does the wait fit the deadline,
//! and last, does the budget grant a token. Only then does the request sleep, so a request that
//! will not be retried never waits and never spends a token. With pacing, the pacer learns
//! from the outcome first (its load, and the server's hint: a pause of the endpoint when
//! nothing gets through or a quota is used up), and one step (`pacing.rs`) rewrites the
//! verdict: the queue instead of a sleep, a hint as a floor for the request, a wait on an empty
//! budget, a breaker's refusal or hold turned into a pause of the endpoint. Apart
//! from the clock, which the caller passes in as `now`, the ladder is pure: the unit tests
//! (`tests.rs`) drive it without a runtime's timers or an inner service.
//!
//! The concerns around the ladder live beside it: the wait before the next attempt (`delay.rs`:
//! the server's hint, the backoff draw), pacing (`pacing.rs`), the report trail (`trail.rs`),
//! the deadlines (`../deadline.rs`), per-attempt metadata (`../attempt.rs`) and the budget token
//! (`../budget.rs`).

mod delay;
mod ladder;
#[cfg(test)]
mod not_sent_tests;
mod pacing;
mod report;
#[cfg(test)]
mod rotation_tests;
mod step;
#[cfg(test)]
mod stop_tests;
#[cfg(test)]
pub(crate) mod tests;
mod trail;
mod tries;
mod verdict;
mod waited;

pub(crate) use step::{Event, Interrupted, Step, WaitEnded, Woke};

use trail::Trail;
use tries::Tries;
use verdict::Facts;

use super::budget::Withdrawal;
use super::config::Config;
use super::deadline::Deadline;
use super::nested::{mark_inner, retried_outside, NestedLayers, Restore};
use super::watch::AbortWatch;
use crate::abort::{AbortSignal, Forbidden, Listener};
use crate::classify::{Ask, Classify, NotSent, Outcome, Signals};
use crate::hint::ServerHint;
use crate::hint::UpstreamHeld;
use crate::message::{RetryRequest, RetryResponse};
use crate::pacing::{PassGuard, QueueWait};
use crate::random::uniform;
use crate::report::{DelaySource, ReportSlot, StopReason};
use crate::telemetry::{self, decision, Attempt, AttemptSpan};
use http::uri::Authority;
use http::Method;
use rand::rngs::SmallRng;
use std::borrow::Cow;
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
    /// The attempts sent so far.
    tries: Tries,
    /// The layer's deadline and the request's own (read by the attempt hook).
    deadline: Deadline,
    slot: Option<ReportSlot>,
    waits: Option<Box<Waits>>,
}

/// What the session keeps of the request between attempts.
enum Kept<Req> {
    /// Nothing yet: the first attempt is about to be sent or stored, or an attempt is being
    /// sent (what to keep of it is decided as it goes).
    Pending,
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
    /// How the attempt in flight was let through by the pacer, if it was.
    pass: Option<PassGuard>,
    /// What the report will say.
    trail: Trail,
}

/// What is held while an attempt is handed to the inner service: the inner layers' mark and
/// the attempt's span, entered. Made by [`Session::sending`].
#[must_use = "an attempt's mark and span last until it is sent"]
pub(crate) struct Sending {
    // Dropped after the span is left, as the mark was set before it was entered.
    inner: Option<Restore>,
    span: AttemptSpan,
    mark: Option<bool>,
}

/// An attempt sent: the inner service's future, polled in the attempt's span, and the mark the
/// inner layers are told while it is polled (see [`retrying`](super::nested::retrying)).
pub(crate) type Sent<F> = (Attempt<F>, Option<bool>);

impl Sending {
    /// The mark the inner layers are told while the attempt is polled.
    #[inline(always)]
    pub(crate) fn mark(&self) -> Option<bool> {
        self.mark
    }

    /// The inner service's `future` for the attempt: the attempt's (polled in its span).
    #[inline(always)]
    pub(crate) fn sent<F>(self, future: F) -> Attempt<F> {
        let Sending { inner, span, .. } = self;
        let attempt = span.attach(future);
        drop(inner);
        attempt
    }
}

/// How the first attempt goes.
pub(crate) enum First {
    /// Into its endpoint's queue (pacing knows the endpoint is down), joined at the first poll.
    Gated,
    /// After the first-attempt jitter ([`first_attempt_delay`](Session::first_attempt_delay)).
    Delayed,
    /// At once; `keep_service`: another attempt may follow, so a clone of the readied service
    /// is kept for it.
    Now { keep_service: bool },
}

/// What to do after an attempt.
pub(crate) enum Next {
    Stop(StopReason),
    /// Sleep `delay`, cut short by `watch` (an abort signal's), holding `token` (the budget's).
    Sleep {
        delay: Duration,
        watch: Option<AbortWatch>,
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
    /// The abort signal a wait watches, if any, with the request's authority (a hold may
    /// concern only it).
    pub(crate) fn abort_scope(&self) -> Option<(&AbortSignal, Option<Cow<'_, Authority>>)>
    where
        Req: RetryRequest,
    {
        let abort = self.config.settings.abort.as_ref()?;
        Some((abort, self.authority()))
    }

    /// Attempts sent so far and the time slept between them (for `Debug`).
    pub(crate) fn progress(&self) -> (u32, Duration) {
        (self.tries.sent(), self.slept())
    }

    #[cfg(test)]
    fn attempts(&self) -> u32 {
        self.tries.sent()
    }

    #[cfg(test)]
    fn counted(&self) -> u32 {
        self.tries.counted()
    }

    /// The pacer let the request go with `pass`: its next outcome is recorded with it.
    pub(super) fn released(&mut self, pass: PassGuard, now: Instant) {
        self.left_queue(now);
        self.sleep_ended();
        self.waits().pass = Some(pass);
    }

    /// The stop an abort signal's `forbidden` means at `now`, with when to try again.
    pub(super) fn stop_for(&mut self, forbidden: Forbidden, now: Instant) -> StopReason {
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
    fn sleep_watch(&self, listener: Listener) -> AbortWatch {
        if self.config.pacer.is_some() {
            AbortWatch::shutdown_only(listener)
        } else {
            AbortWatch::new(listener)
        }
    }

    /// When the request started, if it has a deadline.
    #[cfg(test)]
    pub(super) fn started(&self) -> Option<Instant> {
        self.deadline.started()
    }

    /// When the deadline falls, if there is one.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.deadline.at()
    }

    /// Whether the deadline has passed at `now`: a retry whose service became ready only then
    /// is not sent.
    pub(super) fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.passed(now)
    }

    fn waits(&mut self) -> &mut Waits {
        self.waits.get_or_insert_with(Box::default)
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
        let mut waits = None;
        if settings.stamps.idempotency_key {
            // Copied for the key's check, beside the headers it may stamp.
            let method = request.method().clone();
            let stream =
                settings
                    .stamps
                    .stamp_key(&settings.random, &method, request.headers_mut());
            waits = stream.map(|stream| {
                Box::new(Waits {
                    rng: Some(stream),
                    ..Waits::default()
                })
            });
        }
        let mut not_retryable = (!settings
            .idempotency
            .allows(request.method(), request.headers()))
        .then_some(StopReason::NotIdempotent);
        if settings.nested == NestedLayers::Defer && retried_outside() {
            not_retryable = Some(StopReason::Delegated);
        }
        // The request's own deadline (gRPC's `grpc-timeout`) counts from this call.
        let own = settings.stamps.own_deadline(request.headers());
        Self {
            deadline: Deadline::new(settings.deadline, own, Instant::now),
            slot: request.report_slot().cloned(),
            kept: Kept::Pending,
            config,
            not_retryable,
            tries: Tries::default(),
            waits,
        }
    }

    /// How the first attempt of `request` goes: into its endpoint's queue (pacing knows it is
    /// down), after the first-attempt jitter, or at once.
    #[inline(always)]
    pub(crate) fn first(&mut self, request: &Req) -> First {
        if self.first_attempt_waits(request) {
            return First::Gated;
        }
        if !self.config.settings.first_attempt_jitter.is_zero() {
            return First::Delayed;
        }
        // Even a request that is not idempotent is sent again when it provably was not sent.
        First::Now {
            keep_service: self.config.settings.max_attempts > 1,
        }
    }

    /// Keeps `request` for an attempt that is sent later (after the first-attempt jitter).
    pub(crate) fn store(&mut self, request: Req) {
        self.kept = Kept::Copy(request);
    }

    /// Sends the stored request to `service`, keeping a copy if another attempt may follow.
    pub(crate) fn send<S: Service<Req>>(&mut self, service: &mut S) -> Sent<S::Future> {
        let kept = std::mem::replace(&mut self.kept, Kept::Pending);
        let Kept::Copy(request) = kept else {
            unreachable!("a request is stored before every attempt");
        };
        self.send_request(request, service)
    }

    /// Sends `request` to `service`, keeping a copy if another attempt may follow.
    #[inline]
    pub(super) fn send_request<S: Service<Req>>(
        &mut self,
        mut request: Req,
        service: &mut S,
    ) -> Sent<S::Future> {
        let sending = self.sending(&mut request);
        let mark = sending.mark();
        (sending.sent(service.call(request)), mark)
    }

    /// Readies `request`'s next attempt for the inner service: counts and stamps it, keeps a
    /// copy if another attempt may follow (else what its outcome needs of it), and tells the
    /// inner layers what this one does, until [`Sending::sent`]. The first attempt is sent this
    /// way straight from `call`, which calls the inner service itself: the request is not moved
    /// on the way (a move is a copy).
    #[inline(always)]
    pub(crate) fn sending(&mut self, request: &mut Req) -> Sending {
        let attempt = self.tries.send();
        let settings = &self.config.settings;
        let deadline = &self.deadline;
        settings.stamps.stamp(request.headers_mut(), attempt, || {
            deadline.own_left(Instant::now())
        });
        let keep = settings.max_attempts > 1
            && self.not_retryable != Some(StopReason::Delegated)
            && self
                .tries
                .any_left(settings.max_attempts, settings.max_refused_retries);
        let copy = if keep { request.try_clone() } else { None };
        if let Some(copy) = copy {
            self.keep(Kept::Copy(copy));
        } else {
            if keep {
                self.not_retryable = Some(StopReason::NotReplayable);
            }
            // With pacing, the outcome of this attempt is booked to its endpoint; the
            // report's resend time reads the pacer's and a breaker's hold of it.
            let knows = self.config.settings.abort.is_some() || self.config.pacer.is_some();
            let authority = knows
                .then(|| request.authority().map(std::borrow::Cow::into_owned))
                .flatten();
            self.keep(Kept::Method(request.method().clone(), authority));
        }
        let after = self.delays().last().map(|delay| delay.source);
        self.config.counters.attempt(attempt, after);
        // The mark first, then the span, which the event is in: it carries the attempt's
        // method, address and port.
        let mark = self.inner_layers_mark();
        let inner = mark_inner(mark);
        let span = telemetry::enter_attempt(request, attempt);
        decision!(attempt = attempt, "sending attempt");
        Sending { inner, span, mark }
    }

    /// Keeps `kept` of the attempt being sent, in the place left pending while it is sent.
    #[inline]
    fn keep(&mut self, kept: Kept<Req>) {
        let pending = std::mem::replace(&mut self.kept, kept);
        debug_assert!(
            matches!(pending, Kept::Pending),
            "an attempt is sent from pending"
        );
        // Nothing to drop: without the call of the drop glue, the path of every request is
        // a few instructions shorter.
        std::mem::forget(pending);
    }

    /// What the inner layers are told while this one calls and polls them (see
    /// [`retrying`](super::nested::retrying)).
    /// A deferring layer that may retry this request tells them it retries, so they send once;
    /// one that cannot (a POST, a body it cannot copy, an outer layer retrying) leaves the mark
    /// as it is, so an inner layer allowed to retry it does. An independent layer lets the
    /// layers inside it retry, whatever wraps it.
    fn inner_layers_mark(&self) -> Option<bool> {
        let settings = &self.config.settings;
        match settings.nested {
            NestedLayers::Independent => Some(false),
            NestedLayers::Defer => {
                (settings.max_attempts > 1 && self.not_retryable.is_none()).then_some(true)
            }
        }
    }

    /// The authority of the request, which a hold of the abort signal may concern.
    pub(super) fn authority(&self) -> Option<std::borrow::Cow<'_, Authority>> {
        match &self.kept {
            Kept::Copy(request) => request.authority(),
            Kept::Method(_, authority) => authority.as_ref().map(std::borrow::Cow::Borrowed),
            Kept::Pending => None,
        }
    }

    /// The delay before the first attempt (of the stored request), `U(0, first_attempt_jitter)`,
    /// recorded (zero when the abort signal forbids sleeping now), and the listener the wait is
    /// aborted with.
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

    /// The decision on `result`, the outcome of an attempt that ended at `now`, as the ladder
    /// takes it: [`decide`](Self::decide) without its end for a first-try success (which
    /// [`decide_classified`](Self::decide_classified) takes the long way).
    #[cfg(test)]
    pub(super) fn answer<Res, E>(
        &mut self,
        result: &Result<Res, E>,
        now: impl FnOnce() -> Instant,
    ) -> Next
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        let classified = self.classify(result);
        self.decide_classified(result, classified, now)
    }

    /// The classifier's word on `result`, for the request's method.
    #[inline]
    fn classify<Res, E>(&self, result: &Result<Res, E>) -> Outcome
    where
        C: Classify<Res, E>,
    {
        let method = match &self.kept {
            Kept::Copy(request) => request.method(),
            Kept::Method(method, _) => method,
            Kept::Pending => unreachable!("an outcome comes after its attempt was sent"),
        };
        self.config.classifier.classify(method, result)
    }

    /// The common end, decided before the ladder (`classified` is the classifier's word on
    /// `result`): a success at the first try, without pacing (which books every outcome) and
    /// with nothing to report (no wait so far, no stream kept for a key). The budget earns its
    /// deposit, the counters and a waiting slot hear of it, and `true`: what the ladder and
    /// [`end`](Self::end) would do for it, without their machinery on the path of every
    /// request.
    #[inline]
    fn first_try_success<Res, E>(&mut self, result: &Result<Res, E>, classified: Outcome) -> bool {
        if classified != Outcome::Success
            || result.is_err()
            || self.tries.sent() != 1
            || self.waits.is_some()
            || self.config.pacer.is_some()
        {
            return false;
        }
        self.deposit();
        self.finished_first_try(StopReason::Success)
    }

    /// A success earns the budget its deposit: the one place it is paid.
    #[inline]
    fn deposit(&self) {
        if let Some(budget) = &self.config.settings.budget {
            budget.deposit();
        }
    }

    /// Takes the decision after an attempt that ended at `now` (read only for a transient
    /// outcome, or when pacing learns from every outcome) with `result`, classified as
    /// `classified`: stop with a reason, sleep this long, or wait in the endpoint's queue. The
    /// ladder gives the verdict; with pacing, the pacer learns from the outcome first and
    /// rewrites the verdict after.
    fn decide_classified<Res, E>(
        &mut self,
        result: &Result<Res, E>,
        classified: Outcome,
        now: impl FnOnce() -> Instant,
    ) -> Next
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        let mut now = Now::new(now);
        let facts = self.facts(result, classified);
        // The pacer learns what the response was, before the server's word changes it.
        let booked = self.book(&facts, result, &mut now);
        if facts.outcome == Outcome::Success {
            self.deposit();
        }
        let verdict = self.ladder(&facts, &mut now);
        match booked {
            // Without pacing, the success path pays no reference count and no clock.
            None => self.follow(verdict, || now.get()),
            Some(booked) => self.pace(verdict, &facts, &booked, now.get()),
        }
    }

    /// What the ladder reads of `result` (`classified` by the classifier): the outcome, the
    /// server's hint (for a success, with pacing, only its quota's reset: a used-up quota pauses
    /// the endpoint), a breaker's refusal, a rotation without proof (resent as rotation when the
    /// request may be repeated). An error no rule recognises is counted and named on the way.
    fn facts<Res, E>(&mut self, result: &Result<Res, E>, classified: Outcome) -> Facts
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        let config = &self.config;
        if classified == Outcome::Success && result.is_ok() {
            // Without pacing a success says nothing; with pacing, only whether it used up the
            // quota.
            let hint = match config.pacer {
                Some(_) => quota_hint(config, result),
                None => ServerHint::NONE,
            };
            return Facts {
                classified,
                outcome: classified,
                rotation: false,
                hint,
                refused_for: None,
                congestion: false,
            };
        }
        let signals = signals_of(config, result, classified);
        let mut hint = signals.hint;
        if let Ok(response) = result {
            if response.extensions().get::<UpstreamHeld>().is_some() {
                // A pool below keeps it for the upstream that sent it; the next attempt goes
                // to another.
                hint = hint.with_retry_after(None).with_quota_reset(false);
            }
        }
        let mut outcome = classified;
        if outcome == Outcome::Permanent && result.is_ok() && hint.should_retry() == Some(true) {
            // The server says this response is worth another attempt, whatever its status.
            outcome = Outcome::Transient;
        }
        // A rotation without proof that the request was not processed: sent again as rotation
        // if the request may be repeated at all; the endpoint is up either way.
        let rotation = signals.rotation && classified == Outcome::Transient && result.is_err();
        if rotation {
            config.counters.unproven_rotation();
            if self.not_retryable.is_none() {
                outcome = Outcome::NotSent(NotSent::Refused);
            }
        }
        let refused_for = match (outcome, result) {
            (Outcome::Permanent, Err(_)) => signals.refused_for,
            _ => None,
        };
        if let (Err(_), Some(name)) = (result, signals.unknown_error) {
            // Counted and named, so that a new kind of error gets a rule (see `unknown_errors`).
            decision!(error = %name, "an error no classification rule recognises");
            self.config.counters.unknown_error();
            self.trail().unknown_error(name);
        }
        Facts {
            classified,
            outcome,
            rotation,
            hint,
            refused_for,
            congestion: signals.congestion && classified == Outcome::Transient && result.is_ok(),
        }
    }
}

/// What an outcome that is not a success says (`classified` by the classifier): its hint,
/// congestion (asked with pacing's statuses), a refusal, a rotation, an unknown error.
fn signals_of<C: Classify<Res, E>, Res: RetryResponse, E>(
    config: &Config<C>,
    result: &Result<Res, E>,
    classified: Outcome,
) -> Signals {
    let congestion = config
        .pacer
        .as_ref()
        .map_or(&[][..], |pacer| &pacer.rules().congestion[..]);
    let ask = Ask::new(classified, &*config.settings.wall_clock).congestion(congestion);
    config.classifier.signals(result, &ask)
}

/// What pacing reads of a success: when its used-up quota resets, if it says so and hints are
/// honoured. Out of line: the success path without pacing does not carry it.
#[inline(never)]
fn quota_hint<C: Classify<Res, E>, Res: RetryResponse, E>(
    config: &Config<C>,
    result: &Result<Res, E>,
) -> ServerHint {
    if config.settings.hint_policy.is_none() {
        return ServerHint::NONE;
    }
    let ask = Ask::new(Outcome::Success, &*config.settings.wall_clock).quota(true);
    config.classifier.signals(result, &ask).hint
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
