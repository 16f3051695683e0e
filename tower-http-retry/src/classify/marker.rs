//! Markers that adapters attach and the classifier reads: the way a client crate tells
//! [`HttpClassifier`](super::HttpClassifier) what only it knows, without the classifier naming
//! the client.

use std::error::Error;
use std::fmt;

/// A connection whose hyper tasks run one at a time, so that a `GOAWAY` hyper delivers to one of
/// its requests is that request's own stream's verdict: proof that the request was not
/// processed, for any method.
///
/// A connector puts it in the `Connected` extras of such a connection (hyper-util's
/// `Connected::extra`), and hyper-util copies it into the extensions of each response and into
/// each error's `connect_info`, where [`HttpClassifier`](super::HttpClassifier) reads it (feature
/// `hyper`). Attach it only to connections whose tasks really are serialized: with it, a
/// `GOAWAY` delivered through hyper is taken for proof, and an unkeyed POST is resent. The
/// rotation-safe client of the `tower-http-retry-hyper` crate is one that does.
///
/// ```
/// use tower_http_retry::classify::SerialDispatch;
///
/// let mut extensions = http::Extensions::new();
/// extensions.insert(SerialDispatch::new());
/// assert!(extensions.get::<SerialDispatch>().is_some());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SerialDispatch(());

impl SerialDispatch {
    /// The marker.
    pub const fn new() -> Self {
        Self(())
    }
}

/// An error that no other attempt can help: found anywhere in an error's `source()` chain, it
/// makes [`HttpClassifier`](super::HttpClassifier) take the error for permanent, whatever
/// [`unknown_errors`](super::HttpClassifier::unknown_errors) says.
///
/// A client whose failure will meet every later attempt too (its runtime is gone, say) returns
/// an error whose chain holds one:
///
/// ```
/// use std::{error::Error, fmt};
/// use tower_http_retry::classify::Unretryable;
/// use tower_http_retry::{HttpClassifier, Outcome};
///
/// #[derive(Debug)]
/// struct RuntimeGone(Unretryable);
///
/// impl fmt::Display for RuntimeGone {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str("the client's runtime is gone")
///     }
/// }
///
/// impl Error for RuntimeGone {
///     fn source(&self) -> Option<&(dyn Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let error = RuntimeGone(Unretryable::new());
/// assert_eq!(HttpClassifier::new().classify_error_chain(&error), Outcome::Permanent);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unretryable(());

impl Unretryable {
    /// The marker.
    pub const fn new() -> Self {
        Self(())
    }
}

impl fmt::Display for Unretryable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no other attempt can help")
    }
}

impl Error for Unretryable {}

/// Whether `error` happened on a connection marked [`SerialDispatch`]: hyper-util copies a
/// connection's `Connected` into each of its errors.
#[cfg(feature = "hyper")]
pub(super) fn serially_dispatched(error: &(dyn Error + 'static)) -> bool {
    let mut link = Some(error);
    while let Some(error) = link {
        let marked = error
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .and_then(hyper_util::client::legacy::Error::connect_info)
            .is_some_and(|connected| {
                let mut extras = http::Extensions::new();
                connected.get_extras(&mut extras);
                extras.get::<SerialDispatch>().is_some()
            });
        if marked {
            return true;
        }
        link = error.source();
    }
    false
}
