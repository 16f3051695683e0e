//! Without the `tracing` feature: an attempt is the inner service's future itself.

use crate::message::RequestHead;

/// The future of one attempt: without the `tracing` feature, the inner service's own.
pub(crate) type Attempt<F> = F;

/// Sends `request` (the attempt numbered `number`) with `call`.
#[inline(always)]
pub(crate) fn send<Req: RequestHead, F>(
    request: Req,
    _number: u32,
    call: impl FnOnce(Req) -> F,
) -> Attempt<F> {
    call(request)
}
