//! With the `tracing` feature: every attempt runs in a span of its own, from the call of the
//! inner service to the end of its future, carrying OpenTelemetry's HTTP client attributes.

use crate::message::{RequestHead, RetryResponse};
use pin_project_lite::pin_project;
use std::any::{type_name, Any};
use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tower::BoxError;
use tracing::field::Empty;
use tracing::Span;

pin_project! {
    /// The future of one attempt: the inner service's, polled inside the attempt's span.
    pub(crate) struct Attempt<F> {
        #[pin]
        future: F,
        span: Span,
    }
}

/// The span of an attempt being handed to the inner service, entered: the inner layers' own
/// spans and events, from the call on, are the attempt's children. Made by [`enter_attempt`]
/// before the call (the request is borrowed, not moved through a closure: a move is a copy),
/// attached to the attempt's future after it ([`attach`](Self::attach)).
pub(crate) struct AttemptSpan(tracing::span::EnteredSpan);

/// Enters a new `attempt` span for `request`'s attempt numbered `number` (from 1): `attempt`,
/// `http.request.method`, `server.address`, `server.port`, `http.request.resend_count` (on
/// retries only, as the OpenTelemetry HTTP conventions say: `number - 1`) and, once the attempt
/// ends, `http.response.status_code` or `error.type`.
pub(crate) fn enter_attempt<Req: RequestHead>(request: &Req, number: u32) -> AttemptSpan {
    // The field values are evaluated only when a subscriber wants the span.
    let span = tracing::info_span!(
        target: "tower_http_retry",
        "attempt",
        attempt = number,
        http.request.method = request.method().as_str(),
        server.address = Empty,
        server.port = Empty,
        http.request.resend_count = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
    );
    // Checked first: the authority of a request without one in its URI is parsed from `Host`.
    if !span.is_disabled() {
        if let Some(authority) = request.authority() {
            span.record("server.address", authority.host());
            if let Some(port) = authority.port_u16() {
                span.record("server.port", port);
            }
        }
        if number > 1 {
            span.record("http.request.resend_count", number - 1);
        }
    }
    AttemptSpan(span.entered())
}

impl AttemptSpan {
    /// Leaves the span, which the attempt's future is then polled in.
    pub(crate) fn attach<F>(self, future: F) -> Attempt<F> {
        Attempt {
            future,
            span: self.0.exit(),
        }
    }
}

/// The span of an attempt that ended, entered again while the retry layer decides on its
/// outcome: the decision's events (a delay chosen, the stop) are the attempt's. Left when
/// dropped, before any wait.
pub(crate) struct InAttempt {
    _entered: tracing::span::EnteredSpan,
}

/// The span of an attempt that ended, for the decision on its outcome to enter if it takes one
/// (a success at the first try takes none).
pub(crate) struct EndedSpan<'a>(&'a tracing::Span);

/// `attempt`'s span, to be entered for the decision on its outcome.
#[inline]
pub(crate) fn ended_span<F>(attempt: &Attempt<F>) -> EndedSpan<'_> {
    EndedSpan(&attempt.span)
}

impl EndedSpan<'_> {
    /// Enters the span again.
    pub(crate) fn enter(&self) -> InAttempt {
        InAttempt {
            _entered: self.0.clone().entered(),
        }
    }
}

impl<F, Res, E> Future for Attempt<F>
where
    F: Future<Output = Result<Res, E>>,
    Res: RetryResponse,
    E: 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let output = ready!(this.future.poll(cx));
        match &output {
            Ok(response) => this
                .span
                .record("http.response.status_code", response.status().as_u16()),
            Err(error) => this.span.record("error.type", error_type(error)),
        };
        Poll::Ready(output)
    }
}

/// The `error.type` of an attempt's error, a bounded set as the convention asks: `E`'s name, or,
/// for a boxed error, the name of the first error along its `source()` chain of a type the
/// middlewares know (a breaker's refusal, a timeout, the transport's); `_OTHER`, the
/// convention's value for an error it cannot name, otherwise (never `Box<dyn Error>`).
fn error_type<E: 'static>(error: &E) -> &'static str {
    let error: &dyn Any = error;
    let boxed: &(dyn Error + 'static) = if let Some(boxed) = error.downcast_ref::<BoxError>() {
        &**boxed
    } else if let Some(boxed) = error.downcast_ref::<Box<dyn Error + Send>>() {
        &**boxed
    } else if let Some(boxed) = error.downcast_ref::<Box<dyn Error>>() {
        &**boxed
    } else {
        return type_name::<E>();
    };
    let mut link = Some(boxed);
    while let Some(error) = link {
        if let Some(name) = known_type(error) {
            return name;
        }
        link = error.source();
    }
    "_OTHER"
}

/// The name of `error`'s type, by its public path, if it is one the middlewares know.
fn known_type(error: &(dyn Error + 'static)) -> Option<&'static str> {
    use crate::error::CircuitOpen;
    use crate::report::Unsent;
    use tower::timeout::error::Elapsed;
    named::<CircuitOpen>(error, "tower_http_retry::circuit_breaker::CircuitOpen")
        .or_else(|| named::<Elapsed>(error, "tower::timeout::error::Elapsed"))
        .or_else(|| named::<Unsent>(error, "tower_http_retry::report::Unsent"))
        .or_else(|| hyper_type(error))
        .or_else(|| named::<std::io::Error>(error, "std::io::Error"))
}

/// `name` if `error` is a `T`.
fn named<T: Error + 'static>(
    error: &(dyn Error + 'static),
    name: &'static str,
) -> Option<&'static str> {
    error.is::<T>().then_some(name)
}

#[cfg(feature = "hyper")]
fn hyper_type(error: &(dyn Error + 'static)) -> Option<&'static str> {
    named::<hyper_util::client::legacy::Error>(error, "hyper_util::client::legacy::Error")
        .or_else(|| named::<hyper::Error>(error, "hyper::Error"))
        .or_else(|| named::<h2::Error>(error, "h2::Error"))
}

#[cfg(not(feature = "hyper"))]
fn hyper_type(_: &(dyn Error + 'static)) -> Option<&'static str> {
    None
}

#[cfg(test)]
mod tests {
    use super::error_type;
    use tower::BoxError;

    #[derive(Debug)]
    struct Mine;

    impl std::fmt::Display for Mine {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("mine")
        }
    }

    impl std::error::Error for Mine {}

    #[test]
    fn a_boxed_error_is_named_by_the_type_inside_never_the_box() {
        let timeout: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        assert_eq!(error_type(&timeout), "tower::timeout::error::Elapsed");
        let refused: BoxError =
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(error_type(&refused), "std::io::Error");
        let unknown: BoxError = Box::new(Mine);
        assert_eq!(error_type(&unknown), "_OTHER");
        assert_eq!(error_type(&Mine), std::any::type_name::<Mine>());
    }
}
