//! [`FailUnsent`]: a classifier that hands back, as the service's error, the requests the
//! retry layer did not send.

use super::{Ask, Classify, Outcome, Signals};
use crate::message::RetryResponse;
use crate::report::Unsent;
use http::Method;

/// Wraps a classifier so that a request the retry layer did not send ([`Unsent`]: a new request
/// to an endpoint known to be down whose wait would pass its deadline) is handed back as
/// `Err(unsent.into())`, for any error type that implements `From<Unsent>` (`tower::BoxError`
/// does, as after `tower::timeout`). Everything else is the wrapped classifier's. Made by
/// [`RetryLayerBuilder::fail_unsent`](crate::retry::RetryLayerBuilder::fail_unsent); a stack whose
/// error type cannot hold an `Unsent` (hyper-util's client error) does not compile with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailUnsent<C>(C);

impl<C> FailUnsent<C> {
    /// Wraps `classifier`.
    pub const fn new(classifier: C) -> Self {
        Self(classifier)
    }

    /// The wrapped classifier.
    pub fn get_ref(&self) -> &C {
        &self.0
    }

    /// The wrapped classifier, owned.
    pub fn into_inner(self) -> C {
        self.0
    }
}

impl<Res, E, C> Classify<Res, E> for FailUnsent<C>
where
    C: Classify<Res, E>,
    E: From<Unsent>,
{
    fn classify_response(&self, response: &Res) -> Outcome {
        self.0.classify_response(response)
    }

    fn classify_error(&self, error: &E) -> Outcome {
        self.0.classify_error(error)
    }

    fn signals(&self, result: &Result<Res, E>, ask: &Ask<'_>) -> Signals
    where
        Res: RetryResponse,
    {
        self.0.signals(result, ask)
    }

    fn classify(&self, method: &Method, result: &Result<Res, E>) -> Outcome {
        self.0.classify(method, result)
    }

    fn unsent(&self) -> Option<fn(Unsent) -> Result<Res, E>> {
        Some(|unsent| Err(E::from(unsent)))
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
        let classifier = FailUnsent::new(HttpClassifier::new());
        let make = Classify::<Res, BoxError>::unsent(&classifier).expect("it hands back");
        let mut report = RetryReport::FIRST_TRY;
        report.attempts = 0;
        report.stop = StopReason::Deferred;
        let Err(error) = make(Unsent::new(report.clone())) else {
            panic!("an error")
        };
        assert_eq!(error.downcast_ref::<Unsent>().unwrap().report(), &report);
    }

    #[test]
    fn everything_else_is_the_wrapped_classifiers() {
        let classifier = FailUnsent::new(HttpClassifier::new());
        let unavailable: Result<Res, BoxError> =
            Ok(http::Response::builder().status(503).body(()).unwrap());
        assert_eq!(
            classifier.classify(&Method::GET, &unavailable),
            Outcome::Transient
        );
        assert!(Classify::<Res, BoxError>::unsent(&HttpClassifier::new()).is_none());
    }
}
