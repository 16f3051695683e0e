//! The decision engine: everything one logical request remembers between attempts, and the
//! ladder that decides, after each attempt, whether to stop or to sleep and for how long.
//!
//! After a transient outcome the decision is taken in this order: is the request repeatable,
//! are attempts left, does the abort signal forbid a sleep, how long to wait (`Retry-After` or
//! the backoff policy), does the wait fit the deadline, and last, does the budget grant a token.
//! Only then does the request sleep, so a request that will not be retried never waits and never
//! spends a token. Apart from the clock, which the caller passes in as `now`, the ladder is pure:
//! the unit tests below drive it without a runtime's timers or an inner service.

use super::budget::RetryBudget;
use super::config::Config;
use super::idempotency::{is_idempotent, IDEMPOTENCY_KEY};
use super::retry_after::{parse_retry_after, Resolved, RetryAfterHint};
use super::stats::Counters;
use crate::abort::Listener;
use crate::classify::{Classify, Outcome};
use crate::message::{RequestHead, RetryRequest, RetryResponse};
use crate::random::uniform;
use crate::report::{Delay, DelaySource, ReportSlot, RetryReport, StopReason};
use http::uri::Authority;
use http::{HeaderValue, Method};
use rand::rngs::SmallRng;
use rand::RngExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;

/// Everything one logical request remembers between attempts.
pub(crate) struct Session<Req, C> {
    config: Arc<Config<C>>,
    /// The request for the next attempt.
    request: Option<Req>,
    /// The request's method, for classifiers that look at it.
    method: Method,
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

/// What to do after an attempt.
pub(crate) enum Next {
    Stop(StopReason),
    Sleep {
        delay: Duration,
        listener: Option<Listener>,
        token: Option<Withdrawal>,
    },
}

/// A budget token taken for a retry: spent when the retry is sent, refunded when dropped unsent.
pub(crate) struct Withdrawal {
    budget: Arc<dyn RetryBudget>,
    counters: Counters,
    spent: bool,
}

impl Withdrawal {
    pub(crate) fn spend(mut self) {
        self.spent = true;
    }
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        if !self.spent {
            self.budget.refund();
            self.counters.budget_refunded();
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
    pub(crate) fn config(&self) -> &Config<C> {
        &self.config
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Total time slept (an aborted sleep counts the time it lasted).
    pub(crate) fn slept(&self) -> Duration {
        self.delays.iter().map(|delay| delay.duration).sum()
    }

    /// The delay before the last retry, or `base` before the first one (what decorrelated
    /// jitter grows from). The first-attempt delay does not count.
    fn previous_delay(&self) -> Duration {
        self.delays
            .last()
            .filter(|delay| delay.after_attempt > 0)
            .map_or(self.config.settings.backoff.base(), |delay| delay.duration)
    }

    /// The report so far, with the reason the request stopped.
    fn report(&mut self, stop: StopReason) -> RetryReport {
        self.config.counters.stop(stop);
        decision!(attempts = self.attempts, %stop, "finished");
        RetryReport {
            attempts: self.attempts,
            slept: self.slept(),
            delays: std::mem::take(&mut self.delays),
            stop,
        }
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
        if let Some(last) = self.delays.last().filter(|d| d.after_attempt > 0) {
            self.config
                .counters
                .delay(last.after_attempt, last.duration);
        }
    }

    /// The last sleep was aborted with `remaining` left: the report shows the time slept.
    pub(crate) fn cut_last_sleep(&mut self, remaining: Duration) {
        if let Some(last) = self.delays.last_mut() {
            last.duration = last.duration.saturating_sub(remaining);
        }
    }

    fn record_delay(&mut self, duration: Duration, source: DelaySource) {
        self.delays.push(Delay {
            after_attempt: self.attempts,
            duration,
            source,
        });
    }

    fn rng(&mut self) -> &mut SmallRng {
        let random = &self.config.settings.random;
        self.rng.get_or_insert_with(|| random.stream())
    }
}

impl<Req: RetryRequest, C> Session<Req, C> {
    /// Prepares the session for `request` (stamping its key if configured); the request itself
    /// is sent by the caller or [stored](Self::store).
    pub(crate) fn new(config: Arc<Config<C>>, request: &mut Req) -> Self {
        let settings = &config.settings;
        let mut rng = None;
        if settings.stamp_idempotency_key
            && !is_idempotent(request.method())
            && !request.headers().contains_key(&IDEMPOTENCY_KEY)
        {
            let key: u128 = rng.get_or_insert_with(|| settings.random.stream()).random();
            let value = HeaderValue::try_from(format!("{key:032x}"))
                .expect("hex digits are a valid header value");
            request.headers_mut().insert(IDEMPOTENCY_KEY.clone(), value);
        }
        let not_retryable = (!settings
            .idempotency
            .allows(request.method(), request.headers()))
        .then_some(StopReason::NotIdempotent);
        Self {
            started: settings.deadline.map(|_| Instant::now()),
            slot: request.report_slot().cloned(),
            method: request.method().clone(),
            config,
            request: None,
            not_retryable,
            attempts: 0,
            rng,
            delays: Vec::new(),
        }
    }

    pub(crate) fn has_first_attempt_jitter(&self) -> bool {
        !self.config.settings.first_attempt_jitter.is_zero()
    }

    /// Whether a second attempt is possible at all (and the service worth keeping).
    pub(crate) fn may_retry(&self) -> bool {
        self.not_retryable.is_none() && self.config.settings.max_attempts > 1
    }

    /// Keeps `request` for an attempt that is sent later (after the first-attempt jitter).
    pub(crate) fn store(&mut self, request: Req) {
        self.request = Some(request);
    }

    /// Sends the stored request to `service`, keeping a copy if another attempt may follow.
    pub(crate) fn send<S: Service<Req>>(&mut self, service: &mut S) -> S::Future {
        let request = self
            .request
            .take()
            .expect("a request is stored before every attempt");
        self.send_request(request, service)
    }

    /// Sends `request` to `service`, keeping a copy if another attempt may follow. The first
    /// attempt comes here straight from `call`: the request is not moved in and out of the
    /// session on the way.
    pub(crate) fn send_request<S: Service<Req>>(
        &mut self,
        mut request: Req,
        service: &mut S,
    ) -> S::Future {
        self.attempts += 1;
        let settings = &self.config.settings;
        if let Some(name) = &settings.attempt_header {
            request
                .headers_mut()
                .insert(name.clone(), HeaderValue::from(self.attempts));
        }
        if self.not_retryable.is_none() && self.attempts < settings.max_attempts {
            self.request = request.try_clone();
            if self.request.is_none() {
                self.not_retryable = Some(StopReason::NotReplayable);
            }
        }
        self.config.counters.attempt(self.attempts);
        decision!(attempt = self.attempts, "sending attempt");
        service.call(request)
    }

    /// The authority of the request, which a hold of the abort signal may concern.
    pub(crate) fn authority(&self) -> Option<std::borrow::Cow<'_, Authority>> {
        self.request.as_ref().and_then(RequestHead::authority)
    }

    /// The delay before the first attempt, `U(0, first_attempt_jitter)`, recorded (zero when
    /// the abort signal forbids sleeping now), and the listener the wait is aborted with.
    pub(crate) fn first_attempt_delay(&mut self) -> (Duration, Option<Listener>) {
        let config = Arc::clone(&self.config);
        let mut forbidden = false;
        let listener = config.settings.abort.as_ref().map(|abort| {
            let authority = self.authority();
            let listener = abort.listen(authority.as_deref());
            forbidden = abort
                .forbids(listener.seen_wakes, authority.as_deref())
                .is_some();
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

    /// Takes the decision after an attempt that ended at `now`: stop with a reason, or sleep
    /// this long.
    pub(crate) fn decide<Res, E>(&mut self, result: &Result<Res, E>, now: Instant) -> Next
    where
        Res: RetryResponse,
        C: Classify<Res, E>,
    {
        match self.config.classifier.classify(&self.method, result) {
            Outcome::Success => {
                if let Some(budget) = &self.config.settings.budget {
                    budget.deposit();
                }
                return Next::Stop(StopReason::Success);
            }
            Outcome::Permanent => return Next::Stop(StopReason::Permanent),
            Outcome::Transient => {}
        }
        // Cloned only past this point: the success path pays no reference count.
        let config = Arc::clone(&self.config);
        let settings = &config.settings;
        if let Some(reason) = self.not_retryable {
            return Next::Stop(reason);
        }
        if self.attempts >= settings.max_attempts {
            return Next::Stop(StopReason::AttemptsExhausted);
        }
        // Listen before checking: a shutdown or hold in between still wakes the sleep.
        let listener = match &settings.abort {
            Some(abort) => {
                let authority = self.authority();
                let listener = abort.listen(authority.as_deref());
                if abort
                    .forbids(listener.seen_wakes, authority.as_deref())
                    .is_some()
                {
                    return Next::Stop(StopReason::Aborted);
                }
                Some(listener)
            }
            None => None,
        };
        let (delay, source) = match self.delay_for(result) {
            Ok(chosen) => chosen,
            Err(reason) => return Next::Stop(reason),
        };
        if let (Some(deadline), Some(started)) = (settings.deadline, self.started) {
            if now.saturating_duration_since(started).saturating_add(delay) > deadline {
                return Next::Stop(StopReason::Deadline);
            }
        }
        let token = match &settings.budget {
            Some(budget) if !budget.withdraw() => {
                config.counters.budget_denied();
                return Next::Stop(StopReason::BudgetEmpty);
            }
            Some(budget) => {
                config.counters.budget_granted();
                Some(Withdrawal {
                    budget: Arc::clone(budget),
                    counters: config.counters.clone(),
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

    /// The delay before the next attempt: the server's `Retry-After` when valid, else the backoff
    /// policy's draw.
    fn delay_for<Res: RetryResponse, E>(
        &mut self,
        result: &Result<Res, E>,
    ) -> Result<(Duration, DelaySource), StopReason> {
        let config = Arc::clone(&self.config);
        let settings = &config.settings;
        let counters = &config.counters;
        if let (Some(retry_after), Ok(response)) = (&settings.retry_after, result) {
            match parse_retry_after(response.headers(), (settings.wall_clock)()) {
                RetryAfterHint::Absent => {}
                RetryAfterHint::Malformed => {
                    counters.retry_after_malformed();
                    decision!("ignoring malformed Retry-After");
                }
                RetryAfterHint::Delay(hint) => {
                    counters.retry_after_seen();
                    let clamp = config.retry_after_clamp;
                    return match retry_after.resolve(hint, clamp, self.rng()) {
                        Resolved::Delay { delay, clamped } => {
                            if clamped {
                                counters.retry_after_clamped();
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
                            counters.retry_after_clamped();
                            Err(StopReason::RetryAfterTooLong)
                        }
                    };
                }
            }
        }
        let retry = self.attempts - 1;
        let previous = self.previous_delay();
        let delay = settings.backoff.delay(retry, previous, self.rng());
        Ok((delay, DelaySource::Backoff))
    }

    /// Records the end of the request and hands back its last outcome.
    pub(crate) fn finish<Res: RetryResponse, E>(
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
