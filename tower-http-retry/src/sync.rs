//! The atomics behind the crate's lock-free state, in one place so that a model check can swap
//! them for loom's, which explore every interleaving and every value the memory orderings allow
//! a load to return. See the `loom-model` crate's `tests/loom.rs` for how to run it.
//!
//! The switch is a cfg of this crate's own, not the usual `--cfg loom`: that one also changes
//! tokio, which then has no `tokio::net` and breaks the dev-dependencies built on it.
//! `Arc` is not swapped: it appears in public signatures, which must not change under a model.

#[cfg(all(tower_http_retry_loom, feature = "loom"))]
pub(crate) mod atomic {
    // The crate's whole set of atomic types; not every module goes through here yet.
    #[allow(unused_imports)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
}

#[cfg(not(all(tower_http_retry_loom, feature = "loom")))]
pub(crate) mod atomic {
    #[allow(unused_imports)]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
}
