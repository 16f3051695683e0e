//! The default HTTP classification table, [`HttpClassifier`], and how it classifies responses
//! and errors (the error walk itself is in `error_chain.rs`).

use super::classifier::Classify;
use super::error_chain::{goaway_unproven, known_error, AsStdError};
#[cfg(doc)]
use super::marker::{SerialDispatch, Unretryable};
use super::outcome::{NotSent, Outcome};
use super::signals::{Ask, Signals};
use crate::error::CircuitOpen;
use crate::hint::{ServerHint, ServerHints};
use crate::message::RetryResponse;
use http::StatusCode;
use std::error::Error;
use std::fmt;
use std::sync::Arc;

const REFUSED: Outcome = Outcome::NotSent(NotSent::Refused);

/// The default HTTP classification table, adjustable per status.
///
/// Only transient outcomes are retried. The default table, [`HttpClassifier`]:
///
/// | outcome | classified as |
/// |---|---|
/// | 1xx, 2xx, 3xx | success |
/// | 408, 429, 500, 502, 503, 504 | transient |
/// | 425 Too Early (RFC 8470: the server did not process a request sent in TLS early data) | [not sent](Outcome::NotSent), [too early](NotSent::TooEarly): resent once, for any method |
/// | 403 whose rate-limit headers say the quota is used up (`x-ratelimit-remaining: 0`, an IETF `RateLimit` policy with `r=0`; see [`ServerHints`]) | transient |
/// | every other 4xx and 5xx (400, 404, 501, 505, ...) | permanent |
/// | HTTP/2 stream reset by the server with `REFUSED_STREAM`; a stream above the last stream id of the server's `GOAWAY` (`h2::Error`, also for a request sent on the connection after it) as h2 reports it, or as hyper does on a connection marked [`SerialDispatch`] (the rotation-safe client of `tower-http-retry-hyper`) | [not sent](Outcome::NotSent), [refused](NotSent::Refused): rotation, resent for any method |
/// | the server's `GOAWAY` delivered through hyper's HTTP/2 client on any other connection (hyper can hand the connection's `GOAWAY` to a request whose stream the server processed) | transient, a [rotation](super::Signals::rotation): resent as rotation when the request may be repeated ([`Idempotency`](crate::retry::Idempotency)), not resent otherwise |
/// | hyper: a user error on the client's side (`hyper::Error::is_user`): `User(DispatchGone)`, the connection's dispatch task ended without answering (with HTTP/2 when a `GOAWAY` ends a connection on which the request waited for a stream slot, whether or not it was then written; never behind the `StreamSlotsLayer` of `tower-http-retry-hyper`), or the request body failed mid-write | transient: ambiguous |
/// | connection refused (`std::io::Error`); hyper: canceled (handed back unsent: hyper-util resends these itself on a reused connection, so those it returns met a fresh one); hyper-util or reqwest: connect error (refused, DNS, connect timeout) | [not sent](Outcome::NotSent), [unconnected](NotSent::Unconnected) |
/// | any other HTTP/2 error (`h2::Error`: a reset with another reason, a protocol error) | transient |
/// | hyper-util or reqwest: connect error with an `std::io::Error` of kind `InvalidData` in its chain (how rustls reports a bad certificate) | permanent |
/// | timeout (`tower::timeout::error::Elapsed`, `hyper::Error::is_timeout`) | transient |
/// | connection reset, aborted, broken pipe, unexpected EOF (`std::io::Error`) | transient |
/// | hyper: incomplete message, channel closed | transient |
/// | reqwest (feature `reqwest`): `is_timeout` | transient |
/// | [`CircuitOpen`] (a breaker refused the call); an error whose chain holds [`Unretryable`] (a client says no attempt can help) | permanent, whatever `unknown_errors` says |
/// | any other error (a kind no row names: a new hyper or hyper-util error, an error of another stack) | transient (configurable with [`unknown_errors`](Self::unknown_errors)), counted and named ([`Signals::unknown_error`](super::Signals::unknown_error)) |
///
/// Besides the status, the classifier reads what the response says about retrying
/// ([`hints`](Self::hints), [`ServerHints`]): when to come back (`Retry-After`, `retry-after-ms`,
/// `RateLimit`, `x-ratelimit-reset`, and after them a body's `google.rpc.RetryInfo` that a
/// body reader put in the extensions, [`RetryInfo`](crate::hint::RetryInfo)), and whether to
/// retry at all (`x-should-retry: false` and `x-envoy-overloaded` stop retrying;
/// `x-should-retry: true` retries even a 400 or a POST).
///
/// Errors are recognised by walking [`Error::source`] and downcasting each link, never by
/// matching message text. Proof that a request was not sent counts wherever it is in the chain
/// (a reqwest error wraps hyper-util's, which wraps hyper's, which wraps h2's); otherwise the
/// first link of a known transient kind decides. The HTTP/2 and hyper rows need the `hyper`
/// feature. A certificate error of a TLS stack that does not report it as `InvalidData`
/// (native-tls) is taken for a connect failure.
///
/// **Unknown errors are transient by default**: retried for an idempotent request (a few attempts,
/// a budget token each, the backoff), never resent for a POST without a key, since nothing says it
/// was not processed. An error no rule recognises is as likely a new transport failure as a bug of
/// the request, and a permanent default turned the first kind into silent failures; the attempts
/// and the budget bound what the second kind costs. Each one is counted
/// ([`RetryStats::unknown_errors`](crate::retry::RetryStats::unknown_errors)) and named in the
/// report ([`RetryReport::unknown_error`](crate::RetryReport::unknown_error)).
///
/// ```
/// use http::StatusCode;
/// use tower_http_retry::{HttpClassifier, Outcome};
///
/// let classifier = HttpClassifier::new()
///     .status(StatusCode::CONFLICT, Outcome::Transient)
///     .status(StatusCode::TOO_MANY_REQUESTS, Outcome::Permanent)
///     .unknown_errors(Outcome::Transient);
/// assert_eq!(classifier.classify_status(StatusCode::CONFLICT), Outcome::Transient);
/// assert_eq!(classifier.classify_status(StatusCode::TOO_MANY_REQUESTS), Outcome::Permanent);
/// assert_eq!(classifier.classify_status(StatusCode::NOT_IMPLEMENTED), Outcome::Permanent);
/// ```
#[derive(Clone, PartialEq, Eq)]
#[must_use]
pub struct HttpClassifier {
    /// One bit per status code 0..1024: set when transient.
    transient: [u64; 16],
    /// One bit per status code 0..1024: set when success.
    success: [u64; 16],
    /// One bit per status code 0..1024: set when not sent, refused (e.g. 421, if so configured).
    refused: [u64; 16],
    /// Set when not sent, too early (425).
    too_early: [u64; 16],
    /// One bit per status code 0..1024: set when not sent, unconnected.
    unconnected: [u64; 16],
    unknown_errors: Outcome,
    /// Shared: the classifier is cloned into every breaker and layer.
    hints: Arc<ServerHints>,
}

impl HttpClassifier {
    /// The default table.
    pub fn new() -> Self {
        let mut classifier = Self {
            transient: [0; 16],
            success: [0; 16],
            refused: [0; 16],
            too_early: [0; 16],
            unconnected: [0; 16],
            unknown_errors: Outcome::Transient,
            hints: Arc::new(ServerHints::new()),
        };
        for code in 100..400 {
            classifier.set(code, Outcome::Success);
        }
        for code in [408, 429, 500, 502, 503, 504] {
            classifier.set(code, Outcome::Transient);
        }
        classifier.set(425, Outcome::NotSent(NotSent::TooEarly));
        classifier
    }

    /// Classifies `status` as `outcome` from now on.
    pub fn status(mut self, status: StatusCode, outcome: Outcome) -> Self {
        self.set(status.as_u16(), outcome);
        self
    }

    /// How errors that no rule recognises are classified (default: [`Outcome::Transient`], see
    /// the table).
    pub fn unknown_errors(mut self, outcome: Outcome) -> Self {
        self.unknown_errors = outcome;
        self
    }

    /// Reads these headers for when and whether to retry (default [`ServerHints::new`]):
    /// rate-limit resets, `x-should-retry`, `x-envoy-overloaded`.
    pub fn hints(mut self, hints: ServerHints) -> Self {
        self.hints = Arc::new(hints);
        self
    }

    /// The outcome of a response with this status.
    pub fn classify_status(&self, status: StatusCode) -> Outcome {
        let code = usize::from(status.as_u16());
        let bit = |set: &[u64; 16]| set[code / 64] & (1 << (code % 64)) != 0;
        if bit(&self.success) {
            Outcome::Success
        } else if bit(&self.transient) {
            Outcome::Transient
        } else if bit(&self.refused) {
            Outcome::NotSent(NotSent::Refused)
        } else if bit(&self.unconnected) {
            Outcome::NotSent(NotSent::Unconnected)
        } else if bit(&self.too_early) {
            Outcome::NotSent(NotSent::TooEarly)
        } else {
            Outcome::Permanent
        }
    }

    /// The outcome of an error: [not sent](Outcome::NotSent) if any link of its `source()`
    /// chain proves it, else from the first link that is a known transient kind, else the
    /// configured outcome for unknown errors. A `GOAWAY` hyper delivered without proof (see the
    /// table) is transient here; [`Classify::signals`] says it is a rotation ([`Signals::rotation`](super::Signals::rotation)).
    pub fn classify_error_chain(&self, error: &(dyn Error + 'static)) -> Outcome {
        match known_error(error) {
            Some(REFUSED) if goaway_unproven(error) => Outcome::Transient,
            outcome => outcome.unwrap_or(self.unknown_errors),
        }
    }

    /// Whether `error` is a rotation without proof: a `GOAWAY` hyper delivered on a connection
    /// that is not serially dispatched (see [`Signals::rotation`](super::Signals::rotation)).
    pub(crate) fn is_rotation_chain(&self, error: &(dyn Error + 'static)) -> bool {
        goaway_unproven(error) && known_error(error) == Some(REFUSED)
    }

    /// A name for `error` if no rule recognises it: the `Display` of each link of its chain.
    pub(crate) fn name_unknown_error(&self, error: &(dyn Error + 'static)) -> Option<String> {
        if known_error(error).is_some() {
            return None;
        }
        let mut name = error.to_string();
        let mut link = error.source();
        while let Some(error) = link {
            name.push_str(": ");
            name.push_str(&error.to_string());
            link = error.source();
        }
        Some(name)
    }

    fn set(&mut self, code: u16, outcome: Outcome) {
        let code = usize::from(code);
        let (word, bit) = (code / 64, 1u64 << (code % 64));
        self.success[word] &= !bit;
        self.transient[word] &= !bit;
        self.refused[word] &= !bit;
        self.unconnected[word] &= !bit;
        self.too_early[word] &= !bit;
        match outcome {
            Outcome::Success => self.success[word] |= bit,
            Outcome::Transient => self.transient[word] |= bit,
            Outcome::NotSent(NotSent::Refused) => self.refused[word] |= bit,
            Outcome::NotSent(NotSent::Unconnected) => self.unconnected[word] |= bit,
            Outcome::NotSent(NotSent::TooEarly) => self.too_early[word] |= bit,
            Outcome::Permanent => {}
        }
    }
}

impl Default for HttpClassifier {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for HttpClassifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let transient: Vec<u16> = (0..1000u16)
            .filter(|&c| {
                StatusCode::from_u16(c).is_ok_and(|s| self.classify_status(s) == Outcome::Transient)
            })
            .collect();
        f.debug_struct("HttpClassifier")
            .field("transient_statuses", &transient)
            .field("unknown_errors", &self.unknown_errors)
            .field("hints", &self.hints)
            .finish_non_exhaustive()
    }
}

impl<Res, E> Classify<Res, E> for HttpClassifier
where
    Res: RetryResponse,
    E: AsStdError,
{
    fn classify_response(&self, response: &Res) -> Outcome {
        let status = response.status();
        match self.classify_status(status) {
            // GitHub answers a used-up quota with 403: the quota headers say it is not a refusal.
            Outcome::Permanent
                if status == StatusCode::FORBIDDEN
                    && self.hints.quota_exhausted(response.headers()) =>
            {
                Outcome::Transient
            }
            outcome => outcome,
        }
    }

    fn classify_error(&self, error: &E) -> Outcome {
        match error.as_std_error() {
            Some(error) => self.classify_error_chain(error),
            None => self.unknown_errors,
        }
    }

    #[inline]
    fn signals(&self, result: &Result<Res, E>, ask: &Ask<'_>) -> Signals {
        match result {
            // The path of every success with pacing: kept small enough to be inlined, so that
            // what the caller does not read is never made.
            Ok(response) if ask.outcome == Outcome::Success => Signals {
                hint: match ask.quota {
                    true => ServerHint::NONE.with_retry_after(self.quota_reset(response, ask.now)),
                    false => ServerHint::NONE,
                },
                ..Signals::default()
            },
            _ => self.failure_signals(result, ask),
        }
    }
}

impl HttpClassifier {
    /// [`Classify::signals`] of an outcome that is not a success.
    #[inline(never)]
    fn failure_signals<Res: RetryResponse, E: AsStdError>(
        &self,
        result: &Result<Res, E>,
        ask: &Ask<'_>,
    ) -> Signals {
        let mut signals = Signals::default();
        match result {
            Ok(response) => {
                signals.hint = self.hint(response, (ask.now)());
                signals.congestion = ask.outcome == Outcome::Transient
                    && ask.congestion.contains(&response.status());
            }
            Err(error) => match error.as_std_error() {
                Some(error) => {
                    signals.rotation =
                        ask.outcome == Outcome::Transient && self.is_rotation_chain(error);
                    if ask.outcome == Outcome::Permanent {
                        signals.refused_for = refused_for(error);
                    }
                    signals.unknown_error = self.name_unknown_error(error);
                }
                None => {
                    signals.unknown_error =
                        Some("an error with no `std::error::Error` to inspect".to_owned());
                }
            },
        }
        signals
    }
}

impl HttpClassifier {
    /// What `response` says of retrying it: the headers its [`ServerHints`] name, then a body's
    /// [`RetryInfo`](crate::hint::RetryInfo) in its extensions (what
    /// [`signals`](Classify::signals) gives as a failure's hint).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tower_http_retry::HttpClassifier;
    ///
    /// let limited = http::Response::builder().status(429).header("retry-after", "30").body(()).unwrap();
    /// let hint = HttpClassifier::new().hint(&limited, SystemTime::now());
    /// assert_eq!(hint.retry_after(), Some(Duration::from_secs(30)));
    /// ```
    pub fn hint<Res: RetryResponse>(
        &self,
        response: &Res,
        now: std::time::SystemTime,
    ) -> ServerHint {
        let (status, headers) = (response.status(), response.headers());
        self.hints
            .read_answer(status, headers, response.extensions(), now)
    }

    /// A success's used-up quota's reset: its reset headers for a status below 400 (the clock
    /// read only for a reset value to measure: the success path of a paced endpoint reads no
    /// clock), its whole hint for a 4xx or 5xx in the success table.
    fn quota_reset<Res: RetryResponse>(
        &self,
        response: &Res,
        now: &dyn Fn() -> std::time::SystemTime,
    ) -> Option<std::time::Duration> {
        let status = response.status();
        if status.as_u16() >= 400 {
            return self.hint(response, now()).retry_after();
        }
        self.hints.success_reset(status, response.headers(), now)
    }
}

/// A circuit breaker's refusal along `error`'s chain: how long until it lets a probe through.
fn refused_for(error: &(dyn Error + 'static)) -> Option<std::time::Duration> {
    let mut link = Some(error);
    while let Some(error) = link {
        if let Some(open) = error.downcast_ref::<CircuitOpen>() {
            return Some(open.retry_after());
        }
        link = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Outcome {
        HttpClassifier::new().classify_status(StatusCode::from_u16(code).unwrap())
    }
    #[test]
    fn default_status_table() {
        for code in [200, 201, 204, 301, 304] {
            assert_eq!(status(code), Outcome::Success, "{code}");
        }
        for code in [408, 429, 500, 502, 503, 504] {
            assert_eq!(status(code), Outcome::Transient, "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422, 501, 505, 599] {
            assert_eq!(status(code), Outcome::Permanent, "{code}");
        }
    }

    #[test]
    fn overriding_a_status_replaces_its_class() {
        let c = HttpClassifier::new().status(StatusCode::OK, Outcome::Transient);
        assert_eq!(c.classify_status(StatusCode::OK), Outcome::Transient);
        let c = c.status(StatusCode::OK, Outcome::Success);
        assert_eq!(c.classify_status(StatusCode::OK), Outcome::Success);
    }

    #[test]
    fn a_status_can_be_classified_as_not_sent() {
        let refused = Outcome::NotSent(NotSent::Refused);
        let c = HttpClassifier::new().status(StatusCode::MISDIRECTED_REQUEST, refused);
        assert_eq!(c.classify_status(StatusCode::MISDIRECTED_REQUEST), refused);
        let c = c.status(StatusCode::MISDIRECTED_REQUEST, Outcome::Permanent);
        assert_eq!(
            c.classify_status(StatusCode::MISDIRECTED_REQUEST),
            Outcome::Permanent
        );
    }
}
