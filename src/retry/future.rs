//! [`ResponseFuture`]: one logical request, from its first attempt to its last outcome.
//!
//! ```text
//!  call ──> Calling ──── success / permanent / a reason to stop ────> done
//!             ^    └──── transient, retry granted ───┐
//!             │                                      v
//!             └── next attempt ──── Waiting: sleep, then poll_ready the stored clone
//!                                      └── aborted (at any point) ──> done, last outcome
//! ```
//!
//! After a transient outcome the decision is taken in this order: is the request repeatable,
//! are attempts left, has the abort signal shut down, how long to wait (`Retry-After` or the
//! backoff policy), does the wait fit the deadline, and last, does the budget grant a token.
//! Only then does the request sleep, so a request that will not be retried never waits and
//! never spends a token.

use super::abort::{AbortSignal, Listener};
use super::backoff::uniform;
use super::budget::RetryBudget;
use super::classify::{Classify, Outcome};
use super::idempotency::{is_idempotent, IDEMPOTENCY_KEY};
use super::layer::Shared;
use super::message::{RetryRequest, RetryResponse};
use super::report::{Delay, DelaySource, ReportSlot, RetryReport, StopReason};
use super::retry_after::{parse_retry_after, Resolved, RetryAfterHint};
use super::stats::RetryStats;
use http::uri::Authority;
use http::HeaderValue;
use pin_project_lite::pin_project;
use rand::rngs::SmallRng;
use rand::RngExt;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

pin_project! {
    /// The future of [`Retry`](crate::Retry): resolves to the last response or error of the inner
    /// service.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct ResponseFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S::Future, S::Response, S::Error>,
        // The service retries are sent to; `None` when the request is sent only once.
        service: Option<S>,
        session: Session<Req, C>,
    }

    impl<S, Req, C> PinnedDrop for ResponseFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if !matches!(*this.state, State::Done) {
                this.session.cancel();
            }
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Res, E> {
        // An attempt is in flight.
        Calling {
            #[pin]
            future: F,
        },
        // Between attempts: sleeping, then polling the stored service to readiness. It holds the
        // last outcome (`None` before the first attempt) until the next attempt is sent, so that
        // an abort at any point returns it, and the budget token the retry will spend.
        Waiting {
            wait: Pin<Box<Wait<Res, E>>>,
        },
        Done,
    }
}

pin_project! {
    // Boxed: only a request that waits pays for it, and the future of one that succeeds at once
    // stays small (it is moved several times between `call` and the executor).
    struct Wait<Res, E> {
        #[pin]
        sleep: Sleep,
        #[pin]
        woken: Option<OwnedNotified>,
        seen_wakes: u64,
        slept: bool,
        last: Option<Result<Res, E>>,
        token: Option<Withdrawal>,
    }
}

impl<F, Res, E> State<F, Res, E> {
    fn waiting(
        delay: Duration,
        listener: Option<Listener>,
        last: Option<Result<Res, E>>,
        token: Option<Withdrawal>,
    ) -> Self {
        let (woken, seen_wakes) = match listener {
            Some(listener) => (Some(listener.notified), listener.seen_wakes),
            None => (None, 0),
        };
        State::Waiting {
            wait: Box::pin(Wait {
                sleep: tokio::time::sleep(delay),
                woken,
                seen_wakes,
                slept: false,
                last,
                token,
            }),
        }
    }
}

/// Everything one logical request remembers between attempts.
pub(crate) struct Session<Req, C> {
    shared: Arc<Shared<C>>,
    /// The request for the next attempt.
    request: Option<Req>,
    /// Set when the request must not be sent again, and why.
    not_retryable: Option<StopReason>,
    attempts: u32,
    /// This request's own random stream, created when first needed.
    rng: Option<SmallRng>,
    /// When the request started, if a deadline is configured.
    started: Option<Instant>,
    /// Every sleep so far; the time slept and the previous delay are read from it.
    delays: Vec<Delay>,
    slot: Option<ReportSlot>,
}

enum Next {
    Stop(StopReason),
    Sleep {
        delay: Duration,
        listener: Option<Listener>,
        token: Option<Withdrawal>,
    },
}

/// A budget token taken for a retry: spent when the retry is sent, refunded when dropped unsent.
struct Withdrawal {
    budget: Arc<dyn RetryBudget>,
    stats: RetryStats,
    spent: bool,
}

impl Withdrawal {
    fn spend(mut self) {
        self.spent = true;
    }
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        if !self.spent {
            self.budget.refund();
            self.stats.budget_refunded();
        }
    }
}

macro_rules! decision {
    ($($arg:tt)*) => {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "tower_http_retry", $($arg)*);
    };
}

impl<Req, C> Session<Req, C> {
    /// Total time slept (an aborted sleep counts the time it lasted).
    fn slept(&self) -> Duration {
        self.delays.iter().map(|delay| delay.duration).sum()
    }

    /// The delay before the last retry, or `base` before the first one (what decorrelated
    /// jitter grows from). The first-attempt delay does not count.
    fn previous_delay(&self) -> Duration {
        self.delays
            .last()
            .filter(|delay| delay.after_attempt > 0)
            .map_or(self.shared.backoff.base(), |delay| delay.duration)
    }

    /// The report so far, with the reason the request stopped.
    fn report(&mut self, stop: StopReason) -> RetryReport {
        self.shared.stats.stop(stop);
        decision!(attempts = self.attempts, %stop, "finished");
        RetryReport {
            attempts: self.attempts,
            slept: self.slept(),
            delays: std::mem::take(&mut self.delays),
            stop,
        }
    }

    /// The caller dropped the future before it finished: the counters and the slot say so.
    fn cancel(&mut self) {
        let report = self.report(StopReason::Cancelled);
        if let Some(slot) = self.slot.take() {
            slot.fill(report);
        }
    }
}

impl<Req: RetryRequest, C> Session<Req, C> {
    /// Prepares the session for `request` (stamping its key if configured); the request itself
    /// is sent by the caller or [stored](Self::store).
    pub(crate) fn new(shared: Arc<Shared<C>>, request: &mut Req) -> Self {
        let mut rng = None;
        if shared.stamp_idempotency_key
            && !is_idempotent(request.method())
            && !request.headers().contains_key(&IDEMPOTENCY_KEY)
        {
            let key: u128 = rng.get_or_insert_with(|| shared.random.stream()).random();
            let value = HeaderValue::try_from(format!("{key:032x}"))
                .expect("hex digits are a valid header value");
            request.headers_mut().insert(IDEMPOTENCY_KEY.clone(), value);
        }
        let not_retryable = (!shared
            .idempotency
            .allows(request.method(), request.headers()))
        .then_some(StopReason::NotIdempotent);
        Self {
            started: shared.deadline.map(|_| Instant::now()),
            slot: request.report_slot().cloned(),
            shared,
            request: None,
            not_retryable,
            attempts: 0,
            rng,
            delays: Vec::new(),
        }
    }

    pub(crate) fn has_first_attempt_jitter(&self) -> bool {
        !self.shared.first_attempt_jitter.is_zero()
    }

    /// Whether a second attempt is possible at all (and the service worth keeping).
    pub(crate) fn may_retry(&self) -> bool {
        self.not_retryable.is_none() && self.shared.max_attempts > 1
    }

    /// Keeps `request` for an attempt that is sent later (after the first-attempt jitter).
    pub(crate) fn store(&mut self, request: Req) {
        self.request = Some(request);
    }

    /// Sends the stored request to `service`, keeping a copy if another attempt may follow.
    fn send<S: Service<Req>>(&mut self, service: &mut S) -> S::Future {
        let request = self
            .request
            .take()
            .expect("a request is stored before every attempt");
        self.send_request(request, service)
    }

    /// Sends `request` to `service`, keeping a copy if another attempt may follow. The first
    /// attempt comes here straight from `call`: the request is not moved in and out of the
    /// session on the way.
    fn send_request<S: Service<Req>>(&mut self, mut request: Req, service: &mut S) -> S::Future {
        self.attempts += 1;
        if let Some(name) = &self.shared.attempt_header {
            request
                .headers_mut()
                .insert(name.clone(), HeaderValue::from(self.attempts));
        }
        if self.not_retryable.is_none() && self.attempts < self.shared.max_attempts {
            self.request = request.try_clone();
            if self.request.is_none() {
                self.not_retryable = Some(StopReason::NotReplayable);
            }
        }
        self.shared.stats.attempt(self.attempts);
        decision!(attempt = self.attempts, "sending attempt");
        service.call(request)
    }

    fn rng(&mut self) -> &mut SmallRng {
        let random = &self.shared.random;
        self.rng.get_or_insert_with(|| random.stream())
    }

    fn record_delay(&mut self, duration: Duration, source: DelaySource) {
        self.delays.push(Delay {
            after_attempt: self.attempts,
            duration,
            source,
        });
    }

    /// The last sleep is over, run out or cut short: the histogram counts the time it lasted
    /// (not the time planned, and nothing for a sleep abandoned by dropping the future).
    fn sleep_ended(&self) {
        if let Some(last) = self.delays.last().filter(|d| d.after_attempt > 0) {
            self.shared.stats.delay(last.after_attempt, last.duration);
        }
    }

    /// The last sleep was aborted with `remaining` left: the report shows the time slept.
    fn cut_last_sleep(&mut self, remaining: Duration) {
        if let Some(last) = self.delays.last_mut() {
            last.duration = last.duration.saturating_sub(remaining);
        }
    }

    /// Takes the decision after an attempt: stop with a reason, or sleep this long.
    fn decide<Res, E>(&mut self, result: &Result<Res, E>) -> Next
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        let outcome = match result {
            Ok(response) => self.shared.classifier.classify_response(response),
            Err(error) => self.shared.classifier.classify_error(error),
        };
        match outcome {
            Outcome::Success => {
                if let Some(budget) = &self.shared.budget {
                    budget.deposit();
                }
                return Next::Stop(StopReason::Success);
            }
            Outcome::Permanent => return Next::Stop(StopReason::Permanent),
            Outcome::Transient => {}
        }
        // Cloned only past this point: the success path pays no reference count.
        let shared = Arc::clone(&self.shared);
        if let Some(reason) = self.not_retryable {
            return Next::Stop(reason);
        }
        if self.attempts >= shared.max_attempts {
            return Next::Stop(StopReason::AttemptsExhausted);
        }
        // Listen before checking: a shutdown or hold in between still wakes the sleep.
        let listener = shared.abort.as_ref().map(AbortSignal::listen);
        if let Some(abort) = &shared.abort {
            if abort.forbids_sleep(self.authority()) {
                return Next::Stop(StopReason::Aborted);
            }
        }
        let (delay, source) = match self.delay_for(result) {
            Ok(chosen) => chosen,
            Err(reason) => return Next::Stop(reason),
        };
        if let (Some(deadline), Some(started)) = (shared.deadline, self.started) {
            if started.elapsed().saturating_add(delay) > deadline {
                return Next::Stop(StopReason::Deadline);
            }
        }
        let token = match &shared.budget {
            Some(budget) if !budget.withdraw() => {
                shared.stats.budget_denied();
                return Next::Stop(StopReason::BudgetEmpty);
            }
            Some(budget) => {
                shared.stats.budget_granted();
                Some(Withdrawal {
                    budget: Arc::clone(budget),
                    stats: shared.stats.clone(),
                    spent: false,
                })
            }
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

    /// The authority of the request, which a hold of the abort signal may concern.
    fn authority(&self) -> Option<&Authority> {
        self.request.as_ref().and_then(RetryRequest::authority)
    }

    /// The delay before the next attempt: the server's `Retry-After` when valid, else the backoff
    /// policy's draw.
    fn delay_for<Res: RetryResponse, E>(
        &mut self,
        result: &Result<Res, E>,
    ) -> Result<(Duration, DelaySource), StopReason> {
        let shared = Arc::clone(&self.shared);
        let stats = &shared.stats;
        if let (true, Ok(response)) = (shared.retry_after.is_honored(), result) {
            match parse_retry_after(response.headers(), (shared.wall_clock)()) {
                RetryAfterHint::Absent => {}
                RetryAfterHint::Malformed => {
                    stats.retry_after_malformed();
                    decision!("ignoring malformed Retry-After");
                }
                RetryAfterHint::Delay(hint) => {
                    stats.retry_after_seen();
                    let clamp = shared.retry_after_clamp;
                    return match shared.retry_after.resolve(hint, clamp, self.rng()) {
                        Resolved::Delay { delay, clamped } => {
                            if clamped {
                                stats.retry_after_clamped();
                                decision!(?hint, ?clamp, "clamping Retry-After");
                            }
                            let source = if clamped {
                                DelaySource::RetryAfterClamped
                            } else {
                                DelaySource::RetryAfter
                            };
                            Ok((delay, source))
                        }
                        Resolved::GiveUp => {
                            stats.retry_after_clamped();
                            Err(StopReason::RetryAfterTooLong)
                        }
                    };
                }
            }
        }
        let retry = self.attempts - 1;
        let previous = self.previous_delay();
        let delay = shared.backoff.delay(retry, previous, self.rng());
        Ok((delay, DelaySource::Backoff))
    }

    /// Records the end of the request and hands back its last outcome.
    fn finish<Res: RetryResponse, E>(
        &mut self,
        result: Result<Res, E>,
        stop: StopReason,
    ) -> Result<Res, E> {
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

impl<S, Req, C> ResponseFuture<S, Req, C>
where
    S: Service<Req>,
    Req: RetryRequest,
{
    /// The first attempt is sent now to `service` (already ready), which is kept for retries.
    pub(crate) fn sent(mut session: Session<Req, C>, request: Req, mut service: S) -> Self {
        let future = session.send_request(request, &mut service);
        Self {
            state: State::Calling { future },
            service: Some(service),
            session,
        }
    }

    /// The only attempt is sent now to `service` (already ready); nothing is kept.
    pub(crate) fn sent_once(mut session: Session<Req, C>, request: Req, service: &mut S) -> Self {
        let future = session.send_request(request, service);
        Self {
            state: State::Calling { future },
            service: None,
            session,
        }
    }

    /// The first attempt waits `U(0, first_attempt_jitter)`, then goes to `service` once ready.
    pub(crate) fn delayed(mut session: Session<Req, C>, service: S) -> Self {
        let shared = Arc::clone(&session.shared);
        let listener = shared.abort.as_ref().map(AbortSignal::listen);
        let forbidden = shared
            .abort
            .as_ref()
            .is_some_and(|abort| abort.forbids_sleep(session.authority()));
        let delay = if forbidden {
            Duration::ZERO
        } else {
            uniform(Duration::ZERO, shared.first_attempt_jitter, session.rng())
        };
        session.record_delay(delay, DelaySource::FirstAttempt);
        Self {
            state: State::waiting(delay, listener, None, None),
            service: Some(service),
            session,
        }
    }
}

impl<S, Req, C> Future for ResponseFuture<S, Req, C>
where
    S: Service<Req>,
    S::Response: RetryResponse,
    Req: RetryRequest,
    C: Classify<S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => {
                    let result = ready!(future.poll(cx));
                    match this.session.decide(&result) {
                        Next::Stop(reason) => {
                            this.state.set(State::Done);
                            return Poll::Ready(this.session.finish(result, reason));
                        }
                        Next::Sleep {
                            delay,
                            listener,
                            token,
                        } => this
                            .state
                            .set(State::waiting(delay, listener, Some(result), token)),
                    }
                }
                StateProj::Waiting { wait } => {
                    let wait = wait.as_mut().project();
                    let (sleep, mut woken, seen_wakes, slept, last, token) = (
                        wait.sleep,
                        wait.woken,
                        wait.seen_wakes,
                        wait.slept,
                        wait.last,
                        wait.token,
                    );
                    let aborted = loop {
                        let Some(listener) = woken.as_mut().as_pin_mut() else {
                            break false;
                        };
                        if listener.poll(cx).is_pending() {
                            break false;
                        }
                        // Woken: for this request, or by a hold for another authority. Listen
                        // again before checking, so that a wake in between is not lost.
                        let abort = this.session.shared.abort.as_ref();
                        let abort = abort.expect("a listener comes from the abort signal");
                        woken.set(Some(abort.listen().notified));
                        if abort.ends_sleep(*seen_wakes, this.session.authority()) {
                            break true;
                        }
                    };
                    if aborted {
                        woken.set(None);
                        if !*slept {
                            let remaining =
                                sleep.deadline().saturating_duration_since(Instant::now());
                            this.session.cut_last_sleep(remaining);
                            this.session.sleep_ended();
                            *slept = true;
                        }
                        drop(token.take()); // refunded: this retry will not be sent
                        if let Some(result) = last.take() {
                            this.state.set(State::Done);
                            return Poll::Ready(this.session.finish(result, StopReason::Aborted));
                        }
                        // Aborted before the first attempt: there is no outcome yet, send now.
                    }
                    if !*slept {
                        ready!(sleep.poll(cx));
                        this.session.sleep_ended();
                        *slept = true;
                    }
                    let service = this
                        .service
                        .as_mut()
                        .expect("a request that waits keeps a service");
                    if let Err(error) = ready!(service.poll_ready(cx)) {
                        drop(token.take());
                        this.state.set(State::Done);
                        return Poll::Ready(this.session.finish(Err(error), StopReason::NotReady));
                    }
                    if let Some(token) = token.take() {
                        token.spend();
                    }
                    // The previous outcome is released here, as the next attempt is sent.
                    let future = this.session.send(service);
                    this.state.set(State::Calling { future });
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}

impl<S, Req, C> fmt::Debug for ResponseFuture<S, Req, C>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Calling { .. } => "calling",
            State::Waiting { wait } if !wait.slept => "sleeping",
            State::Waiting { .. } => "readying",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("attempts", &self.session.attempts)
            .field("slept", &self.session.slept())
            .finish_non_exhaustive()
    }
}
