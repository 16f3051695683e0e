//! Without the `tracing` feature: an attempt is the inner service's future itself.

use crate::message::RequestHead;

/// The future of one attempt: without the `tracing` feature, the inner service's own.
pub(crate) type Attempt<F> = F;

/// The span of an attempt being handed to the inner service: without the `tracing` feature,
/// nothing.
pub(crate) struct AttemptSpan;

/// Enters the span of `request`'s attempt numbered `number`: nothing to enter.
#[inline(always)]
pub(crate) fn enter_attempt<Req: RequestHead>(_request: &Req, _number: u32) -> AttemptSpan {
    AttemptSpan
}

impl AttemptSpan {
    /// The attempt's future: the inner service's own.
    #[inline(always)]
    pub(crate) fn attach<F>(self, future: F) -> Attempt<F> {
        future
    }
}

/// The span of an attempt that ended, entered for the decision on its outcome: nothing.
pub(crate) struct InAttempt;

/// The span of an attempt that ended: nothing.
pub(crate) struct EndedSpan<'a>(std::marker::PhantomData<&'a ()>);

/// An ended attempt's span: nothing.
#[inline(always)]
pub(crate) fn ended_span<F>(_attempt: &F) -> EndedSpan<'_> {
    EndedSpan(std::marker::PhantomData)
}

impl EndedSpan<'_> {
    /// Enters nothing.
    #[inline(always)]
    pub(crate) fn enter(&self) -> InAttempt {
        InAttempt
    }
}
