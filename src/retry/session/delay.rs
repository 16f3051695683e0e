//! How long to wait before the next attempt: the server's hint or the backoff policy's draw,
//! and the short pause before resending a request the server turned away unprocessed.

use super::{Next, Session};
use crate::abort::Listener;
use crate::hint::Resolved;
use crate::hint::ServerHint;
use crate::message::RetryRequest;
use crate::random::uniform;
use crate::report::{DelaySource, StopReason};
use crate::telemetry::decision;
use rand::rngs::SmallRng;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl<Req: RetryRequest, C> Session<Req, C> {
    /// The server turned the request away unprocessed (it rotates or drains the connection):
    /// it goes again after a short jittered pause, within the deadline, spending neither an
    /// attempt nor a budget token (the endpoint is up; an outage looks like `Unconnected`).
    pub(super) fn resend_refused(&mut self, listener: Option<Listener>, now: Instant) -> Next {
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
    ) -> Result<(Duration, DelaySource), StopReason> {
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
                    self.retry_in(hint);
                    Err(StopReason::RetryAfterTooLong)
                }
            };
        }
        Ok(self.backoff_delay())
    }

    /// The backoff policy's draw for the retry after the current attempt.
    pub(super) fn backoff_delay(&mut self) -> (Duration, DelaySource) {
        let config = Arc::clone(&self.config);
        let retry = self.counted().saturating_sub(1);
        let previous = self.previous_delay();
        let delay = config.settings.backoff.delay(retry, previous, self.rng());
        (delay, DelaySource::Backoff)
    }
}

/// The first rotation pause's upper bound, and the most any pause lasts.
const ROTATION_PAUSE: (Duration, Duration) = (Duration::from_millis(4), Duration::from_millis(50));

/// The pause before the `resend`-th (1-based) resend of a request turned away unprocessed:
/// `U(high/4, high)`, `high` doubling from 4 ms to 50 ms. Long enough for the client to see
/// the closing connection close (a resend at once lands on it again), short against a request's
/// time; jittered so that the streams one `GOAWAY` turned away do not arrive together.
pub(super) fn rotation_pause(resend: u32, rng: &mut SmallRng) -> Duration {
    let (first, cap) = ROTATION_PAUSE;
    let high = first
        .saturating_mul(1 << resend.clamp(1, 16).saturating_sub(1))
        .min(cap);
    uniform(high / 4, high, rng)
}
