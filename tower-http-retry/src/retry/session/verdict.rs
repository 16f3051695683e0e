//! What the decision ladder reads of an outcome ([`Facts`]) and what it answers ([`Verdict`]):
//! plain values, which the ladder (`ladder.rs`) gives and the pacing step (`pacing.rs`)
//! rewrites.

use crate::abort::Listener;
use crate::classify::{NotSent, Outcome};
use crate::hint::ServerHint;
use crate::report::{DelaySource, StopReason};
use std::time::Duration;
use tokio::time::Instant;

/// What the ladder reads of one outcome.
#[derive(Debug)]
pub(crate) struct Facts {
    /// The classifier's word.
    pub(crate) classified: Outcome,
    /// The outcome the ladder goes by: the classifier's, unless the server said a permanent
    /// response is worth another attempt (`x-should-retry: true`), or a rotation without proof
    /// concerns a request that may be repeated (then refused, not sent).
    pub(crate) outcome: Outcome,
    /// The classifier said the transient error is the server rotating its connection, without
    /// proof that the request was not processed ([`Signals::rotation`]): the endpoint is up.
    ///
    /// [`Signals::rotation`]: crate::classify::Signals::rotation
    pub(crate) rotation: bool,
    /// What the response says about retrying it.
    pub(crate) hint: ServerHint,
    /// A circuit breaker refused the attempt, for this long (zero: its half-open probe is in
    /// flight).
    pub(crate) refused_for: Option<Duration>,
    /// A transient response the classifier calls congestion (asked with pacing only).
    pub(crate) congestion: bool,
}

impl Facts {
    /// The request provably was not sent (or was turned away by a rotation and may be
    /// repeated), so its method does not matter.
    pub(super) fn not_sent(&self) -> Option<NotSent> {
        match self.outcome {
            Outcome::NotSent(kind) => Some(kind),
            _ => None,
        }
    }
}

/// The ladder's answer.
#[derive(Debug)]
pub(crate) enum Verdict {
    Stop(Stop),
    Retry(Retry),
}

/// Stop, with the reason the report gives.
#[derive(Debug)]
pub(crate) struct Stop {
    pub(crate) reason: StopReason,
    /// When sending again makes sense, from now, as the stop itself knows it (the report then
    /// takes the latest of this and what is known of the endpoint).
    pub(crate) resend: Option<Duration>,
    /// What a rung knew that a step above the ladder may lift the stop with.
    pub(crate) lift: Option<Lift>,
}

/// The stops a step above the ladder may turn into a wait, and what it needs to.
#[derive(Debug)]
pub(crate) enum Lift {
    /// Rung 1: a circuit breaker refused the attempt for `wait`.
    Refused { wait: Duration },
    /// Rung 5: a circuit breaker holds the endpoint until `until`; a wait would be ended by
    /// `listener` (boxed: a stop is small, and this one is rare).
    Held {
        until: Instant,
        listener: Box<Listener>,
    },
    /// Rung 9: the budget has no token; a wait would be ended by `listener`.
    BudgetEmpty { listener: Option<Box<Listener>> },
}

impl Stop {
    pub(super) fn now(reason: StopReason) -> Self {
        Self {
            reason,
            resend: None,
            lift: None,
        }
    }

    pub(super) fn resend(reason: StopReason, after: Duration) -> Self {
        Self {
            reason,
            resend: Some(after),
            lift: None,
        }
    }
}

/// Retry after `delay`, from `source`, once [`commit`](super::Session::commit) finds it fits the
/// deadline and the budget has a token.
#[derive(Debug)]
pub(crate) struct Retry {
    pub(crate) delay: Duration,
    pub(crate) source: DelaySource,
    /// What ends the wait early (the abort signal), if there is one.
    pub(crate) listener: Option<Listener>,
}
