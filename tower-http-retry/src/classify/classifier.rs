//! The trait that decides an [`Outcome`] ([`Classify`]), and a classifier made of two closures
//! ([`classify_fn`]).

use super::outcome::Outcome;
use super::signals::{default_signals, Ask, Signals};
use crate::message::RetryResponse;
use http::Method;
use std::fmt;

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
/// use tower_http_retry::{HttpClassifier, Outcome};
/// use tower_http_retry::classify::Classify;
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

    /// What `result`, classified as `ask.outcome`, says besides its class: the server's hint,
    /// congestion, a breaker's refusal, a rotation, an unknown error (see [`Signals`]), as far as
    /// `ask` asks. The retry layer asks once per outcome that is not a success at the first try
    /// (a success only with pacing, for its quota), the circuit breaker of a transient error
    /// (for a rotation).
    ///
    /// The default is [`default_signals`]: `Retry-After` on a 4xx or 5xx response, congestion
    /// by the asked statuses, nothing of an error. [`HttpClassifier`](super::HttpClassifier)
    /// reads the rate-limit and stand-down headers its [`ServerHints`](crate::hint::ServerHints)
    /// name, a body's [`RetryInfo`](crate::hint::RetryInfo), and the error's `source()` chain.
    /// A protocol that reports overload inside a 200 says so here: the gRPC crate's
    /// `GrpcClassifier` counts UNAVAILABLE and RESOURCE_EXHAUSTED as congestion.
    fn signals(&self, result: &Result<Res, E>, ask: &Ask<'_>) -> Signals
    where
        Res: RetryResponse,
    {
        default_signals(result, ask)
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
/// use tower_http_retry::{HttpClassifier, Outcome};
/// use tower_http_retry::classify::classify_fn;
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
    use crate::classify::HttpClassifier;
    use tower::BoxError;

    /// A classifier that keeps the default `signals`.
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
            let outcome = StatusOnly.classify_response(&response);
            // Asked as pacing asks: a success's quota too.
            let ask = Ask::new(outcome, &std::time::SystemTime::now).quota(true);
            StatusOnly.signals(&Ok(response), &ask).hint
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
}
