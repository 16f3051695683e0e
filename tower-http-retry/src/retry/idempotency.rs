//! Which requests are safe to send more than once. (the user-facing text is on the public item below).

use http::header::HeaderName;
use http::{HeaderMap, Method};

/// Which requests may be retried.
///
/// A request that timed out may still have been applied: the server committed the write and the
/// answer was lost. Repeating an idempotent request (GET, PUT, DELETE, ...) is harmless; repeating
/// a POST can charge a card twice. So by default only idempotent methods are retried, and any
/// request that carries an `Idempotency-Key` header, by which the server can recognise a repeat.
///
/// ```
/// use http::{HeaderMap, HeaderValue, Method};
/// use tower_http_retry::retry::Idempotency;
///
/// let mut keyed = HeaderMap::new();
/// keyed.insert("idempotency-key", HeaderValue::from_static("order-17"));
/// let policy = Idempotency::default();
/// assert!(policy.allows(&Method::GET, &HeaderMap::new()));
/// assert!(!policy.allows(&Method::POST, &HeaderMap::new()));
/// assert!(policy.allows(&Method::POST, &keyed));
/// assert!(!Idempotency::RequireKey.allows(&Method::GET, &HeaderMap::new()));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Idempotency {
    /// GET, HEAD, OPTIONS, TRACE, PUT and DELETE, or any request with an `Idempotency-Key`
    /// (the default).
    #[default]
    MethodOrKey,
    /// Only requests with an `Idempotency-Key`, whatever their method.
    RequireKey,
    /// Every request: the caller vouches that the endpoint tolerates repeats.
    Any,
}

impl Idempotency {
    /// The `Idempotency-Key` header (IETF draft "The Idempotency-Key HTTP Header Field").
    pub const KEY_HEADER: HeaderName = HeaderName::from_static("idempotency-key");

    /// Whether a request with this method and these headers may be sent again.
    #[inline]
    pub fn allows(&self, method: &Method, headers: &HeaderMap) -> bool {
        match self {
            Idempotency::MethodOrKey => {
                is_idempotent(method) || headers.contains_key(&Idempotency::KEY_HEADER)
            }
            Idempotency::RequireKey => headers.contains_key(&Idempotency::KEY_HEADER),
            Idempotency::Any => true,
        }
    }
}

/// The idempotent methods of RFC 9110, section 9.2.2.
#[inline]
pub(crate) fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}
