//! How long to wait before the next attempt: the server's hint or the backoff policy's draw.

use super::verdict::Stop;
use super::Session;
use crate::hint::Resolved;
use crate::hint::ServerHint;
use crate::message::RetryRequest;
use crate::report::{DelaySource, StopReason};
use crate::telemetry::decision;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl<Req: RetryRequest, C> Session<Req, C> {
    /// The server's "come back in", unless hints are turned off
    /// ([`without_hint_delays`](crate::retry::RetryLayerBuilder::without_hint_delays)).
    pub(super) fn hint_delay(&self, hint: &ServerHint) -> Option<Duration> {
        self.config.settings.hint_policy.and(hint.retry_after())
    }

    /// The delay before the next attempt: the server's hint when it gave a valid one, else the
    /// backoff policy's draw.
    pub(super) fn delay_for(
        &mut self,
        hint: &ServerHint,
        now: Instant,
    ) -> Result<(Duration, DelaySource), Stop> {
        let config = Arc::clone(&self.config);
        let counters = &config.counters;
        let Some(policy) = &config.settings.hint_policy else {
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
            return match policy.resolve(hint, clamp, room, self.rng()) {
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
                    Err(Stop::resend(StopReason::RetryAfterTooLong, hint))
                }
            };
        }
        Ok(self.backoff_delay())
    }

    /// The backoff policy's draw for the retry after the current attempt.
    pub(super) fn backoff_delay(&mut self) -> (Duration, DelaySource) {
        let config = Arc::clone(&self.config);
        let retry = self.tries.counted().saturating_sub(1);
        let previous = self.previous_delay();
        let delay = config.settings.backoff.delay(retry, previous, self.rng());
        (delay, DelaySource::Backoff)
    }
}
