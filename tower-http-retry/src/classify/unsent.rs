//! [`FailUnsent`]: a classifier that hands back, as the service's error, the requests the
//! retry layer did not send.

use super::{Classify, Outcome};
use crate::hint::ServerHint;
use crate::message::RetryResponse;
use crate::report::Unsent;
use http::Method;
use std::time::{Duration, SystemTime};

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

    fn refused_for(&self, error: &E) -> Option<Duration> {
        self.0.refused_for(error)
    }

    fn unknown_error(&self, error: &E) -> Option<String> {
        self.0.unknown_error(error)
    }

    fn is_rotation(&self, error: &E) -> bool {
        self.0.is_rotation(error)
    }

    fn hint(&self, response: &Res, now: SystemTime) -> ServerHint
    where
        Res: RetryResponse,
    {
        self.0.hint(response, now)
    }

    fn quota_reset(&self, response: &Res, now: &dyn Fn() -> SystemTime) -> Option<Duration>
    where
        Res: RetryResponse,
    {
        self.0.quota_reset(response, now)
    }

    fn is_congestion(&self, response: &Res, statuses: &[http::StatusCode]) -> bool
    where
        Res: RetryResponse,
    {
        self.0.is_congestion(response, statuses)
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
