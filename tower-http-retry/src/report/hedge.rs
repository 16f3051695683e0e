//! [`HedgeReport`]: which copy of a hedged request answered. Its `of` is in `message.rs`, as
//! [`RetryReport::of`](crate::RetryReport::of) is.

/// Which copy of a request answered, when the [`HedgeLayer`](crate::hedge::HedgeLayer) sent
/// more than one: attached to the response's extensions (read it with [`HedgeReport::of`]). A
/// response of a request sent once carries none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct HedgeReport {
    /// Copies sent, the first included.
    pub copies: u32,
    /// The copy that answered: 0 for the first, 1 for the first hedge, and so on.
    pub winner: u32,
}

impl HedgeReport {
    pub(crate) fn new(copies: u32, winner: u32) -> Self {
        Self { copies, winner }
    }
}
