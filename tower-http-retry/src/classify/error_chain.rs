//! Errors are recognised by walking [`Error::source`] and downcasting each link, never by
//! matching message text: [`AsStdError`] gives the classifier the chain, [`known_error`] walks
//! it.

use super::marker::Unretryable;
use super::outcome::{NotSent, Outcome};
use crate::error::CircuitOpen;
use std::error::Error;
use std::io;

/// Gives the classifier access to an error's [`std::error::Error`] chain.
///
/// Implemented for the error types of the usual client stacks: `tower::BoxError` (what
/// `tower::timeout::Timeout` returns), `std::io::Error`, `tower::timeout::error::Elapsed`, and,
/// with the `hyper` feature, `hyper::Error` and hyper-util's legacy client error. Other error
/// types implement it to be classified by [`HttpClassifier`](super::HttpClassifier).
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

/// Whether `error` says the server turned the request away unprocessed on an HTTP/2 connection:
/// a refused stream (`REFUSED_STREAM`, on a connection that may stay open), or a `GOAWAY`
/// (proven, or through hyper without proof, which alone is what
/// [`Signals::rotation`](super::Signals::rotation) reports). Read it where a layer below
/// the retry layer learns from rotations, as `tower-http-retry-hyper`'s stream slots do. Always
/// `false` without the feature `hyper`, which recognises h2's errors.
///
/// ```
/// use tower_http_retry::classify::is_rotation_refusal;
///
/// let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
/// assert!(!is_rotation_refusal(&reset));
/// ```
pub fn is_rotation_refusal(error: &(dyn Error + 'static)) -> bool {
    known_error(error) == Some(Outcome::NotSent(NotSent::Refused))
}

/// The outcome of `error` by the rules of the table, or `None` when no rule recognises it.
pub(super) fn known_error(error: &(dyn Error + 'static)) -> Option<Outcome> {
    let mut link = Some(error);
    while let Some(error) = link {
        // Refused by a circuit breaker: retrying this request cannot help, whatever the
        // setting for unknown errors.
        if error.is::<CircuitOpen>() {
            return Some(Outcome::Permanent);
        }
        // A client said that every attempt meets this error.
        if error.is::<Unretryable>() {
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

/// Whether the refusal [`known_error`] finds in `error` rests on a `GOAWAY` that hyper's HTTP/2
/// client delivered on a connection whose hyper tasks may run in parallel: no proof that the
/// request was not processed.
///
/// hyper (up to at least 1.12) also hands the *connection's* `GOAWAY` to the request whose stream
/// its client task had just opened when the connection task, on another thread, received it; that
/// stream may be at or below the `GOAWAY`'s last stream id and processed (seen against nginx:
/// unkeyed POSTs applied twice), and its error is the one h2 gives a stream above it. Proof
/// remains where that race cannot be: a `REFUSED_STREAM` reset (per stream, never handed to
/// another request), an `h2::Error` that did not come through hyper (the caller's own stream),
/// and a connection marked [`SerialDispatch`](super::SerialDispatch), whose hyper tasks run one
/// at a time.
#[cfg(feature = "hyper")]
pub(super) fn goaway_unproven(error: &(dyn Error + 'static)) -> bool {
    let (mut through_hyper, mut goaway) = (false, false);
    let mut link = Some(error);
    while let Some(error) = link {
        through_hyper |= error.is::<hyper::Error>();
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            if h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM) {
                return false;
            }
            goaway |= h2.is_remote() && h2.is_go_away();
        }
        link = error.source();
    }
    goaway && through_hyper && !super::marker::serially_dispatched(error)
}

#[cfg(not(feature = "hyper"))]
pub(super) fn goaway_unproven(_: &(dyn Error + 'static)) -> bool {
    false
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
        // h2 on the client's side. A `GOAWAY` that came through hyper may be another stream's:
        // `goaway_unproven` takes the proof back.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Classify, HttpClassifier};
    use std::fmt;
    use tower::BoxError;

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
        assert!(!is_rotation_refusal(&made_up), "no rotation either");
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
        let denied: Result<http::Response<()>, BoxError> = Err(Box::new(denied));
        let ask = crate::classify::Ask::new(Outcome::Transient, &std::time::SystemTime::now);
        let name = classifier.signals(&denied, &ask).unknown_error;
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
