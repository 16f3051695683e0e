//! What the layer returns for a request it did not send: [`HandBack`], a setting of the layer
//! ([`RetryLayerBuilder::hand_back`](super::RetryLayerBuilder::hand_back)), with its two common
//! values: [`SendAnyway`], the default, and [`FailUnsent`].

use crate::classify::{Ask, Classify, Outcome, Signals};
use crate::message::RetryResponse;
use crate::report::Unsent;
use http::Method;

/// What the retry layer returns for a request it did not send ([`Unsent`]: a new request to an
/// endpoint that [pacing](crate::Pacing) knows is down or paused, whose predicted wait is beyond
/// its deadline or whose queue is full). The layer has no response or error of its own for it:
/// `Some(make)` from [`hand_back`](Self::hand_back) returns `make(unsent)` at once, and nothing
/// reaches the endpoint; `None` sends the request once, as any first attempt.
///
/// A setting of the layer, beside its classifier: [`SendAnyway`] by default, [`FailUnsent`] with
/// [`fail_unsent`](super::RetryLayerBuilder::fail_unsent). A client whose error type cannot hold
/// an `Unsent` (hyper-util's) can hand back a response of its own instead:
///
/// ```
/// use tower_http_retry::report::Unsent;
/// use tower_http_retry::retry::HandBack;
/// use tower_http_retry::RetryLayer;
///
/// /// A request the layer did not send comes back as a 503 that says when to try again.
/// struct Synthetic503;
///
/// impl<E> HandBack<http::Response<String>, E> for Synthetic503 {
///     fn hand_back(&self) -> Option<fn(Unsent) -> Result<http::Response<String>, E>> {
///         Some(|unsent| {
///             let after = unsent.resend_after().unwrap_or_default().as_secs().max(1);
///             Ok(http::Response::builder()
///                 .status(503)
///                 .header(http::header::RETRY_AFTER, after)
///                 .body(String::new())
///                 .expect("a valid response"))
///         })
///     }
/// }
///
/// let layer = RetryLayer::builder().hand_back(Synthetic503).build().unwrap();
/// # let _ = layer;
/// ```
pub trait HandBack<Res, E> {
    /// How to make the output for a request the layer did not send, or `None` to send it.
    fn hand_back(&self) -> Option<fn(Unsent) -> Result<Res, E>>;
}

/// The default [`HandBack`]: a request the layer would not send is sent once, as any first
/// attempt (the layer has no output of its own for it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendAnyway;

impl<Res, E> HandBack<Res, E> for SendAnyway {
    fn hand_back(&self) -> Option<fn(Unsent) -> Result<Res, E>> {
        None
    }
}

/// Hands a request the layer did not send back as the service's error, `Err(unsent.into())`,
/// for any error type that implements `From<Unsent>` (`tower::BoxError` does, as after
/// `tower::timeout`); a stack whose error type cannot hold one (hyper-util's client error) does
/// not compile with it. Set by
/// [`RetryLayerBuilder::fail_unsent`](super::RetryLayerBuilder::fail_unsent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailUnsent;

impl<Res, E: From<Unsent>> HandBack<Res, E> for FailUnsent {
    fn hand_back(&self) -> Option<fn(Unsent) -> Result<Res, E>> {
        Some(|unsent| Err(E::from(unsent)))
    }
}

/// The layer's classifier and its hand-back, as a request's session reads them: the
/// classification is the classifier's.
#[derive(Clone, Debug)]
pub(crate) struct Sorting<C, H> {
    classifier: C,
    hand_back: H,
}

impl<C, H> Sorting<C, H> {
    pub(crate) fn new(classifier: C, hand_back: H) -> Self {
        Self {
            classifier,
            hand_back,
        }
    }
}

impl<Res, E, C: Classify<Res, E>, H> Classify<Res, E> for Sorting<C, H> {
    #[inline]
    fn classify_response(&self, response: &Res) -> Outcome {
        self.classifier.classify_response(response)
    }

    #[inline]
    fn classify_error(&self, error: &E) -> Outcome {
        self.classifier.classify_error(error)
    }

    #[inline]
    fn signals(&self, result: &Result<Res, E>, ask: &Ask<'_>) -> Signals
    where
        Res: RetryResponse,
    {
        self.classifier.signals(result, ask)
    }

    #[inline]
    fn classify(&self, method: &Method, result: &Result<Res, E>) -> Outcome {
        self.classifier.classify(method, result)
    }
}

impl<Res, E, C, H: HandBack<Res, E>> HandBack<Res, E> for Sorting<C, H> {
    fn hand_back(&self) -> Option<fn(Unsent) -> Result<Res, E>> {
        self.hand_back.hand_back()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::HttpClassifier;
    use crate::report::{RetryReport, StopReason};
    use tower::BoxError;

    type Res = http::Response<()>;

    #[test]
    fn an_unsent_request_is_handed_back_as_the_error() {
        let make = HandBack::<Res, BoxError>::hand_back(&FailUnsent).expect("it hands back");
        let mut report = RetryReport::FIRST_TRY;
        report.attempts = 0;
        report.stop = StopReason::Deferred;
        let Err(error) = make(Unsent::new(report.clone())) else {
            panic!("an error")
        };
        assert_eq!(error.downcast_ref::<Unsent>().unwrap().report(), &report);
    }

    #[test]
    fn the_classification_is_the_classifiers_and_the_default_sends_it() {
        let sorting = Sorting::new(HttpClassifier::new(), SendAnyway);
        let unavailable: Result<Res, BoxError> =
            Ok(http::Response::builder().status(503).body(()).unwrap());
        assert_eq!(
            sorting.classify(&Method::GET, &unavailable),
            Outcome::Transient
        );
        assert!(HandBack::<Res, BoxError>::hand_back(&sorting).is_none());
    }
}
