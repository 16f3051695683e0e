//! What the layer needs to know about requests and responses, as traits so that other HTTP types
//! (reqwest's, for one) can be retried too.

use super::replay_body::ReplayBody;
use super::report::{ReportSlot, RetryReport};
use http::uri::Authority;
use http::{HeaderMap, Method, StatusCode};

/// A request the retry layer can inspect and copy.
///
/// Implemented for `http::Request<B>` whose body is `Clone` (e.g. `Full<Bytes>`, `String`,
/// `Empty<Bytes>`): copying such a request is cheap, as `Bytes` is reference-counted. A request
/// with a streaming body (e.g. hyper's `Incoming`) is made retryable by reading its body into a
/// bounded buffer with [`ReplayBody::buffer_request`](crate::retry::ReplayBody::buffer_request).
pub trait RetryRequest: Sized {
    /// The method, to decide whether the request is idempotent.
    fn method(&self) -> &Method;

    /// The headers, to find an `Idempotency-Key`.
    fn headers(&self) -> &HeaderMap;

    /// The headers, to stamp an `Idempotency-Key` or an attempt number.
    fn headers_mut(&mut self) -> &mut HeaderMap;

    /// A copy for another attempt, or `None` when the request cannot be repeated (it is then
    /// sent once and reported as [`StopReason::NotReplayable`](crate::StopReason::NotReplayable)
    /// if it fails).
    fn try_clone(&self) -> Option<Self>;

    /// The [`ReportSlot`] the caller attached, if any.
    fn report_slot(&self) -> Option<&ReportSlot> {
        None
    }

    /// The authority (`host:port`) the request goes to, if known: an
    /// [`AbortSignal`](crate::AbortSignal) held for one authority stops only its requests.
    fn authority(&self) -> Option<&Authority> {
        None
    }
}

/// The accessors every `http::Request` implementation shares.
macro_rules! http_request_accessors {
    () => {
        fn method(&self) -> &Method {
            self.method()
        }

        fn headers(&self) -> &HeaderMap {
            self.headers()
        }

        fn headers_mut(&mut self) -> &mut HeaderMap {
            self.headers_mut()
        }

        fn report_slot(&self) -> Option<&ReportSlot> {
            self.extensions().get()
        }

        fn authority(&self) -> Option<&Authority> {
            self.uri().authority()
        }
    };
}

impl<B: Clone> RetryRequest for http::Request<B> {
    http_request_accessors!();

    fn try_clone(&self) -> Option<Self> {
        Some(self.clone())
    }
}

/// A request whose body was read into a bounded buffer: copied when the whole body fit, sent once
/// otherwise. (`ReplayBody` is not `Clone`, so this does not overlap the impl above.)
impl<B> RetryRequest for http::Request<ReplayBody<B>> {
    http_request_accessors!();

    fn try_clone(&self) -> Option<Self> {
        let mut copy = http::Request::new(self.body().try_clone()?);
        *copy.method_mut() = self.method().clone();
        *copy.uri_mut() = self.uri().clone();
        *copy.version_mut() = self.version();
        *copy.headers_mut() = self.headers().clone();
        *copy.extensions_mut() = self.extensions().clone();
        Some(copy)
    }
}

/// A response the retry layer can classify and annotate.
pub trait RetryResponse {
    /// The status code.
    fn status(&self) -> StatusCode;

    /// The headers, to read `Retry-After`.
    fn headers(&self) -> &HeaderMap;

    /// Attaches the report of the request (to the extensions, for `http::Response`).
    fn attach_report(&mut self, report: RetryReport);
}

impl<B> RetryResponse for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }

    fn headers(&self) -> &HeaderMap {
        self.headers()
    }

    fn attach_report(&mut self, report: RetryReport) {
        self.extensions_mut().insert(report);
    }
}
