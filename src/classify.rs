//! Sorting outcomes into success, transient and permanent.
//!
//! The table of [`HttpClassifier`] is written on it, where rustdoc shows it.

use crate::error::CircuitOpen;
use crate::hint::{ServerHint, ServerHints};
use crate::message::RetryResponse;
use http::{Method, StatusCode};
use std::error::Error;
use std::fmt;
use std::io;
use std::sync::Arc;

/// How an outcome is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Done: return it (and deposit in the retry budget).
    Success,
    /// Worth another attempt: the endpoint may answer differently soon.
    Transient,
    /// Not worth another attempt: return it at once.
    Permanent,
    /// The request provably never reached the application, so sending it again is safe whatever
    /// its method, a POST without an `Idempotency-Key` included. See [`NotSent`] for what each
    /// kind costs.
    NotSent(NotSent),
}

/// How a request that never reached the application failed, which decides what resending it
/// costs.
///
/// An ambiguous failure (a connection that ended after the request was written, a stream reset
/// with another reason, a read timeout) is not one of these: the server may have processed the
/// request, and such an outcome is [`Outcome::Transient`], retried only when idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotSent {
    /// The server turned the request away before processing it, as it does when it rotates or
    /// drains a connection (RFC 9113, section 8.7): an HTTP/2 `REFUSED_STREAM` reset, or a
    /// `GOAWAY` whose last stream id is below the request's stream (a request sent on the
    /// connection after it included). The endpoint is up; this is rotation, not
    /// failure. The request is sent again
    /// after a short jittered pause (so that it lands on the next connection, not on the one
    /// closing), bounded by the deadline and by
    /// [`max_refused_retries`](crate::RetryLayerBuilder::max_refused_retries), without spending
    /// an attempt or a budget token; the circuit breaker counts it neither as a success nor as a
    /// failure, and pacing not as congestion.
    Refused,
    /// No connection carried the request: the connection was refused, the name did not resolve,
    /// the connect timed out, or the connection closed before the request was written (hyper
    /// hands such a request back, "canceled"). This is what an outage looks like, so it counts
    /// as an attempt, takes the backoff delay and a budget token, and is a failure for the
    /// circuit breaker, like a transient outcome.
    Unconnected,
}

/// Decides the [`Outcome`] of a response or an error.
///
/// The retry layer and the circuit breaker take the same classifier, so that a failure that is
/// retried is also a failure that trips the breaker. Closures work through [`classify_fn`].
///
/// Both middlewares call [`classify`](Self::classify), which sees the request's method as well.
/// Override it where the method matters:
///
/// ```
/// use http::{Method, StatusCode};
/// use tower_http_retry::{Classify, HttpClassifier, Outcome};
///
/// /// The default table, and a 409 is worth another attempt for a PUT (and only for a PUT).
/// #[derive(Clone, Debug)]
/// struct PutConflicts(HttpClassifier);
///
/// impl<B> Classify<http::Response<B>, std::io::Error> for PutConflicts {
///     fn classify_response(&self, response: &http::Response<B>) -> Outcome {
///         self.0.classify_status(response.status())
///     }
///     fn classify_error(&self, error: &std::io::Error) -> Outcome {
///         self.0.classify_error_chain(error)
///     }
///     fn classify(&self, method: &Method, result: &Result<http::Response<B>, std::io::Error>) -> Outcome {
///         match result {
///             Ok(response) if method == Method::PUT && response.status() == StatusCode::CONFLICT => {
///                 Outcome::Transient
///             }
///             Ok(response) => self.classify_response(response),
///             Err(error) => self.0.classify_error_chain(error),
///         }
///     }
/// }
///
/// let classifier = PutConflicts(HttpClassifier::new());
/// let conflict: Result<_, std::io::Error> = Ok(http::Response::builder().status(409).body(()).unwrap());
/// assert_eq!(classifier.classify(&Method::PUT, &conflict), Outcome::Transient);
/// assert_eq!(classifier.classify(&Method::POST, &conflict), Outcome::Permanent);
/// ```
pub trait Classify<Res, E> {
    /// Classifies a response.
    fn classify_response(&self, response: &Res) -> Outcome;

    /// Classifies an error of the inner service.
    fn classify_error(&self, error: &E) -> Outcome;

    /// When `error` is a circuit breaker's refusal ([`CircuitOpen`]), how long until the breaker
    /// lets a probe through. The retry layer stops such a request with
    /// [`StopReason::CircuitOpen`](crate::StopReason::CircuitOpen) (or, with
    /// [pacing](crate::Pacing), pauses the endpoint until then and keeps the request waiting).
    /// The default finds none; [`HttpClassifier`] looks along the error's `source()` chain.
    fn refused_for(&self, error: &E) -> Option<std::time::Duration> {
        let _ = error;
        None
    }

    /// When no rule of the classifier recognised `error` (its outcome is the fallback for
    /// unknown errors), a name for it, for people: the retry layer counts such errors
    /// ([`RetryStats::unknown_errors`](crate::RetryStats::unknown_errors)) and puts the name in
    /// the request's report ([`RetryReport::unknown_error`](crate::RetryReport::unknown_error)),
    /// so that a new error kind gets a rule instead of going unnoticed. The name is never
    /// classified. The default recognises every error; [`HttpClassifier`] names an unknown one
    /// by the `Display` of each link of its `source()` chain.
    fn unknown_error(&self, error: &E) -> Option<String> {
        let _ = error;
        None
    }

    /// What `response` says about retrying it: when to come back, and whether to retry at all.
    /// `now` is the local wall clock; absolute times are read against it when it agrees with the
    /// response's `Date` header (within its 1 s resolution), else against the `Date`.
    ///
    /// The retry layer reads it for every response that is not a success, and with
    /// [pacing](crate::Pacing) for successes too. A delay on a response classified as a success
    /// means **the quota is used up**: the endpoint's next requests wait for it. So return one
    /// only when the response says so, not for a `Retry-After` that asks a client to poll (a
    /// 202) or to follow a redirect later (a 3xx).
    ///
    /// The default reads `Retry-After` on a 4xx or 5xx response alone; [`HttpClassifier`] also
    /// reads the rate-limit and stand-down headers its [`ServerHints`] name.
    fn hint(&self, response: &Res, now: std::time::SystemTime) -> ServerHint
    where
        Res: RetryResponse,
    {
        let status = response.status();
        if !(status.is_client_error() || status.is_server_error()) {
            return ServerHint::NONE;
        }
        ServerHint::of_retry_after(response.headers(), now)
    }

    /// Whether `response`, classified as transient, says the endpoint is overloaded or
    /// unreachable: what [pacing](crate::Pacing) counts towards an outage and against a ramp.
    /// `statuses` are the HTTP statuses the pacing configuration calls congestion
    /// ([`PacingBuilder::congestion`](crate::PacingBuilder::congestion): 429, 502, 503 and 504
    /// by default); a transient error (a timeout, a connection failure) always is congestion.
    ///
    /// The default: the response's status is one of `statuses`. A protocol that reports
    /// overload inside a 200 says so here: [`GrpcClassifier`](crate::GrpcClassifier) counts
    /// UNAVAILABLE and RESOURCE_EXHAUSTED.
    fn is_congestion(&self, response: &Res, statuses: &[http::StatusCode]) -> bool
    where
        Res: RetryResponse,
    {
        statuses.contains(&response.status())
    }

    /// Classifies the outcome of an attempt of a request with `method`: by default, the
    /// response or the error alone.
    fn classify(&self, method: &Method, result: &Result<Res, E>) -> Outcome {
        let _ = method;
        match result {
            Ok(response) => self.classify_response(response),
            Err(error) => self.classify_error(error),
        }
    }
}

/// Gives the classifier access to an error's [`std::error::Error`] chain.
///
/// Implemented for the error types of the usual client stacks: `tower::BoxError` (what
/// `tower::timeout::Timeout` returns), `std::io::Error`, `tower::timeout::error::Elapsed`, and,
/// with the `hyper` feature, `hyper::Error` and hyper-util's legacy client error. Other error
/// types implement it to be classified by [`HttpClassifier`].
pub trait AsStdError {
    /// The error as a `dyn Error`, or `None` when there is none to inspect.
    fn as_std_error(&self) -> Option<&(dyn Error + 'static)>;
}

macro_rules! as_std_error {
    // A type's attributes go on its impl, so that a `cfg` stays on the impl itself, where
    // docs.rs's auto-cfg finds it (a `cfg` on the macro call is gone after expansion).
    ($($(#[$attr:meta])* $ty:ty),* $(,)?) => {$(
        $(#[$attr])*
        impl AsStdError for $ty {
            fn as_std_error(&self) -> Option<&(dyn Error + 'static)> {
                Some(self)
            }
        }
    )*};
}

as_std_error!(io::Error, tower::timeout::error::Elapsed);
as_std_error!(
    #[cfg(feature = "hyper")]
    hyper::Error,
    #[cfg(feature = "hyper")]
    hyper_util::client::legacy::Error,
);

macro_rules! as_std_error_boxed {
    ($($ty:ty),* $(,)?) => {$(
        impl AsStdError for $ty {
            fn as_std_error(&self) -> Option<&(dyn Error + 'static)> {
                Some(&**self)
            }
        }
    )*};
}

as_std_error_boxed!(
    Box<dyn Error + Send + Sync>,
    Box<dyn Error + Send>,
    Box<dyn Error>
);

impl AsStdError for std::convert::Infallible {
    fn as_std_error(&self) -> Option<&(dyn Error + 'static)> {
        match *self {}
    }
}

/// The default HTTP classification table, adjustable per status.
///
/// Only transient outcomes are retried. The default table, [`HttpClassifier`]:
///
/// | outcome | classified as |
/// |---|---|
/// | 1xx, 2xx, 3xx | success |
/// | 408, 429, 500, 502, 503, 504 | transient |
/// | 403 whose rate-limit headers say the quota is used up (`x-ratelimit-remaining: 0`, an IETF `RateLimit` policy with `r=0`; see [`ServerHints`]) | transient |
/// | every other 4xx and 5xx (400, 404, 501, 505, ...) | permanent |
/// | HTTP/2 stream reset by the server with `REFUSED_STREAM`, or above the last stream id of the server's `GOAWAY` (`h2::Error`, also for a request sent on the connection after it) | [not sent](Outcome::NotSent), [refused](NotSent::Refused): rotation |
/// | hyper: a user error on the client's side (`hyper::Error::is_user`): `User(DispatchGone)`, the connection's dispatch task ended without answering (with HTTP/2 when a `GOAWAY` ends a connection on which the request waited for a stream slot, whether or not it was then written), or the request body failed mid-write | transient: ambiguous |
/// | connection refused (`std::io::Error`); hyper: canceled (handed back unsent: hyper-util resends these itself on a reused connection, so those it returns met a fresh one); hyper-util or reqwest: connect error (refused, DNS, connect timeout) | [not sent](Outcome::NotSent), [unconnected](NotSent::Unconnected) |
/// | any other HTTP/2 error (`h2::Error`: a reset with another reason, a protocol error) | transient |
/// | hyper-util or reqwest: connect error with an `std::io::Error` of kind `InvalidData` in its chain (how rustls reports a bad certificate) | permanent |
/// | timeout (`tower::timeout::error::Elapsed`, `hyper::Error::is_timeout`) | transient |
/// | connection reset, aborted, broken pipe, unexpected EOF (`std::io::Error`) | transient |
/// | hyper: incomplete message, channel closed | transient |
/// | reqwest (feature `reqwest`): `is_timeout` | transient |
/// | [`CircuitOpen`] (a breaker refused the call) | permanent, whatever `unknown_errors` says |
/// | any other error (a kind no row names: a new hyper or hyper-util error, an error of another stack) | transient (configurable with [`unknown_errors`](Self::unknown_errors)), counted and named ([`Classify::unknown_error`]) |
///
/// Besides the status, the classifier reads what the response says about retrying
/// ([`hints`](Self::hints), [`ServerHints`]): when to come back (`Retry-After`, `retry-after-ms`,
/// `RateLimit`, `x-ratelimit-reset`), and whether to retry at all (`x-should-retry: false` and
/// `x-envoy-overloaded` stop retrying; `x-should-retry: true` retries even a 400 or a POST).
///
/// Errors are recognised by walking [`Error::source`] and downcasting each link, never by
/// matching message text. Proof that a request was not sent counts wherever it is in the chain
/// (a reqwest error wraps hyper-util's, which wraps hyper's, which wraps h2's); otherwise the
/// first link of a known transient kind decides. The HTTP/2 and hyper rows need the `hyper`
/// feature. A certificate error of a TLS stack that does not report it as `InvalidData`
/// (native-tls) is taken for a connect failure.
///
/// **Unknown errors are transient by default**: retried for an idempotent request (a few
/// attempts, a budget token each, the backoff), never resent for a POST without a key, since
/// nothing says it was not processed. An error no rule recognises is as likely a new transport
/// failure as a bug of the request, and a permanent default turned the first kind into silent
/// failures; the attempts and the budget bound what the second kind costs. Each one is counted
/// ([`RetryStats::unknown_errors`](crate::RetryStats::unknown_errors)) and named in the report
/// ([`RetryReport::unknown_error`](crate::RetryReport::unknown_error)).
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
        } else {
            Outcome::Permanent
        }
    }

    /// The outcome of an error: [not sent](Outcome::NotSent) if any link of its `source()`
    /// chain proves it, else from the first link that is a known transient kind, else the
    /// configured outcome for unknown errors.
    pub fn classify_error_chain(&self, error: &(dyn Error + 'static)) -> Outcome {
        known_error(error).unwrap_or(self.unknown_errors)
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
        match outcome {
            Outcome::Success => self.success[word] |= bit,
            Outcome::Transient => self.transient[word] |= bit,
            Outcome::NotSent(NotSent::Refused) => self.refused[word] |= bit,
            Outcome::NotSent(NotSent::Unconnected) => self.unconnected[word] |= bit,
            Outcome::Permanent => {}
        }
    }
}

/// The outcome of `error` by the rules of the table, or `None` when no rule recognises it.
fn known_error(error: &(dyn Error + 'static)) -> Option<Outcome> {
    let mut link = Some(error);
    while let Some(error) = link {
        // Refused by a circuit breaker: retrying this request cannot help, whatever the
        // setting for unknown errors.
        if error.is::<CircuitOpen>() {
            return Some(Outcome::Permanent);
        }
        if let Some(outcome) = not_sent(error) {
            return Some(outcome);
        }
        link = error.source();
    }
    let mut link = Some(error);
    while let Some(error) = link {
        if is_transient_error(error) {
            return Some(Outcome::Transient);
        }
        link = error.source();
    }
    None
}

/// Whether `error` itself proves that the request never reached the application (or, for a
/// connect error, that retrying cannot help).
fn not_sent(error: &(dyn Error + 'static)) -> Option<Outcome> {
    const REFUSED: Outcome = Outcome::NotSent(NotSent::Refused);
    const UNCONNECTED: Outcome = Outcome::NotSent(NotSent::Unconnected);
    if let Some(io) = error.downcast_ref::<io::Error>() {
        // Only a connect can be refused.
        return (io.kind() == io::ErrorKind::ConnectionRefused).then_some(UNCONNECTED);
    }
    #[cfg(feature = "hyper")]
    {
        // RFC 9113, section 8.7: a stream the server refused, or one above the last stream id of
        // its GOAWAY (h2 gives those streams the GOAWAY as their error, and a request sent on
        // the connection after it too; a stream the GOAWAY covers that is then cut gets an I/O
        // error instead), was not processed. Sent by the server (`is_remote`), not made up by
        // h2 on the client's side.
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            let refused = h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
            return (h2.is_remote() && (refused || h2.is_go_away())).then_some(REFUSED);
        }
        if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            // hyper gives a request back "canceled" only when it wrote none of it.
            if hyper.is_canceled() {
                return Some(UNCONNECTED);
            }
            // Not `User(DispatchGone)` (the connection's dispatch task ended without answering):
            // with HTTP/2 it also ends a request whose stream was opened, and processed, after
            // it waited for a slot, when a GOAWAY then closed the connection. Ambiguous, so
            // transient below.
            return None;
        }
        if let Some(client) = error.downcast_ref::<hyper_util::client::legacy::Error>() {
            return client.is_connect().then(|| connect_failure(client));
        }
    }
    #[cfg(feature = "reqwest")]
    if let Some(error) = error.downcast_ref::<reqwest::Error>() {
        return error.is_connect().then(|| connect_failure(error));
    }
    #[cfg(not(feature = "hyper"))]
    let _ = REFUSED;
    None
}

/// A connector failed, so nothing was sent. A certificate the client rejects will be rejected
/// again: rustls (through tokio-rustls) reports it as an `io::Error` of kind `InvalidData`.
#[cfg(any(feature = "hyper", feature = "reqwest"))]
fn connect_failure(error: &(dyn Error + 'static)) -> Outcome {
    let mut link = error.source();
    while let Some(error) = link {
        if let Some(io) = error.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::InvalidData {
                return Outcome::Permanent;
            }
        }
        link = error.source();
    }
    Outcome::NotSent(NotSent::Unconnected)
}

fn is_transient_error(error: &(dyn Error + 'static)) -> bool {
    if error.is::<tower::timeout::error::Elapsed>() {
        return true;
    }
    if let Some(io) = error.downcast_ref::<io::Error>() {
        return matches!(
            io.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::NotConnected
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::TimedOut
                | io::ErrorKind::UnexpectedEof
        );
    }
    // reqwest's own timeouts (its connection failures are not sent); its other errors (a bad
    // URL, a redirect loop, a body that failed to decode) are not transient by themselves, and
    // the chain walk goes on to their sources.
    #[cfg(feature = "reqwest")]
    if let Some(error) = error.downcast_ref::<reqwest::Error>() {
        return error.is_timeout();
    }
    #[cfg(feature = "hyper")]
    {
        if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            return hyper.is_incomplete_message()
                || hyper.is_closed()
                || hyper.is_timeout()
                || hyper.is_user();
        }
        // Any other HTTP/2 error (a reset with another reason, a GOAWAY with an error code, a
        // protocol error): the stream may have been processed, and another attempt may work.
        if error.is::<h2::Error>() {
            return true;
        }
    }
    false
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

    fn hint(&self, response: &Res, now: std::time::SystemTime) -> ServerHint {
        self.hints.read(response.status(), response.headers(), now)
    }

    fn classify_error(&self, error: &E) -> Outcome {
        match error.as_std_error() {
            Some(error) => self.classify_error_chain(error),
            None => self.unknown_errors,
        }
    }

    fn unknown_error(&self, error: &E) -> Option<String> {
        match error.as_std_error() {
            Some(error) => self.name_unknown_error(error),
            None => Some("an error with no `std::error::Error` to inspect".to_owned()),
        }
    }

    fn refused_for(&self, error: &E) -> Option<std::time::Duration> {
        let mut link = error.as_std_error();
        while let Some(error) = link {
            if let Some(open) = error.downcast_ref::<CircuitOpen>() {
                return Some(open.retry_after());
            }
            link = error.source();
        }
        None
    }
}

/// A classifier made of two closures; see [`classify_fn`].
#[derive(Clone, Copy)]
pub struct ClassifyFn<R, E> {
    response: R,
    error: E,
}

/// Builds a classifier from a closure for responses and one for errors.
///
/// ```
/// use http::Response;
/// use tower_http_retry::{classify_fn, HttpClassifier, Outcome};
///
/// // Retry 409 too; leave everything else to the default table.
/// let table = HttpClassifier::new();
/// let errors = table.clone();
/// let classifier = classify_fn(
///     move |res: &Response<String>| match res.status().as_u16() {
///         409 => Outcome::Transient,
///         _ => table.classify_status(res.status()),
///     },
///     move |err: &tower::BoxError| errors.classify_error_chain(&**err),
/// );
/// # let _ = classifier;
/// ```
pub fn classify_fn<R, E>(response: R, error: E) -> ClassifyFn<R, E> {
    ClassifyFn { response, error }
}

impl<Res, Err, R, E> Classify<Res, Err> for ClassifyFn<R, E>
where
    R: Fn(&Res) -> Outcome,
    E: Fn(&Err) -> Outcome,
{
    fn classify_response(&self, response: &Res) -> Outcome {
        (self.response)(response)
    }

    fn classify_error(&self, error: &Err) -> Outcome {
        (self.error)(error)
    }
}

impl<R, E> fmt::Debug for ClassifyFn<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClassifyFn").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::BoxError;

    fn status(code: u16) -> Outcome {
        HttpClassifier::new().classify_status(StatusCode::from_u16(code).unwrap())
    }

    /// A classifier that keeps the default `hint`.
    struct StatusOnly;

    impl Classify<http::Response<()>, BoxError> for StatusOnly {
        fn classify_response(&self, response: &http::Response<()>) -> Outcome {
            HttpClassifier::new().classify_status(response.status())
        }
        fn classify_error(&self, _: &BoxError) -> Outcome {
            Outcome::Permanent
        }
    }

    #[test]
    fn the_default_hint_reads_retry_after_on_failures_only() {
        // On a success a delay would mean "quota used up" and pause a paced endpoint: a 202's
        // or a 303's Retry-After asks a client to poll or to follow later, nothing more.
        let hint = |code: u16| {
            let response = http::Response::builder()
                .status(code)
                .header(http::header::RETRY_AFTER, "2")
                .body(())
                .unwrap();
            StatusOnly.hint(&response, std::time::SystemTime::now())
        };
        for code in [200, 202, 303] {
            assert_eq!(hint(code).retry_after(), None, "{code}");
        }
        for code in [429, 503] {
            assert_eq!(
                hint(code).retry_after(),
                Some(std::time::Duration::from_secs(2)),
                "{code}"
            );
        }
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

    fn classify_boxed(error: BoxError) -> Outcome {
        <HttpClassifier as Classify<http::Response<()>, BoxError>>::classify_error(
            &HttpClassifier::new(),
            &error,
        )
    }

    #[derive(Debug)]
    struct Wrapper(Box<dyn Error + Send + Sync>);
    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("connection reset by peer (but the text does not matter)")
        }
    }
    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn timeouts_and_connection_errors_are_transient_anywhere_in_the_chain() {
        assert_eq!(
            classify_boxed(tower::timeout::error::Elapsed::new().into()),
            Outcome::Transient
        );
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(
            classify_boxed(Box::new(Wrapper(reset.into()))),
            Outcome::Transient
        );
    }

    #[test]
    fn a_refused_connection_is_not_sent_anywhere_in_the_chain() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let unconnected = Outcome::NotSent(NotSent::Unconnected);
        assert_eq!(classify_boxed(refused.into()), unconnected);
        // Below a timeout that would be transient on its own: the proof wins.
        #[derive(Debug)]
        struct TimedOut(io::Error);
        impl fmt::Display for TimedOut {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("timed out")
            }
        }
        impl Error for TimedOut {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let timed_out = io::Error::new(io::ErrorKind::TimedOut, TimedOut(refused));
        assert_eq!(
            classify_boxed(Box::new(Wrapper(timed_out.into()))),
            unconnected
        );
    }

    #[cfg(feature = "hyper")]
    #[test]
    fn an_h2_reason_the_server_did_not_send_is_no_proof() {
        // Made on the client's side (`is_remote` is false): nothing says the server refused. An
        // h2 error is a known kind, transient: retried when idempotent only.
        let made_up: BoxError = Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM));
        assert_eq!(classify_boxed(made_up), Outcome::Transient);
        let made_up = h2::Error::from(h2::Reason::REFUSED_STREAM);
        assert_eq!(HttpClassifier::new().name_unknown_error(&made_up), None);
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

    #[test]
    fn unknown_errors_are_transient_unless_configured() {
        let unknown: BoxError = "something else".into();
        assert_eq!(classify_boxed(unknown), Outcome::Transient);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(
            classify_boxed(Box::new(Wrapper(denied.into()))),
            Outcome::Transient
        );
        let strict = HttpClassifier::new().unknown_errors(Outcome::Permanent);
        let unknown: BoxError = "something else".into();
        assert_eq!(strict.classify_error_chain(&*unknown), Outcome::Permanent);
    }

    #[test]
    fn an_unknown_error_is_named_by_its_chain_and_a_known_one_is_not() {
        let classifier = HttpClassifier::new();
        let denied = Wrapper(io::Error::from(io::ErrorKind::PermissionDenied).into());
        let name = <HttpClassifier as Classify<http::Response<()>, BoxError>>::unknown_error(
            &classifier,
            &(Box::new(denied) as BoxError),
        );
        assert_eq!(
            name.as_deref(),
            Some("connection reset by peer (but the text does not matter): permission denied")
        );
        let reset = Wrapper(io::Error::from(io::ErrorKind::ConnectionReset).into());
        assert_eq!(classifier.name_unknown_error(&reset), None);
        let elapsed = tower::timeout::error::Elapsed::new();
        assert_eq!(classifier.name_unknown_error(&elapsed), None);
    }

    #[test]
    fn message_text_is_not_read() {
        let strict = HttpClassifier::new().unknown_errors(Outcome::Permanent);
        let lookalike: BoxError = "connection reset by peer; operation timed out".into();
        assert_eq!(strict.classify_error_chain(&*lookalike), Outcome::Permanent);
    }
}
