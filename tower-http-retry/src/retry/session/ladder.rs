//! The decision ladder: after an attempt, stop (with a reason and when sending again makes
//! sense) or retry (after a delay, from a source). It reads in the order the module docs state,
//! and knows nothing of pacing: [`pace`](super::pacing) rewrites its verdict in one place.
//!
//! 1. **outcome**: a success or a permanent outcome stops; so does a circuit breaker's refusal
//!    (the attempt was not sent: the endpoint is failing, not the request);
//! 2. **repeatable**: a request that may not be sent again (or that an outer layer retries)
//!    stops, unless it provably was not sent or the server says repeating it is safe;
//! 3. **stand down**: the server asked not to retry;
//! 4. **attempts**: none left (a free resend of a refused request has its own cap);
//! 5. **abort**: the signal is shut down, or a breaker holds the endpoint;
//! 6. **rotation**: a request the server turned away unprocessed goes again after a short pause;
//! 7. **delay**: the server's hint (clamped, or given up on) or the backoff draw;
//! 8. **deadline**: the wait must end within it;
//! 9. **budget**: a token, taken only for a sleep that starts (a free resend takes none).
//!
//! Rungs 1 to 7 give the [`Verdict`]; 8 and 9 are [`commit`](Session::commit), taken when the
//! sleep starts. Apart from the clock (passed in), the rng of the request and the counters,
//! nothing outside the session is read or changed before the budget's token.

use super::verdict::{Facts, Lift, Retry, Stop, Verdict};
use super::{Next, Now, Session};
use crate::abort::{Forbidden, Listener};
use crate::classify::{NotSent, Outcome};
use crate::message::RetryRequest;
use crate::random::uniform;
use crate::report::{DelaySource, StopReason};
use crate::retry::budget::Withdrawal;
use crate::telemetry::decision;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl<Req: RetryRequest, C> Session<Req, C> {
    /// Rungs 1 to 7. `now` is read past the first rung only: a success reads no clock.
    pub(super) fn ladder<F: FnOnce() -> Instant>(
        &mut self,
        facts: &Facts,
        now: &mut Now<F>,
    ) -> Verdict {
        match (facts.outcome, facts.refused_for) {
            (Outcome::Success, _) => return Verdict::Stop(Stop::now(StopReason::Success)),
            (Outcome::Permanent, None) => return Verdict::Stop(Stop::now(StopReason::Permanent)),
            // Never `NotIdempotent`: the request was not sent.
            (Outcome::Permanent, Some(wait)) => {
                return Verdict::Stop(Stop {
                    reason: StopReason::CircuitOpen,
                    resend: Some(wait),
                    lift: Some(Lift::Refused { wait }),
                })
            }
            _ => {}
        }
        let now = now.get();
        if let Some(after) = facts.hint.retry_after() {
            // Kept for the report: a resend time never undercuts what the server asked.
            self.trail().hinted(after, now);
        }
        match self.may_wait(facts, now) {
            Ok(listener) => self.wait_for(facts, listener, now),
            Err(stop) => Verdict::Stop(stop),
        }
    }

    /// Rungs 2 to 5: whether the request may wait for another attempt at all. `Ok` with the
    /// listener the wait is ended by (with an abort signal).
    pub(super) fn may_wait(
        &mut self,
        facts: &Facts,
        now: Instant,
    ) -> Result<Option<Listener>, Stop> {
        // 2. Repeatable: whatever its method, if it never reached the server or the server says
        // repeating it is safe.
        let should_retry = facts.hint.should_retry();
        match self.not_retryable {
            Some(StopReason::NotIdempotent)
                if facts.not_sent().is_some() || should_retry == Some(true) => {}
            Some(reason) => return Err(Stop::now(reason)),
            None => {}
        }
        // 3. Stand down.
        if should_retry == Some(false) {
            decision!("the server asks not to retry");
            return Err(Stop {
                reason: StopReason::StandDown,
                resend: self.hint_delay(&facts.hint),
                lift: None,
            });
        }
        // 4. Attempts.
        if let Some(reason) = self.exhausted(facts.not_sent()) {
            let resend = (reason == StopReason::AttemptsExhausted).then(|| self.backoff_delay().0);
            return Err(Stop {
                reason,
                resend,
                lift: None,
            });
        }
        // 5. Abort.
        let Some(abort) = &self.config.settings.abort else {
            return Ok(None);
        };
        let (listener, forbidden) = abort.listen_checked(self.authority().as_deref());
        match forbidden {
            None => Ok(Some(listener)),
            Some(Forbidden::Shutdown) => Err(Stop::now(StopReason::Aborted)),
            Some(Forbidden::Held(until)) => Err(Stop {
                reason: StopReason::Held,
                resend: Some(until.saturating_duration_since(now)),
                lift: Some(Lift::Held {
                    until,
                    listener: Box::new(listener),
                }),
            }),
        }
    }

    /// Rungs 6 and 7: how long to wait.
    pub(super) fn wait_for(
        &mut self,
        facts: &Facts,
        listener: Option<Listener>,
        now: Instant,
    ) -> Verdict {
        // 6. Rotation (and a `425 Too Early`, once): a short jittered pause, spending neither
        // an attempt nor a token (the endpoint is up; an outage looks like `Unconnected`).
        if let Some(kind @ (NotSent::Refused | NotSent::TooEarly)) = facts.not_sent() {
            let resend = self.tries.resend_number(kind);
            let pause = rotation_pause(resend, self.rng());
            return Verdict::Retry(Retry {
                delay: pause,
                source: DelaySource::Refused,
                listener,
            });
        }
        // 7. Delay.
        match self.delay_for(&facts.hint, now) {
            Ok((delay, source)) => Verdict::Retry(Retry {
                delay,
                source,
                listener,
            }),
            Err(stop) => Verdict::Stop(stop),
        }
    }

    /// Rungs 8 and 9, as the sleep starts: the wait must fit the deadline, and the budget must
    /// grant a token (a free resend of a refused request asks none).
    pub(super) fn commit(&mut self, retry: Retry, now: Instant) -> Result<Next, Stop> {
        let Retry {
            delay,
            source,
            listener,
        } = retry;
        if !self.deadline.fits(delay, now) {
            return Err(Stop::resend(StopReason::Deadline, delay));
        }
        let config = Arc::clone(&self.config);
        let token = match (&config.settings.budget, source) {
            (_, DelaySource::Refused) => {
                self.tries.resent();
                config.counters.rotation_resend();
                decision!(
                    attempt = self.tries.sent(),
                    pause = ?delay,
                    "resending a request the server turned away unprocessed"
                );
                None
            }
            (Some(budget), _) => match Withdrawal::take(budget, &config.counters) {
                Some(token) => Some(token),
                None => {
                    return Err(Stop {
                        reason: StopReason::BudgetEmpty,
                        resend: Some(delay),
                        lift: Some(Lift::BudgetEmpty {
                            listener: listener.map(Box::new),
                        }),
                    })
                }
            },
            (None, _) => None,
        };
        self.record_delay(delay, source);
        if source != DelaySource::Refused {
            decision!(
                attempt = self.tries.sent(),
                ?delay,
                ?source,
                "retrying after delay"
            );
        }
        Ok(Next::Sleep {
            delay,
            watch: listener.map(|listener| self.sleep_watch(listener)),
            token,
        })
    }

    /// The verdict without pacing: a stop, or the sleep [`commit`](Self::commit) allows.
    pub(super) fn follow(&mut self, verdict: Verdict, now: impl FnOnce() -> Instant) -> Next {
        match verdict {
            Verdict::Stop(stop) => self.stop(stop),
            Verdict::Retry(retry) => match self.commit(retry, now()) {
                Ok(next) => next,
                Err(stop) => self.stop(stop),
            },
        }
    }

    /// Takes `stop`: the report will say when to send again, if the stop knows.
    pub(super) fn stop(&mut self, stop: Stop) -> Next {
        if let Some(resend) = stop.resend {
            self.retry_in(resend);
        }
        Next::Stop(stop.reason)
    }

    /// Why no attempt may follow, if none may: a free resend of a refused request has its own
    /// cap (a `425 Too Early` is resent once), any other retry spends an attempt.
    /// (`max_attempts == 1` turns every retry off.)
    fn exhausted(&self, not_sent: Option<NotSent>) -> Option<StopReason> {
        let settings = &self.config.settings;
        let free = matches!(not_sent, Some(NotSent::Refused | NotSent::TooEarly));
        if free && settings.max_attempts > 1 {
            let max = settings.max_refused_retries;
            (self.tries.refused_too_often(not_sent, max)).then_some(StopReason::RefusedTooOften)
        } else {
            (self.tries.counted() >= settings.max_attempts).then_some(StopReason::AttemptsExhausted)
        }
    }
}

/// The first rotation pause's upper bound, and the most any pause lasts.
const ROTATION_PAUSE: (Duration, Duration) = (Duration::from_millis(4), Duration::from_millis(50));

/// The pause before the `resend`-th (1-based) resend of a request turned away unprocessed:
/// `U(high/4, high)`, `high` doubling from 4 ms to 50 ms. Long enough for the client to see
/// the closing connection close (a resend at once lands on it again), short against a request's
/// time; jittered so that the streams one `GOAWAY` turned away do not arrive together.
pub(super) fn rotation_pause(resend: u32, rng: &mut rand::rngs::SmallRng) -> Duration {
    let (first, cap) = ROTATION_PAUSE;
    let high = first
        .saturating_mul(1 << resend.clamp(1, 16).saturating_sub(1))
        .min(cap);
    uniform(high / 4, high, rng)
}

#[cfg(test)]
mod tests {
    //! The ladder's verdicts on their own, and what `commit` adds; `decide_classified` (the ladder
    //! with the facts and pacing around it) is tested in `../tests.rs`.

    use super::*;
    use crate::classify::Classify;
    use crate::hint::ServerHint;
    use crate::retry::session::tests::{
        builder, config, empty_bucket, response, sent, Layered, Req, Res, MS,
    };
    use crate::retry::TokenBucket;
    use crate::AbortSignal;
    use http::Method;

    /// A 503 is transient; an error is a breaker's refusal for 300 ms.
    #[derive(Debug)]
    struct Refusing;

    impl Classify<Res, std::io::Error> for Refusing {
        fn classify_response(&self, response: &Res) -> Outcome {
            crate::HttpClassifier::new().classify_status(response.status())
        }
        fn classify_error(&self, _: &std::io::Error) -> Outcome {
            Outcome::Permanent
        }
        fn signals(
            &self,
            result: &Result<Res, std::io::Error>,
            ask: &crate::classify::Ask<'_>,
        ) -> crate::classify::Signals {
            let mut signals = crate::classify::default_signals(result, ask);
            signals.refused_for = result.is_err().then_some(300 * MS);
            signals
        }
    }

    fn facts(outcome: Outcome) -> Facts {
        Facts {
            classified: outcome,
            outcome,
            rotation: false,
            hint: ServerHint::NONE,
            refused_for: None,
            congestion: false,
        }
    }

    fn never() -> Instant {
        panic!("the clock was read")
    }

    #[test]
    fn a_success_stops_without_reading_the_clock() {
        let config = config(builder());
        let mut session = sent(&config, Method::GET);
        let verdict = session.ladder(&facts(Outcome::Success), &mut Now::new(never));
        assert!(matches!(
            verdict,
            Verdict::Stop(Stop {
                reason: StopReason::Success,
                resend: None,
                lift: None
            })
        ));
        // `decide` neither, without pacing.
        let mut session = sent(&config, Method::GET);
        assert!(matches!(
            session.answer(&response(200), never),
            Next::Stop(StopReason::Success)
        ));
    }

    #[test]
    fn a_breaker_refusal_stops_as_circuit_open_before_the_method_is_asked() {
        let config = config(builder().classifier(Refusing));
        let mut session: Session<Req, Layered<Refusing>> = sent(&config, Method::POST);
        let mut refused = facts(Outcome::Permanent);
        refused.refused_for = Some(300 * MS);
        match session.ladder(&refused, &mut Now::new(never)) {
            Verdict::Stop(Stop {
                reason: StopReason::CircuitOpen,
                resend: Some(resend),
                lift: Some(Lift::Refused { wait }),
            }) => assert_eq!((resend, wait), (300 * MS, 300 * MS)),
            other => panic!("{other:?}"),
        }
        let error = std::io::Error::other("refused");
        let mut session: Session<Req, Layered<Refusing>> = sent(&config, Method::POST);
        let next = session.answer(&Err::<Res, _>(error), Instant::now);
        assert!(matches!(next, Next::Stop(StopReason::CircuitOpen)));
    }

    #[test]
    fn the_ladder_proposes_a_retry_and_only_commit_takes_the_token() {
        let bucket = Arc::new(TokenBucket::default());
        let config = config(builder().budget(Arc::clone(&bucket)));
        let mut session = sent(&config, Method::GET);
        let before = bucket.available();
        let now = Instant::now();
        let verdict = session.ladder(&facts(Outcome::Transient), &mut Now::new(|| now));
        let Verdict::Retry(retry) = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(
            (retry.delay, retry.source),
            (100 * MS, DelaySource::Backoff)
        );
        assert_eq!(bucket.available(), before, "no token for a verdict");
        assert!(
            session.delays().is_empty(),
            "no delay recorded for a verdict"
        );
        let Ok(Next::Sleep { delay, token, .. }) = session.commit(retry, now) else {
            panic!("a sleep")
        };
        assert_eq!(delay, 100 * MS);
        assert!(token.is_some());
        assert_eq!(bucket.available(), before - 1.0);
        assert_eq!(session.delays().len(), 1);
    }

    #[test]
    fn the_stand_down_rung_comes_before_the_attempts_rung() {
        let config = config(builder().max_attempts(1));
        let mut session = sent(&config, Method::GET);
        let mut hinted = facts(Outcome::Transient);
        hinted.hint = ServerHint::stand_down().with_retry_after(Some(2000 * MS));
        let now = Instant::now();
        match session.ladder(&hinted, &mut Now::new(|| now)) {
            Verdict::Stop(stop) => {
                assert_eq!(stop.reason, StopReason::StandDown);
                assert_eq!(stop.resend, Some(2000 * MS));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_hold_stops_at_the_abort_rung_with_its_end_as_the_resend_time_and_a_lift() {
        let abort = AbortSignal::new();
        let config = config(builder().abort_signal(abort.clone()));
        let now = Instant::now();
        abort.hold_until(now + 700 * MS);
        let mut session = sent(&config, Method::GET);
        match session.ladder(&facts(Outcome::Transient), &mut Now::new(|| now)) {
            Verdict::Stop(Stop {
                reason: StopReason::Held,
                resend: Some(resend),
                lift: Some(Lift::Held { until, .. }),
            }) => {
                assert_eq!(resend, 700 * MS);
                assert_eq!(until, now + 700 * MS);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_empty_budget_stops_at_commit_with_a_lift_and_the_delay_as_the_resend_time() {
        let config = config(builder().budget(empty_bucket()));
        let mut session = sent(&config, Method::GET);
        let now = Instant::now();
        let Verdict::Retry(retry) =
            session.ladder(&facts(Outcome::Transient), &mut Now::new(|| now))
        else {
            panic!("a retry")
        };
        match session.commit(retry, now) {
            Err(Stop {
                reason: StopReason::BudgetEmpty,
                resend: Some(resend),
                lift: Some(Lift::BudgetEmpty { .. }),
            }) => assert_eq!(resend, 100 * MS),
            Err(stop) => panic!("{stop:?}"),
            Ok(_) => panic!("a sleep"),
        }
    }

    #[test]
    fn a_free_resend_commits_without_a_token_and_counts_as_one() {
        let bucket = Arc::new(TokenBucket::default());
        let config = config(builder().budget(Arc::clone(&bucket)));
        let mut session = sent(&config, Method::POST);
        let before = bucket.available();
        let now = Instant::now();
        let verdict = session.ladder(
            &facts(Outcome::NotSent(NotSent::Refused)),
            &mut Now::new(|| now),
        );
        let Verdict::Retry(retry) = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(retry.source, DelaySource::Refused);
        let Ok(Next::Sleep { token: None, .. }) = session.commit(retry, now) else {
            panic!("a sleep without a token")
        };
        assert_eq!(bucket.available(), before);
        assert_eq!(session.attempts() - session.counted(), 1);
        assert_eq!(config.counters.snapshot().rotation_resends, 1);
    }
}
