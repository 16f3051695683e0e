//! What the middlewares need to know about requests and responses, as traits so that other HTTP
//! types (reqwest's, for one) can be retried and guarded too.

use crate::report::{HedgeReport, ReportSlot, RetryReport};
use http::uri::Authority;
use http::{Extensions, HeaderMap, Method, StatusCode};
use std::borrow::Cow;

/// What every request exposes to the middlewares: its method, headers and authority.
///
/// Implemented for every `http::Request<B>`, whatever its body, and for `reqwest::Request`
/// (feature `reqwest`). The circuit breakers need only this; the retry layer also needs to copy
/// the request ([`RetryRequest`]).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a request type these middlewares know",
    note = "`http::Request<B>` and `reqwest::Request` (feature `reqwest`) implement `RequestHead`"
)]
pub trait RequestHead {
    /// The method, to decide whether the request is idempotent.
    fn method(&self) -> &Method;

    /// The headers, to find an `Idempotency-Key`.
    fn headers(&self) -> &HeaderMap;

    /// The headers, to stamp an `Idempotency-Key` or an attempt number.
    fn headers_mut(&mut self) -> &mut HeaderMap;

    /// The authority (`host:port`) the request goes to, if known: a keyed circuit breaker has one
    /// breaker per authority, and an [`AbortSignal`](crate::AbortSignal) held for one authority
    /// stops only its requests.
    fn authority(&self) -> Option<Cow<'_, Authority>>;
}

/// A request the retry layer can inspect and copy.
///
/// Implemented for `http::Request<B>` whose body is `Clone` (e.g. `Full<Bytes>`, `String`,
/// `Empty<Bytes>`): copying such a request is cheap, as `Bytes` is reference-counted. A request
/// with a streaming body (e.g. hyper's `Incoming`, axum's `Body`) is made retryable by reading its
/// body into a bounded buffer with
/// [`ReplayBody::buffer_request`](crate::body::ReplayBody::buffer_request).
#[diagnostic::on_unimplemented(
    message = "the retry layer cannot copy `{Self}` for another attempt",
    label = "this request type is not `RetryRequest`",
    note = "`http::Request<B>` is `RetryRequest` when its body `B` is `Clone` (`String`, `Full<Bytes>`, `Empty<Bytes>`, ...)",
    note = "a streaming body (axum's `Body`, hyper's `Incoming`) must first be buffered: `ReplayBody::buffer_request(request, limit).await`"
)]
pub trait RetryRequest: RequestHead + Sized {
    /// A copy for another attempt, or `None` when the request cannot be repeated (it is then
    /// sent once and reported as [`StopReason::NotReplayable`](crate::StopReason::NotReplayable)
    /// if it fails).
    fn try_clone(&self) -> Option<Self>;

    /// The [`ReportSlot`] the caller attached, if any.
    fn report_slot(&self) -> Option<&ReportSlot> {
        None
    }
}

impl<B> RequestHead for http::Request<B> {
    fn method(&self) -> &Method {
        self.method()
    }

    fn headers(&self) -> &HeaderMap {
        self.headers()
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        self.headers_mut()
    }

    fn authority(&self) -> Option<Cow<'_, Authority>> {
        self.uri().authority().map(Cow::Borrowed)
    }
}

// Without it, rustc reports the nested `B: Clone` of this impl and never shows the trait's own
// message naming `ReplayBody` (stable in 1.85; older compilers ignore it with a warning).
#[diagnostic::do_not_recommend]
impl<B: Clone> RetryRequest for http::Request<B> {
    fn try_clone(&self) -> Option<Self> {
        Some(self.clone())
    }

    fn report_slot(&self) -> Option<&ReportSlot> {
        self.extensions().get()
    }
}

/// A response the middlewares can classify and the retry layer can annotate: its status and
/// headers to classify it, its extensions to carry what the layers attach (the
/// [`RetryReport`], the [`HedgeReport`]) and what a layer below says of it (a body reader's
/// [`RetryInfo`](crate::hint::RetryInfo), a pool's [`UpstreamHeld`](crate::hint::UpstreamHeld)).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a response type the retry layer knows",
    note = "`http::Response<B>` and `reqwest::Response` (feature `reqwest`) implement `RetryResponse`"
)]
pub trait RetryResponse {
    /// The status code.
    fn status(&self) -> StatusCode;

    /// The headers, to read `Retry-After`.
    fn headers(&self) -> &HeaderMap;

    /// The extensions, to read what a layer below put there.
    fn extensions(&self) -> &Extensions;

    /// The extensions, to attach the reports.
    fn extensions_mut(&mut self) -> &mut Extensions;
}

impl<B> RetryResponse for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }

    fn headers(&self) -> &HeaderMap {
        self.headers()
    }

    fn extensions(&self) -> &Extensions {
        self.extensions()
    }

    fn extensions_mut(&mut self) -> &mut Extensions {
        self.extensions_mut()
    }
}

// Here rather than in `report/`, so that the report types depend on nothing else in the crate.
impl HedgeReport {
    /// The report attached to `response`, if the request was hedged.
    ///
    /// ```
    /// use tower_http_retry::report::HedgeReport;
    ///
    /// assert_eq!(HedgeReport::of(&http::Response::new(())), None);
    /// ```
    pub fn of<R: RetryResponse>(response: &R) -> Option<&HedgeReport> {
        response.extensions().get()
    }
}

// Here rather than in `report.rs`, so that the report types depend on nothing else in the crate.
impl RetryReport {
    /// The report attached to `response` (an `http::Response`, or a `reqwest::Response` with
    /// the `reqwest` feature), or [`FIRST_TRY`](Self::FIRST_TRY) when none is.
    pub fn of<R: RetryResponse>(response: &R) -> &RetryReport {
        static FIRST_TRY: RetryReport = RetryReport::FIRST_TRY;
        response.extensions().get().unwrap_or(&FIRST_TRY)
    }

    /// [`of`](Self::of), owned: a copy that outlives `response` (to return from a closure that
    /// consumes the response, or to keep after its body is read). For the report of an error
    /// too, see [`capture`](Self::capture).
    ///
    /// ```
    /// use tower_http_retry::RetryReport;
    ///
    /// let report = |response: http::Response<()>| RetryReport::from_response(&response);
    /// assert_eq!(report(http::Response::new(())), RetryReport::FIRST_TRY);
    /// ```
    pub fn from_response<R: RetryResponse>(response: &R) -> RetryReport {
        Self::of(response).clone()
    }
}
