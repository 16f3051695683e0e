//! What an outcome says besides its class ([`Signals`]), what the asker wants to know
//! ([`Ask`]), and the default reading ([`default_signals`]).

use super::Outcome;
use crate::hint::ServerHint;
use crate::message::RetryResponse;
use http::StatusCode;
use std::fmt;
use std::time::{Duration, SystemTime};

/// What an attempt's outcome says besides its class, as [`Classify::signals`] reads it: when to
/// come back, whether the endpoint is congested, a breaker's refusal, a rotation, an error no
/// rule knows. A new signal is a new field (the struct is `#[non_exhaustive]`), never a new
/// method of the trait.
///
/// [`Classify::signals`]: super::Classify::signals
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Signals {
    /// What the response says of retrying it (a failure's `Retry-After`, rate-limit reset,
    /// stand-down marker; for a success, asked with [`Ask::quota`], only a used-up quota's
    /// reset, which pauses a paced endpoint).
    pub hint: ServerHint,
    /// A transient response says the endpoint is overloaded or unreachable: what
    /// [pacing](crate::Pacing) counts towards an outage and against a ramp. Asked with
    /// [`Ask::congestion`]'s statuses; a transient error always is congestion, whatever this says.
    pub congestion: bool,
    /// A circuit breaker refused the attempt ([`CircuitOpen`](crate::circuit_breaker::CircuitOpen),
    /// permanent): how long until it lets a probe through. The retry layer stops the request
    /// with [`StopReason::CircuitOpen`](crate::StopReason::CircuitOpen), or with pacing pauses the
    /// endpoint until then and keeps the request waiting.
    pub refused_for: Option<Duration>,
    /// A transient error is the server rotating or draining its connection (a `GOAWAY`) without
    /// proof that this request was not processed: the endpoint is up; the retry layer sends the
    /// request again as rotation when it may be repeated and stops it otherwise, the breaker
    /// counts it neither way. See [`HttpClassifier`](super::HttpClassifier)'s table.
    pub rotation: bool,
    /// An error no rule recognised (its outcome is the fallback for unknown errors), named for
    /// people: counted ([`RetryStats::unknown_errors`](crate::retry::RetryStats::unknown_errors))
    /// and put in the report ([`RetryReport::unknown_error`](crate::RetryReport::unknown_error)),
    /// never classified.
    pub unknown_error: Option<String>,
}

/// What the asker of [`Classify::signals`](super::Classify::signals) wants to know of one
/// outcome, and what it knows already. Made with [`Ask::new`]; grows by a field.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct Ask<'a> {
    /// The outcome's class, as the classifier gave it.
    pub outcome: Outcome,
    /// The local wall clock, read only for an answer that needs it (an absolute reset time).
    pub now: &'a dyn Fn() -> SystemTime,
    /// The statuses [pacing](crate::Pacing) calls congestion
    /// ([`PacingBuilder::congestion`](crate::pacing::PacingBuilder::congestion)); empty when
    /// nobody asks whether the outcome is congestion.
    pub congestion: &'a [StatusCode],
    /// Whether a success's used-up quota matters (pacing is on and hints are honoured).
    pub quota: bool,
}

impl<'a> Ask<'a> {
    /// Asks of an outcome classified as `outcome`, with the wall clock `now`: its hint (for a
    /// failure), a refusal, a rotation, an unknown error; neither congestion nor a success's
    /// quota.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tower_http_retry::classify::{Ask, Classify};
    /// use tower_http_retry::{HttpClassifier, Outcome};
    ///
    /// let limited = http::Response::builder().status(429).header("retry-after", "30").body(()).unwrap();
    /// let result: Result<_, std::io::Error> = Ok(limited);
    /// let signals = HttpClassifier::new().signals(&result, &Ask::new(Outcome::Transient, &SystemTime::now));
    /// assert_eq!(signals.hint.retry_after(), Some(std::time::Duration::from_secs(30)));
    /// ```
    pub fn new(outcome: Outcome, now: &'a dyn Fn() -> SystemTime) -> Self {
        Self {
            outcome,
            now,
            congestion: &[],
            quota: false,
        }
    }

    /// Asks whether a transient response is congestion: its status is one of `statuses`.
    pub fn congestion(mut self, statuses: &'a [StatusCode]) -> Self {
        self.congestion = statuses;
        self
    }

    /// Asks when a success's used-up quota resets.
    pub fn quota(mut self, quota: bool) -> Self {
        self.quota = quota;
        self
    }
}

impl fmt::Debug for Ask<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ask")
            .field("outcome", &self.outcome)
            .field("congestion", &self.congestion)
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

/// What [`Classify::signals`](super::Classify::signals) reads by default, for any response and
/// error type: `Retry-After` on a 4xx or 5xx response (for a success asked with
/// [`Ask::quota`], only on a 4xx or 5xx the success table holds: a 202's or a 303's
/// `Retry-After` asks a client to poll or follow later, not to wait), congestion by the asked
/// statuses, and nothing of an error. A classifier that overrides `signals` to change one
/// signal starts from this (or from its inner classifier's).
pub fn default_signals<Res: RetryResponse, E>(result: &Result<Res, E>, ask: &Ask<'_>) -> Signals {
    let Ok(response) = result else {
        return Signals::default();
    };
    let status = response.status();
    let failed = status.is_client_error() || status.is_server_error();
    let wanted = ask.outcome != Outcome::Success || ask.quota;
    Signals {
        hint: if failed && wanted {
            ServerHint::of_retry_after(response.headers(), (ask.now)())
        } else {
            ServerHint::NONE
        },
        congestion: ask.outcome == Outcome::Transient && ask.congestion.contains(&status),
        ..Signals::default()
    }
}
