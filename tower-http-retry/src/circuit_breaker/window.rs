//! The sliding window of calls and failures behind the failure-ratio trip.
//!
//! The window is `BUCKETS` buckets of `window / BUCKETS` each, in a ring; a bucket is reused
//! when its slot comes round again. Counts are atomics so that a success, the common case, is
//! counted without the breaker's lock: one load of the bucket's epoch and one increment. Failures
//! and the reuse of a bucket (resetting it for a new epoch) happen under the lock, which makes
//! them one writer at a time; a success racing a reset lands in the bucket either side of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The window is kept in this many buckets; it slides one bucket at a time.
pub(crate) const BUCKETS: usize = 10;

pub(crate) struct Window {
    bucket_nanos: u64,
    buckets: [Bucket; BUCKETS],
}

#[derive(Default)]
struct Bucket {
    /// The epoch the counts belong to; 0 for a bucket never used (epochs start at 1).
    epoch: AtomicU64,
    calls: AtomicU64,
    failures: AtomicU64,
}

impl Window {
    pub(crate) fn new(window: Duration) -> Self {
        let bucket = window / BUCKETS as u32;
        Self {
            bucket_nanos: u64::try_from(bucket.as_nanos()).unwrap_or(u64::MAX).max(1),
            buckets: Default::default(),
        }
    }

    /// The bucket number of a time given in nanoseconds after the breaker's origin.
    pub(crate) fn epoch(&self, nanos: u64) -> u64 {
        nanos / self.bucket_nanos + 1
    }

    fn bucket(&self, epoch: u64) -> &Bucket {
        &self.buckets[(epoch % BUCKETS as u64) as usize]
    }

    /// Counts a success without the lock, if the bucket already belongs to `epoch`. Returns
    /// `false` when the bucket must first be reset: the caller then takes the lock and calls
    /// [`add`](Self::add).
    pub(crate) fn try_add_success(&self, epoch: u64) -> bool {
        let bucket = self.bucket(epoch);
        if bucket.epoch.load(Ordering::Acquire) != epoch {
            return false;
        }
        bucket.calls.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Counts a call; under the breaker's lock.
    pub(crate) fn add(&self, epoch: u64, failed: bool) {
        let bucket = self.bucket(epoch);
        // A caller that read the clock a little earlier than the last writer joins the newer
        // bucket rather than wiping it.
        if bucket.epoch.load(Ordering::Acquire) < epoch {
            bucket.calls.store(0, Ordering::Relaxed);
            bucket.failures.store(0, Ordering::Relaxed);
            // Published last: a lock-free success that sees the new epoch sees the reset counts.
            bucket.epoch.store(epoch, Ordering::Release);
        }
        bucket.calls.fetch_add(1, Ordering::Relaxed);
        if failed {
            bucket.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `(calls, failures)` in the buckets of the window that ends in `epoch`.
    pub(crate) fn totals(&self, epoch: u64) -> (u64, u64) {
        self.buckets
            .iter()
            .filter(|b| {
                let at = b.epoch.load(Ordering::Acquire);
                at != 0 && epoch.saturating_sub(at) < BUCKETS as u64
            })
            .fold((0, 0), |(calls, failures), b| {
                (
                    calls + b.calls.load(Ordering::Relaxed),
                    failures + b.failures.load(Ordering::Relaxed),
                )
            })
    }

    /// Forgets everything; under the breaker's lock.
    pub(crate) fn clear(&self) {
        for bucket in &self.buckets {
            bucket.epoch.store(0, Ordering::Release);
            bucket.calls.store(0, Ordering::Relaxed);
            bucket.failures.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn buckets_older_than_the_window_are_forgotten() {
        let w = Window::new(10 * SEC);
        w.add(1, true);
        w.add(5, false);
        assert_eq!(w.totals(10), (2, 1));
        assert_eq!(w.totals(11), (1, 0), "epoch 1 left the window");
        w.add(11, true);
        assert_eq!(w.totals(11), (2, 1), "epoch 11 reused epoch 1's bucket");
        assert_eq!(w.totals(30), (0, 0));
    }

    #[test]
    fn a_success_needs_the_lock_only_to_start_a_bucket() {
        let w = Window::new(10 * SEC);
        assert!(!w.try_add_success(3), "bucket 3 is not started");
        w.add(3, false);
        assert!(w.try_add_success(3));
        assert!(!w.try_add_success(13), "slot 3 belongs to epoch 3");
        assert_eq!(w.totals(3), (2, 0));
    }

    #[test]
    fn an_older_epoch_joins_the_newer_bucket() {
        let w = Window::new(10 * SEC);
        w.add(13, true);
        w.add(3, false);
        assert_eq!(w.totals(13), (2, 1));
    }

    #[test]
    fn clear_forgets_everything() {
        let w = Window::new(10 * SEC);
        w.add(2, true);
        w.clear();
        assert_eq!(w.totals(2), (0, 0));
        assert!(!w.try_add_success(2));
    }
}
