//! Retrying reqwest's `Client` (feature `reqwest`).
//!
//! reqwest 0.13's `Client` is a tower `Service<reqwest::Request>`, so the retry layer and the
//! circuit breaker wrap it like any other client. This module makes reqwest's types fit:
//!
//! * `reqwest::Request` is a [`RetryRequest`]: its method and headers decide idempotency, its
//!   URL's host and port are its authority (for a keyed circuit breaker and the abort signal's
//!   holds), and it is copied for another attempt with `Request::try_clone`. A request whose body
//!   is a stream cannot be copied: it is sent once
//!   ([`StopReason::NotReplayable`](crate::StopReason::NotReplayable)).
//! * `reqwest::Response` is a [`RetryResponse`]: classified by status, `Retry-After` read from its
//!   headers, and the [`RetryReport`] put in its extensions, read with
//!   [`RetryReport::of(&response)`](RetryReport::of) as for an `http::Response`. reqwest keeps a
//!   request's extensions private, so a [`ReportSlot`](crate::ReportSlot) cannot be attached to
//!   a `reqwest::Request`: the report of a request that ends in an error is not available.
//! * `reqwest::Error` is an [`AsStdError`]: [`HttpClassifier`](crate::HttpClassifier) treats its
//!   timeouts and connection errors as transient and walks its `source()` chain for the rest.
//!
//! ```no_run
//! # async fn run() -> Result<(), tower::BoxError> {
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tower_http_retry::{CircuitBreakerLayer, RetryLayer, RetryReport};
//!
//! let client = reqwest::Client::new();
//! let mut service = ServiceBuilder::new()
//!     .layer(RetryLayer::new())
//!     .layer(CircuitBreakerLayer::new())
//!     .service(client.clone());
//! let request = client.get("http://127.0.0.1:8080/health").build()?;
//! let response = service.ready().await?.call(request).await?;
//! println!("{} after {} attempts", response.status(), RetryReport::of(&response).attempts);
//! # Ok(())
//! # }
//! ```

use crate::classify::AsStdError;
use crate::message::{RequestHead, RetryRequest, RetryResponse};
use crate::report::RetryReport;
use ::reqwest::{Error, Request, Response};
use http::uri::Authority;
use http::{HeaderMap, Method, StatusCode};
use std::borrow::Cow;

impl RequestHead for Request {
    fn method(&self) -> &Method {
        Request::method(self)
    }

    fn headers(&self) -> &HeaderMap {
        Request::headers(self)
    }

    fn headers_mut(&mut self) -> &mut HeaderMap {
        Request::headers_mut(self)
    }

    /// `host:port` of the URL (the port only when the URL has one), as an `http::Request`'s URI
    /// would write it. Made on each call: a URL keeps no `Authority`.
    fn authority(&self) -> Option<Cow<'_, Authority>> {
        let url = self.url();
        let host = url.host_str()?;
        let authority = match url.port() {
            Some(port) => Authority::try_from(format!("{host}:{port}")),
            None => Authority::try_from(host),
        };
        authority.ok().map(Cow::Owned)
    }
}

impl RetryRequest for Request {
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

    fn report(&self) -> Option<&RetryReport> {
        self.extensions().get()
    }
}

impl AsStdError for Error {
    fn as_std_error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self)
    }
}
