//! Where each request session gets its random stream.

use rand::rngs::SmallRng;
use rand::{Rng, RngExt, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The source of the per-request random streams that jitter is drawn from.
///
/// Every request session that needs randomness gets a stream of its own, seeded separately, so
/// two requests that fail at the same instant draw different delays. (Cloning one generator into
/// every session, as `tower::retry::backoff::ExponentialBackoffMaker` does, hands each request the
/// same "random" sequence: the herd stays synchronised.)
///
/// The default seeds each stream from the thread-local generator. [`seeded`](Self::seeded) makes
/// runs reproducible: the n-th stream handed out is always the same.
///
/// ```
/// use tower_http_retry::retry::RandomSource;
///
/// let reproducible = RandomSource::seeded(42);
/// let production = RandomSource::default();
/// # let _ = (reproducible, production);
/// ```
#[derive(Clone, Debug, Default)]
pub struct RandomSource {
    next_seed: Option<Arc<AtomicU64>>,
}

/// An odd constant (2^64 / golden ratio): consecutive seeds land far apart.
const SEED_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

impl RandomSource {
    /// Streams seeded from the thread-local generator (the default).
    pub fn from_entropy() -> Self {
        Self::default()
    }

    /// Streams derived from `seed`, in the order they are handed out.
    pub fn seeded(seed: u64) -> Self {
        Self {
            next_seed: Some(Arc::new(AtomicU64::new(seed))),
        }
    }

    /// A new, independent stream for one request session.
    pub(crate) fn stream(&self) -> SmallRng {
        match &self.next_seed {
            Some(next) => SmallRng::seed_from_u64(next.fetch_add(SEED_STEP, Ordering::Relaxed)),
            None => SmallRng::from_rng(&mut rand::rng()),
        }
    }
}

/// `U(low, high)`, the bounds included up to rounding; `low` when `high <= low`.
pub(crate) fn uniform<R: Rng + ?Sized>(low: Duration, high: Duration, rng: &mut R) -> Duration {
    let span = high.saturating_sub(low);
    if span.is_zero() {
        return low;
    }
    let fraction: f64 = rng.random();
    uniform_at(low, high, fraction)
}

/// The point `fraction` (in `[0, 1)`) of the way from `low` to `high`: what [`uniform`] returns
/// for that draw. (A fleet's shared state is given the draw, not the generator.)
pub(crate) fn uniform_at(low: Duration, high: Duration, fraction: f64) -> Duration {
    let span = high.saturating_sub(low);
    low + span.mul_f64(fraction).min(span)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn each_stream_differs() {
        for source in [RandomSource::default(), RandomSource::seeded(1)] {
            let a = source.stream().next_u64();
            let b = source.stream().next_u64();
            assert_ne!(a, b);
        }
    }

    #[test]
    fn seeded_sources_repeat() {
        let first: Vec<u64> = (0..3)
            .map(|_| RandomSource::seeded(9).stream().next_u64())
            .collect();
        let again = RandomSource::seeded(9);
        let second: Vec<u64> = (0..3).map(|_| again.stream().next_u64()).collect();
        assert_eq!(first[0], second[0]);
        assert_ne!(second[0], second[1]);
    }
}
