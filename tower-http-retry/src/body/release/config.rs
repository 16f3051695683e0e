//! The configuration every clone of a [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer), and
//! every service and future it makes, shares.

#[derive(Debug)]
pub(super) struct Config<C> {
    pub(super) classifier: C,
    /// The most bytes of a transient body kept.
    pub(super) limit: usize,
}
