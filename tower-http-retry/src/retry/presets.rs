//! The presets: [`RetryLayer::interactive`] and [`RetryLayer::bulk`], and the builders that
//! start from them.

use super::backoff::Backoff;
use super::layer::{RetryLayer, RetryLayerBuilder};
use crate::hint::{HintPolicy, WhenLonger};
use crate::pacing::Pacing;
use std::time::Duration;

impl RetryLayer {
    /// The preset for a caller that waits for the answer (an API call behind a user's click, an
    /// RPC): few attempts, short waits, a deadline, fail fast.
    /// [`RetryLayerBuilder::interactive`] starts a builder from it, to change a setting.
    ///
    /// 3 attempts, full jitter from 50 ms capped at 1 s, the default budget, a 5 s deadline.
    /// A server's hint (`Retry-After`, a rate-limit reset) is **waited for when it fits the
    /// deadline** (it is clamped to the deadline, not to the backoff cap: a 2 s reset is waited
    /// 2 s, once, rather than retried into twice); one that does not fit, the request gives up
    /// on at once, returning the server's answer with
    /// [`StopReason::Deadline`](crate::StopReason::Deadline) when the hint fits the deadline but
    /// not the time left, [`StopReason::RetryAfterTooLong`](crate::StopReason::RetryAfterTooLong)
    /// when it is longer than the deadline itself; either way
    /// [`RetryReport::resend_after`](crate::RetryReport::resend_after) is the server's hint, to the
    /// millisecond it gave it. In an outage of a few seconds, each request tries 3 times within
    /// about a second and then returns the endpoint's last answer; once the budget is spent,
    /// failures return at once ([`StopReason::BudgetEmpty`](crate::StopReason::BudgetEmpty)).
    /// Add [`CircuitBreakerLayer::interactive`](crate::CircuitBreakerLayer::interactive) to fail
    /// fast for the rest of a longer outage.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let retry = tower_http_retry::RetryLayer::interactive();
    /// assert_eq!(retry.max_attempts(), 3);
    /// assert_eq!(retry.deadline(), Some(Duration::from_secs(5)));
    /// ```
    pub fn interactive() -> Self {
        RetryLayerBuilder::interactive()
            .build()
            .expect("the interactive preset is valid")
    }

    /// The preset for a sender that would rather wait than fail (webhooks, fan-out, batch jobs,
    /// queue consumers): waits that span a short outage, and [pacing](Pacing) instead of a
    /// budget that refuses. [`RetryLayerBuilder::bulk`] starts a builder from it, to change a
    /// setting.
    ///
    /// 10 attempts, full jitter from 1 s capped at 30 s, [`Pacing::new`] (requests to an
    /// endpoint that is down wait in its queue and are let through by probes, about 2 per
    /// second, then by a rate that ramps up), no deadline. In an outage of a few seconds, a
    /// burst to the endpoint sends its first attempts, then waits: the endpoint sees about two
    /// requests per second while it is down, and the burst is delivered within a few seconds of
    /// its return. A request the layer still gives up on returns its last answer with a
    /// [`RetryReport`](crate::RetryReport) that says why and, where it knows,
    /// [when](crate::RetryReport::resend_after) to send it again.
    ///
    /// ```
    /// let retry = tower_http_retry::RetryLayer::bulk();
    /// assert_eq!(retry.max_attempts(), 10);
    /// ```
    pub fn bulk() -> Self {
        RetryLayerBuilder::bulk()
            .build()
            .expect("the bulk preset is valid")
    }
}

impl RetryLayerBuilder {
    /// A builder starting from the preset [`RetryLayer::interactive`] (3 attempts, 50 ms to
    /// 1 s, a 5 s deadline, hints that do not fit it given up on at once), to change a setting.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_http_retry::retry::RetryLayerBuilder;
    ///
    /// let retry = RetryLayerBuilder::interactive().deadline(Duration::from_secs(2)).build().unwrap();
    /// assert_eq!(retry.max_attempts(), 3);
    /// assert_eq!(retry.deadline(), Some(Duration::from_secs(2)));
    /// ```
    pub fn interactive() -> Self {
        const DEADLINE: Duration = Duration::from_secs(5);
        RetryLayerBuilder::default()
            .max_attempts(3)
            .backoff(Backoff::new(
                crate::Jitter::Full,
                Duration::from_millis(50),
                Duration::from_secs(1),
            ))
            .deadline(DEADLINE)
            // A hint that fits the deadline is worth one wait; a longer one is given up on at
            // once, never retried early into a certain refusal.
            .hint_policy(
                HintPolicy::honored()
                    .max_delay(DEADLINE)
                    .when_longer(WhenLonger::GiveUp),
            )
    }

    /// A builder starting from the preset [`RetryLayer::bulk`] (10 attempts, 1 s to 30 s,
    /// pacing), to change a setting.
    ///
    /// ```
    /// use tower_http_retry::retry::RetryLayerBuilder;
    ///
    /// let retry = RetryLayerBuilder::bulk().max_attempts(5).build().unwrap();
    /// assert_eq!(retry.max_attempts(), 5);
    /// ```
    pub fn bulk() -> Self {
        RetryLayerBuilder::default()
            .max_attempts(10)
            .backoff(Backoff::new(
                crate::Jitter::Full,
                Duration::from_secs(1),
                Duration::from_secs(30),
            ))
            .pacing(Pacing::new())
    }
}
