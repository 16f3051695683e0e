//! Cells shared by every clone of a layer, and the histogram of realised delays. Each recording
//! method is also where [telemetry](crate::telemetry) is emitted.

use crate::report::{DelaySource, StopReason};
use crate::telemetry;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

const COLUMNS: usize = DelayHistogram::BUCKETS.len() + 1;

/// The live counters of a [`RetryLayer`](crate::RetryLayer), shared by all its clones. Updating
/// them costs a relaxed atomic increment; [`RetryLayer::stats`](crate::RetryLayer::stats) reads
/// them into a [`RetryStats`].
#[derive(Clone, Default)]
pub(crate) struct Counters {
    counters: Arc<Cells>,
    /// The keys the layer's metrics are recorded under (feature `metrics`).
    labels: telemetry::Labels,
}

#[derive(Default)]
struct Cells {
    attempts: AtomicU64,
    retries: AtomicU64,
    retry_after_seen: AtomicU64,
    retry_after_clamped: AtomicU64,
    retry_after_malformed: AtomicU64,
    quota_paused: AtomicU64,
    budget_denied: AtomicU64,
    budget_granted: AtomicU64,
    budget_refunded: AtomicU64,
    rotation_resends: AtomicU64,
    unproven_rotations: AtomicU64,
    unknown_errors: AtomicU64,
    stops: [AtomicU64; StopReason::ALL.len()],
    delays: [[AtomicU64; COLUMNS]; DelayHistogram::ROWS],
}

/// The counters of a [`RetryLayer`](crate::RetryLayer) and every clone of it, copied at one
/// point in time by [`RetryLayer::stats`](crate::RetryLayer::stats) (or
/// [`Retry::stats`](crate::retry::Retry::stats)).
///
/// ```
/// use tower_http_retry::RetryLayer;
///
/// let layer = RetryLayer::new();
/// let stats = layer.stats();
/// assert_eq!(stats.requests, 0);
/// ```
///
/// Its `Debug` output names everything: `stops` as a map from each reason's
/// [name](StopReason::as_str) to its count (reasons never seen left out), and `delays` as a map
/// from retry number to the counts of the buckets that have any.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryStats {
    /// Logical requests finished, cancelled ones included (the sum of `stops`).
    pub requests: u64,
    /// Attempts sent, first attempts included.
    pub attempts: u64,
    /// Retries sent (attempts after the first).
    pub retries: u64,
    /// Transient responses that carried a valid "come back in" hint (`Retry-After`, or a rate-limit
    /// or protocol header the classifier reads, see [`ServerHint`](crate::hint::ServerHint)) and
    /// were otherwise eligible for a retry (counted before the deadline and the budget are asked,
    /// so it may exceed the hints actually slept on).
    pub retry_after_seen: u64,
    /// Hints cut to the clamp (or refused, with `WhenLonger::GiveUp`).
    pub retry_after_clamped: u64,
    /// Responses with a hint header that could not be parsed, counted where a hint would have
    /// been used (a retry was going to follow; the backoff policy decided instead). Not counted
    /// with hints turned off
    /// ([`without_hint_delays`](crate::retry::RetryLayerBuilder::without_hint_delays)).
    pub retry_after_malformed: u64,
    /// Successful responses that said their quota was used up (a rate-limit header with nothing
    /// remaining) and paused their endpoint until its reset; with [pacing](crate::Pacing) only.
    pub quota_paused: u64,
    /// Retries (and hedges charged to this layer's budget) refused by the budget.
    pub budget_denied: u64,
    /// Tokens the budget granted for retries, and for the hedges of a
    /// [`HedgeLayer`](crate::hedge::HedgeLayer) charged to this layer's budget
    /// ([`retry_layer`](crate::hedge::HedgeLayerBuilder::retry_layer)). Each is either spent on a retry
    /// or a hedge that was sent, or refunded, so `budget_granted - budget_refunded == retries +
    /// hedges` once no request is waiting.
    pub budget_granted: u64,
    /// Budget tokens given back because a sleep was abandoned, or a hedge charged to this
    /// layer's budget was not sent (counted whatever the budget does
    /// with a refund: `tower`'s `TpsBudget` cannot take one back).
    pub budget_refunded: u64,
    /// Requests sent again because the server turned them away unprocessed
    /// ([`NotSent::Refused`](crate::classify::NotSent::Refused): a `GOAWAY` above their stream, a
    /// `REFUSED_STREAM`, a connection that ended before they were written), free of attempts,
    /// budget and breaker: what connection rotation costs.
    pub rotation_resends: u64,
    /// Attempts turned away by a connection rotation without proof that the server did not
    /// process them ([`Signals::rotation`](crate::classify::Signals::rotation): a `GOAWAY`
    /// delivered through hyper's HTTP/2 client): sent again as rotation when the request may be
    /// repeated (then also in `rotation_resends`), stopped otherwise. A count that grows beside
    /// `NotIdempotent` stops says the client should be the rotation-safe client of
    /// `tower-http-retry-hyper` (its connections are marked
    /// [`SerialDispatch`](crate::classify::SerialDispatch)).
    pub unproven_rotations: u64,
    /// Errors no rule of the classifier recognised, whatever it then decided for them (see
    /// [`HttpClassifier::unknown_errors`](crate::HttpClassifier::unknown_errors)). A count that
    /// grows says a new error kind needs a rule; the report of each such request names the
    /// error's kind in the `tracing` event of its decision.
    pub unknown_errors: u64,
    /// Finished requests per [`StopReason`], in the order of [`StopReason::ALL`].
    pub stops: [u64; StopReason::ALL.len()],
    /// Realised delays per retry number, counted when each sleep ends (an aborted sleep with the
    /// time it lasted; a sleep abandoned by dropping the response future not at all).
    pub delays: DelayHistogram,
}

impl RetryStats {
    /// Finished requests that stopped for `reason`.
    pub fn stopped(&self, reason: StopReason) -> u64 {
        self.stops[reason.index()]
    }
}

/// Counts of realised delays: one row per retry number (1 to 8, then 9 and later), one column per
/// bucket of [`DelayHistogram::BUCKETS`] plus a last, open-ended one. `Debug` labels each row and
/// bucket and leaves the empty ones out; `Display` prints a table.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DelayHistogram {
    rows: [[u64; COLUMNS]; DelayHistogram::ROWS],
}

impl DelayHistogram {
    /// Upper bounds (inclusive) of the delay histogram's buckets; the last bucket is open.
    pub const BUCKETS: [Duration; 16] = {
        const fn ms(n: u64) -> Duration {
            Duration::from_millis(n)
        }
        [
            ms(1),
            ms(2),
            ms(5),
            ms(10),
            ms(20),
            ms(50),
            ms(100),
            ms(200),
            ms(500),
            ms(1_000),
            ms(2_000),
            ms(5_000),
            ms(10_000),
            ms(20_000),
            ms(30_000),
            ms(60_000),
        ]
    };

    /// Rows of the histogram: retries 1 to 8, and one row for retry 9 and later.
    pub const ROWS: usize = 9;

    /// The counts for retry number `retry` (1-based; 9 and later share a row).
    pub fn row(&self, retry: u32) -> &[u64] {
        &self.rows[row_of(retry)]
    }

    /// How many delays were recorded.
    pub fn total(&self) -> u64 {
        self.rows.iter().flatten().sum()
    }
}

impl fmt::Display for DelayHistogram {
    /// A table: one line per retry number that has delays, one column per non-empty bucket.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let used: Vec<usize> = (0..COLUMNS)
            .filter(|&c| self.rows.iter().any(|row| row[c] > 0))
            .collect();
        write!(f, "{:>7}", "retry")?;
        for &c in &used {
            write!(f, " {:>8}", bucket_label(c))?;
        }
        writeln!(f)?;
        for (r, row) in self.rows.iter().enumerate() {
            if row.iter().all(|&n| n == 0) {
                continue;
            }
            write!(f, "{:>7}", row_label(r))?;
            for &c in &used {
                write!(f, " {:>8}", row[c])?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl fmt::Debug for RetryStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// The reasons seen, by name.
        struct Stops<'a>(&'a [u64; StopReason::ALL.len()]);
        impl fmt::Debug for Stops<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let seen = StopReason::ALL.iter().zip(self.0).filter(|(_, &n)| n > 0);
                f.debug_map()
                    .entries(seen.map(|(reason, n)| (reason.as_str(), n)))
                    .finish()
            }
        }
        f.debug_struct("RetryStats")
            .field("requests", &self.requests)
            .field("attempts", &self.attempts)
            .field("retries", &self.retries)
            .field("retry_after_seen", &self.retry_after_seen)
            .field("retry_after_clamped", &self.retry_after_clamped)
            .field("retry_after_malformed", &self.retry_after_malformed)
            .field("quota_paused", &self.quota_paused)
            .field("budget_denied", &self.budget_denied)
            .field("budget_granted", &self.budget_granted)
            .field("budget_refunded", &self.budget_refunded)
            .field("rotation_resends", &self.rotation_resends)
            .field("unproven_rotations", &self.unproven_rotations)
            .field("unknown_errors", &self.unknown_errors)
            .field("stops", &Stops(&self.stops))
            .field("delays", &self.delays)
            .finish()
    }
}

/// The label of bucket `column`: `<=` its bound, or `>` the last bound for the open one.
fn bucket_label(column: usize) -> String {
    match DelayHistogram::BUCKETS.get(column) {
        Some(bound) => format!("<={bound:?}"),
        None => format!(">{:?}", DelayHistogram::BUCKETS[COLUMNS - 2]),
    }
}

/// The label of row `row`: its retry number, `9+` for the last.
fn row_label(row: usize) -> String {
    if row + 1 == DelayHistogram::ROWS {
        format!("{}+", row + 1)
    } else {
        (row + 1).to_string()
    }
}

impl fmt::Debug for DelayHistogram {
    /// `{"retry 1": {"<=100ms": 3, ...}, ...}`: the rows and buckets that have counts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Row<'a>(&'a [u64; COLUMNS]);
        impl fmt::Debug for Row<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let used = self.0.iter().enumerate().filter(|(_, &n)| n > 0);
                f.debug_map()
                    .entries(used.map(|(c, n)| (bucket_label(c), n)))
                    .finish()
            }
        }
        let used = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, row)| row.iter().any(|&n| n > 0));
        f.debug_map()
            .entries(used.map(|(r, row)| (format!("retry {}", row_label(r)), Row(row))))
            .finish()
    }
}

fn row_of(retry: u32) -> usize {
    (retry.max(1) as usize - 1).min(DelayHistogram::ROWS - 1)
}

fn column_of(delay: Duration) -> usize {
    DelayHistogram::BUCKETS.partition_point(|bound| *bound < delay)
}

impl Counters {
    /// Counters whose metrics are recorded under `labels`, the layer's.
    pub(crate) fn labelled(labels: telemetry::Labels) -> Self {
        Self {
            counters: Arc::default(),
            labels,
        }
    }

    /// A copy of every counter now.
    pub(crate) fn snapshot(&self) -> RetryStats {
        let c = &*self.counters;
        let stops: [u64; StopReason::ALL.len()] = std::array::from_fn(|i| c.stops[i].load(Relaxed));
        RetryStats {
            requests: stops.iter().sum(),
            attempts: c.attempts.load(Relaxed),
            retries: c.retries.load(Relaxed),
            retry_after_seen: c.retry_after_seen.load(Relaxed),
            retry_after_clamped: c.retry_after_clamped.load(Relaxed),
            retry_after_malformed: c.retry_after_malformed.load(Relaxed),
            quota_paused: c.quota_paused.load(Relaxed),
            budget_denied: c.budget_denied.load(Relaxed),
            budget_granted: c.budget_granted.load(Relaxed),
            budget_refunded: c.budget_refunded.load(Relaxed),
            rotation_resends: c.rotation_resends.load(Relaxed),
            unproven_rotations: c.unproven_rotations.load(Relaxed),
            unknown_errors: c.unknown_errors.load(Relaxed),
            stops,
            delays: DelayHistogram {
                rows: std::array::from_fn(|r| {
                    std::array::from_fn(|b| c.delays[r][b].load(Relaxed))
                }),
            },
        }
    }

    /// Attempt `number` (from 1) is sent; `after` is the source of the wait before it.
    pub(crate) fn attempt(&self, number: u32, after: Option<DelaySource>) {
        self.counters.attempts.fetch_add(1, Relaxed);
        if number > 1 {
            self.counters.retries.fetch_add(1, Relaxed);
        }
        telemetry::attempt(&self.labels, number, after);
    }

    pub(crate) fn stop(&self, reason: StopReason) {
        self.counters.stops[reason.index()].fetch_add(1, Relaxed);
        telemetry::stop(&self.labels, reason);
    }

    pub(crate) fn delay(&self, retry: u32, delay: Duration, source: DelaySource) {
        self.counters.delays[row_of(retry)][column_of(delay)].fetch_add(1, Relaxed);
        telemetry::delay(&self.labels, delay, source);
    }

    pub(crate) fn retry_after_seen(&self) {
        self.counters.retry_after_seen.fetch_add(1, Relaxed);
    }

    pub(crate) fn retry_after_clamped(&self) {
        self.counters.retry_after_clamped.fetch_add(1, Relaxed);
    }

    pub(crate) fn retry_after_malformed(&self) {
        self.counters.retry_after_malformed.fetch_add(1, Relaxed);
    }

    pub(crate) fn quota_paused(&self) {
        self.counters.quota_paused.fetch_add(1, Relaxed);
    }

    pub(crate) fn budget_denied(&self) {
        self.counters.budget_denied.fetch_add(1, Relaxed);
        telemetry::budget_denied(&self.labels);
    }

    pub(crate) fn budget_granted(&self) {
        self.counters.budget_granted.fetch_add(1, Relaxed);
        telemetry::budget_granted(&self.labels);
    }

    pub(crate) fn rotation_resend(&self) {
        self.counters.rotation_resends.fetch_add(1, Relaxed);
    }

    pub(crate) fn unproven_rotation(&self) {
        self.counters.unproven_rotations.fetch_add(1, Relaxed);
    }

    pub(crate) fn unknown_error(&self) {
        self.counters.unknown_errors.fetch_add(1, Relaxed);
    }

    pub(crate) fn budget_refunded(&self) {
        self.counters.budget_refunded.fetch_add(1, Relaxed);
        telemetry::budget_refunded(&self.labels);
    }
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Counters").field(&self.snapshot()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_land_in_their_bucket_and_row() {
        let stats = Counters::default();
        let backoff = DelaySource::Backoff;
        stats.delay(1, Duration::ZERO, backoff);
        stats.delay(1, Duration::from_millis(1), backoff);
        stats.delay(1, Duration::from_micros(1001), backoff);
        stats.delay(2, Duration::from_secs(3600), backoff);
        stats.delay(40, Duration::from_millis(150), backoff);
        let h = stats.snapshot().delays;
        assert_eq!(h.row(1)[0], 2, "0 and 1 ms are both <= 1 ms");
        assert_eq!(h.row(1)[1], 1);
        assert_eq!(h.row(2)[COLUMNS - 1], 1, "an hour is in the open bucket");
        assert_eq!(h.row(9)[7], 1, "retry 40 shares the last row");
        assert_eq!(h.total(), 5);
        let table = h.to_string();
        assert!(table.contains("9+"), "{table}");
    }

    #[test]
    fn debug_names_every_count() {
        let counters = Counters::default();
        counters.attempt(1, None);
        counters.stop(StopReason::BudgetEmpty);
        counters.delay(2, Duration::from_millis(150), DelaySource::Backoff);
        let debug = format!("{:?}", counters.snapshot());
        assert!(debug.contains(r#"stops: {"budget_empty": 1}"#), "{debug}");
        assert!(
            debug.contains(r#"delays: {"retry 2": {"<=200ms": 1}}"#),
            "{debug}"
        );
        assert!(debug.contains("attempts: 1"), "{debug}");
        assert!(!debug.contains("[0, 0"), "no bare arrays: {debug}");
    }
}
