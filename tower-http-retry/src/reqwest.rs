//! reqwest's types as the middlewares' request, response and error (feature `reqwest`); the
//! user-facing text is on [`RetryLayer`](crate::RetryLayer#retrying-reqwest).

use crate::classify::AsStdError;
use crate::message::{RequestHead, RetryRequest, RetryResponse};
use ::reqwest::{Error, Request, Response};
use http::uri::Authority;
use http::{Extensions, HeaderMap, Method, StatusCode};
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

    fn extensions(&self) -> &Extensions {
        Response::extensions(self)
    }

    fn extensions_mut(&mut self) -> &mut Extensions {
        Response::extensions_mut(self)
    }
}

impl AsStdError for Error {
    fn as_std_error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self)
    }
}
