//! What a worker does with a delivery after one slot's sequence: [`Step`], decided by
//! [`decide`] from the record, what the retry layer returned and its report, apart from any
//! engine (so that every rule is tested without one).

use crate::health::{DisableReason, EndpointHealth};
use crate::record::{Delivery, SlotOutcome};
use crate::schedule::{unix_ms, Schedule};
use serde::{Deserialize, Serialize};
use std::time::SystemTime;
use tower_http_retry::{RetryReport, StopReason};

/// Why a delivery is in the dead-letter queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// The endpoint answered with a permanent outcome (a 400, a 404, ...): sending it again
    /// cannot help.
    Permanent,
    /// The endpoint answered `410 Gone`.
    Gone,
    /// The schedule's last slot failed.
    ScheduleExhausted,
    /// The endpoint is disabled ([`EndpointHealth`]).
    EndpointDisabled(DisableReason),
    /// The stored record no longer makes a request (another version of the format, a field that
    /// does not parse): kept, not sent.
    Unreadable,
    /// The receiver answered `webhook-delivery: abort-message`: stop retrying this delivery
    /// ([`HealthRules::receiver_control`](crate::health::HealthRules::receiver_control)).
    Aborted,
}

/// A delivery in the dead-letter queue: the record with its whole history, why, and when.
///
/// A stored letter of another shape (a reason a newer build added) reads back as a letter of
/// an unreadable record ([`Delivery::stored_form`] holds the letter's stored JSON), with
/// [`DeadReason::Unreadable`]: listed, never replayed, and never a failure of the whole queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct DeadLetter {
    /// The record, the slot that ended it last in its history.
    pub delivery: Delivery,
    /// Why it is here.
    pub reason: DeadReason,
    /// When it was dead-lettered, Unix milliseconds.
    pub at: u64,
}

impl Serialize for DeadLetter {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        DeadLetter::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for DeadLetter {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = serde_json::Value::deserialize(deserializer)?;
        Ok(DeadLetter::deserialize(&stored).unwrap_or_else(|_| {
            let record = stored.get("delivery").unwrap_or(&stored);
            DeadLetter {
                delivery: Delivery::unreadable(record, stored.to_string()),
                reason: DeadReason::Unreadable,
                at: stored
                    .get("at")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0),
            }
        }))
    }
}

impl DeadLetter {
    /// When it was dead-lettered.
    pub fn dead_at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(self.at)
    }
}

/// What the worker does with a delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Delivered: the engine marks the task done.
    Delivered,
    /// Store the record again, due at its [`due_at`](Delivery::due_at): the next slot after a
    /// failed one, or the same slot after the retry layer handed it back unsent.
    StoreAgain {
        /// The record to store.
        delivery: Delivery,
        /// Whether it was sent in this slot (`false`: handed back unsent, the slot not used).
        sent: bool,
    },
    /// Move the delivery to the dead-letter queue.
    DeadLetter(DeadLetter),
}

impl Step {
    /// Whether the delivery, which could carry its endpoint's next probe at `probe`, no longer
    /// does: stored for its next slot after a failed one, due after the probe (minutes later
    /// perhaps), or dead-lettered at the schedule's end (sent, or held back past it). While
    /// the endpoint's backlog is moved, the process that moved it then makes one moved delivery
    /// due at the probe instead ([`Outbox::resume_one`](crate::Outbox::resume_one)).
    pub(crate) fn leaves_the_probe(&self, probe: SystemTime) -> bool {
        match self {
            Step::StoreAgain { delivery, sent } => *sent && delivery.due_at() > probe,
            Step::DeadLetter(letter) => letter.reason == DeadReason::ScheduleExhausted,
            Step::Delivered => false,
        }
    }
}

/// The step when the receiver's answer asked for `control`: the delivery dead-lettered at once
/// with the slot's outcome in its history, as [`DeadReason::Aborted`], or with its endpoint
/// disabled ([`DisableReason::ReceiverAsked`]). A 2xx that carries either is delivered all the
/// same (its `disable` still disables the endpoint).
pub fn on_receiver_control(
    delivery: Delivery,
    result: &SlotResult,
    control: ReceiverControl,
    health: &EndpointHealth,
    now: SystemTime,
) -> Step {
    if control == ReceiverControl::Disable {
        health.disable(delivery.endpoint(), DisableReason::ReceiverAsked);
    }
    if result.delivered() {
        // Delivered all the same: a receiver that took it and asks for no more.
        return Step::Delivered;
    }
    let reason = match control {
        ReceiverControl::AbortMessage => DeadReason::Aborted,
        ReceiverControl::Disable => DeadReason::EndpointDisabled(DisableReason::ReceiverAsked),
    };
    let outcome = result.outcome(delivery.slot());
    Step::DeadLetter(DeadLetter {
        delivery: delivery.with_last(outcome),
        reason,
        at: unix_ms(now),
    })
}

/// What one slot's sequence through the retry layer returned.
#[derive(Clone, Debug)]
pub struct SlotResult {
    /// When the sequence started.
    pub started: SystemTime,
    /// The response's status, if there was a response (`None`: an error, or not sent).
    pub status: Option<u16>,
    /// The retry layer's report of the request.
    pub report: RetryReport,
}

/// What a receiver asked of its delivery in the `webhook-delivery` response header (Svix's
/// convention; honoured unless
/// [`HealthRules::receiver_control`](crate::health::HealthRules::receiver_control) is off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiverControl {
    /// `abort-message`: stop retrying this delivery.
    AbortMessage,
    /// `disable`: disable the endpoint.
    Disable,
}

impl ReceiverControl {
    /// The header that carries it.
    pub const HEADER: &'static str = "webhook-delivery";

    /// What `headers` ask, if anything: the header's value, trimmed, in any case; another value
    /// asks nothing.
    pub fn of(headers: &http::HeaderMap) -> Option<Self> {
        let value = headers.get(Self::HEADER)?.to_str().ok()?.trim();
        if value.eq_ignore_ascii_case("abort-message") {
            Some(ReceiverControl::AbortMessage)
        } else if value.eq_ignore_ascii_case("disable") {
            Some(ReceiverControl::Disable)
        } else {
            None
        }
    }
}

impl SlotResult {
    /// The entry of the delivery's history for this slot.
    fn outcome(&self, slot: u32) -> SlotOutcome {
        SlotOutcome {
            slot,
            at: unix_ms(self.started),
            attempts: self.report.attempts,
            stop: self.report.stop,
            status: self.status,
        }
    }

    /// Whether the slot delivered: a classified success with a 2xx.
    fn delivered(&self) -> bool {
        self.report.stop == StopReason::Success
            && self
                .status
                .is_some_and(|status| (200..300).contains(&status))
    }
}

/// The step for a delivery whose endpoint is disabled, or `None` when it may be sent.
pub fn before_sending(
    delivery: &Delivery,
    health: &EndpointHealth,
    now: SystemTime,
) -> Option<Step> {
    let reason = health.disabled(delivery.endpoint())?;
    Some(Step::DeadLetter(DeadLetter {
        delivery: delivery.clone(),
        reason: DeadReason::EndpointDisabled(reason),
        at: unix_ms(now),
    }))
}

/// The step after one slot's sequence, and what the endpoint's health learned from it.
///
/// * Not sent (the retry layer handed it back, [`StopReason::Deferred`] with no attempt): stored
///   again in the same slot at the report's resend time, the pacer's (or after the slot's
///   deadline when the report has none), but not past the end of the schedule's whole span
///   since the delivery was stored; taken then and held back again, it is dead-lettered, so a
///   delivery to an endpoint that stays down ends on time even though only the pacer's probes
///   reach it.
/// * A 2xx (a classified success): delivered.
/// * A `410 Gone`: dead-lettered, the endpoint disabled.
/// * A final stop ([`StopReason::is_final`]; not [`StopReason::NotIdempotent`], since the
///   delivery id makes every delivery safe to repeat at the receiver): dead-lettered.
/// * Anything else: the next slot, due at the latest of its jittered time and the report's
///   resend time; dead-lettered past the last slot, when that time would fall after the
///   schedule's end ([`Schedule::end`] from the delivery's first attempt since it was stored:
///   slots the pacer delayed do not stretch a delivery's life, and a delivery that waited for a
///   worker still has its whole schedule), or once the failure disabled the endpoint.
pub fn decide(
    delivery: Delivery,
    result: SlotResult,
    schedule: &Schedule,
    health: &EndpointHealth,
    now: SystemTime,
) -> Step {
    let report = &result.report;
    let resend_at = report.resend_at.map_or(now, |at| at.max(now));
    if report.attempts == 0 && !report.stop.is_final() {
        return held_back(delivery, report.resend_at, schedule, now);
    }
    let outcome = result.outcome(delivery.slot());
    let dead = |delivery: Delivery, reason| {
        Step::DeadLetter(DeadLetter {
            delivery: delivery.with_last(outcome),
            reason,
            at: unix_ms(now),
        })
    };
    let success = report.stop == StopReason::Success;
    if result.delivered() {
        health.succeeded(delivery.endpoint());
        return Step::Delivered;
    }
    if result.status == Some(410) {
        health.gone(delivery.endpoint());
        return dead(delivery, DeadReason::Gone);
    }
    if (report.stop.is_final() && report.stop != StopReason::NotIdempotent) || success {
        // A classified success that is not a 2xx (a 3xx the classifier accepts) is final too.
        return dead(delivery, DeadReason::Permanent);
    }
    if let Some(reason) = health.failed(delivery.endpoint(), result.started) {
        return dead(delivery, DeadReason::EndpointDisabled(reason));
    }
    let next = delivery.slot() + 1;
    // The schedule's span counts from the delivery's first attempt (as Svix's: each delay
    // follows the attempt before it), so a delivery that waited for a worker keeps its whole
    // schedule. The end bounds the slot as it will be stored: a server's resend time past it
    // ends the delivery as surely as a jittered time past it.
    let end = schedule.end(
        delivery
            .first_attempt_since_stored()
            .unwrap_or(result.started),
    );
    match schedule
        .due(delivery.id(), next, result.started)
        .map(|due| due.max(resend_at))
        .filter(|due| *due <= end)
    {
        Some(due) => Step::StoreAgain {
            delivery: delivery.next_slot(outcome, due),
            sent: true,
        },
        None => dead(delivery, DeadReason::ScheduleExhausted),
    }
}

/// A delivery the pacer held back unsent, with when to send it again (`resend_at`): stored
/// again in the same slot. The schedule runs on while the pacer holds a delivery back: one held
/// past the time its last slot would have had is dead-lettered as if that slot had failed. Its
/// span starts where the sent path's does: the first attempt, or the store.
fn held_back(
    delivery: Delivery,
    resend_at: Option<SystemTime>,
    schedule: &Schedule,
    now: SystemTime,
) -> Step {
    let end = schedule.end(
        delivery
            .first_attempt_since_stored()
            .unwrap_or(delivery.enqueued_at()),
    );
    if now >= end {
        return Step::DeadLetter(DeadLetter {
            delivery,
            reason: DeadReason::ScheduleExhausted,
            at: unix_ms(now),
        });
    }
    let due = resend_at
        .unwrap_or(now + schedule.slot_sequence().deadline)
        .min(end)
        .max(now);
    Step::StoreAgain {
        delivery: delivery.deferred(due),
        sent: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthRules;
    use crate::record::RecordRules;
    use bytes::Bytes;
    use std::time::Duration;

    fn delivery() -> Delivery {
        let request = http::Request::post("http://127.0.0.1:9/hook")
            .body(Bytes::new())
            .unwrap();
        RecordRules::new().record("msg_1", request).unwrap()
    }

    fn report(attempts: u32, stop: StopReason, resend_at: Option<SystemTime>) -> RetryReport {
        let mut report = RetryReport::default();
        report.attempts = attempts;
        report.stop = stop;
        report.resend_at = resend_at;
        report
    }

    fn run(
        delivery: Delivery,
        status: Option<u16>,
        report: RetryReport,
        health: &EndpointHealth,
        now: SystemTime,
    ) -> Step {
        let result = SlotResult {
            started: now,
            status,
            report,
        };
        decide(
            delivery,
            result,
            &Schedule::standard_webhooks(),
            health,
            now,
        )
    }

    #[test]
    fn a_failed_slot_is_stored_again_in_the_next_slot_never_before_the_resend_time() {
        let now = SystemTime::now();
        let health = EndpointHealth::default();
        let step = run(
            delivery(),
            Some(503),
            report(1, StopReason::AttemptsExhausted, None),
            &health,
            now,
        );
        let Step::StoreAgain {
            delivery: next,
            sent: true,
        } = step
        else {
            panic!("{step:?}")
        };
        assert_eq!((next.slot(), next.attempts()), (1, 1));
        let wait = next.due_at().duration_since(now).unwrap();
        assert!(
            Duration::from_secs(4) <= wait && wait <= Duration::from_secs(6),
            "{wait:?}"
        );
        assert_eq!(next.history()[0].status, Some(503));

        // A server's hint beyond the slot's time wins.
        let later = now + Duration::from_secs(60);
        let step = run(
            delivery(),
            Some(429),
            report(1, StopReason::AttemptsExhausted, Some(later)),
            &health,
            now,
        );
        let Step::StoreAgain { delivery: next, .. } = step else {
            panic!("{step:?}")
        };
        assert!(next.due_at() >= later - Duration::from_millis(1));
    }

    #[test]
    fn an_unsent_delivery_keeps_its_slot_and_waits_for_the_pacer() {
        let now = SystemTime::now();
        let release = now + Duration::from_secs(3);
        let step = run(
            delivery(),
            None,
            report(0, StopReason::Deferred, Some(release)),
            &EndpointHealth::default(),
            now,
        );
        let Step::StoreAgain {
            delivery: next,
            sent: false,
        } = step
        else {
            panic!("{step:?}")
        };
        assert_eq!((next.slot(), next.deferrals(), next.attempts()), (0, 1, 0));
        assert!(next.history().is_empty());
        assert!(next.due_at() >= release - Duration::from_millis(1));
        assert_ne!(
            next.step_key(),
            delivery().step_key(),
            "a new step, a new key"
        );

        // Held back past the schedule's span: dead-lettered, not deferred forever.
        let late = Schedule::standard_webhooks().end(delivery().enqueued_at());
        let step = run(
            delivery(),
            None,
            report(0, StopReason::Deferred, Some(late)),
            &EndpointHealth::default(),
            late,
        );
        assert!(
            matches!(
                step,
                Step::DeadLetter(DeadLetter {
                    reason: DeadReason::ScheduleExhausted,
                    ..
                })
            ),
            "{step:?}"
        );
    }

    #[test]
    fn success_gone_permanent_and_exhaustion() {
        let now = SystemTime::now();
        let health = EndpointHealth::default();
        assert_eq!(
            run(
                delivery(),
                Some(200),
                report(1, StopReason::Success, None),
                &health,
                now
            ),
            Step::Delivered
        );
        let dead = |step: Step| match step {
            Step::DeadLetter(letter) => letter.reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            dead(run(
                delivery(),
                Some(400),
                report(1, StopReason::Permanent, None),
                &health,
                now
            )),
            DeadReason::Permanent
        );
        assert_eq!(health.disabled("http://127.0.0.1:9"), None);
        assert_eq!(
            dead(run(
                delivery(),
                Some(410),
                report(1, StopReason::Permanent, None),
                &health,
                now
            )),
            DeadReason::Gone
        );
        assert_eq!(
            health.disabled("http://127.0.0.1:9"),
            Some(DisableReason::Gone)
        );
        assert!(matches!(
            before_sending(&delivery(), &health, now),
            Some(Step::DeadLetter(DeadLetter {
                reason: DeadReason::EndpointDisabled(DisableReason::Gone),
                ..
            }))
        ));

        // A POST the layer would not repeat is still redelivered: the id makes it safe.
        let fresh = EndpointHealth::default();
        let step = run(
            delivery(),
            Some(503),
            report(1, StopReason::NotIdempotent, None),
            &fresh,
            now,
        );
        assert!(matches!(step, Step::StoreAgain { sent: true, .. }));

        // Every slot failing: dead-lettered after the eighth, with eight entries of history.
        let mut record = delivery();
        let mut at = now;
        loop {
            match run(
                record.clone(),
                None,
                report(1, StopReason::AttemptsExhausted, None),
                &fresh,
                at,
            ) {
                Step::StoreAgain { delivery, .. } => {
                    at = delivery.due_at();
                    record = delivery;
                }
                Step::DeadLetter(letter) => {
                    assert_eq!(letter.reason, DeadReason::ScheduleExhausted);
                    assert_eq!(letter.delivery.history().len(), 8);
                    assert_eq!(letter.delivery.attempts(), 8);
                    break;
                }
                Step::Delivered => unreachable!(),
            }
        }
    }

    #[test]
    fn a_delivery_leaves_the_probe_when_it_is_not_due_by_then_or_dead_at_its_schedules_end() {
        let now = SystemTime::now();
        let probe = now + Duration::from_secs(2);
        let stored = |due: SystemTime, sent| Step::StoreAgain {
            delivery: delivery().deferred(due),
            sent,
        };
        let dead = |reason| {
            Step::DeadLetter(DeadLetter {
                delivery: delivery(),
                reason,
                at: unix_ms(now),
            })
        };
        let next_slot = now + Duration::from_secs(5);
        assert!(stored(next_slot, true).leaves_the_probe(probe));
        assert!(dead(DeadReason::ScheduleExhausted).leaves_the_probe(probe));
        // Due by the probe (the pacer's time was later than its next slot), handed back to the
        // probe's time, delivered, or ended by the receiver: nothing to make due.
        assert!(!stored(probe, true).leaves_the_probe(probe));
        assert!(!stored(probe, false).leaves_the_probe(probe));
        assert!(!Step::Delivered.leaves_the_probe(probe));
        assert!(!dead(DeadReason::Permanent).leaves_the_probe(probe));
    }

    #[test]
    fn the_receiver_aborts_a_delivery_or_disables_its_endpoint() {
        let now = SystemTime::now();
        let headers = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(ReceiverControl::HEADER, value.parse().unwrap());
            headers
        };
        assert_eq!(
            ReceiverControl::of(&headers(" Abort-Message ")),
            Some(ReceiverControl::AbortMessage)
        );
        assert_eq!(
            ReceiverControl::of(&headers("disable")),
            Some(ReceiverControl::Disable)
        );
        assert_eq!(ReceiverControl::of(&headers("later")), None);
        assert_eq!(ReceiverControl::of(&http::HeaderMap::new()), None);

        let health = EndpointHealth::default();
        let failed = |stop| SlotResult {
            started: now,
            status: Some(503),
            report: report(1, stop, None),
        };
        let step = on_receiver_control(
            delivery(),
            &failed(StopReason::AttemptsExhausted),
            ReceiverControl::AbortMessage,
            &health,
            now,
        );
        let Step::DeadLetter(letter) = step else {
            panic!("{step:?}")
        };
        assert_eq!(letter.reason, DeadReason::Aborted);
        assert_eq!(letter.delivery.history()[0].status, Some(503));
        assert_eq!(health.disabled("http://127.0.0.1:9"), None);
        // A 2xx that asks to abort was delivered all the same.
        let delivered = SlotResult {
            started: now,
            status: Some(200),
            report: report(1, StopReason::Success, None),
        };
        assert_eq!(
            on_receiver_control(
                delivery(),
                &delivered,
                ReceiverControl::AbortMessage,
                &health,
                now
            ),
            Step::Delivered
        );
        let step = on_receiver_control(
            delivery(),
            &failed(StopReason::Permanent),
            ReceiverControl::Disable,
            &health,
            now,
        );
        assert!(
            matches!(
                step,
                Step::DeadLetter(DeadLetter {
                    reason: DeadReason::EndpointDisabled(DisableReason::ReceiverAsked),
                    ..
                })
            ),
            "{step:?}"
        );
        assert_eq!(
            health.disabled("http://127.0.0.1:9"),
            Some(DisableReason::ReceiverAsked)
        );
        assert!(!HealthRules::new()
            .receiver_control(false)
            .honours_receiver_control());
        // A 2xx that asks to disable: delivered, and the endpoint disabled.
        let fresh = EndpointHealth::default();
        assert_eq!(
            on_receiver_control(
                delivery(),
                &delivered,
                ReceiverControl::Disable,
                &fresh,
                now
            ),
            Step::Delivered
        );
        assert_eq!(
            fresh.disabled("http://127.0.0.1:9"),
            Some(DisableReason::ReceiverAsked)
        );
    }

    #[test]
    fn continuous_failure_disables_the_endpoint() {
        let rules = HealthRules::new()
            .disable_after(Duration::from_secs(60))
            .unwrap();
        let health = EndpointHealth::new(rules);
        let now = SystemTime::now();
        let failed = report(1, StopReason::AttemptsExhausted, None);
        assert!(matches!(
            run(delivery(), Some(503), failed.clone(), &health, now),
            Step::StoreAgain { .. }
        ));
        let step = run(
            delivery(),
            Some(503),
            failed,
            &health,
            now + Duration::from_secs(60),
        );
        assert!(
            matches!(
                step,
                Step::DeadLetter(DeadLetter {
                    reason: DeadReason::EndpointDisabled(DisableReason::FailingFor(_)),
                    ..
                })
            ),
            "{step:?}"
        );
    }
}
