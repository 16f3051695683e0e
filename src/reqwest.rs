//! Retrying reqwest's `Client` (feature `reqwest`).
//!
//! reqwest 0.13's `Client` is a tower `Service<reqwest::Request>`, so the retry layer and the
//! circuit breaker wrap it like any other client. This module makes reqwest's types fit:
//!
//! * `reqwest::Request` is a [`RetryRequest`]: its method and headers decide idempotency, and it
//!   is copied for another attempt with `Request::try_clone`. A request whose body is a stream
//!   cannot be copied: it is sent once
//!   ([`StopReason::NotReplayable`](crate::StopReason::NotReplayable)).
//! * `reqwest::Response` is a [`RetryResponse`]: classified by status, `Retry-After` read from its
//!   headers, and the [`RetryReport`] put in its extensions
//!   (`response.extensions().get::<RetryReport>()`). reqwest keeps a request's extensions
//!   private, so a [`ReportSlot`](crate::ReportSlot) cannot be attached to a `reqwest::Request`.
//! * `reqwest::Error` is an [`AsStdError`]: [`HttpClassifier`](crate::HttpClassifier) treats its
//!   timeouts and connection errors as transient ([`is_transient`]) and walks its `source()`
//!   chain for the rest.
//!
//! ```no_run
//! # async fn run() -> Result<(), tower::BoxError> {
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tower_http_retry::{CircuitBreakerLayer, RetryLayer};
//!
//! let client = reqwest::Client::new();
//! let mut service = ServiceBuilder::new()
//!     .layer(RetryLayer::new())
//!     .layer(CircuitBreakerLayer::new())
//!     .service(client.clone());
//! let request = client.get("http://127.0.0.1:8080/health").build()?;
//! let response = service.ready().await?.call(request).await?;
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```

use crate::retry::{AsStdError, RetryReport, RetryRequest, RetryResponse};
use ::reqwest::{Error, Request, Response};
use http::{HeaderMap, Method, StatusCode};

impl RetryRequest for Request {
    fn method(&self) -> &Method {
        Request::method(self)
    }

    fn headers(&self) -> &HeaderMap {
        Request::headers(self)
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        Request::headers_mut(self)
    }

    fn try_clone(&self) -> Option<Self> {
        Request::try_clone(self)
    }
}

impl RetryResponse for Response {
    fn status(&self) -> StatusCode {
        Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        Response::headers(self)
    }

    fn attach_report(&mut self, report: RetryReport) {
        self.extensions_mut().insert(report);
    }
}

impl AsStdError for Error {
    fn as_std_error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self)
    }
}

/// Whether a reqwest error is worth another attempt: a timeout (reqwest's own, per request or
/// per client) or a failure to connect. Other reqwest errors (a bad URL, a redirect loop, a body
/// that failed to decode) are not transient by themselves; the classifier still looks further
/// down their `source()` chain.
pub fn is_transient(error: &Error) -> bool {
    error.is_timeout() || error.is_connect()
}
