//! Retry layers inside retry layers: who retries.

use std::cell::Cell;

/// What a retry layer does when another retry layer wraps it in the same process (an SDK's
/// retry layer under the application's): retrying at both would multiply the attempts (3 per
/// layer over 3 layers is 27 calls for one request).
///
/// With [`Defer`](Self::Defer), the default, a layer that may retry says so to everything it
/// calls and polls, and a layer that receives a request while an outer one is calling sends it
/// once and leaves the retrying to the outer layer, with
/// [`StopReason::Delegated`](crate::StopReason::Delegated) in its report. So the outermost
/// layer's policy, budget and report are the ones that count.
///
/// The mark is scoped to the outer layer's `call` and to the polls of the future it returned,
/// on the same task: it reaches an inner layer through any stack of middlewares that call their
/// inner service from their own `call` or future (timeouts, maps, an SDK's `async` wrapper, a
/// request converted to another type), and costs no allocation. It does not cross a task: an
/// inner layer behind a `tower::buffer::Buffer` or a spawned task retries on its own.
///
/// ```
/// use tower_http_retry::RetryLayer;
/// use tower_http_retry::retry::NestedLayers;
///
/// // An inner layer that keeps retrying on its own, whoever wraps it.
/// let layer = RetryLayer::builder().nested_layers(NestedLayers::Independent).build();
/// # let _ = layer;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NestedLayers {
    /// Say to the inner layers that this one retries; send a request once when an outer layer
    /// retries it.
    #[default]
    Defer,
    /// Neither: this layer retries whatever wraps it, and lets the layers inside it retry too.
    Independent,
}

thread_local! {
    /// Set while a retry layer that may retry calls or polls its inner service.
    static RETRIED_OUTSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether an outer retry layer is calling or polling right now.
#[inline]
pub(crate) fn retried_outside() -> bool {
    RETRIED_OUTSIDE.with(Cell::get)
}

/// Runs `f` (a call or a poll of the inner service) with the inner layers' mark set to `mark`:
/// `Some(true)` tells them this layer retries, `Some(false)` lets them retry on their own, and
/// `None` leaves whatever an outer layer said.
#[inline]
pub(crate) fn retrying<R>(mark: Option<bool>, f: impl FnOnce() -> R) -> R {
    let _restore = mark_inner(mark);
    f()
}

/// Sets the inner layers' mark to `mark` (as [`retrying`] does) until the guard is dropped: for
/// a call whose request would otherwise be moved into a closure first (a copy, it is large).
#[inline]
pub(crate) fn mark_inner(mark: Option<bool>) -> Option<Restore> {
    let mark = mark?;
    Some(Restore(RETRIED_OUTSIDE.with(|cell| cell.replace(mark))))
}

/// Puts the previous mark back, even if the call or poll panics.
pub(crate) struct Restore(bool);

impl Drop for Restore {
    #[inline]
    fn drop(&mut self) {
        RETRIED_OUTSIDE.with(|cell| cell.set(self.0));
    }
}
